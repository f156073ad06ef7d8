// The one message schema between the page (index.ts) and the engine worker (worker.ts).
// Both sides import these types, so a request, its events and its result cannot drift apart.
//
//   page → worker: Request            {type, id, …}          (ids are unique per connection)
//   worker → page: Event | Result | Failure, all carrying the id of the request they answer
//
// Every request ends with exactly one Result (`type: 'result'`, with `op` = the request type) or
// one Failure (`type: 'error'`). Events (progress, generation tokens, warnings) come before it.

/** Typed error codes (also the `code` of a `ClefError` on the page). */
export type ErrorCode =
  | 'bad_request' // invalid arguments (unknown option, empty prompt, bad token id, …)
  | 'not_loaded' // no model in this engine (load failed or unloaded)
  | 'context_full' // the prompt does not fit in the context
  | 'aborted' // the caller aborted (AbortSignal, engine.abort())
  | 'network' // HTTP failure after retries, or an unusable server response
  | 'not_found' // 404 / 401 / 403 for the model file
  | 'offline' // the network is unreachable and the cache cannot serve the whole model
  | 'integrity' // sha256 / checksum mismatch that re-fetching did not repair
  | 'quota' // not enough storage for the OPFS cache
  | 'cache' // the OPFS cache could not be used (locked by another tab, …)
  | 'out_of_memory' // the model (+ context) does not fit in this tab's WebAssembly memory
  | 'bad_gguf' // not a GGUF file, or a corrupt one
  | 'wrong_architecture' // a GGUF of another architecture than qwen35
  | 'unsupported_type' // a tensor type this build cannot run
  | 'template' // the chat template failed to render
  | 'bad_schema' // a response_format schema or tool definitions that constrained decoding cannot compile
  | 'worker_crashed' // the worker died (script error, wasm trap): load the model again
  // Decisions (SystemOne; src/clef/mod.rs DecisionError — the HTTP status of each is DECISION_STATUS):
  | 'malformed_request' // the decision body is not JSON, not an object, or has duplicate keys (400)
  | 'invalid_decision' // valid JSON that is not a valid decision: unknown type, 0 or 256 options, 1 score level, … (422)
  | 'request_too_large' // too many questions, too much text, or a prompt longer than the context (413)
  | 'not_a_decision_model' // the model has no decision head and none was attached (501)
  | 'not_supported' // this engine cannot run decisions as set up (501; reserved: no current setup gives it)
  | 'bad_head' // the decision head's weights, configuration or template are unusable
  | 'evaluation_failed' // the head produced no finite scores (500)
  | 'internal'; // a bug: please report

/** The HTTP status of each decision error class (llama-server's newer /v1/systemone; spec §3.5). */
export const DECISION_STATUS: Partial<Record<ErrorCode, number>> = {
  malformed_request: 400,
  invalid_decision: 422,
  request_too_large: 413,
  not_a_decision_model: 501,
  not_supported: 501,
  bad_head: 500,
  evaluation_failed: 500,
};

export interface ErrorInfo {
  code: ErrorCode;
  message: string;
  /** The engine cannot be used any more (wasm trap, crashed worker): load again. */
  fatal?: boolean;
}

// --------------------------------------------------------------------------------------------
// Loading

/** Where the worker reads a GGUF from. The page resolves model names (see resolve.ts). */
export type SourceSpec =
  | {
      kind: 'url';
      url: string;
      /** Cache identity (the resolved URL without query string). */
      cacheKey: string;
      /** For the Hub: lets the worker ask the API for the file's sha256 if the headers lack it. */
      hub?: { hubUrl: string; repo: string; revision: string; file: string };
    }
  | { kind: 'blob'; blob: Blob; name: string; cacheKey: string }
  | { kind: 'path'; path: string }; // Node only

