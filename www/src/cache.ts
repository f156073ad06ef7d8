// The OPFS model cache.
//
//   <OPFS root>/clef-cache/<hash(key)>-<file name>/
//       manifest.json     what this is (url, size, ETag, sha256 oid), the chunk grid, and the
//                         checksum of every chunk that is completely written; `verified` once the
//                         whole file's sha256 matched
//       piece-0.bin …     the file's bytes, PIECE_BYTES each (< 2000 MiB: Chromium's OPFS has
//                         truncated larger files), at their file offsets
//
// The worker writes pieces with createSyncAccessHandle() as chunks arrive and records a chunk in
// the manifest only after its bytes are flushed, so an interrupted download resumes where it
// stopped. Storage trouble never fails a load: the first write that fails (storage full, or any
// other refusal) stops the writing (`stopWriting`) and the load goes on from the network; the
// manifest keeps exactly the chunks stored before, so nothing half-written is ever trusted.
// One load at a time holds a model's cache: see load/lock.ts. A cached model is read back with `read(view into wasm memory, {at})`; every chunk is
// checked against its checksum on the way, and a missing or bad chunk is fetched again (see
// loader.ts). The listing / deleting half works from the page (async OPFS API).

import { ifUnlocked } from './load/lock.js';
import { chunkRange } from './load/plan.js';

export const CACHE_DIR = 'clef-cache';
/** Size of one OPFS file. A multiple of every chunk size (chunks are powers of two ≤ 1 GiB). */
export const PIECE_BYTES = 1 << 30;
/** The grain of a download's progress kept in the cache within a chunk (see Manifest.partial). */
export const PARTIAL_STEP = 2 << 20;
const MANIFEST = 'manifest.json';

export interface Manifest {
  version: 1;
  /** Cache identity: the resolved URL without query (or blob:<name>:<size>:<mtime>). */
  key: string;
  url: string;
  name: string;
  size: number;
  etag: string | null;
  /** sha256 of the whole file (the Hub's LFS oid), when known. */
  oid: string | null;
  /** End of the GGUF header = start of the data section; [0, dataOffset) is stored first. */
  dataOffset: number;
  headerChecksum: string;
  chunkSize: number;
  pieceSize: number;
  /** Checksum (src/checksum.rs; the kind is in the string) of each complete chunk, by chunk index. */
  chunks: Record<string, string>;
  /**
   * Chunks being downloaded: the bytes from the chunk's start already written and flushed, in
   * steps of PARTIAL_STEP, so that an interrupted download resumes within a chunk. Only kept when
   * the whole file will be checked against its sha256 (the prefix has no checksum of its own).
   */
  partial?: Record<string, number>;
  /** The whole file's sha256 matched `oid`. */
  verified: boolean;
  complete: boolean;
  created: number;
  lastUsed: number;
}

/** One entry of `ClefEngine.cache.list()`. */
export interface CachedModel {
  key: string;
  url: string;
  name: string;
  /** File size. */
  size: number;
  /** Bytes stored (complete chunks + header). */
  cachedBytes: number;
  /** Bytes the cache occupies on disk (piece files). */
  diskBytes: number;
  complete: boolean;
  verified: boolean;
  sha256: string | null;
  etag: string | null;
  lastUsed: number;
}

/** Minimal typing of FileSystemSyncAccessHandle (worker-only API; not in the DOM lib). */
export interface SyncHandle {
  read(buffer: ArrayBufferView, options?: { at?: number }): number;
  write(buffer: ArrayBufferView, options?: { at?: number }): number;
  truncate(size: number): void;
  getSize(): number;
  flush(): void;
  close(): void;
}

/**
 * A storage problem: `quota` (storage full), `cache` (the cache is in use, or the storage refused).
 * Thrown by the page API (delete, clear); during a load it only stops the caching (`stopWriting`).
 */
export class CacheError extends Error {
  constructor(public code: 'quota' | 'cache', message: string) {
    super(message);
  }
}

function fnv1a(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  let h2 = 0x1b873593;
  for (let i = s.length - 1; i >= 0; i--) h2 = Math.imul(h2 ^ s.charCodeAt(i), 0x5bd1e995);
  return (h >>> 0).toString(16).padStart(8, '0') + (h2 >>> 0).toString(16).padStart(8, '0');
}

