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
use crate::ops::{self, l2norm, matmul, rmsnorm, sigmoid, silu, softplus, Linear, MatmulScratch, Precision};
use crate::weights::{StoreError, TensorView, WeightStore};
use std::fmt;

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

    /// Bytes of recurrent + conv state per sequence, and of K+V cache per token (f32).
    pub fn state_bytes(&self) -> (usize, usize) {
        let n_rec = self.recurrent.iter().filter(|&&r| r).count();
        let rec = n_rec * 4 * (self.n_v_heads * self.d_state * self.d_state + (self.conv_kernel - 1) * self.conv_dim());
        let kv = (self.n_layer - n_rec) * 4 * 2 * self.n_head_kv * self.head_dim;
        (rec, kv)
    }
}

/// Gated DeltaNet (linear attention) weights of one layer.
struct DeltaNet {
    qkv: Linear,        // D → conv_dim (8192): [q 16×128 ‖ k 16×128 ‖ v 32×128]
    gate: Linear,       // D → Hv·Ds (4096): output gate z
    beta: Linear,       // D → Hv (32)
    alpha: Linear,      // D → Hv (32)
    dt_bias: Vec<f32>,  // [Hv]
    a: Vec<f32>,        // [Hv] = −exp(A_log)
    conv: Vec<f32>,     // [conv_dim][K] depthwise taps, tap K−1 = current token
    norm: Vec<f32>,     // [Ds] gated RMSNorm weight (no +1)
    out: Linear,        // Hv·Ds → D
}

/// Gated full-attention weights of one layer.
struct Attention {
    q: Linear,          // D → H·2·Dh: per head [query Dh | gate Dh]
    k: Linear,          // D → Hkv·Dh
    v: Linear,          // D → Hkv·Dh
    q_norm: Vec<f32>,   // [Dh]
    k_norm: Vec<f32>,   // [Dh]
    out: Linear,        // H·Dh → D
}

enum Mixer {
    DeltaNet(DeltaNet),
    Attention(Attention),
}

struct Layer {
    attn_norm: Vec<f32>, // [D]
    post_norm: Vec<f32>, // [D]
    mixer: Mixer,
    ffn_gate: Linear, // D → F
    ffn_up: Linear,   // D → F
    ffn_down: Linear, // F → D
}

/// A loaded model: configuration, weights and per-layer tensor views.
pub struct Model {
    pub config: Config,
    pub store: WeightStore,
    token_embd: Linear, // rows = V, row length D
    output_norm: Vec<f32>,
    output: Linear, // D → V (token_embd when tied)
    layers: Vec<Layer>,
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

/// Per-sequence state: DeltaNet conv/recurrent state and the attention KV cache.
#[derive(Clone, Debug)]
pub struct State {
    /// Tokens processed so far (the next position).
    pub n_past: usize,
    pub n_ctx: usize,
    layers: Vec<LayerState>,
}

#[derive(Clone, Debug)]
enum LayerState {
    /// conv: (K−1) × conv_dim pre-conv inputs, oldest first; ssm: Hv × Ds(v) × Ds(k).
    DeltaNet { conv: Vec<f32>, ssm: Vec<f32> },
    /// k, v: n_past × (Hkv·Dh), f32.
    Attention { k: Vec<f32>, v: Vec<f32> },
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
                LayerState::DeltaNet { conv, ssm } => 4 * (conv.len() + ssm.len()),
                LayerState::Attention { k, v } => 4 * (k.capacity() + v.capacity()),
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
                LayerState::Attention { .. } => None,
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
                LayerState::DeltaNet { conv, ssm } => {
                    let (c, s) = rec.next().expect("snapshot of this model");
                    conv.copy_from_slice(c);
                    ssm.copy_from_slice(s);
                }
                LayerState::Attention { k, v } => {
                    let kv_len = k.len() / self.n_past.max(1) * snap.n_past;
                    k.truncate(kv_len);
                    v.truncate(kv_len);
                }
            }
        }
        self.n_past = snap.n_past;
    }

    /// Forgets everything (position 0), keeping the allocations.
    pub fn clear(&mut self) {
        for l in &mut self.layers {
            match l {
                LayerState::DeltaNet { conv, ssm } => {
                    conv.fill(0.0);
                    ssm.fill(0.0);
                }
                LayerState::Attention { k, v } => {
                    k.clear();
                    v.clear();
                }
            }
        }
        self.n_past = 0;
    }
}

