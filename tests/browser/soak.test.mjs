// The lifecycle soak on the tiny fixture model: load/unload cycles, many short generations, aborts
// at random points, and an allocation the browser refuses. Memory must come back to its baseline
// and every request after a fault must answer exactly as before (llama.cpp's greedy tokens).
//
//   Chromium  20 load/unload cycles (from OPFS): no engine worker left, page heap back to baseline;
//             GENERATIONS short generations on one engine: wasm memory unchanged, the worker's and
//             the page's JS heaps (after GC, through the Chrome DevTools Protocol) flat; ABORTS
//             aborts at seeded random delays (before the request, in the prompt, mid-decode), each
//             followed by a greedy request that must give the fixture's tokens
//   Node      20 load/unload cycles in one process (one wasm instance for all): wasm memory stops
//             growing after the first cycle, heap and ArrayBuffers back to baseline
//   OOM       Chromium with WebAssembly capped below the model (--wasm-max-mem-pages): the load
//             fails with `out_of_memory` naming a smaller quant; an engine loaded before keeps
//             answering, and the suggested quant loads and answers
//
// The counts are the (about a minute on the tiny model); CLEF_SOAK_CYCLES,
// CLEF_SOAK_GENERATIONS and CLEF_SOAK_ABORTS change them. README "Reliability" has the figures.
// Measurements are printed as `# …` lines.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { startHubServer } from './hub-server.mjs';
import { A, PROMPT_TEXT, fixturesDir, heapSampler, launch, open, repoRoot, rng, skipReason } from './helpers.mjs';

const skip = skipReason();
const CYCLES = Number(process.env.CLEF_SOAK_CYCLES ?? 20);
const GENERATIONS = Number(process.env.CLEF_SOAK_GENERATIONS ?? 1000);
const ABORTS = Number(process.env.CLEF_SOAK_ABORTS ?? 100);
const MiB = 1 << 20;
const report = (s) => console.log(`# ${s}`);
const mb = (n) => `${(n / 1e6).toFixed(2)} MB`;

/** The page's own JS heap after a forced GC, and the engine workers alive (CDP). */
async function pageProbe(ctx, page) {
  const s = await ctx.newCDPSession(page);
  return {
    async heap() {
      await s.send('HeapProfiler.collectGarbage');
      return (await s.send('Runtime.getHeapUsage')).usedSize;
    },
    async workers() {
      const { targetInfos } = await s.send('Target.getTargets');
      return targetInfos.filter((t) => t.type === 'worker' && /clef-(worker|shard)/.test(t.url)).length;
    },
  };
}

