//! The qwen35 (Qwen3.5 / Clef-Flash trunk) forward pass: spec §3.
//!
//! ```text
//! h = token_embd[token]
//! for each layer:  h += mixer(rmsnorm(h))      mixer = Gated DeltaNet (3 of 4 layers) or gated attention
//!                  h += ffn(rmsnorm(h))        SwiGLU
//! logits = rmsnorm(h) · output
//! ```
//! Shapes in comments use the 9B numbers: D = 4096 (n_embd), F = 12288 (n_ff), V = 248320,
//! attention H = 16 heads, Hkv = 4, Dh = 256; DeltaNet Hk = 16 key heads, Hv = 32 value heads,
//! Ds = 128 (head dim of both), conv width K = 4. T = tokens in the batch.

use crate::gguf::{self, GgufError, Header};
use crate::ops::{self, l2norm, matmul, rmsnorm, sigmoid, softplus, Linear, MatmulScratch, Precision};
use crate::kv::{KvCache, KvType};
use crate::split::{self, Cut, Share, ShardId, ShardPlan};
use crate::weights::{Layout, StoreError, TensorView, WeightStore};
use std::fmt;
use std::ops::Range;

/// Architectures whose trunk this module runs. `clef` is a qwen35 trunk with Clef's joint schema
/// head beside it (same keys under `clef.`; the head is [`crate::clef`]'s).
pub const ARCHITECTURES: &[&str] = &["qwen35", "clef"];

#[derive(Debug, Clone, PartialEq)]
pub enum ModelError {
    Gguf(GgufError),
    Store(StoreError),
    /// A tensor is missing or has the wrong shape or an unsupported type.
    Tensor(String),
    /// Hyper-parameters that are inconsistent or that this runtime cannot run.
    Config(String),
    /// A request that does not fit: context full, token id out of range, …
    Input(String),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Gguf(e) => write!(f, "{e}"),
            ModelError::Store(e) => write!(f, "{e}"),
            ModelError::Tensor(s) | ModelError::Config(s) | ModelError::Input(s) => f.write_str(s),
        }
    }
}
impl std::error::Error for ModelError {}
impl From<GgufError> for ModelError {
    fn from(e: GgufError) -> Self {
        ModelError::Gguf(e)
    }
}
impl From<StoreError> for ModelError {
    fn from(e: StoreError) -> Self {
        ModelError::Store(e)
    }
}

/// Hyper-parameters read from the GGUF metadata (spec §1.2).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: String,
    pub n_vocab: usize,
    pub n_embd: usize,
    /// Blocks that run (block_count − nextn_predict_layers: trailing MTP blocks are skipped).
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub rope_base: f32,
    pub n_rot: usize,
    pub attn_scale: f32,
    pub conv_kernel: usize,
    /// DeltaNet head dim (key = value).
    pub d_state: usize,
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    /// true = Gated DeltaNet layer, false = full attention.
    pub recurrent: Vec<bool>,
    pub context_length: usize,
    pub tied_output: bool,
}

/// Largest value of a key that may be a scalar or a per-layer array.
fn scalar_or_max(h: &Header, key: &str) -> Result<usize, GgufError> {
    if let Some(a) = h.get_array(key) {
        let v = a.as_u64_vec().ok_or_else(|| GgufError::BadKeyType { key: key.into(), expected: "integers".into() })?;
        return Ok(v.into_iter().max().unwrap_or(0) as usize);
    }
    Ok(gguf::require_u64(h, key)? as usize)
}

impl Config {
    pub fn from_header(h: &Header) -> Result<Config, ModelError> {
        gguf::check_architecture(h, ARCHITECTURES)?;
        let a = h.architecture().unwrap_or_default().to_string();
        let k = |s: &str| format!("{a}.{s}");
        let block_count = gguf::require_u64(h, &k("block_count"))? as usize;
        let nextn = h.get_u64(&k("nextn_predict_layers")).unwrap_or(0) as usize;
        if nextn >= block_count || block_count > 1024 {
            return Err(ModelError::Config(format!("block_count {block_count} with {nextn} MTP blocks")));
        }
        let n_layer = block_count - nextn;
        let recurrent = match h.get_array(&k("attention.recurrent_layers")) {
            Some(arr) => {
                let v = arr.as_u64_vec().ok_or_else(|| ModelError::Config("attention.recurrent_layers is not a bool array".into()))?;
                if v.len() < n_layer {
                    return Err(ModelError::Config("attention.recurrent_layers is shorter than block_count".into()));
                }
                v[..n_layer].iter().map(|&x| x != 0).collect()
            }
            None => {
                let interval = h.get_u64(&k("full_attention_interval")).unwrap_or(4).max(1) as usize;
                (0..n_layer).map(|i| (i + 1) % interval != 0).collect()
            }
        };
        let tokens = h.get_array("tokenizer.ggml.tokens").map(|t| t.len());
        let n_embd = gguf::require_u64(h, &k("embedding_length"))? as usize;
        let head_dim = gguf::require_u64(h, &k("attention.key_length"))? as usize;
        let n_vocab = match (h.get_u64(&k("vocab_size")), tokens) {
            (Some(v), _) => v as usize,
            (None, Some(t)) => t,
            (None, None) => h.tensor("token_embd.weight").map(|t| t.dims.get(1).copied().unwrap_or(0) as usize).unwrap_or(0),
        };
        let scale = h.get_f32(&k("attention.scale")).unwrap_or(0.0);
        let cfg = Config {
            n_vocab,
            n_embd,
            n_layer,
            n_ff: scalar_or_max(h, &k("feed_forward_length"))?,
            n_head: scalar_or_max(h, &k("attention.head_count"))?,
            n_head_kv: scalar_or_max(h, &k("attention.head_count_kv"))?,
            head_dim,
            eps: gguf::require_f32(h, &k("attention.layer_norm_rms_epsilon"))?,
            rope_base: h.get_f32(&k("rope.freq_base")).unwrap_or(10000.0),
            n_rot: h.get_u64(&k("rope.dimension_count")).map(|v| v as usize).unwrap_or(head_dim),
            attn_scale: if scale > 0.0 { scale } else { 1.0 / (head_dim as f32).sqrt() },
            conv_kernel: gguf::require_u64(h, &k("ssm.conv_kernel"))? as usize,
            d_state: gguf::require_u64(h, &k("ssm.state_size"))? as usize,
            n_k_heads: gguf::require_u64(h, &k("ssm.group_count"))? as usize,
            n_v_heads: gguf::require_u64(h, &k("ssm.time_step_rank"))? as usize,
            recurrent,
            context_length: h.get_u64(&k("context_length")).unwrap_or(4096) as usize,
            tied_output: h.tensor("output.weight").is_none(),
            arch: a,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |s: String| Err(ModelError::Config(s));
        let dims = [self.n_embd, self.n_ff, self.head_dim, self.d_state, self.n_v_heads, self.n_k_heads, self.conv_kernel, self.n_vocab];
        if dims.iter().any(|&d| d == 0 || d > 1 << 20) {
            return bad(format!("implausible dimensions {dims:?}"));
        }
        if self.recurrent.iter().any(|r| !r) {
            if self.n_head == 0 || self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
                return bad(format!("head_count {} is not a multiple of head_count_kv {}", self.n_head, self.n_head_kv));
            }
            if self.n_rot > self.head_dim || self.n_rot % 2 != 0 {
                return bad(format!("rope dimension {} vs head dim {}", self.n_rot, self.head_dim));
            }
        }
        if self.n_v_heads % self.n_k_heads != 0 {
            return bad(format!("{} value heads are not a multiple of {} key heads", self.n_v_heads, self.n_k_heads));
        }
        Ok(())
    }

