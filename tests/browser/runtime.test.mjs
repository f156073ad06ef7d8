// The browser runtime end to end in headless Chromium (playwright-core + Debian's chromium), against
// hub-server.mjs serving the qwen35-tiny fixtures as the Hub repository test-org/clef-flash-GGUF.
// Each test gets a fresh browser profile (its own OPFS). Measurements are printed as `# …` lines.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startHubServer } from './hub-server.mjs';
import { A, PROMPT_TEXT, flipCachedByte, heapSampler, hugeGguf, launch, open, realVocabGguf, rng, skipReason } from './helpers.mjs';

const skip = skipReason();
const MODEL = 'test-org/clef-flash-GGUF:F32';
const MiB = 1 << 20;
const report = (s) => console.log(`# ${s}`);
const mb = (n) => `${(n / 1e6).toFixed(2)} MB`;

/** Loads MODEL in the page; returns {info, phases, ms}. `opts` is passed to ClefEngine.load (JSON). */
async function load(page, hub, opts = {}) {
  return page.evaluate(
    async ({ hub, model, opts }) => {
      const phases = [];
      const warnings = [];
      const t = performance.now();
      window.engine = await ClefEngine.load(model, {
        hubUrl: hub, ...opts,
        onProgress: (p) => phases.push(p.phase),
        onWarning: (m) => warnings.push(m),
      });
      return { info: window.engine.info, phases: [...new Set(phases)], warnings, ms: performance.now() - t };
    },
    { hub, model: opts.model ?? MODEL, opts: { ...opts, model: undefined } },
  );
}

/** Greedy chat completion of the fixture prompt: {prompt, ids, usage}. */
async function greedy(page, n = 16) {
  return page.evaluate(async ({ text, n }) => {
    const r = await window.engine.chat.completions.create({
      messages: [{ role: 'user', content: text }], max_tokens: n, temperature: 0, return_token_ids: true,
    });
    return { prompt: r.prompt_token_ids, ids: r.choices[0].token_ids, usage: r.usage, finish: r.choices[0].finish_reason, content: r.choices[0].message.content };
  }, { text: PROMPT_TEXT, n });
}

const expectFixture = (r) => {
  assert.deepEqual(r.prompt, A.cases[0].prompt_ids, 'prompt ids (chat template + tokenizer)');
  assert.deepEqual(r.ids, A.cases[0].greedy_ids, 'greedy ids = llama.cpp');
};

