//! Q1_0 and Q2_0: the upstream ggml 1-bit and 2-bit types (spec §5.2), both multiplied with Q8_0
//! activations (one scale per 32 elements), so one Q1_0 block spans 4 activation blocks and one
//! Q2_0 block spans 2.
//!
//! The smallest clef-flash files use these types for nearly every tensor, so the SIMD kernels here
//! are the hot loop of those models (llama.cpp's wasm build runs both scalar). Per activation block
//! k (activation sum `A_k` = `bsums[2k] + bsums[2k+1]`):
//! * Q1_0: `Σ ±a = A_k − 2·C_k` with `C_k` the sum of the activations whose sign bit is clear.
//!   The bits are broadcast to bytes with a tree of unpacks, turned into byte masks (and + eq 0),
//!   the masked activations are summed pairwise to i16 — no multiplication at all.
//! * Q2_0: `Σ (q−1)·a = Σ q·a − A_k`; the 2-bit codes are unpacked with shifts and masks and
//!   multiplied with `i32x4.dot_i16x8_s` (see `simd::q2_block` for the cheap widening).
//!
//! With relaxed SIMD (the `+relaxed-simd` build) both `vec_dot`s use
//! `i16x8.relaxed_dot_i8x16_i7x16_s` (x64 V8: one `pmaddubsw`), whose second operand must be 7-bit
//! unsigned. It sums adjacent lanes, so the bits / codes need not be isolated as 0/1 or 0..3: it
//! is enough that both lanes of a pair carry the same power-of-two scale, which the following
//! `i32x4.dot_i16x8_s` evens out while it widens (details at `simd::q1_block`, `simd::q2_block`):
//! * Q1_0: `Σ ±a = 2·S_k − A_k` with `S_k` the sum under *set* bits; per 16 weights one `and` and
//!   one relaxed dot (SIMD128: and, eq, and, extadd).
//! * Q2_0: per 16 weights one `and` and one relaxed dot on codes masked in place (≤ 48), and 6
//!   instead of 12 unpacks per block.
//!
//! Measured (GB/s of weights, 4096×4096 matvec, one thread, Node 20 on x64, fastest call):
//! Q1_0 2.48 → 3.13, Q2_0 3.56 → 5.62. Four blocks per step (one fp16 conversion for four `d`)
//! gave +10 % (Q1_0) and +6 % (Q2_0) of that; broadcasting the Q1_0 bytes with
//! `i8x16.relaxed_swizzle` (`pshufb` with masks kept in registers) instead of the unpack tree was
//! 3 % slower.
//!
//! Natively `vec_dot` is a scalar version of the same integer identities.

use super::gemm::Decoded;
use super::f16_bits_to_f32;
use super::{f16_at, sanitize_f16, GgmlType, QuantKernels, Q8};

pub static KERNELS: &[QuantKernels] = &[
    QuantKernels {
        ty: GgmlType::Q1_0,
        dequantize: dequantize_q1_0,
        vec_dot_ref: vec_dot_q1_0_ref,
        vec_dot: vec_dot_q1_0,
        decode_ref: decode_ref_q1_0,
        decode: decode_q1_0,
        sanitize: sanitize_d0,
    },
    QuantKernels {
        ty: GgmlType::Q2_0,
        dequantize: dequantize_q2_0,
        vec_dot_ref: vec_dot_q2_0_ref,
        vec_dot: vec_dot_q2_0,
        decode_ref: decode_ref_q2_0,
        decode: decode_q2_0,
        sanitize: sanitize_d0,
    },
];

/// Both types keep their only fp16 field, `d`, at offset 0.
fn sanitize_d0(block: &mut [u8]) {
    sanitize_f16(block, 0);
}

#[inline(always)]
fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

// =============================================================================================
// Q1_0 — 128 elements in 18 bytes (1.125 bpw).
//
//   offset 0  : d       fp16
//   offset 2  : qs[16]  sign bits, LSB first: element j is bit (j % 8) of qs[j / 8]
//
//   y[j] = bit ? +d : −d
// =============================================================================================

const Q1_0_BYTES: usize = 18;
const Q1_0_ELEMS: usize = 128;

fn dequantize_q1_0(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(Q1_0_BYTES).zip(out.chunks_exact_mut(Q1_0_ELEMS)) {
        let d = f16_at(blk, 0);
        for (j, yj) in y.iter_mut().enumerate() {
            let bit = (blk[2 + j / 8] >> (j % 8)) & 1;
            *yj = if bit != 0 { d } else { -d };
        }
    }
}

/// `Σ_i d_w,i · Σ_{k<4} d_a,k · Σ_{l<32} ±q_a` (spec §5.4).
fn vec_dot_q1_0_ref(row: &[u8], act: Q8<'_>) -> f32 {
    let mut sum = 0.0f32;
    for (i, blk) in row.chunks_exact(Q1_0_BYTES).enumerate() {
        let mut sblk = 0.0f32;
        for k in 0..4 {
            let mut isum = 0i32;
            for l in 0..32 {
                let j = 32 * k + l;
                let a = act.qs[Q1_0_ELEMS * i + j] as i32;
                isum += if (blk[2 + j / 8] >> (j % 8)) & 1 != 0 { a } else { -a };
            }
            sblk += act.d[4 * i + k] * isum as f32;
        }
        sum += f16_at(blk, 0) * sblk;
    }
    sum
}

