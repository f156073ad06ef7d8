//! The engine: generation steps, prefix reuse through snapshots, aborts, limits.
#![cfg(not(target_arch = "wasm32"))]

use clef_web::cluster::Cluster;
use clef_web::engine::{Engine, FinishReason, GenParams};
use clef_web::model::Model;
use clef_web::sampler::SamplerParams;
use std::path::Path;

fn engine() -> Engine {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny/A-F32.gguf");
    let bytes = std::fs::read(p).unwrap();
    let h = clef_web::gguf::parse_header(&bytes, Some(bytes.len() as u64)).unwrap();
    let tok = clef_web::tokenizer::Tokenizer::from_gguf(&h).ok();
    Engine::new(Model::from_bytes(&bytes).unwrap(), tok, 256).unwrap()
}

fn greedy(n: usize) -> GenParams {
    GenParams { sampler: SamplerParams::greedy(), max_tokens: n, ignore_eos: true, ..Default::default() }
}

fn run(e: &mut Engine, prompt: &[u32], p: GenParams) -> Vec<u32> {
    e.begin(prompt, p).unwrap();
    while e.prefill(4).unwrap() > 0 {}
    let mut out = Vec::new();
    while let Some(piece) = e.step().unwrap() {
        out.push(piece.token);
    }
    e.end_request();
    out
}

/// The coordinator's engine and `n` shard engines (what the Web Workers hold).
fn split_engine(n: usize) -> (Engine, Cluster) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/qwen35-tiny/A-F32.gguf");
    let bytes = std::fs::read(p).unwrap();
    let h = clef_web::gguf::parse_header(&bytes, Some(bytes.len() as u64)).unwrap();
    let tok = clef_web::tokenizer::Tokenizer::from_gguf(&h).ok();
    let (m, c) = Cluster::from_bytes(&bytes, n, 256).unwrap();
    (Engine::new(m, tok, 256).unwrap(), c)
}

fn run_split(e: &mut Engine, c: &mut Cluster, prompt: &[u32], p: GenParams) -> Vec<u32> {
    e.begin(prompt, p).unwrap();
    while c.prefill(e, 4).unwrap() > 0 {}
    let mut out = Vec::new();
    while let Some(piece) = c.step(e).unwrap() {
        out.push(piece.token);
    }
    e.end_request();
    out
}

/// Split across 2 and 3 shards, the engine gives llama.cpp's greedy tokens, and prefix reuse
/// (snapshots mirrored in the shards through state ops) gives the same tokens as a fresh run.
#[test]
fn split_engine_generates_and_reuses_prefixes_like_the_whole_one() {
    for n in [2, 3] {
        let (mut e, mut c) = split_engine(n);
        assert_eq!(run_split(&mut e, &mut c, &P0, greedy(16)), GREEDY0, "{n} shards");
        let first = run_split(&mut e, &mut c, &P0, greedy(6));
        let mut p2 = P0.to_vec();
        p2.extend(&first);
        p2.extend([8002, 198, 8001, 846, 198, 2776]);
        let again = run_split(&mut e, &mut c, &p2, greedy(8));
        assert!(e.usage.cached_tokens > 0, "{n} shards: the prefix was reused");
        let mut whole = engine();
        assert_eq!(again, run(&mut whole, &p2, greedy(8)), "{n} shards: reused prefix vs the whole model");
        // A diverging prompt restores an earlier snapshot (or clears) in every shard.
        let mut p3 = P0[..10].to_vec();
        p3.extend([100, 200, 300]);
        assert_eq!(run_split(&mut e, &mut c, &p3, greedy(5)), run(&mut whole, &p3, greedy(5)), "{n} shards: diverging prompt");
        e.reset();
        assert_eq!(run_split(&mut e, &mut c, &P0, greedy(16)), GREEDY0, "{n} shards after reset");
    }
}

const P0: [u32; 18] = [8001, 846, 198, 3710, 369, 279, 6511, 314, 2776, 663, 30, 8002, 198, 8001, 389, 375, 505, 198];
const GREEDY0: [u32; 16] = [6726, 7291, 501, 376, 2364, 6359, 390, 5592, 6177, 7432, 2922, 6829, 6072, 6146, 749, 7987];

#[test]
fn greedy_matches_llama_cpp_in_chunks() {
    let mut e = engine();
    assert_eq!(run(&mut e, &P0, greedy(16)), GREEDY0);
    assert_eq!(e.finish_reason(), None); // request ended
    assert_eq!(e.usage.completion_tokens, 16);
}

