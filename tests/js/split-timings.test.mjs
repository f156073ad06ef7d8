// `node www/cli.mjs generate … --workers N --json`: the coordinator's timings of a split model
// (usage.split_timings → timings.split), which tools/bench-tp.sh reads. Needs ./build.sh (www/dist).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const model = join(root, '..', 'shared', 'fixtures', 'qwen35-tiny', 'A-F32.gguf');
// 40 prompt tokens: two prefill slices (32 + 8), so the prompt runs two passes.
const prompt = Array.from({ length: 40 }, (_, i) => 1000 + 37 * i).join(',');
const MAX_TOKENS = 6;

function generate(workers) {
  const r = spawnSync(process.execPath, [join(root, 'www/cli.mjs'), 'generate', '--model', model, '--tokens', prompt,
    '--max-tokens', String(MAX_TOKENS), '--ignore-eos', '--json', '--workers', String(workers)], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

test('generate --workers 2 --json reports the coordinator vs shard-wait split per phase; one worker reports none', () => {
  const one = generate(1);
  const two = generate(2);
  assert.equal(two.workers, 2);
  assert.deepEqual(two.tokens, one.tokens, 'the same greedy tokens with 1 and 2 workers');
  assert.equal(one.timings.split, undefined, 'a whole model has no split timings');
  const { prompt: p, decode: d } = two.timings.split;
  for (const [phase, t, total] of [['prompt', p, two.timings.prompt_ms], ['decode', d, two.timings.decode_ms]]) {
    assert.ok(t.stages > 0 && Number.isInteger(t.stages), `${phase}: stages ${t.stages}`);
    assert.ok(t.wait_ms > 0 && t.coordinator_ms > 0, `${phase}: ${JSON.stringify(t)}`);
    // Both are parts of the phase's wall time (0.1 ms rounding each).
    assert.ok(t.wait_ms + t.coordinator_ms <= total + 0.3, `${phase}: ${JSON.stringify(t)} vs ${total} ms`);
  }
  // MAX_TOKENS − 1 decode passes (the first token comes from the prompt's logits) of k stages each
  // (2 per layer + the LM head); 2 prompt passes (32 + 8 tokens), only the last one with the LM head.
  const k = d.stages / (MAX_TOKENS - 1);
  assert.ok(Number.isInteger(k) && k >= 3, `decode stages ${d.stages}`);
  assert.equal(p.stages, 2 * (k - 1) + 1, `prompt stages ${p.stages}, ${k} per decode pass`);
});