    /// DeltaNet conv channels: q (Hk·Ds) ‖ k (Hk·Ds) ‖ v (Hv·Ds).
    pub fn conv_dim(&self) -> usize {
        2 * self.n_k_heads * self.d_state + self.n_v_heads * self.d_state
    }

    /// Bytes of recurrent + conv state per sequence, and of K+V cache per token (f32), of the
    /// whole model.
    pub fn state_bytes(&self) -> (usize, usize) {
        ShardPlan::new(self, ShardId::WHOLE, |_| split::LayerBlocks { mixer_out: 1, ffn_down: 1 }).state_bytes(self)
    }
}

/// Which parts of the model one instance (one wasm memory, one Web Worker) holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Everything: the coordinator's tensors and every head (one worker).
    Whole,
    /// Embeddings and the norms of the residual stream: embeds tokens, normalises, samples.
    Coordinator,
    /// One shard of every weight matrix (see `split.rs`), with the state of its heads.
    Shard(ShardId),
}

impl Role {
    fn shard(self) -> Option<ShardId> {
        match self {
            Role::Whole => Some(ShardId::WHOLE),
            Role::Coordinator => None,
            Role::Shard(id) => Some(id),
        }
    }
    fn coordinates(self) -> bool {
        matches!(self, Role::Whole | Role::Coordinator)
    }
}

/// Gated DeltaNet (linear attention) weights of one layer (this shard's heads: Hk' key heads,
/// Hv' value heads; Hk, Hv for the whole model).
struct DeltaNet {
    n_k: usize,         // Hk' local key heads
    n_v: usize,         // Hv' local value heads (local value head j reads local key head j % Hk')
    qkv: Linear,        // D → conv_dim' = [q Hk'·Ds ‖ k Hk'·Ds ‖ v Hv'·Ds]
    gate: Linear,       // D → Hv'·Ds: output gate z
    beta: Linear,       // D → Hv'
    alpha: Linear,      // D → Hv'
    dt_bias: Vec<f32>,  // [Hv']
    a: Vec<f32>,        // [Hv'] = −exp(A_log)
    conv: Vec<f32>,     // [conv_dim'][K] depthwise taps, tap K−1 = current token
    norm: Vec<f32>,     // [Ds] gated RMSNorm weight (no +1)
    out: Linear,        // Hv'·Ds → D (this shard's columns of ssm_out)
}

impl DeltaNet {
    fn conv_dim(&self, ds: usize) -> usize {
        (2 * self.n_k + self.n_v) * ds
    }
}

/// Gated full-attention weights of one layer (this shard's query heads and the KV heads they read).
struct Attention {
    n_head: usize,      // H' local query heads
    n_kv: usize,        // Hkv' local KV heads
    /// KV head (local) read by local query head h: (first_head + h) / (H/Hkv) − first_kv.
    kv_of: Vec<usize>,
    q: Linear,          // D → H'·2·Dh: per head [query Dh | gate Dh]
    k: Linear,          // D → Hkv'·Dh
    v: Linear,          // D → Hkv'·Dh
    q_norm: Vec<f32>,   // [Dh]
    k_norm: Vec<f32>,   // [Dh]
    out: Linear,        // H'·Dh → D (this shard's columns of attn_output)
}

enum Mixer {
    DeltaNet(DeltaNet),
    Attention(Attention),
}

/// SwiGLU rows F' of this shard, in the pieces of its band split (`split.rs` [`split::Held`]; one
/// piece without bands). A piece's gate and up rows are rows of the held matrices (any run of
/// pieces is one product); its down columns are a matrix of their own (a partial sum each).
struct Ffn {
    gate: Linear, // D → F'
    up: Linear,   // D → F'
    /// Per piece: F_p → D, the piece's columns of ffn_down.
    down: Vec<Linear>,
    held: split::Held,
}

/// This shard's rows of the LM head (the pieces of its band split: any run of them one product).
struct Head {
    all: Linear,
    held: split::Held,
}

/// A shard's weights of one layer (`None`: no work for this shard there).
struct LayerPart {
    mixer: Option<Mixer>,
    ffn: Option<Ffn>,
}

/// The rows of pieces `p` within what `held` holds (local to its matrices).
fn local_rows(held: &split::Held, p: Range<usize>) -> Range<usize> {
    let (start, r) = (held.range().start, held.rows(p));
    r.start.saturating_sub(start)..r.end.saturating_sub(start)
}

/// The coordinator's tensors: embeddings and the norms of the residual stream.
struct Trunk {
    token_embd: Linear, // rows = V, row length D
    output_norm: Vec<f32>,
    attn_norm: Vec<Vec<f32>>, // per layer [D]
    post_norm: Vec<Vec<f32>>, // per layer [D]
}

/// A shard's tensors.
struct Part {
    plan: ShardPlan,
    layers: Vec<LayerPart>,
    /// LM-head rows `plan.vocab` (token_embd's rows when tied).
    output: Option<Head>,
}

/// A loaded model, or the part of it this instance holds ([`Role`]).
pub struct Model {
    pub config: Config,
    pub role: Role,
    pub store: WeightStore,
    /// How the states made by [`Model::try_new_state`] store the KV cache (default f32).
    pub kv_type: KvType,
    trunk: Option<Trunk>,
    part: Option<Part>,
}

/// Which logits a forward call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (prefill whose result is not needed).
    None,
    /// The last position only: `n_vocab` values.
    Last,
    /// Every position: `T × n_vocab`.
    All,
    /// No LM head: the final-norm hidden states of every position, `T × n_embd` (what a head on
    /// the backbone, such as Clef's joint schema head, reads).
    Hidden,
}

/// Per-sequence state of the heads an instance holds: DeltaNet conv/recurrent state and the
/// attention KV cache (a coordinator holds none: only the position), and the stages' work buffers.
#[derive(Clone, Debug)]
pub struct State {
    /// Tokens processed so far (the next position).
    pub n_past: usize,
    pub n_ctx: usize,
    layers: Vec<LayerState>,
    work: Work,
}

/// The intermediates of a stage (llama2.c's `RunState`): buffers that grow to the largest pass
/// they have served and are reused by every stage after it, so a decoded token allocates nothing.
/// The stages take the slots in turn, largest intermediate first (FFN: x·gate, x·up, then with
/// several pieces a piece's partial sum and its gathered input; DeltaNet:
/// x·qkv, the conv's window and output, x·z, the heads, x·β, x·α; attention: x·q with its gate,
/// the heads, x·k, x·v — see each stage's shapes), so together they hold about the largest
/// stage's memory, not the sum over the three kinds.
#[derive(Clone, Debug, Default)]
struct Work {
    slots: [Vec<f32>; 7],
    /// Attention: one position's scores (≤ n_ctx), an f16 cache's row as f32 (Dh).
    scores: Vec<f32>,
    row: Vec<f32>,
}

