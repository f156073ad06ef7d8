//! Constrained decoding (src/grammar.rs): every answer written under a JSON schema parses and
//! validates, every forced tool call parses back with typed, valid arguments — on the real 248k
//! Qwen3.5 vocabulary with random "garbage" walks, and on the tiny fixture model through the engine
//! (whole and split). Schemas the compiler cannot use are typed `bad_schema` errors.
#![cfg(not(target_arch = "wasm32"))]

use clef_web::cluster::Cluster;
use clef_web::engine::{Engine, FinishReason, GenParams};
use clef_web::grammar::{random_walk, GrammarError, GrammarVocab, OutputSpec};
use clef_web::model::Model;
use clef_web::sampler::SamplerParams;
use clef_web::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::OnceLock;

fn shared(p: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures").join(p)).unwrap()
}

fn tokenizer_of(bytes: &[u8]) -> Tokenizer {
    let h = clef_web::gguf::parse_header(bytes, Some(bytes.len() as u64)).unwrap();
    Tokenizer::from_gguf(&h).unwrap()
}

/// The real Qwen3.5 vocabulary (248,320 ids) and its grammar trie, built once.
fn real() -> &'static (Tokenizer, GrammarVocab) {
    static R: OnceLock<(Tokenizer, GrammarVocab)> = OnceLock::new();
    R.get_or_init(|| {
        let tok = tokenizer_of(&shared("tokenizer/qwen35-vocab.gguf"));
        let v = GrammarVocab::new(&tok).unwrap();
        (tok, v)
    })
}

fn schema_spec(s: &Value) -> OutputSpec {
    OutputSpec::from_json(&json!({"type": "json_schema", "schema": s}).to_string()).unwrap()
}

/// Schemas with nested objects, arrays (of objects), enums, required fields, bounded numbers.
/// Strings are bounded so that uniform random walks end.
fn schemas() -> Vec<Value> {
    vec![
        json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": -1, "maximum": 1},
            "role": {"enum": ["admin", "user", "guest"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
            "address": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 10},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": false},
            "active": {"type": "boolean"}},
            "required": ["name", "age", "role", "address", "active"], "additionalProperties": false}),
        json!({"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "object", "properties": {
            "id": {"type": "integer"}, "kind": {"type": "string", "enum": ["a", "b"]},
            "point": {"type": "array", "items": {"type": "number", "minimum": -1000, "maximum": 1000}, "minItems": 2, "maxItems": 2}},
            "required": ["id", "kind", "point"], "additionalProperties": false}}),
        // OpenAI "strict" style: $defs, every property required, nullable through anyOf.
        json!({"type": "object", "$defs": {"step": {"type": "object", "properties": {
                "explanation": {"type": "string", "maxLength": 8}, "output": {"type": "string", "maxLength": 8}},
                "required": ["explanation", "output"], "additionalProperties": false}},
            "properties": {"steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "maxItems": 2},
                "final_answer": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]}},
            "required": ["steps", "final_answer"], "additionalProperties": false}),
    ]
}

fn validate(schema: &Value, text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let validator = jsonschema::validator_for(schema).unwrap();
    if let Err(e) = validator.validate(&v) {
        panic!("{text} does not match the schema: {e}");
    }
}

#[test]
fn json_schema_walks_on_the_real_vocabulary_parse_and_validate() {
    let (tok, vocab) = real();
    let mut ms = Vec::new();
    for (si, schema) in schemas().iter().enumerate() {
        let mut ended = 0;
        for seed in 0..6 {
            let mut c = vocab.compile(&schema_spec(schema)).unwrap();
            let w = random_walk(&mut c, tok.n_vocab(), 1500, 100 * si as u64 + seed).unwrap();
            ms.extend(w.mask_ms);
            if w.ended {
                ended += 1;
                validate(schema, &tok.decode(&w.tokens, true));
            }
        }
        assert!(ended >= 4, "schema {si}: only {ended} of 6 walks ended");
    }
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    eprintln!("mask over {} ids: mean {mean:.3} ms over {} steps", tok.n_vocab(), ms.len());
    assert!(mean < 20.0, "mask mean {mean} ms");
}

