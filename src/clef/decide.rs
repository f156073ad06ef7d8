//! The decision driver: request → prompt → backbone in chunks → head → answers.
//!
//! ```text
//! Decider::start(engine, decision model, body)       parse + render + tokenize (request.rs);
//!                                                    Engine::begin_hidden: restore the state prefix
//! Decision::lm_needs → Decision::supply_lm            the LM-head rows it reads (lm_rows.rs; only a
//!                                                    split model's driver has to ask its shards)
//! per chunk: Decider::pass_start → the pass runs     here (Decider::step), or on the shards
//!            → Decider::absorb                        Head::push_rows / the readout's last row
//! Decider::finish: Head::scores → Response::from_scores (head.rs, answer.rs)
//! ```
//! **Split models.** With the model split across shard workers the coordinator's engine holds the
//! head's weights (`split::coordinator_holds`), the shards the backbone and the LM head. The
//! decision code is the same: a driver runs each chunk's pass on the shards between
//! [`Decider::pass_start`] and [`Decider::absorb`] ([`Decider::step_with`], `cluster.rs`, the
//! browser's `SplitDriver`), and gathers the LM-head rows the decision names from the shards'
//! vocabulary ranges; the maths on those rows runs here either way.
//! The backbone state is the [`Engine`]'s: a decision runs on the same state and snapshots as a
//! chat (no second state; for the 9B the KV cache alone is 64 KiB per token). The steps are
//! separate so that a driver that runs passes elsewhere (shard workers, a Web Worker's macrotask
//! loop with progress and abort) can sit between them; [`Decider::decide`] runs them in a row.
//!
//! **Prefix reuse.** The prompt starts with untagged pieces: the system text, the state, and
//! `\n\nSCHEMA FIELDS:\n`; the next untagged piece already names the first question. Pieces are
//! tokenized separately, so the tokens up to the end of the state do not depend on the questions.
//! The engine keeps a snapshot of the backbone there (`save_at`), the decider the head's memory
//! rows for those tokens (the only thing the head keeps of untagged rows); a later request on the
//! same state restores both and runs only its questions. The engine restores at most as many
//! tokens as the decider holds rows for.
//!
//! **Two ways to answer** ([`Via`]): the joint schema head ([`DecisionModel`]), or — for a file
//! without one — the approximate label readout ([`LabelReadout`], `approx.rs`: one prompt per
//! question and option order, sharing the state prefix through the engine's snapshot). Both go
//! through the same steps (`start` → `step` … → `finish`) and validation; a [`Decision`] in
//! flight holds the work of whichever started it.

use super::answer::{Calibration, Response};
use super::approx::{LabelReadout, LabelRun};
use super::head::{Head, HeadConfig, HeadInput};
use super::lm_rows::LmRows;
use super::request::{self, Prompt, Request, Template, TAG_NONE};
use super::{safetensors, DecisionError};
use crate::gguf::Header;
use crate::loader::ByteSource;
use crate::engine::{Engine, EngineError};
use crate::model::{Model, Role};
use crate::ops::MatmulScratch;
use crate::tokenizer::Tokenizer;

/// Tokens per backbone call (the hidden rows of one chunk are all the head holds at once).
pub const DEFAULT_CHUNK: usize = 256;

/// Everything decisions need besides the backbone: the head, the `systemone` template, the
/// calibration temperatures and the model name reported in responses.
pub struct DecisionModel {
    pub head: Head,
    pub template: Template,
    pub calibration: Calibration,
    pub name: String,
}

