//! A SystemOne request, from JSON body to tagged tokens (spec §3.1–§3.3).
//!
//! ```text
//! body ──parse_request──► Request {state, questions[]}     validation: the newer server's error classes
//!      ──Template::render──► text with <<clef:sep>> between pieces and <<clef:question>> / <<clef:option>>
//!                            at the start of the spans the head reads
//!      ──tokenize_prompt──► Prompt {tokens, tags}           each piece tokenized on its own, specials parsed,
//!                                                           no BOS; every token carries its piece's tag
//! ```
//! The template input is what llama-server builds: `{state, questions: [{id, type, instructions,
//! options: [{key, description}]}]}` with every object's keys in byte order (at any depth) and
//! `<<clef:` replaced by `<<clef ` in every string **value** (keys are left alone — a state key can
//! still split the state into two pieces, spec §3.3 / fixture A7). Option order: choice keys in
//! byte order, score levels `"0".."n-1"` as given, noul `[true, false]`.

use super::json::{self, Value};
use super::DecisionError;
use crate::tokenizer::Tokenizer;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use std::collections::BTreeMap;

/// The converter's `systemone` template (`conversion/clef.py`), used when the GGUF has none
/// (a head-less `qwen35` file with `joint_head.safetensors`).
pub const BUILTIN_SYSTEMONE: &str = include_str!("systemone.jinja");

/// Piece separator and span markers the template is rendered with.
pub const SEP: &str = "<<clef:sep>>";
pub const MARK_QUESTION: &str = "<<clef:question>>";
pub const MARK_OPTION: &str = "<<clef:option>>";

/// Request limits (the newer llama-server's, spec §3.1 / §3.5).
pub const MAX_QUESTIONS: usize = 4096;
pub const MAX_CHOICE_OPTIONS: usize = 255;
pub const SCORE_LEVELS: std::ops::RangeInclusive<usize> = 2..=10;
pub const MAX_NESTING: usize = 32;
pub const MAX_STRING_BYTES: usize = 8 << 20;

/// Question types, in the order of the head's type embedding rows (`token_types.weight`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuestionType {
    Noul = 0,
    Choice = 1,
    Score = 2,
}

impl QuestionType {
    pub fn parse(s: &str) -> Option<QuestionType> {
        match s {
            "noul" => Some(QuestionType::Noul),
            "choice" => Some(QuestionType::Choice),
            "score" => Some(QuestionType::Score),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionType::Noul => "noul",
            QuestionType::Choice => "choice",
            QuestionType::Score => "score",
        }
    }
    /// Order tag of this type's question span (1 noul, 2 choice, 3 score).
    pub fn tag(self) -> u8 {
        self as u8 + 1
    }
    /// Row of the type embedding.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Order tag of option spans; 0 marks tokens the head does not pool.
pub const TAG_OPTION: u8 = 4;
pub const TAG_NONE: u8 = 0;

/// One allowed answer of a question.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerOption {
    pub key: String,
    /// The criteria's description, `Null` when absent.
    pub description: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub id: String,
    pub ty: QuestionType,
    pub instructions: Value,
    /// In prompt order (see the module doc).
    pub options: Vec<AnswerOption>,
}

/// A validated request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub state: Value,
    /// In request order.
    pub questions: Vec<Question>,
}

impl Request {
    pub fn n_options(&self) -> usize {
        self.questions.iter().map(|q| q.options.len()).sum()
    }
}

fn semantic(msg: impl Into<String>) -> DecisionError {
    DecisionError::Semantic(msg.into())
}

/// Does `state` carry image parts (`{"type": "image_url", …}` in chat messages)?
fn has_image_parts(state: &Value) -> bool {
    let messages = match state {
        Value::Array(a) => a.as_slice(),
        Value::Object(_) => match state.get("messages") {
            Some(Value::Array(a)) => a.as_slice(),
            _ => return false,
        },
        _ => return false,
    };
    messages.iter().any(|m| match m.get("content") {
        Some(Value::Array(parts)) => parts
            .iter()
            .any(|p| p.get("type").and_then(Value::as_str) == Some("image_url")),
        _ => false,
    })
}

fn check_depth(field: &str, v: &Value) -> Result<(), DecisionError> {
    if v.depth() > MAX_NESTING {
        return Err(semantic(format!(
            "\"{field}\" is nested too deeply (at most {MAX_NESTING} levels)"
        )));
    }
    Ok(())
}

