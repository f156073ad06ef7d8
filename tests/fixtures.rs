//! The model against the reference fixtures in ../shared/fixtures/qwen35-tiny (see its README):
//! every `*.gguf` there that has a `*.transformers-dequant.json` is checked, so new files are
//! picked up without editing this test.
//!
//! * exact precision (dequantized weights × f32 activations) vs the exact-arithmetic reference
//!   `transformers-dequant` (transformers in f32 on the same dequantized weights): relative L2
//!   error of the last-position logits ≤ 1e-5 (measured ≤ 3e-6), greedy tokens identical while
//!   the reference's top-2 margin is clear (> 1e-3);
//! * fast precision (int8 activations like ggml) vs the same reference: at least as close as
//!   llama.cpp's own logits (`*.llama.json`) are, on average over the prompts, plus a 10% margin
//!   for the rounding-flip noise the README describes (it is a statistical property: one flipped
//!   int8 activation moves a tiny random network's logits by ~0.1–0.6);
//! * F32: every position's logits within 1e-4 of transformers on the original weights and of
//!   llama.cpp, and llama.cpp's 16 greedy tokens reproduced exactly, in both precisions.

#![cfg(not(target_arch = "wasm32"))]

use clef_web::model::{Logits, Model, Scratch};
use clef_web::ops::Precision;
use clef_web::sampler::argmax;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny")
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Every model fixture: (name like "A-IQ2_M", gguf path).
fn models() -> Vec<(String, PathBuf)> {
    let mut v: Vec<_> = std::fs::read_dir(fixture_dir())
        .expect("../shared/fixtures is missing")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .filter_map(|p| {
            let stem = p.file_stem()?.to_str()?.to_string();
            fixture_dir().join(format!("{stem}.transformers-dequant.json")).exists().then_some((stem, p))
        })
        .collect();
    v.sort();
    assert!(v.len() >= 20, "expected the fixture models, found {}", v.len());
    v
}

fn run(m: &Model, prompt: &[u32], prec: Precision, greedy: usize) -> (Vec<f32>, Vec<u32>) {
    let mut st = m.new_state(prompt.len() + greedy + 1);
    let mut s = Scratch::default();
    let last = m.forward(&mut st, prompt, Logits::Last, prec, &mut s).unwrap();
    let mut toks = Vec::new();
    let mut l = last.clone();
    for _ in 0..greedy {
        let t = argmax(&l);
        toks.push(t);
        l = m.forward(&mut st, &[t], Logits::Last, prec, &mut s).unwrap();
    }
    (last, toks)
}

/// Length of the prefix of `ours` that equals the reference's greedy tokens, counting only steps
/// where the reference's top-2 margin is clear; returns (checked steps, first mismatch if any).
fn greedy_agreement(ours: &[u32], reference: &Value) -> Result<usize, String> {
    let want = ids(&reference["greedy_ids"]);
    let top5 = reference["greedy_step_top5"].as_array().unwrap();
    for (i, (&o, &w)) in ours.iter().zip(&want).enumerate() {
        let t = top5[i].as_array().unwrap();
        let margin = t[0][1].as_f64().unwrap() - t[1][1].as_f64().unwrap();
        if margin < 1e-3 {
            return Ok(i); // a near-tie: any two exact implementations may differ from here on
        }
        if o != w {
            return Err(format!("step {i}: got {o}, reference {w} (margin {margin:.4})"));
        }
    }
    Ok(ours.len().min(want.len()))
}

#[test]
fn exact_precision_matches_the_exact_reference() {
    let mut unsupported = Vec::new();
    for (name, path) in models() {
        let file = std::fs::read(&path).unwrap();
        let m = match Model::from_bytes(&file) {
            Ok(m) => m,
            Err(e) => {
                unsupported.push(format!("{name}: {e}"));
                continue;
            }
        };
        let tdq = json(&fixture_dir().join(format!("{name}.transformers-dequant.json")));
        for (ci, case) in tdq["cases"].as_array().unwrap().iter().enumerate() {
            let (last, toks) = run(&m, &ids(&case["prompt_ids"]), Precision::Exact, 16);
            let err = rel_l2(&last, &floats(&case["last_logits"]));
            assert!(err < 1e-5, "{name} prompt {ci}: rel L2 {err:e} vs transformers-dequant");
            let n = greedy_agreement(&toks, case).unwrap_or_else(|e| panic!("{name} prompt {ci}: {e}"));
            println!("{name} p{ci}: exact rel L2 {err:.2e}, greedy agrees for {n} clear steps");
        }
    }
    assert!(unsupported.is_empty(), "models that do not load: {unsupported:#?}");
}

