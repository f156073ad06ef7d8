// Getting a GGUF's bytes into the engine's weight shards (runs in the worker, or in-process in Node).
//
//   header   read a growing prefix (HTTP Range / Blob slice / file / OPFS) until parseHeader is
//            satisfied; learn size, ETag and sha256 (the Hub's LFS oid)
//   fit      estimate weights + state + KV for the context; fail here, before any weight byte is
//            downloaded, with a message naming a smaller quant
//   allocate new ModelLoader(prefix, size): the weight shards, once
//   data     the file is cut into chunks on a fixed grid (chunkSize, e.g. 16 MiB); each chunk comes
//            from the OPFS cache (checked against its checksum) or from the network (Range
//            requests, a few in flight, resumed from the last byte received after a dropped
//            connection, retried with exponential backoff). Every byte is written straight to its
//            final place: `route()` maps a file range to shard memory (or to a small buffer for
//            the padding between shards); no whole-file copy exists in JS.
//   verify   sha256 of the whole file, fed in file order as chunks complete (header bytes, then
//            shard memory via Sha256.updateFromMemory); a mismatch triggers one full re-fetch
//            pass, then an `integrity` error
//
// "Ready for more workers": every byte range goes through `Placement.route()`, which names the
// owner of the shard it lands in. Today there is one owner (this worker); splitting the shards
// across workers means giving `route` a real owner table and sending the bytes to that worker.

import { ModelLoader, Sha256, parseHeader, wasmMemory } from '../pkg/clef_web.js';
import type { ErrorCode, LoadParams, LoadPhase, LoadProgress, LoadStats } from './protocol.js';
import { Checksum } from './checksum.js';
import { CacheError, ModelCache, PIECE_BYTES, quotaError, storageFree } from './cache.js';
import { FILE_TYPES, suggestQuant } from './resolve.js';

export class LoadError extends Error {
  constructor(public code: ErrorCode, message: string, public retryable = false) {
    super(message);
  }
}

const MiB = 1 << 20;
const GiB = 1 << 30;
export const WASM_MAX_MEMORY = 4 * GiB;
/** Snapshots the engine keeps (src/engine.rs MAX_SNAPSHOTS) + the live state + slack. */
const STATE_COPIES = 6;

// ------------------------------------------------------------------------------------------------
// Sources

export interface OpenedSource {
  size: number;
  etag: string | null;
  /** sha256 of the whole file if the server said (x-linked-etag / a 64-hex ETag). */
  oid: string | null;
  /** The first bytes of the file (at least what was asked, unless the file is shorter). */
  prefix: Uint8Array;
}

export interface ByteSource {
  readonly description: string;
  /** Reads the first `n` bytes and learns the file's size and identity. */
  open(n: number, signal: AbortSignal): Promise<OpenedSource>;
  /** Bytes [start, end) (a later part of the header). */
  readBytes(start: number, end: number, signal: AbortSignal): Promise<Uint8Array>;
  /**
   * Streams bytes [start, end) in order to `sink`. Rejects when the transfer breaks (what was
   * given to `sink` stays valid: the caller resumes after it).
   */
  stream(start: number, end: number, sink: (bytes: Uint8Array) => void, signal: AbortSignal): Promise<void>;
  /** Synchronous read straight into `dest` (files in Node); returns bytes read. */
  readInto?(offset: number, dest: Uint8Array): number;
  /** Whether a failure may go away by retrying. */
  retryable(e: unknown): boolean;
  /** Asks the source for the sha256 by other means (the Hub API). */
  lookupOid?(signal: AbortSignal): Promise<{ oid: string | null; size: number | null }>;
}

