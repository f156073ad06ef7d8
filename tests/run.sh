#!/usr/bin/env bash
# The whole test suite (README's test command after setup):
#   1. native cargo tests (kernels, GGUF, tokenizer, model vs the llama.cpp / transformers fixtures)
#   2. the same kernel / GGUF / tokenizer tests compiled to wasm32 + SIMD128 and run in Node; the kernel
#      tests again with relaxed SIMD (the second wasm build)
#   3. the release wasm build (./build.sh) and the JS tests: the wasm command line against the fixtures
#   4. the browser runtime (www/dist) in headless Chromium against a local Hub-like server, and under Node;
#      the chat page, offline use (service worker + OPFS) and <clef-chat> end to end (screenshots: tests/artifacts/);
#      the runtime again in headless Firefox (split across workers, both exchanges, OPFS, faults)
# Fixtures come from ../shared (next to the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
test -d ../shared/fixtures || { echo "tests/run.sh: ../shared/fixtures is missing" >&2; exit 1; }

echo "== native tests"
# The chat-template reference (transformers' rendering with jinja2) is what tests/chat/reference.py writes.
if python3 -c 'import jinja2' 2>/dev/null; then python3 tests/chat/reference.py --check; fi
cargo test --profile fast

echo "== wasm32 tests (Node, SIMD128)"
# Not in wasm: fixtures (reads the fixture files), bench_kernels, clef (reads fixture files and runs
# tools/make_clef_fixtures.sh; the decision path runs in wasm in tests/js/decide.test.mjs, its unit tests in --lib).
wasm_tests=$(ls tests/*.rs | xargs -n1 basename | sed 's/\.rs$//' | grep -vx -e fixtures -e bench_kernels -e clef)
for t in $wasm_tests; do
  cargo test --profile fast --target wasm32-unknown-unknown --test "$t"
done
cargo test --profile fast --target wasm32-unknown-unknown --lib

echo "== wasm32 kernel tests (Node, SIMD128 + relaxed SIMD: the second build of build.sh)"
NODE_ARGS=--experimental-wasm-relaxed-simd cargo test --profile fast --target wasm32-unknown-unknown \
  --target-dir "${CARGO_TARGET_DIR:-target}/relaxed" \
  --config 'target.wasm32-unknown-unknown.rustflags=["-C", "target-feature=+simd128,+relaxed-simd"]' \
  --test kernels --lib
# The int8 GEMM's dot-add form again with V8's optimizing tier only: Node 20's baseline tier
# miscomputes its instruction, so above the engine's check keeps it off (src/quant/gemm8.rs).
NODE_ARGS=--experimental-wasm-relaxed-simd,--no-liftoff cargo test --profile fast --target wasm32-unknown-unknown \
  --target-dir "${CARGO_TARGET_DIR:-target}/relaxed" \
  --config 'target.wasm32-unknown-unknown.rustflags=["-C", "target-feature=+simd128,+relaxed-simd"]' \
  --test kernels -- int8_gemm

echo "== release wasm build + JS tests"
./build.sh
node --test tests/js/
CLEF_WASM=relaxed-simd node --experimental-wasm-relaxed-simd --test tests/js/cli.test.mjs tests/js/decide.test.mjs

echo "== browser runtime and chat page tests (headless Chromium, Firefox + Node)"
node --test tests/browser/
