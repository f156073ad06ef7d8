#!/usr/bin/env bash
# Builds native llama.cpp's `llama-bench` (the CPU reference of BENCHMARKS.md and tools/bench-tp.sh)
# from the llama.cpp sources vendored in PyPI's llama-cpp-python sdist, with PyPI's cmake and ninja.
#
#   bash tools/build-llama.sh            # builds once, then prints the path of llama-bench (stdout)
#   bash tools/build-llama.sh --force    # rebuilds from scratch
#   bash tools/build-llama.sh --isa avx  # the 128-bit build (below): bin/llama-bench-avx
#
# Everything lives outside the repository, in $CLEF_LLAMA_CACHE (default ~/.cache/clef-web/llama.cpp):
#   venv/        cmake + ninja from PyPI
#   src/         the sdist and its unpacked sources (vendor/llama.cpp)
#   build/       the CMake build tree
#   bin/llama-bench, build.stamp   the result and what it was built from
#   build-avx/, bin/llama-bench-avx, build-avx.stamp   the same for --isa avx
# Idempotent: a second run with the same version and flags only prints the path. Needs a C/C++
# compiler and PyPI; not part of CI (tests/run.sh does not call it).
#
# ISA: x86-64 with AVX2 + FMA + F16C, chosen explicitly (GGML_NATIVE=OFF). A native-ISA build
# (GGML_NATIVE=ON) dies with an illegal instruction on this project's virtual machines, and AVX2 is
# what a typical laptop runs.
# `--isa avx`: the same sources with AVX2 off (AVX, FMA and F16C on). ggml's quantized dot products
# then take their `__AVX__` paths, which multiply 128-bit integer vectors — the width of wasm's
# SIMD128 — so this build shows what llama.cpp's own kernels make of 128-bit vectors on the same
# machine (BENCHMARKS.md, "At 128-bit vectors"). Its float work stays 256-bit wide (AVX).
set -euo pipefail

VERSION=0.3.36                                  # llama-cpp-python sdist (vendor/llama.cpp inside)
CACHE=${CLEF_LLAMA_CACHE:-$HOME/.cache/clef-web/llama.cpp}
JOBS=${JOBS:-$(nproc)}

log() { echo "build-llama: $*" >&2; }

force=0 isa=avx2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) force=1; shift ;;
    --isa) isa=${2:-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    *) echo "usage: bash tools/build-llama.sh [--force] [--isa avx2|avx]" >&2; exit 2 ;;
  esac
done
case "$isa" in
  avx2) ISA_FLAGS=(-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON); SUFFIX="" ;;
  avx) ISA_FLAGS=(-DGGML_AVX=ON -DGGML_AVX2=OFF -DGGML_FMA=ON -DGGML_F16C=ON); SUFFIX="-avx" ;;
  *) echo "build-llama: --isa avx2 or avx, not '$isa'" >&2; exit 2 ;;
esac
CMAKE_FLAGS=(
  -G Ninja -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=OFF "${ISA_FLAGS[@]}"
  -DBUILD_SHARED_LIBS=OFF                       # one self-contained binary we can copy to bin/
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
)
STAMP="llama-cpp-python $VERSION: ${CMAKE_FLAGS[*]}"
BUILD="$CACHE/build$SUFFIX"
BIN="$CACHE/bin/llama-bench$SUFFIX"
BUILT="$CACHE/build$SUFFIX.stamp"

if [[ $force == 1 ]]; then
  rm -rf "$BUILD" "$BIN" "$BUILT"
fi

if [[ -x "$BIN" && -f "$BUILT" && "$(cat "$BUILT")" == "$STAMP" ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE/src" "$CACHE/bin"

# 1. cmake and ninja from PyPI, in a venv of their own.
if [[ ! -x "$CACHE/venv/bin/cmake" || ! -x "$CACHE/venv/bin/ninja" ]]; then
  log "installing cmake and ninja into $CACHE/venv"
  python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install --quiet cmake ninja >&2
fi
export PATH="$CACHE/venv/bin:$PATH"

# 2. the sdist (sources only: --no-binary) and its vendored llama.cpp.
SDIST_DIR="$CACHE/src/llama_cpp_python-$VERSION"
if [[ ! -f "$SDIST_DIR/vendor/llama.cpp/CMakeLists.txt" ]]; then
  log "downloading the llama-cpp-python $VERSION sdist"
  # --no-binary for this package only: the sdist itself. (`--no-binary :all:` would make pip build
  # the sdist's build backend and all of its dependencies from source just to read its metadata.)
  "$CACHE/venv/bin/pip" download --quiet --no-binary llama-cpp-python --no-deps \
    -d "$CACHE/src" "llama-cpp-python==$VERSION" >&2
  tar -xzf "$CACHE/src/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/src"
fi
SRC="$SDIST_DIR/vendor/llama.cpp"
test -f "$SRC/CMakeLists.txt" || { log "no llama.cpp sources in $SDIST_DIR/vendor"; exit 1; }

# 3. configure (again only when the flags changed) and build the one target.
CONFIGURED="$BUILD/clef-configure.stamp"
if [[ ! -f "$CONFIGURED" || "$(cat "$CONFIGURED")" != "$STAMP" ]]; then
  rm -rf "$BUILD"
  log "configuring $SRC ($isa)"
  cmake -S "$SRC" -B "$BUILD" "${CMAKE_FLAGS[@]}" >&2
  echo "$STAMP" > "$CONFIGURED"
fi
log "building llama-bench ($isa) with $JOBS jobs"
cmake --build "$BUILD" --target llama-bench -j "$JOBS" >&2
cp "$BUILD/bin/llama-bench" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
echo "$STAMP" > "$BUILT"
log "built $("$BIN" --help >/dev/null 2>&1 && echo ok || echo '(llama-bench --help failed)')"
echo "$BIN"
