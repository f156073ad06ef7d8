#!/usr/bin/env node
// The clef command line on the wasm build, under Node:
//   ./build.sh && node www/cli.mjs <command> [options]      (same commands and output as `clef`)
// Runs the relaxed-SIMD build where Node validates it (Node 20/22: `node --experimental-wasm-relaxed-simd
// www/cli.mjs …`), else the SIMD128 build; CLEF_WASM=simd128 or CLEF_WASM=relaxed-simd forces one
// (see www/src/simd.ts; `bench-kernels` prints which one ran).
//   node www/cli.mjs serve --model F [--head H] [--port P] [--workers N]   OpenAI's and SystemOne's APIs over HTTP (www/serve.mjs; needs www/dist)
//   node www/cli.mjs generate … --workers N [--exchange shared|message] [--engine-shard on|off] [--band PCT] [--trace-stages]
//       the model split across N threads (the engine's own and N − 1 worker_threads; --engine-shard off: N worker_threads
//       besides it); --band, --trace-stages: the `band` and `traceStages` load options (--json shows usage.split)
import { closeSync, fstatSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { initSync, runCli } from './pkg/clef_web.js';
import { detectSimd, wasmFile } from './pkg/simd.js';

// This process is ours: compile every wasm function with V8's optimizing tier on its first call
// (before anything is compiled). With the baseline tier first, the optimized code is compiled in
// the background, and with every core computing (a split model) that waits: a 32-layer Q2_K file
// decoded 4.7 tok/s on 2 workers against 5.9 with this flag (BENCHMARKS.md). Library users keep
// their process's flags.
setFlagsFromString('--no-liftoff');

if (process.argv[2] === 'serve') {
  const { serve } = await import('./serve.mjs');
  try {
    await serve(process.argv.slice(3));
  } catch (e) {
    process.stderr.write(`error: ${e?.message ?? e}\n`);
    process.exit(1);
  }
  // The server runs until the process is stopped.
  await new Promise(() => {});
}

const build = process.env.CLEF_WASM || detectSimd();
if (build !== 'simd128' && build !== 'relaxed-simd') {
  process.stderr.write(`error: CLEF_WASM must be simd128 or relaxed-simd, not '${build}'\n`);
  process.exit(2);
}
initSync({ module: readFileSync(new URL(`./pkg/${wasmFile(build)}`, import.meta.url)) });

const files = new Map();
const fd = (path) => {
  if (!files.has(path)) files.set(path, openSync(path, 'r'));
  return files.get(path);
};

const host = {
  size: (path) => fstatSync(fd(path)).size,
  // `buf` is a view of wasm memory: the file is read straight into the model's weight shards.
  readAt(path, offset, buf) {
    let done = 0;
    while (done < buf.length) {
      const n = readSync(fd(path), buf, done, buf.length - done, offset + done);
      if (n === 0) throw new Error(`${path}: unexpected end of file at byte ${offset + done}`);
      done += n;
    }
  },
  write(s) {
    let b = Buffer.from(s, 'utf8');
    while (b.length) b = b.subarray(writeSync(1, b));
  },
  note(s) {
    process.stderr.write(s);
  },
};

/**
 * `generate … --workers N`: the model split across N worker_threads (tensor parallelism), through
 * the browser package's engine (www/dist/clef.js, in-process in Node) — the same JSON as `generate --json`.
 */
async function generateSplit(args) {
  const opt = (k) => {
    const i = args.indexOf(`--${k}`);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const flag = (k) => args.includes(`--${k}`);
  const known = new Set(['model', 'workers', 'exchange', 'engine-shard', 'band', 'trace-stages', 'tokens', 'prompt', 'chat', 'no-think', 'max-tokens', 'temperature', 'seed', 'ctx', 'ignore-eos', 'json']);
  for (const a of args.slice(1)) if (a.startsWith('--') && !known.has(a.slice(2))) throw new Error(`generate --workers: unknown option ${a}`);
  const workers = Number(opt('workers'));
  if (!Number.isInteger(workers) || workers < 1) throw new Error('--workers must be a positive integer');
  const { ClefEngine } = await import(new URL('./dist/clef.js', import.meta.url).href);
  const ctx = opt('ctx');
  const engine = await ClefEngine.load(opt('model'), { workers, ...(opt('exchange') ? { exchange: opt('exchange') } : {}), ...(opt('engine-shard') ? { engineShard: opt('engine-shard') !== 'off' } : {}), ...(opt('band') ? { band: Number(opt('band')) } : {}), traceStages: flag('trace-stages'), ...(ctx ? { contextLength: Number(ctx) } : {}) });
  try {
    const params = {
      max_tokens: Number(opt('max-tokens') ?? 64), temperature: Number(opt('temperature') ?? 0), seed: opt('seed') ? Number(opt('seed')) : undefined,
      ignore_eos: flag('ignore-eos'), return_token_ids: true,
    };
    let r;
    if (opt('tokens')) {
      r = await engine.completions.create({ prompt: opt('tokens').split(',').map(Number), ...params });
    } else if (flag('chat')) {
      r = await engine.chat.completions.create({ messages: [{ role: 'user', content: opt('prompt') }], enable_thinking: !flag('no-think'), ...params });
    } else {
      r = await engine.completions.create({ prompt: opt('prompt'), ...params });
    }
    const c = r.choices[0];
    const text = c.text ?? c.message?.content ?? '';
    const u = r.usage;
    if (flag('json')) {
      host.write(JSON.stringify({
        tokens: c.token_ids, text, finish_reason: c.finish_reason, workers: engine.info.workers, exchange: engine.info.exchange, engineShard: engine.info.engineShard, band: engine.info.stats.band, expanded: engine.info.stats.expanded, split: u.split,
        timings: {
          prompt_tokens: u.prompt_tokens, prompt_ms: u.prompt_ms, prompt_tokens_per_s: u.prompt_tokens_per_second,
          decode_ms: u.completion_ms, decode_tokens_per_s: u.completion_tokens_per_second,
        },
      }) + '\n');
    } else host.write(text + '\n');
  } finally {
    await engine.unload();
  }
}

try {
  const args = process.argv.slice(2);
  if (args[0] === 'generate' && args.includes('--workers')) await generateSplit(args);
  else runCli(args, host);
} catch (e) {
  const msg = (e instanceof Error ? e.message : String(e)).split('\n')[0];
  process.stderr.write(`error: ${msg}\n`);
  process.exitCode = 1;
} finally {
  for (const f of files.values()) closeSync(f);
}
