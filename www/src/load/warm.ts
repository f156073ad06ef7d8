// Warming the engine's code before the first request (src/warm.rs explains why and what).
//
// A load builds a miniature of the model — the same architecture, tensor types and stored forms,
// split as the load splits it — before it allocates the model (a split load while its shard
// workers start). Once the model is ready, the engine worker runs the miniature through a short
// prompt, single tokens and a longer prompt while no request is queued (worker.ts), a pass at a
// time, so that the browser compiles the code those passes run with its optimizing compiler
// before the first request rather than during it. Every instance of the module (this worker's and
// each shard worker's) shares that code. A request that comes first stops the warm-up: it runs
// no later than one pass of the miniature (a few milliseconds, ~0.1 s for the longest).

import { WarmUp } from '../../pkg/clef_web.js';

/** Models with fewer bytes of weights than this are not warmed: their own first pass is short. */
export const WARM_MIN_BYTES = 256 << 20;

/**
 * The memory the miniature may take beside the model in the engine worker's instance, at most
 * (an F32 file's, split: a 46 MB miniature, twice that while it is built): a load whose fit leaves
 * less room there is not warmed.
 */
export const WARM_ROOM = 128 << 20;

/**
 * The miniature of the model whose header is `header` (`workers`, `expand`, `band` as the load's
 * `forRole`), built, or null: a small model, too little `room` (bytes the fit leaves free in this
 * instance), or the build failed (`onWarning` is told — a failure costs only the warm start).
 */
export function buildWarmUp(
  header: Uint8Array, size: number, weightBytes: number, room: number,
  workers: number, expand: boolean, band: number, onWarning: (message: string) => void,
): WarmUp | null {
  if (weightBytes < WARM_MIN_BYTES || room < WARM_ROOM) return null;
  try {
    return new WarmUp(header, size, workers, expand, band);
  } catch (e) {
    onWarning(`could not warm the engine's code (the first request will be slower): ${(e as Error).message}`);
    return null;
  }
}
