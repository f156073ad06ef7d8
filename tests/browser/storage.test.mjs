// Storage faults in headless Chromium (playwright-core + Debian's chromium) against hub-server.mjs:
// storage full mid-download (a quota forced through the Chrome DevTools Protocol) and before it
// (an estimate under the model's size), no OPFS (a private window), the cache deleted while a load
// uses it, and two tabs loading the same model. In each the model loads and answers the fixture's
// greedy tokens, `info.cache` says what became of the cache, and the cache stays consistent: a later
// load trusts only what was really stored. Measurements are printed as `# …` lines.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startHubServer } from './hub-server.mjs';
import { A, PROMPT_TEXT, launch, open, repoRoot, skipReason } from './helpers.mjs';

const skip = skipReason();
const MODEL = 'test-org/clef-flash-GGUF:F32';
const MiB = 1 << 20;
/** Bytes the cache's freshness probe reads (load/cached.ts PROBE_BYTES). */
const PROBE = 64 * 1024;
const report = (s) => console.log(`# ${s}`);
const mb = (n) => `${(n / 1e6).toFixed(2)} MB`;
const fileOf = (hub) => hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');

/**
 * Starts a load of MODEL in the page (window.run): progress, warnings, then info or error.
 * `opts` go to ClefEngine.load; window.onLoadProgress(p), if set, sees every progress event.
 */
async function startLoad(page, hub, opts = {}) {
  await page.evaluate(({ hub, model, opts }) => {
    const run = { progress: [], warnings: [], done: false };
    window.run = run;
    run.promise = ClefEngine.load(model, {
      hubUrl: hub, ...opts,
      onProgress: (p) => {
        run.progress.push(p);
        window.onLoadProgress?.(p);
      },
      onWarning: (m) => run.warnings.push(m),
    }).then(
      (e) => {
        window.engine = e;
        run.info = e.info;
      },
      (e) => {
        run.error = { code: e.code, message: e.message };
      },
    ).finally(() => {
      run.done = true;
    });
  }, { hub, model: MODEL, opts });
}

/** Waits for the load started by `startLoad`: {info?, error?, progress, warnings}. */
async function finishLoad(page) {
  await page.waitForFunction(() => window.run.done, null, { timeout: 90000 });
  return page.evaluate(() => ({ info: window.run.info, error: window.run.error, progress: window.run.progress, warnings: window.run.warnings }));
}

const load = async (page, hub, opts) => {
  await startLoad(page, hub, opts);
  return finishLoad(page);
};

/** The load succeeded, verified, and greedy decoding gives llama.cpp's tokens. */
async function expectFixture(page, r, f) {
  assert.equal(r.error, undefined, `load failed: ${r.error?.code}: ${r.error?.message}`);
  assert.equal(r.info.verified, true);
  assert.equal(r.info.sha256, f.sha256);
  const ids = await page.evaluate(async (text) => {
    const c = await window.engine.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 16, temperature: 0, return_token_ids: true });
    return c.choices[0].token_ids;
  }, PROMPT_TEXT);
  assert.deepEqual(ids, A.cases[0].greedy_ids, 'greedy ids = llama.cpp');
}

const unload = (page) => page.evaluate(() => window.engine?.unload());
const list = (page) => page.evaluate(() => ClefEngine.cache.list());
const noDamage = (r) => assert.ok(!r.warnings.some((w) => /damaged|mismatch/.test(w)), `the cache held only good chunks:\n${r.warnings.join('\n')}`);

