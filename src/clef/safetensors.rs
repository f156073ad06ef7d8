//! The head-less form of the head: `joint_head.safetensors` (+ `joint_head_config.json`) beside a
//! `qwen35` GGUF (spec §5).
//!
//! A safetensors file is `u64 LE N` + an N-byte JSON header `{name: {dtype, shape, data_offsets:
//! [begin, end]}, "__metadata__"?: {…}}` + the raw tensors (offsets relative to the end of the
//! header). Tensors are in PyTorch layout `[out, in]`, row-major — the same bytes as ggml
//! `ne = {in, out}` — so loading needs no transposes, only:
//!
//! * the name map of spec §5.2 (torch module names → the GGUF names [`super::head::Head`] reads);
//! * splitting each attention `in_proj_weight [3W, W]` / `in_proj_bias [3W]` into q, k, v — rows
//!   0..W, W..2W, 2W..3W, i.e. three views into the same bytes;
//! * the three 0-dim scalars turned into `decision.scales` as the converter does (spec §5.3):
//!   `[exp(min(prior_logit_scale, ln 100)), exp(min(joint_logit_scale, ln 100)), σ(residual_gate)]`,
//!   computed in f64 and stored as f32 after the data.
//!
//! The data section is read once, straight into one weight shard (as the GGUF loader does).

use super::head::{HeadConfig, HEAD_LAYER_NORM_EPS};
use super::json::{self, Value};
use super::DecisionError;
use crate::loader::ByteSource;
use crate::quant::GgmlType;
use crate::weights::{TensorView, WeightStore};

fn bad(msg: String) -> DecisionError {
    DecisionError::BadHead(msg)
}

/// The largest safetensors JSON header accepted (the real head's is ~20 KB).
const MAX_HEADER: u64 = 16 << 20;

/// Reads `joint_head_config.json`: `{hidden_size, width, routing_layers, layers, heads,
/// feedforward}` (other keys are ignored).
pub fn parse_config(text: &str) -> Result<HeadConfig, DecisionError> {
    let v = json::parse(text).map_err(|e| bad(format!("joint_head_config.json: {e}")))?;
    let get = |k: &str| -> Result<usize, DecisionError> {
        match v.get(k) {
            Some(Value::Number(n)) => match n.value {
                json::NumberValue::Int(i) if i > 0 => Ok(i as usize),
                _ => Err(bad(format!(
                    "joint_head_config.json: \"{k}\" must be a positive integer"
                ))),
            },
            _ => Err(bad(format!("joint_head_config.json: \"{k}\" is missing"))),
        }
    };
    let cfg = HeadConfig {
        n_embd: get("hidden_size")?,
        width: get("width")?,
        n_heads: get("heads")?,
        ffn: get("feedforward")?,
        routing_blocks: get("routing_layers")?,
        joint_blocks: get("layers")?,
        eps: HEAD_LAYER_NORM_EPS,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// One tensor of the file.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    begin: usize,
    end: usize,
}

fn dtype_type(dtype: &str) -> Option<(GgmlType, usize)> {
    match dtype {
        "F32" => Some((GgmlType::F32, 4)),
        "F16" => Some((GgmlType::F16, 2)),
        "BF16" => Some((GgmlType::BF16, 2)),
        _ => None,
    }
}

/// Parses the JSON header.
fn parse_header(text: &str, data_len: u64) -> Result<Vec<Entry>, DecisionError> {
    let v = json::parse(text).map_err(|e| bad(format!("safetensors header: {e}")))?;
    let Value::Object(members) = v else {
        return Err(bad("safetensors header is not an object".into()));
    };
    let mut out = Vec::new();
    for (name, t) in members {
        if name == "__metadata__" {
            continue;
        }
        let fail = |m: &str| bad(format!("safetensors tensor {name}: {m}"));
        let dtype = t
            .get("dtype")
            .and_then(Value::as_str)
            .ok_or_else(|| fail("no dtype"))?
            .to_string();
        let ints = |k: &str| -> Result<Vec<usize>, DecisionError> {
            match t.get(k) {
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| match x {
                        Value::Number(json::Number {
                            value: json::NumberValue::Int(i),
                            ..
                        }) if *i >= 0 => Ok(*i as usize),
                        _ => Err(fail(&format!("\"{k}\" must hold non-negative integers"))),
                    })
                    .collect(),
                _ => Err(fail(&format!("no \"{k}\""))),
            }
        };
        let shape = ints("shape")?;
        let offs = ints("data_offsets")?;
        if offs.len() != 2 || offs[0] > offs[1] || offs[1] as u64 > data_len {
            return Err(fail("data_offsets are outside the file"));
        }
        let elem = match dtype.as_str() {
            "F64" => 8,
            d => {
                dtype_type(d)
                    .ok_or_else(|| fail(&format!("dtype {d} is not supported (F32, F16, BF16)")))?
                    .1
            }
        };
        let n: usize = shape.iter().product();
        if n * elem != offs[1] - offs[0] {
            return Err(fail("data size does not match dtype and shape"));
        }
        out.push(Entry {
            name,
            dtype,
            shape,
            begin: offs[0],
            end: offs[1],
        });
    }
    Ok(out)
}