test('load repo:QUANT from the Hub, greedy = llama.cpp; offline reload loads from OPFS with the same tokens; no COOP/COEP', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const headers = b.response.headers();
    assert.equal(headers['cross-origin-opener-policy'], undefined);
    assert.equal(headers['cross-origin-embedder-policy'], undefined);
    assert.equal(await b.page.evaluate(() => crossOriginIsolated), false);

    const sampler = await heapSampler(b.ctx, b.page);
    const r = await load(b.page, hub.url, { chunkSize: MiB });
    const heap = await sampler.stop();
    const f = hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');
    assert.equal(r.info.source, 'network');
    assert.equal(r.info.verified, true);
    assert.equal(r.info.sha256, f.sha256);
    assert.equal(r.info.fileSize, f.size);
    for (const p of ['header', 'download', 'ready']) assert.ok(r.phases.includes(p), `phase ${p} in ${r.phases}`);
    // Every byte once: one request per chunk, nothing twice.
    assert.equal(hub.bytesServed(), f.size);
    report(`download from the local server: ${mb(r.info.stats.downloadBytesPerSecond)}/s (${mb(f.size)} in ${r.ms.toFixed(0)} ms, chunks of 1 MiB, 3 in flight)`);
    const wasm = r.info.stats.wasmMemoryBytes;
    // Chromium validates relaxed SIMD, so the worker picked the relaxed build (www/src/simd.ts).
    assert.equal(r.info.stats.simd, 'relaxed-simd');
    report(`peak JS heap of the worker during the load: ${mb(heap.peakUsed)} V8 heap; ArrayBuffer backing stores ${mb(heap.peakBacking)} ` +
      `of which wasm memory ${mb(wasm)} (${heap.samples} samples); model ${mb(f.size)}`);
    assert.ok(heap.samples > 0, 'heap sampled');
    assert.ok(heap.peakUsed < f.size / 4, `peak JS heap ${heap.peakUsed} far below the model size ${f.size}`);
    // Outside wasm memory, no copy of the file: at most a few chunks' buffers.
    assert.ok(heap.peakBacking < wasm + f.size / 4, `backing stores ${heap.peakBacking} vs wasm memory ${wasm}`);

    expectFixture(await greedy(b.page));
    // The other two fixture prompts, as token ids through the completions API.
    const more = await b.page.evaluate(async (cases) => {
      const out = [];
      for (const c of cases) {
        const r = await window.engine.completions.create({ prompt: c.prompt_ids, max_tokens: 16, temperature: 0, return_token_ids: true });
        out.push(r.choices[0].token_ids);
      }
      return out;
    }, A.cases.slice(1));
    assert.deepEqual(more, A.cases.slice(1).map((c) => c.greedy_ids));
    // Streaming gives the same tokens, and usage on the last chunk.
    const streamed = await b.page.evaluate(async (text) => {
      const s = await window.engine.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 16, temperature: 0, stream: true, return_token_ids: true });
      const ids = [];
      let usage = null;
      let finish = null;
      let textOut = '';
      for await (const c of s) {
        ids.push(...(c.choices[0].delta.token_ids ?? []));
        textOut += c.choices[0].delta.content ?? '';
        if (c.usage) usage = c.usage;
        if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
      }
      return { ids, usage, finish, text: textOut };
    }, PROMPT_TEXT);
    assert.deepEqual(streamed.ids, A.cases[0].greedy_ids);
    assert.equal(streamed.finish, 'length');
    assert.equal(streamed.usage.completion_tokens, 16);
    assert.ok(streamed.usage.completion_tokens_per_second > 0 && streamed.usage.prompt_ms >= 0);

    const listed = await b.page.evaluate(() => ClefEngine.cache.list());
    assert.equal(listed.length, 1);
    assert.equal(listed[0].complete, true);
    assert.equal(listed[0].verified, true);
    assert.equal(listed[0].cachedBytes, f.size);

    // The server goes offline; reload the page: the model comes from OPFS.
    hub.faults.offline = true;
    hub.clearLog();
    await b.page.evaluate(() => window.engine.unload());
    await open(b.page, hub.url + '/test/page.html');
    const r2 = await load(b.page, hub.url, { chunkSize: MiB });
    assert.equal(r2.info.source, 'cache');
    assert.equal(r2.info.verified, true);
    assert.ok(r2.phases.includes('cache'), `phases ${r2.phases}`);
    assert.equal(hub.log.length, 0, 'nothing served while offline');
    expectFixture(await greedy(b.page));
    report(`OPFS load: ${mb(r2.info.stats.cacheBytesPerSecond)}/s read + checksum (${mb(f.size)} in ${r2.ms.toFixed(0)} ms including the wasm start)`);

    // Back online: the cached copy is still current (one small probe request, no data).
    hub.faults.offline = false;
    await b.page.evaluate(() => window.engine.unload());
    await open(b.page, hub.url + '/test/page.html');
    const r3 = await load(b.page, hub.url, { chunkSize: MiB });
    assert.equal(r3.info.source, 'cache');
    assert.ok(hub.bytesServed() <= 64 * 1024, `only the freshness probe was served (${hub.bytesServed()})`);

    // Deleting it by the name it was loaded with.
    await b.page.evaluate(() => window.engine.unload());
    const del = await b.page.evaluate(async (hub) => [await ClefEngine.cache.delete('test-org/clef-flash-GGUF:F32', { hubUrl: hub }), await ClefEngine.cache.list()], hub.url);
    assert.deepEqual(del, [true, []]);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('dropped connections at random offsets: the load completes, no completed chunk is fetched twice, sha256 matches', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const f = hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');
    const rand = rng(42);
    const kills = Array.from({ length: 8 }, () => 300000 + Math.floor(rand() * (f.size - 400000)));
    hub.faults.killAt = [...kills];
    const r = await load(b.page, hub.url, { chunkSize: MiB, retryDelayMs: 20, cache: false });
    assert.equal(hub.faults.killAt.length, 0, 'every kill fired');
    assert.equal(r.info.verified, true);
    assert.equal(r.info.sha256, f.sha256);
    assert.ok(r.info.stats.retries >= kills.length, `retries ${r.info.stats.retries}`);
    const data = hub.log.filter((e) => e.path.startsWith('/cdn/'));
    assert.equal(data.filter((e) => e.killed).length, kills.length);
    // Completed responses never overlap: no byte (so no chunk) was delivered completely twice.
    const done = data.filter((e) => e.complete).sort((x, y) => x.start - y.start);
    for (let i = 1; i < done.length; i++) assert.ok(done[i].start >= done[i - 1].end, `overlap ${JSON.stringify(done[i - 1])} / ${JSON.stringify(done[i])}`);
    // Resumed requests start where the dropped one stopped (not at the chunk start).
    const resumed = data.filter((e) => e.start % MiB !== 0 && e.start > 1 * MiB);
    assert.ok(resumed.length >= 1, 'some requests resumed mid-chunk');
    const overshoot = hub.bytesServed() - f.size;
    report(`${kills.length} dropped connections: ${r.info.stats.retries} retries, ${resumed.length} resumed mid-chunk, ${overshoot} bytes sent twice (in flight when dropped)`);
    assert.ok(overshoot < kills.length * 512 * 1024, `re-sent bytes ${overshoot}`);
    expectFixture(await greedy(b.page));
  } finally {
    await b.close();
    await hub.close();
  }
});