/// GEMM form: `q = ±1`, `d` repeated over the block's four 32-element activation blocks.
fn decode_ref_q1_0(row: &[u8], out: &mut Decoded) {
    out.check(GgmlType::Q1_0, row);
    for (i, blk) in row.chunks_exact(Q1_0_BYTES).enumerate() {
        for j in 0..Q1_0_ELEMS {
            out.q[Q1_0_ELEMS * i + j] = if (blk[2 + j / 8] >> (j % 8)) & 1 != 0 { 1 } else { -1 };
        }
        out.d[4 * i..4 * i + 4].fill(f16_at(blk, 0));
    }
}

fn decode_q1_0(row: &[u8], out: &mut Decoded) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build; lengths are checked inside.
        return unsafe { simd::decode_q1_0(row, out) };
    }
    #[allow(unreachable_code)]
    decode_ref_q1_0(row, out)
}

fn vec_dot_q1_0(row: &[u8], act: Q8<'_>) -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build; lengths are checked inside.
        return unsafe { simd::vec_dot_q1_0(row, act) };
    }
    #[allow(unreachable_code)]
    vec_dot_q1_0_native(row, act)
}

/// Native fallback: the same `A_k − 2·C_k` form as the SIMD kernel, scalar.
#[allow(dead_code)]
fn vec_dot_q1_0_native(row: &[u8], act: Q8<'_>) -> f32 {
    let nb = row.len() / Q1_0_BYTES;
    assert!(act.qs.len() >= nb * Q1_0_ELEMS && act.d.len() >= 4 * nb && act.bsums.len() >= 8 * nb);
    let mut sum = 0.0f32;
    for (i, blk) in row.chunks_exact(Q1_0_BYTES).enumerate() {
        let a = &act.qs[Q1_0_ELEMS * i..Q1_0_ELEMS * (i + 1)];
        let mut sblk = 0.0f32;
        for k in 0..4 {
            let mut clear = 0i32;
            for (l, &al) in a[32 * k..32 * k + 32].iter().enumerate() {
                let bits = blk[2 + 4 * k + l / 8];
                clear += (1 - ((bits >> (l % 8)) & 1) as i32) * al as i32;
            }
            let all = act.bsums[8 * i + 2 * k] as i32 + act.bsums[8 * i + 2 * k + 1] as i32;
            sblk += act.d[4 * i + k] * (all - 2 * clear) as f32;
        }
        sum += f16_bits_to_f32(u16_at(blk, 0)) * sblk;
    }
    sum
}

// =============================================================================================
// Q2_0 — 64 elements in 18 bytes (2.25 bpw).
//
//   offset 0  : d       fp16
//   offset 2  : qs[16]  2-bit codes: element j is bits 2·(j % 4) .. 2·(j % 4)+1 of qs[j / 4]
//
//   y[j] = (q − 1) · d,  q ∈ {0,1,2,3}  ⇒  {−1, 0, +1, +2} · d
// =============================================================================================

const Q2_0_BYTES: usize = 18;
const Q2_0_ELEMS: usize = 64;

#[inline(always)]
fn q2_0_code(blk: &[u8], j: usize) -> i32 {
    ((blk[2 + j / 4] >> (2 * (j % 4))) & 3) as i32
}

fn dequantize_q2_0(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(Q2_0_BYTES).zip(out.chunks_exact_mut(Q2_0_ELEMS)) {
        let d = f16_at(blk, 0);
        for (j, yj) in y.iter_mut().enumerate() {
            *yj = (q2_0_code(blk, j) - 1) as f32 * d;
        }
    }
}

/// `Σ_i d_w,i · Σ_{k<2} d_a,k · Σ_{l<32} (q_w − 1)·q_a` (spec §5.4).
fn vec_dot_q2_0_ref(row: &[u8], act: Q8<'_>) -> f32 {
    let mut sum = 0.0f32;
    for (i, blk) in row.chunks_exact(Q2_0_BYTES).enumerate() {
        let mut sblk = 0.0f32;
        for k in 0..2 {
            let mut isum = 0i32;
            for l in 0..32 {
                let j = 32 * k + l;
                isum += (q2_0_code(blk, j) - 1) * act.qs[Q2_0_ELEMS * i + j] as i32;
            }
            sblk += act.d[2 * i + k] * isum as f32;
        }
        sum += f16_at(blk, 0) * sblk;
    }
    sum
}

/// GEMM form: `q = code − 1`, `d` repeated over the block's two 32-element activation blocks.
fn decode_ref_q2_0(row: &[u8], out: &mut Decoded) {
    out.check(GgmlType::Q2_0, row);
    for (i, blk) in row.chunks_exact(Q2_0_BYTES).enumerate() {
        for j in 0..Q2_0_ELEMS {
            out.q[Q2_0_ELEMS * i + j] = (q2_0_code(blk, j) - 1) as i16;
        }
        out.d[2 * i..2 * i + 2].fill(f16_at(blk, 0));
    }
}

fn decode_q2_0(row: &[u8], out: &mut Decoded) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build; lengths are checked inside.
        return unsafe { simd::decode_q2_0(row, out) };
    }
    #[allow(unreachable_code)]
    decode_ref_q2_0(row, out)
}

fn vec_dot_q2_0(row: &[u8], act: Q8<'_>) -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build; lengths are checked inside.
        return unsafe { simd::vec_dot_q2_0(row, act) };
    }
    #[allow(unreachable_code)]
    vec_dot_q2_0_native(row, act)
}

