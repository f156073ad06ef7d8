//! Every quantized type against its references, natively and in wasm (Node runs the SIMD128 code):
//! * the scalar dequantiser equals gguf-py's numpy dequantiser bit for bit (tests/golden, made by
//!   tools/gen_golden.py; Q1_0/Q2_0 against the spec formulas there);
//! * the scalar dot product equals Σ dequant(w)·dequant(a) computed in f64;
//! * the fast (SIMD128) dot product equals the scalar one on thousands of random blocks;
//! * the GEMM row decoder (`decode_ref`) reproduces the dequantised weights exactly, the fast
//!   decoder (`decode`, SIMD128 in wasm) equals it bit for bit, and the prompt GEMM over decoded
//!   rows and packed activations equals the f64 reference for every row and token (rows of 1..9
//!   blocks, 1..7 rows, 2..9 tokens: every token-tile and row-pair tail);
//! * the int8 prompt GEMM (`gemm8`, the relaxed-SIMD build's): its reference decoder reproduces the
//!   dequantised weights exactly, its fast decoder equals the reference byte for byte, and its
//!   GEMM equals the f64 reference for every tile shape, on random blocks and on the blocks with
//!   the largest codes against ±127 activations (where an i16 sum would saturate first).

use clef_web::quant::gemm::{self, Decoded, GemmScratch, PackedAct};
use clef_web::quant::gemm8::{self, Decoded8, Gemm8Scratch, PackedAct8};
use clef_web::quant::r4::Rows;
use clef_web::quant::{self, kernels, quantize_q8, GgmlType, QAct, QuantKernels};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const GOLDEN: &[(GgmlType, &[u8])] = &[
    (GgmlType::Q4_0, include_bytes!("golden/Q4_0.bin")),
    (GgmlType::Q4_1, include_bytes!("golden/Q4_1.bin")),
    (GgmlType::Q5_0, include_bytes!("golden/Q5_0.bin")),
    (GgmlType::Q5_1, include_bytes!("golden/Q5_1.bin")),
    (GgmlType::Q8_0, include_bytes!("golden/Q8_0.bin")),
    (GgmlType::IQ4_NL, include_bytes!("golden/IQ4_NL.bin")),
    (GgmlType::Q2_K, include_bytes!("golden/Q2_K.bin")),
    (GgmlType::Q3_K, include_bytes!("golden/Q3_K.bin")),
    (GgmlType::Q4_K, include_bytes!("golden/Q4_K.bin")),
    (GgmlType::Q5_K, include_bytes!("golden/Q5_K.bin")),
    (GgmlType::Q6_K, include_bytes!("golden/Q6_K.bin")),
    (GgmlType::IQ4_XS, include_bytes!("golden/IQ4_XS.bin")),
    (GgmlType::IQ2_XXS, include_bytes!("golden/IQ2_XXS.bin")),
    (GgmlType::IQ2_XS, include_bytes!("golden/IQ2_XS.bin")),
    (GgmlType::IQ2_S, include_bytes!("golden/IQ2_S.bin")),
    (GgmlType::IQ3_XXS, include_bytes!("golden/IQ3_XXS.bin")),
    (GgmlType::IQ3_S, include_bytes!("golden/IQ3_S.bin")),
    (GgmlType::IQ1_S, include_bytes!("golden/IQ1_S.bin")),
    (GgmlType::IQ1_M, include_bytes!("golden/IQ1_M.bin")),
    (GgmlType::Q1_0, include_bytes!("golden/Q1_0.bin")),
    (GgmlType::Q2_0, include_bytes!("golden/Q2_0.bin")),
];

/// xorshift64* — deterministic, dependency-free test randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, out: &mut [u8]) {
        for b in out {
            *b = (self.next() >> 56) as u8;
        }
    }
    /// Roughly Gaussian-ish activations with occasional outliers, like real hidden states.
    fn act(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                let big = self.next() % 61 == 0;
                if big {
                    u * 40.0
                } else {
                    u * 3.0
                }
            })
            .collect()
    }
}

#[test]
fn dequantizers_match_gguf_py_golden_vectors() {
    for &(ty, bin) in GOLDEN {
        let Some(k) = kernels(ty) else {
            eprintln!("skip {ty}: no kernels linked");
            continue;
        };
        let nb = u32::from_le_bytes(bin[0..4].try_into().unwrap()) as usize;
        let raw = &bin[4..4 + nb * ty.block_bytes()];
        let want: Vec<f32> = bin[4 + raw.len()..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(want.len(), nb * ty.block_elems());
        let mut got = vec![0.0f32; want.len()];
        (k.dequantize)(raw, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits(), "{ty}: element {i}: got {g}, gguf-py {w}");
        }
    }
}

/// Random rows of every type: fast dot == scalar dot == f64 reference; the decoded GEMM form ==
/// dequantize, fast decoder == reference decoder, and the decoded row's reference product ==
/// the f64 reference.
/// Row lengths cycle through 1..=9 blocks so every unrolled loop's tail runs too.
#[test]
fn dot_products_agree_on_random_blocks() {
    let rows = if cfg!(debug_assertions) { 60 } else { 500 };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for ty in GgmlType::ALL {
        let Some(k) = kernels(ty) else {
            if !ty.is_float() {
                eprintln!("skip {ty}: no kernels linked");
            }
            continue;
        };
        let mut act = QAct::default();
        for r in 0..rows {
            let n = ty.block_elems().max(32) * (1 + r % 9);
            let mut row = vec![0u8; ty.row_bytes(n)];
            let mut w = vec![0.0f32; n];
            rng.bytes(&mut row);
            for blk in row.chunks_exact_mut(ty.block_bytes()) {
                (k.sanitize)(blk);
            }
            let x = rng.act(n);
            quantize_q8(ty.act_kind(), &x, n, &mut act);
            let a = act.row(0);

            (k.dequantize)(&row, &mut w);
            assert!(w.iter().all(|v| v.is_finite()), "{ty}: sanitize left a non-finite weight");
            let exact: f64 = (0..n).map(|i| w[i] as f64 * a.value(i) as f64).sum();
            let scale: f64 = (0..n).map(|i| (w[i] as f64 * a.value(i) as f64).abs()).sum::<f64>() + 1e-30;

            let reference = (k.vec_dot_ref)(&row, a);
            let fast = (k.vec_dot)(&row, a);
            let err_ref = (reference as f64 - exact).abs() / scale;
            let err_fast = (fast as f64 - reference as f64).abs() / scale;
            assert!(err_ref < 2e-6, "{ty} row {r}: scalar dot {reference} vs exact {exact} (rel {err_ref:e})");
            assert!(err_fast < 2e-6, "{ty} row {r}: fast dot {fast} vs scalar {reference} (rel {err_fast:e})");

            let dec = decode_checked(k, &row, &w, r);
            let g = gemm::dot_ref(&dec, ty.gemm_block(), a);
            assert!((g as f64 - exact).abs() / scale < 2e-6, "{ty} row {r}: decoded dot {g} vs {exact}");
        }
    }
}

