//! Constrained decoding: answers that must be JSON (`response_format` `json_object` /
//! `json_schema`) or a tool call (`tool_choice` `required` / a named function) are generated
//! under a token mask, so they always parse and match their schema.
//!
//! The grammar engine is [llguidance](https://github.com/guidance-ai/llguidance) (what llama.cpp
//! uses for the same job): a JSON schema or a Lark grammar is compiled to an Earley parser over a
//! lexer of derivative-based regexes, and at every step it walks a trie of the vocabulary's token
//! bytes to compute which of the 248k tokens may come next.
//!
//! ```text
//! Tokenizer ──GrammarVocab::new (once per model: the token trie)──► GrammarVocab
//! OutputSpec (JSON from the page) ──GrammarVocab::compile──► Constraint   (bad schema → GrammarError::Schema)
//! each step:  logits ──Constraint::mask (−∞ outside the grammar)──► sampler ──► token ──Constraint::commit
//! ```
//! The vocabulary is given as llama.cpp gives it: a token's bytes, and CONTROL tokens (`<|im_end|>`)
//! as `0xFF` + their text, so that text can never spell them. When the grammar is complete the
//! mask allows only the end-of-generation tokens, and the engine stops.
//!
//! Tool calls use the Qwen3.5 XML form the chat template teaches (see `www/src/toolcalls.ts`):
//! the prompt already ends with `<tool_call>\n<function=` (or the named function's header), and
//! the grammar writes the rest: a declared function name, its parameters in schema order (required
//! ones always), each value in the form the template writes and the parser reads back — strings
//! as text up to `\n</parameter>`, numbers / integers / booleans as literals, objects, arrays and
//! anything else as compact JSON under the parameter's own schema.
//!
//! JSON is compact (no whitespace between tokens): a model cannot spend its tokens on blank space,
//! and the text parses with `JSON.parse` as it is.
//!
//! Every number is finite as a double, and every integer exact in JavaScript: JSON's grammar lets a
//! number have any count of digits and any exponent (`9e7564` reads back as Infinity), and
//! llguidance has no option to limit them, so the schema is rewritten before it is compiled
//! ([`finite_numbers`]): each place a number may appear gets bounds within ±[`MAX_JSON_NUMBER`]
//! (bounded numbers are written as plain decimals), and each place any value may appear (`{}`,
//! `true`, an object's unlisted properties, an array's unlisted items) becomes a reference to an
//! "any JSON value with finite numbers" definition, nested at most [`ANY_DEPTH`] deep. Otherwise
//! what the schema allows is unchanged; a bound past that range is a `bad_schema` error.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::{json, Value};

use crate::tokenizer::Tokenizer;

/// Why an output constraint could not be made or kept.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarError {
    /// The request's schema / tools are malformed or use what the grammar compiler cannot do.
    Schema(String),
    /// The parser failed during generation (a limit of the grammar engine was hit).
    Failed(String),
    /// The model has no tokenizer (a constraint is over token bytes).
    NoTokenizer,
}

impl GrammarError {
    /// The error code the front ends use (`www/src/protocol.ts` ErrorCode).
    pub fn code(&self) -> &'static str {
        match self {
            GrammarError::Schema(_) => "bad_schema",
            GrammarError::Failed(_) | GrammarError::NoTokenizer => "internal",
        }
    }
}

impl std::fmt::Display for GrammarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrammarError::Schema(s) => write!(f, "the output schema cannot be used: {s}"),
            GrammarError::Failed(s) => write!(f, "constrained decoding failed: {s}"),
            GrammarError::NoTokenizer => f.write_str("constrained decoding needs the model's tokenizer"),
        }
    }
}
impl std::error::Error for GrammarError {}

/// The vocabulary as the grammar engine sees it (a byte trie of all tokens), built once per model
/// and shared by every constraint.
pub struct GrammarVocab {
    factory: Arc<ParserFactory>,
    /// Every end-of-generation token (allowed whenever the grammar's end-of-sequence is).
    eog: Vec<u32>,
    eos: u32,
}

