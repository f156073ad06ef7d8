//! The attention KV cache's storage: f32 (exact; the default, what the fixtures were made with) or
//! f16 (half the memory — llama.cpp's default — for long contexts).
//!
//! The cache is append-only per position; attention reads one head's row (Dh values) per position.
//! An f16 row is converted to f32 into a small buffer before use (`row`), with a branch-free
//! conversion LLVM vectorises; values are rounded to nearest-even when appended.

use crate::quant::f16_bits_to_f32;
use half::f16;

/// How K and V values are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    #[default]
    F32,
    F16,
}

impl KvType {
    pub fn parse(s: &str) -> Option<KvType> {
        match s {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            _ => None,
        }
    }
    /// Bytes per stored value.
    pub fn bytes(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }
}

/// One of K or V for one layer: `positions × (Hkv·Dh)` values.
#[derive(Clone, Debug)]
pub enum KvCache {
    F32(Vec<f32>),
    /// IEEE half-precision bit patterns.
    F16(Vec<u16>),
}

impl KvCache {
    /// An empty cache with room for `n` values reserved up front (`None` when out of memory).
    pub fn with_capacity(ty: KvType, n: usize) -> Option<KvCache> {
        Some(match ty {
            KvType::F32 => {
                let mut v = Vec::new();
                v.try_reserve_exact(n).ok()?;
                KvCache::F32(v)
            }
            KvType::F16 => {
                let mut v = Vec::new();
                v.try_reserve_exact(n).ok()?;
                KvCache::F16(v)
            }
        })
    }

    /// Values stored.
    pub fn len(&self) -> usize {
        match self {
            KvCache::F32(v) => v.len(),
            KvCache::F16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes reserved.
    pub fn bytes(&self) -> usize {
        match self {
            KvCache::F32(v) => 4 * v.capacity(),
            KvCache::F16(v) => 2 * v.capacity(),
        }
    }

    pub fn truncate(&mut self, n: usize) {
        match self {
            KvCache::F32(v) => v.truncate(n),
            KvCache::F16(v) => v.truncate(n),
        }
    }

    /// Appends values (rounded to f16 in an f16 cache).
    pub fn append(&mut self, x: &[f32]) {
        match self {
            KvCache::F32(v) => v.extend_from_slice(x),
            KvCache::F16(v) => v.extend(x.iter().map(|&a| f16::from_f32(a).to_bits())),
        }
    }

    /// Values `[start, start + n)` as f32: a view of an f32 cache, or converted into `tmp`.
    #[inline]
    pub fn row<'a>(&'a self, start: usize, n: usize, tmp: &'a mut [f32]) -> &'a [f32] {
        match self {
            KvCache::F32(v) => &v[start..start + n],
            KvCache::F16(v) => {
                let out = &mut tmp[..n];
                for (o, &h) in out.iter_mut().zip(&v[start..start + n]) {
                    *o = f16_bits_to_f32(h);
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn caches_append_truncate_and_read_rows() {
        let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.37 - 2.0).collect();
        for ty in [KvType::F32, KvType::F16] {
            let mut c = KvCache::with_capacity(ty, 64).unwrap();
            c.append(&x);
            c.append(&x);
            assert_eq!(c.len(), 32);
            let mut tmp = [0.0f32; 8];
            let r = c.row(20, 8, &mut tmp);
            for (a, b) in r.iter().zip(&x[4..12]) {
                assert!((a - b).abs() <= b.abs() * 1e-3, "{ty:?}: {a} vs {b}");
            }
            c.truncate(16);
            assert_eq!(c.len(), 16);
            assert_eq!(c.bytes(), 64 * ty.bytes());
        }
    }
}