/// Native fallback: `Σ q·a − Σ a` per activation block, scalar.
#[allow(dead_code)]
fn vec_dot_q2_0_native(row: &[u8], act: Q8<'_>) -> f32 {
    let nb = row.len() / Q2_0_BYTES;
    assert!(act.qs.len() >= nb * Q2_0_ELEMS && act.d.len() >= 2 * nb && act.bsums.len() >= 4 * nb);
    let mut sum = 0.0f32;
    for (i, blk) in row.chunks_exact(Q2_0_BYTES).enumerate() {
        let a = &act.qs[Q2_0_ELEMS * i..Q2_0_ELEMS * (i + 1)];
        let mut sblk = 0.0f32;
        for k in 0..2 {
            let mut qa = 0i32;
            for (l, &al) in a[32 * k..32 * k + 32].iter().enumerate() {
                qa += q2_0_code(blk, 32 * k + l) * al as i32;
            }
            let all = act.bsums[4 * i + 2 * k] as i32 + act.bsums[4 * i + 2 * k + 1] as i32;
            sblk += act.d[2 * i + k] * (qa - all) as f32;
        }
        sum += f16_bits_to_f32(u16_at(blk, 0)) * sblk;
    }
    sum
}

// =============================================================================================
// SIMD128 kernels.

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! What V8 (the engine these kernels are tuned for; measured on x64) does with them shaped the
    //! code: a constant `i8x16.shuffle` that is not an unpack / `pshufd`-like pattern costs ~5
    //! instructions (its pshufb mask is rebuilt through general registers at every use), so bytes
    //! are broadcast with trees of unpacks (1 instruction each); `i8x16.ne` costs 3, so masks come
    //! from `eq 0` (sums over *clear* bits); and V8 schedules every load of a loop iteration first,
    //! spilling what does not fit in 16 registers, so `fence` (a volatile store) splits the work
    //! into chunks whose loads stay in registers (measured +8 % for Q1_0 and Q2_0, +40 % for Q8_0).
    use super::super::legacy::simd::{fence, hsum4_i32x4};
    use crate::quant::simd::f16_lanes;
    use super::super::simd::{hsum_f32, store_i8x16};
    use super::{Decoded, Q1_0_BYTES, Q1_0_ELEMS, Q2_0_BYTES, Q2_0_ELEMS, Q8};
    use core::arch::wasm32::*;

    /// Lane i tests bit (i % 8) of the byte broadcast into it.
    const BIT_OF_LANE: v128 = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);

    /// Byte-interleaves `x` with itself: lo = [x0,x0,x1,x1,…,x7,x7], hi = the same for x8..x15.
    #[inline(always)]
    fn dup8(x: v128) -> (v128, v128) {
        (
            i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(x, x),
            i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(x, x),
        )
    }

    /// Same with 16-bit lanes: lo = [x0,x0,x1,x1,x2,x2,x3,x3], hi = x4..x7.
    #[inline(always)]
    fn dup16(x: v128) -> (v128, v128) {
        (
            i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(x, x),
            i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(x, x),
        )
    }

    /// Same with 32-bit lanes.
    #[inline(always)]
    fn dup32(x: v128) -> (v128, v128) {
        (i32x4_shuffle::<0, 4, 1, 5>(x, x), i32x4_shuffle::<2, 6, 3, 7>(x, x))
    }

    /// Four i16x8 vectors → `[Σp0, Σp1, Σp2, Σp3]` as i32x4 (each sum must fit in i16).
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    fn hsum4_i16x8(p0: v128, p1: v128, p2: v128, p3: v128) -> v128 {
        // [p0 (0+4), p0 (1+5), p1 (0+4), p1 (1+5), p0 (2+6), p0 (3+7), p1 (2+6), p1 (3+7)]
        let t01 = i16x8_add(i32x4_shuffle::<0, 4, 1, 5>(p0, p1), i32x4_shuffle::<2, 6, 3, 7>(p0, p1));
        let t23 = i16x8_add(i32x4_shuffle::<0, 4, 1, 5>(p2, p3), i32x4_shuffle::<2, 6, 3, 7>(p2, p3));
        // [p0 a, p0 b, p1 a, p1 b, p2 a, p2 b, p3 a, p3 b]
        let r = i16x8_add(i64x2_shuffle::<0, 2>(t01, t23), i64x2_shuffle::<1, 3>(t01, t23));
        i32x4_extadd_pairwise_i16x8(r)
    }

    /// Σ of the activations at `a` whose weight bit is clear, pairwise in i16; `sel` holds the
    /// two sign bytes of these 16 elements, each broadcast over 8 lanes.
    ///
    /// # Safety
    /// `a..a+16` must be readable.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    unsafe fn q1_clear(sel: v128, a: *const i8, zero: v128) -> v128 {
        let clear = i8x16_eq(v128_and(sel, BIT_OF_LANE), zero);
        i16x8_extadd_pairwise_i8x16(v128_and(clear, v128_load(a as *const v128)))
    }

    /// `[C0, C1, C2, C3]`: for each 32-element activation block of one Q1_0 block, the sum of
    /// the activations whose weight bit is clear.
    ///
    /// # Safety
    /// `blk..blk+18` and `a..a+128` must be readable.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    unsafe fn q1_block(blk: *const u8, a: *const i8, zero: v128) -> v128 {
        // Broadcast tree: s[v] = [byte 2v × 8, byte 2v+1 × 8] for the 16 elements 16v..16v+16.
        let (u0, u1) = dup8(v128_load(blk.add(2) as *const v128));
        let (w0, w1) = dup16(u0);
        let (w2, w3) = dup16(u1);
        let (s0, s1) = dup32(w0);
        let (s2, s3) = dup32(w1);
        let (s4, s5) = dup32(w2);
        let (s6, s7) = dup32(w3);
        let c0 = i16x8_add(q1_clear(s0, a, zero), q1_clear(s1, a.add(16), zero));
        let c1 = fence(i16x8_add(q1_clear(s2, a.add(32), zero), q1_clear(s3, a.add(48), zero)));
        let c2 = i16x8_add(q1_clear(s4, a.add(64), zero), q1_clear(s5, a.add(80), zero));
        let c3 = i16x8_add(q1_clear(s6, a.add(96), zero), q1_clear(s7, a.add(112), zero));
        hsum4_i16x8(c0, c1, c2, c3)
    }

    /// Relaxed SIMD: `64·[S0, S1, S2, S3]`, where `S_k` is the sum of the activations of
    /// activation block k whose weight bit is *set* (`Σ ±a = 2·S_k − A_k`).
    ///
    /// `i16x8.relaxed_dot_i8x16_i7x16_s` multiplies the activations with 7-bit operands and sums
    /// lanes pairwise, so the bits need not become 0/1: it is enough that the two lanes of a pair
    /// test the same bit position. Interleaving `x` (the 16 sign bytes) with `x >> 1` bytewise
    /// and repeating each 16-bit word four times (the same 14 unpacks as the SIMD128 broadcast
    /// tree) puts `[x_m, (x>>1)_m] × 4` at the 8 lanes of elements 8m..8m+8; `and` with
    /// `[1, 1, 4, 4, 16, 16, 64, 64]` leaves bit 2j of `x_m` (element 8m + 2j) and bit 2j of
    /// `x_m >> 1` (element 8m + 2j + 1), both as `4^j` ≤ 64. That is one `and` and one dot per 16
    /// elements (SIMD128: and, eq, and, extadd), and `i32x4.dot_i16x8_s` with
    /// `[64, 16, 4, 1, …]` evens the scales while it widens, which replaces the i16 reduction.
    /// Two dots are added in i16 first: each lane is at most 2·64·127 = 16256, so two fit i16
    /// because activations are in −127..=127 (the quantisers in `act.rs` never produce −128).
    ///
    /// # Safety
    /// `blk..blk+18` and `a..a+128` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn q1_block(blk: *const u8, a: *const i8) -> v128 {
        let pair_bit = u8x16(1, 1, 4, 4, 16, 16, 64, 64, 1, 1, 4, 4, 16, 16, 64, 64);
        let even_scales = i16x8(64, 16, 4, 1, 64, 16, 4, 1);
        let x = v128_load(blk.add(2) as *const v128);
        // Bit 7 of the even bytes of `x >> 1` comes from the next byte; the mask drops it.
        let (u0, u1) = dup8_pair(x, u16x8_shr(x, 1));
        let (w0, w1) = dup16(u0);
        let (w2, w3) = dup16(u1);
        let (s0, s1) = dup32(w0);
        let (s2, s3) = dup32(w1);
        let (s4, s5) = dup32(w2);
        let (s6, s7) = dup32(w3);
        let dot = |s: v128, t: usize| {
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(a.add(16 * t) as *const v128), v128_and(s, pair_bit))
        };
        // 64·(partial sums of S_k) for activation block k = elements 32k..32k+32 (vectors 2k, 2k+1).
        let c = |s: v128, s_next: v128, k: usize| {
            i32x4_dot_i16x8(i16x8_add(dot(s, 2 * k), dot(s_next, 2 * k + 1)), even_scales)
        };
        let c0 = c(s0, s1, 0);
        let c1 = fence(c(s2, s3, 1));
        let c2 = c(s4, s5, 2);
        let c3 = c(s6, s7, 3);
        hsum4_i32x4(c0, c1, c2, c3)
    }

    /// Q1_0 · Q8_0. Per 32-element activation block k with activation sum `A_k` and `C_k` = Σ of
    /// the activations under clear bits: `Σ ±a = A_k − 2·C_k`; the block's value is
    /// `d_w · Σ_k d_a,k · (A_k − 2·C_k)`. Two blocks per step share the fp16 conversion.
    ///
    /// # Safety
    /// Requires simd128. Slice lengths are checked before any unchecked load.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q1_0(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = row.len() / Q1_0_BYTES;
        assert!(row.len() == nb * Q1_0_BYTES);
        assert!(act.qs.len() >= nb * Q1_0_ELEMS && act.d.len() >= 4 * nb && act.bsums.len() >= 8 * nb);
        let zero = i8x16_splat(0);
        let mut acc = f32x4_splat(0.0);
        // The f32 update of block i (activation sums, scales) given its clear sums.
        let update = |acc: v128, i: usize, clear: v128, dw: v128| {
            // SAFETY: d 4i..4i+4 and bsums 8i..8i+8 are in bounds for every block i < nb.
            let all = i32x4_extadd_pairwise_i16x8(v128_load(act.bsums.as_ptr().add(8 * i) as *const v128));
            let da = v128_load(act.d.as_ptr().add(4 * i) as *const v128);
            let isum = i32x4_sub(all, i32x4_shl(clear, 1));
            f32x4_add(acc, f32x4_mul(dw, f32x4_mul(da, f32x4_convert_i32x4(isum))))
        };
        let mut i = 0;
        while i + 2 <= nb {
            // SAFETY: blocks i, i+1 are bytes 18i..18i+36 of `row` (each 16-byte load at +2 ends
            // exactly at its block's end); activations 128i..128i+256 are in bounds.
            let blk = row.as_ptr().add(Q1_0_BYTES * i);
            let a = act.qs.as_ptr().add(Q1_0_ELEMS * i);
            let c0 = fence(q1_block(blk, a, zero));
            let c1 = q1_block(blk.add(Q1_0_BYTES), a.add(Q1_0_ELEMS), zero);
            let h0 = u16::from_le_bytes([*blk, *blk.add(1)]) as i32;
            let h1 = u16::from_le_bytes([*blk.add(Q1_0_BYTES), *blk.add(Q1_0_BYTES + 1)]) as i32;
            let d = f16_lanes(i32x4(h0, h1, h0, h1));
            acc = update(acc, i, c0, i32x4_shuffle::<0, 0, 0, 0>(d, d));
            acc = update(acc, i + 1, c1, i32x4_shuffle::<1, 1, 1, 1>(d, d));
            i += 2;
        }
        if i < nb {
            // SAFETY: block i and its activations are in bounds (i < nb).
            let blk = row.as_ptr().add(Q1_0_BYTES * i);
            let c = q1_block(blk, act.qs.as_ptr().add(Q1_0_ELEMS * i), zero);
            let dw = f32x4_splat(super::f16_bits_to_f32(u16::from_le_bytes([*blk, *blk.add(1)])));
            acc = update(acc, i, c, dw);
        }
        hsum_f32(acc)
    }

    /// Q1_0 · Q8_0 with relaxed SIMD (see `q1_block`): per activation block k,
    /// `Σ ±a = 2·S_k − A_k`; four blocks per step share one fp16 conversion (+10 % over two).
    ///
    /// # Safety
    /// Requires simd128 and relaxed-simd. Slice lengths are checked before any unchecked load.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q1_0(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = row.len() / Q1_0_BYTES;
        assert!(row.len() == nb * Q1_0_BYTES);
        assert!(act.qs.len() >= nb * Q1_0_ELEMS && act.d.len() >= 4 * nb && act.bsums.len() >= 8 * nb);
        // The f32 update of block i given its `64·S_k` and `d_w` splatted.
        let update = |acc: v128, i: usize, s64: v128, dw: v128| {
            // SAFETY: d 4i..4i+4 and bsums 8i..8i+8 are in bounds for every block i < nb.
            let all = i32x4_extadd_pairwise_i16x8(v128_load(act.bsums.as_ptr().add(8 * i) as *const v128));
            let da = v128_load(act.d.as_ptr().add(4 * i) as *const v128);
            let isum = i32x4_sub(i32x4_shr(s64, 5), all);
            f32x4_add(acc, f32x4_mul(dw, f32x4_mul(da, f32x4_convert_i32x4(isum))))
        };
        // SAFETY (callers): `blk..blk+2` is in `row`.
        let d_bits = |blk: *const u8| u16::from_le_bytes([*blk, *blk.add(1)]) as i32;
        let mut acc = f32x4_splat(0.0);
        let mut i = 0;
        while i + 4 <= nb {
            // SAFETY: blocks i..i+4 are bytes 18i..18i+72 of `row` (each 16-byte load at +2 ends
            // exactly at its block's end); activations 128i..128i+512 are in bounds.
            let blk = row.as_ptr().add(Q1_0_BYTES * i);
            let a = act.qs.as_ptr().add(Q1_0_ELEMS * i);
            let s0 = fence(q1_block(blk, a));
            let s1 = fence(q1_block(blk.add(Q1_0_BYTES), a.add(Q1_0_ELEMS)));
            let s2 = fence(q1_block(blk.add(2 * Q1_0_BYTES), a.add(2 * Q1_0_ELEMS)));
            let s3 = q1_block(blk.add(3 * Q1_0_BYTES), a.add(3 * Q1_0_ELEMS));
            let h = |k: usize| d_bits(blk.add(k * Q1_0_BYTES));
            let d = f16_lanes(i32x4(h(0), h(1), h(2), h(3)));
            acc = update(acc, i, s0, i32x4_shuffle::<0, 0, 0, 0>(d, d));
            acc = update(acc, i + 1, s1, i32x4_shuffle::<1, 1, 1, 1>(d, d));
            acc = update(acc, i + 2, s2, i32x4_shuffle::<2, 2, 2, 2>(d, d));
            acc = update(acc, i + 3, s3, i32x4_shuffle::<3, 3, 3, 3>(d, d));
            i += 4;
        }
        while i < nb {
            // SAFETY: block i and its activations are in bounds (i < nb).
            let blk = row.as_ptr().add(Q1_0_BYTES * i);
            let s = q1_block(blk, act.qs.as_ptr().add(Q1_0_ELEMS * i));
            let dw = f32x4_splat(super::f16_bits_to_f32(d_bits(blk) as u16));
            acc = update(acc, i, s, dw);
            i += 1;
        }
        hsum_f32(acc)
    }

    /// Q1_0 row → GEMM form: the sign bits are broadcast to bytes with the same unpack tree as
    /// `q1_block`, and `clear | 1` turns the clear-bit masks (−1) into −1 and set bits into +1.
    ///
    /// # Safety
    /// Requires simd128; lengths are checked by `Decoded::check`.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_q1_0(row: &[u8], out: &mut Decoded) {
        let n = out.check(super::GgmlType::Q1_0, row);
        let (zero, one) = (i8x16_splat(0), i8x16_splat(1));
        let q = out.q.as_mut_ptr();
        for i in 0..n / Q1_0_ELEMS {
            // SAFETY: block i is bytes 18i..18i+18 of `row` (the 16-byte load at +2 ends at its
            // end); its 128 weights are q[128i..128i+128].
            let blk = row.as_ptr().add(Q1_0_BYTES * i);
            let (u0, u1) = dup8(v128_load(blk.add(2) as *const v128));
            let (w0, w1) = dup16(u0);
            let (w2, w3) = dup16(u1);
            let (s0, s1) = dup32(w0);
            let (s2, s3) = dup32(w1);
            let (s4, s5) = dup32(w2);
            let (s6, s7) = dup32(w3);
            for (v, s) in [s0, s1, s2, s3, s4, s5, s6, s7].into_iter().enumerate() {
                let clear = i8x16_eq(v128_and(s, BIT_OF_LANE), zero);
                store_i8x16(q.add(Q1_0_ELEMS * i + 16 * v), v128_or(clear, one));
            }
            let d = super::f16_bits_to_f32(u16::from_le_bytes([*blk, *blk.add(1)]));
            out.d[4 * i..4 * i + 4].fill(d);
        }
    }

    /// Q2_0 row → GEMM form: field k of byte i is element 4i + k, so the four fields (16 bytes
    /// each) are interleaved bytewise (y0, y1 and y2, y3) and then in 16-bit pairs.
    ///
    /// # Safety
    /// Requires simd128; lengths are checked by `Decoded::check`.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_q2_0(row: &[u8], out: &mut Decoded) {
        let n = out.check(super::GgmlType::Q2_0, row);
        let (three, one) = (u8x16_splat(3), i8x16_splat(1));
        let q = out.q.as_mut_ptr();
        for i in 0..n / Q2_0_ELEMS {
            // SAFETY: block i is bytes 18i..18i+18 of `row`; its weights are q[64i..64i+64].
            let blk = row.as_ptr().add(Q2_0_BYTES * i);
            let x = v128_load(blk.add(2) as *const v128);
            let y0 = v128_and(x, three);
            let y1 = v128_and(u16x8_shr(x, 2), three);
            let y2 = v128_and(u16x8_shr(x, 4), three);
            let y3 = v128_and(u16x8_shr(x, 6), three);
            let (e01_lo, e01_hi) = dup8_pair(y0, y1);
            let (e23_lo, e23_hi) = dup8_pair(y2, y3);
            let o = q.add(Q2_0_ELEMS * i);
            store_i8x16(o, i8x16_sub(i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(e01_lo, e23_lo), one));
            store_i8x16(o.add(16), i8x16_sub(i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(e01_lo, e23_lo), one));
            store_i8x16(o.add(32), i8x16_sub(i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(e01_hi, e23_hi), one));
            store_i8x16(o.add(48), i8x16_sub(i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(e01_hi, e23_hi), one));
            let d = super::f16_bits_to_f32(u16::from_le_bytes([*blk, *blk.add(1)]));
            out.d[2 * i..2 * i + 2].fill(d);
        }
    }

    /// Bytewise interleave of `a` and `b`: lo = [a0, b0, a1, b1, …, a7, b7], hi = the same for 8..15.
    #[inline(always)]
    fn dup8_pair(a: v128, b: v128) -> (v128, v128) {
        (
            i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(a, b),
            i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(a, b),
        )
    }

    /// i32x4 partial sums of `256 · Σ q·a` for one Q2_0 block's two 32-element halves.
    ///
    /// The 2-bit codes are unpacked with shifts and masks into y_k (field k of every byte), then
    /// interleaved (unpacks, one instruction each) so that 16-bit lanes hold the zero-extended
    /// codes of the even elements (fields 0, 2) or of the odd elements (fields 1, 3) of 16
    /// consecutive elements. The matching activations are `256·a` taken straight from the loaded
    /// bytes (even: shift left by 8; odd: mask the high byte), so the products are `256·q·a` and
    /// one `i32x4.dot_i16x8_s` does eight multiply-adds.
    ///
    /// # Safety
    /// `blk..blk+18` and `a..a+64` must be readable.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    unsafe fn q2_block(blk: *const u8, a: *const i8, three: v128, zero: v128) -> (v128, v128) {
        let high_byte = u16x8_splat(0xff00);
        let x = v128_load(blk.add(2) as *const v128);
        let y0 = v128_and(x, three);
        let y1 = v128_and(u16x8_shr(x, 2), three);
        let y2 = v128_and(u16x8_shr(x, 4), three);
        let y3 = v128_and(u16x8_shr(x, 6), three);
        // Even elements 0..32 and 32..64 (fields 0 and 2 alternating), odd likewise.
        let e_lo = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(y0, y2);
        let e_hi = i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(y0, y2);
        let o_lo = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(y1, y3);
        let o_hi = i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(y1, y3);
        // Zero-extended 16-bit codes of the first / second 8 bytes of `v`.
        macro_rules! zext_lo {
            ($v:expr) => {
                i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>($v, zero)
            };
        }
        macro_rules! zext_hi {
            ($v:expr) => {
                i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>($v, zero)
            };
        }
        let chunk = |t: usize, we: v128, wo: v128| {
            let av = v128_load(a.add(16 * t) as *const v128);
            let a_even = i16x8_shl(av, 8);
            let a_odd = v128_and(av, high_byte);
            i32x4_add(i32x4_dot_i16x8(we, a_even), i32x4_dot_i16x8(wo, a_odd))
        };
        let h0 = fence(i32x4_add(
            chunk(0, zext_lo!(e_lo), zext_lo!(o_lo)),
            chunk(1, zext_hi!(e_lo), zext_hi!(o_lo)),
        ));
        let h1 = i32x4_add(
            chunk(2, zext_lo!(e_hi), zext_lo!(o_hi)),
            chunk(3, zext_hi!(e_hi), zext_hi!(o_hi)),
        );
        (h0, h1)
    }

    /// Relaxed SIMD: i32x4 partial sums of `16 · Σ q·a` for one Q2_0 block's two 32-element
    /// halves, with one `i16x8.relaxed_dot_i8x16_i7x16_s` per 16 elements.
    ///
    /// The relaxed dot needs the codes as bytes in element order (lane i = element i), and it
    /// sums lanes pairwise, so a pair only has to share one scale: byte m of `x` holds the fields
    /// f0..f3 of elements 4m..4m+3 at bits 0, 2, 4, 6, and byte m of `x >> 2` holds f1 and f3 at
    /// bits 0 and 4. Interleaving `x` with `x >> 2` bytewise and repeating each 16-bit word twice
    /// (three unpack levels' worth: 2 + 4 unpacks per block instead of the 8 of a full field
    /// interleave) puts `[x_m, (x>>2)_m, x_m, (x>>2)_m]` at lanes 4m..4m+3; masking with
    /// `[0x03, 0x03, 0x30, 0x30]` leaves `f0, f1` (pair at scale 1) and `16·f2, 16·f3` (pair at
    /// scale 16), all ≤ 48 and so valid 7-bit operands. `i32x4.dot_i16x8_s` with `[16, 1, …]`
    /// then evens the scales out (`16·Σ q·a`) while widening. The i16 lanes of two relaxed dots
    /// are added first: each is at most 2·48·127, two fit i16.
    ///
    /// # Safety
    /// `blk..blk+18` and `a..a+64` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn q2_block(blk: *const u8, a: *const i8) -> (v128, v128) {
        let field_mask = u8x16(3, 3, 0x30, 0x30, 3, 3, 0x30, 0x30, 3, 3, 0x30, 0x30, 3, 3, 0x30, 0x30);
        let even_scales = i16x8(16, 1, 16, 1, 16, 1, 16, 1);
        let x = v128_load(blk.add(2) as *const v128);
        // Bits 6, 7 of the odd bytes of `x >> 2` come from the next byte; the mask drops them.
        let (u0, u1) = dup8_pair(x, u16x8_shr(x, 2));
        let (w0, w1) = dup16(u0);
        let (w2, w3) = dup16(u1);
        let dot = |w: v128, t: usize| {
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(a.add(16 * t) as *const v128), v128_and(w, field_mask))
        };
        let h0 = i32x4_dot_i16x8(i16x8_add(dot(w0, 0), dot(w1, 1)), even_scales);
        let h1 = i32x4_dot_i16x8(i16x8_add(dot(w2, 2), dot(w3, 3)), even_scales);
        (h0, h1)
    }

    /// Q2_0 · Q8_0: `Σ d_w · d_a,k · (Σ q·a − Σ a)`, two blocks (four activation blocks) per
    /// step so that the reduction and the float work are shared.
    ///
    /// # Safety
    /// Requires simd128. Slice lengths are checked before any unchecked load.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q2_0(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = row.len() / Q2_0_BYTES;
        assert!(row.len() == nb * Q2_0_BYTES);
        assert!(act.qs.len() >= nb * Q2_0_ELEMS && act.d.len() >= 2 * nb && act.bsums.len() >= 4 * nb);
        let three = u8x16_splat(3);
        let zero = u8x16_splat(0);
        let mut acc = f32x4_splat(0.0);
        let mut i = 0;
        while i + 2 <= nb {
            // SAFETY: blocks i, i+1 lie in `row` (each 16-byte load at +2 ends at its block's
            // end); activations 64i..64i+128, d 2i..2i+4 and bsums 4i..4i+8 are in bounds.
            let blk = row.as_ptr().add(Q2_0_BYTES * i);
            let a = act.qs.as_ptr().add(Q2_0_ELEMS * i);
            let (h0, h1) = q2_block(blk, a, three, zero);
            let h1 = fence(h1);
            let (h2, h3) = q2_block(blk.add(Q2_0_BYTES), a.add(Q2_0_ELEMS), three, zero);
            let qa = i32x4_shr(hsum4_i32x4(h0, h1, h2, h3), 8);
            let all = i32x4_extadd_pairwise_i16x8(v128_load(act.bsums.as_ptr().add(4 * i) as *const v128));
            let isum = i32x4_sub(qa, all);
            let da = v128_load(act.d.as_ptr().add(2 * i) as *const v128);
            let h0 = u16::from_le_bytes([*blk, *blk.add(1)]) as i32;
            let h1 = u16::from_le_bytes([*blk.add(Q2_0_BYTES), *blk.add(Q2_0_BYTES + 1)]) as i32;
            let dw = f16_lanes(i32x4(h0, h0, h1, h1));
            acc = f32x4_add(acc, f32x4_mul(dw, f32x4_mul(da, f32x4_convert_i32x4(isum))));
            i += 2;
        }
        if i < nb {
            // SAFETY: block i is in bounds (i < nb); lanes 2, 3 are zero.
            let blk = row.as_ptr().add(Q2_0_BYTES * i);
            let (h0, h1) = q2_block(blk, act.qs.as_ptr().add(Q2_0_ELEMS * i), three, zero);
            let qa = i32x4_shr(hsum4_i32x4(h0, h1, zero, zero), 8);
            let all = i32x4_extadd_pairwise_i16x8(v128_load64_zero(act.bsums.as_ptr().add(4 * i) as *const u64));
            let da = v128_load64_zero(act.d.as_ptr().add(2 * i) as *const u64);
            let dw = f32x4_splat(super::f16_bits_to_f32(u16::from_le_bytes([*blk, *blk.add(1)])));
            acc = f32x4_add(
                acc,
                f32x4_mul(dw, f32x4_mul(da, f32x4_convert_i32x4(i32x4_sub(qa, all)))),
            );
        }
        hsum_f32(acc)
    }

    /// `[Σ q·a]` of the four activation blocks of Q2_0 blocks `blk` and `blk + 18` (relaxed).
    ///
    /// # Safety
    /// `blk..blk+36` and `a..a+128` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn q2_pair(blk: *const u8, a: *const i8) -> v128 {
        let (h0, h1) = q2_block(blk, a);
        let h1 = fence(h1);
        let (h2, h3) = q2_block(blk.add(Q2_0_BYTES), a.add(Q2_0_ELEMS));
        i32x4_shr(hsum4_i32x4(h0, h1, h2, h3), 4)
    }

    /// Q2_0 · Q8_0 with relaxed SIMD (see `q2_block`): `Σ d_w · d_a,k · (Σ q·a − Σ a)`, four
    /// blocks per step so that one fp16 conversion serves four blocks' `d` (+6 % over two).
    ///
    /// # Safety
    /// Requires simd128 and relaxed-simd. Slice lengths are checked before any unchecked load.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q2_0(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = row.len() / Q2_0_BYTES;
        assert!(row.len() == nb * Q2_0_BYTES);
        assert!(act.qs.len() >= nb * Q2_0_ELEMS && act.d.len() >= 2 * nb && act.bsums.len() >= 4 * nb);
        // SAFETY (callers): `blk..blk+2` is in `row`.
        let d_bits = |blk: *const u8| u16::from_le_bytes([*blk, *blk.add(1)]) as i32;
        let mut acc = f32x4_splat(0.0);
        let mut i = 0;
        while i + 4 <= nb {
            // SAFETY: blocks i..i+4 lie in `row` (each 16-byte load at +2 ends at its block's
            // end); activations 64i..64i+256, d 2i..2i+8 and bsums 4i..4i+16 are in bounds.
            let blk = row.as_ptr().add(Q2_0_BYTES * i);
            let a = act.qs.as_ptr().add(Q2_0_ELEMS * i);
            let qa = [fence(q2_pair(blk, a)), q2_pair(blk.add(2 * Q2_0_BYTES), a.add(2 * Q2_0_ELEMS))];
            let h = |k: usize| d_bits(blk.add(k * Q2_0_BYTES));
            let d = f16_lanes(i32x4(h(0), h(1), h(2), h(3)));
            // [d0, d0, d1, d1] and [d2, d2, d3, d3], one per activation block.
            let dw = [i32x4_shuffle::<0, 4, 1, 5>(d, d), i32x4_shuffle::<2, 6, 3, 7>(d, d)];
            for (p, (qa, dw)) in qa.into_iter().zip(dw).enumerate() {
                let bs = act.bsums.as_ptr().add(4 * (i + 2 * p));
                let all = i32x4_extadd_pairwise_i16x8(v128_load(bs as *const v128));
                let da = v128_load(act.d.as_ptr().add(2 * (i + 2 * p)) as *const v128);
                acc = f32x4_add(acc, f32x4_mul(dw, f32x4_mul(da, f32x4_convert_i32x4(i32x4_sub(qa, all)))));
            }
            i += 4;
        }
        while i < nb {
            // SAFETY: block i is in bounds (i < nb); lanes 2, 3 are zero.
            let blk = row.as_ptr().add(Q2_0_BYTES * i);
            let (h0, h1) = q2_block(blk, act.qs.as_ptr().add(Q2_0_ELEMS * i));
            let zero = i32x4_splat(0);
            let qa = i32x4_shr(hsum4_i32x4(h0, h1, zero, zero), 4);
            let all = i32x4_extadd_pairwise_i16x8(v128_load64_zero(act.bsums.as_ptr().add(4 * i) as *const u64));
            let da = v128_load64_zero(act.d.as_ptr().add(2 * i) as *const u64);
            let dw = f32x4_splat(super::f16_bits_to_f32(d_bits(blk) as u16));
            acc = f32x4_add(acc, f32x4_mul(dw, f32x4_mul(da, f32x4_convert_i32x4(i32x4_sub(qa, all)))));
            i += 1;
        }
        hsum_f32(acc)
    }
}
