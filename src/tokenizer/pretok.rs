//! The pre-tokenizer: cuts a text fragment into the pieces that BPE then encodes one by one.
//!
//! It is a hand-written equivalent of the qwen35 pattern (spec §4, as in the HF `tokenizer.json`):
//!
//! ```text
//! (?i:'s|'t|'re|'ve|'m|'ll|'d)          1. English contractions, any case
//! |[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+      2. a run of letters/marks, with at most one leading non-letter/digit/newline
//! |\p{N}                                3. a single digit (any numeric char)
//! | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*       4. punctuation/symbols, with an optional leading space and trailing newlines
//! |\s*[\r\n]+                           5. white space up to and including its last newline
//! |\s+(?!\S)                            6. white space not followed by a visible char (or up to the last but one)
//! |\s+                                  7. any other white space
//! ```
//!
//! The regex is applied "find all, leftmost first": at each position the first alternative (in order) that
//! matches wins, each quantifier being greedy with backtracking. [`PreTokenizer::piece_end`] spells out what
//! that backtracking amounts to for each alternative, so no regex engine is needed. Every char falls into
//! exactly one of the alternatives 2–7, so the pieces always cover the whole text.
//!
//! `\s` is the Unicode `White_Space` property (what Oniguruma, used by HF tokenizers, and the Rust `regex`
//! crate, used by tiktoken, mean by it). `(?i:…)` uses simple case folding, so `'s` also matches U+017F
//! LATIN SMALL LETTER LONG S (`'ſ`), as in those engines (llama.cpp's hand-written splitter only folds ASCII;
//! this is the one place where we follow HF rather than llama.cpp).
//!
//! The Qwen2/Qwen3 pattern differs in two places: letter runs are `\p{L}+` (marks are not absorbed) and the
//! punctuation class is `[^\s\p{L}\p{N}]` (marks count as punctuation). [`PreTokenizer::Qwen2`] implements it.

use super::unicode_tables::CLASS_RUNS;

/// The Unicode class of a code point, as far as the pre-tokenizer is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CharClass {
    /// Anything else: punctuation, symbols, controls other than white space, unassigned code points.
    Other,
    /// General category L (`\p{L}`).
    Letter,
    /// General category M (`\p{M}`): combining marks.
    Mark,
    /// General category N (`\p{N}`).
    Number,
    /// The `White_Space` property (`\s`).
    Space,
}

const CLASSES: [CharClass; 5] =
    [CharClass::Other, CharClass::Letter, CharClass::Mark, CharClass::Number, CharClass::Space];

/// ASCII classes, computed at compile time from the same run table.
const ASCII: [CharClass; 128] = {
    let mut t = [CharClass::Other; 128];
    let mut k = 0;
    while k < CLASS_RUNS.len() && (CLASS_RUNS[k] >> 3) < 128 {
        let start = (CLASS_RUNS[k] >> 3) as usize;
        let end = if k + 1 < CLASS_RUNS.len() { (CLASS_RUNS[k + 1] >> 3) as usize } else { 128 };
        let end = if end > 128 { 128 } else { end };
        let mut c = start;
        while c < end {
            t[c] = CLASSES[(CLASS_RUNS[k] & 7) as usize];
            c += 1;
        }
        k += 1;
    }
    t
};

/// The class of `c`: a table lookup for ASCII, a binary search in the run table otherwise.
#[inline]
pub fn char_class(c: char) -> CharClass {
    let cp = c as u32;
    if cp < 128 {
        return ASCII[cp as usize];
    }
    // Index of the last run starting at or before cp (the first run starts at U+0000).
    let i = CLASS_RUNS.partition_point(|&e| (e >> 3) <= cp);
    CLASSES[(CLASS_RUNS[i.saturating_sub(1)] & 7) as usize]
}

/// Which pre-tokenizer pattern to apply (selected by the GGUF key `tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `qwen35`: letter runs absorb combining marks; digits one by one.
    Qwen35,
    /// `qwen2` (also Qwen3): letter runs are letters only; digits one by one.
    Qwen2,
}

/// Iterator over the pieces of a text; see [`PreTokenizer::split`].
pub struct Pieces<'a> {
    text: &'a str,
    pos: usize,
    pre: PreTokenizer,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        self.pos = self.pre.piece_end(self.text, start);
        Some(&self.text[start..self.pos])
    }
}

/// The char starting at byte `i` of `s` (`i` must be a char boundary), if any.
#[inline]
fn char_at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|t| t.chars().next())
}

#[inline]
fn is_newline(c: char) -> bool {
    c == '\r' || c == '\n'
}

/// ASCII case folding plus the one non-ASCII char that simple-folds into the contraction letters
/// (U+017F LONG S → `s`; U+212A KELVIN SIGN folds to `k`, which no contraction uses).
#[inline]
fn fold(c: char) -> char {
    if c == '\u{17F}' {
        's'
    } else {
        c.to_ascii_lowercase()
    }
}