/// The integer extremes that random blocks rarely combine — every weight byte 0x00 / 0x7F / 0x80 /
/// 0xFF / 0x55 / 0xAA against activations of all +127, all −127 or alternating ±127, where an i16
/// partial sum could saturate or a relaxed-SIMD operand leave the 7-bit range — plus random rows,
/// through the engine's own self-test (`quant::selftest`, what `clef self-test` and the browser
/// test run): fast dot = scalar dot, fast decoder = reference decoder, for every type.
#[test]
fn self_test_passes_on_random_and_extreme_blocks() {
    let checks = quant::selftest::check_kernels(60, 0x5eed);
    assert!(checks.len() >= 21, "{} types checked", checks.len());
    for c in &checks {
        assert!(c.rows > 18, "{}: {} rows", c.ty, c.rows);
        assert!(c.ok(), "{}: max dot error {:e}, {} decoder mismatches", c.ty, c.max_dot_err, c.decode_mismatches);
    }
}

/// Decodes `row` with the reference and the fast decoder; checks that the reference form
/// reproduces the dequantised weights `w` exactly and that the fast decoder equals it bit for bit.
fn decode_checked(k: &QuantKernels, row: &[u8], w: &[f32], r: usize) -> Decoded {
    let ty = k.ty;
    let (mut want, mut got) = (Decoded::default(), Decoded::default());
    want.resize(ty, w.len());
    got.resize(ty, w.len());
    // Garbage first: a decoder must write every element.
    want.q.fill(0x5555);
    got.q.fill(-0x5555);
    (k.decode_ref)(row, &mut want);
    (k.decode)(row, &mut got);
    let kb = ty.gemm_block();
    for (i, &wi) in w.iter().enumerate() {
        let v = want.value(kb, i);
        assert!(v == wi, "{ty} row {r} elem {i}: decoded {v} (q {}) vs dequantized {wi}", want.q[i]);
    }
    assert_eq!(got.q, want.q, "{ty} row {r}: fast decoder weights differ from the reference");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got.d), bits(&want.d), "{ty} row {r}: fast decoder scales differ");
    assert_eq!(bits(&got.m), bits(&want.m), "{ty} row {r}: fast decoder min factors differ");
    assert_eq!(got.mn, want.mn, "{ty} row {r}: fast decoder mins differ");
    want
}

/// `y` (tokens × (rows + 1), row r of token t at `1 + t·(rows + 1) + r`, column 0 NaN) against the
/// f64 reference Σ dequant(w)·dequant(a) of the rows `data` of `k`'s type and the activations.
fn assert_gemm_exact(k: &QuantKernels, data: &[u8], act: &QAct, y: &[f32], what: &str) {
    let (n, tokens) = (act.n, act.rows);
    let rows = data.len() / k.ty.row_bytes(n);
    let mut w = vec![0.0f32; n];
    for (r, row) in data.chunks_exact(k.ty.row_bytes(n)).enumerate() {
        (k.dequantize)(row, &mut w);
        for t in 0..tokens {
            let a = act.row(t);
            let exact: f64 = (0..n).map(|i| w[i] as f64 * a.value(i) as f64).sum();
            let scale: f64 = (0..n).map(|i| (w[i] as f64 * a.value(i) as f64).abs()).sum::<f64>() + 1e-30;
            let got = y[1 + t * (rows + 1) + r];
            let err = (got as f64 - exact).abs() / scale;
            assert!(err < 2e-6, "{what} ({rows} rows × {tokens} tokens × {n}): row {r} token {t}: {got} vs {exact}");
        }
    }
    for t in 0..tokens {
        assert!(y[t * (rows + 1)].is_nan(), "{what}: gemm wrote outside its rows");
    }
}

/// The prompt GEMM: several random rows × several tokens of every type against the f64
/// reference Σ dequant(w)·dequant(a), through every tile shape (1..7 rows: row pairs and a single
/// row; 2..9 tokens: tiles of 4 and tails of 1..3).
#[test]
fn gemm_agrees_on_random_blocks() {
    let cases = if cfg!(debug_assertions) { 8 } else { 40 };
    let mut rng = Rng(0x51ed_2705_89ab_cdef);
    for ty in GgmlType::ALL {
        let Some(k) = kernels(ty) else { continue };
        let (mut act, mut packed, mut scratch) = (QAct::default(), PackedAct::default(), GemmScratch::default());
        for case in 0..cases {
            let n = ty.block_elems().max(32) * (1 + case % 9);
            let (rows, tokens) = (1 + case % 7, 2 + case % 8);
            let mut data = vec![0u8; rows * ty.row_bytes(n)];
            rng.bytes(&mut data);
            for blk in data.chunks_exact_mut(ty.block_bytes()) {
                (k.sanitize)(blk);
            }
            let x = rng.act(n * tokens);
            quantize_q8(ty.act_kind(), &x, n, &mut act);
            packed.pack(&act, ty.gemm_block());
            // Output rows 1..rows of a matrix with one more column than rows: gemm_rows must
            // leave column 0 (and only it) untouched.
            let mut y = vec![f32::NAN; tokens * (rows + 1)];
            gemm::gemm_rows(k, Rows::plain(&data), 0..rows, &packed, &mut scratch, &mut y[1..], rows + 1);
            assert_gemm_exact(k, &data, &act, &y, &format!("{ty} case {case}"));
        }
    }
}

