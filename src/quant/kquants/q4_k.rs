//! Q4_K (144 bytes, 4.5 bits per weight) and Q5_K (176 bytes, 5.5 bits per weight).
//!
//! Q4_K:
//! | offset | bytes | field                                                       |
//! |--------|-------|-------------------------------------------------------------|
//! | 0      | 2     | `d` (fp16)                                                  |
//! | 2      | 2     | `dmin` (fp16)                                               |
//! | 4      | 12    | 8 six-bit scales `sc_k` and mins `mn_k` ([`k4_scales_mins`])|
//! | 16     | 128   | `qs`: 4-bit weights                                         |
//!
//! Q5_K: the same with `qh[32]` at 16 and `qs[128]` at 48.
//!
//! Chunk c (0..3) = elements `64c..64c+64` uses `qs[32c..32c+32]`: element `64c + l` (l < 32) is the
//! low nibble of `qs[32c + l]` (sub-block 2c), element `64c + 32 + l` the high nibble (sub-block
//! 2c+1). Q5_K adds 16 when bit 2c (low nibble) / 2c+1 (high nibble) of `qh[l]` is set.
//! `y = d * sc_k * q - dmin * mn_k` for sub-block k.
//!
//! Dot with Q8_K: `Σ_blk d_a * (d * Σ_k sc_k * Σ q·a  -  dmin * Σ_k mn_k * (bsum_2k + bsum_2k+1))`.

use super::{dispatch_decode, dispatch_decode8, dispatch_vec_dot, dispatch_vec_dot4, k4_scales_mins, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

pub(super) const KERNELS_Q4K: QuantKernels = kernels::<K4<false>>(GgmlType::Q4_K, vec_dot_q4k, decode_q4k, sanitize);
pub(super) const KERNELS_Q5K: QuantKernels = kernels::<K4<true>>(GgmlType::Q5_K, vec_dot_q5k, decode_q5k, sanitize);

/// Int8 GEMM forms: the 4-bit / 5-bit codes as they are, the mins as mins; one scale per 32
/// elements (so the dot-add form takes quad order over groups of 32).
pub(super) const KERNELS8_Q4K: Kernels8 =
    Kernels8 { scales32: true, ..kernels8::<K4<false>, 0>(GgmlType::Q4_K, 15, [false, true], decode8_q4k) };
pub(super) const KERNELS8_Q5K: Kernels8 =
    Kernels8 { scales32: true, ..kernels8::<K4<true>, 0>(GgmlType::Q5_K, 31, [false, true], decode8_q5k) };

/// Q4_K (`Q5 = false`) / Q5_K (`Q5 = true`).
struct K4<const Q5: bool>;

impl<const Q5: bool> KBlock for K4<Q5> {
    const BB: usize = if Q5 { 176 } else { 144 };
    const HAS_MIN: bool = true;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 0), f16_at(blk, 2))
    }

    /// Group g belongs to sub-block g/2.
    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        let (sc, mn) = k4_scales_mins(&blk[4..16]);
        (
            core::array::from_fn(|g| sc[g / 2] as i32),
            core::array::from_fn(|g| mn[g / 2] as i32),
        )
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        let qs = &blk[if Q5 { 48 } else { 16 }..];
        for (c, qc) in q.chunks_exact_mut(64).enumerate() {
            let src = &qs[32 * c..][..32];
            let (lo, hi) = qc.split_at_mut(32);
            for (l, ((ql, qh), &v)) in lo.iter_mut().zip(hi).zip(src).enumerate() {
                let (mut a, mut b) = (v & 15, v >> 4);
                if Q5 {
                    let h = blk[16 + l] >> (2 * c);
                    a |= (h & 1) << 4;
                    b |= (h & 2) << 3;
                }
                (*ql, *qh) = (a as i8, b as i8);
            }
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 0);
    sanitize_f16(block, 2);
}

dispatch_vec_dot!(vec_dot_q4k, simd::vec_dot_q4k, super::vec_dot_ref::<K4<false>>);
dispatch_vec_dot!(vec_dot_q5k, simd::vec_dot_q5k, super::vec_dot_ref::<K4<true>>);

