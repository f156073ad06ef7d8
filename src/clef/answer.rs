//! From option scores to answers (spec §2.10, §3.6, §3.7): per-question softmax with the
//! calibration temperature, in f64 as llama-server does, and TypeSafe's confidence formulas.
//!
//! ```text
//! p_i = exp((s_i − max s)/τ) / Σ            (s_i − max s in f32, then f64 — as the server)
//! noul:   noul = p[true]                    (options [true, false])
//! choice: choice = first argmax;  confidence = max(0, (p_max − 1/n)/(1 − 1/n)), 1 if n < 2
//! score:  score = Σ i·p_i;        confidence = clamp(1 − Σ p_i|i − mode| / ((1/n)·Σ|i − (n−1)/2|), 0, 1)
//! ```

use super::json;
use super::request::{QuestionType, Request};
use super::DecisionError;
use crate::gguf::{self, Header};

/// Calibration temperatures: `<arch>.decision.temperature.<type>[.<bucket>]` keys.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calibration {
    /// (key suffix such as `choice.3_5` or `noul`, τ).
    pub temperatures: Vec<(String, f32)>,
}

/// The option-count bucket of a temperature key: `2` (n ≤ 2), `3_5`, `6_10`, `11` (more).
pub fn bucket(n: usize) -> &'static str {
    match n {
        0..=2 => "2",
        3..=5 => "3_5",
        6..=10 => "6_10",
        _ => "11",
    }
}

impl Calibration {
    /// Reads every `{arch}.decision.temperature.*` key. llama-server reads each value as a string
    /// and `strtof`s it (`std::to_string` of an f32 prints six decimals, so `0.8` stays `0.8f`);
    /// a value that is not > 0 and finite fails the load.
    pub fn from_header(h: &Header) -> Result<Calibration, DecisionError> {
        let arch = h.architecture().unwrap_or_default();
        let prefix = format!("{arch}.decision.temperature.");
        let mut temperatures = Vec::new();
        for (key, v) in h.metadata.iter() {
            let Some(suffix) = key.strip_prefix(&prefix) else {
                continue;
            };
            let text = match v {
                gguf::Value::String(s) => s.trim().to_string(),
                other => match (other.as_f32(), other.as_u64(), other) {
                    (Some(f), _, _) => format!("{:.6}", f as f64),
                    (None, Some(u), _) => u.to_string(),
                    (
                        None,
                        None,
                        gguf::Value::I8(_) | gguf::Value::I16(_) | gguf::Value::I32(_) | gguf::Value::I64(_),
                    ) => "-1".into(),
                    _ => String::new(),
                },
            };
            let tau: f32 = text.parse().unwrap_or(f32::NAN);
            if !(tau > 0.0 && tau.is_finite()) {
                return Err(DecisionError::BadHead(format!(
                    "calibration temperature {key} = {text:?} must be a positive number"
                )));
            }
            temperatures.push((suffix.to_string(), tau));
        }
        Ok(Calibration { temperatures })
    }

    /// τ for a question of type `ty` with `n` options: `<type>.<bucket>`, then `<type>`, then 1.
    /// noul always uses bucket `2`.
    pub fn temperature(&self, ty: QuestionType, n: usize) -> f32 {
        let b = if ty == QuestionType::Noul { "2" } else { bucket(n) };
        let find = |k: &str| self.temperatures.iter().find(|(s, _)| s == k).map(|&(_, t)| t);
        find(&format!("{}.{b}", ty.as_str()))
            .or_else(|| find(ty.as_str()))
            .unwrap_or(1.0)
    }
}

/// One question's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Noul {
        p_true: f64,
    },
    Choice {
        choice: usize,
        probabilities: Vec<f64>,
        confidence: f64,
    },
    Score {
        score: f64,
        probabilities: Vec<f64>,
        confidence: f64,
    },
}

/// Softmax of scores with temperature τ, in f64.
pub fn probabilities(scores: &[f32], tau: f32) -> Vec<f64> {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = scores
        .iter()
        .map(|&s| (((s - max) as f64) / tau as f64).exp())
        .collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|&x| x / sum).collect()
}

/// Index of the first maximum.
fn argmax(p: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in p.iter().enumerate() {
        if v > p[best] {
            best = i;
        }
    }
    best
}

