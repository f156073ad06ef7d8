// The wasm build (SIMD128 kernels) against the same fixtures as the native tests, through the
// command line's entry point (`runCli`, what www/cli.mjs calls), plus the real `node www/cli.mjs`
// process for output/exit-code behaviour and native ↔ wasm output equality.
// The relaxed-SIMD build runs the same tests with
//   CLEF_WASM=relaxed-simd node --experimental-wasm-relaxed-simd tests/js/cli.test.mjs   (tests/run.sh)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { initSync, runCli } from '../../www/pkg/clef_web.js';
import { wasmFile } from '../../www/pkg/simd.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const fixtures = join(root, '..', 'shared', 'fixtures', 'qwen35-tiny');
const build = process.env.CLEF_WASM || 'simd128';
initSync({ module: readFileSync(join(root, 'www/pkg', wasmFile(build))) });

/** Runs one command in-process on the wasm build; returns stdout. */
function clef(...args) {
  let out = '';
  const fds = new Map();
  const fd = (p) => (fds.has(p) ? fds.get(p) : fds.set(p, openSync(p, 'r')).get(p));
  const host = {
    size: (p) => fstatSync(fd(p)).size,
    readAt(p, offset, buf) {
      let done = 0;
      while (done < buf.length) {
        const n = readSync(fd(p), buf, done, buf.length - done, offset + done);
        if (n === 0) throw new Error('unexpected end of file');
        done += n;
      }
    },
    write: (s) => { out += s; },
  };
  try {
    runCli(args.map(String), host);
  } finally {
    for (const f of fds.values()) closeSync(f);
  }
  return out;
}

const json = (p) => JSON.parse(readFileSync(p, 'utf8'));
const relL2 = (a, b) => {
  let num = 0, den = 0;
  for (let i = 0; i < b.length; i++) { num += (a[i] - b[i]) ** 2; den += b[i] ** 2; }
  return Math.sqrt(num / den);
};

const models = readdirSync(fixtures)
  .filter((f) => f.endsWith('.gguf') && existsSync(join(fixtures, f.replace('.gguf', '.transformers-dequant.json'))))
  .map((f) => f.replace('.gguf', ''))
  .sort();

test('fixtures are present', () => assert.ok(models.length >= 20, `found ${models.length}`));

for (const name of models) {
  test(`${name}: wasm logits vs the exact reference (exact) and vs llama.cpp's error (fast)`, () => {
    const model = join(fixtures, `${name}.gguf`);
    const tdq = json(join(fixtures, `${name}.transformers-dequant.json`)).cases;
    const llama = json(join(fixtures, `${name}.llama.json`)).cases;
    let ours = 0, theirs = 0;
    tdq.forEach((c, i) => {
      const ids = c.prompt_ids.join(',');
      const exact = JSON.parse(clef('logits', '--model', model, '--tokens', ids, '--precision', 'exact')).logits[0];
      const e = relL2(exact, c.last_logits);
      assert.ok(e < 1e-5, `exact prompt ${i}: rel L2 ${e}`);
      const fast = JSON.parse(clef('logits', '--model', model, '--tokens', ids)).logits[0];
      ours += relL2(fast, c.last_logits);
      theirs += relL2(llama[i].last_logits, c.last_logits);
    });
    assert.ok(ours <= theirs * 1.1 + 1e-6, `fast mean rel L2 ${ours / 3} vs llama.cpp ${theirs / 3}`);
  });
}

test('F32: greedy tokens identical to llama.cpp in wasm', () => {
  const model = join(fixtures, 'A-F32.gguf');
  for (const c of json(join(fixtures, 'A-F32.llama.json')).cases) {
    const out = JSON.parse(clef('generate', '--model', model, '--tokens', c.prompt_ids.join(','), '--max-tokens', 16, '--ignore-eos', '--json'));
    assert.deepEqual(out.tokens, c.greedy_ids);
  }
});

