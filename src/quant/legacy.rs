//! The "legacy" 32-element block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL (spec §5.2).
//!
//! Activations: Q8_0 for Q4_0 / Q5_0 / Q8_0 / IQ4_NL, Q8_1 for Q4_1 / Q5_1 (spec §5.4). Both have
//! one scale `d_a` per 32 elements, so weight block `i` meets activation block `i`. Q8_1's block sum
//! `s = d_a · Σ q_a` (the min term of Q4_1 / Q5_1) is `d_a · (bsums[2i] + bsums[2i+1])` here.
//!
//! Every type is written as `w = d · (q − OFF)` or `w = d · q + m` with an integer code `q`, so one
//! integer dot product per block suffices:
//! `Σ w·a = d · d_a · (Σ q·a − OFF·Σ a)  (+ m · d_a · Σ a)`, with `Σ a` from the activation `bsums`.
//! The SIMD kernels (wasm32 + simd128) decode a block's codes in registers, multiply them with the
//! activations in `i32x4.dot_i16x8_s` (widening both sides with shifts and masks instead of
//! `extend`, see `simd`), reduce four blocks' sums into one i32x4 and scale that with four weight
//! scales (fp16 → f32 converted four at a time) and four activation scales.
//!
//! This file also holds small helpers that `lowbit.rs` shares: on wasm, `simd::{hsum4_i32x4, fence}`.

use super::tables::KVALUES_IQ4NL;
use super::gemm::Decoded;
use super::{f16_at, sanitize_f16, GgmlType, QuantKernels, Q8};

pub static KERNELS: &[QuantKernels] = &[
    QuantKernels {
        ty: GgmlType::Q4_0,
        dequantize: dequantize_q4_0,
        vec_dot_ref: vec_dot_q4_0_ref,
        vec_dot: vec_dot_q4_0,
        decode_ref: decode_ref_q4_0,
        decode: decode_q4_0,
        sanitize: sanitize_d,
    },
    QuantKernels {
        ty: GgmlType::Q4_1,
        dequantize: dequantize_q4_1,
        vec_dot_ref: vec_dot_q4_1_ref,
        vec_dot: vec_dot_q4_1,
        decode_ref: decode_ref_q4_1,
        decode: decode_q4_1,
        sanitize: sanitize_dm,
    },
    QuantKernels {
        ty: GgmlType::Q5_0,
        dequantize: dequantize_q5_0,
        vec_dot_ref: vec_dot_q5_0_ref,
        vec_dot: vec_dot_q5_0,
        decode_ref: decode_ref_q5_0,
        decode: decode_q5_0,
        sanitize: sanitize_d,
    },
    QuantKernels {
        ty: GgmlType::Q5_1,
        dequantize: dequantize_q5_1,
        vec_dot_ref: vec_dot_q5_1_ref,
        vec_dot: vec_dot_q5_1,
        decode_ref: decode_ref_q5_1,
        decode: decode_q5_1,
        sanitize: sanitize_dm,
    },
    QuantKernels {
        ty: GgmlType::Q8_0,
        dequantize: dequantize_q8_0,
        vec_dot_ref: vec_dot_q8_0_ref,
        vec_dot: vec_dot_q8_0,
        decode_ref: decode_ref_q8_0,
        decode: decode_q8_0,
        sanitize: sanitize_d,
    },
    QuantKernels {
        ty: GgmlType::IQ4_NL,
        dequantize: dequantize_iq4_nl,
        vec_dot_ref: vec_dot_iq4_nl_ref,
        vec_dot: vec_dot_iq4_nl,
        decode_ref: decode_ref_iq4_nl,
        decode: decode_iq4_nl,
        sanitize: sanitize_d,
    },
];

// ---------------------------------------------------------------------------------------------
// Shared helpers.

/// Types whose only fp16 field is `d` at offset 0.
fn sanitize_d(block: &mut [u8]) {
    sanitize_f16(block, 0);
}

/// Types with `d` at offset 0 and `m` at offset 2 (Q4_1, Q5_1; `m` is usually negative).
fn sanitize_dm(block: &mut [u8]) {
    sanitize_f16(block, 0);
    sanitize_f16(block, 2);
}

/// Elements per block (all types in this file).
const QK: usize = 32;

/// The scalar reference shape shared by every type here: for each block,
/// `Σ_j q_j·a_j` in i32 times `d_w·d_a`, plus `m·d_a·Σ a` for the types with a min.
/// `code(blk, j)` returns the signed integer weight of element j (already minus any offset);
/// `min(blk)` the min `m` (or `None`).
#[inline(always)]
fn vec_dot_ref32(
    row: &[u8],
    act: Q8<'_>,
    bytes: usize,
    code: impl Fn(&[u8], usize) -> i32,
    min: impl Fn(&[u8]) -> Option<f32>,
) -> f32 {
    let mut sum = 0.0f32;
    for (i, blk) in row.chunks_exact(bytes).enumerate() {
        let a = &act.qs[QK * i..QK * (i + 1)];
        let isum: i32 = (0..QK).map(|j| code(blk, j) * a[j] as i32).sum();
        let da = act.d[i];
        sum += f16_at(blk, 0) * da * isum as f32;
        if let Some(m) = min(blk) {
            let asum = act.bsums[2 * i] as i32 + act.bsums[2 * i + 1] as i32;
            sum += m * (da * asum as f32);
        }
    }
    sum
}

