//! The coordinator's side of the bands (`split.rs` [`Banded`]): before each FFN or LM-head
//! stage it cuts every band between its two holders so that each shard's share of the work
//! follows its speed in the stage just run, and after the stage it learns from the shards' times.
//!
//! ```text
//!   stage k:    shard times ms_s for work w_s  →  cost_s = (ms_s / w_s) / mean, and for the
//!               stage's kind K: bias_K,s ← average of cost_s on K / cost_s the stage before
//!   stage k+1:  of kind K: shard s wants its even share e_s / (cost_s × bias_K,s); the boundary
//!               between positions v, v+1 where the wants before it end (scaled to the rows),
//!               rounded to a piece of the band there (clamped to the band)
//! ```
//! The cut moves work, never results: the FFN's partial sums come back one per piece (the shard
//! at the front sums its own — they begin the sequence) and are added in the order of the
//! pieces, so a pass gives the same bits wherever the cuts fell. Prompts are balanced too: there
//! one shard can be slower for much of a pass (a Chromium shard worker's prompt FFN ran 15 %
//! slower from one layer on until `ops::host_call`, BENCHMARKS.md session 45), and a piece's
//! partial sum, T × D floats, is little next to its stage's products.

use crate::model::Stage;
use crate::split::{Balanced, Banded, Share};
use std::ops::Range;

/// What each shard computes of the current stage, and how the coordinator adds the results.
pub struct Balancer {
    split: Balanced,
    n: usize,
    /// Each shard's time per unit of work relative to the others', from the last stage it had work in.
    cost: Vec<f64>,
    /// Per kind of stage (mixer, FFN, head), each shard's cost there relative to its cost in the
    /// stage before, averaged: what the last stage does not tell of the next one. The host's
    /// bursts slow every kind of stage alike (bias 1); a shard that is slower at one kind of
    /// product is so stage after stage (as a Chromium shard worker's prompt FFN was, BENCHMARKS.md
    /// session 45).
    bias: [Vec<f64>; 3],
    /// The stage planned last.
    stage: Stage,
    /// The current stage: each shard's share, the order results are added in (shard indices),
    /// the units of work each was given (rows; a mixer stage: 1 each), and the vocabulary
    /// rows of each shard's logits (head).
    shares: Vec<Share>,
    order: Vec<usize>,
    work: Vec<f64>,
    head_rows: Vec<Range<usize>>,
    /// Stages planned with a cut other than the even one (a test's evidence that cuts moved).
    moved: usize,
}

impl Balancer {
    pub fn new(split: Balanced) -> Balancer {
        let n = split.head.shards();
        Balancer {
            split,
            n,
            cost: vec![1.0; n],
            bias: std::array::from_fn(|_| vec![1.0; n]),
            stage: Stage::Mixer(0),
            shares: vec![Share::default(); n],
            order: (0..n).collect(),
            work: vec![1.0; n],
            head_rows: vec![0..0; n],
            moved: 0,
        }
    }

    /// The shards' shares of `stage` ([`Balancer::shares`], [`Balancer::order`]).
    pub fn plan(&mut self, stage: Stage) {
        self.stage = stage;
        let b = match stage {
            Stage::Mixer(_) => {
                self.shares.fill(Share::default());
                self.order = (0..self.n).collect();
                self.work.fill(1.0);
                return;
            }
            Stage::Ffn(il) => &self.split.ffn[il],
            Stage::Head => &self.split.head,
        };
        let adaptive = b.per_band > 0;
        let cost: Vec<f64> = self.cost.iter().zip(&self.bias[kind(stage)]).map(|(c, b)| c * b).collect();
        let cuts = if adaptive { cuts(b, &cost) } else { b.even_cuts() };
        self.moved += usize::from(cuts != b.even_cuts());
        let ffn = matches!(stage, Stage::Ffn(_));
        for s in 0..self.n {
            let a = b.assigned(s, &cuts);
            let rows = b.rows(a.clone());
            self.work[s] = rows.len() as f64;
            self.head_rows[s] = rows;
            let held = b.held(s).start;
            self.shares[s] = Share {
                pieces: adaptive.then(|| a.start - held..a.end - held),
                separate: adaptive && ffn && b.position(s) > 0,
            };
        }
        self.order = if adaptive { (0..self.n).map(|v| b.shard_at(v)).collect() } else { (0..self.n).collect() };
    }

    /// Whether any stage has a band to cut.
    pub fn has_bands(&self) -> bool {
        self.split.head.per_band > 0 || self.split.ffn.iter().any(|b| b.per_band > 0)
    }

    /// How many stages so far were cut other than evenly.
    pub fn moved(&self) -> usize {
        self.moved
    }

    pub fn shares(&self) -> &[Share] {
        &self.shares
    }

    /// Shard indices in the order their results are added.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The units of work shard `s` has in the current stage (rows; a mixer stage: 1).
    pub fn work(&self, s: usize) -> f64 {
        self.work[s]
    }

    /// How many floats shard `s`'s result of the current stage over `rows` input rows of `d` has
    /// ([`Share::result_len`], as the shard sizes it).
    pub fn result_len(&self, s: usize, rows: usize, d: usize) -> usize {
        self.shares[s].result_len(self.stage, rows, d, self.head_rows[s].len())
    }

    /// The vocabulary rows of shard `s`'s logits in the current (head) stage.
    pub fn head_rows(&self, s: usize) -> Range<usize> {
        self.head_rows[s].clone()
    }

    /// Learns from the shards' compute times of the stage just planned (ms, by shard index).
    pub fn observe(&mut self, ms: &[f64]) {
        if ms.len() != self.n {
            return;
        }
        let per: Vec<Option<f64>> = (0..self.n).map(|s| (self.work[s] > 0.0 && ms[s] > 0.0).then(|| ms[s] / self.work[s])).collect();
        let known: Vec<f64> = per.iter().flatten().copied().collect();
        if known.len() < 2 {
            return;
        }
        let mean = known.iter().sum::<f64>() / known.len() as f64;
        let bias = &mut self.bias[kind(self.stage)];
        for ((c, b), p) in self.cost.iter_mut().zip(bias.iter_mut()).zip(per) {
            if let Some(p) = p {
                *b += BIAS_RATE * (p / mean / *c - *b);
                *c = p / mean;
            }
        }
    }
}

/// The index of `stage`'s kind in [`Balancer`]'s biases.
fn kind(stage: Stage) -> usize {
    match stage {
        Stage::Mixer(_) => 0,
        Stage::Ffn(_) => 1,
        Stage::Head => 2,
    }
}

/// How fast a kind of stage's bias follows what it sees (the weight of the newest stage).
const BIAS_RATE: f64 = 0.25;

/// Each band's cut for shards whose relative costs are `cost`: each shard's even share scaled by
/// its speed, the boundaries where those shares meet, to the nearest piece (at one speed: the
/// even cut).
fn cuts(b: &Banded, cost: &[f64]) -> Vec<usize> {
    let n = cost.len();
    let even = b.even_cuts();
    let want: Vec<f64> = (0..n).map(|v| b.rows(b.assigned(b.shard_at(v), &even)).len() as f64 / cost[b.shard_at(v)].max(1e-6)).collect();
    let total: f64 = want.iter().sum();
    let units = b.pieces.last().map_or(0, |r| r.end) as f64;
    let p = b.per_band;
    let mut before = 0.0;
    (0..n - 1)
        .map(|v| {
            before += want[v];
            let at = units * before / total;
            let band = b.band(v);
            let piece = band.len() as f64 / p as f64;
            ((at - band.start as f64) / piece).round().clamp(0.0, p as f64) as usize
        })
        .collect()
}
