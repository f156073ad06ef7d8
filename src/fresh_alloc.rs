//! The global allocator of the wasm build: the standard one (dlmalloc), except that — while a load
//! asks for it ([`skipping_fresh_clear`]) — a large zeroed allocation is not cleared where it lies
//! in memory grown for it.
//!
//! A model's weights are one zeroed allocation per shard of its store (`weights.rs`), gigabytes
//! that the load then overwrites. dlmalloc clears every zeroed allocation, so each page of fresh
//! memory is touched twice: by the clear (a page fault per 4 KiB, ~1.25 s for 1.8 GB here) and by
//! the load. WebAssembly's `memory.grow` hands out zeroed pages, so bytes at or above the memory's
//! size before the allocation are zero already; only the part below it (memory dlmalloc reused) must
//! be cleared. Where every worker reads its part of a cached split model straight into place
//! (`load/pull.ts`) skipping the clear saves the second pass (7 % to the first token in Chromium);
//! where the bytes come through copies (downloads, the general path) the clear's one pass takes the
//! faults faster than the copies would (+9 % in Firefox without it), so it stays on there
//! (BENCHMARKS.md, "A cached split load: straight into place, and the clear measured in both
//! browsers").

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Zeroed allocations smaller than this are cleared as usual (they come from reused memory).
const LARGE: usize = 1 << 20;

/// Whether zeroed allocations clear freshly grown memory too (dlmalloc's way: the default).
static CLEAR_FRESH: AtomicBool = AtomicBool::new(true);

/// Runs `f` — when `skip`, with large zeroed allocations not clearing freshly grown memory (the
/// weights of a load whose every byte is then read straight into place) — and restores the
/// default, dlmalloc's way.
pub fn skipping_fresh_clear<T>(skip: bool, f: impl FnOnce() -> T) -> T {
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            CLEAR_FRESH.store(true, Ordering::Relaxed);
        }
    }
    let _restore = Restore;
    CLEAR_FRESH.store(!skip, Ordering::Relaxed);
    f()
}

pub struct FreshZeroed;

// SAFETY: every call is System's, except that `alloc_zeroed` returns a block whose bytes are zero
// either because it cleared them or because they lie in memory grown by this call's System.alloc
// (the wasm spec zero-fills grown pages; dlmalloc writes only chunk headers, which lie outside the
// block it returns).
unsafe impl GlobalAlloc for FreshZeroed {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() < LARGE || CLEAR_FRESH.load(Ordering::Relaxed) {
            return unsafe { System.alloc_zeroed(layout) };
        }
        // Bytes from here up were not part of the memory before this call (u64: 65,536 pages are 2^32).
        let grown_from = (core::arch::wasm32::memory_size::<0>() as u64) << 16;
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let stale = grown_from.saturating_sub(p as u64).min(layout.size() as u64) as usize;
            // SAFETY: `p` is a block of `layout.size()` bytes and `stale` is at most that.
            unsafe { p.write_bytes(0, stale) };
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: FreshZeroed = FreshZeroed;

#[cfg(test)]
mod tests {
    use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Zeroed blocks are zero whatever came before: allocations of every size, small and large,
    /// filled with garbage and freed in a random order, so that large zeroed ones land partly or
    /// wholly in reused memory, in freshly grown memory, and across the boundary.
    #[test]
    fn zeroed_blocks_are_zero_in_reused_and_grown_memory() {
        let (large_zeroed, grown) = super::skipping_fresh_clear(true, churn);
        assert!(super::CLEAR_FRESH.load(super::Ordering::Relaxed), "the default is back");
        assert!(large_zeroed > 20 && grown > 5 && grown < large_zeroed, "{large_zeroed} large zeroed blocks, {grown} grown for");
    }

    /// 400 allocations and frees; (large zeroed blocks, how many of them grew the memory).
    fn churn() -> (usize, usize) {
        let mut x: u32 = 12345;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let mut live: Vec<(*mut u8, Layout)> = Vec::new();
        let (mut large_zeroed, mut grown) = (0, 0);
        for _ in 0..400 {
            let r = next();
            if r % 3 == 0 && !live.is_empty() {
                let (p, l) = live.swap_remove(next() as usize % live.len());
                unsafe { dealloc(p, l) };
                continue;
            }
            let size = match r % 4 {
                0 => 16 + next() as usize % 4096,
                1 => 1 + next() as usize % (super::LARGE - 1),
                _ => super::LARGE + next() as usize % (6 << 20),
            };
            let l = Layout::from_size_align(size, 8).unwrap();
            let zeroed = next() % 2 == 0;
            let before = core::arch::wasm32::memory_size::<0>();
            let p = unsafe { if zeroed { alloc_zeroed(l) } else { alloc(l) } };
            assert!(!p.is_null());
            // SAFETY: a live block of `size` bytes (alloc_zeroed's are initialized; alloc's only written).
            if zeroed {
                let b = unsafe { std::slice::from_raw_parts(p, size) };
                assert!(b.iter().all(|&v| v == 0), "a zeroed block of {size} bytes is not zero");
                if size >= super::LARGE {
                    large_zeroed += 1;
                    grown += usize::from(core::arch::wasm32::memory_size::<0>() > before);
                }
            }
            unsafe { p.write_bytes(0xab, size) };
            live.push((p, l));
        }
        for (p, l) in live {
            unsafe { dealloc(p, l) };
        }
        (large_zeroed, grown)
    }
}
