//! Q2_K: 256 weights in 84 bytes, 2.625 bits per weight.
//!
//! | offset | bytes | field                                                                |
//! |--------|-------|----------------------------------------------------------------------|
//! | 0      | 16    | `scales[g]`: low nibble = scale, high nibble = min of group g (16 el.)|
//! | 16     | 64    | `qs`: 2-bit weights, four per byte                                   |
//! | 80     | 2     | `d` (fp16)                                                           |
//! | 82     | 2     | `dmin` (fp16)                                                        |
//!
//! Group g = 8n + 2j + h (n = half 0..1, j = shift 0..3, h = 0..1) holds elements `16g..16g+16`;
//! element `16g + l` is `(qs[32n + 16h + l] >> 2j) & 3`, and
//! `y = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4)`.
//!
//! Dot with Q8_K: `Σ_blk d_a * (d * Σ_g sc_g * Σ_l q·a  -  dmin * Σ_g mn_g * bsum_g)`.

use super::{dispatch_decode, dispatch_decode8, dispatch_vec_dot, dispatch_vec_dot4, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

const BB: usize = 84;

pub(super) const KERNELS: QuantKernels = kernels::<Q2K>(GgmlType::Q2_K, vec_dot, decode, sanitize);

/// Int8 GEMM form: the 2-bit codes as they are (0..3), the 4-bit mins as mins; its scaled form
/// (a code times its 4-bit scale ≤ 45) for the dot-add tiles.
pub(super) const KERNELS8: Kernels8 = Kernels8 { scaled: Some(decode8_scaled), ..kernels8::<Q2K, 0>(GgmlType::Q2_K, 3, [true, true], decode8) };

struct Q2K;

impl KBlock for Q2K {
    const BB: usize = BB;
    const HAS_MIN: bool = true;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 80), f16_at(blk, 82))
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        (
            core::array::from_fn(|g| (blk[g] & 15) as i32),
            core::array::from_fn(|g| (blk[g] >> 4) as i32),
        )
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (g, qg) in q.chunks_exact_mut(16).enumerate() {
            let (n, j, h) = (g / 8, (g / 2) % 4, g % 2);
            let src = &blk[16 + 32 * n + 16 * h..][..16];
            for (qi, &b) in qg.iter_mut().zip(src) {
                *qi = ((b >> (2 * j)) & 3) as i8;
            }
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 80);
    sanitize_f16(block, 82);
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<Q2K>);

/// Four rows interleaved ([`crate::quant::r4`]), 336 bytes per block:
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 64    | `scales[2k + h]` of row r at `8k + 2r + h` (pairs of groups)   |
/// | 64     | 256   | `qs` word k (bytes 4k..4k+4) of row r at `16k + 4r`            |
/// | 320    | 8     | `d` of row r at `2r`                                           |
/// | 328    | 8     | `dmin` of row r at `2r`                                        |
pub(super) const R4: R4Kernels =
    R4Kernels { ty: GgmlType::Q2_K, fields: FIELDS, vec_dot4, vec_dot4_n, matvec: crate::r4_matvec!(vec_dot4, GgmlType::Q2_K), alt: Some(&R4_DOT_ADD), wide_only: false, dot_add: false };

/// The same with a one-token kernel of fewer operations (`simd::vec_dot4_dot_add`: the group sums
/// by dot-add, two shifts per four groups, one `i32x4.dot` for two groups' scales), where the
/// engine computes the dot-add exactly; `ops` times both forms per instance (BENCHMARKS.md, "Four
/// streams").
const R4_DOT_ADD: R4Kernels =
    R4Kernels { ty: GgmlType::Q2_K, fields: FIELDS, vec_dot4: vec_dot4_dot_add, vec_dot4_n: vec_dot4_n_dot_add, matvec: crate::r4_matvec!(vec_dot4_dot_add, GgmlType::Q2_K), alt: None, wide_only: false, dot_add: true };

