// A split model read by every worker itself ("pull"), in parallel: from a verified OPFS cache, or
// (Node) from a file on disk.
//
// The general path (transfer.ts + SplitPlacement) has the engine worker read every chunk, check
// it and send each shard worker its pieces: one thread routes the whole file. Here each worker —
// the coordinator and every shard worker — opens the source read-only and reads what its own plan
// needs into its own wasm memory, then copies its pieces into place. The reads and the page faults
// of the destination memory spread over the cores; nothing is sent.
//
// From a cache every chunk is also checked against the manifest's checksum, once, by one worker
// holding bytes of it, chosen so that every thread has about as much to do (`assignCheckers`),
// which reads it whole. The others read only what their pieces need. A file on disk has no
// checksums; every worker reads only its pieces.
//
// The cache's files (pieces of 1 GiB, cache.ts) are open to every worker at once where the browser
// lets several readers hold a file (Chromium: `pullChunks`), else each worker takes them in turns,
// one piece at a time under a Web Lock (Firefox: `pullTurns`; a worker waits only when every piece
// it still needs is held by another).
//
//   coordinator                         shard worker i (shard-worker.ts 'pull')
//   sharePull() (before the allocation) open the cache's pieces / the file read-only
//   post 'pull' to every shard ──────►  pullChunks / pullTurns (its plan, i)
//   pullChunks / pullTurns (own plan)   … progress messages
//   wait for every answer  ◄──────────  {bad chunk indexes, bytes read}
//
// Any bad chunk, or a browser whose workers can neither share the cache's files nor take turns at
// them (no Web Locks): null, and the caller runs the general path (which finds the bad chunks again
// and fetches them).

import { Checksum, ChunkRouter } from '../../pkg/clef_web.js';
import { openTurns, type Manifest, type ModelCache, type PieceSharing, type PieceTurns } from '../cache.js';
import { PULL_COORDINATOR, type CopyOp, type LoadStats, type PullChunk, type PullFrom } from '../protocol.js';
import type { ShardPool } from '../shards.js';
import { Heap, copyPieces, flatPlan } from './placement.js';
import { assignCheckers, chunkIndexes, chunkRange } from './plan.js';
import { isTrusted } from './cached.js';
import type { Progress } from './progress.js';
import type { TransferResult } from './transfer.js';

export interface PullResult {
  /** Chunks whose bytes did not match their checksum (or could not be read in full). */
  bad: number[];
  /** Bytes read. */
  bytes: number;
}

/** Pieces at least this long are read straight into their place; shorter ones (a column split's
 *  rows) through the stage, a run of them with one read. */
export const DIRECT_MIN = 64 << 10;

/** What one worker reads (`pullChunks`, `pullTurns`). */
export interface WorkerPull {
  /** Its load plan, and where its weight shards lie. */
  plan: CopyOp[];
  shardPtr: (i: number) => number;
  chunks: PullChunk[];
  chunkSize: number;
  /** Which worker it is (`PULL_COORDINATOR` or a shard index): the chunks it checks. */
  me: number;
  /** Told every chunk's size as its pieces land. */
  onBytes?: (n: number) => void;
}

/**
 * Reads what `w.plan` needs of every chunk (through `read(fileOffset, dest)`, which returns the
 * bytes read) and puts the plan's pieces at `shardPtr(shard) + dstOffset`. A long piece is read
 * straight into its place (no copy through the stage); short pieces are read through a wasm stage,
 * a run of them at a time, and copied into place. Where this worker is a chunk's checker the whole
 * chunk is read, the bytes outside its long pieces through the stage, and its checksum computed
 * over both in file order; else only what its pieces need.
 */
export function pullChunks(read: (fileOffset: number, dest: Uint8Array) => number, w: WorkerPull): PullResult {
  const puller = new ChunkPuller(w);
  try {
    for (const c of w.chunks) puller.pull(read, c);
    return puller.result;
  } finally {
    puller.free();
  }
}

/**
 * `pullChunks` over the pieces of a cache that lets one worker at a time hold each (`PieceTurns`):
 * piece by piece, every chunk of a piece while holding it. Each worker starts at another piece (its
 * index on from the coordinator's) and then takes whichever piece it still needs that no one holds;
 * it waits only when all of them are held.
 */