test('storage full mid-download: the model loads, the cache keeps exactly what was stored, and a later load resumes from it', { skip, timeout: 180000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const f = fileOf(hub);
    const origin = new URL(hub.url).origin;
    const cdp = await b.ctx.newCDPSession(b.page);
    // At 4 MiB loaded the origin's quota drops below what it already uses: the later writes fail
    // (Chromium enforces it a few MB late, and returns its NO_SPACE error code as the byte count of
    // a sync handle's write).
    await b.page.exposeFunction('fillStorage', () => cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: 2 * MiB }));
    await b.page.evaluate(() => {
      window.onLoadProgress = (p) => {
        if (p.phase === 'download' && p.loaded > 4 * 1024 * 1024 && !window.filled) window.filled = window.fillStorage();
      };
    });
    hub.faults.delayMs = 20;
    const r = await load(b.page, hub.url, { chunkSize: MiB, concurrency: 2 });
    hub.faults.delayMs = 0;
    await expectFixture(b.page, r, f);
    assert.equal(r.info.cache, 'quota');
    assert.ok(r.warnings.some((w) => /could not cache .*not enough storage/.test(w)), r.warnings.join('\n'));
    await unload(b.page);
    const [partial] = await list(b.page);
    assert.equal(partial.complete, false, 'not believed complete');
    assert.equal(partial.verified, false);
    assert.ok(partial.cachedBytes >= 2 * MiB && partial.cachedBytes < f.size - 4 * MiB, `cached ${partial.cachedBytes} of ${f.size}`);

    // Storage back: the next load reads every recorded chunk intact and fetches only the rest.
    await cdp.send('Storage.overrideQuotaForOrigin', { origin });
    await open(b.page, hub.url + '/test/page.html');
    hub.clearLog();
    const r2 = await load(b.page, hub.url, { chunkSize: MiB });
    await expectFixture(b.page, r2, f);
    noDamage(r2);
    assert.equal(r2.info.source, 'network+cache');
    assert.equal(r2.info.cache, 'stored');
    const header = partial.cachedBytes - r2.info.stats.cachedBytes; // list() counts the header, stats the data section
    assert.ok(header > 0 && header < MiB, `every stored chunk was used (${r2.info.stats.cachedBytes} of ${partial.cachedBytes})`);
    const served = hub.bytesServed();
    assert.ok(served <= f.size - partial.cachedBytes + PROBE + MiB, `served ${served} with ${partial.cachedBytes} cached`);
    const [whole] = await list(b.page);
    assert.equal(whole.complete, true);
    assert.equal(whole.verified, true);
    report(`quota lowered at 4 MiB loaded: ${mb(partial.cachedBytes)} of ${mb(f.size)} stored and kept; the next load fetched ${mb(served)}`);
  } finally {
    await b.close();
    await hub.close();
  }
});

/** A browser whose engine worker (and page) have a storage fault (storage-faults.js). */
async function launchWithFault(hub, fault) {
  const b = await launch(null);
  const script = readFileSync(join(repoRoot, 'tests', 'browser', 'storage-faults.js'), 'utf8');
  await b.ctx.addInitScript({ content: `self.__clefStorageFault = ${JSON.stringify(fault)};\n${script}` });
  await open(b.page, hub.url + '/test/page.html');
  return { ...b, workerUrl: `${hub.url}/test/storage-worker.js?fault=${fault}` };
}

test('storage too small for the model (estimate): loads without caching, says so, leaves no cache entry', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launchWithFault(hub, 'small-quota');
  try {
    const f = fileOf(hub);
    const r = await load(b.page, hub.url, { chunkSize: MiB, workerUrl: b.workerUrl });
    await expectFixture(b.page, r, f);
    assert.equal(r.info.cache, 'quota');
    assert.ok(r.warnings.some((w) => /could not cache .*not enough storage to cache the model \(\d+\.\d+ GB more needed\)/.test(w)), r.warnings.join('\n'));
    assert.deepEqual(await list(b.page), [], 'no half-made cache entry');
  } finally {
    await b.close();
    await hub.close();
  }
});

test('no OPFS (a private window): loads without caching and says so; the cache API answers empty', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launchWithFault(hub, 'no-opfs');
  try {
    const f = fileOf(hub);
    const r = await load(b.page, hub.url, { chunkSize: MiB, workerUrl: b.workerUrl });
    await expectFixture(b.page, r, f);
    assert.equal(r.info.cache, 'unavailable');
    assert.equal(r.info.source, 'network');
    assert.ok(r.warnings.some((w) => /not caching .*Origin Private File System unavailable/.test(w)), r.warnings.join('\n'));
    const api = await b.page.evaluate(async () => {
      const out = { list: await ClefEngine.cache.list() };
      out.deleted = await ClefEngine.cache.delete('test-org/clef-flash-GGUF:F32');
      await ClefEngine.cache.clear();
      return out;
    });
    assert.deepEqual(api, { list: [], deleted: false });
  } finally {
    await b.close();
    await hub.close();
  }
});

