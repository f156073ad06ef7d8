#!/usr/bin/env bash
# Reproduces the numbers in BENCHMARKS.md (prints Markdown). Needs ./build.sh and a release build.
#   bash tools/bench.sh [synthetic.gguf ...]
# 1. kernels: GB/s of weight bytes, SIMD128 vs scalar, one thread, wasm under Node (and native scalar/auto-vectorised)
# 2. decode tokens/s of the F32 and IQ2_M fixtures (wasm), and of any synthetic 9B-shaped files given
set -euo pipefail
cd "$(dirname "$0")/.."
FIX=../shared/fixtures/qwen35-tiny
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), node $(node --version)"
echo
echo "### Kernels (wasm SIMD128 vs wasm scalar, 4096×4096 matvec, one thread)"
echo
node www/cli.mjs bench-kernels --json --ms ${BENCH_MS:-500} | python3 -c '
import json, sys
rows = json.load(sys.stdin)["kernels"]
print("| type | SIMD128 GB/s | scalar GB/s | speed-up | G weights/s (SIMD) |")
print("|---|---|---|---|---|")
bpw = {"F32":32,"F16":16,"BF16":16,"Q4_0":4.5,"Q4_1":5,"Q5_0":5.5,"Q5_1":6,"Q8_0":8.5,"Q2_K":2.625,"Q3_K":3.4375,"Q4_K":4.5,"Q5_K":5.5,"Q6_K":6.5625,"IQ2_XXS":2.0625,"IQ2_XS":2.3125,"IQ3_XXS":3.0625,"IQ1_S":1.5625,"IQ4_NL":4.5,"IQ3_S":3.4375,"IQ2_S":2.5625,"IQ4_XS":4.25,"IQ1_M":1.75,"Q1_0":1.125,"Q2_0":2.25}
for r in rows:
    t, s, c = r["type"], r["simd_gbps"], r["scalar_gbps"]
    print("| %s | %.2f | %.2f | %.1fx | %.1f |" % (t, s, c, s / c, s * 8 / bpw[t]))
'
echo
echo "### Decode (wasm, greedy, one thread)"
echo
echo "| model | prompt tok/s | decode tok/s |"
echo "|---|---|---|"
for m in "$FIX/A-F32.gguf" "$FIX/A-IQ2_M.gguf" "$@"; do
  n=$([[ "$m" == *A-* ]] && echo 128 || echo 8)
  node www/cli.mjs generate --model "$m" --tokens 8001,846,198,3710,369,279,6511,314,2776,663,30,8002 --max-tokens $n --ignore-eos --json |
    python3 -c "import json,sys; t=json.load(sys.stdin)['timings']; print(f\"| $(basename $m) | {t['prompt_tokens_per_s']} | {t['decode_tokens_per_s']} |\")"
done
