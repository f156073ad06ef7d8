// The data section's transfer: every chunk from the cache or the network into its destinations,
// verified.
//
//   pass 1   chunks in file order: a cached chunk is read inline (checked against its checksum;
//            a bad one is dropped and fetched instead), the others are fetched `concurrency` at a
//            time (fetch.ts: resumed, retried), at most WINDOW chunks ahead of the hash cursor;
//            each completed chunk is stored in the cache and fed to the sha256 (verify.ts). While
//            a chunk downloads, its bytes go to the cache every PARTIAL_STEP (2 MiB) and a later
//            load resumes there (cached.ts persistPartial / resumePartial; only when the sha256
//            will check the whole file)
//   verify   sha256 = expected: done. Else the whole file is fetched again once (pass 2; the
//            header is compared with a fresh copy first); a second mismatch is an `integrity` error
//
// A cache that was verified before (`trusted`) skips the sha256: chunk checksums suffice. Should a
// re-fetched chunk then differ from the verified copy, the load fails with a retryable
// `integrity` error and worker.ts starts over without the cache.

import type { Manifest, ModelCache } from '../cache.js';
import type { LoadStats } from '../protocol.js';
import { Checksum } from '../../pkg/clef_web.js';
import { cachedChunkGood, persistPartial, readChunk, resumePartial, storeChunk } from './cached.js';
import { LoadError } from './errors.js';
import { type RetryEvents, fetchChunk, withRetry } from './fetch.js';
import { macrotask } from './macrotask.js';
import type { Placement } from './placement.js';
import { type Chunk, planChunks, writeBytes } from './plan.js';
import type { Progress } from './progress.js';
import type { RetryPolicy } from './retry.js';
import type { ByteSource } from './sources.js';
import { FileHasher, equalBytes } from './verify.js';

/** Everything one transfer works with (read-only, except the counters in `stats` / `progress`). */
export interface TransferInput {
  name: string;
  source: ByteSource;
  /** Local file (no network phase). */
  local: boolean;
  cache: ModelCache | null;
  manifest: Manifest | null;
  placement: Placement;
  /** The header bytes; more than dataStart when the first request brought some data. */
  header: Uint8Array;
  /** Whether `header` came from the network (its data bytes are used, pass 1 only). */
  networkPrefix: boolean;
  chunkSize: number;
  /** Expected sha256 (null: unknown, no verification). */
  oid: string | null;
  /** The cache is complete and was verified: chunk checksums suffice. */
  trusted: boolean;
  /** The network is unreachable: only the cache can serve. */
  offline: boolean;
  concurrency: number;
  policy: RetryPolicy;
  signal: AbortSignal;
  stats: LoadStats;
  progress: Progress;
  events: RetryEvents;
  onWarning: (message: string) => void;
}

export interface TransferResult {
  /** The verified sha256 (null when there was nothing to verify against, or `trusted`). */
  sha256: string | null;
  /** Data-section bytes received from the network. */
  downloadedData: number;
  /** From the first network data byte to the end (ms; 0 without network). */
  netMs: number;
  /** Time spent reading cached chunks (ms). */
  cacheMs: number;
  /** Time spent completing chunks: their checksums, and (split) delivering them to the workers (ms). */
  deliverMs: number;
}

/** Mutable state of one transfer (across its passes). */
interface State {
  pass: number;
  offline: boolean;
  downloadedData: number;
  netStart: number;
  netMs: number;
  cacheMs: number;
  deliverMs: number;
  /** Chunk checksums of the previous pass (to count the chunks that differed). */
  previous: Map<number, string> | null;
  /** Checksums a verified cache promised for chunks that had to be re-fetched. */
  expected: Map<number, string>;
}

export async function transfer(t: TransferInput): Promise<TransferResult> {
  const { placement, header, oid } = t;
  const dataStart = placement.dataStart;
  const hashing = !!oid && !t.trusted;
  const s: State = { pass: 1, offline: t.offline, downloadedData: 0, netStart: 0, netMs: 0, cacheMs: 0, deliverMs: 0, previous: null, expected: new Map() };
  for (;;) {
    const chunks = planChunks(placement, t.chunkSize);
    const hasher = new FileHasher(chunks, placement, header.subarray(0, dataStart), hashing);
    let digest: string | null = null;
    try {
      t.progress.loaded = dataStart;
      if (t.networkPrefix && s.pass === 1) usePrefixData(t, chunks);
      await runPass(t, s, chunks, hasher, hashing);
      if (!hashing) break;
      t.progress.setPhase('verify');
      digest = hasher.finish();
    } finally {
      hasher.dispose();
    }
    if (digest === oid) return result(s, digest);
    if (s.pass >= 2 || t.local) {
      throw new LoadError('integrity', `${t.name}: sha256 ${digest} does not match the expected ${oid}` +
        (s.pass >= 2 ? ' after downloading it twice: the file on the server does not match its checksum' : ''));
    }
    // Corrupted somewhere in transit (or a bad cache): fetch everything again, once.
    t.onWarning(`${t.name}: sha256 mismatch (${digest}); downloading the file again to repair it`);
    s.previous = new Map(chunks.map((c) => [c.index, c.checksum ?? '']));
    s.pass++;
    s.offline = false;
    // The header is part of the hash: check it against a fresh copy.
    const fresh = await withRetry(() => t.source.readBytes(0, dataStart, t.signal), t.source, t.policy, `reading the header of ${t.name}`, t.signal, t.events);
    t.stats.downloadedBytes += fresh.length;
    if (!equalBytes(fresh, header.subarray(0, dataStart))) {
      throw new LoadError('integrity', `${t.name}: the file header was corrupted in transit; load the model again`, true);
    }
  }
  return result(s, null);
}

