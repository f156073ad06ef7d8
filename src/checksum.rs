//! Chunk checksums of the OPFS model cache (www/src/cache.ts).
//!
//! A cached chunk's checksum is recorded when its bytes are stored (after the download was
//! verified, or with the sha256 still to come) and checked every time the chunk is read back, so a
//! truncated or bit-flipped cache is found and the chunk fetched again. It is not a cryptographic
//! hash — the file itself is verified against the Hub's sha256 — but it runs on every cached byte of
//! every load, so it must be far faster than reading the bytes: SIMD128 lanes, ~10 GB/s in wasm.
//!
//! Each checksum string names its algorithm, so a cache written by an older build stays readable:
//!
//! - `c2-<16 hex>:<length>` (current, [`Kind::Lanes`]): the input as 128-byte blocks of 32
//!   little-endian u32 words, word `j` of every block folded into lane `j`:
//!   `s[j] = rotl((s[j] ^ w) · P, 15)`. The last block is zero-padded; the length is part of the
//!   string. The 32 lanes (8 SIMD vectors, independent chains) are folded into two u32s at the end.
//! - `<16 hex>:<length>` (legacy, [`Kind::Serial`]): two serial multiply–xor chains over u32 words,
//!   as the JS checksum of earlier builds wrote them (~2 GB/s; read back only, to migrate).
//!
//! Every step of a lane (xor with the word, multiply by an odd constant, rotate) is a bijection of
//! the lane's state, and so is the fold, so a change confined to one word is always detected.

/// Words per block (= lanes).
const LANES: usize = 32;
const BLOCK: usize = LANES * 4;
const P: u32 = 0x9e37_79b1;
const ROT: u32 = 15;

/// Which checksum a string names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `c2-…`: SIMD lanes (what new cache entries get).
    Lanes,
    /// The legacy serial checksum of cache entries written before `c2`.
    Serial,
}

impl Kind {
    /// The algorithm a recorded checksum string was made with (`None`: not a checksum).
    pub fn of(digest: &str) -> Option<Kind> {
        let body = digest.strip_prefix("c2-");
        let (hex, len) = body.unwrap_or(digest).split_once(':')?;
        if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) || len.parse::<u64>().is_err() {
            return None;
        }
        Some(if body.is_some() { Kind::Lanes } else { Kind::Serial })
    }
}

/// A streaming checksum of either kind.
#[derive(Clone)]
pub struct Checksum {
    kind: Kind,
    /// Lanes: one state word per lane. Serial: `[a, b]` in lanes 0 and 1.
    s: [u32; LANES],
    /// Bytes waiting for a whole block (Lanes) or word (Serial).
    buf: [u8; BLOCK],
    buf_len: usize,
    n: u64,
}

impl Checksum {
    pub fn new(kind: Kind) -> Checksum {
        let mut s = [0u32; LANES];
        match kind {
            Kind::Lanes => {
                for (j, x) in s.iter_mut().enumerate() {
                    *x = 0x811c_9dc5 ^ (j as u32).wrapping_mul(0x85eb_ca6b);
                }
            }
            Kind::Serial => {
                s[0] = 0x811c_9dc5;
                s[1] = 0x1b87_3593;
            }
        }
        Checksum { kind, s, buf: [0; BLOCK], buf_len: 0, n: 0 }
    }

