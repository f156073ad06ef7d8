//! IQ2_XXS, IQ2_XS and IQ2_S: 2-bit "grid" types (spec §5.2–5.4), all multiplied with Q8_K activations.
//!
//! A 256-element super-block holds one fp16 scale `d` and eight 32-element sub-blocks, each made of
//! four groups of 8 weights. A group is an index into a codebook of 8 unsigned magnitudes
//! (`tables::IQ2*_GRID`, one u64 per entry, element j = byte j, values ∈ {8, 25, 43}) plus 8 sign
//! bits (bit j set ⇒ element j negative). The types differ only in how indices, signs and the
//! 4-bit scales are packed:
//!
//! | type    | grid      | signs                                  | scale nibble per  |
//! |---------|-----------|----------------------------------------|-------------------|
//! | IQ2_XXS | 256 × u64 | 7-bit index into `ksigns_iq2xs`        | 32 elements       |
//! | IQ2_XS  | 512 × u64 | 7-bit index into `ksigns_iq2xs`        | 16 elements       |
//! | IQ2_S   | 1024 × u64| explicit sign byte                     | 16 elements       |
//!
//! With `nib` the scale nibble of a 16-element half, the weights are
//! `y = d * (0.5 + nib) * 0.25 * magnitude * sign`. The integer form used by the dot products
//! (llama.cpp's) writes the scale as `ls = 2*nib + 1` and pulls the common factor 1/8 out:
//! `Σ_w d_w * d_a * Σ_halves ls * Σ_j (±mag_j) q_j`, times 0.125 at the very end.
//!
//! The scalar code (dequantiser, reference dot, GEMM row decoder) is shared: each type only says
//! how to read one group ([`Iq2Layout`]). Each type's section holds its layout and its SIMD128
//! kernels; the SIMD tables and helpers they share are in [`simd`]. The SIMD row decoders write
//! each group as `mag · (±1 · ls)` from the same i16 tables (IQ2_S computes its 32 table offsets
//! per block 8 at a time, as its dot product does).
//!
//! SIMD128 kernels (wasm32). Per group of 8 weights: one `v128.load` of the grid row from a
//! table of the codebook widened to i16 (`*_GRID16`), one of the signs as ±1 i16 lanes
//! (`KSIGNS_PM` / `BYTE_PM`), the 8 activations sign-extended by `i16x8.load8x8_s`; then
//! `i16x8.mul` (exact: |mag·a| ≤ 43·128) and `i32x4.dot_i16x8` against the ±1 row, which applies
//! the signs and widens to i32 in one instruction. A sub-block's four (or two halves') i32x4 sums
//! are multiplied by the splatted `ls` (from the 16-row table `LS`), accumulated in one i32x4 and
//! reduced once per super-block — the same integer the reference computes, so the fast kernel
//! equals the reference exactly. All tables together are 36 KiB.
//!
//! Measured alternatives (Node 20 on x86-64): without relaxed SIMD the 8-bit route — two u64 grid
//! entries in one v128, `KSIGNS64` masks applied as `(g ^ m) - m`, `i16x8.extmul` — is ~12% slower
//! (its high-half extmul and lane inserts cost more than the i16 tables); unrolling the
//! sub-block loop makes V8 spill xmm registers and is up to 2× slower.
//!
//! The relaxed-SIMD build replaces the three dot products ([`relaxed`]): the 8-bit route with one
//! `i16x8.relaxed_dot_i8x16_i7x16_s` per 16 weights, the sign masks made in SIMD from the block's
//! sign bytes. GB/s (one thread, 4096×4096 matvec, Node 20, Zen 4, best of 5, SIMD128 →
//! relaxed): IQ2_XXS 2.47 → 2.78, IQ2_XS 2.46 → 2.82, IQ2_S 2.42 → 3.07.

use super::tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, KSIGNS_IQ2XS};
use super::gemm::Decoded;
use super::gemm8::{pair_pos, DecodeRow8, Decoded8, Kernels8};
use super::{f16_at, sanitize_f16, GgmlType, QuantKernels, Q8, QK_K};

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use {
    core::arch::wasm32::*,
    simd::{entry, entry_at, BYTE_PM, KSIGNS_PM, S_GRID16, XS_GRID16, XXS_GRID16},
};
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
use {
    super::simd::hsum_i32,
    simd::{act8, group, ls_splat},
};
// The relaxed-SIMD dot products replace the SIMD128 ones in the relaxed build (see [`relaxed`]).
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
use relaxed::{vec_dot_iq2_s_simd, vec_dot_iq2_xs_simd, vec_dot_iq2_xxs_simd};

pub static KERNELS: &[QuantKernels] = &[
    QuantKernels {
        ty: GgmlType::IQ2_XXS,
        dequantize: dequantize::<Iq2Xxs>,
        vec_dot_ref: vec_dot_ref::<Iq2Xxs>,
        vec_dot: vec_dot_iq2_xxs,
        decode_ref: decode_ref::<Iq2Xxs>,
        decode: decode_iq2_xxs,
        sanitize,
    },
    QuantKernels {
        ty: GgmlType::IQ2_XS,
        dequantize: dequantize::<Iq2Xs>,
        vec_dot_ref: vec_dot_ref::<Iq2Xs>,
        vec_dot: vec_dot_iq2_xs,
        decode_ref: decode_ref::<Iq2Xs>,
        decode: decode_iq2_xs,
        sanitize,
    },
    QuantKernels {
        ty: GgmlType::IQ2_S,
        dequantize: dequantize::<Iq2S>,
        vec_dot_ref: vec_dot_ref::<Iq2S>,
        vec_dot: vec_dot_iq2_s,
        decode_ref: decode_ref::<Iq2S>,
        decode: decode_iq2_s,
        sanitize,
    },
];

/// All three types have exactly one fp16 field, `d` at offset 0.
fn sanitize(block: &mut [u8]) {
    sanitize_f16(block, 0);
}

// ---------------------------------------------------------------------------------------------
// Shared scalar code.

/// How one type stores its groups. `b` = sub-block (0..8), `l` = group in the sub-block (0..4).
trait Iq2Layout {
    const TY: GgmlType;
    const BYTES: usize;
    /// The 8 magnitudes of group (b, l) (byte j = element j) and its sign byte (bit j ⇒ negative).
    fn group(blk: &[u8], b: usize, l: usize) -> (u64, u8);
    /// The 4-bit scale of group (b, l) (groups 0,1 and 2,3 share one).
    fn nibble(blk: &[u8], b: usize, l: usize) -> u32;
}

fn blocks<L: Iq2Layout>(row: &[u8], n: usize) -> core::slice::ChunksExact<'_, u8> {
    assert!(row.len() % L::BYTES == 0, "row of {} bytes is not whole blocks", row.len());
    assert_eq!(row.len() / L::BYTES * QK_K, n, "row and output/activation lengths differ");
    row.chunks_exact(L::BYTES)
}

/// Reference dequantiser, in ggml's order: `db = d * (0.5 + nib) * 0.25`, then `db * mag * sign`.
fn dequantize<L: Iq2Layout>(row: &[u8], out: &mut [f32]) {
    for (blk, y) in blocks::<L>(row, out.len()).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(blk, 0);
        for b in 0..8 {
            for l in 0..4 {
                let db = d * (0.5 + L::nibble(blk, b, l) as f32) * 0.25;
                let (mag, signs) = L::group(blk, b, l);
                for j in 0..8 {
                    let v = db * ((mag >> (8 * j)) & 0xff) as f32;
                    y[32 * b + 8 * l + j] = if signs >> j & 1 != 0 { -v } else { v };
                }
            }
        }
    }
}