test('Chromium\'s fetch: a stalled body and stalled headers are timed out and resumed; Retry-After is honoured; a redirect loop is named', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const f = hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');
    const at = 7 * MiB + 4321;
    hub.faults.stallAt = [at];
    hub.faults.stallHeaders = 1;
    hub.faults.statuses = [{ status: 429, retryAfter: 1 }];
    const t = Date.now();
    const r = await b.page.evaluate(async (hub) => {
      const retries = [];
      window.engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', {
        hubUrl: hub, chunkSize: 1 << 20, cache: false, retryDelayMs: 10, timeoutMs: 500, idleTimeoutMs: 500,
        onProgress: (p) => { if (p.retry) retries.push(p.retry); },
      });
      return { info: window.engine.info, retries };
    }, hub.url);
    assert.equal(r.info.verified, true);
    assert.equal(r.info.sha256, f.sha256);
    const data = hub.log.filter((e) => e.path.startsWith('/cdn/'));
    assert.ok(data.some((e) => e.stalled && e.sent > 0), 'the body stalled');
    assert.ok(data.some((e) => e.start === at && e.complete), 'resumed at the stall offset');
    assert.ok(r.retries.some((x) => /no data for 500 ms/.test(x.reason)), JSON.stringify(r.retries));
    assert.ok(r.retries.some((x) => /no response within 500 ms/.test(x.reason)), JSON.stringify(r.retries));
    const i = data.findIndex((e) => e.status === 429);
    assert.ok(data.slice(i + 1).every((e) => e.t - data[i].t >= 950 || e.t < data[i].t || e.start !== data[i].start), 'nothing retried the 429 before Retry-After');
    assert.ok(r.retries.some((x) => /HTTP 429/.test(x.reason) && x.inSeconds === 1));
    report(`Chromium: stalled body + stalled headers + 429 (Retry-After 1 s): verified load in ${Date.now() - t} ms, ${r.info.stats.retries} retries`);
    expectFixture(await greedy(b.page));
    await b.page.evaluate(() => window.engine.unload());

    hub.faults.redirectLoop = true;
    const e = await b.page.evaluate(async (hub) => ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, cache: false, retryDelayMs: 10, maxRetries: 1 }).then(() => 'loaded', (e) => `${e.code}: ${e.message}`), hub.url);
    assert.match(e, /^network: .*redirect loop/);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('a byte corrupted in transit is caught by sha256 and re-fetched; a corrupt OPFS chunk is re-fetched alone; an interrupted download resumes', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const f = hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');
    const flip = 5 * MiB + 12345;
    hub.faults.flipAt = [flip];
    const r = await load(b.page, hub.url, { chunkSize: MiB });
    assert.equal(hub.faults.flipAt.length, 0, 'the flip happened');
    assert.ok(r.warnings.some((w) => /sha256 mismatch/.test(w)), r.warnings.join('\n'));
    assert.equal(r.info.verified, true);
    assert.equal(r.info.sha256, f.sha256);
    assert.equal(r.info.stats.refetchedChunks, 1, 'exactly the corrupted chunk differed');
    expectFixture(await greedy(b.page));
    await b.page.evaluate(() => window.engine.unload());

    // Flip a byte inside the cached copy (OPFS), then load again: that chunk alone is fetched again.
    const bad = 9 * MiB + 777;
    await flipCachedByte(b.page, bad);
    hub.clearLog();
    await open(b.page, hub.url + '/test/page.html');
    const r2 = await load(b.page, hub.url, { chunkSize: MiB });
    assert.equal(r2.info.source, 'network+cache');
    assert.ok(r2.warnings.some((w) => /chunk 9 .*damaged/.test(w)), r2.warnings.join('\n'));
    const ranges = hub.log.filter((e) => e.path.startsWith('/cdn/') && e.start > 0);
    assert.deepEqual(ranges.map((e) => [e.start, e.end]), [[9 * MiB, 10 * MiB]], 'only the bad chunk was fetched');
    assert.equal(r2.info.verified, true);
    expectFixture(await greedy(b.page));
    await b.page.evaluate(() => window.engine.unload());

    // An interrupted download (the load is aborted halfway) resumes from the cached chunks.
    await b.page.evaluate(() => ClefEngine.cache.clear());
    await open(b.page, hub.url + '/test/page.html');
    hub.faults.delayMs = 15;
    const aborted = await b.page.evaluate(async (hub) => {
      const ac = new AbortController();
      try {
        await ClefEngine.load('test-org/clef-flash-GGUF:F32', {
          hubUrl: hub, chunkSize: 1 << 20, concurrency: 1, signal: ac.signal,
          onProgress: (p) => { if (p.loaded > 12 << 20) ac.abort(); },
        });
        return 'loaded';
      } catch (e) {
        return e.code;
      }
    }, hub.url);
    assert.equal(aborted, 'aborted');
    hub.faults.delayMs = 0;
    const partial = (await b.page.evaluate(() => ClefEngine.cache.list()))[0];
    assert.equal(partial.complete, false);
    assert.ok(partial.cachedBytes >= 10 * MiB, `cached ${partial.cachedBytes}`);
    hub.clearLog();
    await open(b.page, hub.url + '/test/page.html');
    const r3 = await load(b.page, hub.url, { chunkSize: MiB });
    assert.equal(r3.info.source, 'network+cache');
    assert.equal(r3.info.verified, true);
    const served = hub.bytesServed();
    assert.ok(served <= f.size - partial.cachedBytes + 64 * 1024 + 1, `served ${served} with ${partial.cachedBytes} cached`);
    report(`resume: ${mb(partial.cachedBytes)} were cached when the load was aborted; the next load fetched ${mb(served)}`);
    expectFixture(await greedy(b.page));
  } finally {
    await b.close();
    await hub.close();
  }
});

