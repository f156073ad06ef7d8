//! IQ4_XS: 256 weights in 136 bytes, 4.25 bits per weight.
//!
//! | offset | bytes | field                                                           |
//! |--------|-------|-----------------------------------------------------------------|
//! | 0      | 2     | `d` (fp16)                                                      |
//! | 2      | 2     | `scales_h: u16`: top 2 bits of the 8 sub-block scales           |
//! | 4      | 4     | `scales_l`: low 4 bits of the 8 sub-block scales (two per byte) |
//! | 8      | 128   | `qs`: 4-bit indices into `KVALUES_IQ4NL`                        |
//!
//! Sub-block b (0..7) = elements `32b..32b+32`: element `32b + j` (j < 16) is `kv[qs[16b + j] & 15]`,
//! element `32b + 16 + j` is `kv[qs[16b + j] >> 4]`;
//! `ls_b = ((scales_l[b/2] >> 4(b%2)) & 15) | ((scales_h >> 2b) & 3) << 4` and `y = d * (ls_b - 32) * kv`.
//!
//! Dot with Q8_K: `Σ_blk d_a * d * Σ_b (ls_b - 32) * Σ kv·a`.

use super::{dispatch_decode, dispatch_vec_dot, kernels, KBlock, QuantKernels, QK_K};
use crate::quant::tables::KVALUES_IQ4NL;
use crate::quant::{f16_at, sanitize_f16, GgmlType};

const BB: usize = 136;

pub(super) const KERNELS: QuantKernels = kernels::<IQ4XS>(GgmlType::IQ4_XS, vec_dot, decode, sanitize);

struct IQ4XS;

