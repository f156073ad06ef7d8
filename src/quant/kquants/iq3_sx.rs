//! IQ3_S expanded ("IQ3_SX"): a load-time form of IQ3_S whose weights are 4-bit codes, read like
//! Q4_K's nibbles with no codebook lookup. 256 weights in 134 bytes (IQ3_S: 110), never stored in
//! a file.
//!
//! An IQ3_S weight is `d · (1 + 2s) · mag · sign`: its magnitude one of the odd numbers 1..=15,
//! found through a 9-bit codebook index per four weights, its sign one bit. The kernels are bound
//! by those lookups (a dependent load per four weights). The sixteen values ±1, ±3, …, ±15 are
//! exactly `2c − 15` for `c = 0..=15`, so each weight is stored as that nibble `c`:
//!
//! | offset | bytes | field                                                                        |
//! |--------|-------|------------------------------------------------------------------------------|
//! | 0      | 128   | `codes`: byte `16b + l`: low nibble = weight `32b + l`, high = `32b + 16 + l` |
//! | 128    | 4     | `scales`: IQ3_S's (`s_b` = nibble `b % 2` of byte `b / 2`)                   |
//! | 132    | 2     | `d` (fp16), as in the source                                                 |
//!
//! In the K-quant form: group g (16 weights) has `sc_g = 1 + 2·s_{g/2}`, `q = 2c − 15`. A
//! sub-block's `Σ q·a = 2·Σ c·a − 15·Σ a`: the kernels multiply the codes as they are (≤ 15, the
//! 7-bit operand) and take the 15 back through the activations' group sums, per block in i32 —
//! the reference's integers exactly, so the four-row kernel's results are the reference's bit
//! for bit.
//!
//! What it costs: +22 % memory on the IQ3_S matrices, and an expansion after loading
//! ([`expand_in_place`], `forms.rs`). The browser's loader expands only where that costs no
//! context (`www/src/loader.ts`).

use super::{dispatch_decode, dispatch_decode8, dispatch_expand, dispatch_vec_dot, dispatch_vec_dot4, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::iq3::iq3_s;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

/// Bytes per expanded block.
pub const BB: usize = 134;
/// Bytes per IQ3_S block.
pub const BB_IQ3S: usize = 110;

pub(super) const KERNELS: QuantKernels = kernels::<Iq3Sx>(GgmlType::IQ3_SX, vec_dot, decode, sanitize);

/// Int8 GEMM form: `u = q + 15 = 2c ∈ 0..=30` (IQ3_S's codes exactly), the offset through the
/// min term.
pub(super) const KERNELS8: Kernels8 = Kernels8 { scales32: true, ..kernels8::<Iq3Sx, 15>(GgmlType::IQ3_SX, 30, [false, true], decode8) };

struct Iq3Sx;

impl KBlock for Iq3Sx {
    const BB: usize = BB;
    const HAS_MIN: bool = false;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 132), 0.0)
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        (core::array::from_fn(|g| 1 + 2 * ((blk[128 + g / 4] >> (4 * ((g / 2) % 2))) & 15) as i32), [0; 16])
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (w, qw) in q.iter_mut().enumerate() {
            let (b, l) = (w / 32, w % 32);
            let byte = blk[16 * b + l % 16];
            let c = if l < 16 { byte & 15 } else { byte >> 4 };
            *qw = 2 * c as i8 - 15;
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 132);
}

/// One IQ3_S block → its expanded form: the reference of [`expand_in_place`], which in wasm runs
/// `simd::expand` (the same bytes: IQ3_S's kernel's codebook gather, then the codes packed).
pub fn expand_block(src: &[u8], dst: &mut [u8]) {
    let (src, dst): (&[u8; BB_IQ3S], &mut [u8; BB]) = (src.try_into().unwrap(), dst.try_into().unwrap());
    for b in 0..8 {
        let mut c = [0u8; 32];
        for l in 0..4 {
            for (j, q) in iq3_s::group(src, b, l).into_iter().enumerate() {
                c[8 * l + j] = ((q + 15) / 2) as u8;
            }
        }
        for l in 0..16 {
            dst[16 * b + l] = c[l] | c[16 + l] << 4;
        }
    }
    dst[128..132].copy_from_slice(&src[106..110]);
    dst[132..134].copy_from_slice(&src[0..2]);
}

