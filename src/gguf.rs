//! GGUF reader: parses and validates the header of a GGUF file (metadata + tensor table) from
//! the first bytes of the file, without touching the tensor data.
//!
//! # The format in one page
//!
//! A GGUF file is little-endian throughout and has four parts:
//!
//! ```text
//! "GGUF"                       4-byte magic
//! version          u32         2 or 3 (identical layouts; v1 used 32-bit counts and is not read)
//! n_tensors        u64
//! n_kv             u64
//! n_kv × key/value:            key = string, value type = u32, value (see below)
//! n_tensors × tensor info:     name = string, n_dims = u32, ne[n_dims] = u64 each (ne0 first,
//!                              the contiguous dimension), ggml type = u32, offset = u64
//! padding                      zero bytes up to a multiple of `general.alignment` (default 32)
//! data section                 the tensors; each tensor's offset is relative to the start of
//!                              this section and is itself a multiple of the alignment
//! ```
//!
//! A string is a `u64` byte length followed by that many bytes of UTF-8 (no terminating NUL).
//! Metadata value types:
//!
//! | id | type   | id | type                                      |
//! |----|--------|----|-------------------------------------------|
//! | 0  | u8     | 7  | bool (1 byte)                             |
//! | 1  | i8     | 8  | string                                    |
//! | 2  | u16    | 9  | array: u32 element type, u64 count, items |
//! | 3  | i16    | 10 | u64                                       |
//! | 4  | u32    | 11 | i64                                       |
//! | 5  | i32    | 12 | f64                                       |
//! | 6  | f32    |    |                                           |
//!
//! Array items are stored back to back with no per-item type tag; an array of arrays stores a
//! full (type, count, items) triple per item.
//!
//! # Incremental parsing
//!
//! [`parse_header`] is a pure function of a byte prefix. A browser loader typically fetches the
//! first 64 KiB, calls it, and on [`GgufError::NeedMore`] fetches at least `needed` bytes (or
//! twice as many, whichever is larger) and calls it again. Re-parsing from the start each time
//! costs at most about twice a single parse when the prefix grows geometrically.
//!
//! # What is validated
//!
//! Everything a later stage would otherwise have to trust: magic and version; counts and lengths
//! against the limits below; UTF-8 of keys, string values and tensor names; unique keys and
//! tensor names; known value and tensor types; `general.alignment` (a `u32` power of two) and
//! `general.architecture` (a string); per tensor: 1..=4 dims, each in `1..=i64::MAX`, an element
//! count that fits `i64`, `ne0` a multiple of the type's block size, an aligned offset, and (when
//! the file size is known) data that lies inside the file; and no two tensors overlap.
//!
//! # Limits
//!
//! A header that exceeds one of these gives [`GgufError::TooLarge`]. They are far above any real
//! model (Qwen3.5-9B: 427 tensors, ~40 keys, a 248k-entry vocabulary, header ≈ 11 MB) and exist
//! so that a corrupt count can never make the reader ask for, or allocate, absurd amounts:
//! * [`MAX_TENSORS`] tensors and [`MAX_KV`] metadata keys (each 2^20);
//! * [`MAX_STRING_LEN`] bytes per string and [`MAX_ARRAY_LEN`] items per array (each 2^30);
//! * [`MAX_ARRAY_DEPTH`] levels of arrays nested in arrays;
//! * [`MAX_DIMS`] dimensions per tensor (ggml's limit).
//!
//! Independently of these limits, no allocation is ever larger than the bytes actually present
//! in the prefix: before an array's items are read, its minimum encoded size (count × the
//! smallest item) must be available.

use crate::quant::GgmlType;
use std::collections::HashMap;
use std::fmt;

/// Most tensors a file may declare.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most metadata key/value pairs a file may declare.
pub const MAX_KV: u64 = 1 << 20;
/// Longest string (key, value, array item or tensor name), in bytes.
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// Most items in one array.
pub const MAX_ARRAY_LEN: u64 = 1 << 30;
/// Deepest nesting of arrays inside arrays (an array of scalars has depth 1).
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Most dimensions of a tensor.
pub const MAX_DIMS: u32 = 4;
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Array),
}

/// A metadata array: one typed vector (arrays are homogeneous in GGUF).
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// An array of arrays (each inner array has its own element type).
    Array(Vec<Array>),
    /// A string array whose items a [`Detail::Layout`] parse read and checked but did not keep.
    Elided { len: usize },
}

