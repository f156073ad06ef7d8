//! The engine behind every front end: one model, one conversation state with prefix reuse, and
//! generation as small resumable steps (so a Web Worker can stream tokens and honour an abort
//! between any two of them).
//!
//! ```text
//! begin(prompt ids, params)   restore the longest usable snapshot; queue the rest of the prompt
//! prefill(n) … until done     run the queued prompt tokens, n at a time
//! step() … until None         sample, stream the text piece, run the token
//! ```
//! Prefix reuse: a hybrid model cannot cut its recurrent state back, so the engine keeps
//! snapshots at the end of each prompt and of each generation. A new prompt that extends one of
//! them (a follow-up chat message) only runs the new tokens.
//!
//! Every forward pass is a [`Pass`] (the model's stage program). With the whole model here,
//! `prefill` and `step` run it to the end at once. When the model is split across shard workers
//! (`Role::Coordinator`), a driver calls `prefill_start` / `step_start`, has the shards run each
//! stage of [`Engine::pass`], and calls [`Engine::advance_pass`] until it is done; state changes
//! the shards must mirror (snapshot, restore, clear) queue up in [`Engine::take_shard_ops`].
//!
//! A prompt can also run for its final-norm hidden states instead of a generation
//! ([`Engine::begin_hidden`], then the same `prefill` / `prefill_start` steps, rows collected with
//! [`Engine::take_hidden`]): what a head on the backbone reads (Clef's decisions, `crate::clef`).
//! It uses the same state and snapshots as chat, so a decision costs no second state.

use crate::model::{Logits, Model, Pass, Role, Snapshot, State};
use crate::shard::StateOp;

use crate::ops::Precision;
use crate::grammar::{Constraint, GrammarError};
use crate::sampler::{Distribution, Sampler, SamplerParams, TokenLogprobs};
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// How many snapshots to keep (each is ~50 MB for the 9B: the recurrent state).
const MAX_SNAPSHOTS: usize = 4;

#[derive(Clone, Debug, PartialEq)]
pub struct GenParams {
    pub sampler: SamplerParams,
    pub max_tokens: usize,
    /// Extra stop strings (the end-of-generation tokens always stop).
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// Report each token's log-probability and this many alternatives (≤ `MAX_TOP_LOGPROBS`);
    /// `None`: no log-probabilities. See `sampler::Distribution` for which distribution.
    pub logprobs: Option<usize>,
}

impl Default for GenParams {
    fn default() -> Self {
        GenParams { sampler: SamplerParams::default(), max_tokens: 512, stop: Vec::new(), ignore_eos: false, logprobs: None }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One generated token and the text it completes (may be empty: partial UTF-8 or held back
/// because it could be the start of a stop string).
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub token: u32,
    pub text: String,
    /// When asked for (`GenParams::logprobs`).
    pub logprobs: Option<TokenLogprobs>,
}

/// Usage of the current / last request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens served from a snapshot instead of being run again.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

struct Generation {
    params: GenParams,
    sampler: Sampler,
    /// Prompt tokens still to run.
    queue: Vec<u32>,
    logits: Vec<f32>,
    decoder: StreamDecoder,
    /// Text produced but not yet returned (could be the beginning of a stop string).
    held: String,
    finished: Option<FinishReason>,
    /// The grammar the answer must follow (structured output, forced tool calls).
    constraint: Option<Constraint>,
    /// A prompt run for its hidden states (no generation): see [`Engine::begin_hidden`].
    hidden: Option<HiddenRun>,
}

/// What a hidden-state run keeps: the rows of the passes done since the last `take_hidden`, and
/// the position where a snapshot is taken for a later prompt with the same prefix.
struct HiddenRun {
    /// Rows × n_embd.
    rows: Vec<f32>,
    save_at: usize,
}

/// The forward pass in flight and what to do with its result.
enum Inflight {
    /// Prompt tokens; `last`: the final chunk (its logits start the generation).
    Prefill { tokens: Vec<u32>, last: bool },
    /// A sampled token.
    Step { token: u32 },
}

pub struct Engine {
    pub model: Model,
    pub tokenizer: Option<Tokenizer>,
    pub precision: Precision,
    /// The state of the heads held here (a coordinator's holds only the position).
    state: State,
    /// The tokens `state` holds, positions 0..n_past.
    tokens: Vec<u32>,
    snapshots: Vec<Snapshot>,
    scratch: crate::model::Scratch,
    inflight: Option<Inflight>,
    /// State changes the shard workers must mirror (only when the model is split).
    shard_ops: Vec<StateOp>,
    gen: Option<Generation>,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EngineError {
    /// No request in progress.
    Idle,
    /// Prompt + max_tokens do not fit in the context.
    ContextFull { needed: usize, n_ctx: usize },
    Model(String),
    Input(String),
    /// The output grammar failed during generation.
    Grammar(GrammarError),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Idle => f.write_str("no generation in progress"),
            EngineError::ContextFull { needed, n_ctx } => {
                write!(f, "the prompt needs {needed} tokens but the context holds {n_ctx}")
            }
            EngineError::Model(s) | EngineError::Input(s) => f.write_str(s),
            EngineError::Grammar(e) => e.fmt(f),
        }
    }
}
impl std::error::Error for EngineError {}

impl Engine {
    /// Fails (out of memory) when the state for `n_ctx` tokens cannot be allocated.
    pub fn new(model: Model, tokenizer: Option<Tokenizer>, n_ctx: usize) -> Result<Engine, EngineError> {
        let n_ctx = n_ctx.clamp(1, model.config.context_length.max(1));
        let state = model.try_new_state(n_ctx).map_err(|e| EngineError::Model(e.to_string()))?;
        Ok(Engine {
            model,
            tokenizer,
            precision: Precision::Fast,
            state,
            tokens: Vec::new(),
            snapshots: Vec::new(),
            scratch: Default::default(),
            inflight: None,
            shard_ops: Vec::new(),
            gen: None,
            usage: Usage::default(),
        })
    }