impl PreTokenizer {
    /// Splits `text` into pieces; concatenated, they give `text` back.
    pub fn split<'a>(&self, text: &'a str) -> Pieces<'a> {
        Pieces { text, pos: 0, pre: *self }
    }

    /// `[\p{L}\p{M}]` for qwen35, `\p{L}` for qwen2.
    #[inline]
    fn is_word(&self, k: CharClass) -> bool {
        k == CharClass::Letter || (k == CharClass::Mark && *self == PreTokenizer::Qwen35)
    }

    /// The punctuation class of alternative 4: `[^\s\p{L}\p{M}\p{N}]` (qwen35) / `[^\s\p{L}\p{N}]` (qwen2).
    #[inline]
    fn is_punct(&self, k: CharClass) -> bool {
        match k {
            CharClass::Other => true,
            CharClass::Mark => *self == PreTokenizer::Qwen2,
            _ => false,
        }
    }

    /// End (byte offset) of the maximal run of chars satisfying `pred` starting at byte `i`.
    #[inline]
    fn run_end(s: &str, i: usize, pred: impl Fn(char) -> bool) -> usize {
        match s[i..].char_indices().find(|&(_, c)| !pred(c)) {
            Some((j, _)) => i + j,
            None => s.len(),
        }
    }

    /// Length of a contraction suffix (`s`, `t`, `re`, `ve`, `m`, `ll`, `d`, any case) at the start of `rest`.
    fn contraction(rest: &str) -> Option<usize> {
        let mut it = rest.chars();
        let c1 = it.next()?;
        let l1 = c1.len_utf8();
        let second = |want: char| it.clone().next().filter(|&c| fold(c) == want).map(|c| l1 + c.len_utf8());
        match fold(c1) {
            's' | 't' | 'm' | 'd' => Some(l1),
            'r' | 'v' => second('e'),
            'l' => second('l'),
            _ => None,
        }
    }

    /// Byte offset where the piece starting at byte `i` (a char boundary, `i < s.len()`) ends: the
    /// regex match at `i`, alternative by alternative. Always returns a char boundary `> i`.
    pub fn piece_end(&self, s: &str, i: usize) -> usize {
        let Some(c0) = char_at(s, i) else { return s.len() };
        let n0 = c0.len_utf8();
        let k0 = char_class(c0);

        // 1. Contractions.
        if c0 == '\'' {
            if let Some(len) = Self::contraction(&s[i + 1..]) {
                return i + 1 + len;
            }
        }

        // 2. `[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+`. If c0 is itself a word char, the greedy run from i is the
        //    match (taking c0 as the optional prefix ends at the same place). Otherwise c0 may be the prefix
        //    if it is not a newline/letter/digit and a word char follows.
        if self.is_word(k0) {
            return Self::run_end(s, i, |c| self.is_word(char_class(c)));
        }
        if !is_newline(c0) && k0 != CharClass::Number {
            if let Some(c1) = char_at(s, i + n0) {
                if self.is_word(char_class(c1)) {
                    return Self::run_end(s, i + n0, |c| self.is_word(char_class(c)));
                }
            }
        }

        // 3. A single number char.
        if k0 == CharClass::Number {
            return i + n0;
        }

        // 4. ` ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*`: the optional space is only ever U+0020, and without it a
        //    space cannot start the run (it is \s).
        let j = if c0 == ' ' { i + 1 } else { i };
        if let Some(c) = char_at(s, j) {
            if self.is_punct(char_class(c)) {
                let e = Self::run_end(s, j, |c| self.is_punct(char_class(c)));
                return Self::run_end(s, e, is_newline);
            }
        }

        // Only white space is left (every other class matched above).
        if k0 != CharClass::Space {
            return i + n0; // unreachable; keeps the iterator total
        }
        // Scan the maximal white-space run [i, end), noting the end of its last newline and where its
        // last char starts.
        let mut end = i;
        let mut after_last_newline = None;
        let mut last_start = i;
        for (off, c) in s[i..].char_indices() {
            if char_class(c) != CharClass::Space {
                break;
            }
            last_start = i + off;
            end = i + off + c.len_utf8();
            if is_newline(c) {
                after_last_newline = Some(end);
            }
        }
        // 5. `\s*[\r\n]+`: \s* backtracks until [\r\n]+ can match, i.e. to the run's last newline.
        if let Some(e) = after_last_newline {
            return e;
        }
        // 6. `\s+(?!\S)`: all of it at the end of the text; before a visible char, all but the last
        //    white-space char (which then prefixes the next piece), if that leaves at least one.
        if end == s.len() {
            return end;
        }
        if last_start > i {
            return last_start;
        }
        // 7. `\s+`: a single white-space char before a visible char that alternative 2 or 4 did not take
        //    (e.g. before a digit, or a non-ASCII space before punctuation).
        end
    }
}
