//! IQ1_S and IQ1_M: ~1.6–1.75-bit "grid" quants. Groups of 8 weights share one entry of
//! `IQ1S_GRID` (2048 u64s of eight signed bytes ∈ {−1, 0, +1}); every weight also gets a shift
//! `delta = ±1/8` (per 32-weight sub-block for IQ1_S, per 8-weight group for IQ1_M). Both are
//! multiplied with Q8_K activations (spec §5.2, §5.4).
//!
//! Integer form used by the fast paths: `w = dl * (g + delta) = (dl / 8) * (8g ± 1)`, so a weight
//! is an exact int8 `8g ± 1 ∈ {−9, −7, −1, 1, 7, 9}` times `dl / 8`. [`GRID8D`] (derived at compile
//! time from `IQ1S_GRID`) holds these int8 weights for every grid entry and delta sign, so the
//! row decoders copy them (times the sub-block's `2s + 1`) and the SIMD128 kernels gather two
//! entries (16 finished weights) per v128 — no per-element work. The references follow
//! llama.cpp: grid sums and delta sums kept apart, `+ 0.125 * delta_sum` at the end.
//!
//! SIMD128 kernel shape (both types): per 16 weights two 8-byte gathers, `i16x8.extmul_{low,high}`
//! with the activations (|w·a| ≤ 9·127, so the sum of the two products fits i16) and one
//! `i32x4.dot_i16x8` with the splatted sub-block scale, accumulated in an i32x4 per super-block.
//! Indices are computed with scalar ops: on V8 that beats SIMD index math + `extract_lane` here.
//!
//! Relaxed SIMD kernels (the `+relaxed-simd` build): `i16x8.relaxed_dot_i8x16_i7x16_s` needs a
//! 7-bit unsigned weight operand, so they gather from `GRID8D_U` = `GRID8D + 9` (bytes in
//! 0..=18) and take `9·Σa` (IQ1_S: also the delta correction) back off from the `bsums`; one
//! relaxed dot per 16 weights replaces the two `extmul`s and their add. With that little vector
//! work left the balance changes: the 32 table offsets of a super-block are now cheaper in SIMD
//! (`simd::group_offsets`, then one `pextrw` each) than in scalar code, and a `fence` per
//! sub-block (V8 otherwise loads all 16 activation vectors of a super-block up front and spills
//! them) was worth +17 % on IQ1_S. Measured (GB/s of weights, 4096×4096 matvec, one thread,
//! Node 20 on x64, fastest call): IQ1_S 1.59 → 2.50 (relaxed dot alone, scalar indices: 1.86),
//! IQ1_M 1.64 → 2.34 (relaxed dot alone: 2.20). A SIMD fp16 conversion for `d` (no branches) and
//! two `load64_zero` + unpack instead of `load64_lane` measured no better.

use super::tables::IQ1S_GRID;
use super::gemm::Decoded;
use super::gemm8::{pair_pos, Decoded8, Kernels8};
use super::{f16_at, sanitize_f16, GgmlType, QuantKernels, Q8, QK_K};

pub static KERNELS: &[QuantKernels] = &[
    QuantKernels {
        ty: GgmlType::IQ1_S,
        dequantize: iq1_s::dequantize,
        vec_dot_ref: iq1_s::vec_dot_ref,
        vec_dot: iq1_s::vec_dot,
        decode_ref: iq1_s::decode_ref,
        decode: iq1_s::decode,
        sanitize: iq1_s::sanitize,
    },
    QuantKernels {
        ty: GgmlType::IQ1_M,
        dequantize: iq1_m::dequantize,
        vec_dot_ref: iq1_m::vec_dot_ref,
        vec_dot: iq1_m::vec_dot,
        decode_ref: iq1_m::decode_ref,
        decode: iq1_m::decode,
        sanitize: iq1_m::sanitize,
    },
];

/// `IQ1S_DELTA` = `IQ1M_DELTA` of ggml.
const DELTA: f32 = 0.125;

/// Bit of a [`GRID8D`] index that selects the negative delta.
const NEG: usize = 1 << 11;

