//! Q6_K: 256 weights in 210 bytes, 6.5625 bits per weight.
//!
//! | offset | bytes | field                                            |
//! |--------|-------|--------------------------------------------------|
//! | 0      | 128   | `ql`: low 4 bits of each weight                  |
//! | 128    | 64    | `qh`: high 2 bits of each weight, four per byte  |
//! | 192    | 16    | `scales: i8[16]`, one per group of 16            |
//! | 208    | 2     | `d` (fp16)                                       |
//!
//! Half n (0..1) = elements `128n..128n+128` uses `ql[64n..64n+64]` and `qh[32n..32n+32]`. For
//! l < 32 and t = 0..3, element `128n + 32t + l` has low bits `ql[64n + l + 32(t%2)]` (low nibble
//! for t < 2, high nibble for t ≥ 2) and high bits `(qh[32n + l] >> 2t) & 3`; `q = (lo | hi << 4) - 32`
//! and `y = d * scales[g] * q` with g = element / 16.
//!
//! Dot with Q8_K: `Σ_blk d_a * d * Σ_g sc_g * Σ_l q·a`. The SIMD kernel uses `u = q + 32 ∈ 0..63`
//! and subtracts `32 * Σ_g sc_g * bsum_g` per block.
//!
//! **Q6_KX**, its load-time form (`forms.rs`; never in a file): the same 210 bytes with the codes
//! regrouped so that three of every four 16-byte vectors are whole codes. Weights `64c..64c+64`
//! (chunk c = 0..3, groups 4c..4c+4) sit in bytes `48c..48c+48`:
//!
//! | offset | bytes | field                                                                       |
//! |--------|-------|-----------------------------------------------------------------------------|
//! | 48c    | 48    | byte `16m + l` (m < 3): bits 0–5 `u` of weight 64c + 16m + l; bits 6–7 bits 2m, 2m+1 of `u` of weight 64c + 48 + l |
//! | 192    | 16    | `scales`, as in Q6_K                                                        |
//! | 208    | 2     | `d`, as in Q6_K                                                             |
//!
//! Unpacking 64 codes takes three masks and a join of three 2-bit pieces (11 operations) where
//! Q6_K's layout takes 17: the four-row kernel runs 21.0–21.6 → 23.2–24.2 GB/s in Chromium 156
//! (Node 20's V8 runs it slower, so only the browsers' profile takes it: `forms::stored_as`). The
//! same integers as Q6_K's reference, so its results are Q6_K's bit for bit; no memory of its own.

use super::{dispatch_decode, dispatch_decode8, dispatch_expand, dispatch_vec_dot, dispatch_vec_dot4, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

const BB: usize = 210;

pub(super) const KERNELS: QuantKernels = kernels::<Q6K>(GgmlType::Q6_K, vec_dot, decode, sanitize);

/// Int8 GEMM form: `u = q + 32 ∈ 0..63`, the offset through the min term; in the browsers'
/// profile only (widening every vector: Chromium 34.4 → 39.8 G MAC/s against the i16 GEMM).
pub(super) const KERNELS8: Kernels8 = kernels8::<Q6K, 32>(GgmlType::Q6_K, 63, [false, true], decode8);

pub(super) const KERNELS_X: QuantKernels = kernels::<Q6Kx>(GgmlType::Q6_KX, vec_dot_x, decode_x, sanitize);
/// Q6_KX's int8 GEMM form: Q6_K's.
pub(super) const KERNELS8_X: Kernels8 = kernels8::<Q6Kx, 32>(GgmlType::Q6_KX, 63, [false, true], decode8_x);

pub(super) struct Q6K;

impl KBlock for Q6K {
    const BB: usize = BB;
    const HAS_MIN: bool = false;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 208), 0.0)
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        (core::array::from_fn(|g| blk[192 + g] as i8 as i32), [0; 16])
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (n, qn) in q.chunks_exact_mut(128).enumerate() {
            let (ql, qh) = (&blk[64 * n..][..64], &blk[128 + 32 * n..][..32]);
            for (t, qt) in qn.chunks_exact_mut(32).enumerate() {
                let lo = &ql[32 * (t % 2)..][..32];
                for ((qi, &l), &h) in qt.iter_mut().zip(lo).zip(qh) {
                    let l = if t < 2 { l & 15 } else { l >> 4 };
                    *qi = (l | ((h >> (2 * t)) & 3) << 4) as i8 - 32;
                }
            }
        }
    }
}

