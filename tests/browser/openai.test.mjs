// The official `openai` npm package, unchanged, against the engine on the tiny fixture model: in Node
// through createOpenAIFetch (no server) and through `node www/cli.mjs serve` (HTTP + SSE), and in
// headless Chromium through createOpenAIFetch in the page (the package's own ESM build, served as is).
// Completions and chat, streamed and not (a stream gives the same text as the plain answer),
// usage chunks as OpenAI sends them, tools and tool_choice, typed errors as HTTP errors, abort
// through the signal (the engine stays usable), follow-up turns with tool results.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { A, PROMPT_TEXT, fixturesDir, launch, repoRoot, skipReason } from './helpers.mjs';
import { startHubServer } from './hub-server.mjs';

const dist = join(repoRoot, 'www', 'dist', 'clef.js');
const skip = existsSync(dist) ? false : 'www/dist is not built (./build.sh)';
const MODEL = join(fixturesDir, 'A-F32.gguf');
const WEATHER = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const user = (content) => [{ role: 'user', content }];

/** log-softmax of llama.cpp's last-position logits of prompt 0 (the model's distribution for the first token). */
function logSoftmax0() {
  const l = A.cases[0].last_logits;
  const max = Math.max(...l);
  const lz = max + Math.log(l.reduce((s, x) => s + Math.exp(x - max), 0));
  return l.map((x) => x - lz);
}

/** logprobs / top_logprobs in OpenAI's shapes: chat and completions, streamed and not. */
async function logprobConformance(client) {
  const ls = logSoftmax0();
  const greedy = A.cases[0].greedy_ids;
  const checkEntry = (e, where) => {
    assert.equal(typeof e.token, 'string', where);
    assert.ok(Array.isArray(e.bytes) && e.bytes.length > 0, where);
    assert.ok(e.logprob <= 0, where);
    assert.equal(e.top_logprobs.length, 3, where);
    for (let k = 1; k < 3; k++) assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob, `${where}: sorted`);
    // Greedy: the token drawn is the most likely one.
    assert.equal(e.top_logprobs[0].logprob, e.logprob, where);
    assert.deepEqual(e.top_logprobs[0].bytes, e.bytes, where);
  };
  const req = { model: 'clef', messages: user(PROMPT_TEXT), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, return_token_ids: true };
  const r = await client.chat.completions.create(req);
  const lp = r.choices[0].logprobs;
  const all = [...(lp.reasoning_content ?? []), ...lp.content];
  assert.deepEqual(r.choices[0].token_ids, greedy.slice(0, 6));
  assert.equal(all.length, 6);
  all.forEach((e, i) => checkEntry(e, `chat token ${i}`));
  assert.ok(Math.abs(all[0].logprob - ls[greedy[0]]) < 1e-4, `${all[0].logprob} vs ${ls[greedy[0]]}`);
  const order = ls.map((x, i) => [x, i]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  all[0].top_logprobs.forEach((t, k) => assert.ok(Math.abs(t.logprob - order[k][0]) < 1e-4, `alternative ${k}`));
  // Streamed: the same entries, spread over the chunks.
  const streamed = { content: [], reasoning_content: [] };
  for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
    const l = c.choices[0]?.logprobs;
    if (l) for (const k of ['content', 'reasoning_content']) streamed[k].push(...(l[k] ?? []));
  }
  assert.deepEqual([...streamed.reasoning_content, ...streamed.content], all);
  // Without logprobs: null, as OpenAI.
  assert.equal((await client.chat.completions.create({ ...req, logprobs: false, top_logprobs: undefined })).choices[0].logprobs, null);

  // Completions: OpenAI's legacy shape, offsets into the text.
  const t = await client.completions.create({ model: 'clef', prompt: A.cases[0].prompt_ids, max_tokens: 6, temperature: 0, logprobs: 2 });
  const tl = t.choices[0].logprobs;
  assert.equal(tl.tokens.length, 6);
  assert.ok(Math.abs(tl.token_logprobs[0] - ls[greedy[0]]) < 1e-4);
  tl.top_logprobs.forEach((d, i) => {
    assert.ok(Object.keys(d).length >= 1 && Object.keys(d).length <= 2);
    assert.equal(Math.max(...Object.values(d)), tl.token_logprobs[i]);
  });
  for (let i = 0; i < 6; i++) {
    if (!tl.tokens[i].includes('\ufffd')) assert.ok(t.choices[0].text.startsWith(tl.tokens[i], tl.text_offset[i]), `token ${i} at its offset`);
    if (i) assert.ok(tl.text_offset[i] >= tl.text_offset[i - 1]);
  }
  const st = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const c of await client.completions.create({ model: 'clef', prompt: A.cases[0].prompt_ids, max_tokens: 6, temperature: 0, logprobs: 2, stream: true })) {
    const l = c.choices[0]?.logprobs;
    if (l) for (const k of Object.keys(st)) st[k].push(...l[k]);
  }
  assert.deepEqual(st, tl);

  // Out of range, or top_logprobs without logprobs: 400.
  await assert.rejects(client.chat.completions.create({ ...req, top_logprobs: 21 }), (e) => e.status === 400 && /top_logprobs/.test(e.message));
  await assert.rejects(client.chat.completions.create({ ...req, logprobs: undefined }), (e) => e.status === 400 && /needs logprobs/.test(e.message));
  await assert.rejects(client.completions.create({ model: 'clef', prompt: 'x', logprobs: 2, echo: true }), (e) => e.status === 400);
}

