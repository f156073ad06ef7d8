//! Decisions without a head: the **approximate** label-token readout (spec §4, "suggested
//! approximate mode"), for a file that has no joint schema head (a head-less `qwen35` GGUF with
//! no `joint_head.safetensors` attached). Answers are marked `approximate: true`.
//!
//! The language model itself is asked each question, with the options labelled, and the answer is
//! read from its next-token distribution over the labels:
//!
//! ```text
//! per question k, per option order o ∈ {forward, reversed} (one order when k has one option):
//!   prompt = OPENING ‖ render(state) ‖ question text with labelled options ‖ CLOSING
//!            └──── shared state prefix ────┘   (the engine's snapshot: prefilled once per request)
//!   h      = final-norm hidden row of the prompt's last token
//!   z_j    = output.weight[label_j] · h          only the labels' LM-head rows (not 248k logits),
//!                                                gathered once per request (lm_rows.rs)
//!   p_o    = softmax_j(z_j), mapped back to the question's option order
//! p_k = (p_forward + p_reversed) / 2             averaging the two orders cancels position bias
//! ```
//!
//! **The prompt** (ChatML, as the model was post-trained on; pieces tokenized one by one, no BOS):
//!
//! ```text
//! <|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nSTATE:\n   control tokens parsed
//! {state}                                                               plain text
//! \n\nQUESTION:\n{instructions}\n\nOPTIONS:\n                          plain text
//! {label}. {option}\n   (one line per option, in the order's sequence)
//! \nReply with the label of one option.
//! <|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n            control tokens parsed
//! ```
//! * `{state}`, `{instructions}` and descriptions: strings as they are, anything else as compact
//!   JSON with byte-sorted keys and `%g` floats (the joint prompt's `tojson`, [`json`]). User text
//!   is tokenized with control tokens *not* parsed, so a state cannot close the turn.
//! * **Labels.** choice and noul: by position, `A`..`Z`, then the two-letter codes `AA`..`ZZ`
//!   that are one token in the vocabulary (llama.cpp's `lev` labels); the reversed order lists the
//!   options last-first and labels them again from `A`. score: the level number itself (`0`..`9`,
//!   so a label never contradicts its level); the reversed order lists the levels from the top.
//!   Every label must be one token; the readout is that token right after the empty reasoning
//!   block, where the model's answer starts.
//! * **Option text.** choice: `key` or `key: description`; noul: `true: …` / `false: …` with the
//!   `systemone` template's default descriptions when none is given; score: the level's
//!   description (`level i` when null), and the options header says `OPTIONS (a scale from 0 to
//!   n−1)`.
//!
//! The state prefix is the same token sequence for every question, so the engine keeps a
//! snapshot at its end ([`Engine::begin_hidden`]'s `save_at`) and each later prompt restores it
//! and runs only its own question (a second request on the same state does too). Unlike the joint
//! head, questions are answered one at a time (they do not see each other), the probabilities are
//! uncalibrated (τ = 1), and the model was post-trained for the head, not for this: the quality is
//! unknown — hence `approximate`. Validation and errors are the joint path's (`parse_request`),
//! plus `request_too_large` when a question has more options than single-token labels exist.

use super::answer::Response;
use super::json::Value;
use super::request::{QuestionType, Request};
use super::DecisionError;
use crate::engine::{Engine, EngineError};
use super::lm_rows::{self, LmRows};
use crate::ops::MatmulScratch;
use crate::tokenizer::Tokenizer;

/// The system turn and the start of the user turn, up to the state (control tokens parsed).
pub const OPENING: &str = "<|im_start|>system\nRead the state, then answer the question by choosing exactly one of its options. Reply with the label of that option only.<|im_end|>\n<|im_start|>user\nSTATE:\n";
/// The end of the user turn and an empty reasoning block: the next token is the answer.
pub const CLOSING: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
/// The `systemone` template's descriptions of a noul question's options when none is given.
pub const NOUL_TRUE: &str = "The proposition is true or the answer is yes.";
pub const NOUL_FALSE: &str = "The proposition is false or the answer is no.";