/// The int8 decoders: `decode_ref` reproduces `dequantize` bit for bit, `decode` equals it.
#[test]
fn int8_decoders_agree_on_random_blocks() {
    let rows = if cfg!(debug_assertions) { 40 } else { 300 };
    let mut rng = Rng(0x0dd_c0de_5eed);
    let types: Vec<GgmlType> = GgmlType::ALL.into_iter().filter(|t| gemm8::kernels8(*t).is_some()).collect();
    assert!(types.len() >= 5, "int8 forms: {types:?}");
    for ty in types {
        let (k, k8) = (kernels(ty).unwrap(), gemm8::kernels8(ty).unwrap());
        let (mut want, mut got) = (Decoded8::default(), Decoded8::default());
        for r in 0..rows {
            let n = 256 * (1 + r % 5);
            let mut row = vec![0u8; ty.row_bytes(n)];
            rng.bytes(&mut row);
            for blk in row.chunks_exact_mut(ty.block_bytes()) {
                (k.sanitize)(blk);
            }
            let mut w = vec![0.0f32; n];
            (k.dequantize)(&row, &mut w);
            want.resize(n);
            got.resize(n);
            want.u.fill(0x55);
            got.u.fill(0xaa); // garbage first: a decoder must write every element
            (k8.decode_ref)(&row, &mut want);
            (k8.decode)(&row, &mut got);
            for (i, &wi) in w.iter().enumerate() {
                let v = want.value(i);
                assert!(v == wi, "{ty} row {r} elem {i}: int8 form {v} vs dequantized {wi} (−0 = 0)");
            }
            assert!(want.u.iter().all(|&u| u <= k8.umax), "{ty} row {r}: a code above umax {}", k8.umax);
            assert_eq!(got.u, want.u, "{ty} row {r}: fast int8 decoder codes differ");
            assert_eq!(got.sc, want.sc, "{ty} row {r}: scales differ");
            assert_eq!(got.mn, want.mn, "{ty} row {r}: mins differ");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.d), bits(&want.d), "{ty} row {r}: d differs");
            assert_eq!(bits(&got.m), bits(&want.m), "{ty} row {r}: m differs");
            // The scaled form: the reference's codes times their scales, every scale 1 — the
            // same weights.
            if let Some(scaled) = k8.scaled {
                got.u.fill(0xaa);
                scaled(&row, &mut got);
                want.scale_codes();
                assert_eq!(got.u, want.u, "{ty} row {r}: scaled codes differ");
                assert!(got.sc.iter().all(|&s| s == 1), "{ty} row {r}: scaled form's scales");
                assert_eq!(got.mn, want.mn, "{ty} row {r}: scaled form's mins differ");
                assert_eq!(bits(&got.d), bits(&want.d), "{ty} row {r}: scaled form's d differs");
                assert_eq!(bits(&got.m), bits(&want.m), "{ty} row {r}: scaled form's m differs");
                for (i, &wi) in w.iter().enumerate() {
                    assert!(got.value(i) == wi, "{ty} row {r} elem {i}: scaled form {} vs dequantized {wi}", got.value(i));
                }
            }
        }
    }
    assert!(GgmlType::ALL.into_iter().any(|t| gemm8::kernels8(t).is_some_and(|k| k.scaled.is_some())), "no scaled form checked");
}

/// The int8 GEMM against the f64 reference Σ dequant(w)·dequant(a): random rows of every int8
/// type through every tile shape (1..7 rows, 1..9 tokens), then rows of the largest codes (every
/// block byte 0xFF, scales sanitized) against activations of all +127 / all −127 (the i16 sums
/// at their bound).
#[test]
fn int8_gemm_agrees_on_random_and_extreme_blocks() {
    let cases = if cfg!(debug_assertions) { 8 } else { 30 };
    let mut rng = Rng(0x7e57_1e55_0000_0001);
    for ty in GgmlType::ALL {
        let Some(k8) = gemm8::kernels8(ty) else { continue };
        let k = kernels(ty).unwrap();
        let (mut act, mut packed, mut scratch) = (QAct::default(), PackedAct8::default(), Gemm8Scratch::default());
        for case in 0..cases + 2 {
            let n = 256 * (1 + case % 4);
            let (rows, tokens) = (1 + case % 7, 1 + case % 9);
            let mut data = vec![0u8; rows * ty.row_bytes(n)];
            let x = if case < cases {
                rng.bytes(&mut data);
                rng.act(n * tokens)
            } else {
                data.fill(0xff);
                let sign = if case == cases { 1.0 } else { -1.0 };
                vec![sign; n * tokens]
            };
            for blk in data.chunks_exact_mut(ty.block_bytes()) {
                (k.sanitize)(blk);
            }
            quantize_q8(ty.act_kind(), &x, n, &mut act);
            // Both profiles' tile widths (gemm8::Profile), alternating by case; an offset type's
            // min terms folded into the integer sums (what the engine runs) and not.
            let tile = if case % 2 == 0 { 2 } else { 4 };
            let folds = if k8.fold().is_some() { vec![k8.fold(), None] } else { vec![None] };
            for fold in folds {
                packed.pack_ordered(&act, tile, gemm8::Order::Pairs, fold, k8.pair_run(fold.is_some()));
                let mut y = vec![f32::NAN; tokens * (rows + 1)];
                gemm8::gemm_rows(k8, Rows::plain(&data), 0..rows, &packed, &mut scratch, &mut y[1..], rows + 1);
                assert_gemm_exact(k, &data, &act, &y, &format!("{ty} case {case} ({fold:?})"));
                // The dot-add form (the type's quad order) gives the same bits, natively (the portable kernel on
                // both layouts) and in wasm where the engine computes it exactly.
                if cfg!(not(target_arch = "wasm32")) || gemm8::quad_add_exact() {
                    packed.pack_ordered(&act, tile, k8.quad_order(), fold, k8.pair_run(fold.is_some()));
                    let mut yq = vec![f32::NAN; tokens * (rows + 1)];
                    gemm8::gemm_rows(k8, Rows::plain(&data), 0..rows, &packed, &mut scratch, &mut yq[1..], rows + 1);
                    for (i, (a, b)) in y.iter().zip(&yq).enumerate() {
                        assert!(a.to_bits() == b.to_bits(), "{ty} case {case} ({fold:?}): quads {b} vs pairs {a} at {i}");
                    }
                    // The scaled form, where the type has one (its dot-add form in the engine).
                    if k8.scaled.is_some() {
                        packed.pack_scaled_tiles(&act, tile, k8);
                        let mut ys = vec![f32::NAN; tokens * (rows + 1)];
                        gemm8::gemm_rows(k8, Rows::plain(&data), 0..rows, &packed, &mut scratch, &mut ys[1..], rows + 1);
                        for (i, (a, b)) in y.iter().zip(&ys).enumerate() {
                            assert!(a.to_bits() == b.to_bits(), "{ty} case {case}: scaled {b} vs pairs {a} at {i}");
                        }
                    }
                }
            }
        }
    }
}

