// clef-web: Clef-Flash (qwen35) in the browser, behind OpenAI's API shapes.
//
//   import { ClefEngine } from 'https://…/dist/clef.js';
//   const engine = await ClefEngine.load('NANI-Nithin/clef-flash-GGUF:IQ2_M', { onProgress: console.log });
//   const r = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }] });
//   for await (const c of await engine.chat.completions.create({ messages, stream: true })) …
//
// The engine runs in a module Web Worker (dist/clef-worker.js, found beside this file; a cross-
// origin CDN copy is started through a same-origin blob: wrapper). In Node it runs in-process.

import type {
  ErrorCode, ErrorInfo, Event, GenerateParams, GenerateResult, ModelInfo, PromptSpec, Request, RequestBody, RequestType, Response,
  OutputSpec, Results, SourceSpec, SplitStats, TokenLogprob, WorkerStats,
} from './protocol.js';
import type {
  ChatChoiceLogprobs, ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParams, ChatCompletionTokenLogprob, ChatCompletionTool,
  ChatFinishReason, ChatStream, Completion, CompletionCreateParams, CompletionLogprobs, CompletionUsage, DecideOptions, HeadRef,
  LoadHeadOptions, LoadOptions, SamplingParams, SplitTimes, SystemOneRequest, SystemOneResponse,
} from './types.js';
import type { HeadInfo, HeadSpec } from './protocol.js';
import { resolveModel, type ModelRef } from './resolve.js';
import { clearCache, deleteCached, listCached, persistCache, type CachedModel } from './cache.js';
import {
  BadRequest, chatRequest, checkMessages, checkNumber, completionRequest, loadParams, templateKwargs, type ChatRequest, type CompletionRequest,
} from './validate.js';
import { ToolCallParser, type ToolCall, type ToolDefinition } from './toolcalls.js';

export type * from './types.js';
export type {
  ErrorCode, ErrorInfo, OutputSpec, TokenLogprob, LoadPhase, CacheStatus, LoadProgress, LoadRetry, ModelInfo, LoadStats, WorkerStats, FinishReason, DecisionInfo,
  HeadInfo,
} from './protocol.js';
export { DECISION_STATUS } from './protocol.js';
export type { CachedModel } from './cache.js';
export type { ModelRef } from './resolve.js';
export { resolveModel } from './resolve.js';
export { ToolCallParser, parseToolCalls, typedValue } from './toolcalls.js';
export { createOpenAIFetch, type OpenAIFetchOptions } from './openai-fetch.js';
export { createSystemOneFetch, type SystemOneFetchOptions } from './systemone-fetch.js';
export type { ToolCall, ToolCallEvent, ToolDefinition } from './toolcalls.js';

/** Every error of the API: `code` says what went wrong (see ErrorCode). */
export class ClefError extends Error {
  readonly code: ErrorCode;
  readonly fatal: boolean;
  constructor(info: ErrorInfo) {
    super(info.message);
    this.code = info.code;
    this.fatal = !!info.fatal;
    this.name = info.code === 'aborted' ? 'AbortError' : 'ClefError';
  }
}

const isNode = (): boolean => {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return !!p?.versions?.node && typeof (globalThis as { window?: unknown }).window === 'undefined';
};

// ------------------------------------------------------------------------------------------------
// Transport: a Worker, or the worker core in-process (Node)

interface Transport {
  send(req: Request): void;
  onmessage: (msg: Response) => void;
  onfatal: (message: string) => void;
  terminate(): void;
}

class WorkerTransport implements Transport {
  onmessage: (msg: Response) => void = () => {};
  onfatal: (message: string) => void = () => {};
  private worker: Worker;
  private blobUrl: string | null = null;

  constructor(workerUrl?: string | URL) {
    const url = new URL(workerUrl ?? './clef-worker.js', import.meta.url);
    if (typeof location !== 'undefined' && url.origin !== location.origin) {
      // Workers must be same-origin: start a blob: module that imports the CDN copy.
      this.blobUrl = URL.createObjectURL(new Blob([`import ${JSON.stringify(url.href)};\n`], { type: 'text/javascript' }));
      this.worker = new Worker(this.blobUrl, { type: 'module', name: 'clef' });
    } else {
      this.worker = new Worker(url, { type: 'module', name: 'clef' });
    }
    this.worker.onmessage = (e: MessageEvent) => this.onmessage(e.data as Response);
    this.worker.onerror = (e: ErrorEvent) => {
      e.preventDefault?.();
      this.onfatal(`the engine worker failed: ${e.message || 'could not start (is clef-worker.js served beside clef.js?)'}`);
    };
    this.worker.onmessageerror = () => this.onfatal('a message from the engine worker could not be read');
  }
  send(req: Request): void {
    this.worker.postMessage(req);
  }
  terminate(): void {
    this.worker.terminate();
    if (this.blobUrl) URL.revokeObjectURL(this.blobUrl);
  }
}

class InProcessTransport implements Transport {
  onmessage: (msg: Response) => void = () => {};
  onfatal: (message: string) => void = () => {};
  private core: { handle(req: Request): void } | null = null;
  private dead = false;

  static async create(workerUrl?: string | URL): Promise<InProcessTransport> {
    const t = new InProcessTransport();
    const url = new URL(workerUrl ?? './clef-worker.js', import.meta.url).href;
    const mod = await import(/* @vite-ignore */ url);
    t.core = mod.createNodeCore((msg: Response) => {
      if (!t.dead) t.onmessage(msg);
    });
    return t;
  }
  send(req: Request): void {
    // Asynchronous like postMessage (the caller registers before answers arrive).
    setTimeout(() => this.core?.handle(req), 0);
  }
  terminate(): void {
    this.dead = true;
    this.core?.handle({ type: 'unload', id: -1 });
    this.core = null;
  }
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: ClefError) => void;
  onEvent?: (e: Event) => void;
}

