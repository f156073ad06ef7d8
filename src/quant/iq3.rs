//! IQ3_XXS and IQ3_S: 3-bit "grid" quants. Groups of 4 weights share one codebook entry (a u32 of
//! four unsigned magnitude bytes); signs are stored separately, one bit per weight. Both types use
//! 256-element super-blocks of eight 32-element sub-blocks with one odd 4-bit scale each and are
//! multiplied with Q8_K activations (spec §5.2, §5.4).
//!
//! SIMD128 kernel shape (both types), per 32-weight sub-block: eight grid entries are gathered
//! into two v128 with `v128_load32_lane`, the sign bits become 0x00/0xff byte masks that are applied
//! to the magnitudes, `i16x8.extmul_{low,high}` with the activations gives i16 products (|w·a| ≤
//! 62·127, so the sum of four per lane fits i16), and one `i32x4.dot_i16x8` with the splatted
//! sub-block scale adds the sub-block to an i32x4 accumulator, converted to f32 once per block.
//!
//! The relaxed-SIMD build replaces the dot products ([`relaxed`]): the signs go onto the
//! activations (masks made in SIMD from the sign bytes, as for IQ2) and one
//! `i16x8.relaxed_dot_i8x16_i7x16_s` per 16 weights replaces the extmuls. GB/s (one thread,
//! 4096×4096 matvec, Node 20, Zen 4, best of 5, SIMD128 → relaxed): IQ3_XXS 2.50 → 3.19,
//! IQ3_S 2.15 → 3.12.

use super::tables::{IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS};
use super::gemm::Decoded;
use super::gemm8::{pair_pos, Decoded8, Kernels8};
use super::{f16_at, sanitize_f16, GgmlType, QuantKernels, Q8, QK_K};

pub static KERNELS: &[QuantKernels] = &[
    QuantKernels {
        ty: GgmlType::IQ3_XXS,
        dequantize: iq3_xxs::dequantize,
        vec_dot_ref: iq3_xxs::vec_dot_ref,
        vec_dot: iq3_xxs::vec_dot,
        decode_ref: iq3_xxs::decode_ref,
        decode: iq3_xxs::decode,
        sanitize: sanitize_d0,
    },
    QuantKernels {
        ty: GgmlType::IQ3_S,
        dequantize: iq3_s::dequantize,
        vec_dot_ref: iq3_s::vec_dot_ref,
        vec_dot: iq3_s::vec_dot,
        decode_ref: iq3_s::decode_ref,
        decode: iq3_s::decode,
        sanitize: sanitize_d0,
    },
];

/// Both types start with their fp16 super-block scale `d` at offset 0 and have no other float field.
fn sanitize_d0(block: &mut [u8]) {
    sanitize_f16(block, 0);
}

#[inline(always)]
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The signed magnitudes of one 8-weight group: magnitudes from two grid entries (4 + 4), weight
/// j negative when bit j of `signs` is set.
#[inline(always)]
fn signed8(g1: u32, g2: u32, signs: u8) -> [i32; 8] {
    let m = (g1 as u64 | (g2 as u64) << 32).to_le_bytes();
    let mut w = [0i32; 8];
    for j in 0..8 {
        w[j] = if signs >> j & 1 != 0 { -(m[j] as i32) } else { m[j] as i32 };
    }
    w
}

/// `y[j] = db * mag * (±1)` in ggml's order (the sign applied last, exactly).
#[inline(always)]
fn dequant8(y: &mut [f32], db: f32, w: &[i32; 8]) {
    for (y, &q) in y.iter_mut().zip(w) {
        let v = db * q.unsigned_abs() as f32;
        *y = if q < 0 { -v } else { v };
    }
}

#[inline(always)]
fn dot8(w: &[i32; 8], a: &[i8]) -> i32 {
    let a = &a[..8];
    let mut s = 0;
    for j in 0..8 {
        s += w[j] * a[j] as i32;
    }
    s
}

/// Checks that a row of `nb` blocks of `bytes` bytes and its activation row belong together; returns `nb`.
#[inline(always)]
fn check_lengths(row: &[u8], bytes: usize, act: &Q8<'_>) -> usize {
    assert!(row.len() % bytes == 0, "row of {} bytes is not whole blocks of {bytes}", row.len());
    let nb = row.len() / bytes;
    assert!(act.qs.len() == nb * QK_K, "activation row has {} elements, weights {}", act.qs.len(), nb * QK_K);
    assert!(act.d.len() >= nb * 8);
    nb
}

/// Writes `ls · w` (the 8 signed magnitudes of a group times the sub-block's `2s + 1`) at `q`.
#[inline(always)]
fn put8(q: &mut [i16], ls: i32, w: [i32; 8]) {
    for (q, w) in q[..8].iter_mut().zip(w) {
        *q = (ls * w) as i16;
    }
}