impl DecisionModel {
    /// A `clef` GGUF: the head's tensors are in the model's store, keys under `clef.decision.*`.
    pub fn from_gguf(h: &Header, model: &Model, name: &str) -> Result<DecisionModel, DecisionError> {
        let config = HeadConfig::from_header(h, model.config.n_embd)?;
        let found = model
            .store
            .tensors()
            .iter()
            .filter(|t| {
                t.name.starts_with("decision.") || t.name.starts_with("dec.blk.") || t.name == "token_types.weight"
            })
            .count();
        if found != config.n_tensors() {
            return Err(DecisionError::BadHead(format!(
                "the file holds {found} head tensors, its keys describe {}",
                config.n_tensors()
            )));
        }
        Ok(DecisionModel {
            head: Head::new(config, model, None)?,
            template: Template::new(h.get_str("tokenizer.chat_template.systemone"))?,
            calibration: Calibration::from_header(h)?,
            name: name.to_string(),
        })
    }

    /// `joint_head.safetensors` + `joint_head_config.json` beside a head-less GGUF. The template
    /// is the file's `systemone` one if it has it, else the built-in copy; temperatures come
    /// from the file's keys if any (τ = 1 otherwise, as the converter writes none).
    pub fn from_safetensors(
        h: &Header,
        model: &Model,
        head_file: &mut dyn ByteSource,
        config_json: &str,
        name: &str,
    ) -> Result<DecisionModel, DecisionError> {
        let config = safetensors::parse_config(config_json)?;
        let store = safetensors::load(head_file, &config)?;
        Ok(DecisionModel {
            head: Head::new(config, model, Some(store))?,
            template: Template::new(h.get_str("tokenizer.chat_template.systemone"))?,
            calibration: Calibration::from_header(h)?,
            name: name.to_string(),
        })
    }
}

/// What answers decisions for a loaded model: its joint schema head, or the approximate label
/// readout when it has none.
pub enum Decisions {
    Head(Box<DecisionModel>),
    Labels(LabelReadout),
}

impl Decisions {
    /// A model file's own decisions: a `clef` GGUF's head; for a file with no head (no
    /// `decision.type` key, or a family other than clef) the label readout. A head that is there
    /// but broken is an error (`bad_head`), never silently replaced by the readout.
    pub fn from_gguf(h: &Header, model: &Model, tok: &Tokenizer, name: &str) -> Result<Decisions, DecisionError> {
        match DecisionModel::from_gguf(h, model, name) {
            Ok(dm) => Ok(Decisions::Head(Box::new(dm))),
            Err(DecisionError::NotDecisionModel(_)) => LabelReadout::new(tok, name).map(Decisions::Labels),
            Err(e) => Err(e),
        }
    }

    pub fn via(&self) -> Via<'_> {
        match self {
            Decisions::Head(dm) => Via::Head(dm),
            Decisions::Labels(lr) => Via::Labels(lr),
        }
    }

    /// Answers come from the label readout (marked `approximate`).
    pub fn is_approximate(&self) -> bool {
        matches!(self, Decisions::Labels(_))
    }

    /// The model name responses report.
    pub fn set_name(&mut self, name: &str) {
        match self {
            Decisions::Head(dm) => dm.name = name.to_string(),
            Decisions::Labels(lr) => lr.name = name.to_string(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Decisions::Head(dm) => &dm.name,
            Decisions::Labels(lr) => &lr.name,
        }
    }
}

/// How a decision is answered (borrowed): `&DecisionModel` and `&LabelReadout` convert into it.
#[derive(Clone, Copy)]
pub enum Via<'a> {
    Head(&'a DecisionModel),
    Labels(&'a LabelReadout),
}

impl<'a> From<&'a DecisionModel> for Via<'a> {
    fn from(dm: &'a DecisionModel) -> Via<'a> {
        Via::Head(dm)
    }
}
impl<'a> From<&'a LabelReadout> for Via<'a> {
    fn from(lr: &'a LabelReadout) -> Via<'a> {
        Via::Labels(lr)
    }
}
impl<'a> From<&'a Decisions> for Via<'a> {
    fn from(d: &'a Decisions) -> Via<'a> {
        d.via()
    }
}

/// The head's memory rows for a prompt's state prefix (the engine holds the backbone snapshot).
struct PrefixMemory {
    tokens: Vec<u32>,
    /// tokens × W.
    memory: Vec<f32>,
}

/// Counts of the last decision (the readout: over all its prompts; known in full once finished).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecideStats {
    pub prompt_tokens: usize,
    /// Prompt tokens served from the cached state prefix.
    pub cached_tokens: usize,
}

