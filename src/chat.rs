//! Chat templates, rendered as Hugging Face transformers renders them.
//!
//! A GGUF carries its chat template (`tokenizer.chat_template`, Jinja). The reference renderer is
//! transformers' `apply_chat_template(…, tokenize=False)`: jinja2 with `trim_blocks` and
//! `lstrip_blocks`, `loopcontrols`, a `tojson` filter that is Python's
//! `json.dumps(x, ensure_ascii=False, indent=…, separators=…, sort_keys=…)`, the globals
//! `raise_exception` and `strftime_now`, and the request's values passed as given (dict key order
//! kept, `1.0` stays a float). This module reproduces that with minijinja:
//!
//! - **One conversion from JSON to template values** ([`parse_json`]): a serde visitor builds
//!   minijinja values straight from JSON text, keys in document order (minijinja's
//!   `preserve_order`), integers as integers and floats as floats. The native command line and the
//!   wasm engine both hand the request over as JSON text, so they cannot differ.
//! - **The request, made renderable** ([`ChatInput::from_request_json`]): an OpenAI-shaped request
//!   (`messages`, `tools`, `add_generation_prompt`, `enable_thinking`, `chat_template_kwargs`).
//!   Tool-call `arguments` given as a JSON string (what OpenAI clients send) are parsed into an
//!   object first, as llama.cpp does, since templates iterate them (`arguments|items`). Content
//!   given as text parts stays a list for templates that render parts (found by a probe render when
//!   the template is compiled) and is joined into one string for those that do not.
//! - **Python's conventions**: `tojson` = `json.dumps` ([`py_json`]); values printed as Python's
//!   `str()` ([`py_str`]: `1e-05`, `True`, `None`, `['a', 1]`); `loop.previtem` / `loop.nextitem`;
//!   jinja2's `iterable` / `sequence` tests (true for strings and dicts, false for none);
//!   `.startswith` & co. (minijinja-contrib's pycompat).
//! - **Typed errors** ([`ChatError`]): a template that calls `raise_exception('…')` gives
//!   [`ChatError::Raised`] with exactly the template's message, as transformers' `TemplateError`.
//!
//! `tests/chat_templates.rs` renders conversations through the real Qwen3.5 template and compares
//! byte for byte with transformers' rendering (`tests/chat/reference.py` produces it with jinja2).
//! Files without a template get [`BUILTIN_CHATML`], the Qwen3.5 ChatML format.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
use std::fmt::{self, Write};

/// Qwen3.5-style ChatML: optional system turn, earlier assistant turns without their reasoning,
/// the last assistant turn with it, and a generation prompt that opens (or, with thinking off,
/// closes) the `<think>` block.
pub const BUILTIN_CHATML: &str = r#"{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if loop.index0 > ns.last_user and m.reasoning_content -%}
{{- '<think>\n' + m.reasoning_content | trim + '\n</think>\n\n' -}}
{%- endif -%}
{{- (m.content or '') | trim + '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + m.role + '\n' + (m.content or '') + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\n\n</think>\n\n' -}}{%- else -%}{{- '<think>\n' -}}{%- endif -%}
{%- endif -%}"#;

// ---------------------------------------------------------------------------------------------
// Errors

/// Why a chat template could not be compiled or rendered.
#[derive(Clone, Debug, PartialEq)]
pub enum ChatError {
    /// The template source does not compile.
    Syntax(String),
    /// The template called `raise_exception(message)`: the template's own message, unchanged
    /// (e.g. `No user query found in messages.`).
    Raised(String),
    /// Rendering failed otherwise (a value of the wrong type, an unknown filter, …).
    Render(String),
    /// The request itself is malformed (not JSON, no `messages` array, a message without a role,
    /// tool-call arguments that are not JSON, a content part other than text).
    Request(String),
}

impl ChatError {
    /// The error code shared with the JS side (`ErrorCode` in www/src/protocol.ts).
    pub fn code(&self) -> &'static str {
        match self {
            ChatError::Syntax(_) | ChatError::Raised(_) | ChatError::Render(_) => "template",
            ChatError::Request(_) => "bad_request",
        }
    }
}

