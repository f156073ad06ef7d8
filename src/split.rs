//! Tensor parallelism: which part of every weight matrix each of N shards holds.
//!
//! The model is split by heads, so that a layer costs two exchanges and the shards never talk to
//! each other (Megatron-style; ARCHITECTURE.md "Several workers"):
//!
//! ```text
//!                 coordinator                          shard s (of N)
//! mixer stage:    x = rmsnorm(h) ──────────────────►  its heads: DeltaNet qkv/z/β/α rows + conv + recurrence,
//!                                                      or attention q/k/v rows + its KV cache
//!                 h += Σ_s partial_s ◄──────────────  partial_s = o_s · W_out[:, its columns]
//! ffn stage:      x = rmsnorm(h) ──────────────────►  its rows of gate/up, its columns of down
//!                 h += Σ_s partial_s ◄──────────────  partial_s
//! head stage:     x = rmsnorm(h_last) ─────────────►  its vocabulary rows of the LM head → its logits
//! ```
//!
//! Every output-row split (qkv, z, β, α, q, k, v, gate, up, output) can cut anywhere; every
//! input-column split (ssm_out, attn_output, ffn_down) must cut at the weight type's block
//! boundaries (32 or 256 elements), so the split unit is a group of heads (or of FFN rows) whose
//! columns are whole blocks. Where a layer cannot be cut (e.g. one 256-element block per row),
//! its whole mixer goes to one shard, rotating with the layer index so that the load evens out.
//!
//! DeltaNet: value head j reads key head j % Hk ("tiled" order), so a shard owns a range of key
//! heads [a, b) and the value heads {kh + m·Hk : kh ∈ [a, b), m < Hv/Hk}. Listed in that order,
//! local value head lj reads local key head lj % (b − a): the recurrence runs unchanged on a
//! smaller model. Attention: a shard owns query heads [a, b) and the KV heads they read
//! ([a/g, (b−1)/g] with g = H/Hkv query heads per KV head); when two shards share a KV head both
//! compute it (only when there are more shards than KV heads).
//!
//! Bands. Shards on one machine do not run at one speed: the host's other work lands on one of
//! them for a few hundred milliseconds, and every stage waits for the slowest (9–12 % of a
//! 2-worker decode, BENCHMARKS.md session 43). The stages without state — the FFN and the LM
//! head — can move work between shards token by token: a band of FFN rows (vocabulary rows) at
//! each boundary between two neighbouring shards is held by both, cut into pieces, and the
//! coordinator decides per stage which of the two computes which pieces ([`Banded`],
//! `balance.rs`). A piece is also a unit of summation: the FFN's partial sums are added piece by
//! piece in a fixed order, so the result does not depend on where the cut fell.

use crate::model::{Config, Stage};
use crate::quant::GgmlType;
use std::ops::Range;

/// Shard `index` of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardId {
    pub index: usize,
    pub count: usize,
    /// How wide each band between two neighbours is, in percent of one shard's even share of
    /// the FFN rows and of the vocabulary (0: no bands). A shard at an end holds half a band
    /// more than its share, one in the middle a whole band more.
    pub band_pct: usize,
}

impl ShardId {
    /// The whole model in one shard.
    pub const WHOLE: ShardId = ShardId { index: 0, count: 1, band_pct: 0 };
}

/// The band width [`crate::cluster::Cluster`] uses, and what the browser's `band` load option
/// (off by default) is measured with ([`ShardId::band_pct`]): with two shards 25 %
/// of the FFN rows and of the vocabulary are held by both, each shard holding 25 % more FFN and
/// LM-head rows than its half. Replayed on session 43's traced 2-worker decodes (BENCHMARKS.md),
/// these bands cut as `balance.rs` cuts them would have saved 5.0 % (Q2_K) and 4.4 % (IQ2_M) of
/// the time; 17 % bands 3.9 % and 3.4 %.
pub const BAND_PCT: usize = 50;

/// Pieces per band. An FFN piece is a partial sum and a product of its own, which costs time
/// per product: in two the even split is the core and one piece (the replay saved as much as
/// with four or eight — a late shard is late by far, and the cut goes to the band's end). An LM
/// head's pieces are only rows: finer costs nothing.
const FFN_PIECES: usize = 2;
const HEAD_PIECES: usize = 16;