/// Label texts: choice / noul by position, score by level.
const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const DIGITS: &str = "0123456789";

/// What the readout needs of a model: the label tokens (their LM-head rows come with each
/// decision, [`LmRows`]).
pub struct LabelReadout {
    /// The model name responses report.
    pub name: String,
    /// Position labels (text, token): `A`..`Z`, then the single-token `AA`..`ZZ`.
    letters: Vec<(String, u32)>,
    /// Level labels `0`..`9`.
    digits: Vec<(String, u32)>,
}

/// One prompt of the readout: question `question` with its options in one order.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelPrompt {
    pub question: usize,
    pub reversed: bool,
    pub tokens: Vec<u32>,
    /// The label token of each option, in the question's option order (`Question::options`).
    pub labels: Vec<u32>,
}

/// Every prompt of a request, in run order (question by question, forward then reversed).
#[derive(Clone, Debug, PartialEq)]
pub struct LabelPlan {
    /// Tokens of the state prefix every prompt starts with.
    pub prefix_len: usize,
    pub prompts: Vec<LabelPrompt>,
}

impl LabelPlan {
    /// Prompt tokens over every prompt (what `usage.input_tokens` reports).
    pub fn total_tokens(&self) -> usize {
        self.prompts.iter().map(|p| p.tokens.len()).sum()
    }
    /// The longest prompt (the context a decision needs).
    pub fn longest(&self) -> usize {
        self.prompts.iter().map(|p| p.tokens.len()).max().unwrap_or(0)
    }
}

/// A JSON value as prompt text: a string as it is, anything else compact with sorted keys.
fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_tojson(),
    }
}

/// The token of `text` when it is exactly one.
fn single_token(tok: &Tokenizer, text: &str) -> Option<u32> {
    match tok.encode(text, false).as_slice() {
        [id] => Some(*id),
        _ => None,
    }
}

impl LabelReadout {
    /// The readout for a model with this tokenizer. `not_a_decision_model` when the vocabulary
    /// lacks single-token labels `A`..`Z` / `0`..`9`.
    pub fn new(tok: &Tokenizer, name: &str) -> Result<LabelReadout, DecisionError> {
        let one = |s: String| single_token(tok, &s).map(|id| (s, id));
        let letters: Option<Vec<_>> = LETTERS.chars().map(|c| one(c.to_string())).collect();
        let digits: Option<Vec<_>> = DIGITS.chars().map(|c| one(c.to_string())).collect();
        let (Some(mut letters), Some(digits)) = (letters, digits) else {
            return Err(DecisionError::NotDecisionModel(
                "this model has no decision head, and its vocabulary lacks the single-token labels A–Z and 0–9 of the approximate readout".into(),
            ));
        };
        for a in LETTERS.chars() {
            for b in LETTERS.chars() {
                letters.extend(one(format!("{a}{b}")));
            }
        }
        Ok(LabelReadout {
            name: name.to_string(),
            letters,
            digits,
        })
    }

    /// How many options a choice question may have (single-token position labels).
    pub fn max_options(&self) -> usize {
        self.letters.len()
    }