/// Q4_K's four rows interleaved ([`crate::quant::r4`]), 576 bytes per block, in the order the
/// kernel reads them:
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 8     | `d` of row r at `2r`                                           |
/// | 8      | 8     | `dmin` of row r at `2r`                                        |
/// | 16     | 48    | packed scales word k (bytes 4k..4k+4) of row r at `16k + 4r`   |
/// | 64     | 512   | `qs` word k of row r at `16k + 4r`                             |
pub(super) const R4: R4Kernels = R4Kernels {
    ty: GgmlType::Q4_K,
    fields: &[
        Field { off: 0, len: 2, gran: 2 },
        Field { off: 2, len: 2, gran: 2 },
        Field { off: 4, len: 12, gran: 4 },
        Field { off: 16, len: 128, gran: 4 },
    ],
    vec_dot4,
    vec_dot4_n,
    matvec: crate::r4_matvec!(vec_dot4, GgmlType::Q4_K),
    alt: None,
    wide_only: false,
    dot_add: false,
};

/// Q5_K's four rows interleaved, 704 bytes per block: Q4_K's R4 block with the rows' `qh` words
/// between the scales and the `qs` words (the kernel reads word k of `qh` with word k of each
/// chunk's `qs`: the same 4 elements' fifth bits).
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 8     | `d` of row r at `2r`                                           |
/// | 8      | 8     | `dmin` of row r at `2r`                                        |
/// | 16     | 48    | packed scales word k of row r at `16k + 4r`                    |
/// | 64     | 128   | `qh` word k (bytes 4k..4k+4) of row r at `16k + 4r`            |
/// | 192    | 512   | `qs` word k of row r at `16k + 4r`                             |
pub(super) const R4_Q5K: R4Kernels = R4Kernels {
    ty: GgmlType::Q5_K,
    fields: &[
        Field { off: 0, len: 2, gran: 2 },
        Field { off: 2, len: 2, gran: 2 },
        Field { off: 4, len: 12, gran: 4 },
        Field { off: 16, len: 32, gran: 4 },
        Field { off: 48, len: 128, gran: 4 },
    ],
    vec_dot4: vec_dot4_q5k,
    vec_dot4_n: vec_dot4_n_q5k,
    matvec: crate::r4_matvec!(vec_dot4_q5k, GgmlType::Q5_K),
    alt: None,
    wide_only: true,
    dot_add: false,
};

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4, GgmlType::Q4_K);
dispatch_vec_dot4!(vec_dot4_q5k, vec_dot4_n_q5k, simd::vec_dot4_q5k, GgmlType::Q5_K);
dispatch_decode!(decode_q4k, simd::decode_row_q4k, K4<false>);
dispatch_decode!(decode_q5k, simd::decode_row_q5k, K4<true>);
dispatch_decode8!(decode8_q4k, simd::decode8_row_q4k, K4<false>, 0);
dispatch_decode8!(decode8_q5k, simd::decode8_row_q5k, K4<true>, 0);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Q4_K: one loop step = 16 bytes of `qs` (two u16x8 vectors) of chunk c: 16 low nibbles
    //! (sub-block 2c) and 16 high nibbles (sub-block 2c+1), each multiplied with its activations in
    //! i16 and scaled by one `i32x4_dot_i16x8`. The steps run over c = 0..3, first for bytes
    //! 0..16 and then for bytes 16..32 of each chunk.
    //!
    //! Q5_K: each block is first decoded to 256 bytes (0..31) on the stack with 16-lane byte
    //! operations, then multiplied by [`dot_bytes_g32`].
    use super::super::simd::{block_ptrs, check_decode, f16_pair_splats, fold_block};
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::super::simd::dot_bytes_g32;
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::super::simd::{ld_u8x8, mul16};
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::rdot16;
    use super::super::{check_lens, Q8, QK_K};
    use crate::quant::f16_at;
    use crate::quant::gemm::Decoded;
    use crate::quant::gemm8::{simd::store_pair_order, Decoded8};
    use crate::quant::simd::store_scaled16;
    use crate::quant::simd::hsum_f32;
    use core::arch::wasm32::*;

    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot_q4k(row: &[u8], act: Q8<'_>) -> f32 {
        const BB: usize = 144;
        let nb = check_lens(row, BB, &act);
        let mut acc = f32x4_splat(0.0);
        // Word k = sc_k | sc_k << 16, broadcast by v128_load32_splat.
        let mut sbuf = [i32x4_splat(0); 2];
        for b in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks in `row` and nb*256 activations,
            // nb*8 scales and nb*16 group sums in `act`; every load below stays inside them
            // (the scale vector is read from bytes 4..20 of the block).
            let (x, a, bs, da) = block_ptrs(row, BB, &act, b);
            let scm = unpack_scales_mins(x.add(4));
            store_scales(sbuf.as_mut_ptr(), scm);

            #[cfg(not(target_feature = "relaxed-simd"))]
            let isum = {
                let mut isum = i32x4_splat(0);
                // An opaque trip count keeps this a loop (see the module docs).
                let steps = core::hint::black_box(4u32);
                for half in 0..2 {
                    let (mut q, mut a) = (x.add(16 + 16 * half), a.add(16 * half));
                    let mut s = sbuf.as_ptr() as *const u32;
                    for _ in 0..steps {
                        let (v0, v1) = (ld_u8x8(q), ld_u8x8(q.add(8)));
                        let m15 = u16x8_splat(15);
                        let plo = mul16(v128_and(v0, m15), v128_and(v1, m15), a);
                        let phi = mul16(u16x8_shr(v0, 4), u16x8_shr(v1, 4), a.add(32));
                        let s0 = i32x4_dot_i16x8(plo, v128_load32_splat(s));
                        let s1 = i32x4_dot_i16x8(phi, v128_load32_splat(s.add(1)));
                        isum = i32x4_add(isum, i32x4_add(s0, s1));
                        q = q.add(32);
                        a = a.add(64);
                        s = s.add(2);
                    }
                }
                isum
            };
            // Relaxed SIMD: one step = chunk c (32 bytes of `qs`, 64 weights); the nibbles are
            // 7-bit, so `i16x8.relaxed_dot_i8x16_i7x16_s` takes 16 of them with 16 activation
            // bytes, the two halves of a sub-block add up in i16 (four products per lane,
            // ≤ 4·15·127) and one `i32x4.dot_i16x8_s` per sub-block applies its scale.
            #[cfg(target_feature = "relaxed-simd")]
            let isum = {
                let mut isum = i32x4_splat(0);
                let (mut q, mut a, mut s) = (x.add(16), a, sbuf.as_ptr() as *const u32);
                for _ in 0..core::hint::black_box(4u32) {
                    let m15 = u8x16_splat(15);
                    let (v0, v1) = (v128_load(q as *const v128), v128_load(q.add(16) as *const v128));
                    let ld = |k: usize| v128_load(a.add(16 * k) as *const v128);
                    let plo = i16x8_add(rdot16(v128_and(v0, m15), ld(0)), rdot16(v128_and(v1, m15), ld(1)));
                    let phi = i16x8_add(
                        rdot16(v128_and(u16x8_shr(v0, 4), m15), ld(2)),
                        rdot16(v128_and(u16x8_shr(v1, 4), m15), ld(3)),
                    );
                    let s0 = i32x4_dot_i16x8(plo, v128_load32_splat(s));
                    let s1 = i32x4_dot_i16x8(phi, v128_load32_splat(s.add(1)));
                    isum = i32x4_add(isum, i32x4_add(s0, s1));
                    q = q.add(32);
                    a = a.add(64);
                    s = s.add(2);
                }
                isum
            };
            let summs = mins_dot(scm, bs);
            let (dall, dmin) = f16_pair_splats(x, da);
            acc = fold_block(acc, isum, dall, summs, dmin);
        }
        hsum_f32(acc)
    }

    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot_q5k(row: &[u8], act: Q8<'_>) -> f32 {
        const BB: usize = 176;
        let nb = check_lens(row, BB, &act);
        let mut acc = f32x4_splat(0.0);
        let mut sbuf = [i32x4_splat(0); 2];
        #[cfg(not(target_feature = "relaxed-simd"))]
        let mut wbuf = [i32x4_splat(0); 16];
        for b in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks in `row` and nb*256 activations,
            // nb*8 scales and nb*16 group sums in `act`; every load below stays inside them.
            let (x, a, bs, da) = block_ptrs(row, BB, &act, b);
            let scm = unpack_scales_mins(x.add(4));
            store_scales(sbuf.as_mut_ptr(), scm);
            #[cfg(not(target_feature = "relaxed-simd"))]
            let isum = {
                let w = wbuf.as_mut_ptr();
                decode_q5(x, |i, v| v128_store(w.add(i), v));
                dot_bytes_g32(wbuf.as_ptr() as *const u8, a, sbuf.as_ptr() as *const u32)
            };
            // Relaxed SIMD: as Q4_K's loop, with the fifth bit of chunk c's low / high nibbles
            // (bits 2c, 2c+1 of `qh`; `qh` moves right by 2 per step) or-ed in at bit 4.
            #[cfg(target_feature = "relaxed-simd")]
            let isum = {
                let mut isum = i32x4_splat(0);
                let (mut q, mut a, mut s) = (x.add(48), a, sbuf.as_ptr() as *const u32);
                let mut h = [v128_load(x.add(16) as *const v128), v128_load(x.add(32) as *const v128)];
                for _ in 0..core::hint::black_box(4u32) {
                    let (m15, m16) = (u8x16_splat(15), u8x16_splat(16));
                    let (v0, v1) = (v128_load(q as *const v128), v128_load(q.add(16) as *const v128));
                    let ld = |k: usize| v128_load(a.add(16 * k) as *const v128);
                    let lo = |v: v128, h: v128| v128_or(v128_and(v, m15), v128_and(u16x8_shl(h, 4), m16));
                    let hi = |v: v128, h: v128| v128_or(v128_and(u16x8_shr(v, 4), m15), v128_and(u16x8_shl(h, 3), m16));
                    let plo = i16x8_add(rdot16(lo(v0, h[0]), ld(0)), rdot16(lo(v1, h[1]), ld(1)));
                    let phi = i16x8_add(rdot16(hi(v0, h[0]), ld(2)), rdot16(hi(v1, h[1]), ld(3)));
                    let s0 = i32x4_dot_i16x8(plo, v128_load32_splat(s));
                    let s1 = i32x4_dot_i16x8(phi, v128_load32_splat(s.add(1)));
                    isum = i32x4_add(isum, i32x4_add(s0, s1));
                    h = [u16x8_shr(h[0], 2), u16x8_shr(h[1], 2)];
                    q = q.add(32);
                    a = a.add(64);
                    s = s.add(2);
                }
                isum
            };
            let summs = mins_dot(scm, bs);
            let (dall, dmin) = f16_pair_splats(x, da);
            acc = fold_block(acc, isum, dall, summs, dmin);
        }
        hsum_f32(acc)
    }

    /// Four interleaved Q4_K rows (the R4 layout above) · `NY` activation rows. `qs` vector
    /// 8c + i holds bytes 4i..4i+4 of chunk c of each row: its low nibbles are elements
    /// 64c + 4i .. +4 (sub-block 2c), its high nibbles the same elements of sub-block 2c + 1, each
    /// against the token's activation word broadcast in one relaxed dot (i16 lanes 2r, 2r+1 belong
    /// to row r). A sub-block's eight products add up in i16 (8 · 2 · 15 · 128 < 2¹⁵), then one
    /// `i32x4.dot` with its four rows' scales puts row r's sum in lane r. The packed scales unpack
    /// lane-wise for all four rows at once (as `k4_scales_mins`, rows-major lanes 4r + k). Codes
    /// and scales are unpacked once for all `NY` tokens; each token's sums do not depend on `NY`.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    ///
    /// Inlined into its decode driver (see `r4_matvec!`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub(super) unsafe fn vec_dot4<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        dot4::<NY, false>(rows4, acts, acc0)
    }

    /// Four interleaved Q5_K rows (its R4 layout above) · `NY` activation rows: as Q4_K's
    /// [`vec_dot4`], with each `qs` vector's fifth bits from the `qh` vector of the same word
    /// (bits 2c, 2c + 1 for chunk c: a copy of the block's `qh` vectors moves right by 2 per
    /// chunk, then bit 0 / bit 1 of each byte goes to bit 4 and is or-ed into the low / high
    /// nibbles; a shift by the loop's `2c` instead ran slower in Chromium, 16.0 against 16.5 GB/s). Codes reach 31, so a sub-block's products add up in i16 in
    /// two halves of four (4 · 2 · 31 · 128 < 2¹⁵), each scaled by its own `i32x4.dot`.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    ///
    /// Inlined into its decode driver (see `r4_matvec!`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub(super) unsafe fn vec_dot4_q5k<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        dot4::<NY, true>(rows4, acts, acc0)
    }

    /// Q4_K's (`Q5 = false`) or Q5_K's (`Q5 = true`) R4 kernel.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn dot4<const NY: usize, const Q5: bool>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        use super::super::simd::{f16_lanes, r4_dup_masks, r4_store_scales};
        use crate::quant::GgmlType;
        // Block bytes, where the `qs` words start.
        let (ty, bb, qs_at) = if Q5 { (GgmlType::Q5_K, 176, 192) } else { (GgmlType::Q4_K, 144, 64) };
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, ty, &a))[0];
        let m15 = u8x16_splat(15);
        // Byte pairs (k, k) of rows-major lanes 4r + k: sub-blocks (4q, 4q + 1) and (4q + 2, 4q + 3).
        let dup = r4_dup_masks();
        let mut scb = [0u8; 64];
        let scb = scb.as_mut_ptr();
        // Q5_K: the block's `qh` vectors, shifted right by 2 per chunk.
        let mut hbuf = [i32x4_splat(0); 8];
        let mut acc = acc0;
        for b in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·bb bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`; `scb` holds 8
            // sub-blocks × 8.
            let x = rows4.as_ptr().add(4 * bb * b);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * b));
            // Packed bytes s_r[k], s_r[4 + k], s_r[8 + k] in lanes 4r + k of three vectors.
            let s = [0, 1, 2].map(|k| v128_load(x.add(16 + 16 * k) as *const v128));
            let (m63, top) = (u8x16_splat(63), u8x16_splat(0x30));
            let sc = [
                v128_and(s[0], m63),
                v128_or(v128_and(s[2], m15), v128_and(u16x8_shr(s[0], 2), top)),
            ];
            let mn = [
                v128_and(s[1], m63),
                v128_or(v128_and(u16x8_shr(s[2], 4), m15), v128_and(u16x8_shr(s[1], 2), top)),
            ];
            r4_store_scales(sc, scb as *mut i8, dup);
            // Mins: lane r = Σ_k mn_r[k] · (bsum[2k] + bsum[2k + 1]); i16 lanes (row, k) against
            // the pair sums of sub-blocks 4q..4q+4 twice, then the two halves of each row added.
            let summs: [v128; NY] = core::array::from_fn(|t| {
                let bs = acts[t].bsums.as_ptr().add(16 * b) as *const v128;
                let (b0, b1) = (v128_load(bs), v128_load(bs.add(1)));
                let pair = i16x8_add(
                    i16x8_shuffle::<0, 2, 4, 6, 8, 10, 12, 14>(b0, b1),
                    i16x8_shuffle::<1, 3, 5, 7, 9, 11, 13, 15>(b0, b1),
                );
                let mut m01 = i32x4_splat(0);
                let mut m23 = i32x4_splat(0);
                for (q, &v) in mn.iter().enumerate() {
                    let b4 = if q == 0 { i64x2_shuffle::<0, 0>(pair, pair) } else { i64x2_shuffle::<1, 1>(pair, pair) };
                    m01 = i32x4_add(m01, i32x4_dot_i16x8(u16x8_extend_low_u8x16(v), b4));
                    m23 = i32x4_add(m23, i32x4_dot_i16x8(u16x8_extend_high_u8x16(v), b4));
                }
                i32x4_add(i32x4_shuffle::<0, 2, 4, 6>(m01, m23), i32x4_shuffle::<1, 3, 5, 7>(m01, m23))
            });
            let mut isum = [i32x4_splat(0); NY];
            if Q5 {
                core::ptr::copy_nonoverlapping(x.add(64), hbuf.as_mut_ptr() as *mut u8, 128);
            }
            // An opaque trip count keeps the chunk loop a loop (V8 spills a fully unrolled block).
            for c in 0..core::hint::black_box(4usize) {
                let q = x.add(qs_at + 128 * c) as *const v128;
                let s0 = u16x8_load_extend_u8x8(scb.add(16 * c));
                let s1 = u16x8_load_extend_u8x8(scb.add(16 * c + 8));
                // Q4_K: the chunk's 8 words in one run; Q5_K: two runs of 4 (i16 range).
                let (runs, len) = if Q5 { (2, 4) } else { (1, 8) };
                for run in 0..runs {
                    let mut p = [[i16x8_splat(0); 2]; NY];
                    for i in run * len..(run + 1) * len {
                        let v = v128_load(q.add(i));
                        let (mut lo, mut hi) = (v128_and(v, m15), v128_and(u16x8_shr(v, 4), m15));
                        if Q5 {
                            let m16 = u8x16_splat(16);
                            // This chunk's bits at bits 0 and 1: shifted in place, 2 per chunk.
                            let hp = hbuf.as_mut_ptr().add(i);
                            let h = v128_load(hp);
                            v128_store(hp, u16x8_shr(h, 2));
                            lo = v128_or(lo, v128_and(i16x8_shl(h, 4), m16));
                            hi = v128_or(hi, v128_and(i16x8_shl(h, 3), m16));
                        }
                        for t in 0..NY {
                            let a = a0[t].add(64 * c + 4 * i);
                            p[t][0] = i16x8_add(p[t][0], rdot16(lo, v128_load32_splat(a as *const u32)));
                            p[t][1] = i16x8_add(p[t][1], rdot16(hi, v128_load32_splat(a.add(32) as *const u32)));
                        }
                    }
                    for t in 0..NY {
                        isum[t] = i32x4_add(isum[t], i32x4_add(i32x4_dot_i16x8(p[t][0], s0), i32x4_dot_i16x8(p[t][1], s1)));
                    }
                }
            }
            let d = f16_lanes(u32x4_load_extend_u16x4(x as *const u16));
            let dmin = f16_lanes(u32x4_load_extend_u16x4(x.add(8) as *const u16));
            for t in 0..NY {
                let da = v128_load32_splat(acts[t].d.as_ptr().add(8 * b) as *const u32);
                acc[t] = fold_block(acc[t], isum[t], f32x4_mul(d, da), summs[t], f32x4_mul(dmin, da));
            }
        }
        acc
    }

    /// Stores `sc_k | sc_k << 16` (k = 0..7, from bytes 0..7 of `scm`) as 8 i32 words.
    #[inline(always)]
    unsafe fn store_scales(sp: *mut v128, scm: v128) {
        let sc = u16x8_extend_low_u8x16(scm);
        v128_store(sp, i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(sc, sc));
        v128_store(sp.add(1), i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(sc, sc));
    }

    /// `out(i/16, v)` for the 16 Q5_K values `v` of elements `i..i+16`. Byte lanes are shifted as
    /// u16 lanes; the masks drop the bits that cross a byte.
    #[inline(always)]
    unsafe fn decode_q5(x: *const u8, mut out: impl FnMut(usize, v128)) {
        let qh = [v128_load(x.add(16) as *const v128), v128_load(x.add(32) as *const v128)];
        let (m15, m16) = (u8x16_splat(15), u8x16_splat(16));
        // Bit `from` of every byte moved to bit 4.
        let bit4 = |h: v128, from: u32| {
            let s = if from < 4 {
                u16x8_shl(h, 4 - from)
            } else if from > 4 {
                u16x8_shr(h, from - 4)
            } else {
                h
            };
            v128_and(s, m16)
        };
        for c in 0..4 {
            for (half, &h) in qh.iter().enumerate() {
                let q = v128_load(x.add(48 + 32 * c + 16 * half) as *const v128);
                let lo = v128_or(v128_and(q, m15), bit4(h, 2 * c as u32));
                let hi = v128_or(v128_and(u16x8_shr(q, 4), m15), bit4(h, 2 * c as u32 + 1));
                out(4 * c + half, lo);
                out(4 * c + 2 + half, hi);
            }
        }
    }

    /// `Σ_k mn_k (bsum_2k + bsum_2k+1)`, mins in bytes 8..15 of `scm`: each min meets its two
    /// group sums in one i32 lane.
    #[inline(always)]
    unsafe fn mins_dot(scm: v128, bs: *const i16) -> v128 {
        let mn = u16x8_extend_high_u8x16(scm);
        i32x4_add(
            i32x4_dot_i16x8(
                i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(mn, mn),
                v128_load(bs as *const v128),
            ),
            i32x4_dot_i16x8(
                i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(mn, mn),
                v128_load(bs.add(8) as *const v128),
            ),
        )
    }

    /// Bytes: lanes 0..7 = sc_0..7, lanes 8..15 = mn_0..7, from the 12 packed bytes at `s`.
    #[inline(always)]
    unsafe fn unpack_scales_mins(s: *const u8) -> v128 {
        let s = v128_load(s as *const v128); // lanes 0..11 = the 12 scale bytes
        let s63 = v128_and(s, u8x16_splat(63));
        let s15 = v128_and(s, u8x16_splat(15));
        let s4 = u8x16_shr(s, 4);
        let top = v128_and(u16x8_shr(s, 2), u8x16_splat(0x30)); // (s >> 6) << 4 per byte
                                                                // sc_0..3 = s[0..4] & 63, sc_4..7 = s[8..12] & 15, mn_0..3 = s[4..8] & 63, mn_4..7 = s[8..12] >> 4
        let t = i8x16_shuffle::<0, 1, 2, 3, 24, 25, 26, 27, 4, 5, 6, 7, 0, 0, 0, 0>(s63, s15);
        let t = i8x16_shuffle::<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 24, 25, 26, 27>(t, s4);
        // sc_4..7 |= (s[0..4] >> 6) << 4, mn_4..7 |= (s[4..8] >> 6) << 4
        let z = i8x16_splat(0);
        let u = i8x16_shuffle::<16, 16, 16, 16, 0, 1, 2, 3, 16, 16, 16, 16, 4, 5, 6, 7>(top, z);
        v128_or(t, u)
    }

    /// The mins of Q4_K / Q5_K (bytes 8..15 of `scm`) per 16-element group into `mn[0..16]`,
    /// the scales (bytes 0..7) into `sc`; `d`, `m = −dmin` of block `b`.
    ///
    /// # Safety
    /// `x` is a block of at least 20 bytes, `b` < the number of blocks `out` is sized for.
    #[inline(always)]
    unsafe fn decode_head(x: *const u8, out: &mut Decoded, b: usize, sc: &mut [u8; 16]) {
        let scm = unpack_scales_mins(x.add(4));
        v128_store(sc.as_mut_ptr() as *mut v128, scm);
        let mn = i8x16_shuffle::<8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15>(scm, scm);
        let mp = out.mn.as_mut_ptr().add(16 * b) as *mut v128;
        v128_store(mp, u16x8_extend_low_u8x16(mn));
        v128_store(mp.add(1), u16x8_extend_high_u8x16(mn));
        let blk = core::slice::from_raw_parts(x, 4);
        out.d[b] = f16_at(blk, 0);
        out.m[b] = -f16_at(blk, 2);
    }

    /// Q4_K row → GEMM form: chunk c's 32 bytes give 32 low nibbles (sub-block 2c) and 32 high
    /// nibbles (sub-block 2c+1), each times its sub-block scale.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row_q4k(row: &[u8], out: &mut Decoded) {
        const BB: usize = 144;
        let nb = check_decode(row, BB, out, true);
        let m15 = u8x16_splat(15);
        let mut sc = [0u8; 16];
        for b in 0..nb {
            // SAFETY: block b is row[144b..144b+144]; its outputs are q[256b..], mn[16b..].
            let x = row.as_ptr().add(BB * b);
            decode_head(x, out, b, &mut sc);
            let q = out.q.as_mut_ptr().add(QK_K * b);
            for c in 0..4 {
                let (lo, hi) = (i16x8_splat(sc[2 * c] as i16), i16x8_splat(sc[2 * c + 1] as i16));
                for half in 0..2 {
                    let v = v128_load(x.add(16 + 32 * c + 16 * half) as *const v128);
                    store_scaled16(q.add(64 * c + 16 * half), v128_and(v, m15), lo);
                    store_scaled16(q.add(64 * c + 32 + 16 * half), v128_and(u16x8_shr(v, 4), m15), hi);
                }
            }
        }
    }

    /// Q5_K row → GEMM form: the block decoded to bytes as for the dot product, then times the
    /// sub-block scales.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row_q5k(row: &[u8], out: &mut Decoded) {
        const BB: usize = 176;
        let nb = check_decode(row, BB, out, true);
        let mut sc = [0u8; 16];
        for b in 0..nb {
            // SAFETY: block b is row[176b..176b+176]; its outputs are q[256b..], mn[16b..].
            let x = row.as_ptr().add(BB * b);
            decode_head(x, out, b, &mut sc);
            let q = out.q.as_mut_ptr().add(QK_K * b);
            decode_q5(x, |g, v| store_scaled16(q.add(16 * g), v, i16x8_splat(sc[g / 2] as i16)));
        }
    }

    /// The int8 form's per-block head: scales and mins per 16 elements (sub-block k covers groups
    /// 2k, 2k+1), `d`, `m = −dmin`.
    ///
    /// # Safety
    /// `x` is a block of at least 20 bytes, `b` < the number of blocks `out` is sized for.
    #[inline(always)]
    unsafe fn decode8_head(x: *const u8, out: &mut Decoded8, b: usize) {
        let scm = unpack_scales_mins(x.add(4));
        let sc = i8x16_shuffle::<0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7>(scm, scm);
        let mn = i8x16_shuffle::<8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15>(scm, scm);
        let sp = out.sc.as_mut_ptr().add(16 * b) as *mut v128;
        v128_store(sp, u16x8_extend_low_u8x16(sc));
        v128_store(sp.add(1), u16x8_extend_high_u8x16(sc));
        let mp = out.mn.as_mut_ptr().add(16 * b) as *mut v128;
        v128_store(mp, u16x8_extend_low_u8x16(mn));
        v128_store(mp.add(1), u16x8_extend_high_u8x16(mn));
        let blk = core::slice::from_raw_parts(x, 4);
        out.d[b] = f16_at(blk, 0);
        out.m[b] = -f16_at(blk, 2);
    }

    /// Q4_K row → int8 GEMM form: chunk c's 32 bytes give the low nibbles (groups 4c, 4c+1) and
    /// the high nibbles (groups 4c+2, 4c+3).
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `Decoded8::check`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row_q4k(row: &[u8], out: &mut Decoded8) {
        const BB: usize = 144;
        let nb = out.check(crate::quant::GgmlType::Q4_K, row);
        let m15 = u8x16_splat(15);
        let mut v = [u8x16_splat(0); 16];
        for b in 0..nb {
            // SAFETY: block b is row[144b..144b+144]; its outputs are u[256b..], sc/mn[16b..].
            let x = row.as_ptr().add(BB * b);
            decode8_head(x, out, b);
            for c in 0..4 {
                for half in 0..2 {
                    let q = v128_load(x.add(16 + 32 * c + 16 * half) as *const v128);
                    v[4 * c + half] = v128_and(q, m15);
                    v[4 * c + 2 + half] = v128_and(u16x8_shr(q, 4), m15);
                }
            }
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * b));
        }
    }

    /// Q5_K row → int8 GEMM form: the block decoded to bytes (0..31) as for the dot product.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `Decoded8::check`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row_q5k(row: &[u8], out: &mut Decoded8) {
        const BB: usize = 176;
        let nb = out.check(crate::quant::GgmlType::Q5_K, row);
        let mut v = [u8x16_splat(0); 16];
        for b in 0..nb {
            // SAFETY: block b is row[176b..176b+176]; its outputs are u[256b..], sc/mn[16b..].
            let x = row.as_ptr().add(BB * b);
            decode8_head(x, out, b);
            decode_q5(x, |g, u| v[g] = u);
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * b));
        }
    }
}
