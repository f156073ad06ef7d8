// The chunk plan: the data section cut on a fixed grid of `chunkSize` bytes.
//
//   file   [ header | data ……………………………………………………………………… ]
//   grid   |   k0   |   k1   |   k2   |  …  |  kN  |        chunk k = [k·C, (k+1)·C) ∩ [dataStart, size)
//
// A chunk is the unit of transfer (one Range request, resumed within), of caching (one checksum in
// the OPFS manifest) and of verification order. Chunk indexes are positions on the grid, so the
// first chunk usually starts inside the header's grid cell and a cached manifest stays valid for
// any file with the same grid.

import { PULL_COORDINATOR, type CopyOp, type PullChunk } from '../protocol.js';
import type { Part, Placement } from './placement.js';

export interface Chunk {
  /** Position on the grid (the manifest's key). */
  index: number;
  start: number;
  end: number;
  /** Bytes in place so far, from `start`. */
  received: number;
  /** Bytes from `start` written to the cache so far (a download in progress; see Manifest.partial). */
  persisted: number;
  parts: Part[];
  done: boolean;
  fromCache: boolean;
  /** Checksum (src/checksum.rs) of the chunk, once complete. */
  checksum: string | null;
}

/** The grid indexes of the chunks of [dataStart, size) with chunk size C. */
export function chunkIndexes(dataStart: number, size: number, C: number): number[] {
  const out: number[] = [];
  for (let k = Math.floor(dataStart / C); k * C < size; k++) if (Math.min((k + 1) * C, size) > Math.max(k * C, dataStart)) out.push(k);
  return out;
}

/** The byte range of grid cell k, clipped to the data section. */
export function chunkRange(k: number, dataStart: number, size: number, C: number): { start: number; end: number } {
  return { start: Math.max(k * C, dataStart), end: Math.min((k + 1) * C, size) };
}

/** Fresh chunks (nothing received) covering the placement's data section, in file order. */
export function planChunks(placement: Placement, C: number): Chunk[] {
  const { dataStart, fileSize } = placement;
  return chunkIndexes(dataStart, fileSize, C).map((index) => {
    const { start, end } = chunkRange(index, dataStart, fileSize, C);
    return { index, start, end, received: 0, persisted: 0, parts: placement.route(start, end), done: false, fromCache: false, checksum: null };
  });
}

/** Copies bytes that continue chunk `c` (at c.start + c.received) to their destinations. */
export function writeBytes(placement: Placement, c: Chunk, bytes: Uint8Array): void {
  let pos = c.start + c.received;
  let off = 0;
  const end = Math.min(c.end, pos + bytes.length);
  for (const p of c.parts) {
    if (p.end <= pos) continue;
    if (p.start >= end) break;
    const n = Math.min(p.end, end) - pos;
    const dst = placement.view(p);
    dst.set(bytes.subarray(off, off + n), pos - p.start);
    off += n;
    pos += n;
  }
  c.received = pos - c.start;
}

/**
 * What checking a chunk costs the worker that does it, per byte of the chunk, against a byte of
 * its own placed: reading the rest of the chunk through its stage and hashing all of it (a 2-worker
 * pull of the 9B-shaped Q2_K file: 104 checks of 16 MiB cost a shard worker ~0.2 s of its 1.6,
 * while its own 1.74 GB took ~1.3 s; BENCHMARKS.md, "A cached split load: straight into place").
 */
export const CHECK_COST = 1 / 6;

/**
 * Picks each chunk's checker among the workers whose plan (`plans[0]` the coordinator's,
 * `plans[i + 1]` shard i's) holds bytes of it, so that every thread has about as much to do:
 * each thread starts with the bytes its plans place, and each chunk goes to the holder whose
 * thread has least so far (counting the check, CHECK_COST per chunk byte; a tie to the one
 * holding most). `thread(w)` is the thread plan w is read in — the engine worker reads the
 * coordinator's part and, where shard 0 is local, shard 0's. An op's bytes in a chunk are
 * estimated from its density (len per fileStride), which is exact for a whole op and close enough
 * for choosing. Chunks nobody holds bytes of are not checked (nothing of them is used).
 */
export function assignCheckers(chunks: PullChunk[], plans: CopyOp[][], thread: (w: number) => number = (w) => w): PullChunk[] {
  const held = chunks.map((c) => plans.map((plan) => {
    let b = 0;
    for (const o of plan) {
      const end = o.fileOffset + (o.count - 1) * o.fileStride + o.len;
      const overlap = Math.min(end, c.end) - Math.max(o.fileOffset, c.start);
      if (overlap > 0) b += o.count > 1 ? (overlap * o.len) / o.fileStride : overlap;
    }
    return b;
  }));
  const work = new Map<number, number>();
  const add = (w: number, b: number) => work.set(thread(w), (work.get(thread(w)) ?? 0) + b);
  held.forEach((hs) => hs.forEach((b, w) => add(w, b)));
  return chunks.map((c, k) => {
    const check = CHECK_COST * (c.end - c.start);
    let best = -1;
    held[k].forEach((b, w) => {
      if (b <= 0) return;
      const [load, bestLoad] = [work.get(thread(w))!, best < 0 ? Infinity : work.get(thread(best))!];
      if (load < bestLoad || (load === bestLoad && b > held[k][best])) best = w;
    });
    if (best < 0) return { ...c, checker: undefined };
    add(best, check);
    return { ...c, checker: best === 0 ? PULL_COORDINATOR : best - 1 };
  });
}