/// Reference dot product with Q8_K activations: integer sums per 16-element half times `2*nib+1`,
/// summed per super-block, times `d_w * d_a`; the common 1/8 is applied once at the end.
fn vec_dot_ref<L: Iq2Layout>(row: &[u8], act: Q8<'_>) -> f32 {
    let mut sumf = 0.0f32;
    for (i, blk) in blocks::<L>(row, act.qs.len()).enumerate() {
        let a = &act.qs[QK_K * i..QK_K * (i + 1)];
        let mut bsum = 0i32;
        for b in 0..8 {
            for l in 0..4 {
                let (mag, signs) = L::group(blk, b, l);
                let mut sumi = 0i32;
                for j in 0..8 {
                    let v = ((mag >> (8 * j)) & 0xff) as i32 * a[32 * b + 8 * l + j] as i32;
                    sumi += if signs >> j & 1 != 0 { -v } else { v };
                }
                bsum += (2 * L::nibble(blk, b, l) as i32 + 1) * sumi;
            }
        }
        sumf += f16_at(blk, 0) * act.d[8 * i] * bsum as f32;
    }
    0.125 * sumf
}

/// GEMM form: `q = (2·nib + 1)·(±mag)`, `d = d_w / 8`. Exact: `(d/8)·((2nib+1)·mag)` and the
/// dequantiser's `(d·(0.5 + nib)·0.25)·mag` are the same exactly representable product.
fn decode_ref<L: Iq2Layout>(row: &[u8], out: &mut Decoded) {
    let n = out.check(L::TY, row);
    for (i, blk) in blocks::<L>(row, n).enumerate() {
        for b in 0..8 {
            for l in 0..4 {
                let (mag, signs) = L::group(blk, b, l);
                let ls = 2 * L::nibble(blk, b, l) as i16 + 1;
                for j in 0..8 {
                    let m = ((mag >> (8 * j)) & 0xff) as i16 * ls;
                    out.q[QK_K * i + 32 * b + 8 * l + j] = if signs >> j & 1 != 0 { -m } else { m };
                }
            }
        }
        out.d[i] = f16_at(blk, 0) * 0.125;
    }
}

/// Offset that makes the signed magnitudes (±8, ±25, ±43) unsigned int8 codes `0..=86`.
const OFF8: i32 = 43;

/// Int8 GEMM form ([`crate::quant::gemm8`]): codes `u = ±mag + 43 ∈ 0..=86` in pair order,
/// `sc = 2·nib + 1`, the offset back through the min term (`mn = −43·sc`, `m = d`), `d = d_w / 8`.
/// Exact as [`decode_ref`]: `d·(sc·u) + d·(−43·sc)` are two exact products whose sum,
/// `d·sc·(±mag)`, is exactly representable.
fn decode8_ref<L: Iq2Layout>(row: &[u8], out: &mut Decoded8) {
    let nb = out.check(L::TY, row);
    for (i, blk) in blocks::<L>(row, nb * QK_K).enumerate() {
        for b in 0..8 {
            for l in 0..4 {
                let (mag, signs) = L::group(blk, b, l);
                for j in 0..8 {
                    let m = ((mag >> (8 * j)) & 0xff) as i32;
                    let q = if signs >> j & 1 != 0 { -m } else { m };
                    out.u[QK_K * i + pair_pos(32 * b + 8 * l + j)] = (q + OFF8) as u8;
                }
                let ls = 2 * L::nibble(blk, b, l) as i16 + 1;
                out.sc[16 * i + 2 * b + l / 2] = ls;
                out.mn[16 * i + 2 * b + l / 2] = -(OFF8 as i16) * ls;
            }
        }
        let d = f16_at(blk, 0) * 0.125;
        out.d[i] = d;
        out.m[i] = d;
    }
}

/// The int8 GEMM entries: codes up to 86 (`ksum` 1, every vector widened), in the browsers'
/// profile from 16 tokens: their decoding costs more than the i16 one's, which the tile's gain
/// pays back from ~8–16 tokens on. Chromium 156, 4096×4096, G MAC/s, i16 GEMM → int8:
/// * IQ2_S, T = 2 / 4 / 8 / 32 / 128: 12.4 / 19.7 / 24.4 / 35.8 / 38.5 → 10.2 / 16.8 / 24.4 /
///   38.1 / 42.5;
/// * IQ2_XXS, T = 4 / 16 / 32 (two alternating rounds): 19.2 / 29.2–29.8 / 31.8–32.3 → 16.8 /
///   29.5–31.2 / 34.0–36.0;
/// * IQ2_XS: 17.7–18.1 / 27.7–29.8 / 31.4–31.8 → 16.4–18.1 / 29.2–31.2 / 33.8–35.3.
const fn kernels8<L: Iq2Layout>(min_tokens: usize, decode: DecodeRow8) -> Kernels8 {
    Kernels8 { ty: L::TY, umax: 86, faster: [false, true], min_tokens, offset: Some(OFF8 as u8), decode_ref: decode8_ref::<L>, decode, scaled: None, scales32: false }
}

pub(super) const KERNELS8_IQ2XXS: Kernels8 = Kernels8 { scales32: true, ..kernels8::<Iq2Xxs>(16, decode8_iq2_xxs) };
pub(super) const KERNELS8_IQ2XS: Kernels8 = kernels8::<Iq2Xs>(16, decode8_iq2_xs);
pub(super) const KERNELS8_IQ2S: Kernels8 = kernels8::<Iq2S>(16, decode8_iq2_s);

/// The fast int8 decoders: relaxed SIMD in the relaxed build, else the reference (the int8 GEMM
/// runs only in the relaxed build; the others have these for the tests).
macro_rules! fast_decode8 {
    ($name:ident, $layout:ty, $simd:ident) => {
        fn $name(row: &[u8], out: &mut Decoded8) {
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            {
                // SAFETY: relaxed-simd is enabled for this build; lengths are checked inside.
                return unsafe { relaxed::$simd(row, out) };
            }
            #[allow(unreachable_code)]
            decode8_ref::<$layout>(row, out)
        }
    };
}

fast_decode8!(decode8_iq2_xxs, Iq2Xxs, decode8_iq2_xxs_simd);
fast_decode8!(decode8_iq2_xs, Iq2Xs, decode8_iq2_xs_simd);
fast_decode8!(decode8_iq2_s, Iq2S, decode8_iq2_s_simd);

/// The fast row decoders: on wasm32 the generic SIMD driver with the type's table rows
/// (`$rows(blk, b, l)` = grid row and ±1 sign row of group (b, l)), else the reference.
macro_rules! fast_decode {
    ($name:ident, $layout:ty, $rows:expr) => {
        fn $name(row: &[u8], out: &mut Decoded) {
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build; the driver checks the lengths and
                // `$rows` only reads inside the block it is given.
                return unsafe { simd::decode_rows::<$layout>(row, out, $rows) };
            }
            #[allow(unreachable_code)]
            decode_ref::<$layout>(row, out)
        }
    };
}

/// The fast kernels share this front: checks lengths once, then calls the SIMD kernel on wasm32
/// (natively the reference is used: native SIMD is not a goal of this crate).
macro_rules! fast_entry {
    ($name:ident, $layout:ty, $simd:ident) => {
        fn $name(row: &[u8], act: Q8<'_>) -> f32 {
            let nb = row.len() / <$layout>::BYTES;
            assert!(row.len() % <$layout>::BYTES == 0 && act.qs.len() == nb * QK_K);
            assert!(act.d.len() == nb * 8);
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            {
                // SAFETY: simd128 is enabled for this build; lengths were checked above.
                return unsafe { $simd(row, act, nb) };
            }
            #[allow(unreachable_code)]
            vec_dot_ref::<$layout>(row, act)
        }
    };
}