/// Reference GEMM decoder of a row of 32-element blocks (one block per activation block):
/// `q` = `code` (as for [`vec_dot_ref32`]), `d` = the block's fp16 scale and, for the types with a
/// min, `m` = the block's min with `mn = 1` for both 16-element groups (`w = d·q + m`).
#[inline(always)]
fn decode_ref32(
    ty: GgmlType,
    row: &[u8],
    out: &mut Decoded,
    code: impl Fn(&[u8], usize) -> i32,
    min: impl Fn(&[u8]) -> f32,
) {
    out.check(ty, row);
    for (i, blk) in row.chunks_exact(ty.block_bytes()).enumerate() {
        for j in 0..QK {
            out.q[QK * i + j] = code(blk, j) as i16;
        }
        out.d[i] = f16_at(blk, 0);
        if ty.has_min() {
            out.m[i] = min(blk);
            out.mn[2 * i..2 * i + 2].fill(1);
        }
    }
}

/// Dispatches a row decoder to the SIMD one on wasm32 + simd128 and to the reference elsewhere.
macro_rules! fast_decode_or_ref {
    ($name:ident, $simd:ident, $reference:ident) => {
        fn $name(row: &[u8], out: &mut Decoded) {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build; lengths are checked inside.
                return unsafe { simd::$simd(row, out) };
            }
            #[allow(unreachable_code)]
            $reference(row, out)
        }
    };
}

/// 4-bit code of element j from 16 packed bytes at `off`: low nibbles are elements 0..16,
/// high nibbles elements 16..32.
#[inline(always)]
fn nibble(blk: &[u8], off: usize, j: usize) -> i32 {
    if j < 16 {
        (blk[off + j] & 15) as i32
    } else {
        (blk[off + j - 16] >> 4) as i32
    }
}

/// Bit j of the little-endian u32 `qh` at `off`.
#[inline(always)]
fn high_bit(blk: &[u8], off: usize, j: usize) -> i32 {
    ((blk[off + j / 8] >> (j % 8)) & 1) as i32
}

/// Dispatches to the SIMD kernel on wasm32 + simd128 and to the scalar reference elsewhere.
macro_rules! fast_or_ref {
    ($name:ident, $simd:ident, $reference:ident) => {
        fn $name(row: &[u8], act: Q8<'_>) -> f32 {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build; lengths are checked inside.
                return unsafe { simd::$simd(row, act) };
            }
            #[allow(unreachable_code)]
            $reference(row, act)
        }
    };
}

/// Four rows · one activation row at once: each row's result is its `vec_dot`'s bit for bit.
pub type VecDot4 = fn([&[u8]; 4], Q8<'_>) -> [f32; 4];

/// The four-row form of `ty`'s `vec_dot` ([`simd`]'s `dot_rows_n`: the four rows' blocks taken in
/// step, so a decoded token reads four streams of the matrix at block granularity — the
/// decode matvec's streams, `ops::rows_outer`): the types here, in the wasm builds. `None`
/// elsewhere (the scalar references natively).
pub fn vec_dot4(ty: GgmlType) -> Option<VecDot4> {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        macro_rules! four {
            ($rows:ident) => {{
                fn f(rows: [&[u8]; 4], act: Q8<'_>) -> [f32; 4] {
                    // SAFETY: simd128 is enabled for this build; lengths are checked inside.
                    unsafe { simd::$rows::<4>(rows, act) }
                }
                Some(f as VecDot4)
            }};
        }
        return match ty {
            GgmlType::Q4_0 => four!(rows_q4_0),
            GgmlType::Q4_1 => four!(rows_q4_1),
            GgmlType::Q5_0 => four!(rows_q5_0),
            GgmlType::Q5_1 => four!(rows_q5_1),
            GgmlType::Q8_0 => four!(rows_q8_0),
            GgmlType::IQ4_NL => four!(rows_iq4_nl),
            _ => None,
        };
    }
    #[allow(unreachable_code)]
    {
        let _ = ty;
        None
    }
}

// =============================================================================================
// Q4_0 — 32 elements in 18 bytes.
//
//   offset 0  : d       fp16
//   offset 2  : qs[16]  element j < 16: low nibble of qs[j]; element j+16: high nibble of qs[j]
//
//   y[j] = d · (q − 8)
// =============================================================================================

#[inline(always)]
fn q4_0_code(blk: &[u8], j: usize) -> i32 {
    nibble(blk, 2, j) - 8
}

fn dequantize_q4_0(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(18).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(blk, 0);
        for (j, yj) in y.iter_mut().enumerate() {
            *yj = d * q4_0_code(blk, j) as f32;
        }
    }
}

fn vec_dot_q4_0_ref(row: &[u8], act: Q8<'_>) -> f32 {
    vec_dot_ref32(row, act, 18, q4_0_code, |_| None)
}

fn decode_ref_q4_0(row: &[u8], out: &mut Decoded) {
    decode_ref32(GgmlType::Q4_0, row, out, q4_0_code, |_| 0.0)
}

fast_decode_or_ref!(decode_q4_0, decode_q4_0, decode_ref_q4_0);

fast_or_ref!(vec_dot_q4_0, vec_dot_q4_0, vec_dot_q4_0_ref);

// =============================================================================================
// Q4_1 — 32 elements in 20 bytes.
//
//   offset 0  : d       fp16
//   offset 2  : m       fp16
//   offset 4  : qs[16]  nibbles as in Q4_0
//
//   y[j] = d · q + m
// =============================================================================================

#[inline(always)]
fn q4_1_code(blk: &[u8], j: usize) -> i32 {
    nibble(blk, 4, j)
}

fn dequantize_q4_1(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(20).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
        for (j, yj) in y.iter_mut().enumerate() {
            *yj = d * q4_1_code(blk, j) as f32 + m;
        }
    }
}

