//! Byte-level BPE tokenizer of qwen35 (Qwen3.5), built from the GGUF vocabulary (spec §4).
//!
//! # Encoding
//! 1. **Special tokens.** The input is scanned left to right for the texts of the special tokens
//!    (GGUF types CONTROL and USER_DEFINED); at each position the longest matching text wins.
//!    USER_DEFINED tokens (`<think>`, `<tool_call>`, …) are always recognised, CONTROL tokens
//!    (`<|im_start|>`, …) only with `parse_special` (as llama.cpp does; with it off they are encoded as
//!    plain text). The special texts of this vocabulary never overlap, so this leftmost-longest scan gives
//!    the same result as llama.cpp's "longest token first" partitioning and as HF's matcher.
//! 2. **Normalisation.** Every text fragment between special tokens is put in Unicode NFC, like the HF
//!    tokenizer (its `tokenizer.json` has an NFC normaliser) and tiktoken-based Qwen tokenizers. llama.cpp
//!    skips this step, so it differs from HF on decomposed input (e.g. `e` + U+0301); we follow HF.
//! 3. **Pre-tokenisation** with the qwen35 regex, hand-written in [`PreTokenizer`] (see `pretok.rs`).
//! 4. **BPE** on each piece: the piece's UTF-8 bytes start as one symbol each (the token whose text is the
//!    GPT-2 `bytes_to_unicode` char of that byte); then the adjacent pair with the lowest merge rank is
//!    merged, leftmost first on ties, until no pair has a merge. Merges are stored by token ids:
//!    `(left_id, right_id) → (rank, merged_id)`, so encoding never touches strings. Short pieces use a
//!    quadratic scan over a small array, long ones a binary heap over a linked list (same result).
//!    No BOS is added by [`Tokenizer::encode`]; callers check [`Tokenizer::add_bos`] (false for qwen35).
//!
//! # Decoding
//! Each token has a byte string: normal tokens map their text back through the inverse of
//! `bytes_to_unicode`; special and unused tokens are their text as UTF-8. Decoding concatenates the bytes
//! and converts them to UTF-8, replacing invalid sequences with U+FFFD (exactly as
//! `String::from_utf8_lossy`). CONTROL and UNUSED tokens are skipped unless `render_special`.
//! Out-of-range ids have no bytes: they are skipped (never a panic). [`StreamDecoder`] does the same
//! incrementally, holding back an incomplete UTF-8 sequence until it completes.

mod pretok;
mod unicode_tables;

pub use pretok::{char_class, CharClass, Pieces, PreTokenizer};
pub use unicode_tables::UNICODE_VERSION;

use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};

/// Why a tokenizer could not be built.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenizerError {
    /// A required GGUF key is absent (or has the wrong type).
    MissingKey(String),
    /// A tokenizer model or pre-tokenizer this crate does not implement.
    Unsupported(String),
    /// Inconsistent data (lengths, ids out of range, …).
    Invalid(String),
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerError::MissingKey(k) => write!(f, "tokenizer: missing GGUF key {k}"),
            TokenizerError::Unsupported(what) => write!(f, "tokenizer: unsupported {what}"),
            TokenizerError::Invalid(why) => write!(f, "tokenizer: invalid vocabulary: {why}"),
        }
    }
}

impl std::error::Error for TokenizerError {}

// GGUF `tokenizer.ggml.token_type` values.
const TT_UNKNOWN: i32 = 2;
const TT_CONTROL: i32 = 3;
const TT_USER_DEFINED: i32 = 4;
const TT_UNUSED: i32 = 5;
const TT_BYTE: i32 = 6;

/// How a token takes part in encoding and decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// NORMAL / BYTE (and undefined types): a byte-level BPE token.
    Normal,
    /// CONTROL (and UNKNOWN): matched in text only with `parse_special`, rendered only on request.
    Control,
    /// USER_DEFINED: always matched in text, always rendered.
    UserDefined,
    /// UNUSED (`[PAD…]`): never produced by encoding, rendered only on request.
    Unused,
}

