// A model split across shard workers (tensor parallelism, `workers` load option), end to end:
// in Node (worker_threads, loading from a path; stages through shared memory, and by postMessage)
// and in headless Chromium (Web Workers, loading from the local Hub emulator over HTTP and then from
// OPFS: with no COOP/COEP headers, postMessage only; cross-origin isolated, shared memory).
// The fixtures through 1, 2 and 3 workers give llama.cpp's greedy tokens (F32) and the one-worker
// tokens (quantized files), and in Chromium the files whose interleaved forms only the browsers run
// give llama.cpp's greedy tokens; an abort mid-generation and a killed shard worker are handled.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { startHubServer } from './hub-server.mjs';
import { A, PROMPT_TEXT, fixturesDir, flipCachedByte, launch, repoRoot, skipReason } from './helpers.mjs';

const dist = join(repoRoot, 'www', 'dist', 'clef.js');
const skipNode = existsSync(dist) ? false : 'www/dist is not built (./build.sh)';
const skipBrowser = skipReason();
const report = (s) => console.log(`# ${s}`);

const greedyChat = (engine, n = 16) =>
  engine.chat.completions.create({ messages: [{ role: 'user', content: PROMPT_TEXT }], max_tokens: n, temperature: 0, return_token_ids: true });
const greedyIds = async (engine, ids, n = 16) =>
  (await engine.completions.create({ prompt: ids, max_tokens: n, temperature: 0, ignore_eos: true, return_token_ids: true })).choices[0].token_ids;

