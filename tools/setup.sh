#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian 12 machine with rustup, Node 20 and
# Python 3 (each step is skipped when already satisfied):
#   the wasm32 Rust target, wasm-bindgen-cli at the exact version of the crate, the npm packages,
#   and Debian's chromium and firefox-esr for the browser tests (Chromium driven by npm playwright-core;
#   no browser download).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

want=$(grep -m1 -A3 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$want" ]; then
  # Not --locked: its lockfile pins a crate version this registry lacks (see ../shared/spec/toolchain.md).
  cargo install wasm-bindgen-cli --version "$want"
fi

npm ci --no-audit --no-fund

# Fuzzing (tests/fuzz.sh; CI runs it briefly): cargo-fuzz, for the nightly toolchain this image has
# (rustup cannot download toolchains here: without nightly, .ci/run skips the fuzzing and says so).
if rustup toolchain list | grep -q '^nightly' && ! command -v cargo-fuzz >/dev/null; then
  cargo install cargo-fuzz --version 0.13.2
fi

# The clef decision fixtures are generated with gguf-py (../shared/fixtures/clef/make_clef_gguf.py) and the
# head exported to safetensors (tools/export_head.py): tests/clef.rs runs tools/make_clef_fixtures.sh.
python3 -c 'import gguf, numpy, safetensors' 2>/dev/null || python3 -m pip install --quiet gguf==0.19.0 numpy safetensors

# The browsers the tests run in: Chromium (driven by playwright-core) and Firefox ESR
# (tests/browser/firefox.test.mjs: the runtime in SpiderMonkey, a page that runs its own steps).
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
[ -x /usr/bin/firefox-esr ] || missing="$missing firefox-esr"
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update
  $sudo apt-get install -y $missing
fi
