//! A tiny GGUF writer for tests: builds files in memory (so it works in wasm, which has no
//! filesystem) and exposes every field, so that a test can write a valid file and then corrupt
//! exactly one thing.
//!
//! ```ignore
//! let mut b = GgufBuilder::new()
//!     .kv("general.architecture", Value::String("qwen35".into()))
//!     .tensor("x", &[8, 2], GgmlType::F32);
//! b.tensors[0].dims = vec![0, 2]; // corrupt one field
//! let bytes = b.build();
//! ```

#![allow(dead_code)]

pub use clef_web::gguf::{encode_value, put_bytes};
use clef_web::gguf::{Array, Value};
use clef_web::quant::GgmlType;

/// One tensor table entry, exactly as it will be written.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: Vec<u8>,
    pub dims: Vec<u64>,
    pub ty: u32,
    pub offset: u64,
}

/// Everything that goes into the file, field by field.
#[derive(Clone, Debug)]
pub struct GgufBuilder {
    pub magic: [u8; 4],
    pub version: u32,
    /// Written instead of the real counts when set.
    pub n_tensors_override: Option<u64>,
    pub n_kv_override: Option<u64>,
    /// (raw key bytes, value type id, encoded value).
    pub kvs: Vec<(Vec<u8>, u32, Vec<u8>)>,
    pub tensors: Vec<TensorSpec>,
    /// Padding before the data section and the offsets chosen by [`GgufBuilder::tensor`]
    /// (independent of any `general.alignment` key, so the two can disagree on purpose).
    pub alignment: u64,
    /// Length of the data section (the end of the last tensor; no padding after it).
    pub data_len: u64,
}

impl Default for GgufBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufBuilder {
    pub fn new() -> Self {
        GgufBuilder {
            magic: *b"GGUF",
            version: 3,
            n_tensors_override: None,
            n_kv_override: None,
            kvs: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
            data_len: 0,
        }
    }

    /// Appends a key/value pair.
    pub fn kv(mut self, key: &str, v: Value) -> Self {
        let (ty, bytes) = encode_value(&v);
        self.kvs.push((key.as_bytes().to_vec(), ty, bytes));
        self
    }

    /// Appends a key/value pair given as raw bytes.
    pub fn raw_kv(mut self, key: &[u8], ty: u32, payload: Vec<u8>) -> Self {
        self.kvs.push((key.to_vec(), ty, payload));
        self
    }

    /// Appends a tensor at the next aligned offset after the previous ones.
    pub fn tensor(mut self, name: &str, dims: &[u64], ty: GgmlType) -> Self {
        let n: u64 = dims.iter().product();
        let size = n / ty.block_elems() as u64 * ty.block_bytes() as u64;
        let offset = self.data_len.next_multiple_of(self.alignment);
        self.tensors.push(TensorSpec { name: name.as_bytes().to_vec(), dims: dims.to_vec(), ty: ty as u32, offset });
        self.data_len = offset + size;
        self
    }

    /// The file.
    pub fn build(&self) -> Vec<u8> {
        let mut out = self.build_header();
        let data_start = (out.len() as u64).next_multiple_of(self.alignment) as usize;
        out.resize(data_start, 0);
        // Recognisable filler for the tensor data.
        out.extend((0..self.data_len).map(|i| (i * 31 % 251) as u8));
        out
    }

    /// Only the header: magic, counts, key/values and tensor table, without padding or data.
    pub fn build_header(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        let n_tensors = self.n_tensors_override.unwrap_or(self.tensors.len() as u64);
        let n_kv = self.n_kv_override.unwrap_or(self.kvs.len() as u64);
        out.extend_from_slice(&n_tensors.to_le_bytes());
        out.extend_from_slice(&n_kv.to_le_bytes());
        for (key, ty, payload) in &self.kvs {
            put_bytes(&mut out, key);
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(payload);
        }
        for t in &self.tensors {
            put_bytes(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.to_le_bytes());
            out.extend_from_slice(&t.offset.to_le_bytes());
        }
        out
    }
}

/// The metadata of [`small_model`]: one value of every type, arrays of every type, an empty
/// array and a nested one.
pub fn small_metadata() -> Vec<(String, Value)> {
    let s = |x: &str| x.to_string();
    vec![
        (s("general.architecture"), Value::String(s("qwen35"))),
        (s("general.alignment"), Value::U32(32)),
        (s("test.u8"), Value::U8(200)),
        (s("test.i8"), Value::I8(-5)),
        (s("test.u16"), Value::U16(60000)),
        (s("test.i16"), Value::I16(-30000)),
        (s("test.u32"), Value::U32(4_000_000_000)),
        (s("test.i32"), Value::I32(-7)),
        (s("test.f32"), Value::F32(1.5)),
        (s("test.bool"), Value::Bool(true)),
        (s("test.string"), Value::String(s("héllo, wörld"))),
        (s("test.u64"), Value::U64(1 << 40)),
        (s("test.i64"), Value::I64(-1)),
        (s("test.f64"), Value::F64(0.25)),
        (s("test.arr.u8"), Value::Array(Array::U8(vec![1, 2, 255]))),
        (s("test.arr.i8"), Value::Array(Array::I8(vec![-1, 0, 1]))),
        (s("test.arr.u16"), Value::Array(Array::U16(vec![1, 65535]))),
        (s("test.arr.i16"), Value::Array(Array::I16(vec![-2, 2]))),
        (s("test.arr.u32"), Value::Array(Array::U32(vec![3, 4, 5]))),
        (s("test.arr.i32"), Value::Array(Array::I32(vec![11, 11, 10, 0]))),
        (s("test.arr.f32"), Value::Array(Array::F32(vec![0.5, -2.0]))),
        (s("test.arr.bool"), Value::Array(Array::Bool(vec![true, true, false]))),
        (s("test.arr.string"), Value::Array(Array::String(vec![s("a"), s(""), s("ü€😀")]))),
        (s("test.arr.u64"), Value::Array(Array::U64(vec![u64::MAX]))),
        (s("test.arr.i64"), Value::Array(Array::I64(vec![i64::MIN, 3]))),
        (s("test.arr.f64"), Value::Array(Array::F64(vec![1e300]))),
        (s("test.arr.empty"), Value::Array(Array::U32(vec![]))),
        (s("test.arr.nested"), Value::Array(Array::Array(vec![Array::U32(vec![1, 2]), Array::String(vec![s("x")])]))),
    ]
}

/// A small valid model-like file: the metadata above and four tensors of three types, laid out
/// so that the data section ends on an alignment boundary (the file has no trailing padding).
pub fn small_model() -> GgufBuilder {
    let mut b = GgufBuilder::new();
    for (k, v) in small_metadata() {
        b = b.kv(&k, v);
    }
    b.tensor("token_embd.weight", &[8, 2], GgmlType::F32) // 64 bytes @ 0
        .tensor("blk.0.ffn_up.weight", &[256, 1], GgmlType::Q4_K) // 144 bytes @ 64
        .tensor("blk.0.attn_q.weight", &[32, 3], GgmlType::Q8_0) // 102 bytes @ 224
        .tensor("output_norm.weight", &[8], GgmlType::F32) // 32 bytes @ 352, ends at 384
}
