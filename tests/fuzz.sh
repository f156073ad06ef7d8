#!/usr/bin/env bash
# Fuzzes every target of fuzz/ briefly (cargo-fuzz / libFuzzer, nightly toolchain):
#   seeds from ../shared/fixtures (fuzz/seeds.py), then each target for FUZZ_SECONDS (default 20)
#   seconds; prints each target's executions and exits 1 on the first crash.
# A crash is saved in fuzz/artifacts/<target>/: copy it to fuzz/regressions/<target>/ (replayed by
# `cargo test --test fuzz_regressions`), fix it, commit both.
#   FUZZ_SECONDS=600 bash tests/fuzz.sh         longer runs (README "Reliability" records their counts)
#   bash tests/fuzz.sh tokenizer                 one target
# Needs: rustup toolchain nightly; cargo install cargo-fuzz; python3.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-20}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf_header quant_kernels tokenizer chat_template)
python3 fuzz/seeds.py
cargo +nightly fuzz build -O "${targets[@]:0:1}" >/dev/null 2>&1 || true   # warm the shared build
for t in "${targets[@]}"; do
  log=$(mktemp)
  if ! cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 \
      -rss_limit_mb=4096 -timeout=10 >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz.sh: $t crashed: the reproducer is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  echo "fuzz.sh: $t: $execs executions in ${secs} s ($rate/s), no crash"
  rm -f "$log"
done