// ---------------------------------------------------------------------------------------------
// SIMD128 tables and helpers.

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! Tables and helpers shared by the three SIMD128 kernels.
    use super::super::tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, KSIGNS_IQ2XS};
    use core::arch::wasm32::*;

    // --- Lookup tables, built at compile time from the ggml codebooks -------------------------

    /// A table of i16x8 rows, 16-byte aligned; row i starts at byte offset 16·i.
    #[repr(C, align(16))]
    pub struct Rows<const N: usize>([[i16; 8]; N]);

    /// Grid magnitudes widened to i16: row i, lane j = byte j of `grid[i]`.
    const fn widen<const N: usize>(grid: &[u64; N]) -> Rows<N> {
        let mut out = [[0i16; 8]; N];
        let mut i = 0;
        while i < N {
            let mut j = 0;
            while j < 8 {
                out[i][j] = ((grid[i] >> (8 * j)) & 0xff) as i16;
                j += 1;
            }
            i += 1;
        }
        Rows(out)
    }

    /// Signs as ±1: row i, lane j = -1 if bit j of `sign_byte[i]` is set, else +1.
    const fn plus_minus<const N: usize>(sign_byte: &[u8; N]) -> Rows<N> {
        let mut out = [[0i16; 8]; N];
        let mut i = 0;
        while i < N {
            let mut j = 0;
            while j < 8 {
                out[i][j] = if (sign_byte[i] >> j) & 1 != 0 { -1 } else { 1 };
                j += 1;
            }
            i += 1;
        }
        Rows(out)
    }

    const fn identity_bytes() -> [u8; 256] {
        let mut out = [0u8; 256];
        let mut i = 0;
        while i < 256 {
            out[i] = i as u8;
            i += 1;
        }
        out
    }

    pub static XXS_GRID16: Rows<256> = widen(&IQ2XXS_GRID); // 4 KiB
    pub static XS_GRID16: Rows<512> = widen(&IQ2XS_GRID); // 8 KiB
    pub static S_GRID16: Rows<1024> = widen(&IQ2S_GRID); // 16 KiB
    /// Indexed by a 7-bit ksigns index (IQ2_XXS, IQ2_XS); the parity bit is included.
    pub static KSIGNS_PM: Rows<128> = plus_minus(&KSIGNS_IQ2XS);
    /// Indexed by an explicit sign byte (IQ2_S).
    pub static BYTE_PM: Rows<256> = plus_minus(&identity_bytes());

    /// Row n = `2n + 1` in all four i32 lanes: the integer scale `ls` of scale nibble n.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[repr(C, align(16))]
    pub struct Splats([[i32; 4]; 16]);
    #[cfg(not(target_feature = "relaxed-simd"))]
    pub static LS: Splats = {
        let mut out = [[0i32; 4]; 16];
        let mut n = 0;
        while n < 16 {
            out[n] = [2 * n as i32 + 1; 4];
            n += 1;
        }
        Splats(out)
    };

    // --- Helpers ------------------------------------------------------------------------------

    /// Entry (row) `i` of a table.
    ///
    /// # Safety
    /// `i < N` (callers mask indices to the table size).
    #[inline(always)]
    pub unsafe fn entry<const N: usize>(t: &Rows<N>, i: usize) -> v128 {
        debug_assert!(i < N);
        v128_load(t.0.as_ptr().add(i) as *const v128)
    }

    /// The entry at byte offset `off` (= 16·index) of a table.
    ///
    /// # Safety
    /// `off < 16 * N` and a multiple of 16.
    #[inline(always)]
    pub unsafe fn entry_at<const N: usize>(t: &Rows<N>, off: u16) -> v128 {
        debug_assert!((off as usize) < 16 * N && off % 16 == 0);
        v128_load((t.0.as_ptr() as *const u8).add(off as usize) as *const v128)
    }

    /// The `ls` splat of a scale nibble given as `16 * nib` (< 256).
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub unsafe fn ls_splat(nib16: usize) -> v128 {
        debug_assert!(nib16 < 256 && nib16 % 16 == 0);
        v128_load((LS.0.as_ptr() as *const u8).add(nib16) as *const v128)
    }

    /// Eight activations, sign-extended to i16.
    ///
    /// # Safety
    /// `a..a+8` readable.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub unsafe fn act8(a: *const i8) -> v128 {
        i16x8_load_extend_i8x8(a)
    }

    /// The generic SIMD row decoder: `rows(blk, b, l)` returns the i16 grid row and the ±1 sign
    /// row of group (b, l); the group's 8 weights are `mag · (±1 · ls)`, with `ls = 2·nib + 1`.
    ///
    /// # Safety
    /// Requires simd128; `rows` must read only inside the block at `blk`.
    #[inline(always)]
    pub(super) unsafe fn decode_rows<L: super::Iq2Layout>(
        row: &[u8],
        out: &mut super::Decoded,
        rows: impl Fn(*const u8, usize, usize) -> (v128, v128),
    ) {
        let n = out.check(L::TY, row);
        let q = out.q.as_mut_ptr();
        for (i, blk) in row.chunks_exact(L::BYTES).enumerate().take(n / super::QK_K) {
            for b in 0..8 {
                for h in 0..2 {
                    // Groups 2h, 2h+1 share their scale nibble.
                    let ls = i16x8_splat(2 * L::nibble(blk, b, 2 * h) as i16 + 1);
                    for l in 2 * h..2 * h + 2 {
                        let (mag, pm) = rows(blk.as_ptr(), b, l);
                        // SAFETY: `check` sized q for n = 256 · blocks weights.
                        v128_store(q.add(super::QK_K * i + 32 * b + 8 * l) as *mut v128, i16x8_mul(mag, i16x8_mul(pm, ls)));
                    }
                }
            }
            out.d[i] = super::f16_at(blk, 0) * 0.125;
        }
    }

    /// One group of 8: i32x4 partial sums of Σ_j sign_j · mag_j · a_j. The i16 product is exact
    /// (|mag·a| ≤ 43·128) and the dot with ±1 applies the signs while widening to i32.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub fn group(mag: v128, a: v128, pm: v128) -> v128 {
        i32x4_dot_i16x8(i16x8_mul(mag, a), pm)
    }
}

// ---------------------------------------------------------------------------------------------
// IQ2_XXS — 66 bytes, 2.0625 bits per weight.
//
//   @0   d: f16
//   @2   qs: 64 bytes, 8 per sub-block b (@2+8b):
//          bytes 0..3  grid indices of groups 0..3 (into IQ2XXS_GRID[256])
//          bytes 4..7  u32 w: bits 7l..7l+6 = sign index of group l (into ksigns_iq2xs),
//                      bits 28..31 = scale nibble of the whole sub-block

struct Iq2Xxs;

impl Iq2Layout for Iq2Xxs {
    const TY: GgmlType = GgmlType::IQ2_XXS;
    const BYTES: usize = 66;
    #[inline(always)]
    fn group(blk: &[u8], b: usize, l: usize) -> (u64, u8) {
        let q = &blk[2 + 8 * b..2 + 8 * b + 8];
        let w = u32::from_le_bytes([q[4], q[5], q[6], q[7]]);
        (IQ2XXS_GRID[q[l] as usize], KSIGNS_IQ2XS[(w >> (7 * l)) as usize & 127])
    }
    #[inline(always)]
    fn nibble(blk: &[u8], b: usize, _l: usize) -> u32 {
        blk[2 + 8 * b + 7] as u32 >> 4
    }
}

fast_entry!(vec_dot_iq2_xxs, Iq2Xxs, vec_dot_iq2_xxs_simd);
fast_decode!(decode_iq2_xxs, Iq2Xxs, |blk: *const u8, b: usize, l: usize| {
    // SAFETY: group (b, l) reads bytes 2 + 8b .. 10 + 8b of the block; indices are masked.
    let q = blk.add(2 + 8 * b);
    let w = (q.add(4) as *const u32).read_unaligned().to_le() as usize;
    (entry(&XXS_GRID16, *q.add(l) as usize), entry(&KSIGNS_PM, (w >> (7 * l)) & 127))
});

