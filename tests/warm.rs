//! The miniature a load warms the engine's code with (`src/warm.rs`): built from every fixture's
//! header, it loads and runs its passes whole and split across 3 shards (the scalar kernels; the
//! SIMD ones: tests/js/warm.test.mjs), with the file's stored forms and with the expanded ones,
//! with and without bands; it holds every tensor type of
//! the file's layers, per layer kind; and none of its calls is large enough for a kernel trial to
//! time (warming must decide nothing).

#![cfg(not(target_arch = "wasm32"))]

use clef_web::gguf::{parse_header, Header};
use clef_web::ops::{GEMM_TRIAL_MIN_MACS, R4_TRIAL_MIN_BYTES, TRIAL_MIN_BYTES};
use clef_web::split::BAND_PCT;
use clef_web::warm::{miniature, warm, LONG_PROMPT, PASSES};
use std::collections::BTreeSet;
use std::path::Path;

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf") && !p.ends_with("A-imatrix.gguf"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    assert!(v.len() >= 20, "fixtures missing: {}", v.len());
    v
}

/// (layer kind, tensor suffix, type) of every layer tensor; kind: is it a DeltaNet layer.
fn layer_types(h: &Header) -> BTreeSet<(bool, String, String)> {
    h.tensors
        .iter()
        .filter_map(|t| {
            let rest = t.name.strip_prefix("blk.")?;
            let (il, suffix) = rest.split_once('.')?;
            let il: usize = il.parse().ok()?;
            let recurrent = h.tensors.iter().any(|u| u.name == format!("blk.{il}.ssm_a"));
            Some((recurrent, suffix.to_string(), t.ty.to_string()))
        })
        .collect()
}

#[test]
fn every_fixture_warms_whole_and_split() {
    for (name, file) in fixtures() {
        let h = parse_header(&file, Some(file.len() as u64)).unwrap();
        for (shards, expand, band) in [(1, true, 0), (3, false, BAND_PCT)] {
            let passes = warm(&h, shards, expand, band).unwrap_or_else(|e| panic!("{name}, {shards} shards, expand {expand}, band {band}: {e}"));
            assert_eq!(passes, PASSES, "{name}");
        }
    }
}

#[test]
fn the_miniature_holds_the_files_layer_types_and_nothing_a_trial_times() {
    for (name, file) in fixtures() {
        let h = parse_header(&file, Some(file.len() as u64)).unwrap();
        for shards in [1, 2] {
            let mini = miniature(&h, shards).unwrap();
            let m = parse_header(&mini, Some(mini.len() as u64)).unwrap();
            assert_eq!(layer_types(&m), layer_types(&h), "{name}: the miniature's layer types");
            for t in &m.tensors {
                if t.dims.len() < 2 || t.name == "token_embd.weight" || t.ty.is_float() {
                    continue;
                }
                let (cols, rows) = (t.dims[0] as usize, t.dims[1] as usize);
                assert!((t.size as usize) < TRIAL_MIN_BYTES.min(R4_TRIAL_MIN_BYTES), "{name}: {} is {} bytes", t.name, t.size);
                assert!(LONG_PROMPT * rows * cols < GEMM_TRIAL_MIN_MACS, "{name}: {} takes a timed GEMM", t.name);
            }
        }
    }
}