/// The first `n` values of `buf`, grown if needed, holding whatever the last stage left: for
/// outputs written in full (a matmul's, the conv's, DeltaNet's heads). Writing zeros first cost the
/// 9B-shaped Q2_K file's 128-token prompt 5–12 % (the buffers are megabytes, and the GEMM's panels
/// lose the cache to them).
fn sized(buf: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if buf.len() < n {
        buf.resize(n, 0.0);
    }
    &mut buf[..n]
}

/// [`sized`] set to zeros: for sums.
fn zeroed(buf: &mut Vec<f32>, n: usize) -> &mut [f32] {
    let b = sized(buf, n);
    b.fill(0.0);
    b
}

#[derive(Clone, Debug)]
enum LayerState {
    /// This instance holds no heads of the layer.
    None,
    /// conv: (K−1) × conv_dim' pre-conv inputs, oldest first; ssm: Hv' × Ds(v) × Ds(k).
    DeltaNet { conv: Vec<f32>, ssm: Vec<f32> },
    /// k, v: n_past × (Hkv'·Dh), f32 or f16 (`kv.rs`); `row` = Hkv'·Dh.
    Attention { k: KvCache, v: KvCache, row: usize },
}

/// The recurrent part of a [`State`] at position `n_past`.
///
/// A hybrid model cannot truncate its recurrent state, so reusing a prefix means restoring a
/// snapshot taken at the end of that prefix. The KV cache is append-only, so it is not copied:
/// restoring truncates it to `n_past`, which is valid as long as the state still holds the same
/// first `n_past` tokens (the caller — the engine's prefix cache — guarantees that).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub n_past: usize,
    recurrent: Vec<(Vec<f32>, Vec<f32>)>,
}

impl Snapshot {
    pub fn bytes(&self) -> usize {
        self.recurrent.iter().map(|(c, s)| 4 * (c.len() + s.len())).sum()
    }
}

impl State {
    /// Bytes held by this state (for memory reporting).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                LayerState::None => 0,
                LayerState::DeltaNet { conv, ssm } => 4 * (conv.len() + ssm.len()),
                LayerState::Attention { k, v, .. } => k.bytes() + v.bytes(),
            })
            .sum()
    }

    /// Saves the recurrent state at the current position.
    pub fn snapshot(&self) -> Snapshot {
        let recurrent = self
            .layers
            .iter()
            .filter_map(|l| match l {
                LayerState::DeltaNet { conv, ssm } => Some((conv.clone(), ssm.clone())),
                _ => None,
            })
            .collect();
        Snapshot { n_past: self.n_past, recurrent }
    }

    /// Returns to a snapshot taken on this sequence (see [`Snapshot`]).
    pub fn restore(&mut self, snap: &Snapshot) {
        assert!(snap.n_past <= self.n_past, "a snapshot from the future of this sequence");
        let mut rec = snap.recurrent.iter();
        for l in &mut self.layers {
            match l {
                LayerState::None => {}
                LayerState::DeltaNet { conv, ssm } => {
                    let (c, s) = rec.next().expect("snapshot of this model");
                    conv.copy_from_slice(c);
                    ssm.copy_from_slice(s);
                }
                LayerState::Attention { k, v, row } => {
                    // (By the row width, not the length over n_past: after a pass abandoned
                    // between its stages, the layers it ran hold more rows than the others.)
                    k.truncate(snap.n_past * *row);
                    v.truncate(snap.n_past * *row);
                }
            }
        }
        self.n_past = snap.n_past;
    }

    /// Forgets everything (position 0), keeping the allocations.
    pub fn clear(&mut self) {
        for l in &mut self.layers {
            match l {
                LayerState::None => {}
                LayerState::DeltaNet { conv, ssm } => {
                    conv.fill(0.0);
                    ssm.fill(0.0);
                }
                LayerState::Attention { k, v, .. } => {
                    k.truncate(0);
                    v.truncate(0);
                }
            }
        }
        self.n_past = 0;
    }
}

/// A stage of the forward pass: what the shards compute between two exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Layer `il`'s mixer (DeltaNet or attention) on `x = rmsnorm(h)`: a T × D partial sum.
    Mixer(usize),
    /// Layer `il`'s SwiGLU on `x = rmsnorm(h)`: a T × D partial sum.
    Ffn(usize),
    /// The LM head on the final-norm rows: each shard's vocabulary slice of the logits.
    Head,
}

/// The forward pass of T tokens as a resumable program — the coordinator's side of it.
///
/// ```text
/// begin_pass: h = embed(tokens); x = rmsnorm(h, attn_norm[0])         stage Mixer(0)
/// advance:    h += Σ partials;   x = rmsnorm(h, post_norm[il])         stage Ffn(il)
/// advance:    h += Σ partials;   x = rmsnorm(h, attn_norm[il+1])      stage Mixer(il+1)
///             … after the last layer: x = rmsnorm(h rows wanted, output_norm)   stage Head
/// advance:    logits complete                                          done
/// ```
/// Between two `advance`s every shard runs [`Model::run_stage`] on [`Pass::input`] and its
/// result is added with [`Pass::add_partial`] (or [`Pass::put_logits`] for the head). One worker
/// runs the same program with itself as the only shard ([`Model::forward`]); several workers run
/// it with messages in between, so the model's math has one definition.
#[derive(Default)]
pub struct Pass {
    /// Position of the first token.
    pub pos: usize,
    pub n_tokens: usize,
    /// D: the length of every row of `h`, `x` and `sum`.
    n_embd: usize,
    want: Option<Logits>,
    stage: Option<Stage>,
    /// T × D residual stream.
    h: Vec<f32>,
    /// The current stage's input: T × D (head: rows wanted × D).
    x: Vec<f32>,
    /// Σ of the shards' partials: T × D.
    sum: Vec<f32>,
    /// Logits (rows × V) or hidden states when done.
    out: Vec<f32>,
}

impl Pass {
    /// The stage the shards must run next (`None`: the pass is complete).
    pub fn stage(&self) -> Option<Stage> {
        self.stage
    }
    /// Input of the current stage (row-major, D per row).
    pub fn input(&self) -> &[f32] {
        &self.x
    }
    /// Rows of the current stage's input.
    pub fn rows(&self) -> usize {
        self.x.len() / self.n_embd.max(1)
    }
    /// Adds one shard's result of a mixer or FFN stage: T × D partial sums, one after the other
    /// (an FFN's pieces, `balance.rs`), each added in turn.
    pub fn add_partial(&mut self, part: &[f32]) {
        for piece in part.chunks(self.sum.len().max(1)) {
            for (s, p) in self.sum.iter_mut().zip(piece) {
                *s += p;
            }
        }
    }
    /// One shard's logits for vocabulary ids `vocab` (rows × |vocab|, row-major).
    pub fn put_logits(&mut self, vocab: std::ops::Range<usize>, part: &[f32]) {
        let n_v = self.out.len() / self.rows().max(1);
        for (r, row) in part.chunks_exact(vocab.len().max(1)).enumerate() {
            self.out[r * n_v + vocab.start..r * n_v + vocab.end].copy_from_slice(row);
        }
    }
    /// The result once [`Pass::stage`] is `None`.
    pub fn take_output(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.out)
    }
}

