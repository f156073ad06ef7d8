// The models the chat page offers (every clef-flash quant of the model card of
// NANI-Nithin/clef-flash-GGUF), what each needs — memory, workers, context — and whether it fits on
// this device.

import { fmtBytes } from './format.js';
import { MIN_AUTO_CONTEXT, WASM_MAX_MEMORY, memoryNeeded, pickContext, type MemoryShape } from '../load/fit.js';
import { chooseWorkers, partsFit } from '../load/workers.js';

export const DEFAULT_REPO = 'NANI-Nithin/clef-flash-GGUF';
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

export interface QuantInfo {
  quant: string;
  /** File size in bytes (the card's sizes are GiB; replaced by the Hub's when it answers). */
  bytes: number;
  note: string;
  recommended?: boolean;
}

/** Every file of the model card, best quality first (sizes and notes from the card). */
export const QUANTS: QuantInfo[] = [
  { quant: 'BF16', bytes: 16.69 * GiB, note: 'Full precision source. Every quant below is cut from this file.' },
  { quant: 'Q8_0', bytes: 8.87 * GiB, note: 'Effectively lossless. Use when disk and RAM are not the constraint.' },
  { quant: 'Q6_K', bytes: 6.85 * GiB, note: 'Near-lossless; the last stop before quality becomes measurable.' },
  { quant: 'Q5_1', bytes: 6.33 * GiB, note: 'Legacy. Prefer Q5_K_M.' },
  { quant: 'Q5_K_M', bytes: 6.02 * GiB, note: 'Very good quality, noticeably smaller than Q6_K.' },
  { quant: 'Q5_K_S', bytes: 5.87 * GiB, note: 'Slightly smaller than Q5_K_M for a slight quality cost.' },
  { quant: 'Q5_0', bytes: 5.87 * GiB, note: 'Legacy. Prefer Q5_K_M.' },
  { quant: 'Q4_1', bytes: 5.41 * GiB, note: 'Legacy. Prefer Q4_K_M.' },
  { quant: 'Q4_K_M', bytes: 5.24 * GiB, note: 'The usual default. Best quality-per-byte for most people.' },
  { quant: 'IQ4_NL', bytes: 5.05 * GiB, note: 'Non-linear 4-bit; good on hardware without fast K-quant kernels.' },
  { quant: 'Q4_K_S', bytes: 4.98 * GiB, note: 'A little smaller than Q4_K_M, a little worse.' },
  { quant: 'Q4_0', bytes: 4.95 * GiB, note: 'Legacy round-to-nearest. Prefer Q4_K_M unless a runtime needs this.' },
  { quant: 'IQ4_XS', bytes: 4.84 * GiB, note: 'Best sub-4.5bpw option; usually beats Q4_K_S at a smaller size.' },
  { quant: 'Q3_K_L', bytes: 4.59 * GiB, note: 'Small, with real quality loss. Usable when RAM is tight.' },
  { quant: 'Q3_K_M', bytes: 4.31 * GiB, note: 'Smaller again; noticeable degradation.' },
  { quant: 'IQ3_M', bytes: 4.11 * GiB, note: 'Strong at ~3.7bpw, clearly better than Q3_K_M.' },
  { quant: 'IQ3_S', bytes: 4.07 * GiB, note: 'Slightly smaller than IQ3_M.' },
  { quant: 'Q3_K_S', bytes: 3.97 * GiB, note: 'Aggressive. Prefer IQ3_M at a similar size.' },
  { quant: 'IQ3_XS', bytes: 3.95 * GiB, note: 'Aggressive but coherent.' },
  { quant: 'IQ3_XXS', bytes: 3.67 * GiB, note: 'Very aggressive; the last coherent step down.' },
  { quant: 'IQ2_M', bytes: 3.36 * GiB, note: 'The smallest size most people find usable.', recommended: true },
  { quant: 'Q2_K', bytes: 3.56 * GiB, note: 'Very small, heavily degraded. For experimentation.' },
  { quant: 'Q2_K_S', bytes: 3.44 * GiB, note: 'Smaller than Q2_K, at a further quality cost.' },
  { quant: 'IQ2_S', bytes: 3.19 * GiB, note: 'Below the usual usability line.' },
  { quant: 'Q2_0', bytes: 3.14 * GiB, note: 'Extreme, group-64. Included for completeness.' },
  { quant: 'IQ2_XS', bytes: 3.06 * GiB, note: 'Experimental.' },
  { quant: 'IQ2_XXS', bytes: 2.89 * GiB, note: 'Experimental.' },
  { quant: 'IQ1_M', bytes: 2.68 * GiB, note: 'Extreme. Expect substantial degradation.' },
  { quant: 'IQ1_S', bytes: 2.55 * GiB, note: 'Extreme. Expect substantial degradation.' },
  { quant: 'Q1_0', bytes: 1.83 * GiB, note: 'Extreme. Included for completeness.' },
];

