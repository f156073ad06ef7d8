//! K-quants and IQ4_XS: 256-element super-blocks multiplied with Q8_K activations (spec §5.2, §5.4).
//!
//! | file        | type    | bytes | weights                                  |
//! |-------------|---------|-------|------------------------------------------|
//! | `q2_k.rs`   | Q2_K    | 84    | 2-bit, 16 groups of 16 with 4-bit scale + 4-bit min |
//! | `q3_k.rs`   | Q3_K    | 110   | 3-bit (2 + high-bit mask), 16 six-bit signed scales  |
//! | `q4_k.rs`   | Q4_K    | 144   | 4-bit, 8 sub-blocks of 32 with 6-bit scale + min     |
//! | `q4_k.rs`   | Q5_K    | 176   | Q4_K plus a fifth bit per weight                     |
//! | `q6_k.rs`   | Q6_K    | 210   | 6-bit (4 + 2), 16 signed 8-bit scales                |
//! | `iq4_xs.rs` | IQ4_XS  | 136   | 4-bit indices into `KVALUES_IQ4NL`, 6-bit scales     |
//! | `iq2_sx.rs` | IQ2_SX  | 138   | IQ2_S, IQ2_XS expanded after loading: a nibble per weight (2-bit magnitude code, sign bit), IQ2_S's nibble scales |
//! | `iq3_sx.rs` | IQ3_SX  | 134   | IQ3_S expanded after loading: a nibble `c` per weight (`q = 2c − 15`), IQ3_S's nibble scales |
//! | `q3_kx.rs`  | Q3_KX   | 146   | Q3_K expanded after loading: a nibble `q + 4` per weight, its 16 scales as bytes |
//! | `q6_k.rs`   | Q6_KX   | 210   | Q6_K regrouped after loading: three of four code vectors whole 6-bit codes |
//!
//! `forms.rs` says which file types are kept in which load-time form (IQ2_SX, IQ3_SX, Q3_KX, Q6_KX).
//!
//! All of them use the Q8_K activation layout: `act.d[8 * blk]` is the scale of super-block `blk`
//! and `act.bsums[16 * blk + g]` the sum of its 16-element group `g`, which turns every per-group
//! constant (the `- dmin * min` terms, and the `-4` / `-32` offsets of Q3_K / Q6_K) into one small
//! dot product per block.
//!
//! The scalar side is generic over the private trait `KBlock`: a type describes its scales and how to decode a
//! block to 256 integers, and `dequantize` / `vec_dot_ref` / `decode_ref` are written once (the
//! per-group integer sums auto-vectorise natively, where `vec_dot` is the reference). The SIMD128
//! row decoders of the prompt GEMM reuse each type's block decoding and fold the group scales in.
//!
//! How the SIMD128 kernels work:
//! * Weights end up as **u16 lanes** (`u16x8_load_extend_u8x8` of packed bytes plus shifts / masks
//!   on u16 lanes — Q2_K, Q4_K), or the block is first decoded to 256 bytes on the stack with
//!   16-lane byte operations and then read back the same way (Q3_K, Q5_K, Q6_K, IQ4_XS: their
//!   decode is heavier, and bytes halve its cost). Activations are loaded with
//!   `i16x8_load_extend_i8x8` (8 bytes → i16x8, one instruction).
//! * The products `w·a` are summed **in i16** over elements sharing one scale (two or four
//!   products per lane, never more than 2^15), then one `i32x4_dot_i16x8` against the scale
//!   widens to i32 and applies the scale. The scale comes as `sc | sc << 16` from a small stack
//!   buffer via `v128_load32_splat` — a plain load in V8, no shuffle.
//! * Unsigned weight codes (`q + 4` for Q3_K, `q + 32` for Q6_K) and the `- dmin·min` terms are
//!   corrected once per block with `i32x4_dot_i16x8(scales or mins, bsums)`. Per block the i32x4
//!   sum is converted to f32 once and multiplied by `d_w·d_a` (fp16 converted in SIMD); the f32x4
//!   accumulator is reduced once per row.
//!
//! Measured pitfalls (V8 in Node 20, which the tests and benchmarks run in):
//! * A fully unrolled block makes TurboFan hoist all its loads to the top and spill most of them;
//!   the inner steps therefore stay real loops (trip count through `black_box`, 32 weights per
//!   step).
//! * LLVM turns a multiply by a constant vector of powers of two into per-lane shifts, which wasm
//!   lacks, and scalarises them; such multipliers are passed through `black_box` once per row.

use super::gemm::Decoded;
use super::gemm8::{pair_pos, Decoded8, Kernels8};
use super::{QuantKernels, Q8, QK_K};

pub mod forms;
pub mod iq2_sx;
pub mod iq3_sx;
mod iq4_xs;
mod q2_k;
mod q3_k;
pub mod q3_kx;
mod q4_k;
pub mod q6_k;

pub static KERNELS: &[QuantKernels] = &[
    q2_k::KERNELS,
    q3_k::KERNELS,
    q4_k::KERNELS_Q4K,
    q4_k::KERNELS_Q5K,
    q6_k::KERNELS,
    iq4_xs::KERNELS,
    iq2_sx::KERNELS,
    iq3_sx::KERNELS,
    q3_kx::KERNELS,
    q6_k::KERNELS_X,
];

