// The download fault matrix, under Node (the same loader code the worker runs: www/dist/clef.js
// in-process, fetch = undici) against hub-server.mjs's fault injection. Each fault either completes
// with the fixture's verified sha256 (and the fixture's greedy tokens), or fails with a precise,
// typed error. Timeouts and delays are tiny (load options), so the whole file runs in seconds.
// The browser's own fetch gets the stall and Retry-After cases in runtime.test.mjs.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { startHubServer } from './hub-server.mjs';
import { A, PROMPT_TEXT, repoRoot } from './helpers.mjs';

const dist = join(repoRoot, 'www', 'dist', 'clef.js');
const skip = existsSync(dist) ? false : 'www/dist is not built (./build.sh)';
const MiB = 1 << 20;
const MODEL = 'test-org/clef-flash-GGUF:F32';
const FILE = 'clef-flash-F32.gguf';
/** Fast failure detection for the tests (the defaults are 30 s). */
const FAST = { chunkSize: MiB, retryDelayMs: 10, timeoutMs: 400, idleTimeoutMs: 400 };
const report = (s) => console.log(`# ${s}`);

/**
 * Loads MODEL with `faults` set on a fresh server: {engine?, error?, progress[], warnings[], hub, f, ms}.
 * The caller closes `hub` and unloads `engine` (see `withLoad`).
 */
async function loadWith(faults, options = {}, model = MODEL) {
  const { ClefEngine } = await import(dist);
  const hub = await startHubServer(options.server);
  Object.assign(hub.faults, faults);
  const f = hub.files.get('test-org/clef-flash-GGUF').get(FILE);
  const progress = [];
  const warnings = [];
  const t = Date.now();
  const out = { hub, f, progress, warnings };
  try {
    out.engine = await ClefEngine.load(model, {
      hubUrl: hub.url, ...FAST, ...options, server: undefined,
      onProgress: (p) => progress.push(p), onWarning: (w) => warnings.push(w),
    });
  } catch (e) {
    out.error = e;
  }
  out.ms = Date.now() - t;
  return out;
}

async function withLoad(faults, options, check, model) {
  const r = await loadWith(faults, options, model);
  try {
    await check(r);
  } finally {
    await r.engine?.unload();
    await r.hub.close();
  }
}

/** The load completed, verified, and generates the fixture's greedy tokens. */
async function expectVerified(r) {
  assert.equal(r.error, undefined, `load failed: ${r.error?.code}: ${r.error?.message}`);
  assert.equal(r.engine.info.verified, true);
  assert.equal(r.engine.info.sha256, r.f.sha256);
  const c = await r.engine.chat.completions.create({ messages: [{ role: 'user', content: PROMPT_TEXT }], max_tokens: 16, temperature: 0, return_token_ids: true });
  assert.deepEqual(c.choices[0].token_ids, A.cases[0].greedy_ids);
}

/** No byte was delivered twice by completed responses (the bytes they sent never overlap). */
function expectNoCompleteRefetch(hub) {
  const done = hub.log.filter((e) => e.path.startsWith('/cdn/') && e.complete && e.sent > 0).sort((x, y) => x.start - y.start);
  for (let i = 1; i < done.length; i++) {
    assert.ok(done[i].start >= done[i - 1].start + done[i - 1].sent, `fetched twice: ${JSON.stringify(done[i - 1])} / ${JSON.stringify(done[i])}`);
  }
}

const retries = (r) => r.progress.filter((p) => p.retry);
const dataLog = (hub) => hub.log.filter((e) => e.path.startsWith('/cdn/'));

test('a stalled body is aborted after idleTimeoutMs and resumed from the last byte received', { skip }, async () => {
  const at = 5 * MiB + 123_457;
  await withLoad({ stallAt: [at] }, {}, async (r) => {
    await expectVerified(r);
    const log = dataLog(r.hub);
    const stalled = log.find((e) => e.stalled);
    assert.ok(stalled, 'the stall happened');
    assert.equal(stalled.sent, at - stalled.start, 'bytes before the stall were sent');
    assert.ok(log.some((e) => e.start === at && e.complete), `a request resumed at ${at}: ${JSON.stringify(log.map((e) => [e.start, e.end]))}`);
    assert.ok(r.engine.info.stats.retries >= 1);
    assert.ok(retries(r).some((p) => /no data for 400 ms/.test(p.retry.reason)), JSON.stringify(retries(r)[0]));
    expectNoCompleteRefetch(r.hub);
    report(`stalled body at ${at}: aborted after 400 ms of silence, resumed there; load ${r.ms} ms`);
  });
});

