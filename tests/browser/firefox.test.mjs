// The runtime in Firefox (SpiderMonkey, Debian's headless `firefox-esr`): the same package the
// Chromium tests drive, end to end — a model split across Web Workers over HTTP, then from the
// OPFS cache, through postMessage on a plain page and through shared memory on a cross-origin
// isolated one; the relaxed build's own forms; abort, a killed shard worker, a reload; the chat
// page in a frame, driven through its DOM. No driver
// (playwright-core drives only Chromium here): firefox.html runs the steps itself and POSTs each
// result back to the test server.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startHubServer } from './hub-server.mjs';
import { A, FIREFOX, PROMPT_TEXT, fixturesDir, launchFirefox, repoRoot } from './helpers.mjs';

const skip = !existsSync(FIREFOX)
  ? `no ${FIREFOX} (apt-get install firefox-esr)`
  : !existsSync(join(repoRoot, 'www', 'dist', 'clef.js'))
    ? 'www/dist is not built (./build.sh)'
    : false;
const report = (s) => console.log(`# ${s}`);

/**
 * Opens firefox.html?steps=… on a fresh profile against a Hub stand-in and collects the page's
 * reports until it says it is done: {step: result}. `isolated`: the server sends COOP + COEP.
 */
async function runSteps(steps, { isolated = false, extra = {}, timeoutMs = 150000 } = {}) {
  const results = {};
  let finish;
  const done = new Promise((resolve) => (finish = resolve));
  const hub = await startHubServer({
    isolated,
    onReport: (body) => {
      const r = JSON.parse(body);
      if (r.done) finish(r);
      else results[r.step] = r;
    },
  });
  const q = new URLSearchParams({ steps: steps.join(','), text: PROMPT_TEXT, ...extra });
  const url = `${hub.url}/test/firefox.html?${q}`;
  const log = [];
  const firefox = launchFirefox([url], { stdio: ['ignore', 'pipe', 'pipe'] });
  const ff = firefox.process;
  ff.stdout.on('data', (d) => log.push(String(d)));
  ff.stderr.on('data', (d) => log.push(String(d)));
  let timer;
  try {
    const exited = new Promise((_, reject) => ff.on('exit', (code) => reject(new Error(`Firefox exited (${code}) before the page was done:\n${log.join('').slice(-3000)}`))));
    const late = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`no end from the page in ${timeoutMs / 1000} s; results so far ${JSON.stringify(results)}\n${log.join('').slice(-3000)}`)), timeoutMs)));
    const end = await Promise.race([done, exited, late]);
    return { results, userAgent: end.userAgent };
  } finally {
    clearTimeout(timer);
    firefox.close();
    await hub.close();
  }
}

/** A step's result, or the page's error as an assertion message. */
function ok(results, step) {
  const r = results[step];
  assert.ok(r, `${step}: no report`);
  assert.ok(!r.error, `${step}: ${JSON.stringify(r.error)}`);
  return r.ok;
}

/** The `faults` step: an abort, then the same answer; a killed shard fatal; loaded again, the same answer. */
function checkFaults(f, exchange) {
  assert.equal(f.info.exchange, exchange);
  assert.equal(f.abortCode, 'aborted');
  assert.deepEqual(f.afterAbort, A.cases[0].greedy_ids);
  assert.deepEqual(f.crash, { code: 'worker_crashed', fatal: true });
  assert.deepEqual(f.again, A.cases[0].greedy_ids);
}