/// The answer to a question of type `ty` from its options' scores (in option order).
pub fn answer(ty: QuestionType, scores: &[f32], tau: f32) -> Answer {
    answer_from(ty, probabilities(scores, tau))
}

/// The answer to a question of type `ty` from its options' probabilities (in option order).
pub fn answer_from(ty: QuestionType, p: Vec<f64>) -> Answer {
    let n = p.len();
    match ty {
        QuestionType::Noul => Answer::Noul { p_true: p[0] },
        QuestionType::Choice => {
            let choice = argmax(&p);
            let confidence = if n < 2 {
                1.0
            } else {
                let u = 1.0 / n as f64;
                ((p[choice] - u) / (1.0 - u)).max(0.0)
            };
            Answer::Choice {
                choice,
                probabilities: p,
                confidence,
            }
        }
        QuestionType::Score => {
            let score: f64 = p.iter().enumerate().map(|(i, &pi)| i as f64 * pi).sum();
            let confidence = if n < 2 {
                1.0
            } else {
                let mode = argmax(&p);
                let spread: f64 = p
                    .iter()
                    .enumerate()
                    .map(|(i, &pi)| pi * (i as f64 - mode as f64).abs())
                    .sum();
                let centre = (n as f64 - 1.0) / 2.0;
                let uniform: f64 = (0..n).map(|i| (i as f64 - centre).abs() / n as f64).sum();
                (1.0 - spread / uniform).clamp(0.0, 1.0)
            };
            Answer::Score {
                score,
                probabilities: p,
                confidence,
            }
        }
    }
}

/// A SystemOne response.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub model: String,
    /// (question, answer) in request order.
    pub answers: Vec<Answer>,
    pub input_tokens: usize,
    /// The head's raw score of every option, in prompt order (before calibration); for the
    /// approximate readout, ln of each option's averaged probability.
    pub scores: Vec<f32>,
    /// Answered by the head-less fallback (label-token readout, `approx.rs`), not the joint head.
    pub approximate: bool,
}

/// An f64 as JSON: the shortest text that round-trips; non-finite → null.
fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:?}")
    } else {
        "null".into()
    }
}

impl Response {
    /// Answers every question of `req` from the option scores (prompt order = request order).
    pub fn from_scores(
        model: &str,
        req: &Request,
        scores: &[f32],
        cal: &Calibration,
        input_tokens: usize,
    ) -> Result<Response, DecisionError> {
        if scores.len() != req.n_options() || scores.iter().any(|s| !s.is_finite()) {
            return Err(DecisionError::Evaluation(
                "the model could not evaluate the decision".into(),
            ));
        }
        let mut answers = Vec::with_capacity(req.questions.len());
        let mut at = 0;
        for q in &req.questions {
            let n = q.options.len();
            answers.push(answer(q.ty, &scores[at..at + n], cal.temperature(q.ty, n)));
            at += n;
        }
        Ok(Response {
            model: model.to_string(),
            answers,
            input_tokens,
            scores: scores.to_vec(),
            approximate: false,
        })
    }

    /// Answers every question of `req` from its options' probabilities (`probs[k]`: question k's,
    /// in option order): the approximate readout's answers, marked so.
    pub fn from_probabilities(
        model: &str,
        req: &Request,
        probs: Vec<Vec<f64>>,
        input_tokens: usize,
    ) -> Result<Response, DecisionError> {
        let valid = probs.len() == req.questions.len()
            && req
                .questions
                .iter()
                .zip(&probs)
                .all(|(q, p)| p.len() == q.options.len())
            && probs.iter().flatten().all(|p| p.is_finite());
        if !valid {
            return Err(DecisionError::Evaluation(
                "the model could not evaluate the decision".into(),
            ));
        }
        let scores = probs.iter().flatten().map(|&p| p.ln() as f32).collect();
        let answers = req
            .questions
            .iter()
            .zip(probs)
            .map(|(q, p)| answer_from(q.ty, p))
            .collect();
        Ok(Response {
            model: model.to_string(),
            answers,
            input_tokens,
            scores,
            approximate: true,
        })
    }