test('Node: F32 through 1, 2 and 3 workers = llama.cpp; quantized files = one worker; follow-ups reuse the prefix', { skip: skipNode, timeout: 240000 }, async () => {
  const { ClefEngine } = await import(dist);
  // engineShard false: every shard in a worker of its own, the engine worker only coordinating;
  // band: FFN and LM-head rows shared by neighbouring shards, cut stage by stage (src/balance.rs).
  for (const [workers, exchange, engineShard, band] of [[1, 'auto'], [2, 'auto'], [3, 'auto'], [2, 'message'], [2, 'auto', false], [3, 'message', false], [2, 'auto', true, 50], [3, 'message', false, 50]]) {
    // The banded runs also trace their stages (traceStages: usage.split.*.trace).
    const engine = await ClefEngine.load(join(fixturesDir, 'A-F32.gguf'), { workers, exchange, engineShard, band, traceStages: !!band });
    try {
      assert.equal(engine.info.workers, workers);
      assert.equal(engine.info.stats.band, band ?? 0, 'bands where asked (the fixture fits them)');
      assert.equal(engine.info.engineShard, workers > 1 && engineShard !== false, 'the engine worker computes shard 0 unless told not to');
      assert.equal(engine.info.workersReason, 'requested');
      assert.equal(engine.info.exchange, workers === 1 ? '' : exchange === 'auto' ? 'shared' : 'message', 'Node has SharedArrayBuffer');
      assert.equal(engine.info.stats.pulledByWorkers, workers > 1, 'a file on disk: every worker reads its own part');
      const r = await greedyChat(engine);
      assert.deepEqual(r.prompt_token_ids, A.cases[0].prompt_ids);
      assert.deepEqual(r.choices[0].token_ids, A.cases[0].greedy_ids, `${workers} workers`);
      for (const part of workers > 1 ? [r.usage.split.prompt, r.usage.split.completion] : []) {
        if (!band) {
          assert.equal(part.trace, undefined, 'stages traced only when asked');
          continue;
        }
        // One record per stage, adding up to the totals; every stage's rows all computed once.
        assert.equal(part.trace.length, part.stages);
        const slowest = part.trace.reduce((a, t) => a + Math.max(...t.shard_ms), 0);
        // (shard_ms is rounded to 0.1 ms, each record's times to 1 µs)
        assert.ok(Math.abs(slowest - part.shard_ms) <= 0.05 + 0.0005 * part.stages, `${slowest} vs ${part.shard_ms}`);
        const ffnRows = new Set();
        for (const t of part.trace) {
          assert.equal(t.shard_ms.length, workers);
          const rows = t.work.reduce((a, b) => a + b, 0);
          if (t.stage === 'ffn') ffnRows.add(rows);
          else assert.equal(rows, t.stage === 'mixer' ? workers : engine.info.nVocab, JSON.stringify(t));
        }
        assert.equal(ffnRows.size, 1, 'every FFN stage shares out all its rows');
        assert.deepEqual([...new Set(part.trace.map((t) => t.stage))].sort(), ['ffn', 'head', 'mixer']);
      }
      for (const c of A.cases.slice(1)) assert.deepEqual(await greedyIds(engine, c.prompt_ids), c.greedy_ids, `${workers} workers`);
      // A follow-up turn: the prefix comes from the shards' snapshots, the tokens are unchanged.
      const follow = [...A.cases[0].prompt_ids, ...A.cases[0].greedy_ids.slice(0, 4), 8002, 198, 8001, 846];
      const first = await engine.completions.create({ prompt: follow, max_tokens: 8, temperature: 0, ignore_eos: true, return_token_ids: true });
      const again = await engine.completions.create({ prompt: [...follow, ...first.choices[0].token_ids, 198], max_tokens: 8, temperature: 0, ignore_eos: true, return_token_ids: true });
      assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, 'prefix reused');
      const fresh = await ClefEngine.load(join(fixturesDir, 'A-F32.gguf'), { workers: 1 });
      try {
        assert.deepEqual(await greedyIds(fresh, [...follow, ...first.choices[0].token_ids, 198], 8), again.choices[0].token_ids, `${workers} workers: reused prefix`);
      } finally {
        await fresh.unload();
      }
    } finally {
      await engine.unload();
    }
  }
  // A sha256 to check needs every byte in file order: the engine worker reads the file then.
  const sha256 = createHash('sha256').update(readFileSync(join(fixturesDir, 'A-F32.gguf'))).digest('hex');
  const checked = await ClefEngine.load(join(fixturesDir, 'A-F32.gguf'), { workers: 2, sha256 });
  try {
    assert.equal(checked.info.verified, true);
    assert.equal(checked.info.stats.pulledByWorkers, false);
    assert.deepEqual((await greedyChat(checked)).choices[0].token_ids, A.cases[0].greedy_ids);
  } finally {
    await checked.unload();
  }
  await assert.rejects(ClefEngine.load(join(fixturesDir, 'A-F32.gguf'), { workers: 2, sha256: sha256.replace(/^./, (c) => (c === '0' ? '1' : '0')) }), (e) => e.code === 'integrity');
  // Quantized files (every block family): 2 and 3 workers give the one-worker tokens.
  for (const q of ['Q8_0', 'Q4_K_M', 'IQ2_M', 'IQ2_XS', 'Q1_0']) {
    const path = join(fixturesDir, `A-${q}.gguf`);
    const runs = [];
    for (const workers of [1, 2, 3]) {
      const engine = await ClefEngine.load(path, { workers });
      try {
        // IQ2_M's IQ2_S and IQ3_S and IQ2_XS's IQ2_XS matrices are held expanded (IQ2_SX, IQ3_SX)
        // wherever memory allows, as here.
        assert.equal(engine.info.stats.expanded, q.startsWith('IQ2_'), `${q}, ${workers} workers: expanded`);
        runs.push(await greedyIds(engine, A.cases[0].prompt_ids, 12));
      } finally {
        await engine.unload();
      }
    }
    report(`${q}: 1/2/3 workers ${runs.map((r) => r.join(',')).join(' | ')}`);
    assert.deepEqual(runs[1], runs[0], `${q}: 2 workers vs 1`);
    assert.deepEqual(runs[2], runs[0], `${q}: 3 workers vs 1`);
  }
});

test('Node: abort mid-generation with 2 workers, then generate again; a killed shard worker is a typed fatal error and the model loads again (both exchanges)', { skip: skipNode, timeout: 120000 }, async () => {
  const { ClefEngine } = await import(dist);
  const path = join(fixturesDir, 'A-F32.gguf');
  // Shard 0 is the engine worker's own (a second wasm instance in its thread), shard 1 a worker.
  for (const exchange of ['shared', 'message']) for (const kill of [0, 1]) await abortAndKill(ClefEngine, path, exchange, kill);
  await assert.rejects(ClefEngine.load(path, { workers: 2, exchange: 'both' }), (e) => e.code === 'bad_request' && /exchange/.test(e.message));
});

