//! Q3_K expanded ("Q3_KX"): a load-time form of Q3_K whose weights are 4-bit codes and whose
//! scales are bytes, read like IQ3_SX's. 256 weights in 146 bytes (Q3_K: 110), never stored in a
//! file.
//!
//! A Q3_K weight `q ∈ −4..=3` is two bits in `qs` and a third in the `hmask` plane, its 16 six-bit
//! scales packed in 12 bytes; joining each weight's bits costs its kernel five operations per 16
//! weights. Here `u = q + 4` is one nibble and each scale one signed byte:
//!
//! | offset | bytes | field                                                                        |
//! |--------|-------|------------------------------------------------------------------------------|
//! | 0      | 128   | `codes`: byte `16b + l`: low nibble = `u` of weight `32b + l`, high = `32b + 16 + l` |
//! | 128    | 16    | `scales`: `sc_g` (group g = weights 16g..16g+16) as a signed byte, −32..=31    |
//! | 144    | 2     | `d` (fp16), as in the source                                                 |
//!
//! The same weights, the same reference integers (`Σ_g sc_g Σ q·a`, the 4 taken back through the
//! activations' group sums in i32), so the four-row kernel's results are the reference's bit for
//! bit. What it costs: +33 % memory on the Q3_K matrices and an expansion after loading
//! ([`expand_in_place`], `forms.rs`); the browser's loader expands only where that costs no context.

use super::q3_k::Q3K;
use super::{dispatch_decode, dispatch_decode8, dispatch_expand, dispatch_vec_dot, dispatch_vec_dot4, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

/// Bytes per expanded block.
pub const BB: usize = 146;
/// Bytes per Q3_K block.
pub const BB_Q3K: usize = 110;

pub(super) const KERNELS: QuantKernels = kernels::<Q3Kx>(GgmlType::Q3_KX, vec_dot, decode, sanitize);

/// Int8 GEMM form: `u = q + 4 ∈ 0..=7` (Q3_K's codes exactly), the offset through the min term.
pub(super) const KERNELS8: Kernels8 = kernels8::<Q3Kx, 4>(GgmlType::Q3_KX, 7, [false, true], decode8);

struct Q3Kx;

impl KBlock for Q3Kx {
    const BB: usize = BB;
    const HAS_MIN: bool = false;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 144), 0.0)
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        (core::array::from_fn(|g| blk[128 + g] as i8 as i32), [0; 16])
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (w, qw) in q.iter_mut().enumerate() {
            let (b, l) = (w / 32, w % 32);
            let byte = blk[16 * b + l % 16];
            let u = if l < 16 { byte & 15 } else { byte >> 4 };
            *qw = u as i8 - 4;
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 144);
    // Codes are 0..=7 and scales six-bit: a random byte made one.
    for c in &mut block[..128] {
        *c &= 0x77;
    }
    for s in &mut block[128..144] {
        *s = ((*s & 63) as i8 - 32) as u8;
    }
}

/// One Q3_K block → its expanded form: the reference of [`expand_in_place`], which in wasm runs
/// `simd::expand` (the same bytes: Q3_K's kernel's decoding, then the codes packed).
pub fn expand_block(src: &[u8], dst: &mut [u8]) {
    let (src, dst): (&[u8; BB_Q3K], &mut [u8; BB]) = (src.try_into().unwrap(), dst.try_into().unwrap());
    let mut q = [0i8; QK_K];
    Q3K::decode(src, &mut q);
    for b in 0..8 {
        for l in 0..16 {
            dst[16 * b + l] = (q[32 * b + l] + 4) as u8 | ((q[32 * b + 16 + l] + 4) as u8) << 4;
        }
    }
    for (s, sc) in dst[128..144].iter_mut().zip(Q3K::scales(src).0) {
        *s = sc as i8 as u8;
    }
    dst[144..146].copy_from_slice(&src[108..110]);
}

/// Expands `nb` Q3_K blocks at `buf[raw..]` into their expanded form at `buf[out..]`, in place
/// (`out ≥ raw`, the ranges may overlap: [`super::forms::expand_blocks`]).
pub fn expand_in_place(buf: &mut [u8], raw: usize, out: usize, nb: usize) {
    super::forms::expand_blocks::<BB_Q3K, BB>(buf, raw, out, nb, dispatch_expand!(simd::expand, expand_block));
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<Q3Kx>);

