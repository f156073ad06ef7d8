// The engine host: a module Web Worker in the browser (this file is dist/clef-worker.js), or the
// same code in-process under Node (index.ts calls `createCore`). It owns the wasm instance, at
// most one model, and a queue of generation requests, and answers the messages of protocol.ts.
//
// Generation runs as steps (prompt passes of PREFILL_CHUNK tokens, then one token per step) with
// a macrotask yield between them and between the stages of a prompt pass, so an `abort` message is
// handled within one token or one stage (a pass abandoned part-way puts the state back at a
// snapshot: src/engine.rs `abandon_pass`). Every error is caught and answered as a typed error;
// the worker stays usable, except after a wasm trap (`fatal`: load again).
//
// Decisions (`decide`) run in the same queue as generations, on the same state: prefill slices of
// the request's prompt feed the joint schema head (WasmEngine.decideBegin / decidePrefill /
// decideFinish), with a progress event and a look at `abort` between slices. A head-less model
// gets its head with `loadHead` (load/head.ts: the model's streaming, cache and sha256).

import init, { initSync, kernelTrials, setGemmProfile, simdLevel, WasmEngine, type WarmUp, wasmMemory } from '../pkg/clef_web.js';
import { detectSimd, wasmFile } from './simd.js';
import type {
  ChatMessageInput, DecideParams, GemmProfile, DecideResult, DecisionInfo, ErrorCode, ErrorInfo, GenerateParams, GenerateResult, HeadInfo, HeadSpec,
  ModelInfo, PromptSpec, Request, Response, Results, SourceSpec, TokenLogprob, WorkerStats,
} from './protocol.js';
import { DECIDE_PREFILL_CHUNK, PREFILL_CHUNK, STAGE_YIELD_MS } from './protocol.js';
import { loadHead } from './load/head.js';
import { resolveLoadParams } from './validate.js';
import { BlobSource, HttpSource, LoadError, SyncFileSource, loadModel, macrotask, type ByteSource } from './loader.js';
import { errCode } from './load/errors.js';
import { CacheError, deleteCached } from './cache.js';
import { type CachingEvents, openCaching } from './load/caching.js';
import { ShardError, ShardPool, SplitDriver, browserShard, localShard, nodeShard, type ShardPort } from './shards.js';
import { sharedExchangeAvailable } from './exchange.js';
import { coreCount } from './load/workers.js';

export interface CoreEnv {
  /** Compiles and instantiates the wasm module (once); the compiled module goes to shard workers too. */
  initWasm(wasmUrl?: string): Promise<WebAssembly.Module>;
  /**
   * How the int8 prompt GEMM runs in this engine's wasm instances (`gemm8::Profile` in the crate):
   * 'wide' (2 rows × 4 tokens, Q2_K–Q5_K) where V8 keeps its accumulators in registers —
   * Chromium — 'narrow' (2 × 2, Q2_K) in Node 20, whose V8 spills them. Measured, BENCHMARKS.md.
   */
  gemmProfile: GemmProfile;
  /** Starts shard worker `i` (dist/clef-shard.js; absent: models are never split). */
  spawnShard?(i: number): Promise<ShardPort>;
  /** Shard 0 in this thread (shards.ts localShard). */
  localShard?(): Promise<ShardPort>;
  /** The machine's cores, for the default worker count and spinning (default
   *  navigator.hardwareConcurrency; Node 20 has no navigator). */
  cores?(): Promise<number>;
  /** Node: opens a local file as a byte source. */
  openPath?(path: string): Promise<{ source: ByteSource; close(): void }>;
}

type Post = (msg: Response) => void;

/** JS heap in use: performance.memory (Chromium pages), process.memoryUsage (Node); 0 where neither exists (Chromium workers). */
function jsHeap(): number {
  const m = (performance as unknown as { memory?: { usedJSHeapSize: number } }).memory;
  if (m) return m.usedJSHeapSize;
  const p = (globalThis as { process?: { memoryUsage?: () => { heapUsed: number } } }).process;
  return p?.memoryUsage ? p.memoryUsage().heapUsed : 0;
}