/// Reusable work buffers for one forward pass.
#[derive(Default)]
pub struct Scratch {
    pub mm: MatmulScratch,
}

impl Model {
    /// Plans and allocates the weight store for a parsed header; the caller then fills the
    /// shards (see [`WeightStore::plan`]) and calls [`Model::from_store`].
    pub fn allocate(h: &Header) -> Result<(Config, WeightStore), ModelError> {
        let cfg = Config::from_header(h)?;
        for t in &h.tensors {
            if !crate::quant::is_supported(t.ty) {
                return Err(ModelError::Tensor(format!("tensor {} has type {} which this build cannot run", t.name, t.ty)));
            }
        }
        let n_layer = cfg.n_layer;
        let keep = |t: &crate::gguf::TensorInfo| match t.name.strip_prefix("blk.") {
            Some(rest) => rest.split('.').next().and_then(|i| i.parse::<usize>().ok()).is_some_and(|i| i < n_layer),
            None => true,
        };
        let store = WeightStore::allocate(h, keep)?;
        Ok((cfg, store))
    }

    /// Builds the model over a filled weight store, checking every tensor's shape.
    pub fn from_store(config: Config, store: WeightStore) -> Result<Model, ModelError> {
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
        let lin = |name: &str, n_in: usize, n_out: usize| -> Result<Linear, ModelError> {
            let t = get(name, &[n_in, n_out])?;
            let l = Linear::new(t);
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
        let vec = |name: &str, n: usize| -> Result<Vec<f32>, ModelError> { Ok(ops::load_f32(&store, &get(name, &[n])?)) };

        if !store.is_filled() {
            return Err(ModelError::Input("weights are not completely loaded".into()));
        }
        let (d, v) = (c.n_embd, c.n_vocab);
        let token_embd = Linear::new(get("token_embd.weight", &[d, v])?);
        let output = if c.tied_output { token_embd.clone() } else { lin("output.weight", d, v)? };
        let output_norm = vec("output_norm.weight", d)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for il in 0..c.n_layer {
            let p = |s: &str| format!("blk.{il}.{s}");
            let mixer = if c.recurrent[il] {
                let (ds, hv) = (c.d_state, c.n_v_heads);
                let conv_t = get(&p("ssm_conv1d.weight"), &[c.conv_kernel, c.conv_dim()])?;
                Mixer::DeltaNet(DeltaNet {
                    qkv: lin(&p("attn_qkv.weight"), d, c.conv_dim())?,
                    gate: lin(&p("attn_gate.weight"), d, hv * ds)?,
                    beta: lin(&p("ssm_beta.weight"), d, hv)?,
                    alpha: lin(&p("ssm_alpha.weight"), d, hv)?,
                    dt_bias: vec(&p("ssm_dt.bias"), hv)?,
                    a: vec(&p("ssm_a"), hv)?,
                    conv: ops::load_f32(&store, &conv_t),
                    norm: vec(&p("ssm_norm.weight"), ds)?,
                    out: lin(&p("ssm_out.weight"), hv * ds, d)?,
                })
            } else {
                let (h, hkv, dh) = (c.n_head, c.n_head_kv, c.head_dim);
                Mixer::Attention(Attention {
                    q: lin(&p("attn_q.weight"), d, 2 * h * dh)?,
                    k: lin(&p("attn_k.weight"), d, hkv * dh)?,
                    v: lin(&p("attn_v.weight"), d, hkv * dh)?,
                    q_norm: vec(&p("attn_q_norm.weight"), dh)?,
                    k_norm: vec(&p("attn_k_norm.weight"), dh)?,
                    out: lin(&p("attn_output.weight"), h * dh, d)?,
                })
            };
            layers.push(Layer {
                attn_norm: vec(&p("attn_norm.weight"), d)?,
                post_norm: vec(&p("post_attention_norm.weight"), d)?,
                mixer,
                ffn_gate: lin(&p("ffn_gate.weight"), d, c.n_ff)?,
                ffn_up: lin(&p("ffn_up.weight"), d, c.n_ff)?,
                ffn_down: lin(&p("ffn_down.weight"), c.n_ff, d)?,
            });
        }
        Ok(Model { config, store, token_embd, output_norm, output, layers })
    }

    /// Parses, allocates, copies and builds a model from a complete GGUF file in memory.
    pub fn from_bytes(file: &[u8]) -> Result<Model, ModelError> {
        let h = gguf::parse_header(file, Some(file.len() as u64))?;
        let (cfg, mut store) = Model::allocate(&h)?;
        for r in store.plan().to_vec() {
            let src = &file[r.file_offset as usize..(r.file_offset + r.len) as usize];
            store.shard_mut(r.shard).copy_from_slice(src);
            store.mark_filled(r.shard);
        }
        Model::from_store(cfg, store)
    }

    /// A fresh sequence state for up to `n_ctx` tokens.
    pub fn new_state(&self, n_ctx: usize) -> State {
        self.try_new_state(n_ctx).expect("out of memory for the sequence state")
    }

    /// A fresh sequence state with its whole KV cache reserved up front, so running out of
    /// memory is an error here rather than an abort in the middle of a generation.
    pub fn try_new_state(&self, n_ctx: usize) -> Result<State, ModelError> {
        let c = &self.config;
        let kv_len = n_ctx * c.n_head_kv * c.head_dim;
        let (rec, kv) = c.state_bytes();
        let oom = || ModelError::Store(StoreError::OutOfMemory { requested: (rec + kv * n_ctx) as u64 });
        let zeros = |n: usize| -> Result<Vec<f32>, ModelError> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| oom())?;
            v.resize(n, 0.0);
            Ok(v)
        };
        let mut layers = Vec::with_capacity(c.n_layer);
        for &rec in &c.recurrent {
            layers.push(if rec {
                LayerState::DeltaNet {
                    conv: zeros((c.conv_kernel - 1) * c.conv_dim())?,
                    ssm: zeros(c.n_v_heads * c.d_state * c.d_state)?,
                }
            } else {
                let (mut k, mut v) = (Vec::new(), Vec::new());
                k.try_reserve_exact(kv_len).map_err(|_| oom())?;
                v.try_reserve_exact(kv_len).map_err(|_| oom())?;
                LayerState::Attention { k, v }
            });
        }
        Ok(State { n_past: 0, n_ctx, layers })
    }

    /// Runs `tokens` (T ≥ 1) through the model, appending them to `state`.
    /// Returns the requested logits (`Last`: n_vocab values; `All`: T × n_vocab).
    pub fn forward(
        &self,
        state: &mut State,
        tokens: &[u32],
        want: Logits,
        prec: Precision,
        s: &mut Scratch,
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let t_n = tokens.len();
        if t_n == 0 {
            return Err(ModelError::Input("no tokens to process".into()));
        }
        if state.n_past + t_n > state.n_ctx {
            return Err(ModelError::Input(format!(
                "context full: {} + {} tokens exceed the context length {}",
                state.n_past, t_n, state.n_ctx
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ModelError::Input(format!("token id {bad} is out of range (vocabulary has {})", c.n_vocab)));
        }
        let d = c.n_embd;
        // h: T × D residual stream.
        let mut h = vec![0.0f32; t_n * d];
        for (t, &tok) in tokens.iter().enumerate() {
            ops::embedding_row(&self.store, &self.token_embd, tok as usize, &mut h[t * d..(t + 1) * d]);
        }
        let mut x = vec![0.0f32; t_n * d];
        let mut m = vec![0.0f32; t_n * d];
        for (il, layer) in self.layers.iter().enumerate() {
            x.copy_from_slice(&h);
            rmsnorm(&mut x, &layer.attn_norm, c.eps);
            match (&layer.mixer, &mut state.layers[il]) {
                (Mixer::DeltaNet(w), LayerState::DeltaNet { conv, ssm }) => {
                    self.deltanet(w, &x, &mut m, conv, ssm, prec, s)
                }
                (Mixer::Attention(w), LayerState::Attention { k, v }) => {
                    self.attention(w, &x, &mut m, k, v, state.n_past, prec, s)
                }
                _ => unreachable!("state layout matches the model"),
            }
            for (hi, mi) in h.iter_mut().zip(&m) {
                *hi += mi;
            }
            x.copy_from_slice(&h);
            rmsnorm(&mut x, &layer.post_norm, c.eps);
            self.ffn(layer, &x, &mut m, prec, s);
            for (hi, mi) in h.iter_mut().zip(&m) {
                *hi += mi;
            }
        }
        state.n_past += t_n;

        // Only the positions whose logits are wanted go through the final norm and LM head.
        let rows: &mut [f32] = match want {
            Logits::None => return Ok(Vec::new()),
            Logits::Last => &mut h[(t_n - 1) * d..],
            Logits::All | Logits::Hidden => &mut h[..],
        };
        rmsnorm(rows, &self.output_norm, c.eps);
        if want == Logits::Hidden {
            return Ok(rows.to_vec());
        }
        let mut logits = vec![0.0f32; rows.len() / d * c.n_vocab];
        matmul(&self.store, &self.output, rows, &mut logits, prec, &mut s.mm);
        Ok(logits)
    }

    /// SwiGLU: out = (silu(x·gate) ⊙ (x·up)) · down.   x, out: T × D.
    fn ffn(&self, l: &Layer, x: &[f32], out: &mut [f32], prec: Precision, s: &mut Scratch) {
        let t_n = x.len() / self.config.n_embd;
        let f = self.config.n_ff;
        let mut g = vec![0.0f32; t_n * f]; // T × F
        let mut u = vec![0.0f32; t_n * f]; // T × F
        matmul(&self.store, &l.ffn_gate, x, &mut g, prec, &mut s.mm);
        matmul(&self.store, &l.ffn_up, x, &mut u, prec, &mut s.mm);
        for (gi, ui) in g.iter_mut().zip(&u) {
            *gi = silu(*gi) * ui;
        }
        matmul(&self.store, &l.ffn_down, &g, out, prec, &mut s.mm);
    }

    /// Gated DeltaNet over T tokens (spec §3.3, token by token for the recurrence).
    #[allow(clippy::too_many_arguments)]
    fn deltanet(
        &self,
        w: &DeltaNet,
        x: &[f32],       // T × D
        out: &mut [f32], // T × D
        conv_state: &mut [f32],
        ssm: &mut [f32],
        prec: Precision,
        s: &mut Scratch,
    ) {
        let c = &self.config;
        let t_n = x.len() / c.n_embd;
        let (hk, hv, ds, kw) = (c.n_k_heads, c.n_v_heads, c.d_state, c.conv_kernel);
        let cd = c.conv_dim();
        let key_dim = hk * ds;

        let mut qkv = vec![0.0f32; t_n * cd]; // T × conv_dim
        let mut z = vec![0.0f32; t_n * hv * ds]; // T × Hv·Ds
        let mut b = vec![0.0f32; t_n * hv]; // T × Hv
        let mut a = vec![0.0f32; t_n * hv]; // T × Hv
        matmul(&self.store, &w.qkv, x, &mut qkv, prec, &mut s.mm);
        matmul(&self.store, &w.gate, x, &mut z, prec, &mut s.mm);
        matmul(&self.store, &w.beta, x, &mut b, prec, &mut s.mm);
        matmul(&self.store, &w.alpha, x, &mut a, prec, &mut s.mm);

        // Causal depthwise conv over [conv_state (K−1 rows) ; qkv (T rows)], then SiLU.
        let mut window = Vec::with_capacity((kw - 1 + t_n) * cd); // (K−1+T) × conv_dim
        window.extend_from_slice(conv_state);
        window.extend_from_slice(&qkv);
        let mut conv_out = vec![0.0f32; t_n * cd]; // T × conv_dim
        for t in 0..t_n {
            for ch in 0..cd {
                let taps = &w.conv[ch * kw..(ch + 1) * kw];
                let mut acc = 0.0f32;
                for (k, &tap) in taps.iter().enumerate() {
                    acc += window[(t + k) * cd + ch] * tap;
                }
                conv_out[t * cd + ch] = silu(acc);
            }
        }
        conv_state.copy_from_slice(&window[t_n * cd..]);

        let q_scale = 1.0 / (ds as f32).sqrt();
        let mut o = vec![0.0f32; t_n * hv * ds]; // T × Hv·Ds
        for t in 0..t_n {
            let row = &mut conv_out[t * cd..(t + 1) * cd];
            // q, k: Hk heads of Ds, L2-normalised; q also scaled by 1/√Ds.
            for hd in row[..2 * key_dim].chunks_exact_mut(ds) {
                l2norm(hd, c.eps);
            }
            for qv in &mut row[..key_dim] {
                *qv *= q_scale;
            }
            let (qk, vs) = row.split_at(2 * key_dim);
            let (qs, ks) = qk.split_at(key_dim);
            for j in 0..hv {
                let kh = j % hk; // V heads are in tiled order (spec §2.4)
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
        rmsnorm(&mut o, &w.norm, c.eps);
        for (oi, zi) in o.iter_mut().zip(&z) {
            *oi *= silu(*zi);
        }
        matmul(&self.store, &w.out, &o, out, prec, &mut s.mm);
    }

    /// Gated full attention over T tokens at positions n_past.. (spec §3.4).
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        w: &Attention,
        x: &[f32],       // T × D
        out: &mut [f32], // T × D
        k_cache: &mut Vec<f32>,
        v_cache: &mut Vec<f32>,
        n_past: usize,
        prec: Precision,
        s: &mut Scratch,
    ) {
        let c = &self.config;
        let t_n = x.len() / c.n_embd;
        let (h, hkv, dh) = (c.n_head, c.n_head_kv, c.head_dim);
        let kv_dim = hkv * dh;
        let mut qg = vec![0.0f32; t_n * 2 * h * dh]; // T × H·[q Dh | gate Dh]
        let mut k = vec![0.0f32; t_n * kv_dim]; // T × Hkv·Dh
        let mut v = vec![0.0f32; t_n * kv_dim];
        matmul(&self.store, &w.q, x, &mut qg, prec, &mut s.mm);
        matmul(&self.store, &w.k, x, &mut k, prec, &mut s.mm);
        matmul(&self.store, &w.v, x, &mut v, prec, &mut s.mm);

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
        k_cache.extend_from_slice(&k);
        v_cache.extend_from_slice(&v);

        let group = h / hkv;
        let mut o = vec![0.0f32; t_n * h * dh]; // T × H·Dh
        let mut scores = Vec::new();
        for t in 0..t_n {
            let n_kv = n_past + t + 1; // causal: positions 0..=n_past+t
            for hi in 0..h {
                let q = &qg[(t * h + hi) * 2 * dh..][..dh];
                let kvh = hi / group; // grouped (not tiled) for attention heads
                scores.clear();
                let mut max = f32::NEG_INFINITY;
                for p in 0..n_kv {
                    let kp = &k_cache[p * kv_dim + kvh * dh..][..dh];
                    let sc = crate::quant::float::dot_f32(q, kp) * c.attn_scale;
                    max = max.max(sc);
                    scores.push(sc);
                }
                let mut sum = 0.0f32;
                for sc in scores.iter_mut() {
                    *sc = (*sc - max).exp();
                    sum += *sc;
                }
                let oh = &mut o[(t * h + hi) * dh..][..dh];
                for (p, &sc) in scores.iter().enumerate() {
                    let wgt = sc / sum;
                    let vp = &v_cache[p * kv_dim + kvh * dh..][..dh];
                    for (oi, &vi) in oh.iter_mut().zip(vp) {
                        *oi += wgt * vi;
                    }
                }
                let gate = &qg[(t * h + hi) * 2 * dh + dh..][..dh];
                for (oi, &gi) in oh.iter_mut().zip(gate) {
                    *oi *= sigmoid(gi);
                }
            }
        }
        matmul(&self.store, &w.out, &o, out, prec, &mut s.mm);
    }
}
