//! IQ2_S and IQ2_XS expanded ("IQ2_SX"): a load-time form of both whose weights are read like
//! Q3_K's, with no codebook lookup. 256 weights in 106 bytes (IQ2_S: 82, IQ2_XS: 74), never stored
//! in a file.
//!
//! A weight of these types is `d · (0.5 + nib) · 0.25 · mag · sign`, its magnitude one of {8, 25,
//! 43} found through a codebook index per group of 8 (10 bits in IQ2_S, 9 in IQ2_XS) and its sign
//! stored (IQ2_S) or looked up from a 7-bit index (IQ2_XS). The decode kernels are bound by those
//! lookups (dependent loads per 8 weights). Here each magnitude is stored as its 2-bit code `c`
//! (0, 1, 2 → 8, 25, 43) and its sign as one bit, in Q3_K's places:
//!
//! | offset | bytes | field                                                                   |
//! |--------|-------|-------------------------------------------------------------------------|
//! | 0      | 32    | `signs`: bit k of byte l = weight `32k + l` negative                    |
//! | 32     | 64    | `codes`: bits 2s.. of byte `32n + l` = code of weight `128n + 32s + l`  |
//! | 96     | 8     | `scales`: nibbles (byte b: low = weights 32b.., high = 32b+16..), as both |
//! | 104    | 2     | `d` (fp16), as in the source                                            |
//!
//! In the K-quant form: group g (16 weights) has `sc_g = 2·nib_g + 1`, `q = ±mag`, `d = d_w / 8`
//! (exactly the source's values: `(d/8)·(2nib+1)` and `d·(0.5+nib)·0.25` are the same real number
//! scaled by powers of two, so they round alike). The kernels turn `code | sign << 2` into the
//! unsigned `u = q + 43 ∈ 0..=86` with one byte swizzle and take the 43 back through the
//! activations' group sums, as Q3_K does with its 4.
//!
//! What it costs: more memory (IQ2_S +29 %, IQ2_XS +43 %: 3.3125 bits per weight), and an
//! expansion after loading ([`expand_in_place`], `weights.rs`). The browser's loader expands only
//! where that costs no context (`www/src/loader.ts`; the load-time forms: `forms.rs`). In the
//! browsers the expanded matrices are also interleaved four rows at a time ([`R4`]), as Q3_K's.