/// IQ2_XXS · Q8_K, SIMD128. (As in all three kernels, the sub-block loop body is kept small on
/// purpose: V8 has 16 xmm registers and does not rematerialise, so unrolling — LLVM then hoists
/// the loads of several sub-blocks — makes it spill and run up to 2× slower.)
///
/// # Safety
/// simd128; `row` is `nb` whole blocks and `act` has `256*nb` values and `8*nb` scales (checked by
/// `fast_entry!`).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
#[target_feature(enable = "simd128")]
unsafe fn vec_dot_iq2_xxs_simd(row: &[u8], act: Q8<'_>, nb: usize) -> f32 {
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let blk = row.as_ptr().add(i * Iq2Xxs::BYTES);
        let a = act.qs.as_ptr().add(i * QK_K);
        let mut acc = i32x4_splat(0);
        for b in 0..8 {
            // SAFETY: all reads are inside block i (row) / activation block i; table indices are
            // masked to the table sizes (256 grid rows: a byte; 128 sign rows: & 127; 16 scales).
            let q = blk.add(2 + 8 * b); // 4 grid-index bytes, then u32 w
            let w = (q.add(4) as *const u32).read_unaligned().to_le() as usize;
            let a = a.add(32 * b);
            let p0 = group(entry(&XXS_GRID16, *q as usize), act8(a), entry(&KSIGNS_PM, w & 127));
            let p1 = group(entry(&XXS_GRID16, *q.add(1) as usize), act8(a.add(8)), entry(&KSIGNS_PM, (w >> 7) & 127));
            let p2 = group(entry(&XXS_GRID16, *q.add(2) as usize), act8(a.add(16)), entry(&KSIGNS_PM, (w >> 14) & 127));
            let p3 = group(entry(&XXS_GRID16, *q.add(3) as usize), act8(a.add(24)), entry(&KSIGNS_PM, (w >> 21) & 127));
            let sum = i32x4_add(i32x4_add(p0, p1), i32x4_add(p2, p3));
            acc = i32x4_add(acc, i32x4_mul(sum, ls_splat((w >> 24) & 0xf0)));
        }
        sumf += f16_at(core::slice::from_raw_parts(blk, 2), 0) * act.d[8 * i] * hsum_i32(acc) as f32;
    }
    0.125 * sumf
}

// ---------------------------------------------------------------------------------------------
// IQ2_XS — 74 bytes, 2.3125 bits per weight.
//
//   @0   d: f16
//   @2   qs: u16[32], word 4b+l for group (b, l): bits 0..8 = grid index (into IQ2XS_GRID[512]),
//        bits 9..15 = sign index (into ksigns_iq2xs)
//   @66  scales[8]: byte b = scale nibbles of sub-block b (low: groups 0,1; high: groups 2,3)

struct Iq2Xs;

impl Iq2Layout for Iq2Xs {
    const TY: GgmlType = GgmlType::IQ2_XS;
    const BYTES: usize = 74;
    #[inline(always)]
    fn group(blk: &[u8], b: usize, l: usize) -> (u64, u8) {
        let o = 2 + 2 * (4 * b + l);
        let w = u16::from_le_bytes([blk[o], blk[o + 1]]) as usize;
        (IQ2XS_GRID[w & 511], KSIGNS_IQ2XS[w >> 9])
    }
    #[inline(always)]
    fn nibble(blk: &[u8], b: usize, l: usize) -> u32 {
        (blk[66 + b] as u32 >> (4 * (l / 2))) & 15
    }
}

fast_entry!(vec_dot_iq2_xs, Iq2Xs, vec_dot_iq2_xs_simd);
fast_decode!(decode_iq2_xs, Iq2Xs, |blk: *const u8, b: usize, l: usize| {
    // SAFETY: group (b, l) reads its u16 word inside the block; indices are masked.
    let w = (blk.add(2 + 2 * (4 * b + l)) as *const u16).read_unaligned().to_le() as usize;
    (entry(&XS_GRID16, w & 511), entry(&KSIGNS_PM, w >> 9))
});

/// IQ2_XS · Q8_K, SIMD128.
///
/// # Safety
/// simd128; `row` is `nb` whole blocks and `act` has `256*nb` values and `8*nb` scales (checked by
/// `fast_entry!`).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
#[target_feature(enable = "simd128")]
unsafe fn vec_dot_iq2_xs_simd(row: &[u8], act: Q8<'_>, nb: usize) -> f32 {
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let blk = row.as_ptr().add(i * Iq2Xs::BYTES);
        let a = act.qs.as_ptr().add(i * QK_K);
        let mut acc = i32x4_splat(0);
        for b in 0..8 {
            // SAFETY: all reads are inside block i (row) / activation block i; table indices are
            // masked to the table sizes (512 grid rows: & 511; 128 sign rows: >> 9 of a u16).
            // Two u16 words per u32: bits 0..8 grid index, bits 9..15 sign index.
            let w01 = (blk.add(2 + 8 * b) as *const u32).read_unaligned().to_le() as usize;
            let w23 = (blk.add(6 + 8 * b) as *const u32).read_unaligned().to_le() as usize;
            let a = a.add(32 * b);
            let p0 = group(entry(&XS_GRID16, w01 & 511), act8(a), entry(&KSIGNS_PM, (w01 >> 9) & 127));
            let p1 = group(entry(&XS_GRID16, (w01 >> 16) & 511), act8(a.add(8)), entry(&KSIGNS_PM, w01 >> 25));
            let p2 = group(entry(&XS_GRID16, w23 & 511), act8(a.add(16)), entry(&KSIGNS_PM, (w23 >> 9) & 127));
            let p3 = group(entry(&XS_GRID16, (w23 >> 16) & 511), act8(a.add(24)), entry(&KSIGNS_PM, w23 >> 25));
            let sc = *blk.add(66 + b) as usize;
            let lo = i32x4_mul(i32x4_add(p0, p1), ls_splat((sc & 15) << 4));
            let hi = i32x4_mul(i32x4_add(p2, p3), ls_splat(sc & 0xf0));
            acc = i32x4_add(acc, i32x4_add(lo, hi));
        }
        sumf += f16_at(core::slice::from_raw_parts(blk, 2), 0) * act.d[8 * i] * hsum_i32(acc) as f32;
    }
    0.125 * sumf
}

// ---------------------------------------------------------------------------------------------
// IQ2_S — 82 bytes, 2.5625 bits per weight.
//
//   @0   d: f16
//   @2   qs[32]: low 8 bits of the grid index of group (b, l) at byte 4b+l
//   @34  signs[32]: sign byte of group (b, l) at byte 4b+l (bit j ⇒ element j negative)
//   @66  qh[8]: byte b bits 2l..2l+1 = bits 8..9 of the grid index of group (b, l)
//        (index into IQ2S_GRID[1024])
//   @74  scales[8]: as IQ2_XS

struct Iq2S;

impl Iq2Layout for Iq2S {
    const TY: GgmlType = GgmlType::IQ2_S;
    const BYTES: usize = 82;
    #[inline(always)]
    fn group(blk: &[u8], b: usize, l: usize) -> (u64, u8) {
        let idx = blk[2 + 4 * b + l] as usize | ((blk[66 + b] as usize >> (2 * l)) & 3) << 8;
        (IQ2S_GRID[idx], blk[34 + 4 * b + l])
    }
    #[inline(always)]
    fn nibble(blk: &[u8], b: usize, l: usize) -> u32 {
        (blk[74 + b] as u32 >> (4 * (l / 2))) & 15
    }
}

