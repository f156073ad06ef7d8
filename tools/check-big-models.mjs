#!/usr/bin/env node
// Files over 4 GiB in Chromium, split across workers (issue: "Every core and every file"), and the
// OPFS load → first token time against the time to read the same bytes from OPFS. Not in CI (it
// needs multi-GB files and minutes); prints Markdown for BENCHMARKS.md.
//
//   python3 tools/make_synthetic.py Q4_K_M /tmp/Q4_K_M.gguf     (9B-shaped, random weights, 5.24 GiB)
//   node tools/check-big-models.mjs /tmp/Q4_K_M.gguf [/tmp/Q8_0.gguf …] [--opfs] [--workers N]
//
// For each file: a local Hub stand-in (tests/browser/hub-server.mjs, no COOP/COEP) serves it;
// headless Chromium loads it with ClefEngine.load (the default worker count, or --workers) and
// greedily generates 8 tokens from a 16-token prompt. With --opfs (the first file only; the
// profile's quota must hold it): load it a second time from the OPFS cache and compare the time to
// the first token with a plain read of the cached pieces (createSyncAccessHandle().read into a
// buffer, in a worker) — the target is ≤ 2×; and a chat's first request a moment after a
// cached load (the engine's code warmed meanwhile, src/warm.rs) against the next one. CLEF_CHROMIUM_ARGS: more Chromium flags,
// space-separated (e.g. `--js-flags=--no-wasm-dynamic-tiering`).

import { basename } from 'node:path';
import { startHubServer } from '../tests/browser/hub-server.mjs';
import { ENV_ARGS, launch } from '../tests/browser/helpers.mjs';

const args = process.argv.slice(2);
const files = args.filter((a) => a.endsWith('.gguf'));
const opfs = args.includes('--opfs');
const wi = args.indexOf('--workers');
const workers = wi >= 0 ? Number(args[wi + 1]) : undefined;
if (!files.length) {
  console.error('usage: node tools/check-big-models.mjs FILE.gguf … [--opfs] [--workers N]');
  process.exit(2);
}

