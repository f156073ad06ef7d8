// The chunk plan: the data section cut on a fixed grid of `chunkSize` bytes.
//
//   file   [ header | data ……………………………………………………………………… ]
//   grid   |   k0   |   k1   |   k2   |  …  |  kN  |        chunk k = [k·C, (k+1)·C) ∩ [dataStart, size)
//
// A chunk is the unit of transfer (one Range request, resumed within), of caching (one checksum in
// the OPFS manifest) and of verification order. Chunk indexes are positions on the grid, so the
// first chunk usually starts inside the header's grid cell and a cached manifest stays valid for
// any file with the same grid.

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