impl Value {
    /// The GGUF name of this value's type, e.g. `"u32"` or `"array"`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
            Value::Array(_) => "array",
        }
    }

    /// Any integer type holding a non-negative value, or a bool (0 / 1).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::Bool(b) => Some(b.into()),
            _ => None,
        }
    }

    /// F32, or F64 rounded to f32.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// A bool, or an integer 0 / 1.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            v => match v.as_u64()? {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            },
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::Elided { len } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF name of the item type, e.g. `"i32"`.
    pub fn elem_type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "u8",
            Array::I8(_) => "i8",
            Array::U16(_) => "u16",
            Array::I16(_) => "i16",
            Array::U32(_) => "u32",
            Array::I32(_) => "i32",
            Array::F32(_) => "f32",
            Array::Bool(_) => "bool",
            Array::String(_) | Array::Elided { .. } => "string",
            Array::U64(_) => "u64",
            Array::I64(_) => "i64",
            Array::F64(_) => "f64",
            Array::Array(_) => "array",
        }
    }

    /// Items of any integer type, all non-negative, or bools (0 / 1); `None` otherwise.
    pub fn as_u64_vec(&self) -> Option<Vec<u64>> {
        fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> Option<u64>) -> Option<Vec<u64>> {
            v.iter().map(|&x| f(x)).collect()
        }
        match self {
            Array::U8(v) => conv(v, |x| Some(x.into())),
            Array::U16(v) => conv(v, |x| Some(x.into())),
            Array::U32(v) => conv(v, |x| Some(x.into())),
            Array::U64(v) => Some(v.clone()),
            Array::I8(v) => conv(v, |x| u64::try_from(x).ok()),
            Array::I16(v) => conv(v, |x| u64::try_from(x).ok()),
            Array::I32(v) => conv(v, |x| u64::try_from(x).ok()),
            Array::I64(v) => conv(v, |x| u64::try_from(x).ok()),
            Array::Bool(v) => conv(v, |x| Some(x.into())),
            _ => None,
        }
    }

    /// Items of any integer type that all fit in `i32`, or bools (0 / 1); `None` otherwise.
    pub fn as_i32_vec(&self) -> Option<Vec<i32>> {
        fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> Option<i32>) -> Option<Vec<i32>> {
            v.iter().map(|&x| f(x)).collect()
        }
        match self {
            Array::I32(v) => Some(v.clone()),
            Array::U8(v) => conv(v, |x| Some(x.into())),
            Array::I8(v) => conv(v, |x| Some(x.into())),
            Array::U16(v) => conv(v, |x| Some(x.into())),
            Array::I16(v) => conv(v, |x| Some(x.into())),
            Array::U32(v) => conv(v, |x| i32::try_from(x).ok()),
            Array::U64(v) => conv(v, |x| i32::try_from(x).ok()),
            Array::I64(v) => conv(v, |x| i32::try_from(x).ok()),
            Array::Bool(v) => conv(v, |x| Some(x.into())),
            _ => None,
        }
    }

    /// F32 items, or F64 items rounded to f32; `None` otherwise.
    pub fn as_f32_vec(&self) -> Option<Vec<f32>> {
        match self {
            Array::F32(v) => Some(v.clone()),
            Array::F64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            _ => None,
        }
    }

    /// Bools, or integers that are all 0 / 1; `None` otherwise.
    pub fn as_bool_vec(&self) -> Option<Vec<bool>> {
        match self {
            Array::Bool(v) => Some(v.clone()),
            a => a
                .as_u64_vec()?
                .into_iter()
                .map(|x| match x {
                    0 => Some(false),
                    1 => Some(true),
                    _ => None,
                })
                .collect(),
        }
    }

    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            Array::String(v) => Some(v),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tensor table and header
// ---------------------------------------------------------------------------------------------

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// `ne0, ne1, …`: `ne0` is the contiguous dimension (the length of a row).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Start of the tensor's bytes, relative to [`Header::data_offset`].
    pub offset: u64,
    /// Bytes of tensor data (without trailing padding).
    pub size: u64,
}

impl TensorInfo {
    /// Product of the dims.
    pub fn n_elements(&self) -> u64 {
        // Validated not to overflow at parse time; saturate for hand-built values.
        self.dims.iter().fold(1u64, |n, &d| n.saturating_mul(d))
    }

    /// `ne[i]`, with 1 for dimensions beyond `dims.len()` (as ggml does).
    pub fn ne(&self, i: usize) -> u64 {
        self.dims.get(i).copied().unwrap_or(1)
    }

    /// Number of rows: the product of all dims but `ne0`.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).fold(1u64, |n, &d| n.saturating_mul(d))
    }

    /// Bytes of one row (`ne0` elements).
    pub fn row_bytes(&self) -> u64 {
        self.ne(0) / self.ty.block_elems() as u64 * self.ty.block_bytes() as u64
    }
}