    /// The plain-text question part of question `k` (after the state, before [`CLOSING`]), and
    /// the label token of each option in option order.
    fn question_part(&self, req: &Request, k: usize, reversed: bool) -> Result<(String, Vec<u32>), DecisionError> {
        let q = &req.questions[k];
        let n = q.options.len();
        if q.ty == QuestionType::Choice && n > self.letters.len() {
            return Err(DecisionError::TooLarge(format!(
                "questions.{}: {n} options, the approximate readout (this model has no decision head) labels at most {}",
                q.id,
                self.letters.len()
            )));
        }
        let mut listed: Vec<usize> = (0..n).collect();
        if reversed {
            listed.reverse();
        }
        let mut text = format!("\n\nQUESTION:\n{}\n\nOPTIONS", render(&q.instructions));
        if q.ty == QuestionType::Score {
            text.push_str(&format!(" (a scale from 0 to {})", n - 1));
        }
        text.push_str(":\n");
        // The label of each listed line: its level (score), else its position.
        let line_labels: Vec<&(String, u32)> = match q.ty {
            QuestionType::Score => listed.iter().map(|&j| &self.digits[j]).collect(),
            _ => self.letters[..n].iter().collect(),
        };
        let mut labels = vec![0u32; n];
        for (&j, (label, id)) in listed.iter().zip(line_labels) {
            let o = &q.options[j];
            labels[j] = *id;
            let option = match (q.ty, &o.description) {
                (QuestionType::Score, Value::Null) => format!("level {j}"),
                (QuestionType::Score, d) => render(d),
                (QuestionType::Noul, Value::Null) => {
                    format!("{}: {}", o.key, if o.key == "true" { NOUL_TRUE } else { NOUL_FALSE })
                }
                (_, Value::Null) => o.key.clone(),
                (_, d) => format!("{}: {}", o.key, render(d)),
            };
            text.push_str(&format!("{label}. {option}\n"));
        }
        text.push_str("\nReply with the label of one option.");
        Ok((text, labels))
    }

    /// The full text of question `k`'s prompt in one order (for reading and tests; the tokens
    /// come from [`LabelReadout::plan`], piece by piece).
    pub fn prompt_text(&self, req: &Request, k: usize, reversed: bool) -> Result<String, DecisionError> {
        let (question, _) = self.question_part(req, k, reversed)?;
        Ok(format!("{OPENING}{}{question}{CLOSING}", render(&req.state)))
    }

    /// Every prompt of a request, tokenized.
    pub fn plan(&self, tok: &Tokenizer, req: &Request) -> Result<LabelPlan, DecisionError> {
        let mut prefix = tok.encode(OPENING, true);
        prefix.extend(tok.encode(&render(&req.state), false));
        let closing = tok.encode(CLOSING, true);
        let mut prompts = Vec::new();
        for (k, q) in req.questions.iter().enumerate() {
            let orders: &[bool] = if q.options.len() > 1 { &[false, true] } else { &[false] };
            for &reversed in orders {
                let (text, labels) = self.question_part(req, k, reversed)?;
                let mut tokens = prefix.clone();
                tokens.extend(tok.encode(&text, false));
                tokens.extend_from_slice(&closing);
                prompts.push(LabelPrompt {
                    question: k,
                    reversed,
                    tokens,
                    labels,
                });
            }
        }
        Ok(LabelPlan {
            prefix_len: prefix.len(),
            prompts,
        })
    }
}

/// A readout in flight over an engine: the plan, where it is, and the distributions so far.
pub struct LabelRun {
    pub plan: LabelPlan,
    /// The prompt running (`plan.prompts.len()` when all are done).
    at: usize,
    /// Prompt tokens done over every prompt (reused ones included).
    pub done: usize,
    /// Prompt tokens restored from the state prefix's snapshot instead of run.
    pub cached: usize,
    /// The last hidden row of the running prompt so far.
    last_row: Vec<f32>,
    /// Per finished prompt: softmax over its labels, in the question's option order.
    probs: Vec<Vec<f64>>,
}

fn engine_err(e: EngineError) -> DecisionError {
    super::decide::engine_err(e)
}

