//! The fuzz targets' bodies: each takes arbitrary bytes, drives one parser or kernel of clef-web
//! with them, and panics only on a real defect (a panic inside clef-web, or a broken invariant
//! checked here). `fuzz_targets/*.rs` hand libFuzzer's input to these; `tests/fuzz_regressions.rs`
//! (in the main crate) replays the saved reproducers and seeds through the same functions, so a
//! crash found once stays a test.
//!
//! | target          | what                                                                 |
//! |-----------------|----------------------------------------------------------------------|
//! | `gguf_header`   | `gguf::parse_header` (with and without the file size) → `Config`     |
//! | `quant_kernels` | every block type's `dequantize`, `vec_dot_ref`, `vec_dot`, `decode`  |
//! | `tokenizer`     | the real 248k Qwen3.5 tokenizer on arbitrary (also invalid) UTF-8    |
//! | `chat_template` | the Qwen3.5 template and the built-in ChatML on arbitrary messages   |
//! | `decide_request`| a decision request body → `parse_request` → render → tokens and tags |
//!
//! Natively `vec_dot` and `decode` are the scalar references (the SIMD128 kernels are wasm-only and
//! are checked against the references by `tests/kernels.rs` and the in-browser self-test).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use clef_web::chat::{ChatInput, ChatTemplate};
use clef_web::clef::json;
use clef_web::clef::request::{self, QuestionType, Template, MAX_QUESTIONS, TAG_NONE, TAG_OPTION};
use clef_web::clef::{parse_request, DecisionError};
use clef_web::gguf::parse_header;
use clef_web::model::Config;
use clef_web::quant::gemm::Decoded;
use clef_web::quant::{kernels, quantize_q8, GgmlType, QAct};
use clef_web::tokenizer::{StreamDecoder, Tokenizer};
use minijinja::Value;
use unicode_normalization::UnicodeNormalization;

/// Test data beside the repository (`../shared/fixtures`), from the fuzz crate or the main crate.
pub fn fixture(rel: &str) -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let up = if dir.ends_with("/fuzz") { "../.." } else { ".." };
    format!("{dir}/{up}/shared/fixtures/{rel}")
}

// ---- gguf_header ---------------------------------------------------------------------------------

/// The GGUF reader on arbitrary bytes: as a whole file, and as a prefix of a larger one.
pub fn gguf_header(data: &[u8]) {
    for size in [Some(data.len() as u64), None, Some(data.len() as u64 * 2 + 4096)] {
        if let Ok(h) = parse_header(data, size) {
            // A header that parses must be internally consistent enough for the model config.
            let _ = Config::from_header(&h);
            let Some(size) = size else { continue };
            // Every tensor lies inside the file. The data section starts within it, except in a
            // file without tensors, whose final padding may be missing (`Header::file_size`).
            for t in &h.tensors {
                assert!(h.tensor_range(t).end <= size, "tensor {} beyond the file", t.name);
            }
            assert!(
                h.data_offset <= size || (h.tensors.is_empty() && h.data_offset - size < h.alignment),
                "data offset {} beyond the file ({size} bytes)",
                h.data_offset
            );
        }
    }
}

// ---- quant_kernels -------------------------------------------------------------------------------

/// Input: ggml type id (u16 LE), a block count byte, then the row's bytes (zero-padded).
/// Every decoder and dot product runs on the row; references and fast paths must agree.
pub fn quant_kernels(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let Some(ty) = GgmlType::from_id(u16::from_le_bytes([data[0], data[1]]) as u32) else {
        return;
    };
    let Some(k) = kernels(ty) else { return };
    let rest = &data[3..];
    // Rows of 1..=8 blocks, and at least 256 elements for the Q8_K activations of the k-quants.
    let per = (256 / ty.block_elems()).max(1);
    let nb = per * (1 + (data[2] as usize % 8));
    let n = nb * ty.block_elems();
    let mut row = vec![0u8; nb * ty.block_bytes()];
    let m = row.len().min(rest.len());
    row[..m].copy_from_slice(&rest[..m]);

    // Activations: finite values drawn from the input, quantized the way the engine does.
    let x: Vec<f32> = (0..n)
        .map(|i| {
            rest.get(i % rest.len().max(1))
                .map_or(0.5, |&b| (b as i8) as f32 * 0.37 + 0.01)
        })
        .collect();
    let mut act = QAct::default();
    quantize_q8(ty.act_kind(), &x, n, &mut act);
    let a = act.row(0);

    let mut w = vec![0f32; n];
    (k.dequantize)(&row, &mut w);
    let reference = (k.vec_dot_ref)(&row, a);
    let fast = (k.vec_dot)(&row, a);
    // Non-finite fp16 scales give non-finite weights; both dot products then say so alike.
    assert_eq!(
        reference.is_finite(),
        fast.is_finite(),
        "{ty}: vec_dot {fast} vs vec_dot_ref {reference}"
    );
    if reference.is_finite() && w.iter().all(|v| v.is_finite()) {
        let scale: f64 = (0..n).map(|i| (w[i] as f64 * a.value(i) as f64).abs()).sum::<f64>() + 1e-30;
        let err = (fast as f64 - reference as f64).abs() / scale;
        assert!(
            err < 1e-5,
            "{ty}: vec_dot {fast} vs vec_dot_ref {reference} (rel {err:e})"
        );
    }

    let (mut d_ref, mut d_fast) = (Decoded::default(), Decoded::default());
    d_ref.resize(ty, n);
    d_fast.resize(ty, n);
    (k.decode_ref)(&row, &mut d_ref);
    (k.decode)(&row, &mut d_fast);
    assert_eq!(d_ref.q, d_fast.q, "{ty}: decode q");
    assert_eq!(d_ref.mn, d_fast.mn, "{ty}: decode mins");
    for (x, y) in d_ref.d.iter().chain(&d_ref.m).zip(d_fast.d.iter().chain(&d_fast.m)) {
        assert!(
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            "{ty}: decode scale {x} vs {y}"
        );
    }
    // The decoded form reproduces the reference dequantiser for every finite weight (0 = −0).
    let kb = ty.gemm_block();
    if d_ref.d.iter().chain(&d_ref.m).all(|s| s.is_finite()) {
        for (i, &v) in w.iter().enumerate() {
            let u = d_ref.value(kb, i);
            assert!(
                !v.is_finite() || u == v,
                "{ty}: decoded weight {i}: {u} vs dequantize {v}"
            );
        }
    }
}

