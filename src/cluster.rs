//! A model split across N shards inside one process: the coordinator's engine and its shard
//! engines run the stage program of [`Pass`] one after the other in this thread.
//!
//! This is what the browser's Web Workers do with messages in between (`www/src/shards.ts`),
//! without the messages: it lets the native tests and `clef generate --workers N` check that a
//! split model computes what the whole one does, on any machine. It is not a way to use several
//! cores natively.

use crate::clef::lm_rows::{rows_of_part, LmRows};
use crate::clef::{Decider, Decision, DecisionError, Request, Response, Via};
use crate::engine::{Engine, EngineError, Piece};
use crate::model::{Logits, Model, ModelError, Pass, Role, Stage};
use crate::ops::Precision;
use crate::shard::ShardEngine;
use crate::balance::Balancer;
use crate::split::{Balanced, ShardId, BAND_PCT};

pub struct Cluster {
    pub shards: Vec<ShardEngine>,
    /// The pass buffers of [`Cluster::forward`] (sized by the first call, reused).
    pass: Pass,
    balance: Balancer,
    /// How much slower each shard is than it would be alone: the balancer is told that a
    /// shard's stage took its work × this (all 1: the even split; tests skew it to move the cuts).
    pub slowdown: Vec<f64>,
}

impl Cluster {
    /// The coordinator's model and `n` shard engines (states for `n_ctx` tokens) from a GGUF file
    /// in memory, with bands of [`BAND_PCT`].
    pub fn from_bytes(file: &[u8], n: usize, n_ctx: usize) -> Result<(Model, Cluster), ModelError> {
        Cluster::with_band(file, n, n_ctx, BAND_PCT)
    }

    /// [`Cluster::from_bytes`] with bands of `band_pct` ([`ShardId::band_pct`]; 0: none).
    pub fn with_band(file: &[u8], n: usize, n_ctx: usize, band_pct: usize) -> Result<(Model, Cluster), ModelError> {
        Cluster::with_forms(file, n, n_ctx, band_pct, None)
    }

    /// [`Cluster::with_band`] with the shards' stored forms chosen ([`Model::from_bytes_forms`]).
    pub fn with_forms(file: &[u8], n: usize, n_ctx: usize, band_pct: usize, expand: Option<bool>) -> Result<(Model, Cluster), ModelError> {
        let coordinator = Model::from_bytes_forms(file, Role::Coordinator, expand)?;
        let shards: Vec<ShardEngine> = (0..n)
            .map(|index| ShardEngine::new(Model::from_bytes_forms(file, Role::Shard(ShardId { index, count: n, band_pct }), expand)?, n_ctx))
            .collect::<Result<_, ModelError>>()?;
        let h = crate::gguf::parse_header(file, Some(file.len() as u64))?;
        let split = Balanced::for_tensors(&coordinator.config, n, band_pct, |name| h.tensors.iter().find(|t| t.name == name).map(|t| t.ty));
        Ok((coordinator, Cluster { shards, pass: Pass::default(), balance: Balancer::new(split), slowdown: vec![1.0; n] }))
    }

    pub fn balancer(&self) -> &Balancer {
        &self.balance
    }

    pub fn set_precision(&mut self, p: Precision) {
        self.shards.iter_mut().for_each(|s| s.precision = p);
    }

    /// Runs `pass`'s current stage on every shard with the balancer's shares, adding their
    /// results in its order.
    fn run_stage(&mut self, pass: &mut Pass, stage: Stage) -> Result<(), ModelError> {
        let b = &mut self.balance;
        b.plan(stage);
        for &i in b.order() {
            let out = self.shards[i].run(stage, pass.pos, pass.input(), &b.shares()[i])?;
            match stage {
                Stage::Head => pass.put_logits(b.head_rows(i), out),
                _ => pass.add_partial(out),
            }
        }
        let ms: Vec<f64> = (0..self.shards.len()).map(|i| b.work(i) * self.slowdown[i]).collect();
        b.observe(&ms);
        Ok(())
    }

