// The one table of parameter ranges (www/src/validate.ts): every sampling parameter and load
// option out of range, wrong types, bad messages → BadRequest with a message naming the parameter,
// its range and the value; values in range pass through unchanged.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { importTs } from './bundle.mjs';

const V = await importTs('www/src/validate.ts');

const rejects = (f, re) => assert.throws(f, (e) => e instanceof V.BadRequest && e.code === 'bad_request' && re.test(e.message), re.toString());

test('sampling parameters out of OpenAI\'s ranges are refused, each with its range in the message', () => {
  const bad = {
    temperature: [[-0.1, /temperature must be a number between 0 and 2 \(got -0\.1\)/], [2.5, /between 0 and 2/], ['hot', /got "hot"/], [NaN, /got NaN/]],
    top_p: [[2, /top_p must be a number between 0 and 1 \(got 2\)/], [-1, /got -1/]],
    top_k: [[-3, /top_k must be a non-negative integer \(got -3\)/], [2.5, /non-negative integer/]],
    min_p: [[1.5, /min_p must be a number between 0 and 1/]],
    presence_penalty: [[3, /presence_penalty must be a number between -2 and 2/]],
    frequency_penalty: [[-2.5, /frequency_penalty must be a number between -2 and 2/]],
    repetition_penalty: [[0, /repetition_penalty must be a number greater than 0 and at most 10/], [-1, /greater than 0/]],
    seed: [[-1, /seed must be an integer between 0 and/], [1.5, /integer/]],
    max_tokens: [[1.5, /max_tokens must be a positive integer \(got 1\.5\)/], [0, /positive integer/], [-4, /positive integer/], ['10', /got "10"/]],
    max_completion_tokens: [[0.5, /max_completion_tokens must be a positive integer/]],
  };
  for (const [k, cases] of Object.entries(bad)) for (const [v, re] of cases) rejects(() => V.samplingParams({ [k]: v }), re);
  rejects(() => V.samplingParams({ n: 2 }), /only n = 1 is supported \(got 2\)/);
  rejects(() => V.samplingParams({ stop: 5 }), /stop must be a string or an array of strings/);
  rejects(() => V.samplingParams({ stop: ['a', 3] }), /stop must be/);
  rejects(() => V.samplingParams({ logit_bias: { abc: 1 } }), /'abc' is not a token id/);
  rejects(() => V.samplingParams({ logit_bias: { 12: 101 } }), /logit_bias\['12'\] must be a number between -100 and 100/);
  rejects(() => V.samplingParams({ logit_bias: [1] }), /logit_bias must be an object/);
  rejects(() => V.samplingParams({ ignore_eos: 'yes' }), /ignore_eos must be true or false/);
});

test('sampling parameters in range pass through; null and undefined mean "not given"', () => {
  const p = V.samplingParams({
    temperature: 0, top_p: 1, top_k: 0, min_p: 0.05, presence_penalty: -2, frequency_penalty: 2, repetition_penalty: 1.1, seed: 42,
    max_completion_tokens: 7, stop: 'x', logit_bias: { 5: -100 }, ignore_eos: true, n: 1, user: 'u',
  });
  assert.deepEqual(p, {
    max_tokens: 7, temperature: 0, top_p: 1, top_k: 0, min_p: 0.05, seed: 42, presence_penalty: -2, frequency_penalty: 2,
    repetition_penalty: 1.1, stop: ['x'], logit_bias: { 5: -100 }, ignore_eos: true,
  });
  assert.deepEqual(V.samplingParams({ temperature: null, top_p: undefined, max_tokens: null, stop: null, n: null }), {});
  assert.equal(V.samplingParams({ temperature: 2 }).temperature, 2);
});

