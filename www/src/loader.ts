// Getting a GGUF's bytes into the engine's weight shards (runs in the worker, or in-process in Node).
//
//   header    read a growing prefix (HTTP Range / Blob slice / file / OPFS) until parseHeader is
//             satisfied; learn size, ETag and sha256 (the Hub's LFS oid)          load/header.ts
//   fit       weights + state + KV for the context against the memory limit; fail here, before
//             any weight byte is downloaded, naming a smaller quant; the faster stored forms
//             of some tensors (IQ2_S/XS → IQ2_SX, IQ3_S → IQ3_SX, Q3_K → Q3_KX) where they cost no context
//                                                                                   load/fit.ts
//   cache     reuse a valid OPFS manifest (if the file did not change), or start a fresh one
//                                                                                   load/cached.ts
//   workers   the whole model in this worker, or split across N shard workers (tensor
//             parallelism: more cores, and no 4 GiB limit on the file): how many   load/workers.ts
//   allocate  ModelLoader.forRole(header, …): the weight shards, once; `Placement` maps every file
//             range to its destination (shard memory, or a buffer for padding) — split: the
//             coordinator's part here, each shard's part in its worker (shards.ts) load/placement.ts
//   data      the data section on a chunk grid (load/plan.ts), each chunk from the cache or from
//             Range requests (load/fetch.ts: timeouts, resume from the last byte, one retry
//             policy: load/retry.ts), verified with sha256 (load/verify.ts)     load/transfer.ts
//
// Every byte is written straight to its final place; no whole-file copy exists in JS. This file
// runs the steps in order with one explicit state (`Run`); the steps live in load/.

import { ModelLoader, type WarmUp, splitInfo, wasmMemory } from '../pkg/clef_web.js';
import type { CopyOp, ErrorCode, LoadParams, LoadProgress, LoadStats } from './protocol.js';
import { type Manifest, type ModelCache, CacheError, PIECE_BYTES } from './cache.js';
import { type ResolvedLoadParams, resolveLoadParams } from './validate.js';
import { LoadError, errCode } from './load/errors.js';
import { MIN_AUTO_CONTEXT, WASM_MAX_MEMORY, allocationRefused, memoryNeeded, outOfMemory, pickContext, type FitSubject, type MemoryShape } from './load/fit.js';
import { type HeaderInfo, checkSupported, readHeader } from './load/header.js';
import { cachedHeader, completeCache, isTrusted, probe, sameFile, startCache } from './load/cached.js';
import { type RetryEvents, withRetry } from './load/fetch.js';
import { type Placement, ShardPlacement, SplitPlacement } from './load/placement.js';
import { chooseWorkers, coreCount, deviceRam, partsFit } from './load/workers.js';
import { ShardError, type ShardPool } from './shards.js';
import { Progress, emptyStats, jsHeap } from './load/progress.js';
import { type RetryPolicy, retryPolicy } from './load/retry.js';
import type { ByteSource } from './load/sources.js';
import { transfer } from './load/transfer.js';
import { pullCached, pullFile, sharePull } from './load/pull.js';
import { buildWarmUp } from './load/warm.js';

export { LoadError } from './load/errors.js';
export { WASM_MAX_MEMORY } from './load/fit.js';
export type { HeaderInfo } from './load/header.js';
export { macrotask } from './load/macrotask.js';
export { ShardPlacement, SplitPlacement, type Placement, type Part } from './load/placement.js';
export { BlobSource, HttpSource, SyncFileSource, type ByteSource, type OpenedSource } from './load/sources.js';
export { CacheError, PIECE_BYTES };

/** Bytes asked for by the first header request (most headers fit; the real vocabulary needs ~11 MB). */
const FIRST_READ = 1 << 20;

export interface LoadOutcome {
  /** The whole model's loader, or the coordinator's when split. */
  loader: ModelLoader;
  /** The shard workers holding the rest of a split model (null: the whole model is in `loader`). */
  pool: ShardPool | null;
  workers: number;
  workersReason: string;
  info: HeaderInfo;
  nCtx: number;
  /** The miniature that warms the engine's code once the model is ready (load/warm.ts; null: none). */
  warm: WarmUp | null;
  /** The `out_of_memory` error for an allocation refused after the load (the state and KV cache in `finish`). */
  refused: (what: string) => LoadError;
  source: 'network' | 'cache' | 'network+cache' | 'file';
  sha256: string | null;
  verified: boolean;
  etag: string | null;
  stats: LoadStats;
}

