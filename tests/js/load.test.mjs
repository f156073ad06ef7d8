// Unit tests of the loader's modules (www/src/load/*.ts, bundled on the fly; the wasm glue of
// ./build.sh for the parser and sha256): retry policy, fetch with resume, chunk plan, placement,
// header reading, the memory formula, verification.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { importTs, initWasm, root } from './bundle.mjs';

const L = await importTs(
  'www/src/load/retry.ts', 'www/src/load/sources.ts', 'www/src/load/fetch.ts', 'www/src/load/plan.ts', 'www/src/load/placement.ts', 'www/src/load/header.ts',
  'www/src/load/fit.ts', 'www/src/load/verify.ts', 'www/src/load/cached.ts', 'www/src/load/errors.ts', 'www/src/load/workers.ts', 'www/src/app/models.ts', 'www/src/validate.ts', 'www/src/protocol.ts',
);
await initWasm();
const fixture = readFileSync(join(root, '..', 'shared', 'fixtures', 'qwen35-tiny', 'A-F32.gguf'));
const MiB = 1 << 20;

const policy = (o = {}) => ({
  maxRetries: 3, baseDelayMs: 100, budgetMs: 60_000, maxRetryAfterMs: 5000, headerTimeoutMs: 1000, idleTimeoutMs: 1000, random: () => 0.5, ...o,
});
const retryable = (e) => e instanceof L.HttpError;

// ---- retry.ts ---------------------------------------------------------------------------------

test('Retry-After: delay-seconds and HTTP-dates; a past date is 0; junk is ignored', () => {
  const now = Date.parse('Wed, 21 Oct 2015 07:28:00 GMT');
  assert.equal(L.parseRetryAfter('5', now), 5000);
  assert.equal(L.parseRetryAfter(' 120 ', now), 120_000);
  assert.equal(L.parseRetryAfter('Wed, 21 Oct 2015 07:28:30 GMT', now), 30_000);
  assert.equal(L.parseRetryAfter('Wed, 21 Oct 2015 07:27:00 GMT', now), 0);
  for (const v of [null, undefined, '', '-3', '1.5', 'soon', '12abc']) assert.equal(L.parseRetryAfter(v, now), null, String(v));
});

test('backoff doubles from retryDelayMs up to 8 s, with ±25 % jitter', () => {
  const mid = policy();
  assert.deepEqual([1, 2, 3, 4, 8, 20].map((n) => L.backoffMs(n, mid)), [100, 200, 400, 800, 8000, 8000]);
  assert.equal(L.backoffMs(1, policy({ random: () => 0 })), 75);
  assert.ok(L.backoffMs(1, policy({ random: () => 0.999999 })) < 125);
  assert.equal(L.MAX_BACKOFF_MS, 8000);
});

test('the wait is the longer of backoff and Retry-After, which is capped', () => {
  const p = policy();
  assert.equal(L.retryDelayMs(new L.HttpError(503, 'x', 2000), 1, p), 2000);
  assert.equal(L.retryDelayMs(new L.HttpError(503, 'x', 3_600_000), 1, p), 5000, 'capped at maxRetryAfterMs');
  assert.equal(L.retryDelayMs(new L.HttpError(503, 'x', 10), 3, p), 400, 'backoff when longer');
  assert.equal(L.retryDelayMs(new Error('x'), 1, p), 100);
});

test('which statuses are retried', () => {
  for (const s of [0, 408, 425, 429, 500, 502, 503, 504]) assert.equal(L.retryableStatus(s), true, String(s));
  for (const s of [400, 401, 403, 404, 410, 416]) assert.equal(L.retryableStatus(s), false, String(s));
});

test('Retrier: gives up after maxRetries failures in a row; progress starts the count over', () => {
  const r = new L.Retrier(policy({ maxRetries: 2 }), retryable, 'reading x');
  const e = new L.HttpError(503, 'HTTP 503');
  r.next(e);
  r.next(e);
  r.progress();
  r.next(e);
  r.next(e);
  assert.throws(() => r.next(e), (x) => x.code === 'network' && /reading x failed after 2 retries: HTTP 503/.test(x.message));
  assert.equal(r.total, 5);
});

test('Retrier: the budget bounds the time spent failing without progress', () => {
  let now = 0;
  const r = new L.Retrier(policy({ maxRetries: 100, budgetMs: 1000 }), retryable, 'reading x', () => now);
  const e = new L.HttpError(0, 'stalled');
  now = 0;
  assert.equal(r.next(e), 100);
  now = 500;
  r.next(e);
  now = 900;
  assert.throws(() => r.next(e), (x) => x.code === 'network' && /retry budget is 1 s/.test(x.message));
  r.progress();
  now = 5000;
  assert.equal(r.next(e), 100, 'after progress the budget starts over');
});

