//! Q3_K: 256 weights in 110 bytes, 3.4375 bits per weight.
//!
//! | offset | bytes | field                                                                |
//! |--------|-------|----------------------------------------------------------------------|
//! | 0      | 32    | `hmask`: high bit of each weight (bit 4n + j of byte 16h + l)        |
//! | 32     | 64    | `qs`: low 2 bits of each weight, four per byte                       |
//! | 96     | 12    | `scales`: 16 six-bit scales (low nibbles in bytes 0..8, top 2 bits in 8..12) |
//! | 108    | 2     | `d` (fp16)                                                           |
//!
//! Group g = 8n + 2j + h (n = half, j = shift, h = 0..1) holds elements `16g..16g+16`; element
//! `16g + l` is `q = ((qs[32n + 16h + l] >> 2j) & 3) - (hmask[16h + l] bit (4n + j) ? 0 : 4)`
//! (so q ∈ -4..3), and `y = d * sc_g * q` with
//! `sc_g = ((g < 8 ? scales[g] & 15 : scales[g-8] >> 4) | ((scales[8 + g%4] >> 2(g/4)) & 3) << 4) - 32`.
//!
//! Dot with Q8_K: `Σ_blk d_a * d * Σ_g sc_g * Σ_l q·a`. The SIMD kernel uses the unsigned
//! `u = q + 4 ∈ 0..7` and subtracts `4 * Σ_g sc_g * bsum_g` per block.

use super::{dispatch_decode, dispatch_decode8, dispatch_vec_dot, dispatch_vec_dot4, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

const BB: usize = 110;

pub(super) const KERNELS: QuantKernels = kernels::<Q3K>(GgmlType::Q3_K, vec_dot, decode, sanitize);

/// Int8 GEMM form: `u = q + 4 ∈ 0..7`, the offset through the min term.
pub(super) const KERNELS8: Kernels8 = kernels8::<Q3K, 4>(GgmlType::Q3_K, 7, [false, true], decode8);

pub(super) struct Q3K;

impl KBlock for Q3K {
    const BB: usize = BB;
    const HAS_MIN: bool = false;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 108), 0.0)
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        let s = &blk[96..108];
        let sc = core::array::from_fn(|g| {
            let lo = if g < 8 { s[g] & 15 } else { s[g - 8] >> 4 };
            let hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
            (lo | hi << 4) as i32 - 32
        });
        (sc, [0; 16])
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (g, qg) in q.chunks_exact_mut(16).enumerate() {
            let (n, j, h) = (g / 8, (g / 2) % 4, g % 2);
            let low = &blk[32 + 32 * n + 16 * h..][..16];
            let hmask = &blk[16 * h..][..16];
            let bit = 1u8 << (4 * n + j);
            for ((qi, &b), &m) in qg.iter_mut().zip(low).zip(hmask) {
                *qi = ((b >> (2 * j)) & 3) as i8 - if m & bit != 0 { 0 } else { 4 };
            }
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 108);
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<Q3K>);