/// The int8 GEMM form of a row of either type ([`crate::quant::gemm8`]), the reference: codes
/// `±mag + off` in pair order from the type's `group(blk, b, l)`, both 16-element halves of
/// sub-block b scaled by `ls(blk, b)` (`mn = −off·ls`), `d = m = d(blk)`. Exact as the types'
/// `decode_ref`: `d·(ls·u)` and `d·(−off·ls)` are exact products (an fp16 `d` times integers
/// below 2^12) whose sum, `d·ls·(±mag)`, is exactly representable.
fn decode8_with(
    row: &[u8],
    out: &mut Decoded8,
    ty: GgmlType,
    off: i32,
    group: impl Fn(&[u8], usize, usize) -> [i32; 8],
    ls: impl Fn(&[u8], usize) -> i16,
    d: impl Fn(&[u8]) -> f32,
) {
    let nb = out.check(ty, row);
    for (i, blk) in row.chunks_exact(ty.block_bytes()).take(nb).enumerate() {
        for b in 0..8 {
            for l in 0..4 {
                for (j, q) in group(blk, b, l).into_iter().enumerate() {
                    out.u[QK_K * i + pair_pos(32 * b + 8 * l + j)] = (q + off) as u8;
                }
            }
            let ls = ls(blk, b);
            for h in 0..2 {
                out.sc[16 * i + 2 * b + h] = ls;
                out.mn[16 * i + 2 * b + h] = -(off as i16) * ls;
            }
        }
        let d = d(blk);
        out.d[i] = d;
        out.m[i] = d;
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
mod simd {
    use core::arch::wasm32::*;

    /// `ls · Σ w·a` over the 32 int8 pairs (w0, a0), (w1, a1) as i32x4 partial sums; `ls` is an i16
    /// splat. Requires |w| ≤ 62 and |a| ≤ 128: four products per i16 lane stay below 2^15.
    #[inline(always)]
    pub fn dot32_scaled(w0: v128, a0: v128, w1: v128, a1: v128, ls: v128) -> v128 {
        let p0 = i16x8_add(i16x8_extmul_low_i8x16(w0, a0), i16x8_extmul_high_i8x16(w0, a0));
        let p1 = i16x8_add(i16x8_extmul_low_i8x16(w1, a1), i16x8_extmul_high_i8x16(w1, a1));
        i32x4_dot_i16x8(i16x8_add(p0, p1), ls)
    }
}

// =============================================================================================
/// IQ3_XXS — 98 bytes per 256 weights (3.0625 bpw).
///
/// | offset | size | field                                                                   |
/// |--------|------|-------------------------------------------------------------------------|
/// | 0      | 2    | `d`: fp16 super-block scale                                             |
/// | 2      | 64   | grid indices, 8 per sub-block b (bytes `8b..8b+8`), into `IQ3XXS_GRID`  |
/// | 66     | 32   | one u32 `w` per sub-block b: bits `7l..7l+7` = sign index of group l    |
/// |        |      | (0..3, 8 weights, into `KSIGNS_IQ2XS`), bits 28..31 = scale `s`         |
///
/// Sub-block b, group l (weights `32b + 8l + j`, j < 8): magnitudes `j < 4` are byte j of
/// `IQ3XXS_GRID[idx[8b+2l]]`, `j ≥ 4` byte j−4 of `IQ3XXS_GRID[idx[8b+2l+1]]`; the weight is negative
/// when bit j of `KSIGNS_IQ2XS[(w >> 7l) & 127]` is set. `y = d * (0.5 + s) * 0.5 * mag * sign`.
/// In integers: `y = d/4 * (2s+1) * (±mag)`.
pub mod iq3_xxs {
    use super::*;

    pub const BYTES: usize = 98;

    /// The 8 signed magnitudes of group l (0..4) of sub-block b.
    #[inline(always)]
    fn group(blk: &[u8], b: usize, l: usize) -> [i32; 8] {
        let w = u32_at(blk, 66 + 4 * b);
        let qs = &blk[2 + 8 * b + 2 * l..];
        let signs = KSIGNS_IQ2XS[((w >> (7 * l)) & 127) as usize];
        signed8(IQ3XXS_GRID[qs[0] as usize], IQ3XXS_GRID[qs[1] as usize], signs)
    }

    /// `d * (0.5 + s) * 0.5` of sub-block b, as ggml computes it.
    #[inline(always)]
    fn db(blk: &[u8], b: usize) -> f32 {
        f16_at(blk, 0) * (0.5 + (u32_at(blk, 66 + 4 * b) >> 28) as f32) * 0.5
    }

    pub fn dequantize(row: &[u8], out: &mut [f32]) {
        assert_eq!(row.len(), out.len() / QK_K * BYTES);
        for (blk, y) in row.chunks_exact(BYTES).zip(out.chunks_exact_mut(QK_K)) {
            for (g, y) in y.chunks_exact_mut(8).enumerate() {
                dequant8(y, db(blk, g / 4), &group(blk, g / 4, g % 4));
            }
        }
    }

    pub fn vec_dot_ref(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lengths(row, BYTES, &act);
        let mut sumf = 0.0f32;
        for i in 0..nb {
            let blk = &row[i * BYTES..(i + 1) * BYTES];
            let a = &act.qs[i * QK_K..(i + 1) * QK_K];
            let mut bsum = 0i32;
            for b in 0..8 {
                let sumi: i32 = (0..4).map(|l| dot8(&group(blk, b, l), &a[32 * b + 8 * l..])).sum();
                bsum += sumi * (2 * (u32_at(blk, 66 + 4 * b) >> 28) as i32 + 1);
            }
            sumf += f16_at(blk, 0) * act.d[8 * i] * bsum as f32;
        }
        0.25 * sumf
    }

    /// GEMM form: `q = (2s + 1)·(±mag)`, `d = d_w / 4` (exact: the same product as `db·mag`).
    pub fn decode_ref(row: &[u8], out: &mut Decoded) {
        out.check(GgmlType::IQ3_XXS, row);
        for (i, blk) in row.chunks_exact(BYTES).enumerate() {
            for b in 0..8 {
                let ls = 2 * (u32_at(blk, 66 + 4 * b) >> 28) as i32 + 1;
                for l in 0..4 {
                    put8(&mut out.q[QK_K * i + 32 * b + 8 * l..], ls, group(blk, b, l));
                }
            }
            out.d[i] = f16_at(blk, 0) * 0.25;
        }
    }

    pub fn decode(row: &[u8], out: &mut Decoded) {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            // SAFETY: simd128 is enabled for this build.
            return unsafe { simd::decode(row, out) };
        }
        #[allow(unreachable_code)]
        decode_ref(row, out)
    }

    /// Offset that makes the signed magnitudes (±4..=±62) unsigned int8 codes.
    pub(super) const OFF8: i32 = 62;

    /// Int8 GEMM form ([`super::decode8_with`]): codes `u = ±mag + 62 ∈ 0..=124`, `sc = 2s + 1`,
    /// `d = d_w / 4`.
    pub fn decode8_ref(row: &[u8], out: &mut Decoded8) {
        let ls = |blk: &[u8], b: usize| 2 * (u32_at(blk, 66 + 4 * b) >> 28) as i16 + 1;
        decode8_with(row, out, GgmlType::IQ3_XXS, OFF8, group, ls, |blk| f16_at(blk, 0) * 0.25);
    }

    /// IQ3_XXS's int8 GEMM entry: codes up to 124 (`ksum` 1), from 16 tokens as the IQ2 types'
    /// (`iq2::kernels8`). Chromium 156, 4096×4096, G MAC/s, i16 GEMM → int8, two alternating
    /// rounds, T = 16 / 32 / 128: 26.6–28.0 / 30.9–32.7 / 35.2–35.3 → 30.2 / 35.1–36.3 /
    /// 39.1–40.3.
    pub const KERNELS8: Kernels8 = Kernels8 {
        ty: GgmlType::IQ3_XXS,
        umax: 124,
        faster: [false, true],
        min_tokens: 16,
        offset: Some(OFF8 as u8),
        decode_ref: decode8_ref,
        decode: decode8,
        scaled: None,
        scales32: true,
    };

    fn decode8(row: &[u8], out: &mut Decoded8) {
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        {
            // SAFETY: relaxed-simd is enabled for this build; lengths are checked inside.
            return unsafe { super::relaxed::decode8_iq3_xxs(row, out) };
        }
        #[allow(unreachable_code)]
        decode8_ref(row, out)
    }

    pub fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        {
            // SAFETY: simd128 and relaxed-simd are enabled for this build.
            return unsafe { super::relaxed::vec_dot_iq3_xxs(row, act) };
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
        {
            // SAFETY: simd128 is enabled for this build.
            return unsafe { simd::vec_dot(row, act) };
        }
        #[allow(unreachable_code)]
        vec_dot_ref(row, act)
    }

    /// Sign masks come straight from `KSIGNS64` (the 128 sign patterns expanded to 0x00/0xff bytes),
    /// applied as `(g ^ m) − m`. Grid indices are plain bytes, loaded with scalar ops.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    mod simd {
        #[cfg(not(target_feature = "relaxed-simd"))]
        use {
            super::super::check_lengths,
            super::super::simd::dot32_scaled,
            crate::quant::simd::hsum_f32,
            crate::quant::Q8,
        };
        use super::BYTES;
        use crate::quant::gemm::Decoded;
        use crate::quant::simd::store_scaled16;
        use crate::quant::tables::{IQ3XXS_GRID, KSIGNS64};
        use crate::quant::{f16_at, GgmlType, QK_K};
        use core::arch::wasm32::*;

        /// Four grid entries (indices = bytes `q[0..4]`) as 16 magnitude bytes.
        ///
        /// # Safety
        /// `q` must point to 4 readable bytes.
        #[inline(always)]
        unsafe fn grid4(q: *const u8) -> v128 {
            let g = IQ3XXS_GRID.as_ptr();
            // SAFETY: indices are u8, the grid has 256 entries.
            let v = v128_load32_zero(g.add(*q as usize));
            let v = v128_load32_lane::<1>(v, g.add(*q.add(1) as usize));
            let v = v128_load32_lane::<2>(v, g.add(*q.add(2) as usize));
            v128_load32_lane::<3>(v, g.add(*q.add(3) as usize))
        }

        /// Byte masks (0xff = negative) of two 8-weight groups from their 7-bit sign indices.
        ///
        /// # Safety
        /// `i0, i1 < 128`.
        #[inline(always)]
        unsafe fn signs2(i0: u32, i1: u32) -> v128 {
            let t = KSIGNS64.as_ptr();
            v128_load64_lane::<1>(v128_load64_zero(t.add(i0 as usize)), t.add(i1 as usize))
        }

        /// Sub-block b's 32 signed magnitudes (two i8x16) and its `2s + 1` as an i16 splat, from
        /// the block's grid indices `qs` and sign/scale words `sg`.
        ///
        /// # Safety
        /// `qs` and `sg` point into one block.
        #[inline(always)]
        unsafe fn sub_block(qs: *const u8, sg: *const u8, b: usize) -> (v128, v128, v128) {
            let w = (sg.add(4 * b) as *const u32).read_unaligned();
            let g0 = grid4(qs.add(8 * b));
            let g1 = grid4(qs.add(8 * b + 4));
            let s0 = signs2(w & 127, (w >> 7) & 127);
            let s1 = signs2((w >> 14) & 127, (w >> 21) & 127);
            let w0 = i8x16_sub(v128_xor(g0, s0), s0);
            let w1 = i8x16_sub(v128_xor(g1, s1), s1);
            (w0, w1, i16x8_splat(2 * (w >> 28) as i16 + 1))
        }

        /// Row → GEMM form: each sub-block's signed magnitudes times its `2s + 1`.
        ///
        /// # Safety
        /// Requires simd128.
        #[target_feature(enable = "simd128")]
        pub unsafe fn decode(row: &[u8], out: &mut Decoded) {
            out.check(GgmlType::IQ3_XXS, row);
            let q = out.q.as_mut_ptr();
            for (i, blk) in row.chunks_exact(BYTES).enumerate() {
                // SAFETY: reads stay in `blk`; `check` sized q for 256 weights per block.
                let (qs, sg) = (blk.as_ptr().add(2), blk.as_ptr().add(66));
                for b in 0..8 {
                    let (w0, w1, ls) = sub_block(qs, sg, b);
                    store_scaled16(q.add(QK_K * i + 32 * b), w0, ls);
                    store_scaled16(q.add(QK_K * i + 32 * b + 16), w1, ls);
                }
                out.d[i] = f16_at(blk, 0) * 0.25;
            }
        }

        /// # Safety
        /// Requires simd128.
        #[cfg(not(target_feature = "relaxed-simd"))]
        #[target_feature(enable = "simd128")]
        pub unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
            let nb = check_lengths(row, BYTES, &act);
            let mut acc = f32x4_splat(0.0);
            for i in 0..nb {
                let blk = &row[i * BYTES..(i + 1) * BYTES];
                // SAFETY (all pointer reads below): `blk` has BYTES bytes and the activation block
                // 256 elements (checked above); sign indices are masked to 7 bits.
                let qs = blk.as_ptr().add(2);
                let sg = blk.as_ptr().add(66);
                let a = act.qs.as_ptr().add(i * QK_K);
                let mut isum = i32x4_splat(0);
                for b in 0..8 {
                    let (w0, w1, ls) = sub_block(qs, sg, b);
                    let a0 = v128_load(a.add(32 * b) as *const v128);
                    let a1 = v128_load(a.add(32 * b + 16) as *const v128);
                    isum = i32x4_add(isum, dot32_scaled(w0, a0, w1, a1, ls));
                }
                let d = f16_at(blk, 0) * act.d[8 * i];
                acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_splat(d)));
            }
            0.25 * hsum_f32(acc)
        }
    }
}

