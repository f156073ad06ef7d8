//! Activation quantisers: an f32 activation row becomes int8 values with per-block scales, the
//! form llama.cpp's CPU backend multiplies quantized weights with (spec §5.4).
//!
//! One layout serves all three ggml activation types, so a kernel never needs to know which one
//! it got beyond what its own weight type implies:
//! * `qs[i]`    — the int8 value of element i;
//! * `d[b]`     — the scale of elements `32b..32b+32` (Q8_K: its 256-block's f32 `d`, repeated
//!   8×; Q8_0 / Q8_1: the fp16-rounded block scale);
//! * `bsums[g]` — Σ qs over elements `16g..16g+16` (ggml's Q8_K `bsums`; for Q8_1 the block sum
//!   is `bsums[2b] + bsums[2b+1]`).

/// Which ggml activation format a weight type is multiplied with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    F32,
    Q8_0,
    Q8_1,
    Q8K,
}

/// A borrowed quantized activation row (see the module docs for the layout).
#[derive(Clone, Copy, Debug)]
pub struct Q8<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub bsums: &'a [i16],
}

impl<'a> Q8<'a> {
    /// Elements `start..start+len` (both multiples of 32 — 256 for Q8_K rows).
    pub fn slice(&self, start: usize, len: usize) -> Q8<'a> {
        Q8 {
            qs: &self.qs[start..start + len],
            d: &self.d[start / 32..(start + len) / 32],
            bsums: &self.bsums[start / 16..(start + len) / 16],
        }
    }

    /// The dequantized value of element i (for tests and reference maths).
    pub fn value(&self, i: usize) -> f32 {
        self.qs[i] as f32 * self.d[i / 32]
    }
}

/// An owned quantized activation matrix: `rows` rows of `n` elements each.
#[derive(Clone, Debug, Default)]
pub struct QAct {
    pub n: usize,
    pub rows: usize,
    pub qs: Vec<i8>,
    pub d: Vec<f32>,
    pub bsums: Vec<i16>,
    /// Which quantization this is: a number no other [`quantize_q8`] call in the process gave
    /// (0: none yet). What is made from the values (the prompt GEMM's packed copies) is remade
    /// only when it changes.
    pub version: u64,
}

impl QAct {
    pub fn row(&self, r: usize) -> Q8<'_> {
        let n = self.n;
        Q8 {
            qs: &self.qs[r * n..(r + 1) * n],
            d: &self.d[r * n / 32..(r + 1) * n / 32],
            bsums: &self.bsums[r * n / 16..(r + 1) * n / 16],
        }
    }
}

/// Quantizes `rows` rows of `n` f32 values (row-major in `x`) into `out`, reusing its buffers.
/// `n` must be a multiple of 256 for Q8_K and of 32 otherwise.
pub fn quantize_q8(kind: ActKind, x: &[f32], n: usize, out: &mut QAct) {
    assert!(n > 0 && x.len() % n == 0, "activation length {} is not a multiple of {n}", x.len());
    let rows = x.len() / n;
    static VERSIONS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);
    out.version = VERSIONS.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    out.n = n;
    out.rows = rows;
    out.qs.resize(x.len(), 0);
    out.d.resize(x.len() / 32, 0.0);
    out.bsums.resize(x.len() / 16, 0);
    match kind {
        ActKind::Q8K => {
            assert!(n % 256 == 0, "Q8_K rows must be a multiple of 256, got {n}");
            for (b, xb) in x.chunks_exact(256).enumerate() {
                let d = quantize_block_q8k(xb, &mut out.qs[256 * b..256 * b + 256]);
                out.d[8 * b..8 * b + 8].fill(d);
            }
        }
        ActKind::Q8_0 | ActKind::Q8_1 => {
            assert!(n % 32 == 0, "Q8_0 rows must be a multiple of 32, got {n}");
            for (b, xb) in x.chunks_exact(32).enumerate() {
                out.d[b] = quantize_block_q8_0(xb, &mut out.qs[32 * b..32 * b + 32]);
            }
        }
        ActKind::F32 => panic!("F32 activations are not quantized"),
    }
    for (g, s) in out.bsums.iter_mut().enumerate() {
        *s = out.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
    }
}

/// ggml `quantize_row_q8_0`: d = max|x|/127 stored as fp16, q = round(x/d) (half away from zero).
fn quantize_block_q8_0(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (qi, &xi) in q.iter_mut().zip(x) {
        *qi = (xi * id).round() as i8;
    }
    half::f16::from_f32(d).to_f32()
}

/// ggml `quantize_row_q8_K_ref`: scale from the element of largest magnitude (signed), round to
/// nearest even, clamp at 127; d = 1/iscale in f32 (may be negative).
fn quantize_block_q8k(x: &[f32], q: &mut [i8]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (qi, &xi) in q.iter_mut().zip(x) {
        *qi = ((iscale * xi).round_ties_even() as i32).min(127) as i8;
    }
    1.0 / iscale
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn q8k_roundtrip_is_close() {
        let x: Vec<f32> = (0..512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let mut a = QAct::default();
        quantize_q8(ActKind::Q8K, &x, 512, &mut a);
        let r = a.row(0);
        for (i, &v) in x.iter().enumerate() {
            assert!((r.value(i) - v).abs() <= 50.0 / 7.0 / 127.0 * 0.51, "{i}");
        }
        assert_eq!(a.bsums[0], a.qs[..16].iter().map(|&q| q as i16).sum::<i16>());
    }

    #[test]
    fn q8_0_zero_block() {
        let x = vec![0.0f32; 32];
        let mut a = QAct::default();
        quantize_q8(ActKind::Q8_0, &x, 32, &mut a);
        assert_eq!(a.d[0], 0.0);
        assert!(a.qs.iter().all(|&q| q == 0));
    }
}