test('a download interrupted inside a chunk resumes there: the cache keeps progress every 2 MiB within a 16 MiB chunk', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const f = hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');
    hub.faults.bytesPerSecond = 4e6; // 7 MiB in ~2 s: the abort lands well inside the first chunk
    const aborted = await b.page.evaluate(async (hub) => {
      const ac = new AbortController();
      try {
        await ClefEngine.load('test-org/clef-flash-GGUF:F32', {
          hubUrl: hub, chunkSize: 16 << 20, concurrency: 1, signal: ac.signal,
          onProgress: (p) => { if (p.loaded > 7 << 20) ac.abort(); },
        });
        return 'loaded';
      } catch (e) {
        return e.code;
      }
    }, hub.url);
    assert.equal(aborted, 'aborted');
    hub.faults.bytesPerSecond = 0;
    const partial = (await b.page.evaluate(() => ClefEngine.cache.list()))[0];
    assert.equal(partial.complete, false);
    hub.clearLog();
    await open(b.page, hub.url + '/test/page.html');
    const r = await load(b.page, hub.url, { chunkSize: 16 << 20 });
    assert.equal(r.info.source, 'network+cache');
    assert.equal(r.info.verified, true, 'the whole file checked against its sha256');
    const data = hub.log.filter((e) => e.path.startsWith('/cdn/') && e.start > 0);
    const first = Math.min(...data.map((e) => e.start));
    assert.ok(first >= 4 << 20 && first < 16 << 20, `the resumed download starts at ${first}: inside the first chunk, not at its start`);
    assert.ok(hub.bytesServed() <= f.size - (4 << 20) + 64 * 1024 + 1, `served ${hub.bytesServed()} of ${f.size}`);
    report(`interrupted at ~7 MiB inside a 16 MiB chunk: the next load resumed at ${mb(first)}, fetching ${mb(hub.bytesServed())} of ${mb(f.size)}`);
    expectFixture(await greedy(b.page));
  } finally {
    await b.close();
    await hub.close();
  }
});

