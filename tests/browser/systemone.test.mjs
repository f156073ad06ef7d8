// Decisions through the browser package (www/dist/clef.js, in-process under Node) on Clef fixture A
// (../shared/fixtures/clef; the generated files from tools/make_clef_fixtures.sh):
//   engine.decide = llama.cpp's SystemOne responses (every case, same tolerance as tests/js/decide.test.mjs),
//   progress, abort, typed errors for invalid requests, the engine still working after each;
//   a head-less qwen35 file answering by the approximate label readout (approximate: true) until its
//   joint_head.safetensors is attached (from a path, and from a local Hub with a dropped connection,
//   sha256 verified), then answering as the clef GGUF does;
//   the npm `@typesafe-ai/sdk`, unchanged, through createSystemOneFetch and through `serve`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { TypeSafeClient, UnprocessableEntityError, BadRequestError, APIError, choice, noul, score } from '@typesafe-ai/sdk';
import { startHubServer } from './hub-server.mjs';
import { PROMPT_TEXT, fixturesDir, launch, repoRoot, skipReason } from './helpers.mjs';

const dist = join(repoRoot, 'www', 'dist', 'clef.js');
const skip = existsSync(dist) ? false : 'www/dist is not built (./build.sh)';
const gen = join(repoRoot, 'target', 'clef-fixtures');
if (!skip && !existsSync(join(gen, 'A-head', 'joint_head.safetensors'))) {
  execFileSync('bash', [join(repoRoot, 'tools/make_clef_fixtures.sh'), gen], { cwd: repoRoot, stdio: 'inherit' });
}
const CLEF_A = join(gen, 'clef-A-F32.gguf');
const HEADLESS_A = join(fixturesDir, 'A-F32.gguf');
const HEAD_A = { safetensors: join(gen, 'A-head', 'joint_head.safetensors'), config: join(gen, 'A-head', 'joint_head_config.json') };
const fixture = skip ? { cases: [] } : JSON.parse(readFileSync(join(repoRoot, '..', 'shared', 'fixtures', 'clef', 'A', 'requests.json'), 'utf8'));
const caseById = (id) => fixture.cases.find((c) => c.id === id);
const load = async () => import(dist);

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

/** A response without this engine's extras and with the oracle's model name. */
const comparable = (r, model) => {
  const { timings, ...rest } = r;
  return { ...rest, model };
};

/** Requests every validator must refuse, with the code and HTTP status they get. */
const INVALID = (() => {
  const q = (criteria, type) => JSON.stringify({ state: 's', questions: { q: { type, instructions: 'x', criteria } } });
  const many = (n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`o${i}`, null]));
  return [
    ['unknown type', q(null, 'maybe'), 'invalid_decision', 422],
    ['0 options', q({}, 'choice'), 'invalid_decision', 422],
    ['256 options', q(many(256), 'choice'), 'invalid_decision', 422],
    ['1 score level', q(['only'], 'score'), 'invalid_decision', 422],
    ['duplicate keys', '{"state":"s","questions":{"q":{"type":"noul","instructions":"x"},"q":{"type":"noul","instructions":"y"}}}', 'malformed_request', 400],
    ['non-object question', '{"state":"s","questions":{"q":"not an object"}}', 'invalid_decision', 422],
    ['not JSON', 'not json', 'malformed_request', 400],
    ['oversized', JSON.stringify({ state: 'a'.repeat(9 << 20), questions: { q: { type: 'noul', instructions: 'x' } } }), 'request_too_large', 413],
    ['longer than the context', JSON.stringify({ state: 'word '.repeat(5000), questions: { q: { type: 'noul', instructions: 'x' } } }), 'request_too_large', 413],
  ];
})();