/// A decision in flight: the request and the work of the method that answers it.
pub struct Decision {
    /// `None` for raw token + tag input ([`Decider::start_raw`]).
    pub request: Option<Request>,
    work: Work,
    /// The LM-head rows it reads (sorted, unique) and, once gathered, the rows.
    lm_ids: Vec<u32>,
    lm: Option<LmRows>,
}

enum Work {
    /// The joint head: the prompt and what the head has gathered so far.
    Head {
        tokens: Vec<u32>,
        input: HeadInput,
        /// Where the question-independent prefix ends (0: none).
        point: usize,
    },
    /// The label readout: its prompts and their distributions so far.
    Labels(LabelRun),
}

impl Decision {
    /// Prompt tokens of the decision (the readout: over every prompt).
    pub fn prompt_tokens(&self) -> usize {
        match &self.work {
            Work::Head { tokens, .. } => tokens.len(),
            Work::Labels(run) => run.total_tokens(),
        }
    }

    /// Prompt tokens done (cached ones included).
    pub fn done_tokens(&self) -> usize {
        match &self.work {
            Work::Head { input, .. } => input.n_rows,
            Work::Labels(run) => run.done,
        }
    }

    /// Answered by the approximate readout.
    pub fn is_approximate(&self) -> bool {
        matches!(self.work, Work::Labels(_))
    }

    /// The vocabulary ids whose LM-head rows the decision still needs (`None`: it has them).
    /// [`Decider::start`] gathers them itself when the engine's model holds the LM head; a split
    /// model's driver asks the shards ([`super::lm_rows::rows_of_part`]) and calls
    /// [`Decision::supply_lm`] before the first step.
    pub fn lm_needs(&self) -> Option<&[u32]> {
        self.lm.is_none().then_some(&self.lm_ids[..])
    }

    /// Hands over the LM-head rows of [`Decision::lm_needs`].
    pub fn supply_lm(&mut self, rows: LmRows) -> Result<(), DecisionError> {
        if rows.ids() != self.lm_ids {
            return Err(DecisionError::Model(format!(
                "{} LM-head rows supplied, the decision reads {}",
                rows.ids().len(),
                self.lm_ids.len()
            )));
        }
        self.lm = Some(rows);
        Ok(())
    }

    fn lm(&self) -> Result<&LmRows, DecisionError> {
        self.lm.as_ref().ok_or_else(|| DecisionError::Model("the decision's LM-head rows were not supplied".into()))
    }

    /// Gathers the LM-head rows from the engine's model when it holds them.
    fn gather_local(&mut self, model: &Model) {
        self.lm = LmRows::from_model(model, &self.lm_ids);
    }
}

fn mismatch() -> DecisionError {
    DecisionError::Model("the decision was started with another decision method".into())
}

/// Runs decisions on an engine's backbone; keeps the head's rows of the last state prefix.
pub struct Decider {
    cache: Option<PrefixMemory>,
    /// Tokens per backbone call in [`Decider::decide`].
    pub chunk: usize,
    pub last: DecideStats,
    mm: MatmulScratch,
}

impl Default for Decider {
    fn default() -> Self {
        Decider {
            cache: None,
            chunk: DEFAULT_CHUNK,
            last: DecideStats::default(),
            mm: MatmulScratch::default(),
        }
    }
}

/// Where the question-independent prefix ends: the untagged pieces before the first tagged one,
/// less the last of them (it names the first question).
fn cache_point(p: &Prompt) -> usize {
    let first_tagged = p.pieces.iter().position(|x| x.tag != TAG_NONE).unwrap_or(0);
    p.piece_token_counts[..first_tagged.saturating_sub(1)].iter().sum()
}

