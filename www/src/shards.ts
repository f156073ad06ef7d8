// The engine worker's side of a model split across shard workers (tensor parallelism; the split
// itself is src/split.rs, the math src/model.rs `Pass`).
//
//   ShardPool    starts N shard workers (dist/clef-shard.js: browser Workers, or worker_threads
//                in Node), hands each the compiled wasm module, allocates each one's shard, takes
//                its bytes during the load (load/placement.ts SplitPlacement), builds its engine.
//                Shard 0 is normally local (`localShard`): the engine worker computes it itself in
//                a second wasm instance, so N shards keep N threads busy — no thread sits idle
//                waiting while the others compute, and one wake-up per stage is saved
//   SplitDriver  runs the coordinator's passes: for every stage, the stage input goes to every
//                shard with its share of the stage (src/balance.rs: the engine cuts the FFN's and
//                the LM head's bands by the shards' last times), their partial sums / logit slices
//                come back and are added in the engine's order; the engine moves on. The exchange: through shared memory where SharedArrayBuffer
//                exists (exchange.ts: Node, cross-origin isolated pages), else postMessage (a
//                transferred Float32Array each way) — any static host, no headers needed
//
// Every message is typed (protocol.ts ShardRequest / ShardResponse). A shard that dies or fails
// rejects every pending request with a `worker_crashed` error and the pool is unusable: the engine
// reports it as fatal, and loading the model again starts a new pool.

import type { WasmEngine } from '../pkg/clef_web.js';
import { SPIN_MS, SharedExchange, exchangeBuffer, type LocalStage, type StageOutput } from './exchange.js';
import type { ShardHost } from './shard-worker.js';
import type { CopyOp, ErrorInfo, GemmProfile, KernelTrials, LmRowsPart, ShardRequest, ShardResponse, ShardResults, SplitStats } from './protocol.js';
import type { Destination } from './load/placement.js';

/** A Node built-in, imported at run time (not bundled; never reached in browsers). */
const importNode = (m: string): Promise<any> => import(/* @vite-ignore */ m); // eslint-disable-line @typescript-eslint/no-explicit-any

/** The transport to one shard worker. */
export interface ShardPort {
  post(msg: ShardRequest, transfer?: Transferable[]): void;
  onmessage: (msg: ShardResponse) => void;
  /** The worker died or could not start. */
  onfail: (message: string) => void;
  terminate(): void;
  /** A shard in this thread (`localShard`): one stage computed now. */
  runStage?: LocalStage;
}

/** A typed failure of the pool (code from protocol.ts). */
export class ShardError extends Error {
  constructor(readonly info: ErrorInfo) {
    super(info.message);
  }
  get code() {
    return this.info.code;
  }
}

/** Spare load buffers kept (a few chunks in flight per shard). */
const MAX_SPARE = 16;

type Body<K extends ShardRequest['type']> = Omit<Extract<ShardRequest, { type: K }>, 'id' | 'type'>;

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: ShardError) => void;
}

export class ShardPool {
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private failure: ShardError | null = null;
  /** Load buffers handed back by the shards after a `write` (see `buffer`). */
  private spare: ArrayBuffer[] = [];
  /** The shared exchange (null: stages go by postMessage), and whether the shards are serving on it. */
  private exchange: SharedExchange | null = null;
  private serving = false;

  private constructor(
    private ports: ShardPort[],
    /** Stages through shared memory (exchange.ts); else by postMessage. */
    readonly shared: boolean,
    /** The machine's cores: waiting threads spin only when every shard has one (exchange.ts SPIN_MS). */
    private cores: number,
  ) {
    ports.forEach((p, i) => {
      p.onmessage = (msg) => this.receive(msg);
      p.onfail = (message) => this.fail({ code: 'worker_crashed', fatal: true, message: `shard worker ${i + 1} of ${ports.length} stopped: ${message}` });
    });
  }