/// Reusable work buffers of one instance.
#[derive(Default)]
pub struct Scratch {
    pub mm: MatmulScratch,
    pub pass: Pass,
}

fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

impl Model {
    /// Plans and allocates the weight store of the whole model for a parsed header; the caller
    /// then fills it (see [`WeightStore::plan`]) and calls [`Model::from_store`].
    pub fn allocate(h: &Header) -> Result<(Config, WeightStore), ModelError> {
        Model::allocate_role_auto(h, Role::Whole)
    }

    /// [`Model::allocate_role`] for loaders that do not decide the stored forms themselves (the
    /// native and command-line ones; the browser's fits each part first): the faster forms where
    /// [`forms::enabled`](crate::quant::kquants::forms::enabled), else — or when they do not fit
    /// in memory (a 9B IQ2_XS file expanded is over 4 GiB: one wasm32 instance) — the file's.
    pub fn allocate_role_auto(h: &Header, role: Role) -> Result<(Config, WeightStore), ModelError> {
        if crate::quant::kquants::forms::enabled() {
            match Model::allocate_role(h, role, true) {
                Err(ModelError::Store(StoreError::OutOfMemory { .. })) => {}
                r => return r,
            }
        }
        Model::allocate_role(h, role, false)
    }

    /// [`Model::allocate`] for the part of the model that `role` holds; `expand`: store the
    /// tensors that have a faster form in it (`weights.rs` `Relocation`).
    pub fn allocate_role(h: &Header, role: Role, expand: bool) -> Result<(Config, WeightStore), ModelError> {
        let (cfg, layout, plan) = Model::layout_role(h, role, expand)?;
        let mut store = WeightStore::from_layout(layout)?;
        store.shard_plan = plan;
        Ok((cfg, store))
    }

    /// Where `role`'s tensors go, without allocating: the layout, and the shard plan it follows.
    pub fn layout_role(h: &Header, role: Role, expand: bool) -> Result<(Config, Layout, Option<ShardPlan>), ModelError> {
        let cfg = Config::from_header(h)?;
        for t in &h.tensors {
            if !crate::quant::is_supported(t.ty) {
                return Err(ModelError::Tensor(format!("tensor {} has type {} which this build cannot run", t.name, t.ty)));
            }
        }
        let n_layer = cfg.n_layer;
        Ok(match role {
            Role::Whole => (Layout::whole(h, |t| layer_of(&t.name).is_none_or(|i| i < n_layer), expand)?, None),
            Role::Coordinator => (Layout::cut(h, |t| split::coordinator_holds(&t.name).then_some(Cut::Whole), expand)?, None),
            Role::Shard(id) => {
                let plan = ShardPlan::for_tensors(&cfg, id, |n| h.tensor(n).map(|t| t.ty));
                (Layout::cut(h, |t| plan.cut(&cfg, &t.name), expand)?, Some(plan))
            }
        })
        .map(|(l, p)| (cfg, l, p))
    }

    /// Memory `role` needs, before allocating: bytes of weights, of state per sequence, of KV cache per token.
    pub fn role_memory(h: &Header, role: Role, expand: bool) -> Result<(u64, usize, usize), ModelError> {
        let (cfg, layout, plan) = Model::layout_role(h, role, expand)?;
        let (rec, kv) = match (role, plan) {
            (Role::Whole, _) => cfg.state_bytes(),
            (_, Some(p)) => p.state_bytes(&cfg),
            _ => (0, 0),
        };
        Ok((layout.total_bytes(), rec, kv))
    }

    /// Builds the model over a filled weight store, checking every tensor's shape.
    pub fn from_store(config: Config, store: WeightStore) -> Result<Model, ModelError> {
        Model::from_store_role(config, store, Role::Whole)
    }

