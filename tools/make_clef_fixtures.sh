#!/usr/bin/env bash
# Builds the generated clef fixtures into OUT_DIR (default target/clef-fixtures):
#   clef-A-F32.gguf   ../shared/fixtures/clef/make_clef_gguf.py exactly as the fixture README says
#                     (sha256 checked: the file the llama.cpp oracle ran on)
#   A-head/joint_head.safetensors + joint_head_config.json   its head in the head-less form (tools/export_head.py)
#   B-head/…          the same for B (Q8_0 head dequantized)
# Needs PyPI gguf 0.19.0, numpy, safetensors (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/clef-fixtures}
src=../shared/fixtures/clef
mkdir -p "$out"
# make_clef_gguf.py writes its meta.json beside itself and reads systemone.jinja from there: run a copy.
install -m 644 "$src/make_clef_gguf.py" "$src/systemone.jinja" "$out/"
if ! echo "0c67574250326b944b04eb8b5789a048d868f3c5068c1befc390662b734da37c  $out/clef-A-F32.gguf" | sha256sum -c --quiet >/dev/null 2>&1; then
  python3 "$out/make_clef_gguf.py" ../shared/fixtures/qwen35-tiny/A-F32.gguf "$out/clef-A-F32.gguf" --seed 101 --width 64 --ffn 128 \
    --heads 4 --routing 2 --joint 4 --head-types f32 --name clef-A-tiny >/dev/null
  echo "0c67574250326b944b04eb8b5789a048d868f3c5068c1befc390662b734da37c  $out/clef-A-F32.gguf" | sha256sum -c --quiet
fi
python3 tools/export_head.py "$out/clef-A-F32.gguf" "$out/A-head" >/dev/null
python3 tools/export_head.py "$src/B/clef-B-Q8_0.gguf" "$out/B-head" >/dev/null
