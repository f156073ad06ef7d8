// Placement: where each byte of the file goes.
//
// `route(start, end)` cuts a chunk's file range into parts, each with the place its bytes are
// written to as they arrive: shard memory of this worker's wasm instance, or a JS buffer. `view(p)`
// is that place's bytes, `wasmAddr(p)` its address when it lies in wasm memory. Once a chunk is complete,
// `complete(parts)` takes its checksum and sends buffered bytes on to where they finally belong.
//
// Two placements:
// - `ShardPlacement` (the whole model in this worker): the wasm ModelLoader's plan is one
//   contiguous run of file bytes per weight shard, so every byte is written straight to its final
//   place in wasm memory; padding and unused tensors are small gap buffers. `complete` only takes
//   the checksum, where the bytes lie.
// - `SplitPlacement` (a model split across shard workers, src/split.rs): each worker's plan cuts
//   tensors into rows or columns (a column cut is a strided copy: a piece of every row), and some
//   small tensors go to every worker. A chunk is received into one staging buffer (reused,
//   released once hashed); `complete` hands it to wasm (src/wasm.rs ChunkRouter), which takes its
//   checksum and walks every worker's plan: the coordinator's pieces are copied within its
//   memory, each shard worker's are gathered into one buffer, sent as one transferred message.

import { Checksum, ChunkRouter, wasmMemory } from '../../pkg/clef_web.js';
import type { CopyOp } from '../protocol.js';

/** A piece of a chunk: file bytes [start, end) go to shard memory, or to a buffer (padding, staging). */
export type Part =
  | { kind: 'shard'; start: number; end: number; shard: number; shardOffset: number }
  /**
   * Bytes held in a buffer until the chunk is complete: a JS buffer (`buf`, allocated on first
   * `view`, dropped once hashed), or (split) the wasm stage, when `inStage`.
   */
  | { kind: 'gap'; start: number; end: number; buf: Uint8Array | null; inStage?: boolean };

export interface Placement {
  /** The one routing function: file range [start, end) → parts with their destinations. */
  route(start: number, end: number): Part[];
  /** The destination bytes of part `p` (a fresh view: valid until wasm memory grows). */
  view(p: Part): Uint8Array;
  /**
   * Address in wasm memory of the part's first byte, when its bytes are there (null: in JS). Read
   * wasm-held bytes from wasm by address: a view passed to a wasm call is detached if the call
   * grows the memory.
   */
  wasmAddr(p: Part): number | null;
  /**
   * A chunk's parts are all in place: sends buffered bytes on to their final destinations (a
   * split model) and returns the chunk's checksum (src/checksum.rs).
   */
  complete(parts: Part[]): string;
  /** Frees what the placement holds in wasm (after the load). */
  dispose(): void;
  /** The part's buffer is no longer needed (hashed and delivered). */
  release(p: Part): void;
  readonly fileSize: number;
  readonly dataStart: number;
}

/** wasm memory, re-viewed whenever it has grown (a grown memory detaches the old buffer). */
export class Heap {
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

/** Adds the parts' bytes, in order, to a checksum or hash, from wasm memory by address where they lie there. */
export function hashParts(placement: Placement, parts: Part[], h: { update(b: Uint8Array): void; updateFromMemory(ptr: number, len: number): void }): void {
  for (const p of parts) {
    const a = placement.wasmAddr(p);
    if (a !== null) h.updateFromMemory(a, p.end - p.start);
    else h.update(placement.view(p));
  }
}

interface Segment {
  start: number;
  end: number;
  shard: number; // -1: gap (bytes in no shard: padding, unused tensors)
  /** Where `start` goes in the shard. */
  dst: number;
}

/**
 * The whole model in this worker: plan ops with count 1, each a contiguous file range to one
 * place in a shard (one per shard, plus one per tensor stored in another form, src/weights.rs).
 */
export class ShardPlacement implements Placement {
  readonly segments: Segment[] = [];
  private ptrs: number[] = [];
  private heap = new Heap();

  constructor(
    plan: Array<Pick<CopyOp, 'shard' | 'fileOffset' | 'len' | 'dstOffset'>>,
    readonly dataStart: number,
    readonly fileSize: number,
    shardPtr: (i: number) => number,
  ) {
    const sorted = [...plan].sort((a, b) => a.fileOffset - b.fileOffset);
    let pos = dataStart;
    for (const r of sorted) {
      if (r.fileOffset > pos) this.segments.push({ start: pos, end: r.fileOffset, shard: -1, dst: 0 });
      this.segments.push({ start: r.fileOffset, end: r.fileOffset + r.len, shard: r.shard, dst: r.dstOffset });
      pos = r.fileOffset + r.len;
      this.ptrs[r.shard] = shardPtr(r.shard);
    }
    if (pos < fileSize) this.segments.push({ start: pos, end: fileSize, shard: -1, dst: 0 });
  }

  route(start: number, end: number): Part[] {
    const out: Part[] = [];
    for (const s of this.segments) {
      if (s.end <= start || s.start >= end) continue;
      const a = Math.max(s.start, start);
      const b = Math.min(s.end, end);
      if (s.shard < 0) out.push({ kind: 'gap', start: a, end: b, buf: null });
      else out.push({ kind: 'shard', start: a, end: b, shard: s.shard, shardOffset: s.dst + (a - s.start) });
    }
    return out;
  }

  wasmAddr(p: Part): number | null {
    return p.kind === 'shard' ? this.ptrs[p.shard] + p.shardOffset : null;
  }

  view(p: Part): Uint8Array {
    if (p.kind === 'gap') return gapView(p);
    const a = this.wasmAddr(p)!;
    return this.heap.get().subarray(a, a + (p.end - p.start));
  }