pub(super) fn engine_err(e: EngineError) -> DecisionError {
    match e {
        EngineError::ContextFull { needed, n_ctx } => DecisionError::TooLarge(format!(
            "the decision prompt has {needed} tokens, the context holds {n_ctx}"
        )),
        e => DecisionError::Model(e.to_string()),
    }
}

impl Decider {
    pub fn new() -> Decider {
        Decider::default()
    }

    /// Parses, validates and answers a SystemOne request body on `engine`'s backbone, with the
    /// joint head (`&DecisionModel`) or the approximate readout (`&LabelReadout`).
    pub fn decide<'a>(
        &mut self,
        engine: &mut Engine,
        via: impl Into<Via<'a>>,
        body: &str,
    ) -> Result<(Request, Response), DecisionError> {
        let via = via.into();
        let mut d = self.start(engine, via, body)?;
        self.run(engine, via, &mut d)?;
        let resp = self.finish(engine, via, &d)?;
        Ok((d.request.expect("a request"), resp))
    }

    /// Head scores for raw tokens and order tags (no request; spans as llama.cpp reads them).
    pub fn scores(
        &mut self,
        engine: &mut Engine,
        dm: &DecisionModel,
        tokens: &[u32],
        tags: &[u8],
    ) -> Result<Vec<f32>, DecisionError> {
        let mut d = self.start_raw(engine, dm, tokens, tags)?;
        self.run(engine, dm.into(), &mut d)?;
        self.finish_scores(engine, dm, &d)
    }

    /// The rendered, tokenized and tagged prompt of a request (joint head).
    pub fn prompt(&self, tok: &Tokenizer, dm: &DecisionModel, req: &Request) -> Result<Prompt, DecisionError> {
        let text = dm.template.render(req)?;
        request::tokenize_prompt(&text, req, tok)
    }

    /// The context a request needs: its prompt's length (the readout: its longest prompt's).
    pub fn context_needed<'a>(&self, tok: &Tokenizer, via: impl Into<Via<'a>>, req: &Request) -> Result<usize, DecisionError> {
        match via.into() {
            Via::Head(dm) => Ok(self.prompt(tok, dm, req)?.tokens.len()),
            Via::Labels(lr) => Ok(lr.plan(tok, req)?.longest()),
        }
    }

    /// Step 1: parses and validates `body`, renders and tokenizes its prompt(s), and starts the
    /// engine on it (restoring the state prefix when it has it). The engine must be idle.
    pub fn start<'a>(&mut self, engine: &mut Engine, via: impl Into<Via<'a>>, body: &str) -> Result<Decision, DecisionError> {
        let req = request::parse_request(body)?;
        match via.into() {
            Via::Head(dm) => {
                let tok = engine
                    .tokenizer
                    .as_ref()
                    .ok_or_else(|| DecisionError::Model("the model has no tokenizer".into()))?;
                let prompt = self.prompt(tok, dm, &req)?;
                let point = cache_point(&prompt);
                self.begin(engine, dm, Some(req), prompt.tokens, &prompt.tags, point)
            }
            Via::Labels(lr) => {
                let run = LabelRun::start(lr, engine, &req)?;
                self.last = DecideStats {
                    prompt_tokens: run.total_tokens(),
                    cached_tokens: run.cached,
                };
                let mut d = Decision {
                    request: Some(req),
                    lm_ids: run.label_ids(),
                    work: Work::Labels(run),
                    lm: None,
                };
                d.gather_local(&engine.model);
                Ok(d)
            }
        }
    }

    /// [`Decider::start`] for raw tokens and order tags.
    pub fn start_raw(
        &mut self,
        engine: &mut Engine,
        dm: &DecisionModel,
        tokens: &[u32],
        tags: &[u8],
    ) -> Result<Decision, DecisionError> {
        if tokens.len() != tags.len() {
            return Err(DecisionError::Semantic(format!(
                "{} tokens but {} order tags",
                tokens.len(),
                tags.len()
            )));
        }
        self.begin(engine, dm, None, tokens.to_vec(), tags, 0)
    }

    fn begin(
        &mut self,
        engine: &mut Engine,
        dm: &DecisionModel,
        request: Option<Request>,
        tokens: Vec<u32>,
        tags: &[u8],
        point: usize,
    ) -> Result<Decision, DecisionError> {
        let mut input: HeadInput = dm.head.begin(tags)?;
        let t_n = tokens.len();
        let point = if point < t_n && tags[..point].iter().all(|&t| t == TAG_NONE) {
            point
        } else {
            0
        };
        // The head's rows of a cached prefix this prompt starts with bound what the engine may restore.
        let held = self
            .cache
            .as_ref()
            .filter(|c| c.tokens.len() <= point && tokens.starts_with(&c.tokens))
            .map_or(0, |c| c.tokens.len());
        let reused = engine.begin_hidden(&tokens, held, point).map_err(engine_err)?;
        if reused > 0 {
            let c = self.cache.as_ref().expect("held rows");
            dm.head.resume(&mut input, &c.memory[..reused * dm.head.config.width]);
        }
        self.last = DecideStats {
            prompt_tokens: t_n,
            cached_tokens: reused,
        };
        let mut d = Decision {
            request,
            lm_ids: Head::lexical_ids(&input, &tokens),
            work: Work::Head { tokens, input, point },
            lm: None,
        };
        d.gather_local(&engine.model);
        Ok(d)
    }

    /// Runs the rest of the decision's prompt(s), `chunk` tokens per backbone call.
    fn run(&mut self, engine: &mut Engine, via: Via<'_>, d: &mut Decision) -> Result<(), DecisionError> {
        while self.step(engine, via, d, self.chunk.max(1))? > 0 {}
        Ok(())
    }

    /// Step 2: runs up to `max` more prompt tokens through the backbone here (into the head, or
    /// the readout's next prompt). Returns the prompt tokens left (0: ready for `finish`). On an
    /// error the engine is idle again.
    pub fn step<'a>(&mut self, engine: &mut Engine, via: impl Into<Via<'a>>, d: &mut Decision, max: usize) -> Result<usize, DecisionError> {
        if engine.model.role == Role::Coordinator {
            engine.end_request();
            return Err(DecisionError::Model("a split model's passes run on its shards: use step_with with their driver".into()));
        }
        self.step_with(engine, via, d, max, |e| {
            e.run_local();
            Ok(())
        })
    }

    /// [`Decider::step`] with the pass run by `drive` (a split model's shards: deliver the
    /// engine's state changes, run each stage, advance the pass until it is complete).
    pub fn step_with<'a>(
        &mut self,
        engine: &mut Engine,
        via: impl Into<Via<'a>>,
        d: &mut Decision,
        max: usize,
        drive: impl FnOnce(&mut Engine) -> Result<(), EngineError>,
    ) -> Result<usize, DecisionError> {
        let out = self
            .pass_start(engine, d, max)
            .and_then(|_| drive(engine).map_err(engine_err))
            .and_then(|_| self.absorb(engine, via, d));
        if out.is_err() {
            engine.end_request();
        }
        out
    }

    /// Step 2a: starts the backbone pass of up to `max` more prompt tokens (none when the
    /// running prompt has no tokens left). The engine, or a driver with shards, runs it; then
    /// [`Decider::absorb`]. On an error call [`Decider::cancel`].
    pub fn pass_start(&mut self, engine: &mut Engine, d: &mut Decision, max: usize) -> Result<(), DecisionError> {
        d.lm()?;
        match &mut d.work {
            Work::Head { .. } => engine.prefill_start(max).map(|_| ()).map_err(engine_err),
            Work::Labels(run) => run.pass_start(engine, max),
        }
    }

    /// Step 2b: after the pass, feeds its hidden rows to the head (or the readout). Returns the
    /// prompt tokens left (0: ready for `finish`).
    pub fn absorb<'a>(&mut self, engine: &mut Engine, via: impl Into<Via<'a>>, d: &mut Decision) -> Result<usize, DecisionError> {
        let lm = d.lm.as_ref();
        match (via.into(), &mut d.work) {
            (Via::Head(dm), Work::Head { tokens, input, point }) => {
                self.absorb_rows(engine, dm, tokens, input, *point);
                Ok(tokens.len() - input.n_rows)
            }
            (Via::Labels(_), Work::Labels(run)) => {
                let lm = lm.ok_or_else(|| DecisionError::Model("the decision's LM-head rows were not supplied".into()))?;
                run.absorb(engine, lm, &mut self.mm)
            }
            _ => Err(mismatch()),
        }
    }

    /// After each backbone pass of the joint path: feeds the pass's hidden rows to the head, and
    /// keeps the head's rows of the state prefix when the pass ended there.
    fn absorb_rows(&mut self, engine: &mut Engine, dm: &DecisionModel, tokens: &[u32], input: &mut HeadInput, point: usize) {
        let rows = engine.take_hidden();
        if rows.is_empty() {
            return;
        }
        dm.head.push_rows(&engine.model, input, &rows, engine.precision, &mut self.mm);
        let w = dm.head.config.width;
        if point > 0 && input.n_rows == point && self.cache.as_ref().is_none_or(|c| c.tokens != tokens[..point]) {
            self.cache = Some(PrefixMemory {
                tokens: tokens[..point].to_vec(),
                memory: input.memory[..point * w].to_vec(),
            });
        }
    }

    /// Step 3 of the joint path: the head's scores once every row is in; ends the engine's run.
    pub fn finish_scores(&mut self, engine: &mut Engine, dm: &DecisionModel, d: &Decision) -> Result<Vec<f32>, DecisionError> {
        engine.end_request();
        let Work::Head { tokens, input, .. } = &d.work else {
            return Err(mismatch());
        };
        if input.n_rows != tokens.len() {
            return Err(DecisionError::Model(format!(
                "the backbone ran {} of the prompt's {} tokens",
                input.n_rows,
                tokens.len()
            )));
        }
        let scores = dm.head.scores(&engine.model, input, tokens, d.lm()?, engine.precision, &mut self.mm);
        if scores.iter().any(|s| !s.is_finite()) {
            return Err(DecisionError::Evaluation(
                "the model could not evaluate the decision (non-finite scores)".into(),
            ));
        }
        Ok(scores)
    }

    /// Step 3 of a request: the answers (the engine is idle afterwards).
    pub fn finish<'a>(&mut self, engine: &mut Engine, via: impl Into<Via<'a>>, d: &Decision) -> Result<Response, DecisionError> {
        let req = d.request.as_ref().ok_or_else(|| DecisionError::Semantic("raw input has no request".into()));
        match (via.into(), &d.work) {
            (Via::Head(dm), Work::Head { tokens, .. }) => {
                let scores = self.finish_scores(engine, dm, d)?;
                Response::from_scores(&dm.name, req?, &scores, &dm.calibration, tokens.len())
            }
            (Via::Labels(lr), Work::Labels(run)) => {
                engine.end_request();
                self.last = DecideStats {
                    prompt_tokens: run.total_tokens(),
                    cached_tokens: run.cached,
                };
                run.finish(lr, req?)
            }
            _ => {
                engine.end_request();
                Err(mismatch())
            }
        }
    }

    /// Gives up a decision in flight (abort, error): the engine is idle again.
    pub fn cancel(&mut self, engine: &mut Engine) {
        engine.end_request();
    }
}

/// The context an engine needs for decisions of `n` prompt tokens on `model`, at least 512
/// (the longest prompt so far decides; a power of two, so it rarely changes).
pub fn context_for(model: &Model, n: usize) -> usize {
    let max = model.config.context_length.max(1);
    n.next_power_of_two().clamp(512, max.max(512)).min(max)
}