impl fmt::Display for ChatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChatError::Syntax(m) => write!(f, "the chat template does not compile: {m}"),
            ChatError::Raised(m) => f.write_str(m),
            ChatError::Render(m) => write!(f, "chat template error: {m}"),
            ChatError::Request(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ChatError {}

/// The source attached to the error `raise_exception` returns, so that it can be told apart from
/// minijinja's own errors after rendering (whatever macro or loop it came through).
#[derive(Debug)]
struct Raised(String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg.clone()).with_source(Raised(msg)))
}

fn render_error(e: &Error) -> ChatError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<Raised>() {
            return ChatError::Raised(r.0.clone());
        }
        source = s.source();
    }
    let mut msg = e.to_string();
    if let Some(detail) = e.detail() {
        if !msg.contains(detail) {
            msg = format!("{msg} ({detail})");
        }
    }
    ChatError::Render(msg)
}

// ---------------------------------------------------------------------------------------------
// JSON text → template values (the one conversion)

/// Parses JSON text into a template value: objects keep their key order, integers stay integers
/// and floats stay floats (`1.0` renders as `1.0`), as Python's `json.loads` gives them.
pub fn parse_json(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<JsonValue>(text).map(|v| v.0)
}

/// A template value deserialized from JSON (see [`parse_json`]).
struct JsonValue(Value);

