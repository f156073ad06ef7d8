//! The decision driver: request → prompt → backbone in chunks → head → answers.
//!
//! ```text
//! Decider::decide(model, tokenizer, decision model, body)
//!   parse + render + tokenize                      (request.rs)
//!   state prefix cached?  restore the snapshot + its memory rows, run only the rest
//!   for each chunk of ≤ `chunk` tokens:  Model::forward(…, Logits::Hidden) → Head::push_rows
//!   Head::scores → Response::from_scores           (head.rs, answer.rs)
//! ```
//! **Prefix reuse.** The prompt starts with untagged pieces: the system text, the state, and
//! `\n\nSCHEMA FIELDS:\n`; the next untagged piece already names the first question. Pieces are
//! tokenized separately, so the tokens up to the end of the state do not depend on the questions.
//! After running them the decider keeps a [`Snapshot`] of the backbone state there plus the
//! head's memory rows for those tokens (the only thing the head keeps of untagged rows); a later
//! request on the same state restores both and runs only its questions.

use super::answer::{Calibration, Response};
use super::head::{Head, HeadConfig, HeadInput};
use super::request::{self, Prompt, Request, Template, TAG_NONE};
use super::{safetensors, DecisionError};
use crate::gguf::Header;
use crate::loader::ByteSource;
use crate::model::{Logits, Model, Scratch, Snapshot, State};
use crate::ops::Precision;
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

/// The backbone state at the end of a prompt's state prefix, and the head's memory rows there.
struct PrefixCache {
    tokens: Vec<u32>,
    snapshot: Snapshot,
    memory: Vec<f32>,
}

/// Counts of the last decision.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecideStats {
    pub prompt_tokens: usize,
    /// Prompt tokens served from the cached state prefix.
    pub cached_tokens: usize,
}

/// Runs decisions; owns the backbone state used for them (sized to the longest prompt so far).
pub struct Decider {
    state: Option<State>,
    scratch: Scratch,
    cache: Option<PrefixCache>,
    /// Tokens per backbone call.
    pub chunk: usize,
    /// How activations meet quantized weights, in the backbone and the head.
    pub precision: Precision,
    pub last: DecideStats,
}

impl Default for Decider {
    fn default() -> Self {
        Decider {
            state: None,
            scratch: Scratch::default(),
            cache: None,
            chunk: DEFAULT_CHUNK,
            precision: Precision::Fast,
            last: DecideStats::default(),
        }
    }
}

/// Where the question-independent prefix ends: the untagged pieces before the first tagged one,
/// less the last of them (it names the first question).
fn cache_point(p: &Prompt) -> usize {
    let first_tagged = p.pieces.iter().position(|x| x.tag != TAG_NONE).unwrap_or(0);
    p.piece_token_counts[..first_tagged.saturating_sub(1)].iter().sum()
}

impl Decider {
    pub fn new() -> Decider {
        Decider::default()
    }

    /// Parses, validates and answers a SystemOne request body.
    pub fn decide(
        &mut self,
        model: &Model,
        tok: &Tokenizer,
        dm: &DecisionModel,
        body: &str,
    ) -> Result<(Request, Response), DecisionError> {
        let req = request::parse_request(body)?;
        let resp = self.decide_request(model, tok, dm, &req)?;
        Ok((req, resp))
    }

    /// Answers a validated request.
    pub fn decide_request(
        &mut self,
        model: &Model,
        tok: &Tokenizer,
        dm: &DecisionModel,
        req: &Request,
    ) -> Result<Response, DecisionError> {
        let prompt = self.prompt(tok, dm, req)?;
        let scores = self.run(model, &dm.head, &prompt.tokens, &prompt.tags, cache_point(&prompt))?;
        Response::from_scores(&dm.name, req, &scores, &dm.calibration, prompt.tokens.len())
    }

