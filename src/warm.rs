//! Warming the engine's code before the first request: a miniature of the model, run in this thread.
//!
//! Browsers compile a wasm function when it is first called, with a baseline compiler (V8's
//! Liftoff), and compile it again with the optimizing one in the background only once it has run
//! for a while (V8's dynamic tiering; SpiderMonkey's lazy tiering likewise). A freshly loaded
//! engine's first pass therefore ran baseline code — its first stages 3–14× slower than later —
//! and the first request after a load came 0.2–0.4 s late (BENCHMARKS.md, "The engine's code
//! warmed before the first request").
//!
//! The compiled code belongs to the module, and every instance of it shares it: the engine worker
//! and its shard workers instantiate the one compiled module (`www/src/worker.ts`). So the engine
//! worker warms the code for all of them with a miniature of the model being loaded — the same
//! architecture, each layer kind with the tensor types of the file's layers of that kind, the same
//! stored forms, split across shards in this thread the way the workers split the real one
//! ([`Cluster`]). A load builds it before allocating the model (a split load while its shard
//! workers start); once the model is ready, the worker runs it through the passes a request makes —
//! a short prompt (the four-row tiles), single tokens (the decode kernels) and a longer prompt (the
//! prompt GEMM) — one at a time while no request is queued (`www/src/load/warm.ts`), and the
//! optimizing compiler works in the background before the first request comes.
//!
//! The miniature's numbers mean nothing (its weights are one repeated byte). Its matrices are
//! below every size the kernel trials time (`tune.rs`), so warming decides no kernel choice.

use crate::cluster::Cluster;
use crate::gguf::{self, Header, Value};
use crate::model::{Logits, Model, ModelError, Role, Scratch, State};
use crate::ops::Precision;
use crate::quant::GgmlType;

/// The miniature's sizes. Head dims, the conv kernel, RoPE and the norms' epsilon stay the file's;
/// every row length is a multiple of 256 (K-quant blocks), also split in two.
const EMBD: u64 = 256;
const FF: u64 = 1024;
const VOCAB: u64 = 2048;
/// Blocks: three DeltaNet layers, then one attention layer, twice (`full_attention_interval` 4).
const LAYERS: usize = 8;
const INTERVAL: usize = 4;
const N_CTX: usize = 64;
/// Shards of the miniature at most: a split's code paths are the same for 2 shards as for 16.
const MAX_SHARDS: usize = 2;
/// Every weight byte (f16 0x3C3C ≈ 1.06, f32 0x3C3C3C3C ≈ 0.0115: finite, normal, any quant
/// code valid); the F32 vectors (norms, gates' biases, conv) are 1.0.
const FILL: u8 = 0x3C;

/// The passes of a warm-up, `(position, tokens)`: a short prompt (the four-row tiles), single
/// tokens after it (the decode kernels), and a longer prompt from the start again (the prompt
/// GEMM; below the trials' GEMM size, `tune.rs`) — a new sequence over the old state: the numbers
/// do not matter.
const SHORT_PROMPT: usize = 3;
const DECODED: usize = 3;
pub const LONG_PROMPT: usize = 24;
pub const PASSES: usize = DECODED + 2;

fn pass(i: usize) -> (usize, std::ops::Range<usize>) {
    match i {
        0 => (0, 0..SHORT_PROMPT),
        i if i <= DECODED => (SHORT_PROMPT + i - 1, SHORT_PROMPT + i - 1..SHORT_PROMPT + i),
        _ => (0, 0..LONG_PROMPT),
    }
}

/// The miniature, built, and the passes it has run. [`Warm::step`] runs one pass at a time, so
/// that a caller can let other work in between (the browser's worker answers its messages).
pub struct Warm {
    runner: Runner,
    tokens: Vec<u32>,
    done: usize,
}

#[allow(clippy::large_enum_variant)] // one, for a moment, per load
enum Runner {
    Whole { model: Model, state: State, scratch: Scratch },
    Split { coordinator: Model, cluster: Cluster },
}

