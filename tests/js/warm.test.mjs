// The warm-up a load builds (src/warm.rs, www/src/load/warm.ts) on the SIMD128 wasm build: the
// miniature of every fixture, whole and split, with the file's stored forms and the expanded ones,
// runs its five passes through the SIMD kernels (the native tests/warm.rs runs the scalar ones);
// `buildWarmUp` skips small models and loads that leave it too little room, and turns a failure
// into a warning and no warm-up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { importTs, initWasm, root } from './bundle.mjs';

const dir = join(root, '..', 'shared', 'fixtures', 'qwen35-tiny');
const fixtures = readdirSync(dir).filter((f) => f.endsWith('.gguf') && f !== 'A-imatrix.gguf').sort();
const { WarmUp } = await initWasm();
const { buildWarmUp, WARM_MIN_BYTES, WARM_ROOM } = await importTs('www/src/load/warm.ts');

test('every fixture\'s miniature runs its passes, whole and split', () => {
  assert.ok(fixtures.length >= 20);
  for (const f of fixtures) {
    const file = readFileSync(join(dir, f));
    for (const [shards, expand, band] of [[1, false, 0], [2, true, 50], [3, false, 0]]) {
      const w = new WarmUp(file, file.length, shards, expand, band);
      let passes = 1;
      try {
        while (w.step()) passes++;
      } finally {
        w.free();
      }
      assert.equal(passes, 5, `${f}, ${shards} shards`);
    }
  }
});

test('buildWarmUp: none for a small model or too little room, a warning and none for a bad header', () => {
  const file = readFileSync(join(dir, fixtures[0]));
  const warnings = [];
  assert.equal(buildWarmUp(file, file.length, WARM_MIN_BYTES - 1, WARM_ROOM, 2, false, 0, (m) => warnings.push(m)), null);
  assert.equal(buildWarmUp(file, file.length, WARM_MIN_BYTES, WARM_ROOM - 1, 2, false, 0, (m) => warnings.push(m)), null);
  const w = buildWarmUp(file, file.length, WARM_MIN_BYTES, WARM_ROOM, 2, false, 0, (m) => warnings.push(m));
  assert.ok(w);
  assert.equal(w.step(), true);
  w.free();
  assert.deepEqual(warnings, []);
  const bad = Uint8Array.from(file.subarray(0, 64)); // the header cut short
  assert.equal(buildWarmUp(bad, file.length, WARM_MIN_BYTES, WARM_ROOM, 2, false, 0, (m) => warnings.push(m)), null);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /could not warm the engine's code/);
});