/** Directory name of a cache key. */
export function dirNameOf(key: string): string {
  const base = (key.split(/[/\\]/).pop() || 'model').replace(/[^\w.-]/g, '_').slice(-80);
  return `${fnv1a(key)}-${base}`;
}

export function opfsAvailable(): boolean {
  return typeof navigator !== 'undefined' && !!navigator.storage && typeof navigator.storage.getDirectory === 'function';
}

/** The OPFS root, or null where the browser refuses it (a private window: SecurityError). */
export async function opfsRoot(): Promise<FileSystemDirectoryHandle | null> {
  if (!opfsAvailable()) return null;
  try {
    return await navigator.storage.getDirectory();
  } catch {
    return null;
  }
}

async function cacheRoot(create: boolean): Promise<FileSystemDirectoryHandle | null> {
  const root = await opfsRoot();
  if (!root) return null;
  try {
    return await root.getDirectoryHandle(CACHE_DIR, { create });
  } catch (e) {
    if ((e as DOMException)?.name === 'NotFoundError') return null;
    throw e;
  }
}

function isQuota(e: unknown): boolean {
  const n = (e as DOMException)?.name;
  return n === 'QuotaExceededError' || /quota/i.test(String((e as Error)?.message ?? ''));
}

/** A storage failure as a CacheError: `quota` when the storage is full, else `cache`. */
function storageError(e: unknown, what: string): CacheError {
  if (e instanceof CacheError) return e;
  if (isQuota(e)) return quotaError();
  return new CacheError('cache', `${what}: ${(e as Error)?.message ?? String(e)}`);
}

export function quotaError(needed?: number): CacheError {
  const gb = (n: number) => `${(n / 1e9).toFixed(2)} GB`;
  return new CacheError(
    'quota',
    `not enough storage to cache the model${needed ? ` (${gb(needed)} more needed)` : ''}: ` +
      `delete cached models (ClefEngine.cache.delete) or free disk space, or load with {cache: false}`,
  );
}

function validManifest(m: unknown): m is Manifest {
  const x = m as Manifest;
  return !!x && x.version === 1 && typeof x.key === 'string' && Number.isFinite(x.size) && Number.isFinite(x.dataOffset) &&
    Number.isFinite(x.chunkSize) && x.chunkSize > 0 && x.pieceSize === PIECE_BYTES && x.pieceSize % x.chunkSize === 0 &&
    typeof x.chunks === 'object' && x.chunks !== null && typeof x.headerChecksum === 'string';
}

async function readManifest(dir: FileSystemDirectoryHandle): Promise<Manifest | null> {
  try {
    const f = await (await dir.getFileHandle(MANIFEST)).getFile();
    const m = JSON.parse(await f.text());
    return validManifest(m) ? m : null;
  } catch {
    return null;
  }
}

function cachedBytesOf(m: Manifest): number {
  let n = m.dataOffset;
  for (const k of Object.keys(m.chunks)) {
    const { start, end } = chunkRange(Number(k), m.dataOffset, m.size, m.chunkSize);
    if (end > start) n += end - start;
  }
  return Math.min(n, m.size);
}

/** Lists the cached models (page or worker). */
export async function listCached(): Promise<CachedModel[]> {
  const root = await cacheRoot(false);
  if (!root) return [];
  const out: CachedModel[] = [];
  // @ts-ignore: async iteration of directory handles is in Chromium, not in every TS DOM lib
  for await (const [name, handle] of root.entries() as AsyncIterable<[string, FileSystemHandle]>) {
    if (handle.kind !== 'directory') continue;
    const dir = handle as FileSystemDirectoryHandle;
    const m = await readManifest(dir);
    let diskBytes = 0;
    // @ts-ignore: see above
    for await (const [fname, fh] of dir.entries() as AsyncIterable<[string, FileSystemHandle]>) {
      if (fh.kind !== 'file' || !fname.startsWith('piece-')) continue;
      try {
        diskBytes += (await (fh as FileSystemFileHandle).getFile()).size;
      } catch {
        /* open in a worker right now */
      }
    }
    if (!m) {
      out.push({ key: name, url: '', name, size: 0, cachedBytes: 0, diskBytes, complete: false, verified: false, sha256: null, etag: null, lastUsed: 0 });
      continue;
    }
    out.push({
      key: m.key,
      url: m.url,
      name: m.name,
      size: m.size,
      cachedBytes: cachedBytesOf(m),
      diskBytes,
      complete: m.complete,
      verified: m.verified,
      sha256: m.oid,
      etag: m.etag,
      lastUsed: m.lastUsed,
    });
  }
  return out.sort((a, b) => b.lastUsed - a.lastUsed);
}