impl GrammarVocab {
    pub fn new(tok: &Tokenizer) -> Result<GrammarVocab, GrammarError> {
        let n = tok.n_vocab();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let b = tok.token_bytes(id);
                if tok.is_unused(id) || b.is_empty() {
                    Vec::new() // never allowed
                } else if tok.is_control(id) {
                    [&[TokTrie::SPECIAL_TOKEN_MARKER][..], b].concat()
                } else {
                    b.to_vec()
                }
            })
            .collect();
        let eog = tok.eog_ids().to_vec();
        let eos = tok.eos().or_else(|| eog.first().copied()).ok_or_else(|| GrammarError::Schema("the model has no end-of-sequence token".into()))?;
        let info = TokRxInfo { vocab_size: n as u32, tok_eos: eos, tok_bos: tok.bos(), tok_pad: None, tok_unk: None, tok_end_of_turn: None };
        let env: Arc<dyn TokenizerEnv + Sync> = Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, &words)));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| GrammarError::Failed(e.to_string()))?;
        factory.quiet();
        Ok(GrammarVocab { factory: Arc::new(factory), eog, eos })
    }

    /// Compiles what the answer must be into a fresh constraint.
    pub fn compile(&self, spec: &OutputSpec) -> Result<Constraint, GrammarError> {
        let grammar = spec.grammar()?;
        let parser = self.factory.create_parser(grammar).map_err(|e| GrammarError::Schema(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Schema(e));
        }
        Ok(Constraint { matcher, eog: self.eog.clone(), eos: self.eos })
    }
}

/// What the answer must be (the page sends it as JSON, see [`OutputSpec::from_json`]).
#[derive(Clone, Debug, PartialEq)]
pub enum OutputSpec {
    /// Any JSON object (`response_format: {type: 'json_object'}`).
    JsonObject,
    /// JSON matching a schema (`response_format: {type: 'json_schema', json_schema: {schema}}`).
    JsonSchema(Value),
    /// The rest of a Qwen3.5 XML tool call whose start the prompt holds. `name`: the prompt holds
    /// the named function's header (`<function=NAME>\n`); else it ends with `<function=` and any of
    /// `tools` may follow. `parallel`: more calls may follow the first (not with `name`).
    ToolCalls { tools: Vec<Value>, name: Option<String>, parallel: bool },
}

impl OutputSpec {
    /// `{"type": "json_object"}`, `{"type": "json_schema", "schema": …}`, or
    /// `{"type": "tool_calls", "tools": [OpenAI tools], "name"?: …, "parallel"?: bool}`.
    pub fn from_json(text: &str) -> Result<OutputSpec, GrammarError> {
        let v: Value = serde_json::from_str(text).map_err(|e| GrammarError::Schema(format!("not JSON: {e}")))?;
        match v.get("type").and_then(Value::as_str) {
            Some("json_object") => Ok(OutputSpec::JsonObject),
            Some("json_schema") => match v.get("schema") {
                Some(s) if s.is_object() || s.is_boolean() => Ok(OutputSpec::JsonSchema(s.clone())),
                _ => Err(GrammarError::Schema("json_schema needs a schema (a JSON object)".into())),
            },
            Some("tool_calls") => Ok(OutputSpec::ToolCalls {
                tools: v.get("tools").and_then(Value::as_array).cloned().unwrap_or_default(),
                name: v.get("name").and_then(Value::as_str).map(str::to_string),
                parallel: v.get("parallel").and_then(Value::as_bool).unwrap_or(true),
            }),
            other => Err(GrammarError::Schema(format!("unknown output type {other:?}"))),
        }
    }

    fn grammar(&self) -> Result<TopLevelGrammar, GrammarError> {
        Ok(match self {
            OutputSpec::JsonObject => TopLevelGrammar::from_json_schema(compact(json!({"type": "object"}))?),
            OutputSpec::JsonSchema(s) => TopLevelGrammar::from_json_schema(compact(s.clone())?),
            OutputSpec::ToolCalls { tools, name, parallel } => TopLevelGrammar::from_lark(tool_call_lark(tools, name.as_deref(), *parallel)?),
        })
    }
}

