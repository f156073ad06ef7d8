#!/usr/bin/env node
// The clef command line on the wasm build, under Node:
//   ./build.sh && node www/cli.mjs <command> [options]      (same commands and output as `clef`)
// Runs the relaxed-SIMD build where Node validates it (Node 20/22: `node --experimental-wasm-relaxed-simd
// www/cli.mjs …`), else the SIMD128 build; CLEF_WASM=simd128 or CLEF_WASM=relaxed-simd forces one
// (see www/src/simd.ts; `bench-kernels` prints which one ran).
//   node www/cli.mjs serve --model F [--port P]          OpenAI's API over HTTP (www/serve.mjs; needs www/dist)
import { closeSync, fstatSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { initSync, runCli } from './pkg/clef_web.js';
import { detectSimd, wasmFile } from './pkg/simd.js';

if (process.argv[2] === 'serve') {
  const { serve } = await import('./serve.mjs');
  try {
    await serve(process.argv.slice(3));
  } catch (e) {
    process.stderr.write(`error: ${e?.message ?? e}\n`);
    process.exit(1);
  }
} else {
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
  };

  try {
    runCli(process.argv.slice(2), host);
  } catch (e) {
    const msg = (e instanceof Error ? e.message : String(e)).split('\n')[0];
    process.stderr.write(`error: ${msg}\n`);
    process.exitCode = 1;
  } finally {
    for (const f of files.values()) closeSync(f);
  }
}
