//! The int8 prompt GEMM of the relaxed-SIMD build: the same product as [`super::gemm`], with
//! weights as 7-bit unsigned codes and activations as bytes, so that one
//! `i16x8.relaxed_dot_i8x16_i7x16_s` does 16 multiplies (the i16 GEMM's `i32x4.dot_i16x8_s`
//! does 8).
//!
//! Shapes (n = row length, KB = 256: the K-quants that have this form, see [`kernels8`]):
//!
//! ```text
//! weight row r ──(type's decode8)──► Decoded8: u[n] u8      codes 0..=umax ≤ 127, in pair order
//!                                              sc[n/16] i16  integer scale per 16 elements
//!                                              d[n/KB], m[n/KB] f32,  mn[n/16] i16
//!              W[r][i] = d[i/KB]·sc[i/16]·u[pair_pos(i)] + m[i/KB]·mn[i/16]   — exactly `dequantize`
//! activations  Q8 rows ──PackedAct8::pack──► tiles of ≤ 2 or 4 tokens: qs i8 in pair order, interleaved
//!              per 16 bytes; da, bs as in the i16 GEMM
//! y[t][r] = Σ_b da[t][b]·( d[b]·Σ_{i∈b} sc[i/16]·u[i]·qs[t][i]  +  m[b]·Σ_{g∈b} mn[g]·bsum[t][g] )
//! ```
//!
//! Signed codes are made unsigned with an offset (Q3_K `q + 4`, Q6_K `q + 32`, the IQ2 types
//! `±mag + 43`, IQ3_XXS `±mag + 62`, IQ3_S `±mag + 15`, IQ1_S / IQ1_M `8g ± 1 + 9`);
//! the offset comes back through the min term (`m = d`, `mn = −offset·sc`), as in the relaxed
//! `vec_dot`s.
//!
//! **Pair order.** Every 128 elements (8 groups of 16) are stored as the 8×8 transpose of their
//! element pairs ([`pair_pos`]): 16-byte vector k holds pair k of groups 0..7. Lane g of the
//! relaxed dot's i16 result (one pair of products) then belongs to group g for every k, so the 8
//! vectors of a half-block can be **summed in i16** before one `i32x4.dot_i16x8_s` against the
//! half's 8 group scales widens them — the widening (a `pmaddwd` on x64, as costly as a multiply)
//! is paid once per `ksum` vectors instead of once per vector. `ksum` (1, 2, 4 or 8) is the most
//! vectors whose pair sums fit i16: `ksum·2·128·umax < 2^15` ([`Kernels8::ksum`]): Q2_K, Q3_K,
//! Q4_K 8, Q5_K, IQ3_S, IQ1_S and IQ1_M 4; Q6_K 2; the IQ2 types (codes up to 86) and IQ3_XXS
//! (up to 124) 1, and they sum two vectors where the activations allow it (**Pairs of
//! vectors**, below). Types whose codes need 8 bits
//! (Q8_0, IQ4_XS, IQ4_NL: signed bytes or codebook values up to ±127) have no int8 form; Q4_0 /
//! Q4_1 / Q5_* would fit (codes ≤ 31) but have a float scale per 32 elements (KB = 32), which
//! this kernel's per-256 block epilogue does not do.
//!
//! The tile kernel: 2 rows × 2 tokens, or 2 rows × 4 tokens ([`Profile`]). Per 16 elements the
//! narrow one loads 2 weight and 2 activation vectors and does 4 relaxed dots into 4 i16 accumulators
//! (12 instructions per 64 multiply-adds, the i16 GEMM needs 22 per 64); every `ksum` steps they
//! are widened with the rows' scale vectors into 4 i32x4 sums, which live in memory (volatile
//! accesses: next to the i16 sums in registers Node 20's V8 spilled inside the hot loop; the wide
//! tiles keep theirs in registers, which Chromium's V8 handles); at the end of a block they are
//! reduced to one lane per token and scaled by `d·da`. The min / offset terms run
//! as a second pass on the i16 GEMM's `bs` layout. Integer ranges: a ksum-sum of pairs < 2^15,
//! times a scale ≤ 128; a block's sum ≤ 256·128·63·127 < 2^31.
//!
//! **Measured** (Node 20, relaxed build, 4096×4096, this project's shared 2-core EPYC, medians of
//! 5 alternating runs against the i16 GEMM): T = 32: Q2_K 1.10×, Q3_K 0.90×, Q4_K 0.88×, Q5_K
//! 0.86×, Q6_K 0.60×; T = 64: 1.17×, 1.00×, 1.04×, 1.02×, 0.71×. So only Q2_K uses it
//! ([`Kernels8::faster`]); end to end, the 9B-shaped 8-layer Q2_K file's 64-token prompt runs
//! 1.11× faster (median of 5 pairs). Why so little of the 2× in the instruction count: V8's
//! register allocator. Tiles of 2 rows × 4 tokens (the i16 GEMM's) need 8 i16 plus 8 i32
//! accumulators and spilled (0.7×); a fully unrolled `ksum` step block had its loads hoisted and
//! spilled (0.5–0.75×); folding the min terms into the block loop spilled the hot loop (−25 %);
//! 2 × 2 tiles pay the per-block work (min pass, reductions, widening) over half as many
//! products, which eats the gain except for Q2_K (`ksum` = 8, 2-bit decode cheapest) and costs
//! Q6_K (`ksum` = 2: a widening every 2 steps) a third. What could still win: a row-interleaved
//! load-time layout (ik_llama.cpp's `_R4`) to cut the per-row overheads, or a V8 with a better
//! allocator.
//!
//! **Chromium's V8 is that better allocator** (measured 2026-12-02 in Chromium 156 with
//! `tools/bench-kernels-chromium.mjs --prefill 32`, 3 alternating rounds, median ratios): tiles of
//! 2 rows × 4 tokens against 2 × 2 run Q2_K 1.34×, and make the int8 form beat the i16 GEMM for
//! Q3_K 1.40×, Q4_K 1.40×, Q5_K 1.26× (57 / 55 / 54 / 47 G MAC/s against 43 / 40 / 39 / 37);
//! Q6_K stays on the i16 GEMM (no gain). Node 20 with the same wasm: 4-token tiles 0.69–0.82× for
//! Q3_K–Q5_K. So the runtime picks per engine: [`Profile::Wide`] in browsers, [`Profile::Narrow`]
//! in Node (`CoreEnv.gemmProfile` in `www/src/worker.ts`; the same products bit for bit). The
//! tile width is a constant of each instance ([`gemm`] dispatches on it once): with a run-time
//! width Node's 2-token tiles ran at half speed.
//!
//! **Widening every vector** (`ksum` 1, 2026-12-03): with nothing summed in i16 the tile's
//! R·C i32 sums are its only accumulators and stay in registers (the i16-summing path kept them
//! in memory then, and keeps them there in the narrow tiles). Per
//! 16 elements × (row, token) that is a relaxed dot, an `i32x4.dot_i16x8_s` and an add, against
//! the i16 GEMM's two `i32x4.dot_i16x8_s`, two adds and twice the activation bytes. Chromium 156,
//! wide tiles, 4096×4096 (`tools/bench-kernels-chromium.mjs --prefill T`, G MAC/s, i16 GEMM →
//! int8 widening every vector): IQ2_S 35.5–36.0 → 37.8–38.4 (T = 32), 37.9–38.8 → 42.0–43.0
//! (T = 128); Q6_K 34.4 → 39.8 and 37.2 → 43.8 (its `ksum` 2 with the i32 sums in memory had
//! measured 32.3–33.8 and 33.8: slower than the i16 GEMM). Widening every vector loses where
//! `ksum` is 8 (Q2_K 49.3 → 44.0, Q3_K 48.4 → 43.0, Q4_K 48.4 → 43.0 at T = 64, against i16 sums
//! with the i32 sums still in memory) and ties at 4 (Q5_K 41.1 → 42.6). So IQ2_S and Q6_K use
//! the int8 form in the browsers' profile. Not in Node 20's (narrow tiles: IQ2_S 33.7 → 23.3,
//! Q6_K 31.9 → 25.0 G MAC/s against the i16 GEMM at T = 32; 36.6 → 24.7 and 36.1 → 25.6 at 128).
//!
//! **Pairs of vectors** (2026-12-06, `simd::pair_blocks`, [`Kernels8::pair_run`]): the same
//! registers, with two steps' relaxed dots added in i16 before the widening — per 32 elements ×
//! (row, token) two relaxed dots, an i16 add, one `i32x4.dot_i16x8_s` and one add, against four
//! multiplies and two adds. Q6_K's codes (≤ 63) always fit two at a time. The IQ2 types' (≤ 86)
//! and IQ3_XXS's (≤ 124) fit where a group's 4 activations of the two steps have `Σ|a|` ≤
//! `⌊(2^15 − 1) / umax⌋` (381, 264): the packer records each tile's largest such sum per
//! 128-element unit ([`PackedAct8::psum`]) and a unit over it is widened one vector at a time.
//! For Q8_K blocks of normally distributed activations that is 99 % of the units at 381 and 18 %
//! at 264. The min terms stay outside the i16 sums: after each unit, one `i32x4.dot_i16x8_s` of
//! the rows' 8 `mn` with the token's 8 group sums ([`PackedAct8::hsum`]) per (row, token), into
//! the same i32 sums. (Folded into the i16 sums as start sums, an add per (row, token) and pair
//! of steps, the kernel ran 3 % slower; computed per block beforehand, as widening every vector
//! did, 16 broadcasts and 16 multiplies per block and row pair took 8 % of the IQ2_M file's
//! prompt.) Same integers every way, so the same bits. Chromium 156, Zen 4 EPYC, 4096×4096 ×
//! 128 tokens, normal activations, G MAC/s, widening every vector → pairs, mins per block →
//! mins per unit (alternating runs): IQ2_SX 40.4–41.2 → 43.1–43.7 → 43.0–45.1, Q6_KX 40.4–41.1
//! → 43.3–44.2 → 44.6–45.3, Q6_K 40.1–40.4 → 43.3–43.9, IQ3_XXS level (40.0 → 40.1).
//!
//! **Dot-add** (2026-12-04, `simd::quad_blocks`): `i32x4.relaxed_dot_i8x16_i7x16_add_s` sums 4
//! byte products into each i32 lane — one `vpdpbusd` where the CPU has AVX-VNNI (Intel since Alder
//! Lake, AMD since Zen 5), one `sdot` on arm64, and V8's three-instruction `pmaddubsw` form
//! elsewhere. Lane j then holds bytes 4j..4j+3, so the codes and activations are stored in
//! **quad order** ([`quad_pos`]: every 64 elements, the 4 × 4 transpose of their 4-byte quads) and
//! lane g of every vector belongs to group g. Four dot-adds per (row, token) sum a unit's 16
//! products per group in i32, and one `i32x4.mul` by the unit's 4 group scales adds them to the
//! block's sums: the same integers as the pair form, so the same results bit for bit. Decoders
//! keep writing pair order; a panel's rows are reordered after decoding ([`row_to_order`]: two
//! 16-bit interleaves per 32 bytes), activations are packed in quad order. Chromium 156 on a Zen 5
//! EPYC (`bench-kernels --prefill 128 --dot pairs|quads`, G MAC/s): IQ2_S 52.6–53.6 → 61.5–61.9,
//! Q6_K 55.1–57.3 → 65.1–65.5, IQ3_XXS 52.5–53.8 → 60.7–62.8; the types summed in i16 lose
//! (Q2_K 71–76 → 66–68, Q4_K 70 → 63). The scale multiply per 64 elements and the unit's
//! zeroing are what keep it from the instruction's 2.6–2.7× over the widening step
//! (`tools/bench-dot-forms.mjs`). So the choice is per machine and per type (`ops::GemmDot`,
//! timed on the prompt's own calls by [`crate::tune`]), and only where the engine computes the
//! instruction exactly ([`quad_add_exact`]: Node 20's baseline tier does not, see `quant/mod.rs`).
//! For the types summed in i16 eight vectors at a time ([`Kernels8::pair_ksum`]) the pair form
//! won on every CPU measured, until they had the scaled form and the narrowed quad order (below).
//!
//! **Scaled form** (2026-12-05, [`Kernels8::scaled`]). Where every code times its group scale fits
//! 7 bits — Q2_K: codes 0..=3, scales 0..=15, products ≤ 45 — the panel decoder writes those
//! products as the codes and 1 as every scale. Then no group needs its own widening: one
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s` per (row, token) and 16 elements sums a whole block in
//! i32 (`simd::scaled_blocks`, the 2 × 4 sums in registers), activations in pair order as
//! packed for the pair form. One instruction per 16 products against the pair form's two (the
//! relaxed dot and the i16 add) and its widening per 128, and no scale multiply as in quad
//! order: Chromium 156 on an Emerald Rapids Xeon, Q2_K at T = 128, 40.2 → 53.4 G MAC/s. The
//! block's integer is the pair form's, so the results are bit for bit. It is Q2_K's dot-add
//! form: chosen per machine like quad order (`ops::GemmDot`; on a CPU without AVX-VNNI the
//! instruction is three), and only where [`quad_add_exact`].
//!
//! **Groups of 32** (2026-12-06, [`Kernels8::scales32`], [`Order::Quads32`]). Where a type has one
//! scale per 32 elements (Q4_K, Q5_K, IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S and IQ3_SX: the decoders
//! give groups 2g and 2g + 1 the same `sc`), its quad order spans 128 elements ([`quad32_pos`]:
//! lane g of vector k holds quad k of 32-element group g), eight dot-adds sum a whole group in
//! one i32 lane, and the scale multiply and the block sums in memory come once per 128 elements
//! instead of per 64 — the overhead that made quad order lose to the pair form for the types
//! summed in i16. Rows are put in that order by one 16-bit shuffle per vector
//! ([`simd::pairs_to_quads32`]); the integers are the pair form's, so the bits are too. Chromium
//! 156, Emerald Rapids Xeon, 4096 × 4096 × 128 tokens, G MAC/s, quad order over 16 → over 32
//! (pair form): Q4_K 37.5 → 42.4–42.5 (39.8–40.1), Q5_K 37.0–37.5 → 42.1–42.3 (34.9–35.3),
//! IQ2_XXS 39.6 → 46.0 (30.7), IQ3_XXS 38.9 → 45.8 (31.9), IQ3_S 38.8 → 44.8 (39.5), IQ3_SX 39.1
//! → 46.6 (44.2), IQ1_S 40.1 → 44.4 (44.3). So those types are timed against the pair form
//! (`ops::GemmDot`) like the others with a dot-add form.
//!
//! **Narrowed** (2026-12-06, [`Kernels8::narrow_limit`], `simd::narrowed_blocks`). Quad order
//! over 16 narrows two tokens' unit sums into one vector (`i16x8.narrow_i32x4_s`) and one
//! `i32x4.dot_i16x8_s` against the unit's four scales twice adds both tokens' scaled sums: half
//! the scale work of a multiply per token, and the block sums (R × C/2 vectors) in registers
//! instead of memory. Exact where every group sum fits i16: `|Σ(u − off)·a| ≤ bound·Σ|a| < 2^15`.
//! With codes of at most 15 in magnitude (`16·128·15 < 2^15`: Q2_K, Q3_K, Q3_KX, Q4_K, IQ1_S,
//! IQ1_M, and IQ3_S / IQ3_SX with their offsets folded — the types whose pair form sums eight
//! vectors) that holds everywhere, and those types take this kernel unchecked instead of quad
//! order over 32 ([`Kernels8::quad_order`]). For larger codes (Q6_K, Q6_KX: 32; the IQ2 types:
//! 43) it holds where the activations are small enough: the packer records each tile's largest
//! `Σ|a|` per 64-element unit ([`PackedAct8::gsum`]) and the kernel narrows the units within the
//! rows' limit and computes the others' same lanes in i32 (two multiplies and two shuffles). For
//! Q8_K blocks of normally distributed activations (a 16-group's `Σ|a|` averages ~530) that is
//! every unit at a bound of 32 and ~60 % at 43 (a Laplace distribution: 99 %). Same integers,
//! same bits, either way. Chromium 156, Emerald Rapids Xeon, T = 128, normal activations
//! (`bench::normal_activations`), G MAC/s, quad order (over 16, or over 32 for the `scales32`
//! types) → narrowed (pair form): Q3_KX 40.5–40.7 → 47.4–48.3 (44.7–45.1), Q3_K 39.4–39.6 →
//! 48.2–49.0 (44.9), IQ1_M 40.0–40.1 → 45.4–47.3 (43.6), Q4_K 42.0–42.4 → 42.5–44.6 (40.4), IQ3_S
//! 44.4–44.8 → 44.7–46.2 (41.5–42.3), IQ3_SX 46.6 → 47.7–48.0 (44.3–44.7), IQ1_S 46.6–46.7 →
//! 48.0–48.3 (44.3–44.5); checked per unit: Q6_K 40.1–40.6 → 43.2–44.7 (32.7), Q6_KX 39.6–40.1
//! → 43.2–44.3 (32.5), IQ2_SX 40.5–40.8 → 41.9–43.0 (32.5), IQ2_XS 39.3–39.6 → 40.6–42.0 (32.3).
//! The types with one scale per 32 elements that do not narrow everywhere keep quad order over
//! 32 (Q5_K: 41.9 there against 40.6 checked per unit).
//!
//! **Offsets folded** (2026-12-04). For the offset types ([`Kernels8::offset`]: every type without
//! mins of its own) `m = d` and `mn = −off·sc`, so a block's result `d·da·(isum + msum)` needs its
//! min term only as an integer: `Σ_g sc_g·Σ_{i∈g}(u_i − off)·a_i`. Where the sums are kept per
//! group before the scales (the dot-add units, and the pair-order runs summed in i16) they start
//! from `−off·Σa` over their elements, packed with the activations ([`PackedAct8::nq`]), and the
//! min pass disappears; the i16 runs may then be longer, since only `Σ(u − off)·a` must fit
//! ([`Kernels8::ksum_for`]: IQ3_S, IQ1_S, IQ1_M 4 → 8 steps; the i16 adds wrap, so the partial
//! sums may not). Widening every vector mixed two groups' scales in a lane, so there the min
//! terms of every block were computed first, as integers, and added before the conversion (the
//! pairs-of-vectors kernel now adds them per unit, below). Every form
//! gives the same integers, so the same bits; the scalar tile rounds as they do. Chromium 156,
//! this Zen 5 EPYC, 4096×4096 × 128 tokens, G MAC/s, alternating: dot-add IQ2_S 57.4–57.7 →
//! 61.0–61.4, Q6_K 58.7–59.5 → 61.4–63.4, IQ3_S 55.5–56.2 → 59.0–59.2; i16 runs Q3_K 63.7–64.9
//! → 71.1–73.5, IQ3_S 54.5–55.5 → 68.8–69.7; widening every vector IQ2_S 48.4–50.3 → 47.1–48.5
//! (the one form that loses, −2 %: the dot-add form is the faster where the CPU has AVX-VNNI);
//! the types with mins unchanged (Q2_K 65.9–68.0 → 65.1–67.1). The 9B-shaped IQ2_M file's
//! 128-token prompt, 2 workers, Chromium: +1.4 % to +3.4 % in 5 alternating pairs.

use super::act::QAct;
use super::r4::Rows;
use super::{GgmlType, QK_K};

/// Elements per pair-ordered unit (8 groups of 16).
pub const UNIT: usize = 128;

/// Rows decoded together before they meet all the token tiles (as [`super::gemm::PANEL`]).
pub const PANEL: usize = 8;

/// The most tokens per activation tile (the tile kernel's outputs are f32x4 lanes).
pub const MAX_TILE: usize = 4;

/// How this engine runs the int8 GEMM: the tile width and which types use it. The same wasm runs
/// in engines whose code generators differ (V8 11.3 in Node 20, V8 of Chromium 156), and the best
/// choice differs with them (module docs, "Measured"). Results are the same either way, bit for
/// bit: every (row, token) sum is exact in integers and folded in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Tiles of 2 rows × 2 tokens, Q2_K only: what Node 20's V8 runs best (the default).
    Narrow,
    /// Tiles of 2 rows × 4 tokens, every type of [`kernels8`]: what Chromium's V8 runs best (set
    /// by the browser runtime, `setGemmProfile`).
    Wide,
}

static WIDE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Sets the profile for activations packed from now on.
pub fn set_profile(p: Profile) {
    WIDE.store(p == Profile::Wide, core::sync::atomic::Ordering::Relaxed);
}

/// The current profile.
pub fn profile() -> Profile {
    if WIDE.load(core::sync::atomic::Ordering::Relaxed) {
        Profile::Wide
    } else {
        Profile::Narrow
    }
}

impl Profile {
    /// Tokens per activation tile.
    pub fn tile(self) -> usize {
        match self {
            Profile::Narrow => 2,
            Profile::Wide => 4,
        }
    }
}

/// Weight rows per register tile.
const ROWS: usize = 2;

/// The tile kernel's `KS` for the dot-add form in quad order over groups of 16 (module docs,
/// "Dot-add" and "Narrowed"): no i16 sums; each unit narrowed where its activations allow.
#[cfg_attr(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")), allow(dead_code))]
const QUADS: usize = 0;

/// The tile kernel's `KS` for quad order over groups of 16 with every unit narrowed (rows whose
/// [`Kernels8::narrow_limit`] is [`NARROW_ALWAYS`]): a kernel of its own, without the per-unit
/// check (in one function with the checking one, V8 ran it 2–7 % slower).
#[cfg_attr(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")), allow(dead_code))]
const NARROWED: usize = 48;

/// The tile kernel's `KS` for the dot-add form in quad order over groups of 32.
#[cfg_attr(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")), allow(dead_code))]
const QUADS32: usize = 32;

/// The `ksum` value that selects the scaled form's tiles ([`Kernels8::scaled`]).
const SCALED: usize = 16;

/// The [`Kernels8::narrow_limit`] from which every unit narrows, whatever the activations: a
/// group's `Σ|a|` is at most 16·128.
const NARROW_ALWAYS: u16 = 16 * 128;

/// The order the tile kernel with `KS` reads.
#[cfg_attr(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")), allow(dead_code))]
const fn order_of_ks(ks: usize) -> Order {
    match ks {
        QUADS | NARROWED => Order::Quads,
        QUADS32 => Order::Quads32,
        _ => Order::Pairs,
    }
}

/// Position of element `i` of a row in pair order: in each 128-element unit, pair `k` of group `g`
/// (elements `16g + 2k`, `+1`) sits at bytes `16k + 2g`, `+1`.
#[inline]
pub fn pair_pos(i: usize) -> usize {
    let (unit, g, k, e) = (i / UNIT, (i % UNIT) / 16, (i % 16) / 2, i % 2);
    UNIT * unit + 16 * k + 2 * g + e
}

/// The group (index into `sc`, `mn`) of byte `x` of a pair-ordered row: group `(x % 16) / 2` of
/// its 128-element unit.
#[inline]
fn pair_group(x: usize) -> usize {
    (x / UNIT) * 8 + (x % 16) / 2
}

/// Position of element `i` of a row in quad order: in each 64-element unit, quad `k` of group `g`
/// (elements `16g + 4k .. +4`) sits at bytes `16k + 4g ..`. Pairs stay whole, so a pair-ordered
/// 128-element unit becomes two quad-ordered ones by interleaving its vectors' 16-bit lanes
/// ([`simd::pairs_to_quads`]).
#[inline]
pub fn quad_pos(i: usize) -> usize {
    let (unit, g, k, e) = (i / 64, (i % 64) / 16, (i % 16) / 4, i % 4);
    64 * unit + 16 * k + 4 * g + e
}

/// Position of element `i` of a row in quad order over groups of 32 (the dot-add form of the
/// types whose scales come per 32 elements, [`Kernels8::scales32`]): in each 128-element unit,
/// quad `k` of 32-element group `g` (elements `32g + 4k .. +4`) sits at bytes `16k + 4g ..`, so
/// the i32 lane g of eight dot-adds sums a whole group. Pairs stay whole
/// ([`simd::pairs_to_quads32`]: one 16-bit shuffle per vector).
#[inline]
pub fn quad32_pos(i: usize) -> usize {
    let (unit, g, k, e) = (i / UNIT, (i % UNIT) / 32, (i % 32) / 4, i % 4);
    UNIT * unit + 16 * k + 4 * g + e
}

/// How the int8 form orders a row's codes and a tile's activations (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// [`pair_pos`]: the pair form, and the scaled form ([`Kernels8::scaled`]).
    #[default]
    Pairs,
    /// [`quad_pos`]: the dot-add form, lane g of a 64-element unit = 16-element group g.
    Quads,
    /// [`quad32_pos`]: the dot-add form of types whose scales come per 32 elements, lane g of a
    /// 128-element unit = 32-element group g.
    Quads32,
}

impl Order {
    /// Whether this is one of the dot-add form's orders.
    pub fn is_quad(self) -> bool {
        self != Order::Pairs
    }

    /// Elements summed in one i32 lane of a quad order (a unit is four of them): 32 for
    /// [`Order::Quads32`], else 16 (pair order's groups, as [`Order::Quads`]').
    pub const fn lane_group(self) -> usize {
        match self {
            Order::Quads32 => 32,
            Order::Pairs | Order::Quads => 16,
        }
    }

    /// Byte `x` of a row in this order → the 16-element group (index into `sc`, `mn`) its element
    /// belongs to.
    pub fn group_of(self, x: usize) -> usize {
        match self {
            Order::Pairs => pair_group(x),
            Order::Quads => (x / 64) * 4 + (x % 16) / 4,
            Order::Quads32 => (x / UNIT) * 8 + 2 * ((x % 16) / 4) + (x % UNIT) / 64,
        }
    }

    /// Element `i` of a row → its byte in this order.
    pub fn pos(self, i: usize) -> usize {
        match self {
            Order::Pairs => pair_pos(i),
            Order::Quads => quad_pos(i),
            Order::Quads32 => quad32_pos(i),
        }
    }
}

/// One weight row in the int8 GEMM form (module docs):
/// `W[i] = d[i/KB]·sc[i/16]·u[pair_pos(i)] + m[i/KB]·mn[i/16]`.
#[derive(Clone, Debug, Default)]
pub struct Decoded8 {
    pub u: Vec<u8>,
    pub sc: Vec<i16>,
    pub d: Vec<f32>,
    pub m: Vec<f32>,
    pub mn: Vec<i16>,
}

impl Decoded8 {
    /// Sizes the buffers for a row of `n` elements (KB = 256).
    pub fn resize(&mut self, n: usize) {
        assert!(n % QK_K == 0, "row length {n} is not a multiple of {QK_K}");
        self.u.resize(n, 0);
        self.sc.resize(n / 16, 0);
        self.d.resize(n / QK_K, 0.0);
        self.m.resize(n / QK_K, 0.0);
        self.mn.resize(n / 16, 0);
    }

    /// The weight `i` as a float, `d·(sc·u) + m·mn`: the two products are exact and the sum
    /// rounds once, as ggml's `d·sc·q − dmin·mn` does, so `dequantize` must match it bit for bit.
    pub fn value(&self, i: usize) -> f32 {
        let b = i / QK_K;
        self.d[b] * (self.sc[i / 16] as i32 * self.u[pair_pos(i)] as i32) as f32 + self.m[b] * self.mn[i / 16] as f32
    }

    /// Multiplies every code by its group scale and sets the scales to 1: the same weights, for
    /// the scaled form ([`Kernels8::scaled`]); each product must fit 7 bits.
    pub fn scale_codes(&mut self) {
        for (x, u) in self.u.iter_mut().enumerate() {
            let sc = self.sc[pair_group(x)];
            let v = *u as i32 * sc as i32;
            assert!((0..=127).contains(&v), "scaled code {v} does not fit 7 bits");
            *u = v as u8;
        }
        self.sc.fill(1);
    }

    /// Checks that `row` is whole blocks of `ty` and the buffers are sized for it; returns the
    /// block count.
    #[inline]
    pub fn check(&self, ty: GgmlType, row: &[u8]) -> usize {
        let nb = row.len() / ty.block_bytes();
        assert_eq!(row.len(), nb * ty.block_bytes(), "{ty}: row is not a whole number of blocks");
        let n = nb * QK_K;
        assert!(
            self.u.len() == n && self.sc.len() == n / 16 && self.d.len() == nb && self.m.len() == nb && self.mn.len() == n / 16,
            "{ty}: int8 decoded row not sized for {n} elements"
        );
        nb
    }
}

/// `decode8(row, out)`: a weight row in the int8 form; `out` sized by [`Decoded8::resize`].
pub type DecodeRow8 = fn(row: &[u8], out: &mut Decoded8);

/// The int8 GEMM entry of a type.
pub struct Kernels8 {
    pub ty: GgmlType,
    /// Largest code (`u ≤ umax ≤ 127`).
    pub umax: u8,
    /// Whether the relaxed-SIMD build's prompt uses this form with [`Profile::Narrow`] /
    /// [`Profile::Wide`]: measured faster than the i16 GEMM for this type in the engine the
    /// profile is for (module docs), else the form exists for the tests only.
    pub faster: [bool; 2],
    /// From how many tokens on the int8 form is used (where it is [`Kernels8::faster`]): below
    /// it a type whose int8 decoding costs more than its i16 decoding loses (IQ2_S: 16).
    pub min_tokens: usize,
    /// `Some(off)`: the codes are the signed values plus `off`, and the decoders give every row
    /// `m = d` and `mn = −off·sc`, so that the min term is an integer added to the block's sum
    /// before it is scaled (module docs, "Offsets folded"); `None`: the type has mins of its own.
    pub offset: Option<u8>,
    /// Scalar reference decoder (element by element from the type's block description).
    pub decode_ref: DecodeRow8,
    /// The fast decoder (SIMD128 on wasm32; the reference natively); equals `decode_ref`.
    pub decode: DecodeRow8,
    /// Where every code times its group scale fits 7 bits (Q2_K: 3 · 15): a decoder that writes
    /// them so, with every `sc` 1 (`decode_ref` then [`Decoded8::scale_codes`], bit for bit) —
    /// the **scaled form** (module docs), this type's dot-add form instead of quad order.
    pub scaled: Option<DecodeRow8>,
    /// Every scale covers 32 elements (the decoders give groups 2g and 2g + 1 the same `sc`):
    /// unless its codes narrow everywhere ([`Kernels8::narrow_limit`]), the dot-add form then
    /// takes quad order over groups of 32 ([`Order::Quads32`]), a scale multiply per 128
    /// elements instead of per 64 (module docs, "Groups of 32").
    pub scales32: bool,
}

impl Kernels8 {
    /// The order of this type's dot-add form: quad order over groups of 32 where the type's
    /// scales allow and its codes (the min terms folded where it has an offset, as the engine
    /// packs them) do not narrow every unit ([`Kernels8::narrow_limit`]), else over 16 (the
    /// scaled form, where the type has one, takes pair order instead).
    pub const fn quad_order(&self) -> Order {
        if self.scales32 && self.narrow_limit(self.offset.is_some()) < NARROW_ALWAYS {
            Order::Quads32
        } else {
            Order::Quads
        }
    }

    /// What activations are packed with for this type's rows: its offset and the folded
    /// `ksum` (`None` for a type with mins).
    pub const fn fold(&self) -> Option<(u8, usize)> {
        match self.offset {
            Some(off) => Some((off, self.ksum_for(true))),
            None => None,
        }
    }

    /// Vectors of 16 products that surely fit i16 summed: the largest power of two ≤ 8 with
    /// `ksum·2·128·umax < 2^15` (a pair of products is at most 2·128·umax in magnitude). The
    /// pair form runs 4 and 8 as runs of i16 sums, 1 and 2 as [`Kernels8::pair_run`] says.
    pub const fn ksum(&self) -> usize {
        self.ksum_for(false)
    }

    /// The `ksum` the pair form runs with: folded where the type has an offset (activations are
    /// packed with [`Kernels8::fold`]).
    pub const fn pair_ksum(&self) -> usize {
        self.ksum_for(self.offset.is_some())
    }

    /// [`Kernels8::ksum`] with the min terms folded (`folded`, only for a type with an
    /// [`Kernels8::offset`]): each i16 sum then starts from its share of `−off·Σa`, and what
    /// must fit is `Σ(u − off)·a`, with `|u − off| ≤ max(off, umax − off)` (module docs,
    /// "Offsets folded"). The i16 adds wrap, so only the final sum has to fit.
    pub const fn ksum_for(&self, folded: bool) -> usize {
        let dev = self.code_bound(folded);
        let mut k = 8;
        while k > 1 && k * 2 * 128 * dev >= 1 << 15 {
            k /= 2;
        }
        k
    }

    /// The tile kernel's `KS` for this type's pair form (activations packed with
    /// [`Kernels8::fold`] where `folded`): [`Kernels8::ksum_for`] where it is 4 or 8 (runs of
    /// i16 sums, folded from their start sums); else **pairs of vectors** (module docs): 2 where
    /// two relaxed dots of the codes as they are always fit i16 together (Q6_K, Q6_KX), else 1 —
    /// two summed where the unit's activations allow it ([`PackedAct8::psum`] within
    /// [`Kernels8::narrow_limit`]`(false)`: the IQ2 types, IQ3_XXS), one at a time elsewhere.
    pub const fn pair_run(&self, folded: bool) -> usize {
        let k = self.ksum_for(folded);
        if k >= 4 {
            k
        } else if self.ksum_for(false) >= 2 {
            2
        } else {
            1
        }
    }

    /// The largest code magnitude a product sees: `max(off, umax − off)` with the min terms
    /// folded (`folded`, only for a type with an [`Kernels8::offset`]), else `umax`.
    pub const fn code_bound(&self, folded: bool) -> usize {
        code_bound(self.umax, if folded { self.offset } else { None })
    }

    /// The largest `Σ|a|` over a 16-element group of activations for which the group's sum of
    /// products with these codes surely fits i16, `⌊(2^15 − 1) / bound⌋`: where every group of
    /// a unit and tile is within it, quad order over 16 runs that unit **narrowed** (module
    /// docs, "Narrowed"). At least 2048 (= 16·128, every group) for codes of at most 15 in
    /// magnitude: Q2_K, Q3_K, Q3_KX, Q4_K, IQ1_S, IQ1_M, and IQ3_S / IQ3_SX folded.
    pub const fn narrow_limit(&self, folded: bool) -> u16 {
        narrow_limit(self.code_bound(folded))
    }
}

/// The largest |code − offset| of codes `0..=umax` (`offset` `None`: the codes themselves).
pub const fn code_bound(umax: u8, offset: Option<u8>) -> usize {
    match offset {
        Some(off) => {
            let (off, up) = (off as usize, umax as usize - off as usize);
            if off > up {
                off
            } else {
                up
            }
        }
        None => umax as usize,
    }
}

/// The `limit` [`gemm`] takes for activations packed in `order` (`folded`: the rows' offset where
/// the min terms are folded) against codes `0..=umax`: quad order over 16 narrows a unit by its
/// 16-element sums against the folded codes ([`PackedAct8::gsum`]); the pair form sums two
/// vectors of the codes as they are by the 4-element sums ([`PackedAct8::psum`]).
pub fn tile_limit(order: Order, umax: u8, folded: Option<u8>) -> u16 {
    narrow_limit(code_bound(umax, if order.is_quad() { folded } else { None }))
}

/// [`Kernels8::narrow_limit`] for codes of at most `bound` in magnitude.
pub const fn narrow_limit(bound: usize) -> u16 {
    let l = i16::MAX as usize / if bound == 0 { 1 } else { bound };
    if l > u16::MAX as usize {
        u16::MAX
    } else {
        l as u16
    }
}

/// The int8 entry of a type, in every build (the tests check the references natively); whether
/// the prompt uses it is [`enabled`].
pub fn kernels8(ty: GgmlType) -> Option<&'static Kernels8> {
    super::kquants::KERNELS8.iter().find(|k| k.ty == ty)
}

/// Whether the prompt GEMM of `ty` over `tokens` tokens runs in int8 in this build: only with
/// relaxed SIMD (without it a byte product costs as much as an i16 one), only for the types of
/// [`kernels8`] and where it measured faster ([`Kernels8::faster`], [`Kernels8::min_tokens`]).
pub fn enabled(ty: GgmlType, tokens: usize) -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd"))
        && kernels8(ty).is_some_and(|k| k.faster[(profile() == Profile::Wide) as usize] && tokens >= k.min_tokens)
}

/// The activations of one int8 GEMM call: tiles of `tile` tokens (the last holds the rest).
/// Tile j (c tokens) occupies `qs[tile·j·n ..]`: for each 16-element step k of the pair-ordered row,
/// the c tokens' 16 bytes side by side (token t at `qs[2j·n + (k·c + t)·16 ..][..16]`); `da` and
/// `bs` are laid out as in [`super::gemm::PackedAct`] (KB = 256).
#[derive(Clone, Debug, Default)]
pub struct PackedAct8 {
    pub n: usize,
    pub tokens: usize,
    /// Tokens per tile (2 or 4: [`Profile::tile`]).
    pub tile: usize,
    /// The element order: pair order, or one of the dot-add form's quad orders.
    pub order: Order,
    /// Pair order for rows decoded in the scaled form ([`Kernels8::scaled`]).
    pub scaled: bool,
    pub qs: Vec<i8>,
    pub da: Vec<f32>,
    pub bs: Vec<i16>,
    /// `Some(off)`: the rows are an offset type's ([`Kernels8::offset`]) and the min term is
    /// folded into the integer sums (module docs, "Offsets folded").
    pub fold: Option<u8>,
    /// With `fold`, the `ksum` the start sums `nq` are cut for (pair order).
    pub fold_ks: usize,
    /// With `fold`, the folded min terms the sums start from, `−off·Σa` over their elements.
    /// Quad order: per tile, unit (64 or 128 elements) and token slot, i32 lanes = the unit's 4
    /// groups.
    /// Pair order with `fold_ks` ≥ 4: per tile, run of `fold_ks` 16-byte steps and token slot,
    /// i16 lanes = the 8 groups of the half-block, wrapped to 16 bits (so are the sums).
    pub nq: Vec<i32>,
    /// Quad order over 16 ([`Order::Quads`]): per tile and 64-element unit, the largest `Σ|a|`
    /// over the unit's four 16-element groups and the tile's tokens — the unit runs narrowed
    /// where this is within the rows' [`Kernels8::narrow_limit`].
    pub gsum: Vec<u16>,
    /// Pair order: per tile and 128-element unit, the largest `Σ|a|` over the 4 elements of a
    /// group that two consecutive vectors hold (pairs 2q and 2q + 1 of group g) and the tile's
    /// tokens — the pair form sums the unit's vectors two at a time where this is within the rows'
    /// [`Kernels8::narrow_limit`]`(false)` ([`Kernels8::pair_run`] 1).
    pub psum: Vec<u16>,
    /// Pair order with `fold`: per tile, 128-element unit and token slot, the unit's 8 group sums
    /// `Σa` (i16 lanes) — the pairs-of-vectors kernel adds the unit's min terms as one
    /// `i32x4.dot_i16x8_s` of them with the rows' `mn` per (row, token).
    pub hsum: Vec<i16>,
}

impl PackedAct8 {
    /// Packs Q8_K activation rows for rows of `k`'s type in tiles of the current profile's width,
    /// in the type's quad order ([`Kernels8::quad_order`], `quad`) or pair order ([`pair_pos`]).
    pub fn pack(&mut self, act: &QAct, quad: bool, k: &Kernels8) {
        self.pack_tiles(act, profile().tile(), quad, k);
    }

    /// [`PackedAct8::pack`] in tiles of `tile` tokens: with the type's fold and, in pair order,
    /// the statistics its [`Kernels8::pair_run`] reads.
    pub fn pack_tiles(&mut self, act: &QAct, tile: usize, quad: bool, k: &Kernels8) {
        let order = if quad { k.quad_order() } else { Order::Pairs };
        self.pack_ordered(act, tile, order, k.fold(), k.pair_run(k.offset.is_some()));
    }

    /// Packs Q8_K activation rows for the scaled form of `k`'s rows ([`Kernels8::scaled`]): pair
    /// order, tiles of the current profile's width.
    pub fn pack_scaled(&mut self, act: &QAct, k: &Kernels8) {
        self.pack_scaled_tiles(act, profile().tile(), k);
    }

    /// [`PackedAct8::pack_scaled`] in tiles of `tile` tokens.
    pub fn pack_scaled_tiles(&mut self, act: &QAct, tile: usize, k: &Kernels8) {
        assert!(k.scaled.is_some() && k.offset.is_none(), "{}: no scaled form", k.ty);
        self.pack_ordered(act, tile, Order::Pairs, None, SCALED);
        self.scaled = true;
    }

    /// Packs Q8_K activation rows in tiles of `tile` (1..=[`MAX_TILE`]) tokens, in `order`, with
    /// `fold` ([`Kernels8::fold`]: the rows' offset and folded `ksum`) the min terms folded, for
    /// pair-order rows the tile kernel runs with `run` ([`Kernels8::pair_run`]: the pairs of
    /// vectors' [`PackedAct8::psum`] where it is 1, and with `fold` their [`PackedAct8::hsum`]
    /// where it is 1 or 2; other orders ignore it).
    pub fn pack_ordered(&mut self, act: &QAct, tile: usize, order: Order, fold: Option<(u8, usize)>, run: usize) {
        let (n, tokens) = (act.n, act.rows);
        assert!(n % QK_K == 0, "int8 GEMM rows are whole 256-element blocks");
        assert!((1..=MAX_TILE).contains(&tile), "tile of {tile} tokens");
        self.n = n;
        self.tokens = tokens;
        self.tile = tile;
        self.order = order;
        self.scaled = false;
        self.qs.clear();
        self.qs.resize(tokens * n, 0);
        super::gemm::pack_scales(act, QK_K, n, tile, &mut self.da, &mut self.bs);
        self.fold = fold.map(|(off, _)| off);
        self.fold_ks = fold.map_or(0, |(_, ks)| ks);
        self.nq.clear();
        match fold {
            Some((off, _)) if order.is_quad() => {
                // A lane's group: 1 (Quads) or 2 (Quads32) of the 16-element groups of `bsums`.
                let w = order.lane_group() / 16;
                let units = n / (64 * w);
                self.nq.resize(tokens.div_ceil(tile) * units * tile * 4, 0);
                for t in 0..tokens {
                    let (j, slot) = (t / tile, t % tile);
                    for (g, &s) in act.row(t).bsums.iter().enumerate() {
                        let (unit, lane) = (g / (4 * w), (g % (4 * w)) / w);
                        self.nq[((j * units + unit) * tile + slot) * 4 + lane] -= off as i32 * s as i32;
                    }
                }
            }
            Some((off, ks)) if ks >= 4 => {
                // i16 lanes, two per i32.
                self.nq.resize(tokens.div_ceil(tile) * (n / (16 * ks)) * tile * 4, 0);
                run_group_sums(act, tile, ks, -(off as i32), bytemuck::cast_slice_mut(&mut self.nq));
            }
            _ => {}
        }
        self.gsum.clear();
        if order == Order::Quads {
            largest_abs_sums(act, tile, 16, 64, &mut self.gsum);
        }
        self.hsum.clear();
        if order == Order::Pairs && fold.is_some() && run <= 2 {
            // A unit is a run of 8 steps.
            self.hsum.resize(tokens.div_ceil(tile) * (n / UNIT) * tile * 8, 0);
            run_group_sums(act, tile, 8, 1, &mut self.hsum);
        }
        self.psum.clear();
        if order == Order::Pairs && run == 1 {
            largest_abs_sums(act, tile, 4, UNIT, &mut self.psum);
        }
        // Every order keeps an element pair together.
        for j in 0..tokens.div_ceil(tile) {
            let (t0, c) = (tile * j, (tokens - tile * j).min(tile));
            let qs = &mut self.qs[t0 * n..(t0 + c) * n];
            for t in 0..c {
                let a = act.row(t0 + t).qs;
                for (p, v) in a.chunks_exact(2).enumerate() {
                    let x = order.pos(2 * p);
                    let dst = &mut qs[((x / 16) * c + t) * 16 + x % 16..][..2];
                    dst.copy_from_slice(v);
                }
            }
        }
    }

    fn tiles(&self) -> usize {
        self.tokens.div_ceil(self.tile)
    }
}

/// Per tile j, run x of `ks` pair-order steps (pairs q·ks.. of a half-block's 8 groups) and token
/// slot t: lanes `8·((j·runs + x)·tile + t) ..+8` of `out` = `mul·Σa` over each group's `2·ks`
/// elements of the run, wrapped to 16 bits — [`PackedAct8::nq`] (`mul` = −offset) and
/// [`PackedAct8::hsum`] (`ks` 8, `mul` 1).
fn run_group_sums(act: &QAct, tile: usize, ks: usize, mul: i32, out: &mut [i16]) {
    let runs = act.n / (16 * ks);
    for t in 0..act.rows {
        let (j, slot) = (t / tile, t % tile);
        let a = act.row(t).qs;
        for x in 0..runs {
            let (h, q) = (x / (8 / ks), x % (8 / ks));
            for g in 0..8 {
                let e = 128 * h + 16 * g + 2 * ks * q;
                let sum: i32 = a[e..e + 2 * ks].iter().map(|&v| v as i32).sum();
                out[((j * runs + x) * tile + slot) * 8 + g] = (mul * sum) as i16;
            }
        }
    }
}

/// `out[j·units + u]` = the largest `Σ|a|` over a run of `run` consecutive activations in unit `u`
/// (`unit` elements) of tile j's tokens: [`PackedAct8::gsum`] (runs of 16 in units of 64) and
/// [`PackedAct8::psum`] (runs of 4 in units of 128).
fn largest_abs_sums(act: &QAct, tile: usize, run: usize, unit: usize, out: &mut Vec<u16>) {
    let units = act.n / unit;
    out.resize(act.rows.div_ceil(tile) * units, 0);
    for t in 0..act.rows {
        for (i, v) in act.row(t).qs.chunks_exact(run).enumerate() {
            let sum = v.iter().map(|&x| (x as i16).unsigned_abs()).sum::<u16>();
            let m = &mut out[(t / tile) * units + i * run / unit];
            *m = (*m).max(sum);
        }
    }
}

/// The 8 pair-ordered vectors of a 128-element unit as the 8 vectors of its two quad-ordered
/// 64-element units (vector k of pair order holds pair k of groups 0..7; vector k of a quad unit
/// holds quad k = pairs 2k, 2k+1 of its 4 groups).
pub fn pairs_to_quads_ref(p: &[[u8; 16]; 8]) -> [[u8; 16]; 8] {
    let mut q = [[0u8; 16]; 8];
    for k in 0..4 {
        for g in 0..8 {
            let dst = &mut q[4 * (g / 4) + k][4 * (g % 4)..][..4];
            dst[..2].copy_from_slice(&p[2 * k][2 * g..2 * g + 2]);
            dst[2..].copy_from_slice(&p[2 * k + 1][2 * g..2 * g + 2]);
        }
    }
    q
}

/// The 8 pair-ordered vectors of a 128-element unit in quad order over groups of 32
/// ([`quad32_pos`]): vector k holds quad k % 4 of the 16-element groups 2g + k / 4, i.e. pairs
/// 2(k % 4) and 2(k % 4) + 1 of those groups.
pub fn pairs_to_quads32_ref(p: &[[u8; 16]; 8]) -> [[u8; 16]; 8] {
    let mut q = [[0u8; 16]; 8];
    for (k, qk) in q.iter_mut().enumerate() {
        let (m, h) = (k % 4, k / 4);
        for g in 0..4 {
            let src = 2 * (2 * g + h);
            qk[4 * g..4 * g + 2].copy_from_slice(&p[2 * m][src..src + 2]);
            qk[4 * g + 2..4 * g + 4].copy_from_slice(&p[2 * m + 1][src..src + 2]);
        }
    }
    q
}

/// Reorders a decoded row's codes from pair order to `order` (nothing for pair order), a
/// 128-element unit at a time.
pub fn row_to_order(u: &mut [u8], order: Order) {
    if order == Order::Pairs {
        return;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    // SAFETY: simd128 is enabled; chunks_exact gives whole 128-byte units.
    unsafe {
        for unit in u.chunks_exact_mut(UNIT) {
            match order {
                Order::Quads32 => simd::pairs_to_quads32(unit.as_mut_ptr()),
                _ => simd::pairs_to_quads(unit.as_mut_ptr()),
            }
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    for unit in u.chunks_exact_mut(UNIT) {
        let p: [[u8; 16]; 8] = core::array::from_fn(|k| unit[16 * k..16 * k + 16].try_into().unwrap());
        let q = if order == Order::Quads32 { pairs_to_quads32_ref(&p) } else { pairs_to_quads_ref(&p) };
        for (k, q) in q.iter().enumerate() {
            unit[16 * k..16 * k + 16].copy_from_slice(q);
        }
    }
}

/// Whether this engine computes the dot-add form (`simd::quad_blocks`) exactly: checked once
/// per instance, on rows whose codes, scales and activations reach their extremes, against the
/// pair form bit for bit. Node 20's V8 miscomputes `i32x4.relaxed_dot_i8x16_i7x16_add_s` (module
/// docs) and fails it; builds without relaxed SIMD have no dot-add form.
///
/// V8 compiles a function twice (a baseline tier first, an optimizing one once it is hot), and
/// Node 20's baseline tier is the one that miscomputes; [`recheck_quad_add`] repeats the check
/// once the kernels have run hot.
pub fn quad_add_exact() -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        use core::sync::atomic::Ordering::Relaxed;
        return match QUAD_EXACT.load(Relaxed) {
            0 => {
                let ok = quads_equal_pairs(&[2, 4]);
                QUAD_EXACT.store(if ok { 1 } else { 2 }, Relaxed);
                ok
            }
            v => v == 1,
        };
    }
    #[allow(unreachable_code)]
    false
}

/// Repeats [`quad_add_exact`]'s check (the kernels now in whatever tier they run) and keeps the
/// dot-add form off for good if it fails; returns whether it passed.
pub fn recheck_quad_add() -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        let ok = quad_add_exact() && quads_equal_pairs(&[2, 4]);
        if !ok {
            QUAD_EXACT.store(2, core::sync::atomic::Ordering::Relaxed);
        }
        return ok;
    }
    #[allow(unreachable_code)]
    false
}

/// 0 not checked yet, 1 exact, 2 not.
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
static QUAD_EXACT: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// The int8 GEMM of fixed 3-row × 512-element cases in pair order and in each quad order (rows
/// whose scales come per 32 elements for [`Order::Quads32`]), for each tile width of `tiles` and
/// 5, 6 and 7 tokens (every tile kernel: 1 and 2 rows, 1–4 tokens), with mins and with an offset
/// folded: whether the outputs are the same bits. Codes 0..=127 (many 127), and 0..=15 or
/// 0..=30 around an offset of 15 (narrowed everywhere in quad order over 16), scales
/// −128..=127, activations ±127 and a ramp, and in some units activations small enough that
/// even the largest codes narrow there.
pub fn quads_equal_pairs(tiles: &[usize]) -> bool {
    [(None, 127), (Some(43), 127)].into_iter().all(|(offset, umax)| {
        [Order::Quads, Order::Quads32].into_iter().all(|order| quads_equal_pairs_with(tiles, offset, umax, order))
    }) && [(None, 15), (Some(15), 30)].into_iter().all(|(offset, umax)| quads_equal_pairs_with(tiles, offset, umax, Order::Quads))
}

fn quads_equal_pairs_with(tiles: &[usize], offset: Option<u8>, umax: u8, order: Order) -> bool {
    let (n, max_tokens) = (512, 7);
    // Groups 2g and 2g + 1 share their scale where the order sums 32 elements per lane.
    let per = order.lane_group() / 16;
    let rows: Vec<Decoded8> = (0..3)
        .map(|r| {
            let mut d = Decoded8::default();
            d.resize(n);
            for (i, u) in d.u.iter_mut().enumerate() {
                *u = match (i + r) % 5 {
                    0 | 1 => umax,
                    2 => 0,
                    _ => ((i * 37 + r * 11) % (umax as usize + 1)) as u8,
                };
            }
            for (g, (sc, mn)) in d.sc.iter_mut().zip(d.mn.iter_mut()).enumerate() {
                *sc = [127, -128, 63, 1, -7][(g / per + r) % 5];
                *mn = match offset {
                    Some(off) => -(off as i16) * *sc,
                    None => g as i16 - 8,
                };
            }
            for (b, (d, m)) in d.d.iter_mut().zip(d.m.iter_mut()).enumerate() {
                *d = 0.5 + b as f32;
                *m = if offset.is_some() { *d } else { -0.25 };
            }
            d
        })
        .collect();
    let mut quad_rows = rows.clone();
    for d in &mut quad_rows {
        row_to_order(&mut d.u, order);
    }
    let mut packed = PackedAct8::default();
    let mut act = QAct::default();
    (5..=max_tokens).all(|tokens| {
        let x: Vec<f32> = (0..n * tokens)
            .map(|i| match (i + tokens) % 7 {
                0 if (i / 64) % 3 != 1 => 1.0,
                1 if (i / 64) % 3 != 1 => -1.0,
                // Units (64 elements) 1, 4, 7 of each row: |a| ≤ 2.
                _ if (i / 64) % 3 == 1 => ((i * 13 % 5) as f32 - 2.0) / 127.0,
                _ => ((i * 13 % 255) as f32 - 127.0) / 127.0,
            })
            .collect();
        super::quantize_q8(super::ActKind::Q8K, &x, n, &mut act);
        tiles.iter().all(|&tile| {
            let mut y = [vec![0.0f32; 3 * tokens], vec![0.0f32; 3 * tokens]];
            for (o, y) in [Order::Pairs, order].into_iter().zip(&mut y) {
                packed.pack_ordered(&act, tile, o, offset.map(|off| (off, 1)), 1);
                let limit = tile_limit(o, umax, offset);
                gemm(if o.is_quad() { &quad_rows } else { &rows }, 1, limit, &packed, y, 3, 0);
            }
            y[0].iter().zip(&y[1]).all(|(a, b)| a.to_bits() == b.to_bits())
        })
    })
}

/// Reusable buffers of [`gemm_rows`].
#[derive(Clone, Debug, Default)]
pub struct Gemm8Scratch {
    decoded: Vec<Decoded8>,
    /// A panel's rows un-interleaved, for weights in the R4 layout.
    plain: Vec<u8>,
}

/// `y[t·y_stride + col0 + j] = Σ_i W_j[i]·A[t][i]` for the decoded rows `w` (≤ [`PANEL`]) and every
/// token of `act`, two rows × one token tile at a time; `ksum` as [`Kernels8::pair_run`] (pair
/// order), and `limit` as [`tile_limit`] for the rows' type and the activations' order.
pub fn gemm(w: &[Decoded8], ksum: usize, limit: u16, act: &PackedAct8, y: &mut [f32], y_stride: usize, col0: usize) {
    let n = act.n;
    for r in w {
        assert!(r.u.len() == n && r.sc.len() == n / 16 && r.d.len() == n / QK_K, "weight row and activations differ in length");
        assert!(r.m.len() == n / QK_K && r.mn.len() == n / 16);
    }
    assert!(matches!(ksum, 1 | 2 | 4 | 8) || ksum == SCALED && act.fold.is_none());
    assert!(act.order != Order::Quads || act.gsum.len() == act.tiles() * (n / 64), "quad activations without their group sums");
    let pairs = act.order == Order::Pairs && !act.scaled && ksum <= 2;
    assert!(!pairs || ksum == 2 || act.psum.len() == act.tiles() * (n / UNIT), "pair activations without their unit sums");
    assert!(!pairs || act.fold.is_none() || act.hsum.len() == act.tiles() * (n / UNIT) * act.tile * 8, "folded pair activations without their group sums");
    assert_eq!(ksum == SCALED, act.scaled, "scaled rows take the scaled tiles, and only they");
    let folded_ks = act.fold.is_none() || act.order.is_quad() || ksum < 4 || ksum == act.fold_ks;
    assert!(folded_ks, "start sums cut for another ksum");
    assert!(act.tokens == 0 || (act.tokens - 1) * y_stride + col0 + w.len() <= y.len(), "output too small");
    // The tile width as a constant: with a run-time width (and every width's kernels in one
    // dispatch) Node 20's V8 ran the 2-token tiles at half their speed.
    match act.tile {
        2 => gemm_tiles::<2>(w, ksum, limit, act, y, y_stride, col0),
        4 => gemm_tiles::<4>(w, ksum, limit, act, y, y_stride, col0),
        t => panic!("activations packed in tiles of {t}"),
    }
}

fn gemm_tiles<const TILE: usize>(w: &[Decoded8], ksum: usize, limit: u16, act: &PackedAct8, y: &mut [f32], y_stride: usize, col0: usize) {
    for j in 0..act.tiles() {
        let (t0, c) = (TILE * j, (act.tokens - TILE * j).min(TILE));
        let mut r = 0;
        while r < w.len() {
            let rows = (w.len() - r).min(ROWS);
            let out = tile_dispatch::<TILE>(&w[r..r + rows], ksum, limit, act, j, c);
            for t in 0..c {
                for (k, v) in out[..rows].iter().enumerate() {
                    y[(t0 + t) * y_stride + col0 + r + k] = v[t];
                }
            }
            r += rows;
        }
    }
}

/// The int8 prompt product for output rows `rows` of a weight matrix (`weights`: rows of `k.ty`,
/// plain or interleaved, `act.n` elements each): panels of [`PANEL`] rows decoded with
/// `k.decode`, then [`gemm`]; results to `y[t·y_stride + r]`.
pub fn gemm_rows(
    k: &Kernels8,
    weights: Rows<'_>,
    rows: core::ops::Range<usize>,
    act: &PackedAct8,
    s: &mut Gemm8Scratch,
    y: &mut [f32],
    y_stride: usize,
) {
    let n = act.n;
    let rb = k.ty.row_bytes(n);
    assert!(rows.end * rb <= weights.data.len(), "weight matrix too small");
    assert!(
        act.fold.is_none() || act.fold == k.offset,
        "activations packed for another type's offset"
    );
    assert!(
        !act.order.is_quad() || act.order == k.quad_order(),
        "{}: activations packed in another type's quad order",
        k.ty
    );
    s.decoded.resize_with(PANEL, Decoded8::default);
    for d in s.decoded.iter_mut() {
        d.resize(n);
    }
    let folded = act.fold.is_some();
    let (decode, ksum) = match k.scaled {
        Some(decode) if act.scaled => (decode, SCALED),
        _ => {
            assert!(!act.scaled, "{}: activations packed for a scaled form it lacks", k.ty);
            (k.decode, k.pair_run(folded))
        }
    };
    let limit = tile_limit(act.order, k.umax, act.fold);
    let mut r0 = rows.start;
    while r0 < rows.end {
        let p = (rows.end - r0).min(PANEL);
        let plain = weights.panel(k.ty, rb, r0, p, &mut s.plain);
        for (row, d) in plain.chunks_exact(rb).zip(&mut s.decoded[..p]) {
            decode(row, d);
            row_to_order(&mut d.u, act.order);
        }
        gemm(&s.decoded[..p], ksum, limit, act, y, y_stride, r0);
        r0 += p;
    }
}

/// One tile of ≤ 2 rows × c tokens → `out[row][token]`.
#[inline]
fn tile_dispatch<const TILE: usize>(w: &[Decoded8], ksum: usize, limit: u16, act: &PackedAct8, j: usize, c: usize) -> [[f32; 4]; 2] {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        macro_rules! by_c {
            ($r:literal, $ks:literal) => {{
                let rows: [&Decoded8; $r] = core::array::from_fn(|i| &w[i]);
                // SAFETY: relaxed-simd is enabled; `gemm` checked every length the kernel reads.
                let v = unsafe {
                    match c {
                        1 => simd::tile::<$r, 1, $ks, TILE>(rows, act, j, limit),
                        2 => simd::tile::<$r, 2, $ks, TILE>(rows, act, j, limit),
                        3 if TILE == 4 => simd::tile::<$r, 3, $ks, TILE>(rows, act, j, limit),
                        _ if TILE == 4 => simd::tile::<$r, 4, $ks, TILE>(rows, act, j, limit),
                        _ => unreachable!("a tile of {c} tokens"),
                    }
                };
                let mut out = [[0.0f32; 4]; 2];
                for (o, v) in out.iter_mut().zip(v) {
                    *o = crate::quant::simd::lanes(v);
                }
                out
            }};
        }
        match act.order {
            Order::Quads if limit >= NARROW_ALWAYS => return if w.len() == 1 { by_c!(1, 48) } else { by_c!(2, 48) },
            Order::Quads => return if w.len() == 1 { by_c!(1, 0) } else { by_c!(2, 0) },
            Order::Quads32 => return if w.len() == 1 { by_c!(1, 32) } else { by_c!(2, 32) },
            Order::Pairs => {}
        }
        if act.scaled {
            return if w.len() == 1 { by_c!(1, 16) } else { by_c!(2, 16) };
        }
        return match (w.len(), ksum) {
            (1, 8) => by_c!(1, 8),
            (1, 4) => by_c!(1, 4),
            (1, 2) => by_c!(1, 2),
            (1, _) => by_c!(1, 1),
            (_, 8) => by_c!(2, 8),
            (_, 4) => by_c!(2, 4),
            (_, 2) => by_c!(2, 2),
            (_, _) => by_c!(2, 1),
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = (ksum, limit); // the portable kernel sums in i32 directly
        tile_scalar(w, act, j, c)
    }
}

/// Portable version of the tile kernel on the same layouts (natively; keeps the packing tested).
#[allow(dead_code)]
fn tile_scalar(w: &[Decoded8], act: &PackedAct8, j: usize, c: usize) -> [[f32; 4]; 2] {
    let n = act.n;
    let nb = n / QK_K;
    let qs = &act.qs[act.tile * j * n..][..c * n];
    let da = &act.da[j * nb * 4..][..nb * 4];
    let bs = &act.bs[j * (n / 32) * 8..][..(n / 32) * 8];
    let mut out = [[0.0f32; 4]; 2];
    for (r, wr) in w.iter().enumerate() {
        for t in 0..c {
            let mut sum = 0.0f32;
            for b in 0..nb {
                let mut isum = 0i32;
                for x in QK_K * b..QK_K * (b + 1) {
                    let g = act.order.group_of(x);
                    let a = qs[((x / 16) * c + t) * 16 + x % 16];
                    isum += wr.sc[g] as i32 * wr.u[x] as i32 * a as i32;
                }
                let msum: i32 = (16 * b..16 * (b + 1)).map(|g| wr.mn[g] as i32 * bs[8 * (g / 2) + 2 * t + g % 2] as i32).sum();
                sum += da[4 * b + t]
                    * if act.fold.is_some() { wr.d[b] * (isum + msum) as f32 } else { wr.d[b] * isum as f32 + wr.m[b] * msum as f32 };
            }
            out[r][t] = sum;
        }
    }
    out
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd {
    //! SIMD128 pieces of the int8 form shared by the decoders, and (with relaxed SIMD) the tile
    //! kernel.
    use core::arch::wasm32::*;

    /// Stores the 16 group vectors `v[g]` (16 codes each: elements 16g..16g+16 of a 256-element
    /// block) in pair order at `dst`: per 128-element half, the 8×8 transpose of 16-bit lanes.
    ///
    /// # Safety
    /// `dst..dst+256` must be writable.
    #[inline(always)]
    pub unsafe fn store_pair_order(v: &[v128; 16], dst: *mut u8) {
        for h in 0..2 {
            let g = &v[8 * h..8 * h + 8];
            // Three rounds of interleaving (16-, 32-, 64-bit units).
            let a0 = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(g[0], g[1]);
            let a1 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(g[0], g[1]);
            let a2 = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(g[2], g[3]);
            let a3 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(g[2], g[3]);
            let a4 = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(g[4], g[5]);
            let a5 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(g[4], g[5]);
            let a6 = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(g[6], g[7]);
            let a7 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(g[6], g[7]);
            let b0 = i32x4_shuffle::<0, 4, 1, 5>(a0, a2);
            let b1 = i32x4_shuffle::<2, 6, 3, 7>(a0, a2);
            let b2 = i32x4_shuffle::<0, 4, 1, 5>(a1, a3);
            let b3 = i32x4_shuffle::<2, 6, 3, 7>(a1, a3);
            let b4 = i32x4_shuffle::<0, 4, 1, 5>(a4, a6);
            let b5 = i32x4_shuffle::<2, 6, 3, 7>(a4, a6);
            let b6 = i32x4_shuffle::<0, 4, 1, 5>(a5, a7);
            let b7 = i32x4_shuffle::<2, 6, 3, 7>(a5, a7);
            let d = dst.add(128 * h) as *mut v128;
            v128_store(d, i64x2_shuffle::<0, 2>(b0, b4));
            v128_store(d.add(1), i64x2_shuffle::<1, 3>(b0, b4));
            v128_store(d.add(2), i64x2_shuffle::<0, 2>(b1, b5));
            v128_store(d.add(3), i64x2_shuffle::<1, 3>(b1, b5));
            v128_store(d.add(4), i64x2_shuffle::<0, 2>(b2, b6));
            v128_store(d.add(5), i64x2_shuffle::<1, 3>(b2, b6));
            v128_store(d.add(6), i64x2_shuffle::<0, 2>(b3, b7));
            v128_store(d.add(7), i64x2_shuffle::<1, 3>(b3, b7));
        }
    }

    /// Reorders one 128-element unit at `p` from pair order to quad order, in place
    /// ([`super::pairs_to_quads_ref`]).
    ///
    /// # Safety
    /// `p..p+128` must be readable and writable.
    #[inline(always)]
    pub unsafe fn pairs_to_quads(p: *mut u8) {
        let v = p as *mut v128;
        let pv: [v128; 8] = core::array::from_fn(|k| v128_load(v.add(k)));
        for k in 0..4 {
            v128_store(v.add(k), i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(pv[2 * k], pv[2 * k + 1]));
            v128_store(v.add(4 + k), i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(pv[2 * k], pv[2 * k + 1]));
        }
    }

    /// Reorders one 128-element unit at `p` from pair order to quad order over groups of 32, in
    /// place ([`super::pairs_to_quads32_ref`]).
    ///
    /// # Safety
    /// `p..p+128` must be readable and writable.
    #[inline(always)]
    pub unsafe fn pairs_to_quads32(p: *mut u8) {
        let v = p as *mut v128;
        let pv: [v128; 8] = core::array::from_fn(|k| v128_load(v.add(k)));
        for m in 0..4 {
            v128_store(v.add(m), i16x8_shuffle::<0, 8, 2, 10, 4, 12, 6, 14>(pv[2 * m], pv[2 * m + 1]));
            v128_store(v.add(4 + m), i16x8_shuffle::<1, 9, 3, 11, 5, 13, 7, 15>(pv[2 * m], pv[2 * m + 1]));
        }
    }

    /// Stores 16 i16 from the 16 signed bytes of `v` at `dst`, and the same times `mul` at `dst2`.
    ///
    /// The stores every offset-code decoder (the IQ types) ends with: the scales of a 256-element
    /// block's 16 groups come with mins `−off·sc` and the block's min factor `m` equals `d`, so
    /// the offset added to each code comes back through the min term.
    impl super::Decoded8 {
        /// Group `g` (elements 16g..16g+16 of the row): scale `ls`, min `−off·ls`.
        ///
        /// # Safety
        /// `g < n / 16` for the row length `n` the buffers are sized for.
        #[inline(always)]
        pub unsafe fn put_offset_scale(&mut self, g: usize, ls: i16, off: i16) {
            *self.sc.get_unchecked_mut(g) = ls;
            *self.mn.get_unchecked_mut(g) = -off * ls;
        }

        /// Block `b`: its 16 group vectors `v` in pair order ([`store_pair_order`]), `d` and `m = d`.
        ///
        /// # Safety
        /// `b < n / 256` for the row length `n` the buffers are sized for.
        #[inline(always)]
        pub unsafe fn put_offset_block(&mut self, b: usize, v: &[v128; 16], d: f32) {
            store_pair_order(v, self.u.as_mut_ptr().add(super::QK_K * b));
            self.d[b] = d;
            self.m[b] = d;
        }
    }

    /// # Safety
    /// `dst..dst+16` and `dst2..dst2+16` must be writable.
    #[inline(always)]
    pub unsafe fn store_i16_and_scaled(dst: *mut i16, v: v128, dst2: *mut i16, mul: v128) {
        let (lo, hi) = (i16x8_extend_low_i8x16(v), i16x8_extend_high_i8x16(v));
        v128_store(dst as *mut v128, lo);
        v128_store(dst.add(8) as *mut v128, hi);
        v128_store(dst2 as *mut v128, i16x8_mul(lo, mul));
        v128_store(dst2.add(8) as *mut v128, i16x8_mul(hi, mul));
    }

    /// `[Σ v[0], Σ v[1], Σ v[2], Σ v[3]]` of C ≤ 4 i32x4 (missing ones count as zero).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    fn hsum_i32_lanes<const C: usize>(v: &[v128; C]) -> v128 {
        let z = i32x4_splat(0);
        let get = |i: usize| if i < C { v[i] } else { z };
        let (a, b, c, d) = (get(0), get(1), get(2), get(3));
        let ab = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(a, b), i32x4_shuffle::<2, 6, 3, 7>(a, b));
        let cd = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(c, d), i32x4_shuffle::<2, 6, 3, 7>(c, d));
        i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(ab, cd), i32x4_shuffle::<2, 3, 6, 7>(ab, cd))
    }

    /// The next 16 codes of each of the R rows; advances their pointers.
    ///
    /// # Safety
    /// `wp[r]..+16` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn next_codes<const R: usize>(wp: &mut [*const u8; R]) -> [v128; R] {
        core::array::from_fn(|r| {
            let v = v128_load(wp[r] as *const v128);
            wp[r] = wp[r].add(16);
            v
        })
    }

    /// `KS` steps of 16 elements of R rows (`wp`) × C tokens (`ap`, interleaved per 16 bytes):
    /// the relaxed dots summed in i16 per (row, token), from `start[c]` (a token's folded min
    /// terms, or zeros); advances both pointers. The trip count
    /// is opaque (`black_box`) so that V8 keeps it a loop (unrolled, its loads are hoisted and
    /// spilled; see the module docs).
    ///
    /// # Safety
    /// `wp[r]..+16·KS` and `ap..+16·C·KS` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    unsafe fn rdot_steps<const R: usize, const C: usize, const KS: usize>(
        wp: &mut [*const u8; R],
        ap: &mut *const i8,
        start: [v128; C],
    ) -> [[v128; C]; R] {
        let mut p = [start; R];
        for _ in 0..core::hint::black_box(KS) {
            let wv = next_codes(wp);
            for c in 0..C {
                let av = v128_load(ap.add(16 * c) as *const v128);
                for r in 0..R {
                    // Activations (signed) first, codes (7-bit) second.
                    p[r][c] = i16x8_add(p[r][c], i16x8_relaxed_dot_i8x16_i7x16(av, wv[r]));
                }
            }
            *ap = ap.add(16 * C);
        }
        p
    }

    /// `N` steps of 16 elements of R rows (`wp`) × C tokens (`ap`, interleaved per 16 bytes),
    /// unrolled: `i32x4.relaxed_dot_i8x16_i7x16_add_s` into `acc` per (row, token); advances both
    /// pointers. The callers keep the trip count around it opaque (V8 keeps that a loop).
    ///
    /// # Safety
    /// `wp[r]..+16·N` and `ap..+16·C·N` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    unsafe fn dot_add_steps<const R: usize, const C: usize, const N: usize>(
        wp: &mut [*const u8; R],
        ap: &mut *const i8,
        acc: &mut [[v128; C]; R],
    ) {
        for _ in 0..N {
            let wv = next_codes(wp);
            for c in 0..C {
                let av = v128_load(ap.add(16 * c) as *const v128);
                for r in 0..R {
                    acc[r][c] = i32x4_relaxed_dot_i8x16_i7x16_add(av, wv[r], acc[r][c]);
                }
            }
            *ap = ap.add(16 * C);
        }
    }

    /// R rows × the C tokens of tile `j`, `KS` = the rows' `ksum` (module docs), `limit` their
    /// narrowing limit (quad order over 16). Returns one f32x4 per row whose lane c is the row's
    /// product with token c.
    ///
    /// # Safety
    /// Requires relaxed SIMD; every row must have `act.n` codes (`gemm` checks) and `j` must be a
    /// tile of `act` with C tokens.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128,relaxed-simd")]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    pub unsafe fn tile<const R: usize, const C: usize, const KS: usize, const TILE: usize>(
        w: [&super::Decoded8; R],
        act: &super::PackedAct8,
        j: usize,
        limit: u16,
    ) -> [v128; R] {
        use super::QK_K;
        let n = act.n;
        let nb = n / QK_K;
        debug_assert!(act.tile == TILE && (act.tokens - TILE * j).min(TILE) == C);
        debug_assert!(act.order == super::order_of_ks(KS));
        let mut ap = act.qs.as_ptr().add(TILE * j * n);
        let da = act.da.as_ptr().add(j * nb * 4);
        let bs = act.bs.as_ptr().add(j * (n / 32) * 8);
        let mut wp = [core::ptr::null::<u8>(); R];
        let mut sp = [core::ptr::null::<i16>(); R];
        for r in 0..R {
            wp[r] = w[r].u.as_ptr();
            sp[r] = w[r].sc.as_ptr();
        }
        let (mut mn, mut m) = ([core::ptr::null::<i16>(); R], [core::ptr::null::<f32>(); R]);
        for r in 0..R {
            mn[r] = w[r].mn.as_ptr();
            m[r] = w[r].m.as_ptr();
        }
        let fold = act.fold.is_some();
        let mut facc = if KS == super::SCALED {
            debug_assert!(act.scaled && !fold);
            scaled_blocks::<R, C>(w, nb, &mut wp, &mut ap, da)
        } else if KS == super::QUADS || KS == super::NARROWED || KS == super::QUADS32 {
            // Folded, each unit's sums start from its packed min terms; else from zeros.
            let unit = 4 * super::order_of_ks(KS).lane_group();
            let nq = if fold {
                (act.nq.as_ptr().add(j * (n / unit) * TILE * 4) as *const v128, TILE)
            } else {
                (ZERO_SUMS.as_ptr() as *const v128, 0)
            };
            if KS == super::QUADS32 {
                quad32_blocks::<R, C>(w, nb, &mut wp, &mut sp, &mut ap, da, nq)
            } else {
                let gsum = (act.gsum.as_ptr().add(j * (n / 64)), limit);
                if KS == super::NARROWED {
                    narrowed_blocks::<R, C, false>(w, nb, &mut wp, &mut sp, &mut ap, da, nq, gsum)
                } else {
                    narrowed_blocks::<R, C, true>(w, nb, &mut wp, &mut sp, &mut ap, da, nq, gsum)
                }
            }
        } else if KS >= 4 {
            // Folded, each run of KS steps starts from its packed min terms; else from zeros.
            let starts = if fold {
                (act.nq.as_ptr().add(j * (n / (16 * KS)) * TILE * 4) as *const v128, TILE)
            } else {
                (ZERO_SUMS.as_ptr() as *const v128, 0)
            };
            i16_sum_blocks::<R, C, KS, TILE>(w, nb, &mut wp, &mut sp, &mut ap, da, starts)
        } else {
            // Pairs of vectors (KS 2), or pairs where the unit's activations allow it (KS 1);
            // folded, each unit's min terms from its group sums.
            let units = n / super::UNIT;
            let psum = (act.psum.as_ptr().add(j * units), limit);
            let hsum = if fold { act.hsum.as_ptr().add(j * units * TILE * 8) as *const v128 } else { core::ptr::null() };
            let mins = (mn, hsum, TILE);
            match (fold, KS == 1) {
                (true, true) => pair_blocks::<R, C, true, true>(w, nb, &mut wp, &mut sp, &mut ap, da, mins, psum),
                (true, false) => pair_blocks::<R, C, true, false>(w, nb, &mut wp, &mut sp, &mut ap, da, mins, psum),
                (false, true) => pair_blocks::<R, C, false, true>(w, nb, &mut wp, &mut sp, &mut ap, da, mins, psum),
                (false, false) => pair_blocks::<R, C, false, false>(w, nb, &mut wp, &mut sp, &mut ap, da, mins, psum),
            }
        };
        if !fold {
            // The min terms as floats, in the i16 GEMM's second pass.
            crate::quant::gemm::simd::add_mins256(&mut facc, mn, m, da, bs, nb);
        }
        facc
    }

    /// Start sums of the dot-add form's units where nothing is folded.
    #[cfg(target_feature = "relaxed-simd")]
    static ZERO_SUMS: [i32; 4 * super::MAX_TILE] = [0; 4 * super::MAX_TILE];

    /// `facc[r] += d_r·da·Σ(block b's integer sums of row r)`, one lane per token.
    ///
    /// # Safety
    /// `da` holds the tile's scales of block `b`; every row has a `d` for it.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn add_block<const R: usize, const C: usize>(facc: &mut [v128; R], iacc: &[[v128; C]; R], w: [&super::Decoded8; R], b: usize, da: *const f32) {
        let isum: [v128; R] = core::array::from_fn(|r| hsum_i32_lanes(&iacc[r]));
        add_block_sums(facc, isum, w, b, da);
    }

    /// `facc[r] += d_r·da·isum[r]`: block `b`'s integer sums of row r, one lane per token.
    ///
    /// # Safety
    /// As [`add_block`].
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn add_block_sums<const R: usize>(facc: &mut [v128; R], isum: [v128; R], w: [&super::Decoded8; R], b: usize, da: *const f32) {
        let dab = v128_load(da.add(4 * b) as *const v128);
        for r in 0..R {
            let isum = f32x4_convert_i32x4(isum[r]);
            let d = f32x4_splat(*w[r].d.get_unchecked(b));
            facc[r] = f32x4_add(facc[r], f32x4_mul(f32x4_mul(isum, d), dab));
        }
    }

    /// The blocks of [`tile`] with `KS` = [`QUADS32`](super::QUADS32), rows and activations in
    /// quad order over groups of 32: per 128-element unit, eight
    /// `i32x4.relaxed_dot_i8x16_i7x16_add_s` per (row, token) sum the 32 products of each group in
    /// one i32 lane, then one `i32x4.mul` by the unit's 4 group scales adds them to the block's
    /// sums, which live in memory (with the unit sums, 2 × 4 of each do not fit V8's 16
    /// registers). The integers are those of the pair-order kernels, so the results are bit for
    /// bit. Returns `Σ_b d·da·(the block's integer sum)` per row.
    ///
    /// # Safety
    /// As [`tile`]; the pointers are at the rows' codes / scales and the tile's activations, and
    /// every row's groups 2g and 2g + 1 have the same scale.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    unsafe fn quad32_blocks<const R: usize, const C: usize>(
        w: [&super::Decoded8; R],
        nb: usize,
        wp: &mut [*const u8; R],
        sp: &mut [*const i16; R],
        ap: &mut *const i8,
        da: *const f32,
        (mut nq, nq_step): (*const v128, usize),
    ) -> [v128; R] {
        let mut facc = [f32x4_splat(0.0); R];
        let mut iacc_mem = [[i32x4_splat(0); C]; R];
        let ia = iacc_mem.as_mut_ptr() as *mut v128;
        for b in 0..nb {
            for i in 0..R * C {
                core::ptr::write_volatile(ia.add(i), i32x4_splat(0));
            }
            // 2 units of 128 elements, 8 steps of 16 each, taken two at a time; opaque trip
            // counts keep these loops. Fully unrolled, the steps' loads were hoisted (0.78×); one
            // step per iteration paid V8's loop overhead (pointer increments, the counter
            // spilled, the interrupt check: 7 instructions beside 8 dot-adds) twice as often
            // (Chromium 156, Intel Xeon (Emerald Rapids), IQ2_SX in quad order over 16 at
            // T = 128: 38.4–39.8 → 40.9–41.1 G MAC/s).
            for _ in 0..core::hint::black_box(2) {
                // The unit's sums start from its folded min terms (or from zero).
                let start: [v128; C] = core::array::from_fn(|c| v128_load(nq.add(c)));
                nq = nq.add(nq_step);
                let mut t = [start; R];
                for _ in 0..core::hint::black_box(4) {
                    dot_add_steps::<R, C, 2>(wp, ap, &mut t);
                }
                for r in 0..R {
                    // The unit's 4 scales (groups 2g and 2g + 1 as one) as i32 lanes: lane g of
                    // the 8 i16 scales read as i32, the low half sign-extended.
                    let s = i32x4_shr(i32x4_shl(v128_load(sp[r] as *const v128), 16), 16);
                    sp[r] = sp[r].add(8);
                    for c in 0..C {
                        let x = ia.add(r * C + c);
                        core::ptr::write_volatile(x, i32x4_add(core::ptr::read_volatile(x), i32x4_mul(t[r][c], s)));
                    }
                }
            }
            let mut iacc = [[i32x4_splat(0); C]; R];
            for r in 0..R {
                for c in 0..C {
                    iacc[r][c] = core::ptr::read_volatile(ia.add(r * C + c));
                }
            }
            add_block::<R, C>(&mut facc, &iacc, w, b, da);
        }
        facc
    }

    /// The blocks of [`tile`] with `KS` = [`QUADS`](super::QUADS), rows and activations in quad
    /// order over groups of 16: per 64-element unit, four `i32x4.relaxed_dot_i8x16_i7x16_add_s`
    /// per (row, token) sum the 16 products of each group in one i32 lane, and the unit's 4 group
    /// scales weigh them into the block's sums, kept per token pair: lanes 0, 1 of `acc[r][p]`
    /// for token 2p, lanes 2, 3 for token 2p + 1 (R × C/2 vectors, in registers).
    ///
    /// **Narrowed** where every group sum of the unit surely fits i16 — the tile's activations
    /// there within the rows' `limit` ([`super::Kernels8::narrow_limit`], against the unit's
    /// [`super::PackedAct8::gsum`]): two tokens' sums narrow into one vector
    /// (`i16x8.narrow_i32x4_s`, exact in range) and one `i32x4.dot_i16x8_s` against the unit's
    /// scales twice adds `s0·t0 + s1·t1`, `s2·t2 + s3·t3` for both tokens. Elsewhere the same
    /// lanes in i32: two `i32x4.mul` and two shuffles. Either way the integers are the pair
    /// form's, so the results are bit for bit.
    ///
    /// # Safety
    /// As [`tile`]; the pointers are at the rows' codes / scales and the tile's activations;
    /// `gsum` at the tile's unit sums.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    #[allow(clippy::needless_range_loop, clippy::too_many_arguments)] // (row, token) indices
    unsafe fn narrowed_blocks<const R: usize, const C: usize, const CHECK: bool>(
        w: [&super::Decoded8; R],
        nb: usize,
        wp: &mut [*const u8; R],
        sp: &mut [*const i16; R],
        ap: &mut *const i8,
        da: *const f32,
        (mut nq, nq_step): (*const v128, usize),
        (mut gsum, limit): (*const u16, u16),
    ) -> [v128; R] {
        let z = i32x4_splat(0);
        let mut facc = [f32x4_splat(0.0); R];
        for b in 0..nb {
            // Tokens 2p and 2p + 1 (C ≤ 4, so p < 2).
            let mut acc = [[z; 2]; R];
            // 4 units of 64 elements (opaque trip count, as in quad32_blocks).
            for _ in 0..core::hint::black_box(4) {
                let start: [v128; C] = core::array::from_fn(|c| v128_load(nq.add(c)));
                nq = nq.add(nq_step);
                let narrow = !CHECK || *gsum <= limit;
                gsum = gsum.add(1);
                if narrow {
                    narrowed_unit::<R, C, true>(wp, sp, ap, start, &mut acc);
                } else {
                    narrowed_unit::<R, C, false>(wp, sp, ap, start, &mut acc);
                }
            }
            // [t0 t0' t1 t1'], [t2 t2' t3 t3'] → [t0 t1 t2 t3].
            let isum: [v128; R] = core::array::from_fn(|r| add_lane_pairs(acc[r][0], acc[r][1]));
            add_block_sums(&mut facc, isum, w, b, da);
        }
        facc
    }

    /// `[a0 + a1, a2 + a3, b0 + b1, b2 + b3]`: adjacent i32 lanes of `a` and `b` added.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    fn add_lane_pairs(a: v128, b: v128) -> v128 {
        i32x4_add(i32x4_shuffle::<0, 2, 4, 6>(a, b), i32x4_shuffle::<1, 3, 5, 7>(a, b))
    }

    /// One 64-element unit of [`narrowed_blocks`]: 4 steps of 16 elements (two a loop
    /// iteration), then the unit's scales, `NARROW` or in i32.
    ///
    /// # Safety
    /// As [`narrowed_blocks`].
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    unsafe fn narrowed_unit<const R: usize, const C: usize, const NARROW: bool>(
        wp: &mut [*const u8; R],
        sp: &mut [*const i16; R],
        ap: &mut *const i8,
        start: [v128; C],
        acc: &mut [[v128; 2]; R],
    ) {
        let z = i32x4_splat(0);
        let mut t = [start; R];
        for _ in 0..core::hint::black_box(2) {
            dot_add_steps::<R, C, 2>(wp, ap, &mut t);
        }
        for r in 0..R {
            let s = sp[r];
            sp[r] = sp[r].add(4);
            for p in 0..C.div_ceil(2) {
                let (lo, hi) = (t[r][2 * p], if 2 * p + 1 < C { t[r][2 * p + 1] } else { z });
                let sums = if NARROW {
                    // [s0, s1, s2, s3, s0, s1, s2, s3] against both tokens' sums.
                    i32x4_dot_i16x8(i16x8_narrow_i32x4(lo, hi), v128_load64_splat(s as *const u64))
                } else {
                    let s = i32x4_load_extend_i16x4(s);
                    add_lane_pairs(i32x4_mul(lo, s), i32x4_mul(hi, s))
                };
                acc[r][p] = i32x4_add(acc[r][p], sums);
            }
        }
    }

    /// The blocks of [`tile`] with `KS` = 2 or 1, **pairs of vectors**: two steps' relaxed dots
    /// summed in i16 per (row, token), then widened against the group scales at once — the R·C
    /// i32 sums are the only accumulators and stay in registers; per 32 products and (row,
    /// token) a relaxed dot, an i16 add, a relaxed dot, an `i32x4.dot_i16x8_s` and an add. With
    /// `CHECK` (`KS` 1: codes too large for two dots to fit i16 with every activation) a unit
    /// whose [`super::PackedAct8::psum`] is over `limit` is widened one step at a time (three
    /// operations per 16 products). Either way the block's integers are exact, so the results
    /// are the reference's bit for bit. Returns `Σ_b d·da·(the block's integer sum)` per row.
    ///
    /// # Safety
    /// As [`tile`]; the pointers are at the rows' codes / scales and the tile's activations;
    /// `psum` at the tile's unit sums; with `FOLD`, `mins` = the rows' `mn`, the tile's
    /// [`super::PackedAct8::hsum`] and its step per unit (the tile width).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    #[allow(clippy::needless_range_loop, clippy::too_many_arguments)] // (row, token) indices into the accumulator grid
    unsafe fn pair_blocks<const R: usize, const C: usize, const FOLD: bool, const CHECK: bool>(
        w: [&super::Decoded8; R],
        nb: usize,
        wp: &mut [*const u8; R],
        sp: &mut [*const i16; R],
        ap: &mut *const i8,
        da: *const f32,
        (mut mn, mut hsum, hsum_step): ([*const i16; R], *const v128, usize),
        (mut psum, limit): (*const u16, u16),
    ) -> [v128; R] {
        let mut facc = [f32x4_splat(0.0); R];
        for b in 0..nb {
            let mut iacc = [[i32x4_splat(0); C]; R];
            for _half in 0..2 {
                let mut s = [i32x4_splat(0); R];
                for r in 0..R {
                    s[r] = v128_load(sp[r] as *const v128);
                    sp[r] = sp[r].add(8);
                }
                let pairs = !CHECK || *psum <= limit;
                psum = psum.add(1);
                if pairs {
                    // 4 pairs of steps of 16 elements; an opaque trip count keeps this a loop.
                    for _ in 0..core::hint::black_box(4) {
                        let w0 = next_codes(wp);
                        let w1 = next_codes(wp);
                        for c in 0..C {
                            let a0 = v128_load(ap.add(16 * c) as *const v128);
                            let a1 = v128_load(ap.add(16 * (C + c)) as *const v128);
                            for r in 0..R {
                                // Activations (signed) first, codes (7-bit) second.
                                let p = i16x8_relaxed_dot_i8x16_i7x16(a0, w0[r]);
                                let p = i16x8_add(p, i16x8_relaxed_dot_i8x16_i7x16(a1, w1[r]));
                                iacc[r][c] = i32x4_add(iacc[r][c], i32x4_dot_i16x8(p, s[r]));
                            }
                        }
                        *ap = ap.add(32 * C);
                    }
                } else {
                    for _ in 0..core::hint::black_box(8) {
                        let wv = next_codes(wp);
                        for c in 0..C {
                            let av = v128_load(ap.add(16 * c) as *const v128);
                            for r in 0..R {
                                let p = i16x8_relaxed_dot_i8x16_i7x16(av, wv[r]);
                                iacc[r][c] = i32x4_add(iacc[r][c], i32x4_dot_i16x8(p, s[r]));
                            }
                        }
                        *ap = ap.add(16 * C);
                    }
                }
                if FOLD {
                    // The unit's min terms, Σ_g mn_g·Σa_g per (row, token), into the same sums
                    // (before their lanes are added, so that costs nothing more).
                    for r in 0..R {
                        let m = v128_load(mn[r] as *const v128);
                        mn[r] = mn[r].add(8);
                        for c in 0..C {
                            iacc[r][c] = i32x4_add(iacc[r][c], i32x4_dot_i16x8(v128_load(hsum.add(c)), m));
                        }
                    }
                    hsum = hsum.add(hsum_step);
                }
            }
            add_block::<R, C>(&mut facc, &iacc, w, b, da);
        }
        facc
    }

    /// The blocks of [`tile`] with `KS` = [`SCALED`](super::SCALED): rows in the scaled form
    /// (codes times their group scales, [`super::Kernels8::scaled`]), so nothing is widened
    /// against scales — one `i32x4.relaxed_dot_i8x16_i7x16_add_s` per (row, token) and 16
    /// elements sums a whole block in i32, the R·C sums in registers. A block's integers are the
    /// pair form's and [`add_block`] folds them the same way: the results are bit for bit.
    ///
    /// # Safety
    /// As [`pair_blocks`].
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn scaled_blocks<const R: usize, const C: usize>(
        w: [&super::Decoded8; R],
        nb: usize,
        wp: &mut [*const u8; R],
        ap: &mut *const i8,
        da: *const f32,
    ) -> [v128; R] {
        let mut facc = [f32x4_splat(0.0); R];
        for b in 0..nb {
            let mut iacc = [[i32x4_splat(0); C]; R];
            // 16 steps of 16 elements, two per iteration; an opaque trip count keeps this a loop.
            for _ in 0..core::hint::black_box(8) {
                dot_add_steps::<R, C, 2>(wp, ap, &mut iacc);
            }
            add_block::<R, C>(&mut facc, &iacc, w, b, da);
        }
        facc
    }

    /// The blocks of [`tile`] with `KS` ≥ 2: `KS` relaxed dots summed in i16 per (row, token)
    /// ([`rdot_steps`]), then widened into i32 sums. Chromium's V8 keeps the wide tile's (2 × 4)
    /// i32 sums in registers next to the i16 ones (Chromium 156, 32 tokens, against keeping them
    /// in memory: Q2_K 45.1–45.5 → 48.4–49.3, Q4_K 43.7–46.3 → 47.5–48.4, Q5_K 38.9–39.5 →
    /// 41.0–41.3 G MAC/s, Q3_K 45.1–45.5 either way); Node 20's, with the narrow tiles, spilled
    /// inside the hot loop, so there they live in memory (volatile accesses: a load and a store
    /// per `KS` steps; in registers Q2_K measured 0.92×).
    ///
    /// # Safety
    /// As [`pair_blocks`].
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    unsafe fn i16_sum_blocks<const R: usize, const C: usize, const KS: usize, const TILE: usize>(
        w: [&super::Decoded8; R],
        nb: usize,
        wp: &mut [*const u8; R],
        sp: &mut [*const i16; R],
        ap: &mut *const i8,
        da: *const f32,
        (mut starts, starts_step): (*const v128, usize),
    ) -> [v128; R] {
        let mut facc = [f32x4_splat(0.0); R];
        // Registers with the wide tiles, memory with the narrow ones (a constant: LLVM keeps one).
        let in_registers = TILE == 4;
        let mut iacc_mem = [[i32x4_splat(0); C]; R];
        let ia = iacc_mem.as_mut_ptr() as *mut v128;
        for b in 0..nb {
            let mut iacc = [[i32x4_splat(0); C]; R];
            if !in_registers {
                for i in 0..R * C {
                    core::ptr::write_volatile(ia.add(i), i32x4_splat(0));
                }
            }
            for _half in 0..2 {
                // 8 steps of 16 elements per half, KS per widening; an opaque trip count keeps
                // this a loop.
                for _ in 0..core::hint::black_box(8 / KS) {
                    let start: [v128; C] = core::array::from_fn(|c| v128_load(starts.add(c)));
                    starts = starts.add(starts_step);
                    let p = rdot_steps::<R, C, KS>(wp, ap, start);
                    for r in 0..R {
                        let s = v128_load(sp[r] as *const v128);
                        for c in 0..C {
                            let wide = i32x4_dot_i16x8(p[r][c], s);
                            if in_registers {
                                iacc[r][c] = i32x4_add(iacc[r][c], wide);
                            } else {
                                let x = ia.add(r * C + c);
                                core::ptr::write_volatile(x, i32x4_add(core::ptr::read_volatile(x), wide));
                            }
                        }
                    }
                }
                for r in 0..R {
                    sp[r] = sp[r].add(8);
                }
            }
            if !in_registers {
                for r in 0..R {
                    for c in 0..C {
                        iacc[r][c] = core::ptr::read_volatile(ia.add(r * C + c));
                    }
                }
            }
            add_block::<R, C>(&mut facc, &iacc, w, b, da);
        }
        facc
    }
}