export interface LoadParams {
  /** Context length (tokens) to allocate for; default: min(model's, 8192), lowered to fit. */
  contextLength?: number;
  /** Store / reuse the file in the OPFS cache (browser). */
  cache: boolean;
  /** Bytes per Range request (power of two, 64 KiB … 1 GiB). Default 16 MiB. */
  chunkSize?: number;
  /** Range requests in flight. Default 3. */
  concurrency?: number;
  /** Retries of a failing request without progress before giving up. Default 8. */
  maxRetries?: number;
  /** First retry delay in ms (doubles each time, max 8 s). Default 250. */
  retryDelayMs?: number;
  /** A request whose response headers do not arrive within this many ms is retried. Default 30 000. */
  timeoutMs?: number;
  /** A response body that sends nothing for this many ms is aborted and resumed. Default 30 000. */
  idleTimeoutMs?: number;
  /** Time (ms) a request may keep failing without progress before the load fails. Default 300 000. */
  retryBudgetMs?: number;
  /** The longest server Retry-After honoured, ms (a longer one waits this long). Default 60 000. */
  maxRetryAfterMs?: number;
  /** Bytes of WebAssembly memory one worker may use. Default 4 GiB (the wasm32 maximum). */
  memoryLimit?: number;
  /**
   * Shard workers the weights are split across (tensor parallelism, one wasm memory each; see
   * ARCHITECTURE.md "Several workers"). 1: the whole model in the engine worker. Default: chosen
   * from the cores (navigator.hardwareConcurrency; Node: os.availableParallelism()) and the model's size — see load/workers.ts.
   */
  workers?: number;
  /**
   * Split: the FFN and LM-head rows at each boundary between two shards held by both, this many
   * percent of a shard's share (src/split.rs), so that the engine moves work to the faster shard
   * stage by stage (src/balance.rs); used where it costs no context. Default 0 (none).
   */
  band?: number;
  /**
   * How a split model's stages reach the shard workers: 'shared' (SharedArrayBuffer + Atomics;
   * Node, or a cross-origin isolated page), 'message' (postMessage: any page), 'auto' (default:
   * shared where available).
   */
  exchange?: Exchange;
  /**
   * Whether the engine worker computes shard 0 itself, in a second wasm instance (default true):
   * N workers are then N threads, the engine worker and N − 1 shard workers. false: N shard
   * workers and an engine worker that only coordinates (for comparisons).
   */
  engineShard?: boolean;
  /** Split: record every stage's times in the usage (`SplitStats.trace`; a diagnostic). Default false. */
  traceStages?: boolean;
  /** KV cache values: 'f32' (default, exact) or 'f16' (half the memory per token: longer contexts). */
  kvCache?: 'f32' | 'f16';
  /** Expected sha256 of the whole file (else: the Hub's LFS oid when it gives one). */
  sha256?: string;
  /** The quant named by the caller (for "try a smaller quant" messages). */
  quant?: string;
  /** Model name as the caller wrote it (messages). */
  model?: string;
  /** URL of the wasm build (default: clef_web_relaxed_bg.wasm beside the worker script where relaxed SIMD validates, else clef_web_bg.wasm). */
  wasmUrl?: string;
}

/**
 * 'waiting': another tab (or worker) is loading the same model into the cache; this load goes on
 * from the cache when it is done (`loaded` / `total` are the other load's).
 */
export type LoadPhase = 'waiting' | 'header' | 'download' | 'cache' | 'verify' | 'ready';

/**
 * What became of the OPFS cache in a load (`ModelInfo.cache`):
 *   stored       the whole file is in the cache: the next load needs no download
 *   off          not asked for (`cache: false`, a File or a path)
 *   unavailable  the browser has no OPFS here, or refuses it (private windows): not cached
 *   quota        storage ran out: the chunks stored before stay (a later load resumes from them)
 *   failed       another storage failure (the cache was in use without Web Locks, a write refused, …)
 * Anything but `stored` and `off` comes with a warning saying why.
 */
export type CacheStatus = 'stored' | 'off' | 'unavailable' | 'quota' | 'failed';

/** A failed request waiting to be retried. */
export interface LoadRetry {
  /** Seconds until the next attempt (rounded up; counts down once a second). */
  inSeconds: number;
  /** Failures in a row of this request (1 = the first retry). */
  attempt: number;
  /** What went wrong ("HTTP 503", "no data for 30 s", …). */
  reason: string;
}

export interface LoadProgress {
  phase: LoadPhase;
  /** Bytes of the file in place so far (downloaded + read from cache). */
  loaded: number;
  total: number;
  /** Network bytes per second (download phase), or cache read rate. */
  bytesPerSecond: number;
  /** Seconds left at the current rate (NaN when unknown). */
  etaSeconds: number;
  /** Network bytes received so far (including re-fetches). */
  downloaded: number;
  /** Bytes served from the OPFS cache so far. */
  fromCache: number;
  /** Present while a failed request waits to be retried ("retrying in N s"). */
  retry?: LoadRetry;
}

