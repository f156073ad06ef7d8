//! wasm-bindgen surface. For now: the command line under Node (`www/cli.mjs`), which runs the
//! same `cli::run` as the native binary on the SIMD128 kernels. The browser engine API builds on
//! the same loader and model.

use crate::cli::{self, Host};
use crate::loader::ByteSource;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

#[wasm_bindgen]
extern "C" {
    /// The JS side of the command line (see www/cli.mjs): file access and stdout.
    #[derive(Clone)]
    pub type CliHost;
    #[wasm_bindgen(method, catch)]
    fn size(this: &CliHost, path: &str) -> Result<f64, JsValue>;
    /// Reads `buf.length` bytes at `offset` of `path` straight into `buf` (a view of wasm memory).
    #[wasm_bindgen(method, catch, js_name = readAt)]
    fn read_at(this: &CliHost, path: &str, offset: f64, buf: &mut [u8]) -> Result<(), JsValue>;
    #[wasm_bindgen(method)]
    fn write(this: &CliHost, s: &str);
    /// Writes to standard error.
    #[wasm_bindgen(method)]
    fn note(this: &CliHost, s: &str);
}

fn js_err(e: JsValue) -> String {
    e.as_string()
        .or_else(|| js_sys::Reflect::get(&e, &"message".into()).ok().and_then(|m| m.as_string()))
        .unwrap_or_else(|| format!("{e:?}"))
}

struct JsFile {
    host: CliHost,
    path: String,
}

impl ByteSource for JsFile {
    fn size(&mut self) -> Result<u64, String> {
        self.host.size(&self.path).map(|s| s as u64).map_err(js_err)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        self.host.read_at(&self.path, offset as f64, buf).map_err(js_err)
    }
}

struct JsHost(CliHost);

impl Host for JsHost {
    fn open(&mut self, path: &str) -> Result<Box<dyn ByteSource>, String> {
        let mut f = JsFile { host: self.0.clone(), path: path.to_string() };
        f.size()?; // fail early with the OS message
        Ok(Box::new(f))
    }
    fn out(&mut self, s: &str) {
        self.0.write(s);
    }
    fn note(&mut self, s: &str) {
        self.0.note(s);
    }
}

/// Runs one `clef` command; throws a one-line message on error.
#[wasm_bindgen(js_name = runCli)]
pub fn run_cli(args: Vec<String>, host: CliHost) -> Result<(), JsValue> {
    cli::run(&args, &mut JsHost(host)).map_err(|e| JsValue::from_str(&e))
}

// ---------------------------------------------------------------------------------------------
// The browser engine API (used by the Web Worker in www/src/worker.ts).
//
//   const info = parseHeader(prefix, fileSize)        // {status:'need', needed} | {status:'ok', …}
//   const loader = new ModelLoader(prefix, fileSize)  // allocates the weight shards once
//   for (const r of loader.plan()) { …write file bytes [r.fileOffset, +r.len) at loader.shardPtr(r.shard)…; loader.markFilled(r.shard) }
//   const engine = loader.finish(nCtx)                // WasmEngine
//
// Errors are JS `Error`s with a `code`: need_more, bad_gguf, wrong_architecture, unsupported_type,
// out_of_memory, context_full, bad_request, template, internal.

use crate::chat::ChatTemplate;
use crate::clef::answer::Calibration;
use crate::clef::head::{Head, HeadConfig};
use crate::clef::request::Template;
use crate::clef::safetensors::{self, HeadFile};
use crate::clef::{Decider, Decision, DecisionError, DecisionModel, Decisions};
use crate::engine::{Engine, EngineError, GenParams};
use crate::gguf::{Detail, GgufError, Header};
use crate::model::{Config, Model, ModelError, Role, Stage};
use crate::shard::{ShardEngine, StateOp};
use crate::balance::Balancer;
use crate::split::{Balanced, Share, ShardId};
use crate::sampler::{SamplerParams, MAX_TOP_LOGPROBS};
use crate::tokenizer::Tokenizer;
use crate::weights::{StoreError, WeightStore};
use js_sys::{Array, Object, Reflect};

fn err(code: &str, msg: impl std::fmt::Display) -> JsValue {
    let e = js_sys::Error::new(&msg.to_string());
    let _ = Reflect::set(&e, &"code".into(), &code.into());
    e.into()
}

fn model_err(e: &ModelError) -> JsValue {
    let code = match e {
        ModelError::Gguf(GgufError::NeedMore { .. }) => "need_more",
        ModelError::Gguf(GgufError::WrongArchitecture { .. }) => "wrong_architecture",
        ModelError::Gguf(GgufError::UnknownTensorType { .. }) => "unsupported_type",
        ModelError::Tensor(s) if s.contains("cannot run") => "unsupported_type",
        ModelError::Store(StoreError::OutOfMemory { .. }) => "out_of_memory",
        ModelError::Input(_) => "bad_request",
        _ => "bad_gguf",
    };
    err(code, e)
}

fn engine_err(e: EngineError) -> JsValue {
    let code = match e {
        EngineError::ContextFull { .. } => "context_full",
        EngineError::Input(_) | EngineError::Idle => "bad_request",
        EngineError::Model(_) => "internal",
        EngineError::Grammar(ref g) => g.code(),
    };
    err(code, e)
}

fn set(o: &Object, k: &str, v: impl Into<JsValue>) {
    let _ = Reflect::set(o, &k.into(), &v.into());
}

fn get(o: &JsValue, k: &str) -> Option<JsValue> {
    Reflect::get(o, &k.into()).ok().filter(|v| !v.is_undefined() && !v.is_null())
}

fn get_f64(o: &JsValue, k: &str) -> Option<f64> {
    get(o, k).and_then(|v| v.as_f64())
}

/// What a page needs to know about a model before downloading its weights.
fn header_info(h: &Header, cfg: &Config) -> Object {
    let o = Object::new();
    set(&o, "status", "ok");
    set(&o, "architecture", cfg.arch.as_str());
    set(&o, "name", h.get_str("general.name").unwrap_or(""));
    set(&o, "fileType", h.get_u64("general.file_type").map(|v| v as f64).unwrap_or(-1.0));
    set(&o, "fileSize", h.file_size() as f64);
    set(&o, "dataOffset", h.data_offset as f64);
    set(&o, "tensorCount", h.tensors.len() as f64);
    set(&o, "weightBytes", h.tensors.iter().map(|t| t.size).sum::<u64>() as f64);
    let (state, kv) = cfg.state_bytes();
    set(&o, "stateBytes", state as f64);
    set(&o, "kvBytesPerToken", kv as f64);
    set(&o, "contextLength", cfg.context_length as f64);
    set(&o, "nVocab", cfg.n_vocab as f64);
    set(&o, "nLayer", cfg.n_layer as f64);
    set(&o, "nEmbd", cfg.n_embd as f64);
    let unsupported: Array = h
        .tensors
        .iter()
        .filter(|t| !crate::quant::is_supported(t.ty))
        .map(|t| JsValue::from(format!("{} ({})", t.name, t.ty)))
        .collect();
    set(&o, "unsupported", unsupported);
    if let Some(t) = h.get_str("tokenizer.chat_template") {
        set(&o, "chatTemplate", t);
    }
    o
}

/// Parses a GGUF header from the first bytes of a file (as a layout: the tokenizer's strings are
/// checked, not kept). Returns `{status: 'need', needed}` when `prefix` is too short, else
/// `{status: 'ok', …info}`.
#[wasm_bindgen(js_name = parseHeader)]
pub fn parse_header(prefix: &[u8], file_size: f64) -> Result<JsValue, JsValue> {
    match crate::gguf::parse_header_with(prefix, Some(file_size as u64), Detail::Layout) {
        Err(GgufError::NeedMore { needed }) => {
            let o = Object::new();
            set(&o, "status", "need");
            set(&o, "needed", needed as f64);
            Ok(o.into())
        }
        Err(e) => Err(model_err(&ModelError::Gguf(e))),
        Ok(h) => {
            let cfg = Config::from_header(&h).map_err(|e| model_err(&e))?;
            Ok(header_info(&h, &cfg).into())
        }
    }
}

