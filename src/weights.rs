//! Where the weights live: bytes of the GGUF data section, copied once from the file (or the
//! network) into a few large allocations ("shards"), and typed views into them.
//!
//! A wasm32 allocation is at most 2 GiB − 1 and a 9B model at 2 bits is ~3.6 GB, so the weights
//! are held in shards of whole tensors (at most [`SHARD_BYTES`] each, or one tensor if it is
//! larger). A loader fills them by following [`WeightStore::plan`]: a list of [`CopyOp`]s, each
//! "copy `count` runs of `len` file bytes (every `file_stride`) to shard memory (every
//! `dst_stride`)" — from a `fetch` body, an OPFS handle or `std::fs`, with no second copy.
//!
//! Two layouts:
//! - [`WeightStore::allocate`] (the whole model in one instance): each shard mirrors a
//!   contiguous file range, one op per shard.
//! - [`WeightStore::allocate_cut`] (one part of a model split across workers, see `split.rs`):
//!   each tensor keeps only its [`Cut`] — some rows (one op per row range) or some columns of
//!   every row (one strided op per column range: a per-row scatter), or column ranges each
//!   stored as a matrix of its own (`Cut::Pieces`: the FFN pieces of `split.rs`'s bands).
//!
//! A tensor may be stored in another form than the file's (`quant::kquants::forms`): IQ2_S and
//! IQ2_XS matrices become IQ2_SX (138 bytes per block instead of 82 or 74), IQ3_S ones IQ3_SX (134
//! instead of 110). Its space is the stored size;
//! the file bytes are copied to the start of it (its own op, so they land packed, as any tensor's)
//! and expanded in place once the load is complete ([`Relocation`], [`WeightStore::finish_load`]).

use crate::gguf::{Header, TensorInfo};
use crate::quant::GgmlType;
use crate::split::Cut;
use std::fmt;

/// Target size of one shard (tensors are never split, so a shard can be larger if one tensor is).
pub const SHARD_BYTES: u64 = 1 << 30;

/// A copy job for the loader: for `i < count`, file bytes `[file_offset + i·file_stride, +len)`
/// go to shard `shard` at `dst_offset + i·dst_stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyOp {
    pub shard: usize,
    pub dst_offset: u64,
    pub file_offset: u64,
    pub len: u64,
    pub count: u64,
    pub file_stride: u64,
    pub dst_stride: u64,
}

impl CopyOp {
    fn contiguous(shard: usize, dst_offset: u64, file_offset: u64, len: u64) -> CopyOp {
        CopyOp { shard, dst_offset, file_offset, len, count: 1, file_stride: len, dst_stride: len }
    }
    /// First file byte after the op.
    pub fn file_end(&self) -> u64 {
        self.file_offset + (self.count - 1) * self.file_stride + self.len
    }
    /// Calls `f(file_offset, dst_offset, len)` for every piece of the op inside file range `[start, end)`.
    pub fn pieces_in(&self, start: u64, end: u64, mut f: impl FnMut(u64, u64, u64)) {
        if self.len == 0 || end <= self.file_offset || start >= self.file_end() {
            return;
        }
        let first = start.saturating_sub(self.file_offset) / self.file_stride;
        let last = ((end - self.file_offset).div_ceil(self.file_stride)).min(self.count);
        for i in first..last {
            let (fs, ds) = (self.file_offset + i * self.file_stride, self.dst_offset + i * self.dst_stride);
            let (a, b) = (fs.max(start), (fs + self.len).min(end));
            if a < b {
                f(a, ds + (a - fs), b - a);
            }
        }
    }
}

/// A tensor whose stored form differs from its file bytes: once loaded, its `len` file bytes
/// (blocks of `from`) at `at` in shard `shard` are expanded in place to its load-time form
/// ([`crate::quant::kquants::forms`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relocation {
    pub shard: usize,
    pub at: u64,
    pub len: u64,
    pub from: GgmlType,
}

/// The type and size a file tensor is stored with (`name`: which tensors expand; `expand`: the
/// load allows it).
fn stored_form(name: &str, ty: GgmlType, file_len: u64, expand: bool) -> (GgmlType, u64) {
    use crate::quant::kquants::forms;
    match forms::stored_as(name, ty, expand) {
        Some(form) => (form, forms::expanded_len(ty, file_len)),
        None => (ty, file_len),
    }
}