    /// [`Model::from_store`] for a store allocated by [`Model::allocate_role`] with `role`.
    pub fn from_store_role(config: Config, mut store: WeightStore, role: Role) -> Result<Model, ModelError> {
        store.finish_load();
        let c = &config;
        let get = |name: &str, dims: &[usize]| -> Result<TensorView, ModelError> {
            let t = store.find(name).ok_or_else(|| ModelError::Tensor(format!("missing tensor {name}")))?;
            if t.dims != dims {
                return Err(ModelError::Tensor(format!("tensor {name} has shape {:?}, expected {dims:?}", t.dims)));
            }
            if t.dims[0] % t.ty.block_elems() != 0 {
                return Err(ModelError::Tensor(format!("tensor {name}: row length {} is not a multiple of the {} block", t.dims[0], t.ty)));
            }
            Ok(t.clone())
        };
        let checked = |l: Linear| -> Result<Linear, ModelError> {
            let (name, n_in) = (&l.t.name, l.n_in);
            // Quantized matmuls group activations by 32 (Q8_0) or 256 (Q8_K).
            let need = match l.t.ty.act_kind() {
                crate::quant::ActKind::Q8K => 256,
                crate::quant::ActKind::F32 => 1,
                _ => 32,
            };
            if n_in % need != 0 {
                return Err(ModelError::Tensor(format!("tensor {name}: row length {n_in} is not a multiple of {need}")));
            }
            Ok(l)
        };
        let lin = |name: &str, n_in: usize, n_out: usize| -> Result<Linear, ModelError> { checked(Linear::new(get(name, &[n_in, n_out])?)) };
        let vec = |name: &str, n: usize| -> Result<Vec<f32>, ModelError> { Ok(ops::load_f32(&store, &get(name, &[n])?)) };

        if !store.is_filled() {
            return Err(ModelError::Input("weights are not completely loaded".into()));
        }
        let (d, v) = (c.n_embd, c.n_vocab);
        let p = |il: usize, s: &str| format!("blk.{il}.{s}");
        let trunk = if role.coordinates() {
            Some(Trunk {
                token_embd: Linear::new(get("token_embd.weight", &[d, v])?),
                output_norm: vec("output_norm.weight", d)?,
                attn_norm: (0..c.n_layer).map(|il| vec(&p(il, "attn_norm.weight"), d)).collect::<Result<_, _>>()?,
                post_norm: (0..c.n_layer).map(|il| vec(&p(il, "post_attention_norm.weight"), d)).collect::<Result<_, _>>()?,
            })
        } else {
            None
        };
        let part = match role.shard() {
            None => None,
            Some(id) => {
                // A shard's store carries the plan it was cut by (made from every tensor's type).
                let plan = match &store.shard_plan {
                    Some(p) if p.id == id => p.clone(),
                    _ => ShardPlan::for_tensors(c, id, |n| store.find(n).map(|t| t.ty)),
                };
                let mut layers = Vec::with_capacity(c.n_layer);
                for (il, lp) in plan.layers.iter().enumerate() {
                    let p = |s: &str| p(il, s);
                    let mixer = if let Some(dp) = &lp.deltanet {
                        let (ds, nk, nv) = (c.d_state, dp.n_k(), dp.n_v());
                        let cd = (2 * nk + nv) * ds;
                        let conv_t = get(&p("ssm_conv1d.weight"), &[c.conv_kernel, cd])?;
                        Some(Mixer::DeltaNet(DeltaNet {
                            n_k: nk,
                            n_v: nv,
                            qkv: lin(&p("attn_qkv.weight"), d, cd)?,
                            gate: lin(&p("attn_gate.weight"), d, nv * ds)?,
                            beta: lin(&p("ssm_beta.weight"), d, nv)?,
                            alpha: lin(&p("ssm_alpha.weight"), d, nv)?,
                            dt_bias: vec(&p("ssm_dt.bias"), nv)?,
                            a: vec(&p("ssm_a"), nv)?,
                            conv: ops::load_f32(&store, &conv_t),
                            norm: vec(&p("ssm_norm.weight"), ds)?,
                            out: lin(&p("ssm_out.weight"), nv * ds, d)?,
                        }))
                    } else if let Some(ap) = &lp.attention {
                        let dh = c.head_dim;
                        let (nh, nkv) = (ap.heads.len(), ap.kv_heads.len());
                        let per_kv = c.n_head / c.n_head_kv;
                        Some(Mixer::Attention(Attention {
                            n_head: nh,
                            n_kv: nkv,
                            kv_of: ap.heads.clone().map(|h| h / per_kv - ap.kv_heads.start).collect(),
                            q: lin(&p("attn_q.weight"), d, 2 * nh * dh)?,
                            k: lin(&p("attn_k.weight"), d, nkv * dh)?,
                            v: lin(&p("attn_v.weight"), d, nkv * dh)?,
                            q_norm: vec(&p("attn_q_norm.weight"), dh)?,
                            k_norm: vec(&p("attn_k_norm.weight"), dh)?,
                            out: lin(&p("attn_output.weight"), nh * dh, d)?,
                        }))
                    } else {
                        None
                    };
                    let ffn = match &lp.ffn {
                        None => None,
                        Some(h) => {
                            let held = h.range();
                            let gate = lin(&p("ffn_gate.weight"), d, held.len())?;
                            let up = lin(&p("ffn_up.weight"), d, held.len())?;
                            // ffn_down's pieces lie one after the other (`Cut::Pieces`), each D rows × its columns.
                            let down = get(&p("ffn_down.weight"), &[held.len(), d])?;
                            let mut at = down.offset;
                            let mut pieces = Vec::with_capacity(h.pieces.len());
                            for r in &h.pieces {
                                let size = d * down.ty.row_bytes(r.len());
                                let view = TensorView { dims: vec![r.len(), d], offset: at, size, ..down.clone() };
                                at += size;
                                pieces.push(checked(Linear::new(view))?);
                            }
                            Some(Ffn { gate, up, down: pieces, held: h.clone() })
                        }
                    };
                    layers.push(LayerPart { mixer, ffn });
                }
                let output = match &plan.vocab {
                    None => None,
                    Some(h) => {
                        let n = h.range().len();
                        let all = match role {
                            Role::Whole if c.tied_output => Linear::new(get("token_embd.weight", &[d, n])?),
                            _ if c.tied_output => lin("token_embd.weight", d, n)?,
                            _ => lin("output.weight", d, n)?,
                        };
                        Some(Head { all, held: h.clone() })
                    }
                };
                Some(Part { plan, layers, output })
            }
        };
        let mut model = Model { config, role, store, kv_type: KvType::F32, trunk, part };
        model.interleave_weights(crate::quant::r4::faster);
        Ok(model)
    }

    /// Rearranges the layers' weight matrices and an untied LM head of the types `which` picks into
    /// the four-rows-interleaved layout ([`crate::quant::r4`], in place); returns how many. The
    /// embeddings (and a tied LM head, which is them) stay plain: their rows are gathered one by one. [`Model::from_store_role`]
    /// does this for the types where this build's R4 kernel is the faster one.
    pub fn interleave_weights(&mut self, which: impl Fn(crate::quant::GgmlType) -> bool) -> usize {
        let Some(part) = self.part.as_mut() else { return 0 };
        let mut scratch = Vec::new();
        let mut done = 0;
        for layer in &mut part.layers {
            let mut mats: Vec<&mut Linear> = Vec::new();
            match &mut layer.mixer {
                Some(Mixer::DeltaNet(w)) => mats.extend([&mut w.qkv, &mut w.gate, &mut w.beta, &mut w.alpha, &mut w.out]),
                Some(Mixer::Attention(w)) => mats.extend([&mut w.q, &mut w.k, &mut w.v, &mut w.out]),
                None => {}
            }
            if let Some(f) = &mut layer.ffn {
                mats.extend([&mut f.gate, &mut f.up]);
                mats.extend(f.down.iter_mut());
            }
            for w in mats {
                if which(w.t.ty) && ops::interleave(&mut self.store, w, &mut scratch) {
                    done += 1;
                }
            }
        }
        // An untied LM head too (a quarter of the bytes a token reads in the 2-3 bit files); its
        // rows a decision reads are un-interleaved where they are read (`clef::lm_rows`).
        if let Some(h) = part.output.as_mut().filter(|_| !self.config.tied_output) {
            if which(h.all.t.ty) && ops::interleave(&mut self.store, &mut h.all, &mut scratch) {
                done += 1;
            }
        }
        done
    }

    /// Whether this part's LM head is stored four rows interleaved ([`Model::interleave_weights`]).
    pub fn lm_head_interleaved(&self) -> bool {
        self.part.as_ref().and_then(|p| p.output.as_ref()).is_some_and(|h| h.all.r4)
    }

    /// Parses, allocates, copies and builds a model (or `role`'s part of it) from a complete GGUF file in memory.
    pub fn from_bytes(file: &[u8]) -> Result<Model, ModelError> {
        Model::from_bytes_role(file, Role::Whole)
    }

    /// [`Model::from_bytes`] for one role.
    pub fn from_bytes_role(file: &[u8], role: Role) -> Result<Model, ModelError> {
        Model::from_bytes_forms(file, role, None)
    }

    /// [`Model::from_bytes_role`] with the stored forms chosen: `expand` as
    /// [`Model::allocate_role`]'s (`None`: [`Model::allocate_role_auto`]'s choice).
    pub fn from_bytes_forms(file: &[u8], role: Role, expand: Option<bool>) -> Result<Model, ModelError> {
        let h = gguf::parse_header(file, Some(file.len() as u64))?;
        let (cfg, mut store) = match expand {
            Some(expand) => Model::allocate_role(&h, role, expand)?,
            None => Model::allocate_role_auto(&h, role)?,
        };
        if let Some(end) = store.plan().iter().map(|op| op.file_end()).max() {
            if end > file.len() as u64 {
                return Err(GgufError::Truncated { what: format!("tensor data ends at {end}, the file has {} bytes", file.len()) }.into());
            }
        }
        store.write_file_bytes(0, file);
        store.mark_all_filled();
        Model::from_store_role(cfg, store, role)
    }

