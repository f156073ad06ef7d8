// The same package (www/dist/clef.js) under Node 20: the engine runs in-process, loading from a path
// or a URL (the Hub-like server, with dropped connections); plus unit tests of the page-side
// pieces (model names, the <think> splitter).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { startHubServer } from './hub-server.mjs';
import { A, PROMPT_TEXT, fixturesDir, repoRoot, rng } from './helpers.mjs';

const dist = join(repoRoot, 'www', 'dist', 'clef.js');
const skip = existsSync(dist) ? false : 'www/dist is not built (./build.sh)';
const load = async () => import(dist);

const chat = (engine, extra = {}) =>
  engine.chat.completions.create({ messages: [{ role: 'user', content: PROMPT_TEXT }], max_tokens: 16, temperature: 0, return_token_ids: true, ...extra });

test('Node: load from a path, greedy = llama.cpp (chat and token-id completions)', { skip }, async () => {
  const { ClefEngine } = await load();
  const engine = await ClefEngine.load(join(fixturesDir, 'A-F32.gguf'));
  try {
    assert.equal(engine.info.source, 'file');
    assert.equal(engine.info.architecture, 'qwen35');
    const r = await chat(engine);
    assert.deepEqual(r.prompt_token_ids, A.cases[0].prompt_ids);
    assert.deepEqual(r.choices[0].token_ids, A.cases[0].greedy_ids);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    for (const c of A.cases) {
      const t = await engine.completions.create({ prompt: c.prompt_ids, max_tokens: 16, temperature: 0, return_token_ids: true });
      assert.deepEqual(t.choices[0].token_ids, c.greedy_ids);
      assert.equal(t.object, 'text_completion');
    }
    // The rendered template is the fixture's prompt text; tokenize / detokenize round-trip.
    const text = await engine.applyChatTemplate([{ role: 'user', content: PROMPT_TEXT }]);
    assert.equal(text, `<|im_start|>user\n${PROMPT_TEXT}<|im_end|>\n<|im_start|>assistant\n`);
    assert.deepEqual(await engine.tokenize(text), A.cases[0].prompt_ids);
    assert.equal(await engine.detokenize(A.cases[0].prompt_ids, { special: true }), text);
    // Text completions parse special tokens like the chat template does.
    const t = await engine.completions.create({ prompt: text, max_tokens: 16, temperature: 0, return_token_ids: true });
    assert.deepEqual(t.choices[0].token_ids, A.cases[0].greedy_ids);
  } finally {
    await engine.unload();
  }
});

test('Node: load repo:QUANT over HTTP with dropped connections, sha256 verified; a quantized file generates', { skip }, async () => {
  const { ClefEngine } = await load();
  const hub = await startHubServer();
  try {
    const f = hub.files.get('test-org/clef-flash-GGUF').get('clef-flash-F32.gguf');
    const rand = rng(7);
    hub.faults.killAt = Array.from({ length: 4 }, () => 400000 + Math.floor(rand() * (f.size - 500000)));
    const phases = new Set();
    const engine = await ClefEngine.load('test-org/clef-flash-GGUF:F32', { hubUrl: hub.url, chunkSize: 1 << 20, retryDelayMs: 10, onProgress: (p) => phases.add(p.phase) });
    try {
      assert.equal(engine.info.verified, true);
      assert.equal(engine.info.sha256, f.sha256);
      assert.ok(engine.info.stats.retries >= 4);
      // Node 20 without --experimental-wasm-relaxed-simd: the baseline SIMD128 build.
      assert.equal(engine.info.stats.simd, 'simd128');
      assert.deepEqual([...phases], ['header', 'download', 'verify', 'ready']);
      assert.deepEqual((await chat(engine)).choices[0].token_ids, A.cases[0].greedy_ids);
    } finally {
      await engine.unload();
    }
    // A quantized file: generates where this build has its kernels; otherwise it is refused with
    // unsupported_type after the header, before any weight is downloaded.
    hub.clearLog();
    let q = null;
    try {
      q = await ClefEngine.load('test-org/clef-flash-GGUF:IQ2_M', { hubUrl: hub.url });
    } catch (e) {
      assert.equal(e.code, 'unsupported_type', e.message);
      assert.ok(hub.bytesServed() <= 1 << 20, `served ${hub.bytesServed()}`);
    }
    if (q) {
      try {
        const r = await chat(q);
        assert.equal(r.choices[0].token_ids.length, 16);
        assert.equal(q.info.verified, true);
      } finally {
        await q.unload();
      }
    }
  } finally {
    await hub.close();
  }
});

test('model names resolve to Hub URLs', { skip }, async () => {
  const { resolveModel } = await load();
  const r = resolveModel('NANI-Nithin/clef-flash-GGUF:IQ2_M');
  assert.equal(r.url, 'https://huggingface.co/NANI-Nithin/clef-flash-GGUF/resolve/main/clef-flash-IQ2_M.gguf');
  assert.equal(r.quant, 'IQ2_M');
  assert.deepEqual(r.hub, { hubUrl: 'https://huggingface.co', repo: 'NANI-Nithin/clef-flash-GGUF', revision: 'main', file: 'clef-flash-IQ2_M.gguf' });
  assert.equal(resolveModel('test-org/clef-flash-GGUF:F32', { hubUrl: 'http://127.0.0.1:9/', revision: 'v1' }).url,
    'http://127.0.0.1:9/test-org/clef-flash-GGUF/resolve/v1/clef-flash-F32.gguf');
  assert.equal(resolveModel('a/b:sub/x-Q4_K_M.gguf').url, 'https://huggingface.co/a/b/resolve/main/sub/x-Q4_K_M.gguf');
  assert.equal(resolveModel({ repo: 'a/b', file: 'm.gguf', revision: 'dev' }).url, 'https://huggingface.co/a/b/resolve/dev/m.gguf');
  assert.equal(resolveModel('https://cdn.example/x/clef-flash-IQ1_S.gguf?download=1').cacheKey, 'https://cdn.example/x/clef-flash-IQ1_S.gguf');
  assert.equal(resolveModel('https://cdn.example/x/clef-flash-IQ1_S.gguf').quant, 'IQ1_S');
  assert.throws(() => resolveModel('not a model'), /not a model name/);
});

