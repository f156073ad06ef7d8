//! Not a test: prints kernel throughput. Run in wasm (SIMD128) with
//!   cargo test --release --target wasm32-unknown-unknown --test bench_kernels -- --include-ignored --nocapture
//! or natively with `-- --ignored --nocapture`. BENCHMARKS.md numbers come from `clef bench-kernels`.
//! `bench_prefill` measures the prompt GEMM (32 tokens) against 32 `vec_dot` passes.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::{console_log as say, wasm_bindgen_test as test};
#[cfg(not(target_arch = "wasm32"))]
use std::println as say;

#[test]
#[ignore]
fn bench_kernels() {
    for b in clef_web::bench::bench_all(None, 4096, 300.0) {
        say!("{:8} simd {:6.2} GB/s  scalar {:6.2} GB/s  ({:.1}x)", b.ty.name(), b.simd_gbps, b.scalar_gbps, b.simd_gbps / b.scalar_gbps);
    }
}

#[test]
#[ignore]
fn bench_prefill() {
    for b in clef_web::bench::bench_prefill(None, 32, 300.0, false, clef_web::bench::PREFILL_SHAPE) {
        say!(
            "{:8} T={} gemm {:6.2} GB/s {:6.2} GMAC/s   vec_dot {:6.2} GMAC/s  ({:.1}x)",
            b.ty.name(),
            b.tokens,
            b.gemm_gbps,
            b.gemm_gmacs,
            b.vec_dot_gmacs,
            b.gemm_gmacs / b.vec_dot_gmacs
        );
    }
}