#[test]
fn fast_precision_is_as_close_as_llama_cpp() {
    let mut unsupported = Vec::new();
    for (name, path) in models() {
        let file = std::fs::read(&path).unwrap();
        let m = match Model::from_bytes(&file) {
            Ok(m) => m,
            Err(e) => {
                unsupported.push(format!("{name}: {e}"));
                continue;
            }
        };
        let tdq = json(&fixture_dir().join(format!("{name}.transformers-dequant.json")));
        let llama = json(&fixture_dir().join(format!("{name}.llama.json")));
        let (mut ours_sum, mut llama_sum) = (0.0, 0.0);
        let cases = tdq["cases"].as_array().unwrap();
        for (ci, case) in cases.iter().enumerate() {
            let reference = floats(&case["last_logits"]);
            let (last, _) = run(&m, &ids(&case["prompt_ids"]), Precision::Fast, 0);
            let ours = rel_l2(&last, &reference);
            let theirs = rel_l2(&floats(&llama["cases"][ci]["last_logits"]), &reference);
            println!("{name} p{ci}: fast rel L2 {ours:.3e}, llama.cpp {theirs:.3e}");
            ours_sum += ours;
            llama_sum += theirs;
        }
        let (ours, theirs) = (ours_sum / cases.len() as f64, llama_sum / cases.len() as f64);
        assert!(ours <= theirs * 1.1 + 1e-6, "{name}: mean rel L2 {ours:.3e} vs llama.cpp's {theirs:.3e}");
    }
    assert!(unsupported.is_empty(), "models that do not load: {unsupported:#?}");
}

#[test]
fn f32_every_position_and_greedy_match_llama_cpp() {
    let dir = fixture_dir();
    let m = Model::from_bytes(&std::fs::read(dir.join("A-F32.gguf")).unwrap()).unwrap();
    let llama = json(&dir.join("A-F32.llama.json"));
    let hf = json(&dir.join("A-F32.transformers.json"));
    let nv = m.config.n_vocab;
    for prec in [Precision::Fast, Precision::Exact] {
        for (ci, case) in llama["cases"].as_array().unwrap().iter().enumerate() {
            let prompt = ids(&case["prompt_ids"]);
            // All positions against transformers' raw f32 dumps.
            let raw = std::fs::read(dir.join(format!("A-F32.transformers.logits.p{ci}.f32"))).unwrap();
            let want: Vec<f32> = raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            let mut st = m.new_state(prompt.len());
            let all = m.forward(&mut st, &prompt, Logits::All, prec, &mut Scratch::default()).unwrap();
            assert_eq!(all.len(), prompt.len() * nv);
            let max = all.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(max < 1e-4, "{prec:?} prompt {ci}: max |Δ| {max} vs transformers (all positions)");
            // Last position against llama.cpp and transformers JSON; greedy tokens.
            let (last, toks) = run(&m, &prompt, prec, 16);
            for (what, r) in [("llama.cpp", case), ("transformers", &hf["cases"][ci])] {
                let max = last.iter().zip(floats(&r["last_logits"])).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(max < 1e-4, "{prec:?} prompt {ci}: max |Δ| {max} vs {what}");
            }
            assert_eq!(toks, ids(&case["greedy_ids"]), "{prec:?} prompt {ci}: greedy tokens differ from llama.cpp");
        }
    }
}