export interface LoadStats {
  seconds: number;
  /** Network bytes received (including retried and re-fetched ranges). */
  downloadedBytes: number;
  cachedBytes: number;
  /** Download throughput of the data section (bytes/s; 0 when nothing was downloaded). */
  downloadBytesPerSecond: number;
  /** OPFS read throughput (bytes/s; 0 when nothing came from the cache). */
  cacheBytesPerSecond: number;
  /** Range requests that failed and were retried / resumed. */
  retries: number;
  /** Chunks that failed verification and were fetched again. */
  refetchedChunks: number;
  /** Peak JS heap during the load (Node: process heap; 0 in Chromium workers, which do not expose it: measure with CDP). */
  peakJsHeapBytes: number;
  wasmMemoryBytes: number;
  /** The kernels running: 'relaxed-simd' or 'simd128' (see simd.ts). */
  simd: string;
  /** Where the load's time went (ms), in order. */
  phaseMs: LoadPhaseMs;
  /** A split model from a verified cache or a file: every worker read its own part itself (load/pull.ts). */
  pulledByWorkers: boolean;
  /** Bytes those workers read, all together (each chunk whole once to check it, else only pieces). */
  pulledBytes: number;
  /**
   * Some tensors are held in a faster form than the file's (IQ2_S / IQ2_XS / IQ3_S / Q3_K matrices
   * expanded, 68 % / 86 % / 22 % / 33 % larger, src/quant/kquants/forms.rs): chosen where it costs no
   * context (loader.ts).
   */
  expanded: boolean;
  /**
   * Split: the FFN and LM-head rows at each boundary between two shards held by both, in percent of
   * a shard's share (0: none), so that the engine moves work to the faster shard token by token
   * (src/split.rs, src/balance.rs): chosen where it costs no context (loader.ts).
   */
  band: number;
}

/** A load's time by step (ms): see loader.ts for the steps. */
export interface LoadPhaseMs {
  /** Header: from the cache (after a freshness probe) or the network. */
  header: number;
  /** Starting shard workers and allocating every part's weight memory. */
  allocate: number;
  /** Of `allocate`: building the miniature of the model that warms the engine's code before the first request (load/warm.ts; 0: none). */
  warm: number;
  /** The data section: read / fetched, checked, delivered (split: the coordinator's side). */
  data: number;
  /** Of `data`: reading cached chunks. */
  cacheRead: number;
  /** Of `data`: every chunk's checksum, and (split) scattering it to the coordinator's memory and the shard workers. */
  deliver: number;
  /** Waiting for the shard workers to write what they were sent (split only). */
  settle: number;
  /** Building the engine (and every shard's) from the filled weights: state, KV cache. */
  build: number;
}

export interface ModelInfo {
  name: string;
  architecture: string;
  fileSize: number;
  weightBytes: number;
  /** Context length allocated. */
  contextLength: number;
  /** Context length the model was trained for. */
  trainedContextLength: number;
  nVocab: number;
  nLayer: number;
  nEmbd: number;
  /** Where the bytes came from. */
  source: 'network' | 'cache' | 'network+cache' | 'file';
  /** Whether the file is in the OPFS cache now (see CacheStatus). */
  cache: CacheStatus;
  /** sha256 of the file when it was verified (else null). */
  sha256: string | null;
  verified: boolean;
  etag: string | null;
  hasChatTemplate: boolean;
  /** Whether `decide` can run, and how (the joint schema head: in the GGUF, or attached with `loadHead`; else the approximate label readout). */
  decisions: DecisionInfo;
  /** Shard workers the weights are split across (1: all in the engine worker). */
  workers: number;
  /** How stages reach the shard workers ('' with one worker): see LoadParams.exchange. */
  exchange: 'shared' | 'message' | '';
  /** Whether the engine worker computes shard 0 itself (LoadParams.engineShard; false with one worker). */
  engineShard: boolean;
  /** Why that many ("requested", or how the default was chosen). */
  workersReason: string;
  stats: LoadStats;
}