/// The pair form of the types whose two relaxed dots may overflow i16 together (`pair_run` 1:
/// the IQ2 types, IQ3_XXS) sums two vectors only in the units whose 4-element activation sums
/// allow it (`PackedAct8::psum`): random rows against tokens whose even units are all 127 (over
/// the limit: one vector at a time) and whose odd units are small (two at a time), in both tile
/// widths, against the f64 reference. Summing two everywhere overflows here.
#[test]
fn int8_pair_sums_are_checked_per_unit() {
    let mut rng = Rng(0x9a12_5e75_0000_0003);
    let mut checked = 0;
    for ty in GgmlType::ALL {
        let Some(k8) = gemm8::kernels8(ty) else { continue };
        let k = kernels(ty).unwrap();
        let (n, rows, tokens) = (512, 3, 5);
        let mut data = vec![0u8; rows * ty.row_bytes(n)];
        rng.bytes(&mut data);
        for blk in data.chunks_exact_mut(ty.block_bytes()) {
            (k.sanitize)(blk);
        }
        let x: Vec<f32> = (0..n * tokens).map(|i| if (i % n) / 128 % 2 == 0 { 1.0 } else { 0.05 * rng.act(1)[0] }).collect();
        let (mut act, mut packed, mut scratch) = (QAct::default(), PackedAct8::default(), Gemm8Scratch::default());
        quantize_q8(ty.act_kind(), &x, n, &mut act);
        for fold in [k8.fold(), None] {
            if k8.pair_run(fold.is_some()) != 1 {
                continue;
            }
            for tile in [2, 4] {
                packed.pack_ordered(&act, tile, gemm8::Order::Pairs, fold, k8.pair_run(fold.is_some()));
                let limit = k8.narrow_limit(false);
                assert!(packed.psum.iter().any(|&s| s > limit) && packed.psum.iter().any(|&s| s <= limit), "{ty}: units on both sides of the limit");
                let mut y = vec![f32::NAN; tokens * (rows + 1)];
                gemm8::gemm_rows(k8, Rows::plain(&data), 0..rows, &packed, &mut scratch, &mut y[1..], rows + 1);
                assert_gemm_exact(k, &data, &act, &y, &format!("{ty} tile {tile} ({fold:?})"));
                checked += 1;
            }
        }
    }
    assert!(checked >= 8, "{checked} checked pair-form runs");
}

/// The dot-add form runs where the engine computes it exactly, and is not silently off where it
/// should run: Node 20's V8 miscomputes its instruction in the baseline tier (the engine's check
/// turns the form off there) and computes it right in the optimizing tier, so under
/// `--no-liftoff` (tests/run.sh runs `int8_gemm` that way too) the kernels must pass their check —
/// and `int8_gemm_agrees_on_random_and_extreme_blocks` then compares them with the pair form.
#[test]
fn int8_gemm_dot_add_runs_where_exact() {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        let optimizing_only = js_sys::eval("typeof process !== 'undefined' && process.execArgv.includes('--no-liftoff')")
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if optimizing_only {
            assert!(gemm8::quad_add_exact(), "V8's optimizing tier: the dot-add kernels must pass their check");
        }
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    assert!(!gemm8::quad_add_exact(), "no dot-add form without relaxed SIMD");
}

/// The int8 types whose pair form sums eight vectors in i16 (`pair_ksum` 8, the offset types with
/// their min terms folded) are the ones whose quad order over 16 narrows every unit
/// (`Kernels8::narrow_limit` ≥ 2048 = 16·128: the same bound, 16 products of at most 128·15);
/// and the lists are what the docs say.
#[test]
fn int8_pair_ksum_names_the_i16_run_types() {
    let eight: Vec<GgmlType> = GgmlType::ALL.into_iter().filter(|&ty| gemm8::kernels8(ty).is_some_and(|k| k.pair_ksum() == 8)).collect();
    let want = [GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q3_KX, GgmlType::Q4_K, GgmlType::IQ3_S, GgmlType::IQ3_SX, GgmlType::IQ1_S, GgmlType::IQ1_M];
    for ty in want {
        assert!(eight.contains(&ty), "{ty}: pair_ksum 8");
    }
    for ty in [GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q6_KX, GgmlType::IQ2_SX, GgmlType::IQ2_S] {
        assert!(gemm8::kernels8(ty).is_some_and(|k| k.pair_ksum() < 8), "{ty}: timed");
    }
    assert_eq!(eight.len(), want.len(), "{eight:?}");
    let always: Vec<GgmlType> = GgmlType::ALL.into_iter().filter(|&ty| gemm8::kernels8(ty).is_some_and(|k| k.narrow_limit(k.offset.is_some()) >= 2048)).collect();
    assert_eq!(always, eight, "narrowed everywhere: the pair_ksum 8 types");
    for ty in always {
        assert_eq!(gemm8::kernels8(ty).unwrap().quad_order(), gemm8::Order::Quads, "{ty}: narrowed quad order is over 16");
    }
    let scaled: Vec<GgmlType> = GgmlType::ALL.into_iter().filter(|&ty| gemm8::kernels8(ty).is_some_and(|k| k.scaled.is_some())).collect();
    assert_eq!(scaled, [GgmlType::Q2_K], "the types with a scaled form");
}