/// Whether the grammar of `spec` takes `text` (the tokenizer's own split of it) and may end there.
fn accepts(spec: &OutputSpec, text: &str) -> bool {
    let (tok, vocab) = real();
    let mut c = vocab.compile(spec).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
    for t in tok.encode(text, false) {
        if !c.allowed().unwrap().is_allowed(t) {
            return false;
        }
        c.commit(t).unwrap();
    }
    c.allowed().unwrap().is_allowed(tok.eos().unwrap())
}

/// Every JSON number that can be generated is a finite double, every integer exact in JavaScript
/// (|x| <= 2^53 - 1): JSON's grammar alone allows `1e400` or 400 digits (Infinity once parsed).
#[test]
fn generated_numbers_are_finite_doubles() {
    let huge = "9".repeat(400);
    let cases: Vec<(OutputSpec, Vec<String>, Vec<String>)> = vec![
        (
            schema_spec(&json!({"type": "array", "items": {"type": "number"}})),
            vec!["[0,-12.5,42,9007199254740991,3.14159,-9007199254740991,0.000001]".into()],
            vec!["[1e400]".into(), "[1E+309]".into(), "[-2e308]".into(), "[1e5]".into(), format!("[{huge}]"), "[9007199254740992]".into()],
        ),
        (
            schema_spec(&json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})),
            vec![r#"{"n":9007199254740991}"#.into(), r#"{"n":-3,"extra":[1.5,{"x":2}]}"#.into()],
            vec![r#"{"n":12345678901234567890}"#.into(), r#"{"n":1,"extra":1e400}"#.into(), format!(r#"{{"n":1,"extra":[{huge}]}}"#)],
        ),
        // One bound given: the other side is bounded too (past it, plain digits would overflow).
        (
            schema_spec(&json!({"type": "array", "items": {"type": "number", "minimum": 0}})),
            vec!["[0.5,10,9007199254740991]".into()],
            vec![format!("[{huge}]"), "[-1]".into()],
        ),
        // A bound wider than the limit is narrowed to it.
        (schema_spec(&json!({"type": "number", "maximum": 1e300})), vec!["5".into(), "-7.25".into()], vec![format!("{huge}")]),
        // Any value (true / {}), json_object, untyped subschemas: numbers anywhere inside are finite.
        (schema_spec(&json!(true)), vec![r#"[1,{"a":null,"b":"1e400"},-0.5]"#.into()], vec!["1e400".into(), r#"[{"a":[1e999]}]"#.into()]),
        (
            OutputSpec::JsonObject,
            vec![r#"{"a":1.5,"b":[1,{"c":-2}],"d":"e","f":null,"g":true}"#.into()],
            vec![r#"{"a":1e400}"#.into(), r#"{"a":[{"b":1E999}]}"#.into(), format!(r#"{{"a":{huge}}}"#)],
        ),
        (
            schema_spec(&json!({"anyOf": [{"type": "string"}, {"description": "anything"}]})),
            vec!["12".into(), r#""1e400""#.into()],
            vec!["1e400".into()],
        ),
        // Intersections (allOf, a $ref beside other keywords) of places that allow any value.
        (
            schema_spec(&json!({"allOf": [{"type": "object"}, {"type": "object", "required": ["a"]}]})),
            vec![r#"{"a":{"b":[1,{"c":2.5}]}}"#.into()],
            vec![r#"{"a":1e400}"#.into(), r#"{"a":{"b":[1E999]}}"#.into()],
        ),
        (
            schema_spec(&json!({"$defs": {"o": {"type": "object"}}, "$ref": "#/$defs/o", "properties": {"p": {}}})),
            vec![r#"{"p":[1],"q":{}}"#.into()],
            vec![r#"{"p":1e400}"#.into(), r#"{"q":[1e400]}"#.into()],
        ),
        // Free-form values nest as deep as answers do (ANY_DEPTH = 12).
        (OutputSpec::JsonObject, vec![format!(r#"{{"a":{}1{}}}"#, "[".repeat(10), "]".repeat(10))], vec![]),
        // A forced tool call: parameters written as JSON (numbers, objects) follow the same limits.
        (
            OutputSpec::ToolCalls {
                tools: vec![json!({"type": "function", "function": {"name": "plot", "parameters": {"type": "object", "properties": {
                    "scale": {"type": "number"}, "point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
                    "required": ["scale", "point"]}}})],
                name: None,
                parallel: false,
            },
            vec!["plot>\n<parameter=scale>\n2.5\n</parameter>\n<parameter=point>\n{\"x\":-3}\n</parameter>\n</function>\n</tool_call>".into()],
            vec![
                "plot>\n<parameter=scale>\n1e400\n</parameter>\n<parameter=point>\n{\"x\":1}\n</parameter>\n</function>\n</tool_call>".into(),
                "plot>\n<parameter=scale>\n1\n</parameter>\n<parameter=point>\n{\"x\":1e400}\n</parameter>\n</function>\n</tool_call>".into(),
            ],
        ),
    ];
    for (spec, good, bad) in &cases {
        for t in good {
            assert!(accepts(spec, t), "{spec:?} refuses {t}");
        }
        for t in bad {
            assert!(!accepts(spec, t), "{spec:?} takes {t}");
        }
    }
    // Random writers: every number they end up with is finite.
    for (si, schema) in [json!({"type": "array", "items": {"type": "number"}, "maxItems": 5}), json!({"type": "array", "items": {"type": "integer"}, "maxItems": 5})].iter().enumerate() {
        let (tok, vocab) = real();
        for seed in 0..6 {
            let w = random_walk(&mut vocab.compile(&schema_spec(schema)).unwrap(), tok.n_vocab(), 400, 10 * si as u64 + seed).unwrap();
            if w.ended {
                let text = tok.decode(&w.tokens, true);
                let v: Vec<f64> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                assert!(v.iter().all(|x| x.is_finite() && x.abs() <= 9007199254740991.0), "{text}");
                validate(schema, &text);
            }
        }
    }
    // A bound past the other end of the range cannot be met: a typed error that says why.
    for bad in [json!({"type": "number", "minimum": 1e17}), json!({"type": "integer", "exclusiveMaximum": -1e20})] {
        match vocab_compile(&bad) {
            Err(e @ GrammarError::Schema(_)) => assert!(e.to_string().contains("past the numbers the engine generates"), "{e}"),
            other => panic!("{bad}: {:?}", other.err()),
        }
    }
}

fn vocab_compile(schema: &Value) -> Result<(), GrammarError> {
    real().1.compile(&schema_spec(schema)).map(|_| ())
}

#[test]
fn json_object_is_any_object() {
    let (tok, vocab) = real();
    let spec = OutputSpec::from_json(r#"{"type":"json_object"}"#).unwrap();
    let mut ended = 0;
    for seed in 0..12 {
        let w = random_walk(&mut vocab.compile(&spec).unwrap(), tok.n_vocab(), 300, seed).unwrap();
        let text = tok.decode(&w.tokens, true);
        assert!(text.starts_with('{'), "{text:?}");
        if w.ended {
            ended += 1;
            assert!(serde_json::from_str::<Value>(&text).unwrap().is_object(), "{text}");
        }
    }
    assert!(ended > 0);
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "when": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"},
            "opts": {"type": "object", "properties": {"hourly": {"type": "boolean"}, "n": {"type": "number", "minimum": 0, "maximum": 100}},
                     "required": ["hourly"], "additionalProperties": false}},
            "required": ["city", "days", "opts"]}}},
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
            "q": {"type": "string", "maxLength": 10}, "limit": {"type": "number"}, "exact": {"type": "boolean"}},
            "required": ["q"]}}}
    ])
}

/// Reads Qwen3.5 XML calls back the way www/src/toolcalls.ts does (values typed by the schema)
/// and checks each call's arguments against its tool's schema.
fn check_calls(text: &str, tools: &Value) -> usize {
    let mut n = 0;
    for call in text.split("<tool_call>\n<function=").filter(|c| !c.is_empty()) {
        let (name, rest) = call.split_once(">\n").unwrap_or_else(|| panic!("no function header: {text:?}"));
        let tool = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == name).unwrap_or_else(|| panic!("unknown tool {name}"));
        let params = &tool["function"]["parameters"];
        let body = rest.strip_suffix("</function>\n</tool_call>").or_else(|| rest.strip_suffix("</function>\n</tool_call>\n")).unwrap_or_else(|| panic!("unclosed call: {rest:?}"));
        let mut args = serde_json::Map::new();
        for p in body.split("<parameter=").filter(|p| !p.is_empty()) {
            let (pname, v) = p.split_once(">\n").unwrap();
            let v = v.strip_suffix("\n</parameter>\n").unwrap_or_else(|| panic!("unclosed parameter: {p:?}"));
            let ty = params["properties"][pname]["type"].as_str().unwrap_or("");
            let value = match ty {
                "string" => Value::String(v.to_string()),
                "boolean" => Value::Bool(v.eq_ignore_ascii_case("true")),
                _ => serde_json::from_str(v).unwrap_or_else(|e| panic!("{pname}: {v:?}: {e}")),
            };
            args.insert(pname.to_string(), value);
        }
        validate(params, &Value::Object(args).to_string());
        n += 1;
    }
    n
}

#[test]
fn forced_tool_calls_parse_with_valid_arguments() {
    let (tok, vocab) = real();
    let tools = tools();
    for (name, parallel) in [(None, false), (None, true), (Some("get_weather"), false)] {
        let spec = OutputSpec::ToolCalls { tools: tools.as_array().unwrap().clone(), name: name.map(str::to_string), parallel };
        let mut ended = 0;
        for seed in 0..8 {
            let w = random_walk(&mut vocab.compile(&spec).unwrap(), tok.n_vocab(), 1500, seed).unwrap();
            if !w.ended {
                continue;
            }
            ended += 1;
            // The prompt holds the call's start; the grammar writes the rest.
            let start = match name {
                Some(n) => format!("<tool_call>\n<function={n}>\n"),
                None => "<tool_call>\n<function=".to_string(),
            };
            let calls = check_calls(&format!("{start}{}", tok.decode(&w.tokens, true)), &tools);
            assert!(calls >= 1 && (parallel || calls == 1), "{calls} calls");
        }
        assert!(ended >= 5, "{name:?}: only {ended} of 8 walks ended");
    }
}

#[test]
fn schemas_that_cannot_be_compiled_are_typed_errors() {
    let (_, vocab) = real();
    for bad in [
        json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}}),
        json!({"type": 5}),
        json!({"type": "string", "pattern": "(?<=a)b"}),
        json!({"type": "integer", "minimum": 5, "maximum": 1}),
    ] {
        match vocab.compile(&schema_spec(&bad)) {
            Err(e @ GrammarError::Schema(_)) => assert_eq!(e.code(), "bad_schema"),
            Err(e) => panic!("{bad}: {e:?}"),
            Ok(_) => panic!("{bad} compiled"),
        }
    }
    for bad in [r#"{"type":"json_schema"}"#, r#"{"type":"xml"}"#, "{", r#"{"type":"tool_calls","tools":[]}"#] {
        let e = OutputSpec::from_json(bad).and_then(|s| vocab.compile(&s).map(|_| ()));
        assert!(matches!(e, Err(GrammarError::Schema(_))), "{bad}: {:?}", e.err());
    }
    let missing = OutputSpec::ToolCalls { tools: tools().as_array().unwrap().clone(), name: Some("nope".into()), parallel: false };
    assert!(matches!(vocab.compile(&missing), Err(GrammarError::Schema(m)) if m.contains("nope")));
}