/** Whether an engine answers decisions, and with which head. */
export interface DecisionInfo {
  available: boolean;
  /**
   * 'gguf': the head inside a `clef` GGUF; 'safetensors': attached from joint_head.safetensors;
   * 'approximate': no head, the label-token readout (answers carry `approximate: true`; `loadHead`
   * replaces it with the head); '': none.
   */
  form: 'gguf' | 'safetensors' | 'approximate' | '';
  /** Why not, when not available (not_a_decision_model, not_supported, bad_head). */
  code?: ErrorCode;
  message?: string;
}

/** A decision head for a head-less model: `joint_head.safetensors` and its `joint_head_config.json`. */
export interface HeadSpec {
  safetensors: SourceSpec;
  /** The config's JSON text, or where to read it. */
  config: string | SourceSpec;
}

export interface HeadInfo {
  form: 'safetensors';
  /** Bytes of head weights held (the file's data section). */
  bytes: number;
  /** sha256 of joint_head.safetensors when it was verified (else null). */
  sha256: string | null;
  verified: boolean;
  seconds: number;
}

// --------------------------------------------------------------------------------------------
// Decisions

export interface DecideParams {
  /** Prompt tokens run per slice between two looks at the message queue (default DECIDE_PREFILL_CHUNK). */
  prefill_chunk?: number;
}

/**
 * Prompt tokens per forward pass of a generation (unless `GenerateParams.prefill_chunk` says
 * otherwise). The prompt GEMM decodes each weight row once per pass for all its tokens, so longer
 * passes cost less per token: the 9B-shaped IQ2_M file, Chromium, 2 workers, a 256-token prompt ran
 * 3.92–4.46 tok/s in passes of 32 and 4.81–5.25 in passes of 128 (BENCHMARKS.md). The worker looks
 * at its messages between the stages of a pass, so an abort does not wait for the pass to end.
 */
export const PREFILL_CHUNK = 128;
/** Prompt tokens per slice of a decision (a progress event and a look at `abort` after each). */
export const DECIDE_PREFILL_CHUNK = 64;
/** Milliseconds of a one-worker pass between two looks at the worker's messages. */
export const STAGE_YIELD_MS = 50;

export interface DecideResult {
  /** The SystemOne response as JSON text, keys in llama-server's order. */
  json: string;
  promptTokens: number;
  /** Prompt tokens served from the cached state prefix (the approximate readout: over all its prompts). */
  cachedTokens: number;
  /** Time to run the prompt through the backbone (and feed the head), ms. */
  promptMs: number;
  /** Time of the whole decision (validation, prompt, head, answers), ms. */
  totalMs: number;
}

// --------------------------------------------------------------------------------------------
// Generation

export interface ChatMessageInput {
  role: string;
  content?: string | null | Array<{ type: string; text?: string }>;
  reasoning_content?: string | null;
  name?: string;
  tool_calls?: unknown[];
  tool_call_id?: string;
  [k: string]: unknown;
}

export type PromptSpec =
  | {
      kind: 'chat';
      messages: ChatMessageInput[];
      tools?: unknown[];
      enableThinking?: boolean;
      /** More template variables (`chat_template_kwargs`). */
      chatTemplateKwargs?: Record<string, unknown>;
      /**
       * Text appended after the rendered prompt: the start of the assistant's answer (e.g. a forced
       * tool call; '' for a constrained JSON answer). When given, an open `<think>` block is closed first.
       */
      assistantPrefix?: string;
    }
  | { kind: 'text'; text: string }
  | { kind: 'tokens'; ids: number[] };

/** Sampling and stopping (the engine's names; see src/wasm.rs `begin`). */
export interface GenerateParams {
  max_tokens?: number;
  temperature?: number;
  top_k?: number;
  top_p?: number;
  min_p?: number;
  repetition_penalty?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  seed?: number;
  stop?: string[];
  logit_bias?: Record<string, number>;
  ignore_eos?: boolean;
  /** Report each token's log-probability and this many alternatives (0–20); absent: none. */
  logprobs?: number;
  /** The grammar the answer must follow (constrained decoding; see src/grammar.rs OutputSpec). */
  output?: OutputSpec;
  /** Prompt tokens per forward pass (default PREFILL_CHUNK). */
  prefill_chunk?: number;
}

export type FinishReason = 'stop' | 'length' | 'abort';