/// One destination's copy plan sorted by file offset, for finding the pieces inside a file range
/// quickly (a split load routes every chunk through every worker's plan).
pub struct PlanIndex {
    ops: Vec<CopyOp>,
    /// `ends[i]`: the largest file end of `ops[..=i]` (strided ops of one tensor overlap in file range).
    ends: Vec<u64>,
}

impl PlanIndex {
    pub fn new(mut ops: Vec<CopyOp>) -> PlanIndex {
        ops.sort_by_key(|o| o.file_offset);
        let mut end = 0;
        let ends = ops.iter().map(|o| {
            end = end.max(o.file_end());
            end
        });
        PlanIndex { ends: ends.collect(), ops }
    }

    /// Calls `f(shard, file_offset, dst_offset, len)` for every piece inside `[start, end)`, in plan order.
    pub fn pieces_in(&self, start: u64, end: u64, mut f: impl FnMut(usize, u64, u64, u64)) {
        let first = self.ends.partition_point(|&e| e <= start);
        for op in self.ops[first..].iter().take_while(|o| o.file_offset < end) {
            op.pieces_in(start, end, |file, dst, len| f(op.shard, file, dst, len));
        }
    }
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
    /// Bytes used of each shard.
    shard_len: Vec<u64>,
    plan: Vec<CopyOp>,
    tensors: Vec<TensorView>,
    /// Expansions still to do once the bytes are in ([`WeightStore::finish_load`]).
    relocations: Vec<Relocation>,
    filled: Vec<bool>,
    /// The shard plan this store was cut by (`None`: whole tensors).
    pub shard_plan: Option<crate::split::ShardPlan>,
}

impl WeightStore {
    /// Plans the shards for a header and allocates them (zeroed) — the only large allocation.
    /// `tensor_filter` keeps only the tensors that will be used (e.g. drops an MTP block).
    pub fn allocate(h: &Header, keep: impl Fn(&TensorInfo) -> bool, expand: bool) -> Result<WeightStore, StoreError> {
        WeightStore::from_layout(Layout::whole(h, keep, expand)?)
    }

    /// Allocates the part of a model that one worker holds: each kept tensor (`cut(t)` is
    /// `Some`) reduced to its rows or columns, packed into shards in file order.
    pub fn allocate_cut(h: &Header, cut: impl Fn(&TensorInfo) -> Option<Cut>, expand: bool) -> Result<WeightStore, StoreError> {
        WeightStore::from_layout(Layout::cut(h, cut, expand)?)
    }

    /// Allocates zeroed shards for a layout: the only large allocations.
    pub fn from_layout(l: Layout) -> Result<WeightStore, StoreError> {
        let total = l.total_bytes();
        let mut shards = Vec::with_capacity(l.shard_len.len());
        for &len in &l.shard_len {
            shards.push(zeroed_words(len.div_ceil(8) as usize).ok_or(StoreError::OutOfMemory { requested: total })?);
        }
        let filled = vec![false; l.shard_len.len()];
        let relocations = l.relocations;
        Ok(WeightStore { shards, shard_len: l.shard_len, plan: l.plan, tensors: l.tensors, relocations, filled, shard_plan: None })
    }
}

impl WeightStore {
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
        WeightStore::from_layout(Layout { shard_len: vec![len], plan: vec![CopyOp::contiguous(0, 0, 0, len)], tensors, relocations: Vec::new() })
    }
}

/// `words` zeroed u64s, or `None` when the allocation fails. Through the allocator's zeroed
/// allocation, not a reserve + fill: natively fresh pages (an mmap) are zero already and are not
/// written twice; on wasm32 so are freshly grown ones while a load asks for it
/// (`fresh_alloc.rs`: where every worker reads its part straight into place).
fn zeroed_words(words: usize) -> Option<Vec<u64>> {
    if words == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u64>(words).ok()?;
    // SAFETY: `layout` has a non-zero size; a non-null result is an allocation of `words` zeroed
    // (valid) u64s with the global allocator and this layout, which Vec::from_raw_parts takes over.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut u64;
        (!p.is_null()).then(|| Vec::from_raw_parts(p, words, words))
    }
}

