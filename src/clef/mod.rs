//! Decisions: Clef's SystemOne API on the joint schema head (spec `clef-head.md`).
//!
//! Clef-Flash answers a *state* plus a *schema* of typed questions (noul = yes/no, choice, score)
//! with a probability for every allowed option, in one pass: the backbone (the `qwen35` trunk of
//! [`crate::model`]) reads one prompt that lists the state, every question and every option, and
//! a small transformer on its final hidden states — the joint schema head — scores all options
//! of all questions together.
//!
//! ```text
//! request JSON ─request::parse_request─► Request (validated; typed errors, DecisionError)
//!   ─Template::render (systemone, from the GGUF or built in)─► text with <<clef:sep>> pieces
//!   ─request::tokenize_prompt─► tokens + per-token order tags (0 none, 1/2/3 question, 4 option)
//!   ─Decider on the Engine's state: backbone in chunks, Logits::Hidden ─► per chunk: head::HeadInput::push_rows
//!        (LayerNorm → memory rows M = Hn·Wmem, span sums, last row; the T×H hidden rows are dropped)
//!   ─Head::scores─► one score per option ─answer::answer (softmax with calibration τ)─► Response JSON
//! ```
//!
//! Files: [`json`] (order-preserving parser, llama.cpp's `tojson`), [`request`] (validation, the
//! template, tokens and tags), [`head`] (weights from a `clef` GGUF or `joint_head.safetensors`,
//! the forward pass), [`answer`] (probabilities, confidences, calibration, the response),
//! [`decide`] (the driver: chunked prefill with a reusable state prefix), [`approx`] (a file with
//! no head: the approximate label-token readout, answers marked `approximate: true`).
//!
//! Unlike llama.cpp, whose `clef` graph needs the whole prompt in one ubatch (it has no memory,
//! so decode becomes encode), the backbone here runs the prompt in chunks carrying its KV and
//! recurrent state — the hidden rows are the same — and the head streams what it needs.

pub mod answer;
pub mod approx;
pub mod decide;
pub mod head;
pub mod json;
pub mod lm_rows;
pub mod request;
pub mod safetensors;

pub use answer::{Answer, Calibration, Response};
pub use approx::LabelReadout;
pub use decide::{Decider, Decision, DecisionModel, Decisions, Via};
pub use head::{Head, HeadConfig};
pub use request::{parse_request, Request};

use std::fmt;

/// Why a decision failed. [`DecisionError::code`] is stable (the wasm API and the page use it);
/// [`DecisionError::status`] is the HTTP status llama-server's newer `/v1/systemone` returns for
/// the same class (spec §3.5).
#[derive(Clone, Debug, PartialEq)]
pub enum DecisionError {
    /// The body is not JSON, not an object, or has duplicate keys (400).
    Malformed(String),
    /// Valid JSON that is not a valid request: missing state, unknown type, 0 or 256 options,
    /// 1 score level, empty instructions, nesting too deep, a prompt layout that a state key
    /// broke, … (422).
    Semantic(String),
    /// Too many questions, too much text, or a prompt longer than the model's context (413).
    TooLarge(String),
    /// The model has no decision head and none was given (501).
    NotDecisionModel(String),
    /// The head's weights, configuration or template are unusable (load time).
    BadHead(String),
    /// The backbone failed (a bug: the engine was not idle, …).
    Model(String),
    /// This engine cannot run decisions as it is set up (a model split across shard workers) (501).
    NotSupported(String),
    /// The head produced no finite scores (invalid spans: llama.cpp's NaN status) (500).
    Evaluation(String),
}

impl DecisionError {
    pub fn code(&self) -> &'static str {
        match self {
            DecisionError::Malformed(_) => "malformed_request",
            DecisionError::Semantic(_) => "invalid_decision",
            DecisionError::TooLarge(_) => "request_too_large",
            DecisionError::NotDecisionModel(_) => "not_a_decision_model",
            DecisionError::BadHead(_) => "bad_head",
            DecisionError::Model(_) => "internal",
            DecisionError::NotSupported(_) => "not_supported",
            DecisionError::Evaluation(_) => "evaluation_failed",
        }
    }

    /// The HTTP status of this class.
    pub fn status(&self) -> u16 {
        match self {
            DecisionError::Malformed(_) => 400,
            DecisionError::Semantic(_) => 422,
            DecisionError::TooLarge(_) => 413,
            DecisionError::NotDecisionModel(_) | DecisionError::NotSupported(_) => 501,
            DecisionError::BadHead(_) | DecisionError::Model(_) | DecisionError::Evaluation(_) => 500,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            DecisionError::Malformed(s)
            | DecisionError::Semantic(s)
            | DecisionError::TooLarge(s)
            | DecisionError::NotDecisionModel(s)
            | DecisionError::BadHead(s)
            | DecisionError::Model(s)
            | DecisionError::NotSupported(s)
            | DecisionError::Evaluation(s) => s,
        }
    }
}

impl fmt::Display for DecisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}
impl std::error::Error for DecisionError {}