use super::{dispatch_decode, dispatch_decode8, dispatch_vec_dot, dispatch_vec_dot4, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::tables::{IQ2S_GRID, IQ2XS_GRID, KSIGNS_IQ2XS};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

/// Bytes per expanded block.
pub const BB: usize = 106;
/// Bytes per IQ2_S block (the largest source block).
pub const BB_IQ2S: usize = 82;

pub(super) const KERNELS: QuantKernels = kernels::<Iq2Sx>(GgmlType::IQ2_SX, vec_dot, decode, sanitize);

/// Int8 GEMM form: `u = q + 43 ∈ 0..=86`, the offset through the min term.
pub(super) const KERNELS8: Kernels8 = kernels8::<Iq2Sx, 43>(GgmlType::IQ2_SX, 86, [false, true], decode8);

/// Magnitude of each 2-bit code (code 3 does not occur).
const MAG: [i8; 4] = [8, 25, 43, 0];

struct Iq2Sx;

impl KBlock for Iq2Sx {
    const BB: usize = BB;
    const HAS_MIN: bool = false;

    fn d(blk: &[u8]) -> (f32, f32) {
        (f16_at(blk, 104) * 0.125, 0.0)
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        (core::array::from_fn(|g| 2 * ((blk[96 + g / 2] >> (4 * (g % 2))) & 15) as i32 + 1), [0; 16])
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (w, qw) in q.iter_mut().enumerate() {
            let (n, s, l) = (w / 128, (w % 128) / 32, w % 32);
            let mag = MAG[((blk[32 + 32 * n + l] >> (2 * s)) & 3) as usize];
            *qw = if blk[l] >> (w / 32) & 1 != 0 { -mag } else { mag };
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 104);
    // Codes are 0..=2: a random byte's code 3 becomes 2.
    for c in &mut block[32..96] {
        let mut v = *c;
        for s in 0..4 {
            if (v >> (2 * s)) & 3 == 3 {
                v &= !(1 << (2 * s));
            }
        }
        *c = v;
    }
}

/// Per codebook row: its eight 2-bit codes, byte j = code of element j (0, 1, 2 for magnitudes
/// 8, 25, 43; the three IQ2 codebooks hold no other values — checked while the tables are built).
const fn codes<const N: usize>(grid: &[u64; N]) -> [u64; N] {
    let mut out = [0u64; N];
    let mut i = 0;
    while i < N {
        let mut j = 0;
        while j < 8 {
            let m = (grid[i] >> (8 * j)) & 0xff;
            let c = match m {
                8 => 0,
                25 => 1,
                43 => 2,
                _ => panic!("an IQ2 codebook magnitude other than 8, 25, 43"),
            };
            out[i] |= c << (8 * j);
            j += 1;
        }
        i += 1;
    }
    out
}

static CODES_S: [u64; 1024] = codes(&IQ2S_GRID);
static CODES_XS: [u64; 512] = codes(&IQ2XS_GRID);

/// Per sign byte: byte j = bit j of it (0 or 1).
static SPREAD: [u64; 256] = {
    let mut out = [0u64; 256];
    let mut s = 0;
    while s < 256 {
        let mut j = 0;
        while j < 8 {
            out[s] |= (((s >> j) & 1) as u64) << (8 * j);
            j += 1;
        }
        s += 1;
    }
    out
};

/// Per 7-bit sign index of IQ2_XS: `SPREAD[KSIGNS_IQ2XS[i]]` (one lookup instead of two).
static SPREAD_KSIGNS: [u64; 128] = {
    let mut out = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        out[i] = SPREAD[KSIGNS_IQ2XS[i] as usize];
        i += 1;
    }
    out
};

/// One block of `ty` (IQ2_S or IQ2_XS) → its expanded form (106 bytes): the
/// reference of [`expand_in_place`], which in wasm runs `simd::expand_iq2s` / `expand_iq2xs`
/// (the same bytes: IQ2_S's codebook indices made 8 at a time, the sign bits transposed 64 at a
/// time, the code words one at a time: BENCHMARKS.md, "… the IQ2 expansion twice as fast").
pub fn expand_block(ty: GgmlType, src: &[u8], dst: &mut [u8]) {
    let dst: &mut [u8; BB] = dst.try_into().unwrap();
    assert_eq!(src.len(), ty.block_bytes(), "{ty}: not one block");
    match ty {
        GgmlType::IQ2_S => write_iq2s(src.try_into().unwrap(), dst),
        GgmlType::IQ2_XS => write_iq2xs(src.try_into().unwrap(), dst),
        _ => panic!("{ty} has no expanded form"),
    }
}

/// IQ2_S (82 bytes): `d`, the low 8 bits of each group's (b, l) 10-bit codebook index at
/// `2 + 4b + l` (the high 2 at bits 2l of byte `66 + b`), its sign byte at `34 + 4b + l`, then the
/// 8 scale bytes.
fn write_iq2s(src: &[u8; BB_IQ2S], dst: &mut [u8; BB]) {
    let index = |b: usize, l: usize| src[2 + 4 * b + l] as usize | ((src[66 + b] as usize >> (2 * l)) & 3) << 8;
    let scales = src[74..82].try_into().unwrap();
    write_expanded(|b, l| CODES_S[index(b, l) & 1023], |b, l| SPREAD[src[34 + 4 * b + l] as usize], scales, [src[0], src[1]], dst);
}

/// IQ2_XS (74 bytes): `d`, then per group (b, l) a u16 at `2 + 8b + 2l` (9-bit codebook index,
/// 7-bit sign index into `ksigns`), then the 8 scale bytes as IQ2_S's.
fn write_iq2xs(src: &[u8; 74], dst: &mut [u8; BB]) {
    let q = |b: usize, l: usize| u16::from_le_bytes([src[2 + 8 * b + 2 * l], src[3 + 8 * b + 2 * l]]) as usize;
    let scales = src[66..74].try_into().unwrap();
    write_expanded(|b, l| CODES_XS[q(b, l) & 511], |b, l| SPREAD_KSIGNS[q(b, l) >> 9], scales, [src[0], src[1]], dst);
}

/// Writes an expanded block from its groups' code words (`codes(b, l)`: group l of sub-block b,
/// byte j = the 2-bit code of weight 32b + 8l + j), their signs (`signs(b, l)`: byte j = 1 where
/// weight 32b + 8l + j is negative, else 0: [`SPREAD`] of the sign bits), the eight scale bytes
/// (low nibble: weights 32b.., high: 32b+16..) and `d`.
#[inline(always)]
fn write_expanded(codes: impl Fn(usize, usize) -> u64, signs: impl Fn(usize, usize) -> u64, scales: [u8; 8], d: [u8; 2], dst: &mut [u8; BB]) {
    // Group (b, l) = weights 32b + 8l + j: codes in bytes 32(b/4) + 8l + j at shift 2(b%4),
    // signs in bytes 8l + j at bit b. Eight u64 words of codes, four of signs.
    let (mut code_words, mut sign_words) = ([0u64; 8], [0u64; 4]);
    for b in 0..8 {
        for l in 0..4 {
            code_words[4 * (b / 4) + l] |= codes(b, l) << (2 * (b % 4));
            sign_words[l] |= signs(b, l) << b;
        }
    }
    for (k, w) in sign_words.iter().enumerate() {
        dst[8 * k..8 * k + 8].copy_from_slice(&w.to_le_bytes());
    }
    for (k, w) in code_words.iter().enumerate() {
        dst[32 + 8 * k..40 + 8 * k].copy_from_slice(&w.to_le_bytes());
    }
    dst[96..104].copy_from_slice(&scales);
    dst[104..106].copy_from_slice(&d);
}

/// Expands `nb` blocks of `ty` (IQ2_S or IQ2_XS) at `buf[raw..]` into their expanded form at
/// `buf[out..]`, in place (`out ≥ raw`, the ranges may overlap: [`super::forms::expand_blocks`]).
pub fn expand_in_place(ty: GgmlType, buf: &mut [u8], raw: usize, out: usize, nb: usize) {
    use super::forms::expand_blocks;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    // SAFETY (both): simd128 is enabled for this build.
    match ty {
        GgmlType::IQ2_S => expand_blocks::<BB_IQ2S, BB>(buf, raw, out, nb, |src, dst| unsafe { simd::expand_iq2s(src, dst) }),
        GgmlType::IQ2_XS => expand_blocks::<74, BB>(buf, raw, out, nb, |src, dst| unsafe { simd::expand_iq2xs(src, dst) }),
        _ => panic!("{ty} has no expanded form"),
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    match ty {
        GgmlType::IQ2_S => expand_blocks::<BB_IQ2S, BB>(buf, raw, out, nb, write_iq2s),
        GgmlType::IQ2_XS => expand_blocks::<74, BB>(buf, raw, out, nb, write_iq2xs),
        _ => panic!("{ty} has no expanded form"),
    }
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<Iq2Sx>);

/// Four rows interleaved ([`crate::quant::r4`]), 424 bytes per block, in the order the kernel
/// reads them (Q3_K's R4 block: the signs are its `hmask`, the codes its `qs`):
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 32    | `scales` word k (bytes 4k..4k+4, k < 2) of row r at `16k + 4r` |
/// | 32     | 8     | `d` of row r at `2r`                                           |
/// | 40     | 128   | `signs` word k of row r at `16k + 4r`                          |
/// | 168    | 256   | `codes` word k of row r at `16k + 4r`                          |
///
/// Interleaved in the browsers only (`wide_only`): Chromium 156 runs it 1.12–1.20× the plain
/// kernel over a 65536 × 4096 matrix, Node 20 0.99× (BENCHMARKS.md, "IQ2_SX interleaved").
pub(super) const R4: R4Kernels = R4Kernels {
    ty: GgmlType::IQ2_SX,
    fields: &[
        Field { off: 96, len: 8, gran: 4 },
        Field { off: 104, len: 2, gran: 2 },
        Field { off: 0, len: 32, gran: 4 },
        Field { off: 32, len: 64, gran: 4 },
    ],
    vec_dot4,
    vec_dot4_n,
    alt: None,
    wide_only: true,
};

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4, GgmlType::IQ2_SX);
dispatch_decode!(decode, simd::decode_row, Iq2Sx);
dispatch_decode8!(decode8, simd::decode8_row, Iq2Sx, 43);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Q3_K's kernels (`dot_3bit_relaxed`, `decode_3bit`: the same bit layout): per loop step the
    //! codes of 32 weights (`(codes >> 2s) & 3`) and their sign bits (pre-shifted to bit 2) make
    //! `code | sign << 2`, a swizzle of [`biased`]'s table turns that into `u = ±mag + 43`, and
    //! the products are summed per group and scaled by `i32x4.dot` with `sc_g`;
    //! `43 Σ_g sc_g bsum_g` is taken off per block (in i32: exact).
    use super::super::simd::{block_ptrs, check_decode, decode_3bit, f16_splat, store_scale_pairs};
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::super::simd::dot_bytes_g16;
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::{dot_3bit_relaxed, f16_lanes, r4_3bit_isums, r4_dup_masks, r4_scale_sums_g16, r4_store_scales};
    use super::super::{check_lens, Q8, QK_K};
    use super::BB;
    use crate::quant::gemm::Decoded;
    use crate::quant::gemm8::{simd::{store_i16_and_scaled, store_pair_order}, Decoded8};
    use crate::quant::simd::{hsum_f32, store_scaled16};
    use core::arch::wasm32::*;

    /// [`super::expand_block`] of an IQ2_S block: the 32 codebook indices made in SIMD (as the
    /// IQ2_S kernel does), then [`write_block`].
    ///
    /// # Safety
    /// Requires simd128.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn expand_iq2s(src: &[u8; super::BB_IQ2S], dst: &mut [u8; BB]) {
        const Z: u8 = 0x80; // swizzle: an index ≥ 16 gives 0
        let s = src.as_ptr();
        // qh[b] into the u16 lanes of sub-block b's four groups (two sub-blocks per vector), then
        // bits 2l..2l+1 to bits 8..9 by a multiply (black_box: kept as a multiply, not shifts).
        let spread = |b: u8| u8x16(b, Z, b, Z, b, Z, b, Z, b + 1, Z, b + 1, Z, b + 1, Z, b + 1, Z);
        let mul = core::hint::black_box(u16x8(256, 64, 16, 4, 256, 64, 16, 4));
        let qh = v128_load64_zero(s.add(66) as *const u64);
        let mut idx = [0u16; 32];
        for h in 0..2 {
            let lo = v128_load(s.add(2 + 16 * h) as *const v128);
            for j in 0..2 {
                let low = if j == 0 { u16x8_extend_low_u8x16(lo) } else { u16x8_extend_high_u8x16(lo) };
                let hi = i16x8_mul(i8x16_swizzle(qh, spread((4 * h + 2 * j) as u8)), mul);
                v128_store(idx.as_mut_ptr().add(16 * h + 8 * j) as *mut v128, v128_or(low, v128_and(hi, u16x8_splat(0x300))));
            }
        }
        let signs = [v128_load(s.add(34) as *const v128), v128_load(s.add(50) as *const v128)];
        let scales = &*(s.add(74) as *const [u8; 8]);
        write_block(|k| super::CODES_S[idx[k] as usize & 1023], signs, scales, [src[0], src[1]], dst);
    }

    /// [`super::expand_block`] of an IQ2_XS block: per group k = 4b + l a u16 at `2 + 2k` (a
    /// 9-bit codebook index, a 7-bit index into `ksigns`), taken 8 at a time; the sign bytes
    /// made from the 7-bit indices in SIMD (`ksigns[i]` is `i` with bit 7 set where `i` has an
    /// odd number of ones: the parity of each nibble from a 16-byte table), then [`write_block`].
    ///
    /// # Safety
    /// Requires simd128.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn expand_iq2xs(src: &[u8; 74], dst: &mut [u8; BB]) {
        let s = src.as_ptr();
        let q: [v128; 4] = core::array::from_fn(|i| v128_load(s.add(2 + 16 * i) as *const v128));
        let mut idx = [0u16; 32];
        for (i, &qi) in q.iter().enumerate() {
            v128_store(idx.as_mut_ptr().add(8 * i) as *mut v128, v128_and(qi, u16x8_splat(511)));
        }
        const P: u8 = 0x80; // bit 7 where the nibble has an odd number of ones
        let parity = u8x16(0, P, P, 0, P, 0, 0, P, P, 0, 0, P, 0, P, P, 0);
        let signs = [(q[0], q[1]), (q[2], q[3])].map(|(a, b)| {
            let i = u8x16_narrow_i16x8(u16x8_shr(a, 9), u16x8_shr(b, 9));
            let odd = v128_xor(i8x16_swizzle(parity, v128_and(i, u8x16_splat(15))), i8x16_swizzle(parity, u8x16_shr(i, 4)));
            v128_or(i, odd)
        });
        let scales = &*(s.add(66) as *const [u8; 8]);
        write_block(|k| super::CODES_XS[idx[k] as usize & 511], signs, scales, [src[0], src[1]], dst);
    }

    /// Writes an expanded block (the reference is `super::write_expanded`) from the code word of
    /// each group (`codes(k)`, k = 4b + l: group l of sub-block b, byte j = the 2-bit code of
    /// weight 32b + 8l + j), the 32 sign bytes in the same order (bit j: weight j of the group
    /// negative; two vectors), the 8 scale bytes and `d`. Each code word is made whole and stored
    /// once (a few values live at a time); the signs are [`transpose_signs`].
    #[inline(always)]
    unsafe fn write_block(codes: impl Fn(usize) -> u64, signs: [v128; 2], scales: &[u8; 8], d: [u8; 2], dst: &mut [u8; BB]) {
        let out = dst.as_mut_ptr();
        transpose_signs(signs, out);
        // Code word 4n + l (bytes 32 + 8(4n + l)..): group l of sub-blocks 4n..4n+4 at shifts 0, 2, 4, 6.
        for n in 0..2 {
            for l in 0..4 {
                let c = |s: usize| codes(4 * (4 * n + s) + l) << (2 * s);
                let w = c(0) | c(1) | c(2) | c(3);
                (out.add(32 + 8 * (4 * n + l)) as *mut u64).write_unaligned(w.to_le());
            }
        }
        dst[96..104].copy_from_slice(scales);
        dst[104..106].copy_from_slice(&d);
    }

    /// The expanded form's sign bytes from the source's (`signs`: bytes 0..16 and 16..32): bit b
    /// of `out[8l + j]` = bit j of source byte `4b + l` (weight 32b + 8l + j). For each group
    /// position l the 8 sign bytes of the sub-blocks are an 8 × 8 bit matrix (row b) that this
    /// transposes; two per vector.
    #[inline(always)]
    unsafe fn transpose_signs([a, b]: [v128; 2], out: *mut u8) {
        // u64 lane h of vector p: byte b = source byte 4b + 2p + h (row b of group position 2p + h).
        let v0 = i8x16_shuffle::<0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29>(a, b);
        let v1 = i8x16_shuffle::<2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31>(a, b);
        v128_store(out as *mut v128, transpose8x8(v0));
        v128_store(out.add(16) as *mut v128, transpose8x8(v1));
    }

    /// Each u64 lane as an 8 × 8 bit matrix (byte r = row r, bit c = column c) transposed: bit
    /// 8r + c → 8c + r, by three rounds of swapping bit blocks across the diagonal (2 × 2, 4 × 4,
    /// then 8 × 8: the block at (r, c) with c > r moves by 7 (c − r) bit positions).
    #[inline(always)]
    fn transpose8x8(x: v128) -> v128 {
        let swap = |x: v128, shift: u32, mask: u64| {
            let t = v128_and(v128_xor(x, u64x2_shr(x, shift)), u64x2_splat(mask));
            v128_xor(v128_xor(x, t), i64x2_shl(t, shift))
        };
        let x = swap(x, 7, 0x00aa_00aa_00aa_00aa);
        let x = swap(x, 14, 0x0000_cccc_0000_cccc);
        swap(x, 28, 0x0000_0000_f0f0_f0f0)
    }

    /// `u = q + 43` of lane `code | sign << 2`.
    #[inline(always)]
    fn biased() -> v128 {
        core::hint::black_box(u8x16(51, 68, 86, 43, 35, 18, 0, 43, 0, 0, 0, 0, 0, 0, 0, 0))
    }

    /// The 16 group scales `2·nib + 1` as u8 lanes in group order.
    #[inline(always)]
    unsafe fn scales(x: *const u8) -> v128 {
        let v = v128_load64_zero(x.add(96) as *const u64);
        let lo = v128_and(v, u8x16_splat(15));
        let hi = v128_and(u16x8_shr(v, 4), u8x16_splat(15));
        let nib = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(lo, hi);
        i8x16_add(i8x16_add(nib, nib), u8x16_splat(1))
    }

    /// # Safety
    /// Requires simd128. Lengths are checked by `check_lens`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lens(row, BB, &act);
        let table = biased();
        let mut acc = f32x4_splat(0.0);
        let mut sbuf = [i32x4_splat(0); 4];
        #[cfg(not(target_feature = "relaxed-simd"))]
        let mut wbuf = [i32x4_splat(0); 16];
        for b in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks and the matching activations.
            let (x, a, bs, da) = block_ptrs(row, BB, &act, b);
            let sc = scales(x);
            let (sc_lo, sc_hi) = (u16x8_extend_low_u8x16(sc), u16x8_extend_high_u8x16(sc));
            store_scale_pairs(sbuf.as_mut_ptr(), sc_lo, sc_hi);
            #[cfg(not(target_feature = "relaxed-simd"))]
            let isum = {
                let w = wbuf.as_mut_ptr();
                decode_3bit(x, |u| i8x16_swizzle(table, u), |g, v| v128_store(w.add(g), v));
                dot_bytes_g16(wbuf.as_ptr() as *const u8, a, sbuf.as_ptr() as *const u32)
            };
            #[cfg(target_feature = "relaxed-simd")]
            let isum = dot_3bit_relaxed(x, a, sbuf.as_ptr() as *const u32, |u| i8x16_relaxed_swizzle(table, u));
            let summs = i32x4_add(
                i32x4_dot_i16x8(sc_lo, v128_load(bs as *const v128)),
                i32x4_dot_i16x8(sc_hi, v128_load(bs.add(8) as *const v128)),
            );
            let isum = i32x4_sub(isum, i32x4_mul(summs, i32x4_splat(43)));
            acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_mul(f16_splat(x.add(104)), da)));
        }
        0.125 * hsum_f32(acc)
    }

    /// Four interleaved rows (the R4 layout above) · `NY` activation rows: Q3_K's loop
    /// (`r4_3bit_isums`) with `u = ±mag + 43` swizzled from `code | sign << 2`. Codes reach 86, so
    /// a word's pair sums (≤ 2·86·127) fill an i16 lane: each word is widened on its own by
    /// `i32x4.dot` with the group's scales of the four rows (lane r = row r). Per block and row, `43 Σ_g sc_g bsum_g`
    /// is taken off in i32 (exact, as in `vec_dot`), then scaled by `d·d_a`; `d_w / 8` at the end.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    #[cfg(target_feature = "relaxed-simd")]
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn vec_dot4<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY]) -> [v128; NY] {
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::IQ2_SX, &a))[0];
        let table = biased();
        let dup = r4_dup_masks();
        let mut scb = [0i8; 128];
        let scb = scb.as_mut_ptr();
        let mut acc = [f32x4_splat(0.0); NY];
        for b in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·106 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`; `scb` holds 16
            // groups × 8 bytes.
            let x = rows4.as_ptr().add(4 * BB * b);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * b));
            // Scales: byte 4r + i of the first vector is scale byte i of row r (groups 2i, 2i + 1
            // in its nibbles), of the second scale byte 4 + i; made `sc_g = 2·nib + 1` in lanes
            // 4r + i of four vectors, groups 4q + i.
            let m15 = u8x16_splat(15);
            let nibs = |v: v128| (v128_and(v, m15), v128_and(u16x8_shr(v, 4), m15));
            let (lo0, hi0) = nibs(v128_load(x as *const v128));
            let (lo1, hi1) = nibs(v128_load(x.add(16) as *const v128));
            let sc = [
                i8x16_shuffle::<0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29>(lo0, hi0),
                i8x16_shuffle::<2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31>(lo0, hi0),
                i8x16_shuffle::<0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29>(lo1, hi1),
                i8x16_shuffle::<2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31>(lo1, hi1),
            ]
            .map(|v| i8x16_add(i8x16_add(v, v), u8x16_splat(1)));
            r4_store_scales(sc, scb, dup);
            let summs = r4_scale_sums_g16(sc, acts.map(|a| a.bsums.as_ptr().add(16 * b)));

            let isum = r4_3bit_isums::<NY, true>(x.add(40), x.add(168), a0, scb, |u| i8x16_relaxed_swizzle(table, u));
            let d = f16_lanes(u32x4_load_extend_u16x4(x.add(32) as *const u16));
            for t in 0..NY {
                let dall = f32x4_mul(d, v128_load32_splat(acts[t].d.as_ptr().add(8 * b) as *const u32));
                let q = i32x4_sub(isum[t], i32x4_mul(summs[t], i32x4_splat(43)));
                acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(q), dall));
            }
        }
        acc.map(|a| f32x4_mul(a, f32x4_splat(0.125)))
    }

    /// Row → GEMM form: `(u − 43)·sc_g` per group, `d = d_w / 8`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked by `check_decode`.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode_row(row: &[u8], out: &mut Decoded) {
        let nb = check_decode(row, BB, out, false);
        let table = biased();
        let mut sc = [0u8; 16];
        let off = i8x16_splat(43);
        for b in 0..nb {
            // SAFETY: block b is row[106b..106b+106]; its weights are q[256b..256b+256].
            let x = row.as_ptr().add(BB * b);
            v128_store(sc.as_mut_ptr() as *mut v128, scales(x));
            let q = out.q.as_mut_ptr().add(QK_K * b);
            decode_3bit(x, |u| i8x16_swizzle(table, u), |g, u| store_scaled16(q.add(16 * g), i8x16_sub(u, off), i16x8_splat(sc[g] as i16)));
            out.d[b] = crate::quant::f16_at(core::slice::from_raw_parts(x, BB), 104) * 0.125;
        }
    }

    /// Row → int8 GEMM form: `u` in pair order, `sc_g`, `mn_g = −43·sc_g`, `d = m = d_w / 8`.
    ///
    /// # Safety
    /// Requires simd128. Lengths are checked inside.
    #[target_feature(enable = "simd128")]
    pub(super) unsafe fn decode8_row(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(crate::quant::GgmlType::IQ2_SX, row);
        let table = biased();
        let mut v = [u8x16_splat(0); 16];
        let off = i16x8_splat(-43);
        for b in 0..nb {
            // SAFETY: block b is row[106b..106b+106]; its outputs are u[256b..], sc/mn[16b..16b+16].
            let x = row.as_ptr().add(BB * b);
            store_i16_and_scaled(out.sc.as_mut_ptr().add(16 * b), scales(x), out.mn.as_mut_ptr().add(16 * b), off);
            decode_3bit(x, |u| i8x16_swizzle(table, u), |g, u| v[g] = u);
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * b));
            let d = crate::quant::f16_at(core::slice::from_raw_parts(x, BB), 104) * 0.125;
            out.d[b] = d;
            out.m[b] = d;
        }
    }
}