    pub fn n_ctx(&self) -> usize {
        self.state.n_ctx
    }

    /// Starts a request. Returns how many prompt tokens were reused from a snapshot.
    pub fn begin(&mut self, prompt: &[u32], params: GenParams) -> Result<usize, EngineError> {
        self.start(prompt, params, usize::MAX, None)
    }

    /// Starts running `prompt` for its final-norm hidden states (`n_embd` per token) instead of a
    /// generation: each `prefill` / pass of it yields its rows ([`Engine::take_hidden`]). At most
    /// `max_reuse` tokens come from a snapshot (the caller holds what it derived from the rows of
    /// that many); the chunks stop at `save_at`, where a snapshot is kept for the next prompt
    /// that starts the same way. Returns how many prompt tokens were reused.
    pub fn begin_hidden(&mut self, prompt: &[u32], max_reuse: usize, save_at: usize) -> Result<usize, EngineError> {
        let run = HiddenRun { rows: Vec::new(), save_at };
        self.start(prompt, GenParams { max_tokens: 0, ..GenParams::default() }, max_reuse, Some(run))
    }

    /// The hidden rows of the passes completed since the last call (hidden runs only).
    pub fn take_hidden(&mut self) -> Vec<f32> {
        self.gen.as_mut().and_then(|g| g.hidden.as_mut()).map(|h| std::mem::take(&mut h.rows)).unwrap_or_default()
    }