/// How a tensor is cut for one shard (element indices; column ranges are block-aligned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cut {
    Whole,
    /// These rows (output features), in this order.
    Rows(Vec<Range<usize>>),
    /// These columns (input features) of every row, in this order.
    Cols(Vec<Range<usize>>),
    /// These column ranges, each stored as a matrix of its own (all its rows), one after the other.
    Pieces(Vec<Range<usize>>),
}

/// A DeltaNet layer's part: key heads [a, b) and the value heads that read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaNetPart {
    pub k_heads: Range<usize>,
    /// Value heads in local order (m-major: kh + m·Hk for m < Hv/Hk, kh ∈ k_heads).
    pub v_heads: Vec<Range<usize>>,
}

impl DeltaNetPart {
    pub fn n_k(&self) -> usize {
        self.k_heads.len()
    }
    pub fn n_v(&self) -> usize {
        self.v_heads.iter().map(|r| r.len()).sum()
    }
}

/// An attention layer's part: query heads [a, b) and the KV heads they read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionPart {
    pub heads: Range<usize>,
    pub kv_heads: Range<usize>,
}

/// One balanced dimension of a stage — a layer's FFN rows or the vocabulary — cut into pieces,
/// in order along it:
///
/// ```text
///   core 0 | band 0: P pieces | core 1 | band 1: P pieces | … | core N−1
/// ```
/// The shard at virtual position v (the layer's rotation, as [`group_range`]) holds core v and
/// the bands on both sides of it; the coordinator cuts each band between its two holders (`cut`
/// pieces to the left one, [`Banded::assigned`]). With P = 0 the pieces are the N cores (no band).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Banded {
    /// Element ranges, in order; together exactly the whole dimension.
    pub pieces: Vec<Range<usize>>,
    /// P: pieces per band.
    pub per_band: usize,
    n: usize,
    rot: usize,
}

impl Banded {
    /// `units` elements in groups of `g` (a column split's whole blocks) over `n` shards rotated
    /// by `rot`; bands of about `pct` % of a shard's share, in at most `pieces` (even) pieces of
    /// whole groups, and only where every core keeps a group.
    fn new(units: usize, g: usize, n: usize, rot: usize, pct: usize, pieces: usize) -> Banded {
        let groups = units / g;
        let band = pct * groups / (100 * n);
        let mut p = pieces.min(band) & !1;
        let q = band.checked_div(p).unwrap_or(0);
        if n < 2 || p == 0 || groups / n < p * q + 1 {
            p = 0;
        }
        let half = p / 2 * q; // groups of a band on each side of the even boundary
        let mut out = Vec::with_capacity(n * (p + 1));
        for v in 0..n {
            let start = if v == 0 { 0 } else { v * groups / n + half };
            let end = if v + 1 == n { groups } else { (v + 1) * groups / n - half };
            out.push(start * g..end * g);
            if v + 1 < n {
                out.extend((0..p).map(|i| (end + i * q) * g..(end + (i + 1) * q) * g));
            }
        }
        Banded { pieces: out, per_band: p, n, rot }
    }

    /// The virtual position of shard `s` (its place along the dimension).
    pub fn position(&self, s: usize) -> usize {
        (s + self.n - self.rot % self.n) % self.n
    }

    /// The shard at virtual position `v`.
    pub fn shard_at(&self, v: usize) -> usize {
        (v + self.rot) % self.n
    }

    /// The pieces (indices) shard `s` holds: its core and the bands beside it.
    pub fn held(&self, s: usize) -> Range<usize> {
        let (p, c) = (self.per_band, self.position(s) * (self.per_band + 1));
        c.saturating_sub(p)..(c + p + 1).min(self.pieces.len())
    }

    /// The pieces (indices) shard `s` computes when band b's first `cuts[b]` pieces go to its
    /// left holder (`cuts[b]` ≤ P, one per band).
    pub fn assigned(&self, s: usize, cuts: &[usize]) -> Range<usize> {
        let (v, p) = (self.position(s), self.per_band);
        let start = if v == 0 { 0 } else { (v - 1) * (p + 1) + 1 + cuts[v - 1] };
        let end = if v + 1 == self.n { self.pieces.len() } else { v * (p + 1) + 1 + cuts[v] };
        start..end
    }