/// Expands `nb` IQ3_S blocks at `buf[raw..]` into their expanded form at `buf[out..]`, in place
/// (`out ≥ raw`, the ranges may overlap: [`super::forms::expand_blocks`]).
pub fn expand_in_place(buf: &mut [u8], raw: usize, out: usize, nb: usize) {
    super::forms::expand_blocks::<BB_IQ3S, BB>(buf, raw, out, nb, dispatch_expand!(simd::expand, expand_block));
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<Iq3Sx>);

/// Four rows interleaved ([`crate::quant::r4`]), 536 bytes per block:
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 16    | `scales` byte k of row r at `4k + r`                           |
/// | 16     | 8     | `d` of row r at `2r`                                           |
/// | 24     | 512   | `codes` word k (bytes 4k..4k+4) of row r at `24 + 16k + 4r`    |
pub(super) const R4: R4Kernels = R4Kernels {
    ty: GgmlType::IQ3_SX,
    fields: &[
        Field { off: 128, len: 4, gran: 1 },
        Field { off: 132, len: 2, gran: 2 },
        Field { off: 0, len: 128, gran: 4 },
    ],
    vec_dot4,
    vec_dot4_n,
    matvec: crate::r4_matvec!(vec_dot4, GgmlType::IQ3_SX),
    alt: None,
    wide_only: false,
    dot_add: false,
};

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4_n, GgmlType::IQ3_SX);
dispatch_decode!(decode, simd::decode_row, Iq3Sx);
dispatch_decode8!(decode8, simd::decode8_row, Iq3Sx, 15);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Sub-block b's 32 codes are one vector (`nibbles`: weights 32b..32b+16 and 32b+16..32b+32).
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::super::simd::dot_bytes_g32;
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::{f16_lanes, nibbles4, odd_scales, rdot16};
    use super::super::simd::{block_ptrs, check_decode, nibbles as codes};
    use super::super::{check_lens, Q8, QK_K};
    use super::{BB, BB_IQ3S};
    use crate::quant::gemm::Decoded;
    use crate::quant::gemm8::Decoded8;
    use crate::quant::iq3::iq3_s::simd::{sub_block, Consts};
    use crate::quant::simd::{hsum_i32, store_scaled16};
    use crate::quant::f16_at;
    use core::arch::wasm32::*;

    /// `1 + 2 s_b` of the block at `x`.
    #[inline(always)]
    unsafe fn ls(x: *const u8, b: usize) -> i16 {
        1 + 2 * ((*x.add(128 + b / 2) >> (4 * (b % 2))) & 15) as i16
    }

    /// `Σ_b ls_b · (bsum_{2b} + bsum_{2b+1})`: the share of the offset 15 (the codes' `Σ c·a`
    /// counts every activation 15 times too often, halved).
    #[inline(always)]
    unsafe fn offset_sum(x: *const u8, bs: *const i16) -> i32 {
        (0..8).map(|b| ls(x, b) as i32 * (*bs.add(2 * b) as i32 + *bs.add(2 * b + 1) as i32)).sum()
    }

    /// [`super::expand_block`] of one IQ3_S block: IQ3_S's sub-block decoding (codebook gather,
    /// signs), then `c = (q + 15) / 2` packed two to a byte — as u16 shifts: `q + 15` is even, so
    /// nothing crosses a byte.
    ///
    /// # Safety
    /// Requires simd128.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn expand(src: &[u8; BB_IQ3S], dst: &mut [u8; BB]) {
        let k = Consts::new();
        let p = src.as_ptr();
        let sc = (p.add(106) as *const u32).read_unaligned();
        let off = i8x16_splat(15);
        for b in 0..8 {
            let (w0, w1, _) = sub_block(p, sc, b, &k);
            let (u0, u1) = (i8x16_add(w0, off), i8x16_add(w1, off));
            v128_store(dst.as_mut_ptr().add(16 * b) as *mut v128, v128_or(u16x8_shr(u0, 1), i16x8_shl(u1, 3)));
        }
        dst[128..132].copy_from_slice(&src[106..110]);
        dst[132..134].copy_from_slice(&src[0..2]);
    }

    /// One row · one activation row: per sub-block two products (`i16x8.relaxed_dot`) summed in
    /// i16 (≤ 4 · 15 · 128) and scaled by `i32x4.dot` with `ls_b`; per block the integers of the
    /// reference (`2 Σ − 15 · offset`), then `d · d_a` as it multiplies.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lens(row, BB, &act);
        #[cfg(not(target_feature = "relaxed-simd"))]
        let (mut wbuf, mut sbuf) = ([u8x16_splat(0); 16], [0u32; 8]);
        let mut sumf = 0.0f32;
        for i in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks and the matching activations.
            let (x, a, bs, _) = block_ptrs(row, BB, &act, i);
            #[cfg(target_feature = "relaxed-simd")]
            let isum = {
                let mut isum = i32x4_splat(0);
                for b in 0..core::hint::black_box(8usize) {
                    let (lo, hi) = codes(x, b);
                    let p = i16x8_add(
                        rdot16(lo, v128_load(a.add(32 * b) as *const v128)),
                        rdot16(hi, v128_load(a.add(32 * b + 16) as *const v128)),
                    );
                    isum = i32x4_add(isum, i32x4_dot_i16x8(p, i16x8_splat(ls(x, b))));
                }
                isum
            };
            #[cfg(not(target_feature = "relaxed-simd"))]
            let isum = {
                for b in 0..8 {
                    let (lo, hi) = codes(x, b);
                    wbuf[2 * b] = lo;
                    wbuf[2 * b + 1] = hi;
                    sbuf[b] = ls(x, b) as u16 as u32 * 0x1_0001;
                }
                dot_bytes_g32(wbuf.as_ptr() as *const u8, a, sbuf.as_ptr())
            };
            let total = 2 * hsum_i32(isum) - 15 * offset_sum(x, bs);
            let blk = core::slice::from_raw_parts(x, BB);
            sumf += act.d[8 * i] * f16_at(blk, 132) * total as f32;
        }
        sumf
    }

    /// Four interleaved rows (the R4 layout above) · `NY` activation rows: lane r of `out[t]` is
    /// row r · `acts[t]`. Per sub-block the four code words of the rows make 8 vectors of 16
    /// products with one activation word broadcast each (i16 lanes 2r, 2r+1 belong to row r),
    /// summed in i16 (≤ 8 · 2 · 15 · 128 < 2^15), then `i32x4.dot` with the rows' `ls_b` (one
    /// swizzle of the block's scale bytes, made `1 + 2s` once per block) and with the group-sum pair
    /// for the offset. The reference's integers per block, so its result bit for bit.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot4_n<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::IQ3_SX, &a))[0];
        // Byte 4k + r → i16 lanes 2r and 2r+1 (index 0x80 + 4k gives 0). Opaque, so that it stays
        // in a register: a shuffle with immediate indices is rebuilt from two 64-bit moves at every use.
        let dup = core::hint::black_box(u8x16(0, 0x80, 0, 0x80, 1, 0x80, 1, 0x80, 2, 0x80, 2, 0x80, 3, 0x80, 3, 0x80));
        let mut acc = acc0;
        for i in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·134 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`.
            let x = rows4.as_ptr().add(4 * BB * i);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * i));
            // Byte 4k + r of `s`: nibbles s_{2k} (low), s_{2k+1} (high) of row r, made 1 + 2s.
            let (ls_even, ls_odd) = odd_scales(x);
            let mut isum = [i32x4_splat(0); NY];
            let mut offs = [i32x4_splat(0); NY];
            // Opaque trip count keeps the loop a loop (V8 spills a fully unrolled block).
            for k in 0..core::hint::black_box(4usize) {
                let dupk = i8x16_add(dup, i8x16_splat(4 * k as i8));
                for (h, half) in [ls_even, ls_odd].into_iter().enumerate() {
                    let b = 2 * k + h;
                    let ls = i8x16_relaxed_swizzle(half, dupk);
                    let (lo, hi) = nibbles4(x.add(24 + 64 * b));
                    for t in 0..NY {
                        // Word j of the rows: weights 32b + 4j.. (low nibbles), 32b + 16 + 4j.. (high).
                        let a = a0[t].add(32 * b) as *const u32;
                        let mut p = rdot16(lo[0], v128_load32_splat(a));
                        p = i16x8_add(p, rdot16(lo[1], v128_load32_splat(a.add(1))));
                        p = i16x8_add(p, rdot16(lo[2], v128_load32_splat(a.add(2))));
                        p = i16x8_add(p, rdot16(lo[3], v128_load32_splat(a.add(3))));
                        p = i16x8_add(p, rdot16(hi[0], v128_load32_splat(a.add(4))));
                        p = i16x8_add(p, rdot16(hi[1], v128_load32_splat(a.add(5))));
                        p = i16x8_add(p, rdot16(hi[2], v128_load32_splat(a.add(6))));
                        p = i16x8_add(p, rdot16(hi[3], v128_load32_splat(a.add(7))));
                        isum[t] = i32x4_add(isum[t], i32x4_dot_i16x8(p, ls));
                        // Lane r: ls_r · (bsum_{2b} + bsum_{2b+1}).
                        let bs = acts[t].bsums.as_ptr().add(16 * i + 2 * b) as *const u32;
                        offs[t] = i32x4_add(offs[t], i32x4_dot_i16x8(ls, v128_load32_splat(bs)));
                    }
                }
            }
            let d = f16_lanes(u32x4_load_extend_u16x4(x.add(16) as *const u16));
            for t in 0..NY {
                // 2 · isum − 15 · offs
                let total = i32x4_sub(i32x4_shl(isum[t], 1), i32x4_sub(i32x4_shl(offs[t], 4), offs[t]));
                let da = v128_load32_splat(acts[t].d.as_ptr().add(8 * i) as *const u32);
                acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(total), f32x4_mul(d, da)));
            }
        }
        acc
    }

    /// Row → GEMM form: `q = 2c − 15` times `ls_b`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked inside.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, false);
        let off = i8x16_splat(15);
        for i in 0..nb {
            // SAFETY: block i is row[134i..134i+134]; its weights are q[256i..256i+256].
            let x = row.as_ptr().add(BB * i);
            let q = out.q.as_mut_ptr().add(QK_K * i);
            for b in 0..8 {
                let (lo, hi) = codes(x, b);
                let sc = i16x8_splat(ls(x, b));
                store_scaled16(q.add(32 * b), i8x16_sub(i8x16_add(lo, lo), off), sc);
                store_scaled16(q.add(32 * b + 16), i8x16_sub(i8x16_add(hi, hi), off), sc);
            }
            out.d[i] = f16_at(core::slice::from_raw_parts(x, BB), 132);
        }
    }

    /// Row → int8 GEMM form: `u = 2c` in pair order, `ls_b` for both halves of sub-block b,
    /// `mn = −15·ls_b`, `d = m = d_w` (IQ3_S's `decode8` exactly).
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked inside.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(crate::quant::GgmlType::IQ3_SX, row);
        let mut v = [u8x16_splat(0); 16];
        for i in 0..nb {
            // SAFETY: block i is row[134i..]; its outputs are u[256i..], sc/mn[16i..16i+16].
            let x = row.as_ptr().add(BB * i);
            for b in 0..8 {
                let (lo, hi) = codes(x, b);
                v[2 * b] = i8x16_add(lo, lo);
                v[2 * b + 1] = i8x16_add(hi, hi);
                for h in 0..2 {
                    out.put_offset_scale(16 * i + 2 * b + h, ls(x, b), 15);
                }
            }
            out.put_offset_block(i, &v, f16_at(core::slice::from_raw_parts(x, BB), 132));
        }
    }
}
