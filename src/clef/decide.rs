//! The decision driver: request → prompt → backbone in chunks → head → answers.
//!
//! ```text
//! Decider::start(engine, decision model, body)       parse + render + tokenize (request.rs);
//!                                                    Engine::begin_hidden: restore the state prefix
//! per chunk: Engine::prefill (or a split model's passes) → Decider::absorb: Head::push_rows
//! Decider::finish: Head::scores → Response::from_scores (head.rs, answer.rs)
//! ```
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

use super::answer::{Calibration, Response};
use super::head::{Head, HeadConfig, HeadInput};
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

/// The head's memory rows for a prompt's state prefix (the engine holds the backbone snapshot).
struct PrefixMemory {
    tokens: Vec<u32>,
    /// tokens × W.
    memory: Vec<f32>,
}

/// Counts of the last decision.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecideStats {
    pub prompt_tokens: usize,
    /// Prompt tokens served from the cached state prefix.
    pub cached_tokens: usize,
}

/// A decision in flight: the request, its prompt and what the head has gathered so far.
pub struct Decision {
    /// `None` for raw token + tag input ([`Decider::start_raw`]).
    pub request: Option<Request>,
    pub tokens: Vec<u32>,
    input: HeadInput,
    /// Where the question-independent prefix ends (0: none).
    point: usize,
}

impl Decision {
    /// Prompt tokens whose hidden rows the head has (cached ones included).
    pub fn done_tokens(&self) -> usize {
        self.input.n_rows
    }
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

fn engine_err(e: EngineError) -> DecisionError {
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

    /// Parses, validates and answers a SystemOne request body on `engine`'s backbone.
    pub fn decide(
        &mut self,
        engine: &mut Engine,
        dm: &DecisionModel,
        body: &str,
    ) -> Result<(Request, Response), DecisionError> {
        let mut d = self.start(engine, dm, body)?;
        self.run(engine, dm, &mut d)?;
        let resp = self.finish(engine, dm, &d)?;
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
        self.run(engine, dm, &mut d)?;
        self.finish_scores(engine, dm, &d)
    }

    /// The rendered, tokenized and tagged prompt of a request.
    pub fn prompt(&self, tok: &Tokenizer, dm: &DecisionModel, req: &Request) -> Result<Prompt, DecisionError> {
        let text = dm.template.render(req)?;
        request::tokenize_prompt(&text, req, tok)
    }

    /// Step 1: parses and validates `body`, renders and tokenizes its prompt, and starts the
    /// engine on it (restoring the state prefix when it has it). The engine must be idle.
    pub fn start(&mut self, engine: &mut Engine, dm: &DecisionModel, body: &str) -> Result<Decision, DecisionError> {
        let req = request::parse_request(body)?;
        let tok = engine
            .tokenizer
            .as_ref()
            .ok_or_else(|| DecisionError::Model("the model has no tokenizer".into()))?;
        let prompt = self.prompt(tok, dm, &req)?;
        let point = cache_point(&prompt);
        self.begin(engine, dm, Some(req), prompt.tokens, &prompt.tags, point)
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
        if engine.model.role != Role::Whole {
            // The head reads the LM head's rows (lexical option vectors) and its weights, which a
            // split model keeps in its shard workers.
            return Err(DecisionError::NotSupported(
                "decisions need the whole model in one worker; this one is split across shard workers (load it with workers: 1)".into(),
            ));
        }
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
        Ok(Decision {
            request,
            tokens,
            input,
            point,
        })
    }

    /// Runs the rest of the prompt on a whole model, `chunk` tokens per backbone call.
    fn run(&mut self, engine: &mut Engine, dm: &DecisionModel, d: &mut Decision) -> Result<(), DecisionError> {
        loop {
            let left = engine.prefill(self.chunk.max(1)).map_err(|e| {
                engine.end_request();
                engine_err(e)
            })?;
            self.absorb(engine, dm, d);
            if left == 0 {
                return Ok(());
            }
        }
    }

    /// Step 2, after each backbone pass: feeds the pass's hidden rows to the head, and keeps the
    /// head's rows of the state prefix when the pass ended there.
    pub fn absorb(&mut self, engine: &mut Engine, dm: &DecisionModel, d: &mut Decision) {
        let rows = engine.take_hidden();
        if rows.is_empty() {
            return;
        }
        dm.head.push_rows(&engine.model, &mut d.input, &rows, engine.precision, &mut self.mm);
        let w = dm.head.config.width;
        if d.point > 0 && d.input.n_rows == d.point && self.cache.as_ref().is_none_or(|c| c.tokens != d.tokens[..d.point]) {
            self.cache = Some(PrefixMemory {
                tokens: d.tokens[..d.point].to_vec(),
                memory: d.input.memory[..d.point * w].to_vec(),
            });
        }
    }

    /// Step 3: the head's scores once every row is in; ends the engine's run.
    pub fn finish_scores(&mut self, engine: &mut Engine, dm: &DecisionModel, d: &Decision) -> Result<Vec<f32>, DecisionError> {
        engine.end_request();
        if d.input.n_rows != d.tokens.len() {
            return Err(DecisionError::Model(format!(
                "the backbone ran {} of the prompt's {} tokens",
                d.input.n_rows,
                d.tokens.len()
            )));
        }
        let scores = dm.head.scores(&engine.model, &d.input, &d.tokens, engine.precision, &mut self.mm);
        if scores.iter().any(|s| !s.is_finite()) {
            return Err(DecisionError::Evaluation(
                "the model could not evaluate the decision (non-finite scores)".into(),
            ));
        }
        Ok(scores)
    }

    /// Step 3 of a request: scores → calibrated answers.
    pub fn finish(&mut self, engine: &mut Engine, dm: &DecisionModel, d: &Decision) -> Result<Response, DecisionError> {
        let scores = self.finish_scores(engine, dm, d)?;
        let req = d.request.as_ref().ok_or_else(|| DecisionError::Semantic("raw input has no request".into()))?;
        Response::from_scores(&dm.name, req, &scores, &dm.calibration, d.tokens.len())
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
