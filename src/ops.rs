//! The numeric building blocks of the forward pass: matrix products against quantized weights,
//! RMSNorm, activations, RoPE.

use crate::quant::gemm::{self, PromptScratch};
use crate::quant::gemm8;
use crate::tune::{Plan, Trial};
use crate::quant::{self, dequantize_row, float, kernels, quantize_q8, GgmlType, QAct};
use crate::weights::{TensorView, WeightStore};

/// How activations meet quantized weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// Like llama.cpp's CPU backend: activations are quantized to int8 (Q8_0 / Q8_1 / Q8_K, per
    /// the weight type) and multiplied with integer SIMD kernels. The default: fastest.
    #[default]
    Fast,
    /// Weights dequantized to f32 and multiplied with f32 activations: matches an exact-arithmetic
    /// reference to ~1e-6 relative. Several times slower.
    Exact,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        match s {
            "fast" => Some(Precision::Fast),
            "exact" => Some(Precision::Exact),
            _ => None,
        }
    }
}

/// A weight matrix: `n_out` rows of `n_in` elements (GGUF ne = [n_in, n_out]).
#[derive(Clone, Debug)]
pub struct Linear {
    pub t: TensorView,
    pub n_in: usize,
    pub n_out: usize,
    pub row_bytes: usize,
    /// The rows are stored four by four interleaved ([`quant::r4`]), see [`interleave`].
    pub r4: bool,
}

impl Linear {
    pub fn new(t: TensorView) -> Linear {
        let (n_out, n_in) = t.rows_cols();
        let row_bytes = t.ty.row_bytes(n_in);
        Linear { t, n_in, n_out, row_bytes, r4: false }
    }

    /// Rows `r` of this matrix as a matrix of their own, for a product: a view of the same bytes
    /// (interleaved rows in whole groups of four) without a name or dims, so that making one
    /// allocates nothing.
    pub fn rows(&self, r: std::ops::Range<usize>) -> Linear {
        assert!(r.end <= self.n_out, "{}: rows {r:?} of {}", self.t.name, self.n_out);
        assert!(!self.r4 || (r.start % R4 == 0 && r.end % R4 == 0), "{}: rows {r:?} split an interleaved group", self.t.name);
        let t = TensorView {
            name: String::new(),
            ty: self.t.ty,
            dims: Vec::new(),
            shard: self.t.shard,
            offset: self.t.offset + r.start * self.row_bytes,
            size: r.len() * self.row_bytes,
        };
        Linear { t, n_in: self.n_in, n_out: r.len(), row_bytes: self.row_bytes, r4: self.r4 }
    }
}

/// Rearranges `w`'s rows in the store into the four-rows-interleaved layout ([`quant::r4`]) when
/// its type has one and its row count is a multiple of 4; returns whether it did. `scratch` holds
/// four rows. After this every reader of the matrix must go through [`matmul`].
pub fn interleave(store: &mut WeightStore, w: &mut Linear, scratch: &mut Vec<u8>) -> bool {
    match quant::r4::r4_kernels(w.t.ty) {
        Some(k4) if !w.r4 && w.n_out % quant::r4::R == 0 => {
            quant::r4::interleave_matrix(k4, store.bytes_mut(&w.t), w.row_bytes, scratch);
            w.r4 = true;
            true
        }
        _ => false,
    }
}

/// Reusable buffers for matmuls (no allocation per token once warmed up).
#[derive(Default)]
pub struct MatmulScratch {
    act: QAct,
    prompt: PromptScratch,
    wrow: Vec<f32>,
    /// Four rows un-interleaved (exact mode over R4 weights).
    plain: Vec<u8>,
}

const R4: usize = quant::r4::R;

/// From how many tokens on a quantized matmul runs as the prompt GEMM (each weight row decoded once
/// for all tokens, [`gemm`]) instead of one fused `vec_dot` per token and row. The first T where
/// the GEMM beats T `vec_dot`s, measured per build in wasm (Node 20, x86-64, 4096×4096,
/// `clef bench-kernels --prefill T` for T = 2, 3, 4, 6, 8, 12, 16, 24, 32). The relaxed-SIMD
/// build's `vec_dot`s are faster while the GEMM is the same code, so its break-even comes later:
/// 2–4 tokens for the 256-element types, up to 8–12 for Q1_0 / Q2_0 / Q4_0 / Q4_1, whose `vec_dot`
/// is cheap and whose GEMM reduces and scales every 32 elements. Q2_K's relaxed prompt runs the
/// int8 GEMM (`quant::gemm8`); re-measured for it (T = 2, 3, 4, 6, 8): the GEMM passes 24 vec_dots
/// at T = 4, so 4 stays. IQ2_SX (expanded IQ2_S, `T` = 2, 3, 4): the GEMM ties its `vec_dot`s
/// at 3 and passes them at 4 in the relaxed build (0.8×, 1.0×, 1.3×), at 3 in SIMD128 (0.6×, 1.4×).
pub fn gemm_min_tokens(ty: GgmlType) -> usize {
    use GgmlType::*;
    if cfg!(target_feature = "relaxed-simd") {
        match ty {
            Q1_0 | Q4_1 => 12,
            Q4_0 | Q2_0 => 8,
            Q8_0 => 6,
            Q5_1 | Q2_K | Q4_K | IQ4_NL | IQ2_SX => 4,
            Q5_0 | Q3_K | Q5_K | Q6_K | Q6_KX | IQ2_XS | IQ1_S | IQ1_M => 3,
            _ => 2,
        }
    } else {
        match ty {
            Q1_0 => 8,
            Q4_1 | Q8_0 => 6,
            Q4_0 | Q2_0 => 4,
            Q5_0 | Q5_1 | IQ4_NL | IQ2_SX => 3,
            _ => 2,
        }
    }
}