/// Where every kept tensor goes, before anything is allocated: shard sizes, the copy plan, the views.
pub struct Layout {
    pub shard_len: Vec<u64>,
    pub plan: Vec<CopyOp>,
    pub tensors: Vec<TensorView>,
    pub relocations: Vec<Relocation>,
}

impl Layout {
    pub fn total_bytes(&self) -> u64 {
        self.shard_len.iter().sum()
    }

    /// Whole tensors, consecutive ones grouped into shards that mirror contiguous file ranges
    /// (one op per shard), except that a tensor stored in another form ([`stored_form`]) gets
    /// its own op and its stored size (`expand`: whether this load stores such forms).
    pub fn whole(h: &Header, keep: impl Fn(&TensorInfo) -> bool, expand: bool) -> Result<Layout, StoreError> {
        let mut infos: Vec<&TensorInfo> = h.tensors.iter().filter(|t| keep(t)).collect();
        infos.sort_by_key(|t| t.offset);
        let max_alloc: u64 = if cfg!(target_pointer_width = "32") { (1 << 31) - 64 } else { 1 << 46 };

        // Greedy grouping of consecutive tensors into shards; `run`: the op the next tensor can
        // extend (the last one, when it mirrors the file: nothing expanded in it).
        let mut plan: Vec<CopyOp> = Vec::new();
        let mut shard_len: Vec<u64> = Vec::new();
        let mut relocations = Vec::new();
        let mut tensors = Vec::with_capacity(infos.len());
        let mut run = false;
        for t in infos {
            let (ty, size) = stored_form(&t.name, t.ty, t.size, expand);
            if size > max_alloc {
                return Err(StoreError::TensorTooLarge { name: t.name.clone(), size });
            }
            let start = h.data_offset + t.offset;
            let expanded = ty != t.ty; // (a form may be the same size: Q6_KX)
            // The shard's length with this tensor in it.
            let grown = match (plan.last(), shard_len.last()) {
                (Some(op), Some(_)) if run && !expanded => op.dst_offset + (start + size - op.file_offset),
                (_, Some(&len)) => len.next_multiple_of(32) + size,
                _ => u64::MAX,
            };
            if grown > SHARD_BYTES.max(size) || grown > max_alloc {
                shard_len.push(0);
                run = false;
            }
            let shard = shard_len.len() - 1;
            let offset = if run && !expanded {
                let op = plan.last_mut().unwrap();
                op.len = op.len.max(start + t.size - op.file_offset);
                (op.file_stride, op.dst_stride) = (op.len, op.len);
                op.dst_offset + (start - op.file_offset)
            } else {
                let base = shard_len[shard].next_multiple_of(32);
                plan.push(CopyOp::contiguous(shard, base, start, t.size));
                if expanded {
                    relocations.push(Relocation { shard, at: base, len: t.size, from: t.ty });
                }
                base
            };
            shard_len[shard] = shard_len[shard].max(offset + size);
            run = !expanded;
            tensors.push(TensorView {
                name: t.name.clone(),
                ty,
                dims: t.dims.iter().map(|&d| d as usize).collect(),
                shard,
                offset: offset as usize,
                size: size as usize,
            });
        }
        Ok(Layout { shard_len, plan, tensors, relocations })
    }