/// Name → position lookup built at parse time. `Debug` prints only the size, so that
/// `{:?}` of a header stays readable.
#[derive(Clone, Default, PartialEq)]
struct Index(HashMap<String, usize>);

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Index({} entries)", self.0.len())
    }
}

/// The parsed header of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub version: u32,
    /// `general.alignment`, or 32.
    pub alignment: u64,
    /// Key/value pairs in file order (keys are unique).
    pub metadata: Vec<(String, Value)>,
    /// Tensor table in file order (names are unique).
    pub tensors: Vec<TensorInfo>,
    /// Absolute file offset of the data section (the end of the tensor table, aligned up).
    pub data_offset: u64,
    /// Bytes from `data_offset` to the end of the last tensor, aligned up; 0 without tensors.
    pub data_size: u64,
    key_index: Index,
    tensor_index: Index,
}

impl Header {
    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        // The index is built by the parser; the fields are public, so if someone has edited
        // `metadata` since, fall back to a scan rather than return a wrong entry.
        match self.key_index.0.get(key) {
            Some(&i) if self.metadata.get(i).is_some_and(|(k, _)| k == key) => Some(&self.metadata[i].1),
            _ => self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v),
        }
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// An integer value of any width (signed ones must be non-negative), or a bool as 0 / 1.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// An f32 value, or an f64 rounded to f32.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    /// A bool value, or an integer 0 / 1.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Option<&Array> {
        self.get(key)?.as_array()
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        match self.tensor_index.0.get(name) {
            Some(&i) if self.tensors.get(i).is_some_and(|t| t.name == name) => Some(&self.tensors[i]),
            _ => self.tensors.iter().find(|t| t.name == name),
        }
    }

    /// `general.architecture`, e.g. `"qwen35"`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// The length the file should have: `data_offset + data_size`. For a file whose last
    /// tensor is not followed by padding (or a file without tensors, like a vocabulary-only
    /// GGUF) the real file may be shorter by less than `alignment`.
    pub fn file_size(&self) -> u64 {
        self.data_offset.saturating_add(self.data_size)
    }

    /// Absolute byte range of a tensor's data in the file.
    pub fn tensor_range(&self, t: &TensorInfo) -> std::ops::Range<u64> {
        let start = self.data_offset.saturating_add(t.offset);
        start..start.saturating_add(t.size)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a header could not be read (or, for the last three, why a key lookup failed).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufError {
    /// The prefix ends before the header does: call again with at least `needed` bytes from
    /// the start of the file (`needed` is always larger than the prefix given).
    NeedMore {
        needed: u64,
    },
    /// The file does not start with `GGUF`.
    BadMagic,
    /// Not version 2 or 3 (a big-endian file shows up here with a byte-swapped version).
    UnsupportedVersion(u32),
    /// The file (its size being known) ends inside `what`, or a tensor's data (`what` = the
    /// tensor name) lies beyond the end of the file.
    Truncated {
        what: String,
    },
    /// A count or length beyond the limits in the module docs.
    TooLarge {
        what: String,
        value: u64,
    },
    /// A metadata value type id that is not 0..=12.
    UnknownValueType(u32),
    /// A ggml type id that this runtime does not know.
    UnknownTensorType {
        name: String,
        id: u32,
    },
    /// A malformed tensor table entry.
    BadTensor {
        name: String,
        reason: String,
    },
    DuplicateKey(String),
    DuplicateTensor(String),
    /// `general.alignment` is 0 or not a power of two.
    BadAlignment(u64),
    InvalidUtf8 {
        what: String,
    },
    WrongArchitecture {
        found: String,
        expected: String,
    },
    MissingKey(String),
    BadKeyType {
        key: String,
        expected: String,
    },
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufError::NeedMore { needed } => {
                write!(f, "GGUF header incomplete: need at least the first {needed} bytes of the file")
            }
            GgufError::BadMagic => write!(f, "not a GGUF file (bad magic)"),
            GgufError::UnsupportedVersion(v) if (2..=3).contains(&v.swap_bytes()) => {
                write!(f, "big-endian GGUF files are not supported")
            }
            GgufError::UnsupportedVersion(v) => {
                write!(f, "unsupported GGUF version {v} (only versions 2 and 3 can be read)")
            }
            GgufError::Truncated { what } => write!(f, "the GGUF file is truncated: it ends inside {what}"),
            GgufError::TooLarge { what, value } => write!(f, "implausible GGUF header: {what} is {value}"),
            GgufError::UnknownValueType(t) => write!(f, "unknown GGUF metadata value type {t}"),
            GgufError::UnknownTensorType { name, id } => {
                write!(f, "tensor {name} has ggml type {id}, which this runtime does not know")
            }
            GgufError::BadTensor { name, reason } => write!(f, "bad tensor {name}: {reason}"),
            GgufError::DuplicateKey(k) => write!(f, "metadata key {k} appears twice"),
            GgufError::DuplicateTensor(n) => write!(f, "tensor {n} appears twice"),
            GgufError::BadAlignment(a) => {
                write!(f, "general.alignment = {a} is not a power of two")
            }
            GgufError::InvalidUtf8 { what } => write!(f, "{what} is not valid UTF-8"),
            GgufError::WrongArchitecture { found, expected } => {
                write!(f, "the model architecture is {found}, expected {expected}")
            }
            GgufError::MissingKey(k) => write!(f, "required metadata key {k} is missing"),
            GgufError::BadKeyType { key, expected } => {
                write!(f, "metadata key {key} has the wrong type (expected {expected})")
            }
        }
    }
}