/// The types with a four-rows-interleaved form ([`crate::quant::r4`]).
pub static R4: &[crate::quant::r4::R4Kernels] = &[q2_k::R4, q3_k::R4, q4_k::R4, q4_k::R4_Q5K, q6_k::R4, iq2_sx::R4, iq3_sx::R4, q3_kx::R4, q6_k::R4_X];

/// The types with an int8 prompt GEMM form (`gemm8`): codes `u = q + offset` ≤ `umax` (IQ2_S's
/// from `iq2.rs`).
pub static KERNELS8: &[Kernels8] = &[
    q2_k::KERNELS8,
    q3_k::KERNELS8,
    q4_k::KERNELS8_Q4K,
    q4_k::KERNELS8_Q5K,
    q6_k::KERNELS8,
    iq2_sx::KERNELS8,
    iq3_sx::KERNELS8,
    q3_kx::KERNELS8,
    q6_k::KERNELS8_X,
    super::iq2::KERNELS8_IQ2XXS,
    super::iq2::KERNELS8_IQ2XS,
    super::iq2::KERNELS8_IQ2S,
    super::iq3::iq3_xxs::KERNELS8,
    super::iq3::iq3_s::KERNELS8,
    super::iq1::iq1_s::KERNELS8,
    super::iq1::iq1_m::KERNELS8,
];

/// Number of super-blocks in `row`; panics unless `row` holds whole blocks of `block_bytes` and
/// `act` has the matching number of elements (the SIMD kernels rely on this for their raw loads).
#[inline(always)]
fn check_lens(row: &[u8], block_bytes: usize, act: &Q8<'_>) -> usize {
    let nb = row.len() / block_bytes;
    assert_eq!(row.len(), nb * block_bytes, "row is not a whole number of blocks");
    assert!(
        act.qs.len() >= nb * QK_K && act.d.len() >= nb * 8 && act.bsums.len() >= nb * 16,
        "activation row shorter than the weight row"
    );
    nb
}

/// What the scalar reference functions need to know about one block type. Every type here has
/// the form `y = d·sc_g·q - dmin·mn_g` per 16-element group g (no `- dmin·mn_g` without mins).
trait KBlock {
    /// Bytes per block.
    const BB: usize;
    /// Whether the type has `- dmin·mn` terms.
    const HAS_MIN: bool;
    /// `(d, dmin)` (`dmin` = 0 without mins).
    fn d(blk: &[u8]) -> (f32, f32);
    /// Integer scale and min of each 16-element group (mins 0 without mins).
    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]);
    /// The 256 integer weights `q` of a block, in element order.
    fn decode(blk: &[u8], q: &mut [i8; QK_K]);
}

/// Scalar dequantiser, bit-identical to ggml: `dl = d * sc` then `dl * q - dmin * mn`.
fn dequantize<T: KBlock>(row: &[u8], out: &mut [f32]) {
    let mut q = [0i8; QK_K];
    for (blk, y) in row.chunks_exact(T::BB).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = T::d(blk);
        let (sc, mn) = T::scales(blk);
        T::decode(blk, &mut q);
        for (g, (yg, qg)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let dl = d * sc[g] as f32;
            if T::HAS_MIN {
                let ml = dmin * mn[g] as f32;
                for (yi, &qi) in yg.iter_mut().zip(qg) {
                    *yi = dl * qi as f32 - ml;
                }
            } else {
                for (yi, &qi) in yg.iter_mut().zip(qg) {
                    *yi = dl * qi as f32;
                }
            }
        }
    }
}

/// Scalar reference dot product in llama.cpp's integer form: per block
/// `d_a * (d * Σ_g sc_g Σ_l q·a  -  dmin * Σ_g mn_g bsum_g)`.
fn vec_dot_ref<T: KBlock>(row: &[u8], act: Q8<'_>) -> f32 {
    let nb = check_lens(row, T::BB, &act);
    let mut q = [0i8; QK_K];
    let mut sumf = 0.0f32;
    for (b, blk) in row.chunks_exact(T::BB).enumerate().take(nb) {
        let (a, da, bsums) = (
            &act.qs[QK_K * b..QK_K * b + QK_K],
            act.d[8 * b],
            &act.bsums[16 * b..16 * b + 16],
        );
        let (d, dmin) = T::d(blk);
        let (sc, mn) = T::scales(blk);
        T::decode(blk, &mut q);
        let (mut isum, mut summs) = (0i32, 0i32);
        for (g, (qg, ag)) in q.chunks_exact(16).zip(a.chunks_exact(16)).enumerate() {
            let s: i32 = qg.iter().zip(ag).map(|(&w, &x)| w as i32 * x as i32).sum();
            isum += sc[g] * s;
            summs += mn[g] * bsums[g] as i32;
        }
        sumf += da * d * isum as f32;
        if T::HAS_MIN {
            sumf -= da * dmin * summs as f32;
        }
    }
    sumf
}