const repos = { 'synth/clef-flash-GGUF': Object.fromEntries(files.map((f) => [basename(f), { path: f }])) };
const hub = await startHubServer({ repos });
const b = await launch(hub.url, { args: ENV_ARGS });
const GiB = 2 ** 30;
console.log('| file | size | workers | context | load | wasm memory (all workers) | prompt tok/s | decode tok/s |');
console.log('|---|---|---|---|---|---|---|---|');
try {
  for (const [i, f] of files.entries()) {
    const cache = opfs && i === 0;
    const r = await b.page.evaluate(async ({ hub, file, workers, cache }) => {
      const t0 = performance.now();
      const engine = await ClefEngine.load(`synth/clef-flash-GGUF:${file}`, { hubUrl: hub, cache, contextLength: 1024, ...(workers ? { workers } : {}) });
      const loadMs = performance.now() - t0;
      const prompt = Array.from({ length: 16 }, (_, k) => 1000 + 37 * k);
      const c = await engine.completions.create({ prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
      const out = { info: engine.info, loadMs, usage: c.usage };
      await engine.unload();
      return out;
    }, { hub: hub.url, file: basename(f), workers, cache });
    const u = r.usage;
    console.log(`| ${basename(f)} | ${(r.info.fileSize / GiB).toFixed(2)} GiB | ${r.info.workers} (${r.info.workersReason}) | ${r.info.contextLength} | ${(r.loadMs / 1000).toFixed(1)} s | ${(r.info.stats.wasmMemoryBytes / GiB).toFixed(2)} GiB | ${u.prompt_tokens_per_second} | ${u.completion_tokens_per_second} |`);
    if (cache) {
      // From OPFS: load + the first token, against a plain read of the same bytes.
      const again = await b.page.evaluate(async ({ hub, file, workers }) => {
        const t0 = performance.now();
        const engine = await ClefEngine.load(`synth/clef-flash-GGUF:${file}`, { hubUrl: hub, contextLength: 1024, ...(workers ? { workers } : {}) });
        const loadMs = performance.now() - t0;
        const s = await engine.completions.create({ prompt: [1000, 1037, 1074], max_tokens: 1, temperature: 0, ignore_eos: true, stream: true });
        for await (const _ of s) break;
        const firstMs = performance.now() - t0;
        const { source, stats, workers: used } = engine.info;
        await engine.unload();
        // Two references, both in workers with sync access handles, 16 MiB at a time:
        // - a plain read of every cached piece into one reused buffer (the yardstick);
        // - the same bytes read into fresh wasm memories, one per worker (`nw` workers in parallel,
        //   each reading every nw-th 16 MiB block): what any load must at least do, page faults of
        //   the destination memory included.
        const reader = `
          onmessage = async ({ data: { k, nw, fresh } }) => {
            const root = await navigator.storage.getDirectory();
            const dir = await root.getDirectoryHandle('clef-cache');
            const B = 16 << 20;
            let buf = new Uint8Array(B);
            const handles = [];
            for await (const [, d] of dir.entries()) {
              if (d.kind !== 'directory') continue;
              for await (const [name, h] of d.entries()) if (name.startsWith('piece-')) handles.push(await h.createSyncAccessHandle({ mode: 'read-only' }));
            }
            const total = handles.reduce((a, h) => a + h.getSize(), 0);
            // Fresh memories of up to 4 GiB each (a wasm32 limit), as many as this worker's share needs.
            const mems = [];
            let mem = null;
            let at = 0;
            if (fresh) mems.push((mem = new WebAssembly.Memory({ initial: 0, maximum: 65536 })));
            postMessage({ ready: true });
            await new Promise((r) => (onmessage = r));
            let bytes = 0;
            let block = 0;
            const t = performance.now();
            for (const a of handles) {
              const n = a.getSize();
              for (let off = 0; off < n; off += B, block++) {
                if (block % nw !== k) continue;
                const len = Math.min(B, n - off);
                if (fresh) {
                  if (at + len > 65536 * 65536) {
                    mems.push((mem = new WebAssembly.Memory({ initial: 0, maximum: 65536 })));
                    at = 0;
                  }
                  if (at + len > mem.buffer.byteLength) mem.grow(Math.ceil((at + len - mem.buffer.byteLength) / 65536));
                  bytes += a.read(new Uint8Array(mem.buffer, at, len), { at: off });
                  at += len;
                } else bytes += a.read(buf.subarray(0, len), { at: off });
              }
            }
            const ms = performance.now() - t;
            for (const a of handles) a.close();
            postMessage({ bytes, ms });
          };`;
        const url = URL.createObjectURL(new Blob([reader], { type: 'text/javascript' }));
        const timeRead = async (nw, fresh) => {
          const ws = Array.from({ length: nw }, () => new Worker(url));
          const next = (w) => new Promise((r, j) => {
            w.onmessage = (e) => r(e.data);
            w.onerror = (e) => j(new Error(`reference reader: ${e.message}`)); // rather than waiting forever
          });
          // Start together, once every worker has opened its handles.
          const ready = ws.map(next);
          ws.forEach((w, k) => w.postMessage({ k, nw, fresh }));
          await Promise.all(ready);
          const t = performance.now();
          const done = ws.map(next);
          ws.forEach((w) => w.postMessage('go'));
          const rs = await Promise.all(done);
          const ms = performance.now() - t;
          ws.forEach((w) => w.terminate());
          return { bytes: rs.reduce((a, r) => a + r.bytes, 0), ms };
        };
        const read = await timeRead(1, false);
        const freshRead = await timeRead(used, true);
        // The first request of a chat: a moment after the load is ready (the engine warms its
        // code meanwhile, src/warm.rs), against the same request once more.
        const chat = await ClefEngine.load(`synth/clef-flash-GGUF:${file}`, { hubUrl: hub, contextLength: 1024, ...(workers ? { workers } : {}) });
        await new Promise((r) => setTimeout(r, 2000));
        const firstToken = async (prompt) => {
          const t = performance.now();
          const s = await chat.completions.create({ prompt, max_tokens: 1, temperature: 0, ignore_eos: true, stream: true });
          for await (const _ of s) break;
          return performance.now() - t;
        };
        const chatFirst = await firstToken([1000, 1037, 1074]);
        const chatLater = await firstToken([2000, 2037, 2074]);
        await chat.unload();
        return { loadMs, firstMs, source, read, freshRead, stats, used, chatFirst, chatLater };
      }, { hub: hub.url, file: basename(f), workers });
      console.log();
      console.log(`OPFS: ${basename(f)} loaded from the ${again.source} in ${(again.loadMs / 1000).toFixed(1)} s, first token at ${(again.firstMs / 1000).toFixed(1)} s; ` +
        `a plain read of the ${(again.read.bytes / GiB).toFixed(2)} GiB cached takes ${(again.read.ms / 1000).toFixed(1)} s ` +
        `(${(again.read.bytes / again.read.ms / 1e6).toFixed(2)} GB/s): ratio ${(again.firstMs / again.read.ms).toFixed(2)}×`);
      console.log(`The same bytes read into fresh wasm memories by ${again.used} workers in parallel (page faults included: the least any load does): ` +
        `${(again.freshRead.ms / 1000).toFixed(1)} s (${(again.freshRead.bytes / again.freshRead.ms / 1e6).toFixed(2)} GB/s); first token / that: ${(again.firstMs / again.freshRead.ms).toFixed(2)}×`);
      console.log();
      console.log(`A chat's first request 2 s after a cached load: its first token in ${Math.round(again.chatFirst)} ms; the next request's in ${Math.round(again.chatLater)} ms`);
      console.log(`load phases (ms): ${JSON.stringify(Object.fromEntries(Object.entries(again.stats.phaseMs).map(([k, v]) => [k, Math.round(v)])))}`);
    }
  }
} finally {
  await b.close();
  await hub.close();
}
