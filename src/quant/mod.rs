//! ggml tensor types: block layouts, scalar reference dequantisers, and dot products of a
//! quantized weight row with a quantized activation row (SIMD128 on wasm32).
//!
//! Every block type lives in one family file and registers one [`QuantKernels`] entry:
//!
//! | file        | types                                          |
//! |-------------|------------------------------------------------|
//! | `lowbit.rs` | Q1_0, Q2_0                                     |
//! | `legacy.rs` | Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL           |
//! | `kquants/`  | Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS; IQ2_SX, IQ3_SX, Q3_KX, Q6_KX (IQ2_S, IQ3_S, Q3_K, Q6_K in their load-time forms) |
//! | `iq2.rs`    | IQ2_XXS, IQ2_XS, IQ2_S                         |
//! | `iq3.rs`    | IQ3_XXS, IQ3_S                                 |
//! | `iq1.rs`    | IQ1_S, IQ1_M                                   |
//!
//! F32 / F16 / BF16 weights are handled by [`float`] (they multiply f32 activations directly).
//!
//! The contract of one entry (checked for every type by `tests/kernels.rs`, natively and in wasm):
//! * `dequantize` is the reference: bit-identical to ggml's `to_float` (and gguf-py's numpy code).
//! * `vec_dot_ref` is a plain scalar dot product of a weight row with a [`Q8`] activation row, in the
//!   integer-sums-times-scales form llama.cpp uses; `vec_dot` is the fast kernel (SIMD128 on wasm32)
//!   and equals `vec_dot_ref` up to f32 summation order.
//! * `decode_ref` rewrites a row into the prompt GEMM's form ([`gemm::Decoded`]): i16 weights with
//!   the integer sub-block scales folded in, one f32 scale per [`GgmlType::gemm_block`] elements,
//!   and for types with mins ([`GgmlType::has_min`]) per-16 integer mins with one f32 factor per
//!   block: `w[i] = d[i/KB]·q[i] + m[i/KB]·mn[i/16]`, reproducing `dequantize` exactly (every type
//!   here has this form). `decode` is the fast version (SIMD128 on wasm32) and equals `decode_ref`
//!   bit for bit. Prompt processing decodes each weight row once this way and multiplies it with
//!   all prompt tokens ([`gemm::gemm`]).
//! * Q2_K–Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_SX, IQ3_XXS, IQ3_S, IQ3_SX, Q3_KX and Q6_KX also have an int8 GEMM form
//!   ([`gemm8::Decoded8`], registered in `kquants::KERNELS8`): 7-bit codes in pair order with
//!   per-16 scales and mins / offsets, `decode_ref` / `decode` likewise (tested against
//!   `dequantize` and each other); the relaxed-SIMD build's prompt runs it where it measured
//!   faster in the engine's profile ([`gemm8::enabled`]: Q2_K in Node, all thirteen in the browsers,
//!   the IQ2 and IQ3_XXS forms from 16 tokens on).

//!
//! **Two wasm builds.** `build.sh` compiles the crate twice: SIMD128 only, and SIMD128 + relaxed
//! SIMD (`cfg(target_feature = "relaxed-simd")`), picked at run time by feature detection
//! (`www/src/simd.ts`). With relaxed SIMD the dot products make their weight codes 7-bit unsigned
//! (offsets come back through the activation sums, signs move onto the activations) and use
//! `i16x8.relaxed_dot_i8x16_i7x16_s`: 16 byte products per instruction, exact for a 7-bit second
//! operand (pairs of |a|≤127 × b≤127 cannot saturate i16). `i32x4.relaxed_dot_i8x16_i7x16_add_s`
//! runs only in the int8 GEMM's dot-add form, after a check that this engine computes it exactly
//! ([`gemm8::quad_add_exact`]): Node 20's V8 (where the tests run, behind
//! `--experimental-wasm-relaxed-simd`) miscomputes it in its baseline tier (Liftoff) — it drops
//! the accumulator and doubles the sum, `dot([-3;16],[5;16]) + 7` gives −120 per lane, not −53 —
//! and computes it right in its optimizing tier (`--no-liftoff`, as `www/cli.mjs` runs); Chromium
//! is right in both. LLVM fuses
//! `extadd_pairwise(i16x8 relaxed dot) + x` into it, so elsewhere i16 sums are widened with
//! `i32x4.dot_i16x8_s` instead (the kernel tests in Node would catch a fused one).

pub mod act;
pub mod float;
pub mod gemm;
pub mod gemm8;
pub mod iq1;
pub mod iq2;
pub mod iq3;
pub mod kquants;
pub mod legacy;
pub mod lowbit;
pub mod r4;
pub mod selftest;
pub mod tables;

