//! The prompt-processing matrix product ("GEMM"): `y[t][r] = Σ_i W[r][i] · x[t][i]` for T ≥ 2
//! tokens, with each weight row read and unpacked once for all T tokens.
//!
//! Shapes (n = row length, T = tokens, KB = [`GgmlType::gemm_block`]: 256 for the types that meet
//! Q8_K activations, 32 for those that meet Q8_0 / Q8_1):
//!
//! ```text
//! weight row r  ──(type's `decode`)──►  Decoded:  q[n] i16     integer weights, sub-block scales folded in
//!                                                 d[n/KB] f32   one float scale per KB elements
//!                                                 m[n/KB] f32,  mn[n/16] i16   (types with mins only)
//!               W[r][i] = d[i/KB]·q[i] + m[i/KB]·mn[i/16]          — exactly `dequantize`
//! activations   x[T×n] ──quantize_q8──► Q8 rows ──PackedAct::pack──► tiles of ≤ 4 tokens:
//!                                                 qs i16 (token-interleaved per 8 elements),
//!                                                 da[n/KB] f32 per token, bsums in pairs
//!               A[t][i] = da[t][i/KB]·qs[t][i],  bsum[t][g] = Σ_{i∈g} qs[t][i]
//! y[t][r] = Σ_b da[t][b]·( d[b]·Σ_{i∈b} q[i]·qs[t][i]  +  m[b]·Σ_{g∈b} mn[g]·bsum[t][g] )
//! ```
//!
//! That is ggml's arithmetic for int8 activations: integer sums per block, converted to f32 once
//! per block and scaled by the weight and activation scales — the T = 1 kernels (`vec_dot`) compute
//! the same sums, so prompt and decode agree up to f32 summation order.
//!
//! Integer ranges: |q| ≤ 4096 (Q6_K: 32·128), |qs| ≤ 127, so one `i32x4.dot_i16x8_s` pair is
//! < 2^20 and a KB = 256 block < 2^27: exact in i32.
//!
//! SIMD128 kernels: R = 2 weight rows × C ≤ 4 tokens. Per step of 8 elements they load R weight
//! vectors and C activation vectors and do R·C `i32x4.dot_i16x8_s` into R·C i32x4 accumulators
//! (8 + 2 + 1 registers of V8's 15, so nothing spills). The C tokens of a tile are interleaved per
//! 8 elements so that one pointer reaches all of them.
//! * KB = 256 (`simd::tile256`): at the end of a block, each row's C accumulators are reduced into
//!   one i32x4 whose lane c is token c, converted once, and scaled by `d·da` (a vector: the C
//!   tokens' `da` of the block are stored side by side); the f32 accumulator of a row also has one
//!   lane per token, so the results come out without a horizontal sum.
//! * KB = 32 (`simd::tile32`): a reduction every 32 elements would cost as much as the products,
//!   so rows and activations are put in *quad order* ([`quad_pos`]): four blocks interleaved by
//!   element pairs, which makes the four lanes of every `dot` four different blocks. A quad's
//!   accumulators are then converted and scaled by `d·da` lane by lane (one vector per block
//!   quad), and reduced once per tile. The decoders still produce row order; [`to_quads`]
//!   reorders a decoded row (four 4×4 transposes per 128 elements).
//!
//! The min terms run as a second, short pass over the blocks (inside the main loop their pointers
//! cost V8 registers and a third of the speed).
//!
//! [`gemm_rows`] walks panels of [`PANEL`] rows: the panel's rows are decoded once, then [`gemm`]
//! lets every token tile meet every row pair of the panel, so a tile's activations (4·n·2 bytes)
//! stay in cache while the panel's rows pass over them, and each weight row is decoded once per
//! call whatever T is.
//!
//! Measured (Node 20, x86-64 Zen 4, one thread, 4096×4096 × 32 tokens): ~38 G MAC/s for the
//! KB = 256 types without mins (close to two `pmaddwd` per cycle), ~33 with mins or KB = 32
//! (~26 with a reduction per 32-block); decoding a row costs 0.06–0.18 ns per weight. Not faster:
//! LLVM's address arithmetic (its `i32.add`s are not folded into load offsets; masking the tile
//! pointer so that they are changed nothing measurable), larger register tiles (V8 has 15 xmm
//! registers), unrolling the 8-element step (V8 hoists the loads and spills).

use super::gemm8::{self, Gemm8Scratch, PackedAct8};
use super::r4::Rows;
use super::{GgmlType, QAct, QuantKernels, Q8};

/// Rows decoded together before they meet all the token tiles (see the module docs).
pub const PANEL: usize = 8;