    /// How many shards share the dimension.
    pub fn shards(&self) -> usize {
        self.n
    }

    /// The elements of pieces `p` (indices).
    pub fn rows(&self, p: Range<usize>) -> Range<usize> {
        span(&self.pieces, p)
    }

    /// The elements of the band between positions `v` and `v + 1`.
    pub fn band(&self, v: usize) -> Range<usize> {
        let first = v * (self.per_band + 1) + 1;
        self.rows(first..first + self.per_band)
    }

    /// The cut that gives every shard its even share.
    pub fn even_cuts(&self) -> Vec<usize> {
        vec![self.per_band / 2; self.n - 1]
    }

    /// Shard `s`'s part: the pieces it holds and those it computes without a cut (`None`: it
    /// holds nothing).
    fn held_part(&self, s: usize) -> Option<Held> {
        let held = self.held(s);
        let even = self.assigned(s, &self.even_cuts());
        let pieces: Vec<Range<usize>> = self.pieces[held.clone()].to_vec();
        (pieces.iter().any(|r| !r.is_empty()))
            .then(|| Held { pieces, even: even.start - held.start..even.end - held.start })
    }
}

/// What one shard holds of a balanced dimension: consecutive pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// Element ranges of the pieces, in order (touching).
    pub pieces: Vec<Range<usize>>,
    /// The pieces (indices into `pieces`) it computes when the split is even.
    pub even: Range<usize>,
}

impl Held {
    /// All the elements held.
    pub fn range(&self) -> Range<usize> {
        self.pieces[0].start..self.pieces[self.pieces.len() - 1].end
    }
    /// The elements of pieces `p`.
    pub fn rows(&self, p: Range<usize>) -> Range<usize> {
        span(&self.pieces, p)
    }
}

/// The elements of `pieces[p]` (touching ranges in order).
fn span(pieces: &[Range<usize>], p: Range<usize>) -> Range<usize> {
    if p.is_empty() {
        return 0..0;
    }
    pieces[p.start].start..pieces[p.end - 1].end
}

/// What a shard computes of a balanced stage (FFN, LM head): pieces `[start, end)` of those it
/// holds (`None`: its even share), and whether it returns one partial sum per piece (`separate`;
/// FFN only) or their sum. Mixer stages have nothing to share.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Share {
    pub pieces: Option<Range<usize>>,
    pub separate: bool,
}

impl Share {
    /// How many floats a shard's result of `stage` over `rows` input rows of width `d` has with
    /// this share: a mixer's, or an FFN's summed partial, rows × d; an FFN's separate partials
    /// rows × d each; the head's logits rows × `head_rows` (its vocabulary rows). One definition
    /// for the shard that writes the result and the coordinator that sizes it.
    pub fn result_len(&self, stage: Stage, rows: usize, d: usize, head_rows: usize) -> usize {
        match stage {
            Stage::Head => rows * head_rows,
            Stage::Ffn(_) if self.separate => rows * d * self.pieces.as_ref().map_or(0, |p| p.len()),
            _ => rows * d,
        }
    }
}

/// How the balanced stages of every layer and the LM head are cut (one definition for the
/// shards' plans and the coordinator's balancer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Balanced {
    pub ffn: Vec<Banded>,
    pub head: Banded,
}

impl Balanced {
    pub fn new(cfg: &Config, count: usize, band_pct: usize, blocks: impl Fn(usize) -> LayerBlocks) -> Balanced {
        let ffn = (0..cfg.n_layer)
            .map(|il| {
                let g = group_size(cfg.n_ff, 1, blocks(il).ffn_down);
                // Rotated one step further than the mixer: where a layer has fewer groups than
                // shards, a shard left without heads tends to get FFN rows.
                Banded::new(cfg.n_ff, g, count, il + 1, band_pct, FFN_PIECES)
            })
            .collect();
        // Vocabulary rows: any cut works, but an interleaved head's pieces must be whole groups
        // of four rows (in 256s where they divide; no band where not even 4 do).
        let g = [256, 4, 1].into_iter().find(|g| cfg.n_vocab % g == 0).unwrap_or(1);
        let pct = if g < 4 { 0 } else { band_pct };
        Balanced { ffn, head: Banded::new(cfg.n_vocab, g, count, 0, pct, HEAD_PIECES) }
    }

