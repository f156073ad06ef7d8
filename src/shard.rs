//! The engine of a shard worker: its part of every weight matrix ([`Role::Shard`]), the state of
//! its heads, and the snapshots of that state that the coordinator tells it to keep.
//!
//! A shard never decides anything. The coordinator's [`crate::engine::Engine`] sends it
//! [`StateOp`]s (mirroring its own prefix cache) and stages to run; the shard answers each
//! stage with its partial result. In the browser that is a Web Worker of its own
//! (`www/src/shard-worker.ts`); in tests, [`crate::cluster::Cluster`] calls it directly.

use crate::model::{Model, ModelError, Snapshot, Stage, State};
use crate::split::Share;
use crate::ops::{MatmulScratch, Precision};

/// What a coordinator tells its shards about the sequence state (see `Engine`'s prefix cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateOp {
    /// Keep a snapshot of the recurrent state at the current position.
    Save,
    /// Return to the snapshot taken at this position.
    Restore(usize),
    /// Drop the snapshot taken at this position.
    Forget(usize),
    /// Back to position 0 (snapshots are kept).
    Clear,
}

impl StateOp {
    /// Wire form: two integers (code, position).
    pub fn encode(self) -> [u32; 2] {
        match self {
            StateOp::Save => [0, 0],
            StateOp::Restore(n) => [1, n as u32],
            StateOp::Forget(n) => [2, n as u32],
            StateOp::Clear => [3, 0],
        }
    }
    pub fn decode(code: u32, n: u32) -> Option<StateOp> {
        Some(match code {
            0 => StateOp::Save,
            1 => StateOp::Restore(n as usize),
            2 => StateOp::Forget(n as usize),
            3 => StateOp::Clear,
            _ => return None,
        })
    }
}

pub struct ShardEngine {
    pub model: Model,
    pub precision: Precision,
    state: State,
    snapshots: Vec<Snapshot>,
    mm: MatmulScratch,
    /// The last stage's result.
    out: Vec<f32>,
}

impl ShardEngine {
    /// Allocates the state of this shard's heads for `n_ctx` tokens (fails when out of memory).
    pub fn new(model: Model, n_ctx: usize) -> Result<ShardEngine, ModelError> {
        let state = model.try_new_state(n_ctx)?;
        Ok(ShardEngine { model, precision: Precision::Fast, state, snapshots: Vec::new(), mm: MatmulScratch::default(), out: Vec::new() })
    }

    pub fn apply(&mut self, op: StateOp) -> Result<(), ModelError> {
        match op {
            StateOp::Save => {
                let n = self.state.n_past;
                if !self.snapshots.iter().any(|s| s.n_past == n) {
                    self.snapshots.push(self.state.snapshot());
                }
            }
            StateOp::Restore(n) => {
                let s = self.snapshots.iter().find(|s| s.n_past == n);
                let s = s.ok_or_else(|| ModelError::Input(format!("shard has no snapshot at position {n}")))?;
                self.state.restore(s);
            }
            StateOp::Forget(n) => self.snapshots.retain(|s| s.n_past != n),
            StateOp::Clear => self.state.clear(),
        }
        Ok(())
    }

    /// Runs `stage` on input `x` for tokens at positions `pos..`, of a balanced stage the pieces
    /// `share` gives it; returns this shard's result (mixer: T × D partial sum; FFN: that, or
    /// one per piece; head: rows × its share's vocabulary rows, [`Model::result_len`]).
    pub fn run(&mut self, stage: Stage, pos: usize, x: &[f32], share: &Share) -> Result<&[f32], ModelError> {
        let d = self.model.config.n_embd;
        if x.is_empty() || x.len() % d != 0 {
            return Err(ModelError::Input(format!("stage input of {} values is not rows of {d}", x.len())));
        }
        let rows = x.len() / d;
        if let Stage::Mixer(il) | Stage::Ffn(il) = stage {
            if il >= self.model.config.n_layer {
                return Err(ModelError::Input(format!("layer {il} of {}", self.model.config.n_layer)));
            }
        }
        if stage != Stage::Head && pos + rows > self.state.n_ctx {
            return Err(ModelError::Input(format!("context full: {pos} + {rows} tokens exceed {}", self.state.n_ctx)));
        }
        let held = match stage {
            Stage::Ffn(il) => self.model.ffn_pieces(il),
            Stage::Head => self.model.head_pieces_held(),
            Stage::Mixer(_) => 0,
        };
        if share.pieces.as_ref().is_some_and(|p| p.start > p.end || p.end > held) {
            return Err(ModelError::Input(format!("pieces {:?} of {held}", share.pieces)));
        }
        self.out.clear();
        self.out.resize(self.model.result_len(stage, rows, share), 0.0);
        self.model.run_stage(stage, pos, x, share, &mut self.state, &mut self.out, self.precision, &mut self.mm);
        Ok(&self.out)
    }

    /// Bytes of state and snapshots held (memory reporting).
    pub fn state_bytes(&self) -> usize {
        self.state.bytes() + self.snapshots.iter().map(|s| s.bytes()).sum::<usize>()
    }
}
