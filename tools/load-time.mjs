// Times ClefEngine.load of a local GGUF in Node and prints where the time went:
//   node --experimental-wasm-relaxed-simd tools/load-time.mjs FILE.gguf [WORKERS] [MEMORY_LIMIT_GIB]
// (www/dist from ./build.sh; a 512-token context so that the weights dominate; a memory limit per
// instance, e.g. to leave no room for the expanded IQ2_S form.) One JSON line: total ms,
// LoadStats.phaseMs, whether the workers read their own parts, the bytes they read, whether
// IQ2_S matrices were held expanded.
import { fileURLToPath } from 'node:url';

const [file, workers = '1', limitGiB] = process.argv.slice(2);
if (!file) {
  console.error('usage: node tools/load-time.mjs FILE.gguf [WORKERS] [MEMORY_LIMIT_GIB]');
  process.exit(2);
}
const { ClefEngine } = await import(fileURLToPath(new URL('../www/dist/clef.js', import.meta.url)));
const t = performance.now();
const memoryLimit = limitGiB ? Math.round(Number(limitGiB) * 2 ** 30 / 65536) * 65536 : undefined;
const engine = await ClefEngine.load(file, { workers: Number(workers), contextLength: 512, memoryLimit });
const ms = Math.round(performance.now() - t);
const s = engine.info.stats;
const phaseMs = Object.fromEntries(Object.entries(s.phaseMs).map(([k, v]) => [k, Math.round(v)]));
console.log(JSON.stringify({ file: file.split('/').pop(), workers: engine.info.workers, ms, phaseMs, pulledByWorkers: s.pulledByWorkers, pulledGiB: +(s.pulledBytes / 2 ** 30).toFixed(2), expanded: s.expanded }));
await engine.unload();
process.exit(0);
