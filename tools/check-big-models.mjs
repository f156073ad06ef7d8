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
// buffer, in a worker) — the target is ≤ 2×.

import { basename } from 'node:path';
import { startHubServer } from '../tests/browser/hub-server.mjs';
import { launch } from '../tests/browser/helpers.mjs';

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
const b = await launch(hub.url);
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
        const source = engine.info.source;
        const stats = engine.info.stats;
        await engine.unload();
        // A plain read of every cached piece, in a worker (sync access handles), 16 MiB at a time.
        const worker = new Worker(URL.createObjectURL(new Blob([`
          onmessage = async () => {
            const root = await navigator.storage.getDirectory();
            const dir = await root.getDirectoryHandle('clef-cache');
            const buf = new Uint8Array(16 << 20);
            let bytes = 0;
            const t = performance.now();
            for await (const [, d] of dir.entries()) {
              if (d.kind !== 'directory') continue;
              for await (const [name, h] of d.entries()) {
                if (!name.startsWith('piece-')) continue;
                const a = await h.createSyncAccessHandle();
                const n = a.getSize();
                for (let at = 0; at < n; at += buf.length) bytes += a.read(buf, { at });
                a.close();
              }
            }
            postMessage({ bytes, ms: performance.now() - t });
          };`], { type: 'text/javascript' })));
        const read = await new Promise((r) => { worker.onmessage = (e) => r(e.data); worker.postMessage(0); });
        worker.terminate();
        return { loadMs, firstMs, source, read, stats };
      }, { hub: hub.url, file: basename(f), workers });
      console.log();
      console.log(`OPFS: ${basename(f)} loaded from the ${again.source} in ${(again.loadMs / 1000).toFixed(1)} s, first token at ${(again.firstMs / 1000).toFixed(1)} s; ` +
        `a plain read of the ${(again.read.bytes / GiB).toFixed(2)} GiB cached takes ${(again.read.ms / 1000).toFixed(1)} s ` +
        `(${(again.read.bytes / again.read.ms / 1e6).toFixed(2)} GB/s): ratio ${(again.firstMs / again.read.ms).toFixed(2)}×`);
      console.log();
      console.log(`load phases (ms): ${JSON.stringify(Object.fromEntries(Object.entries(again.stats.phaseMs).map(([k, v]) => [k, Math.round(v)])))}`);
    }
  }
} finally {
  await b.close();
  await hub.close();
}
