//! Four weight rows interleaved block by block ("R4"): a load-time layout for the decode kernels.
//!
//! A decode matvec reads every weight once per token. In the plain layout the dot product runs row
//! by row: per 16 weights it loads 16 activation bytes, broadcasts the group's scale, and each row
//! ends with a horizontal sum. With four rows interleaved, one 4-byte activation broadcast meets
//! 4 rows × 4 weights in one product instruction: the product lanes belong to the four rows, one
//! vector carries the four rows' scales, and the result is one f32x4 holding four outputs.
//!
//! An R4 block is block `b` of four consecutive rows, their bytes rearranged field by field
//! ([`Field`]): a field of `len` bytes in granules of `gran` bytes becomes `4 · len` bytes in which
//! granule `k` of row `r` sits at `(4k + r) · gran`. Granules of 4 quant bytes keep 4 consecutive
//! elements of a row together (every K-quant stores consecutive elements in consecutive bytes), so
//! the kernels unpack them exactly as the plain ones do; per-row scalars (`d`, scales) become
//! vectors across the four rows. The R4 bytes of four rows are a permutation of the plain bytes,
//! so a matrix is rearranged in place after loading ([`interleave_matrix`]), without memory of its
//! own; the prompt GEMM takes a panel's rows back to the plain layout before decoding them
//! ([`Rows::panel`]).
//!
//! Only the types and builds where it measured faster use it ([`faster`]); every build has a
//! working [`R4Kernels::vec_dot4`], and [`vec_dot4_ref`] (un-interleave, then the scalar
//! `vec_dot_ref` per row) is its test oracle.

use super::{kernels, GgmlType, QAct, Q8, QK_K};

/// Rows per R4 group.
pub const R: usize = 4;

/// One field of a block: `len` bytes at `off`, interleaved in granules of `gran` bytes.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub off: usize,
    pub len: usize,
    pub gran: usize,
}