impl Warm {
    /// Builds the miniature of `h`'s model, split into `shards.min(2)` (1: whole), with `expand`
    /// and `band_pct` as the real load's.
    pub fn new(h: &Header, shards: usize, expand: bool, band_pct: usize) -> Result<Warm, ModelError> {
        let n = shards.clamp(1, MAX_SHARDS);
        let file = miniature(h, n)?;
        let runner = if n == 1 {
            let model = Model::from_bytes_forms(&file, Role::Whole, Some(expand))?;
            let state = model.try_new_state(N_CTX)?;
            Runner::Whole { model, state, scratch: Scratch::default() }
        } else {
            let (coordinator, cluster) = Cluster::with_forms(&file, n, N_CTX, band_pct, Some(expand))?;
            Runner::Split { coordinator, cluster }
        };
        let tokens = (0..LONG_PROMPT as u32).map(|i| 1 + 37 * i % (VOCAB as u32 - 1)).collect();
        Ok(Warm { runner, tokens, done: 0 })
    }

    /// Runs the next pass; false once every pass has run.
    pub fn step(&mut self) -> Result<bool, ModelError> {
        if self.done == PASSES {
            return Ok(false);
        }
        let (pos, range) = pass(self.done);
        let t = &self.tokens[range];
        match &mut self.runner {
            Runner::Whole { model, state, scratch } => {
                state.n_past = pos;
                model.forward(state, t, Logits::Last, Precision::Fast, scratch)?;
            }
            Runner::Split { coordinator, cluster } => {
                let mut n_past = pos;
                cluster.forward(coordinator, &mut n_past, N_CTX, t, Logits::Last)?;
            }
        }
        self.done += 1;
        Ok(self.done < PASSES)
    }

    /// Passes run so far.
    pub fn passes(&self) -> usize {
        self.done
    }
}

/// Builds the miniature and runs every pass of it ([`Warm`]); returns the passes run.
pub fn warm(h: &Header, shards: usize, expand: bool, band_pct: usize) -> Result<usize, ModelError> {
    let mut w = Warm::new(h, shards, expand, band_pct)?;
    while w.step()? {}
    Ok(w.passes())
}