export interface LoadContext {
  source: ByteSource;
  /** The OPFS cache of this model (null: no caching). */
  cache: ModelCache | null;
  cacheKey: string;
  url: string;
  name: string;
  params: LoadParams;
  signal: AbortSignal;
  onProgress: (p: LoadProgress) => void;
  onWarning: (message: string) => void;
  /** Repository for "try owner/repo:QUANT" messages. */
  repo?: string;
  /** True for sources that are local (File/Blob/path): no network phase. */
  local: boolean;
  /** Starts n shard workers (absent: the model is never split). */
  startShards?: (n: number) => Promise<ShardPool>;
  /** The machine's cores (default: navigator.hardwareConcurrency). */
  cores?: number;
}

/** wasm memory of a freshly started shard worker's instance (its glue, stack and heap start). */
const FRESH_INSTANCE_BYTES = 16 << 20;

/** What the header step found. */
interface Head {
  header: Uint8Array;
  info: HeaderInfo;
  size: number;
  etag: string | null;
  /** Expected sha256 (the caller's, else the server's / the manifest's). */
  oid: string | null;
  /** A manifest whose header matched (its chunks can be reused); null: start a fresh cache. */
  manifest: Manifest | null;
  /** The network is unreachable (the cache must serve everything). */
  offline: boolean;
  /** The header came from the network (its bytes beyond dataOffset are data). */
  networkPrefix: boolean;
}

/** The state one load carries through its steps. */
class Run {
  readonly t0 = performance.now();
  readonly params: ResolvedLoadParams;
  readonly policy: RetryPolicy;
  readonly stats = emptyStats();
  readonly progress: Progress;
  readonly events: RetryEvents;

  constructor(readonly ctx: LoadContext) {
    this.params = resolveLoadParams(ctx.params);
    this.policy = retryPolicy(this.params);
    ctx.source.useTimeouts?.(this.policy);
    this.progress = new Progress(this.stats, ctx.onProgress);
    this.events = {
      retrying: (info) => {
        this.stats.retries++;
        this.progress.setRetry(info);
      },
      waiting: (info) => this.progress.setRetry(info),
    };
  }

  /** A one-shot request under the retry policy. */
  request<T>(f: () => Promise<T>, what: string): Promise<T> {
    return withRetry(f, this.ctx.source, this.policy, what, this.ctx.signal, this.events);
  }
}

/**
 * Loads a model: header, fit check, allocation, data (cache / network), verification.
 * On success the returned ModelLoader has every shard filled (call `finish`).
 */
export async function loadModel(ctx: LoadContext): Promise<LoadOutcome> {
  try {
    return await runLoad(new Run(ctx));
  } finally {
    // Also on failures before anything was cached (404, offline, too large): no empty cache entry.
    await ctx.cache?.release();
  }
}