  complete(parts: Part[]): string {
    const c = new Checksum();
    try {
      hashParts(this, parts, c);
      return c.digest();
    } finally {
      c.free();
    }
  }

  dispose(): void {}

  release(p: Part): void {
    if (p.kind === 'gap') p.buf = null;
  }
}

/** One shard worker as a receiver of a split model's bytes: its plan and how its pieces reach it. */
export interface Destination {
  plan: CopyOp[];
  /**
   * Writes the pieces (quads: shard, dstOffset, offset in `bytes`, len) of one chunk. `bytes` is
   * this destination's own buffer (it may be transferred).
   */
  write(pieces: Float64Array, bytes: Uint8Array): void;
  /** A buffer of at least `n` bytes to fill and `write` (recycled where possible). */
  buffer(n: number): Uint8Array;
}

/** The coordinator's own part of a split model: its plan, and where its weight shards lie in this worker's wasm memory. */
export interface LocalDestination {
  plan: CopyOp[];
  shardPtr: (i: number) => number;
}

/** Copies pieces (quads: shard, dstOffset, offset from `stage`, len) within wasm memory `h` to `ptrs[shard] + dstOffset`. */
export function copyPieces(h: Uint8Array, ptrs: number[], stage: number, q: Float64Array): void {
  for (let i = 0; i < q.length; i += 4) h.copyWithin(ptrs[q[i]] + q[i + 1], stage + q[i + 2], stage + q[i + 2] + q[i + 3]);
}

/** A copy plan as ChunkRouter.addDestination takes it: 7 numbers per op. */
export function flatPlan(plan: CopyOp[]): Float64Array {
  const f = new Float64Array(plan.length * 7);
  plan.forEach((o, i) => f.set([o.shard, o.dstOffset, o.fileOffset, o.len, o.count, o.fileStride, o.dstStride], i * 7));
  return f;
}

/**
 * A model split across workers: every chunk staged, then completed in wasm (ChunkRouter): its
 * checksum, the coordinator's pieces copied within wasm memory, each shard worker's pieces gathered
 * into one buffer and sent. A chunk is staged in the router's wasm stage when that is free (a
 * cached load: every chunk, read straight into wasm), else in a JS buffer copied there at the end
 * (chunks downloaded several at a time).
 */
export class SplitPlacement implements Placement {
  private router: ChunkRouter;
  private ptrs: number[] = [];
  private heap = new Heap();
  /** The part staged in the router's stage (null: the stage is free). */
  private staged: Part | null = null;
  /** JS staging buffers of the chunk size, reused (no 16 MiB allocation + zeroing + GC per chunk). */
  private spare: Uint8Array[] = [];

  constructor(
    local: LocalDestination,
    private shards: Destination[],
    readonly dataStart: number,
    readonly fileSize: number,
    private chunkSize: number,
  ) {
    this.router = new ChunkRouter(chunkSize);
    this.router.addDestination(flatPlan(local.plan));
    for (const op of local.plan) this.ptrs[op.shard] ??= local.shardPtr(op.shard);
    for (const d of shards) this.router.addDestination(flatPlan(d.plan));
  }

  route(start: number, end: number): Part[] {
    return [{ kind: 'gap', start, end, buf: null }];
  }

  wasmAddr(p: Part): number | null {
    return p.kind === 'gap' && p.inStage ? this.router.stagePtr(0) : null;
  }

  view(p: Part): Uint8Array {
    if (p.kind !== 'gap') throw new Error('a split placement stages every chunk');
    const n = p.end - p.start;
    if (!p.buf && !p.inStage) {
      if (!this.staged && n <= this.chunkSize) {
        this.staged = p;
        p.inStage = true;
      } else {
        const i = this.spare.findIndex((b) => b.length === n);
        p.buf = i >= 0 ? this.spare.splice(i, 1)[0] : new Uint8Array(n);
      }
    }
    if (!p.inStage) return p.buf!;
    const at = this.router.stagePtr(0);
    return this.heap.get().subarray(at, at + n);
  }

  release(p: Part): void {
    if (p.kind !== 'gap') return;
    if (p.inStage) {
      this.staged = null;
      p.inStage = false;
    } else if (p.buf && this.spare.length < 4) {
      this.spare.push(p.buf);
    }
    p.buf = null;
  }

  complete(parts: Part[]): string {
    const [p] = parts;
    if (parts.length !== 1 || p.kind !== 'gap' || !(p.buf || p.inStage)) throw new Error('a split placement completes one staged chunk');
    const r = this.router;
    const n = p.end - p.start;
    // A chunk held in JS lands in stage 1 (stage 0 may be holding a chunk still to be hashed).
    const slot = p.inStage ? 0 : 1;
    const stage = r.stagePtr(slot);
    if (!p.inStage) this.heap.get().set(p.buf!, stage);
    const digest = r.stageChecksum(slot, n);
    // The coordinator's own pieces: copied within wasm memory.
    const own = r.pieces(0, slot, p.start, n, false);
    copyPieces(this.heap.get(), this.ptrs, stage, own); // (the heap viewed after the call: it may grow memory)
    // Each shard worker's: gathered in wasm, copied out once, sent (transferred).
    this.shards.forEach((d, i) => {
      const quads = r.pieces(i + 1, slot, p.start, n, true);
      if (!quads.length) return;
      const total = quads[quads.length - 2] + quads[quads.length - 1];
      const at = r.packPtr();
      const out = d.buffer(Math.max(total, this.chunkSize)).subarray(0, total);
      out.set(this.heap.get().subarray(at, at + total));
      d.write(quads, out);
    });
    return digest;
  }

  dispose(): void {
    this.router.free();
  }
}