  /** Starts `n` shard workers and instantiates `module` in each; `shared`: exchange stages through shared memory. */
  static async start(
    n: number,
    module: WebAssembly.Module,
    spawn: (i: number) => Promise<ShardPort>,
    shared = false,
    gemmProfile: GemmProfile = 'narrow',
    cores = 1,
  ): Promise<ShardPool> {
    const pool = new ShardPool(await Promise.all(Array.from({ length: n }, (_, i) => spawn(i))), shared, cores);
    try {
      await Promise.all(pool.ports.map((_, i) => pool.request(i, 'init', { module, gemmProfile })));
    } catch (e) {
      pool.terminate();
      throw e;
    }
    return pool;
  }

  get size(): number {
    return this.ports.length;
  }

  /** Whether shard 0 is computed in the engine worker (localShard). */
  get local(): boolean {
    return !!this.ports[0]?.runStage;
  }

  private receive(msg: ShardResponse) {
    if (msg.type === 'spare') {
      if (this.spare.length < MAX_SPARE) this.spare.push(msg.bytes);
      return;
    }
    if (msg.type === 'pulled') {
      this.onPulled?.(msg.bytes);
      return;
    }
    const p = this.pending.get(msg.id);
    if (msg.type === 'error') {
      // An answerless message (write, ops) failed, or a request did: either way the shard's
      // state is now unknown.
      this.fail(msg.error.code === 'worker_crashed' ? msg.error : { ...msg.error, fatal: true });
      return;
    }
    if (!p) return;
    this.pending.delete(msg.id);
    p.resolve(msg.result);
  }

  private fail(info: ErrorInfo) {
    this.failure ??= new ShardError(info);
    for (const p of this.pending.values()) p.reject(this.failure);
    this.pending.clear();
  }

  private check() {
    if (this.failure) throw this.failure;
  }