    /// The rendered, tokenized and tagged prompt of a request.
    pub fn prompt(&self, tok: &Tokenizer, dm: &DecisionModel, req: &Request) -> Result<Prompt, DecisionError> {
        let text = dm.template.render(req)?;
        request::tokenize_prompt(&text, req, tok)
    }

    /// Head scores for raw tokens and order tags (no request; spans as llama.cpp reads them).
    pub fn scores(
        &mut self,
        model: &Model,
        head: &Head,
        tokens: &[u32],
        tags: &[u8],
    ) -> Result<Vec<f32>, DecisionError> {
        if tokens.len() != tags.len() {
            return Err(DecisionError::Semantic(format!(
                "{} tokens but {} order tags",
                tokens.len(),
                tags.len()
            )));
        }
        self.run(model, head, tokens, tags, 0)
    }

    /// Makes sure the state holds `n` tokens; a new state drops the prefix cache.
    fn ensure_state(&mut self, model: &Model, n: usize) -> Result<(), DecisionError> {
        let max = model.config.context_length.max(1);
        if n > max {
            return Err(DecisionError::TooLarge(format!(
                "the decision prompt has {n} tokens, the model's context holds {max}"
            )));
        }
        if self.state.as_ref().is_none_or(|s| s.n_ctx < n) {
            self.state = None;
            self.cache = None;
            let n_ctx = n.next_power_of_two().clamp(512, max.max(n));
            let st = model
                .try_new_state(n_ctx.min(max))
                .map_err(|e| DecisionError::Model(e.to_string()))?;
            self.state = Some(st);
        }
        Ok(())
    }

    /// Prefill in chunks feeding the head, reusing / refreshing the state prefix at `point`.
    fn run(
        &mut self,
        model: &Model,
        head: &Head,
        tokens: &[u32],
        tags: &[u8],
        point: usize,
    ) -> Result<Vec<f32>, DecisionError> {
        let t_n = tokens.len();
        let mut input: HeadInput = head.begin(tags)?;
        self.ensure_state(model, t_n)?;
        let point = if point < t_n && tags[..point].iter().all(|&t| t == TAG_NONE) {
            point
        } else {
            0
        };
        let state = self.state.as_mut().expect("ensured");
        let w = head.config.width;

        let reuse = self
            .cache
            .as_ref()
            .is_some_and(|c| c.tokens.len() <= point && tokens.starts_with(&c.tokens) && !c.tokens.is_empty());
        let mut pos = if reuse {
            let c = self.cache.as_ref().expect("checked");
            state.restore(&c.snapshot);
            head.resume(&mut input, &c.memory);
            c.tokens.len()
        } else {
            self.cache = None;
            state.clear();
            0
        };
        self.last = DecideStats {
            prompt_tokens: t_n,
            cached_tokens: pos,
        };

        while pos < t_n {
            let mut end = (pos + self.chunk.max(1)).min(t_n);
            if pos < point {
                end = end.min(point);
            }
            let hidden = model
                .forward(
                    state,
                    &tokens[pos..end],
                    Logits::Hidden,
                    self.precision,
                    &mut self.scratch,
                )
                .map_err(|e| {
                    self.cache = None;
                    DecisionError::Model(e.to_string())
                })?;
            head.push_rows(model, &mut input, &hidden, self.precision, &mut self.scratch.mm);
            pos = end;
            if pos == point && point > 0 && self.cache.as_ref().is_none_or(|c| c.tokens.len() < point) {
                self.cache = Some(PrefixCache {
                    tokens: tokens[..point].to_vec(),
                    snapshot: state.snapshot(),
                    memory: input.memory[..point * w].to_vec(),
                });
            }
        }
        let scores = head.scores(model, &input, tokens, self.precision, &mut self.scratch.mm);
        if scores.iter().any(|s| !s.is_finite()) {
            return Err(DecisionError::Evaluation(
                "the model could not evaluate the decision (non-finite scores)".into(),
            ));
        }
        Ok(scores)
    }
}