/** What a constrained answer must be (src/grammar.rs `OutputSpec::from_json`). */
export type OutputSpec =
  | { type: 'json_object' }
  | { type: 'json_schema'; schema: Record<string, unknown> | boolean }
  /** The rest of a Qwen3.5 XML tool call whose start the prompt holds (`name`: the named function's header). */
  | { type: 'tool_calls'; tools: unknown[]; name?: string; parallel: boolean };

/**
 * A generated token's log-probability and the most likely alternatives, under the model's own
 * distribution (log-softmax of the raw logits at temperature 1, before bias, penalties, truncation
 * and grammar masks; see src/sampler.rs `Distribution`).
 */
export interface TokenLogprob {
  logprob: number;
  /** The token's bytes (a token may hold part of a UTF-8 character). */
  bytes: number[];
  /** Most likely first. */
  top: Array<{ id: number; bytes: number[]; logprob: number }>;
}

export interface EngineUsage {
  prompt_tokens: number;
  /** Prompt tokens served from a state snapshot (not run again). */
  cached_tokens: number;
  completion_tokens: number;
}

export interface GenerateResult {
  finishReason: FinishReason;
  usage: EngineUsage;
  /** Time to run the prompt (the uncached part), ms. */
  promptMs: number;
  /** Time from the first to the last generated token, ms. */
  generationMs: number;
  /** The prompt's token ids (for `return_token_ids`). */
  promptIds: number[];
  /** A model split across shard workers: where the time of the prompt and of the generation went. */
  split?: { prompt: SplitStats; decode: SplitStats; kernels?: KernelTrials };
}

/**
 * What each wasm instance's kernel trials chose (src/wasm.rs `kernelTrials`, JSON text): the
 * coordinator's and each shard's, by shard index (with `traceStages`).
 */
export interface KernelTrials {
  coordinator: string;
  shards: string[];
}

/**
 * Where a split model's time goes, summed over the passes of one request: every stage is one
 * exchange (the coordinator posts the stage input to each shard and waits for all results).
 */
export interface SplitStats {
  workers: number;
  /** Stages run (two per layer and pass, plus the LM head). */
  stages: number;
  /** Waiting for the shards' results (their compute + the exchange), ms. */
  waitMs: number;
  /** The slowest shard's compute per stage, summed, ms (waitMs − shardMs: the exchanges). */
  shardMs: number;
  /**
   * The shards' mean compute per stage, summed, ms. shardMs − meanShardMs is the imbalance: what
   * the stages lost waiting for a shard that ran late (an even split of the work, uneven speeds).
   */
  meanShardMs: number;
  /** Stages whose bands the engine cut other than evenly: work moved to the faster shard (src/balance.rs). */
  movedStages: number;
  /** The coordinator's own work between stages (norms, residuals, sampling, copies), ms. */
  coordinatorMs: number;
  /** Every stage, in order (load option `traceStages`). */
  trace?: StageTrace[];
}

/** One stage of a split pass, traced (load option `traceStages`). */
export interface StageTrace {
  /** 0: a mixer, 1: an FFN, 2: the LM head. */
  kind: number;
  layer: number;
  /** Input rows (tokens). */
  rows: number;
  /** Waiting for the shards (their compute + the exchange), ms. */
  waitMs: number;
  /** Each shard's compute (ms, by shard index). */
  shardMs: number[];
  /** Each shard's units of work (FFN or vocabulary rows; a mixer: 1 each), by shard index. */
  work: number[];
}

export interface WorkerStats {
  /** Size of the wasm linear memory (never shrinks). */
  wasmMemoryBytes: number;
  /** JS heap of the engine's context (0 in Chromium workers, which do not expose it). */
  jsHeapBytes: number;
  loaded: boolean;
  /** The kernels running: 'relaxed-simd' or 'simd128' ('' before the wasm is loaded). */
  simd: string;
}

// --------------------------------------------------------------------------------------------
// Messages

