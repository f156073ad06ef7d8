//! Every tensor of every fixture GGUF, dequantized by our scalar reference, hashes (sha256 of the
//! f32 little-endian data) to what ggml's `to_float` produced (`*.dequant-tensors.json`): bit-exact
//! dequantisation of real llama-quantize output for every type, Q1_0 and Q2_0 included.

#![cfg(not(target_arch = "wasm32"))]

use clef_web::gguf::parse_header;
use clef_web::quant::{self, is_supported};
use sha2::{Digest, Sha256};
use std::path::Path;

#[test]
fn every_fixture_tensor_dequantizes_bit_exactly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny");
    let mut checked = 0;
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(stem) = name.strip_suffix(".dequant-tensors.json") else { continue };
        let refs: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let file = std::fs::read(dir.join(format!("{stem}.gguf"))).unwrap();
        let h = parse_header(&file, Some(file.len() as u64)).unwrap();
        for r in refs["tensors"].as_array().unwrap() {
            let tname = r["name"].as_str().unwrap();
            let t = h.tensor(tname).unwrap_or_else(|| panic!("{stem}: no tensor {tname}"));
            assert_eq!(t.ty.name(), r["type"].as_str().unwrap(), "{stem}/{tname}: type");
            if !is_supported(t.ty) {
                missing.push(format!("{stem}/{tname} ({})", t.ty));
                continue;
            }
            let start = (h.data_offset + t.offset) as usize;
            let mut out = vec![0.0f32; t.n_elements() as usize];
            quant::dequantize_row(t.ty, &file[start..start + t.size as usize], &mut out);
            let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
            let got = format!("{:x}", Sha256::digest(&bytes));
            let first: Vec<f32> = r["first32"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            assert_eq!(&out[..first.len()], &first[..], "{stem}/{tname} ({}): first values", t.ty);
            assert_eq!(got, r["sha256_f32"].as_str().unwrap(), "{stem}/{tname} ({}): sha256", t.ty);
            checked += 1;
        }
    }
    println!("{checked} tensors bit-exact");
    assert!(missing.is_empty(), "tensors of unsupported types: {missing:#?}");
}