/// Which kernels this build runs: "relaxed-simd" or "simd128" (see `quant::SIMD_LEVEL`).
#[wasm_bindgen(js_name = simdLevel)]
pub fn simd_level() -> String {
    crate::quant::SIMD_LEVEL.to_string()
}

/// What this instance's kernel trials chose so far, as JSON (`clef generate --json`'s `streams`,
/// `gemm_dot`, `r4_form`: per type the decision and the rates measured for either form).
#[wasm_bindgen(js_name = kernelTrials)]
pub fn kernel_trials() -> String {
    crate::cli::kernel_trials_json()
}

/// How this instance runs the int8 prompt GEMM (`quant::gemm8::Profile`): wide tiles (Chromium's
/// V8) or narrow ones (Node 20's). Results are identical; only the speed differs.
#[wasm_bindgen(js_name = setGemmProfile)]
pub fn set_gemm_profile(wide: bool) {
    use crate::quant::gemm8::{set_profile, Profile};
    set_profile(if wide { Profile::Wide } else { Profile::Narrow });
}

/// Checks this build's fast kernels against the scalar references in the running engine (see
/// `quant::selftest`); returns the JSON report of `clef self-test` (`ok` says whether all passed).
#[wasm_bindgen(js_name = kernelSelfTest)]
pub fn kernel_self_test(rows: usize) -> String {
    crate::cli::self_test_json(rows).0
}

/// Warms the engine's code (src/warm.rs): a miniature of the model whose header `prefix` holds,
/// split as the load will split it (`shards`, `expand`, `band` as for `forRole`), run one pass per
/// `step` (`www/src/load/warm.ts`: built before the model's allocation, run once the model is
/// ready while no request is queued, then freed).
#[wasm_bindgen]
pub struct WarmUp {
    warm: crate::warm::Warm,
}

#[wasm_bindgen]
impl WarmUp {
    #[wasm_bindgen(constructor)]
    pub fn new(prefix: &[u8], file_size: f64, shards: usize, expand: bool, band: Option<usize>) -> Result<WarmUp, JsValue> {
        let header = read_header(prefix, file_size, Detail::Layout)?;
        let warm = crate::warm::Warm::new(&header, shards, expand, band.unwrap_or(0)).map_err(|e| model_err(&e))?;
        Ok(WarmUp { warm })
    }

    /// Runs the next pass; false once every pass has run.
    pub fn step(&mut self) -> Result<bool, JsValue> {
        self.warm.step().map_err(|e| model_err(&e))
    }
}

/// The wasm linear memory (for writing downloaded bytes straight into the weight shards).
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// A whole header, with `detail` of its metadata: `Detail::Layout` (the tokenizer's strings
/// checked, not kept — a fraction of a full parse's time on a 248k-token vocabulary) is all that
/// sizing, planning and allocating need; building a tokenizer needs `Detail::Full`.
fn read_header(prefix: &[u8], file_size: f64, detail: Detail) -> Result<Header, JsValue> {
    crate::gguf::parse_header_with(prefix, Some(file_size as u64), detail).map_err(|e| model_err(&ModelError::Gguf(e)))
}

/// `band`: [`ShardId::band_pct`] of a split load (absent: no bands).
fn parse_role(role: &str, index: usize, count: usize, band: Option<usize>) -> Result<Role, JsValue> {
    let band_pct = band.unwrap_or(0);
    if band_pct > 100 {
        return Err(err("bad_request", format!("a band of {band_pct} % of a shard's share")));
    }
    match role {
        "whole" => Ok(Role::Whole),
        "coordinator" => Ok(Role::Coordinator),
        "shard" if count >= 1 && index < count => Ok(Role::Shard(ShardId { index, count, band_pct })),
        _ => Err(err("bad_request", format!("unknown role '{role}' ({index} of {count})"))),
    }
}

/// The memory each part of a model split across `count` shard workers needs (before any
/// download): `[{role, index, weightBytes, expandedWeightBytes, stateBytes, kvBytesPerToken}]` —
/// the coordinator, then each shard; `count` = 1: the whole model in one worker.
/// `expandedWeightBytes`: the weights with the tensors that have a faster stored form held in it
/// (`weights.rs` `Relocation`; `expand` to `forRole`), from the same parse of the header.
/// `band`: the shards' [`ShardId::band_pct`] (absent: no bands).
#[wasm_bindgen(js_name = splitInfo)]
pub fn split_info(prefix: &[u8], file_size: f64, count: usize, band: Option<usize>) -> Result<Array, JsValue> {
    let h = read_header(prefix, file_size, Detail::Layout)?;
    let roles: Vec<Role> = if count <= 1 {
        vec![Role::Whole]
    } else {
        (0..=count).map(|i| if i == 0 { parse_role("coordinator", 0, count, band) } else { parse_role("shard", i - 1, count, band) }).collect::<Result<_, _>>()?
    };
    let out = Array::new();
    for role in roles {
        let (w, rec, kv) = Model::role_memory(&h, role, false).map_err(|e| model_err(&e))?;
        let (wx, _, _) = Model::role_memory(&h, role, true).map_err(|e| model_err(&e))?;
        let o = Object::new();
        let (name, index) = match role {
            Role::Whole => ("whole", 0),
            Role::Coordinator => ("coordinator", 0),
            Role::Shard(id) => ("shard", id.index),
        };
        set(&o, "role", name);
        set(&o, "index", index as u32);
        set(&o, "weightBytes", w as f64);
        set(&o, "expandedWeightBytes", wx as f64);
        set(&o, "stateBytes", rec as f64);
        set(&o, "kvBytesPerToken", kv as f64);
        out.push(&o);
    }
    Ok(out)
}

/// Allocates a model's weight shards (or one part's, see `forRole`) and tells the page which
/// file bytes go where.
#[wasm_bindgen]
pub struct ModelLoader {
    header: Header,
    config: Config,
    role: Role,
    store: Option<WeightStore>,
    kv_type: crate::kv::KvType,
    /// A coordinator's shards: how many, and their bands (its engine's balancer, `finish`).
    shards: (usize, usize),
}

#[wasm_bindgen]
impl ModelLoader {
    /// `prefix` must hold the whole header (see `parseHeader`). Throws `out_of_memory` if the
    /// weights cannot be allocated here.
    #[wasm_bindgen(constructor)]
    pub fn new(prefix: &[u8], file_size: f64) -> Result<ModelLoader, JsValue> {
        ModelLoader::for_role(prefix, file_size, "whole", 0, 1, false, None, None)
    }

    /// The part of a split model one worker holds: `role` = "whole", "coordinator" or "shard"
    /// (`index` of `count`); `expand`: store the tensors that have a faster stored form in it
    /// (`splitInfo`'s `expandedWeightBytes`); `band`: the shards' bands, in percent of a shard's
    /// share (src/split.rs; absent: none) — the same for the coordinator and every shard;
    /// `into_place`: every byte of the weights will be read straight into its place, so the
    /// allocation need not clear memory grown for it (`src/fresh_alloc.rs`; absent: false).
    #[wasm_bindgen(js_name = forRole)]
    #[allow(clippy::too_many_arguments)]
    pub fn for_role(prefix: &[u8], file_size: f64, role: &str, index: usize, count: usize, expand: bool, band: Option<usize>, into_place: Option<bool>) -> Result<ModelLoader, JsValue> {
        let role = parse_role(role, index, count, band)?;
        // A shard builds no tokenizer (`finishShard`): the layout is all it needs of the header.
        let detail = if matches!(role, Role::Shard(_)) { Detail::Layout } else { Detail::Full };
        let header = read_header(prefix, file_size, detail)?;
        let (config, store) =
            crate::fresh_alloc::skipping_fresh_clear(into_place == Some(true), || Model::allocate_role(&header, role, expand)).map_err(|e| model_err(&e))?;
        Ok(ModelLoader { header, config, role, store: Some(store), kv_type: Default::default(), shards: (count, band.unwrap_or(0)) })
    }

