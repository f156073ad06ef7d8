//! src/quant/tables.rs is generated from ../shared/spec/quant-tables.json (tools/gen_tables.py);
//! this checks every value so the committed file cannot drift from the source of truth.

#![cfg(not(target_arch = "wasm32"))]

use clef_web::quant::tables::*;
use std::path::Path;

#[test]
fn generated_tables_equal_the_json() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/spec/quant-tables.json");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let vals = |k: &str| -> Vec<u64> {
        j[k]["values"].as_array().unwrap().iter().map(|v| v.as_u64().or_else(|| v.as_i64().map(|x| x as u64)).unwrap()).collect()
    };
    let check = |k: &str, ours: Vec<u64>| assert_eq!(ours, vals(k), "{k}");
    check("kmask_iq2xs", KMASK_IQ2XS.iter().map(|&v| v as u64).collect());
    check("ksigns_iq2xs", KSIGNS_IQ2XS.iter().map(|&v| v as u64).collect());
    check("ksigns64", KSIGNS64.to_vec());
    check("iq2xxs_grid", IQ2XXS_GRID.to_vec());
    check("iq2xs_grid", IQ2XS_GRID.to_vec());
    check("iq2s_grid", IQ2S_GRID.to_vec());
    check("iq3xxs_grid", IQ3XXS_GRID.iter().map(|&v| v as u64).collect());
    check("iq3s_grid", IQ3S_GRID.iter().map(|&v| v as u64).collect());
    check("iq1s_grid", IQ1S_GRID.to_vec());
    assert_eq!(KVALUES_IQ4NL.iter().map(|&v| v as i64).collect::<Vec<_>>(),
        j["kvalues_iq4nl"]["values"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect::<Vec<_>>());
}
