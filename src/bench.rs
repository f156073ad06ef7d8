//! Kernel throughput, one thread, on a 4096×4096 matrix of random (valid) blocks. Used by
//! `clef bench-kernels` (native and wasm):
//! * decode (one token): GB/s of weight bytes through the fast and the scalar dot product (the
//!   fast one, and the four-rows-interleaved one where the type has it, as the best of repeated
//!   matvecs: they are compared side by side on machines with other load);
//! * prefill (`--prefill T`): GB/s of weights and G MAC/s of the prompt GEMM for T tokens of
//!   normally distributed activations, and the same T tokens as T separate `vec_dot` passes for
//!   comparison.

use crate::quant::gemm::{prompt_rows, PromptScratch};
use crate::quant::{self, kernels, quantize_q8, GgmlType, QAct, Q8};

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `performance.now()` (Node ≥ 16 and browsers): sub-millisecond, monotonic.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

/// Milliseconds from a monotonic clock (performance.now() on wasm).
pub fn now_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        performance_now()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static T0: OnceLock<Instant> = OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
    }
}

#[derive(Clone, Debug)]
pub struct KernelBench {
    pub ty: GgmlType,
    pub simd_gbps: f64,
    pub scalar_gbps: f64,
    /// The same matvec with the rows four by four interleaved ([`crate::quant::r4`]), where the
    /// type has that form: the faster of its kernels, as `ops` picks one per instance.
    pub r4_gbps: Option<f64>,
    /// Each four-row kernel's rate where the type has two (`R4Kernels::alt`): the first, the second.
    pub r4_forms: Option<(f64, f64)>,
    /// The same matvec reading four streams of rows at once ([`crate::ops::rows_outer`];
    /// quantized types).
    pub streams_gbps: Option<f64>,
    /// Nanoseconds per block of the load-time expansion (`forms::expand_in_place` over the whole
    /// matrix, the copy of the file's bytes into place taken off), where the type has that form.
    pub expand_ns: Option<f64>,
    /// GB/s of rearranging the matrix four rows interleaved in place as a load does
    /// ([`quant::r4::interleave_matrix`], the copy of the file's bytes into place taken off), where
    /// the type has that layout.
    pub interleave_gbps: Option<f64>,
}

/// A deterministic `rows × n` weight matrix of `ty` with valid blocks.
pub fn random_matrix(ty: GgmlType, rows: usize, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut data = vec![0u8; rows * ty.row_bytes(n)];
    for b in data.iter_mut() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        *b = (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8;
    }
    if let Some(k) = kernels(ty) {
        for blk in data.chunks_exact_mut(ty.block_bytes()) {
            (k.sanitize)(blk);
        }
    }
    data
}