export async function pullTurns(turns: PieceTurns, w: WorkerPull): Promise<PullResult> {
  const puller = new ChunkPuller(w);
  try {
    // The chunks with something for this worker, by piece, with where their pieces go.
    const byPiece = new Map<number, Array<[PullChunk, Float64Array]>>();
    for (const c of w.chunks) {
      const q = puller.piecesOf(c);
      if (!q.length && !puller.checks(c)) continue;
      const p = Math.floor(c.start / turns.pieceSize);
      if (!byPiece.has(p)) byPiece.set(p, []);
      byPiece.get(p)!.push([c, q]);
    }
    const all = [...byPiece.keys()].sort((a, b) => a - b);
    const first = all.length ? (w.me - PULL_COORDINATOR) % all.length : 0;
    const left = [...all.slice(first), ...all.slice(0, first)];
    const visit = (p: number) => (readPiece: (pieceOffset: number, dest: Uint8Array) => number) => {
      const base = p * turns.pieceSize;
      for (const [c, q] of byPiece.get(p)!) puller.pull((at, dest) => readPiece(at - base, dest), c, q);
    };
    while (left.length) {
      let k = 0;
      while (k < left.length && !(await turns.take(left[k], false, visit(left[k])))) k++;
      if (k === left.length) {
        k = 0;
        await turns.take(left[0], true, visit(left[0]));
      }
      left.splice(k, 1);
    }
    return puller.result;
  } finally {
    puller.free();
  }
}

/** `pullTurns` at the pieces of the cache `from` names (`openTurns`), from any worker. */
export async function pullInTurns(from: { dirName: string; pieceSize: number }, w: WorkerPull): Promise<PullResult> {
  const turns = await openTurns(from);
  if (!turns) throw Object.assign(new Error('the OPFS cache is not available in this worker'), { code: 'internal' });
  return pullTurns(turns, w); // each piece closed after its turn
}

/** One worker's reading of its part, chunk by chunk (`pullChunks`, `pullTurns`). */
class ChunkPuller {
  private router: ChunkRouter;
  private ptrs: number[] = [];
  private heap = new Heap();
  readonly result: PullResult = { bad: [], bytes: 0 };

  constructor(private w: WorkerPull) {
    this.router = ChunkRouter.stageOnly(w.chunkSize);
    this.router.addDestination(flatPlan(w.plan));
    for (const op of w.plan) this.ptrs[op.shard] ??= w.shardPtr(op.shard);
  }

  /** The quads (shard, dst, src, len) of chunk `c`'s pieces for this worker (the stage's bytes are not read). */
  piecesOf(c: PullChunk): Float64Array {
    return this.router.pieces(0, 0, c.start, c.end - c.start, false);
  }

  /** Whether this worker checks chunk `c` (and so reads it whole). */
  checks(c: PullChunk): boolean {
    return c.checker === this.w.me && c.checksum !== undefined;
  }

  /**
   * Reads what chunk `c` holds for this worker (`q`: its pieces); a short read or a wrong checksum
   * marks it bad.
   */
  pull(read: (fileOffset: number, dest: Uint8Array) => number, c: PullChunk, q = this.piecesOf(c)): void {
    const n = c.end - c.start;
    const check = this.checks(c);
    if (!q.length && !check) return;
    const stage = this.router.stagePtr(0);
    const { reads, staged } = chunkReads(q, this.ptrs, stage, n, check);
    for (const r of reads) {
      const got = read(c.start + r.from, this.heap.get().subarray(r.at, r.at + r.len));
      this.result.bytes += got;
      if (got !== r.len) {
        this.result.bad.push(c.index);
        return;
      }
    }
    if (check && readsChecksum(reads) !== c.checksum) {
      this.result.bad.push(c.index);
      return;
    }
    if (!q.length) return;
    copyPieces(this.heap.get(), this.ptrs, stage, staged);
    this.w.onBytes?.(n);
  }

  free(): void {
    this.router.free();
  }
}

/** One read of a chunk: its bytes [from, from + len) to wasm address `at` (a piece's place, or the stage). */
export interface ChunkRead {
  from: number;
  len: number;
  at: number;
}

/** How one chunk is read: the reads in file order, and the pieces (quads) that come through the stage. */
export interface ChunkReads {
  reads: ChunkRead[];
  staged: Float64Array;
}