/// Decoding token by token gives the same logits as one batched prefill (recurrent state, conv
/// state and KV cache carried correctly), and a restored snapshot continues identically.
#[test]
fn sequential_equals_batched_and_snapshots_restore() {
    let dir = fixture_dir();
    let m = Model::from_bytes(&std::fs::read(dir.join("A-F32.gguf")).unwrap()).unwrap();
    let prompt = [8001u32, 846, 198, 3710, 369, 279, 6511, 314, 2776, 663, 30];
    let mut s = Scratch::default();
    let mut a = m.new_state(32);
    let batched = m.forward(&mut a, &prompt, Logits::Last, Precision::Exact, &mut s).unwrap();
    let mut b = m.new_state(32);
    let mut seq = Vec::new();
    for (i, &t) in prompt.iter().enumerate() {
        let half = &prompt[..i];
        if i == 5 {
            // snapshot mid-way, run other tokens, restore: the continuation must be unaffected
            let snap = b.snapshot();
            m.forward(&mut b, &[1, 2, 3], Logits::None, Precision::Exact, &mut s).unwrap();
            b.restore(&snap);
            assert_eq!(b.n_past, half.len());
        }
        seq = m.forward(&mut b, &[t], Logits::Last, Precision::Exact, &mut s).unwrap();
    }
    let max = batched.iter().zip(&seq).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(max < 2e-5, "batched vs sequential: {max}");
}

#[test]
fn context_overflow_and_bad_tokens_are_errors_and_state_survives() {
    let dir = fixture_dir();
    let m = Model::from_bytes(&std::fs::read(dir.join("A-F32.gguf")).unwrap()).unwrap();
    let mut st = m.new_state(4);
    let mut s = Scratch::default();
    assert!(m.forward(&mut st, &[1, 2, 3, 4, 5], Logits::Last, Precision::Fast, &mut s).is_err());
    assert!(m.forward(&mut st, &[9_999_999], Logits::Last, Precision::Fast, &mut s).is_err());
    assert_eq!(st.n_past, 0);
    assert!(m.forward(&mut st, &[1, 2], Logits::Last, Precision::Fast, &mut s).is_ok());
}

// ---- the model split across shards (tensor parallelism, src/split.rs) -------------------------

use clef_web::cluster::Cluster;

/// `run` on a model split across `n` shards (the stage program the Web Workers run).
fn run_split(file: &[u8], n: usize, prompt: &[u32], prec: Precision, greedy: usize) -> (Vec<f32>, Vec<u32>) {
    let n_ctx = prompt.len() + greedy + 1;
    let (m, mut c) = Cluster::from_bytes(file, n, n_ctx).unwrap();
    c.set_precision(prec);
    let mut n_past = 0;
    let last = c.forward(&m, &mut n_past, n_ctx, prompt, Logits::Last).unwrap();
    let mut toks = Vec::new();
    let mut l = last.clone();
    for _ in 0..greedy {
        let t = argmax(&l);
        toks.push(t);
        l = c.forward(&m, &mut n_past, n_ctx, &[t], Logits::Last).unwrap();
    }
    (last, toks)
}

/// Every fixture through 2 and 3 shards in exact precision: the same logits as the whole model up
/// to f32 summation order (each column-split matmul's partial sums are added in another order:
/// ~1e-7 relative per layer; bound 1e-5, the same as against the exact reference), and the
/// reference's greedy tokens wherever its top-2 margin is clear.
#[test]
fn split_models_match_the_whole_model_exact() {
    for (name, path) in models() {
        let file = std::fs::read(&path).unwrap();
        let whole = Model::from_bytes(&file).unwrap();
        let tdq = json(&fixture_dir().join(format!("{name}.transformers-dequant.json")));
        let case = &tdq["cases"][0];
        let prompt = ids(&case["prompt_ids"]);
        let (want, _) = run(&whole, &prompt, Precision::Exact, 0);
        for n in [2, 3] {
            let (last, toks) = run_split(&file, n, &prompt, Precision::Exact, 8);
            let err = rel_l2(&last, &want);
            assert!(err < 1e-5, "{name} / {n} shards: rel L2 {err:e} vs the whole model");
            let k = greedy_agreement(&toks, case).unwrap_or_else(|e| panic!("{name} / {n} shards: {e}"));
            println!("{name} / {n} shards: exact rel L2 vs whole {err:.2e}, greedy agrees for {k} clear steps");
        }
    }
}