    /// Each kept tensor (`cut(t)` is `Some`) reduced to its rows or columns, packed into shards in file order.
    pub fn cut(h: &Header, cut: impl Fn(&TensorInfo) -> Option<Cut>, expand: bool) -> Result<Layout, StoreError> {
        let mut infos: Vec<(&TensorInfo, Cut)> = h.tensors.iter().filter_map(|t| cut(t).map(|c| (t, c))).collect();
        infos.sort_by_key(|(t, _)| t.offset);
        let max_alloc: u64 = if cfg!(target_pointer_width = "32") { (1 << 31) - 64 } else { 1 << 46 };
        let mut shard_len: Vec<u64> = Vec::new();
        let mut plan = Vec::new();
        let mut relocations = Vec::new();
        let mut tensors = Vec::with_capacity(infos.len());
        for (t, cut) in infos {
            let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
            let (n_in, n_rows) = (dims[0], dims.iter().skip(1).product::<usize>().max(1));
            let (be, bb) = (t.ty.block_elems(), t.ty.block_bytes() as u64);
            let row_bytes = t.ty.row_bytes(n_in) as u64;
            let start = h.data_offset + t.offset;
            let bad = |what: String| StoreError::BadRange(format!("{}: {what}", t.name));
            let (local_dims, file_size) = match &cut {
                Cut::Whole => (dims.clone(), t.size),
                Cut::Rows(rs) => {
                    if rs.iter().any(|r| r.end > n_rows || r.start > r.end) {
                        return Err(bad(format!("rows {rs:?} of {n_rows}")));
                    }
                    let n: usize = rs.iter().map(|r| r.len()).sum();
                    let mut d = dims.clone();
                    d.truncate(2);
                    d.resize(2, 1);
                    d[1] = n;
                    (d, n as u64 * row_bytes)
                }
                Cut::Cols(cs) | Cut::Pieces(cs) => {
                    if cs.iter().any(|c| c.end > n_in || c.start > c.end || c.start % be != 0 || c.end % be != 0) {
                        return Err(bad(format!("columns {cs:?} of {n_in} in blocks of {be}")));
                    }
                    let n: usize = cs.iter().map(|c| c.len()).sum();
                    let mut d = dims.clone();
                    d[0] = n;
                    (d, n_rows as u64 * (n / be) as u64 * bb)
                }
            };
            // The file bytes are copied packed to the start of the tensor's space, as without a
            // stored form; an expansion then fills the space.
            let (ty, size) = stored_form(&t.name, t.ty, file_size, expand);
            if size > max_alloc {
                return Err(StoreError::TensorTooLarge { name: t.name.clone(), size });
            }
            // Start a new shard when this tensor would overflow the current one (8-byte aligned starts).
            let fits = shard_len.last().is_some_and(|&l| l.next_multiple_of(32) + size <= SHARD_BYTES.max(size).min(max_alloc));
            if !fits {
                shard_len.push(0);
            }
            let shard = shard_len.len() - 1;
            let base = shard_len[shard].next_multiple_of(32);
            shard_len[shard] = base + size;
            match &cut {
                Cut::Whole => plan.push(CopyOp::contiguous(shard, base, start, t.size)),
                Cut::Rows(rs) => {
                    let mut dst = base;
                    for r in rs.iter().filter(|r| !r.is_empty()) {
                        let len = r.len() as u64 * row_bytes;
                        plan.push(CopyOp::contiguous(shard, dst, start + r.start as u64 * row_bytes, len));
                        dst += len;
                    }
                }
                Cut::Cols(cs) => {
                    let local_row = file_size / n_rows as u64;
                    let mut col = 0;
                    for c in cs.iter().filter(|c| !c.is_empty()) {
                        let len = (c.len() / be) as u64 * bb;
                        plan.push(CopyOp {
                            shard,
                            dst_offset: base + col,
                            file_offset: start + (c.start / be) as u64 * bb,
                            len,
                            count: n_rows as u64,
                            file_stride: row_bytes,
                            dst_stride: local_row,
                        });
                        col += len;
                    }
                }
                Cut::Pieces(cs) => {
                    // Piece after piece, each all rows × its columns.
                    let mut dst = base;
                    for c in cs.iter().filter(|c| !c.is_empty()) {
                        let len = (c.len() / be) as u64 * bb;
                        let file_offset = start + (c.start / be) as u64 * bb;
                        plan.push(CopyOp { shard, dst_offset: dst, file_offset, len, count: n_rows as u64, file_stride: row_bytes, dst_stride: len });
                        dst += len * n_rows as u64;
                    }
                }
            }
            if ty != t.ty {
                relocations.push(Relocation { shard, at: base, len: file_size, from: t.ty });
            }
            tensors.push(TensorView { name: t.name.clone(), ty, dims: local_dims, shard, offset: base as usize, size: size as usize });
        }
        plan.sort_by_key(|op| op.file_offset);
        Ok(Layout { shard_len, plan, tensors, relocations })
    }
}