/// The schema as it is compiled: numbers kept finite ([`finite_numbers`]) and llguidance's
/// options for compact JSON.
fn compact(mut schema: Value) -> Result<Value, GrammarError> {
    if let Value::Bool(b) = schema {
        schema = if b { json!({}) } else { json!({"not": {}}) };
    }
    finite_numbers(&mut schema)?;
    let opts = JsonCompileOptions { whitespace_flexible: false, ..Default::default() };
    opts.apply_to(&mut schema);
    Ok(schema)
}

/// The largest magnitude of a generated JSON number: 2^53 − 1 (JavaScript's
/// `Number.MAX_SAFE_INTEGER`), so every number is a finite double and every integer is exact.
pub const MAX_JSON_NUMBER: f64 = 9_007_199_254_740_991.0;

/// How deep values may nest where a schema allows any value (`{}`, `json_object`'s members, an
/// object's unlisted properties): "any value" is a chain of definitions, each allowing arrays and
/// objects of the next one down, ending with scalars and empty `[]` / `{}`. A recursive definition
/// would be unlimited, but llguidance cannot intersect one with itself (`allOf`, a `$ref` with
/// siblings), so the chain is finite.
pub const ANY_DEPTH: usize = 12;

/// The names (under the root's `$defs`) of the "any value" chain: `clef_any_{depth left}`.
const ANY_DEF: &str = "clef_any_";

/// Rewrites a root schema (an object) so that every number it allows is within ±MAX_JSON_NUMBER
/// (see the module docs): each subschema that may be a number gets bounds, each place any value
/// may appear becomes a reference to the "any value" chain ([`ANY_DEPTH`]). Subschemas under `not`
/// are left as they are (bounds there would widen what the schema allows).
///
/// llguidance intersects a schema's parts with each other (`allOf` items; a `$ref`'s target, or
/// each `anyOf` / `oneOf` option, with the keywords beside it), and intersecting two "any value"
/// chains multiplies their branches level by level. So only one side of an intersection gets the
/// chain: the `allOf` schema itself, the `$ref` target and the options; the parts intersected
/// with them get bounds only ([`Fill::BoundsOnly`]), the chain on the other side covering their
/// free-form places.
pub fn finite_numbers(root: &mut Value) -> Result<(), GrammarError> {
    let mut any = AnyRef { json: json!({"$ref": format!("#/$defs/{ANY_DEF}{ANY_DEPTH}")}), used: false };
    bound_schema(root, &mut any, Fill::Any)?;
    if !any.used {
        return Ok(());
    }
    let root = root.as_object_mut().ok_or_else(|| GrammarError::Schema("a schema must be an object or a boolean".into()))?;
    let defs = root.entry("$defs").or_insert_with(|| json!({}));
    let defs = defs.as_object_mut().ok_or_else(|| GrammarError::Schema("$defs must be an object".into()))?;
    for depth in 0..=ANY_DEPTH {
        let name = format!("{ANY_DEF}{depth}");
        if defs.contains_key(&name) {
            return Err(GrammarError::Schema(format!("$defs.{name} is a name the engine uses")));
        }
        let (min, max) = (-MAX_JSON_NUMBER as i64, MAX_JSON_NUMBER as i64);
        let def = match depth {
            0 => json!({"minimum": min, "maximum": max, "maxItems": 0, "maxProperties": 0}),
            d => {
                let inner = json!({"$ref": format!("#/$defs/{ANY_DEF}{}", d - 1)});
                json!({"minimum": min, "maximum": max, "items": inner, "additionalProperties": inner})
            }
        };
        defs.insert(name, def);
    }
    Ok(())
}

/// The reference that stands for "any value" in a rewritten schema, and whether it was used.
struct AnyRef {
    json: Value,
    used: bool,
}

impl AnyRef {
    fn get(&mut self) -> Value {
        self.used = true;
        self.json.clone()
    }
}

/// What [`bound_schema`] adds to a subschema.
#[derive(Clone, Copy, PartialEq)]
enum Fill {
    /// Number bounds, and the "any value" chain where any value may appear.
    Any,
    /// Number bounds only (a part that is intersected with one that has the chain).
    BoundsOnly,
}