test('abort mid-generation then generate again; 50 abort/generate cycles leave memory flat; errors are typed and the worker stays usable', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    await load(b.page, hub.url, { cache: false });
    // Abort a stream after a few chunks (engine.abort()), and a non-streamed request by its signal.
    const a = await b.page.evaluate(async (text) => {
      const e = window.engine;
      const s = await e.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 3000, ignore_eos: true, temperature: 0.7, stream: true });
      let n = 0;
      let code = null;
      try {
        for await (const c of s) if (++n === 5) e.abort();
      } catch (err) {
        code = err.code;
      }
      const ac = new AbortController();
      const p = e.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 3000, ignore_eos: true, signal: ac.signal });
      setTimeout(() => ac.abort(), 30);
      let code2 = null;
      try {
        await p;
      } catch (err) {
        code2 = err.code;
      }
      return { n, code, code2 };
    }, PROMPT_TEXT);
    assert.equal(a.code, 'aborted');
    assert.equal(a.code2, 'aborted');
    assert.ok(a.n >= 5 && a.n < 100, `stopped soon after the abort (${a.n} chunks)`);
    expectFixture(await greedy(b.page));

    // 50 cycles: start a long generation, stop it after a few tokens (breaking the stream), then a greedy one.
    const sampler = await heapSampler(b.ctx, b.page);
    const cycles = async (n) =>
      b.page.evaluate(async ({ text, n }) => {
        const e = window.engine;
        let bad = 0;
        for (let i = 0; i < n; i++) {
          const s = await e.chat.completions.create({ messages: [{ role: 'user', content: text + ' ' + i }], max_tokens: 2000, ignore_eos: true, temperature: 0.9, seed: i, stream: true });
          let k = 0;
          for await (const c of s) if (++k >= 3 + (i % 7)) break;
          const r = await e.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 16, temperature: 0, return_token_ids: true });
          if (r.choices[0].token_ids.join() !== window.expected.join()) bad++;
        }
        return { bad, stats: await e.stats(), pageHeap: performance.memory?.usedJSHeapSize ?? 0 };
      }, { text: PROMPT_TEXT, n });
    await b.page.evaluate((ids) => { window.expected = ids; }, A.cases[0].greedy_ids);
    const warm = await cycles(5);
    const heap0 = await sampler.heapNow();
    const t = Date.now();
    const after = await cycles(50);
    const heap1 = await sampler.heapNow();
    await sampler.stop();
    assert.equal(warm.bad + after.bad, 0, 'every greedy run after an abort matches llama.cpp');
    report(`50 abort/generate cycles in ${Date.now() - t} ms: wasm memory ${mb(warm.stats.wasmMemoryBytes)} → ${mb(after.stats.wasmMemoryBytes)}, ` +
      `worker JS heap ${heap0 ? mb(heap0.usedSize) : '?'} → ${heap1 ? mb(heap1.usedSize) : '?'} (after GC), page heap ${mb(warm.pageHeap)} → ${mb(after.pageHeap)}`);
    assert.equal(after.stats.wasmMemoryBytes, warm.stats.wasmMemoryBytes, 'wasm memory did not grow');
    if (heap0 && heap1) assert.ok(heap1.usedSize < heap0.usedSize + 2 * MiB, 'worker heap flat');

    // Typed errors; the worker keeps working after each.
    const errs = await b.page.evaluate(async () => {
      const e = window.engine;
      const code = async (f) => {
        try {
          await f();
          return 'no error';
        } catch (err) {
          return `${err.code}: ${err.message}`;
        }
      };
      return {
        temperature: await code(() => e.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], temperature: 'hot' })),
        tokenId: await code(() => e.completions.create({ prompt: [1, 2, 99999999], max_tokens: 2 })),
        context: await code(() => e.completions.create({ prompt: 'word '.repeat(5000), max_tokens: 2 })),
        empty: await code(() => e.chat.completions.create({ messages: [] })),
        n: await code(() => e.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], n: 2 })),
        streamed: await code(() => e.completions.create({ prompt: 'word '.repeat(5000), max_tokens: 2, stream: true })),
      };
    });
    assert.match(errs.temperature, /^bad_request/);
    assert.match(errs.tokenId, /^bad_request: token id 99999999/);
    assert.match(errs.context, /^context_full/);
    assert.match(errs.empty, /^bad_request/);
    assert.match(errs.n, /^bad_request/);
    assert.match(errs.streamed, /^context_full/, 'a stream that cannot start rejects at create()');
    expectFixture(await greedy(b.page));

    // A follow-up message reuses the conversation prefix.
    const reuse = await b.page.evaluate(async (text) => {
      const e = window.engine;
      const first = await e.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 8, temperature: 0 });
      const follow = await e.chat.completions.create({
        messages: [{ role: 'user', content: text }, first.choices[0].message, { role: 'user', content: 'And of Spain?' }],
        max_tokens: 8, temperature: 0,
      });
      return { first: first.usage, follow: follow.usage };
    }, PROMPT_TEXT);
    assert.ok(reuse.follow.prompt_tokens_details.cached_tokens >= reuse.first.prompt_tokens, JSON.stringify(reuse));
  } finally {
    await b.close();
    await hub.close();
  }
});