/** Any thrown value → a typed error. */
export function toErrorInfo(e: unknown): ErrorInfo {
  if (e instanceof LoadError || e instanceof CacheError) return { code: e.code, message: e.message };
  if (e instanceof ShardError) return e.info;
  const name = (e as { name?: string })?.name;
  if (name === 'AbortError' || name === 'TimeoutError') return { code: 'aborted', message: 'aborted' };
  if (typeof WebAssembly !== 'undefined' && e instanceof WebAssembly.RuntimeError) {
    return { code: 'internal', fatal: true, message: `the engine crashed (${e.message}); it may have run out of memory: load the model again` };
  }
  const code = (e as { code?: unknown })?.code;
  const message = (e as Error)?.message ?? String(e);
  if (typeof code === 'string') {
    const known: ErrorCode[] = [
      'bad_request', 'bad_schema', 'context_full', 'out_of_memory', 'bad_gguf', 'wrong_architecture', 'unsupported_type', 'template', 'internal', 'network',
      'not_found', 'quota', 'offline', 'integrity', 'cache', 'not_loaded',
      'malformed_request', 'invalid_decision', 'request_too_large', 'not_a_decision_model', 'not_supported', 'bad_head', 'evaluation_failed',
    ];
    if (code === 'need_more') return { code: 'bad_gguf', message };
    if ((known as string[]).includes(code)) return { code: code as ErrorCode, message };
  }
  if (/quota/i.test(name ?? '')) return { code: 'quota', message };
  return { code: 'internal', message };
}

/** A generated token as the wasm engine gives it (src/wasm.rs `piece_value`). */
interface WasmPiece {
  token: number;
  text: string;
  logprob?: number;
  bytes?: Uint8Array;
  top?: Array<{ id: number; bytes: Uint8Array; logprob: number }>;
}

function tokenLogprob(p: WasmPiece): TokenLogprob {
  return { logprob: p.logprob!, bytes: Array.from(p.bytes!), top: p.top!.map((t) => ({ id: t.id, bytes: Array.from(t.bytes), logprob: t.logprob })) };
}

class Aborted extends Error {
  name = 'AbortError';
}

/** Does the rendered prompt leave a `<think>` block open (the model starts by reasoning)? */
function opensThink(prompt: string): boolean {
  return prompt.lastIndexOf('<think>') > prompt.lastIndexOf('</think>');
}

