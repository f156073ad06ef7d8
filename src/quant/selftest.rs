//! The kernels checked against their scalar references in the build and the engine that run them.
//!
//! `tests/kernels.rs` does this in Node for both wasm builds, but the browser that finally runs the
//! relaxed-SIMD build has its own code generator (Node 20's V8 miscomputes an instruction that
//! Chromium gets right, see `quant/mod.rs`). [`check_kernels`] repeats the essential checks anywhere
//! — the browser tests call it in Chromium for both builds (`kernelSelfTest` in `wasm.rs`), and
//! `clef self-test` prints it — on random valid blocks and on the integer extremes:
//! * `vec_dot` equals `vec_dot_ref` within f32 summation order (relative to Σ|w·a|);
//! * `decode` (the prompt GEMM's row decoder) equals `decode_ref` bit for bit;
//! * for the types with an int8 prompt GEMM (`gemm8`, what the relaxed-SIMD build runs): its
//!   decoder equals its reference bit for bit (counted with the decoder mismatches), and the int8
//!   GEMM of the row (2 rows × 4 tokens, in tiles of 2 and of 4: both profiles) equals
//!   `vec_dot_ref` within the same bound as `vec_dot` (counted in `max_dot_err`) — on the extreme
//!   blocks this is where an i16 sum would saturate; where the engine runs the dot-add form
//!   ([`gemm8::quad_add_exact`]), it gives the pair form's results bit for bit (a difference
//!   counts as a decoder mismatch);
//! * for the types with a four-rows-interleaved form ([`super::r4`]): the row and three variants of
//!   it (bytes shifted, re-sanitized) interleaved; un-interleaving gives them back byte for byte
//!   (a mismatch counts as a decoder mismatch) and `vec_dot4` equals each row's `vec_dot_ref`
//!   within the same bound (in `max_dot_err`); `vec_dot4_n` on 1–4 activation rows (the row's
//!   activations, negated, rotated, reversed) equals `vec_dot4` on each, bit for bit, and where
//!   [`r4::STREAMED`], `vec_dot4` one block at a time with its sums carried equals it on the whole
//!   rows, bit for bit (a mismatch counts as a decoder mismatch).

use super::gemm::Decoded;
use super::gemm8::{self, Decoded8, Gemm8Scratch, PackedAct8};
use super::r4;
use super::{kernels, quantize_q8, GgmlType, QAct, QuantKernels, Q8};

/// The outcome for one type.
#[derive(Clone, Debug)]
pub struct KernelCheck {
    pub ty: GgmlType,
    /// Rows checked (random + extreme).
    pub rows: usize,
    /// Largest |vec_dot − vec_dot_ref| / Σ|w·a| seen (and the same for the int8 GEMM).
    pub max_dot_err: f64,
    /// Rows whose fast decoder output differed from the reference decoder (either form).
    pub decode_mismatches: usize,
}

impl KernelCheck {
    /// The bound the kernel tests use: integer sums are exact, only the f32 folding differs.
    pub const MAX_DOT_ERR: f64 = 2e-6;

    pub fn ok(&self) -> bool {
        self.max_dot_err < Self::MAX_DOT_ERR && self.decode_mismatches == 0
    }
}