    /// [`Balanced::new`] from a model's tensor types (`ty_of(name)`), as [`ShardPlan::for_tensors`].
    pub fn for_tensors(cfg: &Config, count: usize, band_pct: usize, ty_of: impl Fn(&str) -> Option<GgmlType>) -> Balanced {
        Balanced::new(cfg, count, band_pct, |il| layer_blocks(cfg, il, &ty_of))
    }
}

/// One layer's part; `None` fields: this shard has no work there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerPart {
    pub deltanet: Option<DeltaNetPart>,
    pub attention: Option<AttentionPart>,
    /// FFN hidden rows (gate/up rows, down columns).
    pub ffn: Option<Held>,
}

/// Everything one shard holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardPlan {
    pub id: ShardId,
    pub layers: Vec<LayerPart>,
    /// LM-head rows (vocabulary ids).
    pub vocab: Option<Held>,
}

/// Block sizes of the column-split tensors of one layer (what constrains the cut).
#[derive(Clone, Copy, Debug)]
pub struct LayerBlocks {
    /// ssm_out or attn_output.
    pub mixer_out: usize,
    pub ffn_down: usize,
}

/// Ranges of `n_groups` groups for shard `s` of `n`, rotated by `rot` so that layers whose
/// groups are fewer than the shards do not all load shard 0. Balanced: sizes differ by ≤ 1.
fn group_range(n_groups: usize, s: usize, n: usize, rot: usize) -> Range<usize> {
    let v = (s + n - rot % n) % n; // virtual position of this shard for this layer
    (v * n_groups / n)..((v + 1) * n_groups / n)
}

/// The smallest number of consecutive units (heads of `unit` elements, `n_units` of them) whose
/// columns are whole `block`s, or `n_units` when no smaller group is (the layer is not cut).
fn group_size(n_units: usize, unit: usize, block: usize) -> usize {
    (1..=n_units)
        .find(|&g| n_units % g == 0 && (g * unit) % block == 0)
        .unwrap_or(n_units)
}

impl ShardPlan {
    /// The plan of shard `id` for a model with `cfg` whose layer `il` has column blocks `blocks(il)`.
    pub fn new(cfg: &Config, id: ShardId, blocks: impl Fn(usize) -> LayerBlocks) -> ShardPlan {
        let n = id.count;
        let s = id.index;
        let bal = Balanced::new(cfg, n, id.band_pct, &blocks);
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for il in 0..cfg.n_layer {
            let b = blocks(il);
            let (mut deltanet, mut attention) = (None, None);
            if cfg.recurrent[il] {
                let (hk, hv, ds) = (cfg.n_k_heads, cfg.n_v_heads, cfg.d_state);
                // Key heads in groups whose value-head columns (g·Ds per m) are whole blocks;
                // the m-th copy starts at m·Hk·Ds, so Hk·Ds must be whole blocks too.
                let g = if (hk * ds) % b.mixer_out == 0 { group_size(hk, ds, b.mixer_out) } else { hk };
                let r = group_range(hk / g, s, n, il);
                if !r.is_empty() {
                    let k_heads = r.start * g..r.end * g;
                    let v_heads = merge((0..hv / hk).map(|m| k_heads.start + m * hk..k_heads.end + m * hk));
                    deltanet = Some(DeltaNetPart { k_heads, v_heads });
                }
            } else {
                let (h, dh) = (cfg.n_head, cfg.head_dim);
                let per_kv = h / cfg.n_head_kv.max(1);
                let mut g = group_size(h, dh, b.mixer_out);
                // Whole KV groups when there are enough of them: no KV head computed twice.
                let whole_kv = g * per_kv / gcd(g, per_kv);
                if h % whole_kv == 0 && h / whole_kv >= n {
                    g = whole_kv;
                }
                let r = group_range(h / g, s, n, il);
                if !r.is_empty() {
                    let heads = r.start * g..r.end * g;
                    let kv_heads = heads.start / per_kv..(heads.end - 1) / per_kv + 1;
                    attention = Some(AttentionPart { heads, kv_heads });
                }
            }
            layers.push(LayerPart { deltanet, attention, ffn: bal.ffn[il].held_part(s) });
        }
        ShardPlan { id, layers, vocab: bal.head.held_part(s) }
    }