/// The int8 form's element orders: each a bijection within its unit (128 elements; quad order 64)
/// that keeps element pairs whole, with the group of every byte where `Order::group_of` says and,
/// in quad order over 32, quad k of 32-element group g at bytes 16k + 4g (lane g of vector k);
/// the reorder of a pair-ordered row (`gemm8::row_to_order`) puts every element at its position.
#[test]
fn int8_orders_are_pair_order_rearranged() {
    use gemm8::Order;
    for (order, unit) in [(Order::Pairs, 128), (Order::Quads, 64), (Order::Quads32, 128)] {
        let mut seen = vec![false; 512];
        for i in 0..512 {
            let q = order.pos(i);
            assert_eq!(q / unit, i / unit, "{order:?}: element {i} left its unit");
            assert!(!seen[q], "{order:?}: position {q} taken twice");
            seen[q] = true;
            if i % 2 == 0 {
                assert_eq!(order.pos(i + 1), q + 1, "{order:?}: pair {i} split");
            }
            assert_eq!(order.group_of(q), i / 16, "{order:?}: element {i}: group of its byte");
            if order == Order::Quads32 {
                assert_eq!((q % 16) / 4, (i % 128) / 32, "element {i} not in its group's lane");
            }
        }
        // Element i's index, stored at its pair-order position, reordered: found at its position.
        let n = 1024;
        let mut u = vec![0u8; n];
        let mut hi = vec![0u8; n];
        for i in 0..n {
            u[gemm8::pair_pos(i)] = (i % 256) as u8;
            hi[gemm8::pair_pos(i)] = (i / 256) as u8;
        }
        gemm8::row_to_order(&mut u, order);
        gemm8::row_to_order(&mut hi, order);
        for i in 0..n {
            let q = order.pos(i);
            assert_eq!(u[q] as usize + 256 * hi[q] as usize, i, "{order:?}: element {i} at position {q}");
        }
    }
    // The built-in exactness check passes where the portable kernel runs every form.
    if cfg!(not(target_arch = "wasm32")) {
        assert!(gemm8::quads_equal_pairs(&[2, 4]));
    }
}

/// The types that take quad order over groups of 32 (`Kernels8::scales32`) decode one scale per
/// 32 elements: groups 2g and 2g + 1 have the same `sc` (and `mn`) in every row, which the
/// dot-add kernel relies on (it reads one of the two). And the list is what the docs say.
#[test]
fn scales32_types_pair_their_scales() {
    let mut rng = Rng(0x5ca1_e532_0000_0001);
    let mut with = Vec::new();
    for ty in GgmlType::ALL {
        let Some(k8) = gemm8::kernels8(ty) else { continue };
        if !k8.scales32 {
            assert_eq!(k8.quad_order(), gemm8::Order::Quads);
            continue;
        }
        with.push(ty);
        // Quad order over 16 where every unit narrows (codes of at most 15 in magnitude), else over 32.
        let want = if k8.code_bound(k8.offset.is_some()) <= 15 { gemm8::Order::Quads } else { gemm8::Order::Quads32 };
        assert_eq!(k8.quad_order(), want, "{ty}");
        let k = kernels(ty).unwrap();
        let n = 1024;
        let mut data = vec![0u8; ty.row_bytes(n)];
        let mut d = Decoded8::default();
        d.resize(n);
        for _ in 0..20 {
            rng.bytes(&mut data);
            for blk in data.chunks_exact_mut(ty.block_bytes()) {
                (k.sanitize)(blk);
            }
            for decode in [k8.decode_ref, k8.decode] {
                decode(&data, &mut d);
                for g in (0..n / 16).step_by(2) {
                    assert_eq!(d.sc[g], d.sc[g + 1], "{ty}: scales of groups {g}, {}", g + 1);
                    assert_eq!(d.mn[g], d.mn[g + 1], "{ty}: mins of groups {g}, {}", g + 1);
                }
            }
        }
    }
    assert_eq!(with, [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::IQ2_XXS, GgmlType::IQ3_XXS, GgmlType::IQ1_S, GgmlType::IQ3_S, GgmlType::IQ3_SX]);
}

/// F32 / F16 / BF16 rows: the fast dot equals the reference.
#[test]
fn float_dots_agree() {
    let mut rng = Rng(7);
    let n = 1000; // not a multiple of 8: exercises the tails
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let x = rng.act(n);
        let vals = rng.act(n);
        let mut row = Vec::new();
        for v in &vals {
            match ty {
                GgmlType::F32 => row.extend_from_slice(&v.to_le_bytes()),
                GgmlType::F16 => row.extend_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes()),
                _ => row.extend_from_slice(&half::bf16::from_f32(*v).to_bits().to_le_bytes()),
            }
        }
        let r = quant::float::dot_ref(ty, &row, &x);
        let f = quant::float::dot(ty, &row, &x);
        let scale: f32 = x.iter().zip(&vals).map(|(a, b)| (a * b).abs()).sum();
        assert!((r - f).abs() / scale < 1e-5, "{ty}: {r} vs {f}");
    }
}

