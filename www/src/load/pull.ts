// A split model from a verified OPFS cache, read by every worker itself ("pull"), in parallel.
//
// The general path (transfer.ts + SplitPlacement) has the engine worker read every chunk, check
// it and send each shard worker its pieces: one thread routes the whole file. From a cache that was
// verified and holds every chunk, each worker — the coordinator and every shard worker — instead
// opens the cached pieces read-only and reads the chunks its own plan needs into its own wasm
// memory, checks each against the manifest's checksum and copies its pieces into place. The reads,
// checksums and page faults of the destination memory spread over the cores; nothing is sent.
//
//   coordinator                         shard worker i (shard-worker.ts 'pull')
//   ModelCache.shareReadOnly()          open clef-cache/<dir>/piece-*.bin read-only
//   post 'pull' to every shard ──────►  pullChunks(its plan)
//   pullChunks(own plan)                … progress messages
//   wait for every answer  ◄──────────  {bad chunk indexes, bytes read}
//
// Any bad chunk, or a browser without read-only access handles: `ok: false`, and the caller runs
// the general path (which finds the bad chunks again and fetches them).

import { Checksum, ChunkRouter } from '../../pkg/clef_web.js';
import type { Manifest, ModelCache } from '../cache.js';
import type { CopyOp, LoadStats, PullChunk } from '../protocol.js';
import type { ShardPool } from '../shards.js';
import { Heap, copyPieces, flatPlan } from './placement.js';
import { chunkIndexes, chunkRange } from './plan.js';
import type { Progress } from './progress.js';
import type { TransferResult } from './transfer.js';

export interface PullResult {
  /** Chunks whose bytes did not match their checksum (or could not be read in full). */
  bad: number[];
  /** Bytes read. */
  bytes: number;
}

/**
 * Reads every chunk that holds bytes of `plan` (through `read(fileOffset, dest)`, which returns
 * the bytes read) into a wasm stage, checks it, and copies the plan's pieces to
 * `shardPtr(shard) + dstOffset`. `onBytes` is told every chunk's size as it lands.
 */
export function pullChunks(
  read: (fileOffset: number, dest: Uint8Array) => number,
  plan: CopyOp[],
  shardPtr: (i: number) => number,
  chunks: PullChunk[],
  chunkSize: number,
  onBytes: (n: number) => void = () => {},
): PullResult {
  const router = ChunkRouter.stageOnly(chunkSize);
  router.addDestination(flatPlan(plan));
  const ptrs: number[] = [];
  for (const op of plan) ptrs[op.shard] ??= shardPtr(op.shard);
  const heap = new Heap();
  const bad: number[] = [];
  let bytes = 0;
  try {
    for (const c of chunks) {
      const n = c.end - c.start;
      const q = router.pieces(0, 0, c.start, n, false); // where its pieces go (the stage's bytes are not read)
      if (!q.length) continue;
      const stage = router.stagePtr(0);
      const got = read(c.start, heap.get().subarray(stage, stage + n));
      bytes += got;
      if (got !== n || router.stageChecksum(0, n) !== c.checksum) {
        bad.push(c.index);
        continue;
      }
      copyPieces(heap.get(), ptrs, stage, q);
      onBytes(n);
    }
  } finally {
    router.free();
  }
  return { bad, bytes };
}

/** What the coordinator's side works with. */
export interface PullInput {
  name: string;
  cache: ModelCache;
  manifest: Manifest;
  pool: ShardPool;
  /** The coordinator's own plan, and where its weight shards lie. */
  plan: CopyOp[];
  shardPtr: (i: number) => number;
  dataStart: number;
  size: number;
  chunkSize: number;
  progress: Progress;
  stats: LoadStats;
  onWarning: (message: string) => void;
}

/**
 * The whole data section from a verified, complete cache, every worker reading its own part. Null
 * when this cannot be done or did not work out (a checksum of an earlier build's kind, no read-only
 * handles, a bad chunk — dropped from the manifest): the caller runs the general transfer.
 */
export async function pullCached(p: PullInput): Promise<TransferResult | null> {
  const { cache, manifest: m, pool, progress, stats } = p;
  const chunks: PullChunk[] = chunkIndexes(p.dataStart, p.size, p.chunkSize).map((index) => ({
    index, ...chunkRange(index, p.dataStart, p.size, p.chunkSize), checksum: m.chunks[index],
  }));
  if (!chunks.every((c) => c.checksum !== undefined && Checksum.isCurrent(c.checksum))) return null;
  if (!(await cache.shareReadOnly())) return null;
  const t0 = performance.now();
  const data = p.size - p.dataStart;
  progress.setPhase('cache');
  progress.loaded = p.dataStart;
  let pulled = 0;
  const bad = new Set<number>();
  let failed: string | null = null;
  try {
    // The shards read in their workers while this worker reads its own part.
    const shards = pool.pull({ dirName: cache.dirName, size: p.size, pieceSize: m.pieceSize, chunkSize: p.chunkSize, chunks }, (n) => {
      pulled += n;
      progress.loaded = p.dataStart + Math.min(data, pulled / pool.size);
      progress.emit();
    });
    shards.catch(() => {}); // awaited below
    try {
      pullChunks((at, dest) => cache.read(at, dest), p.plan, p.shardPtr, chunks, p.chunkSize).bad.forEach((k) => bad.add(k));
    } catch (e) {
      failed = (e as Error).message; // (no memory for the stage, say): the general path
    }
    const r = await shards;
    r.bad.forEach((k) => bad.add(k));
    failed ??= r.failed;
  } finally {
    await cache.ownPieces();
  }
  if (failed) return null;
  if (bad.size) {
    p.onWarning(`${bad.size} cached chunk(s) of ${p.name} are damaged: fetching them again`);
    for (const k of bad) cache.dropChunk(k);
    stats.refetchedChunks += bad.size;
    return null;
  }
  stats.cachedBytes += data;
  stats.pulledByWorkers = true;
  return { sha256: null, downloadedData: 0, netMs: 0, cacheMs: performance.now() - t0, deliverMs: 0 };
}