pub use act::{quantize_q8, ActKind, Q8, QAct};

/// Which kernels this build runs: `"relaxed-simd"` (SIMD128 + relaxed SIMD, the second wasm build),
/// `"simd128"` (the baseline wasm build) or `"native"` (native builds: the SIMD128 kernels only
/// exist on wasm32; native runs portable Rust, mostly the scalar references).
pub const SIMD_LEVEL: &str = if cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")) {
    "relaxed-simd"
} else if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
    "simd128"
} else {
    "native"
};

/// Elements of a K-quant super-block.
pub const QK_K: usize = 256;

/// A ggml tensor type id as stored in GGUF.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    IQ1_M = 29,
    BF16 = 30,
    Q1_0 = 41,
    Q2_0 = 42,
    /// IQ2_S expanded after loading (`kquants/iq2_sx.rs`): never in a file. Its id is one ggml
    /// retired (Q4_3); [`GgmlType::from_id`] does not return it.
    IQ2_SX = 5,
    /// IQ3_S expanded after loading (`kquants/iq3_sx.rs`): never in a file; a retired ggml id (Q4_2).
    IQ3_SX = 4,
    /// Q3_K expanded after loading (`kquants/q3_kx.rs`): never in a file; a removed ggml id
    /// (Q4_0_4_4).
    Q3_KX = 31,
    /// Q6_K regrouped after loading (`kquants/q6_k.rs`): never in a file; a removed ggml id
    /// (Q4_0_4_8).
    Q6_KX = 32,
}

