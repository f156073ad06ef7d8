// A decision head for a head-less model: `joint_head.safetensors` (+ `joint_head_config.json`)
// into the engine's wasm memory, with the model's machinery — the same Range streaming, resume and
// retries (fetch.ts), OPFS cache (cached.ts), sha256 against the Hub's LFS oid (verify.ts) and
// progress (progress.ts), through the one `transfer` the model uses.
//
//   header    the file's first bytes → HeadLoader.prefixLength (8 + the JSON header's length)
//   allocate  new HeadLoader(config, prefix, size): the head's weights, once (src/clef/safetensors.rs)
//   data      [dataOffset, size) on the chunk grid, straight to HeadLoader.ptr() — a placement with
//             one contiguous destination — cached and verified like a model's data section
//   attach    engine.attachHead(loader): the DecisionModel the engine decides with

import { HeadLoader } from '../../pkg/clef_web.js';
import type { Manifest, ModelCache } from '../cache.js';
import type { ErrorCode, LoadProgress } from '../protocol.js';
import { type ResolvedLoadParams } from '../validate.js';
import { checksumMatches, completeCache, isTrusted, probe, sameFile, startCache } from './cached.js';
import { LoadError, errCode } from './errors.js';
import { type RetryEvents, withRetry } from './fetch.js';
import { ShardPlacement } from './placement.js';
import { Progress, emptyStats } from './progress.js';
import { retryPolicy } from './retry.js';
import type { ByteSource } from './sources.js';
import { transfer } from './transfer.js';

/** Bytes read first: the real head's JSON header is ~20 KB. */
const FIRST_READ = 256 * 1024;
/** The largest joint_head_config.json read (the real one is ~100 bytes). */
const MAX_CONFIG = 1 << 20;

export interface HeadLoadContext {
  source: ByteSource;
  /** joint_head_config.json: its text, or where to read it (small: read whole, with retries). */
  config: string | { source: ByteSource; name: string };
  cache: ModelCache | null;
  cacheKey: string;
  url: string;
  name: string;
  local: boolean;
  params: ResolvedLoadParams;
  signal: AbortSignal;
  onProgress: (p: LoadProgress) => void;
  onWarning: (message: string) => void;
}

export interface HeadLoadOutcome {
  loader: HeadLoader;
  bytes: number;
  sha256: string | null;
  verified: boolean;
  seconds: number;
}

/** A wasm error of the head's (`bad_head`, `out_of_memory`, …) as a LoadError with its code. */
function typed(e: unknown): LoadError {
  if (e instanceof LoadError) return e;
  return new LoadError((errCode(e) as ErrorCode) ?? 'bad_head', (e as Error)?.message ?? String(e));
}

/** The cached header bytes, when they match the manifest's checksum. */
async function cachedPrefix(cache: ModelCache, m: Manifest): Promise<Uint8Array | null> {
  await cache.openPieces();
  const hb = new Uint8Array(m.dataOffset);
  return cache.read(0, hb) === hb.length && checksumMatches(m.headerChecksum, hb) ? hb : null;
}

export async function loadHead(ctx: HeadLoadContext): Promise<HeadLoadOutcome> {
  try {
    return await runHeadLoad(ctx);
  } finally {
    await ctx.cache?.release();
  }
}

