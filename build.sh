#!/usr/bin/env bash
# Builds the release wasm (SIMD128) into www/pkg/:
#   cargo (wasm32-unknown-unknown, +simd128 via .cargo/config.toml) → wasm-bindgen --target web
#   → wasm-opt -O3 (npm binaryen 132; Debian's binaryen 108 breaks wasm-bindgen 0.2.130 output).
# Needs: rustup target add wasm32-unknown-unknown; cargo install wasm-bindgen-cli --version <crate's>;
# npm ci. (.ci/run installs all three.)
set -euo pipefail
cd "$(dirname "$0")"

want=$(grep -m1 -A3 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')
if [ "$want" != "$have" ]; then
  echo "build.sh: wasm-bindgen CLI $have does not match the crate's $want:" >&2
  echo "  cargo install wasm-bindgen-cli --version $want" >&2
  exit 1
fi

cargo build --release --lib --target wasm32-unknown-unknown
rm -rf www/pkg
wasm-bindgen --target web --out-dir www/pkg target/wasm32-unknown-unknown/release/clef_web.wasm
npx --no-install wasm-opt -O3 \
  --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  www/pkg/clef_web_bg.wasm -o www/pkg/clef_web_bg.wasm
ls -l www/pkg/clef_web_bg.wasm | awk '{printf "build.sh: www/pkg/clef_web_bg.wasm %.0f KiB\n", $5/1024}'