/** The message of a cache that a load is using. */
const inUse = (key: string) =>
  new CacheError('cache', `the cached model '${key}' is in use: it is being loaded (in this or another tab); delete it once the load has finished, or unload it`);

/**
 * Deletes the cache of one model (by cache key, or directory name from a broken entry). Throws a
 * `cache` CacheError while a load uses it (load/lock.ts; else the open files refuse removal).
 */
export async function deleteCached(key: string): Promise<boolean> {
  const root = await cacheRoot(false);
  if (!root) return false;
  const r = await ifUnlocked(key, async () => {
    for (const name of [dirNameOf(key), key]) {
      try {
        await root.removeEntry(name, { recursive: true });
        return true;
      } catch (e) {
        const n = (e as DOMException)?.name;
        if (n === 'NotFoundError' || n === 'TypeError') continue;
        if (n === 'NoModificationAllowedError' || n === 'InvalidModificationError') throw inUse(key);
        throw storageError(e, `deleting the cached model '${key}'`);
      }
    }
    return false;
  });
  if (!r) throw inUse(key);
  return r.value;
}

/**
 * Deletes every cached model. Models being loaded are kept: a `cache` CacheError names them after
 * the others are deleted.
 */
export async function clearCache(): Promise<void> {
  const root = await cacheRoot(false);
  if (!root) return;
  const keys: string[] = [];
  // @ts-ignore: async iteration of directory handles
  for await (const [name, handle] of root.entries() as AsyncIterable<[string, FileSystemHandle]>) {
    if (handle.kind === 'directory') keys.push((await readManifest(handle as FileSystemDirectoryHandle))?.key ?? name);
    else await root.removeEntry(name).catch(() => {});
  }
  const busy: string[] = [];
  for (const k of keys) {
    try {
      await deleteCached(k);
    } catch (e) {
      if (!(e instanceof CacheError)) throw e;
      busy.push(k);
    }
  }
  if (busy.length) {
    throw new CacheError('cache', `kept ${busy.map((k) => `'${k}'`).join(', ')}: in use by a load (in this or another tab); every other cached model was deleted`);
  }
  const top = await opfsRoot();
  await top?.removeEntry(CACHE_DIR).catch(() => {}); // only when empty (another load may have started)
}

/** Asks the browser to keep the cache under storage pressure (page only; false elsewhere). */
export async function persistCache(): Promise<boolean> {
  try {
    if (typeof navigator === 'undefined' || !navigator.storage?.persist) return false;
    if (await navigator.storage.persisted?.()) return true;
    return await navigator.storage.persist();
  } catch {
    return false;
  }
}

/**
 * One model's cache, open for reading and writing with synchronous access handles (worker only).
 * `manifest` is null until `begin()` (no usable cache was found).
 */
export class ModelCache {
  private pieces: SyncHandle[] = [];
  private manifestHandle: SyncHandle | null = null;
  private closed = false;
  /** Why writing stopped (null: still writing). Reads go on; writes are skipped from then on. */
  failure: CacheError | null = null;
  /** Told once, when writing stops (the worker turns it into a warning). */
  onStop: ((e: CacheError) => void) | null = null;

  private constructor(
    private dir: FileSystemDirectoryHandle,
    public manifest: Manifest | null,
    public readonly key: string,
  ) {}