/// [`gemm_min_tokens`] for a matrix in the four-rows-interleaved layout ([`quant::r4`]). Below
/// it the product runs as [`quant::r4::matmul_tiles`]: four rows × up to four tokens per kernel
/// call, the codes unpacked once per tile, straight from the interleaved layout; the GEMM has to
/// un-interleave every panel first, so it takes over later than on plain rows — and where
/// depends on the int8 GEMM's profile (Node's narrow tiles, the browsers' wide ones). Measured
/// with `clef bench-kernels --prefill T`, its "4 rows interleaved" columns (GEMM vs tiles,
/// G MAC/s, activation quantization included), in Node 20 and in Chromium 156
/// (`tools/bench-kernels-chromium.mjs`):
/// * narrow, Q2_K: 37.3 / 39.5 / 43.3 at T = 12 / 16 / 24 against tiles 40.2 / 39.4 / 39.1 → 16;
/// * narrow, Q3_K: 31.3 / 34.5 / 38.6 against 34.9 / 34.9 / 35.0 → 16;
/// * wide, Q2_K: 45.8 / 49.7 / 54.4 against 51.6 at all three → 20;
/// * wide, Q3_K: 41.1 / 45.5 / 51.0 against 41.1 / 40.7 / 42.4 → 12.
///
/// Q4_K and Q6_K (session 24, a Zen 5 EPYC; GEMM against tiles at T tokens):
/// * narrow, Q4_K: the tiles ahead at every T measured — 25.7 / 33.9 / 36.0 / 43.6 / 45.3 / 47.6
///   at T = 4 / 8 / 16 / 32 / 64 / 128 against 49.8 / 49.4 / 47.1 / 48.0 / 48.3 / 50.4 → 64;
/// * narrow, Q6_K: 32.3 / 39.3 / 41.1 at T = 8 / 12 / 16 against 38.1 / 41.0 / 39.9 → 16;
/// * wide, Q4_K: 54.8 / 63.9 / 67.1 at T = 16 / 32 / 48 against 65.5 / 64.7 / 66.6 → 40;
/// * wide, Q6_K: 43.3 / 47.9 / 49.7 at T = 16 / 20 / 24 against 47.1 / 46.6 / 45.2 → 20; with
///   the offsets folded into the GEMM's sums (session 25, dot-add form) 42.8 / 44.7 / 48.6 at
///   T = 12 / 16 / 20 against 43.8 / 40.1 / 40.9 → 16 (Q3_K wide, folded: 44.0 / 51.6 at 8 / 12
///   against 46.3 / 45.2 — 12 stays).
/// * wide, Q5_K (interleaved in the wide profile only, session 26): 35.8 / 42.4 / 44.7 at
///   T = 8 / 12 / 16 against 44.0 / 43.8 / 39.5 → 12.
/// * IQ2_SX as nibbles (session 28; interleaved in both profiles): wide 36.6 / 38.4 / 42.8 / 45.1 at
///   T = 12 / 16 / 24 / 32 against tiles 43.8 / 41.3 / 42.4 / 43.0 → 24; narrow 32.9 / 36.4 / 39.6 /
///   43.1 against 38.7 / 37.4 / 38.4 / 40.3 → 24.
/// * IQ3_SX (session 28): wide 41.3 / 45.2 / 50.7 at T = 8 / 12 / 16 against 44.7 / 44.7 / 43.3
///   → 12; narrow 36.6 / 40.1 / 43.3 / 45.8 at T = 16 / 24 / 32 / 48 against 45.0 / 46.0 / 46.6 /
///   45.9 → 48.
/// * Q3_KX (session 28): wide 51.6 / 61.0 / 57.1 / 67.1 at T = 8 / 12 / 16 / 24 against tiles
///   58.4 / 58.4 / 54.8 / 61.0 → 12; narrow 40.8 / 40.4 / 45.7 at T = 12 / 16 / 24 against 40.0 /
///   42.7 / 40.9 → 24.
/// * Q6_KX (session 29; taken in the wide profile only): 44.0 / 44.2 / 46.3 / 49.3–52.1 at
///   T = 16 / 20 / 24 / 32 against tiles 47.1 / 47.9 / 47.4 / 46.7–50.2 → 24.
pub fn gemm_min_tokens_r4(ty: GgmlType) -> usize {
    let wide = quant::gemm8::profile() == quant::gemm8::Profile::Wide;
    match (ty, wide) {
        (GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q6_K | GgmlType::Q6_KX, false) => 16,
        (GgmlType::Q2_K, true) => 20,
        (GgmlType::Q6_K, true) => 16,
        (GgmlType::Q6_KX, true) => 24,
        (GgmlType::Q3_K, true) => 12,
        (GgmlType::Q4_K, false) => 64,
        (GgmlType::Q4_K, true) => 40,
        (GgmlType::Q5_K, true) => 12,
        (GgmlType::IQ2_SX, _) => 24,
        (GgmlType::IQ3_SX, false) => 48,
        (GgmlType::IQ3_SX, true) => 12,
        (GgmlType::Q3_KX, false) => 24,
        (GgmlType::Q3_KX, true) => 12,
        _ => gemm_min_tokens(ty),
    }
}

/// `y[t][r] = Σ_i W[r][i] · x[t][i]` for `t < T` tokens: x is `T × n_in`, y is `T × n_out`.
///
/// One token (decode): the fused per-type SIMD dot product, row by row.
/// Several tokens (prompt, T ≥ [`gemm_min_tokens`]): each weight row is decoded once (to the
/// GEMM's i16 form, see [`quant::gemm`], or to f32 in exact mode) and multiplied with every token,
/// so weight bytes are read and unpacked once per batch.
pub fn matmul(store: &WeightStore, w: &Linear, x: &[f32], y: &mut [f32], prec: Precision, s: &mut MatmulScratch) {
    matmuls(store, x, [(w, y)], prec, s)
}

/// [`matmul`] of one input with several matrices (`(W, y)` pairs; a DeltaNet layer's qkv, z, β
/// and α, attention's q, k and v, the FFN's gate and up): `x` is quantized once for all the
/// products whose types take the same activation format, and packed for the prompt GEMM once for
/// all that pack it alike (a 128-token prompt: 0.5 M activations each time, ~3 % of a worker's
/// prompt time when every product did both).
pub fn matmuls<'a, W: std::borrow::Borrow<Linear>>(store: &WeightStore, x: &[f32], products: impl IntoIterator<Item = (W, &'a mut [f32])>, prec: Precision, s: &mut MatmulScratch) {
    let mut held = None; // the activation format `s.act` holds `x` in
    for (w, y) in products {
        let w = w.borrow();
        let ty = w.t.ty;
        if !ty.is_float() && prec != Precision::Exact && held != Some((ty.act_kind(), w.n_in)) {
            assert_eq!(x.len() % w.n_in, 0, "{}: input is not a multiple of {}", w.t.name, w.n_in);
            quantize_q8(ty.act_kind(), x, w.n_in, &mut s.act);
            held = Some((ty.act_kind(), w.n_in));
        }
        host_call();
        product(store, w, x, y, prec, s);
    }
}