/// xorshift64*: reproducible bytes and activations without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [−1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Checks every quantized type: `random_rows` rows of 1..=9 blocks of random valid bytes against
/// random activations, then rows of all-equal bytes (0x00, 0x7F, 0x80, 0xFF, 0x55, 0xAA) against
/// activations of all +127, all −127 and alternating ±127.
pub fn check_kernels(random_rows: usize, seed: u64) -> Vec<KernelCheck> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    for ty in GgmlType::ALL {
        let Some(k) = kernels(ty) else { continue };
        let mut act = QAct::default();
        let (mut want, mut got) = (Decoded::default(), Decoded::default());
        let mut w = Vec::new();
        let k8 = gemm8::kernels8(ty);
        let (mut want8, mut got8) = (Decoded8::default(), Decoded8::default());
        let (mut act2, mut packed8, mut scratch8) = (QAct::default(), PackedAct8::default(), Gemm8Scratch::default());
        let mut check = KernelCheck { ty, rows: 0, max_dot_err: 0.0, decode_mismatches: 0 };
        let mut run = |row: &[u8], x: &[f32], check: &mut KernelCheck| {
            let n = x.len();
            quantize_q8(ty.act_kind(), x, n, &mut act);
            let a = act.row(0);
            w.resize(n, 0.0);
            (k.dequantize)(row, &mut w);
            let scale: f64 = (0..n).map(|i| (w[i] as f64 * a.value(i) as f64).abs()).sum::<f64>() + 1e-30;
            let err = ((k.vec_dot)(row, a) as f64 - (k.vec_dot_ref)(row, a) as f64).abs() / scale;
            check.max_dot_err = check.max_dot_err.max(err);
            want.resize(ty, n);
            got.resize(ty, n);
            (k.decode_ref)(row, &mut want);
            got.q.fill(!0x5555); // a decoder must write every element
            (k.decode)(row, &mut got);
            let same_f32 = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
            if got.q != want.q || got.mn != want.mn || !same_f32(&got.d, &want.d) || !same_f32(&got.m, &want.m) {
                check.decode_mismatches += 1;
            }
            if let Some(k8) = k8 {
                want8.resize(n);
                got8.resize(n);
                (k8.decode_ref)(row, &mut want8);
                got8.u.fill(0xaa);
                (k8.decode)(row, &mut got8);
                let same = got8.u == want8.u && got8.sc == want8.sc && got8.mn == want8.mn;
                if !same || !same_f32(&got8.d, &want8.d) || !same_f32(&got8.m, &want8.m) {
                    check.decode_mismatches += 1;
                }
                // The row twice × the activations four times, in tiles of 2 and of 4 tokens (both
                // profiles): every result is the row's dot product.
                let two: Vec<u8> = [row, row].concat();
                let x4: Vec<f32> = [x, x, x, x].concat();
                quantize_q8(ty.act_kind(), &x4, n, &mut act2);
                let reference = (k.vec_dot_ref)(row, a) as f64;
                for tile in [2, 4] {
                    packed8.pack_tiles(&act2, tile, false, k8);
                    let mut y = [0.0f32; 8];
                    gemm8::gemm_rows(k8, r4::Rows::plain(&two), 0..2, &packed8, &mut scratch8, &mut y, 2);
                    for v in y {
                        check.max_dot_err = check.max_dot_err.max((v as f64 - reference).abs() / scale);
                    }
                    // The dot-add form where this engine runs it: the same bits.
                    if gemm8::quad_add_exact() {
                        packed8.pack_tiles(&act2, tile, true, k8);
                        let mut yq = [0.0f32; 8];
                        gemm8::gemm_rows(k8, r4::Rows::plain(&two), 0..2, &packed8, &mut scratch8, &mut yq, 2);
                        if y.iter().zip(&yq).any(|(a, b)| a.to_bits() != b.to_bits()) {
                            check.decode_mismatches += 1;
                        }
                        // And the scaled form, the dot-add form of a type that has one.
                        if k8.scaled.is_some() {
                            packed8.pack_scaled_tiles(&act2, tile, k8);
                            gemm8::gemm_rows(k8, r4::Rows::plain(&two), 0..2, &packed8, &mut scratch8, &mut yq, 2);
                            if y.iter().zip(&yq).any(|(a, b)| a.to_bits() != b.to_bits()) {
                                check.decode_mismatches += 1;
                            }
                        }
                    }
                }
            }
            if let Some(k4) = r4::r4_kernels(ty) {
                check_r4(k, k4, row, x, check);
            }
            check.rows += 1;
        };
        let elems = ty.block_elems().max(32);
        for r in 0..random_rows {
            let n = elems * (1 + r % 9);
            let mut row = vec![0u8; ty.row_bytes(n)];
            row.iter_mut().for_each(|b| *b = (rng.next() >> 56) as u8);
            for blk in row.chunks_exact_mut(ty.block_bytes()) {
                (k.sanitize)(blk);
            }
            let x: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
            run(&row, &x, &mut check);
        }
        let n = elems * 3;
        for byte in [0x00u8, 0x7f, 0x80, 0xff, 0x55, 0xaa] {
            let mut row = vec![byte; ty.row_bytes(n)];
            for blk in row.chunks_exact_mut(ty.block_bytes()) {
                (k.sanitize)(blk);
            }
            for pattern in 0..3 {
                let x: Vec<f32> = (0..n)
                    .map(|i| match pattern {
                        0 => 1.0,
                        1 => -1.0,
                        _ if i % 2 == 0 => 1.0,
                        _ => -1.0,
                    })
                    .collect();
                run(&row, &x, &mut check);
            }
        }
        out.push(check);
    }
    out
}