    pub fn info(&self) -> JsValue {
        header_info(&self.header, &self.config).into()
    }

    /// `[{shard, dstOffset, fileOffset, len, count, fileStride, dstStride}]` in file order: for
    /// `i < count`, file bytes `[fileOffset + i·fileStride, +len)` go to
    /// `shardPtr(shard) + dstOffset + i·dstStride`. A whole model's plan is one contiguous op
    /// (`count` 1) per shard, plus one per tensor stored in another form.
    pub fn plan(&self) -> Array {
        plan_array(self.store.as_ref().expect("loader already finished").plan())
    }

    /// The plan `forRole` would give, without allocating anything: a shard worker answers with
    /// it at once and allocates after, so the coordinator starts routing bytes meanwhile.
    #[wasm_bindgen(js_name = planForRole)]
    pub fn plan_for_role(prefix: &[u8], file_size: f64, role: &str, index: usize, count: usize, expand: bool, band: Option<usize>) -> Result<Array, JsValue> {
        let role = parse_role(role, index, count, band)?;
        let header = read_header(prefix, file_size, Detail::Layout)?;
        let (_, layout, _) = Model::layout_role(&header, role, expand).map_err(|e| model_err(&e))?;
        Ok(plan_array(&layout.plan))
    }
}

/// A copy plan as JS objects `{shard, dstOffset, fileOffset, len, count, fileStride, dstStride}`.
fn plan_array(plan: &[crate::weights::CopyOp]) -> Array {
    plan.iter()
        .map(|r| {
            let o = Object::new();
            set(&o, "shard", r.shard as u32);
            set(&o, "dstOffset", r.dst_offset as f64);
            set(&o, "fileOffset", r.file_offset as f64);
            set(&o, "len", r.len as f64);
            set(&o, "count", r.count as f64);
            set(&o, "fileStride", r.file_stride as f64);
            set(&o, "dstStride", r.dst_stride as f64);
            JsValue::from(o)
        })
        .collect()
}

#[wasm_bindgen]
impl ModelLoader {
    /// How the KV cache stores values: "f32" (default) or "f16" (half the memory).
    #[wasm_bindgen(js_name = setKvCache)]
    pub fn set_kv_cache(&mut self, ty: &str) -> Result<(), JsValue> {
        self.kv_type = crate::kv::KvType::parse(ty).ok_or_else(|| err("bad_request", format!("kvCache must be 'f32' or 'f16', not '{ty}'")))?;
        Ok(())
    }

    /// Number of weight shards (allocations).
    #[wasm_bindgen(js_name = shardCount)]
    pub fn shard_count(&self) -> usize {
        self.store.as_ref().map_or(0, |s| s.shard_count())
    }

    /// Address of shard `i` in wasm memory.
    #[wasm_bindgen(js_name = shardPtr)]
    pub fn shard_ptr(&mut self, i: usize) -> u32 {
        let store = self.store.as_mut().expect("loader already finished");
        store.shard_mut(i).as_mut_ptr() as u32
    }

    #[wasm_bindgen(js_name = markFilled)]
    pub fn mark_filled(&mut self, i: usize) {
        if let Some(s) = self.store.as_mut() {
            s.mark_filled(i);
        }
    }

    /// Builds the engine (checks every tensor) of a whole model or of a coordinator.
    /// `n_ctx` = context length to allocate for.
    pub fn finish(&mut self, n_ctx: usize) -> Result<WasmEngine, JsValue> {
        if matches!(self.role, Role::Shard(_)) {
            return Err(err("bad_request", "a shard's loader finishes with finishShard"));
        }
        let store = self.store.take().ok_or_else(|| err("bad_request", "loader already finished"))?;
        let mut model = Model::from_store_role(self.config.clone(), store, self.role).map_err(|e| model_err(&e))?;
        model.kv_type = self.kv_type;
        let tokenizer = Tokenizer::from_gguf(&self.header).map_err(|e| err("bad_gguf", e))?;
        let template = ChatTemplate::new(self.header.get_str("tokenizer.chat_template")).map_err(|e| err(e.code(), e))?;
        let decisions = DecisionSetup::new(&self.header, &model, &tokenizer);
        let engine = Engine::new(model, Some(tokenizer), n_ctx).map_err(|e| err("out_of_memory", e))?;
        // A coordinator's balancer: the shards' split, from the same tensor types they were cut by.
        let balance = (self.role == Role::Coordinator).then(|| {
            let (count, band) = self.shards;
            let h = &self.header;
            Balancer::new(Balanced::for_tensors(&self.config, count, band, |name| h.tensors.iter().find(|t| t.name == name).map(|t| t.ty)))
        });
        Ok(WasmEngine { engine, template, decisions, decider: Decider::new(), deciding: None, grammar_vocab: None, balance })
    }
}

#[wasm_bindgen]
impl ModelLoader {
    /// Builds a shard worker's engine with the state of its heads for `n_ctx` tokens.
    #[wasm_bindgen(js_name = finishShard)]
    pub fn finish_shard(&mut self, n_ctx: usize) -> Result<WasmShard, JsValue> {
        if !matches!(self.role, Role::Shard(_)) {
            return Err(err("bad_request", "only a shard's loader finishes with finishShard"));
        }
        let store = self.store.take().ok_or_else(|| err("bad_request", "loader already finished"))?;
        let mut model = Model::from_store_role(self.config.clone(), store, self.role).map_err(|e| model_err(&e))?;
        model.kv_type = self.kv_type;
        let shard = ShardEngine::new(model, n_ctx.clamp(1, self.config.context_length.max(1))).map_err(|e| model_err(&e))?;
        Ok(WasmShard { shard })
    }
}

/// A shard worker's engine (see `src/shard.rs`): runs stages of the coordinator's passes.
#[wasm_bindgen]
pub struct WasmShard {
    shard: ShardEngine,
}

/// Stage wire codes: 0 = mixer of `layer`, 1 = FFN of `layer`, 2 = LM head.
fn stage_of(kind: u32, layer: usize) -> Result<Stage, JsValue> {
    match kind {
        0 => Ok(Stage::Mixer(layer)),
        1 => Ok(Stage::Ffn(layer)),
        2 => Ok(Stage::Head),
        _ => Err(err("bad_request", format!("unknown stage {kind}"))),
    }
}

impl WasmShard {
    /// Runs a stage; its output stays in the shard ([`Self::run`] copies it, [`Self::run_view`]
    /// views it).
    /// `share`: `[start, end, separate]` of a balanced stage (src/balance.rs), absent: the even share.
    fn stage(&mut self, kind: u32, layer: usize, pos: usize, x: &[f32], share: Option<Vec<u32>>) -> Result<&[f32], JsValue> {
        let stage = stage_of(kind, layer)?;
        let share = match share.as_deref() {
            None => Share::default(),
            Some(&[a, b, sep]) => Share { pieces: Some(a as usize..b as usize), separate: sep != 0 },
            Some(v) => return Err(err("bad_request", format!("a share is [start, end, separate], not {v:?}"))),
        };
        self.shard.run(stage, pos, x, &share).map_err(|e| model_err(&e))
    }
}

#[wasm_bindgen]
impl WasmShard {
    /// Applies the coordinator's state changes: pairs (code, position) as `StateOp::encode`.
    pub fn apply(&mut self, ops: &[u32]) -> Result<(), JsValue> {
        for pair in ops.chunks_exact(2) {
            let op = StateOp::decode(pair[0], pair[1]).ok_or_else(|| err("bad_request", format!("unknown state op {}", pair[0])))?;
            self.shard.apply(op).map_err(|e| model_err(&e))?;
        }
        Ok(())
    }

