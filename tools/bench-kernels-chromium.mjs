// `clef bench-kernels` inside headless Chromium: the same command as
// `node --experimental-wasm-relaxed-simd www/cli.mjs bench-kernels …`, run by the engine and
// code generator that users' pages get (Chromium's V8 is newer than Node 20's, and the two
// compile the same wasm differently). Both builds, relaxed SIMD first.
//
//   node tools/bench-kernels-chromium.mjs [--type Q2_K] [--ms 2000] [--prefill T] [--gemm narrow|wide] [--build relaxed-simd|simd128]
//
// `--gemm` (the int8 prompt GEMM's profile) defaults to wide, what the browser engine sets.
// Needs www/pkg (./build.sh), /usr/bin/chromium (or $CHROMIUM) and npm's playwright-core.
// CLEF_CHROMIUM_ARGS: more Chromium flags, space-separated. To see V8's code of a kernel, from
// a scratch directory (V8 writes its jit-*.dump files into the current one):
//   CLEF_CHROMIUM_ARGS="--js-flags=--perf-prof --no-sandbox" perf record -k 1 -e cpu-clock -o perf.data -- \
//     node …/tools/bench-kernels-chromium.mjs --type Q2_K --rows 65536 --build relaxed-simd
//   perf inject --jit -i perf.data -o jit.data; perf report -i jit.data --no-children --sort sym
//   perf annotate -i jit.data --stdio -s 'JS:wasm-function[N]-N-turbofan'

import { startHubServer } from '../tests/browser/hub-server.mjs';
import { ENV_ARGS, launch } from '../tests/browser/helpers.mjs';

const argv = process.argv.slice(2);
const only = argv.indexOf('--build') >= 0 ? argv.splice(argv.indexOf('--build'), 2)[1] : null;
if (!argv.includes('--gemm')) argv.push('--gemm', 'wide');
const builds = [['relaxed-simd', 'clef_web_relaxed_bg.wasm'], ['simd128', 'clef_web_bg.wasm']].filter(([b]) => !only || b === only);

const server = await startHubServer();
const b = await launch(server.url, { args: ENV_ARGS });
try {
  for (const [build, file] of builds) {
    const out = await b.page.evaluate(
      async ({ build, file, args }) => {
        const glue = await import(`/pkg/clef_web.js?${build}`);
        await glue.default({ module_or_path: `/pkg/${file}` });
        let text = '';
        const host = { write: (s) => (text += s), note: (s) => (text += s), size: () => 0, readAt: () => {} };
        glue.runCli(['bench-kernels', ...args], host);
        return text;
      },
      { build, file, args: argv },
    );
    process.stdout.write(`${build} (Chromium ${b.ctx.browser()?.version() ?? ''}):\n${out}`);
  }
} finally {
  await b.close();
  await server.close();
}
