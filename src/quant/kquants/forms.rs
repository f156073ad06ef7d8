//! Load-time forms: file types whose matrices the runtime keeps in a faster form of its own once
//! they are loaded. Such a form is never in a file; it costs memory (its blocks are larger) and an
//! expansion in place after the load (`weights.rs`, [`crate::weights::Relocation`]).
//!
//! | file type      | form   | bytes per block | matrices grow by | why                                    |
//! |----------------|--------|-----------------|------------------|----------------------------------------|
//! | IQ2_S, IQ2_XS  | IQ2_SX | 82, 74 → 138    | 68 %, 86 %       | no codebook lookup per 8 weights       |
//! | IQ3_S          | IQ3_SX | 110 → 134       | 22 %             | no codebook lookup per 4 weights       |
//! | Q3_K           | Q3_KX  | 110 → 146       | 33 %             | no joining of each weight's 2 + 1 bits |
//! | Q6_K           | Q6_KX  | 210 → 210       | 0                | three of four codes need no joining    |
//!
//! Only the matrices multiplied with every token expand (not `token_embd`, whose rows are only
//! looked up). A form that costs no memory (Q6_KX) is taken wherever the forms are
//! [`enabled`]; the others where the load allows them ([`stored_as`]). Q6_KX only in the browsers'
//! profile ([`crate::quant::gemm8::Profile::Wide`]): Chromium's V8 runs its four-row kernel faster
//! than Q6_K's (23.2–24.2 against 21.0–21.6 GB/s), Node 20's slower (16.4–19.7 against 20.5–21.5). Not IQ2_XXS: its kernel is the closest to IQ2_SX's speed (8.8 against 10.0 G
//! weights/s in Node) and its matrices would grow the most (+61 %), BENCHMARKS.md.

use super::{iq2_sx, iq3_sx, q3_kx, q6_k};
use crate::quant::GgmlType;

/// The load-time form of file type `ty`, where it has one.
pub fn form_of(ty: GgmlType) -> Option<GgmlType> {
    match ty {
        GgmlType::IQ2_S | GgmlType::IQ2_XS => Some(GgmlType::IQ2_SX),
        GgmlType::IQ3_S => Some(GgmlType::IQ3_SX),
        GgmlType::Q3_K => Some(GgmlType::Q3_KX),
        GgmlType::Q6_K => Some(GgmlType::Q6_KX),
        _ => None,
    }
}

/// The form the file's tensor `name` of type `ty` is stored in, if not the file's: `expand`, the
/// load allows the forms that cost memory; those that cost none wherever forms are [`enabled`].
pub fn stored_as(name: &str, ty: GgmlType, expand: bool) -> Option<GgmlType> {
    use crate::quant::gemm8::{profile, Profile};
    let form = form_of(ty).filter(|_| expands(name, ty))?;
    let free = form.block_bytes() == ty.block_bytes();
    let suits = form != GgmlType::Q6_KX || profile() == Profile::Wide;
    ((expand || free && enabled()) && suits).then_some(form)
}

/// Whether the file's tensor `name` of type `ty` is stored in its load-time form where a load
/// allows it.
pub fn expands(name: &str, ty: GgmlType) -> bool {
    form_of(ty).is_some() && name != "token_embd.weight"
}

/// Bytes per block of a type that expands (its file block).
pub fn source_bytes(ty: GgmlType) -> usize {
    assert!(form_of(ty).is_some(), "{ty} has no load-time form");
    ty.block_bytes()
}

/// Bytes of the load-time form of `len` bytes of `ty` blocks.
pub fn expanded_len(ty: GgmlType, len: u64) -> u64 {
    let form = form_of(ty).unwrap_or_else(|| panic!("{ty} has no load-time form"));
    len / source_bytes(ty) as u64 * form.block_bytes() as u64
}

/// Expands `nb` blocks of `ty` at `buf[raw..]` into its load-time form at `buf[out..]`, in place
/// (`out ≥ raw`; the two ranges may overlap).
pub fn expand_in_place(ty: GgmlType, buf: &mut [u8], raw: usize, out: usize, nb: usize) {
    match form_of(ty) {
        Some(GgmlType::IQ2_SX) => iq2_sx::expand_in_place(ty, buf, raw, out, nb),
        Some(GgmlType::IQ3_SX) => iq3_sx::expand_in_place(buf, raw, out, nb),
        Some(GgmlType::Q3_KX) => q3_kx::expand_in_place(buf, raw, out, nb),
        Some(GgmlType::Q6_KX) => {
            assert_eq!(raw, out, "Q6_KX is made in place");
            q6_k::expand_in_place(buf, raw, nb)
        }
        _ => panic!("{ty} has no load-time form"),
    }
}

/// Back to front, block by block: block i's output starts at `out + DB·i ≥ raw + SB·i`, where the
/// input of the blocks before it ends, and its own input is copied out first — as a fixed-size
/// array (a copy of a run-time length is a `memory.copy` in wasm, a call into the engine that cost
/// as much as the expansion itself).
#[inline(always)]
pub(super) fn expand_blocks<const SB: usize, const DB: usize>(
    buf: &mut [u8],
    raw: usize,
    out: usize,
    nb: usize,
    expand: impl Fn(&[u8; SB], &mut [u8; DB]),
) {
    assert!(out >= raw && out + nb * DB <= buf.len(), "expansion out of range");
    for i in (0..nb).rev() {
        let blk: [u8; SB] = buf[raw + SB * i..][..SB].try_into().unwrap();
        expand(&blk, (&mut buf[out + DB * i..][..DB]).try_into().unwrap());
    }
}

static ENABLED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(true);

/// Whether loads that do not decide for themselves store the load-time forms (the native and
/// command-line loaders; the browser runtime decides per load, `www/src/loader.ts`).
pub fn enabled() -> bool {
    ENABLED.load(core::sync::atomic::Ordering::Relaxed)
}

/// Sets [`enabled`]: for side-by-side measurements (`clef generate --layout plain`) and tests.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, core::sync::atomic::Ordering::Relaxed);
}