const HEX64 = /^[0-9a-f]{64}$/;
function cleanEtag(v: string | null): string | null {
  if (!v) return null;
  return v.replace(/^W\//, '').replace(/^"|"$/g, '').trim() || null;
}
function oidOf(v: string | null): string | null {
  const e = cleanEtag(v)?.toLowerCase() ?? null;
  return e && HEX64.test(e) ? e : null;
}

/**
 * Frees a network buffer right after its bytes were copied into wasm memory (detaching it releases
 * the backing store now instead of at the next GC: without this, hundreds of MB of spent fetch
 * chunks can wait for the collector during a multi-GB download).
 */
function release(b: Uint8Array): void {
  const buf = b.buffer as ArrayBuffer & { transfer?: (n: number) => ArrayBuffer };
  if (b.byteOffset === 0 && b.byteLength === buf.byteLength && typeof buf.transfer === 'function') {
    try {
      buf.transfer(0);
    } catch {
      /* not transferable (shared with the stream implementation): the GC will free it */
    }
  }
}

class HttpError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

/** HTTP(S) with Range requests (the Hub, a CDN, any static server that supports Range). */
export class HttpSource implements ByteSource {
  readonly description: string;
  private etag: string | null = null;

  constructor(
    private url: string,
    private hub?: { hubUrl: string; repo: string; revision: string; file: string },
  ) {
    this.description = url;
  }

  private async get(start: number, end: number, signal: AbortSignal): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(this.url, { headers: { Range: `bytes=${start}-${end - 1}` }, signal, cache: 'no-store', redirect: 'follow' });
    } catch (e) {
      if (signal.aborted) throw e;
      throw new HttpError(0, `network error fetching ${this.url}: ${(e as Error)?.message ?? e}`);
    }
    if (res.status === 404 || res.status === 401 || res.status === 403 || res.status === 410) {
      res.body?.cancel().catch(() => {});
      throw new LoadError('not_found', `${this.url}: HTTP ${res.status} ${res.statusText || ''}`.trim() +
        (res.status === 401 || res.status === 403 ? ' (a gated or private repository needs a token)' : ''));
    }
    if (res.status === 416) {
      res.body?.cancel().catch(() => {});
      throw new LoadError('network', `${this.url}: the server refused the byte range ${start}-${end - 1} (HTTP 416)`);
    }
    if (!res.ok) {
      res.body?.cancel().catch(() => {});
      throw new HttpError(res.status, `${this.url}: HTTP ${res.status} ${res.statusText || ''}`.trim());
    }
    if (res.status === 200 && !(start === 0 && Number(res.headers.get('content-length')) <= end)) {
      res.body?.cancel().catch(() => {});
      throw new LoadError('network', `${this.url}: the server does not support HTTP Range requests (it sent the whole file)`);
    }
    if (res.status === 206) {
      const cr = /bytes\s+(\d+)-(\d+)\/(\d+|\*)/i.exec(res.headers.get('content-range') ?? '');
      if (cr && Number(cr[1]) !== start) {
        res.body?.cancel().catch(() => {});
        throw new HttpError(0, `${this.url}: the server answered range ${cr[1]}- for ${start}-`);
      }
    }
    const etag = cleanEtag(res.headers.get('x-linked-etag')) ?? cleanEtag(res.headers.get('etag'));
    if (this.etag && etag && etag !== this.etag) {
      res.body?.cancel().catch(() => {});
      throw new LoadError('network', `${this.url} changed on the server while loading (ETag ${this.etag} → ${etag}); load again`);
    }
    return res;
  }

  async open(n: number, signal: AbortSignal): Promise<OpenedSource> {
    const res = await this.get(0, n, signal);
    const h = res.headers;
    let size = NaN;
    const cr = /\/(\d+)\s*$/.exec(h.get('content-range') ?? '');
    if (cr) size = Number(cr[1]);
    if (!Number.isFinite(size) && h.get('x-linked-size')) size = Number(h.get('x-linked-size'));
    if (!Number.isFinite(size) && res.status === 200) size = Number(h.get('content-length'));
    const prefix = new Uint8Array(await res.arrayBuffer());
    this.etag = cleanEtag(h.get('x-linked-etag')) ?? cleanEtag(h.get('etag'));
    let oid = oidOf(h.get('x-linked-etag')) ?? oidOf(h.get('etag'));
    if (!Number.isFinite(size) || !oid) {
      const info = await this.lookupOid(signal).catch(() => ({ oid: null, size: null }));
      oid = oid ?? info.oid;
      if (!Number.isFinite(size) && info.size) size = info.size;
    }
    if (!Number.isFinite(size)) throw new LoadError('network', `${this.url}: the server did not say how large the file is (Content-Range)`);
    return { size, etag: this.etag, oid, prefix };
  }

  async readBytes(start: number, end: number, signal: AbortSignal): Promise<Uint8Array> {
    const res = await this.get(start, end, signal);
    const b = new Uint8Array(await res.arrayBuffer());
    if (b.length < end - start) throw new HttpError(0, `${this.url}: short response (${b.length} of ${end - start} bytes)`);
    return b.subarray(0, end - start);
  }

  async stream(start: number, end: number, sink: (bytes: Uint8Array) => void, signal: AbortSignal): Promise<void> {
    const res = await this.get(start, end, signal);
    if (!res.body) throw new HttpError(0, `${this.url}: empty response body`);
    const reader = res.body.getReader();
    let got = 0;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const take = Math.min(value.length, end - start - got);
        if (take > 0) sink(take === value.length ? value : value.subarray(0, take));
        got += take;
        release(value);
        if (got >= end - start) break;
      }
    } catch (e) {
      if (signal.aborted) throw e;
      throw new HttpError(0, `connection dropped after ${got} bytes of ${start}-${end - 1}: ${(e as Error)?.message ?? e}`);
    } finally {
      reader.cancel().catch(() => {});
    }
    if (got < end - start) throw new HttpError(0, `short response: ${got} of ${end - start} bytes of range ${start}-${end - 1}`);
  }

  retryable(e: unknown): boolean {
    if (e instanceof LoadError) return e.retryable;
    if (e instanceof HttpError) return e.status === 0 || e.status === 408 || e.status === 429 || e.status >= 500;
    return e instanceof TypeError;
  }

  /** The Hub API (`/api/models/{repo}/tree/{revision}`) knows each LFS file's sha256 and size. */
  async lookupOid(signal: AbortSignal): Promise<{ oid: string | null; size: number | null }> {
    if (!this.hub) return { oid: null, size: null };
    const { hubUrl, repo, revision, file } = this.hub;
    const dir = file.includes('/') ? '/' + file.slice(0, file.lastIndexOf('/')).split('/').map(encodeURIComponent).join('/') : '';
    const res = await fetch(`${hubUrl.replace(/\/+$/, '')}/api/models/${repo}/tree/${encodeURIComponent(revision)}${dir}`, { signal });
    if (!res.ok) return { oid: null, size: null };
    const list = (await res.json()) as Array<{ path: string; size?: number; lfs?: { oid?: string; size?: number } }>;
    const e = Array.isArray(list) ? list.find((x) => x.path === file) : undefined;
    const oid = e?.lfs?.oid?.toLowerCase() ?? null;
    return { oid: oid && HEX64.test(oid) ? oid : null, size: e?.lfs?.size ?? e?.size ?? null };
  }
}