test('decide: every fixture A case = llama.cpp; progress; prefix reuse; abort; typed errors; the engine keeps working', { skip }, async () => {
  const { ClefEngine, ClefError } = await load();
  const engine = await ClefEngine.load(CLEF_A, { contextLength: 2048 });
  try {
    assert.deepEqual(engine.decisions, { available: true, form: 'gguf' });
    let worst = 0;
    for (const c of fixture.cases) {
      const progress = [];
      const r = await engine.decide(JSON.stringify(c.request), { prefillChunk: 100, onProgress: (p) => progress.push(p) });
      const d = maxDiff(comparable(r, c.response.model), c.response, c.id);
      assert.ok(d <= 2e-5, `${c.id}: differs by ${d}`);
      worst = Math.max(worst, d);
      assert.equal(r.timings.prompt_tokens, c.n_tokens);
      assert.ok(r.timings.total_ms >= r.timings.prompt_ms && r.timings.prompt_ms > 0);
      // Progress: from the cached prefix to every token, increasing.
      assert.equal(progress.at(-1).done, c.n_tokens);
      assert.equal(progress[0].done, r.timings.cached_tokens);
      assert.ok(progress.every((p, i) => i === 0 || p.done > progress[i - 1].done));
    }
    console.log(`engine.decide vs llama.cpp (fixture A): max |Δ| = ${worst.toExponential(2)}`);

    // The same state again: its prefix (system text + state + "SCHEMA FIELDS", 76 tokens for A1) is reused.
    const a1 = caseById('A1-readme');
    const first = await engine.decide(a1.request);
    const again = await engine.decide(a1.request);
    assert.equal(again.timings.cached_tokens, 76);
    assert.deepEqual(comparable(again, ''), comparable(first, ''));

    // Abort in the middle: `aborted`, and the engine answers the next request exactly.
    const ac = new AbortController();
    const aborted = engine.decide(caseById('A5-many-questions').request, {
      signal: ac.signal, prefillChunk: 16, onProgress: (p) => { if (p.done >= 200) ac.abort(); },
    });
    await assert.rejects(aborted, (e) => e instanceof ClefError && e.code === 'aborted');
    assert.deepEqual(comparable(await engine.decide(a1.request), ''), comparable(first, ''));

    // Invalid requests: each its typed error; the engine keeps answering decisions and chats.
    for (const [what, body, code] of INVALID) {
      await assert.rejects(engine.decide(body), (e) => e instanceof ClefError && e.code === code && e.message.length > 0, what);
    }
    await assert.rejects(engine.decide(42), (e) => e.code === 'malformed_request');
    await assert.rejects(engine.decide({ state: 's', questions: { q: { type: 'noul', instructions: 'x' } } }, { prefillChunk: 0 }), (e) => e.code === 'bad_request');
    assert.deepEqual(comparable(await engine.decide(a1.request), ''), comparable(first, ''));
    const chat = await engine.chat.completions.create({ messages: [{ role: 'user', content: PROMPT_TEXT }], max_tokens: 4, temperature: 0 });
    assert.equal(chat.usage.completion_tokens, 4);
    assert.deepEqual(comparable(await engine.decide(a1.request), ''), comparable(first, ''));
  } finally {
    await engine.unload();
  }
});

/** Checks an approximate response's shape: every question of `request`, every allowed option, sums of 1. */
function assertApproximate(r, request) {
  assert.equal(r.approximate, true);
  assert.deepEqual(Object.keys(r.answers), Object.keys(request.questions));
  for (const [id, q] of Object.entries(request.questions)) {
    const a = r.answers[id];
    assert.equal(a.type, q.type);
    if (q.type === 'noul') {
      assert.ok(a.noul >= 0 && a.noul <= 1, id);
      continue;
    }
    const keys = q.type === 'score' ? q.criteria.map((_, i) => String(i)) : Object.keys(q.criteria);
    assert.deepEqual(Object.keys(a.probabilities).sort(), keys.sort(), id);
    assert.ok(Math.abs(Object.values(a.probabilities).reduce((s, p) => s + p, 0) - 1) < 1e-9, id);
  }
}

