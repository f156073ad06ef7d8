// Model names → where to read the GGUF from.
//
//   "NANI-Nithin/clef-flash-GGUF:IQ2_M"        repo:QUANT (as llama.cpp's -hf): {hub}/{repo}/resolve/{rev}/clef-flash-IQ2_M.gguf
//   "owner/repo:file.gguf"                      repo + file name
//   {repo: "owner/repo", file: "x.gguf"}       the same as an object (optionally {revision})
//   "https://…/x.gguf" or {url}                 any URL that serves Range requests
//   "/path/x.gguf", "./x.gguf", "file:///…"     Node only: a local file
//
// For repo:QUANT the file name is `{repo name without -GGUF}-{QUANT}.gguf` (clef-flash-GGUF →
// clef-flash-IQ2_M.gguf; also the usual naming of other GGUF repos), unless `file` is given.

export const DEFAULT_HUB = 'https://huggingface.co';

export interface HubRef {
  hubUrl: string;
  repo: string;
  revision: string;
  file: string;
}

export interface Resolved {
  url: string;
  cacheKey: string;
  hub?: HubRef;
  /** The quant named (repo:QUANT) or read from the file name, e.g. IQ2_M. */
  quant?: string;
  /** Display name (what the caller wrote). */
  name: string;
}

export type ModelRef = string | { url: string } | { repo: string; file?: string; quant?: string; revision?: string };

export interface ResolveOptions {
  hubUrl?: string;
  revision?: string;
  /** Base URL for relative URLs (the page's location). */
  baseUrl?: string;
}

const REPO = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

export function quantFromFileName(file: string): string | undefined {
  const m = /[-_.]((?:I?Q\d[\w]*?)|F16|BF16|F32)\.gguf$/i.exec(file);
  return m ? m[1].toUpperCase() : undefined;
}

/** Strips the query string and fragment: the cache key of a URL. */
export function cacheKeyOf(url: string): string {
  return url.replace(/[?#].*$/, '');
}

function hubUrlFor(ref: HubRef): string {
  const base = ref.hubUrl.replace(/\/+$/, '');
  const file = ref.file.split('/').map(encodeURIComponent).join('/');
  return `${base}/${ref.repo}/resolve/${encodeURIComponent(ref.revision)}/${file}`;
}

function fromHub(repo: string, fileOrQuant: { file?: string; quant?: string }, opts: ResolveOptions, name: string): Resolved {
  if (!REPO.test(repo)) throw new Error(`'${repo}' is not a Hub repository name (owner/name)`);
  let file = fileOrQuant.file;
  let quant = fileOrQuant.quant;
  if (!file) {
    if (!quant) throw new Error(`'${name}': name a quant (repo:QUANT) or a file`);
    const base = repo.split('/')[1].replace(/[-_]gguf$/i, '');
    file = `${base}-${quant}.gguf`;
  }
  quant = quant ?? quantFromFileName(file);
  const hub: HubRef = { hubUrl: opts.hubUrl ?? DEFAULT_HUB, repo, revision: opts.revision ?? 'main', file };
  const url = hubUrlFor(hub);
  return { url, cacheKey: cacheKeyOf(url), hub, quant, name };
}

/** Resolves a model reference to a URL (throws a plain Error with a message on a bad name). */
export function resolveModel(model: ModelRef, opts: ResolveOptions = {}): Resolved {
  if (typeof model === 'object' && model !== null) {
    if ('url' in model && typeof model.url === 'string') return resolveModel(model.url, opts);
    if ('repo' in model && typeof model.repo === 'string') {
      const o = { ...opts, revision: model.revision ?? opts.revision };
      return fromHub(model.repo, { file: model.file, quant: model.quant }, o, model.file ? `${model.repo}:${model.file}` : `${model.repo}:${model.quant}`);
    }
    throw new Error('model must be a name, a URL, {url}, {repo, file|quant}, a File or a Blob');
  }
  const s = String(model).trim();
  if (/^(https?:)?\/\//i.test(s) || s.startsWith('blob:')) {
    const url = new URL(s, opts.baseUrl).href;
    return { url, cacheKey: cacheKeyOf(url), quant: quantFromFileName(cacheKeyOf(url)), name: s };
  }
  const m = /^([^:\s]+\/[^:\s]+):([^:\s]+)$/.exec(s);
  if (m && REPO.test(m[1])) {
    const [, repo, rest] = m;
    return /\.gguf$/i.test(rest) ? fromHub(repo, { file: rest }, opts, s) : fromHub(repo, { quant: rest }, opts, s);
  }
  if (opts.baseUrl && /^(\.{0,2}\/|[\w.-]+\.gguf$)/.test(s)) {
    const url = new URL(s, opts.baseUrl).href;
    return { url, cacheKey: cacheKeyOf(url), quant: quantFromFileName(s), name: s };
  }
  throw new Error(`'${s}' is not a model name: use "owner/repo:QUANT", "owner/repo:file.gguf" or a URL`);
}

// Approximate bits per weight of the clef-flash files (whole file / parameters), largest first:
// used to suggest a smaller quant when one does not fit.
export const QUANT_BPW: Array<[string, number]> = [
  ['F32', 32], ['BF16', 16], ['F16', 16], ['Q8_0', 8.5], ['Q6_K', 6.6], ['Q5_K_M', 5.7], ['Q4_K_M', 4.9],
  ['IQ4_NL', 4.5], ['IQ4_XS', 4.3], ['Q3_K_M', 3.9], ['IQ3_S', 3.5], ['IQ3_XXS', 3.1], ['Q2_K', 3.0],
  ['IQ2_M', 2.7], ['Q2_K_S', 2.7], ['IQ2_S', 2.5], ['IQ2_XS', 2.4], ['IQ2_XXS', 2.2], ['Q2_0', 2.3],
  ['IQ1_M', 1.9], ['IQ1_S', 1.8], ['Q1_0', 1.2],
];

/** llama.cpp's `general.file_type` → quant name (for files named without one). */
export const FILE_TYPES: Record<number, string> = {
  0: 'F32', 1: 'F16', 2: 'Q4_0', 3: 'Q4_1', 7: 'Q8_0', 8: 'Q5_0', 9: 'Q5_1', 10: 'Q2_K', 11: 'Q3_K_S',
  12: 'Q3_K_M', 13: 'Q3_K_L', 14: 'Q4_K_S', 15: 'Q4_K_M', 16: 'Q5_K_S', 17: 'Q5_K_M', 18: 'Q6_K',
  19: 'IQ2_XXS', 20: 'IQ2_XS', 21: 'Q2_K_S', 22: 'IQ3_XS', 23: 'IQ3_XXS', 24: 'IQ1_S', 25: 'IQ4_NL',
  26: 'IQ3_S', 27: 'IQ3_M', 28: 'IQ2_S', 29: 'IQ2_M', 30: 'IQ4_XS', 31: 'IQ1_M', 32: 'BF16', 40: 'Q1_0', 41: 'Q2_0',
};

/**
 * The largest quant whose weights would fit in `weightBudget` bytes, given that the current
 * file (quant `current`) has `weightBytes` of weights. Undefined when none would.
 */
export function suggestQuant(current: string | undefined, weightBytes: number, weightBudget: number): string | undefined {
  const bpw = QUANT_BPW.find(([q]) => q === current?.toUpperCase())?.[1];
  if (!bpw || weightBudget <= 0) return undefined;
  const params = (weightBytes * 8) / bpw;
  // Leave 5% slack: the mix of tensor types differs a little between files.
  return QUANT_BPW.find(([, b]) => b < bpw && (params * b) / 8 <= weightBudget * 0.95)?.[0];
}