  request<K extends ShardRequest['type']>(i: number, type: K, body: Body<K>, transfer: Transferable[] = []): Promise<ShardResults[K]> {
    this.check();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.ports[i].post({ type, id, ...body } as unknown as ShardRequest, transfer);
    });
  }

  /** A message without an answer (its failure fails the pool). */
  send<K extends 'write' | 'ops' | 'serve'>(i: number, type: K, body: Body<K>, transfer: Transferable[] = []): void {
    this.check();
    this.ports[i].post({ type, id: this.nextId++, ...body } as unknown as ShardRequest, transfer);
  }

  /** Allocates every shard of the model with this header; returns each one's load plan. */
  async alloc(header: Uint8Array, size: number, expand: boolean, band: number, intoPlace: boolean): Promise<CopyOp[][]> {
    const r = await Promise.all(this.ports.map((_, i) => this.request(i, 'alloc', { header, size, index: i, count: this.size, expand, band, intoPlace })));
    return r.map((x) => x.plan);
  }

  /** The shards as destinations of a split load (see load/placement.ts). */
  destinations(plans: CopyOp[][]): Destination[] {
    return plans.map((plan, i) => ({
      plan,
      buffer: (n) => this.buffer(n),
      write: (pieces, bytes) => this.send(i, 'write', { pieces, bytes }, [bytes.buffer as ArrayBuffer, pieces.buffer as ArrayBuffer]),
    }));
  }

  /**
   * A buffer of at least `n` bytes for a `write`: one a shard handed back when there is one (its
   * pages are in memory already), else a new one.
   */
  buffer(n: number): Uint8Array {
    const i = this.spare.findIndex((b) => b.byteLength >= n);
    return new Uint8Array(i >= 0 ? this.spare.splice(i, 1)[0] : new ArrayBuffer(n));
  }

  /** Told the bytes each shard reports during `pull`. */
  private onPulled: ((bytes: number) => void) | null = null;

  /**
   * Every shard reads its part itself (from the OPFS cache or a file) (load/pull.ts): the chunk indexes that
   * failed over all shards, and why a shard could not read at all (null: every one could).
   * `onBytes` hears the progress.
   */
  async pull(c: Body<'pull'>, onBytes: (bytes: number) => void): Promise<{ bad: number[]; failed: string | null; bytes: number }> {
    this.onPulled = onBytes;
    try {
      const r = await Promise.all(this.ports.map((_, i) => this.request(i, 'pull', c)));
      return { bad: [...new Set(r.flatMap((x) => x.bad))], failed: r.find((x) => x.failed)?.failed ?? null, bytes: r.reduce((s, x) => s + x.bytes, 0) };
    } finally {
      this.onPulled = null;
    }
  }

  /** Drops the load's spare buffers (after the load). */
  dropBuffers(): void {
    this.spare = [];
  }

  /**
   * Waits until every shard has handled every earlier message; returns their wasm memory sizes and
   * kernel trials (by shard index).
   */
  async sync(): Promise<Array<ShardResults['sync']>> {
    return Promise.all(this.ports.map((_, i) => this.request(i, 'sync', {})));
  }

  /** Builds every shard's engine (state for `nCtx` tokens); returns their wasm memory sizes. */
  async finish(nCtx: number, kvCache: 'f32' | 'f16' = 'f32', precision = 'fast'): Promise<number[]> {
    const r = await Promise.all(this.ports.map((_, i) => this.request(i, 'finish', { nCtx, precision, kvCache })));
    return r.map((x) => x.wasmMemoryBytes);
  }

  /** Sends the coordinator's state changes to every shard. */
  ops(ops: Uint32Array): void {
    if (!ops.length) return;
    this.ports.forEach((_, i) => this.send(i, 'ops', { ops })); // cloned per message (not transferred)
  }

  /**
   * Shared exchange: puts the shards in serve mode for stages of up to `xLen` input and `outLen`
   * output floats (a larger buffer first when needed). Their state changes (`ops`) go before.
   */
  async serve(xLen: number, outLen: number): Promise<void> {
    if (this.serving && this.exchange!.fits(xLen, outLen)) return;
    await this.endServe();
    if (!this.exchange?.fits(xLen, outLen)) {
      const old = this.exchange?.buf;
      const local = this.localStage();
      // Spinning pays only when no thread needs the core a spinning one holds: N shards in N
      // threads (the engine's shard), on at least N cores. More workers than cores (a model that
      // needs them to fit) block at once.
      const spin = local && this.size <= this.cores ? SPIN_MS : 0;
      this.exchange = new SharedExchange(exchangeBuffer(this.size, Math.max(xLen, old?.cap ?? 0), Math.max(outLen, old?.outCap ?? 0), spin), local);
    }
    const x = this.exchange;
    this.ports.forEach((p, i) => p.runStage || this.send(i, 'serve', { exchange: x.buf, index: i, seq: x.seq }));
    this.serving = true;
  }

  /** Shared exchange: the shards back to reading messages. */
  async endServe(): Promise<void> {
    if (!this.serving) return;
    this.serving = false;
    await this.exchange!.stop(() => this.failure);
  }

  /** Shard 0's stage when it is local; its failure fails the pool, as a shard worker's does. */
  private localStage(): LocalStage | null {
    const run = this.ports[0].runStage;
    if (!run) return null;
    return (kind, layer, pos, x, share) => {
      this.check();
      try {
        return run(kind, layer, pos, x, share);
      } catch (e) {
        this.fail(e instanceof ShardError ? e.info : { code: 'internal', fatal: true, message: String((e as Error)?.message ?? e) });
        throw this.failure;
      }
    };
  }

  /**
   * Runs one stage on every shard, shard i computing `shares[i]` of it (absent: its even share);
   * their results (and compute times) in shard order.
   */
  run(kind: number, layer: number, pos: number, x: Float32Array, shares: Array<Uint32Array | undefined>): Promise<StageOutput[]> {
    this.check();
    if (this.serving) return this.exchange!.run(kind, layer, pos, x, shares, () => this.failure);
    return Promise.all(
      this.ports.map((_, i) => {
        const xi = i + 1 < this.size ? x.slice() : x; // each worker gets its own (transferred) copy
        const share = shares[i];
        return this.request(i, 'run', { kind, layer, pos, x: xi, ...(share && { share }) }, [xi.buffer as ArrayBuffer]);
      }),
    );
  }

  /** Every shard's LM-head rows of `ids` in its vocabulary range (null: it has no LM head). */
  lmRows(ids: Uint32Array): Promise<Array<LmRowsPart | null>> {
    return Promise.all(this.ports.map((_, i) => this.request(i, 'lmRows', { ids })));
  }

  /** Fault injection for tests: stops shard worker `i` as a crash would. */
  kill(i: number): void {
    this.ports[i].terminate();
    this.ports[i].onfail('it was stopped (fault injection)');
  }

  terminate(): void {
    this.fail({ code: 'not_loaded', message: 'the model was unloaded' });
    for (const p of this.ports) p.terminate();
  }
}