/// The four-rows-interleaved layouts (`quant::r4`): each type's fields cover its block exactly
/// once, interleaving is a permutation of the bytes and un-interleaving restores them (on random,
/// unsanitized bytes), and `vec_dot4` equals the scalar `vec_dot_ref` of each row (random rows of
/// 1..9 blocks; the integer extremes are in the self-test above).
#[test]
fn four_row_interleave_is_a_permutation_and_dots_agree() {
    use clef_web::quant::r4;
    let mut rng = Rng(0x4444_0000_aaaa_5555);
    let mut act = QAct::default();
    let mut checked = 0;
    for ty in GgmlType::ALL {
        let Some(k4) = r4::r4_kernels(ty) else { continue };
        let k = kernels(ty).unwrap();
        let bb = ty.block_bytes();
        let mut covered = vec![0u32; bb];
        for f in k4.fields {
            assert_eq!(f.len % f.gran, 0, "{ty}: field {f:?}");
            covered[f.off..f.off + f.len].iter_mut().for_each(|c| *c += 1);
        }
        assert!(covered.iter().all(|&c| c == 1), "{ty}: fields do not cover the block once: {covered:?}");
        for nb in 1..=9 {
            let n = 256 * nb;
            let rb = ty.row_bytes(n);
            let mut plain = vec![0u8; 4 * rb];
            rng.bytes(&mut plain);
            let mut rows4 = vec![0u8; 4 * rb];
            r4::pack_rows(k4, &plain, &mut rows4);
            let (mut a, mut b) = (plain.clone(), rows4.clone());
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "{ty}: interleaving is not a permutation");
            let mut back = vec![0u8; 4 * rb];
            r4::unpack_rows(k4, &rows4, &mut back);
            assert_eq!(back, plain, "{ty}: un-interleaving does not restore the rows");

            for blk in plain.chunks_exact_mut(bb) {
                (k.sanitize)(blk);
            }
            r4::pack_rows(k4, &plain, &mut rows4);
            let x = rng.act(n);
            quantize_q8(ty.act_kind(), &x, n, &mut act);
            let got = (k4.vec_dot4)(&rows4, act.row(0), [0.0; 4]);
            let want = r4::vec_dot4_ref(ty, &rows4, act.row(0));
            for r in 0..4 {
                let row = &plain[r * rb..(r + 1) * rb];
                assert_eq!(want[r].to_bits(), (k.vec_dot_ref)(row, act.row(0)).to_bits(), "{ty}: the R4 oracle");
                let mut w = vec![0.0f32; n];
                (k.dequantize)(row, &mut w);
                let a = act.row(0);
                let scale: f64 = (0..n).map(|i| (w[i] as f64 * a.value(i) as f64).abs()).sum::<f64>() + 1e-30;
                let err = (got[r] as f64 - want[r] as f64).abs() / scale;
                assert!(err < 2e-6, "{ty} {nb} blocks row {r}: vec_dot4 {} vs {} (rel {err:e})", got[r], want[r]);
            }
            checked += 1;
        }
    }
    assert!(checked >= 9, "no R4 type checked");
}