async function runHeadLoad(ctx: HeadLoadContext): Promise<HeadLoadOutcome> {
  const t0 = performance.now();
  const { source, signal, cache, params } = ctx;
  const policy = retryPolicy(params);
  source.useTimeouts?.(policy);
  const stats = emptyStats();
  const progress = new Progress(stats, ctx.onProgress);
  const events: RetryEvents = {
    retrying: (info) => {
      stats.retries++;
      progress.setRetry(info);
    },
    waiting: (info) => progress.setRetry(info),
  };
  const request = <T>(f: () => Promise<T>, what: string) => withRetry(f, source, policy, what, signal, events);
  const wanted = params.sha256?.toLowerCase() ?? null;
  let config: string;
  if (typeof ctx.config === 'string') config = ctx.config;
  else {
    const c = ctx.config;
    const opened = await request(() => c.source.open(MAX_CONFIG, signal), `reading ${c.name}`);
    if (opened.size > MAX_CONFIG) throw new LoadError('bad_head', `${c.name}: ${opened.size} bytes is too large for a head config`);
    config = new TextDecoder().decode(opened.prefix.subarray(0, opened.size));
  }

  // ---- header: from an unchanged cache, else from the source ----------------------------------
  let m: Manifest | null = cache?.manifest ?? null;
  let header: Uint8Array | null = null;
  let size = 0;
  let etag: string | null = null;
  let oid: string | null = wanted;
  let offline = false;
  if (cache && m) {
    const p = ctx.local ? { remote: null, offline: false } : await probe(source, m, signal, ctx.onWarning);
    offline = p.offline;
    if (sameFile(p.remote, m)) header = await cachedPrefix(cache, m);
    if (header) {
      size = m.size;
      etag = m.etag ?? p.remote?.etag ?? null;
      oid = wanted ?? m.oid ?? p.remote?.oid ?? null;
    } else if (offline) {
      throw new LoadError('offline', `${ctx.name} is not usable from the cache and the network is unreachable`);
    } else {
      m = null;
    }
  }
  let networkPrefix = false;
  if (!header) {
    progress.emit(true);
    const opened = await request(() => source.open(FIRST_READ, signal), `reading the header of ${ctx.name}`);
    if (!ctx.local) stats.downloadedBytes += opened.prefix.length;
    size = opened.size;
    etag = opened.etag;
    oid = wanted ?? opened.oid;
    let prefixLen: number;
    try {
      prefixLen = HeadLoader.prefixLength(opened.prefix.subarray(0, 8), size);
    } catch (e) {
      throw typed(e);
    }
    header = opened.prefix;
    if (header.length < prefixLen) {
      const rest = await request(() => source.readBytes(header!.length, prefixLen, signal), `reading the header of ${ctx.name}`);
      const full = new Uint8Array(prefixLen);
      full.set(header);
      full.set(rest, header.length);
      header = full;
    }
    networkPrefix = !ctx.local;
  }
  progress.total = size;

  // ---- allocate ------------------------------------------------------------------------------------
  let loader: HeadLoader;
  try {
    loader = new HeadLoader(config, header.subarray(0, HeadLoader.prefixLength(header.subarray(0, 8), size)), size);
  } catch (e) {
    cache?.close();
    throw typed(e);
  }
  const dataOffset = loader.dataOffset();
  if (cache && !m) {
    m = await startCache(cache, {
      key: ctx.cacheKey, url: ctx.url, name: ctx.name, size, etag, oid, header, dataOffset, chunkSize: params.chunkSize,
    });
  } else if (m && oid && !m.oid) {
    m.oid = oid;
  }
  const chunkSize = m?.chunkSize ?? params.chunkSize;

  // ---- data ------------------------------------------------------------------------------------------
  try {
    const l = loader;
    const placement = new ShardPlacement([{ shard: 0, fileOffset: dataOffset, len: loader.dataLength(), dstOffset: 0 }], dataOffset, size, () => l.ptr());
    const trusted = isTrusted(m, dataOffset, size, chunkSize);
    const r = await transfer({
      name: ctx.name, source, local: ctx.local, cache, manifest: m, placement, header, networkPrefix, chunkSize, oid, trusted, offline,
      concurrency: params.concurrency, policy, signal, stats, progress, events, onWarning: ctx.onWarning,
    });
    completeCache(cache, m, r.sha256);
    progress.loaded = size;
    progress.phase = 'ready';
    progress.emit(true);
    return {
      loader, bytes: loader.dataLength(), sha256: r.sha256 ?? (trusted ? m!.oid : null), verified: !!r.sha256 || trusted,
      seconds: (performance.now() - t0) / 1000,
    };
  } catch (e) {
    loader.free();
    throw e;
  }
}