/// Parses and validates a request body (spec §3.1, the newer server's checks and classes).
pub fn parse_request(body: &str) -> Result<Request, DecisionError> {
    let v = json::parse(body).map_err(|e| DecisionError::Malformed(e.to_string()))?;
    let Value::Object(members) = &v else {
        return Err(DecisionError::Malformed(format!(
            "the request body must be a JSON object, not {}",
            v.kind()
        )));
    };
    if v.string_bytes() > MAX_STRING_BYTES {
        return Err(DecisionError::TooLarge(format!(
            "the request holds more than {} MiB of text",
            MAX_STRING_BYTES >> 20
        )));
    }
    for (k, val) in members {
        match k.as_str() {
            "model" if !matches!(val, Value::String(_)) => return Err(semantic("\"model\" must be a string")),
            "videos" => return Err(semantic("\"videos\" is not supported")),
            "images" if !matches!(val, Value::Null) && !matches!(val, Value::Array(a) if a.is_empty()) => {
                return Err(semantic(
                    "\"images\" is not supported: this model's template has no image input",
                ))
            }
            _ => {}
        }
    }
    let state = match v.get("state") {
        None | Some(Value::Null) => return Err(semantic("\"state\" must be provided")),
        Some(s) => s.clone(),
    };
    check_depth("state", &state)?;
    if has_image_parts(&state) {
        return Err(semantic(
            "image parts in \"state\" are not supported: this model's template has no image input",
        ));
    }
    let qs = match v.get("questions") {
        Some(Value::Object(m)) if !m.is_empty() => m,
        _ => return Err(semantic("\"questions\" must be a non-empty object")),
    };
    if qs.len() > MAX_QUESTIONS {
        return Err(DecisionError::TooLarge(format!(
            "\"questions\" has {} questions, at most {MAX_QUESTIONS} are supported",
            qs.len()
        )));
    }
    let mut questions = Vec::with_capacity(qs.len());
    for (id, q) in qs {
        questions.push(parse_question(id, q)?);
    }
    Ok(Request { state, questions })
}