async function runLoad(run: Run): Promise<LoadOutcome> {
  const { ctx, params, stats, progress } = run;
  const ms = stats.phaseMs;
  let mark = performance.now();
  /** Adds the time since the last mark to a phase. */
  const lap = (phase: 'header' | 'allocate' | 'data' | 'settle') => {
    const now = performance.now();
    ms[phase] += now - mark;
    mark = now;
  };
  const head = await readHead(run);
  lap('header');
  const { info, size } = head;
  progress.total = size;
  checkSupported(info);

  // ---- workers and fit check, before any weight byte is read -------------------------------------
  const limit = Math.min(params.memoryLimit, WASM_MAX_MEMORY);
  const here = limit - (wasmMemory() as WebAssembly.Memory).buffer.byteLength;
  const available = (i: number) => (i === 0 ? here : limit - FRESH_INSTANCE_BYTES);
  const headerBytes = head.header.subarray(0, info.dataOffset);
  // Each instance's memory shape with n workers: the whole model, or the coordinator then each shard,
  // with the weights as in the file and with the faster stored forms of some tensors (IQ2_S, IQ2_XS →
  // IQ2_SX, IQ3_S → IQ3_SX, Q3_K → Q3_KX, src/quant/kquants/forms.rs: more memory), from one parse of
  // the header per n.
  // An f16 KV cache stores half the bytes per token of the figures (which are f32).
  const kvScale = params.kvCache === 'f16' ? 0.5 : 1;
  type LayoutShape = MemoryShape & { expandedWeightBytes: number };
  // With `band`: the shards' bands (src/split.rs), in percent of a shard's share.
  const shapeCache = new Map<string, LayoutShape[]>();
  const layoutShapes = (n: number, band: number): LayoutShape[] => {
    const key = `${n}/${band}`;
    if (!shapeCache.has(key)) {
      const s = splitInfo(headerBytes, size, n, band) as LayoutShape[];
      shapeCache.set(key, s.map((p) => ({ ...p, nVocab: info.nVocab, kvBytesPerToken: p.kvBytesPerToken * kvScale })));
    }
    return shapeCache.get(key)!;
  };
  // One worker: the header's figures (a tensor too large for one allocation is then out_of_memory,
  // below, rather than a layout error).
  const shapes = (n: number, band = 0): MemoryShape[] =>
    n === 1 ? [{ ...info, kvBytesPerToken: info.kvBytesPerToken * kvScale }] : layoutShapes(n, band);
  /** The parts with the faster stored forms, where the file has tensors that have one (else null). */
  const fastShapes = (n: number, band: number): MemoryShape[] | null => {
    try {
      const s = layoutShapes(n, band);
      return s.some((p) => p.expandedWeightBytes !== p.weightBytes) ? s.map((p) => ({ ...p, weightBytes: p.expandedWeightBytes })) : null;
    } catch {
      return null;
    }
  };
  const smallest = Math.min(params.contextLength ?? MIN_AUTO_CONTEXT, info.contextLength || MIN_AUTO_CONTEXT);
  const choice = ctx.startShards
    ? chooseWorkers({ requested: params.workers, cores: ctx.cores ?? coreCount(), weightBytes: info.weightBytes, fits: (n) => partsFit(shapes(n), smallest, available, deviceRam()) })
    : { workers: 1, reason: 'one worker (this host cannot start shard workers)' };
  const workers = choice.workers;
  const contextOf = (ps: MemoryShape[]) => Math.min(...ps.map((p, i) => pickContext(p, info.contextLength, params.contextLength, available(i))));
  const totalOf = (ps: MemoryShape[], n: number) => ps.reduce((a, p) => a + memoryNeeded(p, n), 0);
  const fitsAt = (ps: MemoryShape[], n: number) => ps.every((p, i) => memoryNeeded(p, n) <= available(i)) && totalOf(ps, n) <= deviceRam();
  // Bands (the engine moves FFN and LM-head rows to the faster shard token by token, src/balance.rs)
  // and then the faster stored forms, each only where it costs no context: the same context, every
  // part fitting. The worker count is chosen without either.
  const evenCtx = contextOf(shapes(workers));
  const banded = workers > 1 && params.band > 0 ? shapes(workers, params.band) : null;
  const band = banded && contextOf(banded) >= evenCtx && fitsAt(banded, evenCtx) ? params.band : 0;
  stats.band = band;
  const plain = shapes(workers, band);
  const fast = fastShapes(workers, band);
  const fastCtx = fast ? contextOf(fast) : 0;
  const expand = !!fast && fastCtx >= contextOf(plain) && fitsAt(fast, fastCtx);
  const parts = expand ? fast! : plain;
  const nCtx = contextOf(parts);
  stats.expanded = expand;
  const subject: FitSubject = {
    name: params.model ?? ctx.name, quant: params.quant, fileType: info.fileType, repo: ctx.repo, contextRequested: !!params.contextLength,
  };
  const total = totalOf(parts, nCtx);
  if (total > deviceRam()) {
    throw new LoadError('out_of_memory', `${subject.name} needs about ${(total / 1e9).toFixed(1)} GB of memory in all, ` +
      `more than this device's ${(deviceRam() / 1e9).toFixed(0)} GB: use a smaller quant or a shorter contextLength.`);
  }
  parts.forEach((p, i) => {
    if (memoryNeeded(p, nCtx) > available(i)) {
      const why = workers > 1 ? `split across ${workers} workers, ${i === 0 ? 'the coordinator' : `shard worker ${i}`} needs this much; more workers would help` : '';
      throw outOfMemory(subject, p, nCtx, available(i), limit, why);
    }
  });
  /** The browser refused an allocation the fit check allowed (measured: this instance's memory now). */
  const refused = (what: string) => allocationRefused(subject, parts[0], nCtx, (wasmMemory() as WebAssembly.Memory).buffer.byteLength, what);
  // ---- cache: reuse the manifest, or start a fresh one ------------------------------------------
  const cache = ctx.cache;
  let m = head.manifest;
  if (cache && !m) {
    m = await startCache(cache, {
      key: ctx.cacheKey, url: ctx.url, name: ctx.name, size, etag: head.etag, oid: head.oid,
      header: head.header, dataOffset: info.dataOffset, chunkSize: params.chunkSize,
    });
  } else if (m && head.oid && !m.oid) {
    m.oid = head.oid;
  }
  const chunkSize = m?.chunkSize ?? params.chunkSize;
  // Split, every worker reads its part itself from a cache that lets it (load/pull.ts) or from a
  // file on disk (Node): straight into place, so the weights need not be cleared when allocated
  // (src/fresh_alloc.rs). Bytes that come through copies take the page faults faster after a clear.
  const src = ctx.source;
  const sharing = workers > 1 && cache && m ? await sharePull(cache, m, info.dataOffset, size, chunkSize) : null;
  const fromFile = workers > 1 && !sharing && !!src.filePath && !!src.readInto && !head.oid;

  // ---- allocate ----------------------------------------------------------------------------------
  lap('header');
  let loader: ModelLoader;
  let pool: ShardPool | null = null;
  let shardPlans: CopyOp[][] = [];
  let placement: Placement;
  let warm: WarmUp | null = null;
  const miniature = (n: number, b: number) => {
    const t = performance.now();
    // It lives in this instance beside the model until the first request: only where the fit leaves it room.
    const w = buildWarmUp(headerBytes, size, info.weightBytes, available(0) - memoryNeeded(parts[0], nCtx), n, expand, b, ctx.onWarning);
    ms.warm = performance.now() - t;
    return w;
  };
  try {
    if (workers === 1) {
      warm = miniature(1, 0);
      loader = ModelLoader.forRole(headerBytes, size, 'whole', 0, 1, expand);
      const l = loader;
      placement = new ShardPlacement(l.plan() as CopyOp[], info.dataOffset, size, (i) => l.shardPtr(i));
    } else {
      // The shard workers start while this one builds the miniature that warms the code they
      // will share (load/warm.ts).
      const starting = ctx.startShards!(workers);
      starting.catch(() => {}); // awaited below
      warm = miniature(workers, band);
      pool = await starting;
      const intoPlace = !!sharing || fromFile;
      loader = ModelLoader.forRole(headerBytes, size, 'coordinator', 0, workers, expand, band, intoPlace);
      const l = loader;
      shardPlans = await pool.alloc(headerBytes, size, expand, band, intoPlace);
      placement = new SplitPlacement({ plan: l.plan() as CopyOp[], shardPtr: (i) => l.shardPtr(i) }, pool.destinations(shardPlans), info.dataOffset, size, chunkSize);
    }
  } catch (e) {
    warm?.free();
    pool?.terminate();
    cache?.close();
    const code = e instanceof ShardError ? e.code : errCode(e);
    if (code === 'out_of_memory') throw refused('the weights');
    if (e instanceof ShardError) throw new LoadError(e.code, e.message);
    throw new LoadError((code as ErrorCode) ?? 'bad_gguf', (e as Error).message);
  }

  // ---- data --------------------------------------------------------------------------------------
  lap('allocate');
  try {
    // A verified cache with every chunk present needs no sha256 (chunk checksums suffice); split,
    // every worker reads its own part from it (load/pull.ts), as from a file on disk (Node) that
    // has no sha256 to check. Else, or if that fails: the transfer.
    let trusted = isTrusted(m, info.dataOffset, size, chunkSize);
    const l = loader;
    const pull = pool && {
      name: ctx.name, pool, plan: l.plan() as CopyOp[], shardPtr: (i: number) => l.shardPtr(i), shardPlans,
      dataStart: info.dataOffset, size, chunkSize, progress, stats, onWarning: ctx.onWarning,
    };
    const pulled = !pull ? null
      : sharing && cache && m ? await pullCached({ ...pull, cache, manifest: m, sharing })
      : fromFile ? await pullFile({ ...pull, path: src.filePath!, read: (at, dest) => src.readInto!(at, dest) })
      : null;
    trusted = isTrusted(m, info.dataOffset, size, chunkSize);
    const r = pulled ?? await transfer({
      name: ctx.name, source: ctx.source, local: ctx.local, cache, manifest: m, placement,
      header: head.header, networkPrefix: head.networkPrefix, chunkSize, oid: head.oid, trusted, offline: head.offline,
      concurrency: params.concurrency, policy: run.policy, signal: ctx.signal, stats, progress, events: run.events,
      onWarning: ctx.onWarning,
    });
    for (let i = 0; i < loader.shardCount(); i++) loader.markFilled(i);
    ms.cacheRead = r.cacheMs;
    ms.deliver = r.deliverMs;
    lap('data');
    await pool?.sync(); // every shard has written its bytes (or the pool failed)
    pool?.dropBuffers();
    lap('settle');

    stats.seconds = (performance.now() - run.t0) / 1000;
    stats.downloadBytesPerSecond = r.netMs > 0 ? Math.round((r.downloadedData * 1000) / r.netMs) : 0;
    stats.cacheBytesPerSecond = r.cacheMs > 0 ? Math.round((stats.cachedBytes * 1000) / r.cacheMs) : 0;
    stats.wasmMemoryBytes = (wasmMemory() as WebAssembly.Memory).buffer.byteLength;
    stats.peakJsHeapBytes = Math.max(stats.peakJsHeapBytes, jsHeap());
    completeCache(cache, m, r.sha256);
    progress.loaded = size;
    progress.phase = 'ready';
    progress.emit(true);
    return {
      loader, pool, workers, workersReason: choice.reason, info, nCtx, refused,
      source: ctx.local ? 'file' : stats.cachedBytes > 0 ? (r.downloadedData > 0 ? 'network+cache' : 'cache') : 'network',
      sha256: r.sha256 ?? (trusted ? m!.oid : null),
      verified: !!r.sha256 || trusted,
      etag: head.etag, stats, warm,
    };
  } catch (e) {
    warm?.free();
    loader.free();
    pool?.terminate();
    // A shard worker allocates its weights while the data streams in (shard-worker.ts 'alloc').
    if (e instanceof ShardError) throw e.code === 'out_of_memory' ? refused('the weights') : new LoadError(e.code, e.message);
    throw e;
  } finally {
    placement.dispose();
  }
}

