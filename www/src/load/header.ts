// Reading a GGUF header: a growing prefix until the parser (src/gguf.rs via parseHeader) is satisfied.
//
//   prefix (first request, 1 MiB) ──parseHeader──► ok: HeaderInfo
//                                            └──► need ≥ N bytes: read more (at least ×4), again
//
// Growing by 4 reads Clef-Flash's ~11 MB header (248k tokenizer strings) in 3 requests instead of
// doubling's 5, each a round trip to the Hub before the download starts. Bytes read past the header
// are not wasted: the first chunks take them (transfer.ts `usePrefixData`).
//
// The parser's errors keep their codes (bad_gguf, wrong_architecture, …); an empty file and a file
// that is not a GGUF at all get messages that say so in plain words.

import { parseHeader } from '../../pkg/clef_web.js';
import type { ErrorCode } from '../protocol.js';
import { LoadError, errCode } from './errors.js';
import type { MemoryShape } from './fit.js';

/** What parseHeader reports of a model (src/wasm.rs header_info). */
export interface HeaderInfo extends MemoryShape {
  status: 'ok';
  architecture: string;
  name: string;
  fileType: number;
  fileSize: number;
  dataOffset: number;
  tensorCount: number;
  contextLength: number;
  nLayer: number;
  nEmbd: number;
  unsupported: string[];
  chatTemplate?: string;
}

/** Each growth round reads at least this many times the prefix so far. */
const GROWTH = 4;
/** At most this many growth rounds. */
const MAX_ROUNDS = 64;

/** What the first bytes look like, for "not a GGUF file" messages. */
function looksLike(b: Uint8Array): string {
  const head = b.subarray(0, 16);
  const text = Array.from(head, (x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
  return /^[\x20-\x7e]+$/.test(new TextDecoder().decode(head)) ? `it begins with the text "${text}"` : `it begins with bytes ${Array.from(head.subarray(0, 8), (x) => x.toString(16).padStart(2, '0')).join(' ')}`;
}

/** parseHeader on a prefix: the info, or the number of bytes it needs; typed errors. */
export function parse(prefix: Uint8Array, size: number, name: string): { info: HeaderInfo } | { needed: number } {
  if (size === 0) throw new LoadError('bad_gguf', `${name} is empty (0 bytes): not a GGUF file`);
  let r: { status: string; needed?: number };
  try {
    r = parseHeader(prefix, size);
  } catch (e) {
    const code = (errCode(e) as ErrorCode | 'need_more' | undefined) ?? 'bad_gguf';
    const msg = (e as Error)?.message ?? String(e);
    if (/bad magic/.test(msg)) throw new LoadError('bad_gguf', `${name} is not a GGUF file (${looksLike(prefix)}; a GGUF file begins with "GGUF")`);
    throw new LoadError(code === 'need_more' ? 'bad_gguf' : code, `${name}: ${msg}`);
  }
  if (r.status === 'ok') return { info: r as HeaderInfo };
  return { needed: r.needed ?? prefix.length * 2 };
}

/**
 * Grows `first` (the file's first bytes) with `more(start, end)` until the header parses.
 * `onBytes(n)`: the prefix now has n bytes.
 */
export async function readHeader(
  first: Uint8Array,
  size: number,
  name: string,
  more: (start: number, end: number) => Promise<Uint8Array>,
  onBytes: (n: number) => void = () => {},
): Promise<{ prefix: Uint8Array; info: HeaderInfo }> {
  let prefix = first;
  for (let round = 0; ; round++) {
    const r = parse(prefix, size, name);
    if ('info' in r) return { prefix, info: r.info };
    if (prefix.length >= size || round > MAX_ROUNDS) throw new LoadError('bad_gguf', `${name}: the GGUF header is larger than the file (${size} bytes): the file is truncated`);
    const want = Math.min(size, Math.max(r.needed, prefix.length * GROWTH));
    const extra = await more(prefix.length, want);
    const grown = new Uint8Array(prefix.length + extra.length);
    grown.set(prefix);
    grown.set(extra, prefix.length);
    prefix = grown;
    onBytes(prefix.length);
  }
}

/** Refuses a model with tensors this build cannot run (before anything is allocated). */
export function checkSupported(info: HeaderInfo): void {
  if (info.unsupported.length) {
    throw new LoadError('unsupported_type', `this build cannot run tensor(s) ${info.unsupported.slice(0, 4).join(', ')}`);
  }
}