    /// Runs a stage (`kind`, `layer`) on input `x` for tokens at positions `pos..`, of a balanced
    /// stage the pieces `share` names (`[start, end, separate]`; absent: the even share); returns
    /// this shard's partial sum (T × D; separate: one per piece) or its logits (rows × its rows).
    pub fn run(&mut self, kind: u32, layer: usize, pos: usize, x: &[f32], share: Option<Vec<u32>>) -> Result<Vec<f32>, JsValue> {
        self.stage(kind, layer, pos, x, share).map(|o| o.to_vec())
    }

    /// [`Self::run`] without copying the result out: a view of this instance's memory, valid
    /// until the next call into this instance. For the shared exchange, which copies it into the
    /// exchange buffer or hands it to the engine (another instance) at once; never transferred.
    #[wasm_bindgen(js_name = runView)]
    pub fn run_view(&mut self, kind: u32, layer: usize, pos: usize, x: &[f32], share: Option<Vec<u32>>) -> Result<js_sys::Float32Array, JsValue> {
        let out = self.stage(kind, layer, pos, x, share)?;
        // SAFETY: as `pass_input_view`: used before the next call into this instance.
        Ok(unsafe { js_sys::Float32Array::view(out) })
    }

    /// This shard's LM-head rows of those of `ids` in its vocabulary range, in their stored type
    /// (src/clef/lm_rows.rs): `{ty, ids, bytes}` (ggml type id, the ids it has, their rows), or
    /// `null` when it holds no LM head.
    #[wasm_bindgen(js_name = lmRows)]
    pub fn lm_rows(&self, ids: &[u32]) -> JsValue {
        match crate::clef::lm_rows::rows_of_part(&self.shard.model, ids) {
            None => JsValue::NULL,
            Some(p) => {
                let o = Object::new();
                set(&o, "ty", p.ty as u32);
                set(&o, "ids", js_sys::Uint32Array::from(&p.ids[..]));
                set(&o, "bytes", js_sys::Uint8Array::from(&p.bytes[..]));
                o.into()
            }
        }
    }

    /// Bytes of state (KV cache reserved + recurrent state + snapshots) held.
    #[wasm_bindgen(js_name = stateBytes)]
    pub fn state_bytes(&self) -> f64 {
        self.shard.state_bytes() as f64
    }

    /// `fast` (int8 activations, default) or `exact` (f32).
    #[wasm_bindgen(js_name = setPrecision)]
    pub fn set_precision(&mut self, p: &str) -> Result<(), JsValue> {
        self.shard.precision = crate::ops::Precision::parse(p).ok_or_else(|| err("bad_request", format!("unknown precision '{p}'")))?;
        Ok(())
    }
}

/// A loaded model with its conversation state.
#[wasm_bindgen]
pub struct WasmEngine {
    engine: Engine,
    template: ChatTemplate,
    decisions: DecisionSetup,
    decider: Decider,
    /// The decision in flight (between `decideBegin` and `decideFinish` / `decideCancel`).
    deciding: Option<Decision>,
    /// The vocabulary's token trie for constrained decoding, built at the first constrained request.
    grammar_vocab: Option<crate::grammar::GrammarVocab>,
    /// A coordinator's: what each shard computes of each stage (src/balance.rs).
    balance: Option<Balancer>,
}

/// A decision error as a JS `Error` with its `code` (see `DecisionError::code`) and HTTP `status`.
fn decision_err(e: &DecisionError) -> JsValue {
    let v = err(e.code(), e);
    let _ = Reflect::set(&v, &"status".into(), &JsValue::from(e.status()));
    v
}

/// What decisions need from the model's file, kept after the header is dropped: the head (a
/// `clef` GGUF's, or one attached later from `joint_head.safetensors`), the approximate label
/// readout of a file without one, or why neither; the file's `systemone` template and
/// calibration keys for a head attached later.
struct DecisionSetup {
    model: Result<Decisions, DecisionError>,
    systemone: Option<String>,
    calibration: Result<Calibration, DecisionError>,
    /// "gguf" or "safetensors" once a head is there, "approximate" for the label readout.
    form: &'static str,
}

impl DecisionSetup {
    fn new(h: &Header, model: &Model, tok: &Tokenizer) -> DecisionSetup {
        let name = h.get_str("general.name").unwrap_or("model");
        // A split model's coordinator holds the head (split::coordinator_holds); the LM-head rows
        // decisions read come from the shards (`decideLmNeeds` / `decideSupplyLm`).
        let dm = Decisions::from_gguf(h, model, tok, name);
        DecisionSetup {
            form: match &dm {
                Ok(Decisions::Head(_)) => "gguf",
                Ok(Decisions::Labels(_)) => "approximate",
                Err(_) => "",
            },
            model: dm,
            systemone: h.get_str("tokenizer.chat_template.systemone").map(str::to_string),
            calibration: Calibration::from_header(h),
        }
    }
}

/// Loads `joint_head.safetensors` (+ its config) for a head-less model: the page reads the file's
/// first `HeadLoader.prefixLength` bytes, makes the loader (allocates the head's weights once),
/// writes the data section `[dataOffset, dataOffset + dataLength)` at `ptr()` in wasm memory, and
/// hands the loader to `WasmEngine.attachHead`.
#[wasm_bindgen]
pub struct HeadLoader {
    config: HeadConfig,
    file: Option<HeadFile>,
}

#[wasm_bindgen]
impl HeadLoader {
    /// The bytes before the data section, from the file's first 8 (throws `bad_head`).
    #[wasm_bindgen(js_name = prefixLength)]
    pub fn prefix_length(first8: &[u8], size: f64) -> Result<f64, JsValue> {
        safetensors::prefix_len(first8, size as u64).map(|n| n as f64).map_err(|e| decision_err(&e))
    }

    /// `config_json`: `joint_head_config.json`; `prefix`: the file's first `prefixLength` bytes.
    #[wasm_bindgen(constructor)]
    pub fn new(config_json: &str, prefix: &[u8], size: f64) -> Result<HeadLoader, JsValue> {
        let config = safetensors::parse_config(config_json).map_err(|e| decision_err(&e))?;
        let file = safetensors::prepare(prefix, size as u64, &config).map_err(|e| decision_err(&e))?;
        Ok(HeadLoader { config, file: Some(file) })
    }

    #[wasm_bindgen(js_name = dataOffset)]
    pub fn data_offset(&self) -> f64 {
        self.file.as_ref().map_or(0.0, |f| f.data_offset as f64)
    }

    #[wasm_bindgen(js_name = dataLength)]
    pub fn data_length(&self) -> f64 {
        self.file.as_ref().map_or(0.0, |f| f.data_len as f64)
    }

    /// Where the data section goes in wasm memory.
    pub fn ptr(&mut self) -> u32 {
        self.file.as_mut().map_or(0, |f| f.store.shard_mut(0).as_mut_ptr() as u32)
    }
}
#[wasm_bindgen]
impl WasmEngine {
    #[wasm_bindgen(js_name = nCtx)]
    pub fn n_ctx(&self) -> usize {
        self.engine.n_ctx()
    }

    pub fn tokenize(&self, text: &str, special: bool) -> Vec<u32> {
        self.engine.tokenizer.as_ref().map(|t| t.encode(text, special)).unwrap_or_default()
    }

    pub fn detokenize(&self, ids: &[u32], special: bool) -> String {
        self.engine.tokenizer.as_ref().map(|t| t.decode(ids, special)).unwrap_or_default()
    }

    /// Renders the chat template for an OpenAI-shaped request given as JSON text (`{messages,
    /// tools?, add_generation_prompt?, enable_thinking?, chat_template_kwargs?}`; see
    /// `chat::ChatInput::from_request_json`: the one JSON → template value conversion).
    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(&self, request_json: &str) -> Result<String, JsValue> {
        let tok = self.engine.tokenizer.as_ref();
        let bos = tok.and_then(|t| t.bos()).and_then(|b| t_text(tok, b)).unwrap_or_default();
        let eos = tok.and_then(|t| t.eos()).and_then(|b| t_text(tok, b)).unwrap_or_default();
        self.template.render_request(request_json, &bos, &eos).map_err(|e| err(e.code(), e))
    }

