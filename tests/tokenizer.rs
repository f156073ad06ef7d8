//! Tokenizer tests.
//!
//! * Everywhere (native and wasm): the pre-tokenizer on inline strings (regex semantics), the Unicode
//!   class table against Rust's own Unicode data, and a tiny inline vocabulary for BPE order, special
//!   tokens and streaming decode.
//! * Native only: the full 248,320-token Qwen3.5 vocabulary (`../shared/fixtures/tokenizer/qwen35-vocab.gguf`)
//!   against the 66 reference cases (HF transformers / llama.cpp / tiktoken ids), round trips, streaming,
//!   both BPE algorithms against a slow string-based reference, robustness and timings.
//!
//! Expected ids: `encode(text, true)` must equal the HF ids (= llama.cpp with parse_special on, except for
//! the one NFC case where llama.cpp does not normalise); `encode(text, false)` must equal llama.cpp with
//! parse_special off (CONTROL texts encoded as plain text, USER_DEFINED still matched), except that on the
//! NFC case we again give the HF ids: the text contains no special tokens, so the only difference is the
//! normalisation, and the model was trained on NFC text.

use clef_web::tokenizer::{char_class, CharClass, PreTokenizer, StreamDecoder, Tokenizer, TokenizerError};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn split(pre: PreTokenizer, s: &str) -> Vec<&str> {
    pre.split(s).collect()
}

fn q35(s: &str) -> Vec<&str> {
    split(PreTokenizer::Qwen35, s)
}

// ---------------------------------------------------------------------------------------------------
// Pre-tokenizer semantics (inline strings)

#[test]
fn split_words_and_spaces() {
    assert_eq!(q35("Hello world"), ["Hello", " world"]);
    assert_eq!(q35("Hello, world!"), ["Hello", ",", " world", "!"]);
    assert_eq!(q35(" Hello"), [" Hello"]);
    // \s+(?!\S): a space run keeps its last space for the next word.
    assert_eq!(q35("  two"), [" ", " two"]);
    assert_eq!(q35("a     b"), ["a", "    ", " b"]);
    // At the end of the text the whole run is one piece.
    assert_eq!(q35("trailing   "), ["trailing", "   "]);
    assert_eq!(q35(" "), [" "]);
    assert_eq!(q35(""), Vec::<&str>::new());
    // Tabs: any non-newline white space can prefix a word; a single space before a digit stands alone.
    assert_eq!(q35("\t\ttabs"), ["\t", "\ttabs"]);
    assert_eq!(q35("a 1"), ["a", " ", "1"]);
    assert_eq!(q35("x  \t y"), ["x", "  \t", " y"]);
}

#[test]
fn split_contractions_case_insensitive() {
    assert_eq!(q35("don't"), ["don", "'t"]);
    assert_eq!(q35("DON'T I'LL WE'VE"), ["DON", "'T", " I", "'LL", " WE", "'VE"]);
    assert_eq!(q35("We'Ve a'lL 'RE"), ["We", "'Ve", " a", "'lL", " '", "RE"]);
    // 's wins over a longer letter run; 'x is not a contraction ('x is a word with a prefix).
    assert_eq!(q35("'sup 'xyz"), ["'s", "up", " '", "xyz"]);
    // Simple case folding: long s (U+017F) folds to s.
    assert_eq!(q35("it'ſ"), ["it", "'ſ"]);
    assert_eq!(q35("''double''"), ["''", "double", "''"]);
}

#[test]
fn split_digits_one_by_one() {
    assert_eq!(q35("1234"), ["1", "2", "3", "4"]);
    assert_eq!(q35("3.14"), ["3", ".", "1", "4"]);
    assert_eq!(q35("x²½①"), ["x", "²", "½", "①"]);
    assert_eq!(q35("apple工作1314"), ["apple工作", "1", "3", "1", "4"]);
    assert_eq!(q35("abc123abc"), ["abc", "1", "2", "3", "abc"]);
    assert_eq!(q35("-42"), ["-", "4", "2"]);
}

