//! Where the weights live: the GGUF data section, copied once from the file (or the network)
//! into a few large allocations ("shards"), and typed views into them.
//!
//! A wasm32 allocation is at most 2 GiB − 1 and a 9B model at 2 bits is ~3.6 GB, so the data
//! section is cut into shards of whole tensors (at most [`SHARD_BYTES`] each, or one tensor if
//! it is larger). Each shard mirrors a contiguous byte range of the file, so a loader only has
//! to copy file range `[file_offset, file_offset + len)` to `shard_ptr(i)` — from a `fetch`
//! body, an OPFS handle or `std::fs` — with no second copy anywhere. The loader asks
//! [`WeightStore::plan`] for those ranges; later, several workers can each own some shards.

use crate::gguf::{Header, TensorInfo};
use crate::quant::GgmlType;
use std::fmt;

/// Target size of one shard (tensors are never split, so a shard can be larger if one tensor is).
pub const SHARD_BYTES: u64 = 1 << 30;

/// A copy job for the loader: put file bytes `[file_offset, file_offset + len)` at the start of shard `shard`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardRange {
    pub shard: usize,
    pub file_offset: u64,
    pub len: u64,
}

/// A tensor inside the store: which shard, where, and its shape and type.
#[derive(Clone, Debug)]
pub struct TensorView {
    pub name: String,
    pub ty: GgmlType,
    pub dims: Vec<usize>,
    pub shard: usize,
    pub offset: usize,
    pub size: usize,
}

impl TensorView {
    /// Row length (ne0) and number of rows (product of the other dims).
    pub fn rows_cols(&self) -> (usize, usize) {
        let n_in = self.dims[0];
        (self.dims.iter().skip(1).product::<usize>().max(1), n_in)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum StoreError {
    /// The allocation failed: the tab / process cannot hold this model.
    OutOfMemory { requested: u64 },
    /// A tensor does not fit in this address space (wasm32: one allocation < 2 GiB).
    TensorTooLarge { name: String, size: u64 },
    /// A read did not match the plan.
    BadRange(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::OutOfMemory { requested } => write!(
                f,
                "out of memory: could not allocate {:.2} GiB for the weights (try a smaller quant)",
                *requested as f64 / (1u64 << 30) as f64
            ),
            StoreError::TensorTooLarge { name, size } => {
                write!(f, "tensor {name} ({size} bytes) is larger than one allocation can be here")
            }
            StoreError::BadRange(s) => write!(f, "bad weight range: {s}"),
        }
    }
}
impl std::error::Error for StoreError {}

/// The weights of one model: shards of file bytes plus a table of tensor views.
pub struct WeightStore {
    /// Shard buffers (u64 elements: 8-byte alignment, so F32 tensors can be viewed as `&[f32]`).
    shards: Vec<Vec<u64>>,
    ranges: Vec<ShardRange>,
    tensors: Vec<TensorView>,
    filled: Vec<bool>,
}

impl WeightStore {
    /// Plans the shards for a header and allocates them (zeroed) — the only large allocation.
    /// `tensor_filter` keeps only the tensors that will be used (e.g. drops an MTP block).
    pub fn allocate(h: &Header, keep: impl Fn(&TensorInfo) -> bool) -> Result<WeightStore, StoreError> {
        let mut infos: Vec<&TensorInfo> = h.tensors.iter().filter(|t| keep(t)).collect();
        infos.sort_by_key(|t| t.offset);
        let max_alloc: u64 = if cfg!(target_pointer_width = "32") { (1 << 31) - 64 } else { 1 << 46 };

        // Greedy grouping of consecutive tensors into shards.
        let mut ranges: Vec<ShardRange> = Vec::new();
        let mut tensors = Vec::with_capacity(infos.len());
        for t in infos {
            if t.size > max_alloc {
                return Err(StoreError::TensorTooLarge { name: t.name.clone(), size: t.size });
            }
            let start = h.data_offset + t.offset;
            let end = start + t.size;
            let fits = ranges
                .last()
                .is_some_and(|r| end - r.file_offset <= SHARD_BYTES.max(t.size) && end - r.file_offset <= max_alloc);
            if !fits {
                ranges.push(ShardRange { shard: ranges.len(), file_offset: start, len: 0 });
            }
            let r = ranges.last_mut().unwrap();
            r.len = r.len.max(end - r.file_offset);
            tensors.push(TensorView {
                name: t.name.clone(),
                ty: t.ty,
                dims: t.dims.iter().map(|&d| d as usize).collect(),
                shard: r.shard,
                offset: (start - r.file_offset) as usize,
                size: t.size as usize,
            });
        }
        let total: u64 = ranges.iter().map(|r| r.len).sum();
        let mut shards = Vec::with_capacity(ranges.len());
        for r in &ranges {
            let words = r.len.div_ceil(8) as usize;
            let mut v: Vec<u64> = Vec::new();
            v.try_reserve_exact(words).map_err(|_| StoreError::OutOfMemory { requested: total })?;
            v.resize(words, 0);
            shards.push(v);
        }
        let filled = vec![false; ranges.len()];
        Ok(WeightStore { shards, ranges, tensors, filled })
    }