class Rpc {
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private dead: ClefError | null = null;

  constructor(private t: Transport) {
    t.onmessage = (msg) => this.receive(msg);
    t.onfatal = (message) => this.kill(new ClefError({ code: 'worker_crashed', message, fatal: true }));
  }

  private receive(msg: Response) {
    const p = this.pending.get(msg.id);
    if (!p) return;
    if (msg.type === 'result') {
      this.pending.delete(msg.id);
      p.resolve(msg.result);
    } else if (msg.type === 'error') {
      this.pending.delete(msg.id);
      const e = new ClefError(msg.error);
      if (e.fatal) this.dead = e;
      p.reject(e);
    } else p.onEvent?.(msg);
  }

  kill(e: ClefError) {
    this.dead = e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }

  /** Sends a request; `started(id)` is called with its id before anything can arrive. */
  call<K extends RequestType>(body: RequestBody<K>, onEvent?: (e: Event) => void, started?: (id: number) => void): Promise<Results[K]> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise<Results[K]>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, onEvent });
      started?.(id);
      this.t.send({ ...body, id } as Request);
    });
  }

  get ids(): number[] {
    return [...this.pending.keys()];
  }

  terminate() {
    this.kill(new ClefError({ code: 'not_loaded', message: 'the engine was unloaded' }));
    this.t.terminate();
  }
}

// ------------------------------------------------------------------------------------------------
// Reasoning: split `<think>…</think>` out of the generated text, as it streams

const OPEN = '<think>';
const CLOSE = '</think>';

function heldSuffix(text: string, tag: string): number {
  for (let k = Math.min(tag.length - 1, text.length); k > 0; k--) if (text.endsWith(tag.slice(0, k))) return k;
  return 0;
}

export class ThinkSplitter {
  private buf = '';
  private atStart = true;
  private afterClose = false;
  reasoningTokens = 0;

  constructor(public inThink: boolean) {}

  /** Adds generated text; returns what can be emitted now. */
  push(text: string, isFinal = false): { reasoning: string; content: string } {
    this.buf += text;
    let reasoning = '';
    let content = '';
    for (;;) {
      if (this.inThink) {
        const i = this.buf.indexOf(CLOSE);
        if (i >= 0) {
          reasoning += this.buf.slice(0, i);
          this.buf = this.buf.slice(i + CLOSE.length);
          this.inThink = false;
          this.afterClose = true;
          continue;
        }
        const keep = isFinal ? 0 : heldSuffix(this.buf, CLOSE);
        reasoning += this.buf.slice(0, this.buf.length - keep);
        this.buf = this.buf.slice(this.buf.length - keep);
        break;
      }
      if (this.afterClose) {
        // Drop the blank line(s) between </think> and the answer.
        const t = this.buf.replace(/^\s+/, '');
        if (!t && !isFinal) {
          this.buf = '';
          break;
        }
        this.buf = t;
        this.afterClose = false;
      }
      if (this.atStart) {
        const t = this.buf.replace(/^\s+/, '');
        if (OPEN.startsWith(t) && t.length < OPEN.length && !isFinal) break; // could become <think>
        if (t.startsWith(OPEN)) {
          this.buf = t.slice(OPEN.length);
          this.inThink = true;
          this.atStart = false;
          continue;
        }
        this.atStart = !this.buf && !isFinal;
      }
      content += this.buf;
      this.buf = '';
      break;
    }
    if (reasoning.startsWith('\n') && !this.seenReasoning) reasoning = reasoning.slice(1);
    if (reasoning) this.seenReasoning = true;
    return { reasoning, content };
  }
  private seenReasoning = false;
}

// ------------------------------------------------------------------------------------------------
// A chat answer: reasoning, content and tool calls, as the generated text streams

type AnswerPart = { kind: 'reasoning'; text: string } | { kind: 'content'; text: string } | { kind: 'call'; call: ToolCall };

/** Generated text → reasoning (ThinkSplitter), then content and tool calls (ToolCallParser, when tools are on). */
export class ChatAnswer {
  private split: ThinkSplitter;
  private parser: ToolCallParser | null;
  /** Tokens generated inside the reasoning block. */
  reasoningTokens = 0;

  /**
   * `thinking`: the prompt leaves a `<think>` block open. `tools`: parse tool calls (null: plain text).
   * `prefix`: answer text the prompt already holds (a forced `<tool_call>` start).
   */
  constructor(thinking: boolean, tools: ToolDefinition[] | null, prefix = '') {
    this.split = new ThinkSplitter(thinking);
    this.parser = tools ? new ToolCallParser(tools) : null;
    if (prefix) this.parser?.push(prefix);
  }

  get calls(): ToolCall[] {
    return this.parser?.calls ?? [];
  }

  /** Inside the reasoning block (the next token's text goes to reasoning_content). */
  get inReasoning(): boolean {
    return this.split.inThink;
  }

