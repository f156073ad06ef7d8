// Imports www/src TypeScript modules in Node tests: esbuild bundles them on the fly, leaving the
// wasm glue (www/pkg/clef_web.js, built by ./build.sh) as one shared external module that the
// test initialises with `initWasm()`.

import { build } from 'esbuild';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const glue = pathToFileURL(join(root, 'www', 'pkg', 'clef_web.js')).href;

/** Bundles the given www/src files (paths relative to the repository) and imports all their exports. */
export async function importTs(...files) {
  return import(pathToFileURL(await bundleTs(...files)).href);
}

/** Bundles the given www/src files into one ES module re-exporting them; returns its path (for a worker, say). */
export async function bundleTs(...files) {
  const contents = files.map((f) => `export * from ${JSON.stringify('./' + f)};`).join('\n');
  const out = await build({
    stdin: { contents, resolveDir: root, loader: 'ts', sourcefile: 'entry.ts' },
    bundle: true, format: 'esm', write: false, logLevel: 'silent', target: 'es2022',
    plugins: [{ name: 'wasm-glue', setup(b) { b.onResolve({ filter: /pkg\/clef_web\.js$/ }, () => ({ path: glue, external: true })); } }],
  });
  const file = join(mkdtempSync(join(tmpdir(), 'clef-ts-')), 'bundle.mjs');
  writeFileSync(file, out.outputFiles[0].text);
  return file;
}

let ready = false;
/** Instantiates the SIMD128 wasm build once (what the bundled modules import). */
export async function initWasm() {
  const g = await import(glue);
  if (!ready) g.initSync({ module: readFileSync(join(root, 'www', 'pkg', 'clef_web_bg.wasm')) });
  ready = true;
  return g;
}
