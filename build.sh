#!/usr/bin/env bash
# Builds the release wasm into www/pkg/ (clef_web_bg.wasm: SIMD128; clef_web_relaxed_bg.wasm: SIMD128 +
# relaxed SIMD), then the browser package into www/dist/:
#   cargo (wasm32-unknown-unknown, +simd128 via .cargo/config.toml) → wasm-bindgen --target web
#   → wasm-opt -O3 (npm binaryen 132; Debian's binaryen 108 breaks wasm-bindgen 0.2.130 output)
#   → tsc (type-check www/src) → esbuild: dist/clef.js (page entry), dist/clef-worker.js (worker
#   entry), dist/clef-shard.js (shard workers of a split model), dist/clef.d.ts (+ dist/types/), dist/clef_web{,_relaxed}_bg.wasm beside them; then the chat page
#   (dist/index.html, app.js, app.css), <clef-chat> (dist/clef-chat.js), the manifest, icons and
#   the service worker (dist/sw.js): a static site any host can serve.
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

# Two builds of the same crate: baseline SIMD128 (every browser with wasm SIMD) and SIMD128 +
# relaxed SIMD (i16x8.relaxed_dot_i8x16_i7x16_s & co.; Chromium ≥ 114 without a flag, Node 20
# with --experimental-wasm-relaxed-simd). A module that uses relaxed instructions fails validation
# as a whole where they are unsupported, so the runtime picks one by feature detection
# (www/src/simd.ts). Same exports, so one wasm-bindgen JS glue serves both.
target=${CARGO_TARGET_DIR:-target}
relaxed_flags='target.wasm32-unknown-unknown.rustflags=["-C", "target-feature=+simd128,+relaxed-simd"]'
cargo build --release --lib --target wasm32-unknown-unknown
cargo build --release --lib --target wasm32-unknown-unknown --target-dir "$target/relaxed" --config "$relaxed_flags"
rm -rf www/pkg www/pkg-relaxed.tmp
wasm-bindgen --target web --out-dir www/pkg "$target/wasm32-unknown-unknown/release/clef_web.wasm"
wasm-bindgen --target web --out-dir www/pkg-relaxed.tmp "$target/relaxed/wasm32-unknown-unknown/release/clef_web.wasm"
cmp -s www/pkg/clef_web.js www/pkg-relaxed.tmp/clef_web.js || {
  echo "build.sh: the two builds have different JS glue (exports differ?)" >&2; exit 1; }
opt_features="--enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
  --enable-mutable-globals --enable-reference-types --enable-multivalue"
# --low-memory-unused: rustc emits `p + 16` before a load as an i32.add, which V8 compiles to an
# lea per load; wasm-opt may fold such constants (< 1 KiB) into the load's offset only when the
# lowest 1 KiB of memory is never addressed. Rust's wasm32 layout puts the 1 MiB stack first,
# growing down towards 0, so only a stack already overflowed could reach it. Chromium 156, the
# prompt GEMM's int8 tiles (4096 × 4096 × 128 tokens, IQ2_SX): 36.7 → 38.2 G MAC/s (BENCHMARKS.md).
opt_features="$opt_features --low-memory-unused"
npx --no-install wasm-opt -O3 $opt_features www/pkg/clef_web_bg.wasm -o www/pkg/clef_web_bg.wasm
npx --no-install wasm-opt -O3 $opt_features --enable-relaxed-simd \
  www/pkg-relaxed.tmp/clef_web_bg.wasm -o www/pkg/clef_web_relaxed_bg.wasm
rm -rf www/pkg-relaxed.tmp
# i32x4.relaxed_dot_i8x16_i7x16_add_s (miscomputed by Node 20's V8) runs only after the engine's own
# exactness check (gemm8::quad_add_exact, src/quant/mod.rs); the kernel tests in Node catch it anywhere else.
# The build choice (probe + file names) for the Node tools beside the glue: www/cli.mjs, tests/js.
npx --no-install esbuild www/src/simd.ts --format=esm --log-level=warning --outfile=www/pkg/simd.js
ls -l www/pkg/clef_web_bg.wasm www/pkg/clef_web_relaxed_bg.wasm | awk '{printf "build.sh: %s %.0f KiB\n", $9, $5/1024}'
fi