/// The exact int8 weights `8g ± 1` of every grid entry and delta sign (32 KiB): entry
/// `idx | neg << 11` holds `8 * IQ1S_GRID[idx] + (neg ? −1 : +1)` bytewise.
static GRID8D: [u64; 4096] = {
    let mut t = [0u64; 4096];
    let mut i = 0;
    while i < 4096 {
        let g = IQ1S_GRID[i & 2047];
        let delta: i8 = if i & NEG != 0 { -1 } else { 1 };
        let mut j = 0;
        while j < 8 {
            let byte = ((g >> (8 * j)) as u8 as i8).wrapping_mul(8).wrapping_add(delta) as u8;
            t[i] |= (byte as u64) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

/// [`GRID8D`] plus 9 bytewise: the weights `8g ± 1` as `8g ± 1 + 9 ∈ [0, 18]` (32 KiB), the 7-bit
/// unsigned operand that `i16x8.relaxed_dot_i8x16_i7x16_s` needs; the kernels subtract
/// `9·Σa` again from the activation `bsums`.
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
static GRID8D_U: [u64; 4096] = {
    let mut t = [0u64; 4096];
    let mut i = 0;
    while i < 4096 {
        let mut j = 0;
        while j < 8 {
            let byte = ((GRID8D[i] >> (8 * j)) as u8 as i8 + 9) as u8;
            t[i] |= (byte as u64) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

/// Grid value (−1, 0 or +1) of element j (0..8) of grid entry `idx`.
#[inline(always)]
fn grid(idx: usize, j: usize) -> i32 {
    (IQ1S_GRID[idx] >> (8 * j)) as u8 as i8 as i32
}

/// Writes the 8 weights `ls·(8g ± 1)` of `GRID8D[e]` to `q[..8]`.
#[inline(always)]
fn put8(q: &mut [i16], ls: i32, e: usize) {
    for (j, v) in GRID8D[e].to_le_bytes().iter().enumerate() {
        q[j] = (ls * *v as i8 as i32) as i16;
    }
}

/// Offset of the int8 GEMM form: codes `8g ± 1 + 9 ∈ 0..=18` (as [`GRID8D_U`]).
const OFF8: i16 = 9;

/// Writes the 8 codes `8g ± 1 + 9` of `GRID8D[e]` for elements `i0..i0+8` of a row in pair order.
#[inline(always)]
fn put8_u(u: &mut [u8], i0: usize, e: usize) {
    for (j, v) in GRID8D[e].to_le_bytes().iter().enumerate() {
        u[pair_pos(i0 + j)] = (*v as i8 as i16 + OFF8) as u8;
    }
}

/// The int8 GEMM entry of either type: codes up to 18 (`ksum` 4), the offset back through the
/// min term (`mn = −9·sc`, `m = d`), `d = d_w / 8`; per 16 elements `sc = 2s + 1`. Its decoding
/// is two `GRID8D_U` loads per 16 weights, cheaper than the i16 form's, so it wins from the
/// fewest tokens on. Chromium 156, 4096×4096, G MAC/s, i16 GEMM → int8, two alternating rounds,
/// T = 4 / 16 / 32: IQ1_S 17.7–18.6 / 30.2–30.9 / 31.8–34.0 → 19.7 / 34.4–34.9 / 38.4–39.5;
/// IQ1_M 16.0–16.8 / 27.4–29.8 / 33.1–33.8 → 17.2 / 32.7–33.1 / 36.8–38.1.
const fn kernels8(ty: GgmlType, decode_ref: super::gemm8::DecodeRow8, decode: super::gemm8::DecodeRow8) -> Kernels8 {
    Kernels8 { ty, umax: 18, faster: [false, true], min_tokens: 0, offset: Some(OFF8 as u8), decode_ref, decode, scaled: None, scales32: false }
}

/// Sets the scale and min of 16-element group `g` of a row's int8 form.
#[inline(always)]
fn put_scale8(out: &mut Decoded8, g: usize, ls: i16) {
    out.sc[g] = ls;
    out.mn[g] = -OFF8 * ls;
}

#[inline(always)]
fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Checks that a row of `nb` blocks of `bytes` bytes and its activation row belong together; returns `nb`.
#[inline(always)]
fn check_lengths(row: &[u8], bytes: usize, act: &Q8<'_>) -> usize {
    assert!(row.len() % bytes == 0, "row of {} bytes is not whole blocks of {bytes}", row.len());
    let nb = row.len() / bytes;
    assert!(act.qs.len() == nb * QK_K, "activation row has {} elements, weights {}", act.qs.len(), nb * QK_K);
    assert!(act.d.len() >= nb * 8 && act.bsums.len() >= nb * 16);
    nb
}

/// The two `GRID8D_U` weight vectors (groups 0, 1 and 2, 3) of sub-block `$b` (a literal)
/// from the offsets of `simd::group_offsets`; the lane numbers must be constants.
/// The eight sub-blocks of a super-block, `$sub!(0)` … `$sub!(7)` (a local macro of the kernel),
/// with a `fence` on the accumulator `$acc` between them: without it V8 loads all sixteen
/// activation vectors of the block up front and spills them (measured +17 % on IQ1_S with it).
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
macro_rules! fenced_sub_blocks {
    ($sub:ident, $acc:ident) => {
        $sub!(0);
        $acc = fence($acc);
        $sub!(1);
        $acc = fence($acc);
        $sub!(2);
        $acc = fence($acc);
        $sub!(3);
        $acc = fence($acc);
        $sub!(4);
        $acc = fence($acc);
        $sub!(5);
        $acc = fence($acc);
        $sub!(6);
        $acc = fence($acc);
        $sub!(7);
    };
}

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
macro_rules! sub_block_weights {
    ($off:expr, $b:literal) => {{
        let o = $off[$b / 2];
        (
            weights16_at(
                u16x8_extract_lane::<{ 4 * ($b % 2) }>(o) as usize,
                u16x8_extract_lane::<{ 4 * ($b % 2) + 1 }>(o) as usize,
            ),
            weights16_at(
                u16x8_extract_lane::<{ 4 * ($b % 2) + 2 }>(o) as usize,
                u16x8_extract_lane::<{ 4 * ($b % 2) + 3 }>(o) as usize,
            ),
        )
    }};
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    use core::arch::wasm32::*;

    /// Sixteen int8 weights from `GRID8D` entries `e0` (lanes 0..8) and `e1` (lanes 8..16).
    ///
    /// # Safety
    /// `e0, e1 < 4096`.
    #[inline(always)]
    pub unsafe fn weights16(e0: usize, e1: usize) -> v128 {
        let g = super::GRID8D.as_ptr();
        v128_load64_lane::<1>(v128_load64_zero(g.add(e0)), g.add(e1))
    }

    /// Sixteen `GRID8D_U` weights (`8g ± 1 + 9`, 7-bit) from the entries at byte offsets `o0`
    /// (lanes 0..8) and `o1` (lanes 8..16).
    ///
    /// # Safety
    /// `o0, o1 ≤ 8 · 4095`, multiples of 8.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn weights16_at(o0: usize, o1: usize) -> v128 {
        let g = super::GRID8D_U.as_ptr() as *const u8;
        v128_load64_lane::<1>(v128_load64_zero(g.add(o0) as *const u64), g.add(o1) as *const u64)
    }

    /// Byte offsets into `GRID8D_U` of the 32 groups of a super-block: lane 4b + l of
    /// `off[b / 2]` for group l of sub-block b is `8·qs[4b + l] | (h·m_l & mask)`, where the
    /// high index bits come from a 16-bit word `h` of the group's sub-block, moved into place
    /// by a multiply with `mul` (lane pattern `[m_0, m_1, m_2, m_3]` twice) and masked.
    ///
    /// `hq[k]` holds two words `[u_b, v_b]` per sub-block b = 4k..4k+4 (i32 lane b − 4k); they are
    /// spread to lanes 4b..4b+4 as `[u_b, v_b, u_b, v_b]` (one unpack per vector).
    ///
    /// Computing the indices with SIMD and taking them out with `i16x8.extract_lane_u`
    /// (`pextrw`, one instruction) is cheaper than the scalar index arithmetic once the
    /// relaxed dot has removed most of the vector work. `mask` should be opaque to LLVM
    /// (`black_box`): otherwise it knows the zero bits of the offsets and adds a scalar `and`
    /// after every extract.
    ///
    /// # Safety
    /// `qs..qs+32` must be readable. The offsets are at most `0x7f8 | mask`: the caller picks
    /// `mask` so that this stays inside `GRID8D_U` (< 0x8000) when it uses them.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn group_offsets(qs: *const u8, hq: [v128; 2], mul: v128, mask: v128) -> [v128; 4] {
        let (q0, q1) = (v128_load(qs as *const v128), v128_load(qs.add(16) as *const v128));
        let q = [
            u16x8_extend_low_u8x16(q0),
            u16x8_extend_high_u8x16(q0),
            u16x8_extend_low_u8x16(q1),
            u16x8_extend_high_u8x16(q1),
        ];
        let h = [
            i32x4_shuffle::<0, 0, 1, 1>(hq[0], hq[0]),
            i32x4_shuffle::<2, 2, 3, 3>(hq[0], hq[0]),
            i32x4_shuffle::<0, 0, 1, 1>(hq[1], hq[1]),
            i32x4_shuffle::<2, 2, 3, 3>(hq[1], hq[1]),
        ];
        core::array::from_fn(|v| v128_or(u16x8_shl(q[v], 3), v128_and(i16x8_mul(h[v], mul), mask)))
    }

    /// `Σ (w + 9)·a` over 16 pairs as i16x8 pair sums, one `i16x8.relaxed_dot_i8x16_i7x16_s`:
    /// `wu` is 7-bit (≤ 18), so each lane is at most 2·18·127 = 4572 in magnitude.
    ///
    /// # Safety
    /// `a..a+16` must be readable.
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub unsafe fn dot16_u(wu: v128, a: *const i8) -> v128 {
        i16x8_relaxed_dot_i8x16_i7x16(v128_load(a as *const v128), wu)
    }

    /// `ls · Σ w·a` over 16 int8 pairs (|w| ≤ 9, |a| ≤ 127) as i32x4 partial sums; `ls` is an i16
    /// splat. The two i16 products per lane cannot overflow.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[inline(always)]
    pub fn dot16_scaled(w: v128, a: v128, ls: v128) -> v128 {
        let p = i16x8_add(i16x8_extmul_low_i8x16(w, a), i16x8_extmul_high_i8x16(w, a));
        i32x4_dot_i16x8(p, ls)
    }
}

// =============================================================================================
/// IQ1_S — 50 bytes per 256 weights (1.5625 bpw).
///
/// | offset | size | field                                                                  |
/// |--------|------|------------------------------------------------------------------------|
/// | 0      | 2    | `d`: fp16 super-block scale                                            |
/// | 2      | 32   | low 8 bits of the grid indices, 4 per sub-block b (bytes `4b..4b+4`)   |
/// | 34     | 16   | `qh[b]`: u16 per sub-block: bits `3l..3l+3` = index bits 8..10 of      |
/// |        |      | group l, bits 12..14 = scale `s`, bit 15 = delta sign (set ⇒ −)        |
///
/// Weight `32b + 8l + j` = `dl * (grid[j] + delta)` with `dl = d * (2s + 1)`,
/// grid = `IQ1S_GRID[qs[4b+l] | ((qh[b] >> 3l) & 7) << 8]`, `delta = ±0.125`.
pub mod iq1_s {
    use super::*;

    pub const BYTES: usize = 50;

    /// Grid index of group l (0..4) given the sub-block's low index bytes `qs` and `qh`.
    #[inline(always)]
    fn index(qs: &[u8], qh: u16, l: usize) -> usize {
        qs[l] as usize | (((qh >> (3 * l)) & 7) as usize) << 8
    }

    /// `2s + 1` of a sub-block.
    #[inline(always)]
    fn scale(qh: u16) -> i32 {
        2 * ((qh >> 12) & 7) as i32 + 1
    }

    pub fn sanitize(block: &mut [u8]) {
        sanitize_f16(block, 0);
    }

    pub fn dequantize(row: &[u8], out: &mut [f32]) {
        assert_eq!(row.len(), out.len() / QK_K * BYTES);
        for (blk, y) in row.chunks_exact(BYTES).zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_at(blk, 0);
            for (b, y) in y.chunks_exact_mut(32).enumerate() {
                let qh = u16_at(blk, 34 + 2 * b);
                let dl = d * scale(qh) as f32;
                let delta = if qh & 0x8000 != 0 { -DELTA } else { DELTA };
                for (l, y) in y.chunks_exact_mut(8).enumerate() {
                    let idx = index(&blk[2 + 4 * b..], qh, l);
                    for (j, y) in y.iter_mut().enumerate() {
                        *y = dl * (grid(idx, j) as f32 + delta);
                    }
                }
            }
        }
    }

    pub fn vec_dot_ref(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lengths(row, BYTES, &act);
        let mut sumf = 0.0f32;
        for i in 0..nb {
            let blk = &row[i * BYTES..(i + 1) * BYTES];
            let (mut sumi1, mut sumi2) = (0i32, 0i32);
            for b in 0..8 {
                let qh = u16_at(blk, 34 + 2 * b);
                let a = &act.qs[i * QK_K + 32 * b..i * QK_K + 32 * b + 32];
                let mut sumi = 0i32;
                for l in 0..4 {
                    let g = IQ1S_GRID[index(&blk[2 + 4 * b..], qh, l)].to_le_bytes();
                    for j in 0..8 {
                        sumi += g[j] as i8 as i32 * a[8 * l + j] as i32;
                    }
                }
                let ls = scale(qh);
                let bsum = act.bsums[16 * i + 2 * b] as i32 + act.bsums[16 * i + 2 * b + 1] as i32;
                sumi1 += sumi * ls;
                sumi2 += ls * if qh & 0x8000 != 0 { -bsum } else { bsum };
            }
            sumf += f16_at(blk, 0) * act.d[8 * i] * (sumi1 as f32 + DELTA * sumi2 as f32);
        }
        sumf
    }

    /// GEMM form: `q = (2s + 1)·(8g ± 1)`, `d = d_w / 8` (exact: the dequantiser's
    /// `dl·(g ± 1/8)` is the same exactly representable product).
    pub fn decode_ref(row: &[u8], out: &mut Decoded) {
        out.check(GgmlType::IQ1_S, row);
        for (i, blk) in row.chunks_exact(BYTES).enumerate() {
            for b in 0..8 {
                let qh = u16_at(blk, 34 + 2 * b);
                let neg = if qh & 0x8000 != 0 { NEG } else { 0 };
                for l in 0..4 {
                    put8(&mut out.q[QK_K * i + 32 * b + 8 * l..], scale(qh), index(&blk[2 + 4 * b..], qh, l) | neg);
                }
            }
            out.d[i] = f16_at(blk, 0) * DELTA;
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

    /// Int8 GEMM form ([`super::kernels8`]): exact as [`decode_ref`] (`d·(sc·u)` and `d·(−9·sc)`
    /// are exact products whose sum is the weight).
    pub fn decode8_ref(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(GgmlType::IQ1_S, row);
        for (i, blk) in row.chunks_exact(BYTES).take(nb).enumerate() {
            for b in 0..8 {
                let qh = u16_at(blk, 34 + 2 * b);
                let neg = if qh & 0x8000 != 0 { NEG } else { 0 };
                for l in 0..4 {
                    put8_u(&mut out.u, QK_K * i + 32 * b + 8 * l, index(&blk[2 + 4 * b..], qh, l) | neg);
                }
                for h in 0..2 {
                    put_scale8(out, 16 * i + 2 * b + h, scale(qh) as i16);
                }
            }
            let d = f16_at(blk, 0) * DELTA;
            out.d[i] = d;
            out.m[i] = d;
        }
    }

    pub const KERNELS8: Kernels8 = Kernels8 { scales32: true, ..super::kernels8(GgmlType::IQ1_S, decode8_ref, decode8) };

    fn decode8(row: &[u8], out: &mut Decoded8) {
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        {
            // SAFETY: relaxed-simd is enabled for this build; lengths are checked inside.
            return unsafe { simd::decode8(row, out) };
        }
        #[allow(unreachable_code)]
        decode8_ref(row, out)
    }

    pub fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            // SAFETY: simd128 is enabled for this build.
            return unsafe { simd::vec_dot(row, act) };
        }
        #[allow(unreachable_code)]
        vec_dot_ref(row, act)
    }

    /// The weights are gathered as `8g + 1` (the positive-delta half of `GRID8D`); sub-blocks with
    /// a negative delta get `−2·ls·Σa` from the activation `bsums` once per super-block.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    mod simd {
        use super::super::simd::weights16;
        #[cfg(not(target_feature = "relaxed-simd"))]
        use super::super::simd::dot16_scaled;
        #[cfg(target_feature = "relaxed-simd")]
        use super::super::simd::{dot16_u, group_offsets, weights16_at};
        #[cfg(target_feature = "relaxed-simd")]
        use crate::quant::legacy::simd::fence;
        #[cfg(target_feature = "relaxed-simd")]
        use core::hint::black_box;
        use super::super::{check_lengths, NEG};
        use super::{BYTES, DELTA};
        use crate::quant::gemm::Decoded;
        use crate::quant::simd::{hsum_f32, store_scaled16};
        use crate::quant::{f16_at, GgmlType, Q8, QK_K};
        use core::arch::wasm32::*;

        /// Row → GEMM form: per sub-block, the `GRID8D` rows of its delta sign (16 weights per
        /// gather) times `2s + 1`.
        ///
        /// # Safety
        /// Requires simd128.
        #[target_feature(enable = "simd128")]
        pub unsafe fn decode(row: &[u8], out: &mut Decoded) {
            out.check(GgmlType::IQ1_S, row);
            let q = out.q.as_mut_ptr();
            for (i, blk) in row.chunks_exact(BYTES).enumerate() {
                // SAFETY: reads stay in `blk`; GRID8D indices have 8 + 3 + 1 bits, < 4096;
                // `check` sized q for 256 weights per block.
                let p = blk.as_ptr();
                for b in 0..8 {
                    let h = (p.add(34 + 2 * b) as *const u16).read_unaligned() as usize;
                    let neg = if h & 0x8000 != 0 { NEG } else { 0 };
                    let qs = p.add(2 + 4 * b);
                    let (i0, i1) = (*qs as usize | (h << 8) & 0x700, *qs.add(1) as usize | (h << 5) & 0x700);
                    let (i2, i3) = (*qs.add(2) as usize | (h << 2) & 0x700, *qs.add(3) as usize | (h >> 1) & 0x700);
                    let ls = i16x8_splat(2 * ((h >> 12) & 7) as i16 + 1);
                    store_scaled16(q.add(QK_K * i + 32 * b), weights16(i0 | neg, i1 | neg), ls);
                    store_scaled16(q.add(QK_K * i + 32 * b + 16), weights16(i2 | neg, i3 | neg), ls);
                }
                out.d[i] = f16_at(blk, 0) * DELTA;
            }
        }

        /// Row → int8 GEMM form: per 16 weights two `GRID8D_U` rows (the codes `8g ± 1 + 9`).
        ///
        /// # Safety
        /// Requires simd128 and relaxed-simd.
        #[cfg(target_feature = "relaxed-simd")]
        #[target_feature(enable = "simd128,relaxed-simd")]
        pub unsafe fn decode8(row: &[u8], out: &mut crate::quant::gemm8::Decoded8) {
            let nb = out.check(GgmlType::IQ1_S, row);
            let mut v = [i8x16_splat(0); 16];
            for i in 0..nb {
                // SAFETY: block i is row[50i..50i+50]; GRID8D_U offsets are 8 · (8 + 3 + 1 bits),
                // < 8 · 4096; the outputs are u[256i..], sc/mn[16i..16i+16].
                let p = row.as_ptr().add(i * BYTES);
                for b in 0..8 {
                    let h = (p.add(34 + 2 * b) as *const u16).read_unaligned() as usize;
                    let neg = if h & 0x8000 != 0 { super::NEG } else { 0 };
                    let qs = p.add(2 + 4 * b);
                    let (i0, i1) = (*qs as usize | (h << 8) & 0x700, *qs.add(1) as usize | (h << 5) & 0x700);
                    let (i2, i3) = (*qs.add(2) as usize | (h << 2) & 0x700, *qs.add(3) as usize | (h >> 1) & 0x700);
                    v[2 * b] = weights16_at(8 * (i0 | neg), 8 * (i1 | neg));
                    v[2 * b + 1] = weights16_at(8 * (i2 | neg), 8 * (i3 | neg));
                    let ls = 2 * ((h >> 12) & 7) as i16 + 1;
                    for k in 0..2 {
                        out.put_offset_scale(16 * i + 2 * b + k, ls, super::super::OFF8);
                    }
                }
                out.put_offset_block(i, &v, f16_at(core::slice::from_raw_parts(p, BYTES), 0) * DELTA);
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
                // SAFETY (all pointer reads below): `blk` has BYTES bytes, the activation block 256
                // elements and 16 bsums (checked above); grid indices have 8 + 3 bits, < 2048.
                let p = blk.as_ptr();
                let a = act.qs.as_ptr().add(i * QK_K);
                let mut isum = i32x4_splat(0);
                for b in 0..8 {
                    let h = (p.add(34 + 2 * b) as *const u16).read_unaligned() as usize;
                    let q = p.add(2 + 4 * b);
                    let (i0, i1) = (*q as usize | (h << 8) & 0x700, *q.add(1) as usize | (h << 5) & 0x700);
                    let (i2, i3) = (*q.add(2) as usize | (h << 2) & 0x700, *q.add(3) as usize | (h >> 1) & 0x700);
                    let w0 = weights16(i0, i1);
                    let w1 = weights16(i2, i3);
                    let ls = i16x8_splat(2 * ((h >> 12) & 7) as i16 + 1);
                    let a = a.add(32 * b);
                    let s0 = dot16_scaled(w0, v128_load(a as *const v128), ls);
                    let s1 = dot16_scaled(w1, v128_load(a.add(16) as *const v128), ls);
                    isum = i32x4_add(isum, i32x4_add(s0, s1));
                }
                // Delta correction: lane b of `neg_ls` = ls_b where sub-block b's delta is negative
                // (bit 15 of qh[b]), else 0; pmaddwd with the bsums (two per sub-block, so each
                // lane is duplicated) gives Σ neg_ls·Σa.
                let qh = v128_load(p.add(34) as *const v128);
                let ls = v128_or(v128_and(u16x8_shr(qh, 11), u16x8_splat(14)), u16x8_splat(1));
                let neg_ls = v128_and(ls, i16x8_shr(qh, 15));
                let bs = act.bsums.as_ptr().add(16 * i);
                let dup_lo = i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(neg_ls, neg_ls);
                let dup_hi = i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(neg_ls, neg_ls);
                let c = i32x4_add(
                    i32x4_dot_i16x8(v128_load(bs as *const v128), dup_lo),
                    i32x4_dot_i16x8(v128_load(bs.add(8) as *const v128), dup_hi),
                );
                isum = i32x4_sub(isum, i32x4_shl(c, 1));
                let d = f16_at(blk, 0) * act.d[8 * i];
                acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_splat(d)));
            }
            0.125 * hsum_f32(acc)
        }

        /// Relaxed SIMD: the weights are gathered from the positive-delta half of `GRID8D_U`,
        /// i.e. as `8g + 10` = `w + 9` (`w = 8g + 1`) or `w + 11` (`w = 8g − 1`), 7-bit, so one
        /// `i16x8.relaxed_dot_i8x16_i7x16_s` per 16 weights replaces the two `extmul`s and their
        /// add; the two dots of a sub-block are added in i16 (≤ 2·4572) and scaled by `ls` with
        /// one `i32x4.dot_i16x8_s`. Once per super-block, `Σ_b (9·ls_b + 2·neg_ls_b)·Σa_b` comes
        /// off again via the `bsums`. The table offsets come from `group_offsets`; a `fence` per
        /// sub-block keeps V8 from hoisting all 16 activation loads of a super-block (and
        /// spilling them), which alone was worth +17 %.
        ///
        /// # Safety
        /// Requires simd128 and relaxed-simd.
        #[cfg(target_feature = "relaxed-simd")]
        #[target_feature(enable = "simd128")]
        pub unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
            let nb = check_lengths(row, BYTES, &act);
            // Index bits 8..10 of group l are bits 3l..3l+3 of qh[b]: × 2^(11 − 3l) moves them
            // to bits 11..13 of the byte offset (black_box: see `group_offsets`; and it keeps
            // LLVM from turning the multiply into per-lane shifts, which get scalarised).
            let to_11 = black_box(u16x8(2048, 256, 32, 4, 2048, 256, 32, 4));
            let bits_11_13 = black_box(u16x8_splat(0x3800));
            let mut acc = f32x4_splat(0.0);
            for i in 0..nb {
                let blk = &row[i * BYTES..(i + 1) * BYTES];
                // SAFETY (all pointer reads below): `blk` has BYTES bytes, the activation block 256
                // elements and 16 bsums (checked above); table offsets are 8 × (8 + 3-bit
                // index), inside GRID8D_U.
                let p = blk.as_ptr();
                let a = act.qs.as_ptr().add(i * QK_K);
                let qh = v128_load(p.add(34) as *const v128);
                let hq = [
                    i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(qh, qh),
                    i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(qh, qh),
                ];
                let off = group_offsets(p.add(2), hq, to_11, bits_11_13);
                // Lane b: `2s + 1` of sub-block b.
                let ls = v128_or(v128_and(u16x8_shr(qh, 11), u16x8_splat(14)), u16x8_splat(1));
                let mut isum = i32x4_splat(0);
                // Unrolled so that lanes can be extracted and splatted with constants.
                macro_rules! sub_block {
                    ($b:literal) => {{
                        let (w0, w1) = sub_block_weights!(off, $b);
                        let a = a.add(32 * $b);
                        let s = i16x8_add(dot16_u(w0, a), dot16_u(w1, a.add(16)));
                        let ls = i16x8_shuffle::<$b, $b, $b, $b, $b, $b, $b, $b>(ls, ls);
                        isum = i32x4_add(isum, i32x4_dot_i16x8(s, ls));
                    }};
                }
                fenced_sub_blocks!(sub_block, isum);
                // Offset correction: lane b of `corr` = 9·ls_b, + 2·ls_b where sub-block b's
                // delta is negative (bit 15 of qh[b]); pmaddwd with the bsums (two per
                // sub-block, so each lane is duplicated) gives Σ corr·Σa.
                let neg_ls = v128_and(ls, i16x8_shr(qh, 15));
                let corr = i16x8_add(i16x8_mul(ls, i16x8_splat(9)), i16x8_shl(neg_ls, 1));
                let bs = act.bsums.as_ptr().add(16 * i);
                let dup_lo = i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(corr, corr);
                let dup_hi = i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(corr, corr);
                let c = i32x4_add(
                    i32x4_dot_i16x8(v128_load(bs as *const v128), dup_lo),
                    i32x4_dot_i16x8(v128_load(bs.add(8) as *const v128), dup_hi),
                );
                isum = i32x4_sub(isum, c);
                let d = f16_at(blk, 0) * act.d[8 * i];
                acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_splat(d)));
            }
            0.125 * hsum_f32(acc)
        }
    }
}