/// The R4 checks of one row: `row` and three variants of it interleaved, un-interleaved,
/// multiplied with the activations `x` (and with three variants of them, four tokens at once).
fn check_r4(k: &QuantKernels, k4: &r4::R4Kernels, row: &[u8], x: &[f32], check: &mut KernelCheck) {
    let bb = k.ty.block_bytes();
    let mut plain = Vec::with_capacity(r4::R * row.len());
    for v in 0..r4::R as u8 {
        let start = plain.len();
        plain.extend(row.iter().map(|&b| b.wrapping_add(v.wrapping_mul(37))));
        for blk in plain[start..].chunks_exact_mut(bb) {
            (k.sanitize)(blk);
        }
    }
    let mut rows4 = vec![0u8; plain.len()];
    r4::pack_rows(k4, &plain, &mut rows4);
    let mut back = vec![0u8; plain.len()];
    r4::unpack_rows(k4, &rows4, &mut back);
    if back != plain {
        check.decode_mismatches += 1;
    }
    let n = x.len();
    let mut xs: Vec<f32> = x.to_vec();
    xs.extend(x.iter().map(|v| -v));
    xs.extend(x.iter().cycle().skip(1).take(n));
    xs.extend(x.iter().rev());
    let mut act = QAct::default();
    quantize_q8(k.ty.act_kind(), &xs, n, &mut act);
    let a = act.row(0);
    let got = (k4.vec_dot4)(&rows4, a, [0.0; r4::R]);
    let mut w = vec![0.0f32; n];
    for (r, p) in plain.chunks_exact(row.len()).enumerate() {
        (k.dequantize)(p, &mut w);
        let scale: f64 = (0..n).map(|i| (w[i] as f64 * a.value(i) as f64).abs()).sum::<f64>() + 1e-30;
        let want = (k.vec_dot_ref)(p, a) as f64;
        check.max_dot_err = check.max_dot_err.max((got[r] as f64 - want).abs() / scale);
    }
    // One block at a time, the sums carried (`r4::matvec_streams`): the whole rows' bits.
    if r4::STREAMED {
        let (bb4, qk) = (r4::R * bb, k.ty.block_elems());
        for form in std::iter::once(k4).chain(k4.usable_alt()) {
            let mut acc = [0.0f32; r4::R];
            for (b, blk) in rows4.chunks_exact(bb4).enumerate() {
                acc = (form.vec_dot4)(blk, a.slice(b * qk, qk), acc);
            }
            if acc.map(f32::to_bits) != got.map(f32::to_bits) {
                check.decode_mismatches += 1;
            }
        }
    }
    let acts: Vec<Q8<'_>> = (0..r4::MAX_TOKENS).map(|t| act.row(t)).collect();
    let one: Vec<[f32; r4::R]> = acts.iter().map(|&a| (k4.vec_dot4)(&rows4, a, [0.0; r4::R])).collect();
    let mut many = [[0.0f32; r4::R]; r4::MAX_TOKENS];
    for c in 1..=r4::MAX_TOKENS {
        many.iter_mut().for_each(|o| *o = [f32::NAN; r4::R]);
        (k4.vec_dot4_n)(&rows4, &acts[..c], &mut many[..c]);
        let same = many[..c].iter().zip(&one).all(|(m, o)| m.iter().zip(o).all(|(p, q)| p.to_bits() == q.to_bits()));
        if !same {
            check.decode_mismatches += 1;
        }
        // The second form, where the type has one: the same results bit for bit.
        if let Some(alt) = k4.usable_alt() {
            many.iter_mut().for_each(|o| *o = [f32::NAN; r4::R]);
            (alt.vec_dot4_n)(&rows4, &acts[..c], &mut many[..c]);
            let same_n = many[..c].iter().zip(&one).all(|(m, o)| m.iter().zip(o).all(|(p, q)| p.to_bits() == q.to_bits()));
            let same_1 = acts[..c].iter().zip(&one).all(|(&a, o)| (alt.vec_dot4)(&rows4, a, [0.0; r4::R]).iter().zip(o).all(|(p, q)| p.to_bits() == q.to_bits()));
            if !same_n || !same_1 || alt.ty != k4.ty || alt.fields.len() != k4.fields.len() {
                check.decode_mismatches += 1;
            }
        }
    }
}
