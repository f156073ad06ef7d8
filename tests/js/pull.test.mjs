// load/pull.ts pullChunks: a worker reading its part of a cached model — long pieces straight into
// place, short ones (a column split's rows) through the stage, and a checker's whole-chunk checksum
// over both in file order. Every byte must land where its plan says, whichever way it came.
// pullTurns: the same by workers that take the cache's pieces in turns (Firefox).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { importTs, initWasm } from './bundle.mjs';

const g = await initWasm();
const { pullChunks, pullTurns, chunkReads, DIRECT_MIN } = await importTs('www/src/load/pull.ts');

const KiB = 1024;
const CHUNK = 256 * KiB;
const FILE = 3 * CHUNK;

function randomBytes(n, seed) {
  const b = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 255;
  }
  return b;
}

const file = randomBytes(FILE, 7);

// Three destinations ("shards") in wasm memory grown here, outside anything the allocator hands out.
const SHARD = 640 * KiB;
const mem = g.wasmMemory();
const base = mem.grow((3 * SHARD) / 65536) * 65536;
const ptrs = [base, base + SHARD, base + 2 * SHARD];

const plan = [
  // long and contiguous: read straight into place
  { shard: 0, dstOffset: 0, fileOffset: 10 * KiB, len: 100 * KiB, count: 1, fileStride: 100 * KiB, dstStride: 100 * KiB },
  // a column split's rows: 40 short pieces through the stage
  { shard: 1, dstOffset: 0, fileOffset: CHUNK + 100, len: 1000, count: 40, fileStride: 4096, dstStride: 1000 },
  // across a chunk boundary: 62 KiB in chunk 1 (short), 238 KiB in chunk 2 (long)
  { shard: 0, dstOffset: 300 * KiB, fileOffset: 450 * KiB, len: 300 * KiB, count: 1, fileStride: 300 * KiB, dstStride: 300 * KiB },
  // long but overlapping each other: both through the stage
  { shard: 2, dstOffset: 4, fileOffset: 120 * KiB, len: 100 * KiB, count: 1, fileStride: 100 * KiB, dstStride: 100 * KiB },
  { shard: 2, dstOffset: 200 * KiB, fileOffset: 150 * KiB, len: 100 * KiB, count: 1, fileStride: 100 * KiB, dstStride: 100 * KiB },
];

function expected() {
  const want = ptrs.map(() => new Uint8Array(SHARD));
  for (const o of plan) {
    for (let r = 0; r < o.count; r++) {
      const src = o.fileOffset + r * o.fileStride;
      want[o.shard].set(file.subarray(src, src + o.len), o.dstOffset + r * o.dstStride);
    }
  }
  return want;
}

function checksum(bytes) {
  const c = new g.Checksum();
  try {
    c.update(bytes);
    return c.digest();
  } finally {
    c.free();
  }
}

function chunks(checker) {
  return [0, 1, 2].map((index) => {
    const [start, end] = [index * CHUNK, (index + 1) * CHUNK];
    return { index, start, end, checksum: checksum(file.subarray(start, end)), checker };
  });
}

function run({ checker, corrupt = -1, shortAt = -1 }) {
  const heap = new Uint8Array(mem.buffer);
  for (const p of ptrs) heap.fill(0xee, p, p + SHARD);
  const reads = [];
  const read = (at, dest) => {
    reads.push([at, dest.length]);
    const n = at === shortAt ? dest.length - 1 : dest.length;
    dest.set(file.subarray(at, at + n));
    if (corrupt >= at && corrupt < at + n) dest[corrupt - at] ^= 1;
    return n;
  };
  const r = pullChunks(read, { plan, shardPtr: (i) => ptrs[i], chunks: chunks(checker), chunkSize: CHUNK, me: 0 });
  const got = ptrs.map((p) => new Uint8Array(mem.buffer, p, SHARD).slice());
  return { r, reads, got };
}

function assertPlaced(got) {
  const want = expected();
  for (const o of plan) {
    for (let r = 0; r < o.count; r++) {
      const at = o.dstOffset + r * o.dstStride;
      assert.deepEqual(got[o.shard].subarray(at, at + o.len), want[o.shard].subarray(at, at + o.len), `shard ${o.shard} at ${at}`);
    }
  }
}

test('every piece lands in place, as a checker of every chunk and as none', () => {
  for (const checker of [0, 5]) {
    const { r, got, reads } = run({ checker });
    assert.deepEqual(r.bad, []);
    assertPlaced(got);
    if (checker === 0) assert.equal(r.bytes, FILE, 'a checker reads each chunk once, whole');
    else assert.ok(r.bytes < FILE, 'a worker that checks nothing reads only what its pieces need');
    // The long pieces are read into place: reads as long as they are.
    assert.ok(reads.some(([at, n]) => at === 10 * KiB && n === 100 * KiB), 'the long piece in one read');
    assert.ok(!reads.some(([at, n]) => at === 120 * KiB && n === 100 * KiB), 'overlapping pieces through the stage');
    assert.ok(reads.some(([at, n]) => at === 2 * CHUNK && n === 450 * KiB + 300 * KiB - 2 * CHUNK), 'the long end of the boundary piece in one read');
  }
});