test('decide: a head-less qwen35 file answers approximately (label readout) until its joint_head.safetensors is attached, then as the clef GGUF', { skip }, async () => {
  const { ClefEngine, ClefError } = await load();
  const clef = await ClefEngine.load(CLEF_A, { contextLength: 2048 });
  const bare = await ClefEngine.load(HEADLESS_A, { contextLength: 2048 });
  try {
    assert.deepEqual(bare.decisions, { available: true, form: 'approximate' });
    for (const c of fixture.cases.slice(0, 4)) {
      const progress = [];
      const r = await bare.decide(c.request, { prefillChunk: 32, onProgress: (p) => progress.push(p.done) });
      assertApproximate(r, c.request);
      // Usage counts every prompt (two per question); their shared state prefix ran once.
      assert.equal(r.usage.input_tokens, r.timings.prompt_tokens);
      assert.ok(r.timings.cached_tokens > 0 && r.timings.cached_tokens < r.timings.prompt_tokens);
      assert.equal(progress.at(-1), r.timings.prompt_tokens);
      assert.ok(progress.every((d, i) => i === 0 || d > progress[i - 1]));
    }
    // The readout's errors are the head's.
    for (const [what, body, code] of INVALID) {
      await assert.rejects(bare.decide(body), (e) => e instanceof ClefError && e.code === code, what);
    }
    // A broken config: bad_head, nothing attached (still the readout).
    await assert.rejects(bare.loadHead({ safetensors: HEAD_A.safetensors, config: { width: 64 } }), (e) => e.code === 'bad_head');
    await assert.rejects(bare.loadHead({ safetensors: HEADLESS_A, config: HEAD_A.config }), (e) => e.code === 'bad_head');
    assert.deepEqual(bare.decisions, { available: true, form: 'approximate' });
    const info = await bare.loadHead(HEAD_A);
    assert.equal(info.form, 'safetensors');
    assert.ok(info.bytes > 1e6);
    assert.deepEqual(bare.decisions, { available: true, form: 'safetensors' });
    for (const c of fixture.cases.slice(0, 4)) {
      const a = await clef.decide(c.request);
      const b = await bare.decide(c.request);
      assert.deepEqual(comparable(b, ''), comparable(a, ''), c.id);
    }
    // A clef GGUF has its own head.
    await assert.rejects(clef.loadHead(HEAD_A), (e) => e.code === 'bad_head');
  } finally {
    await clef.unload();
    await bare.unload();
  }
});

test('decide: the head from a Hub repository (default file names), streamed with a dropped connection and sha256-verified', { skip }, async () => {
  const { ClefEngine } = await load();
  const hub = await startHubServer({
    repos: { 'test-org/clef-flash': { 'joint_head.safetensors': HEAD_A.safetensors, 'joint_head_config.json': HEAD_A.config } },
  });
  const clef = await ClefEngine.load(CLEF_A, { contextLength: 2048 });
  try {
    const f = hub.files.get('test-org/clef-flash').get('joint_head.safetensors');
    hub.faults.killAt = [Math.floor(f.size / 2)];
    const phases = new Set();
    const engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', {
      hubUrl: hub.url, contextLength: 2048, retryDelayMs: 10, chunkSize: 1 << 16,
      head: { repo: 'test-org/clef-flash' }, onProgress: (p) => phases.add(p.phase),
    });
    try {
      assert.deepEqual(engine.decisions, { available: true, form: 'safetensors' });
      assert.ok(hub.log.some((e) => e.killed), 'the connection was dropped');
      assert.ok(phases.has('ready'));
      const info = await engine.loadHead({ repo: 'test-org/clef-flash' });
      assert.equal(info.verified, true);
      assert.equal(info.sha256, f.sha256);
      const c = caseById('A2-json-state');
      assert.deepEqual(comparable(await engine.decide(c.request), ''), comparable(await clef.decide(c.request), ''));
      // A file that is not there: not_found.
      await assert.rejects(engine.loadHead({ repo: 'test-org/no-such-head' }), (e) => e.code === 'not_found');
    } finally {
      await engine.unload();
    }
  } finally {
    await clef.unload();
    await hub.close();
  }
});