/// Bands (src/balance.rs): wherever the balancer cuts them, the same bits. Each fixture through
/// 2 and 3 shards, a prompt, 8 greedy tokens, then a pass of 3 tokens, once with the shards at one speed and once with their speeds swinging from pass
/// to pass (one shard up to 8× slower, in turn, as on a busy host): every logit of every pass
/// identical, and where the file has bands the cuts moved.
#[test]
fn band_cuts_do_not_change_results() {
    for (name, path) in models() {
        let file = std::fs::read(&path).unwrap();
        let tdq = json(&fixture_dir().join(format!("{name}.transformers-dequant.json")));
        let prompt = ids(&tdq["cases"][0]["prompt_ids"]);
        let n_ctx = prompt.len() + 12;
        for n in [2, 3] {
            let run = |swing: bool| -> (Vec<Vec<f32>>, bool, usize) {
                let (m, mut c) = Cluster::from_bytes(&file, n, n_ctx).unwrap();
                let mut n_past = 0;
                let mut out = vec![c.forward(&m, &mut n_past, n_ctx, &prompt, Logits::Last).unwrap()];
                for step in 0..8 {
                    if swing {
                        c.slowdown = (0..n).map(|i| if i == step % n { [8.0, 1.5, 3.0][step % 3] } else { 1.0 }).collect();
                    }
                    let t = argmax(out.last().unwrap());
                    out.push(c.forward(&m, &mut n_past, n_ctx, &[t], Logits::Last).unwrap());
                }
                let t = argmax(out.last().unwrap());
                out.push(c.forward(&m, &mut n_past, n_ctx, &[t, 17, t], Logits::All).unwrap());
                (out, c.balancer().has_bands(), c.balancer().moved())
            };
            let (even, bands, moved_even) = run(false);
            let (swung, _, moved) = run(true);
            assert_eq!(moved_even, 0, "{name} / {n} shards: cuts moved at one speed");
            assert_eq!(moved > 0, bands, "{name} / {n} shards: bands {bands}, {moved} stages cut unevenly");
            for (k, (a, b)) in even.iter().zip(&swung).enumerate() {
                assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name} / {n} shards: pass {k} differs with moved cuts");
            }
            println!("{name} / {n} shards: bands {bands}, {moved} stages cut unevenly, 10 passes bit-identical");
        }
    }
}

/// Fast precision (int8 activations) through 2 and 3 shards: as close to the exact reference as
/// llama.cpp is (the same bound as the whole model's test: a split changes summation order, which
/// can flip an int8 rounding, which is the noise the fixtures' README describes).
#[test]
fn split_models_fast_precision_is_as_close_as_llama_cpp() {
    for (name, path) in models() {
        let file = std::fs::read(&path).unwrap();
        let tdq = json(&fixture_dir().join(format!("{name}.transformers-dequant.json")));
        let llama = json(&fixture_dir().join(format!("{name}.llama.json")));
        let cases = tdq["cases"].as_array().unwrap();
        for n in [2, 3] {
            let (mut ours_sum, mut llama_sum) = (0.0, 0.0);
            for (ci, case) in cases.iter().enumerate() {
                let reference = floats(&case["last_logits"]);
                let (last, _) = run_split(&file, n, &ids(&case["prompt_ids"]), Precision::Fast, 0);
                ours_sum += rel_l2(&last, &reference);
                llama_sum += rel_l2(&floats(&llama["cases"][ci]["last_logits"]), &reference);
            }
            let (ours, theirs) = (ours_sum / cases.len() as f64, llama_sum / cases.len() as f64);
            println!("{name} / {n} shards: fast rel L2 {ours:.3e}, llama.cpp {theirs:.3e}");
            assert!(ours <= theirs * 1.1 + 1e-6, "{name} / {n} shards: mean rel L2 {ours:.3e} vs llama.cpp's {theirs:.3e}");
        }
    }
}

/// F32 through 1, 2 and 3 shards: llama.cpp's 16 greedy tokens exactly, in both precisions.
#[test]
fn split_f32_greedy_matches_llama_cpp() {
    let dir = fixture_dir();
    let file = std::fs::read(dir.join("A-F32.gguf")).unwrap();
    let llama = json(&dir.join("A-F32.llama.json"));
    for prec in [Precision::Fast, Precision::Exact] {
        for (ci, case) in llama["cases"].as_array().unwrap().iter().enumerate() {
            for n in [1, 2, 3] {
                let (last, toks) = run_split(&file, n, &ids(&case["prompt_ids"]), prec, 16);
                let max = last.iter().zip(floats(&case["last_logits"])).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(max < 1e-4, "{prec:?} prompt {ci} / {n} shards: max |Δ| {max} vs llama.cpp");
                assert_eq!(toks, ids(&case["greedy_ids"]), "{prec:?} prompt {ci} / {n} shards: greedy tokens differ from llama.cpp");
            }
        }
    }
}

