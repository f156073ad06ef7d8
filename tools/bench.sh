#!/usr/bin/env bash
# Reproduces the numbers in BENCHMARKS.md (prints Markdown). Needs ./build.sh and a release build.
#   bash tools/bench.sh [synthetic.gguf ...]
# 1. kernels: GB/s of weight bytes, relaxed SIMD / SIMD128 / scalar, one thread, wasm under Node
# 2. decode tokens/s of the F32 and IQ2_M fixtures (wasm), and of any synthetic 9B-shaped files given
set -euo pipefail
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/qwen35-tiny
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), node $(node --version)"
echo
echo "### Kernels (wasm: SIMD128 build, relaxed-SIMD build, scalar reference; 4096×4096 matvec, one thread)"
echo
relaxed="node --experimental-wasm-relaxed-simd"
node www/cli.mjs bench-kernels --json --ms ${BENCH_MS:-500} > /tmp/clef-bench-simd128.json
$relaxed www/cli.mjs bench-kernels --json --ms ${BENCH_MS:-500} > /tmp/clef-bench-relaxed.json
python3 - /tmp/clef-bench-simd128.json /tmp/clef-bench-relaxed.json <<'PY'
import json, sys
base, rel = (json.load(open(f)) for f in sys.argv[1:3])
assert base["simd"] == "simd128" and rel["simd"] == "relaxed-simd", (base["simd"], rel["simd"])
rel = {r["type"]: r["simd_gbps"] for r in rel["kernels"]}
print("| type | relaxed SIMD GB/s | SIMD128 GB/s | scalar GB/s | relaxed / scalar | G weights/s (relaxed) |")
print("|---|---|---|---|---|---|")
bpw = {"F32":32,"F16":16,"BF16":16,"Q4_0":4.5,"Q4_1":5,"Q5_0":5.5,"Q5_1":6,"Q8_0":8.5,"Q2_K":2.625,"Q3_K":3.4375,"Q4_K":4.5,"Q5_K":5.5,"Q6_K":6.5625,"IQ2_XXS":2.0625,"IQ2_XS":2.3125,"IQ3_XXS":3.0625,"IQ1_S":1.5625,"IQ4_NL":4.5,"IQ3_S":3.4375,"IQ2_S":2.5625,"IQ4_XS":4.25,"IQ1_M":1.75,"Q1_0":1.125,"Q2_0":2.25}
for r in base["kernels"]:
    t, s, c = r["type"], r["simd_gbps"], r["scalar_gbps"]
    x = rel[t]
    print("| %s | %.2f | %.2f | %.2f | %.1fx | %.1f |" % (t, x, s, c, x / c, x * 8 / bpw[t]))
PY
echo
echo "### Decode (wasm, greedy, one thread)"
echo
echo "| model | build | prompt tok/s | decode tok/s |"
echo "|---|---|---|---|"
for m in "$FIX/A-F32.gguf" "$FIX/A-IQ2_M.gguf" "$@"; do
  n=$([[ "$m" == *A-* ]] && echo 128 || echo 8)
  for node in "node" "$relaxed"; do
    $node www/cli.mjs generate --model "$m" --tokens 8001,846,198,3710,369,279,6511,314,2776,663,30,8002 --max-tokens $n --ignore-eos --json |
      python3 -c "import json,sys; t=json.load(sys.stdin)['timings']; print(f\"| $(basename $m) | $([ "$node" = node ] && echo SIMD128 || echo relaxed SIMD) | {t['prompt_tokens_per_s']} | {t['decode_tokens_per_s']} |\")"
  done
done