test('Node: an abort during a long prompt (with 2 workers, between the stages of one of its passes) leaves the engine answering as before', { skip: skipNode, timeout: 120000 }, async () => {
  const { ClefEngine } = await import(dist);
  const path = join(fixturesDir, 'A-F32.gguf');
  const long = Array(80).fill(PROMPT_TEXT).join(' '); // ~650 tokens: several passes
  for (const [workers, exchange] of [[1, 'auto'], [2, 'shared'], [2, 'message']]) {
    const engine = await ClefEngine.load(path, { workers, exchange });
    try {
      assert.deepEqual((await greedyChat(engine)).choices[0].token_ids, A.cases[0].greedy_ids); // snapshots to go back to
      for (let i = 0; i < 3; i++) {
        const ac = new AbortController();
        const s = await engine.chat.completions.create({ messages: [{ role: 'user', content: long }], max_tokens: 4, temperature: 0, stream: true, signal: ac.signal });
        ac.abort(); // the prompt is running: the worker sees the abort at its next stage or pass
        await assert.rejects((async () => { for await (const _ of s); })(), (e) => e.code === 'aborted');
        assert.deepEqual((await greedyChat(engine)).choices[0].token_ids, A.cases[0].greedy_ids, `${workers} workers, ${exchange}: after an abort during the prompt`);
      }
    } finally {
      await engine.unload();
    }
  }
});

async function abortAndKill(ClefEngine, path, exchange, kill) {
  const engine = await ClefEngine.load(path, { workers: 2, exchange });
  try {
    assert.equal(engine.info.exchange, exchange);
    const ac = new AbortController();
    const s = await engine.chat.completions.create({ messages: [{ role: 'user', content: PROMPT_TEXT }], max_tokens: 400, temperature: 0, stream: true, signal: ac.signal });
    let n = 0;
    await assert.rejects(
      (async () => {
        for await (const c of s) if (c.choices[0]?.delta?.content !== undefined && ++n === 5) ac.abort();
      })(),
      (e) => e.code === 'aborted',
    );
    assert.deepEqual((await greedyChat(engine)).choices[0].token_ids, A.cases[0].greedy_ids, 'after an abort');

    await engine.injectFault({ killShard: kill });
    await assert.rejects(greedyChat(engine), (e) => e.code === 'worker_crashed' && e.fatal && new RegExp(`shard worker ${kill + 1} of 2`).test(e.message));
    await assert.rejects(greedyChat(engine), (e) => e.code === 'worker_crashed' || e.code === 'not_loaded');
  } finally {
    await engine.unload();
  }
  const again = await ClefEngine.load(path, { workers: 2, exchange });
  try {
    assert.deepEqual((await greedyChat(again)).choices[0].token_ids, A.cases[0].greedy_ids, `${exchange}: loaded again after shard ${kill} crashed`);
  } finally {
    await again.unload();
  }
}

test('Node: the default worker count — small models stay in one worker; an invalid count is a typed bad_request', { skip: skipNode, timeout: 60000 }, async () => {
  const { ClefEngine } = await import(dist);
  const engine = await ClefEngine.load(join(fixturesDir, 'A-F32.gguf'));
  try {
    assert.equal(engine.info.workers, 1);
    assert.match(engine.info.workersReason, /small model/);
  } finally {
    await engine.unload();
  }
  for (const workers of [0, 1.5, -2, 'two']) {
    await assert.rejects(ClefEngine.load(join(fixturesDir, 'A-F32.gguf'), { workers }), (e) => e.code === 'bad_request' && /workers/.test(e.message));
  }
});