// =============================================================================================
/// IQ1_M — 56 bytes per 256 weights (1.75 bpw). No explicit `d`: its 16 bits are spread over the
/// top nibbles of the four u16 scale words.
///
/// | offset | size | field                                                                  |
/// |--------|------|------------------------------------------------------------------------|
/// | 0      | 32   | low 8 bits of the grid indices, 4 per sub-block b (bytes `4b..4b+4`)   |
/// | 32     | 16   | `qh`: 2 bytes per sub-block; byte `2b + h` covers groups `2h` and      |
/// |        |      | `2h+1`: bits 0..2 / 4..6 = index bits 8..10, bit 3 / 7 = delta sign    |
/// | 48     | 8    | `sc[4]`: u16; sub-block b uses `sc[b/2] >> 6(b%2)`: bits 0..2 = scale  |
/// |        |      | of its first 16 weights, 3..5 = of its last 16; bits 12..15 of sc[k] = |
/// |        |      | bits 4k..4k+3 of the fp16 `d`                                          |
///
/// Weight `32b + 8l + j` = `dl * (grid[j] + delta_l)`, `dl = d * (2s + 1)` with s of its 16-half.
pub mod iq1_m {
    use super::*;

    pub const BYTES: usize = 56;

    /// The fp16 super-block scale, assembled from the top nibbles of the scale words.
    #[inline(always)]
    fn super_scale(blk: &[u8]) -> f32 {
        let u = (0..4).fold(0u16, |u, k| u | (u16_at(blk, 48 + 2 * k) >> 12) << (4 * k));
        half::f16::from_bits(u).to_f32()
    }

