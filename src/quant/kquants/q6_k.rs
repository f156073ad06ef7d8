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

use super::{dispatch_decode, dispatch_decode8, dispatch_vec_dot, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::{f16_at, sanitize_f16, GgmlType};

const BB: usize = 210;

pub(super) const KERNELS: QuantKernels = kernels::<Q6K>(GgmlType::Q6_K, vec_dot, decode, sanitize);

/// Int8 GEMM form: `u = q + 32 ∈ 0..63`, the offset through the min term; in the browsers'
/// profile only (widening every vector: Chromium 34.4 → 39.8 G MAC/s against the i16 GEMM).
pub(super) const KERNELS8: Kernels8 = kernels8::<Q6K, 32>(GgmlType::Q6_K, 63, [false, true], decode8);

struct Q6K;

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

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 208);
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<Q6K>);
dispatch_decode!(decode, simd::decode_row, Q6K);
dispatch_decode8!(decode8, simd::decode8_row, Q6K, 32);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Each block is first decoded to 256 bytes `u = q + 32 ∈ 0..63` on the stack (16 lanes per
    //! operation), then multiplied by [`dot_bytes_g16`]; the `-32` comes back as
    //! `32 Σ_g sc_g bsum_g`.
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
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
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
            decode(x, |g, v| v128_store(w.add(g), v));
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

    /// `out(i/16, u)` for the 16 values `u` of elements `i..i+16`. Byte lanes are shifted as u16
    /// lanes; the masks drop the bits that cross a byte.
    #[inline(always)]
    unsafe fn decode(x: *const u8, mut out: impl FnMut(usize, v128)) {
        let (m15, m48) = (u8x16_splat(15), u8x16_splat(0x30));
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

    /// Row → GEMM form: the block decoded to bytes `u = q + 32` as for the dot product, then
    /// `(u − 32)·sc_g` per group.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, false);
        let off = i8x16_splat(32);
        for b in 0..nb {
            // SAFETY: block b is row[210b..210b+210]; its weights are q[256b..256b+256].
            let x = row.as_ptr().add(BB * b);
            let q = out.q.as_mut_ptr().add(QK_K * b);
            decode(x, |g, u| {
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
    pub(super) unsafe fn decode8_row(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(crate::quant::GgmlType::Q6_K, row);
        let mut v = [u8x16_splat(0); 16];
        let off = i16x8_splat(-32);
        for b in 0..nb {
            // SAFETY: block b is row[210b..210b+210]; its outputs are u[256b..], sc/mn[16b..16b+16].
            let x = row.as_ptr().add(BB * b);
            let sc = v128_load(x.add(192) as *const v128);
            store_i16_and_scaled(out.sc.as_mut_ptr().add(16 * b), sc, out.mn.as_mut_ptr().add(16 * b), off);
            decode(x, |g, u| v[g] = u);
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * b));
            let d = f16_at(core::slice::from_raw_parts(x, BB), 208);
            out.d[b] = d;
            out.m[b] = d;
        }
    }
}