/** Integers per shard in the engine's stage plan (src/wasm.rs `passPlan`). */
const PLAN_INTS = 7;

/** Runs the coordinator engine's passes on the pool (see src/engine.rs). */
export class SplitDriver {
  /** Where the time went since the last `resetStats` (protocol.ts SplitStats). */
  stats: SplitStats;

  constructor(
    private eng: WasmEngine,
    private pool: ShardPool,
    /** Hidden size D: a stage input is rows × D. */
    private nEmbd: number,
    /** Record every stage in `stats.trace` (load option `traceStages`), and `kernels`. */
    readonly trace = false,
  ) {
    this.stats = this.resetStats();
  }

  /** The engine's count of unevenly cut stages at the last `resetStats`. */
  private movedBase = 0;

  resetStats(): SplitStats {
    this.stats = { workers: this.pool.size, stages: 0, waitMs: 0, shardMs: 0, meanShardMs: 0, movedStages: 0, coordinatorMs: 0 };
    if (this.trace) this.stats.trace = [];
    this.movedBase = this.eng.balanceMoved();
    return this.stats;
  }

  /**
   * `eng.prefill(max)`, with the shards: the tokens still queued, or null when `stop()` turned
   * true between two stages (the pass is abandoned: engine and shards back at a snapshot).
   */
  async prefill(max: number, stop?: () => boolean): Promise<number | null> {
    await this.drive();
    const t = performance.now();
    const left = this.eng.prefillStart(max); // embeds the chunk, the first norm
    this.stats.coordinatorMs += performance.now() - t;
    return (await this.drive(stop)) ? left : null;
  }

  /** What every instance's kernel trials chose so far (shards: after their pending work). */
  async kernels(coordinator: string): Promise<KernelTrials> {
    return { coordinator, shards: (await this.pool.sync()).map((r) => r.kernels) };
  }

  /** `eng.step()`, with the shards. */
  async step(): Promise<{ token: number; text: string } | null> {
    await this.drive();
    const t = performance.now();
    const piece = this.eng.stepStart() as { token: number; text: string } | null; // sampling, embedding
    this.stats.coordinatorMs += performance.now() - t;
    await this.drive();
    return piece;
  }

  /**
   * A decision's LM-head rows (src/clef/lm_rows.rs): the ids the decision begun on the engine
   * names, asked of every shard, handed to the engine. Nothing to do when the engine has them.
   */
  async supplyLm(): Promise<void> {
    const ids = this.eng.decideLmNeeds();
    if (!ids) return;
    const parts = (await this.pool.lmRows(ids)).filter((p): p is LmRowsPart => p !== null);
    const join = <T extends Uint32Array | Uint8Array>(make: (n: number) => T, xs: T[]): T => {
      const out = make(xs.reduce((n, x) => n + x.length, 0));
      let at = 0;
      for (const x of xs) {
        out.set(x, at);
        at += x.length;
      }
      return out;
    };
    this.eng.decideSupplyLm(
      Uint32Array.from(parts.map((p) => p.ty)),
      Uint32Array.from(parts.map((p) => p.ids.length)),
      join((n) => new Uint32Array(n), parts.map((p) => p.ids)),
      join((n) => new Uint8Array(n), parts.map((p) => p.bytes)),
    );
  }

