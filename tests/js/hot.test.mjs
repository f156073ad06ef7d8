// The postMessage exchange's keep-awake loop (www/src/hot.ts): it turns while its time lasts, lets
// other messages through meanwhile, stops by itself, and starts again when asked.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { importTs } from './bundle.mjs';

const { HotLoop } = await importTs('www/src/hot.ts');

test('HotLoop turns for the time asked, lets messages through, then stops until kept again', async () => {
  const loop = new HotLoop();
  let turns = 0;
  const post = loop.port.postMessage.bind(loop.port);
  loop.port.postMessage = (m) => {
    turns++;
    post(m);
  };
  const other = new MessageChannel();
  const got = [];
  other.port1.onmessage = (e) => got.push([e.data, turns]);
  other.port1.unref();

  loop.keep(40);
  await sleep(5);
  other.port2.postMessage('while turning');
  await sleep(80);
  const after = turns;
  assert.ok(after > 20, `turned ${after} times in 40 ms`);
  assert.equal(got.length, 1, 'a message from another port is handled while the loop turns');
  assert.ok(got[0][1] < after, 'and handled before the loop stopped');
  await sleep(30);
  assert.equal(turns, after, 'stopped once its time was up');

  loop.keep(10);
  await sleep(40);
  assert.ok(turns > after + 2, 'kept again: turning again');
  const end = turns;
  await sleep(20);
  assert.equal(turns, end);
});
