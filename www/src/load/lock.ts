// One load at a time per cached model, across the tabs and workers of an origin (Web Locks).
//
//   holder   a load takes the lock `clef-cache:<key>` before opening the model's cache and keeps it
//            until the cache is closed; its progress goes out on the BroadcastChannel of that name
//   waiter   a second load of the same model (another tab) finds the lock taken: it waits for it,
//            reporting the holder's progress as phase 'waiting', then opens the cache the holder
//            filled — the file is downloaded once, however many tabs load it. Should the holder stop
//            early (tab closed, aborted, failed), the waiter resumes from what it stored.
//   page     ClefEngine.cache.delete / clear run under the lock only when it is free (`ifUnlocked`):
//            a model being loaded is refused with a typed `cache` error, and a load that starts
//            meanwhile waits for the deletion
//
// The browser releases a lock when its holder's page or worker goes away. Without navigator.locks
// (Node, which does not cache; older browsers) nothing is locked: the cache's exclusive sync access
// handles still keep a second load out of it, which then loads without caching (with a warning).

import type { LoadProgress } from '../protocol.js';

/** What a load holds while it uses a model's cache. */
export interface CacheLock {
  /** Tells loads waiting for this cache how far this one got. */
  announce(p: LoadProgress): void;
  release(): void;
}

const NO_LOCK: CacheLock = { announce: () => {}, release: () => {} };

/** The Web Lock (and BroadcastChannel) name of a cache key. */
export const lockName = (key: string): string => `clef-cache:${key}`;

function lockManager(): LockManager | null {
  return typeof navigator !== 'undefined' && navigator.locks ? navigator.locks : null;
}

/** Requests the lock and keeps it until the returned function is called; null: `ifAvailable` and taken. */
function hold(locks: LockManager, name: string, options: LockOptions): Promise<(() => void) | null> {
  return new Promise((resolve, reject) => {
    locks
      .request(name, options, (lock) => {
        if (!lock) {
          resolve(null);
          return undefined;
        }
        return new Promise<void>((release) => resolve(() => release()));
      })
      .catch(reject);
  });
}

/**
 * Takes the lock of `key`, waiting while another load holds it. While waiting, `onWait` gets the
 * holder's progress (null first, before the holder has said anything). Rejects with the signal's
 * reason when aborted while waiting.
 */
export async function lockCache(key: string, signal: AbortSignal, onWait: (holder: LoadProgress | null) => void): Promise<CacheLock> {
  const locks = lockManager();
  if (!locks) return NO_LOCK;
  const name = lockName(key);
  let release = await hold(locks, name, { ifAvailable: true });
  if (!release) {
    const listen = new BroadcastChannel(name);
    listen.onmessage = (e: MessageEvent) => onWait(e.data as LoadProgress);
    onWait(null);
    try {
      release = await hold(locks, name, { signal });
    } catch (e) {
      throw signal.aborted ? (signal.reason ?? e) : e;
    } finally {
      listen.close();
    }
  }
  const channel = new BroadcastChannel(name);
  const done = release!;
  return {
    announce: (p) => channel.postMessage(p),
    release: () => {
      channel.close();
      done();
    },
  };
}

/**
 * Runs `f` holding the lock of `key`, if nobody holds it; null (without running `f`) when a load
 * is using that cache. Without Web Locks `f` just runs.
 */
export async function ifUnlocked<T>(key: string, f: () => Promise<T>): Promise<{ value: T } | null> {
  const locks = lockManager();
  if (!locks) return { value: await f() };
  let out: { value: T } | null = null;
  await locks.request(lockName(key), { ifAvailable: true }, async (lock) => {
    if (lock) out = { value: await f() };
  });
  return out;
}