/// A GGUF of the miniature of `h`'s model for `shards` shards: `h`'s metadata (less the
/// tokenizer's) with small sizes, and per layer kind the tensor types of `h`'s layers of that kind
/// — the miniature's layers of a kind take, in turn, each different set of types the file's
/// layers of that kind have (e.g. Q4_K_M's more-bits layers and its others).
pub fn miniature(h: &Header, shards: usize) -> Result<Vec<u8>, ModelError> {
    let cfg = crate::model::Config::from_header(h)?;
    let a = cfg.arch.clone();
    let k = |s: &str| format!("{a}.{s}");
    let s = shards.max(1) as u64;
    let (ds, dh, kc) = (cfg.d_state as u64, cfg.head_dim as u64, cfg.conv_kernel as u64);
    // Heads per shard: the file's ratios (value to key heads; query to KV heads, capped at 2: the
    // grouped path is what matters, not its width), as few as make the rows that are split by
    // input columns (ssm_out's, attn_output's) multiples of 256 in every shard.
    let per_k = (cfg.n_v_heads / cfg.n_k_heads.max(1)).max(1) as u64;
    let per_kv = (cfg.n_head / cfg.n_head_kv.max(1)).clamp(1, 2) as u64;
    let k_heads = (1..=256).find(|k| k * per_k * ds % 256 == 0).unwrap_or(1);
    let kv_heads = (1..=256).find(|k| k * per_kv * dh % 256 == 0).unwrap_or(1);
    let (n_k, n_kv) = (s * k_heads, s * kv_heads);
    let (n_v, n_head) = (n_k * per_k, n_kv * per_kv);
    let conv = (2 * n_k + n_v) * ds;

    let set: [(&str, u64); 10] = [
        ("block_count", LAYERS as u64),
        ("embedding_length", EMBD),
        ("feed_forward_length", FF),
        ("attention.head_count", n_head),
        ("attention.head_count_kv", n_kv),
        ("ssm.group_count", n_k),
        ("ssm.time_step_rank", n_v),
        ("ssm.inner_size", n_v * ds),
        ("vocab_size", VOCAB),
        ("context_length", N_CTX as u64),
    ];
    let dropped = [k("attention.recurrent_layers"), k("nextn_predict_layers"), k("full_attention_interval")];
    let mut metadata: Vec<(String, Value)> = h
        .metadata
        .iter()
        .filter(|(key, v)| {
            !key.starts_with("tokenizer.")
                && key != "general.alignment"
                && !dropped.contains(key)
                && !set.iter().any(|(s, _)| k(s) == **key)
                && !matches!(v, Value::Array(gguf::Array::Elided { .. }))
        })
        .cloned()
        .collect();
    metadata.extend(set.iter().map(|(s, v)| (k(s), Value::U32(*v as u32))));
    metadata.push((k("full_attention_interval"), Value::U32(INTERVAL as u32)));

    // Each miniature layer's source layer in the file: per kind, the file's layers with a set of
    // tensor types not seen before, in turn.
    let signature = |il: usize| -> Vec<(String, GgmlType)> {
        let prefix = format!("blk.{il}.");
        let mut v: Vec<(String, GgmlType)> =
            h.tensors.iter().filter_map(|t| t.name.strip_prefix(&prefix).map(|s| (s.to_string(), t.ty))).collect();
        v.sort();
        v
    };
    let mut kinds: [Vec<usize>; 2] = [Vec::new(), Vec::new()]; // [attention, DeltaNet] source layers
    let mut seen: Vec<Vec<(String, GgmlType)>> = Vec::new();
    for il in 0..cfg.n_layer {
        let sig = signature(il);
        if !seen.contains(&sig) {
            kinds[cfg.recurrent[il] as usize].push(il);
            seen.push(sig);
        }
    }
    let source = |j: usize| -> Result<usize, ModelError> {
        let recurrent = (j + 1) % INTERVAL != 0;
        let list = &kinds[recurrent as usize];
        let nth = (0..j).filter(|&i| ((i + 1) % INTERVAL != 0) == recurrent).count();
        list.get(nth % list.len().max(1)).copied().ok_or_else(|| {
            ModelError::Config(format!("no {} layer to copy", if recurrent { "DeltaNet" } else { "attention" }))
        })
    };

    // Tensors: (name, dims, type), the type the file's.
    let mut tensors: Vec<(String, Vec<u64>, GgmlType)> = Vec::new();
    let mut add = |name: String, src: &str, dims: Vec<u64>| -> Result<(), ModelError> {
        let t = h.tensor(src).ok_or_else(|| ModelError::Tensor(format!("missing tensor {src}")))?;
        tensors.push((name, dims, t.ty));
        Ok(())
    };
    add("token_embd.weight".into(), "token_embd.weight", vec![EMBD, VOCAB])?;
    add("output_norm.weight".into(), "output_norm.weight", vec![EMBD])?;
    if h.tensor("output.weight").is_some() {
        add("output.weight".into(), "output.weight", vec![EMBD, VOCAB])?;
    }
    for j in 0..LAYERS {
        let il = source(j)?;
        let recurrent = (j + 1) % INTERVAL != 0;
        let mixer: &[(&str, Vec<u64>)] = if recurrent {
            &[
                ("attn_qkv.weight", vec![EMBD, conv]),
                ("attn_gate.weight", vec![EMBD, n_v * ds]),
                ("ssm_beta.weight", vec![EMBD, n_v]),
                ("ssm_alpha.weight", vec![EMBD, n_v]),
                ("ssm_dt.bias", vec![n_v]),
                ("ssm_a", vec![n_v]),
                ("ssm_conv1d.weight", vec![kc, conv]),
                ("ssm_norm.weight", vec![ds]),
                ("ssm_out.weight", vec![n_v * ds, EMBD]),
            ]
        } else {
            &[
                ("attn_q.weight", vec![EMBD, 2 * n_head * dh]),
                ("attn_k.weight", vec![EMBD, n_kv * dh]),
                ("attn_v.weight", vec![EMBD, n_kv * dh]),
                ("attn_q_norm.weight", vec![dh]),
                ("attn_k_norm.weight", vec![dh]),
                ("attn_output.weight", vec![n_head * dh, EMBD]),
            ]
        };
        let common: [(&str, Vec<u64>); 5] = [
            ("attn_norm.weight", vec![EMBD]),
            ("post_attention_norm.weight", vec![EMBD]),
            ("ffn_gate.weight", vec![EMBD, FF]),
            ("ffn_up.weight", vec![EMBD, FF]),
            ("ffn_down.weight", vec![FF, EMBD]),
        ];
        for (suffix, dims) in mixer.iter().chain(common.iter()) {
            add(format!("blk.{j}.{suffix}"), &format!("blk.{il}.{suffix}"), dims.clone())?;
        }
    }
    Ok(gguf::write(&metadata, &tensors, |i, bytes| match tensors[i].2 {
        GgmlType::F32 => bytes.chunks_exact_mut(4).for_each(|w| w.copy_from_slice(&1f32.to_le_bytes())),
        _ => bytes.fill(FILL),
    }))
}