/** The header: from a cache whose file is unchanged, else from the source. */
async function readHead(run: Run): Promise<Head> {
  const { ctx, stats, progress } = run;
  const { source, signal } = ctx;
  const cache = ctx.cache;
  const m = cache?.manifest ?? null;
  const wanted = ctx.params.sha256?.toLowerCase() ?? null;
  let offline = false;

  if (cache && m) {
    // Is the cached file still the file at this URL? One small request (skipped for local files).
    const p = ctx.local ? { remote: null, offline: false } : await probe(source, m, signal, ctx.onWarning);
    offline = p.offline;
    if (p.remote) stats.downloadedBytes += p.remote.prefix.length;
    if (!sameFile(p.remote, m)) {
      ctx.onWarning(`the cached copy of ${ctx.name} is out of date (the file changed on the server): downloading it again`);
    } else {
      const h = await cachedHeader(cache, m, ctx.name);
      if (h) {
        return {
          header: h.prefix, info: h.info, size: m.size, etag: m.etag ?? p.remote?.etag ?? null,
          oid: wanted ?? m.oid ?? p.remote?.oid ?? null, manifest: m, offline, networkPrefix: false,
        };
      }
      ctx.onWarning(`the cached header of ${ctx.name} is damaged: fetching it again`);
    }
    if (offline) throw new LoadError('offline', `${ctx.name} is not usable from the cache and the network is unreachable`);
  }

  progress.emit(true);
  const opened = await run.request(() => source.open(FIRST_READ, signal), `reading the header of ${ctx.name}`);
  if (!ctx.local) stats.downloadedBytes += opened.prefix.length;
  progress.total = opened.size;
  progress.loaded = opened.prefix.length;
  progress.emit();
  const h = await readHeader(
    opened.prefix,
    opened.size,
    ctx.name,
    async (a, b) => {
      const bytes = await run.request(() => source.readBytes(a, b, signal), `reading the header of ${ctx.name}`);
      if (!ctx.local) stats.downloadedBytes += bytes.length;
      return bytes;
    },
    (n) => {
      progress.loaded = n;
      progress.emit();
    },
  );
  return {
    header: h.prefix, info: h.info, size: opened.size, etag: opened.etag, oid: wanted ?? opened.oid,
    manifest: null, offline: false, networkPrefix: true,
  };
}
