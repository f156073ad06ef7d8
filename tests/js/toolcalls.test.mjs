// The tool-call parser (www/src/toolcalls.ts) on synthetic model outputs and on the exact text the
// real Qwen3.5 template writes for past calls (tests/chat/reference.json, rendered by jinja2): whole,
// streamed in pieces of every size, several calls, typed parameters, malformed calls → text.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dist = join(root, 'www', 'dist', 'clef.js');
const skip = existsSync(dist) ? false : 'www/dist is not built (./build.sh)';
const load = () => import(dist);

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' }, days: { type: 'integer' }, threshold: { type: 'number' }, metric: { type: 'boolean' },
        opts: { type: 'object' }, hours: { type: 'array' }, note: { type: ['string', 'null'] }, zip: { type: 'string' },
      },
    },
  },
};

let n = 0;
const ids = () => `call_${n++}`;

/** Feeds `text` in pieces of `size` characters; returns {content, calls, events}. */
async function run(text, size = Infinity, tools = [WEATHER]) {
  const { ToolCallParser } = await load();
  const p = new ToolCallParser(tools, ids);
  const events = [];
  for (let i = 0; i < text.length; i += size) events.push(...p.push(text.slice(i, i + size)));
  events.push(...p.finish());
  const content = events.filter((e) => e.kind === 'content').map((e) => e.text).join('');
  const calls = events.filter((e) => e.kind === 'call').map((e) => e.call);
  return { content, calls, events };
}

const call = (name, params) =>
  `<tool_call>\n<function=${name}>\n${Object.entries(params).map(([k, v]) => `<parameter=${k}>\n${v}\n</parameter>\n`).join('')}</function>\n</tool_call>`;

test('one call: parameters typed by the schema, arguments in the order written', { skip }, async () => {
  const text = call('get_weather', { city: 'Paris', days: '3', threshold: '0.5', metric: 'True', opts: '{"a": [1, 2.5]}', hours: '[1, 2]', note: 'null', zip: '075' });
  for (const size of [Infinity, 1, 2, 3, 5, 7, 13]) {
    const r = await run(text, size);
    assert.equal(r.content, '', `size ${size}`);
    assert.equal(r.calls.length, 1);
    assert.equal(r.calls[0].type, 'function');
    assert.match(r.calls[0].id, /^call_\d+$/);
    assert.equal(r.calls[0].function.name, 'get_weather');
    assert.equal(r.calls[0].function.arguments, '{"city":"Paris","days":3,"threshold":0.5,"metric":true,"opts":{"a":[1,2.5]},"hours":[1,2],"note":null,"zip":"075"}');
  }
});

test('text before, several calls, whitespace between them dropped; streamed in every piece size gives the same', { skip }, async () => {
  const text = `Let me check both cities.\n\n${call('get_weather', { city: 'Paris' })}\n${call('get_weather', { city: 'Berlin', days: '2' })}\n`;
  const whole = await run(text);
  assert.equal(whole.content, 'Let me check both cities.');
  assert.deepEqual(whole.calls.map((c) => c.function.arguments), ['{"city":"Paris"}', '{"city":"Berlin","days":2}']);
  for (let size = 1; size <= 24; size++) {
    const r = await run(text, size);
    assert.equal(r.content, whole.content, `size ${size}`);
    assert.deepEqual(r.calls.map((c) => c.function), whole.calls.map((c) => c.function), `size ${size}`);
    // Content never arrives after a call it precedes, and a call is given out exactly once.
    assert.equal(r.events.filter((e) => e.kind === 'call').length, 2);
  }
});

test('malformed or cut-off calls come back as text, not a crash', { skip }, async () => {
  const cases = [
    '<tool_call>\nhello</tool_call>',
    '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis',
    '<tool_call>\n<function=get_weather\nbroken>\n</function>',
    '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\nstray text\n</function>\n</tool_call>',
    'Use the <tool_call> tag to call tools.',
    'Ends with a partial tag <tool_ca',
    '<tool_call>',
  ];
  for (const text of cases) {
    for (const size of [Infinity, 1, 4]) {
      const r = await run(text, size);
      assert.equal(r.calls.length, 0, text);
      assert.equal(r.content, text, `${JSON.stringify(text)} size ${size}`);
    }
  }
  // A good call after a malformed one still parses; the malformed part is text.
  const r = await run(`<tool_call>\noops\n${call('get_weather', { city: 'Rome' })}`);
  assert.equal(r.content, '<tool_call>\noops');
  assert.equal(r.calls[0].function.arguments, '{"city":"Rome"}');
});

test('a call cut after </function> (the one-call stop string) counts; text after the calls is content', { skip }, async () => {
  const r = await run('<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n');
  assert.equal(r.calls.length, 1);
  assert.equal(r.content, '');
  const r2 = await run(`${call('get_weather', {})}\nDone.`);
  assert.equal(r2.calls[0].function.arguments, '{}');
  assert.equal(r2.content, 'Done.');
});

