//! The GGUF reader against real fixtures (native only) and against an in-memory corpus of
//! corrupt files (native and wasm):
//! * every fixture GGUF parses; the tiny qwen35 files match tensor_types.json and the F32 file's
//!   metadata matches A-F32.metadata.json;
//! * incremental parsing of the 11 MB vocabulary GGUF from growing prefixes gives the same header,
//!   and every cut gives `NeedMore` (size unknown) or `Truncated` (size = cut);
//! * a small file written by `gguf_corpus` round-trips, and each kind of corruption gives its own
//!   error variant; no truncation, byte flip or random mutation panics;
//! * a layout parse (`Detail::Layout`) keeps all but the items of long string arrays, and finds
//!   the same errors and `NeedMore` bounds as a full one.

mod gguf_corpus;

use clef_web::gguf::{
    check_architecture, parse_header, parse_header_with, require_array, require_f32, require_str, require_u64, Array,
    Detail, GgufError, Header, Value, MAX_ARRAY_DEPTH,
};
use clef_web::quant::GgmlType;
use gguf_corpus::{encode_value, put_bytes, small_metadata, small_model, GgufBuilder};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// xorshift64* — deterministic, dependency-free test randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn parse_full(bytes: &[u8]) -> Result<Header, GgufError> {
    parse_header(bytes, Some(bytes.len() as u64))
}

/// Parses with the size known, and also checks that an error message is one line.
fn parse_err(bytes: &[u8]) -> GgufError {
    let e = parse_full(bytes).expect_err("corrupt file parsed");
    let msg = e.to_string();
    assert!(!msg.is_empty() && !msg.contains('\n'), "{msg:?}");
    e
}

// =============================================================================================
// The small in-memory file
// =============================================================================================

#[test]
fn small_file_round_trips() {
    let b = small_model();
    let bytes = b.build();
    let h = parse_full(&bytes).unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.metadata, small_metadata());
    assert_eq!(h.data_offset % 32, 0);
    assert_eq!(h.file_size(), bytes.len() as u64);
    assert_eq!(h.data_size, 384);

    let expect: [(&str, &[u64], GgmlType, u64, u64); 4] = [
        ("token_embd.weight", &[8, 2], GgmlType::F32, 0, 64),
        ("blk.0.ffn_up.weight", &[256, 1], GgmlType::Q4_K, 64, 144),
        ("blk.0.attn_q.weight", &[32, 3], GgmlType::Q8_0, 224, 102),
        ("output_norm.weight", &[8], GgmlType::F32, 352, 32),
    ];
    assert_eq!(h.tensors.len(), expect.len());
    for (t, (name, dims, ty, offset, size)) in h.tensors.iter().zip(expect) {
        assert_eq!((t.name.as_str(), t.dims.as_slice(), t.ty, t.offset, t.size), (name, dims, ty, offset, size));
        assert_eq!(h.tensor(name).unwrap().name, name);
        let r = h.tensor_range(t);
        assert_eq!(r.end - r.start, size);
        assert_eq!(t.size, t.row_bytes() * t.n_rows());
    }
    assert_eq!(h.tensor("blk.0.attn_q.weight").unwrap().n_elements(), 96);
    assert_eq!(h.tensor("blk.0.attn_q.weight").unwrap().ne(3), 1);
    assert!(h.tensor("nope").is_none());

    // Version 2 has the same layout.
    let mut v2 = b.clone();
    v2.version = 2;
    assert_eq!(parse_full(&v2.build()).unwrap().version, 2);

    // Without tensors: the header is complete at the end of the (empty) tensor table, even
    // without the padding (vocabulary-only files end there).
    let mut no_t = b.clone();
    no_t.tensors.clear();
    no_t.data_len = 0;
    let bytes = no_t.build_header();
    assert!(bytes.len() % 32 != 0);
    let h = parse_header(&bytes, None).unwrap();
    assert_eq!((h.tensors.len(), h.data_size), (0, 0));
    assert_eq!(parse_full(&bytes).unwrap(), h);

    // Another alignment.
    let mut a64 = GgufBuilder::new().kv("general.alignment", Value::U32(64));
    a64.alignment = 64;
    let a64 = a64.tensor("a", &[3], GgmlType::F32).tensor("b", &[5], GgmlType::F32);
    let h = parse_full(&a64.build()).unwrap();
    assert_eq!((h.alignment, h.data_offset % 64, h.tensors[1].offset), (64, 0, 64));
}

