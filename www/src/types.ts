// Public types: OpenAI's chat / completions request, response and chunk shapes (the subset that
// applies to a local model), plus clef's additions (reasoning_content, timing fields in usage,
// token ids on request).

import type { ChatMessageInput, LoadProgress, ModelInfo } from './protocol.js';

export type { ChatMessageInput, LoadProgress, ModelInfo };

/** Sampling options shared by chat and text completions. */
export interface SamplingParams {
  /** Maximum tokens to generate (default: until the context is full or the model stops). */
  max_tokens?: number | null;
  /** Alias of max_tokens (newer OpenAI name). */
  max_completion_tokens?: number | null;
  /** 0 = greedy. Default 0.8. */
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  min_p?: number | null;
  seed?: number | null;
  stop?: string | string[] | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  repetition_penalty?: number | null;
  /** Token id → bias added to its logit. */
  logit_bias?: Record<string, number> | null;
  /** Keep generating after an end-of-generation token. */
  ignore_eos?: boolean;
  /** Add the prompt's and the generated tokens' ids to the response (`token_ids`, `prompt_token_ids`). */
  return_token_ids?: boolean;
  /** Aborts this request. */
  signal?: AbortSignal;
  /** Only n = 1 is supported. */
  n?: number | null;
  /** Kept for compatibility: usage is always included. */
  stream_options?: { include_usage?: boolean } | null;
  user?: string;
}

export interface ChatCompletionCreateParams extends SamplingParams {
  messages: ChatMessageInput[];
  /** Ignored (one model per engine); echoed back. */
  model?: string;
  stream?: boolean | null;
  /** Qwen3.5 thinking on (default) or off. */
  enable_thinking?: boolean;
  chat_template_kwargs?: { enable_thinking?: boolean; [k: string]: unknown };
  /** Tools the model may call (rendered by the chat template; calls come back in `message.tool_calls`). */
  tools?: ChatCompletionTool[] | null;
  /**
   * `auto` (default with tools): the model decides. `none`: no calls (the tools are left out of the
   * prompt). `required` or `{type: 'function', function: {name}}`: the answer starts with a call
   * (of that function): the engine writes `<tool_call>` (and the name) itself, skipping the
   * reasoning for that turn.
   */
  tool_choice?: 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } } | null;
  /** false: at most one call per answer (generation stops after it). Default true. */
  parallel_tool_calls?: boolean | null;
  /** Return each generated token's log-probability (`choices[].logprobs.content`). */
  logprobs?: boolean | null;
  /** With `logprobs`: this many most likely alternatives per token (0–20). */
  top_logprobs?: number | null;
  /**
   * `json_object`: the answer is a JSON object; `json_schema`: JSON matching `json_schema.schema`.
   * Enforced by constrained decoding (every token is sampled under the grammar's mask), so the
   * content always parses (unless `max_tokens` cuts it: finish_reason `length`). The reasoning is
   * skipped for that turn. A schema the grammar compiler cannot use is a `bad_schema` error.
   */
  response_format?: ResponseFormat | null;
}

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; description?: string; schema?: Record<string, unknown> | boolean; strict?: boolean | null } };

/** A tool definition (OpenAI shape). `parameters` is a JSON schema; it also types the call's arguments. */
export interface ChatCompletionTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null };
}

/** A call the model made: `arguments` is JSON text (parameters typed by the tool's schema). */
export interface ChatCompletionMessageToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A streamed piece of a tool call: the first for a call has `id`, `type` and the name. */
export interface ChatCompletionChunkToolCall {
  index: number;
  id?: string;
  type?: 'function';
  function?: { name?: string; arguments?: string };
}

export interface CompletionCreateParams extends SamplingParams {
  /** Text (special tokens such as <|im_start|> are parsed) or token ids. */
  prompt: string | number[];
  model?: string;
  stream?: boolean | null;
  /** Echo the prompt before the completion (text only). */
  echo?: boolean;
  /** Return each generated token's log-probability and this many alternatives (0–20). */
  logprobs?: number | null;
}

