//! Log-probabilities (OpenAI's `logprobs` / `top_logprobs`): the log-softmax of the model's raw
//! logits, checked against llama.cpp's recorded logits on the F32 fixture, through the whole
//! engine and through a split one (the coordinator samples in `step_start`).
#![cfg(not(target_arch = "wasm32"))]

use clef_web::cluster::Cluster;
use clef_web::engine::{Engine, GenParams, Piece};
use clef_web::model::Model;
use clef_web::sampler::SamplerParams;
use serde_json::Value;
use std::path::Path;

fn fixture() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny/A-F32.gguf")).unwrap()
}

fn tokenizer(bytes: &[u8]) -> Option<clef_web::tokenizer::Tokenizer> {
    let h = clef_web::gguf::parse_header(bytes, Some(bytes.len() as u64)).unwrap();
    clef_web::tokenizer::Tokenizer::from_gguf(&h).ok()
}

fn llama_cases() -> Vec<Value> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny/A-F32.llama.json");
    let v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    v["cases"].as_array().unwrap().clone()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// log-softmax in f64.
fn log_softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lz = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
    logits.iter().map(|l| l - lz).collect()
}

fn params(n: usize, top: usize) -> GenParams {
    GenParams { sampler: SamplerParams::greedy(), max_tokens: n, ignore_eos: true, logprobs: Some(top), ..Default::default() }
}

fn pieces(e: &mut Engine, prompt: &[u32], p: GenParams) -> Vec<Piece> {
    e.begin(prompt, p).unwrap();
    while e.prefill(7).unwrap() > 0 {}
    let mut out = Vec::new();
    while let Some(piece) = e.step().unwrap() {
        out.push(piece);
    }
    e.end_request();
    out
}

/// The first token's log-probability and its alternatives are the log-softmax of llama.cpp's
/// last-position logits; every later step's alternatives differ from each other exactly as
/// llama.cpp's recorded top-5 logits do (a log-softmax only shifts the logits).
#[test]
fn greedy_logprobs_are_the_log_softmax_of_llama_cpp_logits() {
    let bytes = fixture();
    let mut e = Engine::new(Model::from_bytes(&bytes).unwrap(), tokenizer(&bytes), 256).unwrap();
    for (ci, case) in llama_cases().iter().enumerate() {
        let greedy = ids(&case["greedy_ids"]);
        let got = pieces(&mut e, &ids(&case["prompt_ids"]), params(greedy.len(), 5));
        assert_eq!(got.iter().map(|p| p.token).collect::<Vec<_>>(), greedy, "case {ci}");

        // Step 0 against the whole distribution.
        let last: Vec<f64> = case["last_logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let ls = log_softmax(&last);
        let mut order: Vec<usize> = (0..ls.len()).collect();
        order.sort_by(|&a, &b| ls[b].total_cmp(&ls[a]).then(a.cmp(&b)));
        let lp0 = got[0].logprobs.as_ref().unwrap();
        assert!((lp0.logprob as f64 - ls[greedy[0] as usize]).abs() < 1e-4, "case {ci}: {} vs {}", lp0.logprob, ls[greedy[0] as usize]);
        for (k, &(id, lp)) in lp0.top.iter().enumerate() {
            assert_eq!(id as usize, order[k], "case {ci}: alternative {k}");
            assert!((lp as f64 - ls[order[k]]).abs() < 1e-4, "case {ci}: alternative {k}: {lp} vs {}", ls[order[k]]);
        }

        // Every step: sorted, the greedy token first with its own log-probability, and the gaps
        // between alternatives equal llama.cpp's logit gaps.
        for (s, (piece, rec)) in got.iter().zip(case["greedy_step_top5"].as_array().unwrap()).enumerate() {
            let lp = piece.logprobs.as_ref().unwrap();
            assert_eq!(lp.top.len(), 5);
            assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1), "case {ci} step {s}: sorted");
            assert_eq!(lp.top[0], (piece.token, lp.logprob), "case {ci} step {s}: greedy = most likely");
            assert!(lp.logprob < 0.0);
            let rec: Vec<(u32, f64)> = rec.as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap())).collect();
            for k in 0..5 {
                if k > 0 && rec[k - 1].1 - rec[k].1 < 1e-4 {
                    continue; // a near tie may order differently
                }
                assert_eq!(lp.top[k].0, rec[k].0, "case {ci} step {s}: alternative {k}");
                let gap = (lp.top[0].1 - lp.top[k].1) as f64;
                assert!((gap - (rec[0].1 - rec[k].1)).abs() < 1e-4, "case {ci} step {s}: gap {k}: {gap} vs {}", rec[0].1 - rec[k].1);
            }
        }
    }
}