  /** Adds one token's text (`token` < 0: text without a token); `final` at the end. */
  push(text: string, token: number, final = false): AnswerPart[] {
    if (this.split.inThink && token >= 0) this.reasoningTokens++;
    const r = this.split.push(text, final);
    const out: AnswerPart[] = [];
    if (r.reasoning) out.push({ kind: 'reasoning', text: r.reasoning });
    if (!this.parser) {
      if (r.content) out.push({ kind: 'content', text: r.content });
      return out;
    }
    for (const e of this.parser.push(r.content, final)) out.push(e.kind === 'content' ? { kind: 'content', text: e.text } : { kind: 'call', call: e.call });
    return out;
  }
}

// ------------------------------------------------------------------------------------------------
// Log-probabilities in OpenAI's shapes (the worker's TokenLogprob: ids, bytes, numbers)

const lossyUtf8 = new TextDecoder('utf-8');

/** A token's text (part of a UTF-8 character shows as U+FFFD; the bytes are exact). */
function tokenString(bytes: number[]): string {
  return lossyUtf8.decode(Uint8Array.from(bytes));
}

function chatLogprob(lp: TokenLogprob): ChatCompletionTokenLogprob {
  return {
    token: tokenString(lp.bytes), logprob: lp.logprob, bytes: lp.bytes,
    top_logprobs: lp.top.map((t) => ({ token: tokenString(t.bytes), logprob: t.logprob, bytes: t.bytes })),
  };
}

/** Chat log-probabilities as they come: the answer's tokens and the reasoning's, kept apart. */
class ChatLogprobs {
  content: ChatCompletionTokenLogprob[] = [];
  reasoning: ChatCompletionTokenLogprob[] = [];
  add(lp: TokenLogprob | undefined, reasoning: boolean) {
    if (lp) (reasoning ? this.reasoning : this.content).push(chatLogprob(lp));
  }
  get empty(): boolean {
    return !this.content.length && !this.reasoning.length;
  }
  /** The collected entries in OpenAI's shape, and a fresh start (streams send them chunk by chunk). */
  take(): ChatChoiceLogprobs {
    const out: ChatChoiceLogprobs = { content: this.content, refusal: null, ...(this.reasoning.length ? { reasoning_content: this.reasoning } : {}) };
    this.content = [];
    this.reasoning = [];
    return out;
  }
}

/** Completions' legacy shape; `offset`: where the token's text starts in the choice's text. */
function addCompletionLogprob(lp: TokenLogprob, offset: number, into: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] }): CompletionLogprobs {
  into.tokens.push(tokenString(lp.bytes));
  into.token_logprobs.push(lp.logprob);
  const top: Record<string, number> = {};
  for (const t of lp.top) {
    const k = tokenString(t.bytes);
    if (!(k in top)) top[k] = t.logprob; // two ids with the same text: the likelier one
  }
  into.top_logprobs.push(top);
  into.text_offset.push(offset);
  return into;
}

// ------------------------------------------------------------------------------------------------
// Generation plumbing

type GenEvent =
  | { kind: 'started'; promptTokens: number; cachedTokens: number; thinking: boolean }
  | { kind: 'token'; token: number; text: string; logprobs?: TokenLogprob }
  | { kind: 'done'; result: GenerateResult }
  | { kind: 'error'; error: ClefError };

/** A queue the worker's events are pushed into and a consumer pulls from. */
class EventQueue<T> {
  private items: T[] = [];
  private waiters: Array<(v: T) => void> = [];
  protected unshift(v: T) {
    this.items.unshift(v);
  }
  push(v: T) {
    const w = this.waiters.shift();
    if (w) w(v);
    else this.items.push(v);
  }
  next(): Promise<T> {
    const v = this.items.shift();
    if (v !== undefined) return Promise.resolve(v);
    return new Promise((r) => this.waiters.push(r));
  }
}

/** Generation events, with a look at the first one (started, or the error that prevented it). */
class GenQueue extends EventQueue<GenEvent> {
  /** Resolves when the generation has started; rejects with its error if it could not. */
  async first(): Promise<void> {
    const e = await this.next();
    this.unshift(e);
    if (e.kind === 'error') throw e.error;
  }
}

/** Runs a validate.ts check; its BadRequest becomes a ClefError. */
function checked<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof BadRequest) throw new ClefError({ code: 'bad_request', message: e.message });
    throw e;
  }
}

function makeUsage(r: GenerateResult, reasoningTokens?: number): CompletionUsage {
  const run = r.usage.prompt_tokens - r.usage.cached_tokens;
  const u: CompletionUsage = {
    prompt_tokens: r.usage.prompt_tokens,
    completion_tokens: r.usage.completion_tokens,
    total_tokens: r.usage.prompt_tokens + r.usage.completion_tokens,
    prompt_tokens_details: { cached_tokens: r.usage.cached_tokens },
    prompt_ms: Math.round(r.promptMs * 10) / 10,
    completion_ms: Math.round(r.generationMs * 10) / 10,
    prompt_tokens_per_second: r.promptMs > 0 ? Math.round((run * 1000 * 10) / r.promptMs) / 10 : 0,
    completion_tokens_per_second: r.generationMs > 0 ? Math.round((r.usage.completion_tokens * 1000 * 10) / r.generationMs) / 10 : 0,
  };
  if (reasoningTokens !== undefined) u.completion_tokens_details = { reasoning_tokens: reasoningTokens };
  if (r.split) {
    const ms = (x: number) => Math.round(x * 10) / 10;
    const us = (x: number) => Math.round(x * 1000) / 1000;
    const stage = ['mixer', 'ffn', 'head'] as const;
    const part = (p: SplitStats): SplitTimes => ({
      stages: p.stages, wait_ms: ms(p.waitMs), shard_ms: ms(p.shardMs), mean_shard_ms: ms(p.meanShardMs), moved_stages: p.movedStages, coordinator_ms: ms(p.coordinatorMs),
      ...(p.trace ? { trace: p.trace.map((t) => ({ stage: stage[t.kind], layer: t.layer, rows: t.rows, wait_ms: us(t.waitMs), shard_ms: t.shardMs.map(us), work: t.work })) } : {}),
    });
    const k = r.split.kernels;
    u.split = {
      workers: r.split.decode.workers, prompt: part(r.split.prompt), completion: part(r.split.decode),
      ...(k ? { kernels: { coordinator: JSON.parse(k.coordinator), shards: k.shards.map((s) => JSON.parse(s)) } } : {}),
    };
  }
  return u;
}