/// Several tokens over interleaved rows: `vec_dot4_n` on 1–4 activation rows equals `vec_dot4` on
/// each, bit for bit, and `r4::matmul_tiles` (groups × tiles of tokens, what the engine runs below
/// `ops::gemm_min_tokens_r4`) writes exactly those values into the right rows and tokens, for 1–9
/// and 37 tokens (past the views it makes at once) and a row range that starts past the first group; the rest of the output is untouched.
#[test]
fn four_row_tiles_equal_one_token_at_a_time() {
    use clef_web::quant::r4;
    let mut rng = Rng(0x7111_e5e5_0000_4444);
    let mut checked = 0;
    let mut alts = 0;
    for ty in GgmlType::ALL {
        let Some(k4) = r4::r4_kernels(ty) else { continue };
        let k = kernels(ty).unwrap();
        let (groups, nb) = (3, 2);
        let n = 256 * nb;
        let rb = ty.row_bytes(n);
        let mut plain = vec![0u8; groups * 4 * rb];
        rng.bytes(&mut plain);
        for blk in plain.chunks_exact_mut(ty.block_bytes()) {
            (k.sanitize)(blk);
        }
        let mut data = plain.clone();
        r4::interleave_matrix(k4, &mut data, rb, &mut Vec::new());
        for tokens in (1..=9).chain([37]) {
            let mut act = QAct::default();
            quantize_q8(ty.act_kind(), &rng.act(tokens * n), n, &mut act);
            let acts: Vec<_> = (0..tokens).map(|t| act.row(t)).collect();
            let one: Vec<Vec<[f32; 4]>> =
                (0..groups).map(|g| acts.iter().map(|&a| (k4.vec_dot4)(&data[g * 4 * rb..(g + 1) * 4 * rb], a, [0.0; 4])).collect()).collect();
            for (g, want) in one.iter().enumerate() {
                let c = tokens.min(r4::MAX_TOKENS);
                let group = &data[g * 4 * rb..(g + 1) * 4 * rb];
                let mut many = vec![[f32::NAN; 4]; c];
                (k4.vec_dot4_n)(group, &acts[..c], &mut many);
                for (t, (m, o)) in many.iter().zip(want).enumerate() {
                    assert_eq!(m.map(f32::to_bits), o.map(f32::to_bits), "{ty}: group {g}, token {t} of {c}");
                }
                // A second form of the kernels (chosen by timing in `ops`) gives the same bits.
                // (One that uses the dot-add where this engine computes it exactly: Node 20's
                // baseline tier does not, `gemm8::quad_add_exact`.)
                if let Some(alt) = k4.usable_alt() {
                    assert!(alt.ty == ty && alt.alt.is_none(), "{ty}: the second form");
                    assert!(alt.fields.iter().zip(k4.fields).all(|(a, b)| (a.off, a.len, a.gran) == (b.off, b.len, b.gran)) && alt.fields.len() == k4.fields.len());
                    let mut many = vec![[f32::NAN; 4]; c];
                    (alt.vec_dot4_n)(group, &acts[..c], &mut many);
                    for (t, (m, o)) in many.iter().zip(want).enumerate() {
                        assert_eq!(m.map(f32::to_bits), o.map(f32::to_bits), "{ty}: second form, group {g}, token {t} of {c}");
                        assert_eq!((alt.vec_dot4)(group, acts[t], [0.0; 4]).map(f32::to_bits), o.map(f32::to_bits), "{ty}: second form, one token");
                    }
                    alts += 1;
                }
            }
            let n_out = groups * 4;
            let mut y = vec![f32::NAN; tokens * n_out];
            r4::matmul_tiles(k4, &data, rb, 4..n_out, &act, &mut y, n_out);
            for t in 0..tokens {
                assert!(y[t * n_out..t * n_out + 4].iter().all(|v| v.is_nan()), "{ty}: rows outside the range written");
                for r in 4..n_out {
                    assert_eq!(y[t * n_out + r].to_bits(), one[r / 4][t][r % 4].to_bits(), "{ty}: {tokens} tokens, token {t} row {r}");
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 2, "no R4 type checked");
    assert!(alts > 0, "no second R4 form checked");
}

/// A decoded token's product over interleaved rows (`r4::matvec_streams`, through
/// `r4::matmul_tiles`): where `r4::STREAMED`, its groups split into `r4::STREAMS` runs read
/// together a piece at a time, the kernel carrying each group's sums from piece to piece. For every
/// R4 type (and second form), over 10 groups (runs of 3, 3, 3 and 1) of five blocks (pieces of
/// one or two blocks, the last shorter) from the second group on, every row gets its whole
/// group's `vec_dot4` bit for bit and the rows outside the range stay untouched; and `vec_dot4`
/// one block at a time, its sums carried, gives the whole rows' bits.
#[test]
fn a_decoded_token_reads_streams_of_groups_a_piece_at_a_time() {
    use clef_web::quant::r4;
    let mut rng = Rng(0x57e4_3a45_0000_0001);
    let mut checked = 0;
    for ty in GgmlType::ALL {
        let Some(first) = r4::r4_kernels(ty) else { continue };
        let k = kernels(ty).unwrap();
        let (groups, nb) = (11, 5);
        let (n, bb4) = (ty.block_elems() * nb, 4 * ty.block_bytes());
        let rb = ty.row_bytes(n);
        let mut data = vec![0u8; groups * 4 * rb];
        rng.bytes(&mut data);
        for blk in data.chunks_exact_mut(ty.block_bytes()) {
            (k.sanitize)(blk);
        }
        r4::interleave_matrix(first, &mut data, rb, &mut Vec::new());
        let mut act = QAct::default();
        quantize_q8(ty.act_kind(), &rng.act(n), n, &mut act);
        let a = act.row(0);
        for k4 in std::iter::once(first).chain(first.usable_alt()) {
            let whole: Vec<[f32; 4]> = data.chunks_exact(4 * rb).map(|g| (k4.vec_dot4)(g, a, [0.0; 4])).collect();
            let n_out = 4 * groups;
            let mut y = vec![f32::NAN; n_out];
            r4::matmul_tiles(k4, &data, rb, 4..n_out, &act, &mut y, n_out);
            assert!(y[..4].iter().all(|v| v.is_nan()), "{ty}: rows outside the range written");
            for r in 4..n_out {
                assert_eq!(y[r].to_bits(), whole[r / 4][r % 4].to_bits(), "{ty}: row {r}");
            }
            if r4::STREAMED {
                for (g, want) in data.chunks_exact(4 * rb).zip(&whole) {
                    let mut acc = [0.0f32; 4];
                    for (b, blk) in g.chunks_exact(bb4).enumerate() {
                        acc = (k4.vec_dot4)(blk, a.slice(b * ty.block_elems(), ty.block_elems()), acc);
                    }
                    assert_eq!(acc.map(f32::to_bits), want.map(f32::to_bits), "{ty}: a block at a time");
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} R4 kernels checked");
}

/// The decode matvec over plain rows (`ops::rows_outer`), for every quantized type, one and two
/// tokens: with whole rows each asked row and token gets `vec_dot` of the whole row, bit for bit;
/// with streams, the same where the type has a four-row kernel (`legacy::vec_dot4`, wasm), else
/// the in-order sum from 0 of its pieces' `vec_dot`s, a piece (`stream_piece`: at least
/// `PIECE_BYTES`, whole 256-element steps) the last one shorter, over rows short of a piece and
/// long ones whose last piece is ragged. The row range (nine rows: two runs of the four streams and one
/// row past them) starts past the first rows; those stay as they were.
#[test]
fn rows_outer_is_vec_dot_of_the_row_or_of_its_pieces() {
    use clef_web::ops::{stream_piece, PIECE_BYTES};
    let mut rng = Rng(0x0dd5_70c4_a11e_ad00);
    for ty in GgmlType::ALL {
        let Some(k) = kernels(ty) else { continue };
        let (be, bb) = (ty.block_elems(), ty.block_bytes());
        let piece = stream_piece(ty); // blocks
        assert!(piece * bb >= PIECE_BYTES && (piece * be) % 256 == 0, "{ty}: a piece of {piece} blocks");
        for (blocks, tokens) in [(3, 2), (3, 1), (3 * piece + 1, 1), (3 * piece + 1, 2)] {
            let (n, n_out) = (blocks * be, 11);
            let rb = ty.row_bytes(n);
            let mut data = vec![0u8; n_out * rb];
            rng.bytes(&mut data);
            for blk in data.chunks_exact_mut(bb) {
                (k.sanitize)(blk);
            }
            let mut act = QAct::default();
            quantize_q8(ty.act_kind(), &rng.act(tokens * n), n, &mut act);
            for streams in [false, true] {
                let mut y = vec![f32::NAN; tokens * n_out];
                clef_web::ops::rows_outer(k, &data, rb, 2..n_out, &act, &mut y, n_out, streams);
                for t in 0..tokens {
                    for r in 0..n_out {
                        let got = y[t * n_out + r];
                        if r < 2 {
                            assert!(got.is_nan(), "{ty}: row {r} outside the range written");
                            continue;
                        }
                        let (row, a) = (&data[r * rb..(r + 1) * rb], act.row(t));
                        // A four-row kernel (legacy types, wasm) computes each row as `vec_dot` does.
                        let want = if streams && clef_web::quant::legacy::vec_dot4(ty).is_none() {
                            (0..blocks).step_by(piece).fold(0.0f32, |sum, p| {
                                let q = (p + piece).min(blocks);
                                sum + (k.vec_dot)(&row[p * bb..q * bb], a.slice(p * be, (q - p) * be))
                            })
                        } else {
                            (k.vec_dot)(row, a)
                        };
                        assert_eq!(got.to_bits(), want.to_bits(), "{ty}: {blocks} blocks, streams {streams}, token {t} row {r}");
                    }
                }
            }
        }
    }
}

/// The wasm expansion of IQ2_XS makes its sign bytes instead of looking them up in `ksigns`:
/// the 7-bit index with bit 7 set where the index has an odd number of ones (so that every sign
/// byte has an even number).
#[test]
fn ksigns_is_the_index_made_even() {
    for (i, &k) in clef_web::quant::tables::KSIGNS_IQ2XS.iter().enumerate() {
        assert_eq!(k as u32, i as u32 | (i.count_ones() & 1) << 7, "ksigns[{i}]");
    }
}

/// The load-time forms (`quant::kquants::forms`: IQ2_S and IQ2_XS → IQ2_SX, IQ3_S → IQ3_SX, Q3_K →
/// Q3_KX, Q6_K → Q6_KX) hold the file type's weights bit for bit (dequantised, the golden vectors too), give the same
/// reference dot product bit for bit, and rows expanded in place (the file's bytes at the start of
/// the space, or shifted into it by any offset) equal the rows expanded block by block.
#[test]
fn load_time_forms_hold_the_same_weights() {
    use clef_web::quant::kquants::{forms, iq2_sx, iq3_sx, q3_kx, q6_k};
    for form in [GgmlType::IQ2_SX, GgmlType::IQ3_SX, GgmlType::Q3_KX, GgmlType::Q6_KX] {
        assert_eq!(GgmlType::from_id(form as u32), None, "a load-time form is no file type");
    }
    assert!(!forms::expands("blk.0.ffn_up.weight", GgmlType::IQ2_XXS) && forms::form_of(GgmlType::IQ3_XXS).is_none());
    for (ty, form) in [(GgmlType::IQ2_S, GgmlType::IQ2_SX), (GgmlType::IQ2_XS, GgmlType::IQ2_SX), (GgmlType::IQ3_S, GgmlType::IQ3_SX), (GgmlType::Q3_K, GgmlType::Q3_KX), (GgmlType::Q6_K, GgmlType::Q6_KX)] {
        let (k, bb, fb) = (kernels(ty).unwrap(), ty.block_bytes(), form.block_bytes());
        let sx = kernels(form).unwrap();
        assert_eq!(forms::form_of(ty), Some(form));
        assert_eq!(forms::source_bytes(ty), bb);
        assert!(forms::expands("blk.0.ffn_up.weight", ty) && !forms::expands("token_embd.weight", ty));
        let expand = |row: &[u8]| -> Vec<u8> {
            let mut out = vec![0u8; forms::expanded_len(ty, row.len() as u64) as usize];
            for (src, dst) in row.chunks_exact(bb).zip(out.chunks_exact_mut(fb)) {
                match form {
                    GgmlType::IQ2_SX => iq2_sx::expand_block(ty, src, dst),
                    GgmlType::IQ3_SX => iq3_sx::expand_block(src, dst),
                    GgmlType::Q6_KX => q6_k::expand_block(src, dst),
                    _ => q3_kx::expand_block(src, dst),
                }
            }
            out
        };
        let (_, golden) = GOLDEN.iter().find(|(t, _)| *t == ty).unwrap();
        let nb = u32::from_le_bytes(golden[0..4].try_into().unwrap()) as usize;
        let raw = &golden[4..4 + bb * nb];
        let (mut want, mut got) = (vec![0.0f32; 256 * nb], vec![0.0f32; 256 * nb]);
        (k.dequantize)(raw, &mut want);
        (sx.dequantize)(&expand(raw), &mut got);
        assert!(want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "golden {ty} blocks");

        let mut rng = Rng(0x5eed_1a2b_3c4d_5e6f);
        let mut act = QAct::default();
        for r in 0..200 {
            let n = 256 * (1 + r % 9);
            let mut row = vec![0u8; ty.row_bytes(n)];
            rng.bytes(&mut row);
            row.chunks_exact_mut(bb).for_each(k.sanitize);
            let x = expand(&row);
            let (mut w, mut wx) = (vec![0.0f32; n], vec![0.0f32; n]);
            (k.dequantize)(&row, &mut w);
            (sx.dequantize)(&x, &mut wx);
            assert!(w.iter().zip(&wx).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty} row {r}: weights differ");
            quantize_q8(ty.act_kind(), &rng.act(n), n, &mut act);
            let (d, dx) = ((k.vec_dot_ref)(&row, act.row(0)), (sx.vec_dot_ref)(&x, act.row(0)));
            assert_eq!(d.to_bits(), dx.to_bits(), "{ty} row {r}: reference dots {d} vs {dx}");

            // (A form of the same size is made where the file's bytes are.)
            let shift = if fb == bb { 0 } else { [0, 1, 24, 100, x.len()][r % 5] };
            let mut space = vec![0xa5u8; shift + x.len()];
            space[..row.len()].copy_from_slice(&row);
            forms::expand_in_place(ty, &mut space, 0, shift, row.len() / bb);
            assert_eq!(&space[shift..], &x[..], "{ty} row {r}: in-place expansion by {shift}");
        }
    }
}