impl std::error::Error for GgufError {}

// ---------------------------------------------------------------------------------------------
// Lookup helpers for the model loader
// ---------------------------------------------------------------------------------------------

/// Checks `general.architecture` against the accepted names.
pub fn check_architecture(h: &Header, expected: &[&str]) -> Result<(), GgufError> {
    const KEY: &str = "general.architecture";
    let found = match h.get(KEY) {
        None => return Err(GgufError::MissingKey(KEY.into())),
        Some(v) => v.as_str().ok_or_else(|| bad_type(KEY, "string"))?,
    };
    if expected.contains(&found) {
        Ok(())
    } else {
        Err(GgufError::WrongArchitecture { found: found.into(), expected: expected.join(" or ") })
    }
}

/// A required integer key (see [`Header::get_u64`] for the accepted types).
pub fn require_u64(h: &Header, key: &str) -> Result<u64, GgufError> {
    let v = h.get(key).ok_or_else(|| GgufError::MissingKey(key.into()))?;
    v.as_u64().ok_or_else(|| bad_type(key, "integer"))
}

/// A required float key (f32 or f64).
pub fn require_f32(h: &Header, key: &str) -> Result<f32, GgufError> {
    let v = h.get(key).ok_or_else(|| GgufError::MissingKey(key.into()))?;
    v.as_f32().ok_or_else(|| bad_type(key, "float"))
}

/// A required string key.
pub fn require_str<'h>(h: &'h Header, key: &str) -> Result<&'h str, GgufError> {
    let v = h.get(key).ok_or_else(|| GgufError::MissingKey(key.into()))?;
    v.as_str().ok_or_else(|| bad_type(key, "string"))
}

/// A required array key.
pub fn require_array<'h>(h: &'h Header, key: &str) -> Result<&'h Array, GgufError> {
    let v = h.get(key).ok_or_else(|| GgufError::MissingKey(key.into()))?;
    v.as_array().ok_or_else(|| bad_type(key, "array"))
}

fn bad_type(key: &str, expected: &str) -> GgufError {
    GgufError::BadKeyType { key: key.into(), expected: expected.into() }
}

// ---------------------------------------------------------------------------------------------
// The byte reader
// ---------------------------------------------------------------------------------------------

/// What the reader is in the middle of; only turned into text when an error is reported, so
/// the hot path does not allocate.
#[derive(Clone, Copy)]
enum Item<'a> {
    FileHeader,
    Key(u64),
    Value(&'a str),
    TensorInfo(u64),
    Tensor(&'a str),
    Padding,
}

impl Item<'_> {
    fn describe(self) -> String {
        match self {
            Item::FileHeader => "the file header".into(),
            Item::Key(i) => format!("metadata key #{i}"),
            Item::Value(k) => format!("the value of metadata key {k}"),
            Item::TensorInfo(i) => format!("the name of tensor #{i}"),
            Item::Tensor(name) => format!("the tensor info of {name}"),
            Item::Padding => "the padding before the tensor data".into(),
        }
    }
}

/// A cursor over the prefix that knows how to report running out of bytes.
struct Reader<'a> {
    /// The prefix, cut to the file size if that is smaller.
    buf: &'a [u8],
    pos: usize,
    file_size: Option<u64>,
    item: Item<'a>,
    detail: Detail,
}

