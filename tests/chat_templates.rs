//! Chat templates rendered as transformers renders them: every case of tests/chat/reference.json
//! (written by tests/chat/reference.py with jinja2, the way transformers' apply_chat_template
//! renders) through our renderer, compared byte for byte. Templates: the real Qwen3.5 and
//! Qwen3-Coder templates from ../shared/fixtures/chat-templates, and small ones for Python's
//! conventions (tojson options, printed values, loop adjacency, string methods).
//! Runs native and on wasm32 (tests/run.sh): the inputs are compiled in.

use clef_web::chat::{ChatError, ChatTemplate};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn reference() -> serde_json::Value {
    serde_json::from_str(include_str!("chat/reference.json")).unwrap()
}

fn template_source(reference: &serde_json::Value, name: &str) -> String {
    if let Some(src) = reference["inline_templates"][name].as_str() {
        return src.to_string();
    }
    match name {
        "Qwen3.5" => include_str!("../../shared/fixtures/chat-templates/Qwen3.5.jinja").to_string(),
        "Qwen3-Coder" => include_str!("../../shared/fixtures/chat-templates/Qwen3-Coder.jinja").to_string(),
        _ => panic!("unknown template {name}"),
    }
}

#[test]
fn renders_as_transformers() {
    let r = reference();
    let cases = r["cases"].as_array().unwrap();
    assert!(cases.len() >= 40);
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let template = ChatTemplate::new(Some(&template_source(&r, case["template"].as_str().unwrap()))).unwrap();
        let got = template.render_request(case["request"].as_str().unwrap(), "", "<|im_end|>");
        let want = &case["expected"];
        let ok = match (&got, want) {
            (Ok(text), w) if w["text"].is_string() => text == w["text"].as_str().unwrap(),
            (Err(ChatError::Raised(m)), w) if w["raised"].is_string() => m == w["raised"].as_str().unwrap(),
            (Err(e @ ChatError::Render(_)), w) if w["render_error"].is_string() => e.code() == "template",
            (Err(e @ ChatError::Request(_)), w) if w["bad_request"].is_string() => e.code() == "bad_request",
            _ => false,
        };
        if !ok {
            let got = match &got {
                Ok(t) => t.clone(),
                Err(e) => format!("{e:?}"),
            };
            failures.push(format!(
                "--- {name}\nwant: {want}\ngot:  {}",
                serde_json::Value::String(got)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from transformers:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn raised_errors_carry_the_templates_message() {
    let qwen = ChatTemplate::new(Some(&template_source(&reference(), "Qwen3.5"))).unwrap();
    let e = qwen
        .render_request(r#"{"messages": [{"role": "system", "content": "x"}]}"#, "", "")
        .unwrap_err();
    assert_eq!(e, ChatError::Raised("No user query found in messages.".into()));
    assert_eq!(
        (e.code(), e.to_string().as_str()),
        ("template", "No user query found in messages.")
    );
    // Not a raise_exception: a type error inside the template.
    let t = ChatTemplate::new(Some("{{ messages[0].content + 1 }}")).unwrap();
    let e = t
        .render_request(r#"{"messages": [{"role": "user", "content": "x"}]}"#, "", "")
        .unwrap_err();
    assert!(matches!(e, ChatError::Render(_)), "{e:?}");
    assert_eq!(e.code(), "template");
}