export type Request =
  | { type: 'load'; id: number; source: SourceSpec; params: LoadParams }
  | { type: 'generate'; id: number; prompt: PromptSpec; params: GenerateParams }
  /** A SystemOne decision: `body` is the request's JSON text (its key order is the question order). */
  | { type: 'decide'; id: number; body: string; params: DecideParams }
  /** Attaches a decision head to a head-less model. */
  | { type: 'loadHead'; id: number; head: HeadSpec; params: Pick<LoadParams, 'cache' | 'sha256' | 'chunkSize' | 'maxRetries' | 'retryDelayMs' | 'timeoutMs' | 'idleTimeoutMs' | 'retryBudgetMs' | 'maxRetryAfterMs'> }
  /** Aborts request `target`, or every running and queued request when absent. */
  | { type: 'abort'; id: number; target?: number }
  | { type: 'tokenize'; id: number; text: string; special: boolean }
  | { type: 'detokenize'; id: number; ids: number[]; special: boolean }
  | {
      type: 'render'; id: number; messages: ChatMessageInput[]; tools?: unknown[]; enableThinking?: boolean; addGenerationPrompt?: boolean;
      chatTemplateKwargs?: Record<string, unknown>;
    }
  | { type: 'reset'; id: number }
  | { type: 'stats'; id: number }
  /** Fault injection for tests: stops shard worker `killShard` as if it had crashed. */
  | { type: 'fault'; id: number; killShard: number }
  | { type: 'unload'; id: number };

export type RequestType = Request['type'];

/** The result of each request type. */
export interface Results {
  load: ModelInfo;
  generate: GenerateResult;
  decide: DecideResult;
  loadHead: HeadInfo;
  abort: null;
  tokenize: number[];
  detokenize: string;
  render: string;
  reset: null;
  stats: WorkerStats;
  fault: null;
  unload: null;
}

export type Result = { [K in RequestType]: { type: 'result'; id: number; op: K; result: Results[K] } }[RequestType];

export type Event =
  | { type: 'progress'; id: number; progress: LoadProgress }
  | { type: 'warning'; id: number; message: string }
  /** Generation: the prompt was accepted. `thinking`: the prompt leaves a `<think>` block open. */
  | { type: 'started'; id: number; promptTokens: number; cachedTokens: number; thinking: boolean }
  /** Generation: one token and the text it completes (may be empty); `logprobs` when asked for. */
  | { type: 'token'; id: number; token: number; text: string; logprobs?: TokenLogprob }
  /** Decision: prompt tokens whose hidden rows the head has (`done` of `total`; cached ones included). */
  | { type: 'decideProgress'; id: number; done: number; total: number; cachedTokens: number };

export type Failure = { type: 'error'; id: number; error: ErrorInfo };

// --------------------------------------------------------------------------------------------
// Shard workers: the engine worker ↔ each worker holding one shard of a split model
// (www/src/shards.ts ↔ www/src/shard-worker.ts; the Rust side is src/shard.rs).

/** One copy job of a shard's load plan (ModelLoader.plan, see src/weights.rs CopyOp). */
export interface CopyOp {
  shard: number;
  dstOffset: number;
  fileOffset: number;
  len: number;
  count: number;
  fileStride: number;
  dstStride: number;
}

/** How the int8 prompt GEMM runs in an engine's wasm instances (see `CoreEnv.gemmProfile`). */
export type GemmProfile = 'narrow' | 'wide';

export type ShardRequest =
  /** Instantiate the engine's compiled wasm module (compiled once, by the engine worker). */
  | { type: 'init'; id: number; module: WebAssembly.Module; gemmProfile: GemmProfile }
  /**
   * Allocate shard `index` of `count` of the model whose header is `header` (its first dataOffset
   * bytes); `expand`: store the tensors that have a faster form in it; `band`: the bands it shares
   * with its neighbours, in percent of its share (src/split.rs; the engine worker decides both,
   * loader.ts); `intoPlace`: the shard will read every byte of its part straight into place
   * (load/pull.ts), so the allocation need not clear memory grown for it (src/fresh_alloc.rs).
   * Answered with the load plan at once; the allocation follows (a failure fails the pool).
   */
  | { type: 'alloc'; id: number; header: Uint8Array; size: number; index: number; count: number; expand: boolean; band: number; intoPlace: boolean }
  /**
   * Copy `bytes` into the weights: quads (shard, dstOffset, offset in bytes, len). Answered with
   * `spare` (the buffer handed back for the next chunk), or an error.
   */
  | { type: 'write'; id: number; pieces: Float64Array; bytes: Uint8Array }
  /** Build the shard's engine with state for `nCtx` tokens. */
  | { type: 'finish'; id: number; nCtx: number; precision: string; kvCache: 'f32' | 'f16' }
  /** The coordinator's state changes (pairs: code, position). No answer unless it fails. */
  | { type: 'ops'; id: number; ops: Uint32Array }
  /**
   * Run a stage (kind 0 mixer, 1 FFN, 2 LM head; see src/wasm.rs WasmShard.run); `share`: the
   * pieces of a balanced stage it computes, [start, end, separate] (src/balance.rs; absent: its even share).
   */
  | { type: 'run'; id: number; kind: number; layer: number; pos: number; x: Float32Array; share?: Uint32Array }
  /** Answers once every earlier message has been handled. */
  | { type: 'sync'; id: number }
  /**
   * A decision's LM-head rows (src/clef/lm_rows.rs): of `ids`, those in this shard's vocabulary
   * range, in their stored type. Answered with them, or null when the shard holds no LM head.
   */
  | { type: 'lmRows'; id: number; ids: Uint32Array }
  /**
   * Read this shard's part itself (load/pull.ts) from `from`: the bytes of its pieces in every chunk
   * of `chunks`, and the whole of the chunks it checks (`checker`) against their checksums.
   * Answered with the bad chunks; `pulled` messages report progress.
   */
  | { type: 'pull'; id: number; from: PullFrom; chunkSize: number; chunks: PullChunk[] }
  /**
   * Serve stages through shared memory (exchange.ts) as shard `index`, from sequence number `seq`,
   * until told to stop; no message is read meanwhile. No answer unless a stage fails.
   */
  | { type: 'serve'; id: number; exchange: ExchangeBuffer; index: number; seq: number };

