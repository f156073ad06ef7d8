/* tslint:disable */
/* eslint-disable */

/**
 * Allocates a model's weight shards (or one part's, see `forRole`) and tells the page which
 * file bytes go where.
 */
export class ModelLoader {
    free(): void;
    [Symbol.dispose](): void;
    /**
     * Builds a shard worker's engine with the state of its heads for `n_ctx` tokens.
     */
    finishShard(n_ctx: number): WasmShard;
    /**
     * Builds the engine (checks every tensor) of a whole model or of a coordinator.
     * `n_ctx` = context length to allocate for.
     */
    finish(n_ctx: number): WasmEngine;
    /**
     * The part of a split model one worker holds: `role` = "whole", "coordinator" or "shard"
     * (`index` of `count`).
     */
    static forRole(prefix: Uint8Array | number[], file_size: number, role: string, index: number, count: number): ModelLoader;
    info(): any;
    markFilled(i: number): void;
    /**
     * `prefix` must hold the whole header (see `parseHeader`). Throws `out_of_memory` if the
     * weights cannot be allocated here.
     */
    constructor(prefix: Uint8Array | number[], file_size: number);
    /**
     * `[{shard, dstOffset, fileOffset, len, count, fileStride, dstStride}]` in file order: for
     * `i < count`, file bytes `[fileOffset + i·fileStride, +len)` go to
     * `shardPtr(shard) + dstOffset + i·dstStride`. A whole model's plan is one contiguous op
     * (`count` 1, `dstOffset` 0) per shard.
     */
    plan(): Array<any>;
    /**
     * Number of weight shards (allocations).
     */
    shardCount(): number;
    /**
     * Address of shard `i` in wasm memory.
     */
    shardPtr(i: number): number;
}

/**
 * Incremental SHA-256 (the Hub's LFS oid) over bytes already in wasm memory or passed in.
 */
export class Sha256 {
    free(): void;
    [Symbol.dispose](): void;
    /**
     * Hex digest (consumes the state; create a new hasher to start over).
     */
    hex(): string;
    constructor();
    /**
     * Hashes `len` bytes of wasm memory at `ptr` (e.g. a filled part of a weight shard) without copying.
     */
    updateFromMemory(ptr: number, len: number): void;
    update(bytes: Uint8Array | number[]): void;
}

/**
 * A loaded model with its conversation state.
 */
export class WasmEngine {
    private constructor();
    free(): void;
    [Symbol.dispose](): void;
    /**
     * Renders the chat template for an OpenAI-shaped request given as JSON text (`{messages,
     * tools?, add_generation_prompt?, enable_thinking?, chat_template_kwargs?}`; see
     * `chat::ChatInput::from_request_json`: the one JSON → template value conversion).
     */
    applyChatTemplate(request_json: string): string;
    /**
     * Starts a request; returns how many prompt tokens were reused from the previous state.
     * `params`: {max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
     * presence_penalty, frequency_penalty, seed, stop: string[], logit_bias: {id: bias}, ignore_eos,
     * logprobs: number of alternatives per token (0 … 20; absent: no log-probabilities)}.
     */
    begin(prompt: Uint32Array | number[], params: any): number;
    /**
     * Gives up the pass in flight (a shard failed): the conversation state is forgotten.
     */
    cancelPass(): void;
    /**
     * Makes the current request's answer follow a grammar, given as JSON text (see
     * `grammar::OutputSpec::from_json`: `{"type": "json_object"}`, `{"type": "json_schema",
     * "schema"}`, `{"type": "tool_calls", "tools", "name"?, "parallel"?}`). Call after `begin`.
     * A schema that cannot be compiled throws a `bad_schema` error.
     */
    constrain(spec_json: string): void;
    detokenize(ids: Uint32Array | number[], special: boolean): string;
    /**
     * Ends (or aborts) the current request, keeping its state for prefix reuse.
     */
    endRequest(): void;
    finishReason(): string | undefined;
    /**
     * Text held back at the end of a generation.
     */
    flush(): string;
    nCtx(): number;
    /**
     * Adds one shard's partial sum of a mixer / FFN stage.
     */
    passAddPartial(part: Float32Array | number[]): void;
    /**
     * Moves the pass to its next stage once every shard's result is in; `false` when it is complete.
     */
    passAdvance(): boolean;
    /**
     * The current stage's input (rows × n_embd).
     */
    passInput(): Float32Array;
    /**
     * One shard's logits for vocabulary ids `[start, end)` of the LM-head stage.
     */
    passPutLogits(start: number, end: number, part: Float32Array | number[]): void;
    /**
     * The stage the shards must run: `[kind, layer, pos]` (kind 0 mixer, 1 FFN, 2 LM head), or
     * `undefined` when no pass is in flight.
     */
    passStage(): Uint32Array | undefined;
    /**
     * Starts the pass of up to `max` queued prompt tokens; returns how many stay queued.
     */
    prefillStart(max: number): number;
    /**
     * Runs up to `max` prompt tokens; returns how many are still queued.
     */
    prefill(max: number): number;
    /**
     * Forgets the conversation state.
     */
    reset(): void;
    /**
     * `fast` (int8 activations, default) or `exact` (f32).
     */
    setPrecision(p: string): void;
    /**
     * Samples one token and starts its pass: a piece as `step` gives it, or `null` when finished.
     */
    stepStart(): any;
    /**
     * Generates one token: `{token, text}` (with `logprobs` asked for, also `logprob`, `bytes` (the
     * token's bytes) and `top`: `[{id, bytes, logprob}]`), or `null` when finished (see `finishReason`).
     */
    step(): any;
    /**
     * State changes the shards must apply before the next stage: pairs (code, position), see `WasmShard.apply`.
     */
    takeShardOps(): Uint32Array;
    tokenize(text: string, special: boolean): Uint32Array;
    /**
     * `{prompt_tokens, cached_tokens, completion_tokens}` of the current / last request.
     */
    usage(): any;
}