/// The R4 form of one block type.
pub struct R4Kernels {
    pub ty: GgmlType,
    /// The block's fields in R4 order; together they cover the block exactly once. The per-row
    /// scalars (`d`, scales) come before the codes, so that a kernel reads each block front to
    /// back: IQ2_SX and IQ3_SX had theirs last, and each block began with a load 512 bytes ahead
    /// of the codes, which ran their four-row kernels 2.7× and 1.7× slower on a Zen 4 (BENCHMARKS.md,
    /// "The scales first").
    pub fields: &'static [Field],
    /// `[y_0, y_1, y_2, y_3]`: the dot products of four interleaved rows (`rows4`, whole R4
    /// blocks) with one activation row, added to `acc` block by block as the kernel adds its own
    /// blocks: `acc` = the result for the rows' blocks before these (zeros for whole rows), so
    /// rows taken a few blocks at a time give the whole rows' result bit for bit (in the relaxed
    /// build; [`vec_dot4_plain`] elsewhere adds its rows' sums to `acc`).
    pub vec_dot4: fn(rows4: &[u8], act: Q8<'_>, acc: [f32; 4]) -> [f32; 4],
    /// `out[t] = vec_dot4(rows4, acts[t])` for up to [`MAX_TOKENS`] activation rows, bit for bit:
    /// the rows' codes and scales are unpacked once for all of them (a few tokens of a prompt).
    pub vec_dot4_n: fn(rows4: &[u8], acts: &[Q8<'_>], out: &mut [[f32; 4]]),
    /// [`matvec_streams`] for this form: [`streams_with`] over `vec_dot4`, made by
    /// [`r4_matvec!`](crate::r4_matvec) so that the kernel is inlined into the driver's loops.
    pub matvec: fn(data: &[u8], rb: usize, rows: core::ops::Range<usize>, a: Q8<'_>, y: &mut [f32]),
    /// A second form of the same kernels (same `ty` and `fields`), equal bit for bit, that some
    /// engines' code generators run faster (Q6_K); `ops` picks one per instance by timing.
    pub alt: Option<&'static R4Kernels>,
    /// Interleaved only where the engine runs the int8 GEMM's wide profile (the browsers' V8,
    /// [`crate::quant::gemm8::Profile`]): Q5_K, which Node 20's V8 runs slower interleaved than
    /// plain (BENCHMARKS.md, "Q5_K interleaved").
    pub wide_only: bool,
    /// Its kernel uses `i32x4.relaxed_dot_i8x16_i7x16_add_s`, which some engines miscompute
    /// (Node 20's baseline tier): taken only where [`crate::quant::gemm8::quad_add_exact`].
    pub dot_add: bool,
}

impl R4Kernels {
    /// The second form where this engine may run it: [`R4Kernels::alt`], unless it uses the
    /// dot-add and the engine does not compute that exactly.
    pub fn usable_alt(&self) -> Option<&'static R4Kernels> {
        self.alt.filter(|a| !a.dot_add || crate::quant::gemm8::quad_add_exact())
    }
}

/// The most activation rows one [`R4Kernels::vec_dot4_n`] call takes.
pub const MAX_TOKENS: usize = 4;

/// The R4 form of `ty`, where one exists.
pub fn r4_kernels(ty: GgmlType) -> Option<&'static R4Kernels> {
    super::kquants::R4.iter().find(|k| k.ty == ty)
}

/// Whether this build stores `ty` weight matrices interleaved: where the R4 kernel measured faster
/// than the plain one (BENCHMARKS.md "Four rows interleaved"): the relaxed-SIMD build, unless
/// switched off with [`set_enabled`].
pub fn faster(ty: GgmlType) -> bool {
    let wide = super::gemm8::profile() == super::gemm8::Profile::Wide;
    cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd"))
        && ENABLED.load(core::sync::atomic::Ordering::Relaxed)
        && r4_kernels(ty).is_some_and(|k| wide || !k.wide_only)
}

static ENABLED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(true);

/// Turns the interleaved layout off (or on again) for models built after the call: for side-by-side
/// measurements (`clef generate --layout plain`).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, core::sync::atomic::Ordering::Relaxed);
}

/// Four plain rows (`plain`: `R` rows of `rb` bytes, one after the other) → their R4 blocks
/// (`rows4`, the same length). A permutation of the bytes.
pub fn pack_rows(k: &R4Kernels, plain: &[u8], rows4: &mut [u8]) {
    permute(k, plain, rows4, false);
}

/// The inverse of [`pack_rows`]: R4 blocks → four plain rows.
pub fn unpack_rows(k: &R4Kernels, rows4: &[u8], plain: &mut [u8]) {
    permute(k, rows4, plain, true);
}

/// Moves every granule between the plain offset (row r, block b, field offset + k·gran) and the
/// R4 offset (block b, field base + (R·k + r)·gran); `to_plain` picks the direction. Fields of
/// whole 16-byte chunks go through SIMD transposes on wasm32 (the prompt GEMM un-interleaves every
/// panel it decodes, and a load interleaves every matrix: both on a path that waits for them);
/// the rest, and everything natively, granule by granule ([`permute_ref`]'s moves).
fn permute(k: &R4Kernels, src: &[u8], dst: &mut [u8], to_plain: bool) {
    let bb = k.ty.block_bytes();
    assert_eq!(src.len(), dst.len(), "R4: source and destination differ in size");
    assert_eq!(src.len() % (R * bb), 0, "R4: not four rows of whole blocks");
    assert!(k.fields.iter().all(|f| f.off + f.len <= bb && f.len % f.gran == 0), "R4: bad field table");
    let rb = src.len() / R;
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    for b in 0..rb / bb {
        let mut base = R * bb * b;
        for f in k.fields {
            let rows: [usize; R] = core::array::from_fn(|r| r * rb + b * bb + f.off);
            // SAFETY (both paths): rows[r] + f.len ≤ r·rb + (b + 1)·bb ≤ (r + 1)·rb and
            // base + R·f.len ≤ R·bb·(b + 1) ≤ R·rb, the length of both slices (asserted above);
            // src and dst are distinct slices.
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            if f.len % 16 == 0 && matches!(f.gran, 1 | 2 | 4) {
                unsafe {
                    if to_plain {
                        simd::from_r4(f.gran, s.add(base), rows.map(|o| d.add(o)), f.len);
                    } else {
                        simd::to_r4(f.gran, rows.map(|o| s.add(o)), d.add(base), f.len);
                    }
                }
                base += R * f.len;
                continue;
            }
            for g in 0..f.len / f.gran {
                for (r, &row) in rows.iter().enumerate() {
                    let (plain, packed) = (row + g * f.gran, base + (R * g + r) * f.gran);
                    let (from, to) = if to_plain { (packed, plain) } else { (plain, packed) };
                    // Fixed-size copies become single loads and stores (a variable length calls memcpy).
                    unsafe {
                        match f.gran {
                            1 => *d.add(to) = *s.add(from),
                            2 => (d.add(to) as *mut u16).write_unaligned((s.add(from) as *const u16).read_unaligned()),
                            4 => (d.add(to) as *mut u32).write_unaligned((s.add(from) as *const u32).read_unaligned()),
                            n => core::ptr::copy_nonoverlapping(s.add(from), d.add(to), n),
                        }
                    }
                }
            }
            base += R * f.len;
        }
    }
}

/// `permute` one granule at a time, with checked indexing: the reference its fast paths are
/// tested against.
pub fn permute_ref(k: &R4Kernels, src: &[u8], dst: &mut [u8], to_plain: bool) {
    let bb = k.ty.block_bytes();
    assert_eq!(src.len(), dst.len());
    let rb = src.len() / R;
    for b in 0..rb / bb {
        let mut base = R * bb * b;
        for f in k.fields {
            for g in 0..f.len / f.gran {
                for r in 0..R {
                    let (plain, packed) = (r * rb + b * bb + f.off + g * f.gran, base + (R * g + r) * f.gran);
                    let (from, to) = if to_plain { (packed, plain) } else { (plain, packed) };
                    dst[to..to + f.gran].copy_from_slice(&src[from..from + f.gran]);
                }
            }
            base += R * f.len;
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    //! 4 rows × 16 bytes ⇄ 64 R4 bytes, as transposes of 4×4 words, 4×8 halves or 4×16 bytes.
    use crate::quant::simd::transpose4;
    use core::arch::wasm32::*;

    /// Four rows' field bytes (`len`, a multiple of 16, at `rows[r]`) → their R4 form at `out`.
    ///
    /// # Safety
    /// `rows[r]..+len` readable, `out..+4·len` writable, not overlapping.
    #[inline(always)]
    pub unsafe fn to_r4(gran: usize, rows: [*const u8; 4], out: *mut u8, len: usize) {
        for c in (0..len).step_by(16) {
            let v = rows.map(|p| v128_load(p.add(c) as *const v128));
            let o = match gran {
                4 => transpose4(v),
                2 => halves_to(v),
                _ => bytes_to(v),
            };
            for (i, oi) in o.into_iter().enumerate() {
                v128_store(out.add(4 * c + 16 * i) as *mut v128, oi);
            }
        }
    }

    /// The inverse of [`to_r4`].
    ///
    /// # Safety
    /// `src..+4·len` readable, `rows[r]..+len` writable, not overlapping.
    #[inline(always)]
    pub unsafe fn from_r4(gran: usize, src: *const u8, rows: [*mut u8; 4], len: usize) {
        for c in (0..len).step_by(16) {
            let o: [v128; 4] = core::array::from_fn(|i| v128_load(src.add(4 * c + 16 * i) as *const v128));
            let v = match gran {
                4 => transpose4(o),
                2 => halves_from(o),
                _ => bytes_from(o),
            };
            for (p, vr) in rows.iter().zip(v) {
                v128_store(p.add(c) as *mut v128, vr);
            }
        }
    }

    /// Rows of 8 two-byte granules → R4 bytes: out[i] holds granules 2i and 2i + 1 of the four
    /// rows ([r0, r1, r2, r3] of granule 2i, then of 2i + 1): a 4 × 8 transpose of u16s.
    #[inline(always)]
    fn halves_to(v: [v128; 4]) -> [v128; 4] {
        let a = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(v[0], v[1]);
        let a2 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(v[0], v[1]);
        let b = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(v[2], v[3]);
        let b2 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(v[2], v[3]);
        [
            i32x4_shuffle::<0, 4, 1, 5>(a, b),
            i32x4_shuffle::<2, 6, 3, 7>(a, b),
            i32x4_shuffle::<0, 4, 1, 5>(a2, b2),
            i32x4_shuffle::<2, 6, 3, 7>(a2, b2),
        ]
    }

    /// The inverse of [`halves_to`].
    #[inline(always)]
    fn halves_from(o: [v128; 4]) -> [v128; 4] {
        let a = i32x4_shuffle::<0, 2, 4, 6>(o[0], o[1]);
        let b = i32x4_shuffle::<1, 3, 5, 7>(o[0], o[1]);
        let a2 = i32x4_shuffle::<0, 2, 4, 6>(o[2], o[3]);
        let b2 = i32x4_shuffle::<1, 3, 5, 7>(o[2], o[3]);
        [
            i16x8_shuffle::<0, 2, 4, 6, 8, 10, 12, 14>(a, a2),
            i16x8_shuffle::<1, 3, 5, 7, 9, 11, 13, 15>(a, a2),
            i16x8_shuffle::<0, 2, 4, 6, 8, 10, 12, 14>(b, b2),
            i16x8_shuffle::<1, 3, 5, 7, 9, 11, 13, 15>(b, b2),
        ]
    }

    /// Rows of 16 bytes → R4 bytes: out[i] holds bytes 4i..4i+4 of the four rows, byte by byte
    /// ([r0, r1, r2, r3] of byte 4i, then of byte 4i + 1, …).
    #[inline(always)]
    fn bytes_to(v: [v128; 4]) -> [v128; 4] {
        let a = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(v[0], v[1]);
        let b = i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(v[0], v[1]);
        let c = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(v[2], v[3]);
        let d = i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(v[2], v[3]);
        [
            i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(a, c),
            i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(a, c),
            i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(b, d),
            i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(b, d),
        ]
    }

    /// The inverse of [`bytes_to`].
    #[inline(always)]
    fn bytes_from(o: [v128; 4]) -> [v128; 4] {
        let a = i16x8_shuffle::<0, 2, 4, 6, 8, 10, 12, 14>(o[0], o[1]);
        let c = i16x8_shuffle::<1, 3, 5, 7, 9, 11, 13, 15>(o[0], o[1]);
        let b = i16x8_shuffle::<0, 2, 4, 6, 8, 10, 12, 14>(o[2], o[3]);
        let d = i16x8_shuffle::<1, 3, 5, 7, 9, 11, 13, 15>(o[2], o[3]);
        [
            i8x16_shuffle::<0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30>(a, b),
            i8x16_shuffle::<1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31>(a, b),
            i8x16_shuffle::<0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30>(c, d),
            i8x16_shuffle::<1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31>(c, d),
        ]
    }
}

/// Rearranges a whole matrix (`data`: `n_rows` rows of `rb` bytes, `n_rows` a multiple of 4) into
/// R4 groups in place; `scratch` holds one group's plain rows.
pub fn interleave_matrix(k: &R4Kernels, data: &mut [u8], rb: usize, scratch: &mut Vec<u8>) {
    assert_eq!(data.len() % (R * rb), 0, "R4: the row count is not a multiple of 4");
    scratch.resize(R * rb, 0);
    for group in data.chunks_exact_mut(R * rb) {
        scratch.copy_from_slice(group);
        pack_rows(k, scratch, group);
    }
}

/// The bytes of a weight matrix's rows and their layout: plain, or interleaved four by four.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    pub data: &'a [u8],
    pub r4: bool,
}

impl<'a> Rows<'a> {
    /// Rows in the file's layout.
    pub fn plain(data: &'a [u8]) -> Rows<'a> {
        Rows { data, r4: false }
    }

    /// Rows `r0 .. r0 + p` (of `rb` bytes, type `ty`) as plain rows: a slice of `data` when they
    /// are plain, else their R4 groups un-interleaved into `scratch` (`r0` and `p` multiples of 4).
    pub fn panel<'s>(&self, ty: GgmlType, rb: usize, r0: usize, p: usize, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        let rows = &self.data[r0 * rb..(r0 + p) * rb];
        if !self.r4 {
            return rows;
        }
        let k = r4_kernels(ty).expect("R4 rows of a type without an R4 form");
        assert!(r0 % R == 0 && p % R == 0, "R4 rows {r0}..{} are not whole groups", r0 + p);
        scratch.resize(p * rb, 0);
        for (src, dst) in rows.chunks_exact(R * rb).zip(scratch.chunks_exact_mut(R * rb)) {
            unpack_rows(k, src, dst);
        }
        scratch
    }
}

/// `y[t·y_stride + r] = W[r] · act[t]` for the interleaved rows `rows` (whole groups) of `data`
/// (rows of `rb` bytes) and every token of `act`. Per group of four rows the tokens go through
/// [`R4Kernels::vec_dot4_n`] in tiles of [`MAX_TOKENS`], so a group is read from memory once
/// and its codes unpacked once per tile: a decoded token (one tile of one) and prompts below
/// [`crate::ops::gemm_min_tokens_r4`] tokens, where this beats decoding rows for the GEMM.
pub fn matmul_tiles(k: &R4Kernels, data: &[u8], rb: usize, rows: core::ops::Range<usize>, act: &QAct, y: &mut [f32], y_stride: usize) {
    assert!(rows.start % R == 0 && rows.end % R == 0, "R4 rows {rows:?} are not whole groups");
    assert!(rows.end * rb <= data.len(), "weight matrix too small");
    let t_count = act.rows;
    assert!(t_count == 0 || (t_count - 1) * y_stride + rows.end <= y.len(), "output too small");
    if t_count == 1 {
        // A decoded token: the one-row kernel straight (no tile bookkeeping per group: ~4 %).
        return matvec_streams(k, data, rb, rows, act.row(0), y);
    }
    // The activation views of up to SPAN tokens are made once for every group.
    const SPAN: usize = 8 * MAX_TOKENS;
    let mut out = [[0.0f32; R]; MAX_TOKENS];
    for s0 in (0..t_count).step_by(SPAN) {
        let span = (t_count - s0).min(SPAN);
        let acts: [Q8<'_>; SPAN] = core::array::from_fn(|i| act.row(s0 + i.min(span - 1)));
        for g in (rows.start..rows.end).step_by(R) {
            let group = &data[g * rb..(g + R) * rb];
            for (j, tile) in acts[..span].chunks(MAX_TOKENS).enumerate() {
                let out = &mut out[..tile.len()];
                (k.vec_dot4_n)(group, tile, out);
                for (i, o) in out.iter().enumerate() {
                    let at = (s0 + MAX_TOKENS * j + i) * y_stride + g;
                    y[at..at + R].copy_from_slice(o);
                }
            }
        }
    }
}

/// Parts of a matrix a decoded token's product reads at once: groups of four rows here
/// ([`matvec_streams`]), plain rows in [`crate::ops::rows_outer`].
pub const STREAMS: usize = 4;

/// Bytes a stream reads per kernel call, at least: here a piece is the fewest whole R4 blocks of
/// four interleaved rows that hold this many (one block of most types, two of Q2_K's 336 bytes);
/// over plain rows the fewest whole blocks of a row.
pub const PIECE_BYTES: usize = 512;

/// Whether a decoded token's product reads several streams ([`matvec_streams`]): in the relaxed
/// build, whose kernels carry their sums from piece to piece exactly.
pub const STREAMED: bool = cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd"));

/// `y[r] = W[r] · a` for the interleaved rows `rows` (whole groups) of `data`: a decoded token's
/// product, **reading [`STREAMS`] parts of the matrix at once**. The groups are split into that
/// many runs, and the i-th group of every run is multiplied together a piece at a time (piece p
/// of each, then piece p + 1 of each: [`PIECE_BYTES`]), each group's sums carried from piece to
/// piece through [`R4Kernels::vec_dot4`]'s `acc`, so every row's result is its whole-row
/// kernel's bit for bit.
///
/// Why: one run read front to back keeps too few cache-line misses in flight to stream from
/// memory at the memory's speed — the kernel's own loads queue behind its arithmetic, and wasm
/// has no prefetch instruction (touching lines ahead only moves the wait, BENCHMARKS.md). Four
/// runs give the CPU four independent streams to fetch (BENCHMARKS.md, "Four streams": one
/// Chromium thread, 262,144 × 4096 matrices from memory, GB/s: Q4_K 6.7 → 9.8, Q3_KX 6.7 → 9.5,
/// Q6_KX 6.7 → 9.2, Q2_K 5.0 → 5.2). Only where [`STREAMED`]; elsewhere the groups go through
/// whole, one after the other.
pub fn matvec_streams(k: &R4Kernels, data: &[u8], rb: usize, rows: core::ops::Range<usize>, a: Q8<'_>, y: &mut [f32]) {
    (k.matvec)(data, rb, rows, a, y)
}

/// `R4Kernels::matvec` of the form whose `vec_dot4` is `$dot` (a function of its module): the
/// driver with the kernel inlined into its loops. Through a function pointer, the driver's own
/// work per piece (the call, the activation and weight slices, the sums passed through memory) was
/// 12 % of a decoded token of the 9B-shaped Q4_K_M file (BENCHMARKS.md). The one-token kernels
/// that run faster inlined (Q2_K–Q6_K: +8–16 % from memory; IQ2_SX +24 %) are `inline(always)` too, without the
/// `target_feature` attribute, which excludes it (their modules are built with simd128 anyway).
/// `$ty` is the form's type (a constant here, so the block sizes fold into the loops: passing
/// `R4Kernels::ty` at run time measured 2–3 % slower on Q4_K).
#[macro_export]
macro_rules! r4_matvec {
    ($dot:ident, $ty:expr) => {
        |data: &[u8], rb: usize, rows: core::ops::Range<usize>, a: $crate::quant::Q8<'_>, y: &mut [f32]| {
            $crate::quant::r4::streams_with($dot, $ty, data, rb, rows, a, y)
        }
    };
}

/// [`matvec_streams`]'s work with kernel `dot` (`vec_dot4` of type `ty`), for [`r4_matvec!`].
#[inline(always)]
pub fn streams_with(
    dot: impl Fn(&[u8], Q8<'_>, [f32; R]) -> [f32; R],
    ty: GgmlType,
    data: &[u8],
    rb: usize,
    rows: core::ops::Range<usize>,
    a: Q8<'_>,
    y: &mut [f32],
) {
    if !STREAMED {
        for g in (rows.start..rows.end).step_by(R) {
            y[g..g + R].copy_from_slice(&dot(&data[g * rb..(g + R) * rb], a, [0.0; R]));
        }
        return;
    }
    let bb4 = R * ty.block_bytes(); // bytes of one R4 block (a block of each of the four rows)
    let nb = rb / ty.block_bytes(); // R4 blocks per group
    let piece = PIECE_BYTES.div_ceil(bb4); // R4 blocks per kernel call
    let qk = ty.block_elems();
    let groups = rows.len() / R;
    let run = groups.div_ceil(STREAMS); // groups per stream; the last stream may hold fewer
    for i in 0..run {
        // Row 0 of the i-th group of each stream, where it has one.
        let g: [Option<usize>; STREAMS] = core::array::from_fn(|s| {
            let gi = s * run + i;
            (gi < groups).then_some(rows.start + R * gi)
        });
        let mut acc = [[0.0f32; R]; STREAMS];
        for b0 in (0..nb).step_by(piece) {
            let b1 = (b0 + piece).min(nb);
            let ap = a.slice(b0 * qk, (b1 - b0) * qk);
            for (acc, g) in acc.iter_mut().zip(g) {
                if let Some(g) = g {
                    *acc = dot(&data[g * rb + b0 * bb4..g * rb + b1 * bb4], ap, *acc);
                }
            }
        }
        for (acc, g) in acc.iter().zip(g) {
            if let Some(g) = g {
                y[g..g + R].copy_from_slice(acc);
            }
        }
    }
}

/// The test oracle of [`R4Kernels::vec_dot4`]: un-interleave, then the scalar `vec_dot_ref` per row.
pub fn vec_dot4_ref(ty: GgmlType, rows4: &[u8], act: Q8<'_>) -> [f32; R] {
    by_rows(ty, rows4, act, kernels(ty).expect("no kernels").vec_dot_ref)
}

/// `vec_dot4` where this build has no R4 kernel: un-interleave, then the plain fast kernel per row,
/// added to `acc` (correct, and slower than the plain layout; [`faster`] keeps such builds off R4).
pub fn vec_dot4_plain(ty: GgmlType, rows4: &[u8], act: Q8<'_>, acc: [f32; R]) -> [f32; R] {
    let y = by_rows(ty, rows4, act, kernels(ty).expect("no kernels").vec_dot);
    core::array::from_fn(|r| acc[r] + y[r])
}

fn by_rows(ty: GgmlType, rows4: &[u8], act: Q8<'_>, dot: fn(&[u8], Q8<'_>) -> f32) -> [f32; R] {
    let k = r4_kernels(ty).expect("no R4 form");
    let mut plain = vec![0u8; rows4.len()];
    unpack_rows(k, rows4, &mut plain);
    let rb = rows4.len() / R;
    core::array::from_fn(|r| dot(&plain[r * rb..(r + 1) * rb], act))
}

/// Checks four interleaved rows against an activation row; returns the number of R4 blocks.
#[inline(always)]
pub fn check_rows4(rows4: &[u8], ty: GgmlType, act: &Q8<'_>) -> usize {
    let bb4 = R * ty.block_bytes();
    let nb = rows4.len() / bb4;
    assert_eq!(rows4.len(), nb * bb4, "R4 rows are not whole blocks");
    assert!(
        act.qs.len() >= nb * QK_K && act.d.len() >= nb * 8 && act.bsums.len() >= nb * 16,
        "activation row shorter than the weight rows"
    );
    nb
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The fast permutation (SIMD transposes on wasm32, unchecked moves) is the reference's, both
    /// ways, for every type with an R4 form and rows of 1 to 3 blocks.
    #[test]
    fn permute_is_the_reference() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut checked = 0;
        for ty in GgmlType::ALL {
            let Some(k) = r4_kernels(ty) else { continue };
            for nb in 1..=3 {
                let len = R * nb * ty.block_bytes();
                let src: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed as u8
                    })
                    .collect();
                for to_plain in [false, true] {
                    let (mut fast, mut slow) = (vec![0u8; len], vec![0u8; len]);
                    permute(k, &src, &mut fast, to_plain);
                    permute_ref(k, &src, &mut slow, to_plain);
                    assert!(fast == slow, "{ty}, {nb} blocks, to_plain {to_plain}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 24, "{checked}");
    }
}
