//! The LM-head rows a decision reads, wherever the LM head lives.
//!
//! Both ways of answering read a few rows of the LM head (`output.weight`, or `token_embd.weight`
//! when tied): the joint head the raw rows of its options' tokens (the lexical vectors, `head.rs`),
//! the label readout the logits of its label tokens (`approx.rs`). Which ids is known as soon as
//! the request is tokenized, so a decision gathers them once, up front:
//!
//! ```text
//! Decider::start → Decision::lm_needs(): sorted unique vocabulary ids
//!   whole model (or tied LM head on the coordinator): LmRows::from_model, at once
//!   split model: every shard answers rows_of_part(its model, ids) for the ids in its vocabulary
//!                range → LmRows::from_parts → Decision::supply_lm
//! ```
//! The rows travel in their stored type (e.g. Q6_K bytes), not as floats, and all the maths on
//! them — dequantizing a lexical row, a label's logit through the LM head's own kernel and
//! activation quantization — runs here on the coordinator over this small table. So a split
//! model's decision computes exactly what the whole model's does, bit for bit, and the head and
//! readout code has one copy.

use super::DecisionError;
use crate::model::{Model, Role};
use crate::ops::{self, matmul, Linear, MatmulScratch, Precision};
use crate::quant::GgmlType;
use crate::weights::{TensorView, WeightStore};
use std::ops::Range;

/// Rows of the LM head for a sorted set of vocabulary ids, in their stored type.
pub struct LmRows {
    /// Sorted, unique.
    ids: Vec<u32>,
    /// One shard: the rows' bytes in `ids` order.
    store: WeightStore,
    /// n_embd × ids.len() over `store`.
    table: Linear,
}

/// One model part's answer: its LM-head type and, for the asked ids in its vocabulary range, the
/// ids (ascending) and their raw rows, concatenated.
#[derive(Clone, Debug, PartialEq)]
pub struct RowsPart {
    pub ty: GgmlType,
    pub ids: Vec<u32>,
    pub bytes: Vec<u8>,
}

