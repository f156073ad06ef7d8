// The models the chat page offers (the small clef-flash quants, from the model card of
// NANI-Nithin/clef-flash-GGUF), what each needs, and whether it fits on this device.

import { fmtBytes } from './format.js';
import { WASM_MAX_MEMORY, memoryNeeded, pickContext } from '../load/fit.js';

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

/** The small quants, best quality first (model card: sizes and notes). */
export const QUANTS: QuantInfo[] = [
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

/** wasm32: one tab's engine can address 4 GiB. */
export const WASM_LIMIT = WASM_MAX_MEMORY;
/** What the wasm module itself, the page and allocator slack take out of that. */
const WASM_RESERVE = 16 * MiB;

/**
 * Clef-Flash (Qwen3.5-9B) in the runtime's memory formula (load/fit.ts), before its header is read:
 * 24 DeltaNet layers × (32 heads × 128² + 3 × 8192 conv) f32 of state; 8 attention layers × K+V ×
 * 4 KV heads × 256 f32 per token; a 248,320-token vocabulary; the header (~11 MB) is not weights.
 */
const CLEF_FLASH = { stateBytes: 24 * 4 * (32 * 128 * 128 + 3 * 8192), kvBytesPerToken: 8 * 4 * 2 * 4 * 256, nVocab: 248_320, contextLength: 262_144 };
const HEADER_BYTES = 11 * MiB;

export interface MemoryEstimate {
  /** Bytes of memory for the weights, state and a context of `context` tokens. */
  bytes: number;
  /** The context length the runtime would pick (8192 halved until it fits; 0 = none fits). */
  context: number;
}

/** Memory the runtime needs for a file of `fileBytes` (Clef-Flash files; small test files roughly). */
export function estimateMemory(fileBytes: number): MemoryEstimate {
  if (fileBytes < GiB) {
    // Not a 9B file (a test model): weights + a generous allowance.
    return { bytes: Math.round(fileBytes * 1.25 + 32 * MiB), context: 4096 };
  }
  const shape = { ...CLEF_FLASH, weightBytes: fileBytes - HEADER_BYTES };
  const available = WASM_LIMIT - WASM_RESERVE;
  const n = pickContext(shape, shape.contextLength, undefined, available);
  const bytes = memoryNeeded(shape, n);
  return { bytes, context: bytes <= available ? n : 0 };
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
  if (memory.context === 0) {
    worse('no');
    reasons.push(`needs ~${fmtBytes(need)} of memory, more than the 4 GB a browser tab can use`);
  } else if (memory.context < 4096) {
    worse('tight');
    reasons.push(`only a ${memory.context}-token context fits in a tab's 4 GB`);
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
    const ok = [`within a tab's 4 GB of memory`];
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