/// Reference GEMM decoder: `q = sc_g·q` (the integer scale folded into the weight), `d` per
/// block and, with mins, `m = −dmin` and `mn` per 16-element group. Exact: `d·(sc·q)` and
/// `(d·sc)·q` are the same exactly representable product, and `x + (−dmin·mn)` is ggml's
/// `x − dmin·mn`.
fn decode_ref<T: KBlock>(row: &[u8], out: &mut Decoded) {
    let nb = row.len() / T::BB;
    assert_eq!(row.len(), nb * T::BB, "row is not a whole number of blocks");
    assert!(out.q.len() == nb * QK_K && out.d.len() == nb, "decoded row not sized for {nb} blocks");
    assert!(!T::HAS_MIN || (out.m.len() == nb && out.mn.len() == 16 * nb));
    let mut q = [0i8; QK_K];
    for (b, blk) in row.chunks_exact(T::BB).enumerate() {
        let (d, dmin) = T::d(blk);
        let (sc, mn) = T::scales(blk);
        T::decode(blk, &mut q);
        for (i, &qi) in q.iter().enumerate() {
            out.q[QK_K * b + i] = (sc[i / 16] * qi as i32) as i16;
        }
        out.d[b] = d;
        if T::HAS_MIN {
            out.m[b] = -dmin;
            for (o, &m) in out.mn[16 * b..16 * b + 16].iter_mut().zip(&mn) {
                *o = m as i16;
            }
        }
    }
}

/// Reference int8 decoder ([`Decoded8`]): `u = q + OFF` in pair order, the group scales per 16,
/// `d` per block; with mins `m = −dmin` and `mn` = the mins, with an offset `m = d` and
/// `mn = −OFF·sc` (the offset's share comes back through the activations' group sums).
fn decode8_ref<T: KBlock, const OFF: i32>(row: &[u8], out: &mut Decoded8) {
    assert!(!(T::HAS_MIN && OFF != 0), "a type has mins or an offset, not both");
    let nb = row.len() / T::BB;
    assert_eq!(row.len(), nb * T::BB, "row is not a whole number of blocks");
    assert!(out.u.len() == nb * QK_K && out.d.len() == nb, "decoded row not sized for {nb} blocks");
    let mut q = [0i8; QK_K];
    for (b, blk) in row.chunks_exact(T::BB).enumerate() {
        let (d, dmin) = T::d(blk);
        let (sc, mn) = T::scales(blk);
        T::decode(blk, &mut q);
        for (i, &qi) in q.iter().enumerate() {
            let u = qi as i32 + OFF;
            assert!((0..=127).contains(&u), "code {u} is not 7-bit");
            out.u[QK_K * b + pair_pos(i)] = u as u8;
        }
        for g in 0..16 {
            out.sc[16 * b + g] = sc[g] as i16;
            out.mn[16 * b + g] = if T::HAS_MIN { mn[g] } else { -OFF * sc[g] } as i16;
        }
        out.d[b] = d;
        out.m[b] = if T::HAS_MIN { -dmin } else { d };
    }
}

/// The int8 entry of a block type whose codes plus `OFF` are at most `umax`.
const fn kernels8<T: KBlock, const OFF: i32>(
    ty: crate::quant::GgmlType,
    umax: u8,
    faster: [bool; 2],
    decode: fn(&[u8], &mut Decoded8),
) -> Kernels8 {
    let offset = if T::HAS_MIN { None } else { Some(OFF as u8) };
    Kernels8 { ty, umax, faster, min_tokens: 0, offset, decode_ref: decode8_ref::<T, OFF>, decode, scaled: None, scales32: false }
}

/// The kernel entry of a block type: the generic scalar functions plus its `vec_dot`.
const fn kernels<T: KBlock>(
    ty: crate::quant::GgmlType,
    vec_dot: fn(&[u8], Q8<'_>) -> f32,
    decode: fn(&[u8], &mut Decoded),
    sanitize: fn(&mut [u8]),
) -> QuantKernels {
    QuantKernels {
        ty,
        dequantize: dequantize::<T>,
        vec_dot_ref: vec_dot_ref::<T>,
        vec_dot,
        decode_ref: decode_ref::<T>,
        decode,
        sanitize,
    }
}

/// The 6-bit scales and mins of Q4_K / Q5_K, packed in 12 bytes (`s` = bytes 4..16 of the block):
/// pair k < 4: `sc = s[k] & 63`, `mn = s[k+4] & 63`; k ≥ 4: `sc = (s[k+4] & 15) | (s[k-4] >> 6) << 4`,
/// `mn = (s[k+4] >> 4) | (s[k] >> 6) << 4`.
#[inline(always)]
fn k4_scales_mins(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for k in 0..4 {
        sc[k] = s[k] & 63;
        mn[k] = s[k + 4] & 63;
        sc[k + 4] = (s[k + 8] & 15) | ((s[k] >> 6) << 4);
        mn[k + 4] = (s[k + 8] >> 4) | ((s[k + 4] >> 6) << 4);
    }
    (sc, mn)
}

/// Dispatches `vec_dot` to the SIMD128 kernel `$simd` on wasm32+simd128, else to `$reference`.
macro_rules! dispatch_vec_dot {
    ($name:ident, $simd:path, $reference:path) => {
        fn $name(row: &[u8], act: $crate::quant::Q8<'_>) -> f32 {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build; the kernel checks all lengths itself.
                return unsafe { $simd(row, act) };
            }
            #[allow(unreachable_code)]
            $reference(row, act)
        }
    };
}
use dispatch_vec_dot;