test('response headers that never come are timed out and retried', { skip }, async () => {
  await withLoad({ stallHeaders: 2 }, {}, async (r) => {
    await expectVerified(r);
    assert.equal(r.hub.log.filter((e) => e.stalled).length, 2);
    assert.ok(retries(r).some((p) => /no response within 400 ms/.test(p.retry.reason)));
    expectNoCompleteRefetch(r.hub);
  });
});

test('429 with Retry-After in seconds: the retry waits that long, and progress says "retrying in N s"', { skip }, async () => {
  await withLoad({ statuses: [{ status: 429, retryAfter: 1 }] }, {}, async (r) => {
    await expectVerified(r);
    const log = dataLog(r.hub);
    const i = log.findIndex((e) => e.status === 429);
    assert.ok(i >= 0);
    // Every request after the 429 that started the same chunk came ≥ 1 s later.
    const next = log.slice(i + 1).find((e) => e.status !== 429 && e.t >= log[i].t);
    assert.ok(next.t - log[i].t >= 950, `retried after ${next.t - log[i].t} ms`);
    const w = retries(r);
    assert.ok(w.length >= 1);
    assert.equal(w[0].retry.inSeconds, 1);
    assert.match(w[0].retry.reason, /HTTP 429/);
    assert.equal(w[0].retry.attempt, 1);
    assert.ok(r.progress.some((p, k) => k > r.progress.indexOf(w[0]) && !p.retry), 'the retry notice clears');
  });
});

test('503 with Retry-After as an HTTP-date is honoured; a Retry-After beyond maxRetryAfterMs is capped', { skip }, async () => {
  const date = new Date(Date.now() + 2000).toUTCString();
  await withLoad({ statuses: [{ status: 503, retryAfter: date, where: 'resolve' }] }, {}, async (r) => {
    await expectVerified(r);
    const first = r.hub.log.find((e) => e.status === 503);
    const after = r.hub.log.find((e) => e.t > first.t && e.status !== 503);
    assert.ok(after.t - first.t >= 900, `waited ${after.t - first.t} ms for a date ~2 s ahead`);
  });
  await withLoad({ statuses: [{ status: 503, retryAfter: 3600 }] }, { maxRetryAfterMs: 300 }, async (r) => {
    await expectVerified(r);
    assert.ok(r.ms < 20_000, `took ${r.ms} ms`);
    const w = retries(r)[0];
    assert.equal(w.retry.inSeconds, 1, '300 ms, not an hour');
  });
});

test('a failing server: the load gives up after maxRetries, or when the retry budget is spent, with a network error', { skip }, async () => {
  await withLoad({ statuses: [{ status: 500, times: 1000 }] }, { maxRetries: 2 }, async (r) => {
    assert.equal(r.error?.code, 'network');
    assert.match(r.error.message, /failed after 2 retries: .*HTTP 500/);
    assert.equal(r.hub.log.filter((e) => e.status === 500).length, 3);
  });
  await withLoad({ statuses: [{ status: 503, times: 1000 }] }, { maxRetries: 1000, retryBudgetMs: 500 }, async (r) => {
    assert.equal(r.error?.code, 'network');
    assert.match(r.error.message, /retry budget is 1 s|retry budget is 0 s/);
    assert.ok(r.ms < 5000, `${r.ms} ms`);
  });
});