test('Firefox, plain page (no COOP/COEP): 2 workers over HTTP, 3 from OPFS, the IQ2_M forms give llama.cpp\'s tokens; abort, a killed shard worker and a reload are handled', { skip, timeout: 200000 }, async () => {
  const iq2m = JSON.parse(readFileSync(join(fixturesDir, 'A-IQ2_M.llama.json'), 'utf8')).cases[0];
  const { results, userAgent } = await runSteps(['network2', 'cached3', 'iq2m', 'faults'], { extra: { ids: JSON.stringify(iq2m.prompt_ids) } });
  assert.match(userAgent, /Firefox\//);
  for (const r of Object.values(results)) assert.equal(r.isolated ?? false, false, `${r.step}: a plain page is not isolated`);

  const net = ok(results, 'network2');
  assert.deepEqual(net.info, { workers: 2, exchange: 'message', source: 'network', simd: 'relaxed-simd', pulledByWorkers: false, pulledBytes: 0 });
  assert.deepEqual(net.ids, A.cases[0].greedy_ids);
  const cached = ok(results, 'cached3');
  assert.equal(cached.info.workers, 3);
  assert.equal(cached.info.source, 'cache');
  // Firefox lets one reader at a time hold an OPFS file: every worker reads its own part of the
  // cache all the same, holding its pieces in turns (cache.ts openTurns, load/pull.ts pullTurns).
  assert.equal(cached.info.pulledByWorkers, true, 'every worker read its own part of the cache');
  assert.ok(cached.info.pulledBytes > 0);
  assert.deepEqual(cached.ids, A.cases[0].greedy_ids);

  const iq = ok(results, 'iq2m');
  for (const workers of [1, 2]) {
    assert.equal(iq[workers].info.workers, workers);
    assert.deepEqual(iq[workers].ids, iq2m.greedy_ids, `IQ2_M, ${workers} workers`);
  }

  checkFaults(ok(results, 'faults'), 'message');
  report(`${userAgent}: network ${results.network2.ms} ms, from OPFS with 3 workers ${results.cached3.ms} ms`);
});

test('Firefox: the chat page (in a frame, driven through its DOM) downloads IQ1_S and answers', { skip, timeout: 120000 }, async () => {
  const { results } = await runSteps(['chatPage']);
  const r = ok(results, 'chatPage');
  assert.equal(r.question, PROMPT_TEXT);
  assert.ok(r.body.length > 0, 'an answer');
  assert.match(r.meta, /[\d.]+ tok\/s/);
  assert.match(r.chip, /IQ1_S · ready/);
  report(`chat page in Firefox: ${r.meta}`);
});

test('Firefox: the chat page isolates itself on its first visit (its service worker\'s COOP + COEP, one reload)', { skip, timeout: 90000 }, async () => {
  // Top level, as a visitor opens it: driven over WebDriver BiDi (firefox-bidi.mjs), no page of ours around it.
  const hub = await startHubServer();
  try {
    const url = `${hub.url}/dist/?hub=${encodeURIComponent(hub.url)}&repo=test-org/clef-flash-GGUF`;
    const child = spawn(process.execPath, ['--experimental-websocket', join(repoRoot, 'tests', 'browser', 'firefox-bidi.mjs'), url,
      "navigator.serviceWorker.controller?.state === 'activated'",
      'crossOriginIsolated',
      "({ sab: typeof SharedArrayBuffer, mark: sessionStorage.getItem('clef.isolation-reload'), navigation: performance.getEntriesByType('navigation')[0]?.type })"],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise((r) => child.on('exit', r));
    assert.equal(code, 0, err);
    const [controlled, isolated, after] = JSON.parse(out).map((x) => x.value);
    assert.equal(controlled, true, 'the service worker controls the page');
    assert.equal(isolated, true, 'cross-origin isolated');
    assert.deepEqual(after, { sab: 'function', mark: '1', navigation: 'reload' }, 'through the one reload');
  } finally {
    await hub.close();
  }
});

test('Firefox, cross-origin isolated (COOP + COEP): the stages through shared memory give llama.cpp\'s tokens; abort and a killed shard worker are handled', { skip, timeout: 200000 }, async () => {
  const { results } = await runSteps(['network2', 'faults'], { isolated: true });
  const net = ok(results, 'network2');
  assert.equal(results.network2.isolated, true);
  assert.equal(net.info.exchange, 'shared');
  assert.deepEqual(net.ids, A.cases[0].greedy_ids);
  checkFaults(ok(results, 'faults'), 'shared');
});