/// Defines the four-rows-interleaved dot products `$one` (one activation row, continuing the
/// sums `acc`, see `R4Kernels::vec_dot4`) and `$many` (up to
/// [`crate::quant::r4::MAX_TOKENS`] rows, see `R4Kernels::vec_dot4_n`) from the relaxed-SIMD
/// kernel `$simd::<NY>(rows4, acts, acc0)` (or `$simd::<G.., NY>` with the leading const arguments `[G, ..]` of a
/// kernel generic over its form; or `$one` from a one-token kernel `$single`, where the type has
/// one) in the relaxed build; elsewhere from
/// [`crate::quant::r4::vec_dot4_plain`] for type `$ty` (un-interleave, then the plain kernel per
/// row: correct, and never chosen there, see `r4::faster`).
macro_rules! dispatch_vec_dot4 {
    ($one:ident, $many:ident, $simd:path, $ty:expr) => {
        dispatch_vec_dot4!($one, $many, $simd[], $ty);
    };
    ($one:ident, $many:ident, $simd:path[$($g:tt),*], $ty:expr) => {
        // Inlined into the decode driver with the kernel (`r4::streams_with`).
        #[inline(always)]
        fn $one(rows4: &[u8], act: $crate::quant::Q8<'_>, acc: [f32; 4]) -> [f32; 4] {
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            {
                // SAFETY: relaxed-simd (and so simd128) is enabled; the kernel checks every length.
                use $simd as kernel;
                let acc = core::arch::wasm32::f32x4(acc[0], acc[1], acc[2], acc[3]);
                let [v] = unsafe { kernel::<$($g,)* 1>(rows4, [act], [acc]) };
                return $crate::quant::simd::lanes(v);
            }
            #[allow(unreachable_code)]
            $crate::quant::r4::vec_dot4_plain($ty, rows4, act, acc)
        }
        dispatch_vec_dot4!(@many $one, $many, $simd[$($g),*]);
    };
    // With a one-token kernel of its own, `$single(rows4, act) -> [f32; 4]`.
    ($one:ident, $many:ident, $simd:path, $ty:expr, $single:path) => {
        // Inlined into the decode driver with the kernel (`r4::streams_with`).
        #[inline(always)]
        fn $one(rows4: &[u8], act: $crate::quant::Q8<'_>, acc: [f32; 4]) -> [f32; 4] {
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            {
                // SAFETY: relaxed-simd (and so simd128) is enabled; the kernel checks every length.
                return unsafe { $single(rows4, act, acc) };
            }
            #[allow(unreachable_code)]
            $crate::quant::r4::vec_dot4_plain($ty, rows4, act, acc)
        }
        dispatch_vec_dot4!(@many $one, $many, $simd[]);
    };
    (@many $one:ident, $many:ident, $simd:path[$($g:tt),*]) => {
        fn $many(rows4: &[u8], acts: &[$crate::quant::Q8<'_>], out: &mut [[f32; 4]]) {
            assert_eq!(acts.len(), out.len(), "vec_dot4_n: one output per activation row");
            assert!(acts.len() <= $crate::quant::r4::MAX_TOKENS, "vec_dot4_n: {} activation rows", acts.len());
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            {
                use $simd as kernel;
                macro_rules! run {
                    ($n:literal) => {{
                        // SAFETY: relaxed-simd is enabled; the kernel checks every length.
                        let zero = core::arch::wasm32::f32x4_splat(0.0);
                        let v = unsafe { kernel::<$($g,)* $n>(rows4, core::array::from_fn(|t| acts[t]), [zero; $n]) };
                        for (o, v) in out.iter_mut().zip(v) {
                            *o = $crate::quant::simd::lanes(v);
                        }
                    }};
                }
                match acts.len() {
                    0 => {}
                    1 => out[0] = $one(rows4, acts[0], [0.0; 4]),
                    2 => run!(2),
                    3 => run!(3),
                    _ => run!(4),
                }
                return;
            }
            #[allow(unreachable_code)]
            for (o, &a) in out.iter_mut().zip(acts) {
                *o = $one(rows4, a, [0.0; 4]);
            }
        }
    };
}
use dispatch_vec_dot4;

/// Dispatches the row decoder `$name` to the SIMD128 one `$simd` on wasm32+simd128, else to the
/// generic reference for block type `$t`.
macro_rules! dispatch_decode {
    ($name:ident, $simd:path, $t:ty) => {
        fn $name(row: &[u8], out: &mut $crate::quant::gemm::Decoded) {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build; the decoder checks all lengths itself.
                return unsafe { $simd(row, out) };
            }
            #[allow(unreachable_code)]
            super::decode_ref::<$t>(row, out)
        }
    };
}
use dispatch_decode;

