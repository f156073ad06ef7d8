// Placement: where each byte of the file goes.
//
// `route(start, end)` cuts a chunk's file range into parts, each with the place its bytes are
// written to as they arrive: shard memory of this worker's wasm instance, or a JS buffer. `view(p)`
// is that place's bytes, `addr(p)` a shard part's address in wasm memory. Once a chunk is complete
// and checked, `deliver(parts)` sends its buffered bytes on to where they finally belong.
//
// Two placements:
// - `ShardPlacement` (the whole model in this worker): the wasm ModelLoader's plan is one
//   contiguous run of file bytes per weight shard, so every byte is written straight to its final
//   place in wasm memory; padding and unused tensors are small gap buffers. `deliver` does nothing.
// - `SplitPlacement` (a model split across shard workers, src/split.rs): each worker's plan cuts
//   tensors into rows or columns (a column cut is a strided copy: a piece of every row), and some
//   small tensors go to every worker. A chunk is received into one staging buffer (allocated on
//   first use, released once hashed); `deliver` scatters it: the coordinator's pieces into this
//   worker's memory, each shard worker's pieces packed into one transferred message.

import { wasmMemory } from '../../pkg/clef_web.js';
import type { CopyOp } from '../protocol.js';

/** A piece of a chunk: file bytes [start, end) go to shard memory, or to a buffer (padding, staging). */
export type Part =
  | { kind: 'shard'; start: number; end: number; shard: number; shardOffset: number }
  /** Bytes held in JS: allocated on first `view`, dropped (null) once hashed. */
  | { kind: 'gap'; start: number; end: number; buf: Uint8Array | null };

export interface Placement {
  /** The one routing function: file range [start, end) → parts with their destinations. */
  route(start: number, end: number): Part[];
  /** The destination bytes of part `p` (a fresh view: valid until wasm memory grows). */
  view(p: Part): Uint8Array;
  /** Address in wasm memory of a shard part's first byte. */
  addr(p: Extract<Part, { kind: 'shard' }>): number;
  /** Sends a complete chunk's buffered bytes to their final destinations. */
  deliver(parts: Part[]): void;
  /** The part's buffer is no longer needed (hashed and delivered). */
  release(p: Part): void;
  readonly fileSize: number;
  readonly dataStart: number;
}

/** wasm memory, re-viewed whenever it has grown (a grown memory detaches the old buffer). */
class Heap {
  private mem = new Uint8Array(0);
  get(): Uint8Array {
    const buf = (wasmMemory() as WebAssembly.Memory).buffer;
    if (this.mem.buffer !== buf) this.mem = new Uint8Array(buf);
    return this.mem;
  }
}

function gapView(p: Extract<Part, { kind: 'gap' }>): Uint8Array {
  p.buf ??= new Uint8Array(p.end - p.start);
  return p.buf;
}

interface Segment {
  start: number;
  end: number;
  shard: number; // -1: gap (bytes in no shard: padding, unused tensors)
}

/** The whole model in this worker: shards mirror contiguous file ranges (plan ops with count 1). */
export class ShardPlacement implements Placement {
  readonly segments: Segment[] = [];
  private ptrs: number[] = [];
  private heap = new Heap();

  constructor(
    plan: Array<Pick<CopyOp, 'shard' | 'fileOffset' | 'len'>>,
    readonly dataStart: number,
    readonly fileSize: number,
    shardPtr: (i: number) => number,
  ) {
    const sorted = [...plan].sort((a, b) => a.fileOffset - b.fileOffset);
    let pos = dataStart;
    for (const r of sorted) {
      if (r.fileOffset > pos) this.segments.push({ start: pos, end: r.fileOffset, shard: -1 });
      this.segments.push({ start: r.fileOffset, end: r.fileOffset + r.len, shard: r.shard });
      pos = r.fileOffset + r.len;
      this.ptrs[r.shard] = shardPtr(r.shard);
    }
    if (pos < fileSize) this.segments.push({ start: pos, end: fileSize, shard: -1 });
  }

  route(start: number, end: number): Part[] {
    const out: Part[] = [];
    for (const s of this.segments) {
      if (s.end <= start || s.start >= end) continue;
      const a = Math.max(s.start, start);
      const b = Math.min(s.end, end);
      if (s.shard < 0) out.push({ kind: 'gap', start: a, end: b, buf: null });
      else out.push({ kind: 'shard', start: a, end: b, shard: s.shard, shardOffset: a - s.start });
    }
    return out;
  }

  addr(p: Extract<Part, { kind: 'shard' }>): number {
    return this.ptrs[p.shard] + p.shardOffset;
  }

  view(p: Part): Uint8Array {
    if (p.kind === 'gap') return gapView(p);
    const a = this.addr(p);
    return this.heap.get().subarray(a, a + (p.end - p.start));
  }

  deliver(): void {}

  release(p: Part): void {
    if (p.kind === 'gap') p.buf = null;
  }
}

/**
 * Calls `f(fileOffset, dstOffset, len)` for every piece of `op` inside file range [start, end)
 * (the same walk as src/weights.rs CopyOp::pieces_in).
 */