  /**
   * Opens (creating) the cache directory of `key` and reads its manifest (null if absent, broken
   * or for another key). Returns null where OPFS or sync handles are unavailable.
   */
  static async open(key: string): Promise<ModelCache | null> {
    const root = await cacheRoot(true);
    if (!root) return null;
    const dir = await root.getDirectoryHandle(dirNameOf(key), { create: true });
    const fh = await dir.getFileHandle(MANIFEST, { create: true });
    if (typeof (fh as unknown as { createSyncAccessHandle?: unknown }).createSyncAccessHandle !== 'function') return null;
    let m = await readManifest(dir);
    if (m && m.key !== key) m = null;
    const c = new ModelCache(dir, m, key);
    try {
      c.manifestHandle = await c.syncHandle(MANIFEST);
    } catch (e) {
      throw new CacheError('cache', `the cache of '${key}' is locked (is the model loading in another tab?): ${(e as Error).message}`);
    }
    return c;
  }

  private async syncHandle(name: string): Promise<SyncHandle> {
    const fh = await this.dir.getFileHandle(name, { create: true });
    return (await (fh as unknown as { createSyncAccessHandle(): Promise<SyncHandle> }).createSyncAccessHandle()) as SyncHandle;
  }

  /** Opens the piece files for the manifest's size (after `begin`, or on a valid manifest). */
  async openPieces(): Promise<void> {
    const n = pieceCount(this.manifest!);
    for (let i = this.pieces.length; i < n; i++) this.pieces.push(await this.syncHandle(`piece-${i}.bin`));
  }

  /** Starts a fresh cache (drops whatever was there). */
  async begin(m: Omit<Manifest, 'version' | 'chunks' | 'verified' | 'complete' | 'created' | 'lastUsed' | 'pieceSize'>): Promise<void> {
    this.closePieces();
    // Remove old pieces (a different file, or a broken manifest).
    const old: string[] = [];
    // @ts-ignore: async iteration of directory handles
    for await (const [name] of this.dir.entries() as AsyncIterable<[string, FileSystemHandle]>) if (name.startsWith('piece-')) old.push(name);
    for (const name of old) await this.dir.removeEntry(name).catch(() => {});
    const now = Date.now();
    this.manifest = { version: 1, ...m, pieceSize: PIECE_BYTES, chunks: {}, verified: false, complete: false, created: now, lastUsed: now };
    this.saveManifest();
    await this.openPieces();
  }

  /** Reads `dest.length` bytes at `fileOffset`; returns the number of bytes actually read. */
  read(fileOffset: number, dest: Uint8Array): number {
    return readPieces(this.pieces, this.manifest!.pieceSize, fileOffset, dest);
  }

  /**
   * Lets other workers read the pieces (a split model's shard workers reading their own parts:
   * load/pull.ts): 'shared' — reopened read-only, which others can open too (Chromium); 'turns' —
   * closed, for every worker to hold one piece at a time (`openTurns`: Firefox, which takes even
   * read-only handles exclusively and refuses a second with NoModificationAllowedError). Null
   * where neither works; the pieces are then open as before. `ownPieces` undoes it.
   */
  async share(): Promise<PieceSharing | null> {
    this.closePieces();
    try {
      const m = this.manifest!;
      for (let i = 0; i < pieceCount(m); i++) this.pieces.push(await openPiece(this.dir, i, 'read-only'));
      (await openPiece(this.dir, 0, 'read-only')).close(); // a second reader must be let in
      return 'shared';
    } catch {
      this.closePieces();
      if (webLocks()) return 'turns';
      await this.openPieces();
      return null;
    }
  }

  /** Back to this worker's own (writable) handles after `share`. */
  async ownPieces(): Promise<void> {
    this.closePieces();
    await this.openPieces();
  }

  /** The directory name of this cache (what other workers open: `openReadOnly`). */
  get dirName(): string {
    return dirNameOf(this.key);
  }

  /** Whether writes still happen (false after `stopWriting`). */
  get writing(): boolean {
    return !this.failure;
  }

  /**
   * Stops writing for the rest of this load (the first failure is kept and told to `onStop`).
   * What the manifest already records stays valid; the bytes of a chunk not yet recorded are ignored.
   */
  stopWriting(e: CacheError): void {
    if (this.failure) return;
    this.failure = e;
    this.onStop?.(e);
  }