    /// The response JSON (spec §3.6): answers in request order, probabilities in option order.
    pub fn to_json(&self, req: &Request) -> String {
        let mut out = String::from("{\"model\":");
        json::write_string(&self.model, &mut out);
        out.push_str(",\"answers\":{");
        for (i, (q, a)) in req.questions.iter().zip(&self.answers).enumerate() {
            if i > 0 {
                out.push(',');
            }
            json::write_string(&q.id, &mut out);
            out.push_str(":{\"type\":");
            json::write_string(q.ty.as_str(), &mut out);
            let probs = |p: &[f64], out: &mut String| {
                out.push_str(",\"probabilities\":{");
                for (j, (o, &pj)) in q.options.iter().zip(p).enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    json::write_string(&o.key, out);
                    out.push(':');
                    out.push_str(&num(pj));
                }
                out.push('}');
            };
            match a {
                Answer::Noul { p_true } => {
                    out.push_str(",\"noul\":");
                    out.push_str(&num(*p_true));
                }
                Answer::Choice {
                    choice,
                    probabilities,
                    confidence,
                } => {
                    out.push_str(",\"choice\":");
                    json::write_string(&q.options[*choice].key, &mut out);
                    probs(probabilities, &mut out);
                    out.push_str(",\"confidence\":");
                    out.push_str(&num(*confidence));
                }
                Answer::Score {
                    score,
                    probabilities,
                    confidence,
                } => {
                    out.push_str(",\"score\":");
                    out.push_str(&num(*score));
                    out.push_str(",\"legend\":{");
                    for (j, o) in q.options.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        json::write_string(&o.key, &mut out);
                        out.push(':');
                        o.description.write_original(&mut out);
                    }
                    out.push('}');
                    probs(probabilities, &mut out);
                    out.push_str(",\"confidence\":");
                    out.push_str(&num(*confidence));
                }
            }
            out.push('}');
        }
        out.push_str("},\"usage\":{\"input_tokens\":");
        out.push_str(&self.input_tokens.to_string());
        out.push_str(",\"output_tokens\":0}");
        if self.approximate {
            out.push_str(",\"approximate\":true");
        }
        out.push('}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn buckets_and_lookup() {
        let cal = Calibration {
            temperatures: vec![
                ("choice.3_5".into(), 1.5),
                ("choice".into(), 0.8),
                ("noul.2".into(), 1.25),
            ],
        };
        assert_eq!(cal.temperature(QuestionType::Choice, 3), 1.5);
        assert_eq!(cal.temperature(QuestionType::Choice, 5), 1.5);
        assert_eq!(cal.temperature(QuestionType::Choice, 2), 0.8);
        assert_eq!(cal.temperature(QuestionType::Choice, 6), 0.8);
        assert_eq!(cal.temperature(QuestionType::Noul, 2), 1.25);
        assert_eq!(cal.temperature(QuestionType::Score, 3), 1.0);
        assert_eq!(
            [
                bucket(1),
                bucket(2),
                bucket(3),
                bucket(5),
                bucket(6),
                bucket(10),
                bucket(11),
                bucket(255)
            ],
            ["2", "2", "3_5", "3_5", "6_10", "6_10", "11", "11"]
        );
    }

    #[test]
    fn confidence_formulas() {
        // Uniform: no confidence; one-hot: full confidence.
        let Answer::Choice { confidence, .. } = answer(QuestionType::Choice, &[1.0, 1.0, 1.0], 1.0) else {
            panic!()
        };
        assert!(confidence.abs() < 1e-15);
        let Answer::Choice { choice, confidence, .. } = answer(QuestionType::Choice, &[0.0, 100.0], 1.0) else {
            panic!()
        };
        assert_eq!(choice, 1);
        assert!((confidence - 1.0).abs() < 1e-12);
        let Answer::Score { score, confidence, .. } = answer(QuestionType::Score, &[-100.0, -100.0, 100.0], 1.0) else {
            panic!()
        };
        assert!((score - 2.0).abs() < 1e-12 && (confidence - 1.0).abs() < 1e-12);
        // Uniform over 4 levels: score 1.5, mode 0 (first max): spread 1.5 vs uniform 1 → clamped to 0.
        let Answer::Score { score, confidence, .. } = answer(QuestionType::Score, &[0.0; 4], 1.0) else {
            panic!()
        };
        assert!((score - 1.5).abs() < 1e-12 && confidence == 0.0);
        // A higher temperature flattens.
        let p1 = probabilities(&[0.0, 1.0], 1.0);
        let p2 = probabilities(&[0.0, 1.0], 2.0);
        assert!(p2[1] < p1[1] && (p2[1] - 1.0 / (1.0 + (-0.5f64).exp())).abs() < 1e-15);
    }
}