/// `len` deterministic activations drawn from a standard normal distribution (Box–Muller over
/// xorshift), as a model's hidden values roughly are: the int8 GEMM's narrowed quad form runs
/// where the quantized activations are small enough (`quant::gemm8`, "Narrowed"), so the prompt
/// benchmark feeds values shaped like real ones rather than a uniform ramp.
pub fn normal_activations(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut uniform = move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        // 53 random bits in (0, 1].
        ((s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) + 1) as f64 / (1u64 << 53) as f64
    };
    (0..len)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            ((-2.0 * u.ln()).sqrt() * (core::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

/// Runs `f` until at least `min_ms` have passed; returns seconds per call.
fn time_it(min_ms: f64, mut f: impl FnMut() -> f32) -> f64 {
    let mut sink = 0.0f32;
    sink += f(); // warm-up
    let t0 = now_ms();
    let mut calls = 0u32;
    loop {
        sink += f();
        calls += 1;
        let dt = now_ms() - t0;
        if dt >= min_ms {
            std::hint::black_box(sink);
            return dt / 1e3 / calls as f64;
        }
    }
}

/// Runs `f` (after a warm-up call) until at least `min_ms` have passed and at least 3 samples;
/// returns the fastest sample per call in seconds (robust against other load on the machine). A
/// sample is as many calls as take ≥ 5 ms: browsers coarsen `performance.now()` to 0.1 ms, which
/// is a fifth of one 4096×4096 matvec.
fn time_best(min_ms: f64, mut f: impl FnMut() -> f32) -> f64 {
    let mut sink = f();
    let t0 = now_ms();
    sink += f();
    let reps = (5.0 / (now_ms() - t0).max(0.01)).ceil().clamp(1.0, 1e6) as u32;
    let (start, mut best, mut samples) = (now_ms(), f64::INFINITY, 0);
    while samples < 3 || now_ms() - start < min_ms {
        let t0 = now_ms();
        for _ in 0..reps {
            sink += f();
        }
        best = best.min((now_ms() - t0) / reps as f64);
        samples += 1;
    }
    std::hint::black_box(sink);
    best / 1e3
}

/// The matrix `w` (rows of `rb` bytes) in the four-rows-interleaved layout.
fn interleaved(k4: &quant::r4::R4Kernels, w: &[u8], rb: usize) -> Vec<u8> {
    let mut packed = w.to_vec();
    quant::r4::interleave_matrix(k4, &mut packed, rb, &mut Vec::new());
    packed
}

/// Seconds of one matvec of the interleaved matrix `packed` as a decoded token's product runs it
/// (`r4::matvec_streams`: `vec_dot4` over several streams of groups; best of samples).
fn time_vec_dot4(k4: &quant::r4::R4Kernels, packed: &[u8], rb: usize, a: Q8<'_>, min_ms: f64) -> f64 {
    let rows = packed.len() / rb;
    let mut y = vec![0.0f32; rows];
    time_best(min_ms, || {
        quant::r4::matvec_streams(k4, packed, rb, 0..rows, a, &mut y);
        y.iter().sum()
    })
}

/// Benchmarks one type: a full `rows`×4096 matvec through `vec_dot` and through `vec_dot_ref`
/// (4096 rows fit the caches of most machines; a model's matrices, 248,320 rows for the LM head,
/// come from memory).
pub fn bench_type(ty: GgmlType, rows: usize, min_ms: f64) -> Option<KernelBench> {
    let n = 4096;
    let k = kernels(ty);
    if k.is_none() && !ty.is_float() {
        return None;
    }
    let w = random_matrix(ty, rows, n, 0x5eed ^ ty as u64);
    let rb = ty.row_bytes(n);
    let x: Vec<f32> = (0..n).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 250.0).collect();
    let (simd, scalar, r4, r4_forms, streams) = match k {
        Some(k) => {
            let mut act = QAct::default();
            quantize_q8(ty.act_kind(), &x, n, &mut act);
            let a = act.row(0);
            // The engine's decode loop over plain rows (`ops::rows_outer`): whole rows, and streams.
            let mut y = vec![0.0f32; rows];
            let mut matvec = |streams: bool| {
                time_best(min_ms, || {
                    crate::ops::rows_outer(k, &w, rb, 0..rows, &act, &mut y, rows, streams);
                    y.iter().sum()
                })
            };
            let (fast, streams) = (matvec(false), matvec(true));
            let slow = time_it(min_ms / 2.0, || w.chunks_exact(rb).map(|r| (k.vec_dot_ref)(r, a)).sum());
            let rates: Vec<f64> = quant::r4::r4_kernels(ty).map_or(Vec::new(), |k4| {
                let packed = interleaved(k4, &w, rb);
                let forms = std::iter::once(k4).chain(k4.alt);
                forms.map(|k| w.len() as f64 / 1e9 / time_vec_dot4(k, &packed, rb, a, min_ms)).collect()
            });
            let r4 = rates.iter().copied().reduce(f64::max);
            let r4_forms = (rates.len() == 2).then(|| (rates[0], rates[1]));
            (fast, slow, r4, r4_forms, Some(streams))
        }
        None => {
            let fast = time_it(min_ms, || w.chunks_exact(rb).map(|r| quant::float::dot(ty, r, &x)).sum());
            let slow = time_it(min_ms / 2.0, || w.chunks_exact(rb).map(|r| quant::float::dot_ref(ty, r, &x)).sum());
            (fast, slow, None, None, None)
        }
    };
    let gb = w.len() as f64 / 1e9;
    let expand_ns = time_expansion(ty, &w, min_ms);
    let interleave_gbps = time_interleave(ty, &w, rb, min_ms).map(|t| gb / t);
    Some(KernelBench { ty, simd_gbps: gb / simd, scalar_gbps: gb / scalar, r4_gbps: r4, r4_forms, streams_gbps: streams.map(|t| gb / t), expand_ns, interleave_gbps })
}

/// Seconds of a load-time step over the matrix `w` as a load does it — `w` copied to the start of
/// a buffer of `len` bytes, then `step` on the buffer — less the copy alone.
fn time_load_step(w: &[u8], len: usize, min_ms: f64, mut step: impl FnMut(&mut [u8])) -> f64 {
    let mut buf = vec![0u8; len];
    let mut run = |with_step: bool| {
        time_best(min_ms / 2.0, || {
            buf[..w.len()].copy_from_slice(w);
            if with_step {
                step(&mut buf);
            }
            buf[len - 1] as f32
        })
    };
    let copied = run(false);
    run(true) - copied
}

/// Seconds to rearrange the matrix `w` (rows of `rb` bytes) four rows interleaved in place, as a
/// load does after its bytes are in, less copying them into place alone.
fn time_interleave(ty: GgmlType, w: &[u8], rb: usize, min_ms: f64) -> Option<f64> {
    let k4 = quant::r4::r4_kernels(ty)?;
    let mut scratch = Vec::new();
    Some(time_load_step(w, w.len(), min_ms, |buf| quant::r4::interleave_matrix(k4, buf, rb, &mut scratch)))
}

/// Nanoseconds per block of expanding the matrix `w` in place as a load does (its bytes copied to
/// the start of the expanded buffer, then `expand_in_place`), less the copy alone.
fn time_expansion(ty: GgmlType, w: &[u8], min_ms: f64) -> Option<f64> {
    use quant::kquants::forms;
    forms::form_of(ty)?;
    let nb = w.len() / ty.block_bytes();
    let len = forms::expanded_len(ty, w.len() as u64) as usize;
    let secs = time_load_step(w, len, min_ms, |buf| forms::expand_in_place(ty, buf, 0, 0, nb));
    Some(secs * 1e9 / nb as f64)
}

/// Benchmarks every supported type (or only `only`, when given) on `rows`×4096 matrices.
pub fn bench_all(only: Option<GgmlType>, rows: usize, min_ms: f64) -> Vec<KernelBench> {
    GgmlType::ALL
        .iter()
        .copied()
        .filter(|t| only.is_none_or(|o| o == *t))
        .filter_map(|t| bench_type(t, rows, min_ms))
        .collect()
}

#[derive(Clone, Debug)]
pub struct PrefillBench {
    pub ty: GgmlType,
    pub tokens: usize,
    /// Weight bytes per second through the GEMM (each weight read once for all tokens).
    pub gemm_gbps: f64,
    /// Multiply-adds per second (rows · n · tokens / time), in G.
    pub gemm_gmacs: f64,
    /// The same product as `tokens` separate `vec_dot` passes, in G MAC/s.
    pub vec_dot_gmacs: f64,
    /// Where the type has a four-rows-interleaved form ([`quant::r4`]): the same product on the
    /// interleaved rows, the two ways the engine can run it.
    pub r4: Option<R4Prefill>,
}

/// G MAC/s of a prompt product over four-rows-interleaved weights: where `tiles` and `gemm` cross
/// is where `ops::gemm_min_tokens_r4` should be.
#[derive(Clone, Debug)]
pub struct R4Prefill {
    /// The GEMM, each panel un-interleaved first (activation packing included).
    pub gemm: f64,
    /// `quant::r4::matmul_tiles`: `vec_dot4_n` over tiles of up to four tokens (activation
    /// quantization included, as for the GEMM).
    pub tiles: f64,
    /// `tokens` separate `vec_dot4` passes (one token at a time).
    pub vec_dot4: f64,
}

/// The prompt benchmark's default matrix: 4096 rows × 4096 elements. A 9B model's FFN is
/// 12,288 × 4096 (gate, up) and 4096 × 12,288 (down): whether the activations of a whole prompt
/// fit the cache depends on the elements per row.
pub const PREFILL_SHAPE: (usize, usize) = (4096, 4096);

/// Benchmarks the prompt GEMM of one quantized type: a `shape` = (rows, elements per row) matrix
/// times `tokens` tokens (activation quantization and packing included, as in `ops::matmul`),
/// against `tokens` `vec_dot` passes over the same matrix.
pub fn bench_prefill_type(ty: GgmlType, tokens: usize, min_ms: f64, quads: bool, shape: (usize, usize)) -> Option<PrefillBench> {
    let (rows, n) = shape;
    let k = kernels(ty)?;
    let w = random_matrix(ty, rows, n, 0x5eed ^ ty as u64);
    let rb = ty.row_bytes(n);
    let x = normal_activations(n * tokens, 0xac7 ^ tokens as u64);
    let (mut act, mut scratch) = (QAct::default(), PromptScratch::default());
    let mut y = vec![0.0f32; rows * tokens];
    let gemm = time_best(min_ms, || {
        quantize_q8(ty.act_kind(), &x, n, &mut act);
        prompt_rows(k, quant::r4::Rows::plain(&w), 0..rows, &act, &mut scratch, &mut y, rows, quads);
        y[0]
    });
    quantize_q8(ty.act_kind(), &x, n, &mut act);
    let a = act.row(0);
    let one = time_best(min_ms / 2.0, || w.chunks_exact(rb).map(|r| (k.vec_dot)(r, a)).sum());
    let macs = (rows * n) as f64 * tokens as f64; // f64: 2^33 for 512 tokens overflows wasm32's usize
    let r4 = quant::r4::r4_kernels(ty).map(|k4| {
        let packed = interleaved(k4, &w, rb);
        let rows4 = quant::r4::Rows { data: &packed, r4: true };
        let gemm = time_best(min_ms, || {
            quantize_q8(ty.act_kind(), &x, n, &mut act);
            prompt_rows(k, rows4, 0..rows, &act, &mut scratch, &mut y, rows, quads);
            y[0]
        });
        let tiles = time_best(min_ms, || {
            quantize_q8(ty.act_kind(), &x, n, &mut act);
            quant::r4::matmul_tiles(k4, &packed, rb, 0..rows, &act, &mut y, rows);
            y[0]
        });
        let one4 = time_vec_dot4(k4, &packed, rb, act.row(0), min_ms / 2.0);
        R4Prefill { gemm: macs / 1e9 / gemm, tiles: macs / 1e9 / tiles, vec_dot4: (rows * n) as f64 / 1e9 / one4 }
    });
    Some(PrefillBench {
        ty,
        tokens,
        gemm_gbps: w.len() as f64 / 1e9 / gemm,
        gemm_gmacs: macs / 1e9 / gemm,
        vec_dot_gmacs: (rows * n) as f64 / 1e9 / one,
        r4,
    })
}

/// Prefill benchmark of every quantized type (or only `only`).
pub fn bench_prefill(only: Option<GgmlType>, tokens: usize, min_ms: f64, quads: bool, shape: (usize, usize)) -> Vec<PrefillBench> {
    GgmlType::ALL
        .iter()
        .copied()
        .filter(|t| only.is_none_or(|o| o == *t))
        .filter_map(|t| bench_prefill_type(t, tokens, min_ms, quads, shape))
        .collect()
}
