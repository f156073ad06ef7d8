// Byte sources: where a GGUF's bytes come from.
//
//   HttpSource      the Hub, a CDN, any server with Range requests (the only one that fails
//                   transiently: its errors are HttpErrors the retry policy looks at)
//   BlobSource      a File / Blob (drag and drop)
//   SyncFileSource  a file descriptor (Node)
//
// HttpSource guards every request with two timers (retry.ts RetryPolicy): no response headers
// within `headerTimeoutMs` (connect + the server's think time), or no body bytes for
// `idleTimeoutMs`, aborts that request with a retryable HttpError; bytes handed to the sink before
// that stay valid, so the caller resumes from the last byte received.

import { HttpError, LoadError } from './errors.js';
import { parseRetryAfter, retryableStatus } from './retry.js';

const MiB = 1 << 20;

export interface OpenedSource {
  size: number;
  etag: string | null;
  /** sha256 of the whole file if the server said (x-linked-etag / a 64-hex ETag). */
  oid: string | null;
  /** The first bytes of the file (at least what was asked, unless the file is shorter). */
  prefix: Uint8Array;
}

export interface Timeouts {
  headerTimeoutMs: number;
  idleTimeoutMs: number;
}

export interface ByteSource {
  readonly description: string;
  /** Reads the first `n` bytes and learns the file's size and identity. */
  open(n: number, signal: AbortSignal): Promise<OpenedSource>;
  /** Bytes [start, end) (a later part of the header). */
  readBytes(start: number, end: number, signal: AbortSignal): Promise<Uint8Array>;
  /**
   * Streams bytes [start, end) in order to `sink`, whose views are valid only during the call (the
   * sink copies them). Rejects when the transfer breaks (what was given to `sink` stays valid: the
   * caller resumes after it).
   */
  stream(start: number, end: number, sink: (bytes: Uint8Array) => void, signal: AbortSignal): Promise<void>;
  /** Synchronous read straight into `dest` (files in Node); returns bytes read. */
  readInto?(offset: number, dest: Uint8Array): number;
  /** A file path other workers can open themselves (Node; load/pull.ts). */
  readonly filePath?: string;
  /** Whether a failure may go away by retrying. */
  retryable(e: unknown): boolean;
  /** Asks the source for the sha256 by other means (the Hub API). */
  lookupOid?(signal: AbortSignal): Promise<{ oid: string | null; size: number | null }>;
  /** Sets the request timeouts (network sources). */
  useTimeouts?(t: Timeouts): void;
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

/** The bytes one BYOB read may fill (what it returns is what has arrived: a network chunk, often less). */
const READ_BUFFER = MiB;

/** A BYOB reader of `body` where it is a byte stream (fetch bodies in Chromium, Firefox, Node 20), else null. */
function byobReader(body: ReadableStream<Uint8Array>): ReadableStreamBYOBReader | null {
  try {
    return body.getReader({ mode: 'byob' });
  } catch {
    return null; // not a byte stream: the default reader
  }
}

function concat(pieces: Uint8Array[], n: number): Uint8Array {
  if (pieces.length === 1) return pieces[0];
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of pieces) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** One HTTP exchange: the response, and the controller that ends it (caller's abort, or a timer). */
interface Exchange {
  res: Response;
  ac: AbortController;
  /** Why our own timer aborted it (null: it did not). */
  timedOut: string | null;
  done(): void;
}

const DEFAULT_TIMEOUTS: Timeouts = { headerTimeoutMs: 30_000, idleTimeoutMs: 30_000 };

/** HTTP(S) with Range requests (the Hub, a CDN, any static server that supports Range). */
export class HttpSource implements ByteSource {
  readonly description: string;
  private etag: string | null = null;
  private timeouts: Timeouts = DEFAULT_TIMEOUTS;
  /** Range requests answered with 200 and the whole file (once may be a proxy's hiccup). */
  private ignoredRanges = 0;

  constructor(
    private url: string,
    private hub?: { hubUrl: string; repo: string; revision: string; file: string },
  ) {
    this.description = url;
  }

  useTimeouts(t: Timeouts): void {
    this.timeouts = t;
  }

  /** Starts a Range request for [start, end): resolves once its headers are in and acceptable. */
  private async get(start: number, end: number, signal: AbortSignal): Promise<Exchange> {
    const ac = new AbortController();
    const onAbort = () => ac.abort(signal.reason);
    if (signal.aborted) throw signal.reason;
    signal.addEventListener('abort', onAbort, { once: true });
    const x: Exchange = { res: null as unknown as Response, ac, timedOut: null, done: () => signal.removeEventListener('abort', onAbort) };
    const headerMs = this.timeouts.headerTimeoutMs;
    const timer = setTimeout(() => {
      x.timedOut = `no response within ${fmtSeconds(headerMs)}`;
      ac.abort(new HttpError(0, x.timedOut));
    }, headerMs);
    const fail = (e: unknown): never => {
      x.done();
      x.res?.body?.cancel().catch(() => {});
      throw e;
    };
    try {
      x.res = await fetch(this.url, { headers: { Range: `bytes=${start}-${end - 1}` }, signal: ac.signal, cache: 'no-store', redirect: 'follow' });
    } catch (e) {
      if (signal.aborted) fail(signal.reason ?? e);
      if (x.timedOut) fail(new HttpError(0, `${this.url}: ${x.timedOut}`));
      fail(await this.fetchFailure(e, signal));
    } finally {
      clearTimeout(timer);
    }
    const res = x.res;
    if (res.status === 404 || res.status === 401 || res.status === 403 || res.status === 410) {
      fail(new LoadError('not_found', `${this.url}: HTTP ${res.status} ${res.statusText || ''}`.trim() +
        (res.status === 401 || res.status === 403 ? ' (a gated or private repository needs a token)' : '')));
    }
    if (res.status === 416) {
      // A range that starts at 0 is unsatisfiable only when the file is empty.
      if (start === 0) fail(new LoadError('bad_gguf', `${this.url} is empty (0 bytes): not a GGUF file`));
      fail(new LoadError('network', `${this.url}: the server refused the byte range ${start}-${end - 1} (HTTP 416)`));
    }
    if (!res.ok) {
      fail(new HttpError(res.status, `${this.url}: HTTP ${res.status} ${res.statusText || ''}`.trim(), parseRetryAfter(res.headers.get('retry-after'))));
    }
    if (res.status === 200 && !(start === 0 && Number(res.headers.get('content-length')) <= end)) {
      // Once may be a proxy's hiccup (retried); twice, the server does not do Range requests.
      if (++this.ignoredRanges > 1) {
        fail(new LoadError('network', `${this.url}: the server does not support HTTP Range requests (it sent the whole file for a byte range)`));
      }
      fail(new HttpError(0, `${this.url}: the server ignored the byte range ${start}-${end - 1} (HTTP 200 with the whole file)`));
    }
    if (res.status === 206) {
      const cr = /bytes\s+(\d+)-(\d+)\/(\d+|\*)/i.exec(res.headers.get('content-range') ?? '');
      if (cr && Number(cr[1]) !== start) fail(new HttpError(0, `${this.url}: the server answered range ${cr[1]}- for ${start}-`));
    }
    const etag = cleanEtag(res.headers.get('x-linked-etag')) ?? cleanEtag(res.headers.get('etag'));
    if (this.etag && etag && etag !== this.etag) {
      fail(new LoadError('network', `${this.url} changed on the server while loading (ETag ${this.etag} → ${etag}); load again`));
    }
    return x;
  }

  /**
   * A fetch that threw (no HTTP answer): a redirect loop is named as such; anything else is a
   * retryable network error. Browsers say only "Failed to fetch", so a redirect that could not be
   * followed is recognised by asking once more without following it.
   */
  private async fetchFailure(e: unknown, signal: AbortSignal): Promise<Error> {
    const cause = String((e as { cause?: { message?: string } })?.cause?.message ?? '');
    if (/redirect/i.test(cause)) return new LoadError('network', `${this.url}: too many redirects (a redirect loop): ${cause}`);
    const why = `${(e as Error)?.message ?? e}${cause ? ` (${cause})` : ''}`;
    const ac = new AbortController();
    const onAbort = () => ac.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => ac.abort(), this.timeouts.headerTimeoutMs);
    try {
      const probe = await fetch(this.url, { headers: { Range: 'bytes=0-0' }, redirect: 'manual', signal: ac.signal, cache: 'no-store' });
      probe.body?.cancel().catch(() => {});
      if (probe.type === 'opaqueredirect' || (probe.status >= 300 && probe.status < 400)) {
        return new HttpError(0, `${this.url}: following its redirect failed (a redirect loop, or the redirect target is unreachable): ${why}`);
      }
    } catch {
      /* unreachable (or timed out): a plain network error */
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    }
    if (signal.aborted) return signal.reason;
    return new HttpError(0, `network error fetching ${this.url}: ${why}`);
  }

  /**
   * Reads up to `limit` body bytes into `sink`, aborting the exchange when no byte arrives for
   * `idleTimeoutMs`. `keep`: the sink keeps the buffers; else it gets views of one buffer (1 MiB,
   * freed when the response ends) that the body is read into again and again (a byte stream's
   * BYOB reader; each read returns what has arrived, as the default reader does), valid only
   * during the call.
   * Returns the bytes read; rejects with a retryable HttpError on a drop or a stall.
   *
   * Why one buffer: the default reader hands over a fresh buffer per network chunk — thousands
   * for a 5 GiB file — and what the collector later had to sweep of them, on a worker whose
   * cores are busy computing, stalled the first answer after a load (~0.4 s in two yields;
   * BENCHMARKS.md, "A download that leaves no garbage"); the loads themselves ran faster too.
   */
  private async read(x: Exchange, what: string, limit: number, sink: (b: Uint8Array) => void, keep: boolean, signal: AbortSignal): Promise<number> {
    const body = x.res.body;
    if (!body) throw new HttpError(0, `${this.url}: empty response body`);
    const byob = keep ? null : byobReader(body);
    const reader: ReadableStreamDefaultReader<Uint8Array> | ReadableStreamBYOBReader = byob ?? body.getReader();
    const idleMs = this.timeouts.idleTimeoutMs;
    let got = 0;
    let buf: ArrayBuffer | null = byob && new ArrayBuffer(Math.min(READ_BUFFER, limit));
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        x.timedOut = `no data for ${fmtSeconds(idleMs)}`;
        x.ac.abort(new HttpError(0, x.timedOut));
      }, idleMs);
    };
    try {
      arm();
      if (byob && buf) {
        let space: ArrayBuffer = buf;
        while (got < limit) {
          const { done, value } = await byob.read(new Uint8Array(space, 0, Math.min(space.byteLength, limit - got)));
          if (value) {
            space = buf = value.buffer as ArrayBuffer; // the same memory, handed back
            if (value.length) {
              arm();
              sink(value);
              got += value.length;
            }
          }
          if (done) break;
        }
        return got;
      }
      const chunks = reader as ReadableStreamDefaultReader<Uint8Array>;
      for (;;) {
        const { done, value } = await chunks.read();
        if (done) break;
        arm();
        const take = Math.min(value.length, limit - got);
        if (take > 0) sink(take === value.length ? value : value.subarray(0, take));
        got += take;
        if (!keep) release(value);
        if (got >= limit) break;
      }
    } catch (e) {
      if (signal.aborted) throw signal.reason ?? e;
      if (x.timedOut) throw new HttpError(0, `${this.url}: ${x.timedOut} after ${got} bytes of ${what}`);
      throw new HttpError(0, `${this.url}: connection dropped after ${got} bytes of ${what}: ${(e as Error)?.message ?? e}`);
    } finally {
      clearTimeout(timer);
      reader.cancel().catch(() => {});
      x.done();
      if (buf?.byteLength) release(new Uint8Array(buf)); // freed now, not at the next collection (0: a read still holds it)
    }
    return got;
  }

  async open(n: number, signal: AbortSignal): Promise<OpenedSource> {
    const x = await this.get(0, n, signal);
    const h = x.res.headers;
    let size = NaN;
    const cr = /\/(\d+)\s*$/.exec(h.get('content-range') ?? '');
    if (cr) size = Number(cr[1]);
    if (!Number.isFinite(size) && h.get('x-linked-size')) size = Number(h.get('x-linked-size'));
    if (!Number.isFinite(size) && x.res.status === 200) size = Number(h.get('content-length'));
    const pieces: Uint8Array[] = [];
    const got = await this.read(x, `bytes 0-${n - 1}`, n, (b) => pieces.push(b), true, signal);
    const prefix = concat(pieces, got);
    if (Number.isFinite(size) && got < Math.min(n, size)) {
      throw new HttpError(0, `${this.url}: short response (${got} of ${Math.min(n, size)} bytes)`);
    }
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
    const x = await this.get(start, end, signal);
    const pieces: Uint8Array[] = [];
    const got = await this.read(x, `bytes ${start}-${end - 1}`, end - start, (b) => pieces.push(b), true, signal);
    if (got < end - start) throw new HttpError(0, `${this.url}: short response (${got} of ${end - start} bytes)`);
    return concat(pieces, got);
  }

  async stream(start: number, end: number, sink: (bytes: Uint8Array) => void, signal: AbortSignal): Promise<void> {
    const x = await this.get(start, end, signal);
    const got = await this.read(x, `bytes ${start}-${end - 1}`, end - start, sink, false, signal);
    if (got < end - start) throw new HttpError(0, `${this.url}: short response: ${got} of ${end - start} bytes of range ${start}-${end - 1}`);
  }

  retryable(e: unknown): boolean {
    if (e instanceof LoadError) return e.retryable;
    if (e instanceof HttpError) return retryableStatus(e.status);
    return e instanceof TypeError;
  }

  /** The Hub API (`/api/models/{repo}/tree/{revision}`) knows each LFS file's sha256 and size. */
  async lookupOid(signal: AbortSignal): Promise<{ oid: string | null; size: number | null }> {
    if (!this.hub) return { oid: null, size: null };
    const { hubUrl, repo, revision, file } = this.hub;
    const dir = file.includes('/') ? '/' + file.slice(0, file.lastIndexOf('/')).split('/').map(encodeURIComponent).join('/') : '';
    const ac = new AbortController();
    const onAbort = () => ac.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    // One try, bounded by both timeouts: the sha256 is a bonus (verification), not a must.
    const timer = setTimeout(() => ac.abort(new HttpError(0, 'timeout')), this.timeouts.headerTimeoutMs + this.timeouts.idleTimeoutMs);
    try {
      const res = await fetch(`${hubUrl.replace(/\/+$/, '')}/api/models/${repo}/tree/${encodeURIComponent(revision)}${dir}`, { signal: ac.signal });
      if (!res.ok) return { oid: null, size: null };
      const list = (await res.json()) as Array<{ path: string; size?: number; lfs?: { oid?: string; size?: number } }>;
      const e = Array.isArray(list) ? list.find((x) => x.path === file) : undefined;
      const oid = e?.lfs?.oid?.toLowerCase() ?? null;
      return { oid: oid && HEX64.test(oid) ? oid : null, size: e?.lfs?.size ?? e?.size ?? null };
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    }
  }
}

function fmtSeconds(ms: number): string {
  return ms >= 1000 ? `${+(ms / 1000).toFixed(1)} s` : `${ms} ms`;
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
    readonly filePath?: string,
  ) {}
  async open(n: number): Promise<OpenedSource> {
    const prefix = new Uint8Array(Math.min(n, this.size));
    readFully(this.read, 0, prefix);
    return { size: this.size, etag: null, oid: null, prefix };
  }
  async readBytes(start: number, end: number): Promise<Uint8Array> {
    const b = new Uint8Array(end - start);
    readFully(this.read, start, b);
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
    return readFully(this.read, offset, dest);
  }
  retryable(): boolean {
    return false;
  }
}

/** Fills `dest` from `offset` through `read` (which may return fewer bytes); returns the bytes read (fewer only at the end of the file). */
export function readFully(read: (offset: number, dest: Uint8Array) => number, offset: number, dest: Uint8Array): number {
  let done = 0;
  while (done < dest.length) {
    const n = read(offset + done, dest.subarray(done));
    if (n <= 0) break;
    done += n;
  }
  return done;
}