/**
 * Log-probabilities are those of the model's own distribution: the log-softmax of its raw logits
 * over the whole vocabulary, at temperature 1, before logit bias, penalties, top-k / top-p / min-p
 * and any grammar (`response_format`, forced tool calls) — as OpenAI reports them. `token` is the
 * token's text (a token holding part of a UTF-8 character shows U+FFFD; `bytes` are exact).
 */
export interface ChatCompletionTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] | null }>;
}

/** `choices[].logprobs` of a chat completion: the answer's tokens (`content`) and, an addition, the reasoning's. */
export interface ChatChoiceLogprobs {
  content: ChatCompletionTokenLogprob[] | null;
  refusal: null;
  /** The tokens of the reasoning block (clef's addition, like `reasoning_content`). */
  reasoning_content?: ChatCompletionTokenLogprob[];
}

/** `choices[].logprobs` of a text completion (OpenAI's legacy shape). */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  /** Per token: alternative text → log-probability. */
  top_logprobs: Array<Record<string, number>>;
  /** Where each token starts in the choice's text (UTF-16 units, counting an echoed prompt). */
  text_offset: number[];
}

/** Where a split model's time went (ms): stages = exchanges with the shard workers. */
export interface SplitTimes {
  stages: number;
  /** Waiting for the shards (their compute + the exchanges). */
  wait_ms: number;
  /** The slowest shard's compute per stage, summed. */
  shard_ms: number;
  /** The shards' mean compute per stage, summed (shard_ms − mean_shard_ms: the imbalance). */
  mean_shard_ms: number;
  /** Stages whose FFN / LM-head rows the engine moved towards the faster shard (src/balance.rs). */
  moved_stages: number;
  /** The coordinator's own work (norms, residuals, sampling, copies). */
  coordinator_ms: number;
  /** Every stage, in order (load option `traceStages`). */
  trace?: StageTraceRecord[];
}

/** One stage of a split pass (load option `traceStages`). */
export interface StageTraceRecord {
  stage: 'mixer' | 'ffn' | 'head';
  layer: number;
  /** Input rows (tokens). */
  rows: number;
  /** Waiting for the workers (their compute + the exchange). */
  wait_ms: number;
  /** Each worker's compute, ms (by shard index). */
  shard_ms: number[];
  /** Each worker's units of work: FFN or vocabulary rows (a mixer: 1 each). */
  work: number[];
}

/** OpenAI usage + timings. */
export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details?: { reasoning_tokens: number };
  /** Time to run the uncached part of the prompt. */
  prompt_ms: number;
  /** Time generating the completion. */
  completion_ms: number;
  /** Uncached prompt tokens per second. */
  prompt_tokens_per_second: number;
  /** Generated tokens per second. */
  completion_tokens_per_second: number;
  /**
   * A model split across shard workers: the request's stages (exchanges), the time waiting for the
   * shards, the slowest shard's compute per stage summed, and the coordinator's own work (ms).
   */
  split?: {
    workers: number; prompt: SplitTimes; completion: SplitTimes;
    /**
     * With `traceStages`: what each wasm instance's kernel trials chose so far (the coordinator's
     * and each shard's, by index): per weight type the form picked and the rates measured
     * (`clef generate --json`'s `streams`, `gemm_dot`, `r4_form`).
     */
    kernels?: { coordinator: Record<string, unknown>; shards: Array<Record<string, unknown>> };
  };
}

export type ChatFinishReason = 'stop' | 'length' | 'tool_calls';

export interface ChatCompletionMessage {
  role: 'assistant';
  content: string | null;
  /** The model's reasoning (the `<think>` block), when it thought. */
  reasoning_content?: string | null;
  /** The calls the model made (then `finish_reason` is `tool_calls`). */
  tool_calls?: ChatCompletionMessageToolCall[];
  refusal: null;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: ChatCompletionMessage;
    logprobs: ChatChoiceLogprobs | null;
    finish_reason: ChatFinishReason;
    token_ids?: number[];
  }>;
  usage: CompletionUsage;
  system_fingerprint: string;
  prompt_token_ids?: number[];
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: {
      role?: 'assistant'; content?: string | null; reasoning_content?: string | null; tool_calls?: ChatCompletionChunkToolCall[];
      token_ids?: number[];
    };
    logprobs: ChatChoiceLogprobs | null;
    finish_reason: ChatFinishReason | null;
  }>;
  /** On the last chunk (the one with finish_reason). */
  usage?: CompletionUsage | null;
  system_fingerprint: string;
  prompt_token_ids?: number[];
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: Array<{ index: number; text: string; logprobs: CompletionLogprobs | null; finish_reason: 'stop' | 'length'; token_ids?: number[] }>;
  usage: CompletionUsage;
  system_fingerprint: string;
  prompt_token_ids?: number[];
}