  /** `eng.decidePrefill(max)`, with the shards: one pass of the decision, then its rows absorbed. */
  async decideStep(max: number): Promise<number> {
    let t = performance.now();
    this.eng.decidePassStart(max); // embeds the chunk, the first norm
    this.stats.coordinatorMs += performance.now() - t;
    await this.drive(); // the state changes queued before it (restore), then its stages
    t = performance.now();
    const left = this.eng.decideAbsorb(); // the head's rows, or the readout's labels
    this.stats.coordinatorMs += performance.now() - t;
    return left;
  }

  /**
   * Delivers queued state changes, then runs the pass in flight (if any) to its end; false when
   * `stop()` turned true before one of its stages: the pass is abandoned (src/engine.rs
   * `abandon_pass`) and the shards are told to go back with the engine.
   */
  async drive(stop?: () => boolean): Promise<boolean> {
    const { eng, pool } = this;
    try {
      pool.ops(eng.takeShardOps());
      for (;;) {
        let t = performance.now();
        const st = eng.passStage();
        if (!st) break;
        if (stop?.()) {
          eng.abandonPass();
          await pool.endServe(); // (shards in serve mode read their messages only after it)
          pool.ops(eng.takeShardOps());
          return false;
        }
        const [kind, layer, pos] = st;
        // What each shard computes (src/balance.rs), per shard in the order its result is added:
        // index, has a share, its first and end piece, separate, result floats, first logit row.
        const plan = eng.passPlan();
        this.stats.movedStages = eng.balanceMoved() - this.movedBase;
        const shares: Array<Uint32Array | undefined> = [];
        let outLen = 0;
        for (let k = 0; k < plan.length; k += PLAN_INTS) {
          shares[plan[k]] = plan[k + 1] ? plan.slice(k + 2, k + 5) : undefined;
          outLen = Math.max(outLen, plan[k + 5]);
        }
        // Shared exchange: a view of the engine's memory (copied into the exchange and read by a
        // local shard before the engine is called again); messages transfer a copy.
        const x = pool.shared ? eng.passInputView() : eng.passInput();
        const rows = x.length / this.nEmbd;
        const s = this.stats;
        s.coordinatorMs += performance.now() - t;
        t = performance.now();
        if (pool.shared) await pool.serve(x.length, outLen);
        const outs = await pool.run(kind, layer, pos, x, shares);
        const t2 = performance.now();
        s.waitMs += t2 - t;
        s.stages++;
        const ms = outs.map((o) => o.ms); // each shard's compute, by index
        s.trace?.push({ kind, layer, rows, waitMs: t2 - t, shardMs: ms, work: Array.from(eng.passWork()) });
        s.shardMs += Math.max(...ms);
        s.meanShardMs += ms.reduce((sum, v) => sum + v, 0) / ms.length;
        eng.passObserve(Float64Array.from(ms));
        for (let k = 0; k < plan.length; k += PLAN_INTS) {
          const o = outs[plan[k]];
          if (kind === 2) eng.passPutLogits(plan[k + 6], plan[k + 6] + o.out.length / rows, o.out);
          else eng.passAddPartial(o.out);
        }
        const more = eng.passAdvance();
        s.coordinatorMs += performance.now() - t2;
        if (!more) break;
      }
      await pool.endServe();
      return true;
    } catch (e) {
      eng.cancelPass();
      await pool.endServe().catch(() => {}); // the pool has failed already if this does
      throw e;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Starting shard workers

/** A browser module Worker running dist/clef-shard.js (beside the engine worker's script). */
export function browserShard(i: number, scriptUrl: URL): ShardPort {
  let url = scriptUrl.href;
  let blob: string | null = null;
  if (typeof location !== 'undefined' && scriptUrl.origin !== location.origin) {
    // Workers must be same-origin: a blob: module that imports the CDN copy.
    blob = URL.createObjectURL(new Blob([`import ${JSON.stringify(url)};\n`], { type: 'text/javascript' }));
    url = blob;
  }
  const w = new Worker(url, { type: 'module', name: `clef-shard-${i}` });
  const port: ShardPort = {
    post: (m, t) => w.postMessage(m, t ?? []),
    onmessage: () => {},
    onfail: () => {},
    terminate: () => {
      w.terminate();
      if (blob) URL.revokeObjectURL(blob);
    },
  };
  w.onmessage = (e: MessageEvent) => port.onmessage(e.data as ShardResponse);
  w.onerror = (e: ErrorEvent) => {
    e.preventDefault?.();
    port.onfail(e.message || 'it could not start (is clef-shard.js served beside clef-worker.js?)');
  };
  w.onmessageerror = () => port.onfail('a message could not be read');
  return port;
}

/** dist/clef-shard.js as this engine worker imported it for its local shard. */
interface LocalModule {
  createShardHost(post: (m: ShardResponse) => void): ShardHost;
  errorInfo(e: unknown): ErrorInfo;
}

/** The local shard's module, imported once (null after a crash: its instance is not reused). */
let local: { url: string; mod: Promise<LocalModule> } | null = null;
let localImports = 0;

/**
 * Shard 0 in this thread: dist/clef-shard.js imported here — a bundle with its own copy of the
 * wasm glue, so its own instance of the module and its own memory — driven by direct calls.
 * Requests and answers go through microtasks (never re-entrant, in order), as messages would; in
 * the shared exchange its stages run by `runStage` between waking the shard workers and waiting.
 */
export async function localShard(scriptUrl: URL): Promise<ShardPort> {
  if (local?.url !== scriptUrl.href) {
    // After a crash, a fresh instance: a query makes it another module.
    const u = new URL(scriptUrl);
    if (localImports++) u.searchParams.set('instance', String(localImports));
    local = { url: scriptUrl.href, mod: import(/* @vite-ignore */ u.href) as Promise<LocalModule> };
  }
  const entry = local;
  const mod = await entry.mod;
  // A trap leaves the instance in an unknown state: the next load imports a fresh one.
  const crashed = (info: ErrorInfo): ErrorInfo => {
    if (info.code === 'worker_crashed' && local === entry) local = null;
    return info;
  };
  let open = true;
  const host = mod.createShardHost((m) => {
    if (m.type === 'error') crashed(m.error);
    queueMicrotask(() => open && port.onmessage(m));
  });
  const port: ShardPort = {
    post: (m) => {
      if (open) queueMicrotask(() => open && host.handle(m));
    },
    onmessage: () => {},
    onfail: () => {},
    terminate: () => {
      if (!open) return;
      open = false;
      host.dispose();
    },
    runStage: (kind, layer, pos, x, share) => {
      try {
        return host.runStage(kind, layer, pos, x, share);
      } catch (e) {
        throw new ShardError(crashed(mod.errorInfo(e)));
      }
    },
  };
  return port;
}

/** A Node worker_threads Worker running dist/clef-shard.js. */
export async function nodeShard(i: number, scriptUrl: URL): Promise<ShardPort> {
  const wt = await importNode('node:worker_threads');
  const w = new wt.Worker(scriptUrl, { workerData: { clefShard: true }, name: `clef-shard-${i}` });
  let exited = false;
  const port: ShardPort = {
    post: (m, t) => w.postMessage(m, t ?? []),
    onmessage: () => {},
    onfail: () => {},
    terminate: () => {
      exited = true;
      void w.terminate();
    },
  };
  w.on('message', (m: ShardResponse) => port.onmessage(m));
  w.on('error', (e: Error) => port.onfail(e.message));
  w.on('exit', (code: number) => {
    if (!exited) port.onfail(`it exited (code ${code})`);
  });
  return port;
}