const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    role: { enum: ['admin', 'user'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 5 }, maxItems: 3 },
    address: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, zip: { type: 'integer' } }, required: ['city', 'zip'], additionalProperties: false },
  },
  required: ['name', 'age', 'role', 'address'],
  additionalProperties: false,
};

/** PERSON, checked by hand (tests/grammar.rs checks many schemas with a real validator). */
function checkPerson(p) {
  assert.deepEqual(Object.keys(p).filter((k) => !['name', 'age', 'role', 'tags', 'address'].includes(k)), []);
  assert.ok(typeof p.name === 'string' && [...p.name].length <= 12, `name ${p.name}`);
  assert.ok(Number.isInteger(p.age) && p.age >= 0 && p.age <= 120, `age ${p.age}`);
  assert.ok(['admin', 'user'].includes(p.role));
  if ('tags' in p) assert.ok(Array.isArray(p.tags) && p.tags.length <= 3 && p.tags.every((t) => typeof t === 'string' && [...t].length <= 5));
  assert.deepEqual(Object.keys(p.address).sort(), ['city', 'zip']);
  assert.ok(typeof p.address.city === 'string' && Number.isInteger(p.address.zip));
}

/** response_format and forced tool calls under constrained decoding: the tiny random model's garbage parses. */
async function structuredConformance(client) {
  const req = { model: 'clef', messages: user('Describe a person as JSON.'), max_tokens: 400, temperature: 1, seed: 3 };
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ ...req, seed, response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } } });
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    checkPerson(JSON.parse(r.choices[0].message.content));
  }
  // The SDK's parse helper reads the JSON back; streamed = not streamed (same seed).
  const rf = { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } };
  const parsed = await client.chat.completions.parse({ ...req, response_format: rf });
  checkPerson(parsed.choices[0].message.parsed);
  let text = '';
  for await (const c of await client.chat.completions.create({ ...req, response_format: rf, stream: true })) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, parsed.choices[0].message.content);
  const obj = await client.chat.completions.create({ ...req, response_format: { type: 'json_object' } });
  const o = JSON.parse(obj.choices[0].message.content);
  assert.ok(o && typeof o === 'object' && !Array.isArray(o));
  // tool_choice required: the call always parses, its arguments typed and complete.
  const tools = [WEATHER, { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'number' }, exact: { type: 'boolean' } }, required: ['a', 'b'] } } }];
  for (const seed of [1, 2]) {
    const t = await client.chat.completions.create({ ...req, seed, tools, tool_choice: 'required', parallel_tool_calls: false });
    const calls = t.choices[0].message.tool_calls;
    assert.equal(t.choices[0].finish_reason, 'tool_calls', JSON.stringify(t.choices[0].message));
    assert.equal(calls.length, 1);
    const args = JSON.parse(calls[0].function.arguments);
    if (calls[0].function.name === 'get_weather') assert.equal(typeof args.city, 'string');
    else {
      assert.equal(calls[0].function.name, 'add');
      assert.ok(Number.isInteger(args.a) && typeof args.b === 'number', calls[0].function.arguments);
    }
  }
  await assert.rejects(client.chat.completions.create({ ...req, tools, response_format: { type: 'json_object' } }), (e) => e.status === 400 && /tool_choice/.test(e.message));
}