test('messages: a non-empty array; roles system/developer/user/assistant/tool; content a string or text parts', () => {
  rejects(() => V.checkMessages([]), /messages must be a non-empty array/);
  rejects(() => V.checkMessages('hi'), /messages must be a non-empty array/);
  rejects(() => V.checkMessages([null]), /messages\[0\] must be an object \{role, content\}/);
  rejects(() => V.checkMessages([{ content: 'x' }]), /messages\[0\] needs a role/);
  rejects(() => V.checkMessages([{ role: 'wizard', content: 'x' }]), /messages\[0\] has the unknown role "wizard": the roles are system, developer, user, assistant, tool/);
  rejects(() => V.checkMessages([{ role: 'user', content: 42 }]), /messages\[0\]\.content must be a string or an array of text parts \(got 42\)/);
  rejects(() => V.checkMessages([{ role: 'user', content: { text: 'x' } }]), /got an object/);
  rejects(() => V.checkMessages([{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }]), /content\[0\] has type "image_url": only text parts are supported/);
  rejects(() => V.checkMessages([{ role: 'user', content: [{ type: 'text', text: 7 }] }]), /content\[0\]\.text must be a string/);
  rejects(() => V.checkMessages([{ role: 'user', content: ['x'] }]), /content\[0\] must be a content part/);
  rejects(() => V.checkMessages([{ role: 'user' }]), /messages\[0\] \(user\) needs content/);
  rejects(() => V.checkMessages([{ role: 'user', content: 'x' }, { role: 'assistant', content: 'y', reasoning_content: 5 }]), /messages\[1\]\.reasoning_content must be a string/);
  const ok = V.checkMessages([
    { role: 'developer', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
    { role: 'assistant', content: null, tool_calls: [] }, { role: 'tool', content: '{}', tool_call_id: '1' },
  ]);
  assert.equal(ok[0].role, 'system', 'developer is rendered as system');
  assert.equal(ok.length, 4);
});

test('load options: ranges, powers of two, sha256 shape; defaults from the same table', () => {
  rejects(() => V.loadParams({ contextLength: -5 }), /contextLength must be an integer between 16 and 16777216 \(got -5\)/);
  rejects(() => V.loadParams({ contextLength: 0 }), /contextLength/);
  rejects(() => V.loadParams({ contextLength: 100.5 }), /contextLength/);
  rejects(() => V.loadParams({ chunkSize: 3 << 20 }), /chunkSize must be a power of two between 64 KiB and 1 GiB/);
  rejects(() => V.loadParams({ concurrency: 0 }), /concurrency must be an integer between 1 and 16/);
  rejects(() => V.loadParams({ maxRetries: -1 }), /maxRetries/);
  rejects(() => V.loadParams({ memoryLimit: 10 }), /memoryLimit must be a number ≥ 1 MiB/);
  rejects(() => V.loadParams({ timeoutMs: 0 }), /timeoutMs/);
  rejects(() => V.loadParams({ idleTimeoutMs: 'soon' }), /idleTimeoutMs/);
  rejects(() => V.loadParams({ sha256: 'abc' }), /sha256 must be 64 hexadecimal digits/);
  rejects(() => V.loadParams({ traceStages: 1 }), /traceStages must be true or false \(got 1\)/);
  rejects(() => V.loadParams({ engineShard: 'no' }), /engineShard must be true or false/);
  assert.deepEqual(V.loadParams({ traceStages: true, engineShard: false, band: 25 }), { traceStages: true, engineShard: false, band: 25 });
  assert.deepEqual(V.loadParams({ contextLength: 256, chunkSize: 1 << 20, sha256: 'A'.repeat(64), cache: true }), { contextLength: 256, chunkSize: 1 << 20, sha256: 'a'.repeat(64) });
  const r = V.resolveLoadParams({ cache: false, concurrency: 5 });
  assert.equal(r.concurrency, 5);
  for (const [k, row] of Object.entries(V.LOAD)) if (k !== 'concurrency') assert.equal(r[k], row.default, k);
  assert.equal(r.chunkSize, 16 << 20);
  assert.equal(r.contextLength, undefined, 'chosen per model');
});

test('whole requests (chatRequest, completionRequest): every field checked, holes in arrays refused', () => {
  const user = [{ role: 'user', content: 'Hi' }];
  rejects(() => V.chatRequest(null), /create\(\) needs a request object \{messages, …\} \(got null\)/);
  rejects(() => V.chatRequest({ messages: user, tool_choice: 5 }), /tool_choice must be 'auto', 'none', 'required' or \{type: 'function', function: \{name\}\} \(got 5\)/);
  rejects(() => V.chatRequest({ messages: user, tool_choice: 'required' }), /tool_choice needs tools/);
  rejects(() => V.chatRequest({ messages: user, tools: 'x' }), /tools must be an array \(got "x"\)/);
  rejects(() => V.chatRequest({ messages: user, tools: [, { type: 'function', function: { name: 'f' } }] }), /tools\[0\] must be/); // eslint-disable-line no-sparse-arrays
  rejects(() => V.chatRequest({ messages: [, ...user] }), /messages\[0\] must be an object/); // eslint-disable-line no-sparse-arrays
  rejects(() => V.chatRequest({ messages: [{ role: 'user', content: [, { type: 'text', text: 'x' }] }] }), /messages\[0\]\.content\[0\] must be a content part/); // eslint-disable-line no-sparse-arrays
  rejects(() => V.chatRequest({ messages: user, stop: ['a', , 'b'] }), /stop must be a string or an array of strings/); // eslint-disable-line no-sparse-arrays
  rejects(() => V.chatRequest({ messages: user, stream: 'yes' }), /stream must be true or false \(got "yes"\)/);
  rejects(() => V.chatRequest({ messages: user, parallel_tool_calls: 0 }), /parallel_tool_calls must be true or false/);
  rejects(() => V.chatRequest({ messages: user, enable_thinking: 'no' }), /enable_thinking must be true or false/);
  rejects(() => V.chatRequest({ messages: user, chat_template_kwargs: 'x' }), /chat_template_kwargs must be an object \(got "x"\)/);
  rejects(() => V.chatRequest({ messages: user, response_format: { type: 'xml' } }), /response_format type "xml" is not one of/);
  rejects(() => V.chatRequest({ messages: user, response_format: { type: 'json_schema', json_schema: { name: 'a b' } } }), /json_schema\.name must be/);
  const tools = [{ type: 'function', function: { name: 'get_weather' } }];
  const r = V.chatRequest({
    messages: [{ role: 'developer', content: 'Be brief.' }, ...user], tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
    parallel_tool_calls: false, enable_thinking: false, chat_template_kwargs: { x: 1 }, stream: true, temperature: 0,
  });
  assert.deepEqual(r.params, { temperature: 0, stop: ['</tool_call>'], output: { type: 'tool_calls', tools, name: 'get_weather', parallel: false } });
  assert.equal(r.prompt.messages[0].role, 'system');
  assert.deepEqual(r.prompt.chatTemplateKwargs, { x: 1, enable_thinking: false });
  assert.equal(r.prompt.assistantPrefix, '<tool_call>\n<function=get_weather>\n');
  assert.equal(r.stream, true);

  rejects(() => V.completionRequest({ prompt: 5 }), /prompt must be a string or an array of token ids \(non-negative integers\) \(got 5\)/);
  for (const ids of [[1.5], [-1], [NaN], [2 ** 32], [1, , 2]]) rejects(() => V.completionRequest({ prompt: ids }), /prompt must be/); // eslint-disable-line no-sparse-arrays
  rejects(() => V.completionRequest({ prompt: [1, 2], echo: true }), /echo needs a text prompt/);
  rejects(() => V.completionRequest({ prompt: 'x', echo: 'yes' }), /echo must be true or false/);
  assert.deepEqual(V.completionRequest({ prompt: 'Once', echo: true, max_tokens: 3 }), {
    params: { max_tokens: 3 }, prompt: { kind: 'text', text: 'Once' }, echo: 'Once', stream: false,
  });
  assert.deepEqual(V.completionRequest({ prompt: [0, 7], logprobs: 2 }), { params: { logprobs: 2 }, prompt: { kind: 'tokens', ids: [0, 7] }, echo: '', stream: false });
});

test('resolveLoadParams: null means "not given", as in loadParams', () => {
  const r = V.resolveLoadParams({ memoryLimit: null, concurrency: null, contextLength: null });
  assert.equal(r.memoryLimit, V.LOAD.memoryLimit.default);
  assert.equal(r.concurrency, 3);
  assert.equal(r.contextLength, undefined);
});
