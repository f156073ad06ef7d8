//! Loading a model from any byte source that can read ranges: a file (native CLI), Node's `fs`
//! (wasm CLI), and — in the browser runtime — HTTP Range requests or OPFS.
//!
//! 1. read a prefix and grow it until the GGUF header parses ([`GgufError::NeedMore`] says how far);
//! 2. check the model (architecture, types, shapes) and allocate the weight shards once;
//! 3. copy each shard's file range straight into its shard, in chunks — never the whole file twice.

use crate::gguf::{self, GgufError, Header};
use crate::model::{Model, ModelError, Role};

/// Something that can read byte ranges of one GGUF file.
pub trait ByteSource {
    /// Total size in bytes.
    fn size(&mut self) -> Result<u64, String>;
    /// Fills `buf` with bytes `[offset, offset + buf.len())`.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), String>;
}

#[derive(Debug)]
pub enum LoadError {
    Io(String),
    Model(ModelError),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Io(s) => write!(f, "read error: {s}"),
            LoadError::Model(e) => write!(f, "{e}"),
        }
    }
}
impl std::error::Error for LoadError {}
impl From<ModelError> for LoadError {
    fn from(e: ModelError) -> Self {
        LoadError::Model(e)
    }
}
impl From<GgufError> for LoadError {
    fn from(e: GgufError) -> Self {
        LoadError::Model(ModelError::Gguf(e))
    }
}

/// First read; grows ×2 (or to what the parser asks for) until the header is complete.
const FIRST_PREFIX: u64 = 1 << 20;
/// Chunk size for copying weights (bounded so a progress callback can run between chunks).
const CHUNK: usize = 16 << 20;

/// Reads and parses the GGUF header with as few, growing reads as needed.
pub fn read_header(src: &mut dyn ByteSource) -> Result<Header, LoadError> {
    let size = src.size().map_err(LoadError::Io)?;
    let mut want = FIRST_PREFIX.min(size);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let have = buf.len() as u64;
        buf.resize(want as usize, 0);
        src.read_at(have, &mut buf[have as usize..]).map_err(LoadError::Io)?;
        match gguf::parse_header(&buf, Some(size)) {
            Ok(h) => return Ok(h),
            Err(GgufError::NeedMore { needed }) if want < size => {
                want = needed.max(want.saturating_mul(2)).min(size);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Loads a whole model (weights copied once, straight into their shards).
/// `progress(done, total)` is called after each chunk.
pub fn load_model(src: &mut dyn ByteSource, progress: impl FnMut(u64, u64)) -> Result<(Header, Model), LoadError> {
    load_model_role(src, Role::Whole, progress)
}

/// [`load_model`] for the part of the model that `role` holds (a column cut reads each row's piece).
pub fn load_model_role(src: &mut dyn ByteSource, role: Role, mut progress: impl FnMut(u64, u64)) -> Result<(Header, Model), LoadError> {
    let h = read_header(src)?;
    let size = src.size().map_err(LoadError::Io)?;
    if h.file_size() > size {
        return Err(GgufError::Truncated { what: format!("file has {size} bytes, the header describes {}", h.file_size()) }.into());
    }
    let (cfg, mut store) = Model::allocate_role_auto(&h, role)?;
    let total = store.total_bytes();
    let mut done = 0u64;
    for op in store.plan().to_vec() {
        let shard = store.shard_mut(op.shard);
        for i in 0..op.count {
            let dst = (op.dst_offset + i * op.dst_stride) as usize;
            let file = op.file_offset + i * op.file_stride;
            for (k, chunk) in shard[dst..dst + op.len as usize].chunks_mut(CHUNK).enumerate() {
                src.read_at(file + (k * CHUNK) as u64, chunk).map_err(LoadError::Io)?;
                done += chunk.len() as u64;
            }
        }
        progress(done, total);
    }
    store.mark_all_filled();
    let model = Model::from_store_role(cfg, store, role)?;
    Ok((h, model))
}

/// A byte source over a slice in memory.
pub struct SliceSource<'a>(pub &'a [u8]);

impl ByteSource for SliceSource<'_> {
    fn size(&mut self) -> Result<u64, String> {
        Ok(self.0.len() as u64)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        let start = usize::try_from(offset).map_err(|_| "offset out of range".to_string())?;
        let src = self.0.get(start..start + buf.len()).ok_or("read past the end of the data")?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// A byte source over a native file.
#[cfg(not(target_arch = "wasm32"))]
pub struct FileSource(pub std::fs::File);

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for FileSource {
    fn size(&mut self) -> Result<u64, String> {
        self.0.metadata().map(|m| m.len()).map_err(|e| e.to_string())
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        use std::io::{Read, Seek, SeekFrom};
        self.0.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
        self.0.read_exact(buf).map_err(|e| e.to_string())
    }
}