/// Without `logprobs` nothing is computed; with 0 alternatives only the token's own.
#[test]
fn logprobs_only_when_asked() {
    let bytes = fixture();
    let mut e = Engine::new(Model::from_bytes(&bytes).unwrap(), tokenizer(&bytes), 256).unwrap();
    let prompt = ids(&llama_cases()[0]["prompt_ids"]);
    let off = pieces(&mut e, &prompt, GenParams { logprobs: None, ..params(3, 0) });
    assert!(off.iter().all(|p| p.logprobs.is_none()));
    let zero = pieces(&mut e, &prompt, params(3, 0));
    assert!(zero.iter().all(|p| p.logprobs.as_ref().is_some_and(|l| l.top.is_empty() && l.logprob < 0.0)));
}

/// The model's distribution, not the sampler's: a logit bias that forces a token, penalties and
/// temperature do not change the reported log-probabilities.
#[test]
fn logprobs_ignore_bias_penalties_and_temperature() {
    let bytes = fixture();
    let mut e = Engine::new(Model::from_bytes(&bytes).unwrap(), tokenizer(&bytes), 256).unwrap();
    let case = &llama_cases()[0];
    let prompt = ids(&case["prompt_ids"]);
    let plain = pieces(&mut e, &prompt, params(1, 3));
    let forced = 77u32;
    let sampler = SamplerParams {
        temperature: 0.7,
        logit_bias: vec![(forced, 1e4)],
        repetition_penalty: 1.3,
        presence_penalty: 0.5,
        ..SamplerParams::default()
    };
    let biased = pieces(&mut e, &prompt, GenParams { sampler, ..params(1, 3) });
    assert_eq!(biased[0].token, forced);
    let last: Vec<f64> = case["last_logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let ls = log_softmax(&last);
    let lp = biased[0].logprobs.as_ref().unwrap();
    assert!((lp.logprob as f64 - ls[forced as usize]).abs() < 1e-4, "{} vs {}", lp.logprob, ls[forced as usize]);
    assert_eq!(lp.top, plain[0].logprobs.as_ref().unwrap().top);
}

/// Split across shard workers the coordinator samples in `step_start`: the same log-probabilities.
#[test]
fn split_engine_reports_the_same_logprobs() {
    let bytes = fixture();
    let prompt = ids(&llama_cases()[1]["prompt_ids"]);
    let mut whole = Engine::new(Model::from_bytes(&bytes).unwrap(), tokenizer(&bytes), 256).unwrap();
    let want = pieces(&mut whole, &prompt, params(6, 4));
    let (m, mut c) = Cluster::from_bytes(&bytes, 2, 256).unwrap();
    let mut e = Engine::new(m, tokenizer(&bytes), 256).unwrap();
    e.begin(&prompt, params(6, 4)).unwrap();
    while c.prefill(&mut e, 5).unwrap() > 0 {}
    let mut got = Vec::new();
    while let Some(p) = c.step(&mut e).unwrap() {
        got.push(p);
    }
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.token, w.token);
        let (g, w) = (g.logprobs.as_ref().unwrap(), w.logprobs.as_ref().unwrap());
        assert!((g.logprob - w.logprob).abs() < 1e-4);
        assert_eq!(g.top.iter().map(|t| t.0).collect::<Vec<_>>(), w.top.iter().map(|t| t.0).collect::<Vec<_>>());
    }
}