/** The checks every transport must pass; `client` talks to the engine `engine` (for direct comparisons). */
async function conformance(client, engine) {
  await logprobConformance(client);
  await structuredConformance(client);

  // Models.
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
  assert.equal((await client.models.retrieve(models.data[0].id)).id, models.data[0].id);

  // Chat: greedy = llama.cpp's tokens, as through the engine's own API.
  const req = { model: 'clef', messages: user(PROMPT_TEXT), max_tokens: 16, temperature: 0 };
  const r = await client.chat.completions.create({ ...req, return_token_ids: true });
  assert.equal(r.object, 'chat.completion');
  assert.deepEqual(r.choices[0].token_ids, A.cases[0].greedy_ids);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 16);
  const direct = await engine.chat.completions.create(req);
  assert.equal(r.choices[0].message.content, direct.choices[0].message.content);

  // Streamed: the same text; usage only on request, on a last chunk without choices.
  let text = '';
  let usageChunks = 0;
  let finish = null;
  for await (const c of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    assert.equal(c.object, 'chat.completion.chunk');
    if (c.usage) {
      usageChunks++;
      assert.deepEqual(c.choices, []);
      assert.equal(c.usage.completion_tokens, 16);
    } else {
      text += c.choices[0].delta.content ?? '';
      finish = c.choices[0].finish_reason ?? finish;
    }
  }
  assert.equal(text, r.choices[0].message.content);
  assert.equal(usageChunks, 1);
  assert.equal(finish, 'length');
  for await (const c of await client.chat.completions.create({ ...req, stream: true })) assert.equal(c.usage, undefined);

  // The SDK's stream helper accumulates the same message.
  const helper = client.chat.completions.stream({ ...req });
  const final = await helper.finalChatCompletion();
  assert.equal(final.choices[0].message.content, r.choices[0].message.content);

  // Text completions, streamed and not.
  const t = await client.completions.create({ model: 'clef', prompt: A.cases[0].prompt_ids, max_tokens: 16, temperature: 0, return_token_ids: true });
  assert.equal(t.object, 'text_completion');
  assert.deepEqual(t.choices[0].token_ids, A.cases[0].greedy_ids);
  let streamed = '';
  for await (const c of await client.completions.create({ model: 'clef', prompt: A.cases[0].prompt_ids, max_tokens: 16, temperature: 0, stream: true })) {
    streamed += c.choices[0]?.text ?? '';
  }
  assert.equal(streamed, t.choices[0].text);

  // Tools: a named tool_choice makes the answer start with that call; streamed = not streamed.
  const toolReq = { model: 'clef', messages: user('Weather in Paris?'), tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 24, temperature: 0 };
  const tr = await client.chat.completions.create(toolReq);
  const m = tr.choices[0].message;
  if (m.tool_calls) {
    assert.equal(tr.choices[0].finish_reason, 'tool_calls');
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.equal(typeof JSON.parse(m.tool_calls[0].function.arguments), 'object');
  } else {
    // The tiny random model did not finish the call: it comes back as text, from the forced start.
    assert.ok(m.content.startsWith('<tool_call>\n<function=get_weather>\n'), m.content);
  }
  const ts = await client.chat.completions.stream(toolReq).finalChatCompletion();
  assert.deepEqual(ts.choices[0].message.tool_calls ?? null, m.tool_calls ?? null);
  assert.equal(ts.choices[0].message.content ?? null, m.content ?? null);

  // A follow-up turn with the call and its result renders and runs.
  const follow = await client.chat.completions.create({
    model: 'clef', max_tokens: 4, temperature: 0, tools: [WEATHER],
    messages: [
      ...user('Weather in Paris?'),
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 °C' },
    ],
  });
  assert.equal(follow.usage.completion_tokens, 4);

  // Typed errors as HTTP errors.
  await assert.rejects(client.chat.completions.create({ model: 'clef', messages: [] }), (e) => e.status === 400 && e.code === 'bad_request');
  await assert.rejects(client.chat.completions.create({ model: 'clef', messages: [{ role: 'user', content: { not: 'text' } }] }), (e) => e.status === 400 && e.code === 'bad_request' && /content must be a string/.test(e.message));
  await assert.rejects(client.chat.completions.create({ ...req, tool_choice: 'required' }), (e) => e.status === 400 && /tool_choice needs tools/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ ...req, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(?<=a)b' } } } }),
    (e) => e.status === 400 && e.code === 'bad_schema',
  );
  await assert.rejects(client.chat.completions.create({ ...req, response_format: { type: 'yaml' } }), (e) => e.status === 400 && e.code === 'bad_request');
  await assert.rejects(client.chat.completions.create({ ...req, messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'x', type: 'function', function: { name: 'f', arguments: '{bad' } }] }] }),
    (e) => e.status === 400 && e.code === 'bad_request' && /not valid JSON/.test(e.message));

  // Abort through the signal: a stream, then a plain request; the engine stays usable.
  const ac = new AbortController();
  const stream = await client.chat.completions.create({ ...req, max_tokens: 4000, ignore_eos: true, stream: true }, { signal: ac.signal });
  let n = 0;
  // The SDK ends an aborted stream's iteration quietly.
  for await (const _ of stream) if (++n === 3) ac.abort();
  assert.ok(n < 10, `${n} chunks after the abort`);
  const ac2 = new AbortController();
  setTimeout(() => ac2.abort(), 150);
  await assert.rejects(client.chat.completions.create({ ...req, max_tokens: 4000, ignore_eos: true }, { signal: ac2.signal, maxRetries: 0 }),
    (e) => e instanceof OpenAI.APIUserAbortError);
  // Had either generation gone on (4000 tokens: over 10 s here), this would wait for it.
  const t0 = Date.now();
  const again = await client.chat.completions.create({ ...req, return_token_ids: true });
  assert.deepEqual(again.choices[0].token_ids, A.cases[0].greedy_ids);
  assert.ok(Date.now() - t0 < 5000, `the next request took ${Date.now() - t0} ms: an aborted generation went on`);
}