    fn start(&mut self, prompt: &[u32], params: GenParams, max_reuse: usize, hidden: Option<HiddenRun>) -> Result<usize, EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::Input("the prompt is empty".into()));
        }
        let n_ctx = self.state.n_ctx;
        // A generation needs room for one token after the prompt; a hidden run does not.
        let needed = prompt.len() + usize::from(hidden.is_none());
        if needed > n_ctx {
            return Err(EngineError::ContextFull { needed, n_ctx });
        }
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= self.model.config.n_vocab) {
            return Err(EngineError::Input(format!("token id {bad} is out of range")));
        }
        // The longest snapshot that is a strict prefix of the prompt and of what the state holds
        // (at least one prompt token must run to produce logits).
        if self.inflight.is_some() {
            return Err(EngineError::Input("a forward pass is still running".into()));
        }
        let common = self.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let limit = common.min(prompt.len() - 1).min(max_reuse);
        let dropped: Vec<usize> = self.snapshots.iter().map(|s| s.n_past).filter(|&n| n > common).collect();
        for n in dropped {
            self.shard_op(StateOp::Forget(n));
        }
        self.snapshots.retain(|s| s.n_past <= common);
        self.back_to_snapshot(limit);
        let start = self.state.n_past;
        let mut sampler = Sampler::new(params.sampler.clone());
        prompt.iter().for_each(|&t| sampler.accept(t));
        self.usage = Usage { prompt_tokens: prompt.len(), cached_tokens: start, completion_tokens: 0 };
        self.gen = Some(Generation {
            params,
            sampler,
            queue: prompt[start..].to_vec(),
            logits: Vec::new(),
            decoder: StreamDecoder::new(false),
            held: String::new(),
            finished: None,
            constraint: None,
            hidden,
        });
        Ok(start)
    }

    /// Makes the request's answer follow a grammar (see `grammar.rs`): every token is sampled
    /// under its mask. Call after `begin`, before the first token.
    pub fn constrain(&mut self, c: Constraint) -> Result<(), EngineError> {
        let gen = self.gen.as_mut().ok_or(EngineError::Idle)?;
        if self.usage.completion_tokens > 0 {
            return Err(EngineError::Input("a constraint must be set before the first token".into()));
        }
        gen.constraint = Some(c);
        Ok(())
    }

    /// Runs up to `max` queued prompt tokens. Returns the number still queued (0 = ready).
    pub fn prefill(&mut self, max: usize) -> Result<usize, EngineError> {
        let left = self.prefill_start(max)?;
        self.run_local();
        Ok(left)
    }

    /// Starts the pass of up to `max` queued prompt tokens (none when the queue is empty).
    /// Returns the number still queued after them.
    pub fn prefill_start(&mut self, max: usize) -> Result<usize, EngineError> {
        let gen = self.gen.as_mut().ok_or(EngineError::Idle)?;
        if gen.queue.is_empty() {
            return Ok(0);
        }
        let mut n = max.max(1).min(gen.queue.len());
        let pos = self.state.n_past;
        if let Some(h) = gen.hidden.as_ref().filter(|h| pos < h.save_at) {
            n = n.min(h.save_at - pos);
        }
        let chunk: Vec<u32> = gen.queue.drain(..n).collect();
        let last = gen.queue.is_empty();
        let left = gen.queue.len();
        let want = match (&gen.hidden, last) {
            (Some(_), _) => Logits::Hidden,
            (None, true) => Logits::Last,
            (None, false) => Logits::None,
        };
        self.start_pass(Inflight::Prefill { tokens: chunk, last }, want)?;
        Ok(left)
    }

    /// Samples and runs one token. `None` when the generation has finished (see [`Engine::finish_reason`]).
    pub fn step(&mut self) -> Result<Option<Piece>, EngineError> {
        if !self.gen.as_ref().ok_or(EngineError::Idle)?.queue.is_empty() {
            self.prefill(usize::MAX)?;
        }
        let piece = self.step_start()?;
        self.run_local();
        Ok(piece)
    }

    /// Samples one token and starts its pass (unless it was the last one allowed: its logits would
    /// be unused). `None` when the generation has finished. The prompt must have been run.
    pub fn step_start(&mut self) -> Result<Option<Piece>, EngineError> {
        let n_ctx = self.state.n_ctx;
        let eog: Vec<u32> = self.tokenizer.as_ref().map(|t| t.eog_ids().to_vec()).unwrap_or_default();
        let gen = self.gen.as_mut().ok_or(EngineError::Idle)?;
        if self.inflight.is_some() || !gen.queue.is_empty() {
            return Err(EngineError::Input("the prompt has not been run yet".into()));
        }
        if gen.hidden.is_some() {
            return Err(EngineError::Input("a hidden-state run generates nothing".into()));
        }
        if gen.finished.is_some() {
            return Ok(None);
        }
        if self.usage.completion_tokens >= gen.params.max_tokens {
            gen.finished = Some(FinishReason::Length);
            return Ok(None);
        }
        // The model's distribution is read before the sampler biases, penalises or masks the logits.
        let dist = gen.params.logprobs.map(|n| (Distribution::of(&gen.logits, n), gen.logits.clone()));
        if let Some(c) = gen.constraint.as_mut() {
            c.mask(&mut gen.logits).map_err(EngineError::Grammar)?;
        }
        let tok = gen.sampler.sample(&mut gen.logits);
        let logprobs = dist.map(|(d, raw)| d.token(raw[tok as usize]));
        // (Under a grammar, an end-of-generation token is drawn only where the grammar may end.)
        if (!gen.params.ignore_eos || gen.constraint.is_some()) && eog.contains(&tok) {
            gen.finished = Some(FinishReason::Stop);
            return Ok(None);
        }
        if let Some(c) = gen.constraint.as_mut() {
            c.commit(tok).map_err(EngineError::Grammar)?;
        }
        gen.sampler.accept(tok);
        self.usage.completion_tokens += 1;
        let mut text = match &self.tokenizer {
            Some(t) => gen.decoder.push(t, tok),
            None => String::new(),
        };
        // Stop strings: cut at the first one; hold back a tail that could start one.
        if !gen.params.stop.is_empty() {
            gen.held.push_str(&text);
            if let Some(pos) = gen.params.stop.iter().filter_map(|s| gen.held.find(s.as_str())).min() {
                text = gen.held[..pos].to_string();
                gen.held.clear();
                let piece = Piece { token: tok, text, logprobs };
                gen.finished = Some(FinishReason::Stop);
                return Ok(Some(piece));
            }
            let keep = gen.params.stop.iter().map(|s| partial_suffix(&gen.held, s)).max().unwrap_or(0);
            let cut = gen.held.len() - keep;
            text = gen.held[..cut].to_string();
            gen.held.drain(..cut);
        }
        // Run the token unless this was the last one allowed (its logits would be unused).
        let last = self.usage.completion_tokens >= gen.params.max_tokens || self.state.n_past + 1 >= n_ctx;
        if last {
            gen.finished = Some(FinishReason::Length);
        } else {
            self.start_pass(Inflight::Step { token: tok }, Logits::Last)?;
        }
        Ok(Some(Piece { token: tok, text, logprobs }))
    }

    fn start_pass(&mut self, what: Inflight, want: Logits) -> Result<(), EngineError> {
        let tokens: &[u32] = match &what {
            Inflight::Prefill { tokens, .. } => tokens,
            Inflight::Step { token } => std::slice::from_ref(token),
        };
        self.model
            .begin_pass(&mut self.scratch.pass, self.state.n_past, self.state.n_ctx, tokens, want)
            .map_err(|e| EngineError::Model(e.to_string()))?;
        self.inflight = Some(what);
        Ok(())
    }

    /// The pass in flight (its stage and input), for a driver with remote shards.
    pub fn pass(&mut self) -> Option<&mut Pass> {
        self.inflight.as_ref()?;
        Some(&mut self.scratch.pass)
    }

    /// Moves the pass in flight to its next stage once every shard's result is in; when the pass
    /// is complete, its result goes where it belongs. Returns whether stages remain.
    pub fn advance_pass(&mut self) -> bool {
        self.model.advance(&mut self.scratch.pass);
        if self.scratch.pass.stage().is_some() {
            return true;
        }
        self.finish_pass();
        false
    }

    /// Runs the pass in flight here (the whole model is in this engine).
    pub fn run_local(&mut self) {
        self.run_local_for(f64::INFINITY);
    }

    /// Runs stages of the pass in flight here (the whole model is in this engine) until it is
    /// complete or `budget_ms` have passed, at least one stage; returns whether stages remain. A
    /// one-worker host runs a prompt slice this way, yielding between calls, so that an abort
    /// lands within a stage ([`Engine::abandon_pass`]) however long the slice.
    pub fn run_local_for(&mut self, budget_ms: f64) -> bool {
        if self.inflight.is_none() {
            return false;
        }
        let t0 = crate::bench::now_ms();
        while self.model.run_next_stage(&mut self.scratch.pass, &mut self.state, self.precision, &mut self.scratch.mm) {
            if crate::bench::now_ms() - t0 >= budget_ms {
                return true;
            }
        }
        self.finish_pass();
        false
    }

    fn finish_pass(&mut self) {
        let pass = &mut self.scratch.pass;
        self.state.n_past = pass.pos + pass.n_tokens;
        let out = pass.take_output();
        match self.inflight.take() {
            Some(Inflight::Prefill { tokens, last }) => {
                self.tokens.extend_from_slice(&tokens);
                if let Some(h) = self.gen.as_mut().and_then(|g| g.hidden.as_mut()) {
                    h.rows.extend_from_slice(&out);
                    if self.state.n_past == h.save_at && !last {
                        self.push_snapshot();
                    }
                } else if last {
                    if let Some(g) = self.gen.as_mut() {
                        g.logits = out;
                    }
                    self.push_snapshot();
                }
            }
            Some(Inflight::Step { token }) => {
                self.tokens.push(token);
                if let Some(g) = self.gen.as_mut() {
                    g.logits = out;
                }
            }
            None => {}
        }
    }

    /// Gives up the pass in flight (a shard failed): the state is no longer trustworthy, so the
    /// conversation state is forgotten.
    pub fn cancel_pass(&mut self) {
        if self.inflight.take().is_some() {
            self.reset();
        }
    }

    /// Gives up the pass in flight between two of its stages (an abort): the layers it ran are
    /// ahead of the others, so the state goes back to the newest snapshot at or before the pass's
    /// start — the end of the previous prompt or answer, usually — and the shards with it; with
    /// none, to the empty state. The snapshots are kept (unlike [`Engine::cancel_pass`]).
    pub fn abandon_pass(&mut self) {
        if self.inflight.take().is_none() {
            return;
        }
        self.back_to_snapshot(self.scratch.pass.pos);
    }

    /// Puts the state (and the shards') back at the newest snapshot of at most `limit` tokens, or
    /// empty when there is none.
    fn back_to_snapshot(&mut self, limit: usize) {
        let newest = self.snapshots.iter().enumerate().filter(|(_, s)| s.n_past <= limit).max_by_key(|(_, s)| s.n_past);
        match newest.map(|(i, _)| i) {
            Some(i) => {
                self.state.restore(&self.snapshots[i]);
                self.shard_op(StateOp::Restore(self.state.n_past));
            }
            None => {
                self.state.clear();
                self.shard_op(StateOp::Clear);
            }
        }
        self.tokens.truncate(self.state.n_past);
    }

    /// State changes queued for the shard workers since the last call, in order.
    pub fn take_shard_ops(&mut self) -> Vec<StateOp> {
        std::mem::take(&mut self.shard_ops)
    }

    fn shard_op(&mut self, op: StateOp) {
        if self.model.role == Role::Coordinator {
            self.shard_ops.push(op);
        }
    }

    /// Text still held back at the end (partial UTF-8 or a stop-string prefix that never completed).
    pub fn flush(&mut self) -> String {
        let Some(gen) = self.gen.as_mut() else { return String::new() };
        let mut s = std::mem::take(&mut gen.held);
        if gen.finished != Some(FinishReason::Stop) || gen.params.stop.is_empty() {
            s.push_str(&gen.decoder.flush());
        }
        s
    }

    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.gen.as_ref().and_then(|g| g.finished)
    }

    /// Ends the request (normally or aborted), keeping a snapshot for the next one.
    pub fn end_request(&mut self) {
        if self.inflight.is_some() {
            self.cancel_pass();
        }
        // A hidden run keeps only its `save_at` snapshot: its end is not a conversation to continue.
        if self.gen.take().is_some_and(|g| g.hidden.is_none()) && self.state.n_past > 0 {
            self.push_snapshot();
        }
    }

    fn push_snapshot(&mut self) {
        let n = self.state.n_past;
        if self.snapshots.iter().any(|s| s.n_past == n) {
            return;
        }
        if self.snapshots.len() >= MAX_SNAPSHOTS {
            let old = self.snapshots.remove(0);
            self.shard_op(StateOp::Forget(old.n_past));
        }
        self.snapshots.push(self.state.snapshot());
        self.shard_op(StateOp::Save);
    }

    /// Forgets the conversation state and snapshots.
    pub fn reset(&mut self) {
        self.gen = None;
        self.inflight = None;
        for n in self.snapshots.iter().map(|s| s.n_past).collect::<Vec<_>>() {
            self.shard_op(StateOp::Forget(n));
        }
        self.snapshots.clear();
        self.tokens.clear();
        self.state.clear();
        self.shard_op(StateOp::Clear);
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`.
fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&k| stop.is_char_boundary(k) && text.is_char_boundary(text.len() - k) && text.ends_with(&stop[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::partial_suffix;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn partial_stop_suffix() {
        assert_eq!(partial_suffix("hello wor", "world"), 3);
        assert_eq!(partial_suffix("hello", "world"), 0);
        assert_eq!(partial_suffix("abc", "c"), 0); // a full match is found by `find`, not held
        assert_eq!(partial_suffix("été", "été!"), "été".len());
    }
}