# The browser package (ESM, usable from a CDN <script type="module"> without a bundler: the
# worker and the wasm are found relative to import.meta.url).
npx --no-install tsc -p www/tsconfig.json
rm -rf www/dist
npx --no-install esbuild www/src/index.ts --bundle --format=esm --target=es2022 --log-level=warning --outfile=www/dist/clef.js
npx --no-install esbuild www/src/worker.ts --bundle --format=esm --target=es2022 --log-level=warning --outfile=www/dist/clef-worker.js
# Shard workers of a model split across workers (started by clef-worker.js, from beside it).
npx --no-install esbuild www/src/shard-worker.ts --bundle --format=esm --target=es2022 --log-level=warning --outfile=www/dist/clef-shard.js
cp www/pkg/clef_web_bg.wasm www/pkg/clef_web_relaxed_bg.wasm www/dist/
npx --no-install tsc -p www/tsconfig.json --noEmit false --emitDeclarationOnly --outDir www/dist/types
rm -f www/dist/types/loader.d.ts www/dist/types/worker.d.ts www/dist/types/shard-worker.d.ts www/dist/types/shards.d.ts   # worker internals (they import www/pkg)
echo "export * from './types/index.js';" > www/dist/clef.d.ts
echo "export { default } from './types/index.js';" >> www/dist/clef.d.ts
rm -rf www/dist/types/app   # the chat page's modules are not part of the package API

# The chat page (index.html + app.js + app.css), <clef-chat> (clef-chat.js: one script tag, Shadow
# DOM), the web app manifest + icons and the service worker: www/dist is then a complete static
# site (no special headers needed). Run `node tools/serve.mjs` to serve it locally.
esb="npx --no-install esbuild --bundle --format=esm --target=es2022 --minify --legal-comments=none --log-level=warning"
$esb www/src/app/main.ts --outfile=www/dist/app.js
$esb www/src/app/element.ts --loader:.css=text --outfile=www/dist/clef-chat.js
cat www/src/app/app.css www/src/app/chat.css www/src/app/decide.css | npx --no-install esbuild --loader=css --minify --log-level=warning > www/dist/app.css
cp www/index.html www/embed-example.html www/manifest.webmanifest www/icon.svg www/icon-maskable.svg \
   www/icon-192.png www/icon-512.png www/icon-maskable-512.png www/dist/
# The service worker precaches the shell under a version derived from the files' contents, so each
# build that changes anything installs a new cache (and the old one is deleted when it activates).
assets=(index.html app.js app.css clef.js clef-worker.js clef-shard.js clef_web_bg.wasm clef_web_relaxed_bg.wasm clef-chat.js manifest.webmanifest
        icon.svg icon-maskable.svg icon-192.png icon-512.png icon-maskable-512.png embed-example.html)
version=$(cd www/dist && cat "${assets[@]}" | sha256sum | cut -c1-12)
json=$(printf '"%s",' "${assets[@]}")
npx --no-install esbuild www/src/app/sw.ts --bundle --format=iife --target=es2022 --minify --log-level=warning \
  "--define:__VERSION__=\"$version\"" "--define:__ASSETS__=[${json%,}]" --outfile=www/dist/sw.js
ls -l www/dist/clef.js www/dist/clef-worker.js www/dist/clef-shard.js www/dist/app.js www/dist/app.css www/dist/clef-chat.js www/dist/sw.js www/dist/clef_web_bg.wasm www/dist/clef_web_relaxed_bg.wasm |
  awk '{printf "build.sh: %s %.0f KiB\n", $9, $5/1024}'
echo "build.sh: www/dist is a static site (chat page index.html, embed-example.html); serve it with: node tools/serve.mjs"