/// Tokens per activation tile.
pub const TILE: usize = 4;

/// One weight row in the GEMM form `W[i] = d[i/KB]·q[i] + m[i/KB]·mn[i/16]` (module docs).
/// `m` and `mn` are empty for types without mins.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    pub q: Vec<i16>,
    pub d: Vec<f32>,
    pub m: Vec<f32>,
    pub mn: Vec<i16>,
}

impl Decoded {
    /// Sizes the buffers for a row of `n` elements of `ty`.
    pub fn resize(&mut self, ty: GgmlType, n: usize) {
        let kb = ty.gemm_block();
        assert!(n % kb == 0, "row length {n} is not a multiple of {kb}");
        self.q.resize(n, 0);
        self.d.resize(n / kb, 0.0);
        let (nm, nmn) = if ty.has_min() { (n / kb, n / 16) } else { (0, 0) };
        self.m.resize(nm, 0.0);
        self.mn.resize(nmn, 0);
    }

    /// The weight `i` as a float, `d·q + m·mn` (the form `dequantize` must reproduce exactly).
    pub fn value(&self, kb: usize, i: usize) -> f32 {
        let w = self.d[i / kb] * self.q[i] as f32;
        if self.m.is_empty() {
            w
        } else {
            w + self.m[i / kb] * self.mn[i / 16] as f32
        }
    }

    /// Checks what every decoder relies on: `row` is whole blocks of `ty` and the buffers are
    /// sized for it. Returns the row length.
    #[inline]
    pub fn check(&self, ty: GgmlType, row: &[u8]) -> usize {
        let nb = row.len() / ty.block_bytes();
        assert_eq!(row.len(), nb * ty.block_bytes(), "{ty}: row is not a whole number of blocks");
        let n = nb * ty.block_elems();
        let kb = ty.gemm_block();
        assert!(self.q.len() == n && self.d.len() == n / kb, "{ty}: decoded row not sized for {n} elements");
        if ty.has_min() {
            assert!(self.m.len() == n / kb && self.mn.len() == n / 16, "{ty}: min buffers not sized");
        }
        n
    }
}

/// The reference product of one decoded row with one activation row (module docs' formula, in
/// plain scalar code).
pub fn dot_ref(w: &Decoded, kb: usize, act: Q8<'_>) -> f32 {
    let n = w.q.len();
    assert!(act.qs.len() == n && n % kb == 0);
    let mut sum = 0.0f32;
    for b in 0..n / kb {
        let range = kb * b..kb * (b + 1);
        let isum: i32 = w.q[range.clone()].iter().zip(&act.qs[range]).map(|(&q, &a)| q as i32 * a as i32).sum();
        // Q8_K repeats its 256-block scale over the 8 slots of 32; Q8_0 has one per 32.
        let da = act.d[b * kb / 32];
        let mut s = w.d[b] * isum as f32;
        if !w.m.is_empty() {
            let groups = kb / 16 * b..kb / 16 * (b + 1);
            let msum: i32 = w.mn[groups.clone()].iter().zip(&act.bsums[groups]).map(|(&m, &s)| m as i32 * s as i32).sum();
            s += w.m[b] * msum as f32;
        }
        sum += da * s;
    }
    sum
}

/// Position of element `i` of a row in the quad order of KB = 32 types: four consecutive 32-element
/// blocks form a quad of 128 elements, interleaved by element pairs, so that the 8 i16 lanes at
/// quad positions `8p..8p+8` hold pair p of blocks 0, 1, 2, 3 and an `i32x4.dot_i16x8_s` of two
/// such vectors has one lane per block.
#[inline]
pub fn quad_pos(i: usize) -> usize {
    let (quad, block, pair, e) = (i / 128, (i / 32) % 4, (i % 32) / 2, i % 2);
    128 * quad + 8 * pair + 2 * block + e
}