// =============================================================================================
/// IQ3_S — 110 bytes per 256 weights (3.4375 bpw).
///
/// | offset | size | field                                                                  |
/// |--------|------|------------------------------------------------------------------------|
/// | 0      | 2    | `d`: fp16 super-block scale                                            |
/// | 2      | 64   | low 8 bits of the grid indices, 8 per sub-block b (bytes `8b..8b+8`)   |
/// | 66     | 8    | `qh[b]`: bit k = bit 8 of index k of sub-block b                       |
/// | 74     | 32   | sign bytes, 4 per sub-block (one per 8-weight group, bit j ⇒ negative) |
/// | 106    | 4    | scales: sub-block b uses nibble `b % 2` of byte `b / 2`                |
///
/// Weight `32b + 4k + j` (k < 8, j < 4) = `d * (1 + 2*s_b) * mag * sign` with
/// `mag` = byte j of `IQ3S_GRID[qs[8b+k] | ((qh[b] >> k) & 1) << 8]` and the sign from bit `(4k+j) % 8`
/// of sign byte `4b + k/2`.
pub mod iq3_s {
    use super::*;

    pub const BYTES: usize = 110;

    /// The 8 signed magnitudes of group l (0..4) of sub-block b.
    #[inline(always)]
    pub(crate) fn group(blk: &[u8], b: usize, l: usize) -> [i32; 8] {
        let qh = blk[66 + b] as usize;
        let k = 2 * l;
        let i1 = blk[2 + 8 * b + k] as usize | ((qh >> k) & 1) << 8;
        let i2 = blk[2 + 8 * b + k + 1] as usize | ((qh >> (k + 1)) & 1) << 8;
        signed8(IQ3S_GRID[i1], IQ3S_GRID[i2], blk[74 + 4 * b + l])
    }