export function createCore(post: Post, env: CoreEnv) {
  let engine: WasmEngine | null = null;
  let info: ModelInfo | null = null;
  let fatal = false;
  let wasmReady: Promise<WebAssembly.Module> | null = null;
  /** The shard workers of a split model, and the driver that runs passes on them (null: whole model here). */
  let pool: ShardPool | null = null;
  let driver: SplitDriver | null = null;
  let loading: { id: number; ac: AbortController } | null = null;
  let queue: Promise<void> = Promise.resolve();
  let running: number | null = null;
  const aborted = new Set<number>();
  const pending = new Set<number>(); // queued or running generation / reset ids

  const result = <K extends keyof Results>(id: number, op: K, r: Results[K]) =>
    post({ type: 'result', id, op, result: r } as Response);
  const fail = (id: number, e: unknown) => {
    const err = toErrorInfo(e);
    if (err.fatal) {
      fatal = true;
      try {
        engine?.free();
      } catch {
        /* the instance is broken */
      }
      engine = null;
      pool?.terminate();
      pool = null;
      driver = null;
    }
    post({ type: 'error', id, error: err });
  };

  const need = (): WasmEngine => {
    if (fatal) throw new LoadError('not_loaded', 'the engine crashed earlier: load the model again');
    if (!engine) throw new LoadError('not_loaded', 'no model is loaded');
    return engine;
  };

  /** A load's cache events as messages: warnings, and 'waiting' progress while another tab loads the model. */
  const cachingEvents = (id: number): CachingEvents => ({
    warn: (message) => post({ type: 'warning', id, message }),
    waiting: (holder) =>
      post({
        type: 'progress', id,
        progress: { phase: 'waiting', loaded: holder?.loaded ?? 0, total: holder?.total ?? 0, bytesPerSecond: holder?.bytesPerSecond ?? 0, etaSeconds: holder?.etaSeconds ?? NaN, downloaded: 0, fromCache: 0 },
      }),
  });

  async function doLoad(id: number, src: SourceSpec, params: Extract<Request, { type: 'load' }>['params'] & { wasmUrl?: string }) {
    if (engine || loading) throw new LoadError('bad_request', 'a model is already loaded in this engine (unload it first)');
    const ac = new AbortController();
    loading = { id, ac };
    try {
      wasmReady ??= env.initWasm(params.wasmUrl).then((m) => {
        setGemmProfile(env.gemmProfile === 'wide');
        return m;
      });
      const module = await wasmReady;
      const spawn = env.spawnShard;
      // How a split model's stages travel: shared memory where there is some (exchange.ts).
      const want = params.exchange ?? 'auto';
      if (want === 'shared' && !sharedExchangeAvailable()) {
        throw new LoadError('bad_request', "exchange: 'shared' needs SharedArrayBuffer: Node, or a cross-origin isolated page (COOP + COEP headers)");
      }
      const shared = want === 'shared' || (want === 'auto' && sharedExchangeAvailable());
      // Shard 0 computed here (a second wasm instance) unless asked otherwise: N shards, N busy threads.
      const here = (params.engineShard ?? true) ? env.localShard : undefined;
      const cores = (await env.cores?.()) ?? coreCount();
      const startShards = spawn
        ? (n: number) => ShardPool.start(n, module, (i) => (i === 0 && here ? here() : spawn(i)), shared, env.gemmProfile, cores)
        : undefined;
      for (let attempt = 0; ; attempt++) {
        let closeSource: (() => void) | undefined;
        let source: ByteSource;
        let url = '';
        let name = '';
        let cacheKey = '';
        let local = false;
        let repo: string | undefined;
        if (src.kind === 'url') {
          source = new HttpSource(src.url, src.hub);
          url = src.url;
          name = params.model ?? src.url;
          cacheKey = src.cacheKey;
          repo = src.hub?.repo;
        } else if (src.kind === 'blob') {
          source = new BlobSource(src.blob, src.name);
          name = src.name;
          cacheKey = src.cacheKey;
          local = true;
        } else {
          if (!env.openPath) throw new LoadError('bad_request', 'loading from a path works only in Node');
          const f = await env.openPath(src.path);
          source = f.source;
          closeSource = f.close;
          name = src.path;
          local = true;
        }
        const caching = await openCaching(src.kind === 'path' ? '' : cacheKey, name, !!params.cache, ac.signal, cachingEvents(id));
        const cache = caching.cache;
        try {
          const out = await loadModel({
            source, cache, cacheKey, url, name, params, signal: ac.signal, local, repo, startShards, cores,
            onProgress: (progress) => {
              post({ type: 'progress', id, progress });
              caching.announce(progress);
            },
            onWarning: (message) => post({ type: 'warning', id, message }),
          });
          const built = performance.now();
          // The shards build their engines while this worker builds the coordinator's.
          const kv = params.kvCache ?? 'f32';
          const shardsBuilt = out.pool?.finish(out.nCtx, kv);
          shardsBuilt?.catch(() => {}); // awaited below; a failure meanwhile is not unhandled
          let eng: WasmEngine;
          try {
            out.loader.setKvCache(kv);
            eng = out.loader.finish(out.nCtx);
          } catch (e) {
            out.warm?.free();
            out.pool?.terminate();
            if (errCode(e) === 'out_of_memory') throw out.refused(`the state and a ${out.nCtx}-token context`);
            throw e;
          } finally {
            out.loader.free();
          }
          let memory = (wasmMemory() as WebAssembly.Memory).buffer.byteLength;
          if (out.pool && shardsBuilt) {
            try {
              memory += (await shardsBuilt).reduce((a, b) => a + b, 0);
            } catch (e) {
              out.warm?.free();
              eng.free();
              out.pool.terminate();
              throw e;
            }
            pool = out.pool;
            driver = new SplitDriver(eng, out.pool, out.info.nEmbd, !!params.traceStages);
          }
          out.stats.phaseMs.build = performance.now() - built;
          const h = out.info;
          eng.setModelName(name);
          engine = eng;
          if (out.warm) void warmWhileIdle(out.warm, eng);
          info = {
            name: h.name || name, architecture: h.architecture, fileSize: h.fileSize, weightBytes: h.weightBytes,
            contextLength: eng.nCtx(), trainedContextLength: h.contextLength, nVocab: h.nVocab, nLayer: h.nLayer, nEmbd: h.nEmbd,
            source: out.source, cache: caching.status(), sha256: out.sha256, verified: out.verified, etag: out.etag, hasChatTemplate: !!h.chatTemplate,
            decisions: eng.decisionInfo() as DecisionInfo,
            workers: out.workers, workersReason: out.workersReason, exchange: out.pool ? (out.pool.shared ? 'shared' : 'message') : '',
            engineShard: !!out.pool?.local,
            stats: { ...out.stats, wasmMemoryBytes: memory, simd: simdLevel() },
          };
          return info;
        } catch (e) {
          // A corrupted header (or a verified cache that no longer matches): start over once, without the cache.
          if (e instanceof LoadError && e.code === 'integrity' && e.retryable && attempt === 0) {
            post({ type: 'warning', id, message: `${e.message}: starting over` });
            caching.close();
            if (cacheKey) await deleteCached(cacheKey).catch(() => {});
            continue;
          }
          throw e;
        } finally {
          caching.close();
          closeSource?.();
        }
      }
    } finally {
      loading = null;
    }
  }

  function renderPrompt(eng: WasmEngine, p: PromptSpec): { ids: Uint32Array; thinking: boolean } {
    if (p.kind === 'tokens') {
      if (!Array.isArray(p.ids) || !p.ids.every((x) => Number.isInteger(x) && x >= 0)) {
        throw new LoadError('bad_request', 'prompt token ids must be non-negative integers');
      }
      return { ids: Uint32Array.from(p.ids), thinking: false };
    }
    if (p.kind === 'text') return { ids: eng.tokenize(p.text, true), thinking: false };
    let text = eng.applyChatTemplate(chatRequestJson(p.messages, p));
    // A forced answer start (tool_choice required / named) comes after the reasoning block: close
    // an open one empty, as the template does with thinking off.
    if (p.assistantPrefix !== undefined) text += (opensThink(text) ? '\n</think>\n\n' : '') + p.assistantPrefix;
    return { ids: eng.tokenize(text, true), thinking: opensThink(text) };
  }

  /**
   * `eng.prefill(max)` in this instance (one worker), a macrotask yield every STAGE_YIELD_MS of its
   * stages: the tokens still queued, or null when `halt()` turned true during the pass (abandoned:
   * the state is back at a snapshot).
   */
  async function prefillHere(eng: WasmEngine, max: number, halt: () => boolean): Promise<number | null> {
    const left = eng.prefillStart(max);
    while (eng.runFor(STAGE_YIELD_MS)) {
      await macrotask();
      if (halt()) {
        eng.abandonPass();
        return null;
      }
    }
    return left;
  }

  async function doGenerate(id: number, prompt: PromptSpec, params: GenerateParams): Promise<GenerateResult> {
    const eng = need();
    const { ids, thinking } = renderPrompt(eng, prompt);
    const chunk = Math.max(1, Math.min(4096, params.prefill_chunk ?? PREFILL_CHUNK));
    const p: Record<string, unknown> = { ...params };
    delete p.prefill_chunk;
    delete p.output;
    if (p.max_tokens === undefined || p.max_tokens === null) p.max_tokens = eng.nCtx();
    let began = false;
    try {
      const cached = eng.begin(ids, p);
      began = true;
      // A constrained answer: the grammar is compiled now (a bad schema fails before any token).
      if (params.output) eng.constrain(JSON.stringify(params.output));
      const u0 = eng.usage() as { prompt_tokens: number };
      post({ type: 'started', id, promptTokens: u0.prompt_tokens, cachedTokens: cached, thinking });
      const t0 = performance.now();
      let stop = false;
      const d = driver;
      d?.resetStats();
      // Passes of `chunk` tokens; an abort is looked at between their stages too (null: the
      // pass was abandoned, the state is back at a snapshot).
      const halt = () => aborted.has(id);
      for (;;) {
        const left = d ? await d.prefill(chunk, halt) : await prefillHere(eng, chunk, halt);
        if (left === 0) break;
        if (left !== null) await macrotask();
        if (left === null || halt()) {
          stop = true;
          break;
        }
      }
      const promptMs = performance.now() - t0;
      const promptSplit = d ? { ...d.stats } : null;
      d?.resetStats();
      const t1 = performance.now();
      if (!stop && !aborted.has(id)) {
        for (;;) {
          const piece = (d ? await d.step() : eng.step()) as WasmPiece | null;
          if (!piece) break;
          post({ type: 'token', id, token: piece.token, text: piece.text, ...(piece.top ? { logprobs: tokenLogprob(piece) } : {}) });
          await macrotask();
          if (aborted.has(id)) {
            stop = true;
            break;
          }
        }
      }
      const tail = eng.flush();
      if (tail) post({ type: 'token', id, token: -1, text: tail });
      const generationMs = performance.now() - t1;
      const finishReason = stop || aborted.has(id) ? 'abort' : ((eng.finishReason() as 'stop' | 'length' | undefined) ?? 'stop');
      const usage = eng.usage() as GenerateResult['usage'];
      eng.endRequest();
      began = false;
      const decode = d ? { ...d.stats } : null;
      const kernels = d?.trace ? await d.kernels(kernelTrials()).catch(() => undefined) : undefined; // (a failed pool fails the next request)
      return { finishReason, usage, promptMs, generationMs, promptIds: Array.from(ids), ...(d && promptSplit && decode ? { split: { prompt: promptSplit, decode, kernels } } : {}) };
    } finally {
      if (began && engine === eng) {
        try {
          eng.endRequest();
        } catch {
          /* broken instance: reported by the caller */
        }
      }
    }
  }

  /** A byte source for a head file (the same kinds as a model's). */
  async function openSource(src: SourceSpec): Promise<{ source: ByteSource; close?: () => void; name: string; url: string; local: boolean }> {
    if (src.kind === 'url') return { source: new HttpSource(src.url, src.hub), name: src.hub?.file ?? src.url, url: src.url, local: false };
    if (src.kind === 'blob') return { source: new BlobSource(src.blob, src.name), name: src.name, url: '', local: true };
    if (!env.openPath) throw new LoadError('bad_request', 'loading from a path works only in Node');
    const f = await env.openPath(src.path);
    return { source: f.source, close: f.close, name: src.path, url: '', local: true };
  }

  async function doLoadHead(id: number, spec: HeadSpec, params: Extract<Request, { type: 'loadHead' }>['params']): Promise<HeadInfo> {
    const eng = need();
    const ac = new AbortController();
    loading = { id, ac };
    try {
      const src = spec.safetensors;
      const cfg = typeof spec.config === 'string' ? null : await openSource(spec.config);
      const { source, close, name, url, local } = await openSource(src);
      const cacheKey = src.kind === 'path' ? '' : src.cacheKey;
      const caching = await openCaching(cacheKey, name, !!params.cache, ac.signal, cachingEvents(id));
      const cache = caching.cache;
      try {
        const config = cfg ? { source: cfg.source, name: cfg.name } : (spec.config as string);
        const out = await loadHead({
          source, config, cache, cacheKey, url, name, local, params: resolveLoadParams({ ...params, cache: !!cache }), signal: ac.signal,
          onProgress: (progress) => post({ type: 'progress', id, progress }),
          onWarning: (message) => post({ type: 'warning', id, message }),
        });
        try {
          eng.attachHead(out.loader);
        } finally {
          out.loader.free();
        }
        if (info) info.decisions = eng.decisionInfo() as DecisionInfo;
        return { form: 'safetensors', bytes: out.bytes, sha256: out.sha256, verified: out.verified, seconds: out.seconds };
      } finally {
        caching.close();
        close?.();
        cfg?.close?.();
      }
    } finally {
      loading = null;
    }
  }

  async function doDecide(id: number, body: string, params: DecideParams): Promise<DecideResult> {
    const eng = need();
    if (typeof body !== 'string') throw new LoadError('bad_request', 'a decision body must be JSON text');
    const chunk = Math.max(1, Math.min(4096, Math.floor(params.prefill_chunk ?? DECIDE_PREFILL_CHUNK)));
    const t0 = performance.now();
    const begun = eng.decideBegin(body) as { promptTokens: number; cachedTokens: number };
    const total = begun.promptTokens;
    let done = begun.cachedTokens;
    const d = driver;
    try {
      // A split model: the LM-head rows the decision reads come from the shards.
      await d?.supplyLm();
      post({ type: 'decideProgress', id, done, total, cachedTokens: begun.cachedTokens });
      const t1 = performance.now();
      while (done < total) {
        await macrotask();
        if (aborted.has(id)) throw new Aborted();
        const left = d ? await d.decideStep(chunk) : eng.decidePrefill(chunk);
        done = total - left;
        post({ type: 'decideProgress', id, done, total, cachedTokens: begun.cachedTokens });
      }
      const promptMs = performance.now() - t1;
      const json = eng.decideFinish();
      // The approximate readout restores the state prefix once per prompt: its count is final now.
      const stats = eng.decideStats() as { promptTokens: number; cachedTokens: number };
      return { json, promptTokens: total, cachedTokens: stats.cachedTokens, promptMs, totalMs: performance.now() - t0 };
    } catch (e) {
      if (engine === eng) eng.decideCancel();
      throw e;
    }
  }

  /**
   * Runs the warm-up's passes (load/warm.ts) while no request is queued, then frees it: by the
   * first request the code its passes run is compiled. A request stops it (after one pass at most).
   */
  async function warmWhileIdle(w: WarmUp, eng: WasmEngine) {
    try {
      do await macrotask();
      while (engine === eng && !pending.size && !loading && w.step());
    } catch (e) {
      console.warn(`clef: could not warm the engine's code (the first request will be slower): ${(e as Error).message}`);
    } finally {
      w.free();
    }
  }

  /** Runs `f` after the queued generations (one at a time). */
  function enqueue(id: number, f: () => Promise<void>) {
    pending.add(id);
    queue = queue.then(async () => {
      running = id;
      try {
        if (aborted.has(id)) throw new Aborted();
        await f();
      } catch (e) {
        fail(id, e);
      } finally {
        running = null;
        aborted.delete(id);
        pending.delete(id);
      }
    });
  }

  function handle(req: Request): void {
    const id = req.id;
    try {
      switch (req.type) {
        case 'load':
          doLoad(id, req.source, req.params).then((r) => result(id, 'load', r), (e) => fail(id, e));
          return;
        case 'generate':
          enqueue(id, async () => result(id, 'generate', await doGenerate(id, req.prompt, req.params)));
          return;
        case 'decide':
          enqueue(id, async () => result(id, 'decide', await doDecide(id, req.body, req.params ?? {})));
          return;
        case 'loadHead':
          enqueue(id, async () => result(id, 'loadHead', await doLoadHead(id, req.head, req.params)));
          return;
        case 'abort': {
          if (req.target === undefined) {
            for (const t of pending) aborted.add(t);
            loading?.ac.abort(new Aborted());
          } else {
            if (pending.has(req.target)) aborted.add(req.target);
            if (loading?.id === req.target) loading.ac.abort(new Aborted());
          }
          result(id, 'abort', null);
          return;
        }
        case 'tokenize':
          result(id, 'tokenize', Array.from(need().tokenize(req.text, req.special)));
          return;
        case 'detokenize':
          result(id, 'detokenize', need().detokenize(Uint32Array.from(req.ids), req.special));
          return;
        case 'render':
          result(id, 'render', need().applyChatTemplate(chatRequestJson(req.messages, req)));
          return;
        case 'reset':
          enqueue(id, async () => {
            need().reset();
            result(id, 'reset', null);
          });
          return;
        case 'fault':
          if (!pool || !Number.isInteger(req.killShard) || req.killShard < 0 || req.killShard >= pool.size) {
            throw new LoadError('bad_request', `no shard worker ${req.killShard} (the model is in ${pool?.size ?? 0} shard workers)`);
          }
          pool.kill(req.killShard);
          result(id, 'fault', null);
          return;
        case 'stats': {
          let mem = 0;
          let simd = '';
          try {
            mem = wasmReady ? (wasmMemory() as WebAssembly.Memory).buffer.byteLength : 0;
            simd = wasmReady ? simdLevel() : '';
          } catch {
            /* not initialised */
          }
          const s: WorkerStats = { wasmMemoryBytes: mem, jsHeapBytes: jsHeap(), loaded: !!engine, simd };
          result(id, 'stats', s);
          return;
        }
        case 'unload':
          for (const t of pending) aborted.add(t);
          loading?.ac.abort(new Aborted());
          enqueue(id, async () => {
            engine?.free();
            engine = null;
            info = null;
            pool?.terminate();
            pool = null;
            driver = null;
            result(id, 'unload', null);
          });
          return;
        default:
          throw new LoadError('bad_request', `unknown request type '${(req as { type: string }).type}'`);
      }
    } catch (e) {
      fail(id, e);
    }
  }

  return { handle, get info() { return info; } };
}

