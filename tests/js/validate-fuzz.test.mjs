// Property-based fuzzing of the request validators (www/src/validate.ts) with fast-check: arbitrary
// values — JSON, and what JavaScript callers can pass besides (undefined, NaN, ±Infinity, −0,
// BigInt, boxed values, null-prototype and sparse structures) — for every field that chat and
// completions requests and the load options have, mixed with near-valid values so that the deep
// checks are reached. Each validator answers a normalized request whose every value is in range,
// or a BadRequest (code `bad_request`, which index.ts turns into a ClefError of that code) — never
// a TypeError, RangeError or any other raw exception. What a validator accepted, given back to it,
// comes back unchanged (the normalized form is a fixed point).
// Fixed seed; FUZZ_JS_RUNS scales the run count (default: ~3 s on the 2-core build machine).
// The decision request's JS side only checks "an object or a string" and writes JSON; its
// validation is Rust's (src/clef/request.rs), fuzzed by the cargo-fuzz target `decide_request`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { importTs } from './bundle.mjs';

const V = await importTs('www/src/validate.ts');
const SEED = 0x11c1ef;
const RUNS = Number(process.env.FUZZ_JS_RUNS ?? 5000);
const opts = { seed: SEED, numRuns: RUNS };

// ---- values -----------------------------------------------------------------------------------

/** Anything a JavaScript caller can pass. */
const anything = fc.oneof(
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: fc.constantFrom(undefined, null, NaN, Infinity, -Infinity, -0, 0, 1, -1, 0.5, 2 ** 53, 1e308, -1e308, '', 'x', true, false, [], {}) },
  { weight: 1, arbitrary: fc.anything({ maxDepth: 2, withBigInt: true, withBoxedValues: true, withNullPrototype: true, withSparseArray: true, withObjectString: true }) },
);
/** A number near a range's edges, or anything. */
const num = fc.oneof(
  fc.double({ min: -200, max: 200, noNaN: false }),
  fc.integer({ min: -5, max: 300 }),
  fc.constantFrom(0, 1, 2, 10, 20, 21, 100, 101, -100, -2, 0.05, 1.1, Number.MAX_SAFE_INTEGER, 2 ** 53, 65536, 1 << 20, 3 << 20),
  anything,
);
/** A number inside a validate.ts range (edges included). */
const within = (r) => {
  const min = r.min ?? 0;
  const max = r.max ?? min + 1e6;
  if (r.powerOfTwo) return fc.integer({ min: Math.log2(min), max: Math.log2(max) }).map((e) => 2 ** e);
  if (r.integer) return fc.oneof(fc.integer({ min, max: Math.min(max, min + 1000) }), fc.constantFrom(min, max));
  return fc.oneof(fc.double({ min, max, noNaN: true, minExcluded: !!r.minExclusive }), fc.constantFrom(...(r.minExclusive ? [max] : [min, max])));
};
/** A field: mostly absent, else mostly valid, else anything (so that whole requests pass often enough). */
const field = (valid, bad = anything) =>
  fc.oneof({ weight: 12, arbitrary: fc.constant(undefined) }, { weight: 6, arbitrary: valid }, { weight: 1, arbitrary: bad });
const str = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('a', '<think>', '\u0000', '\ud800', 'é'));

/** Mostly `valid`, sometimes `bad`. */
const mostly = (valid, bad = anything) => fc.oneof({ weight: 24, arbitrary: valid }, { weight: 1, arbitrary: bad });