test('the cache deleted while a load uses it: a typed `cache` error, the load completes, a later load works', { skip, timeout: 180000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const f = fileOf(hub);
    // Mid-download: ClefEngine.cache.delete, ClefEngine.cache.clear, and the directory removed with the raw OPFS API.
    await b.page.evaluate((hub) => {
      const code = (p) => p.then(() => 'no error', (e) => `${e instanceof DOMException ? e.name : e.code}: ${e.message}`);
      window.onLoadProgress = (p) => {
        if (p.phase !== 'download' || p.loaded < 6 * 1024 * 1024 || window.attempts) return;
        window.attempts = (async () => ({
          delete: await code(ClefEngine.cache.delete('test-org/clef-flash-GGUF:F32', { hubUrl: hub })),
          clear: await code(ClefEngine.cache.clear()),
          raw: await code(navigator.storage.getDirectory().then((root) => root.removeEntry('clef-cache', { recursive: true }))),
        }))();
      };
    }, hub.url);
    hub.faults.delayMs = 30; // the load outlasts the three attempts
    const r = await load(b.page, hub.url, { chunkSize: MiB, concurrency: 2 });
    hub.faults.delayMs = 0;
    const attempts = await b.page.evaluate(() => window.attempts);
    report(`deleting during the load: ${JSON.stringify(attempts)}`);
    assert.match(attempts.delete, /^cache: the cached model '.*' is in use: it is being loaded/);
    assert.match(attempts.clear, /^cache: kept '.*': in use by a load/);
    assert.match(attempts.raw, /^NoModificationAllowedError/, 'the open cache files cannot be removed under the load');
    await expectFixture(b.page, r, f);
    assert.equal(r.info.cache, 'stored');
    await unload(b.page);

    // Nothing was lost: the next load comes from the cache alone.
    await open(b.page, hub.url + '/test/page.html');
    hub.clearLog();
    const r2 = await load(b.page, hub.url, { chunkSize: MiB });
    await expectFixture(b.page, r2, f);
    assert.equal(r2.info.source, 'cache');
    noDamage(r2);
    await unload(b.page);

    // Once unloaded, delete works; the next load downloads again and caches again.
    const deleted = await b.page.evaluate((hub) => ClefEngine.cache.delete('test-org/clef-flash-GGUF:F32', { hubUrl: hub }), hub.url);
    assert.equal(deleted, true);
    assert.deepEqual(await list(b.page), []);
    await open(b.page, hub.url + '/test/page.html');
    const r3 = await load(b.page, hub.url, { chunkSize: MiB });
    await expectFixture(b.page, r3, f);
    assert.equal(r3.info.source, 'network');
    assert.equal(r3.info.cache, 'stored');
  } finally {
    await b.close();
    await hub.close();
  }
});

test('two tabs load the same model: the second waits for the first (Web Lock) and loads from the cache; the file is downloaded once', { skip, timeout: 180000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const f = fileOf(hub);
    const tab2 = await b.ctx.newPage();
    await open(tab2, hub.url + '/test/page.html');
    hub.faults.delayMs = 5;
    await startLoad(b.page, hub.url, { chunkSize: MiB, concurrency: 2 });
    await b.page.waitForFunction(() => window.run.progress.some((p) => p.phase === 'download' && p.loaded > 2 * 1024 * 1024));
    await startLoad(tab2, hub.url, { chunkSize: MiB, concurrency: 2 });
    const [r1, r2] = [await finishLoad(b.page), await finishLoad(tab2)];
    hub.faults.delayMs = 0;
    await expectFixture(b.page, r1, f);
    await expectFixture(tab2, r2, f);
    const waiting = r2.progress.filter((p) => p.phase === 'waiting');
    assert.ok(waiting.length > 1 && waiting.some((p) => p.total === f.size && p.loaded > 2 * MiB), 'tab 2 showed tab 1\'s progress while waiting');
    assert.equal(r1.info.source, 'network');
    assert.equal(r2.info.source, 'cache');
    const served = hub.bytesServed();
    assert.ok(served <= f.size + PROBE, `served ${served} for a ${f.size}-byte file`);
    report(`two tabs: ${mb(served)} served for a ${mb(f.size)} file; tab 2 saw ${waiting.length} 'waiting' events`);
    await unload(b.page);
    await unload(tab2);

    // The first tab closed mid-download: the second resumes from what it stored.
    await b.page.evaluate(() => ClefEngine.cache.clear());
    await open(b.page, hub.url + '/test/page.html');
    await open(tab2, hub.url + '/test/page.html');
    hub.clearLog();
    hub.faults.delayMs = 5;
    await startLoad(b.page, hub.url, { chunkSize: MiB, concurrency: 1 });
    await b.page.waitForFunction(() => window.run.progress.some((p) => p.phase === 'download' && p.loaded > 10 * 1024 * 1024));
    await startLoad(tab2, hub.url, { chunkSize: MiB, concurrency: 2 });
    await tab2.waitForFunction(() => window.run.progress.some((p) => p.phase === 'waiting'));
    await b.page.close();
    const r3 = await finishLoad(tab2);
    hub.faults.delayMs = 0;
    await expectFixture(tab2, r3, f);
    noDamage(r3);
    assert.equal(r3.info.source, 'network+cache');
    assert.ok(r3.info.stats.cachedBytes >= 8 * MiB, `resumed from ${r3.info.stats.cachedBytes} cached bytes`);
    const served2 = hub.bytesServed();
    assert.ok(served2 <= f.size + PROBE + 2 * MiB, `served ${served2} for a ${f.size}-byte file`);
    report(`first tab closed mid-download: the second resumed from ${mb(r3.info.stats.cachedBytes)}; ${mb(served2)} served in all`);
  } finally {
    await b.close();
    await hub.close();
  }
});
