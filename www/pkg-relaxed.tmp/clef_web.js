/* @ts-self-types="./clef_web.d.ts" */

/**
 * Allocates a model's weight shards (or one part's, see `forRole`) and tells the page which
 * file bytes go where.
 */
export class ModelLoader {
    static __wrap(ptr) {
        const obj = Object.create(ModelLoader.prototype);
        obj.__wbg_ptr = ptr;
        ModelLoaderFinalization.register(obj, obj.__wbg_ptr, obj);
        return obj;
    }
    __destroy_into_raw() {
        const ptr = this.__wbg_ptr;
        this.__wbg_ptr = 0;
        ModelLoaderFinalization.unregister(this);
        return ptr;
    }
    free() {
        const ptr = this.__destroy_into_raw();
        wasm.__wbg_modelloader_free(ptr, 0);
    }
    /**
     * Builds a shard worker's engine with the state of its heads for `n_ctx` tokens.
     * @param {number} n_ctx
     * @returns {WasmShard}
     */
    finishShard(n_ctx) {
        const ret = wasm.modelloader_finishShard(this.__wbg_ptr, n_ctx);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return WasmShard.__wrap(ret[0]);
    }
    /**
     * Builds the engine (checks every tensor) of a whole model or of a coordinator.
     * `n_ctx` = context length to allocate for.
     * @param {number} n_ctx
     * @returns {WasmEngine}
     */
    finish(n_ctx) {
        const ret = wasm.modelloader_finish(this.__wbg_ptr, n_ctx);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return WasmEngine.__wrap(ret[0]);
    }
    /**
     * The part of a split model one worker holds: `role` = "whole", "coordinator" or "shard"
     * (`index` of `count`).
     * @param {Uint8Array | number[]} prefix
     * @param {number} file_size
     * @param {string} role
     * @param {number} index
     * @param {number} count
     * @returns {ModelLoader}
     */
    static forRole(prefix, file_size, role, index, count) {
        const val3 = +file_size;
        const val4 = +index;
        const val5 = +count;
        let ptr0, len0, ptr1, len1;
        try {
            ptr0 = passArray8ToWasm0(prefix, wasm.__wbindgen_malloc);
            len0 = WASM_VECTOR_LEN;
            ptr1 = passStringToWasm0(role, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
            len1 = WASM_VECTOR_LEN;
        } catch (e) {
            if (ptr1) { wasm.__wbindgen_free(ptr1, len1 * 1, 1); }
            if (ptr0) { wasm.__wbindgen_free(ptr0, len0 * 1, 1); }
            throw e;
        }
        const ret = wasm.modelloader_forRole(ptr0, len0, val3, ptr1, len1, val4, val5);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return ModelLoader.__wrap(ret[0]);
    }
    /**
     * @returns {any}
     */
    info() {
        const ret = wasm.modelloader_info(this.__wbg_ptr);
        return ret;
    }
    /**
     * @param {number} i
     */
    markFilled(i) {
        wasm.modelloader_markFilled(this.__wbg_ptr, i);
    }
    /**
     * `prefix` must hold the whole header (see `parseHeader`). Throws `out_of_memory` if the
     * weights cannot be allocated here.
     * @param {Uint8Array | number[]} prefix
     * @param {number} file_size
     */
    constructor(prefix, file_size) {
        const val2 = +file_size;
        const ptr0 = passArray8ToWasm0(prefix, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.modelloader_new(ptr0, len0, val2);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        this.__wbg_ptr = ret[0];
        ModelLoaderFinalization.register(this, this.__wbg_ptr, this);
        return this;
    }
    /**
     * `[{shard, dstOffset, fileOffset, len, count, fileStride, dstStride}]` in file order: for
     * `i < count`, file bytes `[fileOffset + i·fileStride, +len)` go to
     * `shardPtr(shard) + dstOffset + i·dstStride`. A whole model's plan is one contiguous op
     * (`count` 1, `dstOffset` 0) per shard.
     * @returns {Array<any>}
     */
    plan() {
        const ret = wasm.modelloader_plan(this.__wbg_ptr);
        return ret;
    }
    /**
     * Number of weight shards (allocations).
     * @returns {number}
     */
    shardCount() {
        const ret = wasm.modelloader_shardCount(this.__wbg_ptr);
        return ret >>> 0;
    }
    /**
     * Address of shard `i` in wasm memory.
     * @param {number} i
     * @returns {number}
     */
    shardPtr(i) {
        const ret = wasm.modelloader_shardPtr(this.__wbg_ptr, i);
        return ret >>> 0;
    }
}
if (Symbol.dispose) ModelLoader.prototype[Symbol.dispose] = ModelLoader.prototype.free;

/**
 * Incremental SHA-256 (the Hub's LFS oid) over bytes already in wasm memory or passed in.
 */
export class Sha256 {
    __destroy_into_raw() {
        const ptr = this.__wbg_ptr;
        this.__wbg_ptr = 0;
        Sha256Finalization.unregister(this);
        return ptr;
    }
    free() {
        const ptr = this.__destroy_into_raw();
        wasm.__wbg_sha256_free(ptr, 0);
    }
    /**
     * Hex digest (consumes the state; create a new hasher to start over).
     * @returns {string}
     */
    hex() {
        let deferred1_0;
        let deferred1_1;
        try {
            const ret = wasm.sha256_hex(this.__wbg_ptr);
            deferred1_0 = ret[0];
            deferred1_1 = ret[1];
            return getStringFromWasm0(ret[0], ret[1]);
        } finally {
            wasm.__wbindgen_free(deferred1_0, deferred1_1, 1);
        }
    }
    constructor() {
        const ret = wasm.sha256_new();
        this.__wbg_ptr = ret;
        Sha256Finalization.register(this, this.__wbg_ptr, this);
        return this;
    }
    /**
     * Hashes `len` bytes of wasm memory at `ptr` (e.g. a filled part of a weight shard) without copying.
     * @param {number} ptr
     * @param {number} len
     */
    updateFromMemory(ptr, len) {
        wasm.sha256_updateFromMemory(this.__wbg_ptr, ptr, len);
    }
    /**
     * @param {Uint8Array | number[]} bytes
     */
    update(bytes) {
        const ptr0 = passArray8ToWasm0(bytes, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        wasm.sha256_update(this.__wbg_ptr, ptr0, len0);
    }
}
if (Symbol.dispose) Sha256.prototype[Symbol.dispose] = Sha256.prototype.free;

/**
 * A loaded model with its conversation state.
 */
export class WasmEngine {
    static __wrap(ptr) {
        const obj = Object.create(WasmEngine.prototype);
        obj.__wbg_ptr = ptr;
        WasmEngineFinalization.register(obj, obj.__wbg_ptr, obj);
        return obj;
    }
    __destroy_into_raw() {
        const ptr = this.__wbg_ptr;
        this.__wbg_ptr = 0;
        WasmEngineFinalization.unregister(this);
        return ptr;
    }
    free() {
        const ptr = this.__destroy_into_raw();
        wasm.__wbg_wasmengine_free(ptr, 0);
    }
    /**
     * Renders the chat template for an OpenAI-shaped request given as JSON text (`{messages,
     * tools?, add_generation_prompt?, enable_thinking?, chat_template_kwargs?}`; see
     * `chat::ChatInput::from_request_json`: the one JSON → template value conversion).
     * @param {string} request_json
     * @returns {string}
     */
    applyChatTemplate(request_json) {
        let deferred3_0;
        let deferred3_1;
        try {
            const ptr0 = passStringToWasm0(request_json, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
            const len0 = WASM_VECTOR_LEN;
            const ret = wasm.wasmengine_applyChatTemplate(this.__wbg_ptr, ptr0, len0);
            var ptr2 = ret[0];
            var len2 = ret[1];
            if (ret[3]) {
                ptr2 = 0; len2 = 0;
                throw takeFromExternrefTable0(ret[2]);
            }
            deferred3_0 = ptr2;
            deferred3_1 = len2;
            return getStringFromWasm0(ptr2, len2);
        } finally {
            wasm.__wbindgen_free(deferred3_0, deferred3_1, 1);
        }
    }
    /**
     * Starts a request; returns how many prompt tokens were reused from the previous state.
     * `params`: {max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
     * presence_penalty, frequency_penalty, seed, stop: string[], logit_bias: {id: bias}, ignore_eos,
     * logprobs: number of alternatives per token (0 … 20; absent: no log-probabilities)}.
     * @param {Uint32Array | number[]} prompt
     * @param {any} params
     * @returns {number}
     */
    begin(prompt, params) {
        const ptr0 = passArray32ToWasm0(prompt, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmengine_begin(this.__wbg_ptr, ptr0, len0, params);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return ret[0] >>> 0;
    }
    /**
     * Gives up the pass in flight (a shard failed): the conversation state is forgotten.
     */
    cancelPass() {
        wasm.wasmengine_cancelPass(this.__wbg_ptr);
    }
    /**
     * Makes the current request's answer follow a grammar, given as JSON text (see
     * `grammar::OutputSpec::from_json`: `{"type": "json_object"}`, `{"type": "json_schema",
     * "schema"}`, `{"type": "tool_calls", "tools", "name"?, "parallel"?}`). Call after `begin`.
     * A schema that cannot be compiled throws a `bad_schema` error.
     * @param {string} spec_json
     */
    constrain(spec_json) {
        const ptr0 = passStringToWasm0(spec_json, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmengine_constrain(this.__wbg_ptr, ptr0, len0);
        if (ret[1]) {
            throw takeFromExternrefTable0(ret[0]);
        }
    }
    /**
     * @param {Uint32Array | number[]} ids
     * @param {boolean} special
     * @returns {string}
     */
    detokenize(ids, special) {
        let deferred3_0;
        let deferred3_1;
        try {
            const val2 = +special;
            const ptr0 = passArray32ToWasm0(ids, wasm.__wbindgen_malloc);
            const len0 = WASM_VECTOR_LEN;
            const ret = wasm.wasmengine_detokenize(this.__wbg_ptr, ptr0, len0, val2);
            deferred3_0 = ret[0];
            deferred3_1 = ret[1];
            return getStringFromWasm0(ret[0], ret[1]);
        } finally {
            wasm.__wbindgen_free(deferred3_0, deferred3_1, 1);
        }
    }
    /**
     * Ends (or aborts) the current request, keeping its state for prefix reuse.
     */
    endRequest() {
        wasm.wasmengine_endRequest(this.__wbg_ptr);
    }
    /**
     * @returns {string | undefined}
     */
    finishReason() {
        const ret = wasm.wasmengine_finishReason(this.__wbg_ptr);
        let v1;
        if (ret[0] !== 0) {
            v1 = getStringFromWasm0(ret[0], ret[1]);
            wasm.__wbindgen_free(ret[0], ret[1] * 1, 1);
        }
        return v1;
    }
    /**
     * Text held back at the end of a generation.
     * @returns {string}
     */
    flush() {
        let deferred1_0;
        let deferred1_1;
        try {
            const ret = wasm.wasmengine_flush(this.__wbg_ptr);
            deferred1_0 = ret[0];
            deferred1_1 = ret[1];
            return getStringFromWasm0(ret[0], ret[1]);
        } finally {
            wasm.__wbindgen_free(deferred1_0, deferred1_1, 1);
        }
    }
    /**
     * @returns {number}
     */
    nCtx() {
        const ret = wasm.wasmengine_nCtx(this.__wbg_ptr);
        return ret >>> 0;
    }
    /**
     * Adds one shard's partial sum of a mixer / FFN stage.
     * @param {Float32Array | number[]} part
     */
    passAddPartial(part) {
        const ptr0 = passArrayF32ToWasm0(part, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmengine_passAddPartial(this.__wbg_ptr, ptr0, len0);
        if (ret[1]) {
            throw takeFromExternrefTable0(ret[0]);
        }
    }
    /**
     * Moves the pass to its next stage once every shard's result is in; `false` when it is complete.
     * @returns {boolean}
     */
    passAdvance() {
        const ret = wasm.wasmengine_passAdvance(this.__wbg_ptr);
        return ret !== 0;
    }
    /**
     * The current stage's input (rows × n_embd).
     * @returns {Float32Array}
     */
    passInput() {
        const ret = wasm.wasmengine_passInput(this.__wbg_ptr);
        var v1 = getArrayF32FromWasm0(ret[0], ret[1]).slice();
        wasm.__wbindgen_free(ret[0], ret[1] * 4, 4);
        return v1;
    }
    /**
     * One shard's logits for vocabulary ids `[start, end)` of the LM-head stage.
     * @param {number} start
     * @param {number} end
     * @param {Float32Array | number[]} part
     */
    passPutLogits(start, end, part) {
        const val2 = +start;
        const val3 = +end;
        const ptr0 = passArrayF32ToWasm0(part, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmengine_passPutLogits(this.__wbg_ptr, val2, val3, ptr0, len0);
        if (ret[1]) {
            throw takeFromExternrefTable0(ret[0]);
        }
    }
    /**
     * The stage the shards must run: `[kind, layer, pos]` (kind 0 mixer, 1 FFN, 2 LM head), or
     * `undefined` when no pass is in flight.
     * @returns {Uint32Array | undefined}
     */
    passStage() {
        const ret = wasm.wasmengine_passStage(this.__wbg_ptr);
        let v1;
        if (ret[0] !== 0) {
            v1 = getArrayU32FromWasm0(ret[0], ret[1]).slice();
            wasm.__wbindgen_free(ret[0], ret[1] * 4, 4);
        }
        return v1;
    }
    /**
     * Starts the pass of up to `max` queued prompt tokens; returns how many stay queued.
     * @param {number} max
     * @returns {number}
     */
    prefillStart(max) {
        const ret = wasm.wasmengine_prefillStart(this.__wbg_ptr, max);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return ret[0] >>> 0;
    }
    /**
     * Runs up to `max` prompt tokens; returns how many are still queued.
     * @param {number} max
     * @returns {number}
     */
    prefill(max) {
        const ret = wasm.wasmengine_prefill(this.__wbg_ptr, max);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return ret[0] >>> 0;
    }
    /**
     * Forgets the conversation state.
     */
    reset() {
        wasm.wasmengine_reset(this.__wbg_ptr);
    }
    /**
     * `fast` (int8 activations, default) or `exact` (f32).
     * @param {string} p
     */
    setPrecision(p) {
        const ptr0 = passStringToWasm0(p, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmengine_setPrecision(this.__wbg_ptr, ptr0, len0);
        if (ret[1]) {
            throw takeFromExternrefTable0(ret[0]);
        }
    }
    /**
     * Samples one token and starts its pass: a piece as `step` gives it, or `null` when finished.
     * @returns {any}
     */
    stepStart() {
        const ret = wasm.wasmengine_stepStart(this.__wbg_ptr);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return takeFromExternrefTable0(ret[0]);
    }
    /**
     * Generates one token: `{token, text}` (with `logprobs` asked for, also `logprob`, `bytes` (the
     * token's bytes) and `top`: `[{id, bytes, logprob}]`), or `null` when finished (see `finishReason`).
     * @returns {any}
     */
    step() {
        const ret = wasm.wasmengine_step(this.__wbg_ptr);
        if (ret[2]) {
            throw takeFromExternrefTable0(ret[1]);
        }
        return takeFromExternrefTable0(ret[0]);
    }
    /**
     * State changes the shards must apply before the next stage: pairs (code, position), see `WasmShard.apply`.
     * @returns {Uint32Array}
     */
    takeShardOps() {
        const ret = wasm.wasmengine_takeShardOps(this.__wbg_ptr);
        var v1 = getArrayU32FromWasm0(ret[0], ret[1]).slice();
        wasm.__wbindgen_free(ret[0], ret[1] * 4, 4);
        return v1;
    }
    /**
     * @param {string} text
     * @param {boolean} special
     * @returns {Uint32Array}
     */
    tokenize(text, special) {
        const val2 = +special;
        const ptr0 = passStringToWasm0(text, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmengine_tokenize(this.__wbg_ptr, ptr0, len0, val2);
        var v3 = getArrayU32FromWasm0(ret[0], ret[1]).slice();
        wasm.__wbindgen_free(ret[0], ret[1] * 4, 4);
        return v3;
    }
    /**
     * `{prompt_tokens, cached_tokens, completion_tokens}` of the current / last request.
     * @returns {any}
     */
    usage() {
        const ret = wasm.wasmengine_usage(this.__wbg_ptr);
        return ret;
    }
}
if (Symbol.dispose) WasmEngine.prototype[Symbol.dispose] = WasmEngine.prototype.free;

/**
 * A shard worker's engine (see `src/shard.rs`): runs stages of the coordinator's passes.
 */
export class WasmShard {
    static __wrap(ptr) {
        const obj = Object.create(WasmShard.prototype);
        obj.__wbg_ptr = ptr;
        WasmShardFinalization.register(obj, obj.__wbg_ptr, obj);
        return obj;
    }
    __destroy_into_raw() {
        const ptr = this.__wbg_ptr;
        this.__wbg_ptr = 0;
        WasmShardFinalization.unregister(this);
        return ptr;
    }
    free() {
        const ptr = this.__destroy_into_raw();
        wasm.__wbg_wasmshard_free(ptr, 0);
    }
    /**
     * Applies the coordinator's state changes: pairs (code, position) as `StateOp::encode`.
     * @param {Uint32Array | number[]} ops
     */
    apply(ops) {
        const ptr0 = passArray32ToWasm0(ops, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmshard_apply(this.__wbg_ptr, ptr0, len0);
        if (ret[1]) {
            throw takeFromExternrefTable0(ret[0]);
        }
    }
    /**
     * Runs a stage (`kind`, `layer`) on input `x` for tokens at positions `pos..`; returns this
     * shard's partial sum (T × D) or its logits (rows × |vocabRange|).
     * @param {number} kind
     * @param {number} layer
     * @param {number} pos
     * @param {Float32Array | number[]} x
     * @returns {Float32Array}
     */
    run(kind, layer, pos, x) {
        const val2 = +kind;
        const val3 = +layer;
        const val4 = +pos;
        const ptr0 = passArrayF32ToWasm0(x, wasm.__wbindgen_malloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmshard_run(this.__wbg_ptr, val2, val3, val4, ptr0, len0);
        if (ret[3]) {
            throw takeFromExternrefTable0(ret[2]);
        }
        var v5 = getArrayF32FromWasm0(ret[0], ret[1]).slice();
        wasm.__wbindgen_free(ret[0], ret[1] * 4, 4);
        return v5;
    }
    /**
     * `fast` (int8 activations, default) or `exact` (f32).
     * @param {string} p
     */
    setPrecision(p) {
        const ptr0 = passStringToWasm0(p, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
        const len0 = WASM_VECTOR_LEN;
        const ret = wasm.wasmshard_setPrecision(this.__wbg_ptr, ptr0, len0);
        if (ret[1]) {
            throw takeFromExternrefTable0(ret[0]);
        }
    }
    /**
     * Bytes of state (KV cache reserved + recurrent state + snapshots) held.
     * @returns {number}
     */
    stateBytes() {
        const ret = wasm.wasmshard_stateBytes(this.__wbg_ptr);
        return ret;
    }
    /**
     * `[start, end)` of the vocabulary this shard's LM-head rows cover (empty: none).
     * @returns {Uint32Array}
     */
    vocabRange() {
        const ret = wasm.wasmshard_vocabRange(this.__wbg_ptr);
        var v1 = getArrayU32FromWasm0(ret[0], ret[1]).slice();
        wasm.__wbindgen_free(ret[0], ret[1] * 4, 4);
        return v1;
    }
}
if (Symbol.dispose) WasmShard.prototype[Symbol.dispose] = WasmShard.prototype.free;

/**
 * Checks this build's fast kernels against the scalar references in the running engine (see
 * `quant::selftest`); returns the JSON report of `clef self-test` (`ok` says whether all passed).
 * @param {number} rows
 * @returns {string}
 */
export function kernelSelfTest(rows) {
    let deferred1_0;
    let deferred1_1;
    try {
        const ret = wasm.kernelSelfTest(rows);
        deferred1_0 = ret[0];
        deferred1_1 = ret[1];
        return getStringFromWasm0(ret[0], ret[1]);
    } finally {
        wasm.__wbindgen_free(deferred1_0, deferred1_1, 1);
    }
}

/**
 * Parses a GGUF header from the first bytes of a file.
 * Returns `{status: 'need', needed}` when `prefix` is too short, else `{status: 'ok', …info}`.
 * @param {Uint8Array | number[]} prefix
 * @param {number} file_size
 * @returns {any}
 */
export function parseHeader(prefix, file_size) {
    const val2 = +file_size;
    const ptr0 = passArray8ToWasm0(prefix, wasm.__wbindgen_malloc);
    const len0 = WASM_VECTOR_LEN;
    const ret = wasm.parseHeader(ptr0, len0, val2);
    if (ret[2]) {
        throw takeFromExternrefTable0(ret[1]);
    }
    return takeFromExternrefTable0(ret[0]);
}

/**
 * Runs one `clef` command; throws a one-line message on error.
 * @param {string[]} args
 * @param {any} host
 */
export function runCli(args, host) {
    const ptr0 = passArrayJsValueToWasm0(args, wasm.__wbindgen_malloc);
    const len0 = WASM_VECTOR_LEN;
    const ret = wasm.runCli(ptr0, len0, host);
    if (ret[1]) {
        throw takeFromExternrefTable0(ret[0]);
    }
}

/**
 * Which kernels this build runs: "relaxed-simd" or "simd128" (see `quant::SIMD_LEVEL`).
 * @returns {string}
 */
export function simdLevel() {
    let deferred1_0;
    let deferred1_1;
    try {
        const ret = wasm.simdLevel();
        deferred1_0 = ret[0];
        deferred1_1 = ret[1];
        return getStringFromWasm0(ret[0], ret[1]);
    } finally {
        wasm.__wbindgen_free(deferred1_0, deferred1_1, 1);
    }
}

/**
 * The memory each part of a model split across `count` shard workers needs (before any
 * download): `[{role, index, weightBytes, stateBytes, kvBytesPerToken}]` — the coordinator, then
 * each shard; `count` = 1: the whole model in one worker.
 * @param {Uint8Array | number[]} prefix
 * @param {number} file_size
 * @param {number} count
 * @returns {Array<any>}
 */
export function splitInfo(prefix, file_size, count) {
    const val2 = +file_size;
    const val3 = +count;
    const ptr0 = passArray8ToWasm0(prefix, wasm.__wbindgen_malloc);
    const len0 = WASM_VECTOR_LEN;
    const ret = wasm.splitInfo(ptr0, len0, val2, val3);
    if (ret[2]) {
        throw takeFromExternrefTable0(ret[1]);
    }
    return takeFromExternrefTable0(ret[0]);
}

export function start() {
    wasm.start();
}

/**
 * The wasm linear memory (for writing downloaded bytes straight into the weight shards).
 * @returns {any}
 */
export function wasmMemory() {
    const ret = wasm.wasmMemory();
    return ret;
}
function __wbg_get_imports() {
    const import0 = {
        __proto__: null,
        __wbg___wbindgen_boolean_get_4f1baf9a00be3c74: function(arg0) {
            const v = arg0;
            const ret = typeof(v) === 'boolean' ? v : undefined;
            return isLikeNone(ret) ? 0xFFFFFF : ret ? 1 : 0;
        },
        __wbg___wbindgen_debug_string_f249a2a76caa9a55: function(arg0, arg1) {
            const ret = debugString(arg1);
            const ptr1 = passStringToWasm0(ret, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
            const len1 = WASM_VECTOR_LEN;
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 1, len1, true);
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 0, ptr1, true);
        },
        __wbg___wbindgen_is_null_c22311b1cc228e3a: function(arg0) {
            const ret = arg0 === null;
            return ret;
        },
        __wbg___wbindgen_is_string_fc456fee5d3317de: function(arg0) {
            const ret = typeof(arg0) === 'string';
            return ret;
        },
        __wbg___wbindgen_is_undefined_be5b34249ff1fc15: function(arg0) {
            const ret = arg0 === undefined;
            return ret;
        },
        __wbg___wbindgen_memory_17a1178bc3328ea3: function() {
            const ret = wasm.memory;
            return ret;
        },
        __wbg___wbindgen_number_get_934b640d0889af78: function(arg0, arg1) {
            const obj = arg1;
            const ret = typeof(obj) === 'number' ? obj : undefined;
            getDataViewMemory0().setFloat64((arg0 >>> 0) + 8 * 1, isLikeNone(ret) ? 0 : ret, true);
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 0, !isLikeNone(ret), true);
        },
        __wbg___wbindgen_string_get_7ce8eee7fd327545: function(arg0, arg1) {
            const obj = arg1;
            const ret = typeof(obj) === 'string' ? obj : undefined;
            var ptr1 = isLikeNone(ret) ? 0 : passStringToWasm0(ret, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
            var len1 = WASM_VECTOR_LEN;
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 1, len1, true);
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 0, ptr1, true);
        },
        __wbg___wbindgen_throw_4c88d8bf264fd984: function(arg0, arg1) {
            throw new Error(getStringFromWasm0(arg0, arg1));
        },
        __wbg_entries_7bb1459bd9b5c2b9: function(arg0) {
            const ret = Object.entries(arg0);
            return ret;
        },
        __wbg_error_757e9472f8410341: function(arg0, arg1) {
            let deferred0_0;
            let deferred0_1;
            try {
                deferred0_0 = arg0;
                deferred0_1 = arg1;
                console.error(getStringFromWasm0(arg0, arg1));
            } finally {
                wasm.__wbindgen_free(deferred0_0, deferred0_1, 1);
            }
        },
        __wbg_from_eac91875c8a5ffa4: function(arg0) {
            const ret = Array.from(arg0);
            return ret;
        },
        __wbg_get_2080c49015e35254: function() { return handleError(function (arg0, arg1) {
            const ret = Reflect.get(arg0, arg1);
            return ret;
        }, arguments); },
        __wbg_get_d7176cfb76d71114: function(arg0, arg1) {
            const ret = arg0[arg1 >>> 0];
            return ret;
        },
        __wbg_get_unchecked_e6325ad374eff861: function(arg0, arg1) {
            const ret = arg0[arg1 >>> 0];
            return ret;
        },
        __wbg_isArray_bcf1376d0d732d08: function(arg0) {
            const ret = Array.isArray(arg0);
            return ret;
        },
        __wbg_length_b03a0fabb109b1e9: function(arg0) {
            const ret = arg0.length;
            return ret;
        },
        __wbg_new_37eb45aaf5eeb820: function() {
            const ret = new Array();
            return ret;
        },
        __wbg_new_787b9fb330d55d78: function(arg0, arg1) {
            const ret = new Error(getStringFromWasm0(arg0, arg1));
            return ret;
        },
        __wbg_new_bb74001155cb8ca8: function() {
            const ret = new Error();
            return ret;
        },
        __wbg_new_cd4348290afae586: function() {
            const ret = new Object();
            return ret;
        },
        __wbg_new_from_slice_b8daf545a41c6aa0: function(arg0, arg1) {
            const ret = new Uint8Array(getArrayU8FromWasm0(arg0, arg1));
            return ret;
        },
        __wbg_now_043d245551b22f9c: function(arg0) {
            const ret = arg0.now();
            return ret;
        },
        __wbg_now_1cd4dace1eb1936a: function() {
            const ret = performance.now();
            return ret;
        },
        __wbg_push_c9f4893fc209f768: function(arg0, arg1) {
            const ret = arg0.push(arg1);
            return ret;
        },
        __wbg_readAt_c5d25cac596a3a8e: function() { return handleError(function (arg0, arg1, arg2, arg3, arg4, arg5) {
            arg0.readAt(getStringFromWasm0(arg1, arg2), arg3, getArrayU8FromWasm0(arg4, arg5));
        }, arguments); },
        __wbg_set_2793479888329cb6: function() { return handleError(function (arg0, arg1, arg2) {
            const ret = Reflect.set(arg0, arg1, arg2);
            return ret;
        }, arguments); },
        __wbg_size_8d691512c4ad88fc: function() { return handleError(function (arg0, arg1, arg2) {
            const ret = arg0.size(getStringFromWasm0(arg1, arg2));
            return ret;
        }, arguments); },
        __wbg_stack_575c4e0918581b9c: function(arg0, arg1) {
            const ret = arg1.stack;
            const ptr1 = passStringToWasm0(ret, wasm.__wbindgen_malloc, wasm.__wbindgen_realloc);
            const len1 = WASM_VECTOR_LEN;
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 1, len1, true);
            getDataViewMemory0().setInt32((arg0 >>> 0) + 4 * 0, ptr1, true);
        },
        __wbg_static_accessor_GLOBAL_THIS_003ee833af9699fc: function() {
            const ret = typeof globalThis === 'undefined' ? undefined : globalThis;
            return isLikeNone(ret) ? 0 : addToExternrefTable0(ret);
        },
        __wbg_static_accessor_GLOBAL_e4293fb22cbe77da: function() {
            const ret = typeof global === 'undefined' ? undefined : global;
            return isLikeNone(ret) ? 0 : addToExternrefTable0(ret);
        },
        __wbg_static_accessor_SELF_53bb20457401453d: function() {
            const ret = typeof self === 'undefined' ? undefined : self;
            return isLikeNone(ret) ? 0 : addToExternrefTable0(ret);
        },
        __wbg_static_accessor_WINDOW_b5e0810bfecb7feb: function() {
            const ret = typeof window === 'undefined' ? undefined : window;
            return isLikeNone(ret) ? 0 : addToExternrefTable0(ret);
        },
        __wbg_write_46201cf2939bd1e5: function(arg0, arg1, arg2) {
            arg0.write(getStringFromWasm0(arg1, arg2));
        },
        __wbindgen_generic_0000000000000001: function(arg0) {
            // Cast intrinsic for `F64 -> Externref`.
            const ret = arg0;
            return ret;
        },
        __wbindgen_generic_0000000000000002: function(arg0, arg1) {
            // Cast intrinsic for `Ref(String) -> Externref`.
            const ret = getStringFromWasm0(arg0, arg1);
            return ret;
        },
        __wbindgen_init_externref_table: function() {
            const table = wasm.__wbindgen_externrefs;
            table.set(0, undefined);
            table.set(1024, undefined);
            table.set(1025, null);
            table.set(1026, true);
            table.set(1027, false);
        },
    };
    return {
        __proto__: null,
        "./clef_web_bg.js": import0,
    };
}

const ModelLoaderFinalization = (typeof FinalizationRegistry === 'undefined')
    ? { register: () => {}, unregister: () => {} }
    : new FinalizationRegistry(ptr => wasm.__wbg_modelloader_free(ptr, 1));
const Sha256Finalization = (typeof FinalizationRegistry === 'undefined')
    ? { register: () => {}, unregister: () => {} }
    : new FinalizationRegistry(ptr => wasm.__wbg_sha256_free(ptr, 1));
const WasmEngineFinalization = (typeof FinalizationRegistry === 'undefined')
    ? { register: () => {}, unregister: () => {} }
    : new FinalizationRegistry(ptr => wasm.__wbg_wasmengine_free(ptr, 1));
const WasmShardFinalization = (typeof FinalizationRegistry === 'undefined')
    ? { register: () => {}, unregister: () => {} }
    : new FinalizationRegistry(ptr => wasm.__wbg_wasmshard_free(ptr, 1));

function addToExternrefTable0(obj) {
    const idx = wasm.__externref_table_alloc();
    wasm.__wbindgen_externrefs.set(idx, obj);
    return idx;
}

function debugString(val) {
    switch (typeof val) {
        // primitive types
        case 'number':
        case 'boolean':
        case 'undefined':
        return `${val}`;
        case 'string':
        return JSON.stringify(val);
        case 'bigint':
        return `${val}n`;
        case 'symbol':
        return val.description !== undefined
            ? `Symbol(${val.description})`
            : 'Symbol';
        case 'function':
        return typeof val.name === 'string' && val.name !== ''
            ? `Function(${val.name})`
            : 'Function';
        case 'object': {
            if (val === null) {
                return 'null';
            }
            // objects
            if (Array.isArray(val)) {
                return '[' + Array.from(val, debugString).join(', ') + ']';
            }
            // errors
            if (val instanceof Error) {
                return `${val.name}: ${val.message}\n${val.stack}`;
            }

            const toStringOutput = toString.call(val);
            // Test for built-in
            const className = /\[object ([^\]]+)\]/.exec(toStringOutput)?.[1];

            // Failed to match the standard '[object ClassName]'
            if (className === undefined) {
                return toStringOutput;
            }
            if (className === 'Object') {
                // we're a user defined class or Object
                // JSON.stringify avoids problems with cycles, and is generally much
                // easier than looping through ownProperties of `val`.
                try {
                    return 'Object(' + JSON.stringify(val) + ')';
                } catch (_) {
                    return 'Object';
                }
            }
            // TODO we could test for more things here, like `Set`s and `Map`s.
            return className;
        }
        // Per MDN: 'This list of values is exhaustive.'
        // https://developer.mozilla.org/en-US/docs/Web/JavaScript/Reference/Operators/typeof#description
    }
}

function getArrayF32FromWasm0(ptr, len) {
    ptr = ptr >>> 0;
    return getFloat32ArrayMemory0().subarray(ptr / 4, ptr / 4 + len);
}

function getArrayU32FromWasm0(ptr, len) {
    ptr = ptr >>> 0;
    return getUint32ArrayMemory0().subarray(ptr / 4, ptr / 4 + len);
}

function getArrayU8FromWasm0(ptr, len) {
    ptr = ptr >>> 0;
    return getUint8ArrayMemory0().subarray(ptr / 1, ptr / 1 + len);
}

let cachedDataViewMemory0 = null;
function getDataViewMemory0() {
    if (cachedDataViewMemory0 === null || cachedDataViewMemory0.buffer.detached === true || (cachedDataViewMemory0.buffer.detached === undefined && cachedDataViewMemory0.buffer !== wasm.memory.buffer)) {
        cachedDataViewMemory0 = new DataView(wasm.memory.buffer);
    }
    return cachedDataViewMemory0;
}

let cachedFloat32ArrayMemory0 = null;
function getFloat32ArrayMemory0() {
    if (cachedFloat32ArrayMemory0 === null || cachedFloat32ArrayMemory0.byteLength === 0) {
        cachedFloat32ArrayMemory0 = new Float32Array(wasm.memory.buffer);
    }
    return cachedFloat32ArrayMemory0;
}

function getStringFromWasm0(ptr, len) {
    ptr = ptr >>> 0;
    return decodeText(getUint8ArrayMemory0().subarray(ptr, ptr + len));
}

let cachedUint32ArrayMemory0 = null;
function getUint32ArrayMemory0() {
    if (cachedUint32ArrayMemory0 === null || cachedUint32ArrayMemory0.byteLength === 0) {
        cachedUint32ArrayMemory0 = new Uint32Array(wasm.memory.buffer);
    }
    return cachedUint32ArrayMemory0;
}

let cachedUint8ArrayMemory0 = null;
function getUint8ArrayMemory0() {
    if (cachedUint8ArrayMemory0 === null || cachedUint8ArrayMemory0.byteLength === 0) {
        cachedUint8ArrayMemory0 = new Uint8Array(wasm.memory.buffer);
    }
    return cachedUint8ArrayMemory0;
}

function handleError(f, args) {
    try {
        return f.apply(this, args);
    } catch (e) {
        const idx = addToExternrefTable0(e);
        wasm.__wbindgen_exn_store(idx);
    }
}

function isLikeNone(x) {
    return x === undefined || x === null;
}

function passArray32ToWasm0(arg, malloc) {
    const ptr = malloc(arg.length * 4, 4) >>> 0;
    getUint32ArrayMemory0().set(arg, ptr / 4);
    WASM_VECTOR_LEN = arg.length;
    return ptr;
}

function passArray8ToWasm0(arg, malloc) {
    const ptr = malloc(arg.length * 1, 1) >>> 0;
    getUint8ArrayMemory0().set(arg, ptr / 1);
    WASM_VECTOR_LEN = arg.length;
    return ptr;
}

function passArrayF32ToWasm0(arg, malloc) {
    const ptr = malloc(arg.length * 4, 4) >>> 0;
    getFloat32ArrayMemory0().set(arg, ptr / 4);
    WASM_VECTOR_LEN = arg.length;
    return ptr;
}

function passArrayJsValueToWasm0(array, malloc) {
    const ptr = malloc(array.length * 4, 4) >>> 0;
    for (let i = 0; i < array.length; i++) {
        const add = addToExternrefTable0(array[i]);
        getDataViewMemory0().setUint32(ptr + 4 * i, add, true);
    }
    WASM_VECTOR_LEN = array.length;
    return ptr;
}

function passStringToWasm0(arg, malloc, realloc) {
    if (realloc === undefined) {
        const buf = cachedTextEncoder.encode(arg);
        const ptr = malloc(buf.length, 1) >>> 0;
        getUint8ArrayMemory0().subarray(ptr, ptr + buf.length).set(buf);
        WASM_VECTOR_LEN = buf.length;
        return ptr;
    }

    let len = arg.length;
    let ptr = malloc(len, 1) >>> 0;

    const mem = getUint8ArrayMemory0();

    let offset = 0;

    for (; offset < len; offset++) {
        const code = arg.charCodeAt(offset);
        if (code > 0x7F) break;
        mem[ptr + offset] = code;
    }
    if (offset !== len) {
        if (offset !== 0) {
            arg = arg.slice(offset);
        }
        ptr = realloc(ptr, len, len = offset + arg.length * 3, 1) >>> 0;
        const view = getUint8ArrayMemory0().subarray(ptr + offset, ptr + len);
        const ret = cachedTextEncoder.encodeInto(arg, view);

        offset += ret.written;
        ptr = realloc(ptr, len, offset, 1) >>> 0;
    }

    WASM_VECTOR_LEN = offset;
    return ptr;
}

function takeFromExternrefTable0(idx) {
    const value = wasm.__wbindgen_externrefs.get(idx);
    wasm.__externref_table_dealloc(idx);
    return value;
}

let cachedTextDecoder = new TextDecoder('utf-8', { ignoreBOM: true });
cachedTextDecoder.decode();
const MAX_SAFARI_DECODE_BYTES = 2146435072;
let numBytesDecoded = 0;
function decodeText(bytes) {
    numBytesDecoded += bytes.length;
    if (numBytesDecoded >= MAX_SAFARI_DECODE_BYTES) {
        cachedTextDecoder = new TextDecoder('utf-8', { ignoreBOM: true });
        cachedTextDecoder.decode();
        numBytesDecoded = bytes.length;
    }
    return cachedTextDecoder.decode(bytes);
}

const cachedTextEncoder = new TextEncoder();

if (!('encodeInto' in cachedTextEncoder)) {
    cachedTextEncoder.encodeInto = function (arg, view) {
        const buf = cachedTextEncoder.encode(arg);
        view.set(buf);
        return {
            read: arg.length,
            written: buf.length
        };
    };
}

let WASM_VECTOR_LEN = 0;

let wasmModule, wasmInstance, wasm;
function __wbg_finalize_init(instance, module) {
    wasmInstance = instance;
    wasm = instance.exports;
    wasmModule = module;
    cachedDataViewMemory0 = null;
    cachedFloat32ArrayMemory0 = null;
    cachedUint32ArrayMemory0 = null;
    cachedUint8ArrayMemory0 = null;
    wasm.__wbindgen_start();
    return wasm;
}

async function __wbg_load(module, imports) {
    if (typeof Response === 'function' && module instanceof Response) {
        if (!module.ok) {
            throw new Error(`failed to fetch Wasm: ${module.status} ${module.statusText} fetching '${module.url}'`);
        }

        if (typeof WebAssembly.instantiateStreaming === 'function') {
            try {
                return await WebAssembly.instantiateStreaming(module, imports);
            } catch (e) {
                const validResponse = expectedResponseType(module.type);

                if (validResponse && module.headers.get('Content-Type') !== 'application/wasm') {
                    console.warn("`WebAssembly.instantiateStreaming` failed because your server does not serve Wasm with `application/wasm` MIME type. Falling back to `WebAssembly.instantiate` which is slower. Original error:\n", e);

                } else { throw e; }
            }
        }

        const bytes = await module.arrayBuffer();
        return await WebAssembly.instantiate(bytes, imports);
    } else {
        const instance = await WebAssembly.instantiate(module, imports);

        if (instance instanceof WebAssembly.Instance) {
            return { instance, module };
        } else {
            return instance;
        }
    }

    function expectedResponseType(type) {
        switch (type) {
            case 'basic': case 'cors': case 'default': return true;
        }
        return false;
    }
}

function initSync(module) {
    if (wasm !== undefined) return wasm;


    if (module !== undefined) {
        if (Object.getPrototypeOf(module) === Object.prototype) {
            ({module} = module)
        } else {
            console.warn('using deprecated parameters for `initSync()`; pass a single object instead')
        }
    }

    const imports = __wbg_get_imports();
    if (!(module instanceof WebAssembly.Module)) {
        module = new WebAssembly.Module(module);
    }
    const instance = new WebAssembly.Instance(module, imports);
    return __wbg_finalize_init(instance, module);
}

let __wbg_init_promise;
async function __wbg_init(module_or_path) {
    if (wasm !== undefined) return wasm;
    if (__wbg_init_promise === undefined) {
        __wbg_init_promise = __wbg_init_once(module_or_path);
        __wbg_init_promise.catch(() => { __wbg_init_promise = undefined; });
    }
    return __wbg_init_promise;
}

async function __wbg_init_once(module_or_path) {

    if (module_or_path !== undefined) {
        if (Object.getPrototypeOf(module_or_path) === Object.prototype) {
            ({module_or_path} = module_or_path)
        } else {
            console.warn('using deprecated parameters for the initialization function; pass a single object instead')
        }
    }

    if (module_or_path === undefined) {
        module_or_path = new URL('clef_web_bg.wasm', import.meta.url);
    }
    const imports = __wbg_get_imports();

    if (typeof module_or_path === 'string' || (typeof Request === 'function' && module_or_path instanceof Request) || (typeof URL === 'function' && module_or_path instanceof URL)) {
        module_or_path = fetch(module_or_path);
    }

    const { instance, module } = await __wbg_load(await module_or_path, imports);

    return __wbg_finalize_init(instance, module);
}

export { initSync, __wbg_init as default };