test(`Chromium soak: ${CYCLES} load/unload cycles, ${GENERATIONS} short generations, ${ABORTS} aborts at random points`, { skip, timeout: 600000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    await b.page.evaluate(({ ids, hub }) => {
      window.expected = ids.join();
      window.loadModel = () => ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub });
      window.greedyOk = async (e, text) => {
        const r = await e.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 16, temperature: 0, return_token_ids: true });
        return r.choices[0].token_ids.join() === window.expected;
      };
    }, { ids: A.cases[0].greedy_ids, hub: hub.url });
    const probe = await pageProbe(b.ctx, b.page);

    // ---- load/unload cycles (the first downloads into OPFS, the rest load from it) ------------------
    await b.page.evaluate(async () => (await window.loadModel()).unload());
    const heap0 = await probe.heap();
    const t0 = Date.now();
    const cycles = await b.page.evaluate(async (n) => {
      const out = { bad: 0, sources: new Set(), wasm: new Set() };
      for (let i = 0; i < n; i++) {
        const e = await window.loadModel();
        out.sources.add(e.info.source);
        out.wasm.add(e.info.stats.wasmMemoryBytes);
        if (!(await window.greedyOk(e, 'What is the capital of France?'))) out.bad++;
        await e.unload();
      }
      return { bad: out.bad, sources: [...out.sources], wasm: [...out.wasm] };
    }, CYCLES);
    const cyclesMs = Date.now() - t0;
    await new Promise((r) => setTimeout(r, 300)); // terminated workers leave the target list
    const heap1 = await probe.heap();
    const workersLeft = await probe.workers();
    report(`${CYCLES} load/unload cycles in ${cyclesMs} ms (from ${cycles.sources}): engine wasm memory ${cycles.wasm.map(mb)} each time; ` +
      `page heap ${mb(heap0)} → ${mb(heap1)} after GC; engine workers left: ${workersLeft}`);
    assert.equal(cycles.bad, 0, 'every cycle answers the fixture');
    assert.deepEqual(cycles.sources, ['cache']);
    assert.equal(cycles.wasm.length, 1, 'every fresh engine has the same wasm memory');
    assert.equal(workersLeft, 0, 'unload ends every engine worker');
    assert.ok(heap1 < heap0 + MiB, `page heap back to baseline (${heap0} → ${heap1})`);

    // ---- short generations on one engine -------------------------------------------------------------
    await b.page.evaluate(async () => {
      window.engine = await window.loadModel();
    });
    const sampler = await heapSampler(b.ctx, b.page);
    const generations = (n, from) =>
      b.page.evaluate(async ({ n, from }) => {
        const e = window.engine;
        const words = ['Paris', 'river', 'seven', 'blue', 'engine', 'quiet', 'north', 'apple'];
        let bad = 0;
        let tokens = 0;
        for (let i = from; i < from + n; i++) {
          if (i % 50 === 0) {
            if (!(await window.greedyOk(e, 'What is the capital of France?'))) bad++;
            continue;
          }
          const text = `${words[i % 8]} ${words[(i * 3) % 8]} ${i}`;
          const stream = i % 2 === 0;
          const body = { messages: [{ role: 'user', content: text }], max_tokens: 4 + (i % 5), temperature: (i % 3) * 0.5, seed: i, stream };
          if (stream) for await (const c of await e.chat.completions.create(body)) tokens += c.choices[0]?.delta?.content ? 1 : 0;
          else tokens += (await e.chat.completions.create(body)).usage.completion_tokens;
        }
        return { bad, tokens, stats: await e.stats() };
      }, { n, from });
    // One long prompt first: the buffers of a full prompt pass (PREFILL_CHUNK tokens) are part of
    // the baseline; the aborts below run prompts that long.
    await b.page.evaluate(() => window.engine.chat.completions.create({ messages: [{ role: 'user', content: 'Tell me about the river. '.repeat(60) }], max_tokens: 2 }));
    const warm = await generations(20, 1);
    const wheap0 = await sampler.heapNow();
    const pheap0 = await probe.heap();
    const t1 = Date.now();
    const run = await generations(GENERATIONS, 21);
    const genMs = Date.now() - t1;
    const wheap1 = await sampler.heapNow();
    const pheap1 = await probe.heap();
    report(`${GENERATIONS} short generations in ${genMs} ms (${(genMs / GENERATIONS).toFixed(1)} ms each): wasm memory ` +
      `${mb(warm.stats.wasmMemoryBytes)} → ${mb(run.stats.wasmMemoryBytes)}; worker heap ${wheap0 ? mb(wheap0.usedSize) : '?'} → ` +
      `${wheap1 ? mb(wheap1.usedSize) : '?'}, page heap ${mb(pheap0)} → ${mb(pheap1)} (after GC)`);
    assert.equal(run.bad + warm.bad, 0, 'the greedy checks in between match llama.cpp');
    assert.equal(run.stats.wasmMemoryBytes, warm.stats.wasmMemoryBytes, 'wasm memory did not grow');
    assert.ok(wheap0 && wheap1, 'the worker heap was measured');
    assert.ok(wheap1.usedSize < wheap0.usedSize + MiB, `worker heap flat (${wheap0.usedSize} → ${wheap1.usedSize})`);
    assert.ok(pheap1 < pheap0 + MiB, `page heap flat (${pheap0} → ${pheap1})`);

    // ---- aborts at random points, each followed by a request that must answer exactly -------------
    const r = rng(11);
    const plan = Array.from({ length: ABORTS }, (_, i) => ({
      delay: Math.floor(r() * 40), // ms after the request starts (0: aborted before it reaches the worker)
      stream: r() < 0.5,
      longPrompt: i % 4 === 0, // abort during a long prompt's prefill
    }));
    const t2 = Date.now();
    const aborts = await b.page.evaluate(async (plan) => {
      const e = window.engine;
      const out = { codes: {}, bad: 0, other: [], points: { beforeFirstToken: 0, midDecode: 0 } };
      for (const [i, p] of plan.entries()) {
        const ac = new AbortController();
        const text = p.longPrompt ? 'Tell me about the river. '.repeat(60) : `Count to a hundred, ${i}.`;
        const body = { messages: [{ role: 'user', content: text }], max_tokens: 400, ignore_eos: true, temperature: 0.8, seed: i, signal: ac.signal, stream: p.stream };
        const timer = p.delay === 0 ? ac.abort() : setTimeout(() => ac.abort(), p.delay);
        let code = 'completed';
        let chunks = 0;
        try {
          const res = await e.chat.completions.create(body);
          if (p.stream) for await (const c of res) chunks += c.choices.length; // eslint-disable-line no-unused-vars
        } catch (err) {
          code = err.code ?? String(err);
        }
        if (p.stream && code === 'aborted') out.points[chunks > 1 ? 'midDecode' : 'beforeFirstToken']++;
        clearTimeout(timer);
        out.codes[code] = (out.codes[code] ?? 0) + 1;
        if (code !== 'aborted' && code !== 'completed') out.other.push(`${i}: ${code}`);
        if (!(await window.greedyOk(e, 'What is the capital of France?'))) out.bad++;
      }
      out.stats = await e.stats();
      return out;
    }, plan);
    const wheap2 = await sampler.heapNow();
    await sampler.stop();
    report(`${ABORTS} aborts at random points in ${Date.now() - t2} ms: ${JSON.stringify(aborts.codes)}, streamed ones ${JSON.stringify(aborts.points)}; every next request answered exactly: ${aborts.bad === 0}; ` +
      `wasm memory ${mb(aborts.stats.wasmMemoryBytes)}, worker heap ${wheap2 ? mb(wheap2.usedSize) : '?'}`);
    assert.deepEqual(aborts.other, [], 'every request was aborted or completed');
    assert.ok((aborts.codes.aborted ?? 0) >= ABORTS * 0.8, 'most were really aborted');
    assert.ok(aborts.points.beforeFirstToken > 0 && aborts.points.midDecode > 0, `aborts landed before the first token and mid-decode: ${JSON.stringify(aborts.points)}`);
    assert.equal(aborts.bad, 0, 'the request after each abort gives the fixture tokens');
    assert.equal(aborts.stats.wasmMemoryBytes, warm.stats.wasmMemoryBytes, 'wasm memory did not grow');
    await b.page.evaluate(() => window.engine.unload());
  } finally {
    await b.close();
    await hub.close();
  }
});