/// The tiny random model writes garbage; under the grammar it is garbage that parses.
fn tiny() -> (Vec<u8>, Tokenizer) {
    let bytes = shared("qwen35-tiny/A-F32.gguf");
    let tok = tokenizer_of(&bytes);
    (bytes, tok)
}

fn sampled(seed: u64) -> GenParams {
    GenParams {
        sampler: SamplerParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed, ..Default::default() },
        max_tokens: 600,
        ..Default::default()
    }
}

const PROMPT: [u32; 18] = [8001, 846, 198, 3710, 369, 279, 6511, 314, 2776, 663, 30, 8002, 198, 8001, 389, 375, 505, 198];

#[test]
fn the_model_answers_follow_the_schema_through_the_engine() {
    let (bytes, tok) = tiny();
    let vocab = GrammarVocab::new(&tok).unwrap();
    let mut e = Engine::new(Model::from_bytes(&bytes).unwrap(), Some(tok), 1024).unwrap();
    for schema in schemas() {
        for seed in 0..3 {
            e.begin(&PROMPT, sampled(seed)).unwrap();
            e.constrain(vocab.compile(&schema_spec(&schema)).unwrap()).unwrap();
            let mut ids = Vec::new();
            let mut text = String::new();
            while let Some(p) = e.step().unwrap() {
                ids.push(p.token);
                text.push_str(&p.text);
            }
            text.push_str(&e.flush());
            let done = e.finish_reason();
            e.end_request();
            assert_eq!(done, Some(FinishReason::Stop), "seed {seed}: did not finish in 600 tokens: {text}");
            validate(&schema, &text);
        }
    }
    // Unconstrained, the same model's answer is not JSON: the constraint is what makes it parse.
    e.begin(&PROMPT, sampled(0)).unwrap();
    let mut text = String::new();
    while let Some(p) = e.step().unwrap() {
        text.push_str(&p.text);
        if text.len() > 200 {
            break;
        }
    }
    e.end_request();
    assert!(serde_json::from_str::<Value>(&text).is_err());
}

