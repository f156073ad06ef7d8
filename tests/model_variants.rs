//! Variants of the A-F32 fixture rewritten in memory, for rules the shipped fixtures don't cover:
//! * tied output: without `output.weight` the LM head is `token_embd.weight`, also when split
//!   across shards (each holds its vocabulary rows of it as its LM-head slice);
//! * MTP block: `block_count = n + 1` with `nextn_predict_layers = 1` runs only the first n blocks.

#![cfg(not(target_arch = "wasm32"))]

mod gguf_corpus;

use clef_web::cluster::Cluster;
use clef_web::gguf::{parse_header, Array, Header, Value};
use clef_web::model::{Logits, Model, Scratch};
use clef_web::ops::Precision;
use gguf_corpus::GgufBuilder;
use std::path::Path;

fn a_f32() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny/A-F32.gguf")).unwrap()
}

/// Rewrites a GGUF: metadata through `meta`, tensors as (new name, source tensor name).
fn rewrite(file: &[u8], meta: impl Fn(&str, &Value) -> Option<Value>, extra: &[(&str, Value)], tensors: &[(String, String)]) -> Vec<u8> {
    let h = parse_header(file, Some(file.len() as u64)).unwrap();
    let mut b = GgufBuilder::new();
    for (k, v) in &h.metadata {
        if let Some(v) = meta(k, v) {
            b = b.kv(k, v);
        }
    }
    for (k, v) in extra {
        b = b.kv(k, v.clone());
    }
    for (name, src) in tensors {
        let t = h.tensor(src).unwrap();
        b = b.tensor(name, &t.dims, t.ty);
    }
    let mut out = b.build_header();
    let data_start = (out.len() as u64).next_multiple_of(b.alignment) as usize;
    out.resize(data_start, 0);
    for ((_, src), spec) in tensors.iter().zip(&b.tensors) {
        let t = h.tensor(src).unwrap();
        let r = h.tensor_range(t);
        out.resize(data_start + spec.offset as usize, 0);
        out.extend_from_slice(&file[r.start as usize..r.end as usize]);
    }
    out
}

fn names(h: &Header) -> Vec<(String, String)> {
    h.tensors.iter().map(|t| (t.name.clone(), t.name.clone())).collect()
}

fn last_logits(file: &[u8]) -> Vec<f32> {
    let m = Model::from_bytes(file).unwrap();
    let mut st = m.new_state(16);
    m.forward(&mut st, &[8001, 846, 198, 3710, 369], Logits::Last, Precision::Exact, &mut Scratch::default()).unwrap()
}

#[test]
fn tied_output_uses_the_token_embedding() {
    let file = a_f32();
    let h = parse_header(&file, Some(file.len() as u64)).unwrap();
    // Untied, with output.weight's data replaced by token_embd's …
    let same: Vec<(String, String)> = names(&h)
        .into_iter()
        .map(|(n, s)| if n == "output.weight" { (n, "token_embd.weight".to_string()) } else { (n, s) })
        .collect();
    let untied = rewrite(&file, |_, v| Some(v.clone()), &[], &same);
    // … equals the tied model (no output.weight at all).
    let without: Vec<(String, String)> = names(&h).into_iter().filter(|(n, _)| n != "output.weight").collect();
    let tied = rewrite(&file, |_, v| Some(v.clone()), &[], &without);
    let m = Model::from_bytes(&tied).unwrap();
    assert!(m.config.tied_output);
    assert_eq!(last_logits(&untied), last_logits(&tied));
    assert_ne!(last_logits(&file), last_logits(&tied), "the head really changed");
}

/// The tied model through 2 and 3 shards: each shard's LM-head slice is its vocabulary rows of
/// `token_embd.weight` (the coordinator embeds from the whole table). Logits as the whole model's
/// up to f32 summation order (the bound of tests/fixtures.rs).
#[test]
fn tied_output_split_across_shards() {
    let file = a_f32();
    let h = parse_header(&file, Some(file.len() as u64)).unwrap();
    let without: Vec<(String, String)> = names(&h).into_iter().filter(|(n, _)| n != "output.weight").collect();
    let tied = rewrite(&file, |_, v| Some(v.clone()), &[], &without);
    let want = last_logits(&tied);
    let (embd_rows, d) = {
        let t = h.tensor("token_embd.weight").unwrap();
        (t.dims[1] as usize, t.dims[0] as usize)
    };
    for n in [2, 3] {
        let (m, mut c) = Cluster::from_bytes(&tied, n, 16).unwrap();
        c.set_precision(Precision::Exact);
        assert_eq!(m.store.find("token_embd.weight").unwrap().dims[1], embd_rows, "the coordinator's table");
        // Each shard holds its rows (a band's twice over), and computes each row once when even.
        for s in &c.shards {
            assert_eq!(s.model.store.find("token_embd.weight").unwrap().dims[1], s.model.vocab_range().unwrap().len());
        }
        let even: usize = c.shards.iter().map(|s| s.model.vocab_even().unwrap().len()).sum();
        assert_eq!(even, embd_rows, "{n} shards compute every row once");
        assert!(c.shards.iter().all(|s| s.model.store.find("token_embd.weight").unwrap().dims[0] == d));
        let mut n_past = 0;
        let got = c.forward(&m, &mut n_past, 16, &[8001, 846, 198, 3710, 369], Logits::Last).unwrap();
        let num: f64 = got.iter().zip(&want).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let den: f64 = want.iter().map(|y| (*y as f64).powi(2)).sum();
        let rel_l2 = (num / den).sqrt();
        assert!(rel_l2 < 1e-5, "{n} shards: rel L2 {rel_l2:e}");
    }
}

#[test]
fn mtp_block_is_skipped() {
    let file = a_f32();
    let h = parse_header(&file, Some(file.len() as u64)).unwrap();
    let mut tensors = names(&h);
    // An extra trailing block (a copy of the attention block 3) plus the nextn tensors.
    for t in h.tensors.iter().filter(|t| t.name.starts_with("blk.3.")) {
        tensors.push((t.name.replacen("blk.3.", "blk.4.", 1), t.name.clone()));
    }
    tensors.push(("blk.4.nextn.eh_proj.weight".into(), "blk.3.attn_output.weight".into()));
    let mtp = rewrite(
        &file,
        |k, v| match k {
            "qwen35.block_count" => Some(Value::U32(5)),
            "qwen35.attention.recurrent_layers" => Some(Value::Array(Array::Bool(vec![true, true, true, false, false]))),
            _ => Some(v.clone()),
        },
        &[("qwen35.nextn_predict_layers", Value::U32(1))],
        &tensors,
    );
    let m = Model::from_bytes(&mtp).unwrap();
    assert_eq!(m.config.n_layer, 4);
    assert_eq!(last_logits(&mtp), last_logits(&file));
}