impl<'a> Reader<'a> {
    /// The error for "the next `n` bytes are not in the prefix": the file is truncated if its
    /// size is known and too small, otherwise the caller should supply at least `pos + n`.
    #[cold]
    fn short(&self, n: u64) -> GgufError {
        let end = (self.pos as u64).saturating_add(n);
        match self.file_size {
            Some(size) if end > size => GgufError::Truncated { what: self.item.describe() },
            _ => GgufError::NeedMore { needed: end },
        }
    }

    /// Checks that `n` more bytes are available, without consuming them.
    #[inline]
    fn require(&self, n: u64) -> Result<(), GgufError> {
        if n <= (self.buf.len() - self.pos) as u64 {
            Ok(())
        } else {
            Err(self.short(n))
        }
    }

    #[inline]
    fn take(&mut self, n: u64) -> Result<&'a [u8], GgufError> {
        self.require(n)?;
        // `n` fits in usize now: it is at most the remaining length of a slice.
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64)?);
        Ok(a)
    }

    #[inline]
    fn u32(&mut self) -> Result<u32, GgufError> {
        self.array().map(u32::from_le_bytes)
    }

    #[inline]
    fn u64(&mut self) -> Result<u64, GgufError> {
        self.array().map(u64::from_le_bytes)
    }

    /// A string: u64 length + UTF-8 bytes, borrowed from the prefix.
    #[inline]
    fn str(&mut self) -> Result<&'a str, GgufError> {
        let len = self.u64()?;
        if len > MAX_STRING_LEN {
            return Err(GgufError::TooLarge {
                what: format!("a string length in {}", self.item.describe()),
                value: len,
            });
        }
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| GgufError::InvalidUtf8 { what: self.item.describe() })
    }

    fn bytes_left(&self) -> usize {
        self.buf.len() - self.pos
    }
}

// Metadata value type ids.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// The fewest bytes one value of a type can occupy (strings: the length; arrays: type + count).
fn min_encoded_size(ty: u32) -> Option<u64> {
    Some(match ty {
        T_U8 | T_I8 | T_BOOL => 1,
        T_U16 | T_I16 => 2,
        T_U32 | T_I32 | T_F32 => 4,
        T_U64 | T_I64 | T_F64 | T_STRING => 8,
        T_ARRAY => 12,
        _ => return None,
    })
}

/// Decodes `bytes` (a whole number of `N`-byte little-endian items) into a vector.
fn decode_le<T, const N: usize>(bytes: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}

fn read_value<'a>(r: &mut Reader<'a>, ty: u32) -> Result<Value, GgufError> {
    Ok(match ty {
        T_U8 => Value::U8(u8::from_le_bytes(r.array()?)),
        T_I8 => Value::I8(i8::from_le_bytes(r.array()?)),
        T_U16 => Value::U16(u16::from_le_bytes(r.array()?)),
        T_I16 => Value::I16(i16::from_le_bytes(r.array()?)),
        T_U32 => Value::U32(u32::from_le_bytes(r.array()?)),
        T_I32 => Value::I32(i32::from_le_bytes(r.array()?)),
        T_F32 => Value::F32(f32::from_le_bytes(r.array()?)),
        T_BOOL => Value::Bool(r.array::<1>()?[0] != 0),
        T_STRING => Value::String(r.str()?.to_owned()),
        T_U64 => Value::U64(u64::from_le_bytes(r.array()?)),
        T_I64 => Value::I64(i64::from_le_bytes(r.array()?)),
        T_F64 => Value::F64(f64::from_le_bytes(r.array()?)),
        T_ARRAY => Value::Array(read_array(r, 1)?),
        _ => return Err(GgufError::UnknownValueType(ty)),
    })
}