/// One subschema of [`finite_numbers`], and everything under it.
fn bound_schema(s: &mut Value, any: &mut AnyRef, fill: Fill) -> Result<(), GrammarError> {
    let o = match s {
        Value::Bool(true) if fill == Fill::Any => {
            *s = any.get();
            return Ok(());
        }
        Value::Object(o) => o,
        _ => return Ok(()), // `true` / `false`, or not a schema (the compiler reports it)
    };
    let has = |k: &str| o.contains_key(k);
    // A `$ref` / `anyOf` / `oneOf` is intersected with the keywords beside it; `allOf` items with
    // each other and with this schema.
    let combined = has("$ref") || has("anyOf") || has("oneOf");
    let listed = has("enum") || has("const");
    let beside = if combined { Fill::BoundsOnly } else { fill };
    // Subschemas first (before this one's additions, which are references). Definitions are
    // reached through `$ref`s: the side that has the chain.
    bound_under(o, "$defs", any, Fill::Any)?;
    bound_under(o, "definitions", any, Fill::Any)?;
    bound_under(o, "anyOf", any, fill)?;
    bound_under(o, "oneOf", any, fill)?;
    bound_under(o, "allOf", any, Fill::BoundsOnly)?;
    for key in ["properties", "patternProperties", "additionalProperties", "prefixItems", "items", "additionalItems"] {
        bound_under(o, key, any, beside)?;
    }
    // `enum` / `const` list their values: nothing to bound or fill in.
    if combined || listed {
        return Ok(());
    }
    // The JSON types this subschema may be (all of them without `type`).
    let types: Option<Vec<&str>> = match o.get("type") {
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    };
    let may = |t: &str| types.as_ref().is_none_or(|ts| ts.contains(&t));
    let (numeric, array, object) = (may("number") || may("integer"), may("array"), may("object"));
    if numeric {
        bound_side(o, "minimum", "exclusiveMinimum", -1.0)?;
        bound_side(o, "maximum", "exclusiveMaximum", 1.0)?;
    }
    if fill == Fill::Any && array {
        // Items past `prefixItems` / a tuple `items` are unconstrained unless said otherwise.
        let rest = if o.get("items").is_some_and(Value::is_array) { "additionalItems" } else { "items" };
        if !o.contains_key(rest) {
            o.insert(rest.into(), any.get());
        }
    }
    if fill == Fill::Any && object && !o.contains_key("additionalProperties") {
        o.insert("additionalProperties".into(), any.get());
    }
    Ok(())
}

/// The subschemas under one keyword (the keywords llguidance implements; it refuses others):
/// a map of them, a list of them, or one.
fn bound_under(o: &mut serde_json::Map<String, Value>, key: &str, any: &mut AnyRef, fill: Fill) -> Result<(), GrammarError> {
    let map = ["properties", "patternProperties", "$defs", "definitions"].contains(&key);
    match o.get_mut(key) {
        Some(Value::Object(m)) if map => m.values_mut().try_for_each(|v| bound_schema(v, any, fill)),
        Some(Value::Array(a)) => a.iter_mut().try_for_each(|v| bound_schema(v, any, fill)),
        Some(v) if !map => bound_schema(v, any, fill),
        _ => Ok(()),
    }
}

/// One side of a number's range (`sign` −1: the lower bound), kept within ±MAX_JSON_NUMBER: a
/// missing or wider bound becomes the limit itself; a bound past the other end cannot be met.
fn bound_side(o: &mut serde_json::Map<String, Value>, inclusive: &str, exclusive: &str, sign: f64) -> Result<(), GrammarError> {
    let limit = sign * MAX_JSON_NUMBER;
    // The tighter of the two keywords (a boolean `exclusive…` is draft 4's flag on the other one).
    let given = [inclusive, exclusive].iter().filter_map(|k| o.get(*k).and_then(Value::as_f64)).reduce(|a, b| if sign < 0.0 { a.max(b) } else { a.min(b) });
    match given {
        Some(b) if b.abs() <= MAX_JSON_NUMBER => Ok(()),
        Some(b) if b * sign < 0.0 => Err(GrammarError::Schema(format!(
            "{inclusive} {b} is past the numbers the engine generates (within ±{MAX_JSON_NUMBER}, so that JavaScript reads them exactly)"
        ))),
        _ => {
            o.remove(exclusive);
            o.insert(inclusive.into(), json!(limit as i64));
            Ok(())
        }
    }
}