/// An f16 KV cache (llama.cpp's default; half the memory): the logits of every fixture prompt
/// within 1e-3 relative of the f32 cache's (f16 keeps 11 significant bits: ~5e-4 per value), and
/// llama.cpp's greedy tokens on the F32 file where its top-2 margin is clear.
#[test]
fn f16_kv_cache_stays_close_to_f32() {
    let dir = fixture_dir();
    let mut m = Model::from_bytes(&std::fs::read(dir.join("A-F32.gguf")).unwrap()).unwrap();
    let llama = json(&dir.join("A-F32.llama.json"));
    for (ci, case) in llama["cases"].as_array().unwrap().iter().enumerate() {
        let prompt = ids(&case["prompt_ids"]);
        m.kv_type = clef_web::kv::KvType::F32;
        let (want, _) = run(&m, &prompt, Precision::Exact, 0);
        m.kv_type = clef_web::kv::KvType::F16;
        let (got, toks) = run(&m, &prompt, Precision::Exact, 16);
        let err = rel_l2(&got, &want);
        println!("prompt {ci}: f16 KV rel L2 {err:.2e}");
        assert!(err < 1e-3, "prompt {ci}: f16 KV rel L2 {err:e}");
        let n = greedy_agreement(&toks, case).unwrap_or_else(|e| panic!("prompt {ci}: {e}"));
        assert!(n >= 8, "prompt {ci}: greedy agrees for only {n} steps");
    }
}

/// The four-rows-interleaved layout (`quant::r4`) changes where the bytes are, not the numbers:
/// every fixture with a type that has the layout, its layer matrices (and untied LM head) interleaved, gives the plain
/// model's logits bit for bit in both precisions — a prompt long enough for the GEMM (which un-interleaves its panels),
/// and 8 greedy decode steps (natively `vec_dot4` runs the plain kernel per row; the wasm R4
/// kernels are checked against the scalar reference in tests/kernels.rs and the model in wasm by
/// tests/js against llama.cpp).
#[test]
fn interleaved_weights_give_the_same_logits() {
    let mut checked = Vec::new();
    let mut heads = 0;
    for (name, path) in models() {
        let file = std::fs::read(&path).unwrap();
        let plain = Model::from_bytes(&file).unwrap();
        let mut r4 = Model::from_bytes(&file).unwrap();
        let n = r4.interleave_weights(|ty| clef_web::quant::r4::r4_kernels(ty).is_some());
        if n == 0 {
            continue;
        }
        // A prompt of 72 tokens: from 2 tokens on plain rows take the GEMM, while interleaved
        // ones take the tile kernel up to `gemm_min_tokens_r4` (≤ 64) — another summation order,
        // so below it the two agree only to rounding. Above it both run the GEMM.
        let case = &json(&fixture_dir().join(format!("{name}.transformers-dequant.json")))["cases"][0];
        let prompt = ids(&case["prompt_ids"]).repeat(4);
        assert!(prompt.len() >= 64);
        for prec in [Precision::Fast, Precision::Exact] {
            let (a, at) = run(&plain, &prompt, prec, 8);
            let (b, bt) = run(&r4, &prompt, prec, 8);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name} {prec:?}: logits differ");
            assert_eq!(at, bt, "{name} {prec:?}: greedy tokens differ");
        }
        // The LM-head rows a decision reads come out of an interleaved head as they are stored.
        if r4.lm_head_interleaved() {
            let vocab = plain.config.n_vocab as u32;
            let ids: Vec<u32> = [0, 1, 2, 3, 5, 6, 7, 9, vocab / 2, vocab - 5, vocab - 1].into_iter().filter(|&i| i < vocab).collect();
            let ids = clef_web::clef::lm_rows::needed(ids);
            let (a, b) = (clef_web::clef::lm_rows::rows_of_part(&plain, &ids), clef_web::clef::lm_rows::rows_of_part(&r4, &ids));
            assert_eq!(a, b, "{name}: LM-head rows of the interleaved head");
            heads += 1;
        }
        checked.push(format!("{name} ({n} matrices)"));
    }
    println!("interleaved: {checked:?}, {heads} LM heads");
    assert!(checked.iter().any(|c| c.starts_with("A-Q2_K")), "no Q2_K fixture was interleaved: {checked:?}");
    assert!(heads > 0, "no fixture's LM head was interleaved");
}
