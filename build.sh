#!/usr/bin/env bash
# Builds the release wasm (SIMD128) into www/pkg/, then the browser package into www/dist/:
#   cargo (wasm32-unknown-unknown, +simd128 via .cargo/config.toml) → wasm-bindgen --target web
#   → wasm-opt -O3 (npm binaryen 132; Debian's binaryen 108 breaks wasm-bindgen 0.2.130 output)
#   → tsc (type-check www/src) → esbuild: dist/clef.js (page entry), dist/clef-worker.js (worker
#   entry), dist/clef.d.ts (+ dist/types/), dist/clef_web_bg.wasm beside them.
# Needs: rustup target add wasm32-unknown-unknown; cargo install wasm-bindgen-cli --version <crate's>;
# npm ci. (.ci/run installs all three.) Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")"

# `./build.sh --js` rebuilds only www/dist from an existing www/pkg (for working on www/src).
js_only=0
[ "${1:-}" = "--js" ] && js_only=1

if [ "$js_only" = 0 ]; then
want=$(grep -m1 -A3 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')
if [ "$want" != "$have" ]; then
  echo "build.sh: wasm-bindgen CLI $have does not match the crate's $want:" >&2
  echo "  cargo install wasm-bindgen-cli --version $want" >&2
  exit 1
fi

cargo build --release --lib --target wasm32-unknown-unknown
rm -rf www/pkg
wasm-bindgen --target web --out-dir www/pkg "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/release/clef_web.wasm"
npx --no-install wasm-opt -O3 \
  --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  www/pkg/clef_web_bg.wasm -o www/pkg/clef_web_bg.wasm
ls -l www/pkg/clef_web_bg.wasm | awk '{printf "build.sh: www/pkg/clef_web_bg.wasm %.0f KiB\n", $5/1024}'
fi

# The browser package (ESM, usable from a CDN <script type="module"> without a bundler: the
# worker and the wasm are found relative to import.meta.url).
npx --no-install tsc -p www/tsconfig.json
rm -rf www/dist
npx --no-install esbuild www/src/index.ts --bundle --format=esm --target=es2022 --log-level=warning --outfile=www/dist/clef.js
npx --no-install esbuild www/src/worker.ts --bundle --format=esm --target=es2022 --log-level=warning --outfile=www/dist/clef-worker.js
cp www/pkg/clef_web_bg.wasm www/dist/
npx --no-install tsc -p www/tsconfig.json --noEmit false --emitDeclarationOnly --outDir www/dist/types
rm -f www/dist/types/loader.d.ts www/dist/types/worker.d.ts   # worker internals (they import www/pkg)
echo "export * from './types/index.js';" > www/dist/clef.d.ts
echo "export { default } from './types/index.js';" >> www/dist/clef.d.ts
ls -l www/dist/clef.js www/dist/clef-worker.js | awk '{printf "build.sh: %s %.0f KiB\n", $9, $5/1024}'