test('the openai package through createOpenAIFetch (no server)', { skip }, async () => {
  const { ClefEngine, createOpenAIFetch } = await import(dist);
  const engine = await ClefEngine.load(MODEL);
  try {
    const client = new OpenAI({ baseURL: 'http://clef.local/v1', apiKey: 'local', fetch: createOpenAIFetch(engine), dangerouslyAllowBrowser: true });
    await conformance(client, engine);
    // Unknown routes and methods answer in OpenAI's error format.
    const f = createOpenAIFetch(engine);
    const nf = await f('http://clef.local/v1/embeddings', { method: 'POST', body: '{}' });
    assert.equal(nf.status, 404);
    assert.equal((await nf.json()).error.code, 'not_found');
    assert.equal((await f('http://clef.local/v1/chat/completions')).status, 405);
    const bad = await f('http://clef.local/v1/chat/completions', { method: 'POST', body: '{oops' });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.type, 'invalid_request_error');
  } finally {
    await engine.unload();
  }
});

test('the openai package against `node www/cli.mjs serve` (HTTP, SSE, disconnect aborts)', { skip }, async () => {
  const { ClefEngine } = await import(dist);
  const child = spawn(process.execPath, [join(repoRoot, 'www', 'cli.mjs'), 'serve', '--model', MODEL, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const url = await new Promise((ok, fail) => {
    child.stderr.on('data', (d) => {
      err += d;
      const m = /at (http:\/\/\S+)/.exec(err);
      if (m) ok(m[1]);
    });
    child.on('exit', (code) => fail(new Error(`serve exited (${code}): ${err}`)));
  });
  const engine = await ClefEngine.load(MODEL); // the same model in-process, for direct comparisons
  try {
    const client = new OpenAI({ baseURL: url, apiKey: 'local' });
    assert.equal((await client.models.list()).data[0].id, 'A-F32');
    await conformance(client, engine);
    // CORS preflight for pages on other origins.
    const pre = await fetch(`${url}/chat/completions`, { method: 'OPTIONS' });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), '*');
  } finally {
    child.kill();
    await engine.unload();
  }
});