test('reasoning is split out of <think>…</think>, also when the tags arrive in pieces', { skip }, async () => {
  const { ThinkSplitter } = await load();
  const run = (inThink, pieces) => {
    const s = new ThinkSplitter(inThink);
    let reasoning = '';
    let content = '';
    for (const p of pieces) {
      const r = s.push(p);
      reasoning += r.reasoning;
      content += r.content;
    }
    const r = s.push('', true);
    return { reasoning: reasoning + r.reasoning, content: content + r.content };
  };
  // The Qwen3.5 template opens <think> in the prompt: the output starts inside it.
  assert.deepEqual(run(true, ['\nLet me', ' think.', '\n</', 'think>', '\n\n', 'Paris', '.']), { reasoning: 'Let me think.\n', content: 'Paris.' });
  assert.deepEqual(run(false, ['<th', 'ink>', 'hmm', '</think>', '\n\nyes']), { reasoning: 'hmm', content: 'yes' });
  assert.deepEqual(run(false, ['Plain', ' answer <think> inline']), { reasoning: '', content: 'Plain answer <think> inline' });
  assert.deepEqual(run(true, ['never closed </thi']), { reasoning: 'never closed </thi', content: '' });
  assert.deepEqual(run(false, ['<']), { reasoning: '', content: '<' });
});

test('Node: bad inputs through the public API are typed bad_request errors that say what is wrong; the engine keeps working', { skip }, async () => {
  const { ClefEngine } = await load();
  const path = join(fixturesDir, 'A-F32.gguf');
  const loadErr = async (opts) => ClefEngine.load(path, opts).then((e) => (e.unload(), null), (e) => e);
  for (const [opts, re] of [
    [{ contextLength: -5 }, /contextLength must be an integer between 16 and 16777216 \(got -5\)/],
    [{ contextLength: 0 }, /contextLength/],
    [{ chunkSize: 1000 }, /chunkSize must be a power of two/],
    [{ idleTimeoutMs: -1 }, /idleTimeoutMs/],
  ]) {
    const e = await loadErr(opts);
    assert.equal(e?.code, 'bad_request', JSON.stringify(opts));
    assert.match(e.message, re);
  }
  const engine = await ClefEngine.load(path);
  try {
    const user = [{ role: 'user', content: PROMPT_TEXT }];
    const code = (p) => p.then(() => 'ok', (e) => `${e.code}: ${e.message}`);
    const cases = {
      temperature: [engine.chat.completions.create({ messages: user, temperature: 3 }), /^bad_request: temperature must be a number between 0 and 2 \(got 3\)$/],
      top_p: [engine.chat.completions.create({ messages: user, top_p: 2 }), /^bad_request: top_p must be a number between 0 and 1/],
      top_p_neg: [engine.chat.completions.create({ messages: user, top_p: -1 }), /^bad_request: top_p/],
      top_k: [engine.chat.completions.create({ messages: user, top_k: -3 }), /^bad_request: top_k must be a non-negative integer/],
      min_p: [engine.completions.create({ prompt: 'x', min_p: 7 }), /^bad_request: min_p/],
      presence: [engine.completions.create({ prompt: 'x', presence_penalty: 9 }), /^bad_request: presence_penalty must be a number between -2 and 2/],
      frequency: [engine.chat.completions.create({ messages: user, frequency_penalty: -3, stream: true }), /^bad_request: frequency_penalty/],
      maxTokens: [engine.chat.completions.create({ messages: user, max_tokens: 2.5 }), /^bad_request: max_tokens must be a positive integer \(got 2\.5\)/],
      content: [engine.chat.completions.create({ messages: [{ role: 'user', content: 42 }] }), /^bad_request: messages\[0\]\.content must be a string or an array of text parts \(got 42\)/],
      role: [engine.chat.completions.create({ messages: [{ role: 'wizard', content: 'hi' }] }), /^bad_request: messages\[0\] has the unknown role "wizard"/],
      template: [engine.applyChatTemplate([{ role: 'user', content: { a: 1 } }]), /^bad_request: messages\[0\]\.content/],
      image: [engine.chat.completions.create({ messages: [{ role: 'user', content: [{ type: 'image_url' }] }] }), /^bad_request: .*only text parts/],
    };
    for (const [name, [p, re]] of Object.entries(cases)) assert.match(await code(p), re, name);
    // OpenAI's `developer` role is the system prompt.
    const dev = await engine.applyChatTemplate([{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'Hi' }]);
    assert.match(dev, /^<\|im_start\|>system\nBe brief\.<\|im_end\|>/);
    assert.deepEqual((await chat(engine)).choices[0].token_ids, A.cases[0].greedy_ids, 'still usable');
  } finally {
    await engine.unload();
  }
});