    /// Bytes of recurrent + conv state per sequence, and of K+V cache per token (f32), of this
    /// shard's heads: the one formula for the state's memory.
    pub fn state_bytes(&self, cfg: &Config) -> (usize, usize) {
        let (mut rec, mut kv) = (0, 0);
        for l in &self.layers {
            if let Some(d) = &l.deltanet {
                let conv_dim = (2 * d.n_k() + d.n_v()) * cfg.d_state;
                rec += 4 * (d.n_v() * cfg.d_state * cfg.d_state + (cfg.conv_kernel - 1) * conv_dim);
            }
            if let Some(a) = &l.attention {
                kv += 4 * 2 * a.kv_heads.len() * cfg.head_dim;
            }
        }
        (rec, kv)
    }

    /// The plan from a model's tensor types (`ty_of(name)`; absent tensors count as 32-element blocks).
    pub fn for_tensors(cfg: &Config, id: ShardId, ty_of: impl Fn(&str) -> Option<GgmlType>) -> ShardPlan {
        ShardPlan::new(cfg, id, |il| layer_blocks(cfg, il, &ty_of))
    }

    /// How shard tensor `name` is cut (`None`: this shard does not hold it). Tensors of the
    /// coordinator (embeddings, norms of the residual stream) are not in any shard plan, except
    /// `token_embd.weight` when it doubles as the LM head (tied output).
    #[allow(clippy::single_range_in_vec_init)] // a cut is a list of ranges, often of one
    pub fn cut(&self, cfg: &Config, name: &str) -> Option<Cut> {
        if name == "output.weight" || (name == "token_embd.weight" && cfg.tied_output) {
            return self.vocab.as_ref().map(|h| Cut::Rows(vec![h.range()]));
        }
        let rest = name.strip_prefix("blk.")?;
        let (il, tname) = rest.split_once('.')?;
        let il: usize = il.parse().ok()?;
        let part = self.layers.get(il)?;
        let ds = cfg.d_state;
        match tname {
            "ffn_gate.weight" | "ffn_up.weight" => part.ffn.as_ref().map(|h| Cut::Rows(vec![h.range()])),
            // Each piece's columns a matrix of their own: a piece's partial sum is one product.
            "ffn_down.weight" => part.ffn.as_ref().map(|h| Cut::Pieces(h.pieces.clone())),
            _ => {
                if let Some(p) = &part.deltanet {
                    let hk = cfg.n_k_heads;
                    let scale = |r: &Range<usize>, k: usize| r.start * k..r.end * k;
                    let v_rows: Vec<Range<usize>> = p.v_heads.iter().map(|r| scale(r, ds)).collect();
                    return match tname {
                        "attn_qkv.weight" | "ssm_conv1d.weight" => {
                            let mut rows = vec![scale(&p.k_heads, ds), hk * ds + p.k_heads.start * ds..hk * ds + p.k_heads.end * ds];
                            rows.extend(v_rows.iter().map(|r| 2 * hk * ds + r.start..2 * hk * ds + r.end));
                            Some(Cut::Rows(rows))
                        }
                        "attn_gate.weight" => Some(Cut::Rows(v_rows)),
                        "ssm_beta.weight" | "ssm_alpha.weight" => Some(Cut::Rows(p.v_heads.clone())),
                        "ssm_a" | "ssm_dt.bias" => Some(Cut::Cols(p.v_heads.clone())),
                        "ssm_norm.weight" => Some(Cut::Whole),
                        "ssm_out.weight" => Some(Cut::Cols(v_rows)),
                        _ => None,
                    };
                }
                if let Some(p) = &part.attention {
                    let dh = cfg.head_dim;
                    return match tname {
                        "attn_q.weight" => Some(Cut::Rows(vec![p.heads.start * 2 * dh..p.heads.end * 2 * dh])),
                        "attn_k.weight" | "attn_v.weight" => Some(Cut::Rows(vec![p.kv_heads.start * dh..p.kv_heads.end * dh])),
                        "attn_q_norm.weight" | "attn_k_norm.weight" => Some(Cut::Whole),
                        "attn_output.weight" => Some(Cut::Cols(vec![p.heads.start * dh..p.heads.end * dh])),
                        _ => None,
                    };
                }
                None
            }
        }
    }
}