#[test]
fn split_engine_is_constrained_in_step_start() {
    let (bytes, tok) = tiny();
    let vocab = GrammarVocab::new(&tok).unwrap();
    let (m, mut c) = Cluster::from_bytes(&bytes, 2, 1024).unwrap();
    let mut e = Engine::new(m, Some(tok), 1024).unwrap();
    let schema = &schemas()[1];
    e.begin(&PROMPT, sampled(7)).unwrap();
    e.constrain(vocab.compile(&schema_spec(schema)).unwrap()).unwrap();
    while c.prefill(&mut e, 8).unwrap() > 0 {}
    let mut text = String::new();
    while let Some(p) = c.step(&mut e).unwrap() {
        text.push_str(&p.text);
    }
    text.push_str(&e.flush());
    assert_eq!(e.finish_reason(), Some(FinishReason::Stop), "{text}");
    e.end_request();
    validate(schema, &text);
}

#[test]
fn forced_tool_call_through_the_engine() {
    let (bytes, tok) = tiny();
    let vocab = GrammarVocab::new(&tok).unwrap();
    let prefix = tok.encode("<tool_call>\n<function=", true);
    let mut e = Engine::new(Model::from_bytes(&bytes).unwrap(), Some(tok), 1024).unwrap();
    let tools = tools();
    let mut prompt = PROMPT.to_vec();
    prompt.extend(&prefix);
    for seed in 0..4 {
        e.begin(&prompt, sampled(seed)).unwrap();
        let spec = OutputSpec::ToolCalls { tools: tools.as_array().unwrap().clone(), name: None, parallel: false };
        e.constrain(vocab.compile(&spec).unwrap()).unwrap();
        let mut text = String::new();
        while let Some(p) = e.step().unwrap() {
            text.push_str(&p.text);
        }
        text.push_str(&e.flush());
        assert_eq!(e.finish_reason(), Some(FinishReason::Stop), "{text}");
        e.end_request();
        assert_eq!(check_calls(&format!("<tool_call>\n<function={text}"), &tools), 1);
    }
}