/// Four rows interleaved ([`crate::quant::r4`]), 584 bytes per block, in the order the kernel
/// reads them:
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 64    | `scales` word k (groups 4k..4k+4) of row r at `16k + 4r`       |
/// | 64     | 8     | `d` of row r at `2r`                                           |
/// | 72     | 512   | `codes` word k (bytes 4k..4k+4) of row r at `16k + 4r`         |
pub(super) const R4: R4Kernels = R4Kernels {
    ty: GgmlType::Q3_KX,
    fields: &[
        Field { off: 128, len: 16, gran: 4 },
        Field { off: 144, len: 2, gran: 2 },
        Field { off: 0, len: 128, gran: 4 },
    ],
    vec_dot4,
    vec_dot4_n,
    matvec: crate::r4_matvec!(vec_dot4, GgmlType::Q3_KX),
    alt: None,
    wide_only: false,
    dot_add: false,
};

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4_n, GgmlType::Q3_KX);
dispatch_decode!(decode, simd::decode_row, Q3Kx);
dispatch_decode8!(decode8, simd::decode8_row, Q3Kx, 4);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Sub-block b's 32 codes are one vector (`nibbles`: groups 2b and 2b + 1).
    use super::super::q3_k::simd::unpack_scales;
    use super::super::simd::{block_ptrs, check_decode, decode_3bit, dot_bytes_g16, f16_splat, nibbles as codes, store_scale_pairs};
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::{f16_lanes, nibbles4, r4_dup_masks, r4_scale_sums_g16, r4_store_scales, rdot16};
    use super::super::{check_lens, Q8, QK_K};
    use super::{BB, BB_Q3K};
    use crate::quant::gemm::Decoded;
    use crate::quant::gemm8::{simd::{store_i16_and_scaled, store_pair_order}, Decoded8};
    use crate::quant::simd::{hsum_f32, store_scaled16};
    use crate::quant::f16_at;
    use core::arch::wasm32::*;

    /// [`super::expand_block`] of one Q3_K block: Q3_K's decoding of its 16 groups to `u = q + 4`
    /// (`decode_3bit`), two groups to a vector of nibbles (a u16 shift: `u ≤ 7`, nothing crosses a
    /// byte), its scales unpacked to bytes.
    ///
    /// # Safety
    /// Requires simd128.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn expand(src: &[u8; BB_Q3K], dst: &mut [u8; BB]) {
        let x = src.as_ptr();
        let mut u = [u8x16_splat(0); 16];
        decode_3bit(x, |g, v| u[g] = v);
        let out = dst.as_mut_ptr();
        for b in 0..8 {
            v128_store(out.add(16 * b) as *mut v128, v128_or(u[2 * b], i16x8_shl(u[2 * b + 1], 4)));
        }
        v128_store(out.add(128) as *mut v128, unpack_scales(x, core::hint::black_box(i32x4(64, 16, 4, 1))));
        dst[144..146].copy_from_slice(&src[108..110]);
    }

    /// One row · one activation row: the codes to 256 bytes on the stack, then `dot_bytes_g16`
    /// with the scales (relaxed dots where the build has them); the 4 comes back as
    /// `4 Σ_g sc_g bsum_g` per block, in i32.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lens(row, BB, &act);
        let mut acc = f32x4_splat(0.0);
        let mut sbuf = [i32x4_splat(0); 4];
        let mut wbuf = [u8x16_splat(0); 16];
        for i in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks and the matching activations.
            let (x, a, bs, da) = block_ptrs(row, BB, &act, i);
            let sc = v128_load(x.add(128) as *const v128);
            let (sc_lo, sc_hi) = (i16x8_extend_low_i8x16(sc), i16x8_extend_high_i8x16(sc));
            store_scale_pairs(sbuf.as_mut_ptr(), sc_lo, sc_hi);
            for b in 0..8 {
                (wbuf[2 * b], wbuf[2 * b + 1]) = codes(x, b);
            }
            let isum = dot_bytes_g16(wbuf.as_ptr() as *const u8, a, sbuf.as_ptr() as *const u32);
            let summs = i32x4_add(
                i32x4_dot_i16x8(sc_lo, v128_load(bs as *const v128)),
                i32x4_dot_i16x8(sc_hi, v128_load(bs.add(8) as *const v128)),
            );
            let total = i32x4_sub(isum, i32x4_shl(summs, 2));
            acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(total), f32x4_mul(f16_splat(x.add(144)), da)));
        }
        hsum_f32(acc)
    }

    /// Four interleaved rows (the R4 layout above) · `NY` activation rows: lane r of `out[t]` is
    /// row r · `acts[t]`. Per sub-block the four code words of the rows make 8 vectors of 16
    /// products with one activation word broadcast each (i16 lanes 2r, 2r+1 belong to row r); a
    /// group's four are summed in i16 (≤ 4·2·7·128 < 2^15), then `i32x4.dot` with its scales of the
    /// four rows (sign-extended from a per-block buffer of each scale byte twice, as Q3_K's).
    /// Per block the reference's integers (`isum − 4 Σ_g sc_g bsum_g`), so its result bit for bit.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot4_n<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::Q3_KX, &a))[0];
        let dup = r4_dup_masks();
        let mut scb = [0i8; 128];
        let scb = scb.as_mut_ptr();
        let mut acc = acc0;
        for i in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·146 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`; `scb` holds 16
            // groups × 8.
            let x = rows4.as_ptr().add(4 * BB * i);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * i));
            // Lanes 4r + j of vector k: the scale of group 4k + j of row r.
            let sc: [v128; 4] = core::array::from_fn(|k| v128_load(x.add(16 * k) as *const v128));
            r4_store_scales(sc, scb, dup);
            let summs = r4_scale_sums_g16(sc, acts.map(|a| a.bsums.as_ptr().add(16 * i)));
            let mut isum = [i32x4_splat(0); NY];
            // Opaque trip count keeps the loop a loop (V8 spills a fully unrolled block).
            for b in 0..core::hint::black_box(8usize) {
                let (lo, hi) = nibbles4(x.add(72 + 64 * b));
                let slo = i16x8_load_extend_i8x8(scb.add(16 * b));
                let shi = i16x8_load_extend_i8x8(scb.add(16 * b + 8));
                for t in 0..NY {
                    // Word j of the rows: weights 32b + 4j.. (low nibbles), 32b + 16 + 4j.. (high).
                    let a = a0[t].add(32 * b) as *const u32;
                    let mut plo = rdot16(lo[0], v128_load32_splat(a));
                    plo = i16x8_add(plo, rdot16(lo[1], v128_load32_splat(a.add(1))));
                    plo = i16x8_add(plo, rdot16(lo[2], v128_load32_splat(a.add(2))));
                    plo = i16x8_add(plo, rdot16(lo[3], v128_load32_splat(a.add(3))));
                    let mut phi = rdot16(hi[0], v128_load32_splat(a.add(4)));
                    phi = i16x8_add(phi, rdot16(hi[1], v128_load32_splat(a.add(5))));
                    phi = i16x8_add(phi, rdot16(hi[2], v128_load32_splat(a.add(6))));
                    phi = i16x8_add(phi, rdot16(hi[3], v128_load32_splat(a.add(7))));
                    isum[t] = i32x4_add(isum[t], i32x4_add(i32x4_dot_i16x8(plo, slo), i32x4_dot_i16x8(phi, shi)));
                }
            }
            let d = f16_lanes(u32x4_load_extend_u16x4(x.add(64) as *const u16));
            for t in 0..NY {
                let total = i32x4_sub(isum[t], i32x4_shl(summs[t], 2));
                let da = v128_load32_splat(acts[t].d.as_ptr().add(8 * i) as *const u32);
                acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(total), f32x4_mul(d, da)));
            }
        }
        acc
    }

    /// Row → GEMM form: `(u − 4)·sc_g` per group, `d`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, false);
        let off = i8x16_splat(4);
        for i in 0..nb {
            // SAFETY: block i is row[146i..146i+146]; its weights are q[256i..256i+256].
            let x = row.as_ptr().add(BB * i);
            let q = out.q.as_mut_ptr().add(QK_K * i);
            let sc = |g: usize| i16x8_splat(*(x.add(128 + g) as *const i8) as i16);
            for b in 0..8 {
                let (lo, hi) = codes(x, b);
                store_scaled16(q.add(32 * b), i8x16_sub(lo, off), sc(2 * b));
                store_scaled16(q.add(32 * b + 16), i8x16_sub(hi, off), sc(2 * b + 1));
            }
            out.d[i] = f16_at(core::slice::from_raw_parts(x, BB), 144);
        }
    }

    /// Row → int8 GEMM form: `u` in pair order, `sc_g`, `mn_g = −4·sc_g`, `d = m = d_w` (Q3_K's
    /// `decode8` exactly).
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked inside.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(crate::quant::GgmlType::Q3_KX, row);
        let mut v = [u8x16_splat(0); 16];
        let off = i16x8_splat(-4);
        for i in 0..nb {
            // SAFETY: block i is row[146i..]; its outputs are u[256i..], sc/mn[16i..16i+16].
            let x = row.as_ptr().add(BB * i);
            store_i16_and_scaled(out.sc.as_mut_ptr().add(16 * i), v128_load(x.add(128) as *const v128), out.mn.as_mut_ptr().add(16 * i), off);
            for b in 0..8 {
                (v[2 * b], v[2 * b + 1]) = codes(x, b);
            }
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * i));
            let d = f16_at(core::slice::from_raw_parts(x, BB), 144);
            out.d[i] = d;
            out.m[i] = d;
        }
    }
}