fn parse_question(id: &str, q: &Value) -> Result<Question, DecisionError> {
    if id.is_empty() {
        return Err(semantic("\"questions\" has an empty question id"));
    }
    let err = |m: &str| semantic(format!("questions.{id}: {m}"));
    if !matches!(q, Value::Object(_)) {
        return Err(err("must be an object"));
    }
    let instructions = match q.get("instructions") {
        None | Some(Value::Null) => return Err(err("\"instructions\" must be provided")),
        Some(i) => i.clone(),
    };
    let non_empty = match &instructions {
        Value::String(s) => !s.is_empty(),
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    };
    if !non_empty {
        return Err(err("\"instructions\" must be a non-empty string, object, or array"));
    }
    check_depth(&format!("questions.{id}.instructions"), &instructions)?;
    let ty = q
        .get("type")
        .and_then(Value::as_str)
        .and_then(QuestionType::parse)
        .ok_or_else(|| err("\"type\" must be one of: choice, score, noul"))?;
    let criteria = q.get("criteria").unwrap_or(&Value::Null);
    let options: Vec<AnswerOption> = match ty {
        QuestionType::Choice => {
            let Value::Object(m) = criteria else {
                return Err(err("\"criteria\" must be a non-empty object"));
            };
            if m.is_empty() {
                return Err(err("\"criteria\" must be a non-empty object"));
            }
            if m.len() > MAX_CHOICE_OPTIONS {
                return Err(err(&format!(
                    "\"criteria\" has {} options, at most {MAX_CHOICE_OPTIONS} are supported",
                    m.len()
                )));
            }
            let mut o: Vec<AnswerOption> = m
                .iter()
                .map(|(k, d)| AnswerOption {
                    key: k.clone(),
                    description: d.clone(),
                })
                .collect();
            o.sort_by(|a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
            o
        }
        QuestionType::Score => {
            let levels = match criteria {
                Value::Array(a) if SCORE_LEVELS.contains(&a.len()) => a,
                _ => return Err(err("\"criteria\" must be an array of 2 to 10 levels")),
            };
            levels
                .iter()
                .enumerate()
                .map(|(i, d)| AnswerOption {
                    key: i.to_string(),
                    description: d.clone(),
                })
                .collect()
        }
        QuestionType::Noul => {
            if !matches!(criteria, Value::Null | Value::Object(_)) {
                return Err(err("\"criteria\" must be an object"));
            }
            let d = |k: &str| criteria.get(k).cloned().unwrap_or(Value::Null);
            vec![
                AnswerOption {
                    key: "true".into(),
                    description: d("true"),
                },
                AnswerOption {
                    key: "false".into(),
                    description: d("false"),
                },
            ]
        }
    };
    for o in &options {
        check_depth(&format!("questions.{id}.criteria"), &o.description)?;
    }
    Ok(Question {
        id: id.to_string(),
        ty,
        instructions,
        options,
    })
}

// ---------------------------------------------------------------------------------------------
// Rendering

/// A value for the template: object keys byte-sorted (a `BTreeMap<String, _>` iterates in byte
/// order), `<<clef:` → `<<clef ` in string values. Numbers keep llama.cpp's int / float kinds.
fn to_template_value(v: &Value) -> minijinja::Value {
    use minijinja::Value as J;
    match v {
        Value::Null => J::from(()),
        Value::Bool(b) => J::from(*b),
        Value::Number(n) => match n.value {
            json::NumberValue::Int(i) => J::from(i),
            json::NumberValue::UInt(u) => J::from(u),
            json::NumberValue::Float(f) => J::from(f),
        },
        Value::String(s) => J::from(s.replace("<<clef:", "<<clef ")),
        Value::Array(a) => J::from(a.iter().map(to_template_value).collect::<Vec<_>>()),
        Value::Object(m) => J::from(
            m.iter()
                .map(|(k, v)| (k.clone(), to_template_value(v)))
                .collect::<BTreeMap<_, _>>(),
        ),
    }
}

/// Writes a template value as llama.cpp's `tojson` does (see [`json::Value::write_tojson`]).
fn write_template_json(v: &minijinja::Value, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = v.as_i64() {
                out.push_str(&i.to_string());
            } else if v.is_integer() {
                out.push_str(&i128::try_from(v.clone())?.to_string());
            } else {
                out.push_str(&json::format_g(f64::try_from(v.clone())?));
            }
        }
        ValueKind::String => json::write_string(v.as_str().unwrap_or_default(), out),
        ValueKind::Map => {
            let mut keys: Vec<minijinja::Value> = v.try_iter()?.collect();
            keys.sort_by(|a, b| a.to_string().as_bytes().cmp(b.to_string().as_bytes()));
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json::write_string(&k.to_string(), out);
                out.push(':');
                write_template_json(&v.get_item(k)?, out)?;
            }
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_template_json(&item, out)?;
            }
            out.push(']');
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot serialise a {other} to JSON"),
            ))
        }
    }
    Ok(())
}

/// The `tojson` filter of llama.cpp's Jinja engine. `separators` and `indent` are accepted for
/// compatibility; output is always compact (what the `systemone` template asks for).
fn tojson_filter(v: minijinja::Value, kwargs: Kwargs) -> Result<minijinja::Value, Error> {
    let _: Option<minijinja::Value> = kwargs.get("separators")?;
    let _: Option<minijinja::Value> = kwargs.get("indent")?;
    let _: Option<minijinja::Value> = kwargs.get("ensure_ascii")?;
    let _: Option<minijinja::Value> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_template_json(&v, &mut out)?;
    Ok(minijinja::Value::from(out))
}

/// A compiled `systemone` template.
pub struct Template {
    env: Environment<'static>,
    /// True when this is [`BUILTIN_SYSTEMONE`] (the file had no `systemone` template).
    pub builtin: bool,
}

