// `decide` on the wasm build (SIMD128; the relaxed-SIMD build with CLEF_WASM=relaxed-simd), through the
// command line's entry point (`runCli`), against llama.cpp's SystemOne responses for fixture A
// (../shared/fixtures/clef, see its README): same choices, probabilities / confidences / score values /
// noul within 2e-5 (the native tests/clef.rs bound: our backbone vs llama.cpp's flash-attention numerics),
// the head-less form (qwen35 GGUF + joint_head.safetensors) identical to the clef GGUF, a head-less file
// without its head answering by the approximate label readout (marked, and said on stderr), and typed
// errors from `node www/cli.mjs`. The generated files come from tools/make_clef_fixtures.sh (run when missing).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, fstatSync, mkdtempSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { initSync, runCli } from '../../www/pkg/clef_web.js';
import { wasmFile } from '../../www/pkg/simd.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const shared = join(root, '..', 'shared', 'fixtures');
const gen = join(root, 'target', 'clef-fixtures');
const build = process.env.CLEF_WASM || 'simd128';
initSync({ module: readFileSync(join(root, 'www/pkg', wasmFile(build))) });

if (!existsSync(join(gen, 'A-head', 'joint_head.safetensors'))) {
  execFileSync('bash', [join(root, 'tools/make_clef_fixtures.sh'), gen], { cwd: root, stdio: 'inherit' });
}
const clefA = join(gen, 'clef-A-F32.gguf');
const fixture = JSON.parse(readFileSync(join(shared, 'clef/A/requests.json'), 'utf8'));
const tmp = mkdtempSync(join(tmpdir(), 'clef-decide-'));

/** Runs one command in-process on the wasm build; returns stdout (stderr notices go to `notes`). */
const notes = [];
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
    note: (s) => { notes.push(s); },
  };
  try {
    runCli(args.map(String), host);
  } finally {
    for (const f of fds.values()) closeSync(f);
  }
  return out;
}

function requestFile(c) {
  const p = join(tmp, `${c.id}.json`);
  writeFileSync(p, JSON.stringify(c.request));
  return p;
}

/** Max |a − b| over two responses of the same shape; keys (and their order) and strings must match. */
function maxDiff(a, b, path = '') {
  if (typeof b === 'number') {
    assert.equal(typeof a, 'number', path);
    return Math.abs(a - b);
  }
  if (b && typeof b === 'object') {
    assert.deepEqual(Object.keys(a), Object.keys(b), `${path}: keys`);
    return Math.max(0, ...Object.keys(b).map((k) => maxDiff(a[k], b[k], `${path}.${k}`)));
  }
  assert.equal(a, b, path);
  return 0;
}

test('decide: every fixture A case matches llama.cpp within 2e-5', () => {
  let worst = 0;
  for (const c of fixture.cases) {
    const ours = JSON.parse(clef('decide', '--model', clefA, '--request', requestFile(c)));
    const d = maxDiff(ours, c.response, c.id);
    assert.ok(d <= 2e-5, `${c.id}: differs by ${d}`);
    worst = Math.max(worst, d);
  }
  console.log(`wasm (${build}) decide vs llama.cpp: max |Δ| = ${worst.toExponential(2)}`);
});

test('decide: the head-less form (qwen35 GGUF + joint_head.safetensors) answers identically', () => {
  for (const c of fixture.cases.slice(0, 3)) {
    const a = JSON.parse(clef('decide', '--model', clefA, '--request', requestFile(c)));
    const b = JSON.parse(clef('decide', '--model', join(shared, 'qwen35-tiny/A-F32.gguf'), '--head', join(gen, 'A-head/joint_head.safetensors'), '--request', requestFile(c)));
    b.model = a.model;
    assert.deepEqual(b, a, c.id);
  }
});

test('decide: typed errors, exit status 1 (node www/cli.mjs)', () => {
  const cases = [
    [{ state: 's', questions: { q: { type: 'score', instructions: 'x', criteria: ['only'] } } }, 'invalid_decision: questions.q: "criteria" must be an array of 2 to 10 levels'],
    [{ questions: {} }, 'invalid_decision: "state" must be provided'],
  ];
  for (const [body, msg] of cases) {
    const p = join(tmp, 'bad.json');
    writeFileSync(p, JSON.stringify(body));
    const r = spawnSync(process.execPath, [...process.execArgv, join(root, 'www/cli.mjs'), 'decide', '--model', clefA, '--request', p], { encoding: 'utf8', env: { ...process.env, CLEF_WASM: build } });
    assert.equal(r.status, 1, r.stderr);
    assert.equal(r.stderr.trim(), `error: ${msg}`);
  }
});

test('decide: a head-less file without --head answers by the approximate label readout, and says so', () => {
  const c = fixture.cases[0];
  const native = spawnSync(process.execPath, [...process.execArgv, join(root, 'www/cli.mjs'), 'decide', '--model', join(shared, 'qwen35-tiny/A-F32.gguf'), '--request', requestFile(c)], { encoding: 'utf8', env: { ...process.env, CLEF_WASM: build } });
  assert.equal(native.status, 0, native.stderr);
  assert.match(native.stderr, /^approximate: this model has no decision head/);
  const r = JSON.parse(native.stdout);
  assert.equal(r.approximate, true);
  assert.deepEqual(Object.keys(r.answers), Object.keys(c.request.questions));
  for (const [id, q] of Object.entries(c.request.questions)) {
    const a = r.answers[id];
    if (q.type === 'noul') assert.ok(a.noul >= 0 && a.noul <= 1);
    else assert.ok(Math.abs(Object.values(a.probabilities).reduce((s, p) => s + p, 0) - 1) < 1e-9, id);
  }
  // In-process: the same answers; the notice through the host.
  notes.length = 0;
  assert.deepEqual(JSON.parse(clef('decide', '--model', join(shared, 'qwen35-tiny/A-F32.gguf'), '--request', requestFile(c))), r);
  assert.equal(notes.length, 1);
  // A file with its head says nothing of the kind.
  notes.length = 0;
  assert.equal(JSON.parse(clef('decide', '--model', clefA, '--request', requestFile(c))).approximate, undefined);
  assert.equal(notes.length, 0);
});