/** The quads (shard, dst, src, len) of `q` in src order (`q` itself when they are: the usual case). */
function bySource(q: Float64Array): Float64Array {
  let sorted = true;
  for (let i = 4; i < q.length && sorted; i += 4) sorted = q[i + 2] >= q[i - 2];
  if (sorted) return q;
  const idx = Array.from({ length: q.length / 4 }, (_, k) => k * 4).sort((a, b) => q[a + 2] - q[b + 2]);
  const out = new Float64Array(q.length);
  idx.forEach((a, k) => out.set(q.subarray(a, a + 4), k * 4));
  return out;
}

/**
 * The reads of one chunk of `n` bytes, in file order: each long piece of `q` (quads: shard, dst,
 * src, len; at least DIRECT_MIN bytes and overlapping no other piece) straight to
 * `ptrs[shard] + dst`; the rest through the stage (at `stage` + its offset in the chunk) —
 * everything else of the chunk when `whole` (its checker), else the spans of the short pieces (a
 * run of them with the gaps between, as far as the next long piece) — and those short pieces.
 */
export function chunkReads(q: Float64Array, ptrs: number[], stage: number, n: number, whole: boolean): ChunkReads {
  const s = bySource(q);
  const reads: ChunkRead[] = [];
  const staged = new Float64Array(s.length);
  let k = 0;
  const viaStage = (from: number, to: number) => {
    if (to > from) reads.push({ from, len: to - from, at: stage + from });
  };
  let at = 0; // whole: the end of the last long piece; else the end of the pending run
  let prevEnd = 0; // the end of the pieces so far
  let run = -1; // start of the pending run of short pieces (not whole)
  for (let i = 0; i < s.length; i += 4) {
    const src = s[i + 2];
    const len = s[i + 3];
    const direct = len >= DIRECT_MIN && src >= prevEnd && (i + 4 >= s.length || s[i + 6] >= src + len);
    if (direct) {
      if (whole) viaStage(at, src);
      else if (run >= 0) viaStage(run, at);
      run = -1;
      reads.push({ from: src, len, at: ptrs[s[i]] + s[i + 1] });
      at = src + len;
    } else {
      staged[k] = s[i];
      staged[k + 1] = s[i + 1];
      staged[k + 2] = src;
      staged[k + 3] = len;
      k += 4;
      if (!whole) {
        if (run < 0) run = src;
        at = Math.max(at, src + len);
      }
    }
    prevEnd = Math.max(prevEnd, src + len);
  }
  if (whole) viaStage(at, n);
  else if (run >= 0) viaStage(run, at);
  return { reads, staged: staged.subarray(0, k) };
}

/** The checksum of a whole chunk read by chunkReads (`whole`): its reads cover it in file order. */
function readsChecksum(reads: ChunkRead[]): string {
  const c = new Checksum();
  try {
    for (const r of reads) c.updateFromMemory(r.at, r.len);
    return c.digest();
  } finally {
    c.free();
  }
}

/** What the coordinator's side works with. */
export interface PullInput {
  name: string;
  pool: ShardPool;
  /** The coordinator's own plan, and where its weight shards lie. */
  plan: CopyOp[];
  shardPtr: (i: number) => number;
  /** Every shard's plan (as they answered `alloc`), in shard order. */
  shardPlans: CopyOp[][];
  dataStart: number;
  size: number;
  chunkSize: number;
  progress: Progress;
  stats: LoadStats;
  onWarning: (message: string) => void;
}

/**
 * Whether every worker can read this cache itself (`pullCached`), and how: a verified cache holding
 * every chunk of [dataStart, size), each with a checksum of the current kind, whose pieces this
 * browser lets several workers read (`ModelCache.share`: at once, or in turns) — then the cache
 * has let go of them until `pullCached` takes them back. Null: the general path. Asked before the
 * weights are allocated: read straight into place, they need no clear.
 */
export async function sharePull(cache: ModelCache, m: Manifest, dataStart: number, size: number, chunkSize: number): Promise<PieceSharing | null> {
  if (!isTrusted(m, dataStart, size, chunkSize)) return null;
  if (!chunkIndexes(dataStart, size, chunkSize).every((k) => Checksum.isCurrent(m.chunks[k]))) return null;
  return cache.share();
}