fn vec_dot_q4_1_ref(row: &[u8], act: Q8<'_>) -> f32 {
    vec_dot_ref32(row, act, 20, q4_1_code, |b| Some(f16_at(b, 2)))
}

fn decode_ref_q4_1(row: &[u8], out: &mut Decoded) {
    decode_ref32(GgmlType::Q4_1, row, out, q4_1_code, |b| f16_at(b, 2))
}

fast_decode_or_ref!(decode_q4_1, decode_q4_1, decode_ref_q4_1);

fast_or_ref!(vec_dot_q4_1, vec_dot_q4_1, vec_dot_q4_1_ref);

// =============================================================================================
// Q5_0 — 32 elements in 22 bytes.
//
//   offset 0  : d       fp16
//   offset 2  : qh      u32, bit j = 5th bit of element j
//   offset 6  : qs[16]  low 4 bits as in Q4_0
//
//   y[j] = d · ((nibble | qh_j << 4) − 16)
// =============================================================================================

#[inline(always)]
fn q5_0_code(blk: &[u8], j: usize) -> i32 {
    (nibble(blk, 6, j) | high_bit(blk, 2, j) << 4) - 16
}

fn dequantize_q5_0(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(22).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(blk, 0);
        for (j, yj) in y.iter_mut().enumerate() {
            *yj = d * q5_0_code(blk, j) as f32;
        }
    }
}

fn vec_dot_q5_0_ref(row: &[u8], act: Q8<'_>) -> f32 {
    vec_dot_ref32(row, act, 22, q5_0_code, |_| None)
}

fn decode_ref_q5_0(row: &[u8], out: &mut Decoded) {
    decode_ref32(GgmlType::Q5_0, row, out, q5_0_code, |_| 0.0)
}

fast_decode_or_ref!(decode_q5_0, decode_q5_0, decode_ref_q5_0);

fast_or_ref!(vec_dot_q5_0, vec_dot_q5_0, vec_dot_q5_0_ref);

// =============================================================================================
// Q5_1 — 32 elements in 24 bytes.
//
//   offset 0  : d       fp16
//   offset 2  : m       fp16
//   offset 4  : qh      u32, bit j = 5th bit of element j
//   offset 8  : qs[16]  low 4 bits as in Q4_0
//
//   y[j] = d · (nibble | qh_j << 4) + m
// =============================================================================================

#[inline(always)]
fn q5_1_code(blk: &[u8], j: usize) -> i32 {
    nibble(blk, 8, j) | high_bit(blk, 4, j) << 4
}

fn dequantize_q5_1(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(24).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
        for (j, yj) in y.iter_mut().enumerate() {
            *yj = d * q5_1_code(blk, j) as f32 + m;
        }
    }
}

fn vec_dot_q5_1_ref(row: &[u8], act: Q8<'_>) -> f32 {
    vec_dot_ref32(row, act, 24, q5_1_code, |b| Some(f16_at(b, 2)))
}

fn decode_ref_q5_1(row: &[u8], out: &mut Decoded) {
    decode_ref32(GgmlType::Q5_1, row, out, q5_1_code, |b| f16_at(b, 2))
}

fast_decode_or_ref!(decode_q5_1, decode_q5_1, decode_ref_q5_1);

fast_or_ref!(vec_dot_q5_1, vec_dot_q5_1, vec_dot_q5_1_ref);

// =============================================================================================
// Q8_0 — 32 elements in 34 bytes.
//
//   offset 0  : d       fp16
//   offset 2  : qs[32]  i8
//
//   y[j] = d · qs[j]
// =============================================================================================

#[inline(always)]
fn q8_0_code(blk: &[u8], j: usize) -> i32 {
    blk[2 + j] as i8 as i32
}

fn dequantize_q8_0(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(34).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(blk, 0);
        for (j, yj) in y.iter_mut().enumerate() {
            *yj = d * q8_0_code(blk, j) as f32;
        }
    }
}

fn vec_dot_q8_0_ref(row: &[u8], act: Q8<'_>) -> f32 {
    vec_dot_ref32(row, act, 34, q8_0_code, |_| None)
}

fn decode_ref_q8_0(row: &[u8], out: &mut Decoded) {
    decode_ref32(GgmlType::Q8_0, row, out, q8_0_code, |_| 0.0)
}

fast_decode_or_ref!(decode_q8_0, decode_q8_0, decode_ref_q8_0);

fast_or_ref!(vec_dot_q8_0, vec_dot_q8_0, vec_dot_q8_0_ref);

// =============================================================================================
// IQ4_NL — 32 elements in 18 bytes.
//
//   offset 0  : d       fp16
//   offset 2  : qs[16]  4-bit indices into KVALUES_IQ4NL, nibble order as in Q4_0
//
//   y[j] = d · KVALUES_IQ4NL[index]
// =============================================================================================

#[inline(always)]
fn iq4_nl_code(blk: &[u8], j: usize) -> i32 {
    KVALUES_IQ4NL[nibble(blk, 2, j) as usize] as i32
}

fn dequantize_iq4_nl(row: &[u8], out: &mut [f32]) {
    for (blk, y) in row.chunks_exact(18).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(blk, 0);
        for (j, yj) in y.iter_mut().enumerate() {
            *yj = d * iq4_nl_code(blk, j) as f32;
        }
    }
}

fn vec_dot_iq4_nl_ref(row: &[u8], act: Q8<'_>) -> f32 {
    vec_dot_ref32(row, act, 18, iq4_nl_code, |_| None)
}