#[test]
fn getters_and_helpers() {
    let h = parse_full(&small_model().build()).unwrap();
    assert_eq!(h.architecture(), Some("qwen35"));
    assert_eq!(h.get_str("test.string"), Some("héllo, wörld"));
    assert_eq!(h.get_str("test.u8"), None);
    assert_eq!(h.get_u64("test.u8"), Some(200));
    assert_eq!(h.get_u64("test.u16"), Some(60000));
    assert_eq!(h.get_u64("test.u32"), Some(4_000_000_000));
    assert_eq!(h.get_u64("test.u64"), Some(1 << 40));
    assert_eq!(h.get_u64("test.i8"), None); // negative
    assert_eq!(h.get_u64("test.i64"), None);
    assert_eq!(h.get_u64("test.bool"), Some(1));
    assert_eq!(h.get_u64("test.f32"), None);
    assert_eq!(h.get_u64("missing"), None);
    assert_eq!(h.get_f32("test.f32"), Some(1.5));
    assert_eq!(h.get_f32("test.f64"), Some(0.25));
    assert_eq!(h.get_f32("test.u32"), None);
    assert_eq!(h.get_bool("test.bool"), Some(true));
    assert_eq!(h.get_bool("test.string"), None);
    assert_eq!(h.get("test.i16"), Some(&Value::I16(-30000)));

    let arr = |k: &str| h.get_array(k).unwrap();
    assert_eq!(arr("test.arr.u8").as_u64_vec(), Some(vec![1, 2, 255]));
    assert_eq!(arr("test.arr.i8").as_u64_vec(), None);
    assert_eq!(arr("test.arr.i8").as_i32_vec(), Some(vec![-1, 0, 1]));
    assert_eq!(arr("test.arr.i32").as_i32_vec(), Some(vec![11, 11, 10, 0]));
    assert_eq!(arr("test.arr.u32").as_i32_vec(), Some(vec![3, 4, 5]));
    assert_eq!(arr("test.arr.u64").as_i32_vec(), None); // does not fit
    assert_eq!(arr("test.arr.u64").as_u64_vec(), Some(vec![u64::MAX]));
    assert_eq!(arr("test.arr.bool").as_u64_vec(), Some(vec![1, 1, 0]));
    assert_eq!(arr("test.arr.bool").as_bool_vec(), Some(vec![true, true, false]));
    assert_eq!(arr("test.arr.u8").as_bool_vec(), None); // 2 and 255 are not bools
    assert_eq!(arr("test.arr.f32").as_f32_vec(), Some(vec![0.5, -2.0]));
    assert_eq!(arr("test.arr.f64").as_f32_vec(), Some(vec![f32::INFINITY]));
    assert_eq!(arr("test.arr.string").as_strings().unwrap()[2], "ü€😀");
    assert_eq!(arr("test.arr.string").as_u64_vec(), None);
    assert!(arr("test.arr.empty").is_empty());
    assert_eq!(arr("test.arr.nested").len(), 2);
    assert_eq!(arr("test.arr.i16").elem_type_name(), "i16");

    assert_eq!(require_u64(&h, "test.u32"), Ok(4_000_000_000));
    assert_eq!(require_u64(&h, "nope"), Err(GgufError::MissingKey("nope".into())));
    assert!(matches!(require_u64(&h, "test.string"), Err(GgufError::BadKeyType { key, .. }) if key == "test.string"));
    assert_eq!(require_f32(&h, "test.f32"), Ok(1.5));
    assert!(matches!(require_f32(&h, "test.u8"), Err(GgufError::BadKeyType { .. })));
    assert!(matches!(require_f32(&h, "nope"), Err(GgufError::MissingKey(_))));
    assert_eq!(require_str(&h, "general.architecture"), Ok("qwen35"));
    assert!(require_array(&h, "test.arr.u8").is_ok());
    assert!(matches!(require_array(&h, "test.u8"), Err(GgufError::BadKeyType { .. })));

    // The lookup index survives edits of the public fields.
    let mut h2 = h.clone();
    h2.metadata.remove(0);
    h2.tensors.remove(0);
    assert_eq!(h2.architecture(), None);
    assert_eq!(h2.get_u64("general.alignment"), Some(32));
    assert!(h2.tensor("token_embd.weight").is_none());
    assert_eq!(h2.tensor("output_norm.weight").unwrap().offset, 352);
}

#[test]
fn architecture_checks() {
    let with_arch = |v: Value| parse_full(&GgufBuilder::new().kv("general.architecture", v).build()).unwrap();
    let h = with_arch(Value::String("llama".into()));
    assert_eq!(
        check_architecture(&h, &["qwen35"]),
        Err(GgufError::WrongArchitecture { found: "llama".into(), expected: "qwen35".into() })
    );
    assert!(check_architecture(&h, &["qwen35", "llama"]).is_ok());
    let e = check_architecture(&h, &["qwen35", "clef"]).unwrap_err();
    assert!(e.to_string().contains("qwen35 or clef"), "{e}");

    let none = parse_full(&GgufBuilder::new().build()).unwrap();
    assert_eq!(check_architecture(&none, &["qwen35"]), Err(GgufError::MissingKey("general.architecture".into())));

    // A non-string architecture is rejected by the parser already.
    let bytes = GgufBuilder::new().kv("general.architecture", Value::U32(1)).build();
    assert!(matches!(parse_err(&bytes), GgufError::BadKeyType { key, .. } if key == "general.architecture"));
}