/** A streamed response: `for await (const chunk of stream)`; `stream.abort()` stops it. */
export interface ChatStream<T> extends AsyncIterable<T> {
  abort(): void;
  readonly controller: AbortController;
}

export interface LoadOptions {
  /** Progress of the load: phase, bytes loaded / total, rate, ETA. */
  onProgress?: (p: LoadProgress) => void;
  /** Non-fatal events (a damaged cache chunk re-fetched, a retried download, …). Default: console.warn. */
  onWarning?: (message: string) => void;
  /** Hub base URL (mirrors, tests). Default https://huggingface.co. */
  hubUrl?: string;
  /** Branch, tag or commit. Default main. */
  revision?: string;
  /** File name inside the repository (instead of deriving it from the quant). */
  file?: string;
  /** Context length (tokens) to allocate. Default: min(the model's, 8192), lowered until it fits. */
  contextLength?: number;
  /** Aborts the load. */
  signal?: AbortSignal;
  /** Use the OPFS cache (browser). Default true for URLs and Hub models, false for File/Blob. */
  cache?: boolean;
  /** Bytes per Range request (power of two). Default 16 MiB. */
  chunkSize?: number;
  /** Range requests in flight. Default 3. */
  concurrency?: number;
  /** Retries without progress before a download fails. Default 8. */
  maxRetries?: number;
  /** First retry delay (ms, doubling up to 8 s, ±25 % jitter). Default 250. */
  retryDelayMs?: number;
  /** Response headers must arrive within this many ms, else the request is retried. Default 30 000. */
  timeoutMs?: number;
  /** A download that receives nothing for this many ms is aborted and resumed from its last byte. Default 30 000. */
  idleTimeoutMs?: number;
  /** How long (ms) a request may keep failing without progress before the load fails with `network`. Default 300 000. */
  retryBudgetMs?: number;
  /** The longest `Retry-After` (429 / 503) honoured, ms. Default 60 000. */
  maxRetryAfterMs?: number;
  /** Expected sha256 of the file (else the Hub's LFS oid when it gives one). */
  sha256?: string;
  /** WebAssembly memory one worker may use (bytes). Default 4 GiB (wasm32's limit). */
  memoryLimit?: number;
  /**
   * Workers the weights are split across, each with its own WebAssembly memory (more cores, and
   * files over 4 GiB). 1: everything in the engine worker. Default: one per core up to 8, more when
   * the model needs them to fit, 1 for small models; the choice is in `engine.info.workers`.
   */
  workers?: number;
  /**
   * With several workers: the FFN and LM-head rows at each boundary between two of them held by
   * both, this many percent of a worker's share (more memory), so that the engine moves work to
   * the faster one stage by stage — it pays on a busy machine, where one worker at a time runs
   * slow (BENCHMARKS.md). Used where it costs no context; default 0 (none); `engine.info.stats.band`.
   */
  band?: number;
  /**
   * How a split model's stages reach its workers: 'shared' (SharedArrayBuffer + Atomics: Node, or a
   * cross-origin isolated page — COOP + COEP), 'message' (postMessage: any page), 'auto' (default:
   * shared where available). The choice is in `engine.info.exchange`.
   */
  exchange?: 'auto' | 'shared' | 'message';
  /**
   * With several workers, whether the engine worker computes one shard itself (default true: N
   * workers are N busy threads, the engine worker and N − 1 more). false: N shard workers besides
   * an engine worker that only coordinates. In `engine.info.engineShard`.
   */
  engineShard?: boolean;
  /**
   * With several workers: record every stage of every pass in the usage (`usage.split.*.trace`:
   * which stage, each worker's compute and work) — a diagnostic for the benchmarks; default false.
   */
  traceStages?: boolean;
  /** KV cache values: 'f32' (default, exact) or 'f16' (llama.cpp's default: half the memory per token, longer contexts). */
  kvCache?: 'f32' | 'f16';
  /**
   * A decision head to attach once the model is loaded (a head-less `qwen35` file: see
   * `engine.loadHead`). A `clef` GGUF has its head inside and needs none.
   */
  head?: HeadRef;
  /** URL of clef-worker.js (default: beside clef.js). */
  workerUrl?: string | URL;
  /** URL of the wasm build to run (default: beside clef-worker.js, clef_web_relaxed_bg.wasm where the
   *  browser supports relaxed SIMD, else clef_web_bg.wasm). */
  wasmUrl?: string | URL;
}