/** What a TypeSafe SDK client must see from an engine on clef fixture A. */
async function sdkConformance(client, engine) {
  const [{ name }] = await client.models.list();
  assert.equal(typeof name, 'string');
  // Typed questions through the SDK's helpers: the same answers as the engine's own API.
  const request = {
    state: { document: 'I was charged twice. Please fix this ASAP.' },
    questions: {
      category: choice('What is this ticket about?', { billing: null, technical: 'Bugs and outages', other: null }),
      angry: noul('Is the customer angry?'),
      urgency: score('How urgent is it?', ['can wait', 'this week', 'today', 'right now']),
    },
  };
  const r = await client.systemOne(request);
  const direct = await engine.decide(request);
  assert.deepEqual(r.answers, direct.answers);
  assert.deepEqual(r.usage, direct.usage);
  assert.equal(r.answers.category.type, 'choice');
  assert.ok(['billing', 'technical', 'other'].includes(r.answers.category.choice));
  assert.deepEqual(Object.keys(r.answers.category.probabilities), ['billing', 'other', 'technical']);
  assert.ok(r.answers.angry.noul >= 0 && r.answers.angry.noul <= 1);
  assert.ok(r.answers.urgency.score >= 0 && r.answers.urgency.score <= 3);
  assert.deepEqual(r.answers.urgency.legend, { 0: 'can wait', 1: 'this week', 2: 'today', 3: 'right now' });
  // The fixture's README request, as llama.cpp answered it.
  const a1 = caseById('A1-readme');
  const got = await client.systemOne(a1.request);
  assert.ok(maxDiff({ ...got, model: a1.response.model }, a1.response) <= 2e-5);
  // Typed errors as HTTP errors: 422 invalid, 400 malformed (the SDK's own checks come first for scores).
  await assert.rejects(client.systemOne({ state: 's', questions: { q: { type: 'maybe', instructions: 'x' } } }), (e) => {
    assert.ok(e instanceof UnprocessableEntityError, e.constructor.name);
    assert.equal(e.status, 422);
    assert.equal(e.body.error.clef_code, 'invalid_decision');
    assert.match(e.message, /"type" must be one of/);
    return true;
  });
  await assert.rejects(client.systemOne({ state: 's', questions: { q: choice('x', {}) } }), (e) => e instanceof UnprocessableEntityError);
  await assert.rejects(client.systemOne({ state: 'word '.repeat(5000), questions: { q: noul('x') } }), (e) => e instanceof APIError && e.status === 413 && e.body.error.clef_code === 'request_too_large');
  // Still answering.
  assert.deepEqual((await client.systemOne(request)).answers, r.answers);
}

test('@typesafe-ai/sdk, unchanged, through createSystemOneFetch (no server)', { skip }, async () => {
  const { ClefEngine, createSystemOneFetch, createOpenAIFetch } = await load();
  const engine = await ClefEngine.load(CLEF_A, { contextLength: 2048 });
  try {
    const fetch = createSystemOneFetch(engine, { fetch: createOpenAIFetch(engine) });
    const client = new TypeSafeClient({ baseURL: 'http://clef.local', apiKey: 'local', fetch, timeout: 120_000, retry: { maxRetries: 0 } });
    await sdkConformance(client, engine);
    // Malformed JSON straight at the route: 400 in llama-server's error shape.
    const bad = await fetch('http://clef.local/v1/systemone', { method: 'POST', body: '{' });
    assert.equal(bad.status, 400);
    const body = await bad.json();
    assert.equal(body.error.code, 400);
    assert.equal(body.error.type, 'invalid_request_error');
    assert.equal(body.error.clef_code, 'malformed_request');
    // Other routes fall through (here: OpenAI's); GET on the decision route is refused.
    assert.equal((await fetch('http://clef.local/v1/chat/completions', { method: 'POST', body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }) })).status, 200);
    assert.equal((await fetch('http://clef.local/v1/systemone')).status, 405);
    // The SDK's abort: APIUserAbortError, and the engine keeps answering.
    const ac = new AbortController();
    const p = client.systemOne({ state: 'word '.repeat(300), questions: { q: noul('x') } }, { signal: ac.signal });
    setTimeout(() => ac.abort(), 5);
    await assert.rejects(p, (e) => e.constructor.name === 'APIUserAbortError');
    assert.equal((await client.systemOne({ state: 's', questions: { q: noul('x') } })).answers.q.type, 'noul');
    // A head-less model: the approximate readout's answers, marked, through the same SDK.
    const bare = await ClefEngine.load(HEADLESS_A, { contextLength: 1024 });
    try {
      const c2 = new TypeSafeClient({ baseURL: 'http://clef.local', apiKey: 'local', fetch: createSystemOneFetch(bare), timeout: 120_000, retry: { maxRetries: 0 } });
      const request = { state: 'Refund please', questions: { team: choice('Which team?', { billing: null, shipping: null }), upset: noul('Upset?'), urgency: score('How urgent?', ['low', 'high']) } };
      assertApproximate(await c2.systemOne(request), request);
      await assert.rejects(c2.systemOne({ state: 's', questions: { q: { type: 'maybe', instructions: 'x' } } }), (e) => e instanceof UnprocessableEntityError);
    } finally {
      await bare.unload();
    }
  } finally {
    await engine.unload();
  }
});

