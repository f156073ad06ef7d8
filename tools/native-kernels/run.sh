#!/usr/bin/env bash
# Native llama.cpp's kernels beside ours: builds native_kernels.c (one type's ggml vec_dot over a
# large matrix, one thread; see the file) against the static ggml libraries of tools/build-llama.sh
# and runs it. Compare with `clef bench-kernels --rows R` (Node), tools/bench-kernels-chromium.mjs
# and tools/bench-kernels-engines.mjs on the same machine, in the same sitting.
#
#   bash tools/native-kernels/run.sh [--isa avx2|avx] TYPES|all [ROWS] [MS]
#   bash tools/native-kernels/run.sh IQ2_S,Q6_K 131072 1500
#
# Needs what tools/build-llama.sh needs (it is run first: builds once) and a C compiler. Not in CI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
isa=avx2
if [[ ${1:-} == --isa ]]; then isa=${2:-}; shift 2; fi
case "$isa" in avx2) suffix="" ;; avx) suffix="-avx" ;; *) echo "native-kernels: --isa avx2 or avx" >&2; exit 2 ;; esac
bash "$here/../build-llama.sh" --isa "$isa" >/dev/null
CACHE=${CLEF_LLAMA_CACHE:-$HOME/.cache/clef-web/llama.cpp}
BUILD="$CACHE/build$suffix"
SRC=$(ls -d "$CACHE"/src/llama_cpp_python-*/vendor/llama.cpp | head -1)
BIN="$CACHE/bin/native-kernels$suffix"
if [[ ! -x "$BIN" || "$here/native_kernels.c" -nt "$BIN" || "$BUILD/ggml/src/libggml-cpu.a" -nt "$BIN" ]]; then
  cc -O2 -c "$here/native_kernels.c" -I"$SRC/ggml/include" -o "$BIN.o"
  # ggml's CPU backend is built with OpenMP (its default).
  c++ "$BIN.o" "$BUILD/ggml/src/libggml-cpu.a" "$BUILD/ggml/src/libggml-base.a" -fopenmp -lpthread -lm -o "$BIN"
  rm -f "$BIN.o"
fi
exec "$BIN" "$@"