export interface ShardResults {
  init: null;
  alloc: { plan: CopyOp[] };
  write: null;
  finish: { stateBytes: number; wasmMemoryBytes: number };
  ops: null;
  /** The shard's result and the time it computed (ms). */
  run: { out: Float32Array; ms: number };
  sync: { wasmMemoryBytes: number; kernels: string };
  /** ggml type id, the ids this shard has (ascending), their rows' bytes. */
  lmRows: LmRowsPart | null;
  /**
   * Chunks that failed their checksum (or could not be read), and the bytes read; `failed`: why the
   * shard could not read the cache itself (the load then takes the general path).
   */
  pull: { bad: number[]; bytes: number; failed?: string };
  serve: null;
}

/** One shard's LM-head rows for a decision (ShardResults.lmRows). */
export interface LmRowsPart {
  ty: number;
  ids: Uint32Array;
  bytes: Uint8Array;
}

export type Exchange = 'auto' | 'shared' | 'message';

/** Where workers read a split model's bytes themselves (load/pull.ts). */
export type PullFrom =
  /** A verified OPFS cache (cache.ts), opened read-only by every worker — all its pieces at once, or (`turns`) one at a time. */
  | { kind: 'opfs'; dirName: string; size: number; pieceSize: number; turns: boolean }
  /** A file on disk (Node). */
  | { kind: 'file'; path: string };

/**
 * A chunk the workers read themselves (load/pull.ts): its file range and, from a cache, its
 * recorded checksum and the one worker that reads it whole to check it (`PULL_COORDINATOR` or a
 * shard index); the others read only their pieces' bytes.
 */
export interface PullChunk {
  index: number;
  start: number;
  end: number;
  checksum?: string;
  checker?: number;
}

/** `PullChunk.checker` for the engine worker itself. */
export const PULL_COORDINATOR = -1;

/** A SharedArrayBuffer laid out for the shared exchange (exchange.ts). */
export interface ExchangeBuffer {
  sab: SharedArrayBuffer;
  shards: number;
  cap: number;
  outCap: number;
  /** How long a waiting thread spins before it blocks, ms (exchange.ts SPIN_MS; 0: never). */
  spinMs: number;
}

export type ShardResponse =
  | { type: 'result'; id: number; result: ShardResults[keyof ShardResults] }
  | { type: 'error'; id: number; error: ErrorInfo }
  /** A `write`'s buffer, back for reuse: a fresh buffer per chunk would cost the page faults of gigabytes. */
  | { type: 'spare'; id: number; bytes: ArrayBuffer }
  /** Progress of a `pull`: bytes of chunks in place since the last report. */
  | { type: 'pulled'; id: number; bytes: number };

export type Response = Event | Result | Failure;

/** Requests without their id (what a caller fills in). */
export type RequestBody<K extends RequestType = RequestType> = K extends RequestType
  ? Omit<Extract<Request, { type: K }>, 'id'>
  : never;