/// Rewrites a decoded KB = 32 row into the GEMM's quad order: `q` at [`quad_pos`], zero-padded to
/// whole quads (128 elements), `d` / `m` padded to whole quads of blocks, `mn` likewise.
pub fn to_quads(src: &Decoded, dst: &mut Decoded) {
    let n = src.q.len();
    assert!(n % 32 == 0);
    let nq = n.div_ceil(128);
    if n % 128 != 0 {
        dst.q.clear(); // the padding must be zero
    }
    dst.q.resize(128 * nq, 0);
    for (v, d) in [(&src.d, &mut dst.d), (&src.m, &mut dst.m)] {
        d.clear();
        if !v.is_empty() {
            d.extend_from_slice(v);
            d.resize(4 * nq, 0.0);
        }
    }
    dst.mn.clear();
    if !src.mn.is_empty() {
        dst.mn.extend_from_slice(&src.mn);
        dst.mn.resize(8 * nq, 0);
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if n % 128 == 0 {
        // SAFETY: simd128 is enabled; both buffers hold n = 128·nq elements.
        unsafe { simd::to_quads(&src.q, &mut dst.q) };
        return;
    }
    for (i, &q) in src.q.iter().enumerate() {
        dst.q[quad_pos(i)] = q;
    }
}

/// The activations of one GEMM call, widened to i16 and packed into tiles of [`TILE`] tokens
/// (the last tile holds the remaining `T % 4` tokens, if any).
///
/// Tile j covers tokens `4j .. 4j + c` (c = its token count) and occupies, with `np` = `n_pad`
/// (n, rounded up to whole quads of 128 for KB = 32) and nb = np / KB blocks:
/// * `qs[4j·np ..]`: for each 8-element chunk k, the c tokens' 8 values side by side (token t of
///   the tile at `qs[4j·np + (k·c + t)·8 ..][..8]`); elements in row order for KB = 256, in quad
///   order ([`quad_pos`]) for KB = 32;
/// * `da[j·nb·4 ..]`: for each block b, 4 f32: the tokens' scales (lanes ≥ c: 0);
/// * `bs[j·(np/32)·8 ..]`: for each 32 elements p, 8 i16: bsums 2p, 2p+1 of token t at lanes
///   2t, 2t+1 (lanes ≥ 2c: 0).
#[derive(Clone, Debug, Default)]
pub struct PackedAct {
    pub n: usize,
    pub n_pad: usize,
    pub tokens: usize,
    pub kb: usize,
    pub qs: Vec<i16>,
    pub da: Vec<f32>,
    pub bs: Vec<i16>,
}

impl PackedAct {
    /// Packs the quantized activation rows `act` for weights whose GEMM block is `kb`.
    pub fn pack(&mut self, act: &QAct, kb: usize) {
        let (n, tokens) = (act.n, act.rows);
        assert!(n % kb == 0 && (kb == 32 || kb == 256));
        let np = if kb == 32 { n.div_ceil(128) * 128 } else { n };
        let tiles = tokens.div_ceil(TILE);
        self.n = n;
        self.n_pad = np;
        self.tokens = tokens;
        self.kb = kb;
        self.qs.clear();
        self.qs.resize(tokens * np, 0);
        pack_scales(act, kb, np, TILE, &mut self.da, &mut self.bs);
        for j in 0..tiles {
            let (t0, c) = (TILE * j, (tokens - TILE * j).min(TILE));
            let qs = &mut self.qs[t0 * np..(t0 + c) * np];
            for t in 0..c {
                let a = act.row(t0 + t);
                if kb == 32 {
                    // Element pairs to their quad positions (a pair stays together).
                    for (pair, v) in a.qs.chunks_exact(2).enumerate() {
                        let x = quad_pos(2 * pair);
                        let dst = &mut qs[((x / 8) * c + t) * 8 + x % 8..][..2];
                        dst[0] = v[0] as i16;
                        dst[1] = v[1] as i16;
                    }
                } else {
                    for (k, chunk) in a.qs.chunks_exact(8).enumerate() {
                        let dst = &mut qs[(k * c + t) * 8..][..8];
                        for (d, &s) in dst.iter_mut().zip(chunk) {
                            *d = s as i16;
                        }
                    }
                }
            }
        }
    }

    fn tiles(&self) -> usize {
        self.tokens.div_ceil(TILE)
    }
}

/// The per-tile activation scales and group sums shared by both GEMMs (rows padded to `np`
/// elements, tiles of `tile` ≤ 4 tokens): `da[j·nb·4 ..]`, for each block b, 4 f32: the tokens' scales (lanes ≥ c: 0);
/// `bs[j·(np/32)·8 ..]`, for each 32 elements p, 8 i16: bsums 2p, 2p+1 of token t at lanes 2t, 2t+1.
pub fn pack_scales(act: &QAct, kb: usize, np: usize, tile: usize, da: &mut Vec<f32>, bs: &mut Vec<i16>) {
    assert!(tile <= 4, "da and bs have 4 token lanes");
    let (n, tokens) = (act.n, act.rows);
    let (nb, tiles) = (np / kb, tokens.div_ceil(tile));
    da.clear();
    da.resize(tiles * nb * 4, 0.0);
    bs.clear();
    bs.resize(tiles * (np / 32) * 8, 0);
    for j in 0..tiles {
        let (t0, c) = (tile * j, (tokens - tile * j).min(tile));
        let da = &mut da[j * nb * 4..(j + 1) * nb * 4];
        let bs = &mut bs[j * (np / 32) * 8..(j + 1) * (np / 32) * 8];
        for t in 0..c {
            let a = act.row(t0 + t);
            for b in 0..n / kb {
                da[4 * b + t] = a.d[b * kb / 32];
            }
            for p in 0..n / 32 {
                bs[8 * p + 2 * t] = a.bsums[2 * p];
                bs[8 * p + 2 * t + 1] = a.bsums[2 * p + 1];
            }
        }
    }
}

/// `y[t·y_stride + col0 + j] = Σ_i W_j[i]·A[t][i]` for every row `w[j]` and every token t of
/// `act` (module docs). The rows are in the GEMM's layout: as decoded for KB = 256, through
/// [`to_quads`] for KB = 32. They are processed two at a time; `w.len()` ≤ [`PANEL`] keeps them in
/// cache while the token tiles pass.
pub fn gemm(w: &[Decoded], act: &PackedAct, y: &mut [f32], y_stride: usize, col0: usize) {
    let (np, kb) = (act.n_pad, act.kb);
    for r in w {
        assert!(r.q.len() == np && r.d.len() == np / kb, "weight row and activations differ in length");
        assert!(r.m.is_empty() || (r.m.len() == np / kb && r.mn.len() == np / 16));
    }
    assert!(act.tokens == 0 || (act.tokens - 1) * y_stride + col0 + w.len() <= y.len(), "output too small");
    let has_min = w.first().is_some_and(|r| !r.m.is_empty());
    assert!(w.iter().all(|r| r.m.is_empty() != has_min), "rows of one call share their type");
    for j in 0..act.tiles() {
        let (t0, c) = (TILE * j, (act.tokens - TILE * j).min(TILE));
        let mut r = 0;
        while r < w.len() {
            let rows = (w.len() - r).min(2);
            let out = tile_dispatch(&w[r..r + rows], act, j, c, has_min);
            for t in 0..c {
                for (k, v) in out[..rows].iter().enumerate() {
                    y[(t0 + t) * y_stride + col0 + r + k] = v[t];
                }
            }
            r += rows;
        }
    }
}

/// Reusable buffers of [`gemm_rows`]: a panel of decoded rows and, for KB = 32 types, the same
/// rows in quad order.
#[derive(Clone, Debug, Default)]
pub struct GemmScratch {
    decoded: Vec<Decoded>,
    quads: Vec<Decoded>,
    /// A panel's rows un-interleaved, for weights in the R4 layout.
    plain: Vec<u8>,
}

/// The prompt product for output rows `rows` of a weight matrix (`weights`: rows of `k.ty`, plain
/// or interleaved, `act.n` elements each) with the packed activations: panels of [`PANEL`] rows are decoded with
/// `k.decode` (and put in quad order for KB = 32) and passed to [`gemm`]; results go to
/// `y[t·y_stride + r]`.
pub fn gemm_rows(
    k: &QuantKernels,
    weights: Rows<'_>,
    rows: core::ops::Range<usize>,
    act: &PackedAct,
    s: &mut GemmScratch,
    y: &mut [f32],
    y_stride: usize,
) {
    let n = act.n;
    let rb = k.ty.row_bytes(n);
    assert!(rows.end * rb <= weights.data.len(), "weight matrix too small");
    assert_eq!(k.ty.gemm_block(), act.kb, "activations packed for another block size");
    s.decoded.resize_with(PANEL, Decoded::default);
    s.quads.resize_with(PANEL, Decoded::default);
    for d in s.decoded.iter_mut() {
        d.resize(k.ty, n);
    }
    let mut r0 = rows.start;
    while r0 < rows.end {
        let p = (rows.end - r0).min(PANEL);
        let plain = weights.panel(k.ty, rb, r0, p, &mut s.plain);
        for (row, d) in plain.chunks_exact(rb).zip(&mut s.decoded[..p]) {
            (k.decode)(row, d);
        }
        let w = if act.kb == 32 {
            for (d, q) in s.decoded[..p].iter().zip(&mut s.quads) {
                to_quads(d, q);
            }
            &s.quads[..p]
        } else {
            &s.decoded[..p]
        };
        gemm(w, act, y, y_stride, r0);
        r0 += p;
    }
}

/// Buffers of [`prompt_rows`]: packed activations and decoded panels of both GEMMs.
#[derive(Clone, Debug, Default)]
pub struct PromptScratch {
    packed: PackedAct,
    gemm: GemmScratch,
    packed8: PackedAct8,
    gemm8: Gemm8Scratch,
    /// What `packed` and `packed8` hold: the activations' [`QAct::version`] and how they were
    /// packed, so that products of one input with several matrices pack it once per packing.
    packed_as: Option<(u64, usize)>,
    packed8_as: Option<(u64, Pack8)>,
}

/// How [`PackedAct8`] was packed: tile width, order, scaled form, folded offset.
type Pack8 = (usize, gemm8::Order, bool, Option<(u8, usize)>);

/// The prompt product of output rows `rows` of a weight matrix (`weights`: rows of `k.ty`, plain
/// or interleaved) with the quantized activations `act` (quantized for `k.ty`): the int8 GEMM
/// ([`gemm8`]) where this build runs it for the type ([`gemm8::enabled`]), else the i16 GEMM
/// ([`gemm_rows`]); results go to `y[t·y_stride + r]`. `quads`: the int8 GEMM's dot-add form
/// (quad order, or the scaled form where the type has one: [`gemm8`]'s module docs), only where
/// [`gemm8::quad_add_exact`]. `act` is packed for the GEMM unless `s` holds it packed the same
/// way already (the same [`QAct::version`]: one input multiplied with several matrices).
#[allow(clippy::too_many_arguments)]
pub fn prompt_rows(
    k: &QuantKernels,
    weights: Rows<'_>,
    rows: core::ops::Range<usize>,
    act: &QAct,
    s: &mut PromptScratch,
    y: &mut [f32],
    y_stride: usize,
    quads: bool,
) {
    match gemm8::kernels8(k.ty).filter(|_| gemm8::enabled(k.ty, act.rows)) {
        Some(k8) => {
            let dot_add = quads && gemm8::quad_add_exact();
            let scaled = dot_add && k8.scaled.is_some();
            let order = if dot_add && !scaled { k8.quad_order() } else { gemm8::Order::Pairs };
            let how = (gemm8::profile().tile(), order, scaled, if scaled { None } else { k8.fold() });
            if s.packed8_as != Some((act.version, how)) || act.version == 0 {
                if scaled {
                    s.packed8.pack_scaled(act, k8);
                } else {
                    s.packed8.pack(act, dot_add, k8);
                }
                s.packed8_as = Some((act.version, how));
            }
            gemm8::gemm_rows(k8, weights, rows, &s.packed8, &mut s.gemm8, y, y_stride);
        }
        None => {
            let kb = k.ty.gemm_block();
            if s.packed_as != Some((act.version, kb)) || act.version == 0 {
                s.packed.pack(act, kb);
                s.packed_as = Some((act.version, kb));
            }
            gemm_rows(k, weights, rows, &s.packed, &mut s.gemm, y, y_stride);
        }
    }
}

/// One tile of ≤ 2 rows × c tokens → `out[row][token]`.
#[inline]
fn tile_dispatch(w: &[Decoded], act: &PackedAct, j: usize, c: usize, has_min: bool) -> [[f32; 4]; 2] {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // Every (rows, tokens, layout, min) combination is its own instance: the accumulators
        // are fixed-size arrays that LLVM keeps in locals (and V8 in registers).
        macro_rules! by_c {
            ($kernel:ident, $r:literal, $min:literal) => {{
                let rows: [&Decoded; $r] = core::array::from_fn(|i| &w[i]);
                // SAFETY: simd128 is enabled; `gemm` checked every length the kernel reads.
                let v = unsafe {
                    match c {
                        1 => simd::$kernel::<$r, 1, $min>(rows, act, j),
                        2 => simd::$kernel::<$r, 2, $min>(rows, act, j),
                        3 => simd::$kernel::<$r, 3, $min>(rows, act, j),
                        _ => simd::$kernel::<$r, 4, $min>(rows, act, j),
                    }
                };
                let mut out = [[0.0f32; 4]; 2];
                for (o, v) in out.iter_mut().zip(v) {
                    *o = crate::quant::simd::lanes(v);
                }
                out
            }};
        }
        return match (w.len(), act.kb, has_min) {
            (1, 32, false) => by_c!(tile32, 1, false),
            (1, 32, true) => by_c!(tile32, 1, true),
            (1, _, false) => by_c!(tile256, 1, false),
            (1, _, true) => by_c!(tile256, 1, true),
            (_, 32, false) => by_c!(tile32, 2, false),
            (_, 32, true) => by_c!(tile32, 2, true),
            (_, _, false) => by_c!(tile256, 2, false),
            (_, _, true) => by_c!(tile256, 2, true),
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = has_min; // the scalar kernel reads it from the rows
        tile_scalar(w, act, j, c)
    }
}

/// Portable version of the tile kernels on the same packed layouts (used natively, where the
/// reference speed is enough; it also keeps the packing tested by the native test suite).
#[allow(dead_code)]
fn tile_scalar(w: &[Decoded], act: &PackedAct, j: usize, c: usize) -> [[f32; 4]; 2] {
    let (np, kb) = (act.n_pad, act.kb);
    let nb = np / kb;
    let qs = &act.qs[TILE * j * np..][..c * np];
    let da = &act.da[j * nb * 4..][..nb * 4];
    let bs = &act.bs[j * (np / 32) * 8..][..(np / 32) * 8];
    let mut isum = vec![0i32; nb];
    let mut out = [[0.0f32; 4]; 2];
    for (r, wr) in w.iter().enumerate() {
        for t in 0..c {
            // Integer sums per block; lane l of 8-element chunk k belongs to block k / 32 (row
            // order) or, in quad order, to block 4·(k / 16) + l / 2.
            isum.fill(0);
            for (k, wq) in wr.q.chunks_exact(8).enumerate() {
                let a = &qs[(k * c + t) * 8..][..8];
                for (l, (&q, &a)) in wq.iter().zip(a).enumerate() {
                    let b = if kb == 32 { 4 * (k / 16) + l / 2 } else { k / 32 };
                    isum[b] += q as i32 * a as i32;
                }
            }
            let mut sum = 0.0f32;
            for (b, &isum) in isum.iter().enumerate() {
                let mut s = wr.d[b] * isum as f32;
                if !wr.m.is_empty() {
                    let msum: i32 = (kb / 16 * b..kb / 16 * (b + 1))
                        .map(|g| wr.mn[g] as i32 * bs[8 * (g / 2) + 2 * t + g % 2] as i32)
                        .sum();
                    s += wr.m[b] * msum as f32;
                }
                sum += da[4 * b + t] * s;
            }
            out[r][t] = sum;
        }
    }
    out
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) mod simd {
    use super::{Decoded, PackedAct, TILE};
    use crate::quant::simd::transpose4;
    use core::arch::wasm32::*;

    /// `[Σ v[0], Σ v[1], Σ v[2], Σ v[3]]` for C ≤ 4 vectors of 32-bit lanes (missing ones count
    /// as zero), added with `add` (i32x4 or f32x4).
    #[inline(always)]
    fn hsum_lanes<const C: usize>(v: &[v128; C], add: impl Fn(v128, v128) -> v128) -> v128 {
        let z = i32x4_splat(0);
        let get = |i: usize| if i < C { v[i] } else { z };
        let (a, b, c, d) = (get(0), get(1), get(2), get(3));
        let ab = add(i32x4_shuffle::<0, 4, 1, 5>(a, b), i32x4_shuffle::<2, 6, 3, 7>(a, b));
        let cd = add(i32x4_shuffle::<0, 4, 1, 5>(c, d), i32x4_shuffle::<2, 6, 3, 7>(c, d));
        add(i32x4_shuffle::<0, 1, 4, 5>(ab, cd), i32x4_shuffle::<2, 3, 6, 7>(ab, cd))
    }

    /// Row `i` of the quad-ordered copy: the 4×16 → 16×4 transpose of each quad's element pairs
    /// (as 32-bit lanes), four 4×4 transposes per quad.
    ///
    /// # Safety
    /// Requires simd128; `src` and `dst` hold the same whole number of quads (128 elements).
    #[target_feature(enable = "simd128")]
    pub unsafe fn to_quads(src: &[i16], dst: &mut [i16]) {
        assert!(src.len() == dst.len() && src.len() % 128 == 0);
        for quad in 0..src.len() / 128 {
            let s = src.as_ptr().add(128 * quad) as *const v128;
            let d = dst.as_mut_ptr().add(128 * quad) as *mut v128;
            // Vector 4·block + m of the quad holds pairs 4m..4m+4 of `block`; output vector
            // 4m + l holds pair 4m + l of blocks 0..4.
            for m in 0..4 {
                let v = [
                    v128_load(s.add(m)),
                    v128_load(s.add(4 + m)),
                    v128_load(s.add(8 + m)),
                    v128_load(s.add(12 + m)),
                ];
                let t = transpose4(v);
                v128_store(d.add(4 * m), t[0]);
                v128_store(d.add(4 * m + 1), t[1]);
                v128_store(d.add(4 * m + 2), t[2]);
                v128_store(d.add(4 * m + 3), t[3]);
            }
        }
    }

    /// KB = 256: R rows × the C tokens of tile `j` (shapes in the module docs). Returns one f32x4
    /// per row whose lane c is the row's product with token c.
    ///
    /// # Safety
    /// Requires simd128; every row must have `act.n` weights (`gemm` checks) and `j` must be a
    /// tile of `act` with C tokens.
    /// `steps` steps of 8 elements of R weight rows (`wp`) × C tokens (`ap`, interleaved per 8):
    /// R·C `i32x4.dot_i16x8_s` per step into fresh i32x4 accumulators; advances both pointers.
    /// Called with an opaque `steps`, so the steps stay a loop (V8 hoists all loads of a fully
    /// unrolled block to its top and spills them).
    ///
    /// # Safety
    /// `wp[r]..+8·steps` and `ap..+8·C·steps` must be readable.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    unsafe fn dot_steps<const R: usize, const C: usize>(
        steps: usize,
        wp: &mut [*const i16; R],
        ap: &mut *const i16,
    ) -> [[v128; C]; R] {
        let mut iacc = [[i32x4_splat(0); C]; R];
        for _ in 0..steps {
            let mut wv = [i32x4_splat(0); R];
            for r in 0..R {
                wv[r] = v128_load(wp[r] as *const v128);
                wp[r] = wp[r].add(8);
            }
            for c in 0..C {
                let av = v128_load(ap.add(8 * c) as *const v128);
                for r in 0..R {
                    iacc[r][c] = i32x4_add(iacc[r][c], i32x4_dot_i16x8(wv[r], av));
                }
            }
            *ap = ap.add(8 * C);
        }
        iacc
    }

    #[target_feature(enable = "simd128")]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    pub unsafe fn tile256<const R: usize, const C: usize, const MIN: bool>(
        w: [&Decoded; R],
        act: &PackedAct,
        j: usize,
    ) -> [v128; R] {
        const KB: usize = 256;
        let n = act.n;
        let nb = n / KB;
        debug_assert!((act.tokens - TILE * j).min(TILE) == C);
        let mut ap = act.qs.as_ptr().add(TILE * j * n);
        let da = act.da.as_ptr().add(j * nb * 4);
        let bs = act.bs.as_ptr().add(j * (n / 32) * 8);
        // Plain loops over the fixed-size arrays (no `array::from_fn`: its closure calls are not
        // always inlined, which puts the arrays in memory).
        let mut wp = [core::ptr::null::<i16>(); R];
        for r in 0..R {
            wp[r] = w[r].q.as_ptr();
        }
        let mut facc = [f32x4_splat(0.0); R];
        for b in 0..nb {
            // KB elements, 8 per step; an opaque trip count keeps the steps a loop (see `dot_steps`).
            let iacc = dot_steps::<R, C>(core::hint::black_box(KB / 8), &mut wp, &mut ap);
            // Block end: lane c of each row's sums is token c; scale by d·da.
            let dab = v128_load(da.add(4 * b) as *const v128);
            for r in 0..R {
                let isum = f32x4_convert_i32x4(hsum_lanes(&iacc[r], |a, b| i32x4_add(a, b)));
                let d = f32x4_splat(*w[r].d.get_unchecked(b));
                facc[r] = f32x4_add(facc[r], f32x4_mul(f32x4_mul(isum, d), dab));
            }
        }
        if MIN {
            let (mut mn, mut m) = ([core::ptr::null::<i16>(); R], [core::ptr::null::<f32>(); R]);
            for r in 0..R {
                mn[r] = w[r].mn.as_ptr();
                m[r] = w[r].m.as_ptr();
            }
            add_mins256(&mut facc, mn, m, da, bs, nb);
        }
        facc
    }

    /// The min (or offset) terms of a tile over 256-element blocks, after its hot loop (inside
    /// it the mins' pointers crowd the registers): per block b and row r, `facc[r] +=
    /// m_r[b]·da[b]·Σ_g mn_r[g]·bsum[t][g]` (lane t), the row's mins in pairs, splatted, against
    /// the tokens' bsum pairs, one `i32x4.dot_i16x8_s` per 32 elements. Shared by this GEMM and
    /// the int8 one (`gemm8`), whose activation tiles lay out `da` and `bs` the same way.
    ///
    /// # Safety
    /// `mn[r]` holds `16·nb` mins, `m[r]` `nb` scales; `da` holds 4 scales and `bs` 64 bsums per
    /// block (the tile's, as [`PackedAct`] lays them out).
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    pub unsafe fn add_mins256<const R: usize>(
        facc: &mut [v128; R],
        mn: [*const i16; R],
        m: [*const f32; R],
        da: *const f32,
        bs: *const i16,
        nb: usize,
    ) {
        const KB: usize = 256;
        for b in 0..nb {
            let dab = v128_load(da.add(4 * b) as *const v128);
            let bsb = bs.add(b * KB / 32 * 8);
            for r in 0..R {
                let mnb = mn[r].add(b * KB / 16) as *const u32;
                let mut msum = i32x4_splat(0);
                for p in 0..KB / 32 {
                    let pair = v128_load32_splat(mnb.add(p));
                    msum = i32x4_add(msum, i32x4_dot_i16x8(pair, v128_load(bsb.add(8 * p) as *const v128)));
                }
                let mb = f32x4_splat(*m[r].add(b));
                facc[r] = f32x4_add(facc[r], f32x4_mul(f32x4_mul(f32x4_convert_i32x4(msum), mb), dab));
            }
        }
    }

    /// KB = 32: R rows (in quad order) × the C tokens of tile `j`. The same steps as
    /// [`tile256`], but a step's `i32x4.dot_i16x8_s` lanes are the four blocks of a quad, so
    /// nothing is reduced per block: at the end of a quad, each (row, token) accumulator is
    /// converted and scaled by the blocks' `d·da` (both vectors over the 4 blocks; the tokens'
    /// `da` come as 4 vectors over tokens and are transposed once per quad). The f32 accumulators
    /// (lanes = blocks) are reduced once per tile.
    ///
    /// # Safety
    /// Requires simd128; every row must be in quad order with `act.n_pad` weights (`gemm`
    /// checks) and `j` must be a tile of `act` with C tokens.
    #[target_feature(enable = "simd128")]
    #[allow(clippy::needless_range_loop)] // (row, token) indices into the accumulator grid
    pub unsafe fn tile32<const R: usize, const C: usize, const MIN: bool>(
        w: [&Decoded; R],
        act: &PackedAct,
        j: usize,
    ) -> [v128; R] {
        let np = act.n_pad;
        let nq = np / 128;
        debug_assert!((act.tokens - TILE * j).min(TILE) == C);
        let mut ap = act.qs.as_ptr().add(TILE * j * np);
        let da = act.da.as_ptr().add(j * nq * 16);
        let bs = act.bs.as_ptr().add(j * nq * 32);
        let mut wp = [core::ptr::null::<i16>(); R];
        for r in 0..R {
            wp[r] = w[r].q.as_ptr();
        }
        // The tokens' `da` of quad `quad` as one vector over its 4 blocks per token.
        let da_quad = |quad: usize| {
            let p = da.add(16 * quad);
            transpose4([
                v128_load(p as *const v128),
                v128_load(p.add(4) as *const v128),
                v128_load(p.add(8) as *const v128),
                v128_load(p.add(12) as *const v128),
            ])
        };
        let mut facc = [[f32x4_splat(0.0); C]; R];
        for quad in 0..nq {
            // A quad: 4 blocks of 32 elements, 8 per step.
            let iacc = dot_steps::<R, C>(core::hint::black_box(16), &mut wp, &mut ap);
            let dt = da_quad(quad);
            for r in 0..R {
                let dq = v128_load(w[r].d.as_ptr().add(4 * quad) as *const v128);
                for c in 0..C {
                    let s = f32x4_mul(dq, dt[c]);
                    facc[r][c] = f32x4_add(facc[r][c], f32x4_mul(f32x4_convert_i32x4(iacc[r][c]), s));
                }
            }
        }
        if MIN {
            // Second pass (as in `tile256`): per quad and token, the 8 bsums of its 4 blocks (the
            // tokens' bsum pairs transposed) against the row's 8 mins, lanes = blocks.
            for quad in 0..nq {
                let dt = da_quad(quad);
                let p = bs.add(32 * quad);
                let bt = transpose4([
                    v128_load(p as *const v128),
                    v128_load(p.add(8) as *const v128),
                    v128_load(p.add(16) as *const v128),
                    v128_load(p.add(24) as *const v128),
                ]);
                for r in 0..R {
                    let mn = v128_load(w[r].mn.as_ptr().add(8 * quad) as *const v128);
                    let mq = v128_load(w[r].m.as_ptr().add(4 * quad) as *const v128);
                    for c in 0..C {
                        let msum = f32x4_convert_i32x4(i32x4_dot_i16x8(mn, bt[c]));
                        facc[r][c] = f32x4_add(facc[r][c], f32x4_mul(msum, f32x4_mul(mq, dt[c])));
                    }
                }
            }
        }
        let mut out = [f32x4_splat(0.0); R];
        for r in 0..R {
            out[r] = hsum_lanes(&facc[r], |a, b| f32x4_add(a, b));
        }
        out
    }
}