    /// Starts a request; returns how many prompt tokens were reused from the previous state.
    /// `params`: {max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
    /// presence_penalty, frequency_penalty, seed, stop: string[], logit_bias: {id: bias}, ignore_eos,
    /// logprobs: number of alternatives per token (0 … 20; absent: no log-probabilities)}.
    pub fn begin(&mut self, prompt: &[u32], params: JsValue) -> Result<usize, JsValue> {
        let d = SamplerParams::default();
        let f = |k: &str, def: f32| get_f64(&params, k).map(|v| v as f32).unwrap_or(def);
        let mut logit_bias = Vec::new();
        if let Some(lb) = get(&params, "logit_bias") {
            for e in Object::entries(&Object::from(lb)).iter() {
                let pair = Array::from(&e);
                if let (Some(k), Some(v)) = (pair.get(0).as_string(), pair.get(1).as_f64()) {
                    let id: u32 = k.parse().map_err(|_| err("bad_request", format!("logit_bias key '{k}' is not a token id")))?;
                    logit_bias.push((id, v as f32));
                }
            }
        }
        let stop = match get(&params, "stop") {
            Some(s) if s.is_string() => vec![s.as_string().unwrap()],
            Some(s) if Array::is_array(&s) => Array::from(&s).iter().filter_map(|x| x.as_string()).collect(),
            _ => Vec::new(),
        };
        let gp = GenParams {
            sampler: SamplerParams {
                temperature: f("temperature", 0.8),
                top_k: get_f64(&params, "top_k").map(|v| v as usize).unwrap_or(d.top_k),
                top_p: f("top_p", d.top_p),
                min_p: f("min_p", d.min_p),
                repetition_penalty: f("repetition_penalty", 1.0),
                presence_penalty: f("presence_penalty", 0.0),
                frequency_penalty: f("frequency_penalty", 0.0),
                penalty_last_n: d.penalty_last_n,
                logit_bias,
                seed: get_f64(&params, "seed").map(|v| v as u64).unwrap_or(d.seed),
            },
            max_tokens: get_f64(&params, "max_tokens").map(|v| v as usize).unwrap_or(512),
            stop,
            ignore_eos: get(&params, "ignore_eos").and_then(|v| v.as_bool()).unwrap_or(false),
            logprobs: match get_f64(&params, "logprobs") {
                None => None,
                Some(n) if n >= 0.0 && n <= MAX_TOP_LOGPROBS as f64 && n.fract() == 0.0 => Some(n as usize),
                Some(n) => return Err(err("bad_request", format!("logprobs asks for {n} alternatives; 0 to {MAX_TOP_LOGPROBS} are possible"))),
            },
        };
        self.engine.begin(prompt, gp).map_err(engine_err)
    }

    /// Makes the current request's answer follow a grammar, given as JSON text (see
    /// `grammar::OutputSpec::from_json`: `{"type": "json_object"}`, `{"type": "json_schema",
    /// "schema"}`, `{"type": "tool_calls", "tools", "name"?, "parallel"?}`). Call after `begin`.
    /// A schema that cannot be compiled throws a `bad_schema` error.
    pub fn constrain(&mut self, spec_json: &str) -> Result<(), JsValue> {
        use crate::grammar::{GrammarError, GrammarVocab, OutputSpec};
        let spec = OutputSpec::from_json(spec_json).map_err(|e| err(e.code(), e))?;
        if self.grammar_vocab.is_none() {
            let tok = self.engine.tokenizer.as_ref().ok_or(GrammarError::NoTokenizer).map_err(|e| err(e.code(), e))?;
            self.grammar_vocab = Some(GrammarVocab::new(tok).map_err(|e| err(e.code(), e))?);
        }
        let c = self.grammar_vocab.as_ref().unwrap().compile(&spec).map_err(|e| err(e.code(), e))?;
        self.engine.constrain(c).map_err(engine_err)
    }

    /// Runs up to `max` prompt tokens; returns how many are still queued.
    pub fn prefill(&mut self, max: usize) -> Result<usize, JsValue> {
        self.engine.prefill(max).map_err(engine_err)
    }

    /// Generates one token: `{token, text}` (with `logprobs` asked for, also `logprob`, `bytes` (the
    /// token's bytes) and `top`: `[{id, bytes, logprob}]`), or `null` when finished (see `finishReason`).
    pub fn step(&mut self) -> Result<JsValue, JsValue> {
        let p = self.engine.step().map_err(engine_err)?;
        piece_value(p, self.engine.tokenizer.as_ref())
    }

    // ---- a model split across shard workers (the coordinator's side; see src/engine.rs) -----

    /// Starts the pass of up to `max` queued prompt tokens; returns how many stay queued.
    #[wasm_bindgen(js_name = prefillStart)]
    pub fn prefill_start(&mut self, max: usize) -> Result<usize, JsValue> {
        self.engine.prefill_start(max).map_err(engine_err)
    }

    /// Samples one token and starts its pass: a piece as `step` gives it, or `null` when finished.
    #[wasm_bindgen(js_name = stepStart)]
    pub fn step_start(&mut self) -> Result<JsValue, JsValue> {
        let p = self.engine.step_start().map_err(engine_err)?;
        piece_value(p, self.engine.tokenizer.as_ref())
    }

    /// The stage the shards must run: `[kind, layer, pos]` (kind 0 mixer, 1 FFN, 2 LM head), or
    /// `undefined` when no pass is in flight.
    #[wasm_bindgen(js_name = passStage)]
    pub fn pass_stage(&mut self) -> Option<Vec<u32>> {
        let p = self.engine.pass()?;
        let pos = p.pos as u32;
        Some(match p.stage()? {
            Stage::Mixer(il) => vec![0, il as u32, pos],
            Stage::Ffn(il) => vec![1, il as u32, pos],
            Stage::Head => vec![2, 0, pos],
        })
    }

    /// The current stage's input (rows × n_embd), copied out.
    #[wasm_bindgen(js_name = passInput)]
    pub fn pass_input(&mut self) -> Vec<f32> {
        self.engine.pass().map(|p| p.input().to_vec()).unwrap_or_default()
    }

    /// [`Self::pass_input`] without the copy: a view of this instance's memory, valid until the
    /// next call into this instance (which may grow its memory). For the shared exchange, which
    /// copies it into the exchange buffer and hands it to a local shard (another instance, another
    /// memory) before the engine is called again; never transferred. A prompt stage's input is
    /// 2 MB at 128 tokens: a fresh copy per stage was 130 MB of short-lived buffers per pass.
    #[wasm_bindgen(js_name = passInputView)]
    pub fn pass_input_view(&mut self) -> js_sys::Float32Array {
        match self.engine.pass() {
            // SAFETY: the view is of this instance's memory; the caller uses it before the next
            // call into the instance (the only way the buffer or its contents change).
            Some(p) => unsafe { js_sys::Float32Array::view(p.input()) },
            None => js_sys::Float32Array::new_with_length(0),
        }
    }

    /// What each shard computes of the current stage (src/balance.rs; a coordinator's): per
    /// shard, in the order its result is to be added, 7 integers — shard index, whether a share
    /// follows (0: its even share), the share's first and end piece and whether its pieces come
    /// back separate, its result's length in floats, and (LM head) the first vocabulary row of its
    /// logits. Call once per stage, before running it.
    #[wasm_bindgen(js_name = passPlan)]
    pub fn pass_plan(&mut self) -> Result<Vec<u32>, JsValue> {
        let b = self.balance.as_mut().ok_or_else(|| err("bad_request", "this engine has no shards"))?;
        let p = self.engine.pass().ok_or_else(|| err("bad_request", "no pass in flight"))?;
        let stage = p.stage().ok_or_else(|| err("bad_request", "the pass is complete"))?;
        let (rows, d) = (p.rows(), p.input().len() / p.rows().max(1));
        b.plan(stage);
        let mut out = Vec::with_capacity(7 * b.order().len());
        for &s in b.order() {
            let share = &b.shares()[s];
            let pieces = share.pieces.clone().unwrap_or(0..0);
            let len = b.result_len(s, rows, d);
            let head = if stage == Stage::Head { b.head_rows(s).start } else { 0 };
            out.extend([s, share.pieces.is_some() as usize, pieces.start, pieces.end, share.separate as usize, len, head].map(|v| v as u32));
        }
        Ok(out)
    }