impl KBlock for IQ4XS {
    const BB: usize = BB;
    const HAS_MIN: bool = false;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 0), 0.0)
    }

    /// Group g belongs to sub-block b = g/2: `ls_b - 32`.
    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        let sh = u16::from_le_bytes([blk[2], blk[3]]);
        let sc = core::array::from_fn(|g| {
            let b = g / 2;
            let lo = (blk[4 + b / 2] >> (4 * (b % 2))) & 15;
            let hi = ((sh >> (2 * b)) & 3) as u8;
            (lo | hi << 4) as i32 - 32
        });
        (sc, [0; 16])
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (b, qb) in q.chunks_exact_mut(32).enumerate() {
            let src = &blk[8 + 16 * b..][..16];
            let (lo, hi) = qb.split_at_mut(16);
            for ((l, h), &v) in lo.iter_mut().zip(hi).zip(src) {
                *l = KVALUES_IQ4NL[(v & 15) as usize];
                *h = KVALUES_IQ4NL[(v >> 4) as usize];
            }
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 0);
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<IQ4XS>);
dispatch_decode!(decode, simd::decode_row, IQ4XS);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Both builds multiply in registers, with no decoded copy of the block: SIMD128 with i16
    //! products of the codebook values, relaxed SIMD with the sign of each value moved onto its
    //! activation (BENCHMARKS.md "IQ4_XS and IQ4_NL in registers").
    use super::super::simd::{block_ptrs, check_decode, f16_splat};
    use super::super::{check_lens, Q8, QK_K};
    use crate::quant::f16_at;
    use crate::quant::gemm::Decoded;
    use crate::quant::simd::store_scaled16;
    use super::{BB, KVALUES_IQ4NL};
    use crate::quant::simd::hsum_f32;
    use core::arch::wasm32::*;

    /// The block loop of both builds' `vec_dot`: per block, `words(sc)` turns the 8 scales
    /// (`ls_b − 32`, i16 lanes) into one u32 word per sub-block, and `sub(v, a, w)` gives a
    /// sub-block's i32x4 partial sums of `(ls_b − 32) Σ kv·a` from its 16 `qs` bytes `v`, its 32
    /// activations at `a` and its word `w` (splat).
    ///
    /// # Safety
    /// Requires simd128; `sub` may read 32 bytes at `a`. Lengths are checked by `check_lens`.
    #[inline(always)]
    unsafe fn dot_blocks(row: &[u8], act: Q8<'_>, words: impl Fn(v128) -> [v128; 2], sub: impl Fn(v128, *const i8, v128) -> v128) -> f32 {
        let nb = check_lens(row, BB, &act);
        // Opaque: constant multipliers would become per-lane shifts, which wasm lacks.
        let (lo_mul, hi_mul) = core::hint::black_box((
            i16x8(16, 1, 16, 1, 16, 1, 16, 1),
            i16x8(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1),
        ));
        let mut acc = f32x4_splat(0.0);
        for b in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks in `row` and nb*256 activations and
            // nb*8 scales in `act`; every load below stays inside them.
            let (x, a, _, da) = block_ptrs(row, BB, &act, b);
            let wbuf = words(unpack_scales(x, lo_mul, hi_mul));
            let (mut q, mut a, mut w) = (x.add(8), a, wbuf.as_ptr() as *const u32);
            let mut isum = i32x4_splat(0);
            // An opaque trip count keeps this a loop (V8 spills a fully unrolled block).
            for _ in 0..core::hint::black_box(8u32) {
                isum = i32x4_add(isum, sub(v128_load(q as *const v128), a, v128_load32_splat(w)));
                q = q.add(16);
                a = a.add(32);
                w = w.add(1);
            }
            let dall = f32x4_mul(f16_splat(x), da);
            acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), dall));
        }
        hsum_f32(acc)
    }

    /// SIMD128, in registers: per sub-block the 32 codebook values (one `i8x16_swizzle` per 16)
    /// meet their activations in i16 products (`dot16_x256`: 256 × the sum, exact; |256·Σ| per
    /// lane ≤ 8·256·127² < 2^31), the sum comes back to ×1 with a shift and is multiplied by the
    /// sub-block's scale in i32. Measured against decoding each block to the stack first: 3.9 →
    /// 4.5 GB/s in Node, 3.5 → 3.8 in Chromium.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        let kv = v128_load(KVALUES_IQ4NL.as_ptr() as *const v128);
        let (m15, hi8) = (u8x16_splat(15), u16x8_splat(0xff00));
        let dot = |w: v128, a: *const i8| crate::quant::simd::dot16_x256(w, v128_load(a as *const v128), hi8);
        dot_blocks(
            row,
            act,
            |sc| [i32x4_extend_low_i16x8(sc), i32x4_extend_high_i16x8(sc)],
            |v, a, ls| {
                let w0 = i8x16_swizzle(kv, v128_and(v, m15));
                let w1 = i8x16_swizzle(kv, v128_and(u16x8_shr(v, 4), m15));
                i32x4_mul(i32x4_shr(i32x4_add(dot(w0, a), dot(w1, a.add(16))), 8), ls)
            },
        )
    }

    /// Relaxed SIMD, in registers: a codebook value is signed (−127..113), so each nibble looks
    /// up two tables, `|kv|` (the relaxed dot's 7-bit operand) and a mask that is −1 where `kv`
    /// is negative, which moves the sign onto the activation (`(a ^ m) − m`; activations are
    /// never −128, so the negation is exact). Per 16 weights: two lookups, an `xor`, a `sub`, the
    /// relaxed dot (pairs ≤ 2·127·127 < 2^15) and an `i32x4.dot` with the sub-block's scale
    /// (`sc_b | sc_b << 16`).
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_lens`.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        // Opaque, so that Chromium's V8 keeps both tables in registers (+5 % IQ4_XS, +9 % IQ4_NL
        // there; Node level).
        let (kabs, kneg) = core::hint::black_box(crate::quant::simd::iq4nl_sign_tables());
        let m15 = u8x16_splat(15);
        let dot = |idx: v128, a: *const i8| crate::quant::simd::rdot16_signed(idx, v128_load(a as *const v128), kabs, kneg);
        dot_blocks(
            row,
            act,
            |sc| [i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(sc, sc), i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(sc, sc)],
            |v, a, ls| {
                let p0 = dot(v128_and(v, m15), a);
                let p1 = dot(v128_and(u16x8_shr(v, 4), m15), a.add(16));
                i32x4_add(i32x4_dot_i16x8(p0, ls), i32x4_dot_i16x8(p1, ls))
            },
        )
    }

    /// The 8 sub-block scales `ls_b - 32` as i16 lanes.
    #[inline(always)]
    unsafe fn unpack_scales(x: *const u8, lo_mul: v128, hi_mul: v128) -> v128 {
        let v = v128_load64_zero(x as *const u64); // d, scales_h, scales_l
        let z = i8x16_splat(0);
        // Low nibbles: lane b = scales_l[b/2] (u16), × 16 for even b, then >> 4 and & 15.
        let lo = i8x16_shuffle::<4, 16, 4, 16, 5, 16, 5, 16, 6, 16, 6, 16, 7, 16, 7, 16>(v, z);
        let lo = v128_and(u16x8_shr(i16x8_mul(lo, lo_mul), 4), u16x8_splat(15));
        // High bits: lane b = scales_h × 2^(14-2b) keeps bits 2b..2b+1 at 14..15; >> 10 puts them at 4..5.
        let sh = i8x16_shuffle::<2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3>(v, z);
        let hi = v128_and(u16x8_shr(i16x8_mul(sh, hi_mul), 10), u16x8_splat(0x30));
        i16x8_sub(v128_or(lo, hi), i16x8_splat(32))
    }

    /// Row → GEMM form: codebook values (one swizzle per 16) times `ls_b − 32`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, false);
        let kv = v128_load(KVALUES_IQ4NL.as_ptr() as *const v128);
        let (lo_mul, hi_mul) = core::hint::black_box((
            i16x8(16, 1, 16, 1, 16, 1, 16, 1),
            i16x8(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1),
        ));
        let m15 = u8x16_splat(15);
        let mut sc = [0i16; 8];
        for b in 0..nb {
            // SAFETY: block b is row[136b..136b+136]; its weights are q[256b..256b+256].
            let x = row.as_ptr().add(BB * b);
            v128_store(sc.as_mut_ptr() as *mut v128, unpack_scales(x, lo_mul, hi_mul));
            let q = out.q.as_mut_ptr().add(QK_K * b);
            for (s, &ls) in sc.iter().enumerate() {
                let v = v128_load(x.add(8 + 16 * s) as *const v128);
                let ls = i16x8_splat(ls);
                store_scaled16(q.add(32 * s), i8x16_swizzle(kv, v128_and(v, m15)), ls);
                store_scaled16(q.add(32 * s + 16), i8x16_swizzle(kv, u8x16_shr(v, 4)), ls);
            }
            out.d[b] = f16_at(core::slice::from_raw_parts(x, 2), 0);
        }
    }
}