    /// `1 + 2s` of sub-block `b`.
    #[inline(always)]
    fn scale(blk: &[u8], b: usize) -> i32 {
        1 + 2 * ((blk[106 + b / 2] >> (4 * (b % 2))) & 15) as i32
    }

    pub fn dequantize(row: &[u8], out: &mut [f32]) {
        assert_eq!(row.len(), out.len() / QK_K * BYTES);
        for (blk, y) in row.chunks_exact(BYTES).zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_at(blk, 0);
            for (g, y) in y.chunks_exact_mut(8).enumerate() {
                dequant8(y, d * scale(blk, g / 4) as f32, &group(blk, g / 4, g % 4));
            }
        }
    }

    pub fn vec_dot_ref(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lengths(row, BYTES, &act);
        let mut sumf = 0.0f32;
        for i in 0..nb {
            let blk = &row[i * BYTES..(i + 1) * BYTES];
            let a = &act.qs[i * QK_K..(i + 1) * QK_K];
            let mut bsum = 0i32;
            for b in 0..8 {
                let sumi: i32 = (0..4).map(|l| dot8(&group(blk, b, l), &a[32 * b + 8 * l..])).sum();
                bsum += sumi * scale(blk, b);
            }
            sumf += f16_at(blk, 0) * act.d[8 * i] * bsum as f32;
        }
        sumf
    }

    /// GEMM form: `q = (1 + 2s)·(±mag)`, `d = d_w`.
    pub fn decode_ref(row: &[u8], out: &mut Decoded) {
        out.check(GgmlType::IQ3_S, row);
        for (i, blk) in row.chunks_exact(BYTES).enumerate() {
            for b in 0..8 {
                for l in 0..4 {
                    put8(&mut out.q[QK_K * i + 32 * b + 8 * l..], scale(blk, b), group(blk, b, l));
                }
            }
            out.d[i] = f16_at(blk, 0);
        }
    }

    pub fn decode(row: &[u8], out: &mut Decoded) {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            // SAFETY: simd128 is enabled for this build.
            return unsafe { simd::decode(row, out) };
        }
        #[allow(unreachable_code)]
        decode_ref(row, out)
    }

    /// Offset that makes the signed magnitudes (odd, ±1..=±15) unsigned int8 codes.
    const OFF8: i32 = 15;

    /// Int8 GEMM form ([`super::decode8_with`]): codes `u = ±mag + 15 ∈ 0..=30`, `sc = 1 + 2s`,
    /// `d = d_w`.
    pub fn decode8_ref(row: &[u8], out: &mut Decoded8) {
        decode8_with(row, out, GgmlType::IQ3_S, OFF8, group, |blk, b| scale(blk, b) as i16, |blk| f16_at(blk, 0));
    }

    /// IQ3_S's int8 GEMM entry: codes up to 30 (`ksum` 4), faster from the fewest tokens on.
    /// Chromium 156, 4096×4096, G MAC/s, i16 GEMM → int8, two alternating rounds, T = 4 / 8 /
    /// 16 / 32: 12.7–13.4 / 19.2–20.7 / 25.6–26.8 / 31.0–32.0 → 14.3 / 21.7–22.4 / 29.2–29.5 /
    /// 33.6–34.9.
    pub const KERNELS8: Kernels8 = Kernels8 {
        ty: GgmlType::IQ3_S,
        umax: 30,
        faster: [false, true],
        min_tokens: 0,
        offset: Some(OFF8 as u8),
        decode_ref: decode8_ref,
        decode: decode8,
        scaled: None,
        scales32: true,
    };

    fn decode8(row: &[u8], out: &mut Decoded8) {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            // SAFETY: simd128 is enabled for this build; lengths are checked inside.
            return unsafe { simd::decode8(row, out) };
        }
        #[allow(unreachable_code)]
        decode8_ref(row, out)
    }

    pub fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        {
            // SAFETY: simd128 and relaxed-simd are enabled for this build.
            return unsafe { super::relaxed::vec_dot_iq3_s(row, act) };
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
        {
            // SAFETY: simd128 is enabled for this build.
            return unsafe { simd::vec_dot(row, act) };
        }
        #[allow(unreachable_code)]
        vec_dot_ref(row, act)
    }

    /// Grid indices are built with SIMD (8 per sub-block in u16 lanes) and extracted per gather —
    /// cheaper in V8 than scalar byte loads and bit fiddling for the 9th index bit. Sign bytes are
    /// spread to their 8 lanes with a swizzle and compared against the lane's bit.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub(crate) mod simd {
        #[cfg(not(target_feature = "relaxed-simd"))]
        use {
            super::super::check_lengths,
            super::super::simd::dot32_scaled,
            crate::quant::simd::hsum_f32,
            crate::quant::Q8,
        };
        use super::BYTES;
        use crate::quant::gemm::Decoded;
        use crate::quant::gemm8::Decoded8;
        use crate::quant::simd::store_scaled16;
        use crate::quant::tables::IQ3S_GRID;
        use crate::quant::{f16_at, GgmlType, QK_K};
        use core::arch::wasm32::*;
        use core::hint::black_box;

        /// Four grid entries whose indices are u16 lanes `K..K+4` (K = 0 or 4) of `idx`.
        ///
        /// # Safety
        /// The four lanes must hold indices < 512.
        #[inline(always)]
        unsafe fn grid4<const K: usize>(idx: v128) -> v128 {
            let g = IQ3S_GRID.as_ptr();
            let lane = |k: usize| match k {
                0 => u16x8_extract_lane::<0>(idx),
                1 => u16x8_extract_lane::<1>(idx),
                2 => u16x8_extract_lane::<2>(idx),
                3 => u16x8_extract_lane::<3>(idx),
                4 => u16x8_extract_lane::<4>(idx),
                5 => u16x8_extract_lane::<5>(idx),
                6 => u16x8_extract_lane::<6>(idx),
                _ => u16x8_extract_lane::<7>(idx),
            } as usize;
            let v = v128_load32_zero(g.add(lane(K)));
            let v = v128_load32_lane::<1>(v, g.add(lane(K + 1)));
            let v = v128_load32_lane::<2>(v, g.add(lane(K + 2)));
            v128_load32_lane::<3>(v, g.add(lane(K + 3)))
        }

        /// Constants of [`sub_block`], made once per row.
        pub(crate) struct Consts {
            spread0: v128,
            spread1: v128,
            bits: v128,
            qh_bits: v128,
            qh_to_bit8: v128,
            one: v128,
        }

        impl Consts {
            #[inline(always)]
            pub(crate) fn new() -> Consts {
                // `black_box` hides these constants from LLVM, which would otherwise turn the
                // swizzles into shuffles (V8 rebuilds a shuffle's mask from immediates every
                // time), `== bit` into `!= 0` (three x64 ops in V8 instead of one) and the
                // multiply by per-lane powers of two into scalarised shifts.
                Consts {
                    spread0: black_box(u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)),
                    spread1: black_box(u8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)),
                    bits: black_box(u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128)),
                    qh_bits: u16x8(1, 2, 4, 8, 16, 32, 64, 128),
                    qh_to_bit8: black_box(u16x8(256, 128, 64, 32, 16, 8, 4, 2)),
                    one: i8x16_splat(1),
                }
            }
        }

        /// Sub-block b's 32 signed magnitudes (two i8x16) and its `1 + 2s` as an i16 splat; `p`
        /// is the block, `sc` its u32 of scale nibbles.
        ///
        /// # Safety
        /// `p` points to a whole block.
        #[inline(always)]
        pub(crate) unsafe fn sub_block(p: *const u8, sc: u32, b: usize, k: &Consts) -> (v128, v128, v128) {
            // Index k = qs[8b+k] | (bit k of qh[b]) << 8 in u16 lane k: the qh byte is
            // splatted, bit k kept and moved to bit 8 by a multiply.
            let lo = u16x8_extend_low_u8x16(v128_load64_zero(p.add(2 + 8 * b) as *const u64));
            let qh = v128_load8_splat(p.add(66 + b));
            let idx = v128_or(lo, i16x8_mul(v128_and(qh, k.qh_bits), k.qh_to_bit8));
            let g0 = grid4::<0>(idx);
            let g1 = grid4::<4>(idx);
            // Lane j of m0 sees sign byte j/8 and tests bit j%8 (m1: bytes 2, 3).
            let sg = v128_load32_zero(p.add(74 + 4 * b) as *const u32);
            let m0 = i8x16_eq(v128_and(i8x16_swizzle(sg, k.spread0), k.bits), k.bits);
            let m1 = i8x16_eq(v128_and(i8x16_swizzle(sg, k.spread1), k.bits), k.bits);
            // Magnitudes are odd, so −g = !g + 1 = !g | 1: `(g ^ m) | 1` applies the sign
            // in two cheap ops (LLVM would turn `(g ^ m) − m` into neg + bitselect).
            let w0 = v128_or(v128_xor(g0, m0), k.one);
            let w1 = v128_or(v128_xor(g1, m1), k.one);
            (w0, w1, i16x8_splat(1 + 2 * ((sc >> (4 * b)) & 15) as i16))
        }

        /// Row → GEMM form: each sub-block's signed magnitudes times its `1 + 2s`.
        ///
        /// # Safety
        /// Requires simd128.
        #[target_feature(enable = "simd128")]
        pub unsafe fn decode(row: &[u8], out: &mut Decoded) {
            out.check(GgmlType::IQ3_S, row);
            let k = Consts::new();
            let q = out.q.as_mut_ptr();
            for (i, blk) in row.chunks_exact(BYTES).enumerate() {
                // SAFETY: reads stay in `blk`; `check` sized q for 256 weights per block.
                let p = blk.as_ptr();
                let sc = (p.add(106) as *const u32).read_unaligned();
                for b in 0..8 {
                    let (w0, w1, ls) = sub_block(p, sc, b, &k);
                    store_scaled16(q.add(QK_K * i + 32 * b), w0, ls);
                    store_scaled16(q.add(QK_K * i + 32 * b + 16), w1, ls);
                }
                out.d[i] = f16_at(blk, 0);
            }
        }

        /// Row → int8 GEMM form ([`super::decode8_ref`]): each sub-block's signed magnitudes plus
        /// 15, the block's 16 vectors to pair order.
        ///
        /// # Safety
        /// Requires simd128.
        #[target_feature(enable = "simd128")]
        pub unsafe fn decode8(row: &[u8], out: &mut Decoded8) {
            let nb = out.check(GgmlType::IQ3_S, row);
            let k = Consts::new();
            let off = i8x16_splat(super::OFF8 as i8);
            let mut v = [i8x16_splat(0); 16];
            for i in 0..nb {
                // SAFETY: block i is row[110i..110i+110]; its outputs are u[256i..],
                // sc/mn[16i..16i+16].
                let p = row.as_ptr().add(i * BYTES);
                let sc = (p.add(106) as *const u32).read_unaligned();
                for b in 0..8 {
                    let (w0, w1, _) = sub_block(p, sc, b, &k);
                    v[2 * b] = i8x16_add(w0, off);
                    v[2 * b + 1] = i8x16_add(w1, off);
                    let ls = 1 + 2 * ((sc >> (4 * b)) & 15) as i16;
                    for h in 0..2 {
                        out.put_offset_scale(16 * i + 2 * b + h, ls, super::OFF8 as i16);
                    }
                }
                out.put_offset_block(i, &v, f16_at(core::slice::from_raw_parts(p, BYTES), 0));
            }
        }

        /// # Safety
        /// Requires simd128.
        #[cfg(not(target_feature = "relaxed-simd"))]
        #[target_feature(enable = "simd128")]
        pub unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
            let nb = check_lengths(row, BYTES, &act);
            let k = Consts::new();
            let mut acc = f32x4_splat(0.0);
            for i in 0..nb {
                let blk = &row[i * BYTES..(i + 1) * BYTES];
                // SAFETY (all pointer reads below): `blk` has BYTES bytes and the activation block
                // 256 elements (checked above); grid indices have 9 bits, < 512.
                let p = blk.as_ptr();
                let a = act.qs.as_ptr().add(i * QK_K);
                let sc = (p.add(106) as *const u32).read_unaligned();
                let mut isum = i32x4_splat(0);
                for b in 0..8 {
                    let (w0, w1, ls) = sub_block(p, sc, b, &k);
                    let a0 = v128_load(a.add(32 * b) as *const v128);
                    let a1 = v128_load(a.add(32 * b + 16) as *const v128);
                    isum = i32x4_add(isum, dot32_scaled(w0, a0, w1, a1, ls));
                }
                let d = f16_at(blk, 0) * act.d[8 * i];
                acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_splat(d)));
            }
            hsum_f32(acc)
        }
    }
}