/// Reads an array body (item type, count, items); `depth` is 1 for a top-level array.
fn read_array<'a>(r: &mut Reader<'a>, depth: u32) -> Result<Array, GgufError> {
    let ty = r.u32()?;
    let count = r.u64()?;
    let min = min_encoded_size(ty).ok_or(GgufError::UnknownValueType(ty))?;
    if count > MAX_ARRAY_LEN {
        return Err(GgufError::TooLarge { what: format!("an array length in {}", r.item.describe()), value: count });
    }
    // Every item takes at least `min` bytes: ask for all of them now. This gives the caller a
    // useful `needed`, and bounds every allocation below by the bytes actually present.
    let total = count * min; // ≤ 2^30 × 12, no overflow
    r.require(total)?;
    let n = count as usize; // ≤ bytes left, so it fits
    Ok(match ty {
        T_U8 => Array::U8(r.take(total)?.to_vec()),
        T_I8 => Array::I8(r.take(total)?.iter().map(|&b| b as i8).collect()),
        T_BOOL => Array::Bool(r.take(total)?.iter().map(|&b| b != 0).collect()),
        T_U16 => Array::U16(decode_le(r.take(total)?, u16::from_le_bytes)),
        T_I16 => Array::I16(decode_le(r.take(total)?, i16::from_le_bytes)),
        T_U32 => Array::U32(decode_le(r.take(total)?, u32::from_le_bytes)),
        T_I32 => Array::I32(decode_le(r.take(total)?, i32::from_le_bytes)),
        T_F32 => Array::F32(decode_le(r.take(total)?, f32::from_le_bytes)),
        T_U64 => Array::U64(decode_le(r.take(total)?, u64::from_le_bytes)),
        T_I64 => Array::I64(decode_le(r.take(total)?, i64::from_le_bytes)),
        T_F64 => Array::F64(decode_le(r.take(total)?, f64::from_le_bytes)),
        T_STRING if r.detail == Detail::Layout && n > ELIDE_MIN_STRINGS => {
            for _ in 0..n {
                r.str()?;
            }
            Array::Elided { len: n }
        }
        T_STRING => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(r.str()?.to_owned());
            }
            Array::String(v)
        }
        T_ARRAY => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(GgufError::TooLarge {
                    what: format!("the array nesting depth in {}", r.item.describe()),
                    value: u64::from(depth) + 1,
                });
            }
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(r, depth + 1)?);
            }
            Array::Array(v)
        }
        _ => return Err(GgufError::UnknownValueType(ty)),
    })
}

// ---------------------------------------------------------------------------------------------
// The parser
// ---------------------------------------------------------------------------------------------

/// Fewest bytes of one metadata entry: key length + value type + a 1-byte value.
const MIN_KV_BYTES: usize = 8 + 4 + 1;
/// Fewest bytes of one tensor info: name length + n_dims + one dim + type + offset.
const MIN_TENSOR_BYTES: usize = 8 + 4 + 8 + 4 + 8;

/// Parses and validates a GGUF header from the first bytes of a file.
///
/// * `prefix`: the start of the file (at most the whole file).
/// * `file_size`: the total file length if known. It enables the truncation checks: a
///   header that runs past it, or a tensor whose data lies beyond it, is
///   [`GgufError::Truncated`]. If it is smaller than `prefix.len()`, the bytes after it are
///   ignored.
///
/// If the prefix ends before the header (key/values, tensor table and, when there are tensors,
/// the padding up to the data section) and the file may be longer, the result is
/// [`GgufError::NeedMore`] with a lower bound on the prefix length required; the bytes of the
/// tensor data are never needed. The result depends only on the bytes given: an error found in
/// the part already present is reported even if more bytes would be needed later.
pub fn parse_header(prefix: &[u8], file_size: Option<u64>) -> Result<Header, GgufError> {
    parse_header_with(prefix, file_size, Detail::Full)
}

/// How much of the metadata a parse keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Every value.
    Full,
    /// Every value but the items of long string arrays (a tokenizer's vocabulary and merges):
    /// they are read and checked as in a full parse, then only their count is kept
    /// ([`Array::Elided`]). Enough to size, plan and allocate a model (hyper-parameters, the
    /// tensor table), and much cheaper: a 248k-token vocabulary is ~500k strings not allocated.
    Layout,
}

/// String arrays longer than this are [`Array::Elided`] by a [`Detail::Layout`] parse.
const ELIDE_MIN_STRINGS: usize = 1024;