/// Q6_KX ([the module's table](self)): Q6_K's scales and `d`, the codes regrouped.
struct Q6Kx;

impl KBlock for Q6Kx {
    const BB: usize = BB;
    const HAS_MIN: bool = false;

    fn d(blk: &[u8]) -> (f32, f32) {
        Q6K::d(blk)
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        Q6K::scales(blk)
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (c, qc) in q.chunks_exact_mut(64).enumerate() {
            let v = &blk[48 * c..][..48];
            for l in 0..16 {
                let b = [v[l], v[16 + l], v[32 + l]];
                for m in 0..3 {
                    qc[16 * m + l] = (b[m] & 63) as i8 - 32;
                }
                qc[48 + l] = ((b[0] >> 6) | (b[1] >> 6) << 2 | (b[2] >> 6) << 4) as i8 - 32;
            }
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 208);
}

/// One Q6_K block → Q6_KX: the reference of [`expand_in_place`], which in wasm runs
/// `simd::expand` (the same bytes).
pub fn expand_block(src: &[u8], dst: &mut [u8]) {
    let (src, dst): (&[u8; BB], &mut [u8; BB]) = (src.try_into().unwrap(), dst.try_into().unwrap());
    let mut q = [0i8; QK_K];
    Q6K::decode(src, &mut q);
    let u = |w: usize| (q[w] + 32) as u8;
    for c in 0..4 {
        for m in 0..3 {
            for l in 0..16 {
                dst[48 * c + 16 * m + l] = u(64 * c + 16 * m + l) | (u(64 * c + 48 + l) >> (2 * m) & 3) << 6;
            }
        }
    }
    dst[192..].copy_from_slice(&src[192..]);
}

/// Turns `nb` Q6_K blocks at `buf[at..]` into Q6_KX in place (the same size).
pub fn expand_in_place(buf: &mut [u8], at: usize, nb: usize) {
    super::forms::expand_blocks::<BB, BB>(buf, at, at, nb, dispatch_expand!(simd::expand, expand_block));
}

dispatch_vec_dot!(vec_dot, simd::vec_dot::<false>, super::vec_dot_ref::<Q6K>);
dispatch_vec_dot!(vec_dot_x, simd::vec_dot::<true>, super::vec_dot_ref::<Q6Kx>);

/// Four rows interleaved ([`crate::quant::r4`]), 840 bytes per block, in the order the kernel
/// reads them (quarter q = 2n + h: granules i = 4h..4h+4 of half n, i.e. elements
/// 128n + 32t + 4i .. +4 for t = 0..3):
///
/// | offset      | bytes | field                                                        |
/// |-------------|-------|--------------------------------------------------------------|
/// | 0           | 64    | `scales` word k (groups 4k..4k+4) of row r at `16k + 4r`      |
/// | 64          | 8     | `d` of row r at `2r`                                         |
/// | 72 + 192q   | 64    | `ql` word 16n + i (bytes 64n + 4i..) of row r at `16(i − 4h) + 4r` |
/// | +64         | 64    | `ql` word 16n + 8 + i (bytes 64n + 32 + 4i..), the same way   |
/// | +128        | 64    | `qh` word 8n + i (bytes 32n + 4i..), the same way             |
///
/// A block read front to back streams from memory faster: with `ql` and `qh` as two fields the
/// kernel ran 11.1 GB/s over a 65536 × 4096 matrix (Node) but 21.2 within the cache.
pub(super) const R4: R4Kernels = R4Kernels { ty: GgmlType::Q6_K, fields: FIELDS, vec_dot4, vec_dot4_n, matvec: crate::r4_matvec!(vec_dot4, GgmlType::Q6_K), alt: Some(&R4_PAIRS), wide_only: false, dot_add: false };

/// The same with a quarter's products summed in i16 two at a time before each `i32x4.dot`
/// (`simd::vec_dot4` with `PAIRS`): Chromium 156 runs it faster, Node 20 slower (BENCHMARKS.md).
const R4_PAIRS: R4Kernels =
    R4Kernels { ty: GgmlType::Q6_K, fields: FIELDS, vec_dot4: vec_dot4_pairs, vec_dot4_n: vec_dot4_n_pairs, matvec: crate::r4_matvec!(vec_dot4_pairs, GgmlType::Q6_K), alt: None, wide_only: false, dot_add: false };

const FIELDS: &[Field] = &[
    Field { off: 192, len: 16, gran: 4 },
    Field { off: 208, len: 2, gran: 2 },
    Field { off: 0, len: 16, gran: 4 },
    Field { off: 32, len: 16, gran: 4 },
    Field { off: 128, len: 16, gran: 4 },
    Field { off: 16, len: 16, gran: 4 },
    Field { off: 48, len: 16, gran: 4 },
    Field { off: 144, len: 16, gran: 4 },
    Field { off: 64, len: 16, gran: 4 },
    Field { off: 96, len: 16, gran: 4 },
    Field { off: 160, len: 16, gran: 4 },
    Field { off: 80, len: 16, gran: 4 },
    Field { off: 112, len: 16, gran: 4 },
    Field { off: 176, len: 16, gran: 4 },
];

/// Q6_KX's four rows interleaved, 840 bytes per block, in the order the kernel reads them:
///
/// | offset      | bytes | field                                                         |
/// |-------------|-------|---------------------------------------------------------------|
/// | 0           | 64    | `scales` word k (groups 4k..4k+4) of row r at `16k + 4r`       |
/// | 64          | 8     | `d` of row r at `2r`                                          |
/// | 72 + 192c   | 192   | chunk c's word k (bytes 48c + 4k..) of row r at `16k + 4r`     |
pub(super) const R4_X: R4Kernels =
    R4Kernels { ty: GgmlType::Q6_KX, fields: FIELDS_X, vec_dot4: vec_dot4_x, vec_dot4_n: vec_dot4_n_x, matvec: crate::r4_matvec!(vec_dot4_x, GgmlType::Q6_KX), alt: Some(&R4_X_PAIRS), wide_only: false, dot_add: false };

const R4_X_PAIRS: R4Kernels =
    R4Kernels { ty: GgmlType::Q6_KX, fields: FIELDS_X, vec_dot4: vec_dot4_x_pairs, vec_dot4_n: vec_dot4_n_x_pairs, matvec: crate::r4_matvec!(vec_dot4_x_pairs, GgmlType::Q6_KX), alt: None, wide_only: false, dot_add: false };

const FIELDS_X: &[Field] = &[
    Field { off: 192, len: 16, gran: 4 },
    Field { off: 208, len: 2, gran: 2 },
    Field { off: 0, len: 48, gran: 4 },
    Field { off: 48, len: 48, gran: 4 },
    Field { off: 96, len: 48, gran: 4 },
    Field { off: 144, len: 48, gran: 4 },
];

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4[false, false], GgmlType::Q6_K);
dispatch_vec_dot4!(vec_dot4_pairs, vec_dot4_n_pairs, simd::vec_dot4[true, false], GgmlType::Q6_K);
dispatch_vec_dot4!(vec_dot4_x, vec_dot4_n_x, simd::vec_dot4[false, true], GgmlType::Q6_KX);
dispatch_vec_dot4!(vec_dot4_x_pairs, vec_dot4_n_x_pairs, simd::vec_dot4[true, true], GgmlType::Q6_KX);
dispatch_decode!(decode, simd::decode_row::<false>, Q6K);
dispatch_decode!(decode_x, simd::decode_row::<true>, Q6Kx);
dispatch_decode8!(decode8, simd::decode8_row::<false>, Q6K, 32);
dispatch_decode8!(decode8_x, simd::decode8_row::<true>, Q6Kx, 32);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Each block is first decoded to 256 bytes `u = q + 32 ∈ 0..63` on the stack (16 lanes per
    //! operation), then multiplied by [`dot_bytes_g16`]; the `-32` comes back as
    //! `32 Σ_g sc_g bsum_g`. `X`: the block is Q6_KX's (the module's table), else Q6_K's.
    use super::super::simd::{block_ptrs, check_decode, dot_bytes_g16, f16_splat, fold_block, store_scale_pairs};
    use crate::quant::simd::store_scaled16;
    use super::super::{check_lens, Q8, QK_K};
    use crate::quant::f16_at;
    use crate::quant::gemm::Decoded;
    use crate::quant::gemm8::{simd::{store_i16_and_scaled, store_pair_order}, Decoded8};
    use super::BB;
    use crate::quant::simd::hsum_f32;
    use core::arch::wasm32::*;

    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot<const X: bool>(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lens(row, BB, &act);
        let mut acc = f32x4_splat(0.0);
        let mut sbuf = [i32x4_splat(0); 4];
        let mut wbuf = [i32x4_splat(0); 16];
        for b in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks in `row` and nb*256 activations,
            // nb*8 scales and nb*16 group sums in `act`; every load below stays inside them.
            let (x, a, bs, da) = block_ptrs(row, BB, &act, b);
            let sc = v128_load(x.add(192) as *const v128);
            let sc_lo = i16x8_extend_low_i8x16(sc);
            let sc_hi = i16x8_extend_high_i8x16(sc);
            store_scale_pairs(sbuf.as_mut_ptr(), sc_lo, sc_hi);
            let w = wbuf.as_mut_ptr();
            decode::<X>(x, |g, v| v128_store(w.add(g), v));
            let isum = dot_bytes_g16(wbuf.as_ptr() as *const u8, a, sbuf.as_ptr() as *const u32);
            let summs = i32x4_add(
                i32x4_dot_i16x8(sc_lo, v128_load(bs as *const v128)),
                i32x4_dot_i16x8(sc_hi, v128_load(bs.add(8) as *const v128)),
            );
            let dall = f32x4_mul(f16_splat(x.add(208)), da);
            acc = fold_block(acc, isum, dall, summs, f32x4_mul(dall, f32x4_splat(32.0)));
        }
        hsum_f32(acc)
    }

    /// Four interleaved rows (the R4 layouts above) · `NY` activation rows, in four steps of 64
    /// weights (four groups) per row. From three code vectors (word k of three 16-byte runs: 4
    /// weights of each of the 4 rows) come four vectors of codes `u = q + 32` (≤ 63), each meeting
    /// the token's activation word broadcast in one relaxed dot (i16 lanes 2r, 2r+1 belong to row
    /// r):
    /// * Q6_K, step s = 2n + h (quarter h of half n: granules i = 4h + k): `ql` run 0 gives t = 0,
    ///   2, run 1 t = 1, 3 (low nibbles for t < 2, high ones above), `qh` bits 2t, 2t + 1 —
    ///   vector t is group 8n + 2t + h, elements 128n + 32t + 4i ..;
    /// * Q6_KX, step s = chunk c: vector m < 3 is run m's low six bits, vector 3 joins the three
    ///   runs' top two bits — vector m is group 4c + m, elements 64c + 16m + 4k ...
    ///
    /// Each product vector goes straight into an `i32x4.dot` with its group's scales of the four
    /// rows (`r4_store_scales`), row r's sums in lane r; with `PAIRS` two are summed in i16 first
    /// (4 · 63 · 128 < 2¹⁵: the same integers, so the same results bit for bit), faster in
    /// Chromium 156, slower in Node 20 (its V8 spills the accumulators); `ops` times both. `X`:
    /// Q6_KX rows. The offset comes back as `32 Σ_g sc_g bsum_g` per row. Codes and scales are
    /// unpacked once for all `NY` tokens; each token's sums do not depend on `NY`.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    ///
    /// Inlined into its decode driver (see `r4_matvec!`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub(super) unsafe fn vec_dot4<const PAIRS: bool, const X: bool, const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        use super::super::simd::{f16_lanes, r4_dup_masks, r4_scale_sums_g16, r4_store_scales};
        use super::super::simd::rdot16;
        let ty = if X { crate::quant::GgmlType::Q6_KX } else { crate::quant::GgmlType::Q6_K };
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, ty, &a))[0];
        // Opaque, so that V8 keeps them in registers instead of rebuilding each at every use.
        let (m15, m48, m63, m192) = core::hint::black_box((u8x16_splat(15), u8x16_splat(0x30), u8x16_splat(63), u8x16_splat(0xc0)));
        let dup = r4_dup_masks();
        let mut scb = [0i8; 128];
        let scb = scb.as_mut_ptr();
        let mut acc = acc0;
        for b in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·210 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`; `scb` holds 16
            // groups × 8.
            let x = rows4.as_ptr().add(4 * BB * b);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * b));
            let scales = || [0, 1, 2, 3].map(|q| v128_load(x.add(16 * q) as *const v128));
            r4_store_scales(scales(), scb, dup);
            let summs = r4_scale_sums_g16(scales(), acts.map(|a| a.bsums.as_ptr().add(16 * b)));
            let mut isum = [i32x4_splat(0); NY];
            // Opaque trip counts keep both loops loops (V8 hoists the loads of an unrolled block
            // to its top and spills them).
            for s in 0..core::hint::black_box(4usize) {
                let (n, h) = (s >> 1, s & 1);
                // Group and first element of code vector j at word k (the list above).
                let group = |j: usize| if X { 4 * s + j } else { 8 * n + 2 * j + h };
                let elem = |k: usize, j: usize| if X { 64 * s + 16 * j + 4 * k } else { 128 * n + 4 * (4 * h + k) + 32 * j };
                let scale: [v128; 4] = core::array::from_fn(|j| i16x8_load_extend_i8x8(scb.add(8 * group(j))));
                let step = x.add(72 + 192 * s) as *const v128;
                let codes = |k: usize| {
                    let q = step.add(k);
                    if X {
                        // Each run's top bits joined as soon as it is loaded (fewer live vectors).
                        let top = |v: v128, shift: u32| u16x8_shr(v128_and(v, m192), shift);
                        let v0 = v128_load(q);
                        let (c0, t) = (v128_and(v0, m63), top(v0, 6));
                        let v1 = v128_load(q.add(4));
                        let (c1, t) = (v128_and(v1, m63), v128_or(t, top(v1, 4)));
                        let v2 = v128_load(q.add(8));
                        [c0, c1, v128_and(v2, m63), v128_or(t, top(v2, 2))]
                    } else {
                        let (l0, l1, hb) = (v128_load(q), v128_load(q.add(4)), v128_load(q.add(8)));
                        [
                            v128_or(v128_and(l0, m15), v128_and(u16x8_shl(hb, 4), m48)),
                            v128_or(v128_and(l1, m15), v128_and(u16x8_shl(hb, 2), m48)),
                            v128_or(v128_and(u16x8_shr(l0, 4), m15), v128_and(hb, m48)),
                            v128_or(v128_and(u16x8_shr(l1, 4), m15), v128_and(u16x8_shr(hb, 2), m48)),
                        ]
                    }
                };
                let word = |t: usize, k: usize, j: usize| v128_load32_splat(a0[t].add(elem(k, j)) as *const u32);
                if PAIRS {
                    for kk in 0..core::hint::black_box(2usize) {
                        let mut p = [[i16x8_splat(0); 4]; NY];
                        for k in [2 * kk, 2 * kk + 1] {
                            let u = codes(k);
                            for (t, pt) in p.iter_mut().enumerate() {
                                for j in 0..4 {
                                    pt[j] = i16x8_add(pt[j], rdot16(u[j], word(t, k, j)));
                                }
                            }
                        }
                        for t in 0..NY {
                            for j in 0..4 {
                                isum[t] = i32x4_add(isum[t], i32x4_dot_i16x8(p[t][j], scale[j]));
                            }
                        }
                    }
                } else {
                    for k in 0..core::hint::black_box(4usize) {
                        let u = codes(k);
                        for (t, it) in isum.iter_mut().enumerate() {
                            for j in 0..4 {
                                *it = i32x4_add(*it, i32x4_dot_i16x8(rdot16(u[j], word(t, k, j)), scale[j]));
                            }
                        }
                    }
                }
            }
            let d = f16_lanes(u32x4_load_extend_u16x4(x.add(64) as *const u16));
            for t in 0..NY {
                let dall = f32x4_mul(d, v128_load32_splat(acts[t].d.as_ptr().add(8 * b) as *const u32));
                acc[t] = fold_block(acc[t], isum[t], dall, summs[t], f32x4_mul(dall, f32x4_splat(32.0)));
            }
        }
        acc
    }

    /// `out(i/16, u)` for the 16 values `u` of elements `i..i+16`. Byte lanes are shifted as u16
    /// lanes; the masks drop the bits that cross a byte.
    #[inline(always)]
    unsafe fn decode<const X: bool>(x: *const u8, mut out: impl FnMut(usize, v128)) {
        let (m15, m48, m63, m192) = (u8x16_splat(15), u8x16_splat(0x30), u8x16_splat(63), u8x16_splat(0xc0));
        if X {
            for c in 0..4 {
                let v: [v128; 3] = core::array::from_fn(|m| v128_load(x.add(48 * c + 16 * m) as *const v128));
                let top = |v: v128, shift: u32| u16x8_shr(v128_and(v, m192), shift);
                for (m, &vm) in v.iter().enumerate() {
                    out(4 * c + m, v128_and(vm, m63));
                }
                out(4 * c + 3, v128_or(v128_or(top(v[0], 6), top(v[1], 4)), top(v[2], 2)));
            }
            return;
        }
        for n in 0..2 {
            for lc in 0..2 {
                let ql1 = v128_load(x.add(64 * n + 16 * lc) as *const v128);
                let ql2 = v128_load(x.add(64 * n + 32 + 16 * lc) as *const v128);
                let qh = v128_load(x.add(128 + 32 * n + 16 * lc) as *const v128);
                let o = 8 * n + lc;
                out(o, v128_or(v128_and(ql1, m15), v128_and(u16x8_shl(qh, 4), m48)));
                out(o + 2, v128_or(v128_and(ql2, m15), v128_and(u16x8_shl(qh, 2), m48)));
                out(o + 4, v128_or(v128_and(u16x8_shr(ql1, 4), m15), v128_and(qh, m48)));
                out(o + 6, v128_or(v128_and(u16x8_shr(ql2, 4), m15), v128_and(u16x8_shr(qh, 2), m48)));
            }
        }
    }

    /// One Q6_K block → Q6_KX (`super::expand_block`'s bytes): Q6_K's codes decoded, vector
    /// `4c + 3`'s two-bit pieces moved into the top bits of vectors `4c .. 4c + 3`.
    ///
    /// # Safety
    /// Requires simd128.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn expand(src: &[u8; BB], dst: &mut [u8; BB]) {
        let mut u = [u8x16_splat(0); 16];
        decode::<false>(src.as_ptr(), |g, v| u[g] = v);
        let m192 = u8x16_splat(0xc0);
        let d = dst.as_mut_ptr();
        for c in 0..4 {
            let top = u[4 * c + 3];
            let pieces = [u16x8_shl(top, 6), u16x8_shl(top, 4), u16x8_shl(top, 2)];
            for (m, piece) in pieces.into_iter().enumerate() {
                v128_store(d.add(48 * c + 16 * m) as *mut v128, v128_or(u[4 * c + m], v128_and(piece, m192)));
            }
        }
        dst[192..].copy_from_slice(&src[192..]);
    }

    /// Row → GEMM form: the block decoded to bytes `u = q + 32` as for the dot product, then
    /// `(u − 32)·sc_g` per group.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row<const X: bool>(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, false);
        let off = i8x16_splat(32);
        for b in 0..nb {
            // SAFETY: block b is row[210b..210b+210]; its weights are q[256b..256b+256].
            let x = row.as_ptr().add(BB * b);
            let q = out.q.as_mut_ptr().add(QK_K * b);
            decode::<X>(x, |g, u| {
                let sc = i16x8_splat(*x.add(192 + g) as i8 as i16);
                store_scaled16(q.add(16 * g), i8x16_sub(u, off), sc)
            });
            out.d[b] = f16_at(core::slice::from_raw_parts(x, BB), 208);
        }
    }

    /// Row → int8 GEMM form: the block decoded to bytes `u = q + 32` as for the dot product; the
    /// signed scales to `sc`, `mn = −32·sc`, `m = d`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `Decoded8::check`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row<const X: bool>(row: &[u8], out: &mut Decoded8) {
        let ty = if X { crate::quant::GgmlType::Q6_KX } else { crate::quant::GgmlType::Q6_K };
        let nb = out.check(ty, row);
        let mut v = [u8x16_splat(0); 16];
        let off = i16x8_splat(-32);
        for b in 0..nb {
            // SAFETY: block b is row[210b..210b+210]; its outputs are u[256b..], sc/mn[16b..16b+16].
            let x = row.as_ptr().add(BB * b);
            let sc = v128_load(x.add(192) as *const v128);
            store_i16_and_scaled(out.sc.as_mut_ptr().add(16 * b), sc, out.mn.as_mut_ptr().add(16 * b), off);
            decode::<X>(x, |g, u| v[g] = u);
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * b));
            let d = f16_at(core::slice::from_raw_parts(x, BB), 208);
            out.d[b] = d;
            out.m[b] = d;
        }
    }
}