/// Four rows interleaved ([`crate::quant::r4`]), 440 bytes per block:
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 48    | `scales` word k (bytes 4k..4k+4, k < 3) of row r at `16k + 4r` |
/// | 48     | 8     | `d` of row r at `2r`                                           |
/// | 56     | 128   | `hmask` word k of row r at `16k + 4r`                          |
/// | 184    | 256   | `qs` word k of row r at `16k + 4r`                             |
///
/// The scales and `d` come first because the kernel reads them first: a block read front to back
/// streams from memory faster (a 16384×12288 matrix, Node: 8.2–8.4 GB/s against 7.3 with the
/// fields in the plain order, where the kernel jumped from the scales at the end back to byte 0).
pub(super) const R4: R4Kernels = R4Kernels {
    ty: GgmlType::Q3_K,
    fields: &[
        Field { off: 96, len: 12, gran: 4 },
        Field { off: 108, len: 2, gran: 2 },
        Field { off: 0, len: 32, gran: 4 },
        Field { off: 32, len: 64, gran: 4 },
    ],
    vec_dot4,
    vec_dot4_n,
    matvec: crate::r4_matvec!(vec_dot4, GgmlType::Q3_K),
    alt: None,
    wide_only: false,
    dot_add: false,
};

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4, GgmlType::Q3_K);
dispatch_decode!(decode, simd::decode_row, Q3K);
dispatch_decode8!(decode8, simd::decode8_row, Q3K, 4);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) mod simd {
    //! Each block is first decoded to 256 bytes `u = q + 4 ∈ 0..7` on the stack (16 lanes per
    //! operation), then multiplied by `dot_bytes_g16`; the `-4` comes back as `4 Σ_g sc_g bsum_g`.
    //! With relaxed SIMD the codes stay in registers and go straight into the relaxed dot
    //! (`dot_3bit_relaxed`; the four-row kernel: `r4_3bit_isums`).
    use super::super::simd::{block_ptrs, check_decode, decode_3bit, f16_splat, fold_block, store_scale_pairs};
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::super::simd::dot_bytes_g16;
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::{dot_3bit_relaxed, f16_lanes, r4_3bit_isums, r4_dup_masks, r4_scale_sums_g16, r4_store_scales};
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
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lens(row, BB, &act);
        let mut acc = f32x4_splat(0.0);
        let mut sbuf = [i32x4_splat(0); 4];
        #[cfg(not(target_feature = "relaxed-simd"))]
        let mut wbuf = [i32x4_splat(0); 16];
        // Opaque: a constant multiplier would become per-lane shifts, which wasm lacks.
        let hi_mul = core::hint::black_box(i32x4(64, 16, 4, 1));
        for b in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks in `row` and nb*256 activations,
            // nb*8 scales and nb*16 group sums in `act`; every load below stays inside them
            // (the scale vector is read from bytes 94..110 of the block).
            let (x, a, bs, da) = block_ptrs(row, BB, &act, b);
            let sc = unpack_scales(x, hi_mul);
            let sc_lo = i16x8_extend_low_i8x16(sc);
            let sc_hi = i16x8_extend_high_i8x16(sc);
            store_scale_pairs(sbuf.as_mut_ptr(), sc_lo, sc_hi);
            #[cfg(not(target_feature = "relaxed-simd"))]
            let isum = {
                let w = wbuf.as_mut_ptr();
                decode_3bit(x, |g, v| v128_store(w.add(g), v));
                dot_bytes_g16(wbuf.as_ptr() as *const u8, a, sbuf.as_ptr() as *const u32)
            };
            #[cfg(target_feature = "relaxed-simd")]
            let isum = dot_3bit_relaxed(x, a, sbuf.as_ptr() as *const u32);
            let summs = i32x4_add(
                i32x4_dot_i16x8(sc_lo, v128_load(bs as *const v128)),
                i32x4_dot_i16x8(sc_hi, v128_load(bs.add(8) as *const v128)),
            );
            let dall = f32x4_mul(f16_splat(x.add(108)), da);
            acc = fold_block(acc, isum, dall, summs, f32x4_mul(dall, f32x4_splat(4.0)));
        }
        hsum_f32(acc)
    }

    /// The 16 scales as signed bytes (lane g = sc_g). `hi_mul` = `i32x4(64, 16, 4, 1)`.
    #[inline(always)]
    pub(in crate::quant::kquants) unsafe fn unpack_scales(x: *const u8, hi_mul: v128) -> v128 {
        // Bytes 94..110: scale byte s[i] is lane i + 2.
        let v = v128_load(x.add(94) as *const v128);
        // Low nibbles: g < 8 → s[g] & 15, g ≥ 8 → s[g-8] >> 4.
        let lo = i8x16_shuffle::<2, 3, 4, 5, 6, 7, 8, 9, 18, 19, 20, 21, 22, 23, 24, 25>(
            v128_and(v, u8x16_splat(15)),
            u8x16_shr(v, 4),
        );
        // Top bits: byte g of the splatted u32 s[8..12] is s[8 + g%4]; in u32 lane k = g/4 move
        // bits 2k..2k+1 of every byte to bits 4..5 (× 2^(6-2k), then >> 2).
        let aux = core::ptr::read_unaligned(x.add(104) as *const u32);
        let hi = i32x4_mul(i32x4_splat(aux as i32), hi_mul);
        let hi = v128_and(u32x4_shr(hi, 2), u8x16_splat(0x30));
        i8x16_sub(v128_or(lo, hi), i8x16_splat(32))
    }

    /// Row → GEMM form: the block decoded to bytes `u = q + 4` as for the dot product, then
    /// `(u − 4)·sc_g` per group.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, false);
        let hi_mul = core::hint::black_box(i32x4(64, 16, 4, 1));
        let mut sc = [0i8; 16];
        let off = i8x16_splat(4);
        for b in 0..nb {
            // SAFETY: block b is row[110b..110b+110] (the scale load reads bytes 94..110); its
            // weights are q[256b..256b+256].
            let x = row.as_ptr().add(BB * b);
            v128_store(sc.as_mut_ptr() as *mut v128, unpack_scales(x, hi_mul));
            let q = out.q.as_mut_ptr().add(QK_K * b);
            decode_3bit(x, |g, u| store_scaled16(q.add(16 * g), i8x16_sub(u, off), i16x8_splat(sc[g] as i16)));
            out.d[b] = f16_at(core::slice::from_raw_parts(x, BB), 108);
        }
    }

    /// Four interleaved rows (the R4 layout above) · `NY` activation rows, as Q2_K's `vec_dot4`:
    /// word k of a quarter (n, h) holds elements 4k..4k+4 of group g = 8n + 2j + h of each row
    /// at shift j; the high bits come from the hmask words of the same elements, pre-shifted per
    /// quarter so that bit 2 of each byte is the step's bit (as in `dot_3bit_relaxed`). `u = q + 4`
    /// (≤ 7) times each token's broadcast activation word, four products summed in i16
    /// (≤ 4·2·7·127), then `i32x4.dot` with the group's scales of the four rows (sign-extended
    /// from a per-block buffer of each scale byte twice) puts row r's group sum in lane r. The
    /// offset comes back as `4 Σ_g sc_g bsum_g` per row. Codes and scales are unpacked once for
    /// all `NY` tokens; each token's sums do not depend on `NY`.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    ///
    /// Inlined into its decode driver (see `r4_matvec!`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub(super) unsafe fn vec_dot4<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::Q3_K, &a))[0];
        let dup = r4_dup_masks();
        let mut scb = [0i8; 128];
        let scb = scb.as_mut_ptr();
        let mut acc = acc0;
        for b in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·110 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`; `scb` holds 16
            // groups × 8.
            let x = rows4.as_ptr().add(4 * BB * b);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * b));
            // Scales: s_r[i], s_r[4 + i], s_r[8 + i] in lanes 4r + i of three vectors.
            let s0 = v128_load(x as *const v128);
            let s1 = v128_load(x.add(16) as *const v128);
            let s2 = v128_load(x.add(32) as *const v128);
            let (m15, m48) = (u8x16_splat(15), u8x16_splat(0x30));
            let sc = [
                v128_or(v128_and(s0, m15), v128_and(i16x8_shl(s2, 4), m48)),
                v128_or(v128_and(s1, m15), v128_and(i16x8_shl(s2, 2), m48)),
                v128_or(v128_and(u16x8_shr(s0, 4), m15), v128_and(s2, m48)),
                v128_or(v128_and(u16x8_shr(s1, 4), m15), v128_and(u16x8_shr(s2, 2), m48)),
            ]
            .map(|v| i8x16_sub(v, i8x16_splat(32)));
            r4_store_scales(sc, scb, dup);
            let summs = r4_scale_sums_g16(sc, acts.map(|a| a.bsums.as_ptr().add(16 * b)));

            let isum = r4_3bit_isums::<NY>(x.add(56), x.add(184), a0, scb);
            let d = f16_lanes(u32x4_load_extend_u16x4(x.add(48) as *const u16));
            for t in 0..NY {
                let dall = f32x4_mul(d, v128_load32_splat(acts[t].d.as_ptr().add(8 * b) as *const u32));
                acc[t] = fold_block(acc[t], isum[t], dall, summs[t], f32x4_mul(dall, f32x4_splat(4.0)));
            }
        }
        acc
    }

    /// Row → int8 GEMM form: the block decoded to bytes `u = q + 4` as for the dot product; the
    /// signed scales to `sc`, `mn = −4·sc`, `m = d`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `Decoded8::check`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(crate::quant::GgmlType::Q3_K, row);
        let hi_mul = core::hint::black_box(i32x4(64, 16, 4, 1));
        let mut v = [u8x16_splat(0); 16];
        let off = i16x8_splat(-4);
        for b in 0..nb {
            // SAFETY: block b is row[110b..110b+110] (the scale load reads bytes 94..110); its
            // outputs are u[256b..], sc/mn[16b..16b+16].
            let x = row.as_ptr().add(BB * b);
            let sc = unpack_scales(x, hi_mul);
            store_i16_and_scaled(out.sc.as_mut_ptr().add(16 * b), sc, out.mn.as_mut_ptr().add(16 * b), off);
            decode_3bit(x, |g, u| v[g] = u);
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * b));
            let d = f16_at(core::slice::from_raw_parts(x, BB), 108);
            out.d[b] = d;
            out.m[b] = d;
        }
    }
}