/**
 * A chat prompt as the JSON text the engine's template renderer reads (src/chat.rs
 * `ChatInput::from_request_json`, the one place where messages become template values: key order
 * kept, tool-call arguments given as JSON strings parsed, content parts handled, typed errors).
 */
function chatRequestJson(
  messages: ChatMessageInput[],
  o: { tools?: unknown[]; enableThinking?: boolean; addGenerationPrompt?: boolean; chatTemplateKwargs?: Record<string, unknown> },
): string {
  if (!Array.isArray(messages)) throw new LoadError('bad_request', 'messages must be an array');
  try {
    return JSON.stringify({
      messages, tools: o.tools ?? undefined, add_generation_prompt: o.addGenerationPrompt ?? true,
      enable_thinking: o.enableThinking, chat_template_kwargs: o.chatTemplateKwargs ?? undefined,
    });
  } catch (e) {
    throw new LoadError('bad_request', `the messages cannot be written as JSON: ${(e as Error).message}`);
  }
}

// ------------------------------------------------------------------------------------------------
// Browser: attach to the worker scope.

interface WorkerScope {
  postMessage(msg: unknown): void;
  addEventListener(type: 'message', f: (e: MessageEvent) => void): void;
}

declare const WorkerGlobalScope: { new (): unknown } | undefined;

