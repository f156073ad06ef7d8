//! Picking the next token from logits: logit bias → penalties → greedy, or top-k → temperature →
//! softmax → top-p → min-p → a draw from a seeded RNG (the order of llama.cpp's default chain).
//!
//! Log-probabilities (OpenAI's `logprobs` / `top_logprobs`) are those of the **model's own
//! distribution**: the log-softmax of the raw logits over the whole vocabulary, at temperature 1,
//! before logit bias, penalties, truncation (top-k / top-p / min-p) and any grammar mask — what
//! OpenAI reports, and what llama.cpp's server reports only with `post_sampling_probs: false`
//! (by default it reports the probabilities left after its sampling chain). So a token the
//! sampler was forced to pick (a constraint, a bias) can have a low log-probability: it tells how
//! much the model itself believed in it. [`Distribution`] is the one place this is computed.

use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// 0 ⇒ greedy (argmax, lowest id on ties).
    pub temperature: f32,
    /// 0 ⇒ no top-k cut.
    pub top_k: usize,
    /// 1 ⇒ off.
    pub top_p: f32,
    /// 0 ⇒ off.
    pub min_p: f32,
    /// 1 ⇒ off. Divides positive / multiplies negative logits of recently seen tokens.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every recently seen token.
    pub presence_penalty: f32,
    /// Subtracted per occurrence.
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    /// Added to the logits of the given ids (−inf bans a token).
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: Vec::new(),
            seed: 0x00c1_ef00,
        }
    }
}

impl SamplerParams {
    pub fn greedy() -> Self {
        SamplerParams { temperature: 0.0, ..Default::default() }
    }
}

/// A token sampler with its RNG and the history its penalties look at.
pub struct Sampler {
    pub params: SamplerParams,
    rng: SplitMix64,
    history: Vec<u32>,
}

impl Sampler {
    pub fn new(params: SamplerParams) -> Sampler {
        let rng = SplitMix64(params.seed);
        Sampler { params, rng, history: Vec::new() }
    }

    /// Records a token (prompt or generated) for the penalties.
    pub fn accept(&mut self, tok: u32) {
        self.history.push(tok);
    }

    /// Chooses the next token. `logits` is modified (bias and penalties applied).
    pub fn sample(&mut self, logits: &mut [f32]) -> u32 {
        let p = &self.params;
        for &(id, b) in &p.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += b;
            }
        }
        let penalised = p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        if penalised && p.penalty_last_n > 0 {
            let start = self.history.len().saturating_sub(p.penalty_last_n);
            let mut counts: HashMap<u32, u32> = HashMap::new();
            for &t in &self.history[start..] {
                *counts.entry(t).or_default() += 1;
            }
            for (&t, &n) in &counts {
                if let Some(l) = logits.get_mut(t as usize) {
                    if *l > 0.0 {
                        *l /= p.repetition_penalty;
                    } else {
                        *l *= p.repetition_penalty;
                    }
                    *l -= p.presence_penalty + n as f32 * p.frequency_penalty;
                }
            }
        }
        if p.temperature <= 0.0 {
            return argmax(logits);
        }

        // Candidates, best first (top-k via partial selection).
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, l))
            .collect();
        if cand.is_empty() {
            return argmax(logits);
        }
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < cand.len() {
            cand.select_nth_unstable_by(p.top_k - 1, by_logit);
            cand.truncate(p.top_k);
        }
        cand.sort_unstable_by(by_logit);

        // Softmax with temperature.
        let max = cand[0].1;
        let mut probs: Vec<f32> = cand.iter().map(|c| ((c.1 - max) / p.temperature).exp()).collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);

        // top-p: smallest prefix with cumulative probability ≥ top_p.
        let mut keep = probs.len();
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, &pr) in probs.iter().enumerate() {
                cum += pr;
                if cum >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        // min-p: drop tokens below min_p × the best probability.
        if p.min_p > 0.0 {
            let floor = p.min_p * probs[0];
            keep = keep.min(probs.iter().take_while(|&&pr| pr >= floor).count().max(1));
        }
        let total: f32 = probs[..keep].iter().sum();
        let mut r = self.rng.next_f32() * total;
        for i in 0..keep {
            r -= probs[i];
            if r <= 0.0 {
                return cand[i].0;
            }
        }
        cand[keep - 1].0
    }
}

/// Most alternatives `top_logprobs` may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// The model's distribution at one step, as much of it as `logprobs` reports: `log Σ exp(logits)`
/// (so any token's log-probability is `logit − log_z`) and the `n` most likely tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    /// log Σ_v exp(logit_v), over the whole vocabulary (accumulated in f64).
    pub log_z: f64,
    /// The `n` most likely (id, log-probability), most likely first (lowest id on ties).
    pub top: Vec<(u32, f32)>,
}