// =============================================================================================
// Relaxed-SIMD dot products (the build with `+relaxed-simd`; the row decoders stay SIMD128).

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
mod relaxed {
    //! The 8-bit route of the IQ2 kernels (see `iq2::relaxed`): per 16 weights four u32 grid
    //! entries gathered into one v128 (magnitudes ≤ 62, the 7-bit operand), the signs applied to
    //! the activations with byte masks made from the block's 32 sign bytes kept in two v128
    //! ([`Signs`]), one `i16x8.relaxed_dot_i8x16_i7x16_s`. The two halves of a sub-block are added
    //! in i16 (|4 · 62 · 127| = 31496 < 2^15) and scaled by one `i32x4.dot_i16x8_s` with the
    //! `ls` splat.
    use super::{check_lengths, iq3_s, iq3_xxs};
    use crate::quant::iq2::relaxed::{d_splat, dot16, ksigns_of_words, ls16, Consts, Signs};
    use crate::quant::gemm8::Decoded8;
    use crate::quant::simd::hsum_f32;
    use crate::quant::tables::{IQ3S_GRID, IQ3XXS_GRID};
    use crate::quant::{Q8, QK_K};
    use core::arch::wasm32::*;
    use core::hint::black_box;

    /// The four u32 grid entries at byte offsets `off(0..4)` of `grid` as 16 magnitude bytes.
    ///
    /// # Safety
    /// The four offsets inside the table, multiples of 4.
    #[inline(always)]
    unsafe fn grid4(grid: *const u8, off: impl Fn(usize) -> usize) -> v128 {
        let at = |j: usize| grid.add(off(j)) as *const u32;
        let v = v128_load32_zero(at(0));
        let v = v128_load32_lane::<1>(v, at(1));
        let v = v128_load32_lane::<2>(v, at(2));
        v128_load32_lane::<3>(v, at(3))
    }