fast_entry!(vec_dot_iq2_s, Iq2S, vec_dot_iq2_s_simd);
fn decode_iq2_s(row: &[u8], out: &mut Decoded) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build; lengths are checked inside.
        return unsafe { decode_iq2_s_simd(row, out) };
    }
    #[allow(unreachable_code)]
    decode_ref::<Iq2S>(row, out)
}
/// The byte offsets into `S_GRID16` (`goff`) and `BYTE_PM` (`soff`) of the 32 groups of the IQ2_S
/// block at `blk`: group 4b+l has grid row `qs[4b+l] | ((qh[b] >> 2l) & 3) << 8` and sign row
/// `signs[4b+l]`; computed 8 groups at a time. `qh_mul` = `QH_MUL` (see [`vec_dot_iq2_s_simd`]).
///
/// # Safety
/// `blk` must point to a whole IQ2_S block.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
unsafe fn iq2s_offsets(blk: *const u8, qh_mul: v128, goff: &mut [u16; 32], soff: &mut [u16; 32]) {
    let qh = v128_load64_zero(blk.add(66) as *const u64);
    for h in 0..2 {
        // Sub-blocks 4h..4h+4: low index bytes and sign bytes (16 groups each).
        let lo = v128_load(blk.add(2 + 16 * h) as *const v128);
        let sg = v128_load(blk.add(34 + 16 * h) as *const v128);
        let (b0, b1, b2, b3) = (4 * h as u8, 4 * h as u8 + 1, 4 * h as u8 + 2, 4 * h as u8 + 3);
        // qh[b] in the u16 lanes of its sub-block's four groups (index 255 → 0).
        let z = 255;
        let qh01 = i8x16_swizzle(qh, u8x16(b0, z, b0, z, b0, z, b0, z, b1, z, b1, z, b1, z, b1, z));
        let qh23 = i8x16_swizzle(qh, u8x16(b2, z, b2, z, b2, z, b2, z, b3, z, b3, z, b3, z, b3, z));
        let hi01 = v128_and(i16x8_mul(qh01, qh_mul), u16x8_splat(0x3000));
        let hi23 = v128_and(i16x8_mul(qh23, qh_mul), u16x8_splat(0x3000));
        let g01 = v128_or(i16x8_shl(u16x8_extend_low_u8x16(lo), 4), hi01);
        let g23 = v128_or(i16x8_shl(u16x8_extend_high_u8x16(lo), 4), hi23);
        v128_store(goff.as_mut_ptr().add(16 * h) as *mut v128, g01);
        v128_store(goff.as_mut_ptr().add(16 * h + 8) as *mut v128, g23);
        v128_store(soff.as_mut_ptr().add(16 * h) as *mut v128, i16x8_shl(u16x8_extend_low_u8x16(sg), 4));
        v128_store(soff.as_mut_ptr().add(16 * h + 8) as *mut v128, i16x8_shl(u16x8_extend_high_u8x16(sg), 4));
    }
}

/// Lane k (group k % 4 of a sub-block): multiplier moving qh bits 2k..2k+1 to bits 12..13. Read
/// through read_volatile: as a visible constant, LLVM turns the multiply into per-lane shifts,
/// which wasm lacks, and scalarises them.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
static QH_MUL: [i16; 8] = [4096, 1024, 256, 64, 4096, 1024, 256, 64];

/// IQ2_S row → GEMM form: the block's grid and sign row offsets as for the dot product, then per
/// group `mag · (±1 · ls)`.
///
/// # Safety
/// simd128.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[target_feature(enable = "simd128")]
unsafe fn decode_iq2_s_simd(row: &[u8], out: &mut Decoded) {
    let n = out.check(GgmlType::IQ2_S, row);
    let qh_mul = core::ptr::read_volatile(QH_MUL.as_ptr() as *const v128);
    let q = out.q.as_mut_ptr();
    for i in 0..n / QK_K {
        // SAFETY: block i lies in `row` (checked); offsets index inside the tables (see
        // `iq2s_offsets`); `check` sized q for 256 weights per block.
        let blk = row.as_ptr().add(i * Iq2S::BYTES);
        let (mut goff, mut soff) = ([0u16; 32], [0u16; 32]);
        iq2s_offsets(blk, qh_mul, &mut goff, &mut soff);
        for b in 0..8 {
            let sc = *blk.add(74 + b) as i16;
            for h in 0..2 {
                let ls = i16x8_splat(2 * ((sc >> (4 * h)) & 15) + 1);
                for l in 2 * h..2 * h + 2 {
                    let g = 4 * b + l;
                    let mag = entry_at(&S_GRID16, goff[g]);
                    let pm = entry_at(&BYTE_PM, soff[g]);
                    v128_store(q.add(QK_K * i + 8 * g) as *mut v128, i16x8_mul(mag, i16x8_mul(pm, ls)));
                }
            }
        }
        out.d[i] = f16_at(core::slice::from_raw_parts(blk, 2), 0) * 0.125;
    }
}

/// IQ2_S · Q8_K, SIMD128. Its 10-bit grid index is spread over two fields, which costs ~6 scalar
/// operations per group; instead the byte offsets of all 32 grid rows (and sign rows) of a
/// block are computed 8 at a time in SIMD, stored to a small array and read back per group.
///
/// # Safety
/// simd128; `row` is `nb` whole blocks and `act` has `256*nb` values and `8*nb` scales (checked by
/// `fast_entry!`).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", not(target_feature = "relaxed-simd")))]
#[target_feature(enable = "simd128")]
unsafe fn vec_dot_iq2_s_simd(row: &[u8], act: Q8<'_>, nb: usize) -> f32 {
    let qh_mul = core::ptr::read_volatile(QH_MUL.as_ptr() as *const v128);
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let blk = row.as_ptr().add(i * Iq2S::BYTES);
        let a = act.qs.as_ptr().add(i * QK_K);
        // SAFETY: all reads are inside block i (row) / activation block i; grid offsets are at
        // most 16·1023 and sign offsets 16·255, inside S_GRID16 and BYTE_PM.
        let (mut goff, mut soff) = ([0u16; 32], [0u16; 32]);
        iq2s_offsets(blk, qh_mul, &mut goff, &mut soff);
        let mut acc = i32x4_splat(0);
        for b in 0..8 {
            let (g, s) = (&goff[4 * b..4 * b + 4], &soff[4 * b..4 * b + 4]);
            let a = a.add(32 * b);
            let p0 = group(entry_at(&S_GRID16, g[0]), act8(a), entry_at(&BYTE_PM, s[0]));
            let p1 = group(entry_at(&S_GRID16, g[1]), act8(a.add(8)), entry_at(&BYTE_PM, s[1]));
            let p2 = group(entry_at(&S_GRID16, g[2]), act8(a.add(16)), entry_at(&BYTE_PM, s[2]));
            let p3 = group(entry_at(&S_GRID16, g[3]), act8(a.add(24)), entry_at(&BYTE_PM, s[3]));
            let sc = *blk.add(74 + b) as usize;
            let lo = i32x4_mul(i32x4_add(p0, p1), ls_splat((sc & 15) << 4));
            let hi = i32x4_mul(i32x4_add(p2, p3), ls_splat(sc & 0xf0));
            acc = i32x4_add(acc, i32x4_add(lo, hi));
        }
        sumf += f16_at(core::slice::from_raw_parts(blk, 2), 0) * act.d[8 * i] * hsum_i32(acc) as f32;
    }
    0.125 * sumf
}


// ---------------------------------------------------------------------------------------------
// Relaxed-SIMD dot products (the build with `+relaxed-simd`; the row decoders stay SIMD128).

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
pub(super) mod relaxed {
    //! The 8-bit route: 16 weights per `i16x8.relaxed_dot_i8x16_i7x16_s`. Its second operand must
    //! be 7-bit unsigned, so the grid magnitudes (u8 ≤ 43, straight from the u64 codebooks, two
    //! rows per v128 via `load64_zero` + `load64_lane`) are that operand and the signs go onto
    //! the activations instead: `a` or `−a` per byte mask (exact, as Q8_K activations are in
    //! [−127, 127]). A pair sum is at most 2·43·127, so nothing saturates.
    //!
    //! The sign masks are not looked up: the block's 32 sign bytes (IQ2_S: stored; IQ2_XXS /
    //! IQ2_XS: the 7-bit ksigns indices, with their parity bit added in SIMD) sit in two v128
    //! ([`Signs`]) and each 16-weight mask is a swizzle, an `and` and a compare. These kernels are
    //! bound by V8's x64 instruction and load count per table lookup (the SIMD128 kernels run at
    //! ~5 instructions per cycle), so what counts is instructions, loads first:
    //! * a first version with sign masks from `KSIGNS64` (two u64 lookups per 16 weights, their
    //!   indices extracted in scalar code) ran at about the speed of the SIMD128 kernels;
    //! * computing all grid and sign row addresses of a block in SIMD, storing them and reading
    //!   them back per sub-block was slower than the SIMD128 kernels: one more load per lookup;
    //! * the sub-block data is addressed as `blk + 8·(b & 7)`: with plain `blk + 8·b` loop
    //!   strength reduction leaves address arithmetic that LLVM cannot fold into the loads' offset
    //!   immediates (V8 then adds an x64 `lea` per load; a `black_box`-ed pointer costs a store and
    //!   a load); the loop keeps an opaque trip count (unrolled, LLVM hoists all loads and V8
    //!   spills, as in the SIMD128 kernels);
    //! * the sign goes on with `relaxed_laneselect(−a, a, m)`: written as `(a ^ m) − m`, LLVM
    //!   knows `m` is a mask and emits a negation and a three-instruction bit select;
    //! * the block scale `d` is converted branch-free in SIMD and the blocks are summed in f32x4.
    use super::super::tables::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
    use super::{Iq2Layout, Iq2S, Iq2Xs, Iq2Xxs, Q8, QK_K};
    use crate::quant::simd::hsum_f32;
    use core::arch::wasm32::*;
    use core::hint::black_box;