    /// A store of one zeroed shard of `len` bytes holding `tensors` (their `offset`s are into
    /// that shard), for weights that do not come from a GGUF — `joint_head.safetensors`. The
    /// caller fills `shard_mut(0)` and calls `mark_filled(0)`.
    pub fn single_shard(len: u64, mut tensors: Vec<TensorView>) -> Result<WeightStore, StoreError> {
        for t in &mut tensors {
            if (t.offset + t.size) as u64 > len {
                return Err(StoreError::BadRange(format!("tensor {} ends past the {len} bytes of its shard", t.name)));
            }
            t.shard = 0;
        }
        let mut v: Vec<u64> = Vec::new();
        v.try_reserve_exact(len.div_ceil(8) as usize).map_err(|_| StoreError::OutOfMemory { requested: len })?;
        v.resize(len.div_ceil(8) as usize, 0);
        Ok(WeightStore {
            shards: vec![v],
            ranges: vec![ShardRange { shard: 0, file_offset: 0, len }],
            tensors,
            filled: vec![false],
        })
    }

    /// The file ranges the loader must copy in, one per shard.
    pub fn plan(&self) -> &[ShardRange] {
        &self.ranges
    }

    /// Total bytes of weights held.
    pub fn total_bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum()
    }

    /// Mutable bytes of shard `i`, for the loader to fill (exactly `plan()[i].len` bytes).
    pub fn shard_mut(&mut self, i: usize) -> &mut [u8] {
        let len = self.ranges[i].len as usize;
        &mut bytemuck::cast_slice_mut(&mut self.shards[i])[..len]
    }

    /// Marks shard `i` as completely written.
    pub fn mark_filled(&mut self, i: usize) {
        self.filled[i] = true;
    }

    pub fn is_filled(&self) -> bool {
        self.filled.iter().all(|&f| f)
    }

    /// Copies `bytes` that start at absolute file offset `file_offset` into whichever shards
    /// overlap them (for loaders that stream the file in arbitrary chunks).
    pub fn write_file_bytes(&mut self, file_offset: u64, bytes: &[u8]) {
        let end = file_offset + bytes.len() as u64;
        for i in 0..self.ranges.len() {
            let r = self.ranges[i];
            let (s, e) = (r.file_offset.max(file_offset), (r.file_offset + r.len).min(end));
            if s < e {
                let dst = self.shard_mut(i);
                dst[(s - r.file_offset) as usize..(e - r.file_offset) as usize]
                    .copy_from_slice(&bytes[(s - file_offset) as usize..(e - file_offset) as usize]);
            }
        }
    }

    pub fn tensors(&self) -> &[TensorView] {
        &self.tensors
    }

    pub fn find(&self, name: &str) -> Option<&TensorView> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of a tensor.
    pub fn bytes(&self, t: &TensorView) -> &[u8] {
        &bytemuck::cast_slice(&self.shards[t.shard])[t.offset..t.offset + t.size]
    }
}