/// The sorted unique ids of `ids` (what [`LmRows`] is asked for).
pub fn needed(ids: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = ids.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The LM-head table this model part holds and the vocabulary ids its rows are (`None`: none
/// here — the coordinator of a split model with an untied `output.weight`).
/// Also the ids it answers for: a shard's even share (a band's rows are held by two shards).
fn lm_table(model: &Model) -> Option<(&TensorView, Range<usize>, Range<usize>)> {
    let name = if model.config.tied_output { "token_embd.weight" } else { "output.weight" };
    let t = model.store.find(name)?;
    let (range, answers) = match model.role {
        Role::Shard(_) => (model.vocab_range()?, model.vocab_even()?),
        // The whole table: a whole model's, or the tied embeddings a coordinator holds.
        Role::Whole | Role::Coordinator => (0..t.rows_cols().0, 0..t.rows_cols().0),
    };
    Some((t, range, answers))
}

/// This model part's rows of `ids` (those in its range; `None`: it holds no LM head).
pub fn rows_of_part(model: &Model, ids: &[u32]) -> Option<RowsPart> {
    let (t, range, answers) = lm_table(model)?;
    let rb = t.ty.row_bytes(t.rows_cols().1);
    let data = model.store.bytes(t);
    // An interleaved head (`Model::interleave_weights`) holds each row inside its group of four:
    // the group is un-interleaved once (ids are sorted, so a group's rows come together).
    let r4 = crate::quant::r4::r4_kernels(t.ty).filter(|_| model.lm_head_interleaved());
    let mut group: Option<(usize, Vec<u8>)> = None;
    let mut part = RowsPart { ty: t.ty, ids: Vec::new(), bytes: Vec::new() };
    for &id in ids {
        if answers.contains(&(id as usize)) {
            let r = id as usize - range.start;
            part.ids.push(id);
            match r4 {
                None => part.bytes.extend_from_slice(&data[r * rb..(r + 1) * rb]),
                Some(k4) => {
                    let g = r / crate::quant::r4::R;
                    if group.as_ref().is_none_or(|(at, _)| *at != g) {
                        let mut plain = vec![0u8; crate::quant::r4::R * rb];
                        crate::quant::r4::unpack_rows(k4, &data[g * plain.len()..(g + 1) * plain.len()], &mut plain);
                        group = Some((g, plain));
                    }
                    let plain = &group.as_ref().expect("set above").1;
                    let i = r % crate::quant::r4::R;
                    part.bytes.extend_from_slice(&plain[i * rb..(i + 1) * rb]);
                }
            }
        }
    }
    Some(part)
}

impl LmRows {
    /// The rows of `ids` (sorted, unique) from a model part that holds all of them, else `None`.
    pub fn from_model(model: &Model, ids: &[u32]) -> Option<LmRows> {
        let part = rows_of_part(model, ids)?;
        if part.ids.len() != ids.len() {
            return None;
        }
        LmRows::from_parts(model.config.n_embd, ids, vec![part]).ok()
    }

    /// Assembles the rows of `ids` (sorted, unique) from the parts' answers (any order). Every
    /// id must come exactly once, all in one type.
    pub fn from_parts(n_embd: usize, ids: &[u32], parts: Vec<RowsPart>) -> Result<LmRows, DecisionError> {
        let bad = |s: String| DecisionError::Model(format!("LM-head rows: {s}"));
        let ty = parts.first().map(|p| p.ty).unwrap_or(GgmlType::F32);
        let row_bytes = ty.row_bytes(n_embd);
        let mut rows: Vec<(u32, &[u8])> = Vec::with_capacity(ids.len());
        for p in &parts {
            if p.ty != ty {
                return Err(bad(format!("parts in types {} and {}", ty, p.ty)));
            }
            if p.bytes.len() != p.ids.len() * row_bytes {
                return Err(bad(format!("{} bytes for {} rows of {row_bytes}", p.bytes.len(), p.ids.len())));
            }
            rows.extend(p.ids.iter().copied().zip(p.bytes.chunks_exact(row_bytes.max(1))));
        }
        rows.sort_unstable_by_key(|r| r.0);
        if rows.len() != ids.len() || rows.iter().zip(ids).any(|(r, &id)| r.0 != id) {
            return Err(bad(format!("asked for {} ids, the parts answered {}", ids.len(), rows.len())));
        }
        let size = ids.len() * row_bytes;
        let view = TensorView { name: "lm_rows".into(), ty, dims: vec![n_embd, ids.len()], shard: 0, offset: 0, size };
        let mut store = WeightStore::single_shard(size as u64, vec![view.clone()]).map_err(|e| bad(e.to_string()))?;
        let buf = store.shard_mut(0);
        for (i, (_, b)) in rows.iter().enumerate() {
            buf[i * row_bytes..(i + 1) * row_bytes].copy_from_slice(b);
        }
        store.mark_filled(0);
        Ok(LmRows { ids: ids.to_vec(), store, table: Linear::new(view) })
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    fn index(&self, id: u32) -> usize {
        self.ids.binary_search(&id).unwrap_or_else(|_| panic!("LM-head row {id} was not gathered"))
    }

    /// The dequantized row of `id` (n_embd values).
    pub fn row(&self, id: u32, out: &mut [f32]) {
        ops::embedding_row(&self.store, &self.table, self.index(id), out);
    }

    /// The logits of `ids` for a final-norm hidden row `h` [n_embd]: one LM-head row each,
    /// through the same kernel (and activation quantization) as the full LM head.
    pub fn logits(&self, h: &[f32], ids: &[u32], prec: Precision, mm: &mut MatmulScratch) -> Vec<f32> {
        let rb = self.table.row_bytes;
        ids.iter()
            .map(|&id| {
                let row = TensorView {
                    dims: vec![self.table.n_in, 1],
                    offset: self.index(id) * rb,
                    size: rb,
                    ..self.table.t.clone()
                };
                let mut z = 0.0f32;
                matmul(&self.store, &Linear::new(row), h, std::slice::from_mut(&mut z), prec, mm);
                z
            })
            .collect()
    }
}