test('Retrier: errors that retrying cannot cure are thrown as they are (typed)', () => {
  const r = new L.Retrier(policy(), (e) => e instanceof L.HttpError && L.retryableStatus(e.status), 'x');
  assert.throws(() => r.next(new L.LoadError('not_found', 'gone')), (x) => x.code === 'not_found');
  assert.throws(() => r.next(new L.HttpError(400, 'HTTP 400')), (x) => x.code === 'network' && x.message === 'HTTP 400');
});

// ---- fetch.ts ---------------------------------------------------------------------------------

test('waitForRetry ticks the time left once a second and stops at an abort', async () => {
  const ticks = [];
  await L.waitForRetry(30, new AbortController().signal, (left) => ticks.push(left));
  assert.deepEqual(ticks, []);
  const ac = new AbortController();
  const t = Date.now();
  setTimeout(() => ac.abort(new Error('stop')), 50);
  await assert.rejects(L.waitForRetry(60_000, ac.signal), /stop/);
  assert.ok(Date.now() - t < 1000);
});

/** A ByteSource over `bytes` whose stream() fails as told by `faults` (one entry per call). */
function fakeSource(bytes, faults) {
  const calls = [];
  return {
    calls,
    description: 'fake.gguf',
    retryable: (e) => e instanceof L.HttpError,
    async stream(start, end, sink) {
      calls.push([start, end]);
      const f = faults.shift() ?? {};
      const stop = f.after !== undefined ? Math.min(end, start + f.after) : end;
      for (let p = start; p < stop; p += 1000) sink(bytes.subarray(p, Math.min(stop, p + 1000)));
      if (f.error) throw f.error;
    },
  };
}

test('fetchChunk resumes from the last byte received; retries only without progress count', async () => {
  const bytes = new Uint8Array(10_000).map((_, i) => (i * 7) & 255);
  const placement = new L.ShardPlacement([], 0, bytes.length, () => 0);
  const [c] = L.planChunks(placement, 16 * 1024);
  const drop = new L.HttpError(0, 'connection dropped');
  const src = fakeSource(bytes, [{ after: 2500, error: drop }, { after: 0, error: drop }, { after: 0, error: drop }, { after: 4000, error: drop }, {}]);
  const events = [];
  let got = 0;
  await L.fetchChunk(c, src, placement, policy({ baseDelayMs: 1, maxRetries: 3 }), new AbortController().signal,
    { retrying: (i) => events.push(i), waiting: () => {} }, (n) => (got += n));
  assert.deepEqual(src.calls, [[0, 10_000], [2500, 10_000], [2500, 10_000], [2500, 10_000], [6500, 10_000]]);
  assert.equal(got, 10_000);
  assert.deepEqual(Buffer.from(placement.view(c.parts[0])), Buffer.from(bytes));
  assert.deepEqual(events.map((e) => e.attempt), [1, 2, 3, 1], 'the count restarts after progress');
  assert.equal(events[0].reason, 'connection dropped');
});

// ---- sources.ts ---------------------------------------------------------------------------------

