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
  const quant = s.quant ?? FILE_TYPES[s.fileType];
  const need = memoryNeeded(m, nCtx);
  const budget = available - (need - m.weightBytes);
  const smaller = suggestQuant(quant, m.weightBytes, budget);
  const ctxOnly = s.contextRequested && memoryNeeded(m, MIN_AUTO_CONTEXT) <= available;
  let msg =
    `${s.name} does not fit in this tab: it needs about ${fmtGB(need)} of memory ` +
    `(${fmtGB(m.weightBytes)} of weights + ${fmtGB(need - m.weightBytes)} for state and a ${nCtx}-token context), ` +
    `but WebAssembly memory here is limited to ${fmtGB(limit)} (${fmtGB(Math.max(0, available))} free)${why ? ` — ${why}` : ''}. `;
  msg += ctxOnly ? 'Use a smaller contextLength, or a smaller quant' : 'Use a smaller quant';
  if (smaller) msg += `, e.g. ${s.repo ? `'${s.repo}:${smaller}'` : smaller}`;
  return new LoadError('out_of_memory', msg + '.');
}
