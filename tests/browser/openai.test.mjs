// The official `openai` npm package, unchanged, against the engine on the tiny fixture model (Node):
// through createOpenAIFetch (no server) and through `node www/cli.mjs serve` (HTTP + SSE).
// Completions and chat, streamed and not (a stream gives the same text as the plain answer),
// usage chunks as OpenAI sends them, tools and tool_choice, typed errors as HTTP errors, abort
// through the signal (the engine stays usable), follow-up turns with tool results.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { A, PROMPT_TEXT, fixturesDir, repoRoot } from './helpers.mjs';

const dist = join(repoRoot, 'www', 'dist', 'clef.js');
const skip = existsSync(dist) ? false : 'www/dist is not built (./build.sh)';
const MODEL = join(fixturesDir, 'A-F32.gguf');
const WEATHER = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const user = (content) => [{ role: 'user', content }];

/** The checks every transport must pass; `client` talks to the engine `engine` (for direct comparisons). */
async function conformance(client, engine) {
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
    client.chat.completions.create({ ...req, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} } } }),
    (e) => e.status === 400 && e.code === 'bad_request',
  );
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
