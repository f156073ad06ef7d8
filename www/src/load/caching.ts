// Whether and how one load uses the OPFS cache (the worker's side; cache.ts stores, cached.ts
// decides what to trust).
//
//   off          not asked for, or no cache key (a path)                       → no cache, status 'off'
//   unavailable  no OPFS, or the browser refuses it (private windows: getDirectory throws)
//                                                                            → no cache, a warning
//   lock         wait while another tab loads the same model (load/lock.ts), then open its cache
//   open fails   (in use without Web Locks, storage refused)                    → no cache, a warning
//   stops        a write fails mid-load (storage full …): ModelCache.stopWriting → a warning, the load
//                goes on; the manifest keeps the chunks stored before
//
// The model always loads; the status (ModelInfo.cache) and the warnings say whether it was stored.

import { type CacheError, ModelCache, opfsRoot } from '../cache.js';
import type { CacheStatus, LoadProgress } from '../protocol.js';
import { type CacheLock, lockCache } from './lock.js';

export interface Caching {
  /** The open cache (null: this load does not cache). */
  cache: ModelCache | null;
  /** Tells loads of the same model in other tabs how far this one got. */
  announce(p: LoadProgress): void;
  /** The cache's state after a successful load. */
  status(): CacheStatus;
  /** Closes the cache and releases the lock (idempotent). */
  close(): void;
}

/** What a load reports while it opens its cache. */
export interface CachingEvents {
  warn(message: string): void;
  /** Another load holds this model's cache: its progress (null: not known yet). */
  waiting(holder: LoadProgress | null): void;
}

function without(status: CacheStatus): Caching {
  return { cache: null, announce: () => {}, status: () => status, close: () => {} };
}

/** The message of a cache that stopped writing. */
export function stoppedMessage(name: string, e: CacheError): string {
  return `could not cache ${name}: ${e.message}. The model loads all the same; what was stored before stays usable`;
}

/**
 * Opens the cache of `key` for one load (waiting for another tab's load of it first). Never throws
 * for storage reasons; rejects only when `signal` aborts the wait.
 */
export async function openCaching(key: string, name: string, wanted: boolean, signal: AbortSignal, on: CachingEvents): Promise<Caching> {
  if (!wanted || !key) return without('off');
  if (!(await opfsRoot())) {
    on.warn(`not caching ${name}: this browser gives no storage for it here (Origin Private File System unavailable, e.g. in a private window); it will be downloaded again next time`);
    return without('unavailable');
  }
  const lock: CacheLock = await lockCache(key, signal, on.waiting);
  let cache: ModelCache | null;
  try {
    cache = await ModelCache.open(key);
  } catch (e) {
    lock.release();
    on.warn(`not caching ${name}: ${(e as Error).message}`);
    return without('failed');
  }
  if (!cache) {
    lock.release();
    on.warn(`not caching ${name}: this browser cannot write the cache from a worker (no synchronous file access)`);
    return without('unavailable');
  }
  const c = cache;
  c.onStop = (e) => on.warn(stoppedMessage(name, e));
  let closed = false;
  return {
    cache: c,
    announce: (p) => lock.announce(p),
    status: () => (c.failure ? (c.failure.code === 'quota' ? 'quota' : 'failed') : c.manifest?.complete ? 'stored' : 'failed'),
    close: () => {
      if (closed) return;
      closed = true;
      c.close();
      lock.release();
    },
  };
}
