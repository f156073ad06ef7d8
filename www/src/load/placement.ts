// Placement: where each byte of the file goes.
//
// The weight shards (allocated by the wasm ModelLoader) hold the tensors' bytes at the offsets
// of `ModelLoader.plan()`: [{shard, fileOffset, len}], one run of file bytes per shard. Every
// other byte of the data section (alignment padding, tensors the engine does not keep) is a gap.
// `route(start, end)` cuts a file range into parts, each with its destination: a shard (with the
// owner of that shard: the worker whose memory holds it) or a small buffer for a gap. `view(p)`
// is the destination's bytes, `addr(p)` a shard part's address in wasm memory.
//
// "Ready for more workers": every byte range goes through `route()`, which names the owner of the
// shard it lands in. Today there is one owner (this worker); splitting the shards across workers
// means giving `route` a real owner table and sending the bytes to that worker.

import { wasmMemory } from '../../pkg/clef_web.js';

/** A piece of a chunk: file bytes [start, end) go to shard memory, or to a buffer (padding). */
export type Part =
  | { kind: 'shard'; start: number; end: number; shard: number; owner: number; shardOffset: number }
  | { kind: 'gap'; start: number; end: number; buf: Uint8Array };

interface Segment {
  start: number;
  end: number;
  shard: number; // -1: gap (bytes in no shard: padding, unused tensors)
  owner: number;
}

export class Placement {
  readonly segments: Segment[] = [];
  private ptrs: number[] = [];
  private mem: Uint8Array = new Uint8Array(0);

  constructor(
    plan: Array<{ shard: number; fileOffset: number; len: number }>,
    private dataOffset: number,
    private size: number,
    shardPtr: (i: number) => number,
    /** Which worker owns shard i (one worker today). */
    ownerOf: (shard: number) => number = () => 0,
  ) {
    const sorted = [...plan].sort((a, b) => a.fileOffset - b.fileOffset);
    let pos = dataOffset;
    for (const r of sorted) {
      if (r.fileOffset > pos) this.segments.push({ start: pos, end: r.fileOffset, shard: -1, owner: -1 });
      this.segments.push({ start: r.fileOffset, end: r.fileOffset + r.len, shard: r.shard, owner: ownerOf(r.shard) });
      pos = r.fileOffset + r.len;
      this.ptrs[r.shard] = shardPtr(r.shard);
    }
    if (pos < size) this.segments.push({ start: pos, end: size, shard: -1, owner: -1 });
  }

  /** The one routing function: file range [start, end) → parts with their destinations. */
  route(start: number, end: number): Part[] {
    const out: Part[] = [];
    for (const s of this.segments) {
      if (s.end <= start || s.start >= end) continue;
      const a = Math.max(s.start, start);
      const b = Math.min(s.end, end);
      if (s.shard < 0) out.push({ kind: 'gap', start: a, end: b, buf: new Uint8Array(b - a) });
      else out.push({ kind: 'shard', start: a, end: b, shard: s.shard, owner: s.owner, shardOffset: a - s.start });
    }
    return out;
  }

  /** wasm memory, re-viewed whenever it has grown (a grown memory detaches the old buffer). */
  heap(): Uint8Array {
    const buf = (wasmMemory() as WebAssembly.Memory).buffer;
    if (this.mem.buffer !== buf) this.mem = new Uint8Array(buf);
    return this.mem;
  }

  /** Address in wasm memory of a shard part's first byte. */
  addr(p: Extract<Part, { kind: 'shard' }>): number {
    return this.ptrs[p.shard] + p.shardOffset;
  }

  /** The destination bytes of part `p` (a fresh view: valid until wasm memory grows). */
  view(p: Part): Uint8Array {
    if (p.kind === 'gap') return p.buf;
    const a = this.addr(p);
    return this.heap().subarray(a, a + (p.end - p.start));
  }

  get fileSize(): number {
    return this.size;
  }
  get dataStart(): number {
    return this.dataOffset;
  }
}