/** A File or Blob (drag and drop). */
export class BlobSource implements ByteSource {
  readonly description: string;
  constructor(private blob: Blob, name: string) {
    this.description = name;
  }
  async open(n: number): Promise<OpenedSource> {
    return { size: this.blob.size, etag: null, oid: null, prefix: new Uint8Array(await this.blob.slice(0, n).arrayBuffer()) };
  }
  async readBytes(start: number, end: number): Promise<Uint8Array> {
    return new Uint8Array(await this.blob.slice(start, end).arrayBuffer());
  }
  async stream(start: number, end: number, sink: (bytes: Uint8Array) => void, signal: AbortSignal): Promise<void> {
    const reader = this.blob.slice(start, end).stream().getReader();
    try {
      for (;;) {
        if (signal.aborted) throw signal.reason;
        const { done, value } = await reader.read();
        if (done) break;
        sink(value);
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }
  retryable(): boolean {
    return false;
  }
}

/** Synchronous random access (Node: a file descriptor). */
export class SyncFileSource implements ByteSource {
  constructor(
    readonly description: string,
    private size: number,
    private read: (offset: number, dest: Uint8Array) => number,
  ) {}
  async open(n: number): Promise<OpenedSource> {
    const prefix = new Uint8Array(Math.min(n, this.size));
    this.readFully(0, prefix);
    return { size: this.size, etag: null, oid: null, prefix };
  }
  async readBytes(start: number, end: number): Promise<Uint8Array> {
    const b = new Uint8Array(end - start);
    this.readFully(start, b);
    return b;
  }
  async stream(start: number, end: number, sink: (bytes: Uint8Array) => void): Promise<void> {
    const b = new Uint8Array(Math.min(end - start, 4 * MiB));
    for (let p = start; p < end; ) {
      const n = this.read(p, b.subarray(0, Math.min(b.length, end - p)));
      if (n <= 0) throw new LoadError('bad_gguf', `${this.description}: unexpected end of file at byte ${p}`);
      sink(b.subarray(0, n));
      p += n;
    }
  }
  readInto(offset: number, dest: Uint8Array): number {
    return this.readFully(offset, dest);
  }
  private readFully(offset: number, dest: Uint8Array): number {
    let done = 0;
    while (done < dest.length) {
      const n = this.read(offset + done, dest.subarray(done));
      if (n <= 0) break;
      done += n;
    }
    return done;
  }
  retryable(): boolean {
    return false;
  }
}

// ------------------------------------------------------------------------------------------------
// Placement: where each byte of the file goes

/** A piece of a chunk: file bytes [start, end) go to shard memory, or to a buffer (padding). */
export type Part =
  | { kind: 'shard'; start: number; end: number; shard: number; owner: number; shardOffset: number }
  | { kind: 'gap'; start: number; end: number; buf: Uint8Array };

interface Segment {
  start: number;
  end: number;
  shard: number; // -1: gap (bytes in no shard: padding, unused tensors)
  owner: number;
}

export class Placement {
  readonly segments: Segment[] = [];
  private ptrs: number[] = [];
  private mem: Uint8Array = new Uint8Array(0);

  constructor(
    plan: Array<{ shard: number; fileOffset: number; len: number }>,
    private dataOffset: number,
    private size: number,
    shardPtr: (i: number) => number,
    /** Which worker owns shard i (one worker today). */
    ownerOf: (shard: number) => number = () => 0,
  ) {
    const sorted = [...plan].sort((a, b) => a.fileOffset - b.fileOffset);
    let pos = dataOffset;
    for (const r of sorted) {
      if (r.fileOffset > pos) this.segments.push({ start: pos, end: r.fileOffset, shard: -1, owner: -1 });
      this.segments.push({ start: r.fileOffset, end: r.fileOffset + r.len, shard: r.shard, owner: ownerOf(r.shard) });
      pos = r.fileOffset + r.len;
      this.ptrs[r.shard] = shardPtr(r.shard);
    }
    if (pos < size) this.segments.push({ start: pos, end: size, shard: -1, owner: -1 });
  }

  /** The one routing function: file range [start, end) → parts with their destinations. */
  route(start: number, end: number): Part[] {
    const out: Part[] = [];
    for (const s of this.segments) {
      if (s.end <= start || s.start >= end) continue;
      const a = Math.max(s.start, start);
      const b = Math.min(s.end, end);
      if (s.shard < 0) out.push({ kind: 'gap', start: a, end: b, buf: new Uint8Array(b - a) });
      else out.push({ kind: 'shard', start: a, end: b, shard: s.shard, owner: s.owner, shardOffset: a - s.start });
    }
    return out;
  }

  /** wasm memory, re-viewed whenever it has grown (a grown memory detaches the old buffer). */
  heap(): Uint8Array {
    const buf = (wasmMemory() as WebAssembly.Memory).buffer;
    if (this.mem.buffer !== buf) this.mem = new Uint8Array(buf);
    return this.mem;
  }

  /** Address in wasm memory of a shard part's first byte. */
  addr(p: Extract<Part, { kind: 'shard' }>): number {
    return this.ptrs[p.shard] + p.shardOffset;
  }

  /** The destination bytes of part `p` (a fresh view: valid until wasm memory grows). */
  view(p: Part): Uint8Array {
    if (p.kind === 'gap') return p.buf;
    const a = this.addr(p);
    return this.heap().subarray(a, a + (p.end - p.start));
  }

  get fileSize(): number {
    return this.size;
  }
  get dataStart(): number {
    return this.dataOffset;
  }
}

// ------------------------------------------------------------------------------------------------
// The load

export interface HeaderInfo {
  status: 'ok';
  architecture: string;
  name: string;
  fileType: number;
  fileSize: number;
  dataOffset: number;
  tensorCount: number;
  weightBytes: number;
  stateBytes: number;
  kvBytesPerToken: number;
  contextLength: number;
  nVocab: number;
  nLayer: number;
  nEmbd: number;
  unsupported: string[];
  chatTemplate?: string;
}

export interface LoadOutcome {
  loader: ModelLoader;
  info: HeaderInfo;
  nCtx: number;
  source: 'network' | 'cache' | 'network+cache' | 'file';
  sha256: string | null;
  verified: boolean;
  etag: string | null;
  stats: LoadStats;
}

export interface LoadContext {
  source: ByteSource;
  /** The OPFS cache of this model (null: no caching). */
  cache: ModelCache | null;
  cacheKey: string;
  url: string;
  name: string;
  params: LoadParams;
  signal: AbortSignal;
  onProgress: (p: LoadProgress) => void;
  onWarning: (message: string) => void;
  /** Repository for "try owner/repo:QUANT" messages. */
  repo?: string;
  /** True for sources that are local (File/Blob/path): no network phase. */
  local: boolean;
}

interface Chunk {
  index: number;
  start: number;
  end: number;
  received: number;
  parts: Part[];
  done: boolean;
  fromCache: boolean;
  checksum: string | null;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Yields to the event loop (a macrotask, so queued messages such as an abort are handled first).
 * One MessageChannel serves every yield: no 4 ms timer clamping, no allocation per token. Its
 * port is unref'd in Node so an idle engine does not keep the process alive.
 */
type NodePort = MessagePort & { ref?: () => void; unref?: () => void };
let yieldPort: { send: NodePort; recv: NodePort; waiting: Array<() => void> } | null = null;
export function macrotask(): Promise<void> {
  // Node: setImmediate. A MessagePort there drains up to ~1000 queued messages in one go, so timers,
  // sockets and aborts would wait that many tokens (an HTTP client's disconnect, the SDK's timeout).
  const immediate = (globalThis as { setImmediate?: (f: () => void) => unknown }).setImmediate;
  if (immediate) return new Promise((r) => immediate(r));
  if (typeof MessageChannel === 'undefined') return new Promise((r) => setTimeout(r, 0));
  if (!yieldPort) {
    const ch = new MessageChannel();
    const y = { send: ch.port2 as NodePort, recv: ch.port1 as NodePort, waiting: [] as Array<() => void> };
    y.recv.onmessage = () => {
      y.waiting.shift()?.();
      if (!y.waiting.length) y.recv.unref?.();
    };
    y.recv.unref?.();
    y.send.unref?.();
    yieldPort = y;
  }
  const y = yieldPort;
  return new Promise((resolve) => {
    y.waiting.push(resolve);
    y.recv.ref?.();
    y.send.postMessage(0);
  });
}

/** JS heap in use: performance.memory (Chromium pages), process.memoryUsage (Node); 0 where neither exists (Chromium workers). */
function jsHeap(): number {
  const m = (performance as unknown as { memory?: { usedJSHeapSize: number } }).memory;
  if (m) return m.usedJSHeapSize;
  const p = (globalThis as { process?: { memoryUsage?: () => { heapUsed: number } } }).process;
  return p?.memoryUsage ? p.memoryUsage().heapUsed : 0;
}

function fmtGB(n: number): string {
  return n >= GiB / 2 ? `${(n / 1e9).toFixed(2)} GB` : `${(n / 1e6).toFixed(0)} MB`;
}

function errCode(e: unknown): string | undefined {
  return (e as { code?: string })?.code;
}

/** Total wasm memory the model needs with a context of n tokens. */
function memoryNeeded(info: HeaderInfo, n: number): number {
  // Tokenizer (vocab + merges), logits and scratch grow with the vocabulary; a few MiB besides.
  return info.weightBytes + STATE_COPIES * info.stateBytes + info.kvBytesPerToken * n + 8 * MiB + info.nVocab * 320;
}

function pickContext(info: HeaderInfo, params: LoadParams, available: number): number {
  const trained = Math.max(1, info.contextLength || 4096);
  if (params.contextLength) return Math.max(16, Math.min(params.contextLength, trained));
  let n = Math.min(trained, 8192);
  while (n > 512 && memoryNeeded(info, n) > available) n = Math.floor(n / 2);
  return n;
}

function outOfMemory(ctx: LoadContext, info: HeaderInfo, nCtx: number, available: number, limit: number, why: string): LoadError {
  const quant = ctx.params.quant ?? FILE_TYPES[info.fileType];
  const need = memoryNeeded(info, nCtx);
  const budget = available - (need - info.weightBytes);
  const smaller = suggestQuant(quant, info.weightBytes, budget);
  const name = ctx.params.model ?? ctx.name;
  const ctxOnly = info.weightBytes + memoryNeeded(info, 512) - info.weightBytes <= available && ctx.params.contextLength;
  let msg =
    `${name} does not fit in this tab: it needs about ${fmtGB(need)} of memory ` +
    `(${fmtGB(info.weightBytes)} of weights + ${fmtGB(need - info.weightBytes)} for state and a ${nCtx}-token context), ` +
    `but WebAssembly memory here is limited to ${fmtGB(limit)} (${fmtGB(Math.max(0, available))} free)${why ? ` — ${why}` : ''}. `;
  if (ctxOnly) msg += `Use a smaller contextLength, or a smaller quant`;
  else msg += `Use a smaller quant`;
  if (smaller) msg += `, e.g. ${ctx.repo ? `'${ctx.repo}:${smaller}'` : smaller}`;
  msg += '.';
  return new LoadError('out_of_memory', msg);
}

/** Reads the header: grows the prefix until parseHeader says ok. */
async function readHeader(
  first: Uint8Array,
  size: number,
  more: (start: number, end: number) => Promise<Uint8Array>,
  onBytes: (n: number) => void,
): Promise<{ prefix: Uint8Array; info: HeaderInfo }> {
  let prefix = first;
  for (let round = 0; ; round++) {
    let r: { status: string; needed?: number };
    try {
      r = parseHeader(prefix, size);
    } catch (e) {
      throw new LoadError((errCode(e) as ErrorCode) ?? 'bad_gguf', (e as Error).message);
    }
    if (r.status === 'ok') return { prefix, info: r as HeaderInfo };
    if (prefix.length >= size || round > 64) throw new LoadError('bad_gguf', 'the GGUF header is larger than the file');
    const want = Math.min(size, Math.max(r.needed ?? 0, prefix.length * 2));
    const extra = await more(prefix.length, want);
    const grown = new Uint8Array(prefix.length + extra.length);
    grown.set(prefix);
    grown.set(extra, prefix.length);
    prefix = grown;
    onBytes(prefix.length);
  }
}

/**
 * Loads a model: header, fit check, allocation, data (cache / network), verification.
 * On success the returned ModelLoader has every shard filled (call `finish`).
 */
export async function loadModel(ctx: LoadContext): Promise<LoadOutcome> {
  try {
    return await loadModelInner(ctx);
  } finally {
    // Also on failures before anything was cached (404, offline, too large): no empty cache entry.
    await ctx.cache?.release();
  }
}

async function loadModelInner(ctx: LoadContext): Promise<LoadOutcome> {
  const { source, params, signal } = ctx;
  const t0 = performance.now();
  const chunkSize = params.chunkSize ?? 16 * MiB;
  if (!(chunkSize >= 64 * 1024 && chunkSize <= GiB && (chunkSize & (chunkSize - 1)) === 0)) {
    throw new LoadError('bad_request', `chunkSize must be a power of two between 64 KiB and 1 GiB (got ${chunkSize})`);
  }
  const concurrency = Math.max(1, Math.min(16, params.concurrency ?? 3));
  const maxRetries = Math.max(0, params.maxRetries ?? 8);
  const retryDelay = Math.max(1, params.retryDelayMs ?? 250);
  const limit = Math.min(params.memoryLimit ?? WASM_MAX_MEMORY, WASM_MAX_MEMORY);

  const stats: LoadStats = {
    seconds: 0, downloadedBytes: 0, cachedBytes: 0, downloadBytesPerSecond: 0, cacheBytesPerSecond: 0,
    retries: 0, refetchedChunks: 0, peakJsHeapBytes: jsHeap(), wasmMemoryBytes: 0, simd: '',
  };
  let phase: LoadPhase = 'header';
  let loaded = 0;
  let total = 0;
  let lastEmit = 0;
  let netStart = 0; // time of the first data byte from the network
  let netTime = 0;
  let cacheTime = 0;
  const rate = { t: performance.now(), bytes: 0, value: 0 };
  const emit = (force = false) => {
    const now = performance.now();
    stats.peakJsHeapBytes = Math.max(stats.peakJsHeapBytes, jsHeap());
    if (!force && now - lastEmit < 100) return;
    lastEmit = now;
    if (now - rate.t >= 500) {
      const bytes = phase === 'cache' ? stats.cachedBytes : stats.downloadedBytes;
      rate.value = ((bytes - rate.bytes) * 1000) / (now - rate.t);
      rate.t = now;
      rate.bytes = bytes;
    }
    const bps = rate.value;
    ctx.onProgress({
      phase, loaded, total, bytesPerSecond: Math.round(bps),
      etaSeconds: bps > 0 ? (total - loaded) / bps : phase === 'ready' ? 0 : NaN,
      downloaded: stats.downloadedBytes, fromCache: stats.cachedBytes,
    });
  };
  const setPhase = (p: LoadPhase) => {
    if (p === phase) return;
    phase = p;
    rate.t = performance.now();
    rate.bytes = p === 'cache' ? stats.cachedBytes : stats.downloadedBytes;
    emit(true);
  };

  // ---- header: from the cache (valid manifest) or from the source ----------------------------
  let cache = ctx.cache;
  let m = cache?.manifest ?? null;
  let size = 0;
  let etag: string | null = null;
  let oid: string | null = params.sha256?.toLowerCase() ?? null;
  let prefix: Uint8Array | null = null;
  let info: HeaderInfo | null = null;
  let offline = false;
  let networkPrefix = false;

  if (cache && m) {
    // Is the cached file still the file at this URL? One small request (skipped for local files).
    let remote: OpenedSource | null = null;
    if (!ctx.local) {
      const probe = new AbortController();
      const timer = setTimeout(() => probe.abort(new Error('timeout')), 8000);
      const onAbort = () => probe.abort(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        remote = await source.open(Math.min(64 * 1024, m.size), probe.signal);
        stats.downloadedBytes += remote.prefix.length;
      } catch (e) {
        if (signal.aborted) throw e;
        // Offline, or the file is gone / private now: the cached copy is what we have.
        if (e instanceof LoadError && e.code === 'not_found') ctx.onWarning(`${e.message}: using the cached copy`);
        offline = true;
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      }
    }
    const same = !remote || (remote.size === m.size && (!remote.etag || !m.etag || remote.etag === m.etag) && (!remote.oid || !m.oid || remote.oid === m.oid));
    if (!same) {
      ctx.onWarning(`the cached copy of ${ctx.name} is out of date (the file changed on the server): downloading it again`);
      m = null;
    } else {
      // Header bytes from the cache, checked against the manifest.
      await cache.openPieces();
      const hb = new Uint8Array(m.dataOffset);
      const got = cache.read(0, hb);
      if (got === hb.length && new Checksum().update(hb).digest() === m.headerChecksum) {
        size = m.size;
        etag = m.etag ?? remote?.etag ?? null;
        oid = oid ?? m.oid ?? remote?.oid ?? null;
        try {
          const r = parseHeader(hb, size);
          if (r.status === 'ok') {
            prefix = hb;
            info = r as HeaderInfo;
          }
        } catch {
          /* fall through: refetch */
        }
      }
      if (!info) {
        ctx.onWarning(`the cached header of ${ctx.name} is damaged: fetching it again`);
        m = null;
      }
    }
    if (!m && offline) throw new LoadError('offline', `${ctx.name} is not usable from the cache and the network is unreachable`);
  }

  if (!info) {
    if (offline) throw new LoadError('offline', `${ctx.name}: the network is unreachable`);
    emit(true);
    const opened = await withRetries(() => source.open(1 * MiB, signal), source, maxRetries, retryDelay, signal, stats);
    stats.downloadedBytes += ctx.local ? 0 : opened.prefix.length;
    size = opened.size;
    total = size;
    etag = opened.etag;
    oid = oid ?? opened.oid;
    loaded = opened.prefix.length;
    emit();
    const h = await readHeader(
      opened.prefix,
      size,
      async (a, b) => {
        const bytes = await withRetries(() => source.readBytes(a, b, signal), source, maxRetries, retryDelay, signal, stats);
        if (!ctx.local) stats.downloadedBytes += bytes.length;
        return bytes;
      },
      (n) => {
        loaded = n;
        emit();
      },
    );
    prefix = h.prefix;
    info = h.info;
    networkPrefix = true;
    m = null;
  }
  total = size;
  const header: Uint8Array = prefix!;
  if (info.unsupported.length) {
    throw new LoadError('unsupported_type', `this build cannot run tensor(s) ${info.unsupported.slice(0, 4).join(', ')}`);
  }

  // ---- fit check, before any weight byte is read -----------------------------------------------
  const current = (wasmMemory() as WebAssembly.Memory).buffer.byteLength;
  const available = limit - current;
  const nCtx = pickContext(info, params, available);
  if (memoryNeeded(info, nCtx) > available) throw outOfMemory(ctx, info, nCtx, available, limit, '');

  // ---- cache: start a fresh one when there is no usable manifest -------------------------------
  if (cache && !m) {
    const free = await storageFree();
    if (free < size * 1.02) {
      cache.close();
      throw quotaError(size - free);
    }
    await cache.begin({
      key: ctx.cacheKey, url: ctx.url, name: ctx.name, size, etag, oid,
      dataOffset: info.dataOffset, headerChecksum: new Checksum().update(header.subarray(0, info.dataOffset)).digest(),
      chunkSize,
    });
    cache.write(0, header.subarray(0, info.dataOffset));
    cache.saveManifest();
    m = cache.manifest;
  } else if (cache && m && oid && !m.oid) {
    m.oid = oid;
  }
  const C = m?.chunkSize ?? chunkSize;

  // ---- allocate ----------------------------------------------------------------------------------
  let loader: ModelLoader;
  try {
    loader = new ModelLoader(header.subarray(0, info.dataOffset), size);
  } catch (e) {
    cache?.close();
    if (errCode(e) === 'out_of_memory') {
      throw outOfMemory(ctx, info, nCtx, available, limit, 'the allocation failed');
    }
    throw new LoadError((errCode(e) as ErrorCode) ?? 'bad_gguf', (e as Error).message);
  }

  try {
    const plan = loader.plan() as Array<{ shard: number; fileOffset: number; len: number }>;
    const placement = new Placement(plan, info.dataOffset, size, (i) => loader.shardPtr(i));
    const dataStart = info.dataOffset;

    const makeChunks = (): Chunk[] => {
      const chunks: Chunk[] = [];
      for (let k = Math.floor(dataStart / C); k * C < size; k++) {
        const start = Math.max(k * C, dataStart);
        const end = Math.min((k + 1) * C, size);
        if (end > start) chunks.push({ index: k, start, end, received: 0, parts: placement.route(start, end), done: false, fromCache: false, checksum: null });
      }
      return chunks;
    };

    // Fast path: a verified cache with every chunk present needs no sha256 (chunk checksums suffice).
    const allCached = (ms: typeof m) => !!ms && makeChunkIndexes(dataStart, size, C).every((k) => ms.chunks[k] !== undefined);
    const trusted = !!m && m.verified && allCached(m);
    const hashing = !!oid && !trusted;

    let pass = 1;
    let downloadedData = 0;
    let sha256: string | null = null;
    let previous: Map<number, string> | null = null;
    const expected = new Map<number, string>();
    for (;;) {
      const chunks = makeChunks();
      const sha = hashing ? new Sha256() : null;
      let hashNext = 0;
      if (sha) sha.update(header.subarray(0, dataStart));
      loaded = dataStart;

      // Bytes of the data section that came with the header request.
      if (networkPrefix && pass === 1 && header.length > dataStart) {
        for (const c of chunks) {
          if (c.start >= header.length) break;
          const n = Math.min(c.end, header.length) - c.start;
          writeBytes(placement, c, header.subarray(c.start, c.start + n));
          loaded += n;
        }
      }

      const completeChunk = (c: Chunk) => {
        c.done = true;
        const sum = new Checksum();
        for (const p of c.parts) sum.update(placement.view(p));
        const digest = sum.digest();
        if (!c.fromCache && cache && m) {
          // Bytes from the network: into the cache, then recorded.
          for (const p of c.parts) cache.write(p.start, placement.view(p));
          cache.commitChunk(c.index, digest);
        }
        if (previous && previous.get(c.index) !== undefined && previous.get(c.index) !== digest) stats.refetchedChunks++;
        if (trusted && expected.has(c.index) && expected.get(c.index) !== digest) {
          // The re-fetched bytes differ from the verified file's: verify the whole file again.
          if (m) {
            m.verified = false;
            cache?.saveManifest();
          }
          throw new LoadError('integrity', `${ctx.name}: chunk ${c.index} differs from the verified copy`, true);
        }
        c.checksum = digest;
        // sha256 in file order over the completed header of chunks.
        while (hashNext < chunks.length && chunks[hashNext].done) {
          const h = chunks[hashNext++];
          if (sha) {
            for (const p of h.parts) {
              if (p.kind === 'shard') sha.updateFromMemory(placement.addr(p), p.end - p.start);
              else sha.update(p.buf);
            }
          }
          for (const p of h.parts) if (p.kind === 'gap') p.buf = new Uint8Array(0);
        }
      };

      // From the cache: read straight into wasm memory, check the chunk's checksum.
      const fromCache = (c: Chunk): boolean => {
        const want = m?.chunks[c.index];
        if (!cache || !m || want === undefined || pass > 1) return false;
        const t = performance.now();
        const sum = new Checksum();
        let ok = true;
        for (const p of c.parts) {
          const v = placement.view(p);
          if (cache.read(p.start, v) !== v.length) {
            ok = false;
            break;
          }
          sum.update(v);
        }
        cacheTime += performance.now() - t;
        if (ok && sum.digest() === want) {
          c.fromCache = true;
          c.received = c.end - c.start;
          stats.cachedBytes += c.end - c.start;
          return true;
        }
        ctx.onWarning(`cached chunk ${c.index} of ${ctx.name} is damaged or missing: fetching it again`);
        stats.refetchedChunks++;
        expected.set(c.index, want);
        cache.dropChunk(c.index);
        return false;
      };

      const fromNetwork = async (c: Chunk, ac: AbortSignal): Promise<void> => {
        if (source.readInto) {
          for (const p of c.parts) {
            const v = placement.view(p);
            const off = c.start + c.received;
            if (p.end <= off) continue;
            const skip = Math.max(0, off - p.start);
            const n = source.readInto(p.start + skip, v.subarray(skip));
            if (n !== v.length - skip) throw new LoadError('bad_gguf', `${source.description}: unexpected end of file`);
            c.received += n;
            loaded += n;
          }
          return;
        }
        let failures = 0;
        while (c.received < c.end - c.start) {
          const before = c.received;
          try {
            await source.stream(c.start + c.received, c.end, (bytes) => {
              if (!netStart) netStart = performance.now();
              writeBytes(placement, c, bytes);
              loaded += bytes.length;
              if (!ctx.local) {
                stats.downloadedBytes += bytes.length;
                downloadedData += bytes.length;
              }
              emit();
            }, ac);
          } catch (e) {
            if (ac.aborted) throw ac.reason ?? e;
            if (!source.retryable(e)) throw e;
            stats.retries++;
            failures = c.received > before ? 0 : failures + 1;
            if (failures > maxRetries) {
              throw new LoadError('network', `download failed after ${maxRetries} retries: ${(e as Error)?.message ?? e}`);
            }
            await sleep(Math.min(retryDelay * 2 ** Math.max(0, failures - 1), 8000) * (0.75 + Math.random() * 0.5), ac);
          }
        }
      };

      // The scheduler: chunks in file order; cached ones read inline, others fetched `concurrency` at a time.
      const ac = new AbortController();
      const onAbort = () => ac.abort(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      const active = new Map<number, Promise<{ c: Chunk; err?: unknown }>>();
      const WINDOW = Math.max(16, concurrency * 4);
      let next = 0;
      try {
        while (next < chunks.length || active.size) {
          while (next < chunks.length && active.size < concurrency && next - hashNext < WINDOW) {
            const c = chunks[next++];
            if (c.received === 0 && fromCache(c)) {
              setPhase(active.size ? 'download' : 'cache');
              loaded += c.end - c.start;
              completeChunk(c);
              emit();
              await macrotask();
              if (signal.aborted) throw signal.reason;
              continue;
            }
            if (offline) {
              throw new LoadError('offline', `${ctx.name} is only partly cached and the network is unreachable`);
            }
            setPhase(ctx.local ? 'cache' : 'download');
            active.set(c.index, fromNetwork(c, ac.signal).then(() => ({ c }), (err) => ({ c, err })));
          }
          if (!active.size) continue;
          const r = await Promise.race(active.values());
          active.delete(r.c.index);
          if (r.err !== undefined) throw r.err;
          completeChunk(r.c);
          emit();
        }
      } catch (e) {
        ac.abort(e);
        await Promise.allSettled(active.values());
        throw e;
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
      if (netStart) netTime = performance.now() - netStart;

      if (!sha) break;
      setPhase('verify');
      const digest = sha.hex();
      sha.free();
      if (digest === oid) {
        sha256 = digest;
        break;
      }
      if (pass >= 2 || ctx.local) {
        throw new LoadError('integrity', `${ctx.name}: sha256 ${digest} does not match the expected ${oid}` +
          (pass >= 2 ? ' after downloading it twice: the file on the server does not match its checksum' : ''));
      }
      // Corrupted somewhere in transit (or a bad cache): fetch everything again, once.
      ctx.onWarning(`${ctx.name}: sha256 mismatch (${digest}); downloading the file again to repair it`);
      previous = new Map(chunks.map((c) => [c.index, c.checksum ?? '']));
      pass++;
      offline = false;
      // The header is part of the hash: check it against a fresh copy.
      const fresh = await withRetries(() => source.readBytes(0, dataStart, signal), source, maxRetries, retryDelay, signal, stats);
      stats.downloadedBytes += fresh.length;
      if (!equalBytes(fresh, header.subarray(0, dataStart))) {
        throw new LoadError('integrity', `${ctx.name}: the file header was corrupted in transit; load the model again`, true);
      }
    }

    for (const r of plan) loader.markFilled(r.shard);
    stats.seconds = (performance.now() - t0) / 1000;
    stats.downloadBytesPerSecond = netTime > 0 ? Math.round((downloadedData * 1000) / netTime) : 0;
    stats.cacheBytesPerSecond = cacheTime > 0 ? Math.round((stats.cachedBytes * 1000) / cacheTime) : 0;
    stats.wasmMemoryBytes = (wasmMemory() as WebAssembly.Memory).buffer.byteLength;
    stats.peakJsHeapBytes = Math.max(stats.peakJsHeapBytes, jsHeap());

    if (cache && m) {
      m.complete = true;
      if (sha256) m.verified = true;
      m.lastUsed = Date.now();
      cache.saveManifest();
    }
    const src: LoadOutcome['source'] = ctx.local ? 'file' : stats.cachedBytes > 0 ? (downloadedData > 0 ? 'network+cache' : 'cache') : 'network';
    loaded = size;
    phase = 'ready';
    emit(true);
    return {
      loader, info, nCtx, source: src,
      sha256: sha256 ?? (trusted ? m!.oid : null),
      verified: !!sha256 || trusted,
      etag, stats,
    };
  } catch (e) {
    loader.free();
    throw e;
  } finally {
    await cache?.release();
  }
}

function makeChunkIndexes(dataStart: number, size: number, C: number): number[] {
  const out: number[] = [];
  for (let k = Math.floor(dataStart / C); k * C < size; k++) if (Math.min((k + 1) * C, size) > Math.max(k * C, dataStart)) out.push(k);
  return out;
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Copies bytes that continue chunk `c` (at c.start + c.received) to their destinations. */
function writeBytes(placement: Placement, c: Chunk, bytes: Uint8Array): void {
  let pos = c.start + c.received;
  let off = 0;
  const end = Math.min(c.end, pos + bytes.length);
  for (const p of c.parts) {
    if (p.end <= pos) continue;
    if (p.start >= end) break;
    const n = Math.min(p.end, end) - pos;
    const dst = placement.view(p);
    dst.set(bytes.subarray(off, off + n), pos - p.start);
    off += n;
    pos += n;
  }
  c.received = pos - c.start;
}

async function withRetries<T>(
  f: () => Promise<T>,
  source: ByteSource,
  maxRetries: number,
  delay: number,
  signal: AbortSignal,
  stats: LoadStats,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await f();
    } catch (e) {
      if (signal.aborted) throw signal.reason ?? e;
      if (!source.retryable(e) || attempt >= maxRetries) {
        if (e instanceof LoadError) throw e;
        throw new LoadError('network', (e as Error)?.message ?? String(e));
      }
      stats.retries++;
      await sleep(Math.min(delay * 2 ** attempt, 8000) * (0.75 + Math.random() * 0.5), signal);
    }
  }
}

export { CacheError, PIECE_BYTES };