test(`Node soak: ${CYCLES} load/unload cycles in one process leave wasm memory and the heap at their baseline`, async () => {
  const dist = join(repoRoot, 'www', 'dist', 'clef.js');
  if (!existsSync(dist)) return;
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  const { ClefEngine } = await import(dist);
  const file = join(fixturesDir, 'A-F32.gguf');
  const cycle = async () => {
    const e = await ClefEngine.load(file);
    const r = await e.chat.completions.create({ messages: [{ role: 'user', content: PROMPT_TEXT }], max_tokens: 16, temperature: 0, return_token_ids: true });
    assert.deepEqual(r.choices[0].token_ids, A.cases[0].greedy_ids);
    // After the generation: a cycle's high-water mark (its stages' work buffers included).
    const wasm = (await e.stats()).wasmMemoryBytes;
    await e.unload();
    return wasm;
  };
  const usage = () => {
    for (let i = 0; i < 3; i++) gc();
    const m = process.memoryUsage();
    return { heap: m.heapUsed, buffers: m.arrayBuffers };
  };
  const first = await cycle();
  const base = usage();
  const wasm = [];
  for (let i = 0; i < CYCLES; i++) wasm.push(await cycle());
  const end = usage();
  report(`Node: ${CYCLES} load/unload cycles: wasm memory ${mb(first)} after the first, ${[...new Set(wasm)].map(mb)} after each of the others; ` +
    `heap ${mb(base.heap)} → ${mb(end.heap)}, ArrayBuffers ${mb(base.buffers)} → ${mb(end.buffers)}`);
  assert.deepEqual([...new Set(wasm)], [first], 'the wasm instance reuses the memory freed by unload');
  assert.ok(end.heap < base.heap + 2 * MiB, 'heap back to baseline');
  assert.ok(end.buffers < base.buffers + MiB, 'no ArrayBuffer kept');
});

test('an allocation the browser refuses: out_of_memory naming a smaller quant; the engine loaded before keeps answering; the smaller quant loads', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer();
  // 440 pages of 64 KiB (27.5 MiB) per WebAssembly memory: the fit check (4 GiB) passes, the
  // F32 file's 27.6 MB of weights cannot be allocated.
  const b = await launch(hub.url, { args: ['--js-flags=--wasm-max-mem-pages=440'] });
  try {
    const r = await b.page.evaluate(async (hub) => {
      const q = await ClefEngine.load('test-org/clef-flash-GGUF:Q4_0', { hubUrl: hub, cache: false });
      const answer = async (e) => (await e.chat.completions.create({ messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0, return_token_ids: true })).choices[0].token_ids.join();
      const before = await answer(q);
      let error = null;
      try {
        await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, cache: false });
      } catch (e) {
        error = { code: e.code, message: e.message };
      }
      const after = await answer(q);
      await q.unload();
      const quant = /e\.g\. 'test-org\/clef-flash-GGUF:([A-Z0-9_]+)'/.exec(error?.message ?? '')?.[1] ?? null;
      let smaller = null;
      if (quant) {
        const s = await ClefEngine.load(`test-org/clef-flash-GGUF:${quant}`, { hubUrl: hub, cache: false });
        smaller = { quant, tokens: (await answer(s)).split(',').length };
        await s.unload();
      }
      return { before, after, error, smaller };
    }, hub.url);
    report(`refused allocation: ${r.error?.code}: ${r.error?.message}`);
    assert.equal(r.error?.code, 'out_of_memory');
    assert.match(r.error.message, /the browser refused memory for the weights .*use a smaller quant, e\.g\. 'test-org\/clef-flash-GGUF:[A-Z0-9_]+'/);
    assert.equal(r.after, r.before, 'the engine loaded before answers the same');
    assert.ok(r.smaller && r.smaller.tokens === 8, `the suggested quant loads and answers: ${JSON.stringify(r.smaller)}`);
  } finally {
    await b.close();
    await hub.close();
  }
});
