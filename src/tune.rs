//! Choices made per machine by timing: two ways of computing the same thing, per weight type.
//!
//! Some kernel choices win on one CPU and lose on another (BENCHMARKS.md: touching the next row
//! ahead, the decode matvec's way to the memory's speed before its streams, gained 5–30 % on an
//! Intel Xeon and lost on an AMD EPYC; the int8 prompt GEMM's dot-add
//! form gains where the CPU has AVX-VNNI and loses where it has not). Nothing in a browser names
//! the CPU, so each wasm instance (each worker) times the real calls: for each weight type, the
//! calls large enough to time run variant A or B (a fixed pseudo-random sequence, so that no
//! layer's matrix always gets the same one) until each has [`TRIAL_CALLS`] timings after
//! [`TRIAL_WARMUP`]; the variant whose median rate is higher by [`TRIAL_MARGIN`] is then kept for
//! the instance's life, and the prior where neither is. Both variants must give results that do
//! not depend on which ran, beyond what the caller accepts (the GEMM's are bit for bit the same).

use crate::quant::GgmlType;

/// Timings per variant before deciding.
pub const TRIAL_CALLS: usize = 12;
/// Timings per variant thrown away first (V8 may still run a kernel's baseline code).
pub const TRIAL_WARMUP: usize = 2;
/// How much faster (median rate) a variant must be to replace the prior.
pub const TRIAL_MARGIN: f64 = 1.04;

const N_TYPES: usize = 64; // > every GgmlType discriminant

/// What one call does: a settled choice, or one timed for the trial (`true` = variant B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Fixed(bool),
    Trial(bool),
}

impl Plan {
    /// Runs `f` with this plan's choice; a trial call is timed, and `record` gets the choice and
    /// the milliseconds it took.
    pub fn run(self, f: impl FnOnce(bool), record: impl FnOnce(bool, f64)) {
        match self {
            Plan::Fixed(b) => f(b),
            Plan::Trial(b) => {
                let t0 = crate::bench::now_ms();
                f(b);
                record(b, crate::bench::now_ms() - t0);
            }
        }
    }
}

/// One per-type A/B trial (variant A = `false`, B = `true`).
pub struct Trial {
    /// Per type: `Some(b)` once decided.
    decided: [Option<bool>; N_TYPES],
    /// Per type and variant: rates (10⁹ units of work a second) of the timed calls.
    samples: [[Vec<f32>; 2]; N_TYPES],
    /// Per type: calls seen, per variant (warm-up included).
    seen: [[usize; 2]; N_TYPES],
    rng: u32,
}

impl Trial {
    pub const fn new() -> Trial {
        const NONE: [Vec<f32>; 2] = [Vec::new(), Vec::new()];
        Trial { decided: [None; N_TYPES], samples: [NONE; N_TYPES], seen: [[0; 2]; N_TYPES], rng: 0x9e37_79b9 }
    }

    /// The plan for a call of `ty` that the caller has found worth timing (`timed`), with `prior`
    /// the choice while undecided and for untimed calls.
    pub fn plan(&mut self, ty: GgmlType, prior: bool, timed: bool) -> Plan {
        let i = ty as usize;
        if let Some(b) = self.decided(ty) {
            return Plan::Fixed(b);
        }
        if !timed || i >= N_TYPES {
            return Plan::Fixed(prior);
        }
        // xorshift32: a fixed sequence of variants, the same in every run.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 17;
        self.rng ^= self.rng << 5;
        let mut v = (self.rng >> 16) as usize & 1;
        if self.samples[i][v].len() >= TRIAL_CALLS {
            v ^= 1; // this variant has its timings: the other one runs
        }
        Plan::Trial(v == 1)
    }

    /// The choice for `ty` once its trial has ended.
    pub fn decided(&self, ty: GgmlType) -> Option<bool> {
        self.decided.get(ty as usize).copied().flatten()
    }

    /// Records one timed call (`work` units in `ms`); decides `ty` once both variants have their
    /// timings.
    pub fn record(&mut self, ty: GgmlType, b: bool, prior: bool, work: f64, ms: f64) {
        let (i, v) = (ty as usize, b as usize);
        if i >= N_TYPES || self.decided[i].is_some() {
            return;
        }
        self.seen[i][v] += 1;
        if self.seen[i][v] > TRIAL_WARMUP && self.samples[i][v].len() < TRIAL_CALLS {
            // A clock that did not move (browsers coarsen it to 0.1 ms) counts as half a tick.
            self.samples[i][v].push((work / ms.max(0.05) / 1e6) as f32);
        }
        if self.samples[i].iter().all(|s| s.len() >= TRIAL_CALLS) {
            let [a, b] = [median(&self.samples[i][0]), median(&self.samples[i][1])];
            self.decided[i] = Some(if b > TRIAL_MARGIN * a {
                true
            } else if a > TRIAL_MARGIN * b {
                false
            } else {
                prior
            });
        }
    }

    /// Per type that has been tried: (type, decision, median rate of A, of B) in 10⁹ units of
    /// work a second (NaN where a variant has no timing yet).
    pub fn report(&self) -> Vec<(GgmlType, Option<bool>, f64, f64)> {
        GgmlType::ALL
            .iter()
            .filter(|ty| (**ty as usize) < N_TYPES && self.seen[**ty as usize].iter().any(|&n| n > 0))
            .map(|&ty| {
                let i = ty as usize;
                let med = |v: usize| if self.samples[i][v].is_empty() { f64::NAN } else { median(&self.samples[i][v]) };
                (ty, self.decided[i], med(0), med(1))
            })
            .collect()
    }
}

impl Default for Trial {
    fn default() -> Trial {
        Trial::new()
    }
}

fn median(v: &[f32]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f32::total_cmp);
    s[s.len() / 2] as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a trial to its end with B calls taking `ms_b` and A calls `ms_a`; returns the decision.
    fn run(prior: bool, ms_a: f64, ms_b: f64) -> (bool, Trial) {
        let mut t = Trial::new();
        let ty = GgmlType::Q4_K;
        for _ in 0..1000 {
            match t.plan(ty, prior, true) {
                Plan::Trial(b) => t.record(ty, b, prior, 4e6, if b { ms_b } else { ms_a }),
                Plan::Fixed(b) => return (b, t),
            }
        }
        panic!("the trial never ended");
    }

    #[test]
    fn the_faster_variant_is_kept_and_a_tie_keeps_the_prior() {
        assert!(run(false, 2.0, 1.0).0, "B twice as fast");
        assert!(!run(true, 1.0, 2.0).0, "A twice as fast");
        assert!(run(true, 1.0, 1.01).0 && !run(false, 1.01, 1.0).0, "a tie keeps the prior");
        let (_, t) = run(false, 2.0, 1.0);
        let r = t.report();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].1, Some(true));
        assert!((r[0].2 - 2.0).abs() < 1e-6 && (r[0].3 - 4.0).abs() < 1e-6, "{r:?}");
        // Untimed calls take the prior and count for nothing.
        let mut t = Trial::new();
        assert_eq!(t.plan(GgmlType::Q2_K, true, false), Plan::Fixed(true));
        assert!(t.report().is_empty());
    }
}