/// Offset of the first key's length field (right after magic, version and the two counts).
const FIRST_KEY: usize = 24;

fn patch(bytes: &mut [u8], at: usize, with: &[u8]) {
    bytes[at..at + with.len()].copy_from_slice(with);
}

#[test]
fn corrupt_fixed_header() {
    let good = small_model().build();

    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(parse_err(&b), GgufError::BadMagic);
    assert_eq!(parse_header(b"GGUX", None), Err(GgufError::BadMagic));
    assert_eq!(parse_header(b"G", None), Err(GgufError::NeedMore { needed: 4 }));
    assert_eq!(parse_header(b"", None), Err(GgufError::NeedMore { needed: 4 }));
    assert_eq!(parse_header(b"PK\x03\x04", None), Err(GgufError::BadMagic));
    assert_eq!(parse_header(b"\x89", None), Err(GgufError::BadMagic));

    for v in [0u32, 1, 4, 99, u32::MAX] {
        let mut b = good.clone();
        patch(&mut b, 4, &v.to_le_bytes());
        assert_eq!(parse_err(&b), GgufError::UnsupportedVersion(v));
    }
    // A big-endian file: the version reads byte-swapped, and the message says why.
    let mut b = good.clone();
    patch(&mut b, 4, &3u32.to_be_bytes());
    let e = parse_err(&b);
    assert_eq!(e, GgufError::UnsupportedVersion(3u32.swap_bytes()));
    assert!(e.to_string().contains("big-endian"));

    for (at, what) in [(8, "tensor"), (16, "key")] {
        for n in [1u64 << 62, u64::MAX, (1 << 20) + 1] {
            let mut b = good.clone();
            patch(&mut b, at, &n.to_le_bytes());
            assert!(
                matches!(parse_err(&b), GgufError::TooLarge { what: w, value } if value == n && w.contains(what)),
                "{at} {n}"
            );
            // Same answer when only the first bytes are there and the size is unknown.
            let e = parse_header(&b[..32], None).unwrap_err();
            assert!(matches!(e, GgufError::TooLarge { .. }), "{e:?}");
        }
    }
    // More keys than the file holds (but within the limit): the file ends early.
    let mut b = GgufBuilder::new().kv("general.architecture", Value::String("qwen35".into()));
    b.n_kv_override = Some(1000);
    assert!(matches!(parse_err(&b.build_header()), GgufError::Truncated { what } if what.contains("key #1")));
}