impl Distribution {
    /// Reads the raw logits (call it before the sampler changes them). O(vocab) + O(n log n).
    pub fn of(logits: &[f32], n: usize) -> Distribution {
        let max = logits.iter().copied().filter(|l| l.is_finite()).fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
        let log_z = max as f64 + sum.ln();
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let mut top: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
        // One pass keeping the best n (n ≤ 20, so a sorted insert is cheapest).
        for (i, &l) in logits.iter().enumerate() {
            if n == 0 || !l.is_finite() || (top.len() == n && by_logit(&(i as u32, l), &top[n - 1]) != std::cmp::Ordering::Less) {
                continue;
            }
            let at = top.partition_point(|t| by_logit(t, &(i as u32, l)) == std::cmp::Ordering::Less);
            top.insert(at, (i as u32, l));
            top.truncate(n);
        }
        let top = top.into_iter().map(|(i, l)| (i, (l as f64 - log_z) as f32)).collect();
        Distribution { log_z, top }
    }

    /// The log-probability of a token whose raw logit is `logit`.
    pub fn logprob(&self, logit: f32) -> f32 {
        (logit as f64 - self.log_z) as f32
    }

    /// What a generated token reports: its own log-probability and the alternatives.
    pub fn token(self, raw_logit: f32) -> TokenLogprobs {
        TokenLogprobs { logprob: self.logprob(raw_logit), top: self.top }
    }
}

/// One generated token's log-probability under the model and the most likely alternatives
/// (see [`Distribution`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// (id, log-probability), most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Index of the largest value (lowest index on ties), as the fixtures' greedy decoding does.
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// SplitMix64: small, fast, good enough for sampling; identical on every platform.
struct SplitMix64(u64);
impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn greedy_picks_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplerParams::greedy());
        assert_eq!(s.sample(&mut [1.0, 3.0, 3.0, 2.0]), 1);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 17) as f32 * 0.3).collect();
        let params = SamplerParams { temperature: 1.0, top_k: 3, top_p: 1.0, min_p: 0.0, seed: 42, ..Default::default() };
        let draw = |p: &SamplerParams| {
            let mut s = Sampler::new(p.clone());
            (0..50).map(|_| s.sample(&mut logits.clone())).collect::<Vec<_>>()
        };
        let a = draw(&params);
        assert_eq!(a, draw(&params));
        // The three best logits (16 * 0.3) are ids 16, 33, 50 … the top 3 by (logit desc, id asc).
        assert!(a.iter().all(|t| [16, 33, 50].contains(t)), "{a:?}");
        assert!(a.iter().collect::<std::collections::HashSet<_>>().len() > 1);
    }

    #[test]
    fn penalties_and_bias() {
        let mut s = Sampler::new(SamplerParams { repetition_penalty: 2.0, presence_penalty: 0.5, ..SamplerParams::greedy() });
        s.accept(0);
        let mut l = vec![2.0, 1.2, -1.0];
        assert_eq!(s.sample(&mut l), 1); // 2.0 / 2 − 0.5 = 0.5 < 1.2
        assert_eq!(l[0], 0.5);
        let mut s = Sampler::new(SamplerParams { logit_bias: vec![(2, 10.0)], ..SamplerParams::greedy() });
        assert_eq!(s.sample(&mut [2.0, 1.2, -1.0]), 2);
    }

    #[test]
    fn distribution_is_the_log_softmax_and_its_top_is_sorted() {
        let logits = [1.0f32, 3.0, 3.0, -2.0, 0.5, f32::NEG_INFINITY];
        let d = Distribution::of(&logits, 3);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        assert!((d.log_z - z.ln()).abs() < 1e-12);
        assert_eq!(d.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2, 0]); // ties: lowest id first
        assert!((d.top[0].1 - (3.0 - z.ln()) as f32).abs() < 1e-6);
        assert_eq!(d.logprob(-2.0), (-2.0 - z.ln()) as f32);
        assert_eq!(d.logprob(f32::NEG_INFINITY), f32::NEG_INFINITY);
        let p: f64 = logits.iter().map(|&l| (d.logprob(l) as f64).exp()).sum();
        assert!((p - 1.0).abs() < 1e-6);
        assert!(Distribution::of(&logits, 0).top.is_empty());
        assert_eq!(Distribution::of(&logits, 10).top.len(), 5, "banned (−inf) tokens are no alternatives");
    }

    #[test]
    fn min_p_keeps_only_likely_tokens() {
        let params = SamplerParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.5, seed: 1, ..Default::default() };
        let mut s = Sampler::new(params);
        for _ in 0..100 {
            assert_eq!(s.sample(&mut [5.0, 0.0, 0.0, 0.0]), 0);
        }
    }
}