    /// Row n (byte offset 16·n) = `2n + 1` in all eight i16 lanes: `ls` of scale nibble n, the
    /// second operand of `i32x4.dot_i16x8_s`.
    #[repr(C, align(16))]
    struct Splats16([[i16; 8]; 16]);
    static LS16: Splats16 = {
        let mut out = [[0i16; 8]; 16];
        let mut n = 0;
        while n < 16 {
            out[n] = [2 * n as i16 + 1; 8];
            n += 1;
        }
        Splats16(out)
    };

    /// The `LS16` row of scale nibble `nib16 / 16`.
    ///
    /// # Safety
    /// `nib16 < 256`, a multiple of 16.
    #[inline(always)]
    pub(in crate::quant) unsafe fn ls16(nib16: usize) -> v128 {
        v128_load((LS16.0.as_ptr() as *const u8).add(nib16) as *const v128)
    }

    /// Constant vectors, made once per row; `black_box` keeps LLVM from turning the swizzles
    /// into shuffles (whose masks V8 rebuilds from immediates each time).
    pub(in crate::quant) struct Consts {
        /// Sign bytes 0 and 1 of a [`Signs`] vector into 8 lanes each.
        spread01: v128,
        /// Lane j tests bit j % 8.
        bits: v128,
        /// 0x80 at the odd 4-bit numbers: the parity of a nibble, in bit 7.
        parity: v128,
    }