/// Layer `il`'s column blocks from the tensor types (absent tensors count as 32-element blocks).
fn layer_blocks(cfg: &Config, il: usize, ty_of: impl Fn(&str) -> Option<GgmlType>) -> LayerBlocks {
    let block = |name: String| ty_of(&name).map(|t| t.block_elems()).unwrap_or(32);
    LayerBlocks {
        mixer_out: if cfg.recurrent[il] { block(format!("blk.{il}.ssm_out.weight")) } else { block(format!("blk.{il}.attn_output.weight")) },
        ffn_down: block(format!("blk.{il}.ffn_down.weight")),
    }
}

/// Whether the coordinator (the instance that embeds tokens, normalises the residual stream and
/// samples) holds tensor `name`: those, and a `clef` file's decision head (`decision.*`,
/// `dec.blk.*`, `token_types.weight`), which runs on the coordinator's hidden rows.
pub fn coordinator_holds(name: &str) -> bool {
    name == "token_embd.weight"
        || name == "output_norm.weight"
        || name.starts_with("decision.")
        || name.starts_with("dec.blk.")
        || name == "token_types.weight"
        || name.strip_prefix("blk.").and_then(|r| r.split_once('.')).is_some_and(|(_, t)| {
            t == "attn_norm.weight" || t == "post_attention_norm.weight"
        })
}

