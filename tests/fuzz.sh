#!/usr/bin/env bash
# Fuzzes every target of fuzz/ (cargo-fuzz / libFuzzer, nightly toolchain), one after the other on
# one core: seeds from ../shared/fixtures (fuzz/seeds.py), then each target for FUZZ_SECONDS
# (default 20) seconds; prints each target's executions and exits 1 on the first crash.
# A crash is saved in fuzz/artifacts/<target>/: copy it to fuzz/regressions/<target>/ (replayed by
# `cargo test --test fuzz_regressions`), fix it, commit both.
#   FUZZ_SECONDS=600 bash tests/fuzz.sh         longer runs (README "Reliability" records their counts)
#   FUZZ_RUNS=10000000 FUZZ_SECONDS=1800 bash tests/fuzz.sh gguf_header   until 10 M executions (or the time)
#   bash tests/fuzz.sh tokenizer                 one target
#   FUZZ_SANITIZER=address bash tests/fuzz.sh    with AddressSanitizer (default: none, see below)
#
# Speed (executions per second decide how far a run gets):
# - Sanitizer `none` by default: natively the code under test is safe Rust (`unsafe` in src/ is
#   only in the wasm SIMD kernels, wasm.rs and the weight allocator, which no target reaches), so
#   AddressSanitizer finds nothing there and costs 2–6× (its allocator records a stack trace per
#   allocation). libFuzzer's coverage and compare tracing stay on; FUZZ_SANITIZER=address checks
#   the dependencies' unsafe code as well. Each sanitizer builds into its own fuzz/target/<name>/.
# - A maximum input length per target (MAX_LEN below): longer inputs reach no code that shorter
#   ones cannot, and every execution costs time in proportion to the input. Seed files longer than
#   this are read as their prefix.
# Needs: rustup toolchain nightly; cargo install cargo-fuzz; python3.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-20}
runs=${FUZZ_RUNS:-}
san=${FUZZ_SANITIZER:-none}
all=(gguf_header quant_kernels tokenizer chat_template decide_request)
declare -A MAX_LEN=(
  [gguf_header]=16384     # a whole header with 64-entry vocabulary arrays and the tensor table (seeds: 6.6 KB)
  [quant_kernels]=8195    # 3 bytes + the longest row the target reads (8 × 256 F32 weights)
  [tokenizer]=1024        # flags + text
  [chat_template]=2048    # flags + a conversation of a few messages
  [decide_request]=4096   # a request body (the fixture requests: 0.2–1.6 KB)
)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [ -n "${MAX_LEN[$t]:-}" ] || { echo "fuzz.sh: unknown target '$t' (targets: ${all[*]})" >&2; exit 2; }
done
build=(-O --sanitizer "$san" --target-dir "fuzz/target/$san")
python3 fuzz/seeds.py
log=$(mktemp)
for t in "${targets[@]}"; do
  cargo +nightly fuzz build "${build[@]}" "$t" >"$log" 2>&1 || { tail -30 "$log"; echo "fuzz.sh: $t does not build" >&2; exit 1; }
done
for t in "${targets[@]}"; do
  limit=(-max_total_time="$secs")
  [ -z "$runs" ] || limit+=(-runs="$runs")
  if ! cargo +nightly fuzz run "${build[@]}" "$t" "fuzz/corpus/$t" -- "${limit[@]}" -max_len="${MAX_LEN[$t]}" \
      -print_final_stats=1 -rss_limit_mb=4096 -timeout=10 >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz.sh: $t crashed: the reproducer is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
  echo "fuzz.sh: $t: $execs executions in ${took:-$secs} s ($rate/s, sanitizer $san, -max_len=${MAX_LEN[$t]}), no crash"
done
rm -f "$log"