    /// `2s + 1` for the 16-weight half `h` (0, 1) of sub-block `b`.
    #[inline(always)]
    fn scale(blk: &[u8], b: usize, h: usize) -> i32 {
        let sc = u16_at(blk, 48 + 2 * (b / 2));
        2 * ((sc >> (6 * (b % 2) + 3 * h)) & 7) as i32 + 1
    }

    /// The `GRID8D` index of group l (0..4) of sub-block b: grid index | negative delta bit. The
    /// group's qh nibble holds index bits 8..10 and the delta bit, in that order, so it simply
    /// becomes bits 8..11.
    #[inline(always)]
    fn index_d(blk: &[u8], b: usize, l: usize) -> usize {
        let nib = (blk[32 + 2 * b + l / 2] >> (4 * (l % 2))) & 15;
        blk[4 * b + l] as usize | (nib as usize) << 8
    }

    /// Sanitises the fp16 `d` scattered over the scale nibbles (same rule as tools/gen_golden.py).
    pub fn sanitize(block: &mut [u8]) {
        let bits = (0..4).fold(0u16, |u, k| u | (u16_at(block, 48 + 2 * k) >> 12) << (4 * k));
        let mut u = bits.to_le_bytes();
        sanitize_f16(&mut u, 0);
        let bits = u16::from_le_bytes(u);
        for k in 0..4 {
            let sc = u16_at(block, 48 + 2 * k) & 0x0fff | ((bits >> (4 * k)) & 15) << 12;
            block[48 + 2 * k..50 + 2 * k].copy_from_slice(&sc.to_le_bytes());
        }
    }