  /** Runs a write; a failure stops the writing instead of reaching the caller. */
  private guarded(what: string, f: () => void): boolean {
    if (this.failure) return false;
    try {
      f();
      return true;
    } catch (e) {
      this.stopWriting(storageError(e, what));
      return false;
    }
  }

  /** Writes `src` at `fileOffset` (a failure stops the writing: see `stopWriting`). */
  write(fileOffset: number, src: Uint8Array): void {
    const P = this.manifest!.pieceSize;
    this.guarded('writing the cache', () => {
      let done = 0;
      while (done < src.length) {
        const off = fileOffset + done;
        const p = Math.floor(off / P);
        const at = off - p * P;
        const n = Math.min(src.length - done, P - at);
        const w = this.pieces[p].write(src.subarray(done, done + n), { at });
        // Short, or Chromium's error code returned as a count (base::File's NO_SPACE, -8, read as
        // an unsigned 4294967288) instead of a thrown QuotaExceededError.
        if (w !== n) throw new DOMException(`wrote ${w} of ${n} bytes`, 'QuotaExceededError');
        done += n;
      }
    });
  }

  /** Flushes the pieces, then records chunk `index` as complete (not after a failed write). */
  commitChunk(index: number, checksum: string): void {
    if (!this.guarded('flushing the cache', () => this.pieces.forEach((h) => h.flush()))) return;
    this.manifest!.chunks[index] = checksum;
    if (this.manifest!.partial) delete this.manifest!.partial[index];
    this.saveManifest();
  }

  /** Flushes the pieces, then records the first `bytes` of chunk `index` as written. */
  commitPartial(index: number, bytes: number): void {
    if (!this.guarded('flushing the cache', () => this.pieces.forEach((h) => h.flush()))) return;
    (this.manifest!.partial ??= {})[index] = bytes;
    this.saveManifest();
  }

  /** Forgets chunk `index` (found corrupt). */
  dropChunk(index: number): void {
    if (!this.writing) return;
    delete this.manifest!.chunks[index];
    if (this.manifest!.partial) delete this.manifest!.partial[index];
    this.saveManifest();
  }

  /**
   * Writes the manifest over the old one, then cuts it to length: a failed write (storage full)
   * leaves the old manifest whole, or a broken one that is read as none — never a wrong one.
   */
  saveManifest(): void {
    const h = this.manifestHandle;
    if (!h || !this.manifest) return;
    const bytes = new TextEncoder().encode(JSON.stringify(this.manifest));
    this.guarded('writing the cache manifest', () => {
      const w = h.write(bytes, { at: 0 });
      if (w !== bytes.length) throw new DOMException(`wrote ${w} of ${bytes.length} bytes`, 'QuotaExceededError');
      h.truncate(bytes.length);
      h.flush();
    });
  }

  private closePieces(): void {
    for (const h of this.pieces) {
      try {
        h.flush();
      } catch {
        /* read-only, or closed */
      }
      try {
        h.close();
      } catch {
        /* already closed */
      }
    }
    this.pieces = [];
  }

  /**
   * Releases the handles and, when nothing was ever stored (the load failed before the header was
   * known: 404, network, out of memory …), removes the empty directory so it never shows up as a
   * cached model.
   */
  async release(): Promise<void> {
    this.close();
    if (this.manifest) return;
    const root = await cacheRoot(false).catch(() => null);
    await root?.removeEntry(dirNameOf(this.key), { recursive: true }).catch(() => {});
  }

  /** Releases the sync handles (the cache can then be listed / deleted from the page). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.closePieces();
    try {
      this.manifestHandle?.close();
    } catch {
      /* already closed */
    }
    this.manifestHandle = null;
  }
}

function pieceCount(m: Pick<Manifest, 'size' | 'pieceSize'>): number {
  return Math.max(1, Math.ceil(m.size / m.pieceSize));
}

/** Bytes [fileOffset, +dest.length) from piece files of `pieceSize` bytes; the number of bytes read. */
function readPieces(pieces: SyncHandle[], pieceSize: number, fileOffset: number, dest: Uint8Array): number {
  let done = 0;
  while (done < dest.length) {
    const off = fileOffset + done;
    const p = Math.floor(off / pieceSize);
    const at = off - p * pieceSize;
    const n = Math.min(dest.length - done, pieceSize - at);
    const h = pieces[p];
    if (!h) return done;
    const got = h.read(dest.subarray(done, done + n), { at });
    done += got;
    if (got < n) return done;
  }
  return done;
}