fn decode_ref_iq4_nl(row: &[u8], out: &mut Decoded) {
    decode_ref32(GgmlType::IQ4_NL, row, out, iq4_nl_code, |_| 0.0)
}

fast_decode_or_ref!(decode_iq4_nl, decode_iq4_nl, decode_ref_iq4_nl);

fast_or_ref!(vec_dot_iq4_nl, vec_dot_iq4_nl, vec_dot_iq4_nl_ref);

// =============================================================================================
// SIMD128 kernels.

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) mod simd {
    //! Widening without `extend`: a loaded 16-byte vector viewed as eight 16-bit lanes holds an
    //! even element in the low byte and an odd one in the high byte of each lane, so
    //! `x << 8` (even) and `x & 0xff00` (odd) are the 8-bit values times 256, and
    //! `(x << 8) >> 8` / `x >> 8` (arithmetic) are them sign-extended. Multiplying a "×256" side
    //! with a sign-extended side in `i32x4.dot_i16x8_s` gives `256·w·a` — two to three
    //! single-instruction operations per 16 elements instead of four `extend`s (V8 turns an
    //! `extend_high` into two instructions). Every block kernel below returns i32x4 partial sums of
    //! `256 · Σ code·a`; the driver shifts the reduced sums right by 8 (exact).
    use super::super::gemm::Decoded;
    use super::super::simd::{hsum_f32, hsum_i32, store_i8x16};
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::{iq4nl_sign_tables, rdot16_signed};
    use super::super::tables::KVALUES_IQ4NL;
    use super::{GgmlType, Q8, QK};
    use crate::quant::f16_bits_to_f32;
    use crate::quant::simd::f16_lanes;
    use core::arch::wasm32::*;

    /// `[Σa, Σb, Σc, Σd]`: the horizontal sums of four i32x4 vectors in one vector.
    #[inline(always)]
    pub fn hsum4_i32x4(a: v128, b: v128, c: v128, d: v128) -> v128 {
        let ab = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(a, b), i32x4_shuffle::<2, 6, 3, 7>(a, b));
        let cd = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(c, d), i32x4_shuffle::<2, 6, 3, 7>(c, d));
        i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(ab, cd), i32x4_shuffle::<2, 3, 6, 7>(ab, cd))
    }

    /// Returns `v` after a volatile store of it to the stack: an ordering point for V8, which
    /// otherwise schedules every load of a loop iteration first and then spills the values it
    /// cannot keep in the 16 xmm registers (loads after a store cannot move above it).
    #[inline(always)]
    pub fn fence(v: v128) -> v128 {
        let mut slot = v;
        // SAFETY: `slot` is a live local.
        unsafe { core::ptr::write_volatile(&mut slot, v) };
        v
    }

    /// u16 at `p` (unaligned), widened.
    ///
    /// # Safety
    /// `p..p+2` must be readable.
    #[inline(always)]
    unsafe fn u16_at(p: *const u8) -> i32 {
        u16::from_le_bytes([*p, *p.add(1)]) as i32
    }

    /// Splat constants the block kernels use, created once per row so that V8 keeps them in
    /// registers (it rebuilds a `v128.const` at every use).
    #[derive(Clone, Copy)]
    struct Consts {
        /// 0xff00 in every 16-bit lane.
        hi8: v128,
        /// 0x0f in every byte.
        nib: v128,
        /// 0x000f / 0x0f00 in every 16-bit lane (the SIMD128 nibble kernel; unused with relaxed SIMD).
        #[cfg_attr(target_feature = "relaxed-simd", allow(dead_code))]
        lo4: v128,
        #[cfg_attr(target_feature = "relaxed-simd", allow(dead_code))]
        hi4: v128,
    }

    impl Consts {
        #[inline(always)]
        fn new() -> Consts {
            Consts {
                hi8: u16x8_splat(0xff00),
                nib: u8x16_splat(15),
                lo4: u16x8_splat(0x000f),
                hi4: u16x8_splat(0x0f00),
            }
        }
    }

    /// [`crate::quant::simd::dot16_x256`] with the mask from `c`.
    #[inline(always)]
    fn dot16_x256(w: v128, a: v128, c: Consts) -> v128 {
        crate::quant::simd::dot16_x256(w, a, c.hi8)
    }

    /// `256 · Σ q·a` for the 32 unsigned nibbles packed in `x` (element j < 16: low nibble of
    /// byte j; element 16 + j: high nibble) and the 32 activations at `a`. The nibbles are masked
    /// in place: `x & 0x000f` is the even element ×1, `x & 0x0f00` the odd one ×256 (likewise for
    /// `x >> 4`), paired with activations ×256 (`a << 8`) and ×1 (`a >> 8`).
    ///
    /// # Safety
    /// `a..a+32` must be readable.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    unsafe fn dot32_nibbles_x256(x: v128, a: *const i8, c: Consts) -> v128 {
        let (a0, a1) = act2(a);
        let y = u16x8_shr(x, 4);
        let lo = i32x4_add(
            i32x4_dot_i16x8(v128_and(x, c.lo4), i16x8_shl(a0, 8)),
            i32x4_dot_i16x8(v128_and(x, c.hi4), i16x8_shr(a0, 8)),
        );
        let hi = i32x4_add(
            i32x4_dot_i16x8(v128_and(y, c.lo4), i16x8_shl(a1, 8)),
            i32x4_dot_i16x8(v128_and(y, c.hi4), i16x8_shr(a1, 8)),
        );
        i32x4_add(lo, hi)
    }

    /// The 32 activations of a block as two vectors.
    ///
    /// # Safety
    /// `a..a+32` must be readable.
    #[inline(always)]
    unsafe fn act2(a: *const i8) -> (v128, v128) {
        (v128_load(a as *const v128), v128_load(a.add(16) as *const v128))
    }

    /// 16 packed bytes of nibbles → (low nibbles, high nibbles) as u8 lanes.
    ///
    /// # Safety
    /// `p..p+16` must be readable.
    #[inline(always)]
    unsafe fn nibbles(p: *const u8, c: Consts) -> (v128, v128) {
        let x = v128_load(p as *const v128);
        (v128_and(x, c.nib), v128_and(u16x8_shr(x, 4), c.nib))
    }

    /// The Q5 high bits (u32 at `p`, bit j = element j) as byte masks that are −1 where the bit
    /// is *clear* (`eq 0`: V8 turns `ne` into three instructions), for elements 0..16 and 16..32.
    ///
    /// # Safety
    /// `p..p+4` must be readable.
    #[inline(always)]
    unsafe fn q5_clear(p: *const u8) -> (v128, v128) {
        const BIT: v128 = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
        let qh = v128_load32_zero(p as *const u32);
        let t = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(qh, qh);
        let t = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(t, t); // [b0×4, b1×4, b2×4, b3×4]
        let s0 = i32x4_shuffle::<0, 4, 1, 5>(t, t); // [b0×8, b1×8]
        let s1 = i32x4_shuffle::<2, 6, 3, 7>(t, t); // [b2×8, b3×8]
        let zero = u8x16_splat(0);
        (i8x16_eq(v128_and(s0, BIT), zero), i8x16_eq(v128_and(s1, BIT), zero))
    }

    /// Q5 codes minus 16 as signed bytes: `nibble − 16·(1 − high bit)`.
    ///
    /// # Safety
    /// `qs..qs+16` and `qh..qh+4` must be readable.
    #[inline(always)]
    unsafe fn q5_signed(qs: *const u8, qh: *const u8, c: Consts) -> (v128, v128) {
        let (lo, hi) = nibbles(qs, c);
        let (c0, c1) = q5_clear(qh);
        let sixteen = u8x16_splat(16);
        (
            i8x16_sub(lo, v128_and(c0, sixteen)),
            i8x16_sub(hi, v128_and(c1, sixteen)),
        )
    }

    /// The shared driver of every kernel here, over `N` rows in step:
    /// `Σ_i d_i·d_a,i·(Σ code·a − OFF·Σ a) + m_i·d_a,i·Σ a` for each row.
    ///
    /// `block(blk, a, c)` returns i32x4 partial sums of `2^SHIFT · Σ code·a` for the block at `blk`
    /// and its 32 activations at `a` (SHIFT = 8 for the ×256 kernels, 0 for the relaxed ones); `BYTES` is the block size, `OFF` the code offset and `MIN`
    /// whether an fp16 min follows `d` at offset 2. Four blocks share one reduction and one f32
    /// update (measured faster than one or two); `fence`s between them keep V8 from loading all
    /// four blocks' data up front. With `N` = 4 (`ops::rows_outer`'s streams) each step takes the
    /// four blocks of every row in turn, so a decoded token reads four streams of the matrix at
    /// block granularity; every row's arithmetic is the same as alone, so its result is the same
    /// bit for bit.
    ///
    /// # Safety
    /// Requires simd128; `block` may read `BYTES` bytes at `blk` and 32 bytes at `a`.
    #[inline(always)]
    unsafe fn dot_rows_n<const N: usize, const BYTES: usize, const OFF: i32, const MIN: bool, const SHIFT: u32>(
        rows: [&[u8]; N],
        act: Q8<'_>,
        block: impl Fn(*const u8, *const i8, Consts) -> v128,
    ) -> [f32; N] {
        let nb = rows[0].len() / BYTES;
        assert!(rows.iter().all(|r| r.len() == nb * BYTES));
        assert!(act.qs.len() >= nb * QK && act.d.len() >= nb && act.bsums.len() >= 2 * nb);
        let c = Consts::new();
        let a = act.qs.as_ptr();
        let w = rows.map(|r| r.as_ptr());
        // fp16 fields at offset `off` of blocks i..i+4 as f32x4.
        let f16x4 = |p: *const u8, off: usize| {
            f16_lanes(i32x4(
                u16_at(p.add(off)),
                u16_at(p.add(BYTES + off)),
                u16_at(p.add(2 * BYTES + off)),
                u16_at(p.add(3 * BYTES + off)),
            ))
        };
        let mut acc = [f32x4_splat(0.0); N];
        let mut i = 0;
        while i + 4 <= nb {
            // SAFETY: blocks i..i+4 of every row, activations 32i..32i+128, d i..i+4 and bsums
            // 2i..2i+8 are in bounds by the asserts above.
            let da = v128_load(act.d.as_ptr().add(i) as *const v128);
            let asum = i32x4_extadd_pairwise_i16x8(v128_load(act.bsums.as_ptr().add(2 * i) as *const v128));
            for (acc, &w) in acc.iter_mut().zip(&w) {
                let p = w.add(BYTES * i);
                let s0 = fence(block(p, a.add(QK * i), c));
                let s1 = fence(block(p.add(BYTES), a.add(QK * i + 32), c));
                let s2 = fence(block(p.add(2 * BYTES), a.add(QK * i + 64), c));
                let s3 = block(p.add(3 * BYTES), a.add(QK * i + 96), c);
                let s = i32x4_shr(hsum4_i32x4(s0, s1, s2, s3), SHIFT);
                let t = if OFF != 0 || MIN {
                    let s = if OFF != 0 {
                        i32x4_sub(s, i32x4_mul(asum, i32x4_splat(OFF)))
                    } else {
                        s
                    };
                    let t = f32x4_mul(f16x4(p, 0), f32x4_convert_i32x4(s));
                    if MIN {
                        f32x4_add(t, f32x4_mul(f16x4(p, 2), f32x4_convert_i32x4(asum)))
                    } else {
                        t
                    }
                } else {
                    f32x4_mul(f16x4(p, 0), f32x4_convert_i32x4(s))
                };
                *acc = f32x4_add(*acc, f32x4_mul(da, t));
            }
            i += 4;
        }
        core::array::from_fn(|j| {
            let mut sum = hsum_f32(acc[j]);
            for k in i..nb {
                // SAFETY: block k of row j and its activations are in bounds (k < nb).
                let p = w[j].add(BYTES * k);
                let asum = act.bsums[2 * k] as i32 + act.bsums[2 * k + 1] as i32;
                let s = (hsum_i32(block(p, a.add(QK * k), c)) >> SHIFT) - OFF * asum;
                let da = act.d[k];
                sum += da * (f16_bits_to_f32(u16_at(p) as u16) * s as f32);
                if MIN {
                    sum += da * (f16_bits_to_f32(u16_at(p.add(2)) as u16) * asum as f32);
                }
            }
            sum
        })
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q4_0<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 18, 8, false, 8>(rows, act, |p, a, c| {
            dot32_nibbles_x256(v128_load(p.add(2) as *const v128), a, c)
        })
    }

    /// [`rows_q4_0`] for one row.
    ///
    /// # Safety
    /// As [`rows_q4_0`].
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q4_0(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q4_0::<1>([row], act)[0]
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q4_1<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 20, 0, true, 8>(rows, act, |p, a, c| {
            dot32_nibbles_x256(v128_load(p.add(4) as *const v128), a, c)
        })
    }

    /// [`rows_q4_1`] for one row.
    ///
    /// # Safety
    /// As [`rows_q4_1`].
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q4_1(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q4_1::<1>([row], act)[0]
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q5_0<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 22, 0, false, 8>(rows, act, |p, a, c| {
            let (w0, w1) = q5_signed(p.add(6), p.add(2), c);
            let (a0, a1) = act2(a);
            i32x4_add(dot16_x256(w0, a0, c), dot16_x256(w1, a1, c))
        })
    }

    /// [`rows_q5_0`] for one row.
    ///
    /// # Safety
    /// As [`rows_q5_0`].
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q5_0(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q5_0::<1>([row], act)[0]
    }

    /// Q5_1 codes are the signed Q5_0-style values plus 16, hence `OFF = −16`.
    ///
    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q5_1<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 24, -16, true, 8>(rows, act, |p, a, c| {
            let (w0, w1) = q5_signed(p.add(8), p.add(4), c);
            let (a0, a1) = act2(a);
            i32x4_add(dot16_x256(w0, a0, c), dot16_x256(w1, a1, c))
        })
    }

    /// [`rows_q5_1`] for one row.
    ///
    /// # Safety
    /// As [`rows_q5_1`].
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q5_1(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q5_1::<1>([row], act)[0]
    }

    /// Q8_0 keeps the SIMD128 kernel in both builds: its weights are full signed bytes (−128 is
    /// representable), which no 7-bit operand of the relaxed dot can hold exactly.
    ///
    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q8_0<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 34, 0, false, 8>(rows, act, |p, a, c| {
            let w0 = v128_load(p.add(2) as *const v128);
            let w1 = v128_load(p.add(18) as *const v128);
            let (a0, a1) = act2(a);
            i32x4_add(dot16_x256(w0, a0, c), dot16_x256(w1, a1, c))
        })
    }

    /// [`rows_q8_0`] for one row.
    ///
    /// # Safety
    /// As [`rows_q8_0`].
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q8_0(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q8_0::<1>([row], act)[0]
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_iq4_nl<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        // SAFETY: KVALUES_IQ4NL is 16 bytes.
        let kv = v128_load(KVALUES_IQ4NL.as_ptr() as *const v128);
        dot_rows_n::<N, 18, 0, false, 8>(rows, act, |p, a, c| {
            let (lo, hi) = nibbles(p.add(2), c);
            let (a0, a1) = act2(a);
            i32x4_add(
                dot16_x256(i8x16_swizzle(kv, lo), a0, c),
                dot16_x256(i8x16_swizzle(kv, hi), a1, c),
            )
        })
    }

    /// [`rows_iq4_nl`] for one row.
    ///
    /// # Safety
    /// As [`rows_iq4_nl`].
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_iq4_nl(row: &[u8], act: Q8<'_>) -> f32 {
        rows_iq4_nl::<1>([row], act)[0]
    }

    // -----------------------------------------------------------------------------------------
    // Relaxed SIMD (the second wasm build): every code is made 7-bit unsigned, and
    // `i16x8.relaxed_dot_i8x16_i7x16_s` takes 16 codes × 16 activations per instruction (pairs
    // summed in i16); the block sums are plain `Σ code·a` (SHIFT = 0). Not the i32x4 variant with
    // accumulator: Node 20's V8 computes it wrongly (see `quant/mod.rs` and [`widen`]).

    /// `Σ code·a` (i32x4 partial sums) of 32 codes (elements 0..16 in `w0`, 16..32 in `w1`) with
    /// the block's activations at `a`. Codes ≤ 31: the two pair sums add up in i16 (≤ 4·31·127).
    ///
    /// # Safety
    /// `a..a+32` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn rdot32(w0: v128, w1: v128, a: *const i8) -> v128 {
        let (a0, a1) = act2(a);
        let p = i16x8_add(i16x8_relaxed_dot_i8x16_i7x16(a0, w0), i16x8_relaxed_dot_i8x16_i7x16(a1, w1));
        widen(p)
    }

    /// i16 pair sums → i32x4 (`i32x4.dot_i16x8_s` against ones). Not `extadd_pairwise`: LLVM fuses
    /// `extadd_pairwise(relaxed dot) + x` into `i32x4.relaxed_dot_i8x16_i7x16_add_s`, which Node
    /// 20's V8 miscomputes (see `quant/mod.rs`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    fn widen(p: v128) -> v128 {
        i32x4_dot_i16x8(p, i16x8_splat(1))
    }

    /// IQ4_NL's values are signed (−127..113): `|kv|` is the 7-bit operand and the sign moves
    /// onto the activations, both looked up from the index ([`rdot16_signed`]). Two products of
    /// up to 127² fill an i16 lane, so each half is widened on its own.
    ///
    /// # Safety
    /// Requires relaxed-simd; lengths are checked by the driver.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_iq4_nl<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        // Opaque, so that Chromium's V8 keeps both tables in registers (+5 % IQ4_XS, +9 % IQ4_NL
        // there; Node level).
        let (kabs, kneg) = core::hint::black_box(iq4nl_sign_tables());
        dot_rows_n::<N, 18, 0, false, 0>(rows, act, |p, a, c| {
            let (lo, hi) = nibbles(p.add(2), c);
            let (a0, a1) = act2(a);
            i32x4_add(widen(rdot16_signed(lo, a0, kabs, kneg)), widen(rdot16_signed(hi, a1, kabs, kneg)))
        })
    }

    /// [`rows_iq4_nl`] for one row.
    ///
    /// # Safety
    /// As [`rows_iq4_nl`].
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_iq4_nl(row: &[u8], act: Q8<'_>) -> f32 {
        rows_iq4_nl::<1>([row], act)[0]
    }

    /// Q5 codes `nibble + 16·high bit` ∈ 0..32 as bytes (unsigned, unlike [`q5_signed`]).
    ///
    /// # Safety
    /// `qs..qs+16` and `qh..qh+4` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn q5_unsigned(qs: *const u8, qh: *const u8, c: Consts) -> (v128, v128) {
        let (lo, hi) = nibbles(qs, c);
        let (c0, c1) = q5_clear(qh);
        let sixteen = u8x16_splat(16);
        (v128_or(lo, v128_andnot(sixteen, c0)), v128_or(hi, v128_andnot(sixteen, c1)))
    }

    /// # Safety
    /// Requires simd128 + relaxed-simd; lengths are checked by the driver.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q4_0<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 18, 8, false, 0>(rows, act, |p, a, c| {
            let (lo, hi) = nibbles(p.add(2), c);
            rdot32(lo, hi, a)
        })
    }

    /// [`rows_q4_0`] for one row.
    ///
    /// # Safety
    /// As [`rows_q4_0`].
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q4_0(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q4_0::<1>([row], act)[0]
    }

    /// # Safety
    /// Requires simd128 + relaxed-simd; lengths are checked by the driver.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q4_1<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 20, 0, true, 0>(rows, act, |p, a, c| {
            let (lo, hi) = nibbles(p.add(4), c);
            rdot32(lo, hi, a)
        })
    }

    /// [`rows_q4_1`] for one row.
    ///
    /// # Safety
    /// As [`rows_q4_1`].
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q4_1(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q4_1::<1>([row], act)[0]
    }

    /// Unsigned Q5 codes, so `OFF = 16` (Q5_0) and `OFF = 0` (Q5_1).
    ///
    /// # Safety
    /// Requires simd128 + relaxed-simd; lengths are checked by the driver.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q5_0<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 22, 16, false, 0>(rows, act, |p, a, c| {
            let (w0, w1) = q5_unsigned(p.add(6), p.add(2), c);
            rdot32(w0, w1, a)
        })
    }

    /// [`rows_q5_0`] for one row.
    ///
    /// # Safety
    /// As [`rows_q5_0`].
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q5_0(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q5_0::<1>([row], act)[0]
    }

    /// # Safety
    /// Requires simd128 + relaxed-simd; lengths are checked by the driver.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn rows_q5_1<const N: usize>(rows: [&[u8]; N], act: Q8<'_>) -> [f32; N] {
        dot_rows_n::<N, 24, 0, true, 0>(rows, act, |p, a, c| {
            let (w0, w1) = q5_unsigned(p.add(8), p.add(4), c);
            rdot32(w0, w1, a)
        })
    }

    /// [`rows_q5_1`] for one row.
    ///
    /// # Safety
    /// As [`rows_q5_1`].
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub unsafe fn vec_dot_q5_1(row: &[u8], act: Q8<'_>) -> f32 {
        rows_q5_1::<1>([row], act)[0]
    }

    // -----------------------------------------------------------------------------------------
    // Row decoders for the prompt GEMM: the same block decoding as the dot products, written out
    // as i16 (these types have no sub-block scales: `q` is the code itself).

    /// The shared driver of the row decoders: `block(blk, c)` returns the block's 32 integer
    /// weights as two i8x16 (elements 0..16 and 16..32); `MIN`: an fp16 min follows `d`.
    ///
    /// # Safety
    /// Requires simd128; `block` may read `BYTES` bytes at `blk`.
    #[inline(always)]
    unsafe fn decode_rows<const BYTES: usize, const MIN: bool>(
        ty: GgmlType,
        row: &[u8],
        out: &mut Decoded,
        block: impl Fn(*const u8, Consts) -> (v128, v128),
    ) {
        let n = out.check(ty, row);
        let c = Consts::new();
        let q = out.q.as_mut_ptr();
        for i in 0..n / QK {
            // SAFETY: `check` guarantees n / 32 whole blocks in `row` and n weights in `out.q`.
            let blk = row.as_ptr().add(BYTES * i);
            let (lo, hi) = block(blk, c);
            store_i8x16(q.add(QK * i), lo);
            store_i8x16(q.add(QK * i + 16), hi);
            out.d[i] = f16_bits_to_f32(u16_at(blk) as u16);
            if MIN {
                out.m[i] = f16_bits_to_f32(u16_at(blk.add(2)) as u16);
                out.mn[2 * i] = 1;
                out.mn[2 * i + 1] = 1;
            }
        }
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_q4_0(row: &[u8], out: &mut Decoded) {
        decode_rows::<18, false>(GgmlType::Q4_0, row, out, |p, c| {
            let (lo, hi) = nibbles(p.add(2), c);
            let eight = i8x16_splat(8);
            (i8x16_sub(lo, eight), i8x16_sub(hi, eight))
        })
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_q4_1(row: &[u8], out: &mut Decoded) {
        decode_rows::<20, true>(GgmlType::Q4_1, row, out, |p, c| nibbles(p.add(4), c))
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_q5_0(row: &[u8], out: &mut Decoded) {
        decode_rows::<22, false>(GgmlType::Q5_0, row, out, |p, c| q5_signed(p.add(6), p.add(2), c))
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_q5_1(row: &[u8], out: &mut Decoded) {
        decode_rows::<24, true>(GgmlType::Q5_1, row, out, |p, c| {
            let (lo, hi) = q5_signed(p.add(8), p.add(4), c);
            let sixteen = i8x16_splat(16);
            (i8x16_add(lo, sixteen), i8x16_add(hi, sixteen))
        })
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_q8_0(row: &[u8], out: &mut Decoded) {
        decode_rows::<34, false>(GgmlType::Q8_0, row, out, |p, _| {
            (v128_load(p.add(2) as *const v128), v128_load(p.add(18) as *const v128))
        })
    }

    /// # Safety
    /// Requires simd128; lengths are checked by the driver.
    #[target_feature(enable = "simd128")]
    pub unsafe fn decode_iq4_nl(row: &[u8], out: &mut Decoded) {
        // SAFETY: KVALUES_IQ4NL is 16 bytes.
        let kv = v128_load(KVALUES_IQ4NL.as_ptr() as *const v128);
        decode_rows::<18, false>(GgmlType::IQ4_NL, row, out, |p, c| {
            let (lo, hi) = nibbles(p.add(2), c);
            (i8x16_swizzle(kv, lo), i8x16_swizzle(kv, hi))
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::quant::{kernels, quantize_q8, GgmlType, QAct};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The fast kernels of this file and of `lowbit.rs` agree with the references for rows of 1 to
    /// 9 blocks, i.e. through every loop tail (tests/kernels.rs uses multiples of 4 blocks), and
    /// with every fp16 value as the scale of one block (the SIMD fp16 conversion, subnormals and
    /// inf / NaN included: non-finite in one ⇔ non-finite in the other).
    #[test]
    fn fast_dots_agree_on_tails_and_all_scales() {
        let mut s = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            s.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        let types = [
            GgmlType::Q1_0,
            GgmlType::Q2_0,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
            GgmlType::IQ4_NL,
        ];
        let mut act = QAct::default();
        let mut check = |ty: GgmlType, row: &[u8], x: &[f32]| {
            let k = kernels(ty).unwrap();
            quantize_q8(ty.act_kind(), x, x.len(), &mut act);
            let a = act.row(0);
            let mut w = vec![0.0f32; x.len()];
            (k.dequantize)(row, &mut w);
            let scale: f64 = (0..x.len())
                .map(|i| (w[i] as f64 * a.value(i) as f64).abs())
                .sum::<f64>()
                + 1e-30;
            let (r, f) = ((k.vec_dot_ref)(row, a), (k.vec_dot)(row, a));
            assert_eq!(r.is_finite(), f.is_finite(), "{ty}: {r} vs {f}");
            if r.is_finite() {
                assert!(
                    ((r - f) as f64).abs() / scale < 2e-6,
                    "{ty} ({} blocks): {r} vs {f}",
                    row.len() / ty.block_bytes()
                );
            }
        };
        for ty in types {
            let k = kernels(ty).unwrap();
            for nb in 1..=9 {
                let n = nb * ty.block_elems();
                for _ in 0..10 {
                    let mut row: Vec<u8> = (0..ty.row_bytes(n)).map(|_| (rnd() >> 56) as u8).collect();
                    row.chunks_exact_mut(ty.block_bytes()).for_each(|b| (k.sanitize)(b));
                    let x: Vec<f32> = (0..n)
                        .map(|_| ((rnd() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0)
                        .collect();
                    check(ty, &row, &x);
                }
            }
            let n = 4 * ty.block_elems();
            let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
            let mut row: Vec<u8> = (0..ty.row_bytes(n)).map(|_| (rnd() >> 56) as u8).collect();
            row.chunks_exact_mut(ty.block_bytes()).for_each(|b| (k.sanitize)(b));
            for h in (0..=u16::MAX).step_by(7) {
                row[2 * ty.block_bytes()..][..2].copy_from_slice(&h.to_le_bytes());
                check(ty, &row, &x);
            }
        }
    }
}
