//! F32 / F16 / BF16 tensors. They multiply f32 activations directly (no activation quantisation).

use super::GgmlType;

/// Converts a row of a float type to f32 (`out.len()` elements).
pub fn to_f32(ty: GgmlType, row: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (o, b) in out.iter_mut().zip(row.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
        _ => panic!("{ty} is not a float type"),
    }
}

/// Scalar reference: Σ w[i]·x[i] for a float-typed weight row.
pub fn dot_ref(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
    let mut w = vec![0.0f32; x.len()];
    to_f32(ty, row, &mut w);
    w.iter().zip(x).map(|(a, b)| a * b).sum()
}

/// Fast Σ w[i]·x[i] for a float-typed weight row.
#[inline]
pub fn dot(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build; lengths are checked inside.
        return unsafe { simd::dot(ty, row, x) };
    }
    #[allow(unreachable_code)]
    match ty {
        GgmlType::F32 => {
            // Eight independent accumulators let the native compiler vectorise.
            let mut acc = [0.0f32; 8];
            let rows = row.chunks_exact(32);
            let xs = x.chunks_exact(8);
            for (b, xv) in rows.zip(xs) {
                for k in 0..8 {
                    let o = 4 * k;
                    acc[k] += f32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]) * xv[k];
                }
            }
            let mut sum: f32 = acc.iter().sum();
            let done = x.len() / 8 * 8;
            for (b, xi) in row[4 * done..].chunks_exact(4).zip(&x[done..]) {
                sum += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * xi;
            }
            sum
        }
        _ => dot_ref(ty, row, x),
    }
}

/// f32 · f32 dot product of two slices (used for exact-mode matmuls and attention).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // SAFETY: simd128 is enabled for this build.
        return unsafe { simd::dot_f32(a, b) };
    }
    #[allow(unreachable_code)]
    {
        let n = a.len().min(b.len());
        let mut acc = [0.0f32; 8];
        for i in 0..n / 8 {
            for k in 0..8 {
                acc[k] += a[8 * i + k] * b[8 * i + k];
            }
        }
        let mut s: f32 = acc.iter().sum();
        for i in n / 8 * 8..n {
            s += a[i] * b[i];
        }
        s
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd {
    use super::GgmlType;
    use crate::quant::legacy::simd::f16x4_to_f32x4;
    use crate::quant::simd::hsum_f32;
    use core::arch::wasm32::*;

    #[target_feature(enable = "simd128")]
    pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (mut s0, mut s1) = (f32x4_splat(0.0), f32x4_splat(0.0));
        let mut i = 0;
        while i + 8 <= n {
            let a0 = v128_load(a.as_ptr().add(i) as *const v128);
            let b0 = v128_load(b.as_ptr().add(i) as *const v128);
            let a1 = v128_load(a.as_ptr().add(i + 4) as *const v128);
            let b1 = v128_load(b.as_ptr().add(i + 4) as *const v128);
            s0 = f32x4_add(s0, f32x4_mul(a0, b0));
            s1 = f32x4_add(s1, f32x4_mul(a1, b1));
            i += 8;
        }
        let mut s = hsum_f32(f32x4_add(s0, s1));
        while i < n {
            s += a[i] * b[i];
            i += 1;
        }
        s
    }

    #[target_feature(enable = "simd128")]
    pub unsafe fn dot(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
        let n = x.len();
        match ty {
            GgmlType::F32 => {
                assert!(row.len() >= 4 * n);
                let w = core::slice::from_raw_parts(row.as_ptr() as *const f32, n);
                // Unaligned loads are fine in wasm; from_raw_parts needs only a valid pointer here
                // because we never read through `w` other than with v128_load / read_unaligned.
                // Four independent accumulators (16 floats a step): more loads in flight while
                // the row streams from memory (+~9% over two, measured in Node).
                let mut s = [f32x4_splat(0.0); 4];
                let mut i = 0;
                while i + 16 <= n {
                    for (k, sk) in s.iter_mut().enumerate() {
                        let wk = v128_load(w.as_ptr().add(i + 4 * k) as *const v128);
                        let xk = v128_load(x.as_ptr().add(i + 4 * k) as *const v128);
                        *sk = f32x4_add(*sk, f32x4_mul(wk, xk));
                    }
                    i += 16;
                }
                let mut s = hsum_f32(f32x4_add(f32x4_add(s[0], s[1]), f32x4_add(s[2], s[3])));
                while i < n {
                    s += (w.as_ptr().add(i)).read_unaligned() * x[i];
                    i += 1;
                }
                s
            }
            GgmlType::BF16 => {
                assert!(row.len() >= 2 * n);
                let mut acc = f32x4_splat(0.0);
                let mut i = 0;
                while i + 8 <= n {
                    let h = v128_load(row.as_ptr().add(2 * i) as *const v128); // 8 × bf16
                    let lo = i32x4_shl(u32x4_extend_low_u16x8(h), 16);
                    let hi = i32x4_shl(u32x4_extend_high_u16x8(h), 16);
                    let x0 = v128_load(x.as_ptr().add(i) as *const v128);
                    let x1 = v128_load(x.as_ptr().add(i + 4) as *const v128);
                    acc = f32x4_add(acc, f32x4_add(f32x4_mul(lo, x0), f32x4_mul(hi, x1)));
                    i += 8;
                }
                let mut s = hsum_f32(acc);
                while i < n {
                    let b = u16::from_le_bytes([row[2 * i], row[2 * i + 1]]);
                    s += f32::from_bits((b as u32) << 16) * x[i];
                    i += 1;
                }
                s
            }
            GgmlType::F16 => {
                assert!(row.len() >= 2 * n);
                let mut acc = f32x4_splat(0.0);
                let mut i = 0;
                while i + 8 <= n {
                    let h = v128_load(row.as_ptr().add(2 * i) as *const v128); // 8 × fp16
                    let lo = f16x4_to_f32x4(u32x4_extend_low_u16x8(h));
                    let hi = f16x4_to_f32x4(u32x4_extend_high_u16x8(h));
                    let x0 = v128_load(x.as_ptr().add(i) as *const v128);
                    let x1 = v128_load(x.as_ptr().add(i + 4) as *const v128);
                    acc = f32x4_add(acc, f32x4_add(f32x4_mul(lo, x0), f32x4_mul(hi, x1)));
                    i += 8;
                }
                let mut s = hsum_f32(acc);
                while i < n {
                    let b = u16::from_le_bytes([row[2 * i], row[2 * i + 1]]);
                    s += half::f16::from_bits(b).to_f32() * x[i];
                    i += 1;
                }
                s
            }
            _ => super::dot_ref(ty, row, x),
        }
    }
}