/// A JSON string literal (Lark string literals are read as JSON strings).
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The Lark grammar of the rest of a tool call (see the module docs for the form).
fn tool_call_lark(tools: &[Value], name: Option<&str>, parallel: bool) -> Result<String, GrammarError> {
    let mut rules = String::new();
    let mut calls = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let f = t.get("function").ok_or_else(|| GrammarError::Schema(format!("tools[{i}] has no function")))?;
        let fname = f.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).ok_or_else(|| GrammarError::Schema(format!("tools[{i}] has no name")))?;
        if fname.contains(['>', '\n']) {
            return Err(GrammarError::Schema(format!("tool name {fname:?} cannot be written in a tool call")));
        }
        let params = f.get("parameters").cloned().unwrap_or(json!({}));
        let props = params.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        let required: Vec<&str> = params.get("required").and_then(Value::as_array).map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        if let Some(missing) = required.iter().find(|r| !props.contains_key(**r)) {
            return Err(GrammarError::Schema(format!("tool {fname}: required parameter '{missing}' has no schema in properties")));
        }
        let mut body = Vec::new();
        for (j, (pname, pschema)) in props.iter().enumerate() {
            if pname.contains(['>', '\n']) {
                return Err(GrammarError::Schema(format!("tool {fname}: parameter name {pname:?} cannot be written in a tool call")));
            }
            let rule = format!("f{i}_p{j}");
            let value = value_rule(&rule, pschema, &mut rules)?;
            rules.push_str(&format!("{rule}: {} {value}\n", lit(&format!("<parameter={pname}>\n"))));
            body.push(if required.contains(&pname.as_str()) { rule } else { format!("{rule}?") });
        }
        let header = if name.is_some() { String::new() } else { format!("{} ", lit(&format!("{fname}>\n"))) };
        rules.push_str(&format!("f{i}: {header}{} {}\n", body.join(" "), lit("</function>\n</tool_call>")));
        if name.is_none_or(|n| n == fname) {
            calls.push(format!("f{i}"));
        }
    }
    if calls.is_empty() {
        return Err(GrammarError::Schema(match name {
            Some(n) => format!("tool_choice names '{n}', which is not in tools"),
            None => "no tools to call".into(),
        }));
    }
    let call = calls.join(" | ");
    // Further calls repeat the whole header (their function is chosen freely).
    let more = if parallel && name.is_none() { format!(" ({} call)*", lit("\n<tool_call>\n<function=")) } else { String::new() };
    Ok(format!("start: call{more}\ncall: {call}\n{rules}"))
}

/// The rule of one parameter's value, through its closing `\n</parameter>\n`.
fn value_rule(rule: &str, schema: &Value, rules: &mut String) -> Result<String, GrammarError> {
    let close = lit("\n</parameter>\n");
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let plain = schema.as_object().is_some_and(|o| o.keys().all(|k| ["type", "description", "title"].contains(&k.as_str())));
    let consts = schema.get("enum").and_then(Value::as_array).cloned().or_else(|| schema.get("const").map(|c| vec![c.clone()]));
    if let Some(values) = consts.filter(|v| !v.is_empty()) {
        // As the template writes them: strings bare, anything else as JSON.
        let alts: Vec<String> = values.iter().map(|v| lit(&v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))).collect();
        return Ok(format!("({}) {close}", alts.join(" | ")));
    }
    match (types.as_slice(), plain) {
        (["string"], _) => {
            // The template writes strings bare, so the parser reads them back as text: any text up
            // to the first "\n</parameter>\n" (lazy: the shortest match), within minLength /
            // maxLength characters, or the pattern when there is one (`format` is not enforced here).
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                let p = p.strip_prefix('^').unwrap_or(p);
                let p = p.strip_suffix('$').filter(|q| !q.ends_with('\\')).unwrap_or(p);
                return Ok(format!("/{}/ {close}", p.replace('/', "\\/")));
            }
            let n = |k: &str| schema.get(k).and_then(Value::as_u64);
            let len = match (n("minLength"), n("maxLength")) {
                (None, None) => "*".to_string(),
                (min, max) => format!("{{{},{}}}", min.unwrap_or(0), max.map(|m| m.to_string()).unwrap_or_default()),
            };
            rules.push_str(&format!("{rule}_text[lazy]: /(?s:.{len})\\n<\\/parameter>\\n/\n"));
            Ok(format!("{rule}_text"))
        }
        // The template writes Python's True / False; JSON's spelling is read back as well.
        (["boolean"], true) => Ok(format!("(\"true\" | \"false\" | \"True\" | \"False\") {close}")),
        (["null"], true) => Ok(format!("\"null\" {close}")),
        // Numbers (finite, as everywhere: see `finite_numbers`), objects, arrays, anything else:
        // compact JSON under the parameter's own schema.
        _ => Ok(format!("%json {} {close}", compact(schema.clone())?)),
    }
}