impl Template {
    /// Compiles the GGUF's `tokenizer.chat_template.systemone`, or the built-in one.
    pub fn new(source: Option<&str>) -> Result<Template, DecisionError> {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson_filter);
        env.add_template_owned("systemone", source.unwrap_or(BUILTIN_SYSTEMONE).to_string())
            .map_err(|e| DecisionError::BadHead(format!("the systemone template does not compile: {e}")))?;
        Ok(Template {
            env,
            builtin: source.is_none(),
        })
    }

    /// The prompt text with its piece separators and span markers.
    pub fn render(&self, req: &Request) -> Result<String, DecisionError> {
        use minijinja::Value as J;
        let questions: Vec<J> = req
            .questions
            .iter()
            .map(|q| {
                let options: Vec<J> = q
                    .options
                    .iter()
                    .map(|o| {
                        let m: BTreeMap<&str, J> = [
                            ("key", J::from(o.key.replace("<<clef:", "<<clef "))),
                            ("description", to_template_value(&o.description)),
                        ]
                        .into_iter()
                        .collect();
                        J::from(m)
                    })
                    .collect();
                let m: BTreeMap<&str, J> = [
                    ("id", J::from(q.id.replace("<<clef:", "<<clef "))),
                    ("type", J::from(q.ty.as_str())),
                    ("instructions", to_template_value(&q.instructions)),
                    ("options", J::from(options)),
                ]
                .into_iter()
                .collect();
                J::from(m)
            })
            .collect();
        let ctx: BTreeMap<&str, J> = [
            ("state", to_template_value(&req.state)),
            ("questions", J::from(questions)),
            ("images", J::from(Vec::<J>::new())),
            ("sep", J::from(SEP)),
            ("mark_question", J::from(MARK_QUESTION)),
            ("mark_option", J::from(MARK_OPTION)),
        ]
        .into_iter()
        .collect();
        let t = self
            .env
            .get_template("systemone")
            .map_err(|e| DecisionError::BadHead(e.to_string()))?;
        t.render(ctx)
            .map_err(|e| DecisionError::Semantic(format!("the systemone template failed on this request: {e}")))
    }
}

// ---------------------------------------------------------------------------------------------
// Tokens and order tags

/// One piece of the rendered prompt (marker stripped) and its tag.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub text: String,
    pub tag: u8,
}

/// The tokens the backbone runs and the per-token order tags the head reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub pieces: Vec<Piece>,
    pub piece_token_counts: Vec<usize>,
    pub tokens: Vec<u32>,
    pub tags: Vec<u8>,
}