// ---- tokenizer -----------------------------------------------------------------------------------

/// The real Qwen3.5 tokenizer (248,320 tokens), built once per process.
pub fn qwen_tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let bytes = std::fs::read(fixture("tokenizer/qwen35-vocab.gguf"))
            .expect("../shared/fixtures/tokenizer/qwen35-vocab.gguf");
        let h = parse_header(&bytes, Some(bytes.len() as u64)).expect("vocab header");
        Tokenizer::from_gguf(&h).expect("tokenizer")
    })
}

/// First byte: flags (bit 0: parse special tokens); the rest is text, possibly invalid UTF-8
/// (read lossily, as a page would after TextDecoder). Encoding and decoding must round-trip (up to
/// NFC), and
/// arbitrary ids (the rest read as u32s) must decode without panicking, also streamed.
pub fn tokenizer(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let tok = qwen_tokenizer();
    let text = String::from_utf8_lossy(rest);
    let special = flags & 1 == 1;
    let ids = tok.encode(&text, special);
    assert!(ids.iter().all(|&id| (id as usize) < tok.n_vocab()), "id out of range");
    // Byte-level BPE loses nothing but what NFC changes. NFC applies to each fragment between
    // matched tokens (user-defined ones such as <think> match even without `special`, as in HF and
    // llama.cpp), so the text comes back canonically equivalent: NFC(back) = NFC(text). Encoding
    // what came back gives the same ids.
    let back = tok.decode(&ids, true);
    assert_eq!(
        back.nfc().collect::<String>(),
        text.nfc().collect::<String>(),
        "round trip up to NFC"
    );
    assert_eq!(
        tok.encode(&back, special),
        ids,
        "encoding the decoded text gives the same ids"
    );

    let arbitrary: Vec<u32> = rest
        .chunks(4)
        .map(|c| c.iter().fold(0u32, |a, &b| a << 8 | b as u32) % (tok.n_vocab() as u32 + 16))
        .collect();
    let whole = tok.decode(&arbitrary, flags & 2 == 2);
    let mut s = StreamDecoder::new(flags & 2 == 2);
    let mut streamed = String::new();
    for &id in &arbitrary {
        streamed.push_str(&s.push(tok, id));
    }
    streamed.push_str(&s.flush());
    assert_eq!(streamed, whole, "streamed decoding = whole decoding");
}

// ---- chat_template -------------------------------------------------------------------------------

/// The real Qwen3.5 template (what a Clef-Flash GGUF carries) and the built-in ChatML.
pub fn templates() -> &'static [ChatTemplate; 2] {
    static T: OnceLock<[ChatTemplate; 2]> = OnceLock::new();
    T.get_or_init(|| {
        let src = std::fs::read_to_string(fixture("chat-templates/Qwen3.5.jinja")).expect("Qwen3.5.jinja");
        [
            ChatTemplate::new(Some(&src)).expect("Qwen3.5 template"),
            ChatTemplate::new(None).expect("builtin"),
        ]
    })
}

const ROLES: [&str; 5] = ["system", "user", "assistant", "tool", "developer"];

