// The fit check: will this model, with a context of n tokens, fit in the tab's WebAssembly memory?
//
//   need(n) = weights + STATE_COPIES × recurrent state + KV bytes per token × n
//             + tokenizer, logits and scratch (grow with the vocabulary: 320 B per token) + 8 MiB
//
// One formula, used by the loader (with the header's figures, before any weight byte is
// downloaded) and by the chat page's "will it fit here" (app/models.ts, with Clef-Flash's
// hyper-parameters, before the header is read). No wasm here: the page bundles this file.

import { FILE_TYPES, suggestQuant } from '../resolve.js';
import { LoadError } from './errors.js';

const MiB = 1 << 20;
const GiB = 1 << 30;

/** wasm32 addresses 4 GiB: the most one engine (one tab's worker) can use. */
export const WASM_MAX_MEMORY = 4 * GiB;
/** Conversation snapshots the engine keeps (src/engine.rs MAX_SNAPSHOTS; tests/js/load.test.mjs checks they agree). */
export const ENGINE_SNAPSHOTS = 4;
/** Copies of the recurrent state in memory: the snapshots, the live state and one being saved. */
export const STATE_COPIES = ENGINE_SNAPSHOTS + 2;
/**
 * Default context: min(the model's, this), halved (down to MIN_AUTO_CONTEXT) until it fits. 32k:
 * split across workers, the KV cache is split too (IQ2_M over 2 workers: ~2.9 GB per worker at 32k);
 * in one worker a 9B file gets what is left of 4 GiB (IQ2_M: 4k).
 */
export const DEFAULT_MAX_CONTEXT = 32768;
export const MIN_AUTO_CONTEXT = 512;
/** Tokenizer (vocab + merges), logits and scratch per vocabulary entry. */
const BYTES_PER_VOCAB_ENTRY = 320;
/** Everything else the engine allocates (buffers, the template, allocator slack). */
const FIXED_BYTES = 8 * MiB;

/** What the memory formula needs to know of a model (parseHeader gives all four). */
export interface MemoryShape {
  weightBytes: number;
  /** One copy of the recurrent (DeltaNet) state. */
  stateBytes: number;
  kvBytesPerToken: number;
  nVocab: number;
}

/** Total wasm memory the model needs with a context of n tokens. */
export function memoryNeeded(m: MemoryShape, n: number): number {
  return m.weightBytes + STATE_COPIES * m.stateBytes + m.kvBytesPerToken * n + FIXED_BYTES + m.nVocab * BYTES_PER_VOCAB_ENTRY;
}

/**
 * The context to allocate: the caller's (clipped to the trained length), else min(trained,
 * DEFAULT_MAX_CONTEXT) halved until it fits in `available` (not below MIN_AUTO_CONTEXT: the
 * caller checks the result against `available`).
 */
export function pickContext(m: MemoryShape, trainedContext: number, requested: number | undefined, available: number): number {
  const trained = Math.max(1, trainedContext || 4096);
  if (requested) return Math.max(16, Math.min(requested, trained));
  let n = Math.min(trained, DEFAULT_MAX_CONTEXT);
  while (n > MIN_AUTO_CONTEXT && memoryNeeded(m, n) > available) n = Math.floor(n / 2);
  return n;
}

function fmtGB(n: number): string {
  return n >= GiB / 2 ? `${(n / 1e9).toFixed(2)} GB` : `${(n / 1e6).toFixed(0)} MB`;
}

export interface FitSubject {
  /** The model as the caller named it. */
  name: string;
  /** Its quant (from the name, else the header's file type). */
  quant?: string;
  fileType: number;
  /** Repository for "e.g. 'owner/repo:QUANT'". */
  repo?: string;
  /** Whether the caller chose the context length (then a smaller one is suggested too). */
  contextRequested: boolean;
}

/** The `out_of_memory` error: what is needed, what is available, and a smaller quant that would fit. */
export function outOfMemory(s: FitSubject, m: MemoryShape, nCtx: number, available: number, limit: number, why = ''): LoadError {
  const msg =
    `${s.name} does not fit in this tab: it needs about ${needs(m, nCtx)}, ` +
    `but WebAssembly memory here is limited to ${fmtGB(limit)} (${fmtGB(Math.max(0, available))} free)${why ? ` — ${why}` : ''}. `;
  return new LoadError('out_of_memory', msg + advice(s, m, nCtx, available));
}

/**
 * The `out_of_memory` error of an allocation the browser refused although the fit check passed
 * (the device is short of memory, or the browser caps WebAssembly lower). What is available is
 * measured: the larger of this instance's memory (`given`) and the largest fresh memory the
 * browser gives now (`probeWasmMemory`); the suggested quant fits in that.
 */
export function allocationRefused(s: FitSubject, m: MemoryShape, nCtx: number, given: number, what: string): LoadError {
  const available = Math.max(given, probeWasmMemory());
  const msg =
    `${s.name} does not fit in this tab: the browser refused memory for ${what} (about ${fmtGB(available)} of WebAssembly memory ` +
    `is available: the device is short of memory, or this browser allows less); it needs about ${needs(m, nCtx)}. Close other tabs, or `;
  return new LoadError('out_of_memory', msg + advice(s, m, nCtx, available).replace(/^U/, 'u'));
}

/**
 * The largest WebAssembly memory the browser creates right now (bytes): a binary search over
 * throwaway memories (their pages are never touched, so nothing is committed; they are garbage).
 */
export function probeWasmMemory(): number {
  const PAGE = 64 * 1024;
  let lo = 0;
  let hi = WASM_MAX_MEMORY / PAGE;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    try {
      new WebAssembly.Memory({ initial: mid, maximum: mid });
      lo = mid;
    } catch {
      hi = mid - 1;
    }
  }
  return lo * PAGE;
}

function needs(m: MemoryShape, nCtx: number): string {
  const need = memoryNeeded(m, nCtx);
  return `${fmtGB(need)} of memory (${fmtGB(m.weightBytes)} of weights + ${fmtGB(need - m.weightBytes)} for state and a ${nCtx}-token context)`;
}

/** "Use a smaller quant, e.g. 'owner/repo:Q4_K_M'." (and a smaller context where that alone would do). */
function advice(s: FitSubject, m: MemoryShape, nCtx: number, available: number): string {
  const quant = s.quant ?? FILE_TYPES[s.fileType];
  const budget = available - (memoryNeeded(m, nCtx) - m.weightBytes);
  const smaller = suggestQuant(quant, m.weightBytes, budget);
  const ctxOnly = s.contextRequested && memoryNeeded(m, MIN_AUTO_CONTEXT) <= available;
  let msg = ctxOnly ? 'Use a smaller contextLength, or a smaller quant' : 'Use a smaller quant';
  if (smaller) msg += `, e.g. ${s.repo ? `'${s.repo}:${smaller}'` : smaller}`;
  return msg + '.';
}