#[test]
fn corrupt_strings_and_values() {
    let good = small_model().build();

    // A key length of 2^63.
    let mut b = good.clone();
    patch(&mut b, FIRST_KEY, &(1u64 << 63).to_le_bytes());
    assert!(matches!(parse_err(&b), GgufError::TooLarge { value, .. } if value == 1 << 63));

    // A string value of length 2^63, and one of 2^29 in a small file.
    let base = GgufBuilder::new().kv("general.architecture", Value::String("qwen35".into()));
    let b = base.clone().raw_kv(b"s", 8, (1u64 << 63).to_le_bytes().to_vec()).build();
    assert!(matches!(parse_err(&b), GgufError::TooLarge { what, value } if value == 1 << 63 && what.contains("key s")));
    let b = base.clone().raw_kv(b"s", 8, (1u64 << 29).to_le_bytes().to_vec()).build_header();
    assert!(matches!(parse_err(&b), GgufError::Truncated { what } if what.contains("key s")));
    match parse_header(&b, None) {
        // The caller learns how far the string reaches.
        Err(GgufError::NeedMore { needed }) => assert_eq!(needed, b.len() as u64 + (1 << 29)),
        r => panic!("{r:?}"),
    }

    // Array counts: 2^40 is over the limit; 1000 u32s need 4000 bytes.
    let arr = |ty: u32, n: u64| {
        let mut p = ty.to_le_bytes().to_vec();
        p.extend_from_slice(&n.to_le_bytes());
        base.clone().raw_kv(b"a", 9, p).build_header()
    };
    for ty in [0, 4, 8, 9, 12] {
        assert!(matches!(parse_err(&arr(ty, 1 << 40)), GgufError::TooLarge { value, .. } if value == 1 << 40));
        assert!(matches!(parse_err(&arr(ty, u64::MAX)), GgufError::TooLarge { .. }));
    }
    let b = arr(4, 1000);
    assert!(matches!(parse_err(&b), GgufError::Truncated { .. }));
    assert_eq!(parse_header(&b, None), Err(GgufError::NeedMore { needed: b.len() as u64 + 4000 }));
    let b = arr(8, 1000); // strings: at least 8 bytes each
    assert_eq!(parse_header(&b, None), Err(GgufError::NeedMore { needed: b.len() as u64 + 8000 }));

    // Unknown value types, as a value and as an array item type.
    for ty in [13u32, 99, u32::MAX] {
        let b = base.clone().raw_kv(b"x", ty, vec![0; 16]).build();
        assert_eq!(parse_err(&b), GgufError::UnknownValueType(ty));
        assert_eq!(parse_err(&arr(ty, 1)), GgufError::UnknownValueType(ty));
    }

    // Duplicate key.
    let b = base.clone().kv("general.architecture", Value::String("x".into())).build();
    assert_eq!(parse_err(&b), GgufError::DuplicateKey("general.architecture".into()));

    // Invalid UTF-8: in a key, in a string value, in an array item.
    let b = base.clone().raw_kv(&[0x66, 0xff, 0xfe], 4, vec![0; 4]).build();
    assert!(matches!(parse_err(&b), GgufError::InvalidUtf8 { what } if what.contains("key #1")));
    let mut p = Vec::new();
    put_bytes(&mut p, &[0xc3]);
    let b = base.clone().raw_kv(b"s", 8, p.clone()).build();
    assert!(matches!(parse_err(&b), GgufError::InvalidUtf8 { what } if what.contains("key s")));
    let mut q = 8u32.to_le_bytes().to_vec();
    q.extend_from_slice(&1u64.to_le_bytes());
    q.extend_from_slice(&p);
    let b = base.clone().raw_kv(b"t", 9, q).build();
    assert!(matches!(parse_err(&b), GgufError::InvalidUtf8 { .. }));

    // Arrays nest up to MAX_ARRAY_DEPTH levels, not more.
    let nest = |depth: u32| {
        let mut a = Array::U8(vec![7]);
        for _ in 1..depth {
            a = Array::Array(vec![a]);
        }
        base.clone().kv("n", Value::Array(a)).build()
    };
    assert!(parse_full(&nest(MAX_ARRAY_DEPTH)).is_ok());
    assert!(matches!(parse_err(&nest(MAX_ARRAY_DEPTH + 1)), GgufError::TooLarge { .. }));
    // A deep nest made only of headers never recurses far.
    let mut deep = Vec::new();
    for _ in 0..100_000 {
        deep.extend_from_slice(&9u32.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    assert!(matches!(parse_err(&base.clone().raw_kv(b"d", 9, deep).build()), GgufError::TooLarge { .. }));

    // general.alignment: 0 and 3 are not powers of two; it must be a u32.
    for a in [0u32, 3, 48] {
        let b = GgufBuilder::new().kv("general.alignment", Value::U32(a)).build();
        assert_eq!(parse_err(&b), GgufError::BadAlignment(a.into()));
    }
    for v in [Value::U64(32), Value::String("32".into())] {
        let b = GgufBuilder::new().kv("general.alignment", v).build();
        assert!(matches!(parse_err(&b), GgufError::BadKeyType { key, .. } if key == "general.alignment"));
    }
}

#[test]
fn corrupt_tensors() {
    let model = small_model();
    let bad_tensor = |edit: &dyn Fn(&mut GgufBuilder)| {
        let mut b = model.clone();
        edit(&mut b);
        parse_err(&b.build())
    };
    let is_bad = |e: &GgufError, name: &str, reason: &str| matches!(e, GgufError::BadTensor { name: n, reason: r } if n == name && r.contains(reason));
    const T1: &str = "blk.0.ffn_up.weight"; // Q4_K [256, 1] @ 64

    let e = bad_tensor(&|b| b.tensors[1].ty = 99);
    assert_eq!(e, GgufError::UnknownTensorType { name: T1.into(), id: 99 });
    let e = bad_tensor(&|b| b.tensors[1].ty = 4); // Q4_2, removed from ggml
    assert_eq!(e, GgufError::UnknownTensorType { name: T1.into(), id: 4 });

    let e = bad_tensor(&|b| b.tensors[1].dims = vec![]);
    assert!(is_bad(&e, T1, "0 dimensions"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[1].dims = vec![256, 1, 1, 1, 1]);
    assert!(is_bad(&e, T1, "5 dimensions"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[1].dims = vec![256, 0]);
    assert!(is_bad(&e, T1, "ne1 = 0"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[1].dims = vec![256, u64::MAX]); // -1 as i64
    assert!(is_bad(&e, T1, "ne1 = -1"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[0].dims = vec![1 << 32, 1 << 32]);
    assert!(is_bad(&e, "token_embd.weight", "overflows"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[0].dims = vec![1 << 31, 1 << 31, 4]); // 2^64 elements
    assert!(is_bad(&e, "token_embd.weight", "overflows"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[1].dims = vec![100, 1]);
    assert!(is_bad(&e, T1, "not a multiple of the Q4_K block size 256"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[1].offset = 68);
    assert!(is_bad(&e, T1, "alignment"), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[1].offset = u64::MAX - 31);
    assert!(is_bad(&e, T1, "beyond"), "{e:?}");

    // Beyond the end of the file: Truncated, naming the tensor (only detectable with the size).
    let mut b = model.clone();
    b.tensors[1].offset = 1 << 20;
    let bytes = b.build();
    assert_eq!(parse_err(&bytes), GgufError::Truncated { what: T1.into() });
    let h = parse_header(&bytes, None).unwrap();
    assert_eq!(h.data_size, (1 << 20) + 160);

    // Overlaps: two tensors at 0; one starting inside another.
    let e = bad_tensor(&|b| b.tensors[1].offset = 0);
    assert!(matches!(&e, GgufError::BadTensor { reason, .. } if reason.contains("overlaps")), "{e:?}");
    let e = bad_tensor(&|b| b.tensors[3].offset = 320);
    assert!(is_bad(&e, "output_norm.weight", "overlaps tensor blk.0.attn_q.weight"), "{e:?}");
    // Touching is fine, and so is any order in the table.
    let mut b = model.clone();
    b.tensors.swap(0, 3);
    assert!(parse_full(&b.build()).is_ok());

    let e = bad_tensor(&|b| b.tensors[2].name = b.tensors[0].name.clone());
    assert_eq!(e, GgufError::DuplicateTensor("token_embd.weight".into()));
    let e = bad_tensor(&|b| b.tensors[2].name = vec![b'x', 0x80]);
    assert!(matches!(e, GgufError::InvalidUtf8 { what } if what.contains("tensor #2")));
}

/// A layout parse: a 2000-item string array becomes `Array::Elided` with its length, a short one
/// stays; everything else equals the full parse. Its items are checked all the same: invalid
/// UTF-8 in item 1500 is the same error either way, and every cut gives the same result.
#[test]
fn layout_parse_elides_long_string_arrays() {
    let words: Vec<String> = (0..2000).map(|i| format!("w{i}")).collect();
    let mut bad = words.clone(); // below: item 1500 with a byte that is not UTF-8
    let b = small_model().kv("long", Value::Array(Array::String(words.clone())));
    let bytes = b.build();
    let full = parse_full(&bytes).unwrap();
    let layout = parse_header_with(&bytes, Some(bytes.len() as u64), Detail::Layout).unwrap();
    assert_eq!(full.get_array("long"), Some(&Array::String(words)));
    assert_eq!(layout.get_array("long"), Some(&Array::Elided { len: 2000 }));
    assert_eq!(layout.get_array("long").unwrap().len(), 2000);
    assert_eq!((&layout.tensors, layout.data_offset, layout.data_size), (&full.tensors, full.data_offset, full.data_size));
    for ((k, v), (k2, v2)) in full.metadata.iter().zip(&layout.metadata) {
        assert_eq!(k, k2);
        if k != "long" {
            assert_eq!(v, v2, "{k}");
        }
    }
    for cut in (0..bytes.len()).step_by(97) {
        for size in [None, Some(cut as u64), Some(bytes.len() as u64)] {
            let p = &bytes[..cut];
            let (f, l) = (parse_header(p, size), parse_header_with(p, size, Detail::Layout));
            assert_eq!(f.as_ref().err(), l.as_ref().err(), "cut {cut}, size {size:?}");
        }
    }
    // Item 1500 with a byte that is not UTF-8.
    bad[1500] = "\u{1}\u{2}\u{3}".into();
    let mut bytes = small_model().kv("long", Value::Array(Array::String(bad))).build();
    let needle = [3u8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]; // the u64 length 3, then the bytes 1, 2, 3
    let at = bytes.windows(needle.len()).position(|w| w == needle).unwrap() + 8;
    bytes[at] = 0xff;
    let e = parse_err(&bytes);
    assert!(matches!(&e, GgufError::InvalidUtf8 { what } if what.contains("long")), "{e:?}");
    assert_eq!(parse_header_with(&bytes, Some(bytes.len() as u64), Detail::Layout).err(), Some(e));
}

/// Every prefix of the small file: `NeedMore` while the header is incomplete (size unknown or
/// larger), `Truncated` when the prefix is said to be the whole file, and the full header once
/// the data section starts (size unknown).
#[test]
fn every_truncation_of_the_small_file() {
    let bytes = small_model().build();
    let len = bytes.len() as u64;
    let full = parse_full(&bytes).unwrap();
    for cut in 0..bytes.len() {
        let p = &bytes[..cut];
        let c = cut as u64;
        match parse_header(p, Some(c)) {
            Err(GgufError::Truncated { .. }) => {}
            r => panic!("cut {cut}: {r:?}"),
        }
        for size in [None, Some(len)] {
            match parse_header(p, size) {
                Err(GgufError::NeedMore { needed }) => {
                    assert!(c < full.data_offset && needed > c && needed <= full.data_offset, "cut {cut}: {needed}")
                }
                Ok(h) => {
                    assert!(c >= full.data_offset, "cut {cut}");
                    assert_eq!(h, full);
                }
                r => panic!("cut {cut}: {r:?}"),
            }
        }
    }
    // A prefix longer than the stated file size is cut to it.
    assert!(matches!(parse_header(&bytes, Some(100)), Err(GgufError::Truncated { .. })));

    // Growing the prefix to exactly `needed` each time converges.
    let mut have = 1;
    let mut calls = 0;
    let h = loop {
        calls += 1;
        match parse_header(&bytes[..have], None) {
            Ok(h) => break h,
            Err(GgufError::NeedMore { needed }) => have = needed as usize,
            Err(e) => panic!("{e:?}"),
        }
    };
    assert_eq!(h, full);
    assert!(calls < 200, "{calls}");
}

/// Byte flips and random mutations of the small file never panic (any result is fine).
#[test]
fn mutations_never_panic() {
    let bytes = small_model().build();
    let len = bytes.len();
    let mut accepted = 0;
    for i in 0..len {
        let mut b = bytes.clone();
        b[i] ^= 0xff;
        accepted += parse_full(&b).is_ok() as usize;
        let _ = parse_header(&b, None);
        let _ = parse_header(&b[..i], None);
    }
    assert!(accepted < len); // most flips must be caught

    let mut rng = Rng(0x1234_5678_9abc_def1);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(len as u64) as usize;
            b[i] = match rng.below(4) {
                0 => 0,
                1 => 0xff,
                2 => rng.below(16) as u8,
                _ => rng.next() as u8,
            };
        }
        let cut = if rng.below(4) == 0 { rng.below(len as u64) as usize } else { len };
        let _ = parse_header(&b[..cut], Some(cut as u64));
        let _ = parse_header(&b[..cut], None);
    }
}

#[test]
fn error_messages_are_one_line() {
    let all = [
        GgufError::NeedMore { needed: 100 },
        GgufError::BadMagic,
        GgufError::UnsupportedVersion(1),
        GgufError::Truncated { what: "x".into() },
        GgufError::TooLarge { what: "x".into(), value: 1 },
        GgufError::UnknownValueType(13),
        GgufError::UnknownTensorType { name: "x".into(), id: 99 },
        GgufError::BadTensor { name: "x".into(), reason: "y".into() },
        GgufError::DuplicateKey("x".into()),
        GgufError::DuplicateTensor("x".into()),
        GgufError::BadAlignment(3),
        GgufError::InvalidUtf8 { what: "x".into() },
        GgufError::WrongArchitecture { found: "a".into(), expected: "b".into() },
        GgufError::MissingKey("x".into()),
        GgufError::BadKeyType { key: "x".into(), expected: "y".into() },
    ];
    for e in all {
        let m = e.to_string();
        assert!(!m.is_empty() && !m.contains('\n'), "{m:?}");
        let _: &dyn std::error::Error = &e;
    }
    assert_eq!(GgufError::BadMagic.to_string(), "not a GGUF file (bad magic)");
    // Values encode as the writer expects (sanity check of the test helper itself).
    assert_eq!(encode_value(&Value::Bool(true)), (7, vec![1]));
}

// =============================================================================================
// Real fixtures (native only: wasm has no filesystem)
// =============================================================================================

#[cfg(not(target_arch = "wasm32"))]
mod fixtures {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    /// `$CLEF_FIXTURES`, or `shared/fixtures` in or next to the checkout.
    fn fixtures_dir() -> Option<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let candidates = [
            std::env::var_os("CLEF_FIXTURES").map(PathBuf::from),
            Some(root.join("shared/fixtures")),
            Some(root.join("../shared/fixtures")),
        ];
        let found = candidates.into_iter().flatten().find(|p| p.join("qwen35-tiny").is_dir());
        if found.is_none() {
            eprintln!("fixtures not found (set CLEF_FIXTURES): skipping");
        }
        found
    }

    fn gguf_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                gguf_files(&p, out);
            } else if p.extension().is_some_and(|e| e == "gguf") {
                out.push(p);
            }
        }
    }

    #[test]
    fn every_fixture_parses() {
        let Some(dir) = fixtures_dir() else { return };
        let mut files = Vec::new();
        gguf_files(&dir, &mut files);
        assert!(files.len() >= 20, "{files:?}");
        for path in &files {
            let bytes = std::fs::read(path).unwrap();
            let h = parse_full(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(h.data_offset % h.alignment, 0);
            for t in &h.tensors {
                assert!(h.tensor_range(t).end <= bytes.len() as u64);
            }
            if !h.tensors.is_empty() {
                assert_eq!(h.file_size(), bytes.len() as u64, "{}", path.display());
            }
            // The header alone (without the tensor data) is enough.
            let header_len = bytes.len().min(h.data_offset as usize);
            assert_eq!(parse_header(&bytes[..header_len], None).unwrap(), h);
            eprintln!(
                "{}: v{} arch {:?}, {} keys, {} tensors, header {} bytes",
                path.strip_prefix(&dir).unwrap().display(),
                h.version,
                h.architecture(),
                h.metadata.len(),
                h.tensors.len(),
                h.data_offset
            );
        }
    }

    /// Tensor names, types and shapes of every A-T.gguf equal tensor_types.json["T"].
    #[test]
    fn tiny_models_match_tensor_types_json() {
        let Some(dir) = fixtures_dir() else { return };
        let dir = dir.join("qwen35-tiny");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("tensor_types.json")).unwrap()).unwrap();
        let mut checked = 0;
        for (quant, table) in json.as_object().unwrap() {
            let path = dir.join(format!("A-{quant}.gguf"));
            if !path.exists() {
                continue; // F16 / BF16 are listed but not shipped
            }
            let bytes = std::fs::read(&path).unwrap();
            let h = parse_full(&bytes).unwrap();
            check_architecture(&h, &["qwen35"]).unwrap();
            assert_eq!(h.file_size(), bytes.len() as u64);
            let table = table.as_object().unwrap();
            assert_eq!(h.tensors.len(), table.len(), "{quant}");
            for (name, entry) in table {
                let t = h.tensor(name).unwrap_or_else(|| panic!("{quant}: no {name}"));
                assert_eq!(t.ty.name(), entry[0].as_str().unwrap(), "{quant} {name}");
                let ne: Vec<u64> = entry[1].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
                assert_eq!(t.dims, ne, "{quant} {name}");
            }
            checked += 1;
        }
        assert!(checked >= 20, "{checked}");
    }

    /// Python's repr() of a str, for the printable strings of the fixtures.
    fn py_repr(s: &str) -> String {
        let q = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
        let mut out = String::from(q);
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c == q => {
                    out.push('\\');
                    out.push(c);
                }
                c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push(q);
        out
    }

    /// A-F32.metadata.json (written by gguf-py) lists every key; scalars and
    /// short arrays are given as JSON values, long arrays as "array[N] first5=[...]".
    #[test]
    fn a_f32_metadata_matches_json() {
        let Some(dir) = fixtures_dir() else { return };
        let dir = dir.join("qwen35-tiny");
        let h = parse_full(&std::fs::read(dir.join("A-F32.gguf")).unwrap()).unwrap();
        let json: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&std::fs::read(dir.join("A-F32.metadata.json")).unwrap()).unwrap();
        // (Compared as sets: serde_json keeps or sorts the keys depending on its features.)
        let mut keys: Vec<&str> = h.metadata.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        let mut json_keys: Vec<&str> = json.keys().map(|k| k.as_str()).collect();
        json_keys.sort_unstable();
        assert_eq!(keys, json_keys);

        for (key, want) in &json {
            let got = h.get(key).unwrap();
            match want {
                serde_json::Value::String(s) if s.starts_with("array[") => {
                    let a = got.as_array().unwrap_or_else(|| panic!("{key}"));
                    let (n, first5) = s["array[".len()..].split_once("] first5=").unwrap();
                    assert_eq!(a.len(), n.parse::<usize>().unwrap(), "{key}");
                    let mine = match a {
                        Array::String(v) => v[..5].iter().map(|s| py_repr(s)).collect::<Vec<_>>(),
                        a => a.as_u64_vec().unwrap()[..5].iter().map(|x| x.to_string()).collect(),
                    };
                    assert_eq!(format!("[{}]", mine.join(", ")), first5, "{key}");
                }
                serde_json::Value::String(s) => assert_eq!(got.as_str(), Some(s.as_str()), "{key}"),
                serde_json::Value::Bool(b) => assert_eq!(got, &Value::Bool(*b), "{key}"),
                serde_json::Value::Number(n) if n.is_u64() => {
                    assert_eq!(h.get_u64(key), n.as_u64(), "{key}");
                    assert!(matches!(got, Value::U32(_)), "{key}: {got:?}");
                }
                serde_json::Value::Number(n) => assert_eq!(h.get_f32(key), Some(n.as_f64().unwrap() as f32), "{key}"),
                serde_json::Value::Array(items) => {
                    let a = got.as_array().unwrap_or_else(|| panic!("{key}"));
                    if items[0].is_boolean() {
                        let want: Vec<bool> = items.iter().map(|x| x.as_bool().unwrap()).collect();
                        assert_eq!(a, &Array::Bool(want), "{key}");
                    } else {
                        let want: Vec<i32> = items.iter().map(|x| x.as_i64().unwrap() as i32).collect();
                        assert_eq!(a, &Array::I32(want), "{key}");
                    }
                }
                other => panic!("{key}: unexpected {other:?}"),
            }
        }
        assert_eq!(h.get_f32("qwen35.attention.layer_norm_rms_epsilon"), Some(1e-6));
        assert_eq!(require_u64(&h, "qwen35.block_count"), Ok(4));
    }

    fn vocab() -> Option<Vec<u8>> {
        Some(std::fs::read(fixtures_dir()?.join("tokenizer/qwen35-vocab.gguf")).unwrap())
    }

    /// Grow the prefix from 64 KiB to `needed` or ×2 (what a browser loader does): the result
    /// equals parsing the whole file. Also reports the parse time.
    #[test]
    fn vocab_incremental() {
        let Some(bytes) = vocab() else { return };
        let len = bytes.len() as u64;

        let mut best = f64::MAX;
        let mut full = None;
        for _ in 0..5 {
            let t = Instant::now();
            let h = parse_full(&bytes).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            full = Some(h);
        }
        let full = full.unwrap();
        let tokens = full.get_array("tokenizer.ggml.tokens").unwrap();
        let merges = full.get_array("tokenizer.ggml.merges").unwrap();
        eprintln!(
            "vocab GGUF: {:.1} MB, {} tokens, {} merges, {} keys: parsed in {:.1} ms (best of 5)",
            len as f64 / 1e6,
            tokens.len(),
            merges.len(),
            full.metadata.len(),
            best * 1e3
        );
        assert!(tokens.len() > 248_000 && merges.len() > 247_000);
        assert!(best < 2.0, "parsing took {best} s");

        for size in [None, Some(len)] {
            let mut have = 64 << 10;
            let mut calls = 0;
            let h = loop {
                calls += 1;
                match parse_header(&bytes[..have], size) {
                    Ok(h) => break h,
                    Err(GgufError::NeedMore { needed }) => {
                        assert!(needed > have as u64 && needed <= len, "{needed}");
                        have = (needed as usize).max(2 * have).min(bytes.len());
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            assert_eq!(h, full);
            eprintln!("incremental ({size:?}): {calls} calls");
            assert!(calls <= 10);
        }
    }

    /// The real vocabulary: a layout parse elides the tokens and merges (their counts kept) and
    /// agrees with the full one on everything else and on cuts. Also reports both parse times.
    #[test]
    fn vocab_layout_parse() {
        let Some(bytes) = vocab() else { return };
        let len = Some(bytes.len() as u64);
        let time = |detail| {
            let t = Instant::now();
            let h = parse_header_with(&bytes, len, detail).unwrap();
            (h, t.elapsed().as_secs_f64() * 1e3)
        };
        let ((full, tf), (layout, tl)) = (time(Detail::Full), time(Detail::Layout));
        eprintln!("vocab GGUF: full parse {tf:.1} ms, layout parse {tl:.1} ms");
        for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"] {
            assert_eq!(layout.get_array(key), Some(&Array::Elided { len: full.get_array(key).unwrap().len() }), "{key}");
        }
        assert_eq!(full.metadata.len(), layout.metadata.len());
        for ((k, v), (k2, v2)) in full.metadata.iter().zip(&layout.metadata) {
            assert_eq!(k, k2);
            match v2 {
                Value::Array(Array::Elided { len }) => assert!(matches!(v, Value::Array(Array::String(a)) if a.len() == *len && *len > 1024), "{k}"),
                _ => assert_eq!(v, v2, "{k}"),
            }
        }
        assert_eq!((&full.tensors, full.data_offset), (&layout.tensors, layout.data_offset));
        let mut rng = Rng(7);
        for _ in 0..100 {
            let cut = rng.below(bytes.len() as u64) as usize;
            assert_eq!(parse_header(&bytes[..cut], None).err(), parse_header_with(&bytes[..cut], None, Detail::Layout).err(), "cut {cut}");
        }
    }

    /// Every cut in the first 200 bytes and at ~500 random points: `NeedMore` beyond the cut
    /// when the size is unknown, `Truncated` when the cut is the whole file.
    #[test]
    fn vocab_cuts() {
        let Some(bytes) = vocab() else { return };
        let mut rng = Rng(42);
        let mut cuts: Vec<usize> = (0..200).collect();
        cuts.extend((0..500).map(|_| rng.below(bytes.len() as u64) as usize));
        for (i, &cut) in cuts.iter().enumerate() {
            let p = &bytes[..cut];
            match parse_header(p, None) {
                Err(GgufError::NeedMore { needed }) => assert!(needed > cut as u64, "{cut}: {needed}"),
                r => panic!("cut {cut}: {:?}", r.map(|_| ())),
            }
            match parse_header(p, Some(cut as u64)) {
                Err(GgufError::Truncated { .. }) => {}
                r => panic!("cut {cut}: {:?}", r.map(|_| ())),
            }
            if i % 10 == 0 {
                assert!(matches!(parse_header(p, Some(bytes.len() as u64)), Err(GgufError::NeedMore { .. })));
            }
        }
    }
}