/// The mask and state of one constrained answer.
pub struct Constraint {
    matcher: Matcher,
    eog: Vec<u32>,
    eos: u32,
}

impl Constraint {
    /// Sets every logit the grammar does not allow next to −∞. When the grammar may end, every
    /// end-of-generation token is allowed; ids past the vocabulary never are.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        let allowed = self.allowed()?;
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = allowed.as_slice().get(w).copied().unwrap_or(0);
            if bits == !0 && chunk.len() == 32 {
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if bits & (1 << b) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    /// The tokens the grammar allows next (a bit per token id).
    pub fn allowed(&mut self) -> Result<SimpleVob, GrammarError> {
        let mut vob = self.matcher.compute_mask_or_eos().map_err(|e| GrammarError::Failed(e.to_string()))?;
        if vob.is_allowed(self.eos) {
            for &t in &self.eog {
                if (t as usize) < vob.len() {
                    vob.allow_token(t);
                }
            }
        }
        Ok(vob)
    }

    /// Advances over a generated token (one the mask allowed; end-of-generation tokens end it).
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        if self.eog.contains(&token) {
            return Ok(());
        }
        self.matcher.consume_token(token).map_err(|e| GrammarError::Failed(e.to_string()))
    }
}

/// A constrained answer written by a stand-in for a model that writes garbage: at each step a
/// token drawn uniformly among those the grammar allows (a seeded RNG). Used to test that every
/// answer parses and matches its schema, and to time the mask over a real vocabulary.
pub struct Walk {
    pub tokens: Vec<u32>,
    /// The grammar allowed the end and it was drawn (else `max_tokens` ran out).
    pub ended: bool,
    /// Milliseconds of each `Constraint::mask` (over `n_logits` logits) and `commit`.
    pub mask_ms: Vec<f64>,
}

pub fn random_walk(c: &mut Constraint, n_logits: usize, max_tokens: usize, seed: u64) -> Result<Walk, GrammarError> {
    let mut rng = seed;
    let mut next = || {
        // SplitMix64 (as the sampler's).
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut logits = vec![0.0f32; n_logits];
    let mut walk = Walk { tokens: Vec::new(), ended: false, mask_ms: Vec::new() };
    while walk.tokens.len() < max_tokens {
        logits.iter_mut().for_each(|l| *l = 0.0);
        let t0 = crate::bench::now_ms();
        c.mask(&mut logits)?;
        walk.mask_ms.push(crate::bench::now_ms() - t0);
        let allowed: Vec<u32> = (0..n_logits as u32).filter(|&i| logits[i as usize] == 0.0).collect();
        if allowed.is_empty() {
            return Err(GrammarError::Failed("the grammar allows no token".into()));
        }
        let tok = allowed[(next() % allowed.len() as u64) as usize];
        if c.eog.contains(&tok) {
            walk.ended = true;
            break;
        }
        let t0 = crate::bench::now_ms();
        c.commit(tok)?;
        *walk.mask_ms.last_mut().unwrap() += crate::bench::now_ms() - t0;
        walk.tokens.push(tok);
    }
    Ok(walk)
}
