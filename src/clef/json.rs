//! JSON for decision requests: an order-preserving parser and the two writers the decision path
//! needs, kept out of serde so the wasm stays small.
//!
//! * [`parse`] keeps object members in the order received (the server uses
//!   `nlohmann::ordered_json`: questions are answered in request order), refuses duplicate keys
//!   (an object with two `"route"` members has no single meaning), and keeps each number's source
//!   text next to its value, classified as llama.cpp's JSON library does: an integer literal that
//!   fits `i64` (or else `u64`) is an integer, anything else is a float.
//! * [`Value::write_tojson`] is llama.cpp's Jinja `tojson` (what the `systemone` template prints):
//!   compact, object keys in **byte order**, non-ASCII raw, control characters escaped, and floats
//!   as C++ `ostream` prints them — `%g`, six significant digits ([`format_g`]). We chose this over
//!   the Python reference's `repr` floats so that prompts are byte-identical to llama.cpp's (the
//!   oracle the fixtures come from): `1.0` renders as `1`, `3.14159265` as `3.14159`,
//!   `123456789.0` as `1.23457e+08`. Integers are exact.
//! * [`Value::write_original`] writes a value back as received (member order, number text), for
//!   values echoed in a response (a score's `legend`).

use std::fmt::Write;

/// A JSON value. Objects keep their members in source order.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

/// A JSON number: its source text and how llama.cpp's JSON library reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Number {
    pub text: String,
    pub value: NumberValue,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NumberValue {
    Int(i64),
    UInt(u64),
    Float(f64),
}

/// Deepest nesting the parser accepts (a guard against stack exhaustion; request validation
/// applies the much smaller limit of the decision API).
pub const MAX_PARSE_DEPTH: usize = 512;

/// A parse failure: what and where (byte offset).
#[derive(Clone, Debug, PartialEq)]
pub struct ParseError {
    pub offset: usize,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.message)
    }
}

