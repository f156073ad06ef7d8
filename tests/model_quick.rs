use clef_web::model::{Logits, Model, Scratch};
use clef_web::ops::Precision;

#[test]
fn f32_fixture_last_logits() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/qwen35-tiny/");
    let file = std::fs::read(format!("{dir}A-F32.gguf")).unwrap();
    let m = Model::from_bytes(&file).unwrap();
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(format!("{dir}A-F32.transformers-dequant.json")).unwrap()).unwrap();
    for case in j["cases"].as_array().unwrap() {
        let ids: Vec<u32> = case["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let want: Vec<f32> = case["last_logits"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let mut st = m.new_state(512);
        let mut s = Scratch::default();
        let got = m.forward(&mut st, &ids, Logits::Last, Precision::Exact, &mut s).unwrap();
        let maxd = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        println!("max abs diff {maxd}");
    }
}