test("a checker finds a flipped byte anywhere in its chunk, in place or staged", () => {
  for (const at of [10 * KiB + 5, 130 * KiB, CHUNK + 3000, CHUNK + 200 * KiB, 2 * CHUNK + 7]) {
    const { r } = run({ checker: 0, corrupt: at });
    assert.deepEqual(r.bad, [Math.floor(at / CHUNK)], `byte ${at}`);
  }
  // Outside every piece of a chunk it does not check: not its business.
  assert.deepEqual(run({ checker: 5, corrupt: CHUNK + 3000 }).r.bad, []);
});

test('a short read marks its chunk bad', () => {
  assert.deepEqual(run({ checker: 5, shortAt: 10 * KiB }).r.bad, [0]);
  assert.deepEqual(run({ checker: 0, shortAt: 2 * CHUNK }).r.bad, [2]);
});

test('chunkReads: a whole chunk in file order, pieces read once', () => {
  // quads (shard, dst, src, len), unsorted
  const q = Float64Array.from([0, 0, 100 * KiB, 80 * KiB, 1, 0, 10, 500, 1, 500, 5000, 500, 0, 80 * KiB, 200 * KiB, 10]);
  const whole = chunkReads(q, [1 << 20, 2 << 20], 4 << 20, CHUNK, true).reads;
  let at = 0;
  for (const r of whole) {
    assert.equal(r.from, at);
    at += r.len;
  }
  assert.equal(at, CHUNK);
  assert.deepEqual(whole.find((r) => r.from === 100 * KiB), { from: 100 * KiB, len: 80 * KiB, at: 1 << 20 });
  // Not whole: the short pieces' span (5500 bytes from 10) and the long piece; nothing else.
  const { reads: part, staged } = chunkReads(q, [1 << 20, 2 << 20], 4 << 20, CHUNK, false);
  assert.deepEqual([...staged], [1, 0, 10, 500, 1, 500, 5000, 500, 0, 80 * KiB, 200 * KiB, 10], 'the short pieces, in file order');
  assert.deepEqual(part, [
    { from: 10, len: 5490, at: (4 << 20) + 10 },
    { from: 100 * KiB, len: 80 * KiB, at: 1 << 20 },
    { from: 200 * KiB, len: 10, at: (4 << 20) + 200 * KiB },
  ]);
  assert.ok(DIRECT_MIN <= 80 * KiB && DIRECT_MIN > 5000);
});

// The cache's pieces one chunk each, held by one worker at a time (as cache.ts openTurns with its
// Web Locks): `log` records each turn; a turn holds its piece across a tick before and after reading.
function fakeTurns(log, held, who) {
  const tick = () => new Promise((r) => setTimeout(r, 0));
  return {
    pieceSize: CHUNK,
    async take(p, wait, f) {
      while (held.has(p)) {
        if (!wait) return false;
        await held.get(p);
      }
      let release;
      held.set(p, new Promise((r) => (release = r)));
      try {
        log.push([who, p, wait]);
        await tick();
        f((at, dest) => {
          const from = p * CHUNK + at;
          const n = Math.max(0, Math.min(dest.length, FILE - from, CHUNK - at));
          dest.set(file.subarray(from, from + n));
          return n;
        });
        await tick();
      } finally {
        held.delete(p);
        release();
      }
      return true;
    },
  };
}

test('pullTurns: two workers take the pieces in turns, each starting at its own, and every byte lands', async () => {
  const heap = new Uint8Array(mem.buffer);
  for (const p of ptrs) heap.fill(0xee, p, p + SHARD);
  // The coordinator (-1) holds shard 0's pieces and checks chunk 1; shard worker 0 the rest.
  const mine = plan.filter((o) => o.shard === 0);
  const theirs = plan.filter((o) => o.shard !== 0);
  const cs = chunks(0).map((c) => ({ ...c, checker: c.index === 1 ? -1 : 0 }));
  const log = [];
  const held = new Map();
  const [a, b] = await Promise.all([
    pullTurns(fakeTurns(log, held, 'coordinator'), { plan: mine, shardPtr: (i) => ptrs[i], chunks: cs, chunkSize: CHUNK, me: -1 }),
    pullTurns(fakeTurns(log, held, 'shard'), { plan: theirs, shardPtr: (i) => ptrs[i], chunks: cs, chunkSize: CHUNK, me: 0 }),
  ]);
  assert.deepEqual([a.bad, b.bad], [[], []]);
  assertPlaced(ptrs.map((p) => new Uint8Array(mem.buffer, p, SHARD).slice()));
  // Each worker visits each piece it needs once, starting at its own (the coordinator at the first,
  // shard worker 0 at the second); when the next in its order is held it takes a free one instead
  // of waiting, so here no one ever waits.
  const turns = (who) => log.filter(([w]) => w === who).map(([, p]) => p);
  assert.deepEqual(turns('coordinator'), [0, 2, 1]);
  assert.deepEqual(turns('shard'), [1, 0, 2]);
  assert.ok(log.every(([, , wait]) => !wait), JSON.stringify(log));
});

test('pullTurns: a flipped byte in a piece marks its chunk bad', async () => {
  const cs = chunks(0);
  const turns = fakeTurns([], new Map(), 'w');
  const take = turns.take;
  turns.take = (p, wait, f) => take(p, wait, (read) => f((at, dest) => {
    const n = read(at, dest);
    if (p === 2 && at <= 7 && at + n > 7) dest[7 - at] ^= 1;
    return n;
  }));
  const r = await pullTurns(turns, { plan, shardPtr: (i) => ptrs[i], chunks: cs, chunkSize: CHUNK, me: 0 });
  assert.deepEqual(r.bad, [2]);
});