function result(s: State, sha256: string | null): TransferResult {
  return { sha256, downloadedData: s.downloadedData, netMs: s.netMs, cacheMs: s.cacheMs, deliverMs: s.deliverMs };
}

/** Data bytes that came with the header request go straight to their chunks. */
function usePrefixData(t: TransferInput, chunks: Chunk[]): void {
  const { header } = t;
  for (const c of chunks) {
    if (c.start >= header.length) break;
    const n = Math.min(c.end, header.length) - c.start;
    writeBytes(t.placement, c, header.subarray(c.start, c.start + n));
    t.progress.loaded += n;
  }
}

/** One pass over every chunk. */
async function runPass(t: TransferInput, s: State, chunks: Chunk[], hasher: FileHasher, hashing: boolean): Promise<void> {
  const { placement, cache, manifest: m, stats, progress, signal } = t;
  const window = Math.max(16, t.concurrency * 4);

  const complete = (c: Chunk) => {
    c.done = true;
    let digest = c.checksum; // a cached chunk was delivered and checked as it was read
    if (digest === null) {
      const t0 = performance.now();
      digest = placement.complete(c.parts); // a split model: the staged chunk on to its workers
      s.deliverMs += performance.now() - t0;
    }
    if (!c.fromCache && cache && m) storeChunk(cache, placement, c, digest);
    const before = s.previous?.get(c.index);
    if (before !== undefined && before !== digest) stats.refetchedChunks++;
    const promised = s.expected.get(c.index);
    if (t.trusted && promised !== undefined && promised !== digest) {
      // The re-fetched bytes differ from the verified file's: verify the whole file again.
      if (m) {
        m.verified = false;
        cache?.saveManifest();
      }
      throw new LoadError('integrity', `${t.name}: chunk ${c.index} differs from the verified copy`, true);
    }
    c.checksum = digest;
    hasher.advance();
  };

  /** A cached chunk read into place (pass 1 only); false: fetch it. */
  const fromCache = (c: Chunk): boolean => {
    const want = m?.chunks[c.index];
    if (!cache || !m || want === undefined || s.pass > 1) return false;
    const t0 = performance.now();
    const read = readChunk(cache, placement, c);
    const t1 = performance.now();
    const digest = read ? placement.complete(c.parts) : null; // delivered, checksum taken
    s.cacheMs += t1 - t0;
    s.deliverMs += performance.now() - t1;
    if (digest !== null && cachedChunkGood(cache, placement, c, want, digest)) {
      c.fromCache = true;
      c.received = c.end - c.start;
      c.checksum = digest;
      stats.cachedBytes += c.end - c.start;
      return true;
    }
    t.onWarning(`cached chunk ${c.index} of ${t.name} is damaged or missing: fetching it again`);
    stats.refetchedChunks++;
    if (Checksum.isCurrent(want)) s.expected.set(c.index, want); // (an earlier build's kind cannot be compared)
    cache.dropChunk(c.index);
    return false;
  };

  const onBytes = (n: number) => {
    if (!s.netStart) s.netStart = performance.now();
    progress.loaded += n;
    if (!t.local) {
      stats.downloadedBytes += n;
      s.downloadedData += n;
    }
    progress.emit();
  };

  // The scheduler: chunks in file order; cached ones read inline, others fetched `concurrency` at a time.
  const ac = new AbortController();
  const onAbort = () => ac.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  const active = new Map<number, Promise<{ c: Chunk; err?: unknown }>>();
  let next = 0;
  try {
    while (next < chunks.length || active.size) {
      while (next < chunks.length && active.size < t.concurrency && next - hasher.next < window) {
        const c = chunks[next++];
        if (c.received === 0 && fromCache(c)) {
          progress.setPhase(active.size ? 'download' : 'cache');
          progress.loaded += c.end - c.start;
          complete(c);
          progress.emit();
          await macrotask();
          if (signal.aborted) throw signal.reason;
          continue;
        }
        if (s.offline) throw new LoadError('offline', `${t.name} is only partly cached and the network is unreachable`);
        progress.setPhase(t.local ? 'cache' : 'download');
        // Within-chunk progress is kept in the cache only when the file's sha256 will check it.
        const partial = !!cache && !!m && hashing && !t.local && s.pass === 1;
        if (partial && c.received === 0) {
          const n = resumePartial(cache!, placement, c);
          stats.cachedBytes += n;
          progress.loaded += n;
        }
        const job = fetchChunk(c, t.source, placement, t.policy, ac.signal, t.events, (n) => {
          onBytes(n);
          if (partial) persistPartial(cache!, placement, c);
        });
        active.set(c.index, job.then(() => ({ c }), (err) => ({ c, err })));
      }
      if (!active.size) continue;
      const r = await Promise.race(active.values());
      active.delete(r.c.index);
      if (r.err !== undefined) throw r.err;
      complete(r.c);
      progress.emit();
    }
  } catch (e) {
    ac.abort(e);
    await Promise.allSettled(active.values());
    throw e;
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
  if (s.netStart) s.netMs = performance.now() - s.netStart;
}