// ------------------------------------------------------------------------------------------------
// Decisions: Clef's SystemOne API (llama-server /v1/systemone; spec clef-head.md §3)

/** noul: yes/no (`criteria` optional {true?, false?}); choice: one of `criteria`'s keys; score: a level 0…n−1 of `criteria`. */
export type SystemOneQuestion =
  | { type: 'noul'; instructions: unknown; criteria?: { true?: unknown; false?: unknown } | null }
  | { type: 'choice'; instructions: unknown; criteria: Record<string, unknown> }
  | { type: 'score'; instructions: unknown; criteria: unknown[] };

/**
 * A decision request: a state (text or any JSON) and typed questions, answered jointly. Question
 * order is the object's key order — JavaScript puts integer-like keys ("1", "2") first, so pass
 * the JSON text instead to keep such ids in your order.
 */
export interface SystemOneRequest {
  state: unknown;
  questions: Record<string, SystemOneQuestion>;
  /** Ignored (the response names the loaded model). */
  model?: string;
}

export type SystemOneAnswer =
  | { type: 'noul'; noul: number }
  | { type: 'choice'; choice: string; probabilities: Record<string, number>; confidence: number }
  | { type: 'score'; score: number; legend: Record<string, unknown>; probabilities: Record<string, number>; confidence: number };

export interface SystemOneResponse {
  model: string;
  /** Question ids in request order. */
  answers: Record<string, SystemOneAnswer>;
  usage: { input_tokens: number; output_tokens: number };
  /**
   * Present (true) when the answers come from the label-token readout of a model without a head
   * (each question asked of the language model alone, options labelled, both option orders
   * averaged; uncalibrated), not from Clef's joint schema head.
   */
  approximate?: boolean;
  /** This engine's timings (not part of llama-server's response). */
  timings?: DecisionTimings;
}

export interface DecisionTimings {
  prompt_tokens: number;
  /** Prompt tokens served from the cached state prefix. */
  cached_tokens: number;
  /** Backbone + head streaming over the prompt (ms). */
  prompt_ms: number;
  /** The whole decision (ms). */
  total_ms: number;
}

/** Progress of a decision: prompt tokens whose hidden rows the head has (cached ones included). */
export interface DecideProgress {
  done: number;
  total: number;
  cachedTokens: number;
}

export interface DecideOptions {
  signal?: AbortSignal | null;
  onProgress?: (p: DecideProgress) => void;
  /** Prompt tokens per slice between looks at `abort` (default 64). */
  prefillChunk?: number;
}

/**
 * Where a decision head for a head-less model comes from: a Hub repository holding
 * `joint_head.safetensors` and `joint_head_config.json` (default repo `Cloudflare/clef-flash`),
 * URLs, or files (File/Blob; Node: paths). `config` may also be the config object itself.
 */
export type HeadRef =
  | { repo?: string; revision?: string; file?: string; configFile?: string; hubUrl?: string }
  | { safetensors: string | URL | Blob; config: string | URL | Blob | Record<string, unknown> };

export interface LoadHeadOptions {
  onProgress?: (p: import('./protocol.js').LoadProgress) => void;
  onWarning?: (message: string) => void;
  signal?: AbortSignal;
  /** Use the OPFS cache (browser). Default true for URLs, false for File/Blob. */
  cache?: boolean;
  /** Expected sha256 of joint_head.safetensors (else the Hub's LFS oid). */
  sha256?: string;
}