/// The GGUF name of a torch tensor name, or `None` for the three scalars and `in_proj_*`
/// (handled separately). `routing` is R (joint block j is `dec.blk.{R + j}`).
fn gguf_name(torch: &str, routing: usize) -> Option<String> {
    let top = [
        ("hidden_norm.", "decision.hidden_norm."),
        ("memory_projection.", "decision.proj_memory."),
        ("question_projection.", "decision.proj_question."),
        ("option_question_projection.", "decision.proj_option_question."),
        ("global_projection.", "decision.proj_global."),
        ("option_context_projection.", "decision.proj_option_context."),
        ("option_lexical_projection.", "decision.proj_option_lexical."),
        ("type_embedding.", "token_types."),
        ("option_summary_norm.", "decision.option_summary_norm."),
        ("field_norm.", "decision.field_norm."),
        ("option_norm.", "decision.option_norm."),
        ("residual_scorer.0.", "decision.scorer."),
        ("residual_scorer.3.", "decision.scorer_out."),
    ];
    for (from, to) in top {
        if let Some(rest) = torch.strip_prefix(from) {
            return Some(format!("{to}{rest}"));
        }
    }
    let block = |prefix: &str, offset: usize, map: &[(&str, &str)]| -> Option<String> {
        let rest = torch.strip_prefix(prefix)?;
        let (i, rest) = rest.split_once('.')?;
        let i: usize = i.parse().ok()?;
        map.iter().find_map(|(from, to)| {
            rest.strip_prefix(from)
                .map(|r| format!("dec.blk.{}.{to}{r}", i + offset))
        })
    };
    block(
        "evidence_layers.",
        0,
        &[
            ("query_norm.", "cross_attn_norm."),
            ("memory_norm.", "cross_attn_norm_kv."),
            ("attention.out_proj.", "cross_attn_o."),
            ("feedforward_norm.", "ffn_norm."),
            ("feedforward.0.", "ffn_up."),
            ("feedforward.3.", "ffn_down."),
        ],
    )
    .or_else(|| {
        block(
            "layers.",
            routing,
            &[
                ("norm1.", "attn_norm."),
                ("norm2.", "cross_attn_norm."),
                ("norm3.", "ffn_norm."),
                ("self_attn.out_proj.", "attn_o."),
                ("multihead_attn.out_proj.", "cross_attn_o."),
                ("linear1.", "ffn_up."),
                ("linear2.", "ffn_down."),
            ],
        )
    })
}

/// The GGUF prefix (`dec.blk.{i}.attn` / `cross_attn`) and suffix (`weight` / `bias`) of an
/// `in_proj_{weight,bias}` tensor.
fn in_proj_target(torch: &str, routing: usize) -> Option<(String, &'static str)> {
    let (prefix, offset, rest) = if let Some(r) = torch.strip_prefix("evidence_layers.") {
        ("evidence", 0, r)
    } else {
        ("layers", routing, torch.strip_prefix("layers.")?)
    };
    let (i, rest) = rest.split_once('.')?;
    let i: usize = i.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let attn = match (prefix, module) {
        ("evidence", "attention") => "cross_attn",
        ("layers", "self_attn") => "attn",
        ("layers", "multihead_attn") => "cross_attn",
        _ => return None,
    };
    let suffix = match kind {
        "in_proj_weight" => "weight",
        "in_proj_bias" => "bias",
        _ => return None,
    };
    Some((format!("dec.blk.{}.{attn}", i + offset), suffix))
}

/// A head file being loaded: its weight store is allocated, and the file's data section
/// (`data_offset..data_offset + data_len`) goes to the start of its one shard (straight from
/// the source: a file, HTTP Range bodies, …); [`HeadFile::finish`] then completes it.
pub struct HeadFile {
    pub store: WeightStore,
    /// Where the data section starts in the file (8 + header length).
    pub data_offset: u64,
    pub data_len: u64,
    /// prior_logit_scale, joint_logit_scale, residual_gate.
    scalars: [Entry; 3],
    scales_at: usize,
}