/**
 * A shard worker's engine (see `src/shard.rs`): runs stages of the coordinator's passes.
 */
export class WasmShard {
    private constructor();
    free(): void;
    [Symbol.dispose](): void;
    /**
     * Applies the coordinator's state changes: pairs (code, position) as `StateOp::encode`.
     */
    apply(ops: Uint32Array | number[]): void;
    /**
     * Runs a stage (`kind`, `layer`) on input `x` for tokens at positions `pos..`; returns this
     * shard's partial sum (T × D) or its logits (rows × |vocabRange|).
     */
    run(kind: number, layer: number, pos: number, x: Float32Array | number[]): Float32Array;
    /**
     * `fast` (int8 activations, default) or `exact` (f32).
     */
    setPrecision(p: string): void;
    /**
     * Bytes of state (KV cache reserved + recurrent state + snapshots) held.
     */
    stateBytes(): number;
    /**
     * `[start, end)` of the vocabulary this shard's LM-head rows cover (empty: none).
     */
    vocabRange(): Uint32Array;
}

/**
 * Checks this build's fast kernels against the scalar references in the running engine (see
 * `quant::selftest`); returns the JSON report of `clef self-test` (`ok` says whether all passed).
 */
export function kernelSelfTest(rows: number): string;

/**
 * Parses a GGUF header from the first bytes of a file.
 * Returns `{status: 'need', needed}` when `prefix` is too short, else `{status: 'ok', …info}`.
 */
export function parseHeader(prefix: Uint8Array | number[], file_size: number): any;

/**
 * Runs one `clef` command; throws a one-line message on error.
 */
export function runCli(args: string[], host: any): void;

/**
 * Which kernels this build runs: "relaxed-simd" or "simd128" (see `quant::SIMD_LEVEL`).
 */
export function simdLevel(): string;

/**
 * The memory each part of a model split across `count` shard workers needs (before any
 * download): `[{role, index, weightBytes, stateBytes, kvBytesPerToken}]` — the coordinator, then
 * each shard; `count` = 1: the whole model in one worker.
 */
export function splitInfo(prefix: Uint8Array | number[], file_size: number, count: number): Array<any>;

export function start(): void;

/**
 * The wasm linear memory (for writing downloaded bytes straight into the weight shards).
 */
export function wasmMemory(): any;

export type InitInput = RequestInfo | URL | Response | BufferSource | WebAssembly.Module;

