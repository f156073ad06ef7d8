//! Replays the fuzz targets' saved inputs through the targets' own code (`fuzz/src/lib.rs`), on
//! stable Rust and without libFuzzer: every reproducer a fuzzing run ever found
//! (`fuzz/regressions/<target>/`, kept as files) and a few hand-made edge cases. A crash found
//! once stays a failing test until it is fixed. Native only (the targets read fixtures from disk).
#![cfg(not(target_arch = "wasm32"))]

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod targets;

use std::fs;
use std::path::Path;

/// Runs `f` on every file of fuzz/regressions/<name>/ plus `extra`; returns how many inputs ran.
fn replay(name: &str, f: fn(&[u8]), extra: &[&[u8]]) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(name);
    let mut n = 0;
    for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let data = fs::read(e.path()).unwrap();
        eprintln!("{name}: {}", e.path().display());
        f(&data);
        n += 1;
    }
    for x in extra {
        f(x);
        n += 1;
    }
    n
}

fn fixture_prefix(file: &str, n: usize) -> Vec<u8> {
    let b = fs::read(targets::fixture(file)).unwrap();
    b[..n.min(b.len())].to_vec()
}

#[test]
fn gguf_header() {
    let head = fixture_prefix("qwen35-tiny/A-F32.gguf", 300_000);
    let mut flipped = head.clone();
    flipped[20] ^= 0x40; // the metadata count
    let cases: Vec<&[u8]> = vec![
        b"",
        b"GGUF",
        b"GGUF\x03\0\0\0",
        b"hello, this is text",
        &head,
        &head[..4096],
        &flipped,
    ];
    replay("gguf_header", targets::gguf_header, &cases);
}

#[test]
fn quant_kernels() {
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for id in 0u16..48 {
        for fill in [0x00u8, 0xff, 0x7c, 0x55] {
            let mut c = id.to_le_bytes().to_vec();
            c.push(fill % 8);
            c.extend(std::iter::repeat_n(fill, 4096));
            cases.push(c);
        }
    }
    let refs: Vec<&[u8]> = cases.iter().map(|c| c.as_slice()).collect();
    replay("quant_kernels", targets::quant_kernels, &refs);
}

#[test]
fn tokenizer() {
    let cases: Vec<&[u8]> = vec![
        b"\0",
        b"\0Hello, world!",
        b"\x01<|im_start|>user\nHi<|im_end|>",
        b"\0\xff\xfe\xc3(invalid \xe2\x82 utf-8",
        "\0数学 🎉 naïve \u{200b}  \t\n\n  spaces".as_bytes(),
        b"\x02\xff\xff\xff\xff\x00\x03\xc9\x7f",
    ];
    replay("tokenizer", targets::tokenizer, &cases);
}

#[test]
fn chat_template() {
    let cases: Vec<&[u8]> = vec![
        b"",
        b"\x01",
        b"\x01\x01\0Hi",
        b"\x03\x00\0sys\0\0\x01\0Hi\0\0\x02\0Hello\0thinking",
        b"\x09wizard\0Hi",
        b"\x11\x03\0{\"a\":1}\0\0\x01\0q",
        b"\x05\x02\0only an assistant",
    ];
    replay("chat_template", targets::chat_template, &cases);
}

#[test]
fn decide_request() {
    // The fixture's requests (valid ones and the recorded error cases), written back as JSON.
    let text = fs::read_to_string(targets::fixture("clef/A/requests.json")).unwrap();
    let doc = clef_web::clef::json::parse(&text).unwrap();
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for list in ["cases", "error_cases"] {
        let Some(clef_web::clef::json::Value::Array(cases)) = doc.get(list) else { panic!("{list}") };
        for c in cases {
            bodies.push(c.get("request").unwrap().to_original().into_bytes());
        }
    }
    assert!(bodies.len() >= 10);
    let q = r#""questions":{"q":{"type":"noul","instructions":"x?"}}"#;
    let hand: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"\xff\xfe{}".to_vec(),
        format!(r#"{{"state":"s",{q}}}"#).into_bytes(),
        format!(r#"{{"state":{{"a<<clef:sep>><<clef:option>>b":1}},{q}}}"#).into_bytes(),
        format!(r#"{{"state":"<<clef:question>>",{q}}}"#).into_bytes(),
        format!(r#"{{"state":"s","state":"t",{q}}}"#).into_bytes(),
        r#"{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":[1,2,3,4,5,6,7,8,9,10,11]}}}"#.into(),
        r#"{"state":"s","questions":{"q":{"type":"choice","instructions":" ","criteria":{"":null}}}}"#.into(),
        r#"{"state":1e999,"questions":{"q":{"type":"choice","instructions":["\u0000"],"criteria":{"b":-0,"a":1.5e-7}}}}"#.into(),
    ];
    let refs: Vec<&[u8]> = bodies.iter().chain(&hand).map(|b| b.as_slice()).collect();
    replay("decide_request", targets::decide_request, &refs);
}