    /// The vocabulary rows of the LM head this instance holds (`None`: no LM head here).
    pub fn vocab_range(&self) -> Option<Range<usize>> {
        self.part.as_ref().and_then(|p| p.plan.vocab.as_ref()).map(|h| h.range())
    }

    /// The vocabulary rows whose logits this instance computes when the split is even (each id
    /// in exactly one shard's).
    pub fn vocab_even(&self) -> Option<Range<usize>> {
        self.part.as_ref().and_then(|p| p.plan.vocab.as_ref()).map(|h| h.rows(h.even.clone()))
    }

    /// How many values a shard's result of `stage` over `rows` input rows has with `share`.
    pub fn result_len(&self, stage: Stage, rows: usize, share: &Share) -> usize {
        let head_rows = self.head_rows(share).map_or(0, |r| r.len());
        share.result_len(stage, rows, self.config.n_embd, head_rows)
    }

    /// How many pieces of layer `il`'s FFN rows this shard holds.
    pub fn ffn_pieces(&self, il: usize) -> usize {
        self.part.as_ref().and_then(|p| p.plan.layers[il].ffn.as_ref()).map_or(0, |h| h.pieces.len())
    }

    /// How many pieces of the LM head's rows this shard holds.
    pub fn head_pieces_held(&self) -> usize {
        self.part.as_ref().and_then(|p| p.plan.vocab.as_ref()).map_or(0, |h| h.pieces.len())
    }

    /// The vocabulary rows of this instance's LM head `share` computes.
    pub fn head_rows(&self, share: &Share) -> Option<Range<usize>> {
        let h = self.part.as_ref()?.plan.vocab.as_ref()?;
        Some(h.rows(share.pieces.clone().unwrap_or(h.even.clone())))
    }

    /// A fresh sequence state for up to `n_ctx` tokens.
    pub fn new_state(&self, n_ctx: usize) -> State {
        self.try_new_state(n_ctx).expect("out of memory for the sequence state")
    }