impl WeightStore {
    /// What the loader must copy in, in file order.
    pub fn plan(&self) -> &[CopyOp] {
        &self.plan
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Total bytes of weights held.
    pub fn total_bytes(&self) -> u64 {
        self.shard_len.iter().sum()
    }

    /// Mutable bytes of shard `i`, for the loader to fill.
    pub fn shard_mut(&mut self, i: usize) -> &mut [u8] {
        let len = self.shard_len[i] as usize;
        &mut bytemuck::cast_slice_mut(&mut self.shards[i])[..len]
    }

    /// Marks shard `i` as completely written.
    pub fn mark_filled(&mut self, i: usize) {
        self.filled[i] = true;
    }

    /// Marks every shard as written (the loader followed the whole plan).
    pub fn mark_all_filled(&mut self) {
        self.filled.fill(true);
    }

    /// Turns the loaded file bytes into the stored forms ([`Relocation`]); once, after the
    /// last byte is in (the model build calls it).
    pub fn finish_load(&mut self) {
        for r in std::mem::take(&mut self.relocations) {
            let len = self.shard_len[r.shard] as usize;
            let shard = &mut bytemuck::cast_slice_mut(&mut self.shards[r.shard])[..len];
            let nb = (r.len / crate::quant::kquants::forms::source_bytes(r.from) as u64) as usize;
            crate::quant::kquants::forms::expand_in_place(r.from, shard, r.at as usize, r.at as usize, nb);
        }
    }

    pub fn is_filled(&self) -> bool {
        self.filled.iter().all(|&f| f)
    }

    /// Copies `bytes` that start at absolute file offset `file_offset` to wherever the plan puts
    /// them (for loaders that stream the file in arbitrary chunks).
    pub fn write_file_bytes(&mut self, file_offset: u64, bytes: &[u8]) {
        let end = file_offset + bytes.len() as u64;
        for k in 0..self.plan.len() {
            let op = self.plan[k];
            let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut self.shards[op.shard]);
            op.pieces_in(file_offset, end, |f, d, n| {
                dst[d as usize..(d + n) as usize].copy_from_slice(&bytes[(f - file_offset) as usize..(f - file_offset + n) as usize]);
            });
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

    /// The bytes of a tensor, to rearrange in place after loading ([`crate::ops::interleave`]).
    pub fn bytes_mut(&mut self, t: &TensorView) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.shards[t.shard])[t.offset..t.offset + t.size]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Every piece of every op inside [start, end), by brute force (the reference for PlanIndex).
    fn brute(ops: &[CopyOp], start: u64, end: u64) -> Vec<(usize, u64, u64, u64)> {
        let mut v = Vec::new();
        for op in ops {
            for i in 0..op.count {
                let (fs, ds) = (op.file_offset + i * op.file_stride, op.dst_offset + i * op.dst_stride);
                let (a, b) = (fs.max(start), (fs + op.len).min(end));
                if a < b {
                    v.push((op.shard, a, ds + (a - fs), b - a));
                }
            }
        }
        v.sort();
        v
    }

    #[test]
    fn plan_index_finds_every_piece_in_any_range() {
        // Two column cuts of one tensor interleaved in file range (their rows alternate), a row
        // cut, a whole tensor, given out of order.
        let ops = vec![
            CopyOp { shard: 1, dst_offset: 0, file_offset: 5000, len: 300, count: 1, file_stride: 300, dst_stride: 300 },
            CopyOp { shard: 0, dst_offset: 0, file_offset: 1000, len: 10, count: 8, file_stride: 40, dst_stride: 10 },
            CopyOp { shard: 0, dst_offset: 80, file_offset: 1020, len: 10, count: 8, file_stride: 40, dst_stride: 10 },
            CopyOp::contiguous(2, 0, 2000, 1000),
        ];
        let index = PlanIndex::new(ops.clone());
        for (start, end) in [(0, 10_000), (1005, 1045), (1010, 1020), (1300, 2100), (2999, 5001), (5300, 6000), (1025, 1026)] {
            let mut got = Vec::new();
            index.pieces_in(start, end, |s, f, d, n| got.push((s, f, d, n)));
            got.sort();
            assert_eq!(got, brute(&ops, start, end), "[{start}, {end})");
        }
    }
}
