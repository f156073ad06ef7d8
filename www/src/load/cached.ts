// The loader's side of the OPFS cache (cache.ts stores; this decides what to trust).
//
//   probe        is the cached file still the file at this URL? One small request with a short
//                timeout; no answer = offline (the cached copy is what we have)
//   header       the cached header bytes, checked against the manifest's checksum, parsed
//   start        a fresh cache for this file (after a storage check), header stored first;
//                too little storage: no caching (the load goes on)
//   read chunk   a chunk read straight into its destinations, checked against its checksum
//                (src/checksum.rs; a checksum of an earlier build's kind is checked with that
//                kind and replaced with the current one)
//   store chunk  a downloaded chunk's bytes written, flushed, then recorded in the manifest
//   trusted      a verified manifest with every chunk: chunk checksums suffice, no sha256
//   complete     the manifest after a successful load (complete, verified if the sha256 matched)

import { Checksum } from '../../pkg/clef_web.js';
import { CacheError, type Manifest, ModelCache, PARTIAL_STEP, quotaError, storageFree } from '../cache.js';
import { LoadError } from './errors.js';
import { type HeaderInfo, parse } from './header.js';
import { type Placement, hashParts } from './placement.js';
import { type Chunk, chunkIndexes } from './plan.js';
import type { ByteSource, OpenedSource } from './sources.js';

/** How long the freshness probe waits before treating the network as unreachable. */
export const PROBE_TIMEOUT_MS = 8000;
/** Bytes the probe reads (it only needs the size and identity headers). */
const PROBE_BYTES = 64 * 1024;
/** Storage wanted beyond the file's size before caching it. */
const STORAGE_SLACK = 1.02;

export type ProbeResult = { remote: OpenedSource | null; offline: boolean };

/** Asks the source for the file's current identity. Offline (or gone): `offline`, no error. */
export async function probe(source: ByteSource, m: Manifest, signal: AbortSignal, onWarning: (m: string) => void): Promise<ProbeResult> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new Error('timeout')), PROBE_TIMEOUT_MS);
  const onAbort = () => ac.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    return { remote: await source.open(Math.min(PROBE_BYTES, m.size), ac.signal), offline: false };
  } catch (e) {
    if (signal.aborted) throw signal.reason ?? e;
    // Offline, or the file is gone / private now: the cached copy is what we have.
    if (e instanceof LoadError && e.code === 'not_found') onWarning(`${e.message}: using the cached copy`);
    return { remote: null, offline: true };
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', onAbort);
  }
}

/** Whether the remote file (when known) is the one the manifest describes. */
export function sameFile(remote: OpenedSource | null, m: Manifest): boolean {
  if (!remote) return true;
  return remote.size === m.size && (!remote.etag || !m.etag || remote.etag === m.etag) && (!remote.oid || !m.oid || remote.oid === m.oid);
}

/** The checksum (src/checksum.rs, the current kind) of `bytes`. */
export function checksumOf(bytes: Uint8Array): string {
  const c = new Checksum();
  try {
    c.update(bytes);
    return c.digest();
  } finally {
    c.free();
  }
}

/** Whether `bytes` (held in JS) match a recorded checksum, of whichever kind it names. */
export function checksumMatches(want: string, bytes: Uint8Array): boolean {
  const c = Checksum.like(want);
  if (!c) return false;
  try {
    c.update(bytes);
    return c.digest() === want;
  } finally {
    c.free();
  }
}

/** The cached header, if its bytes match the manifest and parse. */
export async function cachedHeader(cache: ModelCache, m: Manifest, name: string): Promise<{ prefix: Uint8Array; info: HeaderInfo } | null> {
  await cache.openPieces();
  const hb = new Uint8Array(m.dataOffset);
  if (cache.read(0, hb) !== hb.length || !checksumMatches(m.headerChecksum, hb)) return null;
  try {
    const r = parse(hb, m.size, name);
    return 'info' in r ? { prefix: hb, info: r.info } : null;
  } catch {
    return null;
  }
}

/**
 * Starts a fresh cache for this file, with its header stored. Too little storage for the whole
 * file (or a storage failure) stops the caching instead (`ModelCache.stopWriting`): null, and the
 * load goes on without it.
 */