test('@typesafe-ai/sdk, unchanged, against `node www/cli.mjs serve` (HTTP); OpenAI routes still served', { skip }, async () => {
  const { ClefEngine } = await load();
  const child = spawn(process.execPath, [join(repoRoot, 'www', 'cli.mjs'), 'serve', '--model', CLEF_A, '--port', '0', '--ctx', '2048'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const engine = await ClefEngine.load(CLEF_A, { contextLength: 2048 });
  try {
    const url = await new Promise((ok, fail) => {
      let err = '';
      child.stderr.on('data', (d) => {
        err += d;
        const m = /at (http:\/\/\S+)\/v1/.exec(err);
        if (m) ok(m[1]);
      });
      child.once('exit', (c) => fail(new Error(`serve exited ${c}: ${err}`)));
    });
    const client = new TypeSafeClient({ baseURL: url, apiKey: 'local', timeout: 120_000, retry: { maxRetries: 0 } });
    await sdkConformance(client, engine);
    const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }) });
    assert.equal(r.status, 200);
    assert.equal((await r.json()).object, 'chat.completion');
    const models = await (await fetch(`${url}/v1/models`)).json();
    assert.equal(models.object, 'list');
    assert.equal(models.models.length, 1);
  } finally {
    child.kill();
    await engine.unload();
  }
});

/**
 * `[ours, want]` without their `choice` fields, once each choice is checked: the same, or — where
 * the options' probabilities tie within 1e-5 (the readout on a tiny random backbone is near
 * uniform) — one of the tied top options.
 */
function tiesAside(ours, want, what) {
  const strip = (r) => ({ ...r, answers: Object.fromEntries(Object.entries(r.answers).map(([k, { choice, ...a }]) => [k, a])) });
  for (const [k, a] of Object.entries(want.answers)) {
    const mine = ours.answers[k]?.choice;
    if (a.choice === undefined || mine === a.choice) continue;
    const p = a.probabilities;
    assert.ok(p[mine] >= Math.max(...Object.values(p)) - 1e-5, `${what} ${k}: choice ${mine} (p ${p[mine]}) vs ${a.choice} (p ${p[a.choice]})`);
    console.log(`${what} ${k}: a tie within ${Math.abs(p[mine] - p[a.choice]).toExponential(2)}, choice ${mine} vs ${a.choice}`);
  }
  return [strip(ours), strip(want)];
}