/** A Range server for `bytes`, writing each body in pieces of 100 kB; `stallAfter` ≥ 0: that many bytes, then nothing. */
async function rangeServer(bytes, o = { stallAfter: -1 }) {
  const server = createServer((req, res) => {
    const m = /bytes=(\d+)-(\d+)/.exec(req.headers.range ?? '');
    const [s, e] = m ? [Number(m[1]), Number(m[2]) + 1] : [0, bytes.length];
    res.writeHead(m ? 206 : 200, { 'content-length': e - s, ...(m ? { 'content-range': `bytes ${s}-${e - 1}/${bytes.length}` } : {}) });
    const body = Buffer.from(bytes.subarray(s, e));
    if (o.stallAfter >= 0) return void res.write(body.subarray(0, o.stallAfter));
    let at = 0;
    const more = () => (at >= body.length ? res.end() : (res.write(body.subarray(at, (at += 100_000))), setImmediate(more)));
    more();
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { url: `http://127.0.0.1:${server.address().port}/f.gguf`, close: () => (server.closeAllConnections(), new Promise((ok) => server.close(ok))) };
}

/** Streams bytes [start, end) of `src`, copying each view as the sink must; returns the bytes and the views' buffer sizes. */
async function streamAll(src, start, end) {
  const out = new Uint8Array(end - start);
  const sizes = new Set();
  let at = 0;
  await src.stream(start, end, (v) => {
    out.set(v, at);
    at += v.length;
    sizes.add(v.buffer.byteLength);
  }, new AbortController().signal);
  return { out: out.subarray(0, at), sizes: [...sizes] };
}

test('HttpSource.stream reads a byte stream into one reused buffer, any other body chunk by chunk; a stalled body times out, what came before kept', async () => {
  const bytes = new Uint8Array(3 * MiB + 123).map((_, i) => (i * 31 + (i >> 9)) & 255);
  const srv = await rangeServer(bytes);
  try {
    // Node's fetch body is a byte stream: every view lies in the one read buffer (1 MiB).
    const a = await streamAll(new L.HttpSource(srv.url), 1000, bytes.length);
    assert.deepEqual(Buffer.from(a.out), Buffer.from(bytes.subarray(1000)));
    assert.deepEqual(a.sizes, [MiB], 'one buffer read into again and again');
    // A body that is not a byte stream (no BYOB reader): the default reader, the same bytes.
    const real = globalThis.fetch;
    globalThis.fetch = async (...args) => {
      const r = await real(...args);
      return new Response(r.body.pipeThrough(new TransformStream()), { status: r.status, headers: r.headers });
    };
    try {
      const b = await streamAll(new L.HttpSource(srv.url), 1000, bytes.length);
      assert.deepEqual(Buffer.from(b.out), Buffer.from(bytes.subarray(1000)));
      assert.ok(b.sizes.some((n) => n !== MiB), `chunks of their own: ${b.sizes}`);
    } finally {
      globalThis.fetch = real;
    }
  } finally {
    await srv.close();
  }
  const stall = await rangeServer(bytes, { stallAfter: 250_000 });
  try {
    const src = new L.HttpSource(stall.url);
    src.useTimeouts({ headerTimeoutMs: 2000, idleTimeoutMs: 300 });
    let got = 0;
    const err = await src.stream(0, bytes.length, (v) => {
      assert.deepEqual(Buffer.from(v), Buffer.from(bytes.subarray(got, got + v.length)));
      got += v.length;
    }, new AbortController().signal).then(() => null, (e) => e);
    assert.ok(err instanceof L.HttpError && /no data for 300 ms after 250000 bytes/.test(err.message), String(err));
    assert.ok(src.retryable(err));
    assert.equal(got, 250_000);
  } finally {
    await stall.close();
  }
});

test('fetchChunk gives up with a typed network error; a non-retryable error passes through', async () => {
  const bytes = new Uint8Array(5000);
  const placement = new L.ShardPlacement([], 0, bytes.length, () => 0);
  const drop = new L.HttpError(0, 'connection dropped');
  const noop = { retrying: () => {}, waiting: () => {} };
  let [c] = L.planChunks(placement, 64 * 1024);
  await assert.rejects(
    L.fetchChunk(c, fakeSource(bytes, Array(10).fill({ after: 0, error: drop })), placement, policy({ baseDelayMs: 1, maxRetries: 2 }), new AbortController().signal, noop, () => {}),
    (e) => e.code === 'network' && /bytes 0-4999 of fake\.gguf failed after 2 retries: connection dropped/.test(e.message),
  );
  [c] = L.planChunks(placement, 64 * 1024);
  await assert.rejects(
    L.fetchChunk(c, fakeSource(bytes, [{ after: 0, error: new L.LoadError('not_found', 'gone') }]), placement, policy(), new AbortController().signal, noop, () => {}),
    (e) => e.code === 'not_found',
  );
});

// ---- plan.ts and placement.ts -------------------------------------------------------------------

test('the chunk grid: indexes, ranges clipped to the data section, parts routed', () => {
  assert.deepEqual(L.chunkIndexes(100, 1000, 256), [0, 1, 2, 3]);
  assert.deepEqual(L.chunkIndexes(256, 1000, 256), [1, 2, 3]);
  assert.deepEqual(L.chunkIndexes(100, 100, 256), []);
  assert.deepEqual(L.chunkRange(0, 100, 1000, 256), { start: 100, end: 256 });
  assert.deepEqual(L.chunkRange(3, 100, 1000, 256), { start: 768, end: 1000 });
  const placement = new L.ShardPlacement([{ shard: 0, fileOffset: 300, len: 200, dstOffset: 0 }], 100, 1000, () => 4096);
  const chunks = L.planChunks(placement, 256);
  assert.deepEqual(chunks.map((c) => [c.index, c.start, c.end]), [[0, 100, 256], [1, 256, 512], [2, 512, 768], [3, 768, 1000]]);
  assert.deepEqual(chunks[1].parts.map((p) => [p.kind, p.start, p.end]), [['gap', 256, 300], ['shard', 300, 500], ['gap', 500, 512]]);
  assert.equal(chunks[1].parts[1].shardOffset, 0);
});

test('assignCheckers: each chunk is checked by a worker holding bytes of it, the threads\' work evened out; unheld chunks by none', async () => {
  const C = 256;
  const chunks = [0, 1, 2, 3, 4].map((index) => ({ index, start: index * C, end: (index + 1) * C }));
  const coordinator = [{ shard: 0, dstOffset: 0, fileOffset: 0, len: 200, count: 1, fileStride: 200, dstStride: 200 }];
  // Shard 0: rows [200, 600) of a row-cut tensor; shards 0 and 1: 30 + 10 bytes of each of 10 rows of 40 at 600.
  const s0 = [
    { shard: 0, dstOffset: 0, fileOffset: 200, len: 400, count: 1, fileStride: 400, dstStride: 400 },
    { shard: 1, dstOffset: 0, fileOffset: 600, len: 30, count: 10, fileStride: 40, dstStride: 30 },
  ];
  const s1 = [{ shard: 0, dstOffset: 0, fileOffset: 630, len: 10, count: 10, fileStride: 40, dstStride: 10 }];
  // Every worker its own thread: chunk 0 is the coordinator's and shard 0's, and the coordinator
  // (200 bytes to place against shard 0's 700) takes it; chunk 1 only shard 0 holds; chunks 2 and 3
  // go to shard 1, which has least to do (100 bytes); nobody holds chunk 4.
  assert.deepEqual(L.assignCheckers(chunks, [coordinator, s0, s1]).map((c) => c.checker), [-1, 0, 1, 1, undefined]);
  assert.equal(L.PULL_COORDINATOR, -1);
  // Shard 0 in the coordinator's thread (local): chunk 0's two holders tie on their thread's load,
  // and the one holding most of it takes it.
  const local = (w) => (w === 1 ? 0 : w);
  assert.deepEqual(L.assignCheckers(chunks, [coordinator, s0, s1], local).map((c) => c.checker), [-1, 0, 1, 1, undefined]);
  // Only shard 1's columns in a chunk: shard 1 checks it. Level loads: the one holding most.
  assert.deepEqual(L.assignCheckers([{ index: 2, start: 630, end: 640 }], [coordinator, s0, s1]).map((c) => c.checker), [1]);
  assert.deepEqual(L.assignCheckers([{ index: 2, start: 631, end: 639 }], [[], [], s1]).map((c) => c.checker), [1]);
  const even = [{ shard: 0, dstOffset: 0, fileOffset: 0, len: 100, count: 1, fileStride: 100, dstStride: 100 }];
  const more = [{ shard: 0, dstOffset: 0, fileOffset: 100, len: 100, count: 1, fileStride: 100, dstStride: 100 }];
  assert.deepEqual(L.assignCheckers([{ index: 0, start: 50, end: 150 }], [[], even, more]).map((c) => c.checker), [0]);

  // The fixture's real plans over 3 shard workers: every chunk with planned bytes has a checker
  // that holds bytes of it, and each shard checks a share.
  const g = await initWasm();
  const plans = ['coordinator', 'shard', 'shard', 'shard'].map((role, i) => g.ModelLoader.planForRole(fixture, fixture.length, role, Math.max(0, i - 1), 3, true));
  const size = fixture.length;
  const dataStart = Math.min(...plans.flat().map((o) => o.fileOffset));
  const grid = L.chunkIndexes(dataStart, size, 64 << 10).map((index) => ({ index, ...L.chunkRange(index, dataStart, size, 64 << 10) }));
  const checked = L.assignCheckers(grid, plans);
  const holds = (plan, c) => plan.some((o) => o.fileOffset < c.end && o.fileOffset + (o.count - 1) * o.fileStride + o.len > c.start);
  for (const c of checked) {
    if (c.checker === undefined) assert.ok(!plans.some((p) => holds(p, c)), `chunk ${c.index} is held but unchecked`);
    else assert.ok(holds(plans[c.checker + 1], c), `chunk ${c.index}: its checker holds none of it`);
  }
  const share = [0, 1, 2].map((s) => checked.filter((c) => c.checker === s).length / checked.length);
  assert.ok(share.every((f) => f > 0.15), `shares ${share.join(', ')}`);
  // What each thread places and checks: level within a chunk's check.
  const placed = plans.map((plan) => plan.reduce((a, o) => a + o.count * o.len, 0));
  const work = plans.map((_, w) => placed[w] + checked.filter((c) => c.checker === (w === 0 ? -1 : w - 1)).reduce((a, c) => a + L.CHECK_COST * (c.end - c.start), 0));
  const threads = [work[0] + work[1], work[2], work[3]]; // shard 0 local: the engine worker reads its part too
  const local3 = L.assignCheckers(grid, plans, (w) => (w === 1 ? 0 : w));
  const work3 = plans.map((_, w) => placed[w] + local3.filter((c) => c.checker === (w === 0 ? -1 : w - 1)).reduce((a, c) => a + L.CHECK_COST * (c.end - c.start), 0));
  const t3 = [work3[0] + work3[1], work3[2], work3[3]];
  assert.ok(Math.max(...t3) - Math.min(...t3) <= Math.max(...threads) - Math.min(...threads), `threads ${t3} against ${threads}`);
});

test('Placement.route: parts follow the segments; a shard part knows its offset and address', () => {
  // Shard 0 mirrors [1000, 2000); a tensor stored in another form has its own op into shard 0 at 1024.
  const plan = [{ shard: 1, fileOffset: 2000, len: 500, dstOffset: 0 }, { shard: 0, fileOffset: 1000, len: 1000, dstOffset: 0 }, { shard: 0, fileOffset: 2600, len: 300, dstOffset: 1024 }];
  const ptrs = { 0: 65536, 1: 131072 };
  const pl = new L.ShardPlacement(plan, 1000, 3000, (i) => ptrs[i]);
  assert.deepEqual(pl.segments.map((s) => [s.start, s.end, s.shard]), [[1000, 2000, 0], [2000, 2500, 1], [2500, 2600, -1], [2600, 2900, 0], [2900, 3000, -1]]);
  const parts = pl.route(1500, 2700);
  assert.deepEqual(parts.map((p) => [p.kind, p.start, p.end, p.shard ?? -1, p.shardOffset ?? -1]), [['shard', 1500, 2000, 0, 500], ['shard', 2000, 2500, 1, 0], ['gap', 2500, 2600, -1, -1], ['shard', 2600, 2700, 0, 1024]]);
  assert.equal(pl.wasmAddr(parts[0]), 65536 + 500);
  assert.equal(pl.wasmAddr(parts[1]), 131072);
  assert.equal(pl.wasmAddr(parts[2]), null);
  assert.equal(pl.wasmAddr(parts[3]), 65536 + 1024);
  assert.equal(pl.view(parts[2]).length, 100);
  assert.equal(pl.fileSize, 3000);
  assert.equal(pl.dataStart, 1000);
});

test('writeBytes spreads a stream of bytes over a chunk\'s parts and advances `received`', () => {
  const pl = new L.ShardPlacement([], 0, 100, () => 0);
  const c = { index: 0, start: 0, end: 100, received: 0, parts: [{ kind: 'gap', start: 0, end: 30, buf: new Uint8Array(30) }, { kind: 'gap', start: 30, end: 100, buf: new Uint8Array(70) }], done: false, fromCache: false, checksum: null };
  const all = new Uint8Array(100).map((_, i) => i);
  L.writeBytes(pl, c, all.subarray(0, 25));
  L.writeBytes(pl, c, all.subarray(25, 61));
  L.writeBytes(pl, c, all.subarray(61, 100));
  assert.equal(c.received, 100);
  assert.deepEqual([...c.parts[0].buf, ...c.parts[1].buf], [...all]);
});

test('SplitPlacement completes a staged chunk in wasm: checksum, own pieces in place, each shard its pieces packed', async () => {
  const g = await initWasm();
  const file = new Uint8Array(1200).map((_, i) => (i * 13) & 255);
  // The coordinator's own tensors: file [120, 140) → its weight shard 0 at 4; [700, 710) at 30.
  const own = new g.ChunkRouter(64); // any wasm allocation serves as the coordinator's "weight shard"
  const ownPtr = own.stagePtr(0);
  const local = {
    plan: [{ shard: 0, dstOffset: 4, fileOffset: 120, len: 20, count: 1, fileStride: 20, dstStride: 20 }, { shard: 0, dstOffset: 30, fileOffset: 700, len: 10, count: 1, fileStride: 10, dstStride: 10 }],
    shardPtr: () => ownPtr,
  };
  const got = [];
  const dest = (name, plan) => ({ plan, buffer: (n) => new Uint8Array(n), write: (quads, bytes) => got.push([name, [...quads], [...bytes]]) });
  const rows = dest('rows', [{ shard: 1, dstOffset: 8, fileOffset: 150, len: 50, count: 1, fileStride: 50, dstStride: 50 }]);
  // A column cut: 4 bytes of each 300-byte row; its rows fall in both chunks.
  const cols = dest('cols', [{ shard: 0, dstOffset: 0, fileOffset: 200, len: 4, count: 3, fileStride: 300, dstStride: 4 }]);
  const pl = new L.SplitPlacement(local, [rows, cols], 100, 1200, 512);
  const [a, b] = L.planChunks(pl, 512);
  assert.deepEqual([a.start, a.end, b.start, b.end], [100, 512, 512, 1024]);
  assert.equal(a.parts.length, 1);
  // Chunk a takes the wasm stage (as a cached chunk does); b, arriving while a holds it, a JS buffer.
  L.writeBytes(pl, a, file.subarray(a.start, a.end));
  L.writeBytes(pl, b, file.subarray(b.start, b.end));
  assert.notEqual(pl.wasmAddr(a.parts[0]), null, 'a is staged in wasm');
  assert.equal(pl.wasmAddr(b.parts[0]), null, 'b waits in JS');
  const checksum = (bytes) => {
    const s = new g.Checksum();
    s.update(bytes);
    return s.digest();
  };
  assert.equal(pl.complete(b.parts), checksum(file.subarray(512, 1024)), 'b completes while a holds the stage');
  assert.deepEqual([...pl.view(a.parts[0])], [...file.subarray(100, 512)], 'a is still staged');
  const digest = pl.complete(a.parts);
  assert.equal(digest, checksum(file.subarray(100, 512)));
  assert.match(digest, /^c2-[0-9a-f]{16}:412$/);
  const heap = new Uint8Array(g.wasmMemory().buffer);
  assert.deepEqual([...heap.subarray(ownPtr + 4, ownPtr + 24)], [...file.subarray(120, 140)], 'own pieces copied in place');
  assert.deepEqual([...heap.subarray(ownPtr + 30, ownPtr + 40)], [...file.subarray(700, 710)]);
  assert.deepEqual(got, [
    ['cols', [0, 8, 0, 4], [...file.subarray(800, 804)]],
    ['rows', [1, 8, 0, 50], [...file.subarray(150, 200)]],
    ['cols', [0, 0, 0, 4, 0, 4, 4, 4], [...file.subarray(200, 204), ...file.subarray(500, 504)]],
  ]);
  pl.release(a.parts[0]);
  pl.release(b.parts[0]);
  pl.dispose();
  own.free();
});

test('a cached chunk recorded with an earlier build\'s checksum is checked with it, then recorded anew', async () => {
  const g = await initWasm();
  const file = new Uint8Array(700).map((_, i) => (i * 5 + 1) & 255);
  const pl = new L.ShardPlacement([], 100, 700, () => 0);
  const [c] = L.planChunks(pl, 1024);
  L.writeBytes(pl, c, file.subarray(100, 700));
  const digest = pl.complete(c.parts);
  // The legacy kind (strings without the c2- prefix), as www/src/checksum.ts wrote it.
  const legacy = g.Checksum.like('0000000000000000:0');
  legacy.update(file.subarray(100, 700));
  const old = legacy.digest();
  assert.match(old, /^[0-9a-f]{16}:600$/);
  const cache = { manifest: { chunks: { 0: old } } };
  assert.equal(L.cachedChunkGood(cache, pl, c, old, digest), true);
  assert.equal(cache.manifest.chunks[0], digest, 'recorded with the current checksum');
  const bad = old.replace(/^./, (x) => (x === '0' ? '1' : '0'));
  assert.equal(L.cachedChunkGood({ manifest: { chunks: { 0: bad } } }, pl, c, bad, digest), false, 'a legacy mismatch');
  const other = 'c2-0123456789abcdef:600';
  assert.equal(L.cachedChunkGood({ manifest: { chunks: { 0: other } } }, pl, c, other, digest), false, 'a current-kind mismatch');
  assert.equal(L.checksumMatches(old, file.subarray(100, 700)), true);
  assert.equal(L.checksumMatches('junk', file), false);
});

test('ShardPlacement.complete: the checksum of a chunk where its bytes lie (shard memory and gap buffers)', async () => {
  const g = await initWasm();
  const file = new Uint8Array(600).map((_, i) => (i * 7 + 3) & 255);
  const mem = new g.ChunkRouter(256); // a wasm allocation standing in for a weight shard
  const ptr = mem.stagePtr(0);
  const pl = new L.ShardPlacement([{ shard: 0, fileOffset: 300, len: 200, dstOffset: 0 }], 100, 600, () => ptr);
  const [c] = L.planChunks(pl, 1024);
  assert.deepEqual(c.parts.map((p) => p.kind), ['gap', 'shard', 'gap']);
  L.writeBytes(pl, c, file.subarray(100, 600));
  const sum = new g.Checksum();
  sum.update(file.subarray(100, 600));
  assert.equal(pl.complete(c.parts), sum.digest());
  mem.free();
});

// ---- header.ts ----------------------------------------------------------------------------------

test('readHeader grows a short prefix until the header parses', async () => {
  const asked = [];
  const h = await L.readHeader(fixture.subarray(0, 64), fixture.length, 'A-F32.gguf', async (a, b) => {
    asked.push([a, b]);
    return fixture.subarray(a, b);
  });
  assert.equal(h.info.architecture, 'qwen35');
  assert.ok(h.prefix.length >= h.info.dataOffset);
  assert.ok(asked.length >= 1 && asked.every(([a, b], i) => i === 0 || a === asked[i - 1][1]), JSON.stringify(asked));
  // Each round reads at least 4× the prefix so far (fewer round trips to the Hub), never past the end.
  assert.ok(asked.every(([a, b]) => b >= Math.min(fixture.length, 4 * a) && b <= fixture.length), JSON.stringify(asked));
});

test('header errors are typed: empty, not a GGUF, truncated', async () => {
  assert.throws(() => L.parse(new Uint8Array(0), 0, 'x.gguf'), (e) => e.code === 'bad_gguf' && /x\.gguf is empty \(0 bytes\)/.test(e.message));
  assert.throws(() => L.parse(new TextEncoder().encode('{"a": 1}'), 8, 'x.gguf'), (e) => e.code === 'bad_gguf' && /not a GGUF file \(it begins with the text "\{"a": 1\}"/.test(e.message));
  assert.throws(() => L.parse(new Uint8Array([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0, 9]), 9, 'x.gguf'), (e) => e.code === 'bad_gguf' && /begins with bytes 7f 45 4c 46/.test(e.message));
  const cut = fixture.subarray(0, 5000);
  await assert.rejects(L.readHeader(cut, cut.length, 'cut.gguf', async (a, b) => cut.subarray(a, b)), (e) => e.code === 'bad_gguf' && /truncated/.test(e.message));
});

// ---- fit.ts ----------------------------------------------------------------------------------

test('one memory formula: the loader\'s and the chat page\'s estimates agree; the snapshot count matches the engine', () => {
  const shape = { weightBytes: 3e9, stateBytes: 50e6, kvBytesPerToken: 65536, nVocab: 248_320 };
  assert.equal(L.memoryNeeded(shape, 1000), 3e9 + L.STATE_COPIES * 50e6 + 65536 * 1000 + 8 * MiB + 248_320 * 320);
  const file = 3.36 * 2 ** 30;
  const est = L.estimateMemory(file);
  const clef = { weightBytes: file - 11 * MiB, stateBytes: 24 * 4 * (32 * 128 * 128 + 3 * 8192), kvBytesPerToken: 8 * 4 * 2 * 4 * 256, nVocab: 248_320 };
  assert.equal(est.bytes, L.memoryNeeded(clef, est.context));
  const engine = readFileSync(join(root, 'src', 'engine.rs'), 'utf8');
  assert.equal(Number(/const MAX_SNAPSHOTS: usize = (\d+);/.exec(engine)[1]), L.ENGINE_SNAPSHOTS, 'src/engine.rs MAX_SNAPSHOTS = load/fit.ts ENGINE_SNAPSHOTS');
  assert.equal(L.WASM_LIMIT, L.WASM_MAX_MEMORY);
});

test('pickContext: the caller\'s (clipped), else 32768 halved until it fits (not below 512)', () => {
  const shape = { weightBytes: 1e9, stateBytes: 1e6, kvBytesPerToken: 1e5, nVocab: 1000 };
  assert.equal(L.pickContext(shape, 4096, 100_000, 1e12), 4096);
  assert.equal(L.pickContext(shape, 32768, 1000, 0), 1000);
  assert.equal(L.pickContext(shape, 65536, undefined, 1e12), 32768);
  assert.equal(L.pickContext(shape, 16384, undefined, 1e12), 16384);
  const avail = L.memoryNeeded(shape, 2048);
  assert.equal(L.pickContext(shape, 32768, undefined, avail), 2048);
  assert.equal(L.pickContext(shape, 32768, undefined, 0), 512);
});

test('out_of_memory names what is needed and a smaller quant of the same repository', () => {
  const shape = { weightBytes: 3.6e9, stateBytes: 50e6, kvBytesPerToken: 65536, nVocab: 248_320 };
  const e = L.outOfMemory({ name: 'o/r:Q2_K', quant: 'Q2_K', fileType: 10, repo: 'o/r', contextRequested: false }, shape, 8192, 3.5e9, 4 * 2 ** 30);
  assert.equal(e.code, 'out_of_memory');
  assert.match(e.message, /^o\/r:Q2_K does not fit in this tab: it needs about 4\.\d\d GB .* Use a smaller quant, e\.g\. 'o\/r:(IQ|Q)[0-9A-Z_]+'\.$/);
});

test('a refused allocation: out_of_memory with the memory the browser gives now (measured) and a quant that fits in it', () => {
  const probed = L.probeWasmMemory();
  assert.ok(probed > 0 && probed <= 4 * 2 ** 30 && probed % 65536 === 0, `probe: ${probed}`);
  const shape = { weightBytes: 3.6e9, stateBytes: 50e6, kvBytesPerToken: 65536, nVocab: 248_320 };
  const e = L.allocationRefused({ name: 'o/r:Q2_K', quant: 'Q2_K', fileType: 10, repo: 'o/r', contextRequested: false }, shape, 8192, 3e6, 'the weights');
  assert.equal(e.code, 'out_of_memory');
  assert.match(e.message, /^o\/r:Q2_K does not fit in this tab: the browser refused memory for the weights \(about [\d.]+ [GM]B of WebAssembly memory is available/);
  assert.match(e.message, /Close other tabs, or use a smaller quant/);
});

test('the page\'s estimate with workers: files over 4 GiB split, contexts grow with the split (one core, two, eight)', () => {
  const GiB = 2 ** 30;
  const one = L.estimateMemory(3.36 * GiB, 1);
  assert.equal(one.workers, 1);
  assert.ok(one.context >= 2048 && one.context <= 4096, `IQ2_M in one worker: what is left of 4 GiB (got ${one.context})`);
  const two = L.estimateMemory(3.36 * GiB, 2);
  assert.equal(two.workers, 2);
  assert.ok(two.context >= 32768, `IQ2_M over 2 workers gets a 32k context (got ${two.context})`);
  assert.ok(two.perWorker <= 4 * GiB && two.bytes < 16e9 * 0.5, 'fits a 16 GB machine');
  const q4 = L.estimateMemory(5.24 * GiB, 1);
  assert.ok(q4.workers >= 2 && q4.context > 0, `Q4_K_M needs ≥ 2 workers even on one core (got ${q4.workers})`);
  const q8 = L.estimateMemory(8.87 * GiB, 2);
  assert.ok(q8.workers >= 3 && q8.context > 0, `Q8_0 over ≥ 3 workers (got ${q8.workers})`);
  assert.equal(L.estimateMemory(3.36 * GiB, 8).workers, 8);
  assert.equal(L.estimateMemory(3.36 * GiB, 32).workers, 8, 'at most 8 by default');
});

test('chooseWorkers: requested as given; small models in one; one per core up to 8; more to fit', () => {
  const fitsFrom = (k) => (n) => n >= k;
  assert.deepEqual(L.chooseWorkers({ requested: 3, cores: 1, weightBytes: 1, fits: fitsFrom(1) }), { workers: 3, reason: 'requested' });
  assert.equal(L.chooseWorkers({ cores: 8, weightBytes: 1e6, fits: fitsFrom(1) }).workers, 1);
  assert.equal(L.chooseWorkers({ cores: 4, weightBytes: 3e9, fits: fitsFrom(1) }).workers, 4);
  const r = L.chooseWorkers({ cores: 2, weightBytes: 9e9, fits: fitsFrom(3) });
  assert.equal(r.workers, 3);
  assert.match(r.reason, /3 workers for the weights to fit/);
});

// ---- verify.ts -------------------------------------------------------------------------------

test('FileHasher: sha256 in file order while chunks complete out of order', () => {
  const size = 300_000;
  const bytes = new Uint8Array(size).map((_, i) => (i * 31 + (i >> 8)) & 255);
  const pl = new L.ShardPlacement([], 1000, size, () => 0);
  const chunks = L.planChunks(pl, 64 * 1024);
  const h = new L.FileHasher(chunks, pl, bytes.subarray(0, 1000), true);
  for (const c of [...chunks].reverse()) {
    L.writeBytes(pl, c, bytes.subarray(c.start, c.end));
    c.done = true;
    h.advance();
    assert.equal(h.next, c === chunks[0] ? chunks.length : 0);
  }
  assert.equal(h.finish(), createHash('sha256').update(bytes).digest('hex'));
  assert.ok(chunks.every((c) => c.parts.every((p) => p.buf === null)), 'gap buffers released once hashed');
  assert.equal(L.equalBytes(new Uint8Array([1, 2]), new Uint8Array([1, 2])), true);
  assert.equal(L.equalBytes(new Uint8Array([1, 2]), new Uint8Array([1, 3])), false);
});