/// [`parse_header`], keeping the metadata `detail` says (same checks, same errors).
pub fn parse_header_with(prefix: &[u8], file_size: Option<u64>, detail: Detail) -> Result<Header, GgufError> {
    let buf = match file_size {
        Some(size) if size < prefix.len() as u64 => &prefix[..size as usize],
        _ => prefix,
    };
    let mut r = Reader { buf, pos: 0, file_size, item: Item::FileHeader, detail };

    // -- fixed header ----------------------------------------------------------------------
    // Compare the magic as far as it is present, so that a short non-GGUF prefix fails at once.
    let have = buf.len().min(4);
    if buf[..have] != b"GGUF"[..have] {
        return Err(GgufError::BadMagic);
    }
    r.take(4)?;
    let version = r.u32()?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion(version));
    }
    let n_tensors = r.u64()?;
    if n_tensors > MAX_TENSORS {
        return Err(GgufError::TooLarge { what: "the tensor count".into(), value: n_tensors });
    }
    let n_kv = r.u64()?;
    if n_kv > MAX_KV {
        return Err(GgufError::TooLarge { what: "the metadata key count".into(), value: n_kv });
    }

    // -- metadata ----------------------------------------------------------------------------
    let mut metadata = Vec::with_capacity((n_kv as usize).min(r.bytes_left() / MIN_KV_BYTES));
    let mut key_index = HashMap::with_capacity(metadata.capacity());
    for i in 0..n_kv {
        r.item = Item::Key(i);
        let key = r.str()?;
        if key_index.contains_key(key) {
            return Err(GgufError::DuplicateKey(key.into()));
        }
        let ty = r.u32()?;
        r.item = Item::Value(key);
        let value = read_value(&mut r, ty)?;
        key_index.insert(key.to_owned(), metadata.len());
        metadata.push((key.to_owned(), value));
    }
    let key_index = Index(key_index);

    let find = |key: &str| key_index.0.get(key).map(|&i| &metadata[i].1);
    let alignment = match find("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(Value::U32(a)) => return Err(GgufError::BadAlignment(u64::from(*a))),
        Some(_) => return Err(bad_type("general.alignment", "u32")),
    };
    if let Some(v) = find("general.architecture") {
        if v.as_str().is_none() {
            return Err(bad_type("general.architecture", "string"));
        }
    }

    // -- tensor table ------------------------------------------------------------------------
    let mut tensors = Vec::with_capacity((n_tensors as usize).min(r.bytes_left() / MIN_TENSOR_BYTES));
    let mut tensor_index = HashMap::with_capacity(tensors.capacity());
    for i in 0..n_tensors {
        r.item = Item::TensorInfo(i);
        let name = r.str()?;
        if tensor_index.contains_key(name) {
            return Err(GgufError::DuplicateTensor(name.into()));
        }
        r.item = Item::Tensor(name);
        let info = read_tensor_info(&mut r, name, alignment)?;
        tensor_index.insert(name.to_owned(), tensors.len());
        tensors.push(info);
    }
    let tensor_index = Index(tensor_index);

    // -- padding and data section --------------------------------------------------------------
    // pos < 2^63 and alignment ≤ 2^31, so this cannot overflow.
    let data_offset = (r.pos as u64).next_multiple_of(alignment);
    if !tensors.is_empty() {
        r.item = Item::Padding;
        r.take(data_offset - r.pos as u64)?;
    }
    check_tensor_placement(&tensors, data_offset, file_size)?;
    // Ends are < 2^63 (checked per tensor), so aligning up cannot overflow.
    let data_size = tensors.iter().map(|t| (t.offset + t.size).next_multiple_of(alignment)).max().unwrap_or(0);

    Ok(Header { version, alignment, metadata, tensors, data_offset, data_size, key_index, tensor_index })
}

/// Reads the part of a tensor info after the name and checks it on its own.
fn read_tensor_info(r: &mut Reader<'_>, name: &str, alignment: u64) -> Result<TensorInfo, GgufError> {
    let bad = |reason: String| GgufError::BadTensor { name: name.into(), reason };

    let n_dims = r.u32()?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(bad(format!("{n_dims} dimensions (must be 1 to {MAX_DIMS})")));
    }
    let raw = r.take(8 * u64::from(n_dims))?;
    let dims: Vec<u64> = decode_le(raw, u64::from_le_bytes);
    let mut n_elements: u64 = 1;
    for (k, &d) in dims.iter().enumerate() {
        if d == 0 || d > i64::MAX as u64 {
            return Err(bad(format!("ne{k} = {} (must be positive)", d as i64)));
        }
        n_elements = n_elements
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(format!("element count {dims:?} overflows")))?;
    }

    let id = r.u32()?;
    let ty = GgmlType::from_id(id).ok_or_else(|| GgufError::UnknownTensorType { name: name.into(), id })?;
    let block = ty.block_elems() as u64;
    if dims[0] % block != 0 {
        return Err(bad(format!("ne0 = {} is not a multiple of the {ty} block size {block}", dims[0])));
    }
    let size = (n_elements / block)
        .checked_mul(ty.block_bytes() as u64)
        .filter(|&s| s <= i64::MAX as u64)
        .ok_or_else(|| bad("byte size overflows".into()))?;

    let offset = r.u64()?;
    if offset % alignment != 0 {
        return Err(bad(format!("offset {offset} is not a multiple of the alignment {alignment}")));
    }
    if offset.checked_add(size).is_none_or(|end| end > i64::MAX as u64) {
        return Err(bad(format!("offset {offset} + size {size} is beyond any file")));
    }
    Ok(TensorInfo { name: name.into(), dims, ty, offset, size })
}