const rid = (prefix: string) => `${prefix}-${Math.random().toString(36).slice(2, 12)}${Date.now().toString(36)}`;
const FINGERPRINT = 'clef-web';

function streamOf<T>(controller: AbortController, gen: () => AsyncGenerator<T>): ChatStream<T> {
  return {
    controller,
    abort: () => controller.abort(),
    [Symbol.asyncIterator]: gen,
  };
}

// ------------------------------------------------------------------------------------------------
// The engine

export class ClefEngine {
  /** What was loaded (sizes, context, source, sha256, load statistics). */
  readonly info: ModelInfo;
  /** The model name as given to `load`. */
  readonly model: string;

  readonly chat: {
    completions: {
      create(body: ChatCompletionCreateParams & { stream: true }): Promise<ChatStream<ChatCompletionChunk>>;
      create(body: ChatCompletionCreateParams & { stream?: false | null }): Promise<ChatCompletion>;
      create(body: ChatCompletionCreateParams): Promise<ChatCompletion | ChatStream<ChatCompletionChunk>>;
    };
  };
  readonly completions: {
    create(body: CompletionCreateParams & { stream: true }): Promise<ChatStream<Completion>>;
    create(body: CompletionCreateParams & { stream?: false | null }): Promise<Completion>;
    create(body: CompletionCreateParams): Promise<Completion | ChatStream<Completion>>;
  };

  private closed = false;
  /** The Hub the model came from (a head from the Hub is looked up there too). */
  private hubUrl: string | undefined;

  private constructor(private rpc: Rpc, info: ModelInfo, model: string) {
    this.info = info;
    this.model = model;
    const self = this;
    this.chat = {
      completions: {
        create: ((body: ChatCompletionCreateParams) => self.createChat(body)) as ClefEngine['chat']['completions']['create'],
      },
    };
    this.completions = {
      create: ((body: CompletionCreateParams) => self.createCompletion(body)) as ClefEngine['completions']['create'],
    };
  }