export async function startCache(
  cache: ModelCache,
  f: { key: string; url: string; name: string; size: number; etag: string | null; oid: string | null; header: Uint8Array; dataOffset: number; chunkSize: number },
): Promise<Manifest | null> {
  const free = await storageFree();
  if (free < f.size * STORAGE_SLACK) {
    cache.stopWriting(quotaError(f.size - free));
    return null;
  }
  const header = f.header.subarray(0, f.dataOffset);
  try {
    await cache.begin({
      key: f.key, url: f.url, name: f.name, size: f.size, etag: f.etag, oid: f.oid,
      dataOffset: f.dataOffset, headerChecksum: checksumOf(header), chunkSize: f.chunkSize,
    });
  } catch (e) {
    cache.stopWriting(new CacheError('cache', `could not create the cache: ${(e as Error).message}`));
    return null;
  }
  cache.write(0, header);
  cache.saveManifest();
  return cache.manifest!;
}

/** Reads chunk `c`'s bytes from the cache into its parts; false when the cache is short. */
export function readChunk(cache: ModelCache, placement: Placement, c: Chunk): boolean {
  return readRange(cache, placement, c, 0, c.end - c.start);
}

/**
 * Whether a cached chunk read into place, whose current checksum is `digest`, is the chunk the
 * manifest recorded as `want`. A `want` of an earlier build's kind is checked with that kind, and
 * the manifest entry replaced with the current checksum (saved with the manifest after the load).
 */
export function cachedChunkGood(cache: ModelCache, placement: Placement, c: Chunk, want: string, digest: string): boolean {
  if (digest === want) return true;
  const legacy = Checksum.isCurrent(want) ? undefined : Checksum.like(want);
  if (!legacy) return false;
  try {
    hashParts(placement, c.parts, legacy);
    if (legacy.digest() !== want) return false;
  } finally {
    legacy.free();
  }
  cache.manifest!.chunks[c.index] = digest;
  return true;
}

/** Stores a complete chunk (from the network; what `persistPartial` did not) and records it with its checksum. */
export function storeChunk(cache: ModelCache, placement: Placement, c: Chunk, digest: string): void {
  writeRange(cache, placement, c, c.persisted, c.end - c.start);
  cache.commitChunk(c.index, digest);
}

/**
 * A download in progress: writes chunk `c`'s bytes received since the last call, in whole
 * PARTIAL_STEPs, and records how far the chunk is in the cache.
 */
export function persistPartial(cache: ModelCache, placement: Placement, c: Chunk): void {
  const upto = Math.floor(c.received / PARTIAL_STEP) * PARTIAL_STEP;
  if (upto <= c.persisted || upto >= c.end - c.start || !cache.writing) return;
  writeRange(cache, placement, c, c.persisted, upto);
  c.persisted = upto;
  cache.commitPartial(c.index, upto);
}

/**
 * A chunk's first bytes from an interrupted download (Manifest.partial), read back into its parts;
 * sets `received` / `persisted`. Returns the bytes read (0: none recorded).
 */
export function resumePartial(cache: ModelCache, placement: Placement, c: Chunk): number {
  const n = Math.min(cache.manifest?.partial?.[c.index] ?? 0, c.end - c.start);
  if (n <= 0 || !readRange(cache, placement, c, 0, n)) return 0;
  c.received = c.persisted = n;
  return n;
}

/** Reads chunk bytes [from, to) (offsets from the chunk's start) from the cache into their parts; false when short. */
function readRange(cache: ModelCache, placement: Placement, c: Chunk, from: number, to: number): boolean {
  for (const p of c.parts) {
    const a = Math.max(p.start, c.start + from);
    const b = Math.min(p.end, c.start + to);
    if (a < b && cache.read(a, placement.view(p).subarray(a - p.start, b - p.start)) !== b - a) return false;
  }
  return true;
}

/** Writes chunk bytes [from, to) (offsets from the chunk's start) from their parts to the cache. */
function writeRange(cache: ModelCache, placement: Placement, c: Chunk, from: number, to: number): void {
  for (const p of c.parts) {
    const a = Math.max(p.start, c.start + from);
    const b = Math.min(p.end, c.start + to);
    if (a < b) cache.write(a, placement.view(p).subarray(a - p.start, b - p.start));
  }
}

/** A verified cache that holds every chunk of [dataStart, size): its chunk checksums suffice (no sha256). */
export function isTrusted(m: Manifest | null, dataStart: number, size: number, chunkSize: number): boolean {
  return !!m && m.verified && chunkIndexes(dataStart, size, chunkSize).every((k) => m.chunks[k] !== undefined);
}

/** Records a successful load in the manifest: complete, verified when the sha256 matched, last used now. */
export function completeCache(cache: ModelCache | null, m: Manifest | null, sha256: string | null): void {
  if (!cache || !m || !cache.writing) return;
  m.complete = true;
  if (sha256) m.verified = true;
  m.lastUsed = Date.now();
  cache.saveManifest();
}