test('decide: a model split across 2 and 3 shard workers answers as one worker (head, attached head, readout), with progress and abort', { skip, timeout: 600000 }, async () => {
  const testStarted = new Date().toISOString();
  const { ClefEngine, ClefError } = await load();
  // The one-worker answers of every fixture A case: the clef GGUF's head, and the head-less file's readout.
  const one = async (path) => {
    const e = await ClefEngine.load(path, { contextLength: 1024 });
    try {
      const out = [];
      for (const c of fixture.cases) out.push(comparable(await e.decide(c.request), ''));
      return out;
    } finally {
      await e.unload();
    }
  };
  const [headOne, readoutOne] = [await one(CLEF_A), await one(HEADLESS_A)];
  /** Every case on `engine` (chunks of 7: not the one-worker chunks) vs `want`, within 1e-5; returns max |Δ|. */
  const allCases = async (engine, want, what) => {
    let worst = 0;
    for (const [i, c] of fixture.cases.entries()) {
      const progress = [];
      const r = await engine.decide(c.request, { prefillChunk: 7, onProgress: (p) => progress.push(p) });
      let d = Infinity;
      try {
        d = maxDiff(...tiesAside(comparable(r, ''), want[i], `${what} ${c.id}`), `${what} ${c.id}`);
      } finally {
        if (!(d <= 1e-5)) await explain(engine, c, r, want[i], what);
      }
      assert.ok(d <= 1e-5, `${what} ${c.id}: differs from one worker by ${d}`);
      assert.equal(progress.at(-1).done, progress.at(-1).total, `${what} ${c.id}: progress to the end`);
      worst = Math.max(worst, d);
    }
    return worst;
  };
  /**
   * A rare mismatch seen in loaded runs (issue 10) could not be reproduced on demand: print what
   * tells its cause apart — the response, the same request again on this engine (prefix reused and
   * not), and this engine's setup — before the assertion fails.
   */
  const explain = async (engine, c, r, want, what) => {
    const again = comparable(await engine.decide(c.request, { prefillChunk: 7 }), '');
    const other = comparable(await engine.decide(fixture.cases[(fixture.cases.indexOf(c) + 1) % fixture.cases.length].request), '');
    const fresh = comparable(await engine.decide(c.request), '');
    console.log(JSON.stringify({
      mismatch: `${what} ${c.id}`, info: { workers: engine.info.workers, exchange: engine.info.exchange },
      // A build finishing during the run would mix two wasm builds (the reference and the split engines).
      wasmModified: readdirSync(join(repoRoot, 'www/dist')).filter((f) => f.endsWith('.wasm'))
        .map((f) => `${f} ${new Date(statSync(join(repoRoot, 'www/dist', f)).mtimeMs).toISOString()}`), testStarted,
      got: comparable(r, ''), want, again, fresh, other: other.answers ? Object.keys(other.answers) : other,
    }));
  };
  for (const workers of [2, 3]) {
    const engine = await ClefEngine.load(CLEF_A, { contextLength: 1024, workers });
    try {
      assert.equal(engine.info.workers, workers);
      assert.deepEqual(engine.decisions, { available: true, form: 'gguf' });
      const worst = await allCases(engine, headOne, `clef GGUF, ${workers} workers`);
      console.log(`engine.decide, ${workers} workers vs one (head): max |Δ| = ${worst.toExponential(2)}`);
      // Abort in the middle of the split prefill: `aborted`; the next decision and a chat are exact.
      const ac = new AbortController();
      const aborted = engine.decide(caseById('A5-many-questions').request, {
        signal: ac.signal, prefillChunk: 16, onProgress: (p) => { if (p.done >= 200) ac.abort(); },
      });
      await assert.rejects(aborted, (e) => e instanceof ClefError && e.code === 'aborted');
      const a1 = fixture.cases.findIndex((c) => c.id === 'A1-readme');
      assert.ok(maxDiff(comparable(await engine.decide(fixture.cases[a1].request), ''), headOne[a1]) <= 1e-5);
      await assert.rejects(engine.decide('not json'), (e) => e.code === 'malformed_request');
      const chat = await engine.chat.completions.create({ messages: [{ role: 'user', content: PROMPT_TEXT }], max_tokens: 4, temperature: 0 });
      assert.equal(chat.usage.completion_tokens, 4);
    } finally {
      await engine.unload();
    }
  }
  // A head-less file on 2 workers: the approximate readout (label logits from the shards' LM-head
  // rows), then its joint_head.safetensors attached to the coordinator: the clef GGUF's answers.
  const bare = await ClefEngine.load(HEADLESS_A, { contextLength: 1024, workers: 2 });
  try {
    assert.deepEqual(bare.decisions, { available: true, form: 'approximate' });
    const worst = await allCases(bare, readoutOne, 'readout, 2 workers');
    console.log(`engine.decide, 2 workers vs one (readout): max |Δ| = ${worst.toExponential(2)}`);
    await bare.loadHead(HEAD_A);
    assert.deepEqual(bare.decisions, { available: true, form: 'safetensors' });
    await allCases(bare, headOne, 'attached head, 2 workers');
  } finally {
    await bare.unload();
  }
});