  /**
   * Loads a model: `"owner/repo:QUANT"`, `"owner/repo:file.gguf"`, `{repo, file}`, a URL, a
   * File/Blob, or (Node) a path. Resolves when the model is ready to generate.
   */
  static async load(model: ModelRef | Blob | URL, options: LoadOptions = {}): Promise<ClefEngine> {
    const node = isNode();
    let source: SourceSpec;
    let name: string;
    let quant: string | undefined;
    let cache = options.cache;
    if (typeof Blob !== 'undefined' && model instanceof Blob) {
      const fname = (model as File).name || 'model.gguf';
      source = { kind: 'blob', blob: model, name: fname, cacheKey: `blob:${fname}:${model.size}:${(model as File).lastModified ?? 0}` };
      name = fname;
      cache = cache ?? false;
    } else if (node && typeof model === 'string' && !/^https?:\/\//i.test(model) && (/^(\/|\.{1,2}\/|file:|[A-Za-z]:\\)/.test(model) || /\.gguf$/i.test(model) && !model.includes(':'))) {
      source = { kind: 'path', path: model };
      name = model;
      cache = false;
    } else {
      let r;
      try {
        const ref: ModelRef = model instanceof URL ? model.href : options.file && typeof model === 'string' && !model.includes('://')
          ? { repo: model.split(':')[0], file: options.file } : (model as ModelRef);
        r = resolveModel(ref, {
          hubUrl: options.hubUrl, revision: options.revision,
          baseUrl: typeof location !== 'undefined' ? location.href : undefined,
        });
      } catch (e) {
        throw new ClefError({ code: 'bad_request', message: (e as Error).message });
      }
      source = { kind: 'url', url: r.url, cacheKey: r.cacheKey, hub: r.hub };
      name = r.name;
      quant = r.quant;
      cache = cache ?? !node;
    }
    if (node) cache = false;
    const numeric = checked(() => loadParams(options));

    let transport: Transport;
    try {
      transport = node ? await InProcessTransport.create(options.workerUrl) : new WorkerTransport(options.workerUrl);
    } catch (e) {
      throw new ClefError({ code: 'worker_crashed', message: `could not start the engine: ${(e as Error).message}` });
    }
    const rpc = new Rpc(transport);
    if (cache) persistCache().catch(() => {});
    const signal = options.signal;
    let loadId = -1;
    const onAbort = () => {
      if (loadId >= 0) rpc.call({ type: 'abort', target: loadId }).catch(() => {});
    };
    if (signal?.aborted) {
      transport.terminate();
      throw new ClefError({ code: 'aborted', message: 'aborted' });
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const info = await rpc.call<'load'>(
        {
          type: 'load',
          source,
          params: {
            cache: !!cache, ...numeric,
            quant, model: name, wasmUrl: options.wasmUrl ? new URL(options.wasmUrl, import.meta.url).href : undefined,
          },
        },
        (e) => {
          if (e.type === 'progress') options.onProgress?.(e.progress);
          else if (e.type === 'warning') (options.onWarning ?? ((m: string) => console.warn(`clef: ${m}`)))(e.message);
        },
        (id) => {
          loadId = id;
        },
      );
      const engine = new ClefEngine(rpc, info, name);
      engine.hubUrl = options.hubUrl;
      if (options.head) {
        await engine.loadHead(options.head, {
          onProgress: options.onProgress, onWarning: options.onWarning, signal: options.signal, cache: options.cache, hubUrl: options.hubUrl,
        } as LoadHeadOptions);
      }
      return engine;
    } catch (e) {
      rpc.terminate();
      if (e instanceof ClefError) throw e;
      throw new ClefError({ code: 'internal', message: (e as Error)?.message ?? String(e) });
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** The OPFS cache: list, delete, clear, ask for persistent storage. */
  static readonly cache = {
    list: (): Promise<CachedModel[]> => listCached(),
    /** Deletes a cached model (a model name as given to `load`, a URL, or a cache key). */
    delete: async (model: ModelRef, options: { hubUrl?: string; revision?: string } = {}): Promise<boolean> => {
      const keys = new Set<string>();
      if (typeof model === 'string') keys.add(model);
      try {
        keys.add(resolveModel(model, { ...options, baseUrl: typeof location !== 'undefined' ? location.href : undefined }).cacheKey);
      } catch {
        /* a raw key */
      }
      let any = false;
      for (const k of keys) any = (await deleteCached(k).catch((e) => { throw new ClefError({ code: e.code ?? 'cache', message: e.message }); })) || any;
      return any;
    },
    clear: (): Promise<void> => clearCache(),
    persist: (): Promise<boolean> => persistCache(),
  };

  private check() {
    if (this.closed) throw new ClefError({ code: 'not_loaded', message: 'the engine was unloaded' });
  }

  /** Text → token ids (`special`: parse special-token texts such as <|im_start|>; default true). */
  async tokenize(text: string, options: { special?: boolean } = {}): Promise<number[]> {
    this.check();
    return this.rpc.call<'tokenize'>({ type: 'tokenize', text, special: options.special ?? true });
  }

  /** Token ids → text (`special`: render control tokens; default false). */
  async detokenize(ids: number[], options: { special?: boolean } = {}): Promise<string> {
    this.check();
    return this.rpc.call<'detokenize'>({ type: 'detokenize', ids: Array.from(ids), special: options.special ?? false });
  }

  /**
   * Renders the model's chat template as transformers would (key order kept, tool-call arguments
   * given as JSON strings parsed). A template that refuses the conversation throws a `template`
   * error with the template's own message.
   */
  async applyChatTemplate(
    messages: ChatCompletionCreateParams['messages'],
    options: { enable_thinking?: boolean; tools?: unknown[]; add_generation_prompt?: boolean; chat_template_kwargs?: Record<string, unknown> } = {},
  ): Promise<string> {
    this.check();
    messages = checked(() => checkMessages(messages));
    return this.rpc.call<'render'>({
      type: 'render', messages, tools: options.tools, addGenerationPrompt: options.add_generation_prompt,
      chatTemplateKwargs: checked(() => templateKwargs(options.enable_thinking, options.chat_template_kwargs)),
    });
  }

  /** Whether `decide` can run here, and with which head (`info.decisions`, kept current by `loadHead`). */
  get decisions(): ModelInfo['decisions'] {
    return this.info.decisions;
  }

  /**
   * Answers a SystemOne decision (Clef's API: a state and typed questions → a probability for every
   * option, in one pass through the joint schema head), as llama-server's `/v1/systemone` does.
   * `request` may be the JSON text (keeps integer-like question ids in your order). A model without
   * a head (a head-less GGUF before `loadHead`) answers by the approximate label readout: each
   * question asked of the language model with labelled options, marked `approximate: true`. Typed errors:
   * malformed_request, invalid_decision, request_too_large, not_a_decision_model, not_supported,
   * evaluation_failed, aborted.
   */
  async decide(request: SystemOneRequest | string, options: DecideOptions = {}): Promise<SystemOneResponse> {
    this.check();
    const r = await this.decideJson(request, options);
    const out = JSON.parse(r.json) as SystemOneResponse;
    out.timings = {
      prompt_tokens: r.promptTokens, cached_tokens: r.cachedTokens,
      prompt_ms: Math.round(r.promptMs * 10) / 10, total_ms: Math.round(r.totalMs * 10) / 10,
    };
    return out;
  }

  /** `decide` with the response as the engine's JSON text (for HTTP front ends: the key order is llama-server's). */
  async decideJson(request: SystemOneRequest | string, options: DecideOptions = {}): Promise<import('./protocol.js').DecideResult> {
    this.check();
    let body: string;
    if (typeof request === 'string') body = request;
    else {
      if (!request || typeof request !== 'object' || Array.isArray(request)) {
        throw new ClefError({ code: 'malformed_request', message: 'a decision request must be an object {state, questions} or its JSON text' });
      }
      try {
        body = JSON.stringify(request);
      } catch (e) {
        throw new ClefError({ code: 'malformed_request', message: `the request cannot be written as JSON: ${(e as Error).message}` });
      }
    }
    const signal = options.signal ?? undefined;
    if (signal?.aborted) throw new ClefError({ code: 'aborted', message: 'aborted' });
    let id = -1;
    const onAbort = () => {
      if (id >= 0) this.rpc.call({ type: 'abort', target: id }).catch(() => {});
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const params = options.prefillChunk !== undefined ? { prefill_chunk: checked(() => checkNumber('prefillChunk', options.prefillChunk, { min: 1, max: 4096, integer: true })) } : {};
      return await this.rpc.call<'decide'>(
        { type: 'decide', body, params },
        (e) => {
          if (e.type === 'decideProgress') options.onProgress?.({ done: e.done, total: e.total, cachedTokens: e.cachedTokens });
        },
        (x) => {
          id = x;
        },
      );
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Attaches Clef's joint schema head to a head-less model (a `qwen35` GGUF of Clef-Flash):
   * `joint_head.safetensors` + `joint_head_config.json` from the Hub (default repo
   * `Cloudflare/clef-flash`), from URLs or from files — with the model's Range streaming, OPFS
   * cache, sha256 check and progress.
   */
  async loadHead(head: HeadRef = {}, options: LoadHeadOptions & { hubUrl?: string } = {}): Promise<HeadInfo> {
    this.check();
    const spec = await headSpec(head, options.hubUrl ?? this.hubUrl);
    const node = isNode();
    const cache = node ? false : (options.cache ?? spec.safetensors.kind === 'url');
    const signal = options.signal;
    if (signal?.aborted) throw new ClefError({ code: 'aborted', message: 'aborted' });
    let id = -1;
    const onAbort = () => {
      if (id >= 0) this.rpc.call({ type: 'abort', target: id }).catch(() => {});
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const r = await this.rpc.call<'loadHead'>(
        { type: 'loadHead', head: spec, params: { cache, sha256: options.sha256 } },
        (e) => {
          if (e.type === 'progress') options.onProgress?.(e.progress);
          else if (e.type === 'warning') (options.onWarning ?? ((m: string) => console.warn(`clef: ${m}`)))(e.message);
        },
        (x) => {
          id = x;
        },
      );
      (this.info as { decisions: ModelInfo['decisions'] }).decisions = { available: true, form: 'safetensors' };
      return r;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Aborts every running or queued request of this engine. */
  abort(): void {
    if (this.closed) return;
    this.rpc.call({ type: 'abort' }).catch(() => {});
  }

  /** Forgets the conversation state (prefix snapshots). */
  async reset(): Promise<void> {
    this.check();
    await this.rpc.call<'reset'>({ type: 'reset' });
  }

  /** wasm memory and JS heap of the engine. */
  async stats(): Promise<WorkerStats> {
    this.check();
    return this.rpc.call<'stats'>({ type: 'stats' });
  }

  /**
   * Fault injection for tests: stops shard worker `killShard` of a split model as if it had
   * crashed (the next request fails with a fatal `worker_crashed`; load the model again).
   * @internal
   */
  async injectFault(f: { killShard: number }): Promise<void> {
    this.check();
    await this.rpc.call<'fault'>({ type: 'fault', killShard: f.killShard });
  }

  /** Stops the worker and frees all memory. */
  async unload(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.rpc.terminate();
  }

  /** Runs one generation; events go to the returned queue. */
  private generate(prompt: PromptSpec, params: GenerateParams, signal: AbortSignal | undefined): GenQueue {
    this.check();
    const q = new GenQueue();
    let id = -1;
    const onAbort = () => {
      if (id >= 0) this.rpc.call({ type: 'abort', target: id }).catch(() => {});
    };
    if (signal?.aborted) {
      q.push({ kind: 'error', error: new ClefError({ code: 'aborted', message: 'aborted' }) });
      return q;
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    this.rpc
      .call<'generate'>(
        { type: 'generate', prompt, params },
        (e) => {
          if (e.type === 'started') q.push({ kind: 'started', promptTokens: e.promptTokens, cachedTokens: e.cachedTokens, thinking: e.thinking });
          else if (e.type === 'token') q.push({ kind: 'token', token: e.token, text: e.text, logprobs: e.logprobs });
        },
        (x) => {
          id = x;
        },
      )
      .then(
        (result) => {
          if (result.finishReason === 'abort') q.push({ kind: 'error', error: new ClefError({ code: 'aborted', message: 'aborted' }) });
          else q.push({ kind: 'done', result });
        },
        (error) => q.push({ kind: 'error', error: error instanceof ClefError ? error : new ClefError({ code: 'internal', message: String(error) }) }),
      )
      .finally(() => signal?.removeEventListener('abort', onAbort));
    return q;
  }

  private createChat(body: ChatCompletionCreateParams): Promise<ChatCompletion | ChatStream<ChatCompletionChunk>> {
    let req: ChatRequest;
    try {
      this.check();
      req = checked(() => chatRequest(body));
    } catch (e) {
      return Promise.reject(e);
    }
    const { params, prompt, tools } = req;
    const created = Math.floor(Date.now() / 1000);
    const id = rid('chatcmpl');
    const model = body.model ?? this.model;
    const wantIds = !!body.return_token_ids;
    const finishReason = (r: GenerateResult, answer: ChatAnswer): ChatFinishReason =>
      answer.calls.length && r.finishReason === 'stop' ? 'tool_calls' : (r.finishReason as 'stop' | 'length');

    if (!req.stream) {
      return (async () => {
        const q = this.generate(prompt, params, body.signal ?? undefined);
        let answer: ChatAnswer | null = null;
        let content = '';
        let reasoning = '';
        const ids: number[] = [];
        const logprobs = params.logprobs !== undefined ? new ChatLogprobs() : null;
        const take = (parts: AnswerPart[]) => {
          for (const p of parts) {
            if (p.kind === 'reasoning') reasoning += p.text;
            else if (p.kind === 'content') content += p.text;
          }
        };
        for (;;) {
          const e = await q.next();
          if (e.kind === 'error') throw e.error;
          if (e.kind === 'started') answer = new ChatAnswer(e.thinking, tools.parse, tools.prefix);
          else if (e.kind === 'token') {
            if (e.token >= 0) ids.push(e.token);
            const before = answer!.reasoningTokens;
            take(answer!.push(e.text, e.token));
            logprobs?.add(e.logprobs, answer!.reasoningTokens > before);
          } else {
            take(answer!.push('', -1, true));
            const calls = answer!.calls;
            if (calls.length) content = content.trim();
            const out: ChatCompletion = {
              id, object: 'chat.completion', created, model,
              choices: [{
                index: 0,
                message: {
                  role: 'assistant', content: calls.length && !content ? null : content,
                  ...(reasoning ? { reasoning_content: reasoning } : {}), ...(calls.length ? { tool_calls: calls } : {}), refusal: null,
                },
                logprobs: logprobs ? logprobs.take() : null,
                finish_reason: finishReason(e.result, answer!),
                ...(wantIds ? { token_ids: ids } : {}),
              }],
              usage: makeUsage(e.result, answer!.reasoningTokens),
              system_fingerprint: FINGERPRINT,
              ...(wantIds ? { prompt_token_ids: e.result.promptIds } : {}),
            };
            return out;
          }
        }
      })();
    }

    const controller = new AbortController();
    const signals = [controller.signal, body.signal].filter(Boolean) as AbortSignal[];
    const signal = signals.length > 1 ? anySignal(signals) : signals[0];
    const q = this.generate(prompt, params, signal);
    const self = this;
    // Like an HTTP API, a request that cannot start (bad arguments, context full) rejects here.
    return q.first().then(() => streamOf(controller, async function* (): AsyncGenerator<ChatCompletionChunk> {
      type Delta = ChatCompletionChunk['choices'][0]['delta'];
      const logprobs = params.logprobs !== undefined ? new ChatLogprobs() : null;
      /** A chunk; it carries the log-probabilities collected since the last one. */
      const chunk = (delta: Delta, finish: ChatFinishReason | null = null): ChatCompletionChunk => ({
        id, object: 'chat.completion.chunk', created, model,
        choices: [{ index: 0, delta, logprobs: logprobs && !logprobs.empty ? logprobs.take() : null, finish_reason: finish }],
        system_fingerprint: FINGERPRINT,
      });
      /** The chunks of some answer parts; `ids` go on the first. A call is two chunks: its header, then its arguments. */
      function* chunks(parts: AnswerPart[], ids: number[] | null): Generator<ChatCompletionChunk> {
        let idField = ids ? { token_ids: ids } : {};
        for (const p of parts) {
          if (p.kind === 'reasoning') yield chunk({ reasoning_content: p.text, ...idField });
          else if (p.kind === 'content') yield chunk({ content: p.text, ...idField });
          else {
            const index = answer!.calls.indexOf(p.call);
            yield chunk({ tool_calls: [{ index, id: p.call.id, type: 'function', function: { name: p.call.function.name, arguments: '' } }], ...idField });
            yield chunk({ tool_calls: [{ index, function: { arguments: p.call.function.arguments } }] });
          }
          idField = {};
        }
        // A token whose text is held back (a tag that may be starting) still sends its ids / log-probabilities.
        if (!parts.length && (ids || (logprobs && !logprobs.empty))) yield chunk(answer!.inReasoning ? { reasoning_content: '', ...idField } : { content: '', ...idField });
      }
      let answer: ChatAnswer | null = null;
      let finished = false;
      try {
        for (;;) {
          const e = await q.next();
          if (e.kind === 'error') throw e.error;
          if (e.kind === 'started') {
            answer = new ChatAnswer(e.thinking, tools.parse, tools.prefix);
            yield chunk({ role: 'assistant', content: '' });
          } else if (e.kind === 'token') {
            const before = answer!.reasoningTokens;
            const parts = answer!.push(e.text, e.token);
            logprobs?.add(e.logprobs, answer!.reasoningTokens > before);
            yield* chunks(parts, wantIds && e.token >= 0 ? [e.token] : null);
          } else {
            yield* chunks(answer!.push('', -1, true), null);
            const last = chunk({}, finishReason(e.result, answer!));
            last.usage = makeUsage(e.result, answer!.reasoningTokens);
            if (wantIds) last.prompt_token_ids = e.result.promptIds;
            finished = true;
            yield last;
            return;
          }
        }
      } finally {
        // The consumer stopped iterating early: stop generating.
        if (!finished && !self.closed) controller.abort();
      }
    }));
  }

  private createCompletion(body: CompletionCreateParams): Promise<Completion | ChatStream<Completion>> {
    let req: CompletionRequest;
    try {
      this.check();
      req = checked(() => completionRequest(body));
    } catch (e) {
      return Promise.reject(e);
    }
    const { params, prompt, echo } = req;
    const created = Math.floor(Date.now() / 1000);
    const id = rid('cmpl');
    const model = body.model ?? this.model;
    const wantIds = !!body.return_token_ids;

    if (!req.stream) {
      return (async () => {
        const q = this.generate(prompt, params, body.signal ?? undefined);
        let text = echo;
        const ids: number[] = [];
        const logprobs: CompletionLogprobs | null = params.logprobs !== undefined ? { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] } : null;
        for (;;) {
          const e = await q.next();
          if (e.kind === 'error') throw e.error;
          if (e.kind === 'token') {
            if (logprobs && e.logprobs) addCompletionLogprob(e.logprobs, text.length, logprobs);
            text += e.text;
            if (e.token >= 0) ids.push(e.token);
          } else if (e.kind === 'done') {
            return {
              id, object: 'text_completion', created, model,
              choices: [{ index: 0, text, logprobs, finish_reason: e.result.finishReason as 'stop' | 'length', ...(wantIds ? { token_ids: ids } : {}) }],
              usage: makeUsage(e.result),
              system_fingerprint: FINGERPRINT,
              ...(wantIds ? { prompt_token_ids: e.result.promptIds } : {}),
            } satisfies Completion;
          }
        }
      })();
    }
    const controller = new AbortController();
    const signals = [controller.signal, body.signal].filter(Boolean) as AbortSignal[];
    const signal = signals.length > 1 ? anySignal(signals) : signals[0];
    const q = this.generate(prompt, params, signal);
    const self = this;
    return q.first().then(() => streamOf(controller, async function* (): AsyncGenerator<Completion> {
      const chunk = (text: string, finish: 'stop' | 'length' | null, ids?: number[], logprobs: CompletionLogprobs | null = null): Completion => ({
        id, object: 'text_completion', created, model,
        choices: [{ index: 0, text, logprobs, finish_reason: finish as 'stop', ...(ids ? { token_ids: ids } : {}) }],
        system_fingerprint: FINGERPRINT,
      } as Completion);
      let finished = false;
      let offset = echo.length;
      try {
        if (echo) yield chunk(echo, null);
        for (;;) {
          const e = await q.next();
          if (e.kind === 'error') throw e.error;
          if (e.kind === 'token') {
            const lp = e.logprobs ? addCompletionLogprob(e.logprobs, offset) : null;
            offset += e.text.length;
            if (e.text || lp || (wantIds && e.token >= 0)) yield chunk(e.text, null, wantIds && e.token >= 0 ? [e.token] : undefined, lp);
          } else if (e.kind === 'done') {
            const last = chunk('', e.result.finishReason as 'stop' | 'length');
            last.usage = makeUsage(e.result);
            if (wantIds) last.prompt_token_ids = e.result.promptIds;
            finished = true;
            yield last;
            return;
          }
        }
      } finally {
        if (!finished && !self.closed) controller.abort();
      }
    }));
  }
}

function anySignal(signals: AbortSignal[]): AbortSignal {
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any(signals);
  const c = new AbortController();
  for (const s of signals) {
    if (s.aborted) c.abort(s.reason);
    else s.addEventListener('abort', () => c.abort(s.reason), { once: true });
  }
  return c.signal;
}

/** The Hub repository holding Clef-Flash's joint schema head (the safetensors form). */
export const DEFAULT_HEAD_REPO = 'Cloudflare/clef-flash';

/** A HeadRef → where the worker reads the head and its config. */
async function headSpec(head: HeadRef, hubUrl?: string): Promise<HeadSpec> {
  const base = typeof location !== 'undefined' ? location.href : undefined;
  const source = (x: string | URL | Blob, what: string): import('./protocol.js').SourceSpec => {
    if (typeof Blob !== 'undefined' && x instanceof Blob) {
      const name = (x as File).name || what;
      return { kind: 'blob', blob: x, name, cacheKey: `blob:${name}:${x.size}:${(x as File).lastModified ?? 0}` };
    }
    const s = x instanceof URL ? x.href : String(x);
    if (isNode() && !/^https?:\/\//i.test(s)) return { kind: 'path', path: s };
    try {
      const r = resolveModel(s, { baseUrl: base });
      return { kind: 'url', url: r.url, cacheKey: r.cacheKey };
    } catch (e) {
      throw new ClefError({ code: 'bad_request', message: (e as Error).message });
    }
  };
  if (!head || typeof head !== 'object') throw new ClefError({ code: 'bad_request', message: 'a head is {repo?, revision?} or {safetensors, config}' });
  if ('safetensors' in head) {
    const c = head.config;
    let config: string | import('./protocol.js').SourceSpec;
    if (typeof c === 'string' && c.trimStart().startsWith('{')) config = c;
    else if (c && typeof c === 'object' && !(c instanceof URL) && !(typeof Blob !== 'undefined' && c instanceof Blob)) config = JSON.stringify(c);
    else if (c !== undefined && c !== null) config = source(c as string | URL | Blob, 'joint_head_config.json');
    else throw new ClefError({ code: 'bad_request', message: 'a head file needs its config (joint_head_config.json)' });
    return { safetensors: source(head.safetensors, 'joint_head.safetensors'), config };
  }
  const ref = head as Exclude<HeadRef, { safetensors: unknown }>;
  const hub = (file: string) => {
    try {
      const r = resolveModel({ repo: ref.repo ?? DEFAULT_HEAD_REPO, file, revision: ref.revision }, { hubUrl: ref.hubUrl ?? hubUrl, baseUrl: base });
      return { kind: 'url' as const, url: r.url, cacheKey: r.cacheKey, hub: r.hub };
    } catch (e) {
      throw new ClefError({ code: 'bad_request', message: (e as Error).message });
    }
  };
  return { safetensors: hub(ref.file ?? 'joint_head.safetensors'), config: hub(ref.configFile ?? 'joint_head_config.json') };
}

export default ClefEngine;