impl LabelRun {
    /// Plans `req` and starts its first prompt on `engine` (which must be idle).
    pub fn start(lr: &LabelReadout, engine: &mut Engine, req: &Request) -> Result<LabelRun, DecisionError> {
        let tok = engine
            .tokenizer
            .as_ref()
            .ok_or_else(|| DecisionError::Model("the model has no tokenizer".into()))?;
        let plan = lr.plan(tok, req)?;
        let (longest, n_ctx) = (plan.longest(), engine.n_ctx());
        if longest > n_ctx {
            return Err(DecisionError::TooLarge(format!(
                "a decision prompt has {longest} tokens, the context holds {n_ctx}"
            )));
        }
        let mut run = LabelRun {
            plan,
            at: 0,
            done: 0,
            cached: 0,
            last_row: Vec::new(),
            probs: Vec::new(),
        };
        run.begin_prompt(engine)?;
        Ok(run)
    }

    pub fn total_tokens(&self) -> usize {
        self.plan.total_tokens()
    }

    /// The LM-head rows the readout reads: every prompt's label tokens (sorted, unique).
    pub fn label_ids(&self) -> Vec<u32> {
        lm_rows::needed(self.plan.prompts.iter().flat_map(|p| p.labels.iter().copied()))
    }

    fn begin_prompt(&mut self, engine: &mut Engine) -> Result<(), DecisionError> {
        let p = &self.plan.prompts[self.at];
        let reused = engine
            .begin_hidden(&p.tokens, usize::MAX, self.plan.prefix_len)
            .map_err(engine_err)?;
        self.done += reused;
        self.cached += reused;
        Ok(())
    }

    /// Starts the backbone pass of up to `max` prompt tokens of the running prompt (the engine
    /// or a split driver runs it; then [`LabelRun::absorb`]).
    pub fn pass_start(&mut self, engine: &mut Engine, max: usize) -> Result<(), DecisionError> {
        if self.at < self.plan.prompts.len() {
            engine.prefill_start(max).map_err(engine_err)?;
        }
        Ok(())
    }

    /// After a pass: keeps its last hidden row; when the running prompt is complete, reads its
    /// labels from `lm` and starts the next. Returns the prompt tokens left over every prompt
    /// (0: done).
    pub fn absorb(&mut self, engine: &mut Engine, lm: &LmRows, mm: &mut MatmulScratch) -> Result<usize, DecisionError> {
        if self.at < self.plan.prompts.len() {
            let rows = engine.take_hidden();
            let d = engine.model.config.n_embd;
            if rows.len() >= d {
                self.done += rows.len() / d;
                self.last_row.clear();
                self.last_row.extend_from_slice(&rows[rows.len() - d..]);
            }
            let p = &self.plan.prompts[self.at];
            let prompt_done = self.done - self.plan.prompts[..self.at].iter().map(|p| p.tokens.len()).sum::<usize>();
            if prompt_done == p.tokens.len() {
                let z = lm.logits(&self.last_row, &p.labels, engine.precision, mm);
                self.probs.push(super::answer::probabilities(&z, 1.0));
                engine.end_request();
                self.at += 1;
                if self.at < self.plan.prompts.len() {
                    self.begin_prompt(engine)?;
                }
            }
        }
        Ok(self.total_tokens() - self.done)
    }

    /// The answers once every prompt has run: per question the mean of its orders' distributions.
    pub fn finish(&self, lr: &LabelReadout, req: &Request) -> Result<Response, DecisionError> {
        if self.probs.len() != self.plan.prompts.len() {
            return Err(DecisionError::Model(format!(
                "{} of the readout's {} prompts ran",
                self.probs.len(),
                self.plan.prompts.len()
            )));
        }
        let mut per_question: Vec<Vec<f64>> = req.questions.iter().map(|q| vec![0.0; q.options.len()]).collect();
        let mut orders = vec![0usize; req.questions.len()];
        for (p, probs) in self.plan.prompts.iter().zip(&self.probs) {
            for (acc, &x) in per_question[p.question].iter_mut().zip(probs) {
                *acc += x;
            }
            orders[p.question] += 1;
        }
        for (p, &n) in per_question.iter_mut().zip(&orders) {
            p.iter_mut().for_each(|x| *x /= n as f64);
        }
        Response::from_probabilities(&lr.name, req, per_question, self.total_tokens())
    }
}