/// Splits a rendered prompt on [`SEP`], assigns tags (spec §3.3) and tokenizes each piece on its
/// own (`parse_special`, no BOS). Checks llama-server's layout rules: no empty span, and as many
/// question and option spans as the request has.
pub fn tokenize_prompt(rendered: &str, req: &Request, tok: &Tokenizer) -> Result<Prompt, DecisionError> {
    let mut pieces = Vec::new();
    let mut next_question = 0usize;
    let mut n_option_pieces = 0usize;
    for raw in rendered.split(SEP) {
        let (text, tag) = if let Some(rest) = raw.strip_prefix(MARK_QUESTION) {
            // The type of the next question in request order; an extra question piece is a layout error below.
            let tag = req.questions.get(next_question).map_or(TAG_NONE, |q| q.ty.tag());
            next_question += 1;
            (rest, tag)
        } else if let Some(rest) = raw.strip_prefix(MARK_OPTION) {
            n_option_pieces += 1;
            (rest, TAG_OPTION)
        } else {
            (raw, TAG_NONE)
        };
        pieces.push(Piece {
            text: text.to_string(),
            tag,
        });
    }
    if next_question != req.questions.len() || n_option_pieces != req.n_options() {
        return Err(semantic(format!(
            "unexpected layout of the decision prompt: {next_question} question and {n_option_pieces} option spans for {} questions and {} options (a state key holds a <<clef: marker?)",
            req.questions.len(),
            req.n_options()
        )));
    }
    let mut tokens = Vec::new();
    let mut tags = Vec::new();
    let mut piece_token_counts = Vec::with_capacity(pieces.len());
    for p in &pieces {
        let ids = tok.encode(&p.text, true);
        if ids.is_empty() && p.tag != TAG_NONE {
            return Err(semantic(
                "the instructions and the options of a question must not be empty",
            ));
        }
        piece_token_counts.push(ids.len());
        tags.extend(std::iter::repeat_n(p.tag, ids.len()));
        tokens.extend(ids);
    }
    Ok(Prompt {
        pieces,
        piece_token_counts,
        tokens,
        tags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn code(body: &str) -> &'static str {
        parse_request(body).unwrap_err().code()
    }

    #[test]
    fn validation_classes() {
        let ok = r#"{"state":"s","questions":{"q":{"type":"noul","instructions":"x?"}}}"#;
        assert!(parse_request(ok).is_ok());
        assert_eq!(code("{"), "malformed_request");
        assert_eq!(code("[1]"), "malformed_request");
        assert_eq!(code(r#"{"state":"s","state":"t","questions":{}}"#), "malformed_request");
        assert_eq!(
            code(r#"{"questions":{"q":{"type":"noul","instructions":"x"}}}"#),
            "invalid_decision"
        );
        assert_eq!(code(r#"{"state":"s","questions":{}}"#), "invalid_decision");
        assert_eq!(code(r#"{"state":"s","questions":{"q":1}}"#), "invalid_decision");
        assert_eq!(
            code(r#"{"state":"s","questions":{"q":{"type":"maybe","instructions":"x"}}}"#),
            "invalid_decision"
        );
        assert_eq!(
            code(r#"{"state":"s","questions":{"q":{"type":"noul","instructions":""}}}"#),
            "invalid_decision"
        );
        assert_eq!(
            code(r#"{"state":"s","questions":{"q":{"type":"choice","instructions":"x","criteria":{}}}}"#),
            "invalid_decision"
        );
        assert_eq!(
            code(r#"{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a"]}}}"#),
            "invalid_decision"
        );
        assert_eq!(
            code(r#"{"state":"s","questions":{"":{"type":"noul","instructions":"x"}}}"#),
            "invalid_decision"
        );
        assert_eq!(
            code(r#"{"state":"s","model":1,"questions":{"q":{"type":"noul","instructions":"x"}}}"#),
            "invalid_decision"
        );
        let many: Vec<String> = (0..256).map(|i| format!("\"o{i}\":null")).collect();
        let body = format!(
            r#"{{"state":"s","questions":{{"q":{{"type":"choice","instructions":"x","criteria":{{{}}}}}}}}}"#,
            many.join(",")
        );
        assert_eq!(code(&body), "invalid_decision");
        let qs: Vec<String> = (0..4097)
            .map(|i| format!(r#""q{i}":{{"type":"noul","instructions":"x"}}"#))
            .collect();
        assert_eq!(
            code(&format!(r#"{{"state":"s","questions":{{{}}}}}"#, qs.join(","))),
            "request_too_large"
        );
        let deep = "[".repeat(40) + &"]".repeat(40);
        assert_eq!(
            code(&format!(
                r#"{{"state":{deep},"questions":{{"q":{{"type":"noul","instructions":"x"}}}}}}"#
            )),
            "invalid_decision"
        );
    }

    #[test]
    fn option_order() {
        let r = parse_request(
            r#"{"state":"s","questions":{"c":{"type":"choice","instructions":"x","criteria":{"b":0,"é":0,"a":0,"B":0,"_x":0,"A":0}},
                "n":{"type":"noul","instructions":"y","criteria":{"false":"no"}},
                "s":{"type":"score","instructions":"z","criteria":["lo","hi"]}}}"#,
        )
        .unwrap();
        let keys = |i: usize| {
            r.questions[i]
                .options
                .iter()
                .map(|o| o.key.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(0), ["A", "B", "_x", "a", "b", "é"]);
        assert_eq!(keys(1), ["true", "false"]);
        assert_eq!(r.questions[1].options[0].description, Value::Null);
        assert_eq!(keys(2), ["0", "1"]);
        assert_eq!(
            r.questions.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
            ["c", "n", "s"]
        );
    }

    #[test]
    fn render_readme_request() {
        let r = parse_request(
            r#"{"state":{"b":1.0,"a":"x <<clef:sep>> y"},"questions":{"route":{"type":"choice","instructions":"Which team?","criteria":{"shipping":null,"billing":{"z":1,"y":2}}},
                "angry":{"type":"noul","instructions":"Angry?"}}}"#,
        )
        .unwrap();
        let t = Template::new(None).unwrap();
        let s = t.render(&r).unwrap();
        let pieces: Vec<&str> = s.split(SEP).collect();
        assert_eq!(pieces[1], r#"{"a":"x <<clef sep>> y","b":1}"#);
        assert_eq!(pieces[3], "\nFIELD 1\nID: route\nTYPE: choice\nINSTRUCTION: ");
        assert_eq!(pieces[4], "<<clef:question>>Which team?");
        assert_eq!(
            pieces[7],
            r#"<<clef:option>>{"description":{"y":2,"z":1},"option_id":"billing"}"#
        );
        assert_eq!(pieces[10], r#"<<clef:option>>{"option_id":"shipping"}"#);
        assert!(s.contains(
            r#"<<clef:option>>{"description":"The proposition is true or the answer is yes.","option_id":"true"}"#
        ));
        assert!(s.contains(
            r#"<<clef:option>>{"description":"The proposition is false or the answer is no.","option_id":"false"}"#
        ));
        assert!(s.ends_with("\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"));
    }
}