    /// IQ3_XXS's sign bytes: the eight u32 words at `sg` (byte 66 of the block) through
    /// [`ksigns_of_words`].
    ///
    /// # Safety
    /// `sg..sg+32` readable.
    #[inline(always)]
    unsafe fn signs_xxs(sg: *const u8, k: &Consts) -> Signs {
        Signs {
            cur: ksigns_of_words(v128_load(sg as *const v128), k),
            next: ksigns_of_words(v128_load(sg.add(16) as *const v128), k),
        }
    }

    /// IQ3_XXS's 32 magnitudes of the sub-block whose 8 grid-index bytes are at `q` (two v128).
    ///
    /// # Safety
    /// `q..q+8` readable.
    #[inline(always)]
    unsafe fn grid_xxs(q: *const u8) -> (v128, v128) {
        let grid = IQ3XXS_GRID.as_ptr() as *const u8;
        (grid4(grid, |j| 4 * *q.add(j) as usize), grid4(grid, |j| 4 * *q.add(4 + j) as usize))
    }

    /// The sub-block loop of both types: per sub-block b, `sub(b)` gives the 32 magnitudes (two
    /// v128) and the `LS16` row of its scale. Returns the block's integer sum (i32x4).
    ///
    /// The loop has an opaque trip count: unrolled, LLVM hoists all loads and V8 spills.
    ///
    /// # Safety
    /// `a..a+256` readable.
    #[inline(always)]
    unsafe fn block_dot(mut signs: Signs, a: *const i8, k: &Consts, sub: impl Fn(usize) -> (v128, v128, v128)) -> v128 {
        let mut isum = i32x4_splat(0);
        for b in 0..black_box(8) {
            let (m01, m23) = signs.masks(k);
            let (g01, g23, ls) = sub(b);
            let p01 = dot16(g01, m01, a.add(32 * b));
            let p23 = dot16(g23, m23, a.add(32 * b + 16));
            isum = i32x4_add(isum, i32x4_dot_i16x8(i16x8_add(p01, p23), ls));
        }
        isum
    }