test('serve refuses bad options with a usage line', { skip }, async () => {
  const r = await new Promise((ok) => {
    const c = spawn(process.execPath, [join(repoRoot, 'www', 'cli.mjs'), 'serve', '--port', '1'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let e = '';
    c.stderr.on('data', (d) => (e += d));
    c.on('exit', (code) => ok({ code, e }));
  });
  assert.equal(r.code, 1);
  assert.match(r.e, /--model is required/);
});

/**
 * In the page: the npm `openai` package (its ESM build from node_modules, unchanged) over
 * createOpenAIFetch(engine). Returns what each call gave; the test checks it in Node.
 */
async function inPage({ hubUrl, prompt, person, weather, add }) {
  const { default: OpenAI } = await import('/node_modules/openai/index.mjs');
  const { ClefEngine, createOpenAIFetch } = window.clef;
  const engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl, contextLength: 2048 });
  const client = new OpenAI({ baseURL: 'http://clef.local/v1', apiKey: 'local', dangerouslyAllowBrowser: true, maxRetries: 0, fetch: createOpenAIFetch(engine) });
  const out = {};
  const req = { model: 'clef', messages: [{ role: 'user', content: prompt }], max_tokens: 16, temperature: 0 };
  const errorOf = async (p) => {
    try {
      await p;
      return null;
    } catch (e) {
      return { name: e.constructor.name, status: e.status ?? null, code: e.code ?? null, message: e.message };
    }
  };
  try {
    out.models = (await client.models.list()).data.map((m) => m.id);
    out.engineModel = engine.model;

    // Completions, plain and streamed (with the usage chunk OpenAI sends on request).
    const r = await client.chat.completions.create({ ...req, return_token_ids: true });
    out.plain = { text: r.choices[0].message.content, ids: r.choices[0].token_ids, finish: r.choices[0].finish_reason, usage: r.usage.completion_tokens };
    out.direct = (await engine.chat.completions.create(req)).choices[0].message.content;
    const chunks = [];
    for await (const c of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) chunks.push(c);
    out.stream = {
      objects: [...new Set(chunks.map((c) => c.object))],
      text: chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''),
      finish: chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean),
      usage: chunks.filter((c) => c.usage).map((c) => ({ choices: c.choices.length, tokens: c.usage.completion_tokens })),
    };
    out.helper = (await client.chat.completions.stream(req).finalChatCompletion()).choices[0].message.content;
    const t = await client.completions.create({ model: 'clef', prompt, max_tokens: 8, temperature: 0 });
    let ts = '';
    for await (const c of await client.completions.create({ model: 'clef', prompt, max_tokens: 8, temperature: 0, stream: true })) ts += c.choices[0]?.text ?? '';
    out.completion = { text: t.choices[0].text, streamed: ts };

    // Tools: a forced call (schema-constrained arguments), streamed = not streamed, then the follow-up turn.
    const toolReq = { ...req, max_tokens: 200, temperature: 1, seed: 1, tools: [weather, add], tool_choice: 'required', parallel_tool_calls: false };
    const tr = await client.chat.completions.create(toolReq);
    const tsr = await client.chat.completions.stream(toolReq).finalChatCompletion();
    out.tools = { finish: tr.choices[0].finish_reason, calls: tr.choices[0].message.tool_calls, streamedCalls: tsr.choices[0].message.tool_calls };
    const named = await client.chat.completions.create({ ...toolReq, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
    out.named = named.choices[0].message.tool_calls ?? named.choices[0];
    const call = named.choices[0].message.tool_calls?.[0];
    const follow = await client.chat.completions.create({
      ...req, max_tokens: 4, tools: [weather],
      messages: [...req.messages, named.choices[0].message, { role: 'tool', tool_call_id: call?.id ?? 'call_1', content: 'sunny, 21 °C' }],
    });
    out.follow = follow.usage.completion_tokens;

    // response_format json_schema: content that parses, the SDK's parse helper, a stream of the same text.
    const rf = { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } };
    const jr = { ...req, messages: [{ role: 'user', content: 'Describe a person as JSON.' }], max_tokens: 400, temperature: 1, seed: 3, response_format: rf };
    const j = await client.chat.completions.create(jr);
    const parsed = await client.chat.completions.parse(jr);
    let js = '';
    for await (const c of await client.chat.completions.create({ ...jr, stream: true })) js += c.choices[0]?.delta?.content ?? '';
    out.json = { finish: j.choices[0].finish_reason, content: j.choices[0].message.content, parsed: parsed.choices[0].message.parsed, streamed: js };

    // Errors as the SDK's typed HTTP errors.
    out.errors = {
      schema: await errorOf(client.chat.completions.create({ ...req, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(?<=a)b' } } } })),
      empty: await errorOf(client.chat.completions.create({ model: 'clef', messages: [] })),
    };

    // Abort through the signal: a stream after 3 chunks, then a plain request; the engine stays usable.
    const ac = new AbortController();
    let n = 0;
    const stream = await client.chat.completions.create({ ...req, max_tokens: 4000, ignore_eos: true, stream: true }, { signal: ac.signal });
    out.streamAbort = await errorOf((async () => {
      for await (const _ of stream) if (++n === 3) ac.abort();
    })());
    out.chunksAfterAbort = n;
    const ac2 = new AbortController();
    setTimeout(() => ac2.abort(), 150);
    out.plainAbort = await errorOf(client.chat.completions.create({ ...req, max_tokens: 4000, ignore_eos: true }, { signal: ac2.signal }));
    const t0 = performance.now();
    out.again = (await client.chat.completions.create({ ...req, return_token_ids: true })).choices[0].token_ids;
    out.againMs = performance.now() - t0;
    return out;
  } finally {
    await engine.unload();
  }
}

test('Chromium: the openai package in a page through createOpenAIFetch (streams, tools, json_schema, abort)', { skip: skip || skipReason() }, async () => {
  const hub = await startHubServer({
    staticDirs: [['/test/', join(repoRoot, 'tests', 'browser')], ['/node_modules/', join(repoRoot, 'node_modules')], ['/', join(repoRoot, 'www', 'dist')], ['/', join(repoRoot, 'www')]],
  });
  const b = await launch(hub.url);
  try {
    // Bounded string arguments, so the tiny random model's calls end within max_tokens.
    const weather = { type: 'function', function: { ...WEATHER.function, parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] } } };
    const ADD = { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'number' } }, required: ['a', 'b'] } } };
    const out = await b.page.evaluate(inPage, { hubUrl: hub.url, prompt: PROMPT_TEXT, person: PERSON, weather, add: ADD });
    assert.deepEqual(out.models, [out.engineModel]);
    // Greedy through the SDK = llama.cpp's tokens = the engine's own API.
    assert.deepEqual(out.plain.ids, A.cases[0].greedy_ids);
    assert.equal(out.plain.finish, 'length');
    assert.equal(out.plain.usage, 16);
    assert.equal(out.plain.text, out.direct);
    assert.deepEqual(out.stream, { objects: ['chat.completion.chunk'], text: out.plain.text, finish: ['length'], usage: [{ choices: 0, tokens: 16 }] });
    assert.equal(out.helper, out.plain.text);
    assert.ok(out.completion.text.length > 0);
    assert.equal(out.completion.streamed, out.completion.text);

    assert.equal(out.tools.finish, 'tool_calls');
    assert.equal(out.tools.calls.length, 1);
    // Streamed = not streamed (each call gets a fresh id).
    const noId = (calls) => calls.map(({ id, ...c }) => c);
    assert.deepEqual(noId(out.tools.streamedCalls), noId(out.tools.calls));
    const [call] = out.tools.calls;
    assert.equal(call.type, 'function');
    assert.match(call.id, /\S/);
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === 'get_weather') assert.equal(typeof args.city, 'string');
    else assert.ok(call.function.name === 'add' && Number.isInteger(args.a) && Number.isFinite(args.b), call.function.arguments);
    assert.equal(out.named.length, 1, JSON.stringify(out.named));
    assert.equal(out.named[0].function.name, 'get_weather');
    assert.equal(typeof JSON.parse(out.named[0].function.arguments).city, 'string');
    assert.equal(out.follow, 4);

    assert.equal(out.json.finish, 'stop', out.json.content);
    checkPerson(JSON.parse(out.json.content));
    assert.deepEqual(out.json.parsed, JSON.parse(out.json.content));
    assert.equal(out.json.streamed, out.json.content);

    assert.deepEqual([out.errors.schema.name, out.errors.schema.status, out.errors.schema.code], ['BadRequestError', 400, 'bad_schema']);
    assert.deepEqual([out.errors.empty.name, out.errors.empty.status, out.errors.empty.code], ['BadRequestError', 400, 'bad_request']);

    // The SDK ends an aborted stream's iteration quietly (or with its abort error), within a few chunks.
    assert.ok(out.streamAbort === null || out.streamAbort.name === 'APIUserAbortError', JSON.stringify(out.streamAbort));
    assert.ok(out.chunksAfterAbort < 10, `${out.chunksAfterAbort} chunks`);
    assert.equal(out.plainAbort?.name, 'APIUserAbortError');
    assert.deepEqual(out.again, A.cases[0].greedy_ids);
    assert.ok(out.againMs < 5000, `the next request took ${out.againMs} ms: an aborted generation went on`);
    assert.deepEqual(b.logs.filter((l) => l.startsWith('pageerror')), []);
  } finally {
    await b.close();
    await hub.close();
  }
});