/// Ranges in order with touching neighbours joined (a whole layer's value heads are one range).
fn merge(ranges: impl Iterator<Item = Range<usize>>) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn cfg_9b() -> Config {
        Config {
            arch: "qwen35".into(),
            n_vocab: 248320,
            n_embd: 4096,
            n_layer: 32,
            n_ff: 12288,
            n_head: 16,
            n_head_kv: 4,
            head_dim: 256,
            eps: 1e-6,
            rope_base: 1e7,
            n_rot: 64,
            attn_scale: 1.0 / 16.0,
            conv_kernel: 4,
            d_state: 128,
            n_k_heads: 16,
            n_v_heads: 32,
            recurrent: (0..32).map(|i| (i + 1) % 4 != 0).collect(),
            context_length: 262144,
            tied_output: false,
        }
    }

    /// Every head, FFN row and vocabulary row is computed by exactly one shard when the split is
    /// even, and every column cut is block-aligned, for the 9B with K-quant (256) and legacy (32)
    /// blocks, 1..16 shards, with and without bands.
    #[test]
    fn partitions_are_exact_and_aligned() {
        let c = cfg_9b();
        for (block, band_pct) in [(32, 0), (256, 0), (32, BAND_PCT), (256, BAND_PCT)] {
            for n in 1..=16 {
                let plans: Vec<ShardPlan> = (0..n)
                    .map(|i| ShardPlan::new(&c, ShardId { index: i, count: n, band_pct }, |_| LayerBlocks { mixer_out: block, ffn_down: block }))
                    .collect();
                let mut vocab = vec![0u8; c.n_vocab];
                for p in &plans {
                    if let Some(h) = &p.vocab {
                        h.rows(h.even.clone()).for_each(|i| vocab[i] += 1);
                    }
                }
                assert!(vocab.iter().all(|&x| x == 1));
                for il in 0..c.n_layer {
                    let mut ff = vec![0u8; c.n_ff];
                    let mut heads = vec![0u8; if c.recurrent[il] { c.n_v_heads } else { c.n_head }];
                    for p in &plans {
                        let l = &p.layers[il];
                        if let Some(h) = &l.ffn {
                            assert!(h.pieces.iter().all(|r| r.start % block == 0 && r.end % block == 0));
                            h.rows(h.even.clone()).for_each(|i| ff[i] += 1);
                        }
                        if let Some(d) = &l.deltanet {
                            for r in &d.v_heads {
                                assert_eq!(r.start * c.d_state % block, 0);
                                assert_eq!(r.end * c.d_state % block, 0);
                                r.clone().for_each(|j| {
                                    assert!(d.k_heads.contains(&(j % c.n_k_heads)));
                                    heads[j] += 1
                                });
                            }
                        }
                        if let Some(a) = &l.attention {
                            assert_eq!(a.heads.start * c.head_dim % block, 0);
                            a.heads.clone().for_each(|j| heads[j] += 1);
                            assert!(a.kv_heads.contains(&(a.heads.start / 4)) && a.kv_heads.contains(&((a.heads.end - 1) / 4)));
                        }
                    }
                    assert!(ff.iter().all(|&x| x == 1), "ffn layer {il} n {n}");
                    assert!(heads.iter().all(|&x| x == 1), "heads layer {il} n {n}");
                }
                // Up to 8 shards every shard has DeltaNet work in every DeltaNet layer (16 key heads in pairs).
                if n <= 8 {
                    for p in &plans {
                        for (il, l) in p.layers.iter().enumerate() {
                            assert_eq!(l.deltanet.is_some(), c.recurrent[il]);
                        }
                    }
                }
            }
        }
    }

    /// With bands, for any cuts the shards' assigned pieces tile the dimension in order of
    /// position, each shard computes only pieces it holds, and a band piece is held by its two
    /// neighbours only; the 9B's two-shard bands are as wide as BENCHMARKS.md says.
    #[test]
    fn bands_tile_for_any_cut() {
        let c = cfg_9b();
        for n in 2..=8 {
            let bal = Balanced::new(&c, n, BAND_PCT, |_| LayerBlocks { mixer_out: 256, ffn_down: 256 });
            for b in bal.ffn.iter().take(2).chain([&bal.head]) {
                assert!(b.per_band >= 2 && b.per_band % 2 == 0, "n {n}: {} pieces a band", b.per_band);
                let held: Vec<usize> = (0..b.pieces.len()).map(|i| (0..n).filter(|&s| b.held(s).contains(&i)).count()).collect();
                for (i, &k) in held.iter().enumerate() {
                    let core = i % (b.per_band + 1) == 0;
                    assert_eq!(k, if core { 1 } else { 2 }, "piece {i}");
                }
                for cut in [0, 1, b.per_band / 2, b.per_band] {
                    let cuts = vec![cut; n - 1];
                    let mut next = 0;
                    for v in 0..n {
                        let s = b.shard_at(v);
                        let a = b.assigned(s, &cuts);
                        assert_eq!(a.start, next);
                        assert!(b.held(s).start <= a.start && a.end <= b.held(s).end);
                        next = a.end;
                    }
                    assert_eq!(next, b.pieces.len());
                }
            }
            if n == 2 {
                // FFN: 2 pieces of six 256-blocks (3072 of 12288 rows); head: 16 of 15 × 256 rows.
                assert_eq!((bal.ffn[0].per_band, bal.ffn[0].pieces[1].len()), (2, 1536));
                assert_eq!((bal.head.per_band, bal.head.pieces[1].len()), (16, 3840));
            }
        }
    }

    /// A layer that cannot be cut (one block per row) goes whole to one shard, rotating.
    #[test]
    fn uncuttable_layers_rotate() {
        let mut c = cfg_9b();
        c.n_k_heads = 2;
        c.n_v_heads = 2;
        c.d_state = 128; // Hv·Ds = 256: one K-quant block per ssm_out row
        let owners: Vec<usize> = (0..8)
            .filter(|&il| c.recurrent[il])
            .map(|il| {
                let v: Vec<usize> = (0..2)
                    .filter(|&s| {
                        ShardPlan::new(&c, ShardId { index: s, count: 2, band_pct: BAND_PCT }, |_| LayerBlocks { mixer_out: 256, ffn_down: 256 }).layers[il]
                            .deltanet
                            .is_some()
                    })
                    .collect();
                assert_eq!(v.len(), 1);
                v[0]
            })
            .collect();
        assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
    }
}
