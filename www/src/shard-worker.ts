// A shard worker (dist/clef-shard.js): holds one shard of a model split across workers — its own
// wasm instance and memory — and runs the stages the engine worker sends it (www/src/shards.ts).
// In the browser a module Web Worker started by the engine worker; in Node a worker_threads
// Worker. Messages: protocol.ts ShardRequest / ShardResponse. The wasm module arrives compiled
// (`init`): the engine worker compiles it once for all.
//
// The engine worker also computes shard 0 itself (shards.ts `localShard`): it imports this bundle —
// its own copy of the wasm-bindgen glue, so a second instance with its own memory — and drives
// the same host by direct calls instead of messages.

import { initSync, kernelTrials, ModelLoader, setGemmProfile, wasmMemory, type WasmShard } from '../pkg/clef_web.js';
import { openReadOnly } from './cache.js';
import { serve } from './exchange.js';
import { pullChunks, pullInTurns, type WorkerPull } from './load/pull.js';
import { readFully } from './load/sources.js';
import type { CopyOp, ErrorInfo, LmRowsPart, PullFrom, ShardRequest, ShardResponse, ShardResults } from './protocol.js';

/** A Node built-in, imported at run time (not bundled; never reached in browsers). */
const importNode = (m: string): Promise<any> => import(/* @vite-ignore */ m); // eslint-disable-line @typescript-eslint/no-explicit-any

type Post = (msg: ShardResponse, transfer?: Transferable[]) => void;

export function errorInfo(e: unknown): ErrorInfo {
  if (typeof WebAssembly !== 'undefined' && e instanceof WebAssembly.RuntimeError) {
    return { code: 'worker_crashed', fatal: true, message: `a shard worker crashed (${e.message}); it may have run out of memory` };
  }
  const code = (e as { code?: unknown })?.code;
  const message = (e as Error)?.message ?? String(e);
  const known = ['bad_request', 'out_of_memory', 'bad_gguf', 'wrong_architecture', 'unsupported_type', 'context_full'];
  return { code: typeof code === 'string' && known.includes(code) ? (code as ErrorInfo['code']) : 'internal', message };
}

/**
 * What a shard worker does: handles requests; `runStage` is one stage computed now (shared
 * exchange, local shard), its output a view of the shard's wasm memory, valid until the shard's
 * next call: copied into the exchange or handed to the engine (another instance) at once, never
 * transferred — so a prompt stage allocates no output buffer.
 */
export interface ShardHost {
  handle(req: ShardRequest): void;
  runStage(kind: number, layer: number, pos: number, x: Float32Array, share?: Uint32Array): { out: Float32Array; ms: number };
  /** Frees the shard and any load in progress (a local shard being dropped). */
  dispose(): void;
}