/// A call out to the host (`performance.now()`) before each product, its result unused. Measured,
/// not understood: without it Chromium 156's V8 runs the int8 prompt GEMMs of the FFN and
/// attention layers 13–16 % slower from a fixed layer of a prompt pass on (where depends on how
/// many products came before: the layer moves with the memory layout), in shard workers mostly —
/// its speculative inlining's doing (`--js-flags=--no-wasm-inlining` removes the step too, and the
/// DeltaNet layers and the decode never had it). With the call every layer runs at the first
/// layers' speed: the 2-worker Q2_K prompt +6 % (BENCHMARKS.md, session 45). ~0.1 µs a product.
/// The decode's products need it too: with the call before a prompt's products only, the step
/// came back; and so did it with the call behind a flag set in shard instances only (to spare the
/// one-worker engine's decode the 2–4 % the call costs it there, session 46).
#[inline(always)]
fn host_call() {
    #[cfg(target_arch = "wasm32")]
    std::hint::black_box(crate::bench::now_ms());
}

/// One product of [`matmuls`]; `s.act` holds `x` quantized for `w`'s type (unless it is a float
/// type or `prec` is exact).
fn product(store: &WeightStore, w: &Linear, x: &[f32], y: &mut [f32], prec: Precision, s: &mut MatmulScratch) {
    let rows = 0..w.n_out;
    let (n_in, n_out) = (w.n_in, w.n_out);
    assert_eq!(x.len() % n_in, 0, "{}: input is not a multiple of {n_in}", w.t.name);
    let t_count = x.len() / n_in;
    assert_eq!(y.len(), t_count * n_out, "{}: output size", w.t.name);
    let data = store.bytes(&w.t);
    let rows4 = quant::r4::Rows { data, r4: w.r4 };
    let ty = w.t.ty;
    let row = |r: usize| &data[r * w.row_bytes..(r + 1) * w.row_bytes];

    if ty.is_float() {
        for r in rows {
            let wr = row(r);
            for t in 0..t_count {
                y[t * n_out + r] = float::dot(ty, wr, &x[t * n_in..(t + 1) * n_in]);
            }
        }
        return;
    }
    let k = kernels(ty).unwrap_or_else(|| panic!("no kernels for {ty}"));
    if w.r4 {
        assert!(rows.start % R4 == 0 && rows.end % R4 == 0, "{}: rows {rows:?} split an interleaved group", w.t.name);
    }
    if prec == Precision::Exact {
        s.wrow.resize(n_in, 0.0);
        for g in (rows.start..rows.end).step_by(R4) {
            let p = if w.r4 { R4 } else { (rows.end - g).min(R4) };
            let plain = rows4.panel(ty, w.row_bytes, g, p, &mut s.plain);
            for (j, wr) in plain.chunks_exact(w.row_bytes).enumerate() {
                (k.dequantize)(wr, &mut s.wrow);
                for t in 0..t_count {
                    y[t * n_out + g + j] = float::dot_f32(&s.wrow, &x[t * n_in..(t + 1) * n_in]);
                }
            }
        }
        return;
    }
    if w.r4 && t_count < gemm_min_tokens_r4(ty) {
        // Four rows per kernel call and up to four tokens: each group read from memory once.
        let k4 = quant::r4::r4_kernels(ty).expect("R4 kernels");
        let bytes = rows.len() * w.row_bytes;
        let Some(alt) = k4.usable_alt() else {
            quant::r4::matmul_tiles(k4, data, w.row_bytes, rows, &s.act, y, n_out);
            return;
        };
        let timed = |bytes: usize| t_count == 1 && bytes >= R4_TRIAL_MIN_BYTES;
        let plan = R4_FORM.lock().unwrap_or_else(|e| e.into_inner()).plan(ty, false, timed(bytes));
        // While the trial runs, a large product is timed in pieces (whole groups of four rows),
        // each a sample: an LM head, one product a token, settles within the warm-up's tokens
        // instead of ~30 tokens into the first answer. Each row's result is the same either way.
        let pieces = if let Plan::Trial(_) = plan { (bytes / R4_TRIAL_PIECE_BYTES).clamp(1, R4_TRIAL_PIECES) } else { 1 };
        let step = rows.len().div_ceil(pieces).next_multiple_of(quant::r4::R);
        let mut start = rows.start;
        while start < rows.end {
            let part = start..(start + step).min(rows.end);
            let part_bytes = part.len() * w.row_bytes;
            let plan = if pieces == 1 { plan } else { R4_FORM.lock().unwrap_or_else(|e| e.into_inner()).plan(ty, false, timed(part_bytes)) };
            plan.run(
                |b| quant::r4::matmul_tiles(if b { alt } else { k4 }, data, w.row_bytes, part.clone(), &s.act, y, n_out),
                |b, ms| R4_FORM.lock().unwrap_or_else(|e| e.into_inner()).record(ty, b, false, part_bytes as f64, ms),
            );
            start = part.end;
        }
        return;
    }
    if !w.r4 && t_count < gemm_min_tokens(ty) {
        let bytes = rows.len() * w.row_bytes;
        streams_plan(ty, t_count, bytes).run(
            |streams| rows_outer(k, data, w.row_bytes, rows, &s.act, y, n_out, streams),
            |streams, ms| streams_record(ty, streams, bytes, ms),
        );
        return;
    }
    // Panels of rows, each decoded once and multiplied with every token.
    // f64: a 12288-row matrix over 128 tokens is 6.4e9 multiply-adds, past wasm32's usize.
    let macs = rows.len() as f64 * n_in as f64 * t_count as f64;
    gemm_dot_plan(ty, t_count, macs).run(
        |quads| gemm::prompt_rows(k, rows4, rows, &s.act, &mut s.prompt, y, n_out, quads),
        |quads, ms| {
            let mut t = GEMM_DOT.lock().unwrap_or_else(|e| e.into_inner());
            t.1.record(ty, quads, false, macs, ms);
            // Settled on quads: check the kernels again, now in V8's optimizing tier.
            if t.1.decided(ty) == Some(true) && !gemm8::recheck_quad_add() {
                t.1 = Trial::new();
            }
        },
    );
}