/** The file a repo:QUANT name resolves to (as the runtime does: clef-flash-GGUF → clef-flash-IQ2_M.gguf). */
export function fileOf(repo: string, quant: string): string {
  return `${repo.split('/')[1].replace(/[-_]gguf$/i, '')}-${quant}.gguf`;
}

/**
 * Sizes from the Hub's file list (`/api/models/{repo}/tree/{rev}`), when it answers within a few
 * seconds: {file name → bytes}. Null offline or on any error (the card's sizes are used then).
 */
export async function fetchRepoSizes(hubUrl: string, repo: string, revision = 'main'): Promise<Map<string, number> | null> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 4000);
  try {
    const r = await fetch(`${hubUrl.replace(/\/+$/, '')}/api/models/${repo}/tree/${encodeURIComponent(revision)}`, { signal: ctl.signal });
    if (!r.ok) return null;
    const list = (await r.json()) as Array<{ path: string; size: number; lfs?: { size: number } }>;
    if (!Array.isArray(list)) return null;
    return new Map(list.filter((f) => /\.gguf$/i.test(f.path)).map((f) => [f.path, f.lfs?.size ?? f.size]));
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

// ---- memory ---------------------------------------------------------------------------------------

/** wasm32: one engine instance (one worker) can address 4 GiB. */
export const WASM_LIMIT = WASM_MAX_MEMORY;
/** What the wasm module itself, the page and allocator slack take out of that. */
const WASM_RESERVE = 16 * MiB;

/**
 * Clef-Flash (Qwen3.5-9B) in the runtime's memory formula (load/fit.ts), before its header is read:
 * 24 DeltaNet layers × (32 heads × 128² + 3 × 8192 conv) f32 of state; 8 attention layers × K+V ×
 * 4 KV heads × 256 f32 per token; a 248,320-token vocabulary; the header (~11 MB) is not weights.
 * The token embeddings (248,320 × 4096 of 9.4 B parameters) stay with the coordinator when the
 * model is split; every other matrix is split evenly by heads (src/split.rs).
 */
const CLEF_FLASH = {
  stateBytes: 24 * 4 * (32 * 128 * 128 + 3 * 8192), kvBytesPerToken: 8 * 4 * 2 * 4 * 256, nVocab: 248_320, contextLength: 262_144,
  kvHeads: 4, embeddingShare: (248_320 * 4096) / 9.4e9,
};
const HEADER_BYTES = 11 * MiB;

export interface MemoryEstimate {
  /** Bytes of memory for the weights, state and a context of `context` tokens (all workers). */
  bytes: number;
  /** The largest part one worker holds (each is limited to 4 GiB). */
  perWorker: number;
  /** Workers the runtime would split the model across (1: the whole model in one). */
  workers: number;
  /** The context length the runtime would pick (8192 halved until it fits; 0 = none fits). */
  context: number;
}

/** Each instance's memory shape with n workers (the coordinator first): load/fit.ts's formula, before the header. */
function clefParts(weightBytes: number, n: number): MemoryShape[] {
  const c = CLEF_FLASH;
  if (n === 1) return [{ weightBytes, stateBytes: c.stateBytes, kvBytesPerToken: c.kvBytesPerToken, nVocab: c.nVocab }];
  const embd = weightBytes * c.embeddingShare;
  // A shard computes the KV heads its query heads read: with more shards than KV heads some are computed twice.
  const kvShare = Math.ceil(c.kvHeads / n) / c.kvHeads;
  const shard = { weightBytes: (weightBytes - embd) / n, stateBytes: c.stateBytes / n, kvBytesPerToken: c.kvBytesPerToken * kvShare, nVocab: c.nVocab };
  return [{ weightBytes: embd, stateBytes: 0, kvBytesPerToken: 0, nVocab: c.nVocab }, ...Array(n).fill(shard)];
}

/** Cores this page may use (navigator.hardwareConcurrency). */
export function pageCores(): number {
  return typeof navigator !== 'undefined' && navigator.hardwareConcurrency > 0 ? navigator.hardwareConcurrency : 1;
}

/**
 * Memory the runtime needs for a file of `fileBytes` (Clef-Flash files; small test files roughly),
 * split across the workers it would choose on a machine with `cores` cores (load/workers.ts). The
 * weights as in the file: where the memory allows it with the same context, the loader holds
 * IQ2_S / IQ2_XS matrices in a faster form 29 % / 43 % larger (IQ2_M: +0.5 GB, IQ2_XS: +1.1 GB,
 * loader.ts), never in place of context.
 */
export function estimateMemory(fileBytes: number, cores = pageCores()): MemoryEstimate {
  if (fileBytes < GiB) {
    // Not a 9B file (a test model): weights + a generous allowance.
    const bytes = Math.round(fileBytes * 1.25 + 32 * MiB);
    return { bytes, perWorker: bytes, workers: 1, context: 4096 };
  }
  const weightBytes = fileBytes - HEADER_BYTES;
  const available = WASM_LIMIT - WASM_RESERVE;
  const { workers } = chooseWorkers({ cores, weightBytes, fits: (n) => partsFit(clefParts(weightBytes, n), MIN_AUTO_CONTEXT, () => available) });
  const parts = clefParts(weightBytes, workers);
  const n = Math.min(...parts.map((p) => pickContext(p, CLEF_FLASH.contextLength, undefined, available)));
  const sizes = parts.map((p) => memoryNeeded(p, n));
  const perWorker = Math.max(...sizes);
  return { bytes: sizes.reduce((a, b) => a + b, 0), perWorker, workers, context: perWorker <= available ? n : 0 };
}

export type FitLevel = 'good' | 'tight' | 'no';

export interface Fit {
  level: FitLevel;
  /** One short line: "Fits", "Tight", "Too large". */
  label: string;
  /** Why, for people. */
  detail: string;
  memory: MemoryEstimate;
}

export interface DeviceInfo {
  /** navigator.deviceMemory in bytes (Chromium; rounded and capped by the browser), or null. */
  ram: number | null;
  /** Free storage for the cache (bytes), or null when unknown. */
  storageFree: number | null;
}

export async function deviceInfo(): Promise<DeviceInfo> {
  const dm = (navigator as Navigator & { deviceMemory?: number }).deviceMemory;
  let storageFree: number | null = null;
  try {
    const e = await navigator.storage?.estimate?.();
    if (e && e.quota !== undefined && e.usage !== undefined) storageFree = e.quota - e.usage;
  } catch {
    /* unknown */
  }
  return { ram: typeof dm === 'number' && dm > 0 ? dm * GiB : null, storageFree };
}

/** Will a file of `fileBytes` fit here? `cachedBytes`: how much of it is already stored. */
export function checkFit(fileBytes: number, device: DeviceInfo, cachedBytes = 0): Fit {
  const memory = estimateMemory(fileBytes);
  const need = memory.bytes;
  const reasons: string[] = [];
  let level: FitLevel = 'good';
  const worse = (l: FitLevel) => {
    if (l === 'no' || (l === 'tight' && level === 'good')) level = l;
  };
  const split = memory.workers > 1 ? ` split across ${memory.workers} workers` : '';
  if (memory.context === 0) {
    worse('no');
    reasons.push(`needs ~${fmtBytes(need)} of memory${split}, more than 4 GB in one worker`);
  } else if (memory.context < 4096) {
    worse('tight');
    reasons.push(`only a ${memory.context}-token context fits${split || ' in one worker'} (4 GB each)`);
  }
  if (device.ram !== null) {
    // deviceMemory is rounded down to a power of two and capped (8 GB in Chromium).
    if (device.ram < need) {
      worse('tight');
      reasons.push(`this device reports ~${fmtBytes(device.ram, 0)} of RAM`);
    }
  }
  const toStore = Math.max(0, fileBytes - cachedBytes);
  if (device.storageFree !== null && toStore > 0 && device.storageFree < toStore * 1.02) {
    worse('no');
    reasons.push(`${fmtBytes(toStore)} to store, ${fmtBytes(Math.max(0, device.storageFree))} free`);
  }
  const label = level === 'good' ? 'Fits' : level === 'tight' ? 'Tight' : "Won't fit";
  let detail = reasons.join('; ');
  if (!detail) {
    const ok = [memory.workers > 1 ? `${memory.workers} workers of up to ${fmtBytes(memory.perWorker)} each` : `within one worker's 4 GB of memory`];
    if (device.ram !== null) ok.push(`this device reports ${device.ram >= 8 * GiB ? '8 GB or more' : `~${fmtBytes(device.ram, 0)}`} of RAM`);
    if (device.storageFree !== null) ok.push(toStore > 0 ? `${fmtBytes(device.storageFree)} of storage free` : 'already saved here');
    detail = ok.join(', ');
  }
  return { level, label, detail, memory };
}

/** "owner/repo:QUANT" → {repo, quant}; null for other names. */
export function parseRepoQuant(name: string): { repo: string; quant: string } | null {
  const m = /^([\w.-]+\/[\w.-]+):([\w.-]+)$/.exec(name.trim());
  if (!m || /\.gguf$/i.test(m[2])) return null;
  return { repo: m[1], quant: m[2].toUpperCase() };
}

/** A cached file's URL → the name and options to load it again ({hub}/{repo}/resolve/{rev}/{file}). */
export function refOfCachedUrl(url: string): { model: string; hubUrl?: string; revision?: string; label: string } {
  const m = /^(https?:\/\/.+?)\/([\w.-]+\/[\w.-]+)\/resolve\/([^/]+)\/(.+)$/.exec(url);
  if (m) {
    const [, hubUrl, repo, rev, file] = m;
    const f = decodeURIComponent(file);
    const q = /-((?:I?Q\d\w*?)|F16|BF16|F32)\.gguf$/i.exec(f)?.[1];
    const model = q && fileOf(repo, q) === f ? `${repo}:${q}` : `${repo}:${f}`;
    return { model, hubUrl, revision: decodeURIComponent(rev), label: q ?? f };
  }
  return { model: url, label: url.split('/').pop() || url };
}