    pub fn dequantize(row: &[u8], out: &mut [f32]) {
        assert_eq!(row.len(), out.len() / QK_K * BYTES);
        for (blk, y) in row.chunks_exact(BYTES).zip(out.chunks_exact_mut(QK_K)) {
            let d = super_scale(blk);
            for (g, y) in y.chunks_exact_mut(8).enumerate() {
                let (b, l) = (g / 4, g % 4);
                let dl = d * scale(blk, b, l / 2) as f32;
                let e = index_d(blk, b, l);
                let delta = if e & NEG != 0 { -DELTA } else { DELTA };
                for (j, y) in y.iter_mut().enumerate() {
                    *y = dl * (grid(e & 2047, j) as f32 + delta);
                }
            }
        }
    }

    pub fn vec_dot_ref(row: &[u8], act: Q8<'_>) -> f32 {
        let nb = check_lengths(row, BYTES, &act);
        let mut sumf = 0.0f32;
        for i in 0..nb {
            let blk = &row[i * BYTES..(i + 1) * BYTES];
            let (mut sumi1, mut sumi2) = (0i32, 0i32);
            for b in 0..8 {
                let a = &act.qs[i * QK_K + 32 * b..i * QK_K + 32 * b + 32];
                // Per 16-weight half: grid sum and delta sum (Σ ±Σ_group a).
                let (mut sum1, mut sum2) = ([0i32; 2], [0i32; 2]);
                for l in 0..4 {
                    let e = index_d(blk, b, l);
                    let g = IQ1S_GRID[e & 2047].to_le_bytes();
                    let (mut sg, mut sa) = (0i32, 0i32);
                    for j in 0..8 {
                        let q = a[8 * l + j] as i32;
                        sg += g[j] as i8 as i32 * q;
                        sa += q;
                    }
                    sum1[l / 2] += sg;
                    sum2[l / 2] += if e & NEG != 0 { -sa } else { sa };
                }
                let (ls1, ls2) = (scale(blk, b, 0), scale(blk, b, 1));
                sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
                sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
            }
            sumf += super_scale(blk) * act.d[8 * i] * (sumi1 as f32 + DELTA * sumi2 as f32);
        }
        sumf
    }