export function createShardHost(post: Post): ShardHost {
  let loader: ModelLoader | null = null;
  let shard: WasmShard | null = null;
  /** This worker's shard index (from `alloc`). */
  let index = 0;
  let ptrs: number[] = [];
  let heap = new Uint8Array(0);
  const memory = () => (wasmMemory() as WebAssembly.Memory).buffer.byteLength;
  const view = () => {
    const buf = (wasmMemory() as WebAssembly.Memory).buffer;
    if (heap.buffer !== buf) heap = new Uint8Array(buf);
    return heap;
  };
  const ok = <K extends keyof ShardResults>(id: number, _op: K, result: ShardResults[K], transfer?: Transferable[]) =>
    post({ type: 'result', id, result }, transfer);

  /** One stage; its output copied out (`view` false: a buffer of its own, to transfer) or a view. */
  function stage(kind: number, layer: number, pos: number, x: Float32Array, view: boolean, share?: Uint32Array): { out: Float32Array; ms: number } {
    if (!shard) throw Object.assign(new Error('no model in this shard'), { code: 'internal' });
    const t = performance.now();
    const out = view ? shard.runView(kind, layer, pos, x, share) : shard.run(kind, layer, pos, x, share);
    return { out, ms: performance.now() - t };
  }
  const runStage = (kind: number, layer: number, pos: number, x: Float32Array, share?: Uint32Array) => stage(kind, layer, pos, x, true, share);

  function handle(req: ShardRequest): void {
    try {
      switch (req.type) {
        case 'init':
          initSync({ module: req.module });
          setGemmProfile(req.gemmProfile === 'wide');
          ok(req.id, 'init', null);
          return;
        case 'alloc': {
          // The plan goes back at once; the allocation follows (clearing every page of it unless
          // this shard reads its part itself), while the coordinator already reads and routes the
          // chunks. Their writes wait in this worker's queue; a failed allocation fails the pool.
          loader?.free();
          loader = null;
          index = req.index;
          const plan = ModelLoader.planForRole(req.header, req.size, 'shard', req.index, req.count, req.expand, req.band) as CopyOp[];
          ok(req.id, 'alloc', { plan });
          loader = ModelLoader.forRole(req.header, req.size, 'shard', req.index, req.count, req.expand, req.band, req.intoPlace);
          ptrs = [];
          for (let i = 0; i < loader.shardCount(); i++) ptrs[i] = loader.shardPtr(i);
          return;
        }
        case 'write': {
          if (!loader) throw Object.assign(new Error('write before alloc'), { code: 'internal' });
          const h = view();
          const p = req.pieces;
          for (let i = 0; i < p.length; i += 4) h.set(req.bytes.subarray(p[i + 2], p[i + 2] + p[i + 3]), ptrs[p[i]] + p[i + 1]);
          const bytes = req.bytes.buffer as ArrayBuffer;
          post({ type: 'spare', id: req.id, bytes }, [bytes]);
          return;
        }
        case 'finish': {
          if (!loader) throw Object.assign(new Error('finish before alloc'), { code: 'internal' });
          for (let i = 0; i < loader.shardCount(); i++) loader.markFilled(i);
          loader.setKvCache(req.kvCache);
          try {
            shard = loader.finishShard(req.nCtx);
          } finally {
            loader.free();
            loader = null;
          }
          shard.setPrecision(req.precision);
          ok(req.id, 'finish', { stateBytes: shard.stateBytes(), wasmMemoryBytes: memory() });
          return;
        }
        case 'ops':
          if (!shard) throw Object.assign(new Error('no model in this shard'), { code: 'internal' });
          shard.apply(req.ops);
          return;
        case 'run': {
          const r = stage(req.kind, req.layer, req.pos, req.x, false, req.share);
          ok(req.id, 'run', r, [r.out.buffer]);
          return;
        }
        case 'sync':
          ok(req.id, 'sync', { wasmMemoryBytes: memory(), kernels: kernelTrials() });
          return;
        case 'lmRows': {
          if (!shard) throw Object.assign(new Error('no model in this shard'), { code: 'internal' });
          const r = shard.lmRows(req.ids) as LmRowsPart | null;
          ok(req.id, 'lmRows', r, r ? [r.bytes.buffer as ArrayBuffer, r.ids.buffer as ArrayBuffer] : []);
          return;
        }
        case 'pull': {
          const l = loader;
          if (!l) throw Object.assign(new Error('pull before alloc'), { code: 'internal' });
          // Not being able to read the cache here is no failure: the load takes the general path.
          void pull(req, l).catch((e) => ok(req.id, 'pull', { bad: [], bytes: 0, failed: errorInfo(e).message }));
          return;
        }
        case 'serve':
          if (!shard) throw Object.assign(new Error('no model in this shard'), { code: 'internal' });
          serve(req.exchange, req.index, req.seq, runStage, (e) => post({ type: 'error', id: req.id, error: errorInfo(e) }));
          return;
      }
    } catch (e) {
      post({ type: 'error', id: req.id, error: errorInfo(e) });
    }
  }
  /** This shard's part straight from the OPFS cache (load/pull.ts); progress every ~64 MiB. */
  async function pull(req: Extract<ShardRequest, { type: 'pull' }>, l: ModelLoader): Promise<void> {
    let unreported = 0;
    const onBytes = (n: number) => {
      unreported += n;
      if (unreported >= PULL_REPORT_BYTES) {
        post({ type: 'pulled', id: req.id, bytes: unreported });
        unreported = 0;
      }
    };
    const part: WorkerPull = { plan: l.plan() as CopyOp[], shardPtr: (i) => ptrs[i], chunks: req.chunks, chunkSize: req.chunkSize, me: index, onBytes };
    let r;
    if (req.from.kind === 'opfs' && req.from.turns) {
      r = await pullInTurns(req.from, part);
    } else {
      const source = await openPullSource(req.from);
      try {
        r = pullChunks(source.read, part);
      } finally {
        source.close(); // before the answer: the coordinator then takes its writable cache handles back
      }
    }
    if (unreported) post({ type: 'pulled', id: req.id, bytes: unreported });
    ok(req.id, 'pull', r);
  }

  function dispose(): void {
    shard?.free();
    shard = null;
    loader?.free();
    loader = null;
  }

  return { handle, runStage, dispose };
}

const PULL_REPORT_BYTES = 64 << 20;

/** Opens what a `pull` reads: the OPFS cache's pieces read-only, or (Node) a file. */
async function openPullSource(from: PullFrom): Promise<{ read(fileOffset: number, dest: Uint8Array): number; close(): void }> {
  if (from.kind === 'opfs') {
    const cache = await openReadOnly(from.dirName, from.size, from.pieceSize);
    if (!cache) throw Object.assign(new Error('the OPFS cache is not available in this worker'), { code: 'internal' });
    return cache;
  }
  const fs = await importNode('node:fs');
  const fd = fs.openSync(from.path, 'r');
  return {
    read: (at, dest) => readFully((o, d) => fs.readSync(fd, d, 0, d.length, o), at, dest),
    close: () => fs.closeSync(fd),
  };
}

// ------------------------------------------------------------------------------------------------
// Attach to the worker scope: a browser Worker, or Node's worker_threads.

declare const WorkerGlobalScope: { new (): unknown } | undefined;

// Only in a shard worker (named so by shards.ts browserShard): the engine worker imports this
// bundle too, for its local shard, and must keep its own message handler.
const inWorker = typeof WorkerGlobalScope !== 'undefined' && typeof self !== 'undefined' && self instanceof (WorkerGlobalScope as unknown as typeof Object);
if (inWorker && String((self as { name?: string }).name).startsWith('clef-shard')) {
  const scope = self as unknown as { postMessage(m: unknown, t?: Transferable[]): void; addEventListener(t: 'message', f: (e: MessageEvent) => void): void };
  const host = createShardHost((msg, transfer) => scope.postMessage(msg, transfer ?? []));
  scope.addEventListener('message', (e) => host.handle(e.data as ShardRequest));
} else if (!inWorker && (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node) {
  const wt = await importNode('node:worker_threads');
  const port = wt.parentPort as { postMessage(m: unknown, t?: unknown[]): void; on(ev: 'message', f: (m: unknown) => void): void } | null;
  if (port && wt.workerData?.clefShard) {
    const host = createShardHost((msg, transfer) => port.postMessage(msg, (transfer ?? []) as unknown[]));
    port.on('message', (m) => host.handle(m as ShardRequest));
  }
}