if (typeof WorkerGlobalScope !== 'undefined' && typeof self !== 'undefined' && self instanceof (WorkerGlobalScope as unknown as typeof Object)) {
  const scope = self as unknown as WorkerScope;
  const core = createCore((msg) => scope.postMessage(msg), {
    gemmProfile: 'wide',
    initWasm: async (wasmUrl) => {
      const url = wasmUrl ?? new URL(`./${wasmFile(detectSimd())}`, import.meta.url);
      const res = await fetch(url);
      if (!res.ok) throw new LoadError('internal', `could not load the engine's wasm (${url}): HTTP ${res.status}`);
      // Compiled once: the same module is instantiated here and in every shard worker. Streamed
      // where the host labels it application/wasm (compiled as it arrives; Chromium also keeps
      // the optimized code in its code cache for the next visit), else from the bytes.
      const wasmType = res.headers.get('content-type')?.split(';')[0].trim() === 'application/wasm';
      const module = await (wasmType ? WebAssembly.compileStreaming(res) : WebAssembly.compile(await res.arrayBuffer()));
      await init({ module_or_path: module });
      return module;
    },
    spawnShard: async (i) => browserShard(i, new URL('./clef-shard.js', import.meta.url)),
    localShard: () => localShard(new URL('./clef-shard.js', import.meta.url)),
  });
  scope.addEventListener('message', (e: MessageEvent) => core.handle(e.data as Request));
}

