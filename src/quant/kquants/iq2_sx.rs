//! IQ2_S and IQ2_XS expanded ("IQ2_SX"): a load-time form of both whose weights are read like
//! Q4_K's nibbles, with no codebook lookup. 256 weights in 138 bytes (IQ2_S: 82, IQ2_XS: 74), never
//! stored in a file.
//!
//! A weight of these types is `d · (0.5 + nib) · 0.25 · mag · sign`, its magnitude one of {8, 25,
//! 43} found through a codebook index per group of 8 (10 bits in IQ2_S, 9 in IQ2_XS) and its sign
//! stored (IQ2_S) or looked up from a 7-bit index (IQ2_XS). The decode kernels are bound by those
//! lookups (dependent loads per 8 weights). Here each weight is one nibble `c = code | sign << 2`
//! (code 0, 1, 2 → magnitude 8, 25, 43; sign 1: negative):
//!
//! | offset | bytes | field                                                                        |
//! |--------|-------|------------------------------------------------------------------------------|
//! | 0      | 128   | `codes`: byte `16b + l`: low nibble = weight `32b + l`, high = `32b + 16 + l` |
//! | 128    | 8     | `scales`: nibbles (byte b: low = weights 32b.., high = 32b+16..), as both    |
//! | 136    | 2     | `d` (fp16), as in the source                                                 |
//!
//! In the K-quant form: group g (16 weights) has `sc_g = 2·nib_g + 1`, `q = ±mag`, `d = d_w / 8`
//! (exactly the source's values: `(d/8)·(2nib+1)` and `d·(0.5+nib)·0.25` are the same real number
//! scaled by powers of two, so they round alike). The kernels turn a nibble into the unsigned
//! `u = q + 43 ∈ 0..=86` with one byte swizzle and take the 43 back through the activations' group
//! sums, as Q3_K does with its 4.
//!
//! An earlier form kept Q3_K's bit layout (2-bit codes and a sign-bit plane, 106 bytes); joining
//! each weight's code and sign took five operations per 16 weights, and the nibbles run 1.5× the
//! weights per second in the four-row kernel for 30 % more bytes (BENCHMARKS.md, "IQ2_S as nibbles").
//!
//! What it costs: more memory (IQ2_S +68 %, IQ2_XS +86 %: 4.3125 bits per weight), and an
//! expansion after loading ([`expand_in_place`], `weights.rs`). The browser's loader expands only
//! where that costs no context (`www/src/loader.ts`; the load-time forms: `forms.rs`). In the
//! browsers the expanded matrices are also interleaved four rows at a time ([`R4`]).

use super::{dispatch_decode, dispatch_decode8, dispatch_expand, dispatch_vec_dot, dispatch_vec_dot4, kernels, kernels8, KBlock, QuantKernels, QK_K};
use crate::quant::gemm8::Kernels8;
use crate::quant::r4::{Field, R4Kernels};
use crate::quant::tables::{IQ2S_GRID, IQ2XS_GRID, KSIGNS_IQ2XS};
use crate::quant::{f16_at, sanitize_f16, GgmlType};

/// Bytes per expanded block.
pub const BB: usize = 138;
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
        (f16_at(blk, 136) * 0.125, 0.0)
    }

    fn scales(blk: &[u8]) -> ([i32; 16], [i32; 16]) {
        (core::array::from_fn(|g| 2 * ((blk[128 + g / 2] >> (4 * (g % 2))) & 15) as i32 + 1), [0; 16])
    }

    fn decode(blk: &[u8], q: &mut [i8; QK_K]) {
        for (w, qw) in q.iter_mut().enumerate() {
            let (b, l) = (w / 32, w % 32);
            let byte = blk[16 * b + l % 16];
            let c = if l < 16 { byte & 15 } else { byte >> 4 };
            let mag = MAG[(c & 3) as usize];
            *qw = if c & 4 != 0 { -mag } else { mag };
        }
    }
}

fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 136);
    // A nibble is `code | sign << 2` with code 0..=2: bit 3 cleared, code 3 made 2.
    for c in &mut block[..128] {
        let mut v = *c & 0x77;
        for s in [0, 4] {
            if (v >> s) & 3 == 3 {
                v &= !(1 << s);
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

/// One block of `ty` (IQ2_S or IQ2_XS) → its expanded form (138 bytes): the reference of
/// [`expand_in_place`], which in wasm runs `simd::expand_iq2s` / `expand_iq2xs` (the same bytes:
/// IQ2_S's codebook indices made 8 at a time, each sub-block's sign bits spread to its nibbles in
/// one vector, the code words two at a time).
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
    // Group (b, l)'s nibbles `code | sign << 2`, eight to a word; groups l and l + 2 share bytes
    // 16b + 8l.. (low and high nibbles).
    let c = |b: usize, l: usize| codes(b, l) | signs(b, l) << 2;
    for b in 0..8 {
        for l in 0..2 {
            dst[16 * b + 8 * l..][..8].copy_from_slice(&(c(b, l) | c(b, l + 2) << 4).to_le_bytes());
        }
    }
    dst[128..136].copy_from_slice(&scales);
    dst[136..138].copy_from_slice(&d);
}

/// Expands `nb` blocks of `ty` (IQ2_S or IQ2_XS) at `buf[raw..]` into their expanded form at
/// `buf[out..]`, in place (`out ≥ raw`, the ranges may overlap: [`super::forms::expand_blocks`]).
pub fn expand_in_place(ty: GgmlType, buf: &mut [u8], raw: usize, out: usize, nb: usize) {
    use super::forms::expand_blocks;
    match ty {
        GgmlType::IQ2_S => expand_blocks::<BB_IQ2S, BB>(buf, raw, out, nb, dispatch_expand!(simd::expand_iq2s, write_iq2s)),
        GgmlType::IQ2_XS => expand_blocks::<74, BB>(buf, raw, out, nb, dispatch_expand!(simd::expand_iq2xs, write_iq2xs)),
        _ => panic!("{ty} has no expanded form"),
    }
}

dispatch_vec_dot!(vec_dot, simd::vec_dot, super::vec_dot_ref::<Iq2Sx>);

/// Four rows interleaved ([`crate::quant::r4`]), 552 bytes per block:
///
/// | offset | bytes | field                                                          |
/// |--------|-------|----------------------------------------------------------------|
/// | 0      | 32    | `scales` byte b of row r at `4b + r`                           |
/// | 32     | 8     | `d` of row r at `2r`                                           |
/// | 40     | 512   | `codes` word k (bytes 4k..4k+4) of row r at `40 + 16k + 4r`    |
pub(super) const R4: R4Kernels = R4Kernels {
    ty: GgmlType::IQ2_SX,
    fields: &[
        Field { off: 128, len: 8, gran: 1 },
        Field { off: 136, len: 2, gran: 2 },
        Field { off: 0, len: 128, gran: 4 },
    ],
    vec_dot4,
    vec_dot4_n,
    matvec: crate::r4_matvec!(vec_dot4, GgmlType::IQ2_SX),
    alt: None,
    wide_only: false,
    dot_add: false,
};

dispatch_vec_dot4!(vec_dot4, vec_dot4_n, simd::vec_dot4, GgmlType::IQ2_SX);
dispatch_decode!(decode, simd::decode_row, Iq2Sx);
dispatch_decode8!(decode8, simd::decode8_row, Iq2Sx, 43);

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Sub-block b's 32 nibbles are one vector (`nibbles`: weights 32b..32b+16, group 2b, and
    //! 32b+16.., group 2b+1), and a swizzle of [`biased`]'s table makes `u = ±mag + 43`. A product's pair sums
    //! (≤ 2·86·128) fill an i16 lane, so each product is scaled on its own by `i32x4.dot` with
    //! `sc_g`; `43 Σ_g sc_g bsum_g` is taken off per block (in i32: exact).
    use super::super::simd::{block_ptrs, check_decode, f16_splat, nibbles, store_scale_pairs};
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::super::simd::dot_bytes_g16;
    #[cfg(target_feature = "relaxed-simd")]
    use super::super::simd::{f16_lanes, nibbles4, odd_scales, rdot16};
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
    /// negative; two vectors), the 8 scale bytes and `d`. Per sub-block: groups l and l + 2 share
    /// bytes 8l.. (low, high nibble); each sign byte is spread to eight lanes and its bits tested.
    #[inline(always)]
    unsafe fn write_block(codes: impl Fn(usize) -> u64, signs: [v128; 2], scales: &[u8; 8], d: [u8; 2], dst: &mut [u8; BB]) {
        let out = dst.as_mut_ptr();
        // black_box: kept as swizzles and an equality test (see `iq3::iq3_s::simd::Consts`).
        let spread = core::hint::black_box(u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
        let bits = core::hint::black_box(u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128));
        for b in 0..8 {
            let (s, k) = (signs[b / 4], 4 * (b % 4));
            // Lanes 8l + j: bit j of sign byte k + l (low nibbles) and of k + l + 2 (high ones).
            let lo = i8x16_eq(v128_and(i8x16_swizzle(s, i8x16_add(spread, i8x16_splat(k as i8))), bits), bits);
            let hi = i8x16_eq(v128_and(i8x16_swizzle(s, i8x16_add(spread, i8x16_splat(k as i8 + 2))), bits), bits);
            let sign = v128_or(v128_and(lo, u8x16_splat(4)), v128_and(hi, u8x16_splat(0x40)));
            let c = u64x2(codes(4 * b) | codes(4 * b + 2) << 4, codes(4 * b + 1) | codes(4 * b + 3) << 4);
            v128_store(out.add(16 * b) as *mut v128, v128_or(c, sign));
        }
        dst[128..136].copy_from_slice(scales);
        dst[136..138].copy_from_slice(&d);
    }

    /// `u = q + 43` of nibble `code | sign << 2`.
    #[inline(always)]
    fn biased() -> v128 {
        core::hint::black_box(u8x16(51, 68, 86, 43, 35, 18, 0, 43, 0, 0, 0, 0, 0, 0, 0, 0))
    }

    /// The two `u` vectors of sub-block b (groups 2b and 2b + 1) of the block at `x`.
    #[inline(always)]
    unsafe fn biased_codes(x: *const u8, b: usize, table: v128) -> (v128, v128) {
        let (lo, hi) = nibbles(x, b);
        (i8x16_swizzle(table, lo), i8x16_swizzle(table, hi))
    }

    /// The 16 group scales `2·nib + 1` as u8 lanes in group order.
    #[inline(always)]
    unsafe fn scales(x: *const u8) -> v128 {
        let v = v128_load64_zero(x.add(128) as *const u64);
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
        for i in 0..nb {
            // SAFETY: check_lens guarantees nb whole blocks and the matching activations.
            let (x, a, bs, da) = block_ptrs(row, BB, &act, i);
            let sc = scales(x);
            let (sc_lo, sc_hi) = (u16x8_extend_low_u8x16(sc), u16x8_extend_high_u8x16(sc));
            store_scale_pairs(sbuf.as_mut_ptr(), sc_lo, sc_hi);
            let s = sbuf.as_ptr() as *const u32;
            #[cfg(not(target_feature = "relaxed-simd"))]
            let isum = {
                for b in 0..8 {
                    let (lo, hi) = biased_codes(x, b, table);
                    wbuf[2 * b] = lo;
                    wbuf[2 * b + 1] = hi;
                }
                dot_bytes_g16(wbuf.as_ptr() as *const u8, a, s)
            };
            #[cfg(target_feature = "relaxed-simd")]
            let isum = {
                let mut isum = i32x4_splat(0);
                for b in 0..core::hint::black_box(8usize) {
                    let (lo, hi) = biased_codes(x, b, table);
                    let plo = rdot16(lo, v128_load(a.add(32 * b) as *const v128));
                    let phi = rdot16(hi, v128_load(a.add(32 * b + 16) as *const v128));
                    isum = i32x4_add(isum, i32x4_dot_i16x8(plo, v128_load32_splat(s.add(2 * b))));
                    isum = i32x4_add(isum, i32x4_dot_i16x8(phi, v128_load32_splat(s.add(2 * b + 1))));
                }
                isum
            };
            let summs = i32x4_add(
                i32x4_dot_i16x8(sc_lo, v128_load(bs as *const v128)),
                i32x4_dot_i16x8(sc_hi, v128_load(bs.add(8) as *const v128)),
            );
            let isum = i32x4_sub(isum, i32x4_mul(summs, i32x4_splat(43)));
            acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_mul(f16_splat(x.add(136)), da)));
        }
        0.125 * hsum_f32(acc)
    }

    /// Four interleaved rows (the R4 layout above) · `NY` activation rows: lane r of `out[t]` is
    /// row r · `acts[t]`. Per sub-block the four code words of the rows make 8 vectors of 16
    /// products with one activation word broadcast each (i16 lanes 2r, 2r+1 belong to row r),
    /// each scaled by `i32x4.dot` with the rows' `sc` of its group (one swizzle of the block's
    /// scale bytes, made `2·nib + 1` once per block). The 43 comes back per block through the
    /// group sums: lanes 2r, 2r+1 of one blend of the two groups' scales are row r's, one
    /// `i32x4.dot` with the pair of sums. `d_w / 8` at the end.
    ///
    /// # Safety
    /// Requires relaxed-simd. Lengths are checked by `check_rows4`.
    ///
    /// Inlined into its decode driver (see `r4_matvec!`): Chromium 156, 65,536 × 4096, 9.0–9.2 →
    /// 11.3–11.5 GB/s (through a call it paid its set-up — the table, the masks, `acc` ×8 and
    /// back — once per 552-byte piece).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub(super) unsafe fn vec_dot4<const NY: usize>(rows4: &[u8], acts: [Q8<'_>; NY], acc0: [v128; NY]) -> [v128; NY] {
        let nb = acts.map(|a| crate::quant::r4::check_rows4(rows4, crate::quant::GgmlType::IQ2_SX, &a))[0];
        let table = biased();
        // Byte 4k + r → i16 lanes 2r and 2r+1 (index 0x80 + 4k gives 0). Opaque, so that it stays
        // in a register: a shuffle with immediate indices is rebuilt from two 64-bit moves at every use.
        let dup = core::hint::black_box(u8x16(0, 0x80, 0, 0x80, 1, 0x80, 1, 0x80, 2, 0x80, 2, 0x80, 3, 0x80, 3, 0x80));
        // The sums run eight times too large (`d_w / 8` at the end): so does the carried `acc0`
        // (a power of two, exact both ways).
        let mut acc = acc0.map(|a| f32x4_mul(a, f32x4_splat(8.0)));
        for i in 0..nb {
            // SAFETY: check_rows4 guarantees nb R4 blocks of 4·138 bytes in `rows4` and nb·256
            // activations, nb·8 scales and nb·16 group sums in every `acts[t]`.
            let x = rows4.as_ptr().add(4 * BB * i);
            let a0 = acts.map(|a| a.qs.as_ptr().add(QK_K * i));
            // Byte 4b + r of the two vectors (b < 4, b ≥ 4): scale nibbles of groups 2b (low) and
            // 2b + 1 (high) of row r, made 2·nib + 1.
            let (s0, s1) = (odd_scales(x), odd_scales(x.add(16)));
            let (sc_lo, sc_hi) = ([s0.0, s1.0], [s0.1, s1.1]);
            let mut isum = [i32x4_splat(0); NY];
            let mut offs = [i32x4_splat(0); NY];
            // Opaque trip count keeps the loop a loop (V8 spills a fully unrolled block).
            for b in 0..core::hint::black_box(8usize) {
                let dupb = i8x16_add(dup, i8x16_splat(4 * (b % 4) as i8));
                let slo = i8x16_relaxed_swizzle(sc_lo[b / 4], dupb);
                let shi = i8x16_relaxed_swizzle(sc_hi[b / 4], dupb);
                // Lanes 2r = row r's scale of group 2b, 2r + 1 of group 2b + 1.
                let pair = i16x8_shuffle::<0, 9, 2, 11, 4, 13, 6, 15>(slo, shi);
                let (lo, hi) = nibbles4(x.add(40 + 64 * b));
                let (lo, hi) = (lo.map(|v| i8x16_relaxed_swizzle(table, v)), hi.map(|v| i8x16_relaxed_swizzle(table, v)));
                for t in 0..NY {
                    // Word j of the rows: weights 32b + 4j.. (low nibbles), 32b + 16 + 4j.. (high).
                    let a = a0[t].add(32 * b) as *const u32;
                    let mut s = isum[t];
                    for j in 0..4 {
                        s = i32x4_add(s, i32x4_dot_i16x8(rdot16(lo[j], v128_load32_splat(a.add(j))), slo));
                        s = i32x4_add(s, i32x4_dot_i16x8(rdot16(hi[j], v128_load32_splat(a.add(4 + j))), shi));
                    }
                    isum[t] = s;
                    let bs = acts[t].bsums.as_ptr().add(16 * i + 2 * b) as *const u32;
                    offs[t] = i32x4_add(offs[t], i32x4_dot_i16x8(pair, v128_load32_splat(bs)));
                }
            }
            let d = f16_lanes(u32x4_load_extend_u16x4(x.add(32) as *const u16));
            for t in 0..NY {
                let dall = f32x4_mul(d, v128_load32_splat(acts[t].d.as_ptr().add(8 * i) as *const u32));
                let q = i32x4_sub(isum[t], i32x4_mul(offs[t], i32x4_splat(43)));
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
        for i in 0..nb {
            // SAFETY: block i is row[138i..138i+138]; its weights are q[256i..256i+256].
            let x = row.as_ptr().add(BB * i);
            v128_store(sc.as_mut_ptr() as *mut v128, scales(x));
            let q = out.q.as_mut_ptr().add(QK_K * i);
            for b in 0..8 {
                let (lo, hi) = biased_codes(x, b, table);
                store_scaled16(q.add(32 * b), i8x16_sub(lo, off), i16x8_splat(sc[2 * b] as i16));
                store_scaled16(q.add(32 * b + 16), i8x16_sub(hi, off), i16x8_splat(sc[2 * b + 1] as i16));
            }
            out.d[i] = crate::quant::f16_at(core::slice::from_raw_parts(x, BB), 136) * 0.125;
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
        for i in 0..nb {
            // SAFETY: block i is row[138i..138i+138]; its outputs are u[256i..], sc/mn[16i..16i+16].
            let x = row.as_ptr().add(BB * i);
            store_i16_and_scaled(out.sc.as_mut_ptr().add(16 * i), scales(x), out.mn.as_mut_ptr().add(16 * i), off);
            for b in 0..8 {
                (v[2 * b], v[2 * b + 1]) = biased_codes(x, b, table);
            }
            store_pair_order(&v, out.u.as_mut_ptr().add(QK_K * i));
            let d = crate::quant::f16_at(core::slice::from_raw_parts(x, BB), 136) * 0.125;
            out.d[i] = d;
            out.m[i] = d;
        }
    }
}