async function openPiece(dir: FileSystemDirectoryHandle, i: number, mode: 'read-only'): Promise<SyncHandle> {
  const fh = await dir.getFileHandle(`piece-${i}.bin`);
  return (await (fh as unknown as { createSyncAccessHandle(o: { mode: string }): Promise<SyncHandle> }).createSyncAccessHandle({ mode })) as SyncHandle;
}

/**
 * Read-only access, from any worker, to the pieces of the cache in directory `dirName` (whose
 * owner has called `ModelCache.share` and got 'shared'). Null where OPFS is unavailable.
 */
export async function openReadOnly(dirName: string, size: number, pieceSize: number): Promise<{ read(fileOffset: number, dest: Uint8Array): number; close(): void } | null> {
  const root = await cacheRoot(false);
  if (!root) return null;
  const dir = await root.getDirectoryHandle(dirName);
  const pieces: SyncHandle[] = [];
  try {
    for (let i = 0; i < pieceCount({ size, pieceSize }); i++) pieces.push(await openPiece(dir, i, 'read-only'));
  } catch (e) {
    for (const h of pieces) h.close();
    throw e;
  }
  return {
    read: (fileOffset, dest) => readPieces(pieces, pieceSize, fileOffset, dest),
    close: () => pieces.forEach((h) => h.close()),
  };
}

/**
 * How several workers read a cache's pieces at once (`ModelCache.share`, load/pull.ts): every
 * worker holding every piece read-only ('shared'), or one at a time per piece ('turns').
 */
export type PieceSharing = 'shared' | 'turns';

/**
 * A cache's pieces, each held by one worker at a time (`openTurns`). Several workers reading their
 * parts of one file in turns, piece by piece, read it about as fast as where they may share: a
 * 3 GiB file in three pieces, into fresh wasm memory, by 2 workers in Firefox 153 0.88–0.97 s, by
 * one 1.6–3.1 s (BENCHMARKS.md).
 */
export interface PieceTurns {
  /** File bytes per piece. */
  pieceSize: number;
  /**
   * Runs `f` with piece `p` open to this worker alone (`read` at an offset within the piece):
   * once no other worker holds it when `wait`, else only if none does now. Whether `f` ran.
   */
  take(p: number, wait: boolean, f: (read: (pieceOffset: number, dest: Uint8Array) => number) => void): Promise<boolean>;
}

/** The Web Locks API (window and worker; not Node's), where there is one. */
function webLocks(): LockManager | null {
  return (typeof navigator !== 'undefined' && navigator.locks) || null;
}

/**
 * Turns at the pieces of the cache in directory `dirName` (whose owner has called
 * `ModelCache.share` and got 'turns'), from any worker of this origin: a piece is held under a Web
 * Lock of its own while read through an access handle, then closed. Null where OPFS or the Web
 * Locks API is unavailable.
 */
export async function openTurns(from: { dirName: string; pieceSize: number }): Promise<PieceTurns | null> {
  const locks = webLocks();
  const root = await cacheRoot(false);
  if (!root || !locks) return null;
  const dir = await root.getDirectoryHandle(from.dirName);
  return {
    pieceSize: from.pieceSize,
    take: (p, wait, f) =>
      // Not load/lock.ts's lock of the whole cache (which the load holds throughout): one per piece.
      locks.request(`clef-cache-piece:${from.dirName}/${p}`, { ifAvailable: !wait }, async (lock) => {
        if (!lock) return false;
        const h = await openPiece(dir, p, 'read-only');
        try {
          f((at, dest) => h.read(dest, { at }));
        } finally {
          h.close();
        }
        return true;
      }),
  };
}

/** Free storage for the cache (bytes; Infinity when unknown). */
export async function storageFree(): Promise<number> {
  try {
    const e = await navigator.storage.estimate();
    if (e.quota === undefined || e.usage === undefined) return Infinity;
    return e.quota - e.usage;
  } catch {
    return Infinity;
  }
}
