// How many shard workers to split a model across (the `workers` load option's default).
//
//   1                 for small models (< SPLIT_MIN_BYTES of weights): the exchanges between
//                     workers (two per layer and token, ~0.1 ms each) would cost more than they save
//   else              one per core (navigator.hardwareConcurrency / os.availableParallelism), at most
//                     MAX_AUTO_WORKERS (the 9B's 16 DeltaNet key heads split in pairs: up to 8 shards
//                     share every layer evenly), and at least as many as the model needs for each
//                     worker's part to fit in one wasm32 memory
//
// A caller's `workers` is used as given (too few to fit is an out_of_memory error naming the
// smallest count that fits).

import { memoryNeeded, type MemoryShape } from './fit.js';

export const SPLIT_MIN_BYTES = 256 * (1 << 20);
export const MAX_AUTO_WORKERS = 8;
/** The most workers the default adds for a model to fit (more is a caller's explicit choice). */
export const MAX_FIT_WORKERS = 16;

export interface WorkerChoice {
  workers: number;
  reason: string;
}

/** Cores of this machine as the platform reports them (1 when unknown). */
export function coreCount(): number {
  const n = (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency;
  return n && n > 0 ? n : 1;
}

/**
 * Picks the worker count. `fits(n)`: whether, split across n workers, every instance's part fits
 * in the memory it may use (at the smallest context the caller accepts).
 */
export function chooseWorkers(opts: {
  requested?: number;
  cores: number;
  weightBytes: number;
  fits: (n: number) => boolean;
  max?: number;
}): WorkerChoice {
  const max = opts.max ?? MAX_FIT_WORKERS;
  if (opts.requested) return { workers: opts.requested, reason: 'requested' };
  if (opts.weightBytes < SPLIT_MIN_BYTES && opts.fits(1)) return { workers: 1, reason: `small model (${(opts.weightBytes / 1e6).toFixed(0)} MB): one worker` };
  let n = Math.max(1, Math.min(opts.cores, MAX_AUTO_WORKERS));
  let reason = `${opts.cores} core${opts.cores === 1 ? '' : 's'}`;
  if (!opts.fits(n)) {
    let m = n + 1;
    while (m <= max && !opts.fits(m)) m++;
    if (m <= max) {
      reason += `; ${m} workers for the weights to fit in wasm32 memories of 4 GiB`;
      n = m;
    }
  }
  return { workers: n, reason };
}

/**
 * The machine's RAM when the platform says it is small (navigator.deviceMemory, GB, rounded down
 * and capped at 8 by Chromium: 8 means "8 or more", so no limit is known then); Infinity otherwise.
 */
export function deviceRam(): number {
  const gb = (globalThis as { navigator?: { deviceMemory?: number } }).navigator?.deviceMemory;
  return gb && gb > 0 && gb < 8 ? gb * 2 ** 30 : Infinity;
}

/** Does every part fit in its memory with a context of nCtx tokens, and all of them in `ram`? */
export function partsFit(parts: MemoryShape[], nCtx: number, available: (i: number) => number, ram = Infinity): boolean {
  const need = parts.map((p) => memoryNeeded(p, nCtx));
  return need.every((b, i) => b <= available(i)) && need.reduce((a, b) => a + b, 0) <= ram;
}
