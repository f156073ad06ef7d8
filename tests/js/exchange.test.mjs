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

/** A shard worker serving `buf` as shard 0: each stage's output is [kind, layer, pos, Σx, run count]. */
function startShard(buf) {
  const src = `
    import { workerData, parentPort } from 'node:worker_threads';
    const { serve } = await import(${JSON.stringify(pathToFileURL(file).href)});
    let runs = 0;
    serve(workerData.buf, 0, 0, (kind, layer, pos, x) => {
      runs++;
      const out = new Float32Array([kind, layer, pos, x.reduce((a, b) => a + b, 0), runs]);
      return { out, ms: 0 };
    }, (e) => parentPort.postMessage(String(e)));
    parentPort.postMessage('stopped');
  `;
  return new Worker(new URL(`data:text/javascript,${encodeURIComponent(src)}`), { workerData: { buf } });
}

test('shared exchange: every stage runs once, in order; a wake-up without a new command runs nothing', async () => {
  const buf = X.exchangeBuffer(1, 16, 16);
  const ex = new X.SharedExchange(buf);
  const shard = startShard(buf);
  const stopped = new Promise((r) => shard.once('message', r));
  try {
    const ctrl = new Int32Array(buf.sab, 0, 8);
    for (let s = 1; s <= 50; s++) {
      const [{ out }] = await ex.run(s % 3, s, 10 * s, new Float32Array([s, 1, 2]), () => null);
      assert.deepEqual([...out], [s % 3, s, 10 * s, s + 3, s], `stage ${s}`);
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
