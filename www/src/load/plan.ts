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
 * Picks each chunk's checker: the worker whose plan (`plans[0]` the coordinator's, `plans[i + 1]`
 * shard i's) holds most of its bytes — it reads most of the chunk anyway. An op's bytes in a chunk
 * are estimated from its density (len per fileStride), which is exact for a whole op and close
 * enough for choosing. Chunks nobody holds bytes of are not checked (nothing of them is used).
 */
export function assignCheckers(chunks: PullChunk[], plans: CopyOp[][]): PullChunk[] {
  return chunks.map((c) => {
    let [best, most] = [-1, 0];
    plans.forEach((plan, w) => {
      let b = 0;
      for (const o of plan) {
        const end = o.fileOffset + (o.count - 1) * o.fileStride + o.len;
        const overlap = Math.min(end, c.end) - Math.max(o.fileOffset, c.start);
        if (overlap > 0) b += o.count > 1 ? (overlap * o.len) / o.fileStride : overlap;
      }
      if (b > most) [best, most] = [w, b];
    });
    return most > 0 ? { ...c, checker: best === 0 ? PULL_COORDINATOR : best - 1 } : { ...c, checker: undefined };
  });
}