    /// How many stages so far the balancer cut other than evenly (work moved between shards).
    #[wasm_bindgen(js_name = balanceMoved)]
    pub fn balance_moved(&self) -> f64 {
        self.balance.as_ref().map_or(0.0, |b| b.moved() as f64)
    }

    /// The units of work each shard has in the stage just planned (by shard index: FFN or
    /// vocabulary rows; a mixer stage: 1 each) — for a stage trace.
    #[wasm_bindgen(js_name = passWork)]
    pub fn pass_work(&self) -> Vec<f64> {
        self.balance.as_ref().map_or_else(Vec::new, |b| (0..b.order().len()).map(|s| b.work(s)).collect())
    }

    /// The shards' compute times of the stage just run (ms, by shard index): the balancer learns
    /// their speeds from them.
    #[wasm_bindgen(js_name = passObserve)]
    pub fn pass_observe(&mut self, ms: &[f64]) {
        if let Some(b) = self.balance.as_mut() {
            b.observe(ms);
        }
    }

    /// Adds one shard's result of a mixer / FFN stage: a T × D partial sum, or several one after
    /// the other (an FFN's separate pieces), added in turn.
    #[wasm_bindgen(js_name = passAddPartial)]
    pub fn pass_add_partial(&mut self, part: &[f32]) -> Result<(), JsValue> {
        let p = self.engine.pass().ok_or_else(|| err("bad_request", "no pass in flight"))?;
        if part.len() % p.input().len() != 0 {
            return Err(err("internal", format!("a shard's partial has {} values, expected {}", part.len(), p.input().len())));
        }
        p.add_partial(part);
        Ok(())
    }

    /// One shard's logits for vocabulary ids `[start, end)` of the LM-head stage.
    #[wasm_bindgen(js_name = passPutLogits)]
    pub fn pass_put_logits(&mut self, start: usize, end: usize, part: &[f32]) -> Result<(), JsValue> {
        let p = self.engine.pass().ok_or_else(|| err("bad_request", "no pass in flight"))?;
        if end < start || part.len() != p.rows() * (end - start) {
            return Err(err("internal", format!("a shard's logits for {start}..{end} have {} values", part.len())));
        }
        p.put_logits(start..end, part);
        Ok(())
    }

    /// Moves the pass to its next stage once every shard's result is in; `false` when it is complete.
    #[wasm_bindgen(js_name = passAdvance)]
    pub fn pass_advance(&mut self) -> bool {
        self.engine.advance_pass()
    }

    /// Runs the pass in flight here for about `budget_ms` (at least one stage); `true` while
    /// stages remain. A one-worker prompt slice: `prefillStart`, then this with a yield between
    /// calls (an abort in between: `abandonPass`).
    #[wasm_bindgen(js_name = runFor)]
    pub fn run_for(&mut self, budget_ms: f64) -> bool {
        self.engine.run_local_for(budget_ms)
    }

    /// Gives up the pass in flight between its stages (an abort): the state goes back to the
    /// newest snapshot at or before the pass's start (queued for the shards too).
    #[wasm_bindgen(js_name = abandonPass)]
    pub fn abandon_pass(&mut self) {
        self.engine.abandon_pass();
    }

    /// Gives up the pass in flight (a shard failed): the conversation state is forgotten.
    #[wasm_bindgen(js_name = cancelPass)]
    pub fn cancel_pass(&mut self) {
        self.engine.cancel_pass();
    }

    /// State changes the shards must apply before the next stage: pairs (code, position), see `WasmShard.apply`.
    #[wasm_bindgen(js_name = takeShardOps)]
    pub fn take_shard_ops(&mut self) -> Vec<u32> {
        self.engine.take_shard_ops().into_iter().flat_map(|op| op.encode()).collect()
    }

    /// Text held back at the end of a generation.
    pub fn flush(&mut self) -> String {
        self.engine.flush()
    }

    #[wasm_bindgen(js_name = finishReason)]
    pub fn finish_reason(&self) -> Option<String> {
        self.engine.finish_reason().map(|r| r.as_str().to_string())
    }

    /// Ends (or aborts) the current request, keeping its state for prefix reuse.
    #[wasm_bindgen(js_name = endRequest)]
    pub fn end_request(&mut self) {
        self.engine.end_request();
    }

    /// `{prompt_tokens, cached_tokens, completion_tokens}` of the current / last request.
    pub fn usage(&self) -> JsValue {
        let u = self.engine.usage;
        let o = Object::new();
        set(&o, "prompt_tokens", u.prompt_tokens as f64);
        set(&o, "cached_tokens", u.cached_tokens as f64);
        set(&o, "completion_tokens", u.completion_tokens as f64);
        o.into()
    }

    /// Forgets the conversation state.
    pub fn reset(&mut self) {
        self.engine.reset();
    }

    // ---- decisions (Clef's SystemOne API; see src/clef/) -------------------------------------

    /// `{available, form, code?, message?}`: whether this engine can answer decisions, with the
    /// head from the GGUF (`form` "gguf"), from `attachHead` ("safetensors"), by the approximate
    /// label readout of a file without a head ("approximate"), or why not.
    #[wasm_bindgen(js_name = decisionInfo)]
    pub fn decision_info(&self) -> JsValue {
        let o = Object::new();
        set(&o, "available", self.decisions.model.is_ok());
        set(&o, "form", self.decisions.form);
        if let Err(e) = &self.decisions.model {
            set(&o, "code", e.code());
            set(&o, "message", e.message());
        }
        o.into()
    }

    /// The model name decision responses report.
    #[wasm_bindgen(js_name = setModelName)]
    pub fn set_model_name(&mut self, name: &str) {
        if let Ok(dm) = &mut self.decisions.model {
            dm.set_name(name);
        }
    }

    /// Attaches a head loaded from `joint_head.safetensors` (see `HeadLoader`), replacing none or
    /// a previous safetensors head (on a split model, the coordinator's engine holds it). Throws
    /// `bad_head` (the loader is used up either way).
    #[wasm_bindgen(js_name = attachHead)]
    pub fn attach_head(&mut self, loader: &mut HeadLoader) -> Result<(), JsValue> {
        let file = loader.file.take().ok_or_else(|| err("bad_request", "this head loader was already used"))?;
        if self.decisions.form == "gguf" {
            return Err(decision_err(&DecisionError::BadHead("the model file has its own decision head".into())));
        }
        let calibration = self.decisions.calibration.clone().map_err(|e| decision_err(&e))?;
        let name = self.decisions.model.as_ref().map_or("model".to_string(), |dm| dm.name().to_string());
        let head = Head::new(loader.config.clone(), &self.engine.model, Some(file.finish())).map_err(|e| decision_err(&e))?;
        let template = Template::new(self.decisions.systemone.as_deref()).map_err(|e| decision_err(&e))?;
        self.decisions.model = Ok(Decisions::Head(Box::new(DecisionModel { head, template, calibration, name })));
        self.decisions.form = "safetensors";
        self.decider = Decider::new();
        Ok(())
    }