/** Node: one wasm instance per process, shared by the engines of that process. */
let nodeWasm: Promise<WebAssembly.Module> | null = null;

/** Node: the same core in-process, wasm read from beside this file. */
export function createNodeCore(post: Post) {
  const importNode = (m: string): Promise<any> => import(/* @vite-ignore */ m); // eslint-disable-line @typescript-eslint/no-explicit-any
  return createCore(post, {
    gemmProfile: 'narrow',
    spawnShard: (i) => nodeShard(i, new URL('./clef-shard.js', import.meta.url)),
    localShard: () => localShard(new URL('./clef-shard.js', import.meta.url)),
    cores: async () => (await importNode('node:os')).availableParallelism(),
    initWasm: (wasmUrl) =>
      (nodeWasm ??= (async () => {
        const fs = await importNode('node:fs');
        const u = wasmUrl ? new URL(wasmUrl, import.meta.url) : new URL(`./${wasmFile(detectSimd())}`, import.meta.url);
        const module = new WebAssembly.Module(fs.readFileSync(u));
        initSync({ module });
        return module;
      })()),
    openPath: async (path) => {
      const fs = await importNode('node:fs');
      const p = path.startsWith('file:') ? new URL(path) : path;
      let fd: number;
      try {
        fd = fs.openSync(p, 'r');
      } catch (e) {
        throw new LoadError('not_found', (e as Error).message);
      }
      const size = fs.fstatSync(fd).size;
      const file = typeof p === 'string' ? p : (await importNode('node:url')).fileURLToPath(p);
      const source = new SyncFileSource(String(path), size, (offset, dest) => fs.readSync(fd, dest, 0, dest.length, offset), file);
      return { source, close: () => fs.closeSync(fd) };
    },
  });
}