    impl Consts {
        #[inline(always)]
        pub(in crate::quant) fn new() -> Consts {
            const PARITY: [u8; 16] = {
                let mut out = [0u8; 16];
                let mut n = 0;
                while n < 16 {
                    out[n] = if (n as u32).count_ones() % 2 == 1 { 0x80 } else { 0 };
                    n += 1;
                }
                out
            };
            Consts {
                spread01: black_box(u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)),
                bits: black_box(u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128)),
                // SAFETY: v128 is 16 plain bytes.
                parity: black_box(unsafe { core::mem::transmute::<[u8; 16], v128>(PARITY) }),
            }
        }
    }

    /// The 32 sign bytes of a block (byte 4b + l: group l of sub-block b; bit j set = weight j
    /// negative), 16 in `cur` (the next four sub-blocks, current first) and 16 in `next`.
    pub(in crate::quant) struct Signs {
        pub(in crate::quant) cur: v128,
        pub(in crate::quant) next: v128,
    }

    impl Signs {
        /// The byte masks of the current sub-block's groups 0, 1 and 2, 3; then moves on to the
        /// next sub-block (the 32 bytes rotate by 4).
        #[inline(always)]
        pub(in crate::quant) fn masks(&mut self, k: &Consts) -> (v128, v128) {
            let m01 = i8x16_eq(v128_and(i8x16_relaxed_swizzle(self.cur, k.spread01), k.bits), k.bits);
            // Bytes 2, 3 of each u32 lane moved down to 0, 1: `spread01` then picks them.
            let m23 = i8x16_eq(v128_and(i8x16_relaxed_swizzle(u32x4_shr(self.cur, 16), k.spread01), k.bits), k.bits);
            let (c, n) = (self.cur, self.next);
            self.cur = i8x16_shuffle::<4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19>(c, n);
            self.next = i8x16_shuffle::<4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19>(n, c);
            (m01, m23)
        }
    }

    /// `ksigns_iq2xs[i] = i | parity(i) << 7` for sixteen 7-bit indices `i` (byte lanes).
    #[inline(always)]
    pub(in crate::quant) fn ksigns(i: v128, k: &Consts) -> v128 {
        // The parity of i is that of its two nibbles xor-ed (bits leaking in from the next byte
        // land in bits 4..7 and are masked off).
        let x = v128_and(v128_xor(i, u16x8_shr(i, 4)), u8x16_splat(15));
        v128_or(i, i8x16_relaxed_swizzle(k.parity, x))
    }

    /// `d_w · d_a` as an f32x4 splat: the fp16 at `p` (`quant::simd::f16_lanes`) times the f32 at
    /// `da`.
    ///
    /// # Safety
    /// `p..p+2` and `da..da+4` readable.
    #[inline(always)]
    pub(in crate::quant) unsafe fn d_splat(p: *const u8, da: *const f32) -> v128 {
        let d = crate::quant::simd::f16_lanes(v128_load16_splat(p as *const u16));
        f32x4_mul(d, v128_load32_splat(da as *const u32))
    }

    /// The ksigns sign bytes of four u32 words `w` holding four 7-bit indices each (bits 7l..7l+6
    /// of lane n → byte 4n + l; IQ2_XXS, IQ3_XXS): the fields are moved to bytes with shifts and
    /// masks (first pairs to u16 halves, then to bytes), then [`ksigns`].
    #[inline(always)]
    pub(in crate::quant) fn ksigns_of_words(w: v128, k: &Consts) -> v128 {
        let w = v128_or(v128_and(w, u32x4_splat(0x3fff)), v128_and(i32x4_shl(w, 2), u32x4_splat(0x3fff_0000)));
        let w = v128_or(v128_and(w, u16x8_splat(0x7f)), v128_and(i16x8_shl(w, 1), u16x8_splat(0x7f00)));
        ksigns(w, k)
    }

    /// The `LS16` offsets of a block's eight scale bytes `sc[b]` (IQ2_XS, IQ2_S) stored at `out`:
    /// `out[2b]` = 16 · low nibble (half 0 of sub-block b), `out[2b + 1]` = 16 · high nibble.
    ///
    /// # Safety
    /// `sc..sc+8` readable, `out..out+16` writable.
    #[inline(always)]
    unsafe fn scale_offsets(sc: *const u8, out: *mut u16) {
        const Z: u8 = 0x80; // relaxed swizzle: an index ≥ 128 gives 0 on every platform
        // black_box: LLVM would make the swizzles shuffles and the multiply per-lane shifts.
        let spread = black_box([
            u8x16(0, Z, 0, Z, 1, Z, 1, Z, 2, Z, 2, Z, 3, Z, 3, Z),
            u8x16(4, Z, 4, Z, 5, Z, 5, Z, 6, Z, 6, Z, 7, Z, 7, Z),
        ]);
        let mul = black_box(u16x8(16, 1, 16, 1, 16, 1, 16, 1));
        let v = v128_load64_zero(sc as *const u64);
        for (h, &sp) in spread.iter().enumerate() {
            let x = i16x8_mul(i8x16_relaxed_swizzle(v, sp), mul);
            v128_store(out.add(8 * h) as *mut v128, v128_and(x, u16x8_splat(0xf0)));
        }
    }

    /// The u64 grid rows `i0`, `i1` of `grid` as the low and high half of one v128.
    ///
    /// # Safety
    /// Both indices inside the table.
    #[inline(always)]
    unsafe fn rows2(grid: *const u64, i0: usize, i1: usize) -> v128 {
        v128_load64_lane::<1>(v128_load64_zero(grid.add(i0)), grid.add(i1))
    }

    /// 16 weights: i16x8 sums of pairs of `sign · mag · a`, `mask` lane j = 0xff if weight j is
    /// negative (see the module docs).
    ///
    /// # Safety
    /// `a..a+16` readable.
    #[inline(always)]
    pub(in crate::quant) unsafe fn dot16(mag: v128, mask: v128, a: *const i8) -> v128 {
        let a = v128_load(a as *const v128);
        // The mask lanes are all-ones or all-zeros, so the relaxed select is deterministic
        // (`pblendvb` on x64). Written as `(a ^ m) − m`, LLVM knows `m` is a mask and emits a
        // negation and a three-instruction bit select instead.
        i16x8_relaxed_dot_i8x16_i7x16(i8x16_relaxed_laneselect(i8x16_neg(a), a, mask), mag)
    }

    /// IQ2_XXS's sign bytes: the eight u32 `w` (bits 7l..7l+6: sign index of group l; two per
    /// 16-byte load, u32 lanes 1 and 3) through [`ksigns_of_words`].
    ///
    /// # Safety
    /// `blk` is a whole IQ2_XXS block.
    #[inline(always)]
    unsafe fn signs_xxs(blk: *const u8, k: &Consts) -> Signs {
        let w = |h: usize| {
            let v0 = v128_load(blk.add(2 + 32 * h) as *const v128);
            let v1 = v128_load(blk.add(18 + 32 * h) as *const v128);
            i32x4_shuffle::<1, 3, 5, 7>(v0, v1)
        };
        Signs { cur: ksigns_of_words(w(0), k), next: ksigns_of_words(w(1), k) }
    }

    /// IQ2_XS's sign bytes: the sign indices (bits 9..15 of the 32 u16 words) narrowed to bytes,
    /// then [`ksigns`].
    ///
    /// # Safety
    /// `blk` is a whole IQ2_XS block.
    #[inline(always)]
    unsafe fn signs_xs(blk: *const u8, k: &Consts) -> Signs {
        let signs = |h: usize| {
            let w0 = v128_load(blk.add(2 + 32 * h) as *const v128);
            let w1 = v128_load(blk.add(18 + 32 * h) as *const v128);
            ksigns(u8x16_narrow_i16x8(u16x8_shr(w0, 9), u16x8_shr(w1, 9)), k)
        };
        Signs { cur: signs(0), next: signs(1) }
    }

    /// IQ2_XXS's grid rows of groups 0, 1 and 2, 3 of the sub-block whose 4 index bytes are at `q`.
    ///
    /// # Safety
    /// `q..q+4` readable.
    #[inline(always)]
    unsafe fn grid_xxs(q: *const u8) -> (v128, v128) {
        let grid = IQ2XXS_GRID.as_ptr();
        (rows2(grid, *q as usize, *q.add(1) as usize), rows2(grid, *q.add(2) as usize, *q.add(3) as usize))
    }

    /// IQ2_XS's grid rows of groups 0, 1 and 2, 3 of the sub-block whose four u16 words are at `q`
    /// (9-bit indices).
    ///
    /// # Safety
    /// `q..q+2` readable.
    #[inline(always)]
    unsafe fn grid_xs(q: *const u32) -> (v128, v128) {
        let grid = IQ2XS_GRID.as_ptr();
        let (w01, w23) = (q.read_unaligned() as usize, q.add(1).read_unaligned() as usize);
        (rows2(grid, w01 & 511, (w01 >> 16) & 511), rows2(grid, w23 & 511, (w23 >> 16) & 511))
    }

    /// The loop shared by the three types. Per block: `block` gives its [`Signs`]; per sub-block
    /// `sub(blk, b)` gives the grid rows of groups 0, 1 and 2, 3 and the `ls` rows of the two
    /// 16-weight halves; two [`dot16`], each scaled by `i32x4.dot_i16x8` with its `ls` row (with
    /// `SHARED`, IQ2_XXS: one scale per sub-block, the i16x8 are added first — |4 · 43 · 127| <
    /// 2^15 — and scaled once). Per block `d_w · d_a ·` the integer sum (f32x4), times 1/8 at the
    /// end.
    ///
    /// # Safety
    /// simd128 + relaxed-simd; `row` is `nb` whole blocks of `L`, `act` has `256*nb` values and
    /// `8*nb` scales; `signs` and `sub` read only inside the block.
    #[inline(always)]
    unsafe fn vec_dot<L: Iq2Layout, const SHARED: bool>(
        row: &[u8],
        act: Q8<'_>,
        nb: usize,
        k: &Consts,
        block: impl Fn(*const u8) -> Signs,
        sub: impl Fn(*const u8, usize) -> (v128, v128, v128, v128),
    ) -> f32 {
        let mut acc = f32x4_splat(0.0);
        for i in 0..nb {
            let blk = row.as_ptr().add(i * L::BYTES);
            let a = act.qs.as_ptr().add(i * QK_K);
            let mut sg = block(blk);
            let mut isum = i32x4_splat(0);
            for b in 0..black_box(8) {
                let (m01, m23) = sg.masks(k);
                let (g01, g23, ls0, ls1) = sub(blk, b);
                let p01 = dot16(g01, m01, a.add(32 * b));
                let p23 = dot16(g23, m23, a.add(32 * b + 16));
                let sum = if SHARED {
                    i32x4_dot_i16x8(i16x8_add(p01, p23), ls0)
                } else {
                    i32x4_add(i32x4_dot_i16x8(p01, ls0), i32x4_dot_i16x8(p23, ls1))
                };
                isum = i32x4_add(isum, sum);
            }
            acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), d_splat(blk, act.d.as_ptr().add(8 * i))));
        }
        0.125 * hsum_f32(acc)
    }

    /// IQ2_XXS · Q8_K, relaxed SIMD. Signs: the eight u32 `w` (two per 16-byte load) through
    /// [`ksigns_of_words`].
    ///
    /// # Safety
    /// simd128 + relaxed-simd; `row` is `nb` whole blocks and `act` has `256*nb` values and `8*nb`
    /// scales (checked by `fast_entry!`).
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub(super) unsafe fn vec_dot_iq2_xxs_simd(row: &[u8], act: Q8<'_>, nb: usize) -> f32 {
        let k = Consts::new();
        // SAFETY: reads stay inside the block; grid indices are bytes (256 rows).
        vec_dot::<Iq2Xxs, true>(row, act, nb, &k, |blk| signs_xxs(blk, &k), |blk, b| {
            // The 4 grid-index bytes and u32 w of sub-block b (`b & 7`: see the module docs).
            let q = blk.add(2 + 8 * (b & 7));
            let (g01, g23) = grid_xxs(q);
            let ls = ls16((*q.add(7) & 0xf0) as usize);
            (g01, g23, ls, ls)
        })
    }

    /// IQ2_XS · Q8_K, relaxed SIMD. Signs: the sign indices (bits 9..15 of the 32 u16 words)
    /// narrowed to bytes, then [`ksigns`].
    ///
    /// # Safety
    /// simd128 + relaxed-simd; `row` is `nb` whole blocks and `act` has `256*nb` values and `8*nb`
    /// scales (checked by `fast_entry!`).
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub(super) unsafe fn vec_dot_iq2_xs_simd(row: &[u8], act: Q8<'_>, nb: usize) -> f32 {
        let k = Consts::new();
        let mut ls = [0u16; 16];
        let ls = ls.as_mut_ptr();
        // SAFETY: reads stay inside the block; grid indices have 9 bits (512 rows), ls offsets
        // are 16 · a nibble; `ls` holds 16 entries.
        let block = |blk: *const u8| {
            scale_offsets(blk.add(66), ls);
            signs_xs(blk, &k)
        };
        vec_dot::<Iq2Xs, false>(row, act, nb, &k, block, |blk, b| {
            // The four u16 words of sub-block b (`b & 7`: see the module docs).
            let (g01, g23) = grid_xs(blk.add(2 + 8 * (b & 7)) as *const u32);
            let l = ls.add(2 * (b & 7));
            (g01, g23, ls16(*l as usize), ls16(*l.add(1) as usize))
        })
    }

    /// A row → int8 GEMM form ([`super::decode8_ref`]), the three types' shared loop: per block
    /// `block` gives its [`Signs`]; per sub-block `sub(blk, b)` the grid rows of groups 0, 1 and
    /// 2, 3 and the scale nibbles of its two halves. The magnitudes are negated under the sign
    /// masks, plus 43; the block's 16 vectors go to pair order.
    ///
    /// # Safety
    /// simd128 + relaxed-simd; `block` and `sub` read only inside the block.
    #[inline(always)]
    unsafe fn decode8<L: Iq2Layout>(
        row: &[u8],
        out: &mut super::Decoded8,
        k: &Consts,
        block: impl Fn(*const u8) -> Signs,
        sub: impl Fn(*const u8, usize) -> (v128, v128, i16, i16),
    ) {
        let nb = out.check(L::TY, row);
        let off = i8x16_splat(super::OFF8 as i8);
        let mut v = [i8x16_splat(0); 16];
        for i in 0..nb {
            // SAFETY: block i is row[BYTES·i..][..BYTES]; its outputs are u[256i..],
            // sc/mn[16i..16i+16].
            let blk = row.as_ptr().add(i * L::BYTES);
            let mut sg = block(blk);
            for b in 0..8 {
                let (m01, m23) = sg.masks(k);
                let (g01, g23, nib0, nib1) = sub(blk, b);
                v[2 * b] = i8x16_add(i8x16_relaxed_laneselect(i8x16_neg(g01), g01, m01), off);
                v[2 * b + 1] = i8x16_add(i8x16_relaxed_laneselect(i8x16_neg(g23), g23, m23), off);
                let (ls0, ls1) = (2 * nib0 + 1, 2 * nib1 + 1);
                out.put_offset_scale(16 * i + 2 * b, ls0, super::OFF8 as i16);
                out.put_offset_scale(16 * i + 2 * b + 1, ls1, super::OFF8 as i16);
            }
            out.put_offset_block(i, &v, crate::quant::f16_at(core::slice::from_raw_parts(blk, L::BYTES), 0) * 0.125);
        }
    }

    /// IQ2_XXS row → int8 GEMM form: [`signs_xxs`], [`grid_xxs`] as in the dot product.
    ///
    /// # Safety
    /// simd128 + relaxed-simd.
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub(super) unsafe fn decode8_iq2_xxs_simd(row: &[u8], out: &mut super::Decoded8) {
        let k = Consts::new();
        // SAFETY: reads stay inside the block; grid indices are bytes (256 rows).
        decode8::<Iq2Xxs>(row, out, &k, |blk| signs_xxs(blk, &k), |blk, b| {
            let q = blk.add(2 + 8 * b);
            let (g01, g23) = grid_xxs(q);
            let nib = (*q.add(7) >> 4) as i16;
            (g01, g23, nib, nib)
        })
    }

    /// IQ2_XS row → int8 GEMM form: [`signs_xs`], [`grid_xs`] as in the dot product.
    ///
    /// # Safety
    /// simd128 + relaxed-simd.
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub(super) unsafe fn decode8_iq2_xs_simd(row: &[u8], out: &mut super::Decoded8) {
        let k = Consts::new();
        // SAFETY: reads stay inside the block; grid indices have 9 bits (512 rows).
        decode8::<Iq2Xs>(row, out, &k, |blk| signs_xs(blk, &k), |blk, b| {
            let (g01, g23) = grid_xs(blk.add(2 + 8 * b) as *const u32);
            let sc = *blk.add(66 + b) as i16;
            (g01, g23, sc & 15, sc >> 4)
        })
    }

    /// IQ2_S row → int8 GEMM form: the stored sign bytes; grid indices `qs | qh bits << 8` read
    /// per group.
    ///
    /// # Safety
    /// simd128 + relaxed-simd.
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub(super) unsafe fn decode8_iq2_s_simd(row: &[u8], out: &mut super::Decoded8) {
        let k = Consts::new();
        let grid = IQ2S_GRID.as_ptr();
        // SAFETY: reads stay inside the block; grid indices have 10 bits (1024 rows).
        let block = |blk: *const u8| Signs { cur: v128_load(blk.add(34) as *const v128), next: v128_load(blk.add(50) as *const v128) };
        decode8::<Iq2S>(row, out, &k, block, |blk, b| {
            let qh = *blk.add(66 + b) as usize;
            let q = blk.add(2 + 4 * b);
            let ix = |l: usize| *q.add(l) as usize | ((qh >> (2 * l)) & 3) << 8;
            let g01 = rows2(grid, ix(0), ix(1));
            let g23 = rows2(grid, ix(2), ix(3));
            let sc = *blk.add(74 + b) as i16;
            (g01, g23, sc & 15, sc >> 4)
        })
    }

    /// IQ2_S · Q8_K, relaxed SIMD. Signs: the stored sign bytes. Grid rows: the 10-bit indices
    /// `qs[4b+l] | ((qh[b] >> 2l) & 3) << 8` of the whole block computed eight at a time in SIMD
    /// (as in `iq2s_offsets`), stored as u16 and read back per sub-block.
    ///
    /// # Safety
    /// simd128 + relaxed-simd; `row` is `nb` whole blocks and `act` has `256*nb` values and `8*nb`
    /// scales (checked by `fast_entry!`).
    #[target_feature(enable = "simd128,relaxed-simd")]
    pub(super) unsafe fn vec_dot_iq2_s_simd(row: &[u8], act: Q8<'_>, nb: usize) -> f32 {
        const Z: u8 = 0x80; // relaxed swizzle: an index ≥ 128 gives 0 on every platform
        let k = Consts::new();
        let qh_spread = |b: u8| u8x16(b, Z, b, Z, b, Z, b, Z, b + 1, Z, b + 1, Z, b + 1, Z, b + 1, Z);
        // qh[b] into the u16 lanes of sub-block b's groups (pairs of sub-blocks), then bits
        // 2l..2l+1 to bits 8..9 (black_box: see `QH_MUL`).
        let qh_spread = black_box([qh_spread(0), qh_spread(2), qh_spread(4), qh_spread(6)]);
        let qh_mul = black_box(u16x8(256, 64, 16, 4, 256, 64, 16, 4));
        let grid = IQ2S_GRID.as_ptr();
        let mut idx = [0u16; 32];
        let idx_ptr = idx.as_mut_ptr();
        // SAFETY: reads stay inside the block; grid indices have 10 bits (1024 rows), ls offsets
        // are 16 · a nibble; `idx` is written before the sub-block loop reads it.
        let block = |blk: *const u8| {
            let qh = v128_load64_zero(blk.add(66) as *const u64);
            for h in 0..2 {
                let lo = v128_load(blk.add(2 + 16 * h) as *const v128);
                for j in 0..2 {
                    // Sub-blocks 4h+2j, 4h+2j+1 (8 groups) in u16 lanes.
                    let lo = if j == 0 { u16x8_extend_low_u8x16(lo) } else { u16x8_extend_high_u8x16(lo) };
                    let hi = i16x8_mul(i8x16_relaxed_swizzle(qh, qh_spread[2 * h + j]), qh_mul);
                    let v = v128_or(lo, v128_and(hi, u16x8_splat(0x300)));
                    v128_store(idx_ptr.add(16 * h + 8 * j) as *mut v128, v);
                }
            }
            Signs { cur: v128_load(blk.add(34) as *const v128), next: v128_load(blk.add(50) as *const v128) }
        };
        vec_dot::<Iq2S, false>(row, act, nb, &k, block, |blk, b| {
            // The four grid indices of sub-block b (`b & 7`: see the module docs).
            let g = idx_ptr.add(4 * (b & 7)) as *const u16;
            let g01 = rows2(grid, *g as usize, *g.add(1) as usize);
            let g23 = rows2(grid, *g.add(2) as usize, *g.add(3) as usize);
            // (Here the scale bytes read directly are faster than offsets made per block in
            // SIMD as for IQ2_XS, measured: ~6%.)
            let sc = *blk.add(74 + b) as usize;
            (g01, g23, ls16((sc & 15) << 4), ls16(sc & 0xf0))
        })
    }
}