test('Chromium without COOP/COEP: 2 and 3 workers over HTTP, then from OPFS, give llama.cpp\'s tokens; a killed shard worker is fatal, a reload works', { skip: skipBrowser, timeout: 180000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    assert.equal(await b.page.evaluate(() => crossOriginIsolated), false);
    const run = (opts) =>
      b.page.evaluate(async ({ hub, opts, text }) => {
        const engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, chunkSize: 1 << 20, ...opts });
        try {
          const r = await engine.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 16, temperature: 0, return_token_ids: true });
          return { info: engine.info, ids: r.choices[0].token_ids, usage: r.usage };
        } finally {
          await engine.unload();
        }
      }, { hub: hub.url, opts, text: PROMPT_TEXT });
    const net = await run({ workers: 2 });
    assert.equal(net.info.workers, 2);
    assert.equal(net.info.exchange, 'message', 'not cross-origin isolated: postMessage');
    assert.equal(net.info.source, 'network');
    assert.equal(net.info.verified, true);
    assert.deepEqual(net.ids, A.cases[0].greedy_ids);
    const f = hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');
    assert.equal(hub.bytesServed(), f.size, 'every byte once: the engine worker downloads, the shards get their parts');
    assert.equal(net.info.stats.pulledByWorkers, false);
    const cached = await run({ workers: 3, band: 50 });
    assert.equal(cached.info.stats.band, 50);
    assert.ok(cached.usage.split.completion.moved_stages >= 0);
    assert.equal(cached.info.source, 'cache');
    assert.equal(cached.info.workers, 3);
    assert.equal(cached.info.stats.pulledByWorkers, true, 'every worker read its own part of the cache');
    assert.deepEqual(cached.ids, A.cases[0].greedy_ids);

    // A byte flipped in the cached copy: the workers find the bad chunk, the load falls back to the
    // general path, which fetches that chunk alone; the answer is unchanged.
    await flipCachedByte(b.page, 9 * (1 << 20) + 777);
    hub.clearLog();
    const repaired = await b.page.evaluate(async ({ hub, text }) => {
      const warnings = [];
      const engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, chunkSize: 1 << 20, workers: 2, onWarning: (m) => warnings.push(m) });
      try {
        const r = await engine.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 16, temperature: 0, return_token_ids: true });
        return { info: engine.info, ids: r.choices[0].token_ids, warnings };
      } finally {
        await engine.unload();
      }
    }, { hub: hub.url, text: PROMPT_TEXT });
    assert.ok(repaired.warnings.some((w) => /damaged/.test(w)), repaired.warnings.join('\n'));
    assert.equal(repaired.info.source, 'network+cache');
    assert.equal(repaired.info.stats.pulledByWorkers, false);
    const ranges = hub.log.filter((e) => e.path.startsWith('/cdn/') && e.start > 0);
    assert.deepEqual(ranges.map((e) => [e.start, e.end]), [[9 << 20, 10 << 20]], 'only the bad chunk was fetched');
    assert.deepEqual(repaired.ids, A.cases[0].greedy_ids);
    report(`Chromium, F32 fixture: 2 workers ${net.usage.completion_tokens_per_second} tok/s, 3 workers ${cached.usage.completion_tokens_per_second} tok/s (tiny model: exchange-bound)`);

    const crash = await b.page.evaluate(async ({ hub, text }) => {
      const engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, workers: 2 });
      await engine.injectFault({ killShard: 0 });
      let err = null;
      try {
        await engine.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 4 });
      } catch (e) {
        err = { code: e.code, fatal: e.fatal, message: e.message };
      }
      await engine.unload();
      const again = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, workers: 2 });
      const r = await again.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 16, temperature: 0, return_token_ids: true });
      await again.unload();
      return { err, ids: r.choices[0].token_ids };
    }, { hub: hub.url, text: PROMPT_TEXT });
    assert.equal(crash.err?.code, 'worker_crashed');
    assert.equal(crash.err?.fatal, true);
    assert.deepEqual(crash.ids, A.cases[0].greedy_ids);
  } finally {
    await b.close();
    await hub.close();
  }
});

// The browsers' engine runs forms the command line does not (the int8 GEMM's wide profile; Q5_K
// interleaved four rows at a time, `r4::R4Kernels::wide_only`); these files use them, IQ2_M with its
// IQ2_S and IQ3_S matrices expanded and interleaved, Q3_K_M its Q3_K ones, Q4_K_M its Q6_K ones
// regrouped (Q6_KX: the browsers' profile only) and split by rows and by columns.
test('Chromium: files through the browsers\' own forms (IQ2_M: IQ2_S and IQ3_S expanded and interleaved, the wide GEMM; Q3_K_M: Q3_K expanded; Q5_K_M: Q5_K interleaved; Q4_K_M: Q6_K as Q6_KX) give llama.cpp\'s greedy tokens with 1 and 2 workers', { skip: skipBrowser, timeout: 150000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(hub.url);
  try {
    for (const q of ['IQ2_M', 'Q3_K_M', 'Q5_K_M', 'Q4_K_M']) {
      const ref = JSON.parse(readFileSync(join(fixturesDir, `A-${q}.llama.json`), 'utf8')).cases[0];
      for (const workers of [1, 2]) {
        const r = await b.page.evaluate(async ({ hub, q, workers, ids }) => {
          const engine = await ClefEngine.load(`test-org/clef-flash-GGUF:${q}`, { hubUrl: hub, workers, cache: false });
          try {
            const r = await engine.completions.create({ prompt: ids, max_tokens: 16, temperature: 0, ignore_eos: true, return_token_ids: true });
            return { ids: r.choices[0].token_ids, simd: engine.info.stats.simd, expanded: engine.info.stats.expanded, workers: engine.info.workers };
          } finally {
            await engine.unload();
          }
        }, { hub: hub.url, q, workers, ids: ref.prompt_ids });
        assert.equal(r.simd, 'relaxed-simd', 'the relaxed build (the one with interleaved forms)');
        assert.equal(r.workers, workers);
        // (`expanded`: the forms that cost memory; Q6_KX costs none.)
        assert.equal(r.expanded, q === 'IQ2_M' || q === 'Q3_K_M', `${q}: expanded`);
        assert.deepEqual(r.ids, ref.greedy_ids, `${q}, ${workers} workers`);
      }
    }
  } finally {
    await b.close();
    await hub.close();
  }
});