const FIELDS: &[Field] = &[
    Field { off: 0, len: 16, gran: 2 },
    Field { off: 16, len: 64, gran: 4 },
    Field { off: 80, len: 2, gran: 2 },
    Field { off: 82, len: 2, gran: 2 },
];

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4_n, GgmlType::Q2_K, simd::vec_dot4);
dispatch_vec_dot4!(vec_dot4_dot_add, vec_dot4_n_dot_add, simd::vec_dot4_n, GgmlType::Q2_K, simd::vec_dot4_dot_add);
dispatch_decode!(decode, simd::decode_row, Q2K);
dispatch_decode8!(decode8, simd::decode8_row, Q2K, 0);

/// Row → the int8 GEMM's scaled form ([`Kernels8::scaled`]): [`decode8`] with each code times
/// its group scale and every scale 1.
fn decode8_scaled(row: &[u8], out: &mut crate::quant::gemm8::Decoded8) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build; the decoder checks all lengths itself.
        return unsafe { simd::decode8_row_scaled(row, out) };
    }
    #[allow(unreachable_code)]
    {
        decode8(row, out);
        out.scale_codes();
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! One loop step = one shift j of a half: 32 weights, groups 2j and 2j+1 of the half. The 32
    //! `qs` bytes of the half sit in four u16x8 vectors; each step takes `v & 3`, multiplies with
    //! the activations in i16 and shifts `v` right by 2 for the next step.
    use super::super::simd::{block_ptrs, check_decode, f16_pair_splats, fold_block, store_scale_pairs};
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::f16_lanes;
    #[cfg(target_feature = "relaxed-simd")]
    use crate::quant::simd::lanes;
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::super::simd::{ld_u8x8, mul16};
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::rdot16;
    use super::super::{check_lens, Q8, QK_K};
    use crate::quant::gemm::Decoded;
    use crate::quant::gemm8::{simd::store_pair_order, Decoded8};
    use crate::quant::simd::store_scaled16;
    use crate::quant::f16_at;
    use super::BB;
    use crate::quant::simd::hsum_f32;
    use core::arch::wasm32::*;

    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lens(row, BB, &act);
        let mut acc = f32x4_splat(0.0);
        // Word g = sc_g | sc_g << 16, broadcast by v128_load32_splat.
        let mut sbuf = [i32x4_splat(0); 4];
        for b in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks in `row` and nb*256 activations,
            // nb*8 scales and nb*16 group sums in `act`; every load below stays inside them.
            let (x, a, bs, da) = block_ptrs(row, BB, &act, b);
            let sm = v128_load(x as *const v128);
            let sc = v128_and(sm, u8x16_splat(15));
            store_scale_pairs(
                sbuf.as_mut_ptr(),
                u16x8_extend_low_u8x16(sc),
                u16x8_extend_high_u8x16(sc),
            );

            let mut isum = i32x4_splat(0);
            let (mut a, mut s) = (a, sbuf.as_ptr() as *const u32);
            // An opaque trip count keeps this a loop (see the module docs).
            let steps = core::hint::black_box(4u32);
            for n in 0..2 {
                let q = x.add(16 + 32 * n);
                // SIMD128: the 32 bytes as four u16x8 (codes in u16 lanes for `i16x8.mul`).
                #[cfg(not(target_feature = "relaxed-simd"))]
                let mut v = [ld_u8x8(q), ld_u8x8(q.add(8)), ld_u8x8(q.add(16)), ld_u8x8(q.add(24))];
                // Relaxed SIMD: as two u8x16; the 2-bit codes are 7-bit, so `rdot16` multiplies
                // 16 of them with 16 activation bytes (pairs summed in i16: ≤ 2·3·127).
                #[cfg(target_feature = "relaxed-simd")]
                let mut v = [v128_load(q as *const v128), v128_load(q.add(16) as *const v128)];
                for _ in 0..steps {
                    #[cfg(not(target_feature = "relaxed-simd"))]
                    let (p0, p1) = {
                        let m = u16x8_splat(3);
                        (
                            mul16(v128_and(v[0], m), v128_and(v[1], m), a),
                            mul16(v128_and(v[2], m), v128_and(v[3], m), a.add(16)),
                        )
                    };
                    #[cfg(target_feature = "relaxed-simd")]
                    let (p0, p1) = {
                        let m = u8x16_splat(3);
                        (
                            rdot16(v128_and(v[0], m), v128_load(a as *const v128)),
                            rdot16(v128_and(v[1], m), v128_load(a.add(16) as *const v128)),
                        )
                    };
                    let s0 = i32x4_dot_i16x8(p0, v128_load32_splat(s));
                    let s1 = i32x4_dot_i16x8(p1, v128_load32_splat(s.add(1)));
                    isum = i32x4_add(isum, i32x4_add(s0, s1));
                    for vk in v.iter_mut() {
                        *vk = u16x8_shr(*vk, 2);
                    }
                    s = s.add(2);
                    a = a.add(32);
                }
            }

            let mn = u8x16_shr(sm, 4);
            let summs = i32x4_add(
                i32x4_dot_i16x8(u16x8_extend_low_u8x16(mn), v128_load(bs as *const v128)),
                i32x4_dot_i16x8(u16x8_extend_high_u8x16(mn), v128_load(bs.add(8) as *const v128)),
            );
            let (dall, dmin) = f16_pair_splats(x.add(80), da);
            acc = fold_block(acc, isum, dall, summs, dmin);
        }
        hsum_f32(acc)
    }

    /// Row → GEMM form: group g = 8n + 2j + h is `(qs >> 2j) & 3` of bytes 32n + 16h .. + 16,
    /// times its 4-bit scale; the 4-bit mins go to `mn`, `m = −dmin`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, true);
        let m3 = u8x16_splat(3);
        for b in 0..nb {
            // SAFETY: block b is row[84b..84b+84]; its outputs are q[256b..], mn[16b..16b+16].
            let x = row.as_ptr().add(BB * b);
            let q = out.q.as_mut_ptr().add(QK_K * b);
            let mn = u8x16_shr(v128_load(x as *const v128), 4);
            let mp = out.mn.as_mut_ptr().add(16 * b) as *mut v128;
            v128_store(mp, u16x8_extend_low_u8x16(mn));
            v128_store(mp.add(1), u16x8_extend_high_u8x16(mn));
            for n in 0..2 {
                for h in 0..2 {
                    let v = v128_load(x.add(16 + 32 * n + 16 * h) as *const v128);
                    for j in 0..4 {
                        let g = 8 * n + 2 * j + h;
                        let codes = v128_and(u16x8_shr(v, 2 * j as u32), m3);
                        store_scaled16(q.add(16 * g), codes, i16x8_splat((*x.add(g) & 15) as i16));
                    }
                }
            }
            let blk = core::slice::from_raw_parts(x, BB);
            out.d[b] = f16_at(blk, 80);
            out.m[b] = -f16_at(blk, 82);
        }
    }

    /// Row → int8 GEMM form: group g = 8n + 2j + h is `(qs >> 2j) & 3` of bytes 32n + 16h .. + 16;
    /// the 4-bit scales to `sc`, the 4-bit mins to `mn`, `m = −dmin`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `Decoded8::check`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row(row: &[u8], out: &mut Decoded8) {
        decode8_into::<false>(row, out)
    }

    /// [`decode8_row`] in the scaled form: each code times its group's 4-bit scale (≤ 45; the
    /// `i16x8.mul` of a code pair by the scale cannot carry from one byte into the other), every
    /// scale 1.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `Decoded8::check`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row_scaled(row: &[u8], out: &mut Decoded8) {
        decode8_into::<true>(row, out)
    }

    #[inline(always)]
    unsafe fn decode8_into<const SCALED: bool>(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(crate::quant::GgmlType::Q2_K, row);
        let m3 = u8x16_splat(3);
        let mut v = [u8x16_splat(0); 16];
        for b in 0..nb {
            // SAFETY: block b is row[84b..84b+84]; its outputs are u[256b..], sc/mn[16b..16b+16].
            let x = row.as_ptr().add(BB * b);
            let sm = v128_load(x as *const v128);
            let (sc, mn) = (v128_and(sm, u8x16_splat(15)), u8x16_shr(sm, 4));
            let sp = out.sc.as_mut_ptr().add(16 * b) as *mut v128;
            if SCALED {
                v128_store(sp, i16x8_splat(1));
                v128_store(sp.add(1), i16x8_splat(1));
            } else {
                v128_store(sp, u16x8_extend_low_u8x16(sc));
                v128_store(sp.add(1), u16x8_extend_high_u8x16(sc));
            }
            let mp = out.mn.as_mut_ptr().add(16 * b) as *mut v128;
            v128_store(mp, u16x8_extend_low_u8x16(mn));
            v128_store(mp.add(1), u16x8_extend_high_u8x16(mn));
            for n in 0..2 {
                for h in 0..2 {
                    let q = v128_load(x.add(16 + 32 * n + 16 * h) as *const v128);
                    for j in 0..4 {
                        let g = 8 * n + 2 * j + h;
                        let codes = v128_and(u16x8_shr(q, 2 * j as u32), m3);
                        v[g] = if SCALED { i16x8_mul(codes, i16x8_splat((*x.add(g) & 15) as i16)) } else { codes };
                    }
                }
            }
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * b));
            let blk = core::slice::from_raw_parts(x, BB);
            out.d[b] = f16_at(blk, 80);
            out.m[b] = -f16_at(blk, 82);
        }
    }

    /// Four interleaved rows (the R4 layout above) · one activation row (a decoded token). One
    /// step = group g of the four rows: word `l0/4` of the group's 16 bytes holds elements `l0..l0+4` of each row, so
    /// `(v >> 2j) & 3` of the four words of a quarter (n, h) are 4 rows × 4 weights of group
    /// g = 8n + 2j + h, multiplied with the activation word at `16g + l0` broadcast (16 products
    /// per instruction, i16 lanes 2r and 2r+1 belong to row r). The four products of a group are
    /// summed in i16 (≤ 4 · 2 · 3 · 127), then `i32x4.dot` with the rows' scales puts row r's
    /// group sum in lane r. Odd shifts are taken in place (`(v >> 4·(j/2)) & 12`: four times the
    /// codes, one shift per two groups; their sums, multiples of 4, come back by `>> 2` per block,
    /// exactly), and the scale bytes of a pair of groups are one load and one `and`.
    ///
    /// Written for V8's code generator (measured, `clef bench-kernels`): the activation words are
    /// broadcast loads (`vbroadcastss`: no shuffle unit), a scale vector is one `pshufb` of the
    /// group's scale bytes with a mask kept in a register (a shuffle with immediate indices is
    /// rebuilt from two 64-bit moves at every use), and the masks are opaque (V8 rebuilds a
    /// constant at every use otherwise). Chromium 156 on a Zen 4: 6.7–6.8 → 7.1–7.4 GB/s against
    /// one shift per group and a load per group's scales (BENCHMARKS.md, "The scales first").
    ///
    /// [`vec_dot4_n`] computes the same integers for several tokens, still with one shift per
    /// group and a load per group's scales. This one-token form was its own function before it
    /// took the odd shifts in place: compiled from `vec_dot4_n::<1>` it ran 7 % slower in Chromium
    /// 156 (11.2 against 12.1 GB/s, `bench-kernels-chromium.mjs --type Q2_K`, when the two
    /// differed only in which pointers stay in locals and the order of the min sums; Node 20 ran
    /// both at 12.0). The results are the same bit for bit (`tests/kernels.rs`).
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    ///
    /// Inlined into its decode driver (see `r4_matvec!`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub(super) unsafe fn vec_dot4(rows4: &[u8], act: Q8<'_>, acc0: [f32; 4]) -> [f32; 4] {
        let nb = crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::Q2_K, &act);
        // Opaque, so that V8 keeps them in registers instead of rebuilding each at every use.
        let (m3, m12, m15) = core::hint::black_box((u8x16_splat(3), u8x16_splat(12), u8x16_splat(15)));
        // Byte 2r (+ h, + 8) → i16 lanes 2r and 2r+1 (index 0x80, 0x81, 0x88 or 0x89 gives 0).
        // Opaque, so that it stays in a register: a shuffle with immediate indices is rebuilt from
        // two 64-bit moves at every use.
        let dup = core::hint::black_box(u8x16(0, 0x80, 0, 0x80, 2, 0x80, 2, 0x80, 4, 0x80, 4, 0x80, 6, 0x80, 6, 0x80));
        let mut acc = f32x4(acc0[0], acc0[1], acc0[2], acc0[3]);
        for b in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·84 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in `act`.
            let x = rows4.as_ptr().add(4 * BB * b);
            let a0 = act.qs.as_ptr().add(QK_K * b);
            let bs = act.bsums.as_ptr().add(16 * b);
            let da = v128_load32_splat(act.d.as_ptr().add(8 * b) as *const u32);
            // Groups of even shift j (codes `w & 3`) and of odd j (`w & 12`: four times the codes,
            // their sums taken back by a shift at the end: exact, every term is a multiple of 4).
            let (mut isum, mut isum4) = (i32x4_splat(0), i32x4_splat(0));
            // Opaque trip counts keep both loops loops (V8 spills a fully unrolled block).
            for nh in 0..core::hint::black_box(4usize) {
                let (n, h) = (nh >> 1, nh & 1);
                let q = x.add(64 + 64 * nh) as *const v128;
                let mut w = [v128_load(q), v128_load(q.add(1)), v128_load(q.add(2)), v128_load(q.add(3))];
                let dup0 = i8x16_add(dup, i8x16_splat(h as i8));
                let dup1 = i8x16_add(dup0, i8x16_splat(8));
                for half in 0..core::hint::black_box(2usize) {
                    // Shifts j = 2·half (low two bits of w) and 2·half + 1 (the next two): groups
                    // g = 8n + 4·half + h and g + 2, whose scale bytes are bytes 0..8 and 8..16 of
                    // one vector (8k + 2r + h for g = 2k + h).
                    let g = 8 * n + 4 * half + h;
                    let sc = v128_and(v128_load(x.add(32 * n + 16 * half) as *const v128), m15);
                    let a = a0.add(16 * g) as *const u32;
                    let mut p = rdot16(v128_and(w[0], m3), v128_load32_splat(a));
                    p = i16x8_add(p, rdot16(v128_and(w[1], m3), v128_load32_splat(a.add(1))));
                    p = i16x8_add(p, rdot16(v128_and(w[2], m3), v128_load32_splat(a.add(2))));
                    p = i16x8_add(p, rdot16(v128_and(w[3], m3), v128_load32_splat(a.add(3))));
                    isum = i32x4_add(isum, i32x4_dot_i16x8(p, i8x16_relaxed_swizzle(sc, dup0)));
                    let a = a.add(8);
                    let mut p = rdot16(v128_and(w[0], m12), v128_load32_splat(a));
                    p = i16x8_add(p, rdot16(v128_and(w[1], m12), v128_load32_splat(a.add(1))));
                    p = i16x8_add(p, rdot16(v128_and(w[2], m12), v128_load32_splat(a.add(2))));
                    p = i16x8_add(p, rdot16(v128_and(w[3], m12), v128_load32_splat(a.add(3))));
                    isum4 = i32x4_add(isum4, i32x4_dot_i16x8(p, i8x16_relaxed_swizzle(sc, dup1)));
                    for wk in w.iter_mut() {
                        *wk = u16x8_shr(*wk, 4);
                    }
                }
            }
            acc = end_block(acc, x, bs, da, i32x4_add(isum, i32x4_shr(isum4, 2)), m15);
        }
        lanes(acc)
    }

    /// The end of an R4 block `x` in the one-token kernels: the mins (lane r = Σ_g mn[r][g] ·
    /// bsum[g], groups 2k and 2k+1 — bytes 8k + 2r, 8k + 2r + 1: already row r's pair of i16
    /// lanes — per i32x4.dot) and the block's fold into `acc` (`isum`: the scaled code sums).
    /// `m15` is `u8x16_splat(15)` held in a register: the mins are taken 16 bytes at a time,
    /// `(v >> 4) & m15`, then widened, in a loop of opaque trip count. Loaded 8 bytes at a time
    /// and widened first, LLVM made the shift a bytewise one whose mask V8 rebuilt at every use
    /// (three instructions, 8 times a block) and, unrolled, hoisted the loads into spills: a
    /// third of Q2_K's one-token kernel ran here. Chromium 156, Zen 4, 65,536 × 4096: 7.2–7.4
    /// → 7.8–7.9 GB/s; Firefox 153: 8.0 → 8.8 (BENCHMARKS.md, session 41).
    ///
    /// # Safety
    /// `x` is an R4 block of 4·84 bytes, `bs` its activations' 16 group sums.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn end_block(acc: v128, x: *const u8, bs: *const i16, da: v128, isum: v128, m15: v128) -> v128 {
        let mut summs = i32x4_splat(0);
        for k2 in 0..core::hint::black_box(4usize) {
            let mn = mins16(x, k2, m15);
            let bs = bs.add(4 * k2) as *const u32;
            summs = i32x4_add(summs, i32x4_dot_i16x8(mn[0], v128_load32_splat(bs)));
            summs = i32x4_add(summs, i32x4_dot_i16x8(mn[1], v128_load32_splat(bs.add(1))));
        }
        let d = f32x4_mul(f16_lanes(u32x4_load_extend_u16x4(x.add(320) as *const u16)), da);
        let dmin = f32x4_mul(f16_lanes(u32x4_load_extend_u16x4(x.add(328) as *const u16)), da);
        fold_block(acc, isum, d, summs, dmin)
    }

    /// The mins of scale bytes `16·k2..16·k2 + 16` of the R4 block `x` (groups 4k2..4k2 + 4 of
    /// the four rows), widened to u16: `(v >> 4) & m15` (`m15` = `u8x16_splat(15)`), low and
    /// high halves (see [`end_block`] for why in this order).
    ///
    /// # Safety
    /// `x + 16·k2 .. x + 16·k2 + 16` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    unsafe fn mins16(x: *const u8, k2: usize, m15: v128) -> [v128; 2] {
        let mn = v128_and(u16x8_shr(v128_load(x.add(16 * k2) as *const v128), 4), m15);
        [u16x8_extend_low_u8x16(mn), u16x8_extend_high_u8x16(mn)]
    }

    /// [`vec_dot4`] with fewer vector operations per group of 4 rows × 16 weights (~13 against
    /// 18), the same integers: a group's 16 products per row summed in i32 by four
    /// `i32x4.relaxed_dot_i8x16_i7x16_add_s` (AVX-VNNI's `vpdpbusd`); the codes of the odd shifts
    /// taken in place (`v & 12`, four times too large), so the 2-bit codes move by one shift per
    /// two shifts; the groups of shifts j and j + 1 (j even) packed into one i32 lane
    /// as two i16s (the even one ×4: a shift, `i16x8.shuffle` blends them) against their two
    /// scales (bytes `8k + 2r + h` and `8k + 8 + 2r + h`, one swizzle of a 16-byte load), one
    /// `i32x4.dot_i16x8` for both. Every sum is 4× the reference's (each i16 ≤ 16 · 12 · 128 <
    /// 2¹⁵), shifted back exactly once per block. Bit for bit [`vec_dot4`]'s result where the
    /// engine computes the dot-add exactly ([`crate::quant::gemm8::quad_add_exact`]).
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    ///
    /// Inlined into its decode driver (see `r4_matvec!`).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub(super) unsafe fn vec_dot4_dot_add(rows4: &[u8], act: Q8<'_>, acc0: [f32; 4]) -> [f32; 4] {
        let nb = crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::Q2_K, &act);
        // Opaque, so that they stay in registers (as `dup` in `vec_dot4`).
        let m3 = core::hint::black_box(u8x16_splat(3));
        let m12 = core::hint::black_box(u8x16_splat(12));
        // Bytewise: the scale bytes' high nibbles (`end_block`'s mins); the swizzle below zeroes
        // the odd bytes of a scale vector.
        let m15 = core::hint::black_box(u8x16_splat(15));
        // Out bytes 4r and 4r + 2 ← scale bytes 2r (+ h) and 8 + 2r (+ h); 4r + 1 and 4r + 3 zero.
        let pick = core::hint::black_box(u8x16(0, 0x80, 8, 0x80, 2, 0x80, 10, 0x80, 4, 0x80, 12, 0x80, 6, 0x80, 14, 0x80));
        let zero = i32x4_splat(0);
        let mut acc = f32x4(acc0[0], acc0[1], acc0[2], acc0[3]);
        for b in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·84 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in `act`.
            let x = rows4.as_ptr().add(4 * BB * b);
            let a0 = act.qs.as_ptr().add(QK_K * b);
            let bs = act.bsums.as_ptr().add(16 * b);
            let da = v128_load32_splat(act.d.as_ptr().add(8 * b) as *const u32);
            let mut isum = i32x4_splat(0);
            for nh in 0..core::hint::black_box(4usize) {
                let (n, h) = (nh >> 1, nh & 1);
                let q = x.add(64 + 64 * nh) as *const v128;
                let mut v = [v128_load(q), v128_load(q.add(1)), v128_load(q.add(2)), v128_load(q.add(3))];
                let pick = i8x16_add(pick, i8x16_splat(h as i8));
                for j in [0usize, 2] {
                    if j == 2 {
                        for vk in v.iter_mut() {
                            *vk = u16x8_shr(*vk, 4);
                        }
                    }
                    // Groups g = 8n + 2j + h (codes v & 3) and g + 2 (v & 12).
                    let g = 8 * n + 2 * j + h;
                    let (ae, ao) = (a0.add(16 * g) as *const u32, a0.add(16 * (g + 2)) as *const u32);
                    let mut se = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load32_splat(ae), v128_and(v[0], m3), zero);
                    let mut so = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load32_splat(ao), v128_and(v[0], m12), zero);
                    for (i, &vi) in v.iter().enumerate().skip(1) {
                        se = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load32_splat(ae.add(i)), v128_and(vi, m3), se);
                        so = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load32_splat(ao.add(i)), v128_and(vi, m12), so);
                    }
                    let p = i16x8_shuffle::<0, 9, 2, 11, 4, 13, 6, 15>(i32x4_shl(se, 2), i32x4_shl(so, 16));
                    let sc = v128_and(i8x16_relaxed_swizzle(v128_load(x.add(8 * (4 * n + j)) as *const v128), pick), m15);
                    isum = i32x4_add(isum, i32x4_dot_i16x8(p, sc));
                }
            }
            acc = end_block(acc, x, bs, da, i32x4_shr(isum, 2), m15);
        }
        lanes(acc)
    }

    /// Four interleaved rows (the R4 layout above) · `NY` activation rows: lane r of `out[t]` is
    /// row r · `acts[t]`, computed as [`vec_dot4`] does (the same integer sums, folded in the same
    /// order, so bit for bit its result), with each group's codes and scales unpacked once for all
    /// `NY` tokens: a short prompt's product (`r4::matmul_tiles`).
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot4_n<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::Q2_K, &a))[0];
        let m3 = u8x16_splat(3);
        // Bytewise, opaque (as in `vec_dot4`): the scales' low nibbles (the swizzle zeroes a
        // scale vector's odd bytes) and the mins' high ones.
        let m15 = core::hint::black_box(u8x16_splat(15));
        // As in `vec_dot4`.
        let dup = core::hint::black_box(u8x16(0, 0x80, 0, 0x80, 2, 0x80, 2, 0x80, 4, 0x80, 4, 0x80, 6, 0x80, 6, 0x80));
        let mut acc = acc0;
        for b in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·84 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`.
            let x = rows4.as_ptr().add(4 * BB * b);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * b));
            let mut isum = [i32x4_splat(0); NY];
            // Opaque trip counts keep both loops loops (V8 spills a fully unrolled block).
            for nh in 0..core::hint::black_box(4usize) {
                let (n, h) = (nh >> 1, nh & 1);
                let q = x.add(64 + 64 * nh) as *const v128;
                let mut v = [v128_load(q), v128_load(q.add(1)), v128_load(q.add(2)), v128_load(q.add(3))];
                let dup = i8x16_add(dup, i8x16_splat(h as i8));
                for j in 0..core::hint::black_box(4usize) {
                    let g = 8 * n + 2 * j + h;
                    // Each token's four products (the masked codes are computed once).
                    let p: [v128; NY] = core::array::from_fn(|t| {
                        let a = a0[t].add(16 * g) as *const u32;
                        let mut p = rdot16(v128_and(v[0], m3), v128_load32_splat(a));
                        p = i16x8_add(p, rdot16(v128_and(v[1], m3), v128_load32_splat(a.add(1))));
                        p = i16x8_add(p, rdot16(v128_and(v[2], m3), v128_load32_splat(a.add(2))));
                        i16x8_add(p, rdot16(v128_and(v[3], m3), v128_load32_splat(a.add(3))))
                    });
                    // Scale bytes 8k + 2r + h (g = 2k + h), each in the low byte of two i16 lanes.
                    let sc = v128_and(i8x16_relaxed_swizzle(v128_load64_zero(x.add(8 * (g >> 1)) as *const u64), dup), m15);
                    for t in 0..NY {
                        isum[t] = i32x4_add(isum[t], i32x4_dot_i16x8(p[t], sc));
                    }
                    if j < 3 {
                        for vk in v.iter_mut() {
                            *vk = u16x8_shr(*vk, 2);
                        }
                    }
                }
            }
            // Mins: lane r = Σ_g mn[r][g] · bsum[g], groups 2k and 2k+1 per i32x4.dot (16
            // scale bytes at a time, as `end_block`).
            let mut summs = [i32x4_splat(0); NY];
            for k2 in 0..core::hint::black_box(4usize) {
                let mn = mins16(x, k2, m15);
                for t in 0..NY {
                    let bs = acts[t].bsums.as_ptr().add(16 * b + 4 * k2) as *const u32;
                    summs[t] = i32x4_add(summs[t], i32x4_dot_i16x8(mn[0], v128_load32_splat(bs)));
                    summs[t] = i32x4_add(summs[t], i32x4_dot_i16x8(mn[1], v128_load32_splat(bs.add(1))));
                }
            }
            let d = f16_lanes(u32x4_load_extend_u16x4(x.add(320) as *const u16));
            let dmin = f16_lanes(u32x4_load_extend_u16x4(x.add(328) as *const u16));
            for t in 0..NY {
                let da = v128_load32_splat(acts[t].d.as_ptr().add(8 * b) as *const u32);
                acc[t] = fold_block(acc[t], isum[t], f32x4_mul(d, da), summs[t], f32x4_mul(dmin, da));
            }
        }
        acc
    }
}
