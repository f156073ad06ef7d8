//! Tensors stored in another form than the file's (`weights.rs` `Relocation`, `kquants::forms`:
//! IQ2_S / IQ2_XS → IQ2_SX, IQ3_S → IQ3_SX, Q3_K → Q3_KX, Q6_K → Q6_KX): the IQ2, IQ3_S and K-quant
//! fixtures loaded whole and split across 2 and 3 shards hold those matrices in their forms (in
//! more memory, Q6_KX in the same) and give the same logits as with the expansion switched off — bit
//! for bit natively, where both forms run their scalar references (which compute the same
//! integers and the same f32 products, `tests/kernels.rs`).
//!
//! Its own test binary: the switch (`forms::set_enabled`) is process-wide.

#![cfg(not(target_arch = "wasm32"))]

use clef_web::cluster::Cluster;
use clef_web::gguf::parse_header;
use clef_web::model::{Logits, Model, Role, Scratch};
use clef_web::ops::Precision;
use clef_web::quant::gemm8::{set_profile, Profile};
use clef_web::quant::kquants::forms;
use clef_web::quant::GgmlType;
use std::path::Path;

const TOKENS: [u32; 5] = [8001, 846, 198, 3710, 369];

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny").join(name)).unwrap()
}

/// Logits of the whole model and through 2 and 3 shards, and how many tensors each held in a
/// load-time form, and the weight bytes of every part.
fn run(file: &[u8]) -> (Vec<Vec<f32>>, usize, Vec<u64>) {
    let m = Model::from_bytes(file).unwrap();
    let mut st = m.new_state(16);
    let mut out = vec![m.forward(&mut st, &TOKENS, Logits::Last, Precision::Exact, &mut Scratch::default()).unwrap()];
    let count = |m: &Model| m.store.tensors().iter().filter(|t| t.ty.is_load_form()).count();
    let mut expanded = count(&m);
    let mut bytes = vec![m.store.total_bytes()];
    for n in [2, 3] {
        let (c0, mut c) = Cluster::from_bytes(file, n, 16).unwrap();
        c.set_precision(Precision::Exact);
        let mut n_past = 0;
        out.push(c.forward(&c0, &mut n_past, 16, &TOKENS, Logits::Last).unwrap());
        expanded += c.shards.iter().map(|s| count(&s.model)).sum::<usize>();
        bytes.extend(c.shards.iter().map(|s| s.model.store.total_bytes()));
    }
    (out, expanded, bytes)
}

#[test]
fn expanding_matrices_compute_the_same() {
    // IQ2_M and IQ3_XXS hold IQ2_S and IQ3_S matrices, the IQ2_S file IQ2_XS and IQ3_S ones, the
    // IQ2_XS file IQ2_XS ones, the IQ3_S file IQ3_S ones, Q3_K_M and Q2_K Q3_K ones; Q6_K and
    // Q4_K_M Q6_K ones (most of the others a Q6_K LM head).
    for name in ["A-IQ2_M.gguf", "A-IQ3_XXS.gguf", "A-IQ2_S.gguf", "A-IQ2_XS.gguf", "A-IQ3_S.gguf", "A-Q3_K_M.gguf", "A-Q2_K.gguf", "A-Q6_K.gguf", "A-Q4_K_M.gguf"] {
        let file = fixture(name);
        let h = parse_header(&file, Some(file.len() as u64)).unwrap();
        let expanding: Vec<_> = h.tensors.iter().filter(|t| forms::expands(&t.name, t.ty)).collect();
        assert!(!expanding.is_empty(), "{name}: no matrices to expand");
        let has = |ty: GgmlType| expanding.iter().any(|t| t.ty == ty);
        assert!(name != "A-IQ3_S.gguf" || has(GgmlType::IQ3_S), "{name}: no IQ3_S matrix");
        assert!(name != "A-Q3_K_M.gguf" || has(GgmlType::Q3_K), "{name}: no Q3_K matrix");
        assert!(!name.contains("Q6_K") || has(GgmlType::Q6_K), "{name}: no Q6_K matrix");

        forms::set_enabled(false);
        // The browsers' profile, where Q6_K is held as Q6_KX (`forms::stored_as`).
        set_profile(Profile::Wide);
        let (plain, none, plain_bytes) = run(&file);
        forms::set_enabled(true);
        let (expanded, count, bytes) = run(&file);
        assert_eq!(none, 0, "{name}: expanded while switched off");
        // Whole: every IQ2_S matrix; each split holds each matrix's part once or more.
        assert!(count >= 3 * expanding.len(), "{name}: {count} expanded tensors over whole + 2 + 3 shards, {} matrices", expanding.len());
        let growth: u64 = expanding.iter().map(|t| forms::expanded_len(t.ty, t.size) - t.size).sum();
        assert!(bytes[0] >= plain_bytes[0] + growth, "{name}: whole model {} bytes, plain {}", bytes[0], plain_bytes[0]);
        assert_eq!(Model::role_memory(&h, Role::Whole, true).unwrap().0, bytes[0], "{name}: the fit's figure is what is allocated");
        for (i, (a, b)) in plain.iter().zip(&expanded).enumerate() {
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}: logits differ (run {i})");
        }
    }
    // Which forms a load takes: one of the same size needs no room, and only the browsers' profile takes Q6_KX.
    let (q6, q3) = (GgmlType::Q6_K, GgmlType::Q3_K);
    assert_eq!(forms::stored_as("output.weight", q6, false), Some(GgmlType::Q6_KX));
    assert_eq!(forms::stored_as("blk.0.ffn_down.weight", q3, false), None);
    assert_eq!(forms::stored_as("blk.0.ffn_down.weight", q3, true), Some(GgmlType::Q3_KX));
    assert_eq!(forms::stored_as("token_embd.weight", q6, true), None);
    set_profile(Profile::Narrow);
    assert_eq!(forms::stored_as("output.weight", q6, true), None, "Node's profile keeps Q6_K");
    set_profile(Profile::Wide);
    forms::set_enabled(false);
    assert_eq!(forms::stored_as("output.weight", q6, false), None);
    forms::set_enabled(true);
}
