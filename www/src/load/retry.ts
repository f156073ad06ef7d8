// The one retry policy of every request the loader makes (header reads, data ranges, the
// sha256 lookup and the freshness probe use it through fetch.ts).
//
//   attempt fails ──► retryable? ── no ──► the error as is (404, a bad file, …)
//                         │ yes
//                         ▼
//   failures += 1 (reset to 0 whenever a byte of progress arrived since the last failure)
//   give up when failures > maxRetries, or when the time since the first failure without
//   progress (+ the wait) would exceed retryBudgetMs
//   wait = max(backoff, Retry-After)   backoff = min(retryDelayMs · 2^(failures−1), 8 s) · [0.75, 1.25)
//                                      Retry-After (seconds or an HTTP-date) capped at maxRetryAfterMs
//
// `Retrier` is that state for one operation (one chunk, one header read); it computes the wait and
// the final error, fetch.ts sleeps (reporting "retrying in N s" through the progress events).

import type { ResolvedLoadParams } from '../validate.js';
import { HttpError, LoadError } from './errors.js';

/** The longest exponential backoff step. */
export const MAX_BACKOFF_MS = 8000;

export interface RetryPolicy {
  maxRetries: number;
  /** First backoff delay (doubles with each failure in a row). */
  baseDelayMs: number;
  /** Time an operation may spend failing without progress. */
  budgetMs: number;
  /** Cap on the server's Retry-After. */
  maxRetryAfterMs: number;
  /** Response headers must arrive within this. */
  headerTimeoutMs: number;
  /** A body that sends nothing for this long is aborted (and resumed). */
  idleTimeoutMs: number;
  /** Jitter source in [0, 1). */
  random: () => number;
}

export function retryPolicy(p: ResolvedLoadParams, random: () => number = Math.random): RetryPolicy {
  return {
    maxRetries: p.maxRetries,
    baseDelayMs: p.retryDelayMs,
    budgetMs: p.retryBudgetMs,
    maxRetryAfterMs: p.maxRetryAfterMs,
    headerTimeoutMs: p.timeoutMs,
    idleTimeoutMs: p.idleTimeoutMs,
    random,
  };
}

/**
 * A Retry-After header → ms from `now` (null when absent or unreadable). Both forms of RFC 9110:
 * delay-seconds ("120") and an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT"); a date in the past is 0.
 */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | null {
  if (value === null || value === undefined) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  if (!/[a-z]/i.test(v)) return null;
  const t = Date.parse(v);
  return Number.isFinite(t) ? Math.max(0, t - now) : null;
}

/** HTTP statuses worth another try: timeouts, rate limits, server errors. */
export function retryableStatus(status: number): boolean {
  return status === 0 || status === 408 || status === 425 || status === 429 || status >= 500;
}

/** Exponential backoff with ±25 % jitter after `failures` (≥ 1) failures in a row. */
export function backoffMs(failures: number, p: RetryPolicy): number {
  const base = Math.min(p.baseDelayMs * 2 ** Math.max(0, failures - 1), MAX_BACKOFF_MS);
  return base * (0.75 + p.random() * 0.5);
}

/** The wait before the next attempt: the backoff, or the server's Retry-After (capped) if longer. */
export function retryDelayMs(e: unknown, failures: number, p: RetryPolicy): number {
  const backoff = backoffMs(failures, p);
  const after = e instanceof HttpError && e.retryAfterMs !== null ? Math.min(e.retryAfterMs, p.maxRetryAfterMs) : 0;
  return Math.max(backoff, after);
}

function message(e: unknown): string {
  return (e as Error)?.message ?? String(e);
}

/** Retry state of one operation. */
export class Retrier {
  /** Failures since the last progress. */
  failures = 0;
  /** Every failure of this operation (for LoadStats.retries). */
  total = 0;
  private since = 0;

  constructor(
    private policy: RetryPolicy,
    private retryable: (e: unknown) => boolean,
    /** What is being fetched, for the final message ("the header of x.gguf", "bytes 0-99 of …"). */
    private what: string,
    private now: () => number = () => performance.now(),
  ) {}

  /** Bytes arrived: the failure count and the budget start over. */
  progress(): void {
    this.failures = 0;
  }

  /** After a failed attempt: the ms to wait before the next, or throws the error to give up with. */
  next(e: unknown): number {
    if (!this.retryable(e)) {
      if (e instanceof LoadError) throw e;
      if (e instanceof HttpError) throw new LoadError('network', message(e));
      throw e;
    }
    const t = this.now();
    if (this.failures === 0) this.since = t;
    this.failures++;
    this.total++;
    const p = this.policy;
    const wait = retryDelayMs(e, this.failures, p);
    const spent = t - this.since;
    if (this.failures > p.maxRetries || spent + wait > p.budgetMs) {
      const why = this.failures > p.maxRetries ? `${p.maxRetries} retries` : `${Math.round(spent / 1000)} s of retries (the retry budget is ${Math.round(p.budgetMs / 1000)} s)`;
      throw new LoadError('network', `${this.what} failed after ${why}: ${message(e)}`);
    }
    return wait;
  }
}