/// Parses one JSON document (surrounding white space allowed, nothing else).
pub fn parse(text: &str) -> Result<Value, ParseError> {
    let mut p = Parser {
        b: text.as_bytes(),
        s: text,
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.b.len() {
        return Err(p.err("unexpected text after the JSON value"));
    }
    Ok(v)
}

struct Parser<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn err(&self, m: &str) -> ParseError {
        ParseError {
            offset: self.i,
            message: m.to_string(),
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, ParseError> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth > MAX_PARSE_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        match self.b.get(self.i) {
            None => Err(self.err("unexpected end of input")),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat(b']') {
                    return Ok(Value::Array(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(b']') {
                        return Ok(Value::Array(items));
                    }
                    if !self.eat(b',') {
                        return Err(self.err("expected ',' or ']'"));
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut members: Vec<(String, Value)> = Vec::new();
                self.ws();
                if self.eat(b'}') {
                    return Ok(Value::Object(members));
                }
                loop {
                    self.ws();
                    if self.b.get(self.i) != Some(&b'"') {
                        return Err(self.err("expected a string key"));
                    }
                    let key_at = self.i;
                    let key = self.string()?;
                    if members.iter().any(|(k, _)| *k == key) {
                        return Err(ParseError {
                            offset: key_at,
                            message: format!("duplicate key {}", crate::json::string(&key)),
                        });
                    }
                    self.ws();
                    if !self.eat(b':') {
                        return Err(self.err("expected ':'"));
                    }
                    self.ws();
                    let v = self.value(depth + 1)?;
                    members.push((key, v));
                    self.ws();
                    if self.eat(b'}') {
                        return Ok(Value::Object(members));
                    }
                    if !self.eat(b',') {
                        return Err(self.err("expected ',' or '}'"));
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.b.get(p.i).is_some_and(u8::is_ascii_digit) {
                p.i += 1;
            }
            p.i - s
        };
        self.eat(b'-');
        let int_start = self.i;
        let n_int = digits(self);
        if n_int == 0 || (n_int > 1 && self.b[int_start] == b'0') {
            return Err(self.err("invalid number"));
        }
        let mut is_float = false;
        if self.eat(b'.') {
            is_float = true;
            if digits(self) == 0 {
                return Err(self.err("invalid number: digits expected after '.'"));
            }
        }
        if self.eat(b'e') || self.eat(b'E') {
            is_float = true;
            let _ = self.eat(b'+') || self.eat(b'-');
            if digits(self) == 0 {
                return Err(self.err("invalid number: digits expected in the exponent"));
            }
        }
        let text = &self.s[start..self.i];
        let value = if is_float {
            None
        } else if let Ok(v) = text.parse::<i64>() {
            Some(NumberValue::Int(v))
        } else {
            text.parse::<u64>().ok().map(NumberValue::UInt)
        };
        let value = match value {
            Some(v) => v,
            None => {
                let f: f64 = text.parse().map_err(|_| self.err("invalid number"))?;
                if !f.is_finite() {
                    return Err(ParseError {
                        offset: start,
                        message: format!("number {text} is out of range"),
                    });
                }
                NumberValue::Float(f)
            }
        };
        Ok(Value::Number(Number {
            text: text.to_string(),
            value,
        }))
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let h = self
            .b
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("truncated \\u escape"))?;
        let s = std::str::from_utf8(h).map_err(|_| self.err("invalid \\u escape"))?;
        let v = u32::from_str_radix(s, 16).map_err(|_| self.err("invalid \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1; // opening quote
        let mut out = String::new();
        loop {
            // Copy the run of plain characters at once (the input is valid UTF-8).
            let run = self.i;
            while let Some(&c) = self.b.get(self.i) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.push_str(&self.s[run..self.i]);
            match self.b.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let e = *self.b.get(self.i).ok_or_else(|| self.err("unterminated string"))?;
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xD800..0xDC00).contains(&hi) {
                                if !(self.eat(b'\\') && self.eat(b'u')) {
                                    return Err(self.err("unpaired surrogate in \\u escape"));
                                }
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("unpaired surrogate in \\u escape"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(self.err("unpaired surrogate in \\u escape"));
                            } else {
                                hi
                            };
                            out.push(char::from_u32(cp).ok_or_else(|| self.err("invalid \\u escape"))?);
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in a string")),
            }
        }
    }
}

impl Value {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The JSON type's name, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }

    /// Nesting depth: 0 for a scalar, 1 + the deepest member for arrays and objects.
    pub fn depth(&self) -> usize {
        match self {
            Value::Array(a) => 1 + a.iter().map(Value::depth).max().unwrap_or(0),
            Value::Object(m) => 1 + m.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Bytes of string content (keys and values), for the request size limit.
    pub fn string_bytes(&self) -> usize {
        match self {
            Value::String(s) => s.len(),
            Value::Array(a) => a.iter().map(Value::string_bytes).sum(),
            Value::Object(m) => m.iter().map(|(k, v)| k.len() + v.string_bytes()).sum(),
            _ => 0,
        }
    }

    /// llama.cpp's Jinja `tojson(separators=[',', ':'])`: compact, keys byte-sorted, `%g` floats.
    pub fn write_tojson(&self, out: &mut String) {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => match n.value {
                NumberValue::Int(v) => {
                    let _ = write!(out, "{v}");
                }
                NumberValue::UInt(v) => {
                    let _ = write!(out, "{v}");
                }
                NumberValue::Float(v) => out.push_str(&format_g(v)),
            },
            Value::String(s) => write_string(s, out),
            Value::Array(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_tojson(out);
                }
                out.push(']');
            }
            Value::Object(m) => {
                let mut sorted: Vec<&(String, Value)> = m.iter().collect();
                sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                out.push('{');
                for (i, (k, v)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, out);
                    out.push(':');
                    v.write_tojson(out);
                }
                out.push('}');
            }
        }
    }

    /// Compact JSON with the members in received order and numbers as received.
    pub fn write_original(&self, out: &mut String) {
        match self {
            Value::Number(n) => out.push_str(&n.text),
            Value::Array(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_original(out);
                }
                out.push(']');
            }
            Value::Object(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, out);
                    out.push(':');
                    v.write_original(out);
                }
                out.push('}');
            }
            other => other.write_tojson(out),
        }
    }

    pub fn to_original(&self) -> String {
        let mut s = String::new();
        self.write_original(&mut s);
        s
    }

    pub fn to_tojson(&self) -> String {
        let mut s = String::new();
        self.write_tojson(&mut s);
        s
    }
}

/// A JSON string literal as llama.cpp (and Python's `json.dumps(ensure_ascii=False)`) write it:
/// `"` `\` and `\b \f \n \r \t` escaped, other bytes below 0x20 as `\u00xx`, everything else raw.
pub fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// C's `%g` (six significant digits; what a default C++ `ostream` prints for a double): fixed
/// notation when the decimal exponent X of the rounded value is in −4 ≤ X < 6, else
/// `d.ddddde±XX`; trailing zeros (and a bare point) removed. `-0.0` prints `-0`.
pub fn format_g(v: f64) -> String {
    const P: i32 = 6;
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    // Rust's `{:e}` rounds the exact binary value to P significant digits, as printf does.
    let sci = format!("{:.*e}", (P - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let x: i32 = exp.parse().expect("exponent");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..P).contains(&x) {
        trim(&format!("{:.*}", (P - 1 - x) as usize, v))
    } else {
        format!("{}e{}{:02}", trim(mantissa), if x < 0 { '-' } else { '+' }, x.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    #[allow(clippy::approx_constant)] // 3.14159265 is the spec's example value, not π
    fn g_format_matches_printf() {
        // The spec's table (llama.cpp column) and B6's values.
        let cases = [
            (1.0, "1"),
            (3.14159265, "3.14159"),
            (123456789.0, "1.23457e+08"),
            (1e-5, "1e-05"),
            (2.5e-7, "2.5e-07"),
            (1e16, "1e+16"),
            (-0.0, "-0"),
            (1.0 / 3.0, "0.333333"),
            (49.9, "49.9"),
            (19.0, "19"),
            (3.5, "3.5"),
            (999999.5, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (100000.0, "100000"),
            (-2.5, "-2.5"),
            (1e100, "1e+100"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g(v), want, "{v}");
        }
    }

    #[test]
    fn parse_keeps_order_and_numbers() {
        let v = parse(r#" {"b": 1, "a": [1.0, -0, 18446744073709551615, 1e400x]} "#);
        assert!(v.is_err(), "trailing garbage inside the array");
        let v = parse(r#"{"b": 1, "a": [1.0, -0, 18446744073709551615, 99999999999999999999, "\u00e9\ud83d\ude00"]}"#)
            .unwrap();
        let Value::Object(m) = &v else { panic!() };
        assert_eq!(m[0].0, "b");
        assert_eq!(m[1].0, "a");
        assert_eq!(v.to_tojson(), r#"{"a":[1,0,18446744073709551615,1e+20,"é😀"],"b":1}"#);
        assert_eq!(
            v.to_original(),
            r#"{"b":1,"a":[1.0,-0,18446744073709551615,99999999999999999999,"é😀"]}"#
        );
    }

    #[test]
    fn parse_errors() {
        for bad in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,}"#,
            "[01]",
            "\"\\ud800\"",
            "\"a\u{1}\"",
            "1e999",
            "",
            "nul",
            "[1] 2",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
        let deep = "[".repeat(MAX_PARSE_DEPTH + 2) + &"]".repeat(MAX_PARSE_DEPTH + 2);
        assert!(parse(&deep).is_err());
    }

    #[test]
    fn tojson_escapes_like_llama_cpp() {
        let v = Value::String("a\"b\\c\n\t\u{1}/\u{7f}é".into());
        assert_eq!(v.to_tojson(), "\"a\\\"b\\\\c\\n\\t\\u0001/\u{7f}é\"");
        // Byte order: uppercase before lowercase, é (0xC3…) after ASCII.
        let v = parse(r#"{"b":0,"é":0,"a":0,"B":0,"_x":0,"A":0}"#).unwrap();
        assert_eq!(v.to_tojson(), r#"{"A":0,"B":0,"_x":0,"a":0,"b":0,"é":0}"#);
    }
}