impl<'de> serde::Deserialize<'de> for JsonValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> serde::de::Visitor<'de> for JsonVisitor {
    type Value = JsonValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<JsonValue, E> {
        Ok(JsonValue(Value::from(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<JsonValue, E> {
        Ok(JsonValue(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<JsonValue, E> {
        Ok(JsonValue(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<JsonValue, E> {
        Ok(JsonValue(Value::from(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<JsonValue, E> {
        Ok(JsonValue(Value::from(v)))
    }
    fn visit_string<E>(self, v: String) -> Result<JsonValue, E> {
        Ok(JsonValue(Value::from(v)))
    }
    fn visit_unit<E>(self) -> Result<JsonValue, E> {
        Ok(JsonValue(Value::from(())))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsonValue, A::Error> {
        let mut items = Vec::new();
        while let Some(JsonValue(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(JsonValue(Value::from(items)))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsonValue, A::Error> {
        // A repeated key keeps its first position and its last value, like a Python dict.
        let mut pairs: Vec<(String, Value)> = Vec::new();
        while let Some((k, JsonValue(v))) = map.next_entry::<String, JsonValue>()? {
            pairs.push((k, v));
        }
        Ok(JsonValue(Value::from_pairs(pairs)))
    }
}

/// The (key, value) pairs of a map value, in order.
fn map_pairs(v: &Value) -> Vec<(Value, Value)> {
    match v.try_iter() {
        Ok(keys) => keys.map(|k| (k.clone(), v.get_item(&k).unwrap_or_default())).collect(),
        Err(_) => Vec::new(),
    }
}

/// `v[key]` when `v` is a map that has it (and it is not `null`).
fn field(v: &Value, key: &str) -> Option<Value> {
    if v.kind() != ValueKind::Map {
        return None;
    }
    v.get_attr(key).ok().filter(|x| !x.is_undefined() && !x.is_none())
}

// ---------------------------------------------------------------------------------------------
// Python's json.dumps and float repr

/// Python's `repr(float)`: the shortest digits that round-trip, in scientific notation when the
/// exponent is below -4 or at least 16 (`1e-05`, `1.5e+16`), else positional with a `.0` for
/// whole numbers.
pub fn py_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf".into() } else { "inf".into() };
    }
    let sci = format!("{v:e}"); // shortest round-trip digits: "1.5e-7", "1e16", "-0e0"
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    if (-4..16).contains(&exp) {
        let mut s = v.to_string();
        if !s.contains('.') {
            s.push_str(".0");
        }
        s
    } else {
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// The options of Python's `json.dumps` that transformers' `tojson` passes on.
#[derive(Clone, Debug)]
pub struct DumpOptions {
    /// `None`: one line. `Some(s)`: one item per line, `s` repeated per level.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
    /// Escape everything outside ASCII as `\uXXXX` (transformers' default: false).
    pub ensure_ascii: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
            ensure_ascii: false,
        }
    }
}

/// `json.dumps(value, …)` as Python writes it.
pub fn py_json(value: &Value, opts: &DumpOptions) -> Result<String, Error> {
    let mut out = String::new();
    dump(value, opts, 0, &mut out)?;
    Ok(out)
}

fn dump_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && (c as u32) > 0x7e) => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn dump(v: &Value, o: &DumpOptions, level: usize, out: &mut String) -> Result<(), Error> {
    let newline = |out: &mut String, level: usize| {
        if let Some(ind) = &o.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    };
    match v.kind() {
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "Object of type Undefined is not JSON serializable",
            ));
        }
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => {
            let f = f64::try_from(v.clone())?;
            out.push_str(&if f.is_nan() {
                "NaN".to_string()
            } else if f.is_infinite() {
                if f < 0.0 { "-Infinity" } else { "Infinity" }.to_string()
            } else {
                py_float_repr(f)
            })
        }
        ValueKind::String => dump_str(v.as_str().unwrap_or_default(), o.ensure_ascii, out),
        ValueKind::Seq => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_separator);
                }
                newline(out, level + 1);
                dump(item, o, level + 1, out)?;
            }
            newline(out, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut pairs = map_pairs(v);
            if pairs.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            // Python converts non-string keys: True → "true", None → "null", 1.5 → "1.5".
            let key_text = |k: &Value| -> Result<String, Error> {
                Ok(match k.kind() {
                    ValueKind::String => k.as_str().unwrap_or_default().to_string(),
                    ValueKind::None => "null".into(),
                    ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
                    ValueKind::Number => {
                        let mut s = String::new();
                        dump(k, o, 0, &mut s)?;
                        s
                    }
                    kind => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!("keys must be str, int, float, bool or None, not {kind}"),
                        ))
                    }
                })
            };
            let mut keyed = pairs
                .drain(..)
                .map(|(k, v)| Ok((key_text(&k)?, v)))
                .collect::<Result<Vec<_>, Error>>()?;
            if o.sort_keys {
                keyed.sort_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (i, (k, item)) in keyed.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_separator);
                }
                newline(out, level + 1);
                dump_str(k, o.ensure_ascii, out);
                out.push_str(&o.key_separator);
                dump(item, o, level + 1, out)?;
            }
            newline(out, level);
            out.push('}');
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {kind} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

/// The `tojson` filter: `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`
/// (`sort_keys` by keyword only: minijinja filters take at most five arguments).
fn tojson_filter(
    value: &Value,
    ensure_ascii: Option<bool>,
    indent: Option<Value>,
    separators: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let ensure_ascii = kwargs
        .get::<Option<bool>>("ensure_ascii")?
        .or(ensure_ascii)
        .unwrap_or(false);
    let indent = kwargs
        .get::<Option<Value>>("indent")?
        .or(indent)
        .filter(|v| !v.is_none());
    let separators = kwargs
        .get::<Option<Value>>("separators")?
        .or(separators)
        .filter(|v| !v.is_none());
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
        Some(v) => Some(" ".repeat(i64::try_from(v)?.max(0) as usize)),
    };
    // Python's defaults: no spaces after ',' when indenting.
    let (item_separator, key_separator) = match separators {
        Some(s) => {
            let parts: Vec<Value> = s.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    (a.as_str().unwrap().to_string(), b.as_str().unwrap().to_string())
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "separators must be a pair of strings",
                    ))
                }
            }
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let opts = DumpOptions {
        indent,
        item_separator,
        key_separator,
        sort_keys,
        ensure_ascii,
    };
    Ok(Value::from_safe_string(py_json(value, &opts)?))
}

/// Python's `str(v)`, what jinja2 prints for `{{ v }}` and `v | string`: strings as they are,
/// everything else as [`py_repr`].
pub fn py_str(v: &Value) -> String {
    match v.as_str() {
        Some(s) if v.kind() == ValueKind::String => s.to_string(),
        _ => py_repr(v),
    }
}

/// Python's `repr(v)` for the values JSON gives: `None`, `True`, `1`, `1.0`, `'text'`,
/// `[1, 'a']`, `{'k': 'v'}`. Other values print as minijinja prints them.
pub fn py_repr(v: &Value) -> String {
    match v.kind() {
        ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number if !v.is_integer() => f64::try_from(v.clone())
            .map(py_float_repr)
            .unwrap_or_else(|_| v.to_string()),
        ValueKind::String => py_repr_str(v.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            let items: Vec<String> = v
                .try_iter()
                .map(|it| it.map(|x| py_repr(&x)).collect())
                .unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let items: Vec<String> = map_pairs(v)
                .iter()
                .map(|(k, x)| format!("{}: {}", py_repr(k), py_repr(x)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        _ => v.to_string(),
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`; control characters escaped.
fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

// ---------------------------------------------------------------------------------------------
// Templates

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    pub builtin: bool,
    /// Renders `content` given as a list of parts (`[{type: 'text', text}]`) itself; otherwise
    /// text parts are joined into one string before rendering.
    pub renders_content_parts: bool,
}

/// What a template is rendered with.
#[derive(Clone, Debug, Default)]
pub struct ChatInput {
    /// `[{role, content, reasoning_content?, tool_calls?, …}]`.
    pub messages: Value,
    /// Tool definitions (OpenAI shape) or none.
    pub tools: Option<Value>,
    pub add_generation_prompt: bool,
    /// `None` leaves the template's default (thinking on for Qwen3.5).
    pub enable_thinking: Option<bool>,
    /// More template variables (`chat_template_kwargs` of OpenAI-compatible servers).
    pub kwargs: Vec<(String, Value)>,
    pub bos_token: String,
    pub eos_token: String,
}

impl ChatInput {
    /// Reads an OpenAI-shaped request: `{messages, tools?, add_generation_prompt? (default true),
    /// enable_thinking?, chat_template_kwargs?}` (other fields are ignored). The messages are
    /// checked and prepared for `template` (see [`prepare_messages`]).
    pub fn from_request_json(text: &str, template: &ChatTemplate) -> Result<ChatInput, ChatError> {
        let req = parse_json(text).map_err(|e| ChatError::Request(format!("the request is not valid JSON: {e}")))?;
        if req.kind() != ValueKind::Map {
            return Err(ChatError::Request("the request must be a JSON object".into()));
        }
        let messages = field(&req, "messages").ok_or_else(|| ChatError::Request("messages must be an array".into()))?;
        let flag = |k: &str| -> Result<Option<bool>, ChatError> {
            match field(&req, k) {
                None => Ok(None),
                Some(v) if v.kind() == ValueKind::Bool => Ok(Some(v.is_true())),
                Some(_) => Err(ChatError::Request(format!("{k} must be true or false"))),
            }
        };
        let mut kwargs = Vec::new();
        if let Some(kw) = field(&req, "chat_template_kwargs") {
            if kw.kind() != ValueKind::Map {
                return Err(ChatError::Request("chat_template_kwargs must be an object".into()));
            }
            for (k, v) in map_pairs(&kw) {
                kwargs.push((k.as_str().unwrap_or_default().to_string(), v));
            }
        }
        let tools = field(&req, "tools");
        if let Some(t) = &tools {
            if t.kind() != ValueKind::Seq {
                return Err(ChatError::Request("tools must be an array".into()));
            }
        }
        Ok(ChatInput {
            messages: prepare_messages(&messages, template.renders_content_parts)?,
            tools,
            add_generation_prompt: flag("add_generation_prompt")?.unwrap_or(true),
            enable_thinking: flag("enable_thinking")?,
            kwargs,
            ..Default::default()
        })
    }
}

/// Checks OpenAI-shaped messages and makes them renderable, changing only what templates cannot
/// take as OpenAI clients send it:
/// - `content: null` (or none) → `''`; text parts joined into one string unless `keep_parts`;
///   other parts (images, audio) are refused: this engine reads text only;
/// - `reasoning_content: null`, `tool_calls: null` → removed;
/// - tool-call `function.arguments` given as a JSON string → the parsed value (`''` → `{}`).
pub fn prepare_messages(messages: &Value, keep_parts: bool) -> Result<Value, ChatError> {
    // An empty list goes through: the template says what it thinks of it (as in transformers).
    let list: Vec<Value> = match messages.kind() {
        ValueKind::Seq => messages.try_iter().map(|it| it.collect()).unwrap_or_default(),
        _ => return Err(ChatError::Request("messages must be an array".into())),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        if m.kind() != ValueKind::Map || field(m, "role").and_then(|r| r.as_str().map(str::to_string)).is_none() {
            return Err(ChatError::Request(format!("messages[{i}] needs a role (a string)")));
        }
        let mut pairs = Vec::new();
        let mut has_content = false;
        for (k, v) in map_pairs(m) {
            let key = k.as_str().unwrap_or_default();
            match key {
                "content" => {
                    has_content = true;
                    pairs.push((
                        k,
                        prepare_content(&v, keep_parts)
                            .map_err(|e| ChatError::Request(format!("messages[{i}].content: {e}")))?,
                    ));
                }
                "reasoning_content" | "tool_calls" if v.is_none() => {}
                "tool_calls" if v.kind() == ValueKind::Seq => {
                    let calls = v.try_iter().map(|it| it.collect::<Vec<_>>()).unwrap_or_default();
                    let calls = calls
                        .iter()
                        .enumerate()
                        .map(|(j, c)| {
                            prepare_tool_call(c)
                                .map_err(|e| ChatError::Request(format!("messages[{i}].tool_calls[{j}]: {e}")))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    pairs.push((k, Value::from(calls)));
                }
                _ => pairs.push((k, v)),
            }
        }
        if !has_content {
            pairs.push((Value::from("content"), Value::from("")));
        }
        out.push(Value::from_pairs(pairs));
    }
    Ok(Value::from(out))
}

fn prepare_content(v: &Value, keep_parts: bool) -> Result<Value, String> {
    if v.is_none() || v.is_undefined() {
        return Ok(Value::from(""));
    }
    if v.kind() != ValueKind::Seq {
        return Ok(v.clone()); // a string, or something the template may refuse itself
    }
    let parts: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
    let mut text = String::new();
    for p in &parts {
        let ty = field(p, "type").and_then(|t| t.as_str().map(str::to_string));
        match (ty.as_deref(), field(p, "text")) {
            (Some("text") | None, Some(t)) if t.as_str().is_some() => text.push_str(t.as_str().unwrap()),
            (Some(other), _) if other != "text" => {
                return Err(format!("content part type '{other}' is not supported (text only)"))
            }
            _ => return Err("a content part needs {type: 'text', text: string}".into()),
        }
    }
    Ok(if keep_parts { v.clone() } else { Value::from(text) })
}

fn prepare_tool_call(call: &Value) -> Result<Value, String> {
    let Some(function) = field(call, "function") else {
        return Ok(call.clone());
    };
    let args = match field(&function, "arguments") {
        Some(a) if a.kind() == ValueKind::String => a.as_str().unwrap_or_default().to_string(),
        _ => return Ok(call.clone()),
    };
    let parsed = if args.trim().is_empty() {
        Value::from_pairs(Vec::<(String, Value)>::new())
    } else {
        parse_json(&args).map_err(|e| format!("function.arguments is not valid JSON ({e})"))?
    };
    let function = Value::from_pairs(map_pairs(&function).into_iter().map(|(k, v)| {
        if k.as_str() == Some("arguments") {
            (k, parsed.clone())
        } else {
            (k, v)
        }
    }));
    Ok(Value::from_pairs(map_pairs(call).into_iter().map(|(k, v)| {
        if k.as_str() == Some("function") {
            (k, function.clone())
        } else {
            (k, v)
        }
    })))
}

impl ChatTemplate {
    /// Compiles `source`, or the built-in ChatML when `source` is `None`.
    pub fn new(source: Option<&str>) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |_fmt: String| -> Value { Value::from("") });
        env.add_filter("tojson", tojson_filter);
        // jinja2's tests: strings, lists, dicts (and undefined) are iterable and sequences; none is neither.
        let python_iterable = |v: &Value| {
            matches!(
                v.kind(),
                ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Undefined
            )
        };
        env.add_test("iterable", python_iterable);
        env.add_test("sequence", python_iterable);
        // Values print as Python's str() prints them, in `{{ x }}` and through `x | string`.
        env.add_filter("string", |v: &Value| -> Value {
            match v.kind() {
                ValueKind::String => v.clone(),
                ValueKind::Undefined => Value::from(""),
                _ => Value::from(py_str(v)),
            }
        });
        env.set_formatter(|out, state, v| {
            if v.is_undefined() || v.kind() == ValueKind::String || v.is_safe() {
                return minijinja::escape_formatter(out, state, v);
            }
            out.write_str(&py_str(v)).map_err(Error::from)
        });
        // Hugging Face renders chat templates with trim_blocks and lstrip_blocks on.
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build();
        env.set_syntax(syntax.map_err(|e| ChatError::Syntax(e.to_string()))?);
        let builtin = source.is_none();
        env.add_template_owned("chat", source.unwrap_or(BUILTIN_CHATML).to_string())
            .map_err(|e| ChatError::Syntax(e.to_string()))?;
        let mut t = ChatTemplate {
            env,
            builtin,
            renders_content_parts: false,
        };
        t.renders_content_parts = t.probe_content_parts();
        Ok(t)
    }

    /// Does the template render `content` given as text parts (`[{type: 'text', text}]`)?
    fn probe_content_parts(&self) -> bool {
        const PROBE: &str = "\u{1}clef-probe\u{1}";
        let part = Value::from_pairs([("type", Value::from("text")), ("text", Value::from(PROBE))]);
        let msg = Value::from_pairs([("role", Value::from("user")), ("content", Value::from(vec![part]))]);
        let input = ChatInput {
            messages: Value::from(vec![msg]),
            add_generation_prompt: true,
            ..Default::default()
        };
        self.render(&input).map(|s| s.contains(PROBE)).unwrap_or(false)
    }

    /// Renders an OpenAI-shaped request given as JSON text (see [`ChatInput::from_request_json`]).
    pub fn render_request(&self, request_json: &str, bos_token: &str, eos_token: &str) -> Result<String, ChatError> {
        let mut input = ChatInput::from_request_json(request_json, self)?;
        input.bos_token = bos_token.to_string();
        input.eos_token = eos_token.to_string();
        self.render(&input)
    }

    /// Renders with the variables transformers passes: `messages`, `tools` (none when absent),
    /// `documents` (none), `add_generation_prompt`, the special tokens, then `enable_thinking` and
    /// the other kwargs.
    pub fn render(&self, input: &ChatInput) -> Result<String, ChatError> {
        let tmpl = self.env.get_template("chat").map_err(|e| render_error(&e))?;
        let mut ctx: Vec<(String, Value)> = vec![
            ("messages".into(), input.messages.clone()),
            ("tools".into(), input.tools.clone().unwrap_or(Value::from(()))),
            ("documents".into(), Value::from(())),
            ("add_generation_prompt".into(), Value::from(input.add_generation_prompt)),
            ("bos_token".into(), Value::from(input.bos_token.clone())),
            ("eos_token".into(), Value::from(input.eos_token.clone())),
        ];
        if let Some(e) = input.enable_thinking {
            ctx.push(("enable_thinking".into(), Value::from(e)));
        }
        ctx.extend(input.kwargs.iter().cloned());
        tmpl.render(Value::from_pairs(ctx)).map_err(|e| render_error(&e))
    }
}

/// Builds a `messages` value from (role, content) pairs.
pub fn simple_messages(turns: &[(&str, &str)]) -> Value {
    Value::from(
        turns
            .iter()
            .map(|(r, c)| Value::from_pairs([("role", Value::from(*r)), ("content", Value::from(*c))]))
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn input(turns: &[(&str, &str)], think: Option<bool>) -> ChatInput {
        ChatInput {
            messages: simple_messages(turns),
            add_generation_prompt: true,
            enable_thinking: think,
            ..Default::default()
        }
    }

    #[test]
    fn builtin_chatml() {
        let t = ChatTemplate::new(None).unwrap();
        let s = t
            .render(&input(&[("system", "Be brief."), ("user", "Hi")], None))
            .unwrap();
        assert_eq!(
            s,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
        );
        let s = t.render(&input(&[("user", "Hi")], Some(false))).unwrap();
        assert!(s.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "{s}");
    }

    #[test]
    fn python_string_methods_and_errors() {
        let src = "{% for m in messages %}{% if m.content.startswith('/') %}{{ raise_exception('no commands') }}{% endif %}{{ m.content.split(' ')[0] | upper }}{{ m | tojson }}{% endfor %}";
        let t = ChatTemplate::new(Some(src)).unwrap();
        assert!(t
            .render(&input(&[("user", "hello world")], None))
            .unwrap()
            .starts_with("HELLO{"));
        let e = t.render(&input(&[("user", "/cmd")], None)).unwrap_err();
        assert_eq!(e, ChatError::Raised("no commands".into()));
        assert_eq!(e.code(), "template");
        assert!(matches!(
            ChatTemplate::new(Some("{% for %}")),
            Err(ChatError::Syntax(_))
        ));
    }

    #[test]
    fn python_float_repr() {
        for (v, s) in [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345e300, "1.2345e+300"),
            (123456789.125, "123456789.125"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(py_float_repr(v), s, "{v}");
        }
    }

    #[test]
    fn json_keeps_order_and_number_kinds() {
        let v = parse_json(r#"{"z": 1, "a": 1.0, "m": [true, null, "<&'>"], "big": 18446744073709551615, "neg": -3}"#)
            .unwrap();
        let opts = DumpOptions::default();
        assert_eq!(
            py_json(&v, &opts).unwrap(),
            r#"{"z": 1, "a": 1.0, "m": [true, null, "<&'>"], "big": 18446744073709551615, "neg": -3}"#
        );
        let pretty = DumpOptions {
            indent: Some("  ".into()),
            item_separator: ",".into(),
            ..opts.clone()
        };
        assert_eq!(
            py_json(&parse_json(r#"{"a": [1, {}], "b": []}"#).unwrap(), &pretty).unwrap(),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"
        );
        let ascii = DumpOptions {
            ensure_ascii: true,
            ..opts
        };
        assert_eq!(
            py_json(&Value::from("é😀\u{1}\u{7f}"), &ascii).unwrap(),
            r#""\u00e9\ud83d\ude00\u0001\u007f""#
        );
        assert_eq!(
            py_json(&Value::from("é\u{7f}"), &DumpOptions::default()).unwrap(),
            "\"é\u{7f}\""
        );
    }

    #[test]
    fn string_arguments_are_parsed_and_bad_ones_refused() {
        let t = ChatTemplate::new(Some("{% for m in messages %}{% for c in m.tool_calls or [] %}{% for k, v in c.function.arguments|items %}{{ k }}={{ v }};{% endfor %}{% endfor %}{% endfor %}")).unwrap();
        let req = r#"{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 2.0, \"a\": \"x\"}"}}]}]}"#;
        assert_eq!(t.render_request(req, "", "").unwrap(), "b=2.0;a=x;");
        let bad = r#"{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]}"#;
        let e = t.render_request(bad, "", "").unwrap_err();
        assert_eq!(e.code(), "bad_request");
        assert!(e.to_string().contains("messages[0].tool_calls[0]"), "{e}");
        for bad in [
            "[]",
            "{}",
            r#"{"messages": {}}"#,
            r#"{"messages": [{"content": "x"}]}"#,
            r#"{"messages": [], "tools": {}}"#,
            "{oops",
        ] {
            assert_eq!(
                t.render_request(bad, "", "").unwrap_err().code(),
                "bad_request",
                "{bad}"
            );
        }
    }

    #[test]
    fn content_parts_kept_or_joined() {
        let joins = ChatTemplate::new(Some(
            "{% for m in messages %}{{ m.role + ':' + m.content }}{% endfor %}",
        ))
        .unwrap();
        assert!(!joins.renders_content_parts);
        let req = r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}"#;
        assert_eq!(joins.render_request(req, "", "").unwrap(), "user:ab");
        let parts = ChatTemplate::new(Some(
            "{% for m in messages %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endfor %}",
        ))
        .unwrap();
        assert!(parts.renders_content_parts);
        assert_eq!(parts.render_request(req, "", "").unwrap(), "[a][b]");
        let img = r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}"#;
        let e = parts.render_request(img, "", "").unwrap_err();
        assert_eq!(e.code(), "bad_request");
        assert!(e.to_string().contains("image_url"), "{e}");
    }
}
