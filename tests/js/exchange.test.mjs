// The shared-memory exchange (www/src/exchange.ts) between a coordinator and a shard worker, in
// Node with worker_threads: stages run once each, in order, with their outputs; and a wake-up that
// is no command — the late notify of a coordinator descheduled between bumping SEQ and notifying —
// runs nothing (it once ran the stage again, counted twice, and the coordinator read a shard's
// output before it was written: issue 10's rare wrong decisions on split models).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { pathToFileURL } from 'node:url';
import { bundleTs } from './bundle.mjs';

const file = await bundleTs('www/src/exchange.ts');
const X = await import(pathToFileURL(file).href);

/**
 * A shard worker serving `buf` as shard `index`: each stage's output is [kind, layer, pos, Σx, run
 * count, its share's three words (−1 each without one)].
 */
function startShard(buf, index = 0) {
  const src = `
    import { workerData, parentPort } from 'node:worker_threads';
    const { serve } = await import(${JSON.stringify(pathToFileURL(file).href)});
    let runs = 0;
    serve(workerData.buf, workerData.index, 0, (kind, layer, pos, x, share) => {
      runs++;
      const out = new Float32Array([kind, layer, pos, x.reduce((a, b) => a + b, 0), runs, ...(share ?? [-1, -1, -1])]);
      return { out, ms: 0 };
    }, (e) => parentPort.postMessage(String(e)));
    parentPort.postMessage('stopped');
  `;
  return new Worker(new URL(`data:text/javascript,${encodeURIComponent(src)}`), { workerData: { buf, index } });
}

test('shared exchange: every stage runs once, in order; a wake-up without a new command runs nothing', async () => {
  const buf = X.exchangeBuffer(1, 16, 16);
  const ex = new X.SharedExchange(buf);
  const shard = startShard(buf);
  const stopped = new Promise((r) => shard.once('message', r));
  try {
    const ctrl = new Int32Array(buf.sab, 0, 8);
    for (let s = 1; s <= 50; s++) {
      const [{ out }] = await ex.run(s % 3, s, 10 * s, new Float32Array([s, 1, 2]), [], () => null);
      assert.deepEqual([...out], [s % 3, s, 10 * s, s + 3, s, -1, -1, -1], `stage ${s}`);
      // The late notify: SEQ (ctrl[0]) unchanged, the shard woken anyway. It must go back to waiting.
      Atomics.notify(ctrl, 0);
      await new Promise((r) => setTimeout(r, 1));
      assert.equal(Atomics.load(ctrl, 6), 1, `stage ${s}: DONE counts the stage once (the shard did not run it again)`);
    }
    await ex.stop(() => null);
    assert.equal(await stopped, 'stopped');
  } finally {
    await shard.terminate();
  }
});

test('shared exchange with a local shard 0: the coordinator computes it between waking the others and waiting; outputs in shard order, spinning or not; each shard gets its share of the stage', async () => {
  for (const spinMs of [0, X.SPIN_MS]) {
    const buf = X.exchangeBuffer(3, 16, 16, spinMs);
    let localRuns = 0;
    const ex = new X.SharedExchange(buf, (kind, layer, pos, x, share) => ({ out: new Float32Array([-kind, -layer, -pos, x.length, ++localRuns, ...(share ?? [-1, -1, -1])]), ms: 0 }));
    const shards = [startShard(buf, 1), startShard(buf, 2)];
    const stopped = shards.map((w) => new Promise((r) => w.once('message', r)));
    try {
      for (let s = 1; s <= 50; s++) {
        // Odd stages give every shard a share (src/balance.rs), even ones none (each its even share).
        const share = (i) => (s % 2 ? Uint32Array.of(s, s + i, i % 2) : undefined);
        const outs = await ex.run(s % 3, s, 10 * s, new Float32Array([s, 1, 2]), [0, 1, 2].map(share), () => null);
        const words = (i) => (s % 2 ? [s, s + i, i % 2] : [-1, -1, -1]);
        assert.equal(outs.length, 3);
        assert.deepEqual([...outs[0].out], [-(s % 3), -s, -10 * s, 3, s, ...words(0)], `stage ${s}, local shard`);
        outs.slice(1).forEach((o, k) => assert.deepEqual([...o.out], [s % 3, s, 10 * s, s + 3, s, ...words(k + 1)], `stage ${s}, spin ${spinMs}`));
      }
      // A failing local stage: the others finish theirs first, the error comes out, the exchange still works.
      const failing = new X.SharedExchange(buf, () => {
        throw new Error('local stage failed');
      });
      await assert.rejects(failing.run(1, 1, 1, new Float32Array([1]), [], () => null), /local stage failed/);
      assert.equal((await ex.run(0, 0, 0, new Float32Array([4]), [], () => null))[2].out[4], 52, 'both workers ran it');
      await ex.stop(() => null);
      assert.deepEqual(await Promise.all(stopped), ['stopped', 'stopped']);
    } finally {
      await Promise.all(shards.map((w) => w.terminate()));
    }
  }
});