test('a model larger than the tab can hold fails fast, naming a smaller quant, before downloading', { skip, timeout: 60000 }, async () => {
  const huge = hugeGguf();
  const hub = await startHubServer({ repos: { 'test-org/huge-GGUF': { 'huge-F32.gguf': huge } } });
  const b = await launch(hub.url);
  try {
    const r = await b.page.evaluate(async (hub) => {
      const t = performance.now();
      try {
        // One worker: too large for its 4 GiB (split across workers, see split.test.mjs, it would fit).
        await ClefEngine.load('test-org/huge-GGUF:F32', { hubUrl: hub, workers: 1 });
        return { ok: true };
      } catch (e) {
        return { code: e.code, message: e.message, ms: performance.now() - t };
      }
    }, hub.url);
    assert.equal(r.code, 'out_of_memory', JSON.stringify(r));
    assert.match(r.message, /does not fit/);
    assert.match(r.message, /smaller quant, e\.g\. 'test-org\/huge-GGUF:[A-Z0-9_]+'/);
    const served = hub.bytesServed();
    report(`${(huge.size / 1e9).toFixed(1)} GB model refused in ${r.ms.toFixed(0)} ms after ${served} bytes: "${r.message}"`);
    assert.ok(served < 2 * MiB, `served ${served} bytes`);
    assert.ok(r.ms < 10000);
    // The same with a real file and a small memory limit (e.g. a phone).
    const r2 = await b.page.evaluate(async (hub) => {
      try {
        await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, memoryLimit: 35e6, cache: false, workers: 1 });
        return 'loaded';
      } catch (e) {
        return `${e.code}: ${e.message}`;
      }
    }, hub.url);
    assert.match(r2, /^out_of_memory: .* smaller quant, e\.g\. 'test-org\/clef-flash-GGUF:(BF16|F16)'/);
    // A missing quant is a clear not_found.
    const r3 = await b.page.evaluate(async (hub) => {
      try {
        await ClefEngine.load('test-org/clef-flash-GGUF:Q9_9', { hubUrl: hub });
        return 'loaded';
      } catch (e) {
        return `${e.code}: ${e.message}`;
      }
    }, hub.url);
    assert.match(r3, /^not_found: .*clef-flash-Q9_9\.gguf: HTTP 404/);
    // … and the failed load leaves nothing behind in the cache.
    const listed = await b.page.evaluate(async () => (await ClefEngine.cache.list()).map((c) => c.key ?? c.url ?? JSON.stringify(c)));
    assert.ok(!listed.some((k) => String(k).includes('Q9_9')), `cache lists ${listed}`);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('a File loads the same way; the package works from another origin (CDN) without a bundler', { skip, timeout: 60000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    const r = await b.page.evaluate(async (url) => {
      const blob = await (await fetch(url)).blob();
      window.engine = await ClefEngine.load(new File([blob], 'A-F32.gguf'));
      return window.engine.info;
    }, hub.url + '/cdn/test-org/clef-flash-GGUF/main/clef-flash-F32.gguf');
    assert.equal(r.source, 'file');
    expectFixture(await greedy(b.page));
    await b.page.evaluate(() => window.engine.unload());

    // A page on http://localhost:PORT importing the package from http://127.0.0.1:PORT (another origin):
    // the worker is started through a same-origin blob: module, the wasm fetched with CORS.
    const other = hub.url.replace('127.0.0.1', 'localhost');
    await open(b.page, `${other}/test/cdn.html?pkg=${encodeURIComponent(hub.url + '/dist/clef.js')}`);
    const origin = await b.page.evaluate(() => location.origin);
    assert.notEqual(origin, new URL(hub.url).origin);
    await load(b.page, hub.url, { cache: false });
    assert.ok(b.page.workers().some((w) => w.url().startsWith('blob:')), 'the worker was started from a blob: wrapper');
    expectFixture(await greedy(b.page));
  } finally {
    await b.close();
    await hub.close();
  }
});