#[test]
fn split_newlines_and_crlf() {
    assert_eq!(q35("\n"), ["\n"]);
    assert_eq!(q35("\n\n\n"), ["\n\n\n"]);
    assert_eq!(q35("one\ntwo\r\nthree\rfour"), ["one", "\n", "two", "\r\n", "three", "\r", "four"]);
    // \s*[\r\n]+ stops after the last newline of a white-space run; the rest prefixes the next word.
    assert_eq!(q35("   \n   \n\n  indented"), ["   \n   \n\n", " ", " indented"]);
    // A newline never prefixes a word.
    assert_eq!(q35("\nword"), ["\n", "word"]);
    // Punctuation runs take trailing newlines.
    assert_eq!(q35("x;\r\n\r\ny"), ["x", ";\r\n\r\n", "y"]);
    assert_eq!(q35("):\n    if"), ["):\n", "   ", " if"]);
}

#[test]
fn split_punctuation() {
    assert_eq!(q35("!!!!??"), ["!!!!??"]);
    assert_eq!(q35("a[i] * b"), ["a", "[i", "]", " *", " b"]);
    assert_eq!(q35(" += a"), [" +=", " a"]);
    assert_eq!(q35("https://x.com"), ["https", "://", "x", ".com"]);
    assert_eq!(q35("$100"), ["$", "1", "0", "0"]);
}

#[test]
fn split_marks_and_scripts() {
    // Letter runs absorb combining marks (qwen35) — Devanagari, decomposed Latin.
    assert_eq!(q35("नमस्ते दुनिया"), ["नमस्ते", " दुनिया"]);
    assert_eq!(q35("cafe\u{301} x"), ["cafe\u{301}", " x"]);
    // Punctuation is the optional prefix of a following mark/letter run; a lone mark is a "word".
    assert_eq!(q35("!\u{301}a"), ["!\u{301}a"]);
    // The match starts at the first "!": the run "!!" cannot take the mark, which then stands alone.
    assert_eq!(q35("!!\u{301}"), ["!!", "\u{301}"]);
    assert_eq!(q35("\u{301}"), ["\u{301}"]);
    // Qwen2: marks are punctuation-like.
    assert_eq!(split(PreTokenizer::Qwen2, "cafe\u{301} x"), ["cafe", "\u{301}", " x"]);
    // (a mark may still be the optional prefix of a letter run)
    assert_eq!(split(PreTokenizer::Qwen2, "नमस्ते"), ["नमस", "्त", "े"]);
    // CJK / Hangul / Cyrillic are letters.
    // Punctuation directly before a word becomes its prefix.
    assert_eq!(q35("你好，世界！"), ["你好", "，世界", "！"]);
    assert_eq!(q35("Привет, мир!"), ["Привет", ",", " мир", "!"]);
    // Non-ASCII white space: NBSP / thin space prefix words; ideographic space too.
    assert_eq!(q35("xxx\u{a0}nbsp\u{2009}thin\u{3000}ideo"), ["xxx", "\u{a0}nbsp", "\u{2009}thin", "\u{3000}ideo"]);
    // Zero-width chars are not white space (Cf): they prefix a word or group with punctuation.
    assert_eq!(q35("zero\u{200b}width"), ["zero", "\u{200b}width"]);
}

#[test]
fn split_emoji() {
    assert_eq!(q35("🚀 rocket"), ["🚀", " rocket"]);
    assert_eq!(q35("👍🏽 ok"), ["👍🏽", " ok"]);
    // ZWJ sequence and variation selector: U+FE0F is a mark (Mn), so it starts a "word" run.
    assert_eq!(q35("😶\u{200d}🌫\u{fe0f} face"), ["😶\u{200d}🌫", "\u{fe0f}", " face"]);
    assert_eq!(q35("🇺🇸🇯🇵 flags"), ["🇺🇸🇯🇵", " flags"]);
    assert_eq!(q35("spaces😀😃"), ["spaces", "😀😃"]);
    assert_eq!(q35(" 😀"), [" 😀"]);
}