/**
 * The whole data section from a cache `sharePull` opened for sharing, every worker reading its own
 * part and checking its share of the chunks; the cache's own handles are taken back. Null when it
 * did not work out (a worker could not read, a bad chunk — dropped from the manifest): the caller
 * runs the general transfer.
 */
export async function pullCached(p: PullInput & { cache: ModelCache; manifest: Manifest; sharing: PieceSharing }): Promise<TransferResult | null> {
  const { cache, manifest: m, stats } = p;
  const turns = p.sharing === 'turns';
  let r: PullOutcome;
  try {
    // The coordinator's part is read in this worker, and so is shard 0's where it is local.
    const thread = (w: number) => (w === 1 && p.pool.local ? 0 : w);
    const chunks = assignCheckers(gridChunks(p).map((c) => ({ ...c, checksum: m.chunks[c.index] })), [p.plan, ...p.shardPlans], thread);
    const from: PullFrom = { kind: 'opfs', dirName: cache.dirName, size: p.size, pieceSize: m.pieceSize, turns };
    r = await pullAll(p, from, chunks, async (mine) => (turns ? pullInTurns(from, mine) : pullChunks((at, dest) => cache.read(at, dest), mine)));
  } finally {
    await cache.ownPieces();
  }
  if (r.failed) return null;
  if (r.bad.size) {
    p.onWarning(`${r.bad.size} cached chunk(s) of ${p.name} are damaged: fetching them again`);
    for (const k of r.bad) cache.dropChunk(k);
    stats.refetchedChunks += r.bad.size;
    return null;
  }
  stats.cachedBytes += p.size - p.dataStart;
  return r.result;
}

/**
 * (Node) The whole data section from the file at `path`, every worker reading its own part. Null
 * when a worker could not (the caller runs the general transfer, which reports what is wrong).
 */
export async function pullFile(p: PullInput & { path: string; read: (fileOffset: number, dest: Uint8Array) => number }): Promise<TransferResult | null> {
  const r = await pullAll(p, { kind: 'file', path: p.path }, gridChunks(p), async (mine) => pullChunks(p.read, mine));
  return r.failed || r.bad.size ? null : r.result;
}

/** The data section's chunks on the load's grid (load/plan.ts). */
function gridChunks(p: PullInput): PullChunk[] {
  return chunkIndexes(p.dataStart, p.size, p.chunkSize).map((index) => ({ index, ...chunkRange(index, p.dataStart, p.size, p.chunkSize) }));
}

interface PullOutcome {
  bad: Set<number>;
  /** Why a worker could not read the source itself (null: all did). */
  failed: string | null;
  result: TransferResult;
}

/** Every shard pulls from `from` in its worker while this worker pulls its own part (`pullMine`). */
async function pullAll(p: PullInput, from: PullFrom, chunks: PullChunk[], pullMine: (mine: WorkerPull) => Promise<PullResult>): Promise<PullOutcome> {
  const { pool, progress, stats } = p;
  const t0 = performance.now();
  const data = p.size - p.dataStart;
  progress.setPhase('cache');
  progress.loaded = p.dataStart;
  let pulled = 0;
  const bad = new Set<number>();
  let failed: string | null = null;
  let bytes = 0;
  const shards = pool.pull({ from, chunkSize: p.chunkSize, chunks }, (n) => {
    pulled += n;
    progress.loaded = p.dataStart + Math.min(data, pulled / pool.size);
    progress.emit();
  });
  shards.catch(() => {}); // awaited below
  try {
    const r = await pullMine({ plan: p.plan, shardPtr: p.shardPtr, chunks, chunkSize: p.chunkSize, me: PULL_COORDINATOR });
    r.bad.forEach((k) => bad.add(k));
    bytes += r.bytes;
  } catch (e) {
    failed = (e as Error).message; // (no memory for the stage, say): the general path
  }
  const r = await shards;
  r.bad.forEach((k) => bad.add(k));
  failed ??= r.failed;
  bytes += r.bytes;
  stats.pulledBytes = bytes;
  stats.pulledByWorkers = !failed && !bad.size;
  return { bad, failed, result: { sha256: null, downloadedData: 0, netMs: 0, cacheMs: performance.now() - t0, deliverMs: 0 } };
}
