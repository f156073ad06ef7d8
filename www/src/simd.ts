// Which of the two wasm builds to run (build.sh makes both from the same crate):
//   clef_web_relaxed_bg.wasm  SIMD128 + relaxed SIMD (i16x8.relaxed_dot_i8x16_i7x16_s: 16 int8
//                             products per instruction): Chromium ≥ 114, Firefox (153 ESR
//                             measured), Node with --experimental-wasm-relaxed-simd
//   clef_web_bg.wasm          SIMD128 only: every browser with wasm SIMD (Safari — WebKitGTK 2.50's
//                             JavaScriptCore measured —, older Chromium and Firefox)
// A module using a relaxed instruction fails validation as a whole where relaxed SIMD is missing,
// so the choice is made up front by validating a 60-byte probe module (it is only validated, never
// run, so its instruction need not be one the kernels use):
//   (func (result v128) (i32x4.relaxed_dot_i8x16_i7x16_add_s (v128.const 0) (v128.const 0) (v128.const 0)))

export type SimdBuild = 'relaxed-simd' | 'simd128';

const PROBE = 'AGFzbQEAAAABBQFgAAF7AwIBAAo9ATsA/QwAAAAAAAAAAAAAAAAAAAAA/QwAAAAAAAAAAAAAAAAAAAAA/QwAAAAAAAAAAAAAAAAAAAAA/ZMCCw==';

/** The best build this JS engine can run. */
export function detectSimd(): SimdBuild {
  const bytes = Uint8Array.from(atob(PROBE), (c) => c.charCodeAt(0));
  return WebAssembly.validate(bytes) ? 'relaxed-simd' : 'simd128';
}

/** File name of a build's wasm (beside the worker script in www/dist, in www/pkg for Node tools).
 *  build.sh also emits this module as www/pkg/simd.js for www/cli.mjs and the JS tests. */
export function wasmFile(build: SimdBuild): string {
  return build === 'relaxed-simd' ? 'clef_web_relaxed_bg.wasm' : 'clef_web_bg.wasm';
}