#[test]
fn split_covers_text() {
    let samples = [
        "def f(x):\n\treturn x**2  # 🚀\r\n",
        "\u{85}\u{2028}\u{2029}x \u{0}\u{7f}",
        "İstanbul ığdır ŞEKER Straße ẞ ﬁ",
        "\u{10FFFF}\u{E000}\u{FFFD}'",
    ];
    for s in samples {
        for pre in [PreTokenizer::Qwen35, PreTokenizer::Qwen2] {
            let pieces = split(pre, s);
            assert!(pieces.iter().all(|p| !p.is_empty()));
            assert_eq!(pieces.concat(), s);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Unicode classes

#[test]
fn char_classes_match_std() {
    assert!(!clef_web::tokenizer::UNICODE_VERSION.is_empty());
    for cp in 0..=0x10FFFFu32 {
        let Some(c) = char::from_u32(cp) else { continue };
        let k = char_class(c);
        // White_Space is stable: exact agreement with std (defined as White_Space).
        assert_eq!(k == CharClass::Space, c.is_whitespace(), "U+{cp:04X}");
        // Letters are Alphabetic; std may know newer characters than our table (Other here).
        if k == CharClass::Letter {
            assert!(c.is_alphabetic(), "U+{cp:04X}");
        }
        // std's is_numeric is General_Category N.
        if k != CharClass::Other {
            assert_eq!(k == CharClass::Number, c.is_numeric(), "U+{cp:04X}");
        }
    }
    for c in ['a', 'Z', 'é', 'ß', 'ǅ', 'ʰ', '中', 'ا', 'ก'] {
        assert_eq!(char_class(c), CharClass::Letter, "{c}");
    }
    for c in ['\u{301}', '\u{94d}', '\u{fe0f}', '\u{20dd}', '\u{e34}'] {
        assert_eq!(char_class(c), CharClass::Mark, "{c:?}");
    }
    for c in ['0', '٣', 'Ⅻ', '½', '①', '²'] {
        assert_eq!(char_class(c), CharClass::Number, "{c}");
    }
    for c in ['!', '\'', '_', '€', '😀', '\u{200b}', '\u{200d}', '\u{feff}', '\u{0}', '\u{E000}'] {
        assert_eq!(char_class(c), CharClass::Other, "{c:?}");
    }
}

// ---------------------------------------------------------------------------------------------------
// Tiny inline vocabulary

/// GPT-2 byte → char.
fn byte_char(b: u8) -> char {
    let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if printable {
        return b as char;
    }
    let k = (0..b)
        .filter(|&x| !((0x21..=0x7E).contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x)))
        .count();
    char::from_u32(256 + k as u32).unwrap()
}

/// 256 byte tokens, a few merges, 3 control + 1 user-defined + 1 unused token.
fn tiny() -> Tokenizer {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    // Byte-level form; rank = position. "Ã ©" joins the two bytes of "é" (C3 A9).
    let merge_list = [("Ã", "©"), ("a", "a"), ("aa", "a"), ("a", "b"), ("b", "c"), ("Ġ", "x"), ("Ã©", "e")];
    let mut merges = Vec::new();
    for (l, r) in merge_list {
        assert!(tokens.iter().any(|t| t == l) && tokens.iter().any(|t| t == r));
        merges.push(format!("{l} {r}"));
        let m = format!("{l}{r}");
        if !tokens.contains(&m) {
            tokens.push(m);
        }
    }
    let mut types = vec![1; tokens.len()];
    for (t, ty) in [("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4), ("[PAD0]", 5), ("<|im_start|>x", 3)] {
        tokens.push(t.to_string());
        types.push(ty);
    }
    let eos = tokens.iter().position(|t| t == "<|im_end|>").map(|i| i as u32);
    Tokenizer::from_parts(&tokens, &types, &merges, eos, None, None, false, "qwen35").unwrap()
}

fn texts(t: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter().map(|&i| String::from_utf8_lossy(t.token_bytes(i)).into_owned()).collect()
}

#[test]
fn tiny_bpe_order() {
    let t = tiny();
    // Leftmost on ties: "aaaa" → (a a)(a a) → "aa","aa" (aa+a has a later rank than a+a).
    assert_eq!(texts(&t, &t.encode("aaaa", false)), ["aa", "aa"]);
    // "aaa": a+a first (rank 1), then aa+a (rank 2).
    assert_eq!(texts(&t, &t.encode("aaa", false)), ["aaa"]);
    // "abc": a+b (rank 3) beats b+c (rank 4).
    assert_eq!(texts(&t, &t.encode("abc", false)), ["ab", "c"]);
    assert_eq!(texts(&t, &t.encode("bc x", false)), ["bc", " x"]);
    // Multi-byte char via merge; NFC: e + U+0301 → é first.
    assert_eq!(texts(&t, &t.encode("é", false)), ["é"]);
    assert_eq!(t.encode("e\u{301}", false), t.encode("é", false));
    assert_eq!(texts(&t, &t.encode("ée", false)), ["ée"]);
    // Unmerged multi-byte char → its byte tokens.
    assert_eq!(t.encode("€", false).len(), 3);
    assert_eq!(t.decode(&t.encode("€", false), false), "€");
    // Both BPE algorithms agree on long and short pieces.
    for piece in ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abcabcaab", "aaaaaaa"] {
        let (a, b) = t.debug_bpe_both(piece.as_bytes());
        if piece.len() <= 48 {
            assert_eq!(a, b, "{piece}");
        }
        assert_eq!(t.decode(&b, false), piece);
    }
}

#[test]
fn tiny_specials() {
    let t = tiny();
    let id = |s: &str| t.token_id(s).unwrap();
    let (start, end, think, pad, longer) =
        (id("<|im_start|>"), id("<|im_end|>"), id("<think>"), id("[PAD0]"), id("<|im_start|>x"));
    // CONTROL only with parse_special; the longest special text wins.
    assert_eq!(t.encode("<|im_start|>a<|im_end|>", true), [start, id("a"), end]);
    assert_eq!(t.encode("<|im_start|>x", true), [longer]);
    assert!(!t.encode("<|im_start|>a", false).contains(&start));
    assert_eq!(t.decode(&t.encode("<|im_start|>a", false), false), "<|im_start|>a");
    // USER_DEFINED always.
    assert_eq!(t.encode("<think>", false), [think]);
    assert_eq!(t.encode("a<think>b", false), [id("a"), think, id("b")]);
    // UNUSED tokens are never matched in text.
    assert!(!t.encode("[PAD0]", true).contains(&pad));
    // Rendering.
    assert!(t.is_control(start) && t.is_control(pad) && !t.is_control(think) && !t.is_control(id("a")));
    assert_eq!(t.decode(&[start, id("a"), think, end, pad], false), "a<think>");
    assert_eq!(t.decode(&[start, id("a"), think, end, pad], true), "<|im_start|>a<think><|im_end|>[PAD0]");
    assert_eq!(t.eog_ids(), [end]);
    // Out of range ids are skipped, never a panic.
    let n = t.n_vocab() as u32;
    assert_eq!(t.decode(&[id("a"), n, u32::MAX, id("b")], true), "ab");
    assert_eq!(t.token_bytes(n), b"");
    assert_eq!(t.token_text(n), None);
    assert!(!t.is_control(u32::MAX));
}

#[test]
fn tiny_stream_decoder() {
    let t = tiny();
    let byte = |b: u8| t.token_id(&byte_char(b).to_string()).unwrap();
    // "€" = E2 82 AC split into three tokens, then "a", then an invalid byte, then a truncated sequence.
    let ids = [byte(0xE2), byte(0x82), byte(0xAC), byte(b'a'), byte(0xFF), byte(b'b'), byte(0xF0), byte(0x9F)];
    let mut d = StreamDecoder::new(false);
    let outs: Vec<String> = ids.iter().map(|&i| d.push(&t, i)).collect();
    assert_eq!(outs, ["", "", "€", "a", "\u{FFFD}", "b", "", ""]);
    assert_eq!(d.flush(), "\u{FFFD}");
    assert_eq!(outs.concat() + "\u{FFFD}", t.decode(&ids, false));
    // An invalid continuation after a held lead byte: both become visible at once.
    let mut d = StreamDecoder::new(true);
    assert_eq!(d.push(&t, byte(0xE2)), "");
    assert_eq!(d.push(&t, byte(b'x')), "\u{FFFD}x");
    assert_eq!(d.flush(), "");
}

#[test]
fn thread_safe_types() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
    send_sync::<StreamDecoder>();
    send_sync::<TokenizerError>();
}

#[test]
fn errors() {
    let toks = ["a", "b"];
    let none: [&str; 0] = [];
    let e = Tokenizer::from_parts(&toks, &[1, 1], &none, None, None, None, false, "llama3").unwrap_err();
    assert!(matches!(e, TokenizerError::Unsupported(_)));
    assert!(!e.to_string().contains('\n'));
    let e = Tokenizer::from_parts(&toks, &[1], &none, None, None, None, false, "qwen35").unwrap_err();
    assert!(matches!(e, TokenizerError::Invalid(_)));
    let e = Tokenizer::from_parts(&toks, &[1, 1], &none, Some(2), None, None, false, "qwen35").unwrap_err();
    assert!(matches!(e, TokenizerError::Invalid(_)), "{e}");
    let e = Tokenizer::from_parts(&none, &[], &none, None, None, None, false, "qwen35").unwrap_err();
    assert!(matches!(e, TokenizerError::Invalid(_)));
    // A vocabulary without byte tokens still never panics: unknown bytes are dropped.
    let t = Tokenizer::from_parts(&toks, &[], &["a b", "x y", "nospace"], None, None, None, false, "qwen2").unwrap();
    assert_eq!(t.encode("ab€a", true), [0, 1, 0]);
}

// ---------------------------------------------------------------------------------------------------
// Full vocabulary (native only: reads the shared fixtures)

#[cfg(not(target_arch = "wasm32"))]
mod full {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::time::Instant;
    use unicode_normalization::UnicodeNormalization;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/tokenizer").join(name)
    }

    /// The `tokenizer.ggml.*` values of a GGUF file. A minimal reader for this test only (the crate's
    /// own reader is `clef_web::gguf`).
    #[derive(Default)]
    struct Vocab {
        model: String,
        pre: String,
        tokens: Vec<String>,
        types: Vec<i32>,
        merges: Vec<String>,
        eos: Option<u32>,
        bos: Option<u32>,
        pad: Option<u32>,
        add_bos: bool,
    }

    struct Reader<'a> {
        b: &'a [u8],
        p: usize,
    }

    impl Reader<'_> {
        fn take(&mut self, n: usize) -> &[u8] {
            let s = &self.b[self.p..self.p + n];
            self.p += n;
            s
        }
        fn u32(&mut self) -> u32 {
            u32::from_le_bytes(self.take(4).try_into().unwrap())
        }
        fn u64(&mut self) -> u64 {
            u64::from_le_bytes(self.take(8).try_into().unwrap())
        }
        fn string(&mut self) -> String {
            let n = self.u64() as usize;
            String::from_utf8(self.take(n).to_vec()).unwrap()
        }
        /// Reads a scalar of type `ty` as u64 (ints, bool), or skips it (floats, strings).
        fn scalar(&mut self, ty: u32) -> Option<u64> {
            match ty {
                0 | 1 | 7 => Some(self.take(1)[0] as u64),
                2 | 3 => Some(u16::from_le_bytes(self.take(2).try_into().unwrap()) as u64),
                4 | 5 => Some(self.u32() as u64),
                6 => {
                    self.take(4);
                    None
                }
                10 | 11 => Some(self.u64()),
                12 => {
                    self.take(8);
                    None
                }
                8 => {
                    self.string();
                    None
                }
                _ => panic!("GGUF value type {ty}"),
            }
        }
    }

    fn read_vocab(bytes: &[u8]) -> Vocab {
        let mut r = Reader { b: bytes, p: 0 };
        assert_eq!(r.take(4), b"GGUF");
        assert_eq!(r.u32(), 3);
        let _n_tensors = r.u64();
        let n_kv = r.u64();
        let mut v = Vocab::default();
        for _ in 0..n_kv {
            let key = r.string();
            let ty = r.u32();
            if ty == 9 {
                let et = r.u32();
                let n = r.u64() as usize;
                match (key.as_str(), et) {
                    ("tokenizer.ggml.tokens", 8) => v.tokens = (0..n).map(|_| r.string()).collect(),
                    ("tokenizer.ggml.merges", 8) => v.merges = (0..n).map(|_| r.string()).collect(),
                    ("tokenizer.ggml.token_type", 5) => v.types = (0..n).map(|_| r.u32() as i32).collect(),
                    _ => (0..n).for_each(|_| {
                        r.scalar(et);
                    }),
                }
            } else if ty == 8 {
                let s = r.string();
                match key.as_str() {
                    "tokenizer.ggml.model" => v.model = s,
                    "tokenizer.ggml.pre" => v.pre = s,
                    _ => {}
                }
            } else {
                let x = r.scalar(ty);
                match key.as_str() {
                    "tokenizer.ggml.eos_token_id" => v.eos = x.map(|x| x as u32),
                    "tokenizer.ggml.bos_token_id" => v.bos = x.map(|x| x as u32),
                    "tokenizer.ggml.padding_token_id" => v.pad = x.map(|x| x as u32),
                    "tokenizer.ggml.add_bos_token" => v.add_bos = x == Some(1),
                    _ => {}
                }
            }
        }
        v
    }

    struct Loaded {
        vocab: Vocab,
        tok: Tokenizer,
    }

    fn load() -> &'static Loaded {
        static L: OnceLock<Loaded> = OnceLock::new();
        L.get_or_init(|| {
            let bytes = std::fs::read(fixture("qwen35-vocab.gguf")).expect("qwen35-vocab.gguf");
            let vocab = read_vocab(&bytes);
            assert_eq!(vocab.model, "gpt2");
            let tok = Tokenizer::from_parts(
                &vocab.tokens,
                &vocab.types,
                &vocab.merges,
                vocab.eos,
                vocab.bos,
                vocab.pad,
                vocab.add_bos,
                &vocab.pre,
            )
            .unwrap();
            Loaded { vocab, tok }
        })
    }

    struct Case {
        text: String,
        hf: Vec<u32>,
        llama_special: Vec<u32>,
        llama_plain: Vec<u32>,
        hf_decoded: String,
        nfc_changes_text: bool,
        agree_hf_llama: bool,
    }

    fn cases() -> Vec<Case> {
        let s = std::fs::read_to_string(fixture("tokenizer_fixtures.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        let ids = |x: &serde_json::Value| -> Vec<u32> {
            x.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect()
        };
        let cases: Vec<Case> = v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| Case {
                text: c["text"].as_str().unwrap().to_string(),
                hf: ids(&c["hf"]),
                llama_special: ids(&c["llama_parse_special"]),
                llama_plain: ids(&c["llama_no_parse_special"]),
                hf_decoded: c["hf_decoded"].as_str().unwrap().to_string(),
                nfc_changes_text: c["nfc_changes_text"].as_bool().unwrap(),
                agree_hf_llama: c["agree_hf_llama"].as_bool().unwrap(),
            })
            .collect();
        assert_eq!(cases.len(), 66);
        cases
    }

    #[test]
    fn vocabulary_facts() {
        let t = &load().tok;
        assert_eq!(t.n_vocab(), 248_320);
        assert_eq!(t.eos(), Some(248_046));
        assert_eq!(t.bos(), None);
        assert_eq!(t.pad(), Some(248_044));
        assert!(!t.add_bos());
        assert_eq!(t.pre_tokenizer(), PreTokenizer::Qwen35);
        assert_eq!(t.eog_ids(), [248_046, 248_044, 248_063, 248_064, 248_065]);
        assert_eq!(t.token_id("<|im_start|>"), Some(248_045));
        assert_eq!(t.token_id("Ġworld"), Some(1814));
        assert_eq!(t.token_text(1814), Some("Ġworld"));
        assert_eq!(t.token_bytes(1814), b" world");
        assert_eq!(t.token_bytes(198), b"\n");
        assert!(t.is_control(248_045) && t.is_control(248_319) && !t.is_control(248_068) && !t.is_control(1814));
        assert_eq!(t.token_bytes(248_068), b"<think>");
        // All 256 single bytes have a token, so BPE never drops input.
        for b in 0..=255u8 {
            assert_eq!(t.token_bytes(t.token_id(&byte_char(b).to_string()).unwrap()), [b]);
        }
    }

    #[test]
    fn fixture_ids_parse_special() {
        let t = &load().tok;
        let mut bad = Vec::new();
        for (i, c) in cases().iter().enumerate() {
            if c.agree_hf_llama {
                assert_eq!(c.hf, c.llama_special, "fixture {i}");
            } else {
                assert!(c.nfc_changes_text, "fixture {i}: the only disagreement is NFC");
            }
            let got = t.encode(&c.text, true);
            if got != c.hf {
                bad.push(format!("#{i} {:?}\n  got  {got:?}\n  want {:?}", c.text, c.hf));
            }
        }
        assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
    }

    #[test]
    fn fixture_ids_no_parse_special() {
        let t = &load().tok;
        let mut bad = Vec::new();
        for (i, c) in cases().iter().enumerate() {
            let want = if c.nfc_changes_text {
                // No special tokens in it: parse_special changes nothing, NFC is the only difference.
                assert_eq!(c.llama_special, c.llama_plain);
                &c.hf
            } else {
                &c.llama_plain
            };
            let got = t.encode(&c.text, false);
            if &got != want {
                bad.push(format!("#{i} {:?}\n  got  {got:?}\n  want {want:?}", c.text));
            }
        }
        assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
    }

    #[test]
    fn fixture_round_trips_and_streaming() {
        let t = &load().tok;
        for (i, c) in cases().iter().enumerate() {
            let nfc: String = c.text.nfc().collect();
            assert_eq!(t.decode(&c.hf, true), c.hf_decoded, "fixture {i}");
            assert_eq!(t.decode(&t.encode(&c.text, true), true), nfc, "fixture {i}");
            assert_eq!(t.decode(&t.encode(&c.text, false), false), nfc, "fixture {i}");
            assert_eq!(t.decode(&t.encode(&c.text, false), true), nfc, "fixture {i}");
            for render in [false, true] {
                let whole = t.decode(&c.hf, render);
                let mut d = StreamDecoder::new(render);
                let mut streamed = String::new();
                for &id in &c.hf {
                    let piece = d.push(t, id);
                    assert!(!piece.contains('\u{FFFD}'), "fixture {i}: broken UTF-8 emitted");
                    streamed += &piece;
                }
                streamed += &d.flush();
                assert_eq!(streamed, whole, "fixture {i}");
            }
        }
    }

    /// xorshift64* — deterministic test randomness.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random text mixing ASCII, whitespace, marks, CJK, emoji, specials and arbitrary code points.
    fn random_text(rng: &mut Rng, len: usize) -> String {
        const BITS: &[&str] = &[
            "a",
            "e",
            "the",
            " ",
            "  ",
            "\n",
            "\r\n",
            "\t",
            "'s",
            "'LL",
            "1",
            "42",
            ".",
            "!!",
            "é",
            "e\u{301}",
            "\u{301}",
            "ſ",
            "中文",
            "日本",
            "한",
            "Ж",
            "ß",
            "🚀",
            "👍🏽",
            "\u{200d}",
            "\u{fe0f}",
            "\u{a0}",
            "\u{3000}",
            "<|im_start|>",
            "<|im_end|>",
            "<think>",
            "</think>",
            "<|",
            "|>",
            "[PAD248100]",
            "ǅ",
            "ﬁ",
            "①",
        ];
        let mut s = String::new();
        for _ in 0..len {
            if rng.below(5) == 0 {
                if let Some(c) = char::from_u32(rng.below(0x30000) as u32) {
                    s.push(c);
                }
            } else {
                s += BITS[rng.below(BITS.len())];
            }
        }
        s
    }

    #[test]
    fn random_round_trips_and_streams() {
        let t = &load().tok;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..300 {
            let len = rng.below(60);
            let s = random_text(&mut rng, len);
            for parse in [false, true] {
                let ids = t.encode(&s, parse);
                let back = t.decode(&ids, true);
                // NFC is applied per fragment between special tokens; compare fragment-wise via re-encoding.
                assert_eq!(t.encode(&back, parse), ids, "{s:?}");
                assert_eq!(back.nfc().collect::<String>(), s.nfc().collect::<String>(), "{s:?}");
            }
        }
        // Arbitrary ids (in and out of range): streaming equals decode, no panic.
        for _ in 0..300 {
            let n = rng.below(40);
            let ids: Vec<u32> = (0..n)
                .map(|_| match rng.below(4) {
                    0 => rng.below(256) as u32,
                    1 => rng.below(t.n_vocab() + 10) as u32,
                    2 => 248_040 + rng.below(300) as u32,
                    _ => rng.next() as u32,
                })
                .collect();
            for render in [false, true] {
                let mut d = StreamDecoder::new(render);
                let mut s: String = ids.iter().map(|&id| d.push(t, id)).collect();
                s += &d.flush();
                assert_eq!(s, t.decode(&ids, render));
            }
        }
    }

    /// Slow reference BPE on strings, straight from the merge list.
    fn reference_bpe(ranks: &HashMap<(String, String), usize>, t: &Tokenizer, piece: &str) -> Vec<u32> {
        let mut syms: Vec<String> = piece.bytes().map(|b| byte_char(b).to_string()).collect();
        loop {
            let best = (0..syms.len().saturating_sub(1))
                .filter_map(|k| ranks.get(&(syms[k].clone(), syms[k + 1].clone())).map(|&r| (r, k)))
                .min();
            let Some((_, k)) = best else { break };
            let right = syms.remove(k + 1);
            syms[k].push_str(&right);
        }
        syms.iter().map(|s| t.token_id(s).unwrap()).collect()
    }

    #[test]
    fn bpe_algorithms_match_reference() {
        let l = load();
        let t = &l.tok;
        let mut ranks = HashMap::new();
        for (r, m) in l.vocab.merges.iter().enumerate() {
            let sp = m.bytes().skip(1).position(|b| b == b' ').unwrap() + 1;
            ranks.entry((m[..sp].to_string(), m[sp + 1..].to_string())).or_insert(r);
        }
        let mut rng = Rng(12345);
        let words = ["ab", "aaa", "the", "ing", "中", "🚀", " ", "==", "0", "e\u{301}", "x", "ـ", "ΐ"];
        for round in 0..400 {
            let n = 1 + rng.below(if round % 4 == 0 { 80 } else { 16 });
            let piece: String = (0..n).map(|_| words[rng.below(words.len())]).collect();
            let want = reference_bpe(&ranks, t, &piece);
            let (small, heap) = t.debug_bpe_both(piece.as_bytes());
            assert_eq!(heap, want, "heap {piece:?}");
            if piece.len() <= 48 {
                assert_eq!(small, want, "array {piece:?}");
            }
        }
        // Long single pieces take the heap path inside encode.
        for piece in ["a".repeat(5000), "supercalifragilistic".repeat(30), "=-".repeat(300)] {
            let ids = t.encode(&piece, false);
            assert_eq!(t.decode(&ids, false), piece);
            if piece.len() <= 2000 {
                assert_eq!(ids, reference_bpe(&ranks, t, &piece));
            }
        }
    }

    #[test]
    fn timings() {
        let bytes = std::fs::read(fixture("qwen35-vocab.gguf")).unwrap();
        let t0 = Instant::now();
        let v = read_vocab(&bytes);
        let t_parse = t0.elapsed();
        // Best of 3 builds (the machine may be busy).
        let mut t_build = std::time::Duration::MAX;
        let mut tok = None;
        for _ in 0..3 {
            let t0 = Instant::now();
            tok = Some(
                Tokenizer::from_parts(&v.tokens, &v.types, &v.merges, v.eos, v.bos, v.pad, v.add_bos, &v.pre).unwrap(),
            );
            t_build = t_build.min(t0.elapsed());
        }
        let tok = tok.unwrap();

        let mut text = String::new();
        let cs = cases();
        while text.len() < 10_000 {
            for c in &cs {
                text += &c.text;
                text.push('\n');
            }
        }
        let text = &text[..text.char_indices().find(|&(i, _)| i >= 10_000).unwrap().0];
        let english: String =
            "The quick brown fox jumps over the lazy dog, and then it doesn't stop running. ".repeat(130);
        let t0 = Instant::now();
        let ids = tok.encode(text, true);
        let t_enc = t0.elapsed();
        let t0 = Instant::now();
        let ids_en = tok.encode(&english, true);
        let t_enc_en = t0.elapsed();
        let t0 = Instant::now();
        let back = tok.decode(&ids, true);
        let t_dec = t0.elapsed();
        assert_eq!(back, text.nfc().collect::<String>());
        println!(
            "tokenizer timings: GGUF vocab parse (test reader) {:.1} ms, from_parts {:.1} ms; \
             encode {} B mixed → {} ids {:.2} ms; encode {} B English → {} ids {:.2} ms; decode {:.2} ms",
            t_parse.as_secs_f64() * 1e3,
            t_build.as_secs_f64() * 1e3,
            text.len(),
            ids.len(),
            t_enc.as_secs_f64() * 1e3,
            english.len(),
            ids_en.len(),
            t_enc_en.as_secs_f64() * 1e3,
            t_dec.as_secs_f64() * 1e3
        );
    }
}