/// `y[t·n_out + r]` = row `r` of `data` (rows of `row_bytes`) · token `t` of `act`, for `r` in
/// `rows`, rows outer: a weight row is read from memory once and stays in L1 for every token.
/// The decode matvec over plain rows.
///
/// Without `streams`, the rows one after the other, each whole through `vec_dot`. **With
/// `streams`, [`STREAMS`] parts of the matrix at once**: the rows are split into that many runs,
/// and the i-th row of every run is multiplied together: by a four-row kernel where the type has
/// one ([`quant::legacy::vec_dot4`]: the rows' blocks in step, each row's result its `vec_dot`'s
/// bit for bit), else a piece at a time (piece p of each, then piece p + 1 of each; a piece:
/// [`stream_piece`], at least [`PIECE_BYTES`]), each row's pieces' products added in order from
/// 0 — a sum that differs from a whole row's by f32 rounding only. One row read front to back
/// keeps too few cache-line misses in flight to stream from memory at the memory's speed, and
/// wasm has no prefetch instruction; four fine-grained streams do what a prefetch does (as
/// [`quant::r4::matvec_streams`] over interleaved rows; BENCHMARKS.md "Four streams on plain
/// rows").
#[allow(clippy::too_many_arguments)]
pub fn rows_outer(
    k: &quant::QuantKernels,
    data: &[u8],
    row_bytes: usize,
    rows: std::ops::Range<usize>,
    act: &QAct,
    y: &mut [f32],
    n_out: usize,
    streams: bool,
) {
    let row = |r: usize| &data[r * row_bytes..(r + 1) * row_bytes];
    let whole_rows = |rows: std::ops::Range<usize>, y: &mut [f32]| {
        for r in rows {
            let wr = row(r);
            for t in 0..act.rows {
                y[t * n_out + r] = (k.vec_dot)(wr, act.row(t));
            }
        }
    };
    if !streams {
        return whole_rows(rows, y);
    }
    // Runs of `run` rows, their i-th rows together; the rows past them (fewer than STREAMS) alone.
    let run = rows.len() / STREAMS;
    if let Some(dot4) = quant::legacy::vec_dot4(k.ty) {
        // The four rows' blocks in step, each row's result its `vec_dot`'s.
        for i in 0..run {
            let group: [usize; STREAMS] = core::array::from_fn(|s| rows.start + s * run + i);
            for t in 0..act.rows {
                let v = dot4(group.map(row), act.row(t));
                for (s, &r) in group.iter().enumerate() {
                    y[t * n_out + r] = v[s];
                }
            }
        }
        return whole_rows(rows.start + STREAMS * run..rows.end, y);
    }
    let (bb, be) = (k.ty.block_bytes(), k.ty.block_elems());
    let blocks = row_bytes / bb;
    let piece = stream_piece(k.ty).min(blocks.max(1));
    let g = Pieces { vec_dot: k.vec_dot, data, row_bytes, bb, be, blocks, piece };
    for i in 0..run {
        g.multiply::<STREAMS>(core::array::from_fn(|s| rows.start + s * run + i), act, y, n_out);
    }
    for r in rows.start + STREAMS * run..rows.end {
        g.multiply::<1>([r], act, y, n_out);
    }
}

/// Blocks of a piece in [`rows_outer`]'s streams: the fewest whole 256-element steps (the kernels'
/// widest loop: one block of the 256-element types, eight of the 32-element ones) that hold
/// [`PIECE_BYTES`] — Q8_0 512 elements (544 bytes), Q4_0 1024 (576), IQ4_XS 1024 (544).
pub fn stream_piece(ty: GgmlType) -> usize {
    let step = (256 / ty.block_elems()).max(1); // blocks
    PIECE_BYTES.div_ceil(step * ty.block_bytes()) * step
}

/// A matrix's plain rows, taken a piece at a time ([`rows_outer`] with streams).
struct Pieces<'a> {
    vec_dot: fn(&[u8], crate::quant::Q8<'_>) -> f32,
    data: &'a [u8],
    row_bytes: usize,
    /// Bytes and elements of a block; blocks of a row; blocks of a piece.
    bb: usize,
    be: usize,
    blocks: usize,
    piece: usize,
}

impl Pieces<'_> {
    /// Rows `rows` · every token of `act` into `y`, the rows' pieces in step: each row's pieces'
    /// products added in order from 0.
    #[inline(always)]
    fn multiply<const S: usize>(&self, rows: [usize; S], act: &QAct, y: &mut [f32], n_out: usize) {
        let &Pieces { vec_dot, data, row_bytes, bb, be, blocks, piece } = self;
        let row: [&[u8]; S] = rows.map(|r| &data[r * row_bytes..(r + 1) * row_bytes]);
        for t in 0..act.rows {
            let a = act.row(t);
            let mut sum = [0.0f32; S];
            for p in (0..blocks).step_by(piece) {
                let q = (p + piece).min(blocks);
                let ap = a.slice(p * be, (q - p) * be);
                for s in 0..S {
                    sum[s] += vec_dot(&row[s][p * bb..q * bb], ap);
                }
            }
            for s in 0..S {
                y[t * n_out + rows[s]] = sum[s];
            }
        }
    }
}

/// Parts of a matrix a decoded token's product reads at once ([`rows_outer`] with streams; the
/// interleaved rows' [`quant::r4::STREAMS`] too).
pub use quant::r4::{PIECE_BYTES, STREAMS};

/// Whether the decode matvec over plain rows of `ty` reads [`STREAMS`] at once by default
/// ([`rows_outer`]): the prior that [`streams_plan`] starts from and keeps where its trial finds
/// no clear winner. Every quantized type: on the Emerald Rapids Xeon measured, the bandwidth-bound
/// kernels gained 24–41 % and the compute-bound ones held level (BENCHMARKS.md "Four streams on
/// plain rows").
pub fn streams_prior(ty: GgmlType) -> bool {
    !ty.is_float()
}

/// How the decode matvec over plain rows reads them ([`set_streams`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streams {
    /// Per weight type, what this machine runs faster ([`streams_plan`]); the default.
    Auto,
    /// The prior of [`streams_prior`], untried.
    Prior,
    /// Never: rows one after the other, each whole.
    Off,
}

/// Sets how the decode matvec over plain rows reads them (`clef generate --streams auto|on|off`;
/// `on` is [`Streams::Prior`]) and forgets every trial. Streamed rows give whole rows' products,
/// or (types without a four-row kernel) sums of pieces that differ from them by f32 rounding only.
pub fn set_streams(mode: Streams) {
    *STREAMS_TRIAL.lock().unwrap_or_else(|e| e.into_inner()) = (mode, Trial::new());
}

/// **Streams or whole rows, chosen per machine** ([`crate::tune`]): how many misses a core keeps
/// in flight, and what the engine's code costs per kernel call, differ between CPUs (touching the
/// next row ahead, the mechanism before the streams, gained 5–30 % on one Intel Xeon and lost up
/// to 39 % on an AMD EPYC). Timed: decode calls (one token) of at least [`TRIAL_MIN_BYTES`], rated
/// in GB/s. Layer types are settled within the first decoded token of a 9B file, the LM head's
/// type within ~30 tokens. Smaller calls (and prompts) keep the prior, so the test fixtures never
/// see a trial.
static STREAMS_TRIAL: std::sync::Mutex<(Streams, Trial)> = std::sync::Mutex::new((Streams::Auto, Trial::new()));