    /// GEMM form: `q = (2s + 1)·(8g ± 1)` with s of the weight's 16-half, `d = d_w / 8`.
    pub fn decode_ref(row: &[u8], out: &mut Decoded) {
        out.check(GgmlType::IQ1_M, row);
        for (i, blk) in row.chunks_exact(BYTES).enumerate() {
            for b in 0..8 {
                for l in 0..4 {
                    put8(&mut out.q[QK_K * i + 32 * b + 8 * l..], scale(blk, b, l / 2), index_d(blk, b, l));
                }
            }
            out.d[i] = super_scale(blk) * DELTA;
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

    /// Int8 GEMM form ([`super::kernels8`]): exact as [`decode_ref`] (`d·(sc·u)` and `d·(−9·sc)`
    /// are exact products whose sum is the weight).
    pub fn decode8_ref(row: &[u8], out: &mut Decoded8) {
        let nb = out.check(GgmlType::IQ1_M, row);
        for (i, blk) in row.chunks_exact(BYTES).take(nb).enumerate() {
            for b in 0..8 {
                for l in 0..4 {
                    put8_u(&mut out.u, QK_K * i + 32 * b + 8 * l, index_d(blk, b, l));
                }
                for h in 0..2 {
                    put_scale8(out, 16 * i + 2 * b + h, scale(blk, b, h) as i16);
                }
            }
            let d = super_scale(blk) * DELTA;
            out.d[i] = d;
            out.m[i] = d;
        }
    }

    pub const KERNELS8: Kernels8 = super::kernels8(GgmlType::IQ1_M, decode8_ref, decode8);

    fn decode8(row: &[u8], out: &mut Decoded8) {
        #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
        {
            // SAFETY: relaxed-simd is enabled for this build; lengths are checked inside.
            return unsafe { simd::decode8(row, out) };
        }
        #[allow(unreachable_code)]
        decode8_ref(row, out)
    }

    pub fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            // SAFETY: simd128 is enabled for this build.
            return unsafe { simd::vec_dot(row, act) };
        }
        #[allow(unreachable_code)]
        vec_dot_ref(row, act)
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    mod simd {
        use super::super::check_lengths;
        use super::super::simd::weights16;
        /// The block's 3-bit scales as `2s + 1` in i16 lanes: `[0]` lane 4w + k (w = 0, 1) is field k
        /// of scale word w, i.e. sub-block 2w + k/2, half k%2; `[1]` the same for words 2, 3.
        /// `spread` and `to_top` are the per-row constants of the kernels (see there).
        ///
        /// # Safety
        /// `p..p+56` (the block) must be readable.
        #[inline(always)]
        unsafe fn scales(p: *const u8, spread: [v128; 2], to_top: v128) -> [v128; 2] {
            let words = v128_load64_zero(p.add(48) as *const u64);
            // Indices < 16: the relaxed swizzle (one pshufb) is exact.
            #[cfg(target_feature = "relaxed-simd")]
            let swizzle = i8x16_relaxed_swizzle;
            #[cfg(not(target_feature = "relaxed-simd"))]
            let swizzle = i8x16_swizzle;
            let mut scales = [i16x8_splat(0); 2];
            for (half, s) in scales.iter_mut().enumerate() {
                let field = u16x8_shr(i16x8_mul(swizzle(words, spread[half]), to_top), 13);
                *s = v128_or(i16x8_shl(field, 1), i16x8_splat(1));
            }
            scales
        }

        #[cfg(not(target_feature = "relaxed-simd"))]
        use super::super::simd::dot16_scaled;
        #[cfg(target_feature = "relaxed-simd")]
        use super::super::simd::{dot16_u, group_offsets, weights16_at};
        #[cfg(target_feature = "relaxed-simd")]
        use crate::quant::legacy::simd::fence;
        use super::{scale, super_scale, BYTES, DELTA};
        use crate::quant::gemm::Decoded;
        use crate::quant::simd::{hsum_f32, store_scaled16};
        use crate::quant::{GgmlType, Q8, QK_K};
        use core::arch::wasm32::*;
        use core::hint::black_box;

        /// Row → int8 GEMM form: per 16 weights two `GRID8D_U` rows (delta sign included in the
        /// index: the codes `8g ± 1 + 9`), the halves' `2s + 1` from the scale words.
        ///
        /// # Safety
        /// Requires simd128 and relaxed-simd.
        #[cfg(target_feature = "relaxed-simd")]
        #[target_feature(enable = "simd128,relaxed-simd")]
        pub unsafe fn decode8(row: &[u8], out: &mut crate::quant::gemm8::Decoded8) {
            let nb = out.check(GgmlType::IQ1_M, row);
            let mut v = [i8x16_splat(0); 16];
            for i in 0..nb {
                // SAFETY: block i is row[56i..56i+56]; GRID8D_U offsets are 8 · (8 + 4 bits),
                // < 8 · 4096; the outputs are u[256i..], sc/mn[16i..16i+16].
                let p = row.as_ptr().add(i * BYTES);
                let blk = core::slice::from_raw_parts(p, BYTES);
                for b in 0..8 {
                    let h = (p.add(32 + 2 * b) as *const u16).read_unaligned() as usize;
                    let qs = p.add(4 * b);
                    let (i0, i1) = (*qs as usize | (h << 8) & 0xf00, *qs.add(1) as usize | (h << 4) & 0xf00);
                    let (i2, i3) = (*qs.add(2) as usize | h & 0xf00, *qs.add(3) as usize | (h >> 4) & 0xf00);
                    v[2 * b] = weights16_at(8 * i0, 8 * i1);
                    v[2 * b + 1] = weights16_at(8 * i2, 8 * i3);
                    for k in 0..2 {
                        out.put_offset_scale(16 * i + 2 * b + k, scale(blk, b, k) as i16, super::super::OFF8);
                    }
                }
                out.put_offset_block(i, &v, super_scale(blk) * DELTA);
            }
        }

        /// Row → GEMM form: per 16 weights two `GRID8D` rows (delta sign included in the index)
        /// times the half's `2s + 1`.
        ///
        /// # Safety
        /// Requires simd128.
        #[target_feature(enable = "simd128")]
        pub unsafe fn decode(row: &[u8], out: &mut Decoded) {
            out.check(GgmlType::IQ1_M, row);
            let q = out.q.as_mut_ptr();
            for (i, blk) in row.chunks_exact(BYTES).enumerate() {
                // SAFETY: reads stay in `blk`; GRID8D indices have 8 + 4 bits, < 4096; `check`
                // sized q for 256 weights per block.
                let p = blk.as_ptr();
                for b in 0..8 {
                    let h = (p.add(32 + 2 * b) as *const u16).read_unaligned() as usize;
                    let qs = p.add(4 * b);
                    let (i0, i1) = (*qs as usize | (h << 8) & 0xf00, *qs.add(1) as usize | (h << 4) & 0xf00);
                    let (i2, i3) = (*qs.add(2) as usize | h & 0xf00, *qs.add(3) as usize | (h >> 4) & 0xf00);
                    let o = q.add(QK_K * i + 32 * b);
                    store_scaled16(o, weights16(i0, i1), i16x8_splat(scale(blk, b, 0) as i16));
                    store_scaled16(o.add(16), weights16(i2, i3), i16x8_splat(scale(blk, b, 1) as i16));
                }
                out.d[i] = super_scale(blk) * DELTA;
            }
        }

        /// # Safety
        /// Requires simd128.
        #[cfg(not(target_feature = "relaxed-simd"))]
        #[target_feature(enable = "simd128")]
        pub unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
            let nb = check_lengths(row, BYTES, &act);
            // The 16 scales of a block are computed with SIMD: scale word w is spread to 4 u16
            // lanes, field k (bits 3k..3k+3) moved to the top by a multiply and shifted down.
            // black_box keeps LLVM from turning the swizzle into a shuffle (whose mask V8 rebuilds
            // from immediates every time) and the multiply into per-lane shifts (scalarised).
            let spread = black_box([
                u8x16(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3),
                u8x16(4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7),
            ]);
            let to_top = black_box(u16x8(8192, 1024, 128, 16, 8192, 1024, 128, 16));
            let mut acc = f32x4_splat(0.0);
            for i in 0..nb {
                let blk = &row[i * BYTES..(i + 1) * BYTES];
                // SAFETY (all pointer reads below): `blk` has BYTES bytes and the activation block
                // 256 elements (checked above); GRID8D indices have 8 + 4 bits, < 4096.
                let p = blk.as_ptr();
                let a = act.qs.as_ptr().add(i * QK_K);
                let scales = scales(p, spread, to_top);
                let mut isum = i32x4_splat(0);
                // Unrolled so the scale lanes can be splatted with constant shuffles.
                macro_rules! sub_block {
                    ($b:literal, $sv:expr, $k0:literal, $k1:literal) => {{
                        // qh bytes 2b, 2b+1 as one u16; each nibble (3 index bits + delta bit)
                        // becomes bits 8..11 of a GRID8D index.
                        let h = (p.add(32 + 2 * $b) as *const u16).read_unaligned() as usize;
                        let q = p.add(4 * $b);
                        let (i0, i1) = (*q as usize | (h << 8) & 0xf00, *q.add(1) as usize | (h << 4) & 0xf00);
                        let (i2, i3) = (*q.add(2) as usize | h & 0xf00, *q.add(3) as usize | (h >> 4) & 0xf00);
                        let w0 = weights16(i0, i1);
                        let w1 = weights16(i2, i3);
                        let ls0 = i16x8_shuffle::<$k0, $k0, $k0, $k0, $k0, $k0, $k0, $k0>($sv, $sv);
                        let ls1 = i16x8_shuffle::<$k1, $k1, $k1, $k1, $k1, $k1, $k1, $k1>($sv, $sv);
                        let a = a.add(32 * $b);
                        let s0 = dot16_scaled(w0, v128_load(a as *const v128), ls0);
                        let s1 = dot16_scaled(w1, v128_load(a.add(16) as *const v128), ls1);
                        isum = i32x4_add(isum, i32x4_add(s0, s1));
                    }};
                }
                sub_block!(0, scales[0], 0, 1);
                sub_block!(1, scales[0], 2, 3);
                sub_block!(2, scales[0], 4, 5);
                sub_block!(3, scales[0], 6, 7);
                sub_block!(4, scales[1], 0, 1);
                sub_block!(5, scales[1], 2, 3);
                sub_block!(6, scales[1], 4, 5);
                sub_block!(7, scales[1], 6, 7);
                let d = super_scale(blk) * act.d[8 * i];
                acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_splat(d)));
            }
            0.125 * hsum_f32(acc)
        }

        /// Relaxed SIMD: the weights are gathered from `GRID8D_U` (`w + 9`, 7-bit, delta sign in
        /// the index): one `i16x8.relaxed_dot_i8x16_i7x16_s` per 16 weights instead of two
        /// `extmul`s and an add. The two halves of a sub-block have their own scales: their i16
        /// pair sums are folded into lanes 0..4 and 4..8 of one vector (two unpacks, one add)
        /// and one `i32x4.dot_i16x8_s` applies `[ls_0 × 4, ls_1 × 4]`. Once per super-block
        /// `9·Σ_h ls_h·Σa_h` comes off again: the scale vectors list the 16 halves in the order
        /// of the 16 `bsums`, so that is two `i32x4.dot_i16x8_s`. Table offsets from
        /// `group_offsets`, a `fence` per sub-block as in IQ1_S.
        ///
        /// # Safety
        /// Requires simd128 and relaxed-simd.
        #[cfg(target_feature = "relaxed-simd")]
        #[target_feature(enable = "simd128")]
        pub unsafe fn vec_dot(row: &[u8], act: Q8<'_>) -> f32 {
            let nb = check_lengths(row, BYTES, &act);
            // Scales as in the SIMD128 kernel above (the swizzle indices are < 16, so the
            // relaxed swizzle, one `pshufb`, is exact).
            let spread = black_box([
                u8x16(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3),
                u8x16(4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7),
            ]);
            let to_top = black_box(u16x8(8192, 1024, 128, 16, 8192, 1024, 128, 16));
            // Offsets: the qh word w of sub-block b goes to `group_offsets` as [w, w >> 1], so
            // the nibble of group l (bits 4l..4l+4 of w: 3 index bits + delta sign) sits at bits
            // 0, 3, 8, 11 of its lane and × [2^11, 2^8, 2^3, 1] moves it to bits 11..14.
            let to_11 = black_box(u16x8(2048, 256, 8, 1, 2048, 256, 8, 1));
            let bits_11_14 = black_box(u16x8_splat(0x7800));
            let mut acc = f32x4_splat(0.0);
            for i in 0..nb {
                let blk = &row[i * BYTES..(i + 1) * BYTES];
                // SAFETY (all pointer reads below): `blk` has BYTES bytes, the activation block
                // 256 elements and 16 bsums (checked above); table offsets are 8 × (8 + 4-bit
                // index), inside GRID8D_U.
                let p = blk.as_ptr();
                let a = act.qs.as_ptr().add(i * QK_K);
                let scales = scales(p, spread, to_top);
                let qh = v128_load(p.add(32) as *const v128);
                let qh1 = u16x8_shr(qh, 1);
                let hq = [
                    i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(qh, qh1),
                    i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(qh, qh1),
                ];
                let off = group_offsets(p, hq, to_11, bits_11_14);
                // ls[b] = [ls of half 2b × 4, ls of half 2b + 1 × 4], by unpacks.
                let mut ls = [i16x8_splat(0); 8];
                for (v, sv) in scales.iter().enumerate() {
                    let lo = i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(*sv, *sv);
                    let hi = i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(*sv, *sv);
                    ls[4 * v] = i32x4_shuffle::<0, 0, 1, 1>(lo, lo);
                    ls[4 * v + 1] = i32x4_shuffle::<2, 2, 3, 3>(lo, lo);
                    ls[4 * v + 2] = i32x4_shuffle::<0, 0, 1, 1>(hi, hi);
                    ls[4 * v + 3] = i32x4_shuffle::<2, 2, 3, 3>(hi, hi);
                }
                let mut isum = i32x4_splat(0);
                // Unrolled so that lanes can be extracted with constants.
                macro_rules! sub_block {
                    ($b:literal) => {{
                        let (w0, w1) = sub_block_weights!(off, $b);
                        let a = a.add(32 * $b);
                        let (s0, s1) = (dot16_u(w0, a), dot16_u(w1, a.add(16)));
                        // Lanes 0..4: pair sums of half 0, 4..8: of half 1 (each ≤ 2·4572).
                        let s = i16x8_add(i64x2_shuffle::<0, 2>(s0, s1), i64x2_shuffle::<1, 3>(s0, s1));
                        isum = i32x4_add(isum, i32x4_dot_i16x8(s, ls[$b]));
                    }};
                }
                fenced_sub_blocks!(sub_block, isum);
                let bs = act.bsums.as_ptr().add(16 * i);
                let nine = i16x8_splat(9);
                let c = i32x4_add(
                    i32x4_dot_i16x8(v128_load(bs as *const v128), i16x8_mul(scales[0], nine)),
                    i32x4_dot_i16x8(v128_load(bs.add(8) as *const v128), i16x8_mul(scales[1], nine)),
                );
                isum = i32x4_sub(isum, c);
                let d = super_scale(blk) * act.d[8 * i];
                acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(isum), f32x4_splat(d)));
            }
            0.125 * hsum_f32(acc)
        }
    }
}