/// Dispatches the int8 row decoder `$name` to the SIMD128 one `$simd` on wasm32+simd128, else to
/// the generic reference for block type `$t` with offset `$off`.
macro_rules! dispatch_decode8 {
    ($name:ident, $simd:path, $t:ty, $off:expr) => {
        fn $name(row: &[u8], out: &mut $crate::quant::gemm8::Decoded8) {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build; the decoder checks all lengths itself.
                return unsafe { $simd(row, out) };
            }
            #[allow(unreachable_code)]
            super::decode8_ref::<$t, { $off }>(row, out)
        }
    };
}
use dispatch_decode8;

/// A load-time form's block expansion for [`forms::expand_blocks`](self::forms::expand_blocks): the SIMD128 one `$simd(src,
/// dst)` on wasm32+simd128 (a symbol only those builds have, hence a macro), else the reference
/// `$reference(src, dst)` — the same bytes (`tests/kernels.rs`).
macro_rules! dispatch_expand {
    ($simd:path, $reference:path) => {
        |src, dst| {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build.
                return unsafe { $simd(src, dst) };
            }
            #[allow(unreachable_code)]
            $reference(src, dst)
        }
    };
}
use dispatch_expand;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! SIMD128 building blocks shared by the K-quant kernels.
    use super::{Q8, QK_K};
    use core::arch::wasm32::*;

    /// 8 bytes at `p` zero-extended to u16 lanes.
    ///
    /// # Safety
    /// `p..p+8` must be readable.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub unsafe fn ld_u8x8(p: *const u8) -> v128 {
        u16x8_load_extend_u8x8(p)
    }

    /// 8 activation bytes at `p` sign-extended to i16 lanes.
    ///
    /// # Safety
    /// `p..p+8` must be readable.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub unsafe fn ld_i8x8(p: *const i8) -> v128 {
        i16x8_load_extend_i8x8(p)
    }

    /// i16 products of 16 weights (two u16/i16 vectors) with 16 activations at `a`, summed pairwise
    /// into one i16x8 (lane i = w0[i]·a[i] + w1[i]·a[8+i]).
    ///
    /// # Safety
    /// `a..a+16` must be readable; |w·a| must stay below 2^14.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub unsafe fn mul16(w0: v128, w1: v128, a: *const i8) -> v128 {
        i16x8_add(i16x8_mul(w0, ld_i8x8(a)), i16x8_mul(w1, ld_i8x8(a.add(8))))
    }

    /// Weight block, activations, group sums, activation scale (f32x4 splat).
    pub type BlockPtrs = (*const u8, *const i8, *const i16, v128);

    /// Pointers to super-block `b` of `row` (block size `bb`) and of `act`, and the activation
    /// scale as an f32x4 splat.
    ///
    /// # Safety
    /// `row` must hold more than `b` blocks and `act` more than `b` super-blocks (`check_lens`).
    #[inline(always)]
    pub unsafe fn block_ptrs(row: &[u8], bb: usize, act: &Q8<'_>, b: usize) -> BlockPtrs {
        let x = row.as_ptr().add(bb * b);
        let a = act.qs.as_ptr().add(QK_K * b);
        let bs = act.bsums.as_ptr().add(16 * b);
        (x, a, bs, v128_load32_splat(act.d.as_ptr().add(8 * b) as *const u32))
    }

    pub use crate::quant::simd::f16_lanes;

    /// The 32 nibbles of the 16 bytes at `x + 16b` as two byte vectors: `v & 15` and `(v >> 4) &
    /// 15` (a u16 shift; the mask drops the bits that cross a byte) — sub-block b's codes in the
    /// load-time nibble forms (IQ2_SX, IQ3_SX, Q3_KX: weights 32b.. and 32b+16..).
    ///
    /// # Safety
    /// `x + 16b .. x + 16b + 16` must be readable.
    #[inline(always)]
    pub unsafe fn nibbles(x: *const u8, b: usize) -> (v128, v128) {
        let v = v128_load(x.add(16 * b) as *const v128);
        let m15 = u8x16_splat(15);
        (v128_and(v, m15), v128_and(u16x8_shr(v, 4), m15))
    }

    /// [`nibbles`] of the four 16-byte words at `q` (a sub-block of four interleaved rows): the
    /// low nibbles of the four words, then the high ones.
    ///
    /// # Safety
    /// `q..q + 64` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn nibbles4(q: *const u8) -> ([v128; 4], [v128; 4]) {
        let n: [(v128, v128); 4] = core::array::from_fn(|k| nibbles(q, k));
        (n.map(|p| p.0), n.map(|p| p.1))
    }

    /// `2·nib + 1` of the low and of the high nibbles of the 16 bytes at `p`, as bytes (the odd
    /// scales of IQ2_S and IQ3_S, kept as nibbles by their load-time forms).
    ///
    /// # Safety
    /// `p..p + 16` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn odd_scales(p: *const u8) -> (v128, v128) {
        let (lo, hi) = nibbles(p, 0);
        let one = u8x16_splat(1);
        (v128_or(i8x16_add(lo, lo), one), v128_or(i8x16_add(hi, hi), one))
    }

    /// The fp16 at `p` as an f32x4 splat.
    ///
    /// # Safety
    /// `p..p+2` must be readable.
    #[inline(always)]
    pub unsafe fn f16_splat(p: *const u8) -> v128 {
        f16_lanes(v128_load16_splat(p as *const u16))
    }

    /// The two fp16 at `p` (`d`) and `p + 2` (`dmin`), each times the f32 `da`, as two f32x4 splats.
    ///
    /// # Safety
    /// `p..p+4` must be readable.
    #[inline(always)]
    pub unsafe fn f16_pair_splats(p: *const u8, da: v128) -> (v128, v128) {
        let f = f32x4_mul(
            f16_lanes(u32x4_extend_low_u16x8(v128_load32_splat(p as *const u32))),
            da,
        );
        (i32x4_shuffle::<0, 0, 0, 0>(f, f), i32x4_shuffle::<1, 1, 1, 1>(f, f))
    }

    /// Stores the 16 i16 scales of `lo` (groups 0..7) and `hi` (groups 8..15) as `sc | sc << 16`
    /// in the i32 words `sp[0..16]`, ready for [`dot_bytes_g16`].
    ///
    /// # Safety
    /// `sp..sp+4` must be writable.
    #[inline(always)]
    pub unsafe fn store_scale_pairs(sp: *mut v128, lo: v128, hi: v128) {
        v128_store(sp, i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(lo, lo));
        v128_store(sp.add(1), i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(lo, lo));
        v128_store(sp.add(2), i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(hi, hi));
        v128_store(sp.add(3), i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(hi, hi));
    }

    /// `Σ_g sc_g Σ_{l<16} w[16g+l]·a[16g+l]` over one super-block (i32x4 partial sums): `w` = the
    /// 256 weights decoded to unsigned bytes (two products must fit an i16 lane: w·|a| < 2^14),
    /// `s` = 16 words `sc_g | sc_g << 16` (see [`store_scale_pairs`]). With relaxed SIMD the
    /// products come from [`rdot16`] (16 byte products per instruction; the weights 7-bit).
    ///
    /// # Safety
    /// `w` and `a` must hold 256 bytes, `s` 16 words.
    #[inline(always)]
    pub unsafe fn dot_bytes_g16(w: *const u8, a: *const i8, s: *const u32) -> v128 {
        let (mut w, mut a, mut s) = (w, a, s);
        let mut isum = i32x4_splat(0);
        // An opaque trip count keeps this a loop: when V8 (TurboFan) sees the whole block
        // unrolled it hoists all loads to the top and spills most of them.
        for _ in 0..core::hint::black_box(8u32) {
            #[cfg(not(target_feature = "relaxed-simd"))]
            let (p0, p1) = (mul16(ld_u8x8(w), ld_u8x8(w.add(8)), a), mul16(ld_u8x8(w.add(16)), ld_u8x8(w.add(24)), a.add(16)));
            #[cfg(target_feature = "relaxed-simd")]
            let (p0, p1) = (
                rdot16(v128_load(w as *const v128), v128_load(a as *const v128)),
                rdot16(v128_load(w.add(16) as *const v128), v128_load(a.add(16) as *const v128)),
            );
            let s0 = i32x4_dot_i16x8(p0, v128_load32_splat(s));
            let s1 = i32x4_dot_i16x8(p1, v128_load32_splat(s.add(1)));
            isum = i32x4_add(isum, i32x4_add(s0, s1));
            w = w.add(32);
            a = a.add(32);
            s = s.add(2);
        }
        isum
    }

    /// Pairwise i16 sums of the 16 products `w·a` with `i16x8.relaxed_dot_i8x16_i7x16_s`
    /// (activations first, weights second); the weights must be 7-bit (≤ 127).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub fn rdot16(w: v128, a: v128) -> v128 {
        i16x8_relaxed_dot_i8x16_i7x16(a, w)
    }

    /// Relaxed SIMD over a block in Q3_K's bit layout (`hmask` at 0..32: bit 4n + j of byte
    /// 16h + l; `qs` at 32..96: two bits at shift 2j of byte 32n + 16h + l — element
    /// 128n + 32j + 16h + l): `Σ_g sc_g Σ_l u·a` with `u = low | high << 2 ∈ 0..7` made in
    /// registers (no stack round trip). One loop step = shift j of half n, i.e. groups 8n+2j and 8n+2j+1; `qs` moves
    /// right by 2 and `hmask` (pre-shifted: its step bit at bit 2) by 1 per step.
    ///
    /// # Safety
    /// `x` is a whole block, `a` its 256 activations, `s` 16 words `sc_g | sc_g << 16`.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn dot_3bit_relaxed(x: *const u8, a: *const i8, s: *const u32) -> v128 {
        let (mut a, mut s) = (a, s);
        let mut isum = i32x4_splat(0);
        let steps = core::hint::black_box(4u32);
        for n in 0..2 {
            let mut q = [v128_load(x.add(32 + 32 * n) as *const v128), v128_load(x.add(48 + 32 * n) as *const v128)];
            // hmask bits 4n.. moved to bit 2 of each byte once per half (bit 2 + j of a byte is
            // bit j of hmask: a u16 shift left by 2 loses only bits 6, 7 of the high byte, never
            // read), so each step needs one `and` for the high bit.
            let half = |p: *const u8| i16x8_shl(u16x8_shr(v128_load(p as *const v128), 4 * n as u32), 2);
            let mut h = [half(x), half(x.add(16))];
            for _ in 0..steps {
                let (m3, m4) = (u8x16_splat(3), u8x16_splat(4));
                let u0 = v128_or(v128_and(q[0], m3), v128_and(h[0], m4));
                let u1 = v128_or(v128_and(q[1], m3), v128_and(h[1], m4));
                let p0 = rdot16(u0, v128_load(a as *const v128));
                let p1 = rdot16(u1, v128_load(a.add(16) as *const v128));
                let s0 = i32x4_dot_i16x8(p0, v128_load32_splat(s));
                let s1 = i32x4_dot_i16x8(p1, v128_load32_splat(s.add(1)));
                isum = i32x4_add(isum, i32x4_add(s0, s1));
                q = [u16x8_shr(q[0], 2), u16x8_shr(q[1], 2)];
                h = [u16x8_shr(h[0], 1), u16x8_shr(h[1], 1)];
                a = a.add(32);
                s = s.add(2);
            }
        }
        isum
    }

    /// The per-token integer sums `Σ_g sc_r[g] Σ_l u·a` (lane r = row r) of one R4 block in
    /// Q3_K's bit layout: `hmask` / `qs` the block's interleaved high-bit and
    /// low-bits words (word k of a quarter (n, h) holds elements 4k..4k+4 of group
    /// g = 8n + 2j + h of each row at shift j; the high bits pre-shifted per quarter so that bit 2
    /// of each byte is the step's bit, as in [`dot_3bit_relaxed`]), `a0[t]` token t's 256
    /// activations, `scb` the groups' scales as [`r4_store_scales`] leaves them. Each token's
    /// four relaxed dots of a group (16 products per row) are summed in i16 (≤ 4·2·7·128 < 2^15)
    /// before one `i32x4.dot` with the scales. The shifts after a quarter's last step are skipped.
    ///
    /// # Safety
    /// `hmask` 128 and `qs` 256 readable bytes, every `a0[t]` 256 activations, `scb` 128 bytes.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn r4_3bit_isums<const NY: usize>(hmask: *const u8, qs: *const u8, a0: [*const i8; NY], scb: *const i8) -> [v128; NY] {
        let (m3, m4) = (u8x16_splat(3), u8x16_splat(4));
        let mut isum = [i32x4_splat(0); NY];
        // Opaque trip counts keep both loops loops (V8 spills a fully unrolled block).
        for nh in 0..core::hint::black_box(4usize) {
            let (n, h) = (nh >> 1, nh & 1);
            let q = qs.add(64 * nh) as *const v128;
            let hp = hmask.add(64 * h) as *const v128;
            let mut v = [v128_load(q), v128_load(q.add(1)), v128_load(q.add(2)), v128_load(q.add(3))];
            let mut hm = [0, 1, 2, 3].map(|k| i16x8_shl(u16x8_shr(v128_load(hp.add(k)), 4 * n as u32), 2));
            for j in 0..core::hint::black_box(4usize) {
                let g = 8 * n + 2 * j + h;
                let u: [v128; 4] = core::array::from_fn(|k| v128_or(v128_and(v[k], m3), v128_and(hm[k], m4)));
                let scale = i16x8_load_extend_i8x8(scb.add(8 * g));
                for t in 0..NY {
                    let a = a0[t].add(16 * g) as *const u32;
                    let p: [v128; 4] = core::array::from_fn(|k| rdot16(u[k], v128_load32_splat(a.add(k))));
                    let s = i16x8_add(i16x8_add(i16x8_add(p[0], p[1]), p[2]), p[3]);
                    isum[t] = i32x4_add(isum[t], i32x4_dot_i16x8(s, scale));
                }
                if j < 3 {
                    for k in 0..4 {
                        v[k] = u16x8_shr(v[k], 2);
                        hm[k] = u16x8_shr(hm[k], 1);
                    }
                }
            }
        }
        isum
    }

    /// `out(g, u)` for the 16 elements of group g of a block in Q3_K's bit layout (see
    /// [`dot_3bit_relaxed`]): `u = (qs >> 2j) & 3 | (hmask bit 4n+j) << 2`. Byte lanes are
    /// shifted as u16 lanes; the masks drop the bits that cross a byte.
    ///
    /// # Safety
    /// `x` is a whole block.
    #[inline(always)]
    pub unsafe fn decode_3bit(x: *const u8, mut out: impl FnMut(usize, v128)) {
        let hm = [v128_load(x as *const v128), v128_load(x.add(16) as *const v128)];
        let (m3, m4) = (u8x16_splat(3), u8x16_splat(4));
        for n in 0..2 {
            for (h, &hmh) in hm.iter().enumerate() {
                let q = v128_load(x.add(32 + 32 * n + 16 * h) as *const v128);
                for j in 0..4 {
                    let low = v128_and(u16x8_shr(q, 2 * j as u32), m3);
                    let m = (4 * n + j) as u32; // hmask bit → bit 2
                    let high = if m < 2 { u16x8_shl(hmh, 2 - m) } else { u16x8_shr(hmh, m - 2) };
                    out(8 * n + 2 * j + h, v128_or(low, v128_and(high, m4)));
                }
            }
        }
    }

    /// Like [`dot_bytes_g16`] for 8 sub-blocks of 32 with unsigned weights (four products per i16
    /// lane: |w·a| < 2^13), `s` = 8 words `sc_k | sc_k << 16`. Same opaque loop.
    ///
    /// # Safety
    /// `w` and `a` must hold 256 bytes, `s` 8 words.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub unsafe fn dot_bytes_g32(w: *const u8, a: *const i8, s: *const u32) -> v128 {
        let (mut w, mut a, mut s) = (w, a, s);
        let mut isum = i32x4_splat(0);
        for _ in 0..core::hint::black_box(8u32) {
            let p0 = mul16(ld_u8x8(w), ld_u8x8(w.add(8)), a);
            let p1 = mul16(ld_u8x8(w.add(16)), ld_u8x8(w.add(24)), a.add(16));
            isum = i32x4_add(isum, i32x4_dot_i16x8(i16x8_add(p0, p1), v128_load32_splat(s)));
            w = w.add(32);
            a = a.add(32);
            s = s.add(1);
        }
        isum
    }

    /// The group scales of four interleaved rows, as bytes (`sc[q]`: groups 4q..4q+4 in
    /// rows-major lanes 4r + i: Q3_K's and Q6_K's 16 signed scales, Q4_K's 8 sub-block scales):
    /// stores group g's four scales, each twice, at `scb[8g..8g+8]`, where an 8-byte extending
    /// load of them meets a product vector whose i16 lanes 2r, 2r+1 belong to row r in one
    /// `i32x4.dot`. `dup` ([`r4_dup_masks`]) are the swizzle masks of groups (4q, 4q+1) and
    /// (4q+2, 4q+3), passed in so that they stay in registers.
    ///
    /// # Safety
    /// `scb` must hold 32·N bytes.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn r4_store_scales<const N: usize>(sc: [v128; N], scb: *mut i8, dup: [v128; 2]) {
        for (q, &v) in sc.iter().enumerate() {
            v128_store(scb.add(32 * q) as *mut v128, i8x16_relaxed_swizzle(v, dup[0]));
            v128_store(scb.add(32 * q + 16) as *mut v128, i8x16_relaxed_swizzle(v, dup[1]));
        }
    }

    /// Per token, lane r = `Σ_g sc_r[g] · bsum[g]` for the scales `sc` as in
    /// [`r4_store_scales`] (`bsums[t]`: the block's 16 group sums of token t).
    ///
    /// # Safety
    /// Each `bsums[t]` must hold 16 values.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn r4_scale_sums_g16<const NY: usize>(sc: [v128; 4], bsums: [*const i16; NY]) -> [v128; NY] {
        // i16 lanes (row, i) against bsum[4q..4q+4] twice, then the two halves of each row added.
        let (mut m01, mut m23) = ([i32x4_splat(0); NY], [i32x4_splat(0); NY]);
        for (q, &v) in sc.iter().enumerate() {
            let (lo, hi) = (i16x8_extend_low_i8x16(v), i16x8_extend_high_i8x16(v));
            for t in 0..NY {
                let b4 = v128_load64_splat(bsums[t].add(4 * q) as *const u64);
                m01[t] = i32x4_add(m01[t], i32x4_dot_i16x8(lo, b4));
                m23[t] = i32x4_add(m23[t], i32x4_dot_i16x8(hi, b4));
            }
        }
        core::array::from_fn(|t| i32x4_add(i32x4_shuffle::<0, 2, 4, 6>(m01[t], m23[t]), i32x4_shuffle::<1, 3, 5, 7>(m01[t], m23[t])))
    }

    /// The masks [`r4_store_scales`] takes, opaque (kept in registers, see Q2_K's `vec_dot4`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub fn r4_dup_masks() -> [v128; 2] {
        core::hint::black_box([
            u8x16(0, 0, 4, 4, 8, 8, 12, 12, 1, 1, 5, 5, 9, 9, 13, 13),
            u8x16(2, 2, 6, 6, 10, 10, 14, 14, 3, 3, 7, 7, 11, 11, 15, 15),
        ])
    }

    /// Checks a row and its decoded buffers (`mins`: the type has mins); returns the block count.
    #[inline(always)]
    pub fn check_decode(row: &[u8], bb: usize, out: &crate::quant::gemm::Decoded, mins: bool) -> usize {
        let nb = row.len() / bb;
        assert_eq!(row.len(), nb * bb, "row is not a whole number of blocks");
        assert!(out.q.len() == nb * QK_K && out.d.len() == nb, "decoded row not sized for {nb} blocks");
        assert!(!mins || (out.m.len() == nb && out.mn.len() == 16 * nb));
        nb
    }

    /// `acc + convert(isum) * dall - convert(summs) * dmin` in f32x4 lanes (`dall`, `dmin` splats).
    #[inline(always)]
    pub fn fold_block(acc: v128, isum: v128, dall: v128, summs: v128, dmin: v128) -> v128 {
        let s = f32x4_mul(f32x4_convert_i32x4(isum), dall);
        let m = f32x4_mul(f32x4_convert_i32x4(summs), dmin);
        f32x4_add(acc, f32x4_sub(s, m))
    }
}