/// Calls smaller than this (bytes of weights) are not timed: their time is mostly the clock's.
pub const TRIAL_MIN_BYTES: usize = 1 << 20;

/// Streams or not for a decode matvec of `t_count` tokens over `bytes` of `ty` weights.
fn streams_plan(ty: GgmlType, t_count: usize, bytes: usize) -> Plan {
    let prior = streams_prior(ty);
    let mut t = STREAMS_TRIAL.lock().unwrap_or_else(|e| e.into_inner());
    match t.0 {
        Streams::Off => Plan::Fixed(false),
        Streams::Prior => Plan::Fixed(prior),
        Streams::Auto => t.1.plan(ty, prior, t_count == 1 && bytes >= TRIAL_MIN_BYTES && !ty.is_float()),
    }
}

/// Records one timed call of the trial.
fn streams_record(ty: GgmlType, streams: bool, bytes: usize, ms: f64) {
    let mut t = STREAMS_TRIAL.lock().unwrap_or_else(|e| e.into_inner());
    t.1.record(ty, streams, streams_prior(ty), bytes as f64, ms);
}

/// Per quantized type that has been tried: (type, decided, median GB/s with whole rows, with
/// streams) — what the trial measured (`clef generate --json` reports it).
pub fn streams_report() -> Vec<(GgmlType, Option<bool>, f64, f64)> {
    STREAMS_TRIAL.lock().unwrap_or_else(|e| e.into_inner()).1.report()
}

/// How the int8 prompt GEMM multiplies ([`set_gemm_dot`]): pair sums widened by the group scales,
/// or dot-add into quad sums ([`gemm8`]'s module docs, "Dot-add").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmDot {
    /// Per weight type, what this machine runs faster ([`crate::tune`], [`GEMM_DOT`]); the
    /// default.
    Auto,
    /// Always pair sums.
    Pairs,
    /// Dot-add (quad order, or a type's scaled form) wherever this engine computes it exactly
    /// ([`gemm8::quad_add_exact`]).
    Quads,
}

/// **The int8 GEMM's dot is chosen per machine** ([`crate::tune`]): the dot-add form is one
/// instruction per 16 products where the CPU has AVX-VNNI (arm64: `sdot`) and three elsewhere,
/// and it pays a scale multiply per 64 elements, so it wins on some CPUs and types and loses on
/// others (BENCHMARKS.md). Both give the same results bit for bit. Timed: prompt calls of at least
/// [`GEMM_TRIAL_MIN_MACS`], rated in G multiply-adds a second; a 9B file's layer types are settled
/// within its first 128-token prompt pass.
///
/// Every int8 type is timed. Plain quad order over groups of 16 pays a scale multiply per 64
/// products, and lost to the pair form wherever that sums eight vectors in i16 before widening
/// ([`gemm8::Kernels8::pair_ksum`] 8: Zen 5 EPYC, Q2_K 71–76 → 66–68, Q4_K 70 → 63 G MAC/s);
/// those types were left untimed once a noisy trial settled on it for one of them and cost the
/// Q2_K file's prompt 9 % (BENCHMARKS.md, session 31). Each of them now has a dot-add form
/// without that multiply: Q2_K its scaled form, the others quad order narrowed
/// ([`gemm8::Kernels8::narrow_limit`]), which beat the pair form on the Emerald Rapids Xeon
/// measured (T = 128, G MAC/s: Q3_K 44.9 → 48.3–49.0, Q3_KX 44.7–45.1 → 48.3–48.8, IQ1_M 43.6 →
/// 46.4–47.3, Q4_K 40.4 → 44.3–44.6, IQ3_S 41.5–42.3 → 45.7–46.2, IQ1_S 44.3–44.5 → 47.9–48.3,
/// IQ3_SX 44.3–44.7 → 47.7–48.0; Q2_K scaled 40.2 → 53.4).
static GEMM_DOT: std::sync::Mutex<(GemmDot, Trial)> = std::sync::Mutex::new((GemmDot::Auto, Trial::new()));

/// **Which form of an interleaved type's decode kernel** ([`quant::r4::R4Kernels::alt`]) is
/// chosen per instance by timing ([`crate::tune`]): both give the same results bit for bit, and
/// which is faster depends on the engine's code generator (Q6_K's i16 pair sums: 20.6–20.8 against
/// 19.0 GB/s in Chromium 156, 15.9 against 20.9 in Node 20) and the CPU (Q2_K's dot-add form,
/// one instruction per 16 products where the CPU has AVX-VNNI and three elsewhere; only where the
/// engine computes the dot-add exactly, [`gemm8::quad_add_exact`]). Timed: one-token products of at least
/// [`R4_TRIAL_MIN_BYTES`] of weights, rated in bytes a second, the largest in pieces
/// ([`R4_TRIAL_PIECE_BYTES`]: an LM head's type, one product a token, settles in two or three
/// tokens instead of ~30); the first is the prior.
static R4_FORM: std::sync::Mutex<Trial> = std::sync::Mutex::new(Trial::new());

/// Decode products smaller than this (weight bytes) are not timed for [`R4_FORM`].
pub const R4_TRIAL_MIN_BYTES: usize = 1 << 20;

/// While [`R4_FORM`]'s trial runs, a product of more than this many weight bytes is timed in up to
/// [`R4_TRIAL_PIECES`] pieces of at least this size (a piece of a 9B LM head shard: ~1–2 ms, well
/// above the browsers' 0.1 ms clock).
pub const R4_TRIAL_PIECE_BYTES: usize = 16 << 20;

/// The most pieces one timed product is split into (two products give a trial its samples).
pub const R4_TRIAL_PIECES: usize = 16;

/// Per interleaved type with two kernel forms that has been tried: (type, decided the second,
/// median GB/s with the first, with the second) (`clef generate --json` reports it).
pub fn r4_form_report() -> Vec<(GgmlType, Option<bool>, f64, f64)> {
    R4_FORM.lock().unwrap_or_else(|e| e.into_inner()).report()
}

/// Prompt calls smaller than this (multiply-adds) are not timed.
pub const GEMM_TRIAL_MIN_MACS: usize = 1 << 26;

/// Sets how the int8 prompt GEMM multiplies (`clef generate --gemm-dot auto|pairs|quads`) and
/// forgets every trial.
pub fn set_gemm_dot(mode: GemmDot) {
    *GEMM_DOT.lock().unwrap_or_else(|e| e.into_inner()) = (mode, Trial::new());
}