/// Input: a flags byte (bit 0 add_generation_prompt, bits 1-2 enable_thinking unset/true/false,
/// bit 3 which template, bit 4 tools), then messages as NUL-separated fields: a role field (its
/// first byte picks a role, or the field itself is the role when it is longer than one byte),
/// content, reasoning (empty = none). Rendering returns text or an error, never a panic.
pub fn chat_template(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let fields: Vec<String> = rest
        .split(|&b| b == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    let messages: Vec<Value> = fields
        .chunks(3)
        .map(|m| {
            let role = match m[0].as_bytes() {
                [b] => ROLES[*b as usize % ROLES.len()].to_string(),
                _ => m[0].clone(),
            };
            let mut o: BTreeMap<&str, Value> = BTreeMap::new();
            o.insert("role", Value::from(role));
            o.insert("content", m.get(1).map_or(Value::from(()), |c| Value::from(c.as_str())));
            if let Some(r) = m.get(2).filter(|r| !r.is_empty()) {
                o.insert("reasoning_content", Value::from(r.as_str()));
            }
            Value::from(o)
        })
        .collect();
    let tools = (flags & 16 != 0).then(|| {
        let f: BTreeMap<&str, Value> = [
            ("name", Value::from("get_weather")),
            ("description", Value::from(fields.first().cloned().unwrap_or_default())),
        ]
        .into_iter()
        .collect();
        let t: BTreeMap<&str, Value> = [("type", Value::from("function")), ("function", Value::from(f))]
            .into_iter()
            .collect();
        Value::from(vec![Value::from(t)])
    });
    let input = ChatInput {
        messages: Value::from(messages),
        tools,
        add_generation_prompt: flags & 1 != 0,
        enable_thinking: match (flags >> 1) & 3 {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        },
        kwargs: Vec::new(),
        bos_token: String::new(),
        eos_token: "<|im_end|>".into(),
    };
    let t = &templates()[(flags >> 3 & 1) as usize];
    let _ = t.render(&input);
}

// ---- decide_request ------------------------------------------------------------------------------

/// The built-in `systemone` template (the fixture GGUF's is the same text).
pub fn systemone() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| Template::new(None).expect("built-in systemone template"))
}

/// Input: a decision request body (read lossily as UTF-8, as a page's string would be). The
/// validator answers one of the request's error classes (malformed, semantic, too large) or a
/// request that obeys the spec's shape rules; that request renders (or is refused as semantic) and
/// tokenizes into pieces whose spans match its questions and options one to one.
pub fn decide_request(data: &[u8]) {
    let body = String::from_utf8_lossy(data);
    let req = match parse_request(&body) {
        Ok(r) => r,
        Err(DecisionError::Malformed(_) | DecisionError::Semantic(_) | DecisionError::TooLarge(_)) => return,
        Err(e) => panic!("a request error of another class: {} {e}", e.code()),
    };
    // What was accepted is valid JSON that writes back to itself (member order, number text).
    let v = json::parse(&body).expect("an accepted body is JSON");
    assert_eq!(json::parse(&v.to_original()).as_ref(), Ok(&v), "JSON round trip");

    assert!(!req.questions.is_empty() && req.questions.len() <= MAX_QUESTIONS);
    for q in &req.questions {
        assert!(!q.id.is_empty(), "empty question id");
        let keys: Vec<&str> = q.options.iter().map(|o| o.key.as_str()).collect();
        match q.ty {
            QuestionType::Noul => assert_eq!(keys, ["true", "false"]),
            QuestionType::Score => {
                assert!(request::SCORE_LEVELS.contains(&keys.len()), "{} score levels", keys.len());
                assert!(keys.iter().enumerate().all(|(i, k)| *k == i.to_string()), "score keys {keys:?}");
            }
            QuestionType::Choice => {
                assert!((1..=request::MAX_CHOICE_OPTIONS).contains(&keys.len()), "{} options", keys.len());
                // Byte order, no key twice (the JSON parser refuses duplicate members).
                assert!(keys.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()), "option order {keys:?}");
            }
        }
    }

    let text = match systemone().render(&req) {
        Ok(t) => t,
        Err(DecisionError::Semantic(_)) => return,
        Err(e) => panic!("render: {} {e}", e.code()),
    };
    let tok = qwen_tokenizer();
    let p = match request::tokenize_prompt(&text, &req, tok) {
        Ok(p) => p,
        Err(DecisionError::Semantic(_)) => return,
        Err(e) => panic!("tokenize_prompt: {} {e}", e.code()),
    };
    // One tag per token; each piece's tokens carry its tag; spans in request order.
    assert_eq!(p.tokens.len(), p.tags.len());
    assert_eq!(p.pieces.len(), p.piece_token_counts.len());
    assert_eq!(p.piece_token_counts.iter().sum::<usize>(), p.tokens.len());
    assert!(p.tokens.iter().all(|&id| (id as usize) < tok.n_vocab()), "id out of range");
    let spans: Vec<u8> = p.pieces.iter().map(|x| x.tag).filter(|&t| t != TAG_NONE).collect();
    let questions: Vec<u8> = spans.iter().copied().filter(|&t| t != TAG_OPTION).collect();
    assert_eq!(questions, req.questions.iter().map(|q| q.ty.tag()).collect::<Vec<_>>(), "question spans");
    assert_eq!(spans.len() - questions.len(), req.n_options(), "option spans");
    let mut at = 0;
    for (piece, &n) in p.pieces.iter().zip(&p.piece_token_counts) {
        assert!(n > 0 || piece.tag == TAG_NONE, "an empty span");
        assert!(p.tags[at..at + n].iter().all(|&t| t == piece.tag), "tags of a piece");
        at += n;
    }
}
