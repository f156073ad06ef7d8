// Does a split model do more work than the whole one? One whole model vs the same model as N shards
// run one after the other in this thread (`Cluster`), ms per decoded token. Native builds run the
// scalar kernels, so only the ratio means anything:
//   cargo run --profile fast --example split_timing -- model.gguf [N]
use clef_web::cluster::Cluster;
use clef_web::model::{Logits, Model, Scratch};
use clef_web::ops::Precision;
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(2);
    let file = std::fs::read(&path).unwrap();
    let whole = Model::from_bytes(&file).unwrap();
    let mut st = whole.new_state(64);
    let mut s = Scratch::default();
    whole.forward(&mut st, &[1, 2, 3], Logits::Last, Precision::Fast, &mut s).unwrap();
    let t = Instant::now();
    for i in 0..8 { whole.forward(&mut st, &[100 + i], Logits::Last, Precision::Fast, &mut s).unwrap(); }
    println!("whole: {:.1} ms/token", t.elapsed().as_secs_f64() * 1e3 / 8.0);
    drop(whole);
    let (m, mut c) = Cluster::from_bytes(&file, n, 64).unwrap();
    let mut n_past = 0;
    c.forward(&m, &mut n_past, 64, &[1, 2, 3], Logits::Last).unwrap();
    let t = Instant::now();
    for i in 0..8 { c.forward(&m, &mut n_past, 64, &[100 + i], Logits::Last).unwrap(); }
    println!("{n} shards in sequence: {:.1} ms/token", t.elapsed().as_secs_f64() * 1e3 / 8.0);
}