/// Pairs (`false`) or quads for a prompt product of `macs` multiply-adds of `ty` over `t_count`
/// tokens.
fn gemm_dot_plan(ty: GgmlType, t_count: usize, macs: f64) -> Plan {
    if !gemm8::enabled(ty, t_count) || !gemm8::quad_add_exact() {
        return Plan::Fixed(false);
    }
    let mut t = GEMM_DOT.lock().unwrap_or_else(|e| e.into_inner());
    match t.0 {
        GemmDot::Pairs => Plan::Fixed(false),
        GemmDot::Quads => Plan::Fixed(true),
        GemmDot::Auto => t.1.plan(ty, false, macs >= GEMM_TRIAL_MIN_MACS as f64),
    }
}

/// Per int8 GEMM type that has been tried: (type, decided quads, median G MAC/s with pairs, with
/// quads) (`clef generate --json` reports it).
pub fn gemm_dot_report() -> Vec<(GgmlType, Option<bool>, f64, f64)> {
    GEMM_DOT.lock().unwrap_or_else(|e| e.into_inner()).1.report()
}

/// Row `r` of an embedding table, dequantized.
pub fn embedding_row(store: &WeightStore, table: &Linear, r: usize, out: &mut [f32]) {
    let data = store.bytes(&table.t);
    dequantize_row(table.t.ty, &data[r * table.row_bytes..(r + 1) * table.row_bytes], out);
}

/// Loads a small F32 (or other) tensor fully as f32 (norm weights, conv kernels, …).
pub fn load_f32(store: &WeightStore, t: &TensorView) -> Vec<f32> {
    let n: usize = t.dims.iter().product();
    let mut out = vec![0.0f32; n];
    quant::dequantize_row(t.ty, store.bytes(t), &mut out);
    out
}

/// RMSNorm of each `w.len()`-sized row of `x` in place: x̂ = x / sqrt(mean(x²) + eps) · w.
/// The sum of squares is accumulated in f64, as llama.cpp does.
pub fn rmsnorm(x: &mut [f32], w: &[f32], eps: f32) {
    let n = w.len();
    for row in x.chunks_exact_mut(n) {
        let ss: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
        let scale = (1.0 / (ss / n as f64 + eps as f64).sqrt()) as f32;
        for (v, &wi) in row.iter_mut().zip(w) {
            *v = *v * scale * wi;
        }
    }
}

/// L2 normalisation with eps inside the square root of the sum: x / sqrt(Σx² + eps).
pub fn l2norm(x: &mut [f32], eps: f32) {
    let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    let scale = (1.0 / (ss + eps as f64).sqrt()) as f32;
    for v in x {
        *v *= scale;
    }
}

/// e^x in f32 as Cephes' `expf` computes it: x = n·ln 2 + r with n = round(x·log₂e) and r taken
/// off in two parts (ln 2 = 0.693359375 − 2.12194440e−4, the first exact times n), a degree-5
/// polynomial for e^r, then × 2ⁿ built in the exponent bits. Within 1.5e−7 relative of e^x, about
/// 1 ULP (the test below measures it against f64: 7.7e−8); +∞ above 88.37 (where 2ⁿ would
/// overflow), 0 below −87.33 (the subnormals), NaN for NaN. The exponential of the forward pass's element-wise work (SiLU, the
/// sigmoid gates, attention's softmax; the DeltaNet decay and `softplus`, a few per head and
/// token, keep libm's); the SIMD lanes of [`silu_mul`] and its siblings do the same operations
/// in the same order, so they give the same bits. libm's `expf` costs ~10–15 ns a call in wasm,
/// and a 9B token takes ~0.7 M of them.
#[inline]
pub fn exp(x: f32) -> f32 {
    let xc = x.clamp(EXP_LO, EXP_HI); // (NaN stays NaN, as in f32x4.min / max)
    let n = (xc * core::f32::consts::LOG2_E).round_ties_even();
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = ((((EXP_P[0] * r + EXP_P[1]) * r + EXP_P[2]) * r + EXP_P[3]) * r + EXP_P[4]) * r + EXP_P[5];
    let e = (p * (r * r) + r) + 1.0;
    let y = e * f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x > EXP_HI {
        f32::INFINITY
    } else if x < EXP_LO {
        0.0
    } else {
        y
    }
}

const EXP_HI: f32 = 88.37;
const EXP_LO: f32 = -87.33;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes' `expf` coefficients of e^r ≈ 1 + r + r²·P(r) (its last, 5.0000001201e−1, is 0.5 in f32).
const EXP_P: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5];

#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// `x[i] = silu(x[i])`.
pub fn silu_slice(x: &mut [f32]) {
    map_pairs(x, None, |v, _| silu(v), |v, _| simd::silu(v));
}

/// SwiGLU's product: `g[i] = silu(g[i])·u[i]`.
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    map_pairs(g, Some(u), |v, w| silu(v) * w, |v, w| simd::mul(simd::silu(v), w));
}

/// A gate: `o[i] *= sigmoid(z[i])`.
pub fn sigmoid_gate(o: &mut [f32], z: &[f32]) {
    map_pairs(o, Some(z), |v, w| v * sigmoid(w), |v, w| simd::mul(v, simd::sigmoid(w)));
}

/// A SiLU gate: `o[i] *= silu(z[i])`.
pub fn silu_gate(o: &mut [f32], z: &[f32]) {
    map_pairs(o, Some(z), |v, w| v * silu(w), |v, w| simd::mul(v, simd::silu(w)));
}