impl GgmlType {
    /// Every type this runtime reads, in ggml id order.
    pub const ALL: [GgmlType; 28] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ1_S,
        GgmlType::IQ4_NL,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_XS,
        GgmlType::IQ1_M,
        GgmlType::BF16,
        GgmlType::Q1_0,
        GgmlType::Q2_0,
        GgmlType::IQ2_SX,
        GgmlType::IQ3_SX,
        GgmlType::Q3_KX,
        GgmlType::Q6_KX,
    ];

    /// The type of a GGUF tensor type id (not the load-time forms).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.iter().copied().find(|t| *t as u32 == id && !t.is_load_form())
    }

    /// A form the runtime makes from a file's type after loading (IQ2_SX, IQ3_SX, Q3_KX, Q6_KX:
    /// `kquants/forms.rs`), never read from a file.
    pub fn is_load_form(self) -> bool {
        matches!(self, GgmlType::IQ2_SX | GgmlType::IQ3_SX | GgmlType::Q3_KX | GgmlType::Q6_KX)
    }

    pub fn from_name(name: &str) -> Option<GgmlType> {
        GgmlType::ALL.iter().copied().find(|t| t.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            Q1_0 => "Q1_0",
            Q2_0 => "Q2_0",
            IQ2_SX => "IQ2_SX",
            IQ3_SX => "IQ3_SX",
            Q3_KX => "Q3_KX",
            Q6_KX => "Q6_KX",
        }
    }

    /// Elements per block.
    pub fn block_elems(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL => 32,
            Q2_0 => 64,
            Q1_0 => 128,
            _ => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            IQ4_NL => 18,
            Q1_0 => 18,
            Q2_0 => 18,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K | Q6_KX => 210,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ3_XXS => 98,
            IQ1_S => 50,
            IQ3_S => 110,
            IQ2_S => 82,
            IQ2_SX => 138,
            IQ3_SX => 134,
            Q3_KX => 146,
            IQ4_XS => 136,
            IQ1_M => 56,
        }
    }

    /// Bytes of a row of `n` elements (`n` must be a multiple of the block size).
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block_elems() * self.block_bytes()
    }

    pub fn is_float(self) -> bool {
        matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
    }

    /// What llama.cpp converts the f32 activation row to before the dot product (`vec_dot_type`).
    pub fn act_kind(self) -> ActKind {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 => ActKind::F32,
            Q4_0 | Q5_0 | Q8_0 | IQ4_NL | Q1_0 | Q2_0 => ActKind::Q8_0,
            Q4_1 | Q5_1 => ActKind::Q8_1,
            _ => ActKind::Q8K,
        }
    }

    /// Elements per float scale of the prompt GEMM's decoded form ([`gemm::Decoded`]): the
    /// activation block, 256 for Q8_K and 32 for Q8_0 / Q8_1 activations.
    pub fn gemm_block(self) -> usize {
        match self.act_kind() {
            ActKind::Q8K => QK_K,
            _ => 32,
        }
    }

    /// Whether the type has an additive per-block term (`- dmin·min` or `+ m`), which the decoded
    /// form keeps as integer mins per 16 elements and a float factor per block.
    pub fn has_min(self) -> bool {
        use GgmlType::*;
        matches!(self, Q4_1 | Q5_1 | Q2_K | Q4_K | Q5_K)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `decode(row, out)`: see [`QuantKernels::decode`]. `out` must be sized for the row
/// ([`gemm::Decoded::resize`]).
pub type DecodeRow = fn(row: &[u8], out: &mut gemm::Decoded);

/// The kernels of one quantized block type. See the module docs for the contract.
pub struct QuantKernels {
    pub ty: GgmlType,
    /// Scalar reference dequantiser: `row` holds `out.len() / block_elems` whole blocks.
    pub dequantize: fn(row: &[u8], out: &mut [f32]),
    /// Scalar reference dot product of a weight row with an activation row of the same length.
    pub vec_dot_ref: fn(row: &[u8], act: Q8<'_>) -> f32,
    /// The fast dot product (SIMD128 on wasm32; may be the reference natively).
    pub vec_dot: fn(row: &[u8], act: Q8<'_>) -> f32,
    /// Scalar reference of the GEMM row decoder: `w[i] = d[i/KB]·q[i] + m[i/KB]·mn[i/16]`,
    /// exactly (see [`gemm::Decoded`]).
    pub decode_ref: DecodeRow,
    /// The fast row decoder (SIMD128 on wasm32; the reference natively); equals `decode_ref`.
    pub decode: DecodeRow,
    /// Turns random bytes into a valid block (finite fp16 scales of a sane magnitude) for tests.
    pub sanitize: fn(block: &mut [u8]),
}

/// The kernel entry of a quantized type (`None` for float types and for families not linked in).
pub fn kernels(ty: GgmlType) -> Option<&'static QuantKernels> {
    [
        lowbit::KERNELS,
        legacy::KERNELS,
        kquants::KERNELS,
        iq2::KERNELS,
        iq3::KERNELS,
        iq1::KERNELS,
    ]
    .into_iter()
    .flatten()
    .find(|k| k.ty == ty)
}

/// Whether this build can run a tensor of this type.
pub fn is_supported(ty: GgmlType) -> bool {
    ty.is_float() || kernels(ty).is_some()
}

/// Dequantises a whole row of any supported type to f32 (`out.len()` elements).
pub fn dequantize_row(ty: GgmlType, row: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => float::to_f32(ty, row, out),
        _ => (kernels(ty).expect("unsupported type").dequantize)(row, out),
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers shared by the family files.

/// fp16 (little-endian, at `b[0..2]`) → f32.
#[inline(always)]
pub fn f16_at(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

/// fp16 bits → f32, exact for every value (normals, subnormals, ±0, ±inf, NaN), branch-free, and
/// without a float operation on a subnormal operand (x86 handles those in microcode, far slower
/// than an ordinary one, and wasm cannot turn that off; real files' fp16 scales are often
/// subnormal: a Q6_K block's `d` is about max|w| / 4064, ~2·10⁻⁵ for weights of RMS 0.02, below
/// fp16's smallest normal 6.1·10⁻⁵). The classic "half to float" bit method, also for the SIMD
/// [`simd::f16_lanes`]: the 15 magnitude bits moved to the f32 position and the exponent re-biased
/// by an add (+112); a subnormal's value m·2⁻²⁴ is that pattern re-biased one step further (2⁻¹⁴ +
/// m·2⁻²⁴, a normal f32) minus 2⁻¹⁴; exponent 31 (inf, NaN) gets an all-ones exponent.
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let o = (h & 0x7fff) << 13; // exponent + mantissa in f32 position
    let normal = o + 0x3800_0000; // (127 − 15) << 23
    let sub = (f32::from_bits(o + 0x3880_0000) - f32::from_bits(0x3880_0000)).to_bits();
    let is_sub = ((o < 0x0080_0000) as u32).wrapping_neg();
    let special = ((o >= 0x0f80_0000) as u32).wrapping_neg() & 0x7f80_0000;
    f32::from_bits((sub & is_sub) | (normal & !is_sub) | special | (h & 0x8000) << 16)
}

/// Writes a finite fp16 of magnitude in [2^-12, 2^-4) with a random sign taken from the old bits.
/// Used by the `sanitize` functions so random test blocks have realistic scales.
pub fn sanitize_f16(b: &mut [u8], off: usize) {
    let old = u16::from_le_bytes([b[off], b[off + 1]]);
    let mant = old & 0x03ff;
    let exp = 3 + (old >> 10) % 8; // biased exponent 3..10 → 2^-12 .. 2^-5
    let sign = old & 0x8000;
    let v = sign | (exp << 10) | mant;
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Like [`sanitize_f16`] but non-negative (for `dmin`-like fields that are positive in practice;
/// the kernels must still be right for any sign, so use it only where ggml's quantiser guarantees it).
pub fn sanitize_f16_pos(b: &mut [u8], off: usize) {
    sanitize_f16(b, off);
    b[off + 1] &= 0x7f;
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod simd {
    //! SIMD128 helpers shared by the family kernels.
    use core::arch::wasm32::*;

    /// `256 · Σ w·a` (i32x4 partial sums, each lane a multiple of 256) for 16 signed weight bytes
    /// and 16 activations, both in element order, with SIMD128's i16 products: the even bytes
    /// moved to the high byte (×256) against the even activations sign-extended, the odd bytes
    /// masked in place (`hi8` = `u16x8_splat(0xff00)`: ×256) against the odd activations.
    #[inline(always)]
    pub fn dot16_x256(w: v128, a: v128, hi8: v128) -> v128 {
        let even = i32x4_dot_i16x8(i16x8_shl(w, 8), i16x8_shr(i16x8_shl(a, 8), 8));
        let odd = i32x4_dot_i16x8(v128_and(w, hi8), i16x8_shr(a, 8));
        i32x4_add(even, odd)
    }

    /// `|kv|` and the sign masks (−1 where `kv < 0`) of IQ4_NL's codebook, for
    /// [`rdot16_signed`].
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub fn iq4nl_sign_tables() -> (v128, v128) {
        let kv = super::tables::KVALUES_IQ4NL;
        let abs: [u8; 16] = core::array::from_fn(|i| kv[i].unsigned_abs());
        let neg: [i8; 16] = core::array::from_fn(|i| if kv[i] < 0 { -1 } else { 0 });
        // SAFETY: both arrays are 16 bytes.
        unsafe { (v128_load(abs.as_ptr() as *const v128), v128_load(neg.as_ptr() as *const v128)) }
    }

    /// Pairwise i16 sums of `kv[idx]·a` for 16 signed codebook values (indices `idx` < 16):
    /// `|kv|·((a ^ m) − m)` with `m` = −1 where `kv < 0` — both looked up from the index, so the
    /// sign costs an `xor` and a `sub` (activations are never −128: the negation is exact).
    #[cfg(target_feature = "relaxed-simd")]
    #[inline(always)]
    pub fn rdot16_signed(idx: v128, a: v128, kabs: v128, kneg: v128) -> v128 {
        let m = i8x16_relaxed_swizzle(kneg, idx);
        i16x8_relaxed_dot_i8x16_i7x16(i8x16_sub(v128_xor(a, m), m), i8x16_relaxed_swizzle(kabs, idx))
    }

    /// Sum of the four i32 lanes.
    #[inline(always)]
    pub fn hsum_i32(v: v128) -> i32 {
        i32x4_extract_lane::<0>(v)
            + i32x4_extract_lane::<1>(v)
            + i32x4_extract_lane::<2>(v)
            + i32x4_extract_lane::<3>(v)
    }

    /// Sum of the four f32 lanes.
    #[inline(always)]
    pub fn hsum_f32(v: v128) -> f32 {
        f32x4_extract_lane::<0>(v)
            + f32x4_extract_lane::<1>(v)
            + f32x4_extract_lane::<2>(v)
            + f32x4_extract_lane::<3>(v)
    }

    /// f32 of the fp16 in the low 16 bits of every i32 lane of `h` (the upper bits are ignored):
    /// every block scale of every type goes through here. [`super::f16_bits_to_f32`] in four
    /// lanes: exact for every input, and no float operation sees a subnormal operand.
    #[inline(always)]
    pub fn f16_lanes(h: v128) -> v128 {
        // The constants come from memory through an opaque pointer: V8 rebuilds a v128 constant
        // from a 64-bit immediate at every use (three instructions), a load is one.
        let c = F16_CONSTS.get();
        let o = u32x4_shr(i32x4_shl(h, 17), 4); // exponent + mantissa in f32 position
        let normal = i32x4_add(o, c[0]);
        let sub = f32x4_sub(i32x4_add(o, c[1]), c[1]); // c[1] as f32: 2⁻¹⁴
        let v = v128_bitselect(sub, normal, i32x4_lt(o, c[2]));
        let special = v128_and(i32x4_ge(o, c[3]), c[4]);
        v128_or(v128_or(v, special), v128_and(i32x4_shl(h, 16), c[5]))
    }

    /// [`f16_lanes`]'s constants, read through [`OpaqueConsts::get`].
    static F16_CONSTS: OpaqueConsts<6> = OpaqueConsts([
        [0x3800_0000; 4],
        [0x3880_0000; 4],
        [0x0080_0000; 4],
        [0x0f80_0000; 4],
        [0x7f80_0000; 4],
        [i32::MIN as u32; 4],
    ]);

    /// v128 constants kept in memory and read through a pointer the compilers cannot see
    /// through, so that each use is one load rather than a constant rebuilt by V8.
    #[repr(C, align(16))]
    struct OpaqueConsts<const N: usize>([[u32; 4]; N]);

    impl<const N: usize> OpaqueConsts<N> {
        #[inline(always)]
        fn get(&'static self) -> [v128; N] {
            let p = core::hint::black_box(self.0.as_ptr() as *const v128);
            // SAFETY: `p` points at N aligned 16-byte values of this static.
            core::array::from_fn(|i| unsafe { v128_load(p.add(i)) })
        }
    }

    /// The four f32 lanes of `v`.
    #[inline(always)]
    pub fn lanes(v: v128) -> [f32; 4] {
        [
            f32x4_extract_lane::<0>(v),
            f32x4_extract_lane::<1>(v),
            f32x4_extract_lane::<2>(v),
            f32x4_extract_lane::<3>(v),
        ]
    }

    /// Transpose of a 4×4 matrix of 32-bit lanes: `out[l]` = lane l of `v[0..4]` (its own inverse).
    #[inline(always)]
    pub fn transpose4(v: [v128; 4]) -> [v128; 4] {
        let t0 = i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]);
        let t1 = i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]);
        let t2 = i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]);
        let t3 = i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]);
        [
            i32x4_shuffle::<0, 1, 4, 5>(t0, t2),
            i32x4_shuffle::<2, 3, 6, 7>(t0, t2),
            i32x4_shuffle::<0, 1, 4, 5>(t1, t3),
            i32x4_shuffle::<2, 3, 6, 7>(t1, t3),
        ]
    }

    /// Stores the 16 signed bytes of `q` times the i16 splat `sc` as 16 i16 at `out` (the last
    /// step of every SIMD row decoder: codes in element order × their sub-block scale).
    ///
    /// # Safety
    /// `out..out+16` must be writable; the products must fit i16.
    #[inline(always)]
    pub unsafe fn store_scaled16(out: *mut i16, q: v128, sc: v128) {
        v128_store(out as *mut v128, i16x8_mul(i16x8_extend_low_i8x16(q), sc));
        v128_store(out.add(8) as *mut v128, i16x8_mul(i16x8_extend_high_i8x16(q), sc));
    }

    /// Stores the 16 signed bytes of `q` sign-extended as 16 i16 at `out`.
    ///
    /// # Safety
    /// `out..out+16` must be writable.
    #[inline(always)]
    pub unsafe fn store_i8x16(out: *mut i16, q: v128) {
        v128_store(out as *mut v128, i16x8_extend_low_i8x16(q));
        v128_store(out.add(8) as *mut v128, i16x8_extend_high_i8x16(q));
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// `half`'s conversion of an fp16 bit pattern, and whether `got` is the same f32 (NaN ⇔ NaN:
    /// `half` sets the quiet bit of signalling NaNs, which does not matter here).
    fn same_as_half(h: u16, got: f32) -> bool {
        let want = half::f16::from_bits(h).to_f32();
        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
    }

    /// The scalar conversion is exact for all 65,536 fp16 values (subnormals, ±0, ±inf, NaN).
    #[test]
    fn f16_bits_to_f32_is_exact() {
        for h in 0..=u16::MAX {
            let got = super::f16_bits_to_f32(h);
            assert!(same_as_half(h, got), "fp16 {h:#06x}: {got}");
        }
    }

    /// So is the four-lane one, which ignores the upper half of each lane.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[test]
    fn f16_lanes_is_exact() {
        use core::arch::wasm32::*;
        for h in 0..=u16::MAX {
            let v = super::simd::f16_lanes(u32x4_splat(h as u32 | 0xabcd_0000));
            let got = f32x4_extract_lane::<3>(v);
            assert!(same_as_half(h, got), "fp16 {h:#06x}: {got}");
        }
    }
}