test('values that do not fit the schema stay text; no schema: JSON or Python literals', { skip }, async () => {
  const { typedValue } = await load();
  assert.equal(typedValue('three', { type: 'integer' }), 'three');
  assert.equal(typedValue('12', { type: 'string' }), '12');
  assert.equal(typedValue('  12 ', { type: 'integer' }), 12);
  assert.equal(typedValue('1.0', { type: 'number' }), 1);
  assert.equal(typedValue('-2e3', { type: 'number' }), -2000);
  assert.equal(typedValue('false', { type: 'boolean' }), false);
  assert.equal(typedValue('{"a":1}', { type: 'array' }), '{"a":1}');
  assert.equal(typedValue('null', { anyOf: [{ type: 'integer' }, { type: 'null' }] }), null);
  assert.equal(typedValue('7', { anyOf: [{ type: 'integer' }, { type: 'null' }] }), 7);
  assert.deepEqual(typedValue('[1, "a"]', undefined), [1, 'a']);
  assert.equal(typedValue('True', undefined), true);
  assert.equal(typedValue('None', undefined), null);
  assert.equal(typedValue('hello world', undefined), 'hello world');
});

test('the text the real Qwen3.5 template writes for past calls parses back to those calls', { skip }, async () => {
  const { parseToolCalls } = await load();
  const ref = JSON.parse(readFileSync(join(root, 'tests', 'chat', 'reference.json'), 'utf8'));
  let checked = 0;
  for (const c of ref.cases) {
    if (c.template !== 'Qwen3.5' || typeof c.expected.text !== 'string') continue;
    const req = JSON.parse(c.request);
    const withCalls = req.messages.filter((m) => m.role === 'assistant' && m.tool_calls?.length);
    const turns = c.expected.text.split('<|im_start|>assistant\n').slice(1).map((t) => t.split('<|im_end|>')[0])
      .filter((t) => t.includes('<tool_call>'))
      .map((t) => (t.includes('</think>') ? t.slice(t.indexOf('</think>') + '</think>'.length) : t));
    assert.equal(turns.length, withCalls.length, c.name);
    for (const [i, turn] of turns.entries()) {
      const r = parseToolCalls(turn, req.tools);
      const want = withCalls[i].tool_calls;
      assert.equal(r.calls.length, want.length, c.name);
      assert.equal(r.content, (withCalls[i].content ?? '').trim() || null, c.name);
      for (const [j, got] of r.calls.entries()) {
        const w = want[j].function;
        assert.equal(got.function.name, w.name);
        const wantArgs = typeof w.arguments === 'string' ? (w.arguments.trim() ? JSON.parse(w.arguments) : {}) : w.arguments;
        // Same values, same key order.
        assert.equal(got.function.arguments, JSON.stringify(wantArgs), `${c.name} call ${j}`);
        checked++;
      }
    }
  }
  assert.ok(checked >= 12, `${checked} calls checked`);
});

test('a chat answer: reasoning stays reasoning (even with a call in it), then content and calls, in any pieces', { skip }, async () => {
  const { ChatAnswer } = await load();
  const text = `\nI should call <tool_call> the tool.\n</think>\n\nChecking.\n\n${call('get_weather', { city: 'Paris', days: '2' })}`;
  for (const size of [Infinity, 1, 3, 8]) {
    const a = new ChatAnswer(true, [WEATHER]);
    const parts = [];
    for (let i = 0; i < text.length; i += size) parts.push(...a.push(text.slice(i, i + size), 1));
    parts.push(...a.push('', -1, true));
    const of = (k) => parts.filter((p) => p.kind === k);
    assert.equal(of('reasoning').map((p) => p.text).join(''), 'I should call <tool_call> the tool.\n', `size ${size}`);
    assert.equal(of('content').map((p) => p.text).join(''), 'Checking.');
    assert.deepEqual(of('call').map((p) => p.call.function.arguments), ['{"city":"Paris","days":2}']);
    const firstCall = parts.findIndex((p) => p.kind === 'call');
    assert.ok(parts.every((p, i) => p.kind !== 'content' || i < firstCall), 'content after the call');
  }
  // A forced start (tool_choice named): the prompt holds `<tool_call>\n<function=NAME>\n`.
  const forced = new ChatAnswer(false, [WEATHER], '<tool_call>\n<function=get_weather>\n');
  const parts = [...forced.push('<parameter=city>\nLima\n</parameter>\n</function>\n</tool_call>', 5), ...forced.push('', -1, true)];
  assert.deepEqual(parts.map((p) => p.kind), ['call']);
  assert.equal(forced.calls[0].function.arguments, '{"city":"Lima"}');
  // Without tools the text is content as it is.
  const plain = new ChatAnswer(false, null);
  assert.deepEqual(plain.push(call('x', {}), 1), [{ kind: 'content', text: call('x', {}) }]);
});