    /// IQ3_XXS · Q8_K, relaxed SIMD. Signs: the eight u32 words at byte 66 through
    /// [`ksigns_of_words`]; grid indices: bytes, read per sub-block at `blk + 2 + 8·(b & 7)` (see
    /// `iq2::relaxed`).
    ///
    /// # Safety
    /// Requires simd128 and relaxed-simd.
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub unsafe fn vec_dot_iq3_xxs(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lengths(row, iq3_xxs::BYTES, &act);
        let k = Consts::new();
        let mut acc = f32x4_splat(0.0);
        for i in 0..nb {
            // SAFETY (all pointer reads below): the block has BYTES bytes and the activation
            // block 256 elements (checked above); grid indices are bytes (256 entries), ls
            // offsets 16 · a nibble.
            let blk = row.as_ptr().add(i * iq3_xxs::BYTES);
            let sg = blk.add(66);
            let isum = block_dot(signs_xxs(sg, &k), act.qs.as_ptr().add(i * QK_K), &k, |b| {
                let (g01, g23) = grid_xxs(blk.add(2 + 8 * (b & 7)));
                (g01, g23, ls16((*sg.add(4 * b + 3) & 0xf0) as usize))
            });
            acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), d_splat(blk, act.d.as_ptr().add(8 * i))));
        }
        0.25 * hsum_f32(acc)
    }

    /// IQ3_XXS row → int8 GEMM form ([`iq3_xxs::decode8_ref`]): [`signs_xxs`], [`grid_xxs`] as in
    /// the dot product; the magnitudes negated under the sign masks, plus 62; the block's 16
    /// vectors to pair order.
    ///
    /// # Safety
    /// Requires simd128 and relaxed-simd.
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub unsafe fn decode8_iq3_xxs(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(crate::quant::GgmlType::IQ3_XXS, row);
        let k = Consts::new();
        let off = i8x16_splat(iq3_xxs::OFF8 as i8);
        let mut v = [i8x16_splat(0); 16];
        for i in 0..nb {
            // SAFETY: block i is row[98i..98i+98]; its outputs are u[256i..], sc/mn[16i..16i+16];
            // grid indices are bytes (256 entries).
            let blk = row.as_ptr().add(i * iq3_xxs::BYTES);
            let sg = blk.add(66);
            let mut signs = signs_xxs(sg, &k);
            for b in 0..8 {
                let (m01, m23) = signs.masks(&k);
                let (g01, g23) = grid_xxs(blk.add(2 + 8 * b));
                v[2 * b] = i8x16_add(i8x16_relaxed_laneselect(i8x16_neg(g01), g01, m01), off);
                v[2 * b + 1] = i8x16_add(i8x16_relaxed_laneselect(i8x16_neg(g23), g23, m23), off);
                let ls = 2 * (*sg.add(4 * b + 3) >> 4) as i16 + 1;
                for h in 0..2 {
                    out.put_offset_scale(16 * i + 2 * b + h, ls, iq3_xxs::OFF8 as i16);
                }
            }
            out.put_offset_block(i, &v, crate::quant::f16_at(core::slice::from_raw_parts(blk, iq3_xxs::BYTES), 0) * 0.25);
        }
    }

    /// IQ3_S · Q8_K, relaxed SIMD. Signs: the stored sign bytes. Per block, in SIMD: the grid
    /// indices, eight per sub-block in u16 lanes as in the SIMD128 kernel (`qs | bit k of qh <<
    /// 8`, the qh byte splatted, masked and moved up by a multiply), times 4 (byte offsets), and
    /// the eight scale nibbles times 16 (`LS16` offsets); both are stored and read back per
    /// sub-block (index `b & 7`, see `iq2::relaxed`). Measured: the scale offsets computed per
    /// sub-block in scalar code (seven x64 instructions) are ~2% slower, and stored one lane at a
    /// time next to the grid offsets (`v128.store16_lane`) ~15% slower (the store forwarding to
    /// the scalar loads stalls).
    ///
    /// # Safety
    /// Requires simd128 and relaxed-simd.
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub unsafe fn vec_dot_iq3_s(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lengths(row, iq3_s::BYTES, &act);
        let k = Consts::new();
        let qh_bits = u16x8(1, 2, 4, 8, 16, 32, 64, 128);
        // black_box: as a visible constant LLVM turns the multiply into scalarised shifts.
        let qh_to_bit8 = black_box(u16x8(256, 128, 64, 32, 16, 8, 4, 2));
        const Z: u8 = 0x80; // relaxed swizzle: an index ≥ 128 gives 0 on every platform
        // Scale bytes 0..3 into u16 lanes 2j, 2j+1, then ·16 (low nibble) and ·1 (high nibble).
        let sc_spread = black_box(u8x16(0, Z, 0, Z, 1, Z, 1, Z, 2, Z, 2, Z, 3, Z, 3, Z));
        let sc_mul = black_box(u16x8(16, 1, 16, 1, 16, 1, 16, 1));
        let grid = IQ3S_GRID.as_ptr() as *const u8;
        let (mut offs, mut ls_offs) = ([0u16; 64], [0u16; 8]);
        let (offs, ls_offs) = (offs.as_mut_ptr(), ls_offs.as_mut_ptr());
        let mut acc = f32x4_splat(0.0);
        for i in 0..nb {
            // SAFETY (all pointer reads below): the block has BYTES bytes and the activation
            // block 256 elements (checked above); grid indices have 9 bits (512 entries), ls
            // offsets are 16 · a nibble; `offs` holds 64 entries and `ls_offs` 8.
            let p = row.as_ptr().add(i * iq3_s::BYTES);
            for b in 0..8 {
                let lo = u16x8_extend_low_u8x16(v128_load64_zero(p.add(2 + 8 * b) as *const u64));
                let qh = v128_load8_splat(p.add(66 + b));
                let v = v128_or(lo, i16x8_mul(v128_and(qh, qh_bits), qh_to_bit8));
                v128_store(offs.add(8 * b) as *mut v128, i16x8_shl(v, 2));
            }
            let sc = i8x16_relaxed_swizzle(v128_load32_zero(p.add(106) as *const u32), sc_spread);
            let ls = v128_and(i16x8_mul(sc, sc_mul), u16x8_splat(0xf0));
            v128_store(ls_offs as *mut v128, ls);
            let signs = Signs { cur: v128_load(p.add(74) as *const v128), next: v128_load(p.add(90) as *const v128) };
            let isum = block_dot(signs, act.qs.as_ptr().add(i * QK_K), &k, |b| {
                let g = offs.add(8 * (b & 7)) as *const u16;
                let g01 = grid4(grid, |j| *g.add(j) as usize);
                let g23 = grid4(grid, |j| *g.add(4 + j) as usize);
                (g01, g23, ls16(*ls_offs.add(b & 7) as usize))
            });
            acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), d_splat(p, act.d.as_ptr().add(8 * i))));
        }
        hsum_f32(acc)
    }
}
