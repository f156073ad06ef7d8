//! A model split across N shards inside one process: the coordinator and its shards run the
//! stage program of [`Pass`] one after the other in this thread.
//!
//! This is what the browser's Web Workers do with messages in between (`www/src/shards.ts`),
//! without the messages: it lets the native tests and `clef generate --workers N` check that a
//! split model computes what the whole one does, on any machine. It is not a way to use several
//! cores natively.

use crate::model::{Logits, Model, ModelError, Pass, Role, Stage, State};
use crate::ops::{MatmulScratch, Precision};
use crate::split::ShardId;

pub struct Cluster {
    pub coordinator: Model,
    /// The shards with the state of their heads.
    pub shards: Vec<(Model, State)>,
    pub n_past: usize,
    pub n_ctx: usize,
    pass: Pass,
    /// One shard's result of the current stage.
    part: Vec<f32>,
    mm: MatmulScratch,
}

impl Cluster {
    /// Builds the coordinator and `n` shards from a GGUF file in memory, with states for `n_ctx` tokens.
    pub fn from_bytes(file: &[u8], n: usize, n_ctx: usize) -> Result<Cluster, ModelError> {
        let coordinator = Model::from_bytes_role(file, Role::Coordinator)?;
        let shards = (0..n)
            .map(|index| {
                let m = Model::from_bytes_role(file, Role::Shard(ShardId { index, count: n }))?;
                let st = m.try_new_state(n_ctx)?;
                Ok((m, st))
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Cluster { coordinator, shards, n_past: 0, n_ctx, pass: Pass::default(), part: Vec::new(), mm: MatmulScratch::default() })
    }

    /// [`Model::forward`] over the shards: the same stages, each shard's partial added in shard order.
    pub fn forward(&mut self, tokens: &[u32], want: Logits, prec: Precision) -> Result<Vec<f32>, ModelError> {
        let pass = &mut self.pass;
        self.coordinator.begin_pass(pass, self.n_past, self.n_ctx, tokens, want)?;
        while let Some(stage) = pass.stage() {
            for (m, st) in &mut self.shards {
                let rows = pass.rows();
                let n_out = match stage {
                    Stage::Head => rows * m.vocab_range().map_or(0, |r| r.len()),
                    _ => pass.input().len(),
                };
                self.part.clear();
                self.part.resize(n_out, 0.0);
                m.run_stage(stage, pass.pos, pass.input(), st, &mut self.part, prec, &mut self.mm);
                match (stage, m.vocab_range()) {
                    (Stage::Head, Some(r)) => pass.put_logits(r, &self.part),
                    (Stage::Head, None) => {}
                    _ => pass.add_partial(&self.part),
                }
            }
            self.coordinator.advance(pass);
        }
        self.n_past += tokens.len();
        Ok(pass.take_output())
    }
}