    /// A fresh sequence state with its whole KV cache reserved up front, so running out of
    /// memory is an error here rather than an abort in the middle of a generation.
    pub fn try_new_state(&self, n_ctx: usize) -> Result<State, ModelError> {
        let c = &self.config;
        let (rec, kv) = self.state_bytes();
        let oom = || ModelError::Store(StoreError::OutOfMemory { requested: (rec + kv * n_ctx) as u64 });
        let zeros = |n: usize| -> Result<Vec<f32>, ModelError> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| oom())?;
            v.resize(n, 0.0);
            Ok(v)
        };
        let mut layers = Vec::with_capacity(c.n_layer);
        for il in 0..c.n_layer {
            let mixer = self.part.as_ref().and_then(|p| p.layers[il].mixer.as_ref());
            layers.push(match mixer {
                None => LayerState::None,
                Some(Mixer::DeltaNet(w)) => LayerState::DeltaNet {
                    conv: zeros((c.conv_kernel - 1) * w.conv_dim(c.d_state))?,
                    ssm: zeros(w.n_v * c.d_state * c.d_state)?,
                },
                Some(Mixer::Attention(w)) => {
                    let row = w.n_kv * c.head_dim;
                    let k = KvCache::with_capacity(self.kv_type, n_ctx * row).ok_or_else(oom)?;
                    let v = KvCache::with_capacity(self.kv_type, n_ctx * row).ok_or_else(oom)?;
                    LayerState::Attention { k, v, row }
                }
            });
        }
        Ok(State { n_past: 0, n_ctx, layers, work: Work::default() })
    }

    /// Bytes of recurrent + conv state per sequence, and of K+V cache per token (f32), of the
    /// heads this instance holds.
    pub fn state_bytes(&self) -> (usize, usize) {
        self.part.as_ref().map_or((0, 0), |p| p.plan.state_bytes(&self.config))
    }

    /// Runs `tokens` (T ≥ 1) through the model, appending them to `state`.
    /// Returns the requested logits (`Last`: n_vocab values; `All`: T × n_vocab; `Hidden`: T × n_embd).
    /// This is the one-worker driver of the stage program ([`Pass`]): the model is its own only shard.
    pub fn forward(
        &self,
        state: &mut State,
        tokens: &[u32],
        want: Logits,
        prec: Precision,
        s: &mut Scratch,
    ) -> Result<Vec<f32>, ModelError> {
        assert_eq!(self.role, Role::Whole, "forward runs a whole model; a split one runs Pass stages on its shards");
        let mut pass = std::mem::take(&mut s.pass);
        let r = self.begin_pass(&mut pass, state.n_past, state.n_ctx, tokens, want);
        if r.is_ok() {
            self.run_pass(&mut pass, state, prec, &mut s.mm);
        }
        let out = pass.take_output();
        s.pass = pass;
        r.map(|_| out)
    }

    /// Runs every stage of a begun pass on this whole model (the one-worker driver: the model is
    /// its own only shard), then advances `state` by the pass's tokens.
    pub fn run_pass(&self, pass: &mut Pass, state: &mut State, prec: Precision, mm: &mut MatmulScratch) {
        while self.run_next_stage(pass, state, prec, mm) {}
        state.n_past = pass.pos + pass.n_tokens;
    }

    /// Runs the current stage of a begun pass on this whole model and moves to the next one;
    /// returns whether stages remain. (Between two calls the state is part-way: the layers run so
    /// far are ahead of the others.)
    pub fn run_next_stage(&self, pass: &mut Pass, state: &mut State, prec: Precision, mm: &mut MatmulScratch) -> bool {
        let Some(stage) = pass.stage() else { return false };
        let Pass { pos, x, sum, out, .. } = pass;
        let dst = if stage == Stage::Head { out } else { sum };
        self.run_stage(stage, *pos, x, &Share::default(), state, dst, prec, mm);
        self.advance(pass);
        pass.stage().is_some()
    }

    /// Starts a pass of `tokens` at position `pos` (coordinator): checks them, embeds them and
    /// prepares the first stage's input. The caller's state advances by T once the pass is done.
    pub fn begin_pass(&self, pass: &mut Pass, pos: usize, n_ctx: usize, tokens: &[u32], want: Logits) -> Result<(), ModelError> {
        let c = &self.config;
        let trunk = self.trunk.as_ref().expect("the coordinator runs passes");
        let t_n = tokens.len();
        if t_n == 0 {
            return Err(ModelError::Input("no tokens to process".into()));
        }
        if pos + t_n > n_ctx {
            return Err(ModelError::Input(format!("context full: {pos} + {t_n} tokens exceed the context length {n_ctx}")));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ModelError::Input(format!("token id {bad} is out of range (vocabulary has {})", c.n_vocab)));
        }
        let d = c.n_embd;
        pass.pos = pos;
        pass.n_tokens = t_n;
        pass.n_embd = d;
        pass.want = Some(want);
        pass.h.resize(t_n * d, 0.0);
        for (t, &tok) in tokens.iter().enumerate() {
            ops::embedding_row(&self.store, &trunk.token_embd, tok as usize, &mut pass.h[t * d..(t + 1) * d]);
        }
        pass.x.clone_from(&pass.h);
        rmsnorm(&mut pass.x, &trunk.attn_norm[0], c.eps);
        pass.sum.clear();
        pass.sum.resize(t_n * d, 0.0);
        pass.out.clear();
        pass.stage = Some(Stage::Mixer(0));
        Ok(())
    }

    /// Moves a pass to its next stage once every shard's result of the current one is in
    /// (coordinator): residual add, next norm, or the end.
    pub fn advance(&self, pass: &mut Pass) {
        let c = &self.config;
        let trunk = self.trunk.as_ref().expect("the coordinator runs passes");
        let d = c.n_embd;
        let next = match pass.stage {
            None => return,
            Some(Stage::Head) => None,
            Some(stage) => {
                for (hi, si) in pass.h.iter_mut().zip(&mut pass.sum) {
                    *hi += *si;
                    *si = 0.0;
                }
                let (il, next) = match stage {
                    Stage::Mixer(il) => (il, Stage::Ffn(il)),
                    _ => match stage {
                        Stage::Ffn(il) if il + 1 < c.n_layer => (il + 1, Stage::Mixer(il + 1)),
                        _ => (c.n_layer, Stage::Head),
                    },
                };
                match next {
                    Stage::Head => {
                        // Only the positions whose logits are wanted go through the final norm and LM head.
                        let t_n = pass.n_tokens;
                        let rows = match pass.want.unwrap_or(Logits::None) {
                            Logits::None => 0,
                            Logits::Last => 1,
                            Logits::All | Logits::Hidden => t_n,
                        };
                        pass.x.clear();
                        pass.x.extend_from_slice(&pass.h[(t_n - rows) * d..]);
                        rmsnorm(&mut pass.x, &trunk.output_norm, c.eps);
                        match pass.want {
                            Some(Logits::Hidden) => {
                                pass.out.clone_from(&pass.x);
                                None
                            }
                            Some(Logits::None) | None => None,
                            _ => {
                                pass.out.clear();
                                pass.out.resize(rows * c.n_vocab, 0.0);
                                Some(Stage::Head)
                            }
                        }
                    }
                    _ => {
                        pass.x.copy_from_slice(&pass.h);
                        let w = if matches!(next, Stage::Ffn(_)) { &trunk.post_norm[il] } else { &trunk.attn_norm[il] };
                        rmsnorm(&mut pass.x, w, c.eps);
                        Some(next)
                    }
                }
            }
        };
        pass.stage = next;
    }

    /// Runs one stage on this instance's heads (shard): `x` is the stage's input (T × D, or
    /// rows × D for the head); the result is written to `out` ([`Model::result_len`] values; mixer:
    /// this shard's T × D partial sum, zeros where it has no heads; FFN: the partial sum of the
    /// pieces `share` gives it, or one per piece; head: rows × its `share`'s vocabulary rows,
    /// with one shard rows × V). The state of this shard's heads advances to `pos + T`.
    #[allow(clippy::too_many_arguments)]
    pub fn run_stage(&self, stage: Stage, pos: usize, x: &[f32], share: &Share, state: &mut State, out: &mut [f32], prec: Precision, s: &mut MatmulScratch) {
        let part = self.part.as_ref().expect("a shard runs stages");
        let d = self.config.n_embd;
        match stage {
            Stage::Head => {
                if let Some(h) = &part.output {
                    // Rows × the pieces' rows, row-major: one product over their rows.
                    let p = share.pieces.clone().unwrap_or(h.held.even.clone());
                    matmul(&self.store, &h.all.rows(local_rows(&h.held, p)), x, out, prec, s);
                }
            }
            Stage::Ffn(il) => match &part.layers[il].ffn {
                Some(w) => {
                    let p = share.pieces.clone().unwrap_or(w.held.even.clone());
                    self.ffn(w, p, share.separate, x, out, &mut state.work, prec, s)
                }
                None => out.fill(0.0),
            },
            Stage::Mixer(il) => {
                let State { n_past, layers, work, .. } = state;
                *n_past = pos + x.len() / d;
                match (&part.layers[il].mixer, &mut layers[il]) {
                    (None, _) => out.fill(0.0),
                    (Some(Mixer::DeltaNet(w)), LayerState::DeltaNet { conv, ssm }) => self.deltanet(w, x, out, conv, ssm, work, prec, s),
                    (Some(Mixer::Attention(w)), LayerState::Attention { k, v, .. }) => self.attention(w, x, out, k, v, pos, work, prec, s),
                    _ => unreachable!("state layout matches the model"),
                }
            }
        }
    }

    /// SwiGLU over pieces `p` of this shard's rows: out = (silu(x·gate) ⊙ (x·up)) · down, as one
    /// T × D partial sum per piece (`separate`), or their sum added piece by piece in order — the
    /// order the coordinator adds separate pieces in, so either way gives the same bits.
    /// x: T × D; out: T × D, or |p| × T × D.
    #[allow(clippy::too_many_arguments)]
    fn ffn(&self, l: &Ffn, p: Range<usize>, separate: bool, x: &[f32], out: &mut [f32], work: &mut Work, prec: Precision, s: &mut MatmulScratch) {
        let d = self.config.n_embd;
        let t_n = x.len() / d;
        let rows = local_rows(&l.held, p.clone());
        let f = rows.len();
        let [g, u, tmp, piece, ..] = &mut work.slots;
        let g = sized(g, t_n * f); // T × F_p…: the pieces' rows are one run of the held matrices
        let u = sized(u, t_n * f);
        ops::matmuls(&self.store, x, [(&l.gate.rows(rows.clone()), &mut g[..]), (&l.up.rows(rows), &mut u[..])], prec, s);
        ops::silu_mul(g, u);
        let mut col = 0;
        for (k, down) in l.down[p].iter().enumerate() {
            let w = down.n_in;
            // The piece's T × F_k input: its columns of g (one token, or one piece: g itself).
            let gk: &[f32] = if t_n == 1 || w == f {
                &g[col * t_n..(col + w) * t_n]
            } else {
                let piece = sized(piece, t_n * w);
                for (dst, src) in piece.chunks_exact_mut(w).zip(g.chunks_exact(f)) {
                    dst.copy_from_slice(&src[col..col + w]);
                }
                piece
            };
            col += w;
            if separate {
                matmul(&self.store, down, gk, &mut out[k * t_n * d..(k + 1) * t_n * d], prec, s);
            } else if k == 0 {
                matmul(&self.store, down, gk, out, prec, s);
            } else {
                let tmp = sized(tmp, t_n * d);
                matmul(&self.store, down, gk, tmp, prec, s);
                out.iter_mut().zip(tmp.iter()).for_each(|(o, t)| *o += t);
            }
        }
    }

    /// Gated DeltaNet over T tokens (spec §3.3, token by token for the recurrence), on this
    /// shard's heads: out = this shard's T × D partial of ssm_out.
    #[allow(clippy::too_many_arguments)]
    fn deltanet(
        &self,
        w: &DeltaNet,
        x: &[f32],       // T × D
        out: &mut [f32], // T × D
        conv_state: &mut [f32],
        ssm: &mut [f32],
        work: &mut Work,
        prec: Precision,
        s: &mut MatmulScratch,
    ) {
        let c = &self.config;
        let t_n = x.len() / c.n_embd;
        let (hk, hv, ds, kw) = (w.n_k, w.n_v, c.d_state, c.conv_kernel);
        let cd = w.conv_dim(ds);
        let key_dim = hk * ds;

        let [qkv, window, conv, z, o, b, a] = &mut work.slots;
        let qkv = sized(qkv, t_n * cd); // T × conv_dim'
        let z = sized(z, t_n * hv * ds); // T × Hv'·Ds
        let b = sized(b, t_n * hv); // T × Hv'
        let a = sized(a, t_n * hv); // T × Hv'
        ops::matmuls(&self.store, x, [(&w.qkv, &mut *qkv), (&w.gate, z), (&w.beta, b), (&w.alpha, a)], prec, s);

        // Causal depthwise conv over [conv_state (K−1 rows) ; qkv (T rows)], then SiLU.
        window.clear(); // (K−1+T) × conv_dim'
        window.extend_from_slice(conv_state);
        window.extend_from_slice(qkv);
        let conv_out = sized(conv, t_n * cd); // T × conv_dim'
        for t in 0..t_n {
            for ch in 0..cd {
                let taps = &w.conv[ch * kw..(ch + 1) * kw];
                let mut acc = 0.0f32;
                for (k, &tap) in taps.iter().enumerate() {
                    acc += window[(t + k) * cd + ch] * tap;
                }
                conv_out[t * cd + ch] = acc;
            }
        }
        ops::silu_slice(conv_out);
        conv_state.copy_from_slice(&window[t_n * cd..]);

        let q_scale = 1.0 / (ds as f32).sqrt();
        let o = sized(o, t_n * hv * ds); // T × Hv'·Ds
        for t in 0..t_n {
            let row = &mut conv_out[t * cd..(t + 1) * cd];
            // q, k: Hk' heads of Ds, L2-normalised; q also scaled by 1/√Ds.
            for hd in row[..2 * key_dim].chunks_exact_mut(ds) {
                l2norm(hd, c.eps);
            }
            for qv in &mut row[..key_dim] {
                *qv *= q_scale;
            }
            let (qk, vs) = row.split_at(2 * key_dim);
            let (qs, ks) = qk.split_at(key_dim);
            for j in 0..hv {
                let kh = j % hk; // V heads are in tiled order (spec §2.4), also within a shard (split.rs)
                let qj = &qs[kh * ds..(kh + 1) * ds];
                let kj = &ks[kh * ds..(kh + 1) * ds];
                let vj = &vs[j * ds..(j + 1) * ds];
                let beta = sigmoid(b[t * hv + j]);
                let g = softplus(a[t * hv + j] + w.dt_bias[j]) * w.a[j];
                let decay = g.exp();
                let sj = &mut ssm[j * ds * ds..(j + 1) * ds * ds]; // [v][k]
                let oj = &mut o[(t * hv + j) * ds..(t * hv + j + 1) * ds];
                for (vi, srow) in sj.chunks_exact_mut(ds).enumerate() {
                    // decay, read with the decayed state, delta, rank-1 write, read-out.
                    let u = ops::scale_then_dot(srow, decay, kj);
                    let delta = (vj[vi] - u) * beta;
                    oj[vi] = ops::axpy_then_dot(srow, delta, kj, qj);
                }
            }
        }
        // Gated RMSNorm per head: rmsnorm(o_j) · silu(z_j).
        rmsnorm(o, &w.norm, c.eps);
        ops::silu_gate(o, z);
        matmul(&self.store, &w.out, o, out, prec, s);
    }

    /// Gated full attention over T tokens at positions pos.. (spec §3.4), on this shard's query
    /// heads: out = this shard's T × D partial of attn_output.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        w: &Attention,
        x: &[f32],       // T × D
        out: &mut [f32], // T × D
        k_cache: &mut KvCache,
        v_cache: &mut KvCache,
        n_past: usize,
        work: &mut Work,
        prec: Precision,
        s: &mut MatmulScratch,
    ) {
        let c = &self.config;
        let t_n = x.len() / c.n_embd;
        let (h, hkv, dh) = (w.n_head, w.n_kv, c.head_dim);
        let kv_dim = hkv * dh;
        let Work { slots: [qg, o, k, v, ..], scores, row } = work;
        let qg = sized(qg, t_n * 2 * h * dh); // T × H'·[q Dh | gate Dh]
        let k = sized(k, t_n * kv_dim); // T × Hkv'·Dh
        let v = sized(v, t_n * kv_dim);
        ops::matmuls(&self.store, x, [(&w.q, &mut *qg), (&w.k, &mut *k), (&w.v, &mut *v)], prec, s);

        for t in 0..t_n {
            let pos = n_past + t;
            for hi in 0..h {
                let q = &mut qg[(t * h + hi) * 2 * dh..][..dh];
                rmsnorm(q, &w.q_norm, c.eps);
                ops::rope_neox(q, c.n_rot, pos, c.rope_base);
            }
            for hi in 0..hkv {
                let kh = &mut k[(t * hkv + hi) * dh..][..dh];
                rmsnorm(kh, &w.k_norm, c.eps);
                ops::rope_neox(kh, c.n_rot, pos, c.rope_base);
            }
        }
        k_cache.truncate(n_past * kv_dim);
        v_cache.truncate(n_past * kv_dim);
        k_cache.append(k);
        v_cache.append(v);
        let row = sized(row, dh); // an f16 cache's row, as f32

        let o = zeroed(o, t_n * h * dh); // T × H'·Dh
        for t in 0..t_n {
            let n_kv = n_past + t + 1; // causal: positions 0..=n_past+t
            for hi in 0..h {
                let q = &qg[(t * h + hi) * 2 * dh..][..dh];
                let kvh = w.kv_of[hi]; // grouped (not tiled) for attention heads
                scores.clear();
                let mut max = f32::NEG_INFINITY;
                for p in 0..n_kv {
                    let kp = k_cache.row(p * kv_dim + kvh * dh, dh, row);
                    let sc = crate::quant::float::dot_f32(q, kp) * c.attn_scale;
                    max = max.max(sc);
                    scores.push(sc);
                }
                let mut sum = 0.0f32;
                for sc in scores.iter_mut() {
                    *sc = ops::exp(*sc - max);
                    sum += *sc;
                }
                let oh = &mut o[(t * h + hi) * dh..][..dh];
                for (p, &sc) in scores.iter().enumerate() {
                    let wgt = sc / sum;
                    let vp = v_cache.row(p * kv_dim + kvh * dh, dh, row);
                    for (oi, &vi) in oh.iter_mut().zip(vp) {
                        *oi += wgt * vi;
                    }
                }
                ops::sigmoid_gate(oh, &qg[(t * h + hi) * 2 * dh + dh..][..dh]);
            }
        }
        matmul(&self.store, &w.out, o, out, prec, s);
    }
}