#[test]
fn follow_up_reuses_the_prefix_and_gives_identical_tokens() {
    let mut e = engine();
    let first = run(&mut e, &P0, greedy(6));
    // Follow-up: previous prompt + reply + more tokens.
    let mut p2 = P0.to_vec();
    p2.extend(&first);
    p2.extend([8002, 198, 8001, 846, 198, 2776]);
    let cached = e.begin(&p2, greedy(8)).unwrap();
    assert_eq!(cached, P0.len() + first.len() - 1, "the end-of-generation snapshot is reused");
    e.end_request();
    let again = run(&mut e, &p2, greedy(8));
    let mut fresh = engine();
    assert_eq!(again, run(&mut fresh, &p2, greedy(8)), "reused prefix must not change the output");
    // A diverging prompt falls back to an earlier snapshot or a fresh state, still correct.
    let mut p3 = P0[..10].to_vec();
    p3.extend([100, 200, 300]);
    let a = run(&mut e, &p3, greedy(5));
    let mut fresh = engine();
    assert_eq!(a, run(&mut fresh, &p3, greedy(5)));
}

#[test]
fn abort_mid_generation_leaves_a_usable_engine() {
    let mut e = engine();
    e.begin(&P0, greedy(16)).unwrap();
    e.prefill(5).unwrap(); // abort in the middle of the prompt
    e.end_request();
    e.begin(&P0, greedy(3)).unwrap();
    e.step().unwrap();
    e.end_request(); // abort after one token
    assert_eq!(run(&mut e, &P0, greedy(16)), GREEDY0);
}

/// An abort between two stages of a prompt pass (`run_local_for` / `drive_stages`, then
/// `abandon_pass`): the state goes back to the snapshot at the end of the previous answer, which
/// the next request still reuses, and the tokens are a fresh engine's — one worker and split.
#[test]
fn abort_between_the_stages_of_a_pass_rolls_back_to_a_snapshot() {
    let mut p2 = P0.to_vec();
    p2.extend([8002, 198, 8001, 846, 198, 2776, 100, 200, 300]);
    let want = run(&mut engine(), &p2, greedy(8));
    // Begins a follow-up of P0 + its answer, runs `stages` stages of its single prompt pass, then
    // abandons it; the request that follows is answered as by a fresh engine.
    let follow_up = |first: &[u32]| {
        let mut p = P0.to_vec();
        p.extend(first);
        p.extend(&p2[P0.len()..]);
        p
    };
    for stages in [1, 3, 7] {
        let mut e = engine();
        let first = run(&mut e, &P0, greedy(4));
        let p = follow_up(&first);
        let cached = e.begin(&p, greedy(8)).unwrap();
        assert!(cached > 0, "the answer's snapshot is reused");
        e.prefill_start(usize::MAX).unwrap();
        for _ in 0..stages {
            assert!(e.run_local_for(0.0), "one stage per call with no time budget");
        }
        e.abandon_pass();
        e.end_request();
        assert_eq!(e.begin(&p, greedy(8)).unwrap(), cached, "{stages} stages: the snapshot survives the abort");
        e.end_request();
        assert_eq!(run(&mut e, &p, greedy(8)), run(&mut engine(), &p, greedy(8)), "{stages} stages, one worker");
        assert_eq!(run(&mut e, &p2, greedy(8)), want, "{stages} stages, one worker, diverging prompt");

        let (mut e, mut c) = split_engine(2);
        let first = run_split(&mut e, &mut c, &P0, greedy(4));
        let p = follow_up(&first);
        e.begin(&p, greedy(8)).unwrap();
        e.prefill_start(usize::MAX).unwrap();
        assert!(c.drive_stages(&mut e, stages).unwrap(), "stages remain");
        e.abandon_pass();
        e.end_request();
        assert_eq!(run_split(&mut e, &mut c, &p, greedy(8)), run(&mut engine(), &p, greedy(8)), "{stages} stages, 2 shards");
        assert!(e.usage.cached_tokens > 0, "2 shards: the snapshot survives the abort");
    }
    // With no snapshot to go back to, the state is cleared.
    let mut e = engine();
    e.begin(&p2, greedy(8)).unwrap();
    e.prefill_start(usize::MAX).unwrap();
    assert!(e.run_local_for(0.0));
    e.abandon_pass();
    e.end_request();
    assert_eq!(run(&mut e, &p2, greedy(8)), want, "no snapshot");
    assert_eq!(e.usage.cached_tokens, 0);
}

#[test]
fn limits() {
    let mut e = engine();
    assert!(e.begin(&[], greedy(1)).is_err());
    assert!(e.begin(&vec![1; 300], greedy(1)).is_err());
    assert!(e.step().is_err()); // no request
    let out = run(&mut e, &P0, greedy(2));
    assert_eq!(out.len(), 2);
    e.begin(&P0, greedy(2)).unwrap();
    while e.step().unwrap().is_some() {}
    assert_eq!(e.finish_reason(), Some(FinishReason::Length));
}