test('the real 248k-token vocabulary: an 11 MB header read with growing Range requests; over the memory limit it stops after the header', { skip, timeout: 120000 }, async () => {
  const rv = realVocabGguf();
  const hub = await startHubServer({ repos: { 'test-org/vocab-GGUF': { 'vocab-F32.gguf': rv } } });
  const b = await launch(hub.url);
  try {
    const r = await b.page.evaluate(async (hub) => {
      try {
        await ClefEngine.load('test-org/vocab-GGUF:F32', { hubUrl: hub, memoryLimit: 200e6 });
        return 'loaded';
      } catch (e) {
        return `${e.code}: ${e.message}`;
      }
    }, hub.url);
    assert.match(r, /^out_of_memory: /);
    const reqs = hub.log.filter((e) => e.path.startsWith('/cdn/'));
    const served = hub.bytesServed();
    report(`real-vocabulary header (${mb(rv.header.length)}) read in ${reqs.length} growing range requests (${reqs.map((e) => mb(e.end - e.start)).join(', ')}); ${mb(served)} served before refusing`);
    assert.ok(reqs.length >= 3 && reqs.length <= 8, `${reqs.length} requests`);
    assert.ok(served >= rv.header.length && served < rv.header.length * 1.6, `served ${served}`);
    // Within the limit, it loads (weights are zeros here) and the 248k tokenizer and template run in the worker.
    hub.clearLog();
    const t = await b.page.evaluate(async (hub) => {
      const e = await ClefEngine.load('test-org/vocab-GGUF:F32', { hubUrl: hub, cache: false, contextLength: 256 });
      const text = await e.applyChatTemplate([{ role: 'user', content: 'Hello' }]);
      const ids = await e.tokenize(text);
      const info = e.info;
      await e.unload();
      return { text, ids, info };
    }, hub.url);
    assert.equal(t.info.nVocab, 248320);
    assert.equal(t.info.contextLength, 256);
    assert.equal(t.ids[0], 248045, '<|im_start|>');
    assert.equal(hub.bytesServed(), rv.size);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('a 1.1 GB model: peak JS heap of the worker stays far below the model size; download and OPFS throughput', { skip: skip || (process.env.CLEF_BROWSER_BIG === '0' && 'CLEF_BROWSER_BIG=0'), timeout: 180000 }, async () => {
  const big = hugeGguf({ extra: 1, rows: 8192, cols: 32768 });
  const hub = await startHubServer({ repos: { 'test-org/big-GGUF': { 'big-F32.gguf': big } } });
  const b = await launch(hub.url);
  try {
    // One worker: every byte goes straight into wasm memory.
    const s1 = await heapSampler(b.ctx, b.page, 50);
    const r = await load(b.page, hub.url, { model: 'test-org/big-GGUF:F32', workers: 1 });
    const h1 = await s1.stop();
    assert.equal(r.info.verified, true);
    expectFixture(await greedy(b.page));
    report(`${mb(big.size)} model from the local server: ${mb(r.info.stats.downloadBytesPerSecond)}/s download + sha256 + OPFS write (${(r.ms / 1000).toFixed(1)} s); ` +
      `worker peak V8 heap ${mb(h1.peakUsed)}, peak ArrayBuffer backing stores outside wasm memory ${mb(h1.peakBacking)} (${h1.samples} samples)`);
    assert.ok(h1.samples >= 5, 'sampled during the load');
    assert.ok(h1.peakUsed + h1.peakBacking < big.size / 20, `peak JS memory ${h1.peakUsed + h1.peakBacking} vs ${big.size}`);
    await b.page.evaluate(() => window.engine.unload());
    hub.faults.offline = true;
    await open(b.page, hub.url + '/test/page.html');
    const s2 = await heapSampler(b.ctx, b.page, 50);
    const r2 = await load(b.page, hub.url, { model: 'test-org/big-GGUF:F32' });
    const h2 = await s2.stop();
    assert.equal(r2.info.source, 'cache');
    expectFixture(await greedy(b.page));
    report(`same model from OPFS: ${mb(r2.info.stats.cacheBytesPerSecond)}/s read into wasm memory + checksums (${(r2.ms / 1000).toFixed(1)} s); ` +
      `worker peak V8 heap ${mb(h2.peakUsed)}, backing stores ${mb(h2.peakBacking)}`);
    // Split across 2 workers, from OPFS: chunks are staged in JS, then scattered (a few chunks of 16 MiB at a time).
    await b.page.evaluate(() => window.engine.unload());
    await open(b.page, hub.url + '/test/page.html');
    const s3 = await heapSampler(b.ctx, b.page, 50);
    const r3 = await load(b.page, hub.url, { model: 'test-org/big-GGUF:F32', workers: 2 });
    const h3 = await s3.stop();
    assert.equal(r3.info.source, 'cache');
    assert.equal(r3.info.workers, 2);
    expectFixture(await greedy(b.page));
    report(`same model from OPFS, split across 2 workers: ${(r3.ms / 1000).toFixed(1)} s; engine worker peak V8 heap ${mb(h3.peakUsed)}, backing stores outside wasm memory ${mb(h3.peakBacking)}`);
    assert.ok(h3.peakUsed + h3.peakBacking < 12 * 16 * MiB, `split: peak JS memory ${h3.peakUsed + h3.peakBacking} stays within a few staged chunks`);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('kernel self-test in Chromium: both wasm builds equal the scalar references (relaxed SIMD is checked where it runs)', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    // Each build in its own module instance of the shared glue (www/pkg, served at /pkg/).
    const results = await b.page.evaluate(async () => {
      const out = {};
      for (const [build, file] of [['relaxed-simd', 'clef_web_relaxed_bg.wasm'], ['simd128', 'clef_web_bg.wasm']]) {
        const glue = await import(`/pkg/clef_web.js?${build}`);
        await glue.default({ module_or_path: `/pkg/${file}` });
        out[build] = JSON.parse(glue.kernelSelfTest(300));
      }
      return out;
    });
    for (const [build, r] of Object.entries(results)) {
      assert.equal(r.simd, build);
      // Chromium computes the dot-add instruction exactly: the relaxed build checks that form too.
      assert.equal(r.dot_add, build === 'relaxed-simd');
      const bad = r.kernels.filter((k) => !k.ok);
      assert.deepEqual(bad, [], `${build}: ${JSON.stringify(bad)}`);
      assert.ok(r.kernels.length >= 21, `${build}: ${r.kernels.length} types`);
      assert.ok(r.ok);
      const worst = r.kernels.reduce((m, k) => Math.max(m, Number(k.max_dot_err)), 0);
      report(`${build} in Chromium: ${r.kernels.length} types × ${r.kernels[0].rows} rows, worst dot error ${worst.toExponential(1)} of Σ|w·a|, decoders bit-exact`);
    }
  } finally {
    await b.close();
    await hub.close();
  }
});