export function opPieces(op: CopyOp, start: number, end: number, f: (file: number, dst: number, len: number) => void): void {
  if (op.len === 0) return;
  const opEnd = op.fileOffset + (op.count - 1) * op.fileStride + op.len;
  if (end <= op.fileOffset || start >= opEnd) return;
  const first = Math.floor(Math.max(0, start - op.fileOffset) / op.fileStride);
  const last = Math.min(op.count, Math.ceil((end - op.fileOffset) / op.fileStride));
  for (let i = first; i < last; i++) {
    const fs = op.fileOffset + i * op.fileStride;
    const a = Math.max(fs, start);
    const b = Math.min(fs + op.len, end);
    if (a < b) f(a, op.dstOffset + i * op.dstStride + (a - fs), b - a);
  }
}

/** One receiver of a split model's bytes: its plan and how its pieces reach it. */
export interface Destination {
  plan: CopyOp[];
  /**
   * Writes the pieces (quads: shard, dstOffset, offset in `bytes`, len) of one chunk. `bytes` is
   * this destination's own buffer (it may be transferred).
   */
  write(pieces: Float64Array, bytes: Uint8Array): void;
}

/** A destination in this worker's wasm memory (the coordinator's tensors). */
export function localDestination(plan: CopyOp[], shardPtr: (i: number) => number): Destination {
  const heap = new Heap();
  const ptrs: number[] = [];
  for (const op of plan) ptrs[op.shard] ??= shardPtr(op.shard);
  return {
    plan,
    write(p, bytes) {
      const h = heap.get();
      for (let i = 0; i < p.length; i += 4) h.set(bytes.subarray(p[i + 2], p[i + 2] + p[i + 3]), ptrs[p[i]] + p[i + 1]);
    },
  };
}

/** A destination's ops in file order, with where each ends (for skipping to a chunk's ops). */
interface Sorted {
  d: Destination;
  ops: CopyOp[];
  /** ends[i] = max file end of ops[0..=i] (ops of one tensor overlap in file range when strided). */
  ends: number[];
}

/** A model split across workers: every chunk staged, then scattered to each destination. */
export class SplitPlacement implements Placement {
  private dests: Sorted[];
  /** Staging buffers of the chunk size, reused (no 16 MiB allocation + zeroing + GC per chunk). */
  private spare: Uint8Array[] = [];

  constructor(
    destinations: Destination[],
    readonly dataStart: number,
    readonly fileSize: number,
  ) {
    this.dests = destinations.map((d) => {
      const ops = [...d.plan].sort((a, b) => a.fileOffset - b.fileOffset);
      let end = 0;
      const ends = ops.map((op) => (end = Math.max(end, op.fileOffset + (op.count - 1) * op.fileStride + op.len)));
      return { d, ops, ends };
    });
  }

  route(start: number, end: number): Part[] {
    return [{ kind: 'gap', start, end, buf: null }];
  }

  addr(): number {
    throw new Error('a split placement stages every chunk in JS');
  }

  view(p: Part): Uint8Array {
    if (p.kind !== 'gap') throw new Error('a split placement stages every chunk in JS');
    if (!p.buf) {
      const n = p.end - p.start;
      const i = this.spare.findIndex((b) => b.length === n);
      p.buf = i >= 0 ? this.spare.splice(i, 1)[0] : new Uint8Array(n);
    }
    return p.buf;
  }

  release(p: Part): void {
    if (p.kind !== 'gap' || !p.buf) return;
    if (this.spare.length < 4) this.spare.push(p.buf);
    p.buf = null;
  }

  deliver(parts: Part[]): void {
    for (const p of parts) {
      if (p.kind !== 'gap' || !p.buf) continue;
      const staged = p.buf;
      for (const { d, ops, ends } of this.dests) {
        // The first op that may reach into the chunk (ends is non-decreasing).
        let lo = 0;
        let hi = ops.length;
        while (lo < hi) {
          const mid = (lo + hi) >> 1;
          if (ends[mid] <= p.start) lo = mid + 1;
          else hi = mid;
        }
        // Pass 1: how many pieces and bytes; pass 2: pack them (one buffer, one message per worker).
        let pieces = 0;
        let total = 0;
        for (let k = lo; k < ops.length && ops[k].fileOffset < p.end; k++) {
          opPieces(ops[k], p.start, p.end, (_f, _d, len) => {
            pieces++;
            total += len;
          });
        }
        if (!total) continue;
        const quads = new Float64Array(pieces * 4);
        const packed = new Uint8Array(total);
        let q = 0;
        let at = 0;
        for (let k = lo; k < ops.length && ops[k].fileOffset < p.end; k++) {
          const shard = ops[k].shard;
          opPieces(ops[k], p.start, p.end, (file, dst, len) => {
            const from = file - p.start;
            packed.set(staged.subarray(from, from + len), at);
            quads[q++] = shard;
            quads[q++] = dst;
            quads[q++] = at;
            quads[q++] = len;
            at += len;
          });
        }
        d.write(quads, packed);
      }
    }
  }
}