    /// Starts a SystemOne request (`body`: its JSON text): validates, renders and tokenizes it and
    /// restores the state prefix. Returns `{promptTokens, cachedTokens, approximate}` (the label
    /// readout's cached tokens grow as its prompts run: see `decideStats`). Errors are typed
    /// (`code`: malformed_request, invalid_decision, request_too_large, not_a_decision_model,
    /// not_supported, …; `status`: the HTTP status of the class). On a split model the driver then
    /// gathers the LM-head rows (`decideLmNeeds` / `decideSupplyLm`) and runs the prompt with
    /// `decidePassStart` / its passes / `decideAbsorb` instead of `decidePrefill`.
    #[wasm_bindgen(js_name = decideBegin)]
    pub fn decide_begin(&mut self, body: &str) -> Result<JsValue, JsValue> {
        if self.deciding.is_some() {
            return Err(err("bad_request", "a decision is already running"));
        }
        let dm = self.decisions.model.as_ref().map_err(decision_err)?;
        let d = self.decider.start(&mut self.engine, dm, body).map_err(|e| decision_err(&e))?;
        let o = Object::new();
        set(&o, "promptTokens", d.prompt_tokens() as f64);
        set(&o, "cachedTokens", self.decider.last.cached_tokens as f64);
        set(&o, "approximate", d.is_approximate());
        self.deciding = Some(d);
        Ok(o.into())
    }

    /// `{promptTokens, cachedTokens}` of the last decision (final once it has finished).
    #[wasm_bindgen(js_name = decideStats)]
    pub fn decide_stats(&self) -> JsValue {
        let o = Object::new();
        set(&o, "promptTokens", self.decider.last.prompt_tokens as f64);
        set(&o, "cachedTokens", self.decider.last.cached_tokens as f64);
        o.into()
    }

    /// Runs up to `max` more prompt tokens through the backbone (into the head, or the label
    /// readout's prompts); returns how many are left (0: ready for `decideFinish`).
    #[wasm_bindgen(js_name = decidePrefill)]
    pub fn decide_prefill(&mut self, max: usize) -> Result<usize, JsValue> {
        let (Some(d), Ok(dm)) = (self.deciding.as_mut(), self.decisions.model.as_ref()) else {
            return Err(err("bad_request", "no decision is running"));
        };
        self.decider.step(&mut self.engine, dm, d, max).map_err(|e| {
            self.deciding = None;
            decision_err(&e)
        })
    }

    // ---- decisions on a split model: the driver's steps (www/src/shards.ts SplitDriver.decide) --

    /// The vocabulary ids whose LM-head rows the decision in flight still needs from the shards
    /// (`undefined`: none — the engine had them itself). Ask every shard (`WasmShard.lmRows`),
    /// then `decideSupplyLm`.
    #[wasm_bindgen(js_name = decideLmNeeds)]
    pub fn decide_lm_needs(&self) -> Option<Vec<u32>> {
        self.deciding.as_ref()?.lm_needs().map(<[u32]>::to_vec)
    }

    /// The shards' answers to `decideLmNeeds`, concatenated: per answering shard its ggml type
    /// (`tys`) and number of rows (`counts`); all their `ids` and row `bytes` in that order.
    /// A wrong answer throws `internal` and ends the decision.
    #[wasm_bindgen(js_name = decideSupplyLm)]
    pub fn decide_supply_lm(&mut self, tys: &[u32], counts: &[u32], ids: &[u32], bytes: &[u8]) -> Result<(), JsValue> {
        use crate::clef::lm_rows::{LmRows, RowsPart};
        let d = self.deciding.as_mut().ok_or_else(|| err("bad_request", "no decision is running"))?;
        let n_embd = self.engine.model.config.n_embd;
        let parts = (|| {
            let bad = |s: String| DecisionError::Model(format!("LM-head rows: {s}"));
            let (mut at_id, mut at_byte, mut parts) = (0usize, 0usize, Vec::new());
            for (&ty, &n) in tys.iter().zip(counts) {
                let ty = crate::quant::GgmlType::from_id(ty).ok_or_else(|| bad(format!("unknown type {ty}")))?;
                let n = n as usize;
                let len = n * ty.row_bytes(n_embd);
                if at_id + n > ids.len() || at_byte + len > bytes.len() {
                    return Err(bad("the parts run past the ids or bytes given".into()));
                }
                parts.push(RowsPart { ty, ids: ids[at_id..at_id + n].to_vec(), bytes: bytes[at_byte..at_byte + len].to_vec() });
                at_id += n;
                at_byte += len;
            }
            if tys.len() != counts.len() || at_id != ids.len() || at_byte != bytes.len() {
                return Err(bad("the parts do not cover the ids and bytes given".into()));
            }
            Ok(parts)
        })();
        let wanted = d.lm_needs().map(<[u32]>::to_vec).unwrap_or_default();
        match parts.and_then(|p| LmRows::from_parts(n_embd, &wanted, p)).and_then(|rows| d.supply_lm(rows)) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.decide_cancel();
                Err(decision_err(&e))
            }
        }
    }

    /// Starts the backbone pass of up to `max` more prompt tokens of the decision in flight; the
    /// driver runs it on the shards (`passStage` …), then calls `decideAbsorb`.
    #[wasm_bindgen(js_name = decidePassStart)]
    pub fn decide_pass_start(&mut self, max: usize) -> Result<(), JsValue> {
        let d = self.deciding.as_mut().ok_or_else(|| err("bad_request", "no decision is running"))?;
        if let Err(e) = self.decider.pass_start(&mut self.engine, d, max) {
            self.decide_cancel();
            return Err(decision_err(&e));
        }
        Ok(())
    }

    /// After the pass: feeds its hidden rows to the head (or the readout); returns how many
    /// prompt tokens are left (0: ready for `decideFinish`).
    #[wasm_bindgen(js_name = decideAbsorb)]
    pub fn decide_absorb(&mut self) -> Result<usize, JsValue> {
        let (Some(d), Ok(dm)) = (self.deciding.as_mut(), self.decisions.model.as_ref()) else {
            return Err(err("bad_request", "no decision is running"));
        };
        match self.decider.absorb(&mut self.engine, dm, d) {
            Ok(left) => Ok(left),
            Err(e) => {
                self.decide_cancel();
                Err(decision_err(&e))
            }
        }
    }

    /// The answers: the SystemOne response as JSON text (key order as llama-server writes it).
    #[wasm_bindgen(js_name = decideFinish)]
    pub fn decide_finish(&mut self) -> Result<String, JsValue> {
        let d = self.deciding.take().ok_or_else(|| err("bad_request", "no decision is running"))?;
        let dm = self.decisions.model.as_ref().map_err(decision_err)?;
        let resp = self.decider.finish(&mut self.engine, dm, &d).map_err(|e| decision_err(&e))?;
        Ok(resp.to_json(d.request.as_ref().expect("a request")))
    }

    /// Gives up the decision in flight (abort); the engine is idle again.
    #[wasm_bindgen(js_name = decideCancel)]
    pub fn decide_cancel(&mut self) {
        if self.deciding.take().is_some() {
            self.decider.cancel(&mut self.engine);
        }
    }

    /// `fast` (int8 activations, default) or `exact` (f32).
    #[wasm_bindgen(js_name = setPrecision)]
    pub fn set_precision(&mut self, p: &str) -> Result<(), JsValue> {
        self.engine.precision = crate::ops::Precision::parse(p).ok_or_else(|| err("bad_request", format!("unknown precision '{p}'")))?;
        Ok(())
    }
}

fn piece_value(p: Option<crate::engine::Piece>, tok: Option<&Tokenizer>) -> Result<JsValue, JsValue> {
    let bytes = |id: u32| js_sys::Uint8Array::from(tok.map(|t| t.token_bytes(id)).unwrap_or_default());
    Ok(match p {
        None => JsValue::NULL,
        Some(p) => {
            let o = Object::new();
            set(&o, "token", p.token);
            set(&o, "text", p.text);
            if let Some(lp) = p.logprobs {
                set(&o, "logprob", lp.logprob);
                set(&o, "bytes", bytes(p.token));
                let top = Array::new();
                for (id, logprob) in lp.top {
                    let t = Object::new();
                    set(&t, "id", id);
                    set(&t, "bytes", bytes(id));
                    set(&t, "logprob", logprob);
                    top.push(&t);
                }
                set(&o, "top", top);
            }
            o.into()
        }
    })
}

fn t_text(tok: Option<&Tokenizer>, id: u32) -> Option<String> {
    tok.and_then(|t| t.token_text(id)).map(str::to_string)
}