test('Chromium, cross-origin isolated (COOP + COEP): stages through shared memory, llama.cpp\'s tokens; abort and a killed shard worker are handled', { skip: skipBrowser, timeout: 180000 }, async () => {
  const hub = await startHubServer({ isolated: true });
  const b = await launch(hub.url);
  try {
    assert.equal(await b.page.evaluate(() => crossOriginIsolated), true);
    const r = await b.page.evaluate(async ({ hub, text }) => {
      const ask = (engine, signal, n = 16) => engine.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: n, temperature: 0, return_token_ids: true, signal });
      const out = {};
      // 'apart': shared memory, every shard in a worker of its own (engineShard false).
      for (const [key, exchange, engineShard] of [['auto', 'auto', true], ['message', 'message', true], ['apart', 'auto', false]]) {
        const engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub, workers: 2, exchange, engineShard });
        const t = performance.now();
        const a = await ask(engine);
        out[key] = { info: engine.info, ids: a.choices[0].token_ids, ms: performance.now() - t, split: a.usage.split };
        if (exchange === 'auto') {
          // Abort mid-generation (the shards are serving), then a full answer.
          const ac = new AbortController();
          const s = await engine.chat.completions.create({ messages: [{ role: 'user', content: text }], max_tokens: 200, temperature: 0, stream: true, signal: ac.signal });
          let n = 0;
          try {
            for await (const c of s) if (c.choices[0]?.delta?.content !== undefined && ++n === 3) ac.abort();
          } catch (e) {
            out.abortCode = e.code;
          }
          out.afterAbort = (await ask(engine)).choices[0].token_ids;
          await engine.injectFault({ killShard: 1 });
          try {
            await ask(engine, undefined, 4);
          } catch (e) {
            out.crash = { code: e.code, fatal: e.fatal };
          }
        }
        await engine.unload();
      }
      return out;
    }, { hub: hub.url, text: PROMPT_TEXT });
    assert.equal(r.auto.info.exchange, 'shared');
    assert.equal(r.message.info.exchange, 'message');
    assert.equal(r.apart.info.exchange, 'shared');
    assert.deepEqual([r.auto.info.engineShard, r.message.info.engineShard, r.apart.info.engineShard], [true, true, false]);
    assert.deepEqual(r.auto.ids, A.cases[0].greedy_ids);
    assert.deepEqual(r.message.ids, A.cases[0].greedy_ids);
    assert.deepEqual(r.apart.ids, A.cases[0].greedy_ids);
    assert.equal(r.abortCode, 'aborted');
    assert.deepEqual(r.afterAbort, A.cases[0].greedy_ids);
    assert.deepEqual(r.crash, { code: 'worker_crashed', fatal: true });
    for (const x of [r.auto, r.message, r.apart]) {
      for (const part of [x.split.prompt, x.split.completion]) {
        // The slowest shard per stage, never below the shards' mean; both within the wait.
        assert.ok(part.stages > 0 && part.mean_shard_ms > 0, JSON.stringify(part));
        assert.ok(part.mean_shard_ms <= part.shard_ms + 0.1 && part.shard_ms <= part.wait_ms + 0.1, JSON.stringify(part));
      }
    }
    // Per decode stage, µs: the exchange (wait − slowest) + the imbalance (slowest − mean).
    const both = ({ split: { completion: c } }) => `${(((c.wait_ms - c.shard_ms) / c.stages) * 1000).toFixed(0)} + ${(((c.shard_ms - c.mean_shard_ms) / c.stages) * 1000).toFixed(0)} µs`;
    report(`Chromium, F32 fixture, 2 workers, isolated page: exchange + imbalance per decode stage ${both(r.auto)} shared, ${both(r.message)} postMessage (shard 0 in the engine worker), ${both(r.apart)} shared with every shard in a worker of its own`);
  } finally {
    await b.close();
    await hub.close();
  }
});