/// Checks that every tensor lies inside the file (when its size is known) and that no two
/// tensors share bytes.
fn check_tensor_placement(tensors: &[TensorInfo], data_offset: u64, file_size: Option<u64>) -> Result<(), GgufError> {
    if let Some(size) = file_size {
        for t in tensors {
            // data_offset < 2^63 and offset + size ≤ 2^63 - 1: no overflow in u64.
            if data_offset + t.offset + t.size > size {
                return Err(GgufError::Truncated { what: t.name.clone() });
            }
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
    by_offset.sort_unstable_by_key(|t| (t.offset, t.size));
    for w in by_offset.windows(2) {
        if w[1].offset < w[0].offset + w[0].size {
            return Err(GgufError::BadTensor {
                name: w[1].name.clone(),
                reason: format!("its data overlaps tensor {}", w[0].name),
            });
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Writing (a file built in memory: `warm.rs`'s miniature of a model, the tests' corpus)

/// A GGUF string: u64 length + bytes.
pub fn put_bytes(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// (type id, encoding) of a value.
pub fn encode_value(v: &Value) -> (u32, Vec<u8>) {
    let mut o = Vec::new();
    let ty = match v {
        Value::U8(x) => {
            o.push(*x);
            0
        }
        Value::I8(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            1
        }
        Value::U16(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            2
        }
        Value::I16(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            3
        }
        Value::U32(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            4
        }
        Value::I32(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            5
        }
        Value::F32(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            6
        }
        Value::Bool(x) => {
            o.push(*x as u8);
            7
        }
        Value::String(s) => {
            put_bytes(&mut o, s.as_bytes());
            8
        }
        Value::Array(a) => {
            encode_array(&mut o, a);
            9
        }
        Value::U64(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            10
        }
        Value::I64(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            11
        }
        Value::F64(x) => {
            o.extend_from_slice(&x.to_le_bytes());
            12
        }
    };
    (ty, o)
}

/// An array body: item type, count, items.
pub fn encode_array(o: &mut Vec<u8>, a: &Array) {
    fn head(o: &mut Vec<u8>, ty: u32, n: usize) {
        o.extend_from_slice(&ty.to_le_bytes());
        o.extend_from_slice(&(n as u64).to_le_bytes());
    }
    macro_rules! le {
        ($ty:expr, $v:expr) => {{
            head(o, $ty, $v.len());
            for x in $v {
                o.extend_from_slice(&x.to_le_bytes());
            }
        }};
    }
    match a {
        Array::U8(v) => le!(0, v),
        Array::I8(v) => le!(1, v),
        Array::U16(v) => le!(2, v),
        Array::I16(v) => le!(3, v),
        Array::U32(v) => le!(4, v),
        Array::I32(v) => le!(5, v),
        Array::F32(v) => le!(6, v),
        Array::Bool(v) => {
            head(o, 7, v.len());
            o.extend(v.iter().map(|&b| b as u8));
        }
        Array::String(v) => {
            head(o, 8, v.len());
            for s in v {
                put_bytes(o, s.as_bytes());
            }
        }
        Array::Array(v) => {
            head(o, 9, v.len());
            for inner in v {
                encode_array(o, inner);
            }
        }
        Array::U64(v) => le!(10, v),
        Array::I64(v) => le!(11, v),
        Array::F64(v) => le!(12, v),
        Array::Elided { .. } => panic!("an elided array (a layout parse's) has no items to write"),
    }
}

/// A GGUF file (version 3, alignment 32): `metadata` in order, then `tensors` (name, dims, type)
/// one after the other at aligned offsets; `fill(i, bytes)` writes tensor `i`'s data (its bytes
/// start zeroed). A `general.alignment` key in `metadata` must be 32.
pub fn write(metadata: &[(String, Value)], tensors: &[(String, Vec<u64>, GgmlType)], mut fill: impl FnMut(usize, &mut [u8])) -> Vec<u8> {
    const ALIGN: u64 = 32;
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, v) in metadata {
        put_bytes(&mut out, key.as_bytes());
        let (ty, payload) = encode_value(v);
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&payload);
    }
    let mut spans = Vec::with_capacity(tensors.len());
    let mut end = 0u64;
    for (name, dims, ty) in tensors {
        let n: u64 = dims.iter().product();
        let offset = end.next_multiple_of(ALIGN);
        end = offset + n / ty.block_elems() as u64 * ty.block_bytes() as u64;
        spans.push(offset..end);
        put_bytes(&mut out, name.as_bytes());
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&(*ty as u32).to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
    }
    let data = (out.len() as u64).next_multiple_of(ALIGN) as usize;
    out.resize(data + end as usize, 0);
    for (i, r) in spans.into_iter().enumerate() {
        fill(i, &mut out[data + r.start as usize..data + r.end as usize]);
    }
    out
}