/// The bytes of a safetensors file before its data section, from its first 8 (`None`: too short
/// or not a plausible header length for a `size`-byte file).
pub fn prefix_len(first8: &[u8], size: u64) -> Result<u64, DecisionError> {
    if size < 8 || first8.len() < 8 {
        return Err(bad("joint_head.safetensors is too short".into()));
    }
    let n = u64::from_le_bytes(first8[..8].try_into().expect("8 bytes"));
    if n > MAX_HEADER || 8 + n > size {
        return Err(bad(format!(
            "joint_head.safetensors: header length {n} does not fit the {size}-byte file"
        )));
    }
    Ok(8 + n)
}

/// Parses the header (`prefix`: the file's first [`prefix_len`] bytes) of a `size`-byte
/// `joint_head.safetensors` and allocates the head's store with GGUF names.
pub fn prepare(prefix: &[u8], size: u64, config: &HeadConfig) -> Result<HeadFile, DecisionError> {
    let data_offset = prefix_len(prefix, size)?;
    if (prefix.len() as u64) < data_offset {
        return Err(bad("joint_head.safetensors: the header is incomplete".into()));
    }
    let head = &prefix[8..data_offset as usize];
    let text = std::str::from_utf8(head).map_err(|_| bad("safetensors header is not UTF-8".into()))?;
    let data_len = size - data_offset;
    let entries = parse_header(text, data_len)?;
    let strip = |s: &str| s.strip_prefix("joint_head.").unwrap_or(s).to_string();

    let w = config.width;
    let mut views = Vec::new();
    let mut scalars: [Option<Entry>; 3] = [None, None, None];
    const SCALARS: [&str; 3] = ["prior_logit_scale", "joint_logit_scale", "residual_gate"];
    for e in &entries {
        let name = strip(&e.name);
        if let Some(i) = SCALARS.iter().position(|&s| s == name) {
            if e.shape.iter().product::<usize>() != 1 {
                return Err(bad(format!("safetensors {name} must be a scalar")));
            }
            scalars[i] = Some(e.clone());
            continue;
        }
        let (ty, elem) = dtype_type(&e.dtype)
            .ok_or_else(|| bad(format!("safetensors {name}: dtype {} is not supported", e.dtype)))?;
        let dims: Vec<usize> = e.shape.iter().rev().copied().collect(); // torch [out, in] → ggml {in, out}
        if let Some((prefix, suffix)) = in_proj_target(&name, config.routing_blocks) {
            let want: &[usize] = if suffix == "weight" { &[w, 3 * w] } else { &[3 * w] };
            if dims != want {
                return Err(bad(format!(
                    "safetensors {name} has shape {:?}, expected {:?}",
                    e.shape,
                    want.iter().rev().collect::<Vec<_>>()
                )));
            }
            let part = e.shape.iter().skip(1).product::<usize>() * w * elem; // W rows (or W biases)
            for (k, x) in ["q", "k", "v"].iter().enumerate() {
                views.push(TensorView {
                    name: format!("{prefix}_{x}.{suffix}"),
                    ty,
                    dims: if suffix == "weight" { vec![w, w] } else { vec![w] },
                    shard: 0,
                    offset: e.begin + k * part,
                    size: part,
                });
            }
            continue;
        }
        let gname = gguf_name(&name, config.routing_blocks).ok_or_else(|| {
            bad(format!(
                "safetensors tensor {name} is not part of the joint schema head"
            ))
        })?;
        views.push(TensorView {
            name: gname,
            ty,
            dims,
            shard: 0,
            offset: e.begin,
            size: e.end - e.begin,
        });
    }
    let mut found = Vec::with_capacity(3);
    for (i, s) in scalars.into_iter().enumerate() {
        found.push(s.ok_or_else(|| bad(format!("joint_head.safetensors has no {}", SCALARS[i])))?);
    }
    let scales_at = (data_len as usize).next_multiple_of(8);
    views.push(TensorView {
        name: "decision.scales".into(),
        ty: GgmlType::F32,
        dims: vec![3],
        shard: 0,
        offset: scales_at,
        size: 12,
    });

    let store = WeightStore::single_shard(scales_at as u64 + 12, views).map_err(|e| bad(e.to_string()))?;
    Ok(HeadFile {
        store,
        data_offset,
        data_len,
        scalars: found.try_into().unwrap_or_else(|_| unreachable!("three scalars")),
        scales_at,
    })
}