test('Chromium: the @typesafe-ai/sdk in a page through createSystemOneFetch = llama.cpp; a head from the Hub, then from the OPFS cache', { skip: skip || skipReason() }, async () => {
  const hub = await startHubServer({
    repos: {
      'test-org/clef-A': { 'clef-A-F32.gguf': CLEF_A },
      'test-org/clef-flash': { 'joint_head.safetensors': HEAD_A.safetensors, 'joint_head_config.json': HEAD_A.config },
    },
    staticDirs: [['/test/', join(repoRoot, 'tests', 'browser')], ['/node_modules/', join(repoRoot, 'node_modules')], ['/', join(repoRoot, 'www', 'dist')], ['/', join(repoRoot, 'www')]],
  });
  const b = await launch(hub.url);
  try {
    const a1 = caseById('A1-readme');
    const out = await b.page.evaluate(async ({ hubUrl, request }) => {
      const { TypeSafeClient, choice, noul } = await import('/node_modules/@typesafe-ai/sdk/dist/index.mjs');
      const { ClefEngine, createSystemOneFetch } = window.clef;
      const engine = await ClefEngine.load({ repo: 'test-org/clef-A', file: 'clef-A-F32.gguf' }, { hubUrl, contextLength: 1024 });
      const client = new TypeSafeClient({ baseURL: location.origin, apiKey: 'local', dangerouslyAllowBrowser: true, timeout: 120000, retry: { maxRetries: 0 }, fetch: createSystemOneFetch(engine) });
      const readme = await client.systemOne(request);
      const typed = await client.systemOne({ state: 'Refund please', questions: { team: choice('Which team?', { billing: null, shipping: null }), upset: noul('Upset?') } });
      let error = null;
      try {
        await client.systemOne({ state: 's', questions: { q: { type: 'maybe', instructions: 'x' } } });
      } catch (e) {
        error = { name: e.constructor.name, status: e.status, code: e.body?.error?.clef_code };
      }
      await engine.unload();
      // A head-less model + its head from the Hub (cached in OPFS), twice.
      const bare = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl, contextLength: 1024 });
      const first = await bare.loadHead({ repo: 'test-org/clef-flash' });
      const progress = [];
      const second = await bare.loadHead({ repo: 'test-org/clef-flash' }, { onProgress: (p) => progress.push(p) });
      const headless = await bare.decide(request);
      await bare.unload();
      return { readme, typed, error, first, second, fromCache: progress.at(-1)?.fromCache ?? 0, headless };
    }, { hubUrl: hub.url, request: a1.request });
    assert.ok(maxDiff({ ...out.readme, model: a1.response.model }, a1.response) <= 2e-5);
    assert.equal(out.typed.answers.team.type, 'choice');
    assert.ok(Math.abs(out.typed.answers.team.probabilities.billing + out.typed.answers.team.probabilities.shipping - 1) < 1e-12);
    assert.deepEqual(out.error, { name: 'UnprocessableEntityError', status: 422, code: 'invalid_decision' });
    assert.equal(out.first.verified, true);
    assert.equal(out.first.sha256, hub.files.get('test-org/clef-flash').get('joint_head.safetensors').sha256);
    assert.equal(out.second.verified, true);
    assert.ok(out.fromCache > 0, 'the second head load came from the OPFS cache');
    const { timings, ...headless } = out.headless;
    assert.ok(maxDiff({ ...headless, model: a1.response.model }, a1.response) <= 2e-5);
  } finally {
    await b.close();
    await hub.close();
  }
});