    pub fn update(&mut self, mut bytes: &[u8]) {
        self.n += bytes.len() as u64;
        let unit = self.unit();
        if self.buf_len > 0 {
            let take = (unit - self.buf_len).min(bytes.len());
            self.buf[self.buf_len..self.buf_len + take].copy_from_slice(&bytes[..take]);
            self.buf_len += take;
            bytes = &bytes[take..];
            if self.buf_len < unit {
                return;
            }
            let block = self.buf;
            self.blocks(&block[..unit]);
            self.buf_len = 0;
        }
        let whole = bytes.len() / unit * unit;
        self.blocks(&bytes[..whole]);
        let rest = &bytes[whole..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.buf_len = rest.len();
    }

    /// The checksum string of everything seen so far.
    pub fn digest(&self) -> String {
        let mut c = self.clone();
        match self.kind {
            Kind::Lanes => {
                if c.buf_len > 0 {
                    c.buf[c.buf_len..].fill(0);
                    let block = c.buf;
                    c.blocks(&block);
                }
                let (mut a, mut b) = (0x811c_9dc5u32 ^ (self.n as u32), 0x1b87_3593u32 ^ ((self.n >> 32) as u32));
                for &x in &c.s {
                    a = (a ^ x).wrapping_mul(0x0100_0193).rotate_left(13);
                    b = (b.rotate_left(5) ^ x).wrapping_mul(0x5bd1_e995);
                }
                format!("c2-{:08x}{:08x}:{}", fmix(a), fmix(b), self.n)
            }
            Kind::Serial => {
                let (mut a, mut b) = (c.s[0], c.s[1]);
                if c.buf_len > 0 {
                    let mut w = 0u32;
                    for (i, &x) in c.buf[..c.buf_len].iter().enumerate() {
                        w |= (x as u32) << (8 * i);
                    }
                    let w = w ^ ((c.buf_len as u32) << 30);
                    a = (a ^ w).wrapping_mul(0x0100_0193);
                    b = (b.rotate_left(5) ^ w).wrapping_mul(0x5bd1_e995);
                }
                format!("{a:08x}{b:08x}:{}", self.n)
            }
        }
    }

    fn unit(&self) -> usize {
        match self.kind {
            Kind::Lanes => BLOCK,
            Kind::Serial => 4,
        }
    }

    /// Whole units (blocks or words) of `bytes`.
    fn blocks(&mut self, bytes: &[u8]) {
        match self.kind {
            Kind::Lanes => lanes(&mut self.s, bytes),
            Kind::Serial => {
                let (mut a, mut b) = (self.s[0], self.s[1]);
                for w in bytes.chunks_exact(4) {
                    let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    a = (a ^ w).wrapping_mul(0x0100_0193);
                    b = (b.rotate_left(5) ^ w).wrapping_mul(0x5bd1_e995);
                }
                self.s[0] = a;
                self.s[1] = b;
            }
        }
    }
}

/// The checksum of `bytes` with the algorithm `want` names, compared with it.
pub fn matches(want: &str, bytes: &[u8]) -> bool {
    Kind::of(want).is_some_and(|k| {
        let mut c = Checksum::new(k);
        c.update(bytes);
        c.digest() == want
    })
}

fn fmix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Scalar reference of the lane step over whole blocks.
pub fn lanes_scalar(s: &mut [u32; LANES], bytes: &[u8]) {
    for block in bytes.chunks_exact(BLOCK) {
        for (x, w) in s.iter_mut().zip(block.chunks_exact(4)) {
            let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            *x = (*x ^ w).wrapping_mul(P).rotate_left(ROT);
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn lanes(s: &mut [u32; LANES], bytes: &[u8]) {
    use core::arch::wasm32::*;
    let mut v = [u32x4_splat(0); LANES / 4];
    for (k, x) in v.iter_mut().enumerate() {
        *x = u32x4(s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]);
    }
    let p = u32x4_splat(P);
    for block in bytes.chunks_exact(BLOCK) {
        for (k, x) in v.iter_mut().enumerate() {
            // SAFETY: `block` holds BLOCK = 8·16 bytes; v128_load has no alignment requirement.
            let w = unsafe { v128_load(block.as_ptr().add(16 * k) as *const v128) };
            let m = i32x4_mul(v128_xor(*x, w), p);
            *x = v128_or(i32x4_shl(m, ROT), u32x4_shr(m, 32 - ROT));
        }
    }
    for (k, x) in v.iter().enumerate() {
        s[4 * k] = u32x4_extract_lane::<0>(*x);
        s[4 * k + 1] = u32x4_extract_lane::<1>(*x);
        s[4 * k + 2] = u32x4_extract_lane::<2>(*x);
        s[4 * k + 3] = u32x4_extract_lane::<3>(*x);
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
fn lanes(s: &mut [u32; LANES], bytes: &[u8]) {
    lanes_scalar(s, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn sum(kind: Kind, b: &[u8]) -> String {
        let mut c = Checksum::new(kind);
        c.update(b);
        c.digest()
    }

    #[test]
    fn legacy_matches_the_js_checksum_of_earlier_builds() {
        // Written by www/src/checksum.ts (the JS class this replaces) for these inputs.
        assert_eq!(sum(Kind::Serial, b""), "811c9dc51b873593:0");
        assert_eq!(sum(Kind::Serial, b"abc"), "c07f6f2c0fd5e32a:3");
        assert_eq!(sum(Kind::Serial, b"hello, world!"), "5a6779ec21ea7098:13");
    }

    #[test]
    fn streaming_in_any_pieces_equals_one_update() {
        let b = bytes(5000, 7);
        for kind in [Kind::Lanes, Kind::Serial] {
            let whole = sum(kind, &b);
            for step in [1, 3, 4, 63, 127, 128, 129, 1000] {
                let mut c = Checksum::new(kind);
                b.chunks(step).for_each(|p| c.update(p));
                assert_eq!(c.digest(), whole, "{kind:?} step {step}");
            }
        }
    }

    #[test]
    fn every_single_bit_flip_and_truncation_is_detected() {
        let b = bytes(700, 11);
        for kind in [Kind::Lanes, Kind::Serial] {
            let want = sum(kind, &b);
            for bit in 0..b.len() * 8 {
                let mut x = b.clone();
                x[bit / 8] ^= 1 << (bit % 8);
                assert_ne!(sum(kind, &x), want, "{kind:?} bit {bit}");
            }
            assert_ne!(sum(kind, &b[..699]), want);
            let mut zero_padded = b.clone();
            zero_padded.push(0);
            assert_ne!(sum(kind, &zero_padded), want);
        }
    }

    #[test]
    fn simd_lanes_equal_the_scalar_reference() {
        for n in [0, 128, 256, 4096 + 128, 1 << 16] {
            let b = bytes(n, 3);
            let (mut a, mut r) = ([5u32; LANES], [5u32; LANES]);
            lanes(&mut a, &b);
            lanes_scalar(&mut r, &b);
            assert_eq!(a, r, "{n} bytes");
        }
    }

    #[test]
    fn kinds_are_told_apart_by_their_strings() {
        assert_eq!(Kind::of(&sum(Kind::Lanes, b"x")), Some(Kind::Lanes));
        assert_eq!(Kind::of(&sum(Kind::Serial, b"x")), Some(Kind::Serial));
        assert_eq!(Kind::of("nonsense"), None);
        assert_eq!(Kind::of("c2-zz:1"), None);
        assert!(matches(&sum(Kind::Lanes, b"abc"), b"abc"));
        assert!(!matches(&sum(Kind::Lanes, b"abc"), b"abd"));
        assert!(matches(&sum(Kind::Serial, b"abc"), b"abc"));
    }
}