const textPart = mostly(fc.record({ type: mostly(fc.constant('text'), fc.oneof(fc.constantFrom('image_url', 'TEXT'), anything)), text: mostly(str) }));
const message = mostly(fc.record({
  role: mostly(fc.constantFrom(...V.ROLES), fc.oneof(fc.constantFrom('wizard', 'User', ''), anything)),
  content: mostly(fc.oneof({ weight: 3, arbitrary: str }, { weight: 1, arbitrary: fc.array(textPart, { maxLength: 3 }) })),
  reasoning_content: field(str),
  tool_calls: field(fc.constant([]), anything),
}));
const toolName = mostly(fc.constantFrom('get_weather', 'search'), fc.oneof(fc.constant(''), str, anything));
const tool = mostly(fc.record({ type: mostly(fc.constant('function')), function: mostly(fc.record({ name: toolName, parameters: field(fc.jsonValue({ maxDepth: 2 })) })) }));
const toolChoice = mostly(
  fc.oneof(fc.constantFrom('auto', 'none', 'required'), fc.record({ type: mostly(fc.constant('function')), function: mostly(fc.record({ name: toolName })) })),
  fc.oneof(fc.constant('any'), anything),
);
const responseFormat = mostly(fc.record({
  type: mostly(fc.constantFrom('text', 'json_object', 'json_schema'), fc.oneof(fc.constant('xml'), anything)),
  json_schema: field(fc.record({
    name: mostly(fc.constantFrom('answer', 'a-b_9', 'x'.repeat(64)), fc.oneof(fc.constantFrom('', 'sp ace', 'x'.repeat(65)), anything)),
    schema: field(fc.oneof(fc.constant({ type: 'object' }), fc.boolean()), anything),
  })),
}));
const S = V.SAMPLING;
const sampling = {
  ...Object.fromEntries(['max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'presence_penalty', 'frequency_penalty', 'repetition_penalty'].map((k) => [k, field(within(S[k]), num)])),
  n: field(fc.constant(1), num),
  stop: field(fc.oneof(str, fc.array(str, { maxLength: 3 })), fc.oneof(fc.array(fc.oneof(str, anything), { minLength: 1, maxLength: 3 }), anything)),
  logit_bias: field(
    fc.dictionary(fc.constantFrom('0', '15', '248319'), within(S.logit_bias), { maxKeys: 3 }),
    fc.oneof(fc.dictionary(fc.oneof(fc.constantFrom('0', '-1', 'abc', '1.5'), fc.string({ maxLength: 3 })), num, { minKeys: 1, maxKeys: 3 }), anything),
  ),
  ignore_eos: field(fc.boolean()),
  stream: field(fc.boolean()),
  return_token_ids: field(fc.boolean()),
  model: field(str),
};
const chatBody = fc.oneof(
  { weight: 20, arbitrary: fc.record({
    ...sampling,
    messages: mostly(fc.array(message, { minLength: 1, maxLength: 4 })),
    tools: field(fc.array(tool, { maxLength: 3 })),
    tool_choice: field(toolChoice),
    parallel_tool_calls: field(fc.boolean()),
    response_format: field(responseFormat),
    logprobs: field(fc.boolean()),
    top_logprobs: field(within(S.top_logprobs), num),
    enable_thinking: field(fc.boolean()),
    chat_template_kwargs: field(fc.record({ enable_thinking: field(fc.boolean()), extra: field(fc.jsonValue({ maxDepth: 2 })) })),
  }) },
  { weight: 1, arbitrary: anything },
);
const completionBody = fc.oneof(
  { weight: 20, arbitrary: fc.record({
    ...sampling,
    prompt: fc.oneof({ weight: 3, arbitrary: str }, { weight: 2, arbitrary: fc.array(fc.nat(300_000), { maxLength: 4 }) }, { weight: 1, arbitrary: fc.oneof(fc.array(num, { minLength: 1, maxLength: 4 }), anything) }),
    echo: field(fc.boolean()),
    logprobs: field(within(S.top_logprobs), num),
  }) },
  { weight: 1, arbitrary: anything },
);
const loadOptions = fc.record({
  ...Object.fromEntries(Object.entries(V.LOAD).map(([k, r]) => [k, field(within(r), num)])),
  kvCache: field(fc.constantFrom('f32', 'f16'), fc.oneof(fc.constant('q8'), anything)),
  exchange: field(fc.constantFrom('auto', 'shared', 'message'), fc.oneof(fc.constant('mail'), anything)),
  sha256: field(fc.stringMatching(/^[0-9a-fA-F]{64}$/), fc.oneof(fc.constantFrom('abc', 'g'.repeat(64)), anything)),
  cache: field(fc.boolean()),
});

// ---- checks -----------------------------------------------------------------------------------

/** Runs `f`; returns its result, or undefined after checking that it threw a BadRequest. */
function outcome(f) {
  try {
    return { ok: f() };
  } catch (e) {
    assert.ok(e instanceof V.BadRequest, `a raw exception escaped: ${e?.name}: ${e?.message}`);
    assert.equal(e.code, 'bad_request');
    assert.ok(typeof e.message === 'string' && e.message.length > 0, 'an error without a message');
    return { error: e };
  }
}

function inRange(name, v, r) {
  assert.equal(typeof v, 'number', name);
  assert.ok(Number.isFinite(v), `${name} = ${v}`);
  if (r.integer) assert.ok(Number.isInteger(v), `${name} = ${v}`);
  if (r.min !== undefined) assert.ok(r.minExclusive ? v > r.min : v >= r.min, `${name} = ${v}`);
  if (r.max !== undefined) assert.ok(v <= r.max, `${name} = ${v}`);
}

/** Every value of a normalized GenerateParams is of its type and in range. */
function checkParams(p) {
  for (const [k, v] of Object.entries(p)) {
    assert.notEqual(v, undefined, `${k}: undefined left in the params`);
    if (k === 'stop') assert.ok(Array.isArray(v) && v.every((s) => typeof s === 'string' && s.length > 0), 'stop');
    else if (k === 'logit_bias') {
      for (const [id, b] of Object.entries(v)) {
        assert.match(id, /^\d+$/);
        inRange('logit_bias', b, V.SAMPLING.logit_bias);
      }
    } else if (k === 'ignore_eos') assert.equal(v, true);
    else if (k === 'logprobs') inRange('logprobs', v, V.SAMPLING.top_logprobs);
    else if (k === 'output') assert.ok(['json_object', 'json_schema', 'tool_calls'].includes(v.type), 'output');
    else if (k in V.SAMPLING) inRange(k, v, V.SAMPLING[k]);
    else assert.fail(`unexpected parameter ${k}`);
  }
}

function checkMessagesOut(ms) {
  assert.ok(Array.isArray(ms) && ms.length > 0);
  for (const m of ms) {
    assert.ok(['system', 'user', 'assistant', 'tool'].includes(m.role), `role ${m.role}`);
    const c = m.content;
    assert.ok(
      typeof c === 'string' || (c == null && m.role === 'assistant') ||
        (Array.isArray(c) && c.every((p) => p && p.type === 'text' && typeof p.text === 'string')),
      'content',
    );
    assert.ok(m.reasoning_content == null || typeof m.reasoning_content === 'string', 'reasoning_content');
  }
}

const fixedPoint = (f, normalized) => assert.deepEqual(f(normalized), normalized, 'validating the normalized form changes it');

// ---- properties -------------------------------------------------------------------------------

test('chat requests: a normalized request or a bad_request, never a raw exception', (t) => {
  let accepted = 0;
  fc.assert(
    fc.property(chatBody, (body) => {
      const r = outcome(() => V.chatRequest(body)).ok;
      if (!r) return;
      accepted++;
      checkParams(r.params);
      checkMessagesOut(r.prompt.messages);
      assert.equal(typeof r.stream, 'boolean');
      assert.equal(r.prompt.kind, 'chat');
      const k = r.prompt.chatTemplateKwargs;
      assert.ok(k === undefined || (typeof k === 'object' && k !== null && !Array.isArray(k)), 'chat_template_kwargs');
      assert.ok(k?.enable_thinking === undefined || typeof body.enable_thinking !== 'boolean' || k.enable_thinking === body.enable_thinking);
      assert.ok(r.tools.parse === null || (Array.isArray(r.tools.parse) && r.tools.parse.length > 0));
      assert.equal(typeof r.tools.prefix, 'string');
    }),
    opts,
  );
  t.diagnostic(`${accepted} of ${RUNS} accepted`);
  assert.ok(accepted > RUNS / 20, `only ${accepted} of ${RUNS} chat requests were valid: the generators miss the deep checks`);
});

test('completions requests: a normalized request or a bad_request, never a raw exception', (t) => {
  let accepted = 0;
  fc.assert(
    fc.property(completionBody, (body) => {
      const r = outcome(() => V.completionRequest(body)).ok;
      if (!r) return;
      accepted++;
      checkParams(r.params);
      if (r.prompt.kind === 'text') assert.equal(typeof r.prompt.text, 'string');
      else assert.ok(r.prompt.ids.every((x) => Number.isInteger(x) && x >= 0 && x <= 0xffffffff), 'token ids');
      assert.equal(r.echo, body.echo === true ? body.prompt : '');
      assert.equal(typeof r.stream, 'boolean');
    }),
    opts,
  );
  t.diagnostic(`${accepted} of ${RUNS} accepted`);
  assert.ok(accepted > RUNS / 20, `only ${accepted} of ${RUNS} completions requests were valid`);
});

test('load options: checked values or a bad_request; defaults filled in range', (t) => {
  let accepted = 0;
  fc.assert(
    fc.property(loadOptions, (o) => {
      const r = outcome(() => V.loadParams(o)).ok;
      if (!r) return;
      for (const [k, v] of Object.entries(r)) {
        if (k in V.LOAD) inRange(k, v, V.LOAD[k]);
        else if (k === 'sha256') assert.match(v, /^[0-9a-f]{64}$/);
        else if (k === 'kvCache') assert.ok(v === 'f32' || v === 'f16');
        else if (k === 'exchange') assert.ok(['auto', 'shared', 'message'].includes(v));
        else assert.fail(`unexpected option ${k}`);
      }
      accepted++;
      const resolved = V.resolveLoadParams(o);
      for (const [k, row] of Object.entries(V.LOAD)) if (row.default !== undefined) inRange(k, resolved[k], row);
    }),
    opts,
  );
  t.diagnostic(`${accepted} of ${RUNS} accepted`);
  assert.ok(accepted > RUNS / 20, `only ${accepted} of ${RUNS} load options were valid`);
});

test('normalized forms are fixed points: sampling params, messages, load options', () => {
  fc.assert(
    fc.property(chatBody, loadOptions, (body, o) => {
      if (body && typeof body === 'object') {
        const p = outcome(() => V.samplingParams(body)).ok;
        if (p) fixedPoint(V.samplingParams, p);
        const m = outcome(() => V.checkMessages(body.messages)).ok;
        if (m) fixedPoint(V.checkMessages, m);
      }
      const l = outcome(() => V.loadParams(o)).ok;
      if (l) fixedPoint(V.loadParams, l);
    }),
    opts,
  );
});