test('a redirect loop fails at once, named as such; 404 and 403 are not_found', { skip }, async () => {
  await withLoad({ redirectLoop: true }, {}, async (r) => {
    assert.equal(r.error?.code, 'network');
    assert.match(r.error.message, /redirect loop/);
  });
  await withLoad({}, {}, async (r) => {
    assert.equal(r.error?.code, 'not_found');
    assert.match(r.error.message, /HTTP 404/);
  }, 'test-org/clef-flash-GGUF:Q9_9');
  await withLoad({ statuses: [{ status: 403 }] }, {}, async (r) => {
    assert.equal(r.error?.code, 'not_found');
    assert.match(r.error.message, /HTTP 403.*gated or private/);
  });
});

test('wrong Content-Length (short and long) and a truncated body are resumed; the file verifies', { skip }, async () => {
  await withLoad({ lengthDelta: [0, -1000, 5000, -300_000] }, {}, async (r) => {
    await expectVerified(r);
    assert.ok(r.engine.info.stats.retries >= 2, `retries ${r.engine.info.stats.retries}`);
    expectNoCompleteRefetch(r.hub);
  });
});

test('200 for a Range request: once is retried; a server that never honours Range is a clear network error', { skip }, async () => {
  await withLoad({ ignoreRange: 1 }, {}, async (r) => {
    await expectVerified(r);
  });
  await withLoad({ ignoreRange: 1000 }, {}, async (r) => {
    assert.equal(r.error?.code, 'network');
    assert.match(r.error.message, /does not support HTTP Range requests/);
  });
});

test('an unreachable host (DNS failure) is a network error, quickly', { skip }, async () => {
  const { ClefEngine } = await import(dist);
  const t = Date.now();
  const e = await ClefEngine.load(MODEL, { hubUrl: 'http://clef-test.invalid', ...FAST, maxRetries: 1 }).catch((x) => x);
  assert.equal(e.code, 'network', e.message);
  assert.match(e.message, /clef-test\.invalid/);
  assert.ok(Date.now() - t < 10_000);
});

test('an abort during a stall ends the load at once with aborted', { skip }, async () => {
  const { ClefEngine } = await import(dist);
  const hub = await startHubServer();
  hub.faults.stallAt = [3 * MiB];
  const ac = new AbortController();
  try {
    const t = Date.now();
    setTimeout(() => ac.abort(), 300);
    const e = await ClefEngine.load(MODEL, { hubUrl: hub.url, chunkSize: MiB, idleTimeoutMs: 60_000, signal: ac.signal }).catch((x) => x);
    assert.equal(e.code, 'aborted');
    assert.ok(Date.now() - t < 3000);
  } finally {
    await hub.close();
  }
});

test('an empty file and a text file named .gguf are bad_gguf (URL, Blob and path), with messages that say so', { skip }, async () => {
  const { ClefEngine } = await import(dist);
  const text = Buffer.from('This is a text file, not a model.\n'.repeat(20));
  const hub = await startHubServer({
    repos: { 'test-org/bad-GGUF': { 'bad-EMPTY.gguf': { header: Buffer.alloc(0), size: 0 }, 'bad-TEXT.gguf': { header: text, size: text.length } } },
  });
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(join(tmpdir(), 'clef-bad-'));
  try {
    const cases = {
      'url empty': () => ClefEngine.load('test-org/bad-GGUF:EMPTY', { hubUrl: hub.url, ...FAST }),
      'url text': () => ClefEngine.load('test-org/bad-GGUF:TEXT', { hubUrl: hub.url, ...FAST }),
      'blob empty': () => ClefEngine.load(new File([], 'empty.gguf')),
      'blob text': () => ClefEngine.load(new File([text], 'notes.gguf')),
      'path empty': () => (writeFileSync(join(dir, 'e.gguf'), ''), ClefEngine.load(join(dir, 'e.gguf'))),
      'path text': () => (writeFileSync(join(dir, 't.gguf'), text), ClefEngine.load(join(dir, 't.gguf'))),
    };
    for (const [name, f] of Object.entries(cases)) {
      const e = await f().then((x) => (x.unload(), null), (x) => x);
      assert.equal(e?.code, 'bad_gguf', `${name}: ${e?.code}: ${e?.message}`);
      assert.match(e.message, name.endsWith('empty') ? /is empty \(0 bytes\): not a GGUF file/ : /is not a GGUF file \(it begins with the text "This is a text f"/, name);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await hub.close();
  }
});