export interface InitOutput {
    readonly memory: WebAssembly.Memory;
    readonly __wbg_modelloader_free: (a: number, b: number) => void;
    readonly __wbg_sha256_free: (a: number, b: number) => void;
    readonly __wbg_wasmengine_free: (a: number, b: number) => void;
    readonly __wbg_wasmshard_free: (a: number, b: number) => void;
    readonly kernelSelfTest: (a: number) => [number, number];
    readonly modelloader_finish: (a: number, b: number) => [number, number, number];
    readonly modelloader_finishShard: (a: number, b: number) => [number, number, number];
    readonly modelloader_forRole: (a: number, b: number, c: number, d: number, e: number, f: number, g: number) => [number, number, number];
    readonly modelloader_info: (a: number) => any;
    readonly modelloader_markFilled: (a: number, b: number) => void;
    readonly modelloader_new: (a: number, b: number, c: number) => [number, number, number];
    readonly modelloader_plan: (a: number) => any;
    readonly modelloader_shardCount: (a: number) => number;
    readonly modelloader_shardPtr: (a: number, b: number) => number;
    readonly parseHeader: (a: number, b: number, c: number) => [number, number, number];
    readonly runCli: (a: number, b: number, c: any) => [number, number];
    readonly sha256_hex: (a: number) => [number, number];
    readonly sha256_new: () => number;
    readonly sha256_update: (a: number, b: number, c: number) => void;
    readonly sha256_updateFromMemory: (a: number, b: number, c: number) => void;
    readonly simdLevel: () => [number, number];
    readonly splitInfo: (a: number, b: number, c: number, d: number) => [number, number, number];
    readonly start: () => void;
    readonly wasmMemory: () => any;
    readonly wasmengine_applyChatTemplate: (a: number, b: number, c: number) => [number, number, number, number];
    readonly wasmengine_begin: (a: number, b: number, c: number, d: any) => [number, number, number];
    readonly wasmengine_cancelPass: (a: number) => void;
    readonly wasmengine_constrain: (a: number, b: number, c: number) => [number, number];
    readonly wasmengine_detokenize: (a: number, b: number, c: number, d: number) => [number, number];
    readonly wasmengine_endRequest: (a: number) => void;
    readonly wasmengine_finishReason: (a: number) => [number, number];
    readonly wasmengine_flush: (a: number) => [number, number];
    readonly wasmengine_nCtx: (a: number) => number;
    readonly wasmengine_passAddPartial: (a: number, b: number, c: number) => [number, number];
    readonly wasmengine_passAdvance: (a: number) => number;
    readonly wasmengine_passInput: (a: number) => [number, number];
    readonly wasmengine_passPutLogits: (a: number, b: number, c: number, d: number, e: number) => [number, number];
    readonly wasmengine_passStage: (a: number) => [number, number];
    readonly wasmengine_prefill: (a: number, b: number) => [number, number, number];
    readonly wasmengine_prefillStart: (a: number, b: number) => [number, number, number];
    readonly wasmengine_reset: (a: number) => void;
    readonly wasmengine_setPrecision: (a: number, b: number, c: number) => [number, number];
    readonly wasmengine_step: (a: number) => [number, number, number];
    readonly wasmengine_stepStart: (a: number) => [number, number, number];
    readonly wasmengine_takeShardOps: (a: number) => [number, number];
    readonly wasmengine_tokenize: (a: number, b: number, c: number, d: number) => [number, number];
    readonly wasmengine_usage: (a: number) => any;
    readonly wasmshard_apply: (a: number, b: number, c: number) => [number, number];
    readonly wasmshard_run: (a: number, b: number, c: number, d: number, e: number, f: number) => [number, number, number, number];
    readonly wasmshard_setPrecision: (a: number, b: number, c: number) => [number, number];
    readonly wasmshard_stateBytes: (a: number) => number;
    readonly wasmshard_vocabRange: (a: number) => [number, number];
    readonly llg_cancel: (a: number) => void;
    readonly llg_clone_cancellation_handle: (a: number) => number;
    readonly llg_clone_constraint: (a: number) => number;
    readonly llg_clone_matcher: (a: number) => number;
    readonly llg_clone_stop_controller: (a: number) => number;
    readonly llg_commit_token: (a: number, b: number, c: number) => number;
    readonly llg_compute_mask: (a: number, b: number) => number;
    readonly llg_constraint_init_set_defaults: (a: number, b: number) => void;
    readonly llg_decode_tokens: (a: number, b: number, c: number, d: number, e: number, f: number) => number;
    readonly llg_flush_logs: (a: number) => number;
    readonly llg_free_cancellation_handle: (a: number) => void;
    readonly llg_free_constraint: (a: number) => void;
    readonly llg_free_matcher: (a: number) => void;
    readonly llg_free_stop_controller: (a: number) => void;
    readonly llg_free_tokenizer: (a: number) => void;
    readonly llg_get_error: (a: number) => number;
    readonly llg_get_temperature: (a: number) => number;
    readonly llg_get_version: () => number;
    readonly llg_is_stopped: (a: number) => number;
    readonly llg_matcher_compute_ff_tokens: (a: number, b: number, c: number) => number;
    readonly llg_matcher_compute_mask: (a: number) => number;
    readonly llg_matcher_compute_mask_into: (a: number, b: number, c: number) => number;
    readonly llg_matcher_consume_token: (a: number, b: number) => number;
    readonly llg_matcher_consume_tokens: (a: number, b: number, c: number) => number;
    readonly llg_matcher_get_cancellation_handle: (a: number) => number;
    readonly llg_matcher_get_error: (a: number) => number;
    readonly llg_matcher_get_mask: (a: number) => number;
    readonly llg_matcher_get_mask_byte_size: (a: number) => number;
    readonly llg_matcher_is_accepting: (a: number) => number;
    readonly llg_matcher_is_cancelled: (a: number) => number;
    readonly llg_matcher_is_error: (a: number) => number;
    readonly llg_matcher_is_stopped: (a: number) => number;
    readonly llg_matcher_reset: (a: number) => number;
    readonly llg_matcher_rollback: (a: number, b: number) => number;
    readonly llg_matcher_validate_tokens: (a: number, b: number, c: number) => number;
    readonly llg_new_constraint: (a: number, b: number) => number;
    readonly llg_new_constraint_any: (a: number, b: number, c: number) => number;
    readonly llg_new_constraint_json: (a: number, b: number) => number;
    readonly llg_new_constraint_lark: (a: number, b: number) => number;
    readonly llg_new_constraint_regex: (a: number, b: number) => number;
    readonly llg_new_matcher: (a: number, b: number, c: number) => number;
    readonly llg_new_stop_controller: (a: number, b: number, c: number, d: number, e: number, f: number) => number;
    readonly llg_new_tokenizer: (a: number, b: number, c: number) => number;
    readonly llg_new_tokenizer_v2: (a: number, b: number, c: number) => number;
    readonly llg_par_compute_mask: (a: number, b: number, c: number, d: number) => void;
    readonly llg_stop_commit_token: (a: number, b: number, c: number, d: number) => number;
    readonly llg_stringify_tokens: (a: number, b: number, c: number, d: number, e: number) => number;
    readonly llg_tokenize_bytes: (a: number, b: number, c: number, d: number, e: number) => number;
    readonly llg_tokenize_bytes_marker: (a: number, b: number, c: number, d: number, e: number) => number;
    readonly llg_validate_grammar: (a: number, b: number, c: number, d: number, e: number) => number;
    readonly llg_clone_tokenizer: (a: number) => number;
    readonly __wbindgen_malloc: (a: number, b: number) => number;
    readonly __wbindgen_realloc: (a: number, b: number, c: number, d: number) => number;
    readonly __wbindgen_free: (a: number, b: number, c: number) => void;
    readonly __wbindgen_exn_store: (a: number) => void;
    readonly __externref_table_alloc: () => number;
    readonly __wbindgen_externrefs: WebAssembly.Table;
    readonly __externref_table_dealloc: (a: number) => void;
    readonly __externref_drop_slice: (a: number, b: number) => void;
    readonly __wbindgen_start: () => void;
}

export type SyncInitInput = BufferSource | WebAssembly.Module;

/**
 * Instantiates the given `module`, which can either be bytes or
 * a precompiled `WebAssembly.Module`.
 *
 * @param {{ module: SyncInitInput }} module - Passing `SyncInitInput` directly is deprecated.
 *
 * @returns {InitOutput}
 */
export function initSync(module: { module: SyncInitInput } | SyncInitInput): InitOutput;

/**
 * If `module_or_path` is {RequestInfo} or {URL}, makes a request and
 * for everything else, calls `WebAssembly.instantiate` directly.
 *
 * @param {{ module_or_path: InitInput | Promise<InitInput> }} module_or_path - Passing `InitInput` directly is deprecated.
 *
 * @returns {Promise<InitOutput>}
 */
export default function __wbg_init (module_or_path?: { module_or_path: InitInput | Promise<InitInput> } | InitInput | Promise<InitInput>): Promise<InitOutput>;