    /// [`Model::forward`] over the shards, at position `n_past` (advanced by the tokens).
    pub fn forward(&mut self, coordinator: &Model, n_past: &mut usize, n_ctx: usize, tokens: &[u32], want: Logits) -> Result<Vec<f32>, ModelError> {
        let mut pass = std::mem::take(&mut self.pass);
        let r = coordinator.begin_pass(&mut pass, *n_past, n_ctx, tokens, want).and_then(|_| {
            while let Some(stage) = pass.stage() {
                self.run_stage(&mut pass, stage)?;
                coordinator.advance(&mut pass);
            }
            Ok(pass.take_output())
        });
        self.pass = pass;
        *n_past += if r.is_ok() { tokens.len() } else { 0 };
        r
    }

    /// Delivers the engine's queued state changes to the shards and runs its pass in flight.
    pub fn drive(&mut self, e: &mut Engine) -> Result<(), EngineError> {
        self.drive_stages(e, usize::MAX).map(|_| ())
    }

    /// [`Cluster::drive`], stopping after at most `max` stages; returns whether stages remain (a
    /// driver that looks at its messages between stages: `www/src/shards.ts` `SplitDriver`).
    pub fn drive_stages(&mut self, e: &mut Engine, max: usize) -> Result<bool, EngineError> {
        let model_err = |e: ModelError| EngineError::Model(e.to_string());
        for op in e.take_shard_ops() {
            for s in &mut self.shards {
                s.apply(op).map_err(model_err)?;
            }
        }
        for _ in 0..max {
            let Some(stage) = e.pass().and_then(|p| p.stage()) else { return Ok(false) };
            let pass = e.pass().expect("a pass in flight");
            self.run_stage(pass, stage).map_err(model_err)?;
            e.advance_pass();
        }
        Ok(e.pass().and_then(|p| p.stage()).is_some())
    }

    /// [`Engine::prefill`] with the shards.
    pub fn prefill(&mut self, e: &mut Engine, max: usize) -> Result<usize, EngineError> {
        let left = e.prefill_start(max)?;
        self.drive(e)?;
        Ok(left)
    }

    /// [`Engine::step`] with the shards (the prompt must have been run).
    pub fn step(&mut self, e: &mut Engine) -> Result<Option<Piece>, EngineError> {
        self.drive(e)?; // state changes queued since the last pass (begin's restore)
        let piece = e.step_start()?;
        self.drive(e)?;
        Ok(piece)
    }

    /// Gives a decision the LM-head rows it reads from the shards' vocabulary ranges (nothing
    /// to do when the coordinator holds the LM head: a tied one).
    pub fn supply_lm(&self, e: &Engine, d: &mut Decision) -> Result<(), DecisionError> {
        let Some(ids) = d.lm_needs().map(<[u32]>::to_vec) else { return Ok(()) };
        let parts = self.shards.iter().filter_map(|s| rows_of_part(&s.model, &ids)).collect();
        d.supply_lm(LmRows::from_parts(e.model.config.n_embd, &ids, parts)?)
    }

    /// [`Decider::decide`] with the shards: the same steps, each chunk's pass run here.
    pub fn decide<'a>(&mut self, decider: &mut Decider, e: &mut Engine, via: impl Into<Via<'a>>, body: &str) -> Result<(Request, Response), DecisionError> {
        let via = via.into();
        let mut d = decider.start(e, via, body)?;
        if let Err(err) = self.supply_lm(e, &mut d) {
            decider.cancel(e);
            return Err(err);
        }
        while decider.step_with(e, via, &mut d, decider.chunk.max(1), |e| self.drive(e))? > 0 {}
        let resp = decider.finish(e, via, &d)?;
        Ok((d.request.expect("a request"), resp))
    }
}