test('node www/cli.mjs and the native binary print the same info; errors are one line with exit 1', () => {
  const model = join(fixtures, 'A-IQ2_M.gguf');
  const wasm = execFileSync('node', [...process.execArgv, join(root, 'www/cli.mjs'), 'info', '--model', model], { encoding: 'utf8' });
  const native = join(root, 'target/release/clef');
  if (existsSync(native)) {
    assert.equal(wasm, execFileSync(native, ['info', '--model', model], { encoding: 'utf8' }));
  }
  const info = JSON.parse(wasm);
  assert.equal(info.architecture, 'qwen35');
  assert.equal(info.tensor_count, 56);
  const bad = spawnSync('node', [...process.execArgv, join(root, 'www/cli.mjs'), 'info', '--model', join(root, 'Cargo.toml')], { encoding: 'utf8' });
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /^error: .*\n$/);
  const usage = spawnSync('node', [...process.execArgv, join(root, 'www/cli.mjs'), 'frobnicate'], { encoding: 'utf8' });
  assert.equal(usage.status, 1);
});

test('bench-kernels --json lists every quantized type with SIMD and scalar figures', () => {
  const out = JSON.parse(clef('bench-kernels', '--json', '--ms', '1'));
  assert.equal(out.simd, build);
  const types = out.kernels.map((k) => k.type);
  for (const t of ['F32', 'Q1_0', 'Q2_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'IQ1_S', 'IQ1_M', 'IQ2_XXS', 'IQ2_XS', 'IQ2_S', 'IQ3_S']) {
    assert.ok(types.includes(t), `${t} missing from ${types}`);
  }
  for (const k of out.kernels) {
    assert.ok(k.simd_gbps > 0 && k.scalar_gbps > 0, JSON.stringify(k));
    // The decode loop reading four streams of rows: quantized types only.
    assert.equal(k.streams_gbps === null, k.type === 'F32' || k.type === 'F16' || k.type === 'BF16', JSON.stringify(k));
  }
  // Matrices larger than a wasm32 allocation can hold: a clear error, not a crash.
  const big = spawnSync('node', [...process.execArgv, join(root, 'www/cli.mjs'), 'bench-kernels', '--rows', '131072', '--ms', '1'], { encoding: 'utf8' });
  assert.equal(big.status, 1);
  assert.match(big.stderr, /^error: --rows 131072: a F32 matrix would take 2\.0 GiB/);
});

test('self-test: every fast kernel of this build equals its scalar reference, decoders bit-exact', () => {
  const out = JSON.parse(clef('self-test', '--rows', '300'));
  assert.equal(out.simd, build);
  // The int8 GEMM's dot-add form is checked too where it runs: only in the relaxed build, and there
  // at least with V8's optimizing tier alone (Node 20's baseline tier miscomputes its instruction, and
  // the engine's own check then keeps the form off).
  if (build !== 'relaxed-simd') assert.equal(out.dot_add, false);
  else if (process.execArgv.includes('--no-liftoff')) assert.equal(out.dot_add, true);
  assert.deepEqual(out.kernels.filter((k) => !k.ok), []);
  assert.ok(out.ok && out.kernels.length >= 21);
});

test('self-test through www/cli.mjs (V8\'s optimizing tier only): the relaxed build runs and checks the dot-add form', () => {
  const r = spawnSync('node', [...process.execArgv, join(root, 'www/cli.mjs'), 'self-test', '--rows', '60'], { encoding: 'utf8', env: { ...process.env, CLEF_WASM: build } });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.dot_add, build === 'relaxed-simd');
  assert.deepEqual(out.kernels.filter((k) => !k.ok), []);
});

test('tokenize in wasm: every fixture string gives the Hugging Face ids (specials parsed) and llama.cpp ids (not parsed)', () => {
  const vocab = join(root, '..', 'shared', 'fixtures', 'tokenizer', 'qwen35-vocab.gguf');
  const { cases } = json(join(root, '..', 'shared', 'fixtures', 'tokenizer', 'tokenizer_fixtures.json'));
  assert.ok(cases.length >= 60);
  for (const c of cases) {
    const text = Buffer.from(c.utf8_hex, 'hex').toString('utf8');
    const hf = JSON.parse(clef('tokenize', '--model', vocab, '--text', text, '--special')).ids;
    assert.deepEqual(hf, c.hf, `special: ${JSON.stringify(text)}`);
    const plain = JSON.parse(clef('tokenize', '--model', vocab, '--text', text)).ids;
    // With specials off, llama.cpp differs from HF only where NFC changes the text.
    const want = c.nfc_changes_text ? c.hf : c.llama_no_parse_special;
    assert.deepEqual(plain, want, `plain: ${JSON.stringify(text)}`);
  }
});