/// `x[i] = f(x[i], y[i])` (y = 0 where absent), four lanes at a time with `f4` where there is
/// SIMD128 (the same operations as `f`, so the same bits), the rest one by one.
#[inline(always)]
fn map_pairs(x: &mut [f32], y: Option<&[f32]>, f: impl Fn(f32, f32) -> f32, f4: impl Fn(simd::F4, simd::F4) -> simd::F4) {
    if let Some(y) = y {
        assert_eq!(x.len(), y.len(), "element-wise operands differ in length");
    }
    let at = |i: usize| y.map_or(0.0, |y| y[i]);
    let mut i = 0;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    while i + 4 <= x.len() {
        let v = simd::load(&x[i..i + 4]);
        let w = y.map_or(simd::splat(0.0), |y| simd::load(&y[i..i + 4]));
        simd::store(&mut x[i..i + 4], f4(v, w));
        i += 4;
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let _ = &f4;
    while i < x.len() {
        x[i] = f(x[i], at(i));
        i += 1;
    }
}

/// [`exp`] and the activations built on it, four lanes at a time (natively a plain array, so
/// that `map_pairs` compiles everywhere; it is only called with SIMD128).
mod simd {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub use wasm::*;

    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub type F4 = [f32; 4];
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub fn silu(v: F4) -> F4 {
        v.map(super::silu)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub fn sigmoid(v: F4) -> F4 {
        v.map(super::sigmoid)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub fn mul(a: F4, b: F4) -> F4 {
        [a[0] * b[0], a[1] * b[1], a[2] * b[2], a[3] * b[3]]
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    mod wasm {
        use super::super::{EXP_HI, EXP_LO, EXP_P, LN2_HI, LN2_LO};
        use core::arch::wasm32::*;

        pub type F4 = v128;

        #[inline(always)]
        pub fn splat(v: f32) -> F4 {
            f32x4_splat(v)
        }
        #[inline(always)]
        pub fn load(x: &[f32]) -> F4 {
            assert!(x.len() >= 4);
            // SAFETY: four f32 are readable at x (checked); v128_load has no alignment needs.
            unsafe { v128_load(x.as_ptr() as *const v128) }
        }
        #[inline(always)]
        pub fn store(x: &mut [f32], v: F4) {
            assert!(x.len() >= 4);
            // SAFETY: four f32 are writable at x (checked).
            unsafe { v128_store(x.as_mut_ptr() as *mut v128, v) }
        }
        #[inline(always)]
        pub fn mul(a: F4, b: F4) -> F4 {
            f32x4_mul(a, b)
        }

        /// [`super::super::exp`] in four lanes: the same operations in the same order.
        #[inline(always)]
        pub fn exp(x: F4) -> F4 {
            // f32x4.min / max keep a NaN, as f32::clamp does.
            let xc = f32x4_min(f32x4_max(x, f32x4_splat(EXP_LO)), f32x4_splat(EXP_HI));
            let n = f32x4_nearest(f32x4_mul(xc, f32x4_splat(core::f32::consts::LOG2_E)));
            let r = f32x4_sub(f32x4_sub(xc, f32x4_mul(n, f32x4_splat(LN2_HI))), f32x4_mul(n, f32x4_splat(LN2_LO)));
            let mut p = f32x4_splat(EXP_P[0]);
            for &c in &EXP_P[1..] {
                p = f32x4_add(f32x4_mul(p, r), f32x4_splat(c));
            }
            let e = f32x4_add(f32x4_add(f32x4_mul(p, f32x4_mul(r, r)), r), f32x4_splat(1.0));
            let scale = i32x4_shl(i32x4_add(i32x4_trunc_sat_f32x4(n), i32x4_splat(127)), 23);
            let y = f32x4_mul(e, scale);
            let y = v128_bitselect(f32x4_splat(f32::INFINITY), y, f32x4_gt(x, f32x4_splat(EXP_HI)));
            v128_bitselect(f32x4_splat(0.0), y, f32x4_lt(x, f32x4_splat(EXP_LO)))
        }
        #[inline(always)]
        pub fn sigmoid(x: F4) -> F4 {
            let one = f32x4_splat(1.0);
            f32x4_div(one, f32x4_add(one, exp(f32x4_neg(x))))
        }
        #[inline(always)]
        pub fn silu(x: F4) -> F4 {
            f32x4_mul(x, sigmoid(x))
        }
    }
}

#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// NEOX-style rotary embedding of the first `n_rot` dims of one head vector at position `pos`:
/// pairs (i, i + n_rot/2) rotate by θ_i = pos · base^(−2i/n_rot). θ_i is built by repeated
/// multiplication in f32, as ggml does.
pub fn rope_neox(v: &mut [f32], n_rot: usize, pos: usize, base: f32) {
    let half = n_rot / 2;
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut theta = pos as f32;
    for i in 0..half {
        let (s, c) = theta.sin_cos();
        let (x0, x1) = (v[i], v[i + half]);
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
}

/// `s *= decay`, then returns `s · k` (the decayed DeltaNet state row read with key k).
/// Eight independent partial sums let LLVM emit f32x4 SIMD for this reduction.
#[inline]
pub fn scale_then_dot(s: &mut [f32], decay: f32, k: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (sc, kc) = (s.chunks_exact_mut(8), k.chunks_exact(8));
    let tail = sc.len() * 8;
    for (sv, kv) in sc.zip(kc) {
        for i in 0..8 {
            sv[i] *= decay;
            acc[i] += sv[i] * kv[i];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (sv, kv) in s[tail..].iter_mut().zip(&k[tail..]) {
        *sv *= decay;
        sum += *sv * kv;
    }
    sum
}

/// `s += delta · k`, then returns `s · q` (the DeltaNet rank-1 write and read-out of one row).
#[inline]
pub fn axpy_then_dot(s: &mut [f32], delta: f32, k: &[f32], q: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let tail = s.len() / 8 * 8;
    for ((sv, kv), qv) in s.chunks_exact_mut(8).zip(k.chunks_exact(8)).zip(q.chunks_exact(8)) {
        for i in 0..8 {
            sv[i] += delta * kv[i];
            acc[i] += sv[i] * qv[i];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for ((sv, kv), qv) in s[tail..].iter_mut().zip(&k[tail..]).zip(&q[tail..]) {
        *sv += delta * kv;
        sum += *sv * qv;
    }
    sum
}

#[cfg(test)]
mod exp_tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// [`exp`] against f64 over its whole range (measured 7.7e−8 relative, about 1 ULP), and the
    /// edges.
    #[test]
    fn exp_matches_f64_to_about_one_ulp() {
        let mut worst = 0.0f64;
        let mut x = EXP_LO;
        while x <= EXP_HI {
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            worst = worst.max(((got - want) / want).abs());
            x += 1.37e-3;
        }
        println!("exp: worst relative error {worst:e}");
        assert!(worst < 1.5e-7, "relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert_eq!(exp(-100.0), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(sigmoid(-100.0), 0.0);
        assert_eq!(sigmoid(100.0), 1.0);
    }

    /// The slice forms (SIMD lanes in wasm) equal the scalar functions bit for bit, with NaN,
    /// infinities, the range's edges and a length that leaves a tail.
    #[test]
    fn activation_slices_equal_the_scalar_functions() {
        let mut xs: Vec<f32> = (0..4099).map(|i| (i as f32 - 2049.0) * 0.05).collect();
        xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, EXP_HI, EXP_LO, 88.5, -88.5, -0.0, 1e-30]);
        let zs: Vec<f32> = xs.iter().rev().map(|v| v * 0.5 + 1.0).collect();
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        let mut v = xs.clone();
        silu_slice(&mut v);
        assert!(same(&v, &xs.iter().map(|&x| silu(x)).collect::<Vec<_>>()), "silu_slice");
        let mut v = xs.clone();
        silu_mul(&mut v, &zs);
        assert!(same(&v, &xs.iter().zip(&zs).map(|(&x, &z)| silu(x) * z).collect::<Vec<_>>()), "silu_mul");
        let mut v = xs.clone();
        sigmoid_gate(&mut v, &zs);
        assert!(same(&v, &xs.iter().zip(&zs).map(|(&x, &z)| x * sigmoid(z)).collect::<Vec<_>>()), "sigmoid_gate");
        let mut v = xs.clone();
        silu_gate(&mut v, &zs);
        assert!(same(&v, &xs.iter().zip(&zs).map(|(&x, &z)| x * silu(z)).collect::<Vec<_>>()), "silu_gate");
    }
}

#[cfg(test)]
mod streams_tests {
    use super::*;

    /// Runs `ty`'s trial to its end with streamed calls taking `ms_on` and whole rows `ms_off`;
    /// returns the decision.
    fn trial(ty: GgmlType, ms_on: f64, ms_off: f64) -> bool {
        const BYTES: usize = 4 << 20;
        for _ in 0..1000 {
            match streams_plan(ty, 1, BYTES) {
                Plan::Trial(streams) => streams_record(ty, streams, BYTES, if streams { ms_on } else { ms_off }),
                Plan::Fixed(streams) => return streams,
            }
        }
        panic!("{ty}: the trial never ended");
    }

    #[test]
    fn streams_are_tried_on_decode_calls() {
        // Types no other test multiplies with ≥ 1 MiB per call (the tuner is process-wide).
        assert!(trial(GgmlType::IQ1_M, 1.0, 2.0), "streams twice as fast");
        assert!(!trial(GgmlType::IQ1_S, 2.0, 1.0), "whole rows twice as fast");
        assert_eq!(trial(GgmlType::Q1_0, 1.0, 1.01), streams_prior(GgmlType::Q1_0), "a tie");
        assert_eq!(trial(GgmlType::Q6_K, 1.01, 1.0), streams_prior(GgmlType::Q6_K), "a tie");
        let report = streams_report();
        let iq1m = report.iter().find(|r| r.0 == GgmlType::IQ1_M).expect("IQ1_M tried");
        assert_eq!(iq1m.1, Some(true));
        assert!((iq1m.2 - 4.0 * 1.048_576 / 2.0).abs() < 1e-3 && (iq1m.3 - 4.0 * 1.048_576).abs() < 1e-3, "{iq1m:?}");
        // Prompts and small calls are never timed. (The fixed modes are not switched here: other
        // tests multiply at the same time.)
        assert!(matches!(streams_plan(GgmlType::IQ2_XXS, 2, 4 << 20), Plan::Fixed(_)));
        assert!(matches!(streams_plan(GgmlType::IQ2_XXS, 1, 1000), Plan::Fixed(_)));
    }
}

#[cfg(test)]
mod matmuls_tests {
    use super::*;
    use crate::weights::TensorView;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Products of one input with several matrices ([`matmuls`]: quantized once per activation
    /// format, packed once per packing) equal the same products one at a time, bit for bit, for
    /// a decoded token and a prompt; types that share a format and a packing (Q2_K, Q4_K), one
    /// that folds an offset (Q3_K), one of another format (Q4_0) and a float type between them,
    /// rows plain and interleaved. And a second input through the same buffers is not taken for
    /// the first.
    #[test]
    fn one_input_quantized_once_gives_the_same_products() {
        let (n, rows) = (512, 64);
        let types = [GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q3_K, GgmlType::Q2_K];
        let mut bytes = Vec::new();
        let mut views = Vec::new();
        for (i, &ty) in types.iter().enumerate() {
            let data = match ty {
                // Finite weights: a NaN's bits are not defined in wasm.
                GgmlType::F16 => (0..rows * n).flat_map(|j| half::f16::from_f32(((j * 37 % 101) as f32 - 50.0) / 64.0).to_le_bytes()).collect(),
                _ => crate::bench::random_matrix(ty, rows, n, 77 + i as u64),
            };
            views.push(TensorView { name: format!("w{i}"), ty, dims: vec![n, rows], shard: 0, offset: bytes.len(), size: data.len() });
            bytes.extend_from_slice(&data);
        }
        let mut store = WeightStore::single_shard(bytes.len() as u64, views.clone()).unwrap();
        store.shard_mut(0).copy_from_slice(&bytes);
        let mut ws: Vec<Linear> = views.into_iter().map(Linear::new).collect();
        let mut scratch = Vec::new();
        for w in &mut ws[3..] {
            interleave(&mut store, w, &mut scratch);
        }
        for t_count in [1, 96] {
            let input = |seed: usize| -> Vec<f32> { (0..t_count * n).map(|i| (((i * 7919 + seed) % 1013) as f32 - 506.0) / 211.0).collect() };
            let (x, x2) = (input(0), input(5));
            let mut s = MatmulScratch::default();
            let mut want: Vec<Vec<f32>> = Vec::new();
            for w in &ws {
                let mut y = vec![0.0; t_count * rows];
                matmul(&store, w, &x, &mut y, Precision::Fast, &mut MatmulScratch::default());
                want.push(y);
            }
            let mut got: [Vec<f32>; 6] = core::array::from_fn(|_| vec![0.0; t_count * rows]);
            let [g0, g1, g2, g3, g4, g5] = got.each_mut().map(|g| g.as_mut_slice());
            matmuls(&store, &x, [(&ws[0], g0), (&ws[1], g1), (&ws[2], g2), (&ws[3], g3), (&ws[4], g4), (&ws[5], g5)], Precision::Fast, &mut s);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()), "T = {t_count}, product {i} ({})", types[i]);
            }
            // The next input, with the same scratch: its own products.
            let mut y2 = vec![0.0; t_count * rows];
            matmuls(&store, &x2, [(&ws[5], &mut y2[..])], Precision::Fast, &mut s);
            let mut want2 = vec![0.0; t_count * rows];
            matmul(&store, &ws[5], &x2, &mut want2, Precision::Fast, &mut MatmulScratch::default());
            assert!(y2.iter().zip(&want2).all(|(a, b)| a.to_bits() == b.to_bits()), "T = {t_count}: a new input");
            assert!(y2.iter().zip(&got[5]).any(|(a, b)| a != b), "the inputs differ");
        }
    }
}