impl HeadFile {
    /// The data section is in place: writes `decision.scales` and returns the filled store.
    pub fn finish(mut self) -> WeightStore {
        let shard = self.store.shard_mut(0);
        let value = |e: &Entry| -> f64 {
            let b = &shard[e.begin..e.end];
            match e.dtype.as_str() {
                "F64" => f64::from_le_bytes(b[..8].try_into().unwrap()),
                "F32" => f32::from_le_bytes(b[..4].try_into().unwrap()) as f64,
                "F16" => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
                _ => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64,
            }
        };
        let raw: Vec<f64> = self.scalars.iter().map(value).collect();
        let scales = scales_from_raw(raw[0], raw[1], raw[2]);
        let at = self.scales_at;
        for (i, s) in scales.iter().enumerate() {
            shard[at + 4 * i..at + 4 * i + 4].copy_from_slice(&s.to_le_bytes());
        }
        self.store.mark_filled(0);
        self.store
    }
}

/// Loads `joint_head.safetensors` into its own weight store with GGUF names.
pub fn load(src: &mut dyn ByteSource, config: &HeadConfig) -> Result<WeightStore, DecisionError> {
    let io = |e: String| bad(format!("joint_head.safetensors: {e}"));
    let size = src.size().map_err(io)?;
    let mut first8 = [0u8; 8];
    if size >= 8 {
        src.read_at(0, &mut first8).map_err(io)?;
    }
    let mut prefix = vec![0u8; prefix_len(&first8, size)? as usize];
    src.read_at(0, &mut prefix).map_err(io)?;
    let mut file = prepare(&prefix, size, config)?;
    let (at, len) = (file.data_offset, file.data_len as usize);
    const CHUNK: usize = 16 << 20;
    for (i, chunk) in file.store.shard_mut(0)[..len].chunks_mut(CHUNK).enumerate() {
        src.read_at(at + (i * CHUNK) as u64, chunk).map_err(io)?;
    }
    Ok(file.finish())
}

/// The converter's transform of the three raw scalars (spec §5.3), in f64 then f32.
pub fn scales_from_raw(prior: f64, joint: f64, gate: f64) -> [f32; 3] {
    let cap = 100f64.ln();
    [
        prior.min(cap).exp() as f32,
        joint.min(cap).exp() as f32,
        (1.0 / (1.0 + (-gate).exp())) as f32,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn name_map() {
        assert_eq!(
            gguf_name("memory_projection.weight", 2).as_deref(),
            Some("decision.proj_memory.weight")
        );
        assert_eq!(
            gguf_name("residual_scorer.3.bias", 2).as_deref(),
            Some("decision.scorer_out.bias")
        );
        assert_eq!(
            gguf_name("type_embedding.weight", 2).as_deref(),
            Some("token_types.weight")
        );
        assert_eq!(
            gguf_name("evidence_layers.1.memory_norm.weight", 2).as_deref(),
            Some("dec.blk.1.cross_attn_norm_kv.weight")
        );
        assert_eq!(
            gguf_name("evidence_layers.0.feedforward.3.bias", 2).as_deref(),
            Some("dec.blk.0.ffn_down.bias")
        );
        assert_eq!(
            gguf_name("layers.0.norm2.bias", 2).as_deref(),
            Some("dec.blk.2.cross_attn_norm.bias")
        );
        assert_eq!(
            gguf_name("layers.3.self_attn.out_proj.weight", 2).as_deref(),
            Some("dec.blk.5.attn_o.weight")
        );
        assert_eq!(
            gguf_name("layers.1.linear2.weight", 2).as_deref(),
            Some("dec.blk.3.ffn_down.weight")
        );
        assert_eq!(gguf_name("something.else", 2), None);
        assert_eq!(
            in_proj_target("evidence_layers.1.attention.in_proj_weight", 2),
            Some(("dec.blk.1.cross_attn".into(), "weight"))
        );
        assert_eq!(
            in_proj_target("layers.0.self_attn.in_proj_bias", 2),
            Some(("dec.blk.2.attn".into(), "bias"))
        );
        assert_eq!(
            in_proj_target("layers.3.multihead_attn.in_proj_weight", 2),
            Some(("dec.blk.5.cross_attn".into(), "weight"))
        );
    }

    #[test]
    #[allow(clippy::excessive_precision)] // the fixtures' values, digit for digit
    fn scales_transform() {
        // Fixture A's raw scalars and stored scales (make_clef_gguf.py meta).
        // Fixtures A and B (make_clef_gguf.py's meta.json): raw scalars → the stored f32 scales, exactly.
        assert_eq!(
            scales_from_raw(0.7539382481190466, 1.5729047503343703, -0.30674549280405244),
            [2.1253538131713867, 4.8206305503845215, 0.42390933632850647]
        );
        assert_eq!(
            scales_from_raw(1.159390049544218, 2.0607320933650213, 0.3717478270819502),
            [3.18798828125, 7.851716041564941, 0.591881275177002]
        );
        assert_eq!(scales_from_raw(10.0, 10.0, 0.0), [100.0, 100.0, 0.5]);
    }
}
