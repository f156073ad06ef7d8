// The three ways the int8 prompt GEMM can multiply 16 codes by 16 activation bytes, timed alone
// in the prompt GEMM's register shape (2 weight vectors × 4 activation vectors loaded per step,
// 8 independent sums), in headless Chromium and in this Node (BENCHMARKS.md, "On a Zen 5 EPYC"):
//   dotadd   i32x4.relaxed_dot_i8x16_i7x16_add_s                   (one vpdpbusd with AVX-VNNI)
//   widen    i16x8.relaxed_dot_i8x16_i7x16_s, i32x4.dot_i16x8_s by the group scales, i32x4.add
//   i16sum   i16x8.relaxed_dot_i8x16_i7x16_s, i16x8.add              (widened every ksum steps)
// Prints G instructions a second per form (5 rounds), and whether the engine computes the dot-add
// as the spec does (dot([−3;16], [5;16]) + 7 = −53 per lane).
//
//   node --experimental-wasm-relaxed-simd tools/bench-dot-forms.mjs
//
// Needs npm's binaryen (wasm-as, installed by tools/setup.sh), /usr/bin/chromium and playwright-core.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch } from '../tests/browser/helpers.mjs';

const R = 2;
const C = 4;
const forms = {
  dotadd: (a, w, c) => `(i32x4.relaxed_dot_i8x16_i7x16_add_s ${a} ${w} ${c})`,
  widen: (a, w, c) => `(i32x4.add ${c} (i32x4.dot_i16x8_s (i16x8.relaxed_dot_i8x16_i7x16_s ${a} ${w}) (local.get $s)))`,
  i16sum: (a, w, c) => `(i16x8.add ${c} (i16x8.relaxed_dot_i8x16_i7x16_s ${a} ${w}))`,
};

function loop(name, op) {
  const acc = [];
  for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) acc.push(`c${r}${c}`);
  const locals = [...acc, ...Array.from({ length: C }, (_, c) => `a${c}`), ...Array.from({ length: R }, (_, r) => `w${r}`)];
  const loads = [
    ...Array.from({ length: R }, (_, r) => `(local.set $w${r} (v128.load offset=${16 * r} (local.get $p)))`),
    ...Array.from({ length: C }, (_, c) => `(local.set $a${c} (v128.load offset=${8192 + 16 * c} (local.get $p)))`),
  ];
  const body = acc.map((x) => `(local.set $${x} ${op(`(local.get $a${x[2]})`, `(local.get $w${x[1]})`, `(local.get $${x})`)})`);
  const sum = acc.slice(1).reduce((s, x) => `(i32x4.add ${s} (local.get $${x}))`, `(local.get $${acc[0]})`);
  return `(func (export "${name}") (param $n i32) (result i32) (local $p i32) (local $s v128) ${locals.map((l) => `(local $${l} v128)`).join(' ')}
    (local.set $s (v128.load (i32.const 32)))
    (loop $l ${loads.join(' ')}
      ;; the next 64 bytes of an 8 KiB window: operands that change every step
      (local.set $p (i32.and (i32.add (local.get $p) (i32.const 64)) (i32.const 8128)))
      ${body.join(' ')}
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l (local.get $n)))
    (i32x4.extract_lane 0 ${sum}))`;
}

const wat = `(module (memory (export "memory") 1)
  ${Object.entries(forms).map(([k, f]) => loop(k, f)).join('\n  ')}
  (func (export "check") (param $a i32) (param $w i32) (param $c i32) (result i32)
    (i32x4.extract_lane 0 (i32x4.relaxed_dot_i8x16_i7x16_add_s (i8x16.splat (local.get $a)) (i8x16.splat (local.get $w)) (i32x4.splat (local.get $c))))))`;

const dir = mkdtempSync(join(tmpdir(), 'clef-dot-'));
let bytes;
try {
  writeFileSync(join(dir, 'dot.wat'), wat);
  execFileSync('npx', ['--no-install', 'wasm-as', '--enable-simd', '--enable-relaxed-simd', join(dir, 'dot.wat'), '-o', join(dir, 'dot.wasm')]);
  bytes = [...readFileSync(join(dir, 'dot.wasm'))];
} finally {
  rmSync(dir, { recursive: true, force: true });
}

// Runs in the page and in Node alike.
async function measure(bytes, names) {
  const { instance } = await WebAssembly.instantiate(new Uint8Array(bytes));
  const e = instance.exports;
  const m = new Uint8Array(e.memory.buffer);
  for (let i = 0; i < 16384; i++) m[i] = (i * 7) % 100; // codes and activations 0..99
  const out = { dotadd_exact: e.check(-3, 5, 7) === -53 };
  const n = 20_000_000;
  for (const f of names) e[f](2_000_000); // compile, tier up and warm up
  for (let round = 0; round < 5; round++)
    for (const f of names) {
      const t = performance.now();
      e[f](n);
      (out[f] ??= []).push(+((n * 8) / (performance.now() - t) / 1e6).toFixed(2));
    }
  return out;
}

const names = Object.keys(forms);
const b = await launch(null);
try {
  const chromium = await b.page.evaluate(`(${measure})(${JSON.stringify(bytes)}, ${JSON.stringify(names)})`);
  console.log(`Chromium ${b.ctx.browser()?.version() ?? ''}: ${JSON.stringify(chromium)}`);
} finally {
  await b.close();
}
console.log(`Node ${process.version} (${process.execArgv.join(' ')}): ${JSON.stringify(await measure(bytes, names))}`);
