// Fetching with the retry policy (retry.ts): one-shot requests (`withRetry`) and chunk transfers
// that resume from the last byte received (`fetchChunk`). Both wait between attempts with
// `waitForRetry`, which reports "retrying in N s" once a second through `RetryEvents`.

import type { LoadRetry } from '../protocol.js';
import { LoadError } from './errors.js';
import type { Placement } from './placement.js';
import { type Chunk, writeBytes } from './plan.js';
import { Retrier, type RetryPolicy } from './retry.js';
import type { ByteSource } from './sources.js';

export interface RetryEvents {
  /** A failed attempt will be retried after `info.inSeconds` (called once per failure). */
  retrying(info: LoadRetry): void;
  /** The wait goes on (`info`: seconds left), or ended (null). */
  waiting(info: LoadRetry | null): void;
}

/** Sleeps `ms`, calling `tick(msLeft)` every second; rejects when `signal` aborts. */
export function waitForRetry(ms: number, signal: AbortSignal, tick: (msLeft: number) => void = () => {}): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const end = performance.now() + ms;
    let timer: ReturnType<typeof setTimeout>;
    const step = () => {
      const left = end - performance.now();
      // Timers run on a millisecond clock and can fire up to 1 ms before performance.now() says
      // (a 30 ms wait then "ticked" with 0.1 ms left): under 1 ms left is done.
      if (left < 1) {
        signal.removeEventListener('abort', onAbort);
        return resolve();
      }
      tick(left);
      timer = setTimeout(step, Math.min(left, 1000));
    };
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    timer = setTimeout(step, Math.min(ms, 1000));
  });
}

function reasonOf(e: unknown): string {
  return (e as Error)?.message ?? String(e);
}

/** After a failure: gives up (throws), or waits out the retry delay while reporting it. */
async function backOff(r: Retrier, e: unknown, signal: AbortSignal, events: RetryEvents): Promise<void> {
  if (signal.aborted) throw signal.reason ?? e;
  const ms = r.next(e);
  const info = (left: number): LoadRetry => ({ inSeconds: Math.ceil(left / 1000), attempt: r.failures, reason: reasonOf(e) });
  events.retrying(info(ms));
  try {
    await waitForRetry(ms, signal, (left) => events.waiting(info(left)));
  } finally {
    events.waiting(null);
  }
}

/** Runs `f` until it succeeds, the policy gives up, or `signal` aborts. */
export async function withRetry<T>(
  f: () => Promise<T>,
  source: ByteSource,
  policy: RetryPolicy,
  what: string,
  signal: AbortSignal,
  events: RetryEvents,
): Promise<T> {
  const r = new Retrier(policy, (e) => source.retryable(e), what);
  for (;;) {
    try {
      return await f();
    } catch (e) {
      await backOff(r, e, signal, events);
    }
  }
}

/**
 * Brings chunk `c`'s missing bytes (from c.start + c.received) into their destinations. A broken,
 * stalled or short transfer is resumed from the last byte received; failures without progress
 * count against the policy. `onBytes(n)` is told of every piece written.
 */
export async function fetchChunk(
  c: Chunk,
  source: ByteSource,
  placement: Placement,
  policy: RetryPolicy,
  signal: AbortSignal,
  events: RetryEvents,
  onBytes: (n: number) => void,
): Promise<void> {
  if (source.readInto) {
    // Synchronous files: straight into the destinations, no retries.
    for (const p of c.parts) {
      const v = placement.view(p);
      const off = c.start + c.received;
      if (p.end <= off) continue;
      const skip = Math.max(0, off - p.start);
      const n = source.readInto(p.start + skip, v.subarray(skip));
      if (n !== v.length - skip) throw new LoadError('bad_gguf', `${source.description}: unexpected end of file`);
      c.received += n;
      onBytes(n);
    }
    return;
  }
  const r = new Retrier(policy, (e) => source.retryable(e), `downloading bytes ${c.start}-${c.end - 1} of ${source.description}`);
  while (c.received < c.end - c.start) {
    const before = c.received;
    try {
      await source.stream(c.start + c.received, c.end, (bytes) => {
        writeBytes(placement, c, bytes);
        onBytes(bytes.length);
      }, signal);
    } catch (e) {
      if (c.received > before) r.progress();
      await backOff(r, e, signal, events);
    }
  }
}