/// Incremental SHA-256 (the Hub's LFS oid) over bytes already in wasm memory or passed in.
#[wasm_bindgen]
pub struct Sha256 {
    h: sha2::Sha256,
}

#[wasm_bindgen]
impl Sha256 {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Sha256 {
        use sha2::Digest;
        Sha256 { h: sha2::Sha256::new() }
    }
    pub fn update(&mut self, bytes: &[u8]) {
        use sha2::Digest;
        self.h.update(bytes);
    }
    /// Hashes `len` bytes of wasm memory at `ptr` (e.g. a filled part of a weight shard) without copying.
    #[wasm_bindgen(js_name = updateFromMemory)]
    pub fn update_from_memory(&mut self, ptr: u32, len: u32) {
        use sha2::Digest;
        // SAFETY: the caller passes a range inside a live allocation (a shard from ModelLoader).
        let s = unsafe { std::slice::from_raw_parts(ptr as *const u8, len as usize) };
        self.h.update(s);
    }
    /// Hex digest (consumes the state; create a new hasher to start over).
    pub fn hex(&mut self) -> String {
        use sha2::Digest;
        let h = std::mem::take(&mut self.h);
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The OPFS cache's chunk checksum (src/checksum.rs). `new Checksum()` computes the current kind
/// (what new cache entries record); `Checksum.like(digest)` the kind a recorded string names, so
/// entries written by earlier builds are still checked (null: `digest` is not a checksum).
#[wasm_bindgen]
pub struct Checksum {
    c: crate::checksum::Checksum,
}

#[wasm_bindgen]
impl Checksum {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Checksum {
        Checksum { c: crate::checksum::Checksum::new(crate::checksum::Kind::Lanes) }
    }
    /// Whether `digest` is of the kind `new Checksum()` computes.
    #[wasm_bindgen(js_name = isCurrent)]
    pub fn is_current(digest: &str) -> bool {
        crate::checksum::Kind::of(digest) == Some(crate::checksum::Kind::Lanes)
    }
    pub fn like(digest: &str) -> Option<Checksum> {
        crate::checksum::Kind::of(digest).map(|k| Checksum { c: crate::checksum::Checksum::new(k) })
    }
    pub fn update(&mut self, bytes: &[u8]) {
        self.c.update(bytes);
    }
    /// Adds `len` bytes of wasm memory at `ptr` (a filled part of a weight shard) without copying.
    #[wasm_bindgen(js_name = updateFromMemory)]
    pub fn update_from_memory(&mut self, ptr: u32, len: u32) {
        // SAFETY: the caller passes a range inside a live allocation (a shard from ModelLoader).
        self.c.update(unsafe { std::slice::from_raw_parts(ptr as *const u8, len as usize) });
    }
    pub fn digest(&self) -> String {
        self.c.digest()
    }
}

impl Default for Checksum {
    fn default() -> Self {
        Self::new()
    }
}

/// A zeroed buffer of `n` bytes for a load's chunks (`out_of_memory` when it cannot be had).
fn chunk_buffer(n: usize) -> Result<Vec<u8>, JsValue> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| err("out_of_memory", "no memory for the load's chunk buffers".to_string()))?;
    v.resize(n, 0u8);
    Ok(v)
}

/// Routes the chunks of a model split across workers (www/src/load/placement.ts SplitPlacement):
/// a chunk is staged here, its checksum taken, and each destination's pieces found by walking that
/// destination's copy plan — the coordinator's own copied within wasm memory by the caller, each
/// shard worker's gathered into one packed buffer to send. The walks run here rather than in JS: a
/// column cut is one piece per row, hundreds of thousands per load.
///
/// Two stages: slot 0 may hold a chunk while it arrives and until it is hashed (a cached chunk
/// is read straight into it); slot 1 takes a chunk that waited in a JS buffer, at its completion.
#[wasm_bindgen]
pub struct ChunkRouter {
    dests: Vec<crate::weights::PlanIndex>,
    stages: [Vec<u8>; 2],
    pack: Vec<u8>,
}

#[wasm_bindgen]
impl ChunkRouter {
    /// A router for chunks of at most `chunk_bytes` (its stage and pack buffers are allocated now).
    #[wasm_bindgen(constructor)]
    pub fn new(chunk_bytes: usize) -> Result<ChunkRouter, JsValue> {
        let buf = || chunk_buffer(chunk_bytes);
        Ok(ChunkRouter { dests: Vec::new(), stages: [buf()?, buf()?], pack: buf()? })
    }

    /// A router with stage 0 only (no second stage, nothing packed): a worker reading its own part
    /// of a cached model (www/src/load/pull.ts).
    #[wasm_bindgen(js_name = stageOnly)]
    pub fn stage_only(chunk_bytes: usize) -> Result<ChunkRouter, JsValue> {
        Ok(ChunkRouter { dests: Vec::new(), stages: [chunk_buffer(chunk_bytes)?, Vec::new()], pack: Vec::new() })
    }

    /// Adds a destination by its plan: 7 numbers per op (shard, dstOffset, fileOffset, len, count,
    /// fileStride, dstStride, as `ModelLoader.plan()` gives them). Returns its index.
    #[wasm_bindgen(js_name = addDestination)]
    pub fn add_destination(&mut self, plan: &[f64]) -> Result<usize, JsValue> {
        if plan.len() % 7 != 0 {
            return Err(err("internal", format!("a copy plan has 7 numbers per op, not {}", plan.len())));
        }
        let ops = plan
            .chunks_exact(7)
            .map(|o| crate::weights::CopyOp {
                shard: o[0] as usize,
                dst_offset: o[1] as u64,
                file_offset: o[2] as u64,
                len: o[3] as u64,
                count: (o[4] as u64).max(1),
                file_stride: o[5] as u64,
                dst_stride: o[6] as u64,
            })
            .collect();
        self.dests.push(crate::weights::PlanIndex::new(ops));
        Ok(self.dests.len() - 1)
    }

    /// Where stage `slot` (0 or 1) lies: the caller writes a chunk's bytes there.
    #[wasm_bindgen(js_name = stagePtr)]
    pub fn stage_ptr(&mut self, slot: usize) -> u32 {
        self.stages[slot & 1].as_mut_ptr() as u32
    }

    /// The checksum (src/checksum.rs, current kind) of the first `len` bytes of stage `slot`.
    #[wasm_bindgen(js_name = stageChecksum)]
    pub fn stage_checksum(&self, slot: usize, len: usize) -> String {
        let stage = &self.stages[slot & 1];
        let mut c = crate::checksum::Checksum::new(crate::checksum::Kind::Lanes);
        c.update(&stage[..len.min(stage.len())]);
        c.digest()
    }

    /// Destination `d`'s pieces of the chunk in stage `slot` (file bytes `[start, start + len)`) as
    /// quads (shard, dstOffset, src, len). `pack`: gathered into the pack buffer, `src` an offset
    /// there; else `src` is an offset into the stage.
    pub fn pieces(&mut self, d: usize, slot: usize, start: f64, len: usize, pack: bool) -> Vec<f64> {
        let stage = &self.stages[slot & 1];
        let (start, end) = (start as u64, start as u64 + len.min(stage.len()) as u64);
        let mut quads = Vec::new();
        let mut at = 0usize;
        let out = &mut self.pack;
        self.dests[d].pieces_in(start, end, |shard, file, dst, n| {
            let (from, n) = ((file - start) as usize, n as usize);
            let src = if pack {
                if at + n > out.len() {
                    out.resize(at + n, 0); // not for a plan whose ops are disjoint (every plan): a safeguard
                }
                out[at..at + n].copy_from_slice(&stage[from..from + n]);
                at += n;
                at - n
            } else {
                from
            };
            quads.extend_from_slice(&[shard as f64, dst as f64, src as f64, n as f64]);
        });
        quads
    }

    /// Where `pieces(…, pack = true)` gathered the bytes.
    #[wasm_bindgen(js_name = packPtr)]
    pub fn pack_ptr(&mut self) -> u32 {
        self.pack.as_mut_ptr() as u32
    }
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}