/// Texts of the tokens that end generation besides eos (spec §4; llama.cpp's auto-detected EOT/FIM roles).
const EOG_TEXTS: [&str; 5] = ["<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"];

// ---------------------------------------------------------------------------------------------------
// Hashing

/// FxHash (the multiply-rotate hash of Firefox/rustc), with a final rotation so that the well-mixed
/// high bits land in the low bits that hash tables use for bucket indices.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

const FX_K: u64 = 0x517c_c1b7_2722_0a95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u64(&mut self, w: u64) {
        self.add(w);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(b);
    h.finish()
}

/// All token strings in one buffer (`offsets[i]..offsets[i + 1]` is token i), plus an open-addressing
/// hash index from text to id — no per-token allocation.
struct Strings {
    data: String,
    offsets: Vec<u32>,
    /// Slots hold id + 1 (0 = empty); linear probing; power-of-two size ≥ 2 × count.
    slots: Vec<u32>,
    /// Whether some text occurs twice (the index keeps the first id).
    duplicates: bool,
}

impl Strings {
    #[inline]
    fn get(&self, id: u32) -> &str {
        let i = id as usize;
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// The slot holding `key`, or the empty slot where it would go.
    #[inline]
    fn find(&self, key: &str) -> usize {
        let mask = self.slots.len() - 1;
        let mut s = hash_bytes(key.as_bytes()) as usize & mask;
        loop {
            let v = self.slots[s];
            if v == 0 || self.get(v - 1) == key {
                return s;
            }
            s = (s + 1) & mask;
        }
    }

    fn lookup(&self, key: &str) -> Option<u32> {
        self.slots[self.find(key)].checked_sub(1)
    }

    /// Adds `id` to the index unless its text is already there (the first id inserted wins).
    fn index(&mut self, id: u32) {
        let s = self.find(self.get(id));
        if self.slots[s] == 0 {
            self.slots[s] = id + 1;
        } else {
            self.duplicates = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// GPT-2 byte ↔ unicode mapping

/// GPT-2 `bytes_to_unicode`: printable Latin-1 bytes (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) map to themselves, the
/// other 68 bytes, in increasing order, to U+0100, U+0101, …
fn byte_to_char_table() -> [char; 256] {
    let mut t = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        let cp = if printable {
            b
        } else {
            next += 1;
            next - 1
        };
        t[b as usize] = char::from_u32(cp).unwrap_or('\0');
    }
    t
}

/// Appends the bytes a byte-level token text stands for; a char outside the mapping (not produced by
/// GPT-2 style vocabularies) contributes its own UTF-8 bytes.
fn byte_level_decode(text: &str, inverse: &[i16; 324], out: &mut Vec<u8>) {
    for c in text.chars() {
        match inverse.get(c as usize) {
            Some(&b) if b >= 0 => out.push(b as u8),
            _ => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
}

/// `<0xHH>` → HH (the text of BYTE tokens in SentencePiece-style vocabularies).
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

// ---------------------------------------------------------------------------------------------------
// The tokenizer

/// A special token as matched in input text.
struct Special {
    id: u32,
    /// USER_DEFINED: matched even without `parse_special`.
    always: bool,
}

/// Byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = "gpt2"`). Immutable once built; `Send + Sync`.
pub struct Tokenizer {
    /// Vocabulary texts and the text → id index.
    texts: Strings,
    /// Decoded bytes of every token: `bytes[byte_off[i]..byte_off[i + 1]]`.
    bytes: Vec<u8>,
    byte_off: Vec<u32>,
    kinds: Vec<Kind>,
    /// Token of each single byte (`u32::MAX` if the vocabulary lacks it).
    byte_ids: [u32; 256],
    /// `(left << 32) | right` → (rank, merged id).
    merges: HashMap<u64, (u32, u32), FxBuild>,
    /// Special tokens grouped by the first byte of their text, longest text first within a group.
    specials: Vec<Vec<Special>>,
    pre: PreTokenizer,
    eos: Option<u32>,
    bos: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_vocab", &self.n_vocab())
            .field("n_merges", &self.merges.len())
            .field("pre", &self.pre)
            .field("eos", &self.eos)
            .field("bos", &self.bos)
            .field("pad", &self.pad)
            .field("add_bos", &self.add_bos)
            .field("eog", &self.eog)
            .finish()
    }
}

/// Pieces with at most this many bytes are merged with the array scan, longer ones with the heap.
const SMALL_PIECE: usize = 48;

impl Tokenizer {
    /// Builds the tokenizer from the GGUF `tokenizer.ggml.*` values.
    ///
    /// * `tokens`: vocabulary texts (byte-level strings for BPE tokens, plain text for added tokens);
    /// * `token_types`: GGUF token types, one per token (empty = all NORMAL);
    /// * `merges`: `"left right"` strings, rank = index. Merges whose parts or concatenation are not in
    ///   the vocabulary are ignored (they could never fire); for a repeated pair the lowest rank counts;
    /// * `eos` / `bos` / `pad`: special ids (checked to be in range); `add_bos`: reported by [`Self::add_bos`];
    /// * `pre`: `tokenizer.ggml.pre`: `"qwen35"`, or `"qwen2"` / `"deepseek-r1-qwen"` for the Qwen2 pattern.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts<T: AsRef<str>, M: AsRef<str>>(
        tokens: &[T],
        token_types: &[i32],
        merges: &[M],
        eos: Option<u32>,
        bos: Option<u32>,
        pad: Option<u32>,
        add_bos: bool,
        pre: &str,
    ) -> Result<Tokenizer, TokenizerError> {
        let pre = match pre {
            "qwen35" => PreTokenizer::Qwen35,
            "qwen2" | "deepseek-r1-qwen" => PreTokenizer::Qwen2,
            other => return Err(TokenizerError::Unsupported(format!("pre-tokenizer '{other}'"))),
        };
        let n = tokens.len();
        if n == 0 {
            return Err(TokenizerError::Invalid("empty vocabulary".into()));
        }
        if n >= (u32::MAX / 2) as usize {
            return Err(TokenizerError::Invalid(format!("{n} tokens")));
        }
        if !token_types.is_empty() && token_types.len() != n {
            return Err(TokenizerError::Invalid(format!("{} token types for {n} tokens", token_types.len())));
        }
        for (name, id) in [("eos", eos), ("bos", bos), ("padding", pad)] {
            if let Some(id) = id {
                if id as usize >= n {
                    return Err(TokenizerError::Invalid(format!("{name} token id {id} ≥ vocabulary size {n}")));
                }
            }
        }
        let total: usize = tokens.iter().map(|t| t.as_ref().len()).sum();
        if total >= u32::MAX as usize {
            return Err(TokenizerError::Invalid("vocabulary text exceeds 4 GiB".into()));
        }

        // Texts, kinds and decoded bytes.
        let mut data = String::with_capacity(total);
        let mut offsets = Vec::with_capacity(n + 1);
        let mut kinds = Vec::with_capacity(n);
        let mut bytes = Vec::with_capacity(total);
        let mut byte_off = Vec::with_capacity(n + 1);
        let b2c = byte_to_char_table();
        let mut inverse = [-1i16; 324];
        for (b, &c) in b2c.iter().enumerate() {
            inverse[c as usize] = b as i16;
        }
        offsets.push(0);
        byte_off.push(0);
        for (i, t) in tokens.iter().enumerate() {
            let t = t.as_ref();
            let ty = token_types.get(i).copied().unwrap_or(1);
            let kind = match ty {
                TT_CONTROL | TT_UNKNOWN => Kind::Control,
                TT_USER_DEFINED => Kind::UserDefined,
                TT_UNUSED => Kind::Unused,
                _ => Kind::Normal,
            };
            data.push_str(t);
            offsets.push(data.len() as u32);
            kinds.push(kind);
            match kind {
                Kind::Normal => match parse_byte_token(t).filter(|_| ty == TT_BYTE) {
                    Some(b) => bytes.push(b),
                    None => byte_level_decode(t, &inverse, &mut bytes),
                },
                _ => bytes.extend_from_slice(t.as_bytes()),
            }
            byte_off.push(bytes.len() as u32);
        }

        // Text index: BPE tokens first, so that on a (never seen) duplicate text the BPE token wins.
        let cap = (2 * n).next_power_of_two();
        let mut texts = Strings { data, offsets, slots: vec![0; cap], duplicates: false };
        for pass_normal in [true, false] {
            for id in 0..n as u32 {
                if (kinds[id as usize] == Kind::Normal) == pass_normal {
                    texts.index(id);
                }
            }
        }

        // Single-byte tokens.
        let mut byte_ids = [u32::MAX; 256];
        for (b, &c) in b2c.iter().enumerate() {
            if let Some(id) = texts.lookup(c.encode_utf8(&mut [0; 4])) {
                byte_ids[b] = id;
            }
        }
        for (i, &ty) in token_types.iter().enumerate() {
            if ty == TT_BYTE {
                if let Some(b) = parse_byte_token(texts.get(i as u32)) {
                    if byte_ids[b as usize] == u32::MAX {
                        byte_ids[b as usize] = i as u32;
                    }
                }
            }
        }

        // Merges by id pair: first resolve the texts to ids (one scratch buffer for the concatenations,
        // no allocation per merge), then build the map (two passes are faster than interleaving them:
        // fewer cache misses).
        let mut resolved: Vec<(u64, u32, u32)> = Vec::with_capacity(merges.len());
        let mut scratch = String::new();
        let mut last_merged = u32::MAX;
        for (rank, m) in merges.iter().enumerate() {
            let m = m.as_ref();
            // Split at the first space after position 0 (a part is never empty). A space byte is never
            // inside a multi-byte char, so `sp` is a char boundary.
            let Some(sp) = m.as_bytes().iter().skip(1).position(|&b| b == b' ').map(|p| p + 1) else { continue };
            let (left, right) = (&m[..sp], &m[sp + 1..]);
            let (Some(l), Some(r)) = (texts.lookup(left), texts.lookup(right)) else { continue };
            // Vocabularies list merged tokens in merge order, so the token after the previous merge's
            // result is almost always this one's: check it before hashing the concatenation.
            let guess = last_merged.wrapping_add(1);
            let merged = if !texts.duplicates
                && (guess as usize) < n
                && texts.get(guess).strip_prefix(left).is_some_and(|rest| rest == right)
            {
                guess
            } else {
                scratch.clear();
                scratch.push_str(left);
                scratch.push_str(right);
                let Some(merged) = texts.lookup(&scratch) else { continue };
                merged
            };
            last_merged = merged;
            resolved.push((((l as u64) << 32) | r as u64, rank as u32, merged));
        }
        let mut pairs: HashMap<u64, (u32, u32), FxBuild> =
            HashMap::with_capacity_and_hasher(resolved.len(), FxBuild::default());
        for (key, rank, merged) in resolved {
            pairs.entry(key).or_insert((rank, merged));
        }

        // Special tokens, by first byte, longest first.
        let mut specials: Vec<Vec<Special>> = (0..256).map(|_| Vec::new()).collect();
        for id in 0..n as u32 {
            let kind = kinds[id as usize];
            let text = texts.get(id);
            if matches!(kind, Kind::Control | Kind::UserDefined) && !text.is_empty() {
                specials[text.as_bytes()[0] as usize].push(Special { id, always: kind == Kind::UserDefined });
            }
        }
        for group in &mut specials {
            group.sort_by_key(|s| (std::cmp::Reverse(texts.get(s.id).len()), s.id));
        }

        // End-of-generation set.
        let mut eog: Vec<u32> = eos.into_iter().collect();
        for t in EOG_TEXTS {
            if let Some(id) = texts.lookup(t) {
                if !eog.contains(&id) {
                    eog.push(id);
                }
            }
        }

        Ok(Tokenizer {
            texts,
            bytes,
            byte_off,
            kinds,
            byte_ids,
            merges: pairs,
            specials,
            pre,
            eos,
            bos,
            pad,
            add_bos,
            eog,
        })
    }

    /// Builds the tokenizer from a GGUF header's `tokenizer.ggml.*` keys (see [`Self::from_parts`]).
    /// Requires `tokenizer.ggml.model = "gpt2"` and a supported `tokenizer.ggml.pre`.
    pub fn from_gguf(h: &crate::gguf::Header) -> Result<Tokenizer, TokenizerError> {
        let missing = |k: &str| TokenizerError::MissingKey(k.to_string());
        let model = h.get_str("tokenizer.ggml.model").ok_or_else(|| missing("tokenizer.ggml.model"))?;
        if model != "gpt2" {
            return Err(TokenizerError::Unsupported(format!("tokenizer model '{model}' (only gpt2 byte-level BPE)")));
        }
        let pre = h.get_str("tokenizer.ggml.pre").ok_or_else(|| missing("tokenizer.ggml.pre"))?;
        let tokens = h
            .get_array("tokenizer.ggml.tokens")
            .and_then(|a| a.as_strings())
            .ok_or_else(|| missing("tokenizer.ggml.tokens"))?;
        let token_types = match h.get_array("tokenizer.ggml.token_type") {
            Some(a) => a
                .as_i32_vec()
                .ok_or_else(|| TokenizerError::Invalid("tokenizer.ggml.token_type is not an integer array".into()))?,
            None => Vec::new(),
        };
        let merges = h
            .get_array("tokenizer.ggml.merges")
            .and_then(|a| a.as_strings())
            .ok_or_else(|| missing("tokenizer.ggml.merges"))?;
        let id = |k: &str| -> Result<Option<u32>, TokenizerError> {
            match h.get_u64(k) {
                None => Ok(None),
                Some(v) => u32::try_from(v).map(Some).map_err(|_| TokenizerError::Invalid(format!("{k} = {v}"))),
            }
        };
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let bos = id("tokenizer.ggml.bos_token_id")?;
        let pad = id("tokenizer.ggml.padding_token_id")?;
        let add_bos = h.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(false);
        Tokenizer::from_parts(tokens, &token_types, merges, eos, bos, pad, add_bos, pre)
    }

    // -----------------------------------------------------------------------------------------------
    // Accessors

    /// Number of tokens (including added and padding tokens).
    pub fn n_vocab(&self) -> usize {
        self.kinds.len()
    }
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }
    /// Whether a BOS token should be prepended to prompts (never done by [`Self::encode`]).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    /// The pre-tokenizer pattern in use.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }
    /// End-of-generation ids: eos first, then those of `<|endoftext|>`, `<|im_end|>`, `<|fim_pad|>`,
    /// `<|repo_name|>`, `<|file_sep|>` that exist, without duplicates.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }
    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }
    /// The vocabulary string of a token (byte-level form for BPE tokens), `None` if out of range.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.n_vocab()).then(|| self.texts.get(id))
    }
    /// The id of a vocabulary string (exact match, byte-level form for BPE tokens: `"Ġthe"`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.texts.lookup(text)
    }
    /// The bytes a token stands for; special tokens: their text. Empty for out-of-range ids.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i >= self.n_vocab() {
            return &[];
        }
        &self.bytes[self.byte_off[i] as usize..self.byte_off[i + 1] as usize]
    }
    /// UNUSED tokens (`[PAD…]` padding): never produced by encoding. False out of range.
    pub fn is_unused(&self, id: u32) -> bool {
        matches!(self.kinds.get(id as usize), Some(Kind::Unused))
    }
    /// CONTROL (or UNKNOWN) and UNUSED tokens: not rendered unless `render_special`. False out of range.
    pub fn is_control(&self, id: u32) -> bool {
        matches!(self.kinds.get(id as usize), Some(Kind::Control | Kind::Unused))
    }

    // -----------------------------------------------------------------------------------------------
    // Encoding

    /// Encodes `text` (no BOS/EOS added). With `parse_special`, CONTROL token texts such as
    /// `<|im_start|>` become their tokens; USER_DEFINED ones (`<think>`, …) always do.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let b = text.as_bytes();
        let mut plain_start = 0;
        let mut i = 0;
        while i < b.len() {
            match self.special_at(b, i, parse_special) {
                Some((id, len)) => {
                    // A match starts with the first byte of a char, so `i` is a char boundary.
                    self.encode_plain(&text[plain_start..i], &mut out);
                    out.push(id);
                    i += len;
                    plain_start = i;
                }
                None => i += 1,
            }
        }
        self.encode_plain(&text[plain_start..], &mut out);
        out
    }

    /// The longest special token whose text starts at byte `i`, as (id, byte length).
    #[inline]
    fn special_at(&self, b: &[u8], i: usize, parse_special: bool) -> Option<(u32, usize)> {
        let rest = &b[i..];
        self.specials[b[i] as usize]
            .iter()
            .filter(|s| s.always || parse_special)
            .map(|s| (s.id, self.texts.get(s.id).as_bytes()))
            .find(|(_, t)| rest.starts_with(t))
            .map(|(id, t)| (id, t.len()))
    }

    /// Encodes text without special tokens: NFC, pre-tokenise, BPE each piece.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let normalized;
        let text = if is_nfc_quick(text.chars()) == IsNormalized::Yes {
            text
        } else {
            normalized = text.nfc().collect::<String>();
            normalized.as_str()
        };
        for piece in self.pre.split(text) {
            self.bpe(piece.as_bytes(), out);
        }
    }

    #[inline]
    fn merge_of(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        self.merges.get(&(((left as u64) << 32) | right as u64)).copied()
    }

    /// BPE-encodes one piece (its UTF-8 bytes), appending the ids. Bytes without a token are dropped
    /// (cannot happen with a complete byte-level vocabulary such as Qwen's).
    fn bpe(&self, piece: &[u8], out: &mut Vec<u32>) {
        if piece.len() <= SMALL_PIECE {
            self.bpe_small(piece, out)
        } else {
            self.bpe_heap(piece, out)
        }
    }

    /// Quadratic BPE on a stack array: find the lowest (rank, position) pair, merge it, update the two
    /// neighbouring pair ranks, repeat.
    fn bpe_small(&self, piece: &[u8], out: &mut Vec<u32>) {
        const NONE: (u32, u32) = (u32::MAX, u32::MAX);
        let mut ids = [0u32; SMALL_PIECE];
        let mut n = 0;
        for &b in piece.iter().take(SMALL_PIECE) {
            let id = self.byte_ids[b as usize];
            if id != u32::MAX {
                ids[n] = id;
                n += 1;
            }
        }
        // rank[k] = merge of (ids[k], ids[k + 1]).
        let mut rank = [NONE; SMALL_PIECE];
        for k in 0..n.saturating_sub(1) {
            rank[k] = self.merge_of(ids[k], ids[k + 1]).unwrap_or(NONE);
        }
        while n > 1 {
            let mut best = 0;
            for k in 1..n - 1 {
                if rank[k].0 < rank[best].0 {
                    best = k;
                }
            }
            if rank[best].0 == u32::MAX {
                break;
            }
            ids[best] = rank[best].1;
            ids.copy_within(best + 2..n, best + 1);
            rank.copy_within(best + 2..n, best + 1);
            n -= 1;
            rank[n - 1] = NONE;
            if best > 0 {
                rank[best - 1] = self.merge_of(ids[best - 1], ids[best]).unwrap_or(NONE);
            }
            if best + 1 < n {
                rank[best] = self.merge_of(ids[best], ids[best + 1]).unwrap_or(NONE);
            }
        }
        out.extend_from_slice(&ids[..n]);
    }

    /// BPE for long pieces: symbols in a doubly linked list, candidate merges in a min-heap keyed by
    /// (rank, position of the left symbol) — the position order is the text order, so ties go to the
    /// leftmost pair. A popped candidate is applied only if the pair at that position still has that
    /// rank (otherwise a neighbour merge made it stale).
    fn bpe_heap(&self, piece: &[u8], out: &mut Vec<u32>) {
        use std::cmp::Reverse;
        const END: u32 = u32::MAX;
        let mut ids: Vec<u32> = piece.iter().map(|&b| self.byte_ids[b as usize]).filter(|&id| id != END).collect();
        let n = ids.len();
        if n < 2 {
            out.extend_from_slice(&ids);
            return;
        }
        let mut next: Vec<u32> = (1..=n as u32).map(|k| if k as usize == n { END } else { k }).collect();
        let mut prev: Vec<u32> = (0..n as u32).map(|k| if k == 0 { END } else { k - 1 }).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::with_capacity(n);
        for k in 0..n - 1 {
            if let Some((r, _)) = self.merge_of(ids[k], ids[k + 1]) {
                heap.push(Reverse((r, k as u32)));
            }
        }
        while let Some(Reverse((r, k))) = heap.pop() {
            let k = k as usize;
            if !alive[k] || next[k] == END {
                continue;
            }
            let q = next[k] as usize;
            let Some((r_now, merged)) = self.merge_of(ids[k], ids[q]) else { continue };
            if r_now != r {
                continue;
            }
            // Merge q into k.
            ids[k] = merged;
            alive[q] = false;
            next[k] = next[q];
            if next[q] != END {
                prev[next[q] as usize] = k as u32;
            }
            if prev[k] != END {
                let p = prev[k] as usize;
                if let Some((r2, _)) = self.merge_of(ids[p], ids[k]) {
                    heap.push(Reverse((r2, p as u32)));
                }
            }
            if next[k] != END {
                if let Some((r2, _)) = self.merge_of(ids[k], ids[next[k] as usize]) {
                    heap.push(Reverse((r2, k as u32)));
                }
            }
        }
        let mut k = 0u32;
        while k != END {
            out.push(ids[k as usize]);
            k = next[k as usize];
        }
    }

    /// Test hook: BPE of one piece by both algorithms, `(array scan, heap)`. The array scan only takes
    /// pieces of up to 48 bytes (it returns `[u32::MAX]` for longer ones).
    #[doc(hidden)]
    pub fn debug_bpe_both(&self, piece: &[u8]) -> (Vec<u32>, Vec<u32>) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        if piece.len() <= SMALL_PIECE {
            self.bpe_small(piece, &mut a);
        } else {
            a.push(u32::MAX);
        }
        self.bpe_heap(piece, &mut b);
        (a, b)
    }

    // -----------------------------------------------------------------------------------------------
    // Decoding

    /// Decodes ids to text. CONTROL/UNUSED tokens are skipped unless `render_special`; out-of-range
    /// ids are skipped; invalid UTF-8 becomes U+FFFD (as `String::from_utf8_lossy`).
    pub fn decode(&self, ids: &[u32], render_special: bool) -> String {
        let mut buf = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if render_special || !self.is_control(id) {
                buf.extend_from_slice(self.token_bytes(id));
            }
        }
        match String::from_utf8(buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// Incremental decoder for generated tokens: [`StreamDecoder::push`] returns the text completed by one
/// more token, holding back a UTF-8 sequence split across tokens until its last byte arrives. The
/// concatenation of everything returned (including [`StreamDecoder::flush`]) equals
/// [`Tokenizer::decode`] of all the ids pushed.
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    render_special: bool,
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new(render_special: bool) -> Self {
        StreamDecoder { render_special, pending: Vec::new() }
    }

    /// Adds one token; returns the newly completed text (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        if !self.render_special && tok.is_control(id) {
            return String::new();
        }
        self.pending.extend_from_slice(tok.token_bytes(id));
        let mut out = String::new();
        let mut done = 0; // bytes of `pending` consumed
        loop {
            match std::str::from_utf8(&self.pending[done..]) {
                Ok(s) => {
                    out.push_str(s);
                    done = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix is valid UTF-8 by construction.
                    out.push_str(std::str::from_utf8(&self.pending[done..done + valid]).unwrap_or_default());
                    match e.error_len() {
                        // Incomplete sequence at the end: wait for more bytes.
                        None => {
                            done += valid;
                            break;
                        }
                        // Invalid sequence: one U+FFFD, like from_utf8_lossy.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            done += valid + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..done);
        out
    }

    /// Returns whatever is held back (an incomplete sequence becomes U+FFFD) and resets.
    pub fn flush(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}
