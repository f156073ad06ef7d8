#!/usr/bin/env bash
# Tensor-parallel benchmark, one command, one run (issue 8): on the 9B-shaped synthetic files
# (32 and 8 layers, IQ2_M and Q2_K; tools/make_synthetic.py), prompt and decode tokens/s of
#   ours, Node     node --experimental-wasm-relaxed-simd www/cli.mjs generate … --workers N   (worker_threads)
#   ours, Chromium ClefEngine.load(url, {workers: N}) in headless Chromium  (tools/bench-wllama/run.mjs)
#   ours, Firefox  the same in headless firefox-esr (run.mjs --browser firefox; not in the default engines)
#   wllama 3.13    1 and 2 threads, same page, same file                    (tools/bench-wllama/run.mjs)
#   native         llama.cpp's llama-bench, N threads                       (tools/build-llama.sh)
#   native128      the same with AVX2 off: its integer kernels at 128 bits, wasm's width (--isa avx)
# then a Markdown report (tools/bench_tp_report.py): tokens/s, ratios (ours/native, ours/wllama,
# N workers vs 1), the coordinator's share of a decoded token (its serial work vs waiting for the
# shards) and a projection for 8 and 16 workers (Amdahl, from the measured serial time and
# exchange cost per stage).
#
#   bash tools/bench-tp.sh [--quick] [--synth DIR] [--files "F …"] [--prompt 512] [--gen 128]
#                          [--workers 1,2,…] [--wllama-threads 1,2] [--wllama-files 8L|all|none]
#                          [--engines node,chromium,firefox,wllama,native,native128] [--rounds R] [--out DIR]
#
# Defaults: prompt 512 tokens, 128 decoded tokens (greedy, EOS ignored), workers / native threads
# 1, 2 and then 4, 8, 16 up to the machine's cores, wllama only on the 8-layer files (its heap is
# capped at 4 GiB: the 32-layer files do not run with a 512-token batch, and its scalar IQ kernels
# would take hours). Files: DIR/{IQ2_M,Q2_K}{,-8L}.gguf, written by make_synthetic.py where missing
# (deterministic: the same bytes everywhere); DIR defaults to ~/.cache/clef-web/synth.
# --quick: the 8-layer Q2_K file, a 32-token prompt, 8 tokens, workers 1,2 (checks the harness).
# --rounds R: every measurement R times, in rounds (round 1 of every engine, file and count, then
# round 2, …), so that a slow spell of a shared machine lands on all sides alike; the report gives
# medians, the spread, and ratios as the median of each round's own ratio.
#
# Needs: ./build.sh (www/dist, www/pkg; run here if missing), /usr/bin/chromium (or $CHROMIUM),
# npm (tools/bench-wllama is installed here if missing), a C/C++ compiler and PyPI (llama-bench is
# built once into ~/.cache/clef-web/llama.cpp). Run it on an otherwise idle machine: every number is
# one run (or the median of --rounds R), and anything else using the cores shows up in them (the
# load average is reported).
# A full run takes about 3 hours on 2 cores at the issue's speeds (a 32-layer file at one worker:
# ~8 min for ours in Node and again in Chromium, ~8 min for llama-bench with its warm-up; wllama at
# ~0.6 prompt tokens/s: ~20 min per 8-layer file and thread count).
# Results: OUT/results.jsonl (one JSON record per measurement), OUT/report.md (also printed).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

quick=0 synth=${CLEF_SYNTH:-$HOME/.cache/clef-web/synth} files="" prompt=512 gen=128 workers="" wl_threads=1,2 rounds=1
wl_files=8L engines=node,chromium,wllama,native out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --synth) synth=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --wllama-threads) wl_threads=$2; shift 2 ;;
    --wllama-files) wl_files=$2; shift 2 ;;
    --engines) engines=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "bench-tp: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
cores=$(nproc)
if [[ $quick == 1 ]]; then
  prompt=32 gen=8
  : "${files:=$synth/Q2_K-8L.gguf}"
  : "${workers:=1,2}"
fi
: "${files:=$synth/IQ2_M.gguf $synth/Q2_K.gguf $synth/IQ2_M-8L.gguf $synth/Q2_K-8L.gguf}"
if [[ -z $workers ]]; then
  workers=1
  for n in 2 4 8 16; do (( n <= cores || n == 2 )) && workers+=",$n"; done
fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench-tp: --rounds is a positive integer" >&2; exit 2; }
[[ $wl_files =~ ^(8L|all|none)$ ]] || { echo "bench-tp: --wllama-files is 8L, all or none" >&2; exit 2; }
for e in ${engines//,/ }; do
  [[ $e =~ ^(node|chromium|firefox|wllama|native|native128)$ ]] || { echo "bench-tp: unknown engine $e" >&2; exit 2; }
done
has() { [[ ",$engines," == *",$1,"* ]]; }
out=${out:-/tmp/bench-tp-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
results=$out/results.jsonl
: > "$results"
log() { echo "bench-tp: $*" >&2; }
record() { echo "$1" >> "$results"; }
# One JSON record: engine, file, count (workers or threads) and the rest as given (JSON object text).
rec() { python3 -c 'import json,sys; d=json.loads(sys.argv[4]); d.update(engine=sys.argv[1], file=sys.argv[2], n=int(sys.argv[3])); print(json.dumps(d))' "$@"; }
err() { rec "$1" "$2" "$3" "$(python3 -c 'import json,sys; print(json.dumps({"error": sys.argv[1][-300:]}))' "$4")"; }

# ---- prerequisites -------------------------------------------------------------------------------
mkdir -p "$synth"
for f in $files; do
  if [[ ! -f $f ]]; then
    b=$(basename "$f" .gguf); q=${b%-8L}; layers=32; [[ $b == *-8L ]] && layers=8
    log "writing $f ($q, $layers layers)"
    python3 tools/make_synthetic.py "$q" "$f" --layers "$layers"
  fi
done
if has node || has chromium || has firefox; then
  [[ -f www/dist/clef.js && -f www/pkg/clef_web.js ]] || { log "building (./build.sh)"; ./build.sh >&2; }
fi
if has chromium || has firefox || has wllama; then
  [[ -d tools/bench-wllama/node_modules/@wllama ]] || (cd tools/bench-wllama && npm ci --no-audit --no-fund >&2)
fi
llama_bench="" llama_bench128=""
if has native; then llama_bench=$(bash tools/build-llama.sh); fi
if has native128; then llama_bench128=$(bash tools/build-llama.sh --isa avx); fi

ctx=$((prompt + gen + 64))
ids=$(python3 -c "print(','.join(str(1000 + 37 * i % 150000) for i in range($prompt)))")
browser_versions=$( (${CHROMIUM:-/usr/bin/chromium} --version 2>/dev/null || true) | head -1)
if has firefox; then browser_versions+="; $( (${FIREFOX:-firefox-esr} --version 2>/dev/null || true) | head -1)"; fi
record "$(python3 -c 'import json,os,sys,platform
cpu=next((l.split(":",1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(json.dumps({"engine":"machine","cores":os.cpu_count(),"cpu":cpu,"node":sys.argv[1],"chromium":sys.argv[2],"load_start":os.getloadavg()[0],
  "prompt":int(sys.argv[3]),"gen":int(sys.argv[4]),"quick":sys.argv[5]=="1","rounds":int(sys.argv[7]),"llama_bench":sys.argv[6]}))' \
  "$(node --version)" "$browser_versions" "$prompt" "$gen" "$quick" "llama-cpp-python 0.3.36 vendor/llama.cpp${llama_bench:+, AVX2}${llama_bench128:+, 128-bit: AVX2 off (AVX, FMA, F16C)}" "$rounds")"
log "$(uptime)"
log "files: $files; prompt $prompt, decode $gen; workers/threads $workers; wllama threads $wl_threads on ${wl_files} files; results in $out"

# native ENGINE LLAMA_BENCH FILE: one llama-bench run (every thread count), one record per count.
native() {
  local engine=$1 bin=$2 f=$3 name
  name=$(basename "$f")
  log "$name: $engine: llama-bench -t $workers"
  if "$bin" -m "$f" -p "$prompt" -n "$gen" -t "$workers" -r 1 -o json > "$out/$engine-$name$tag.json" 2> "$out/$engine-$name$tag.log"; then
    python3 - "$out/$engine-$name$tag.json" "$name" "$engine" >> "$results" <<'PY'
import json, sys
by = {}
try:
    for t in json.load(open(sys.argv[1])):
        d = by.setdefault(t["n_threads"], {"engine": sys.argv[3], "file": sys.argv[2], "n": t["n_threads"], "build": t.get("build_commit", "")})
        d["pp" if t["n_prompt"] > 0 else "tg"] = t["avg_ts"]
except Exception as e:  # noqa: BLE001 — recorded, the run goes on
    by = {0: {"engine": sys.argv[3], "file": sys.argv[2], "n": 0, "error": f"unreadable llama-bench output: {e!r}"}}
for d in by.values():
    print(json.dumps(d))
PY
  else
    record "$(err "$engine" "$name" 0 "$(tail -3 "$out/$engine-$name$tag.log")")"
  fi
}

# ---- measurements ----------------------------------------------------------------------------------
for round in $(seq 1 "$rounds"); do
  tag=""; (( rounds > 1 )) && tag="-r$round"
  (( rounds > 1 )) && log "round $round of $rounds"
  first=$(wc -l < "$results")
# (The round's body, not indented: its here-documents end at column 0.)
for f in $files; do
  name=$(basename "$f")
  if has native; then native native "$llama_bench" "$f"; fi
  if has native128; then native native128 "$llama_bench128" "$f"; fi
  if has node; then
    for n in ${workers//,/ }; do
      log "$name: ours, Node, $n worker(s)"
      if node --experimental-wasm-relaxed-simd www/cli.mjs generate --model "$f" --tokens "$ids" --max-tokens "$gen" \
           --ignore-eos --json --workers "$n" --ctx "$ctx" > "$out/node-$n-$name$tag.json" 2> "$out/node-$n-$name$tag.log"; then
        record "$(python3 - "$out/node-$n-$name$tag.json" "$name" "$n" "$gen" <<'PY'
import json, sys
d = {"engine": "node", "file": sys.argv[2], "n": int(sys.argv[3])}
try:
    r = json.load(open(sys.argv[1]))
    t = r["timings"]
    gen = int(sys.argv[4])
    if len(r["tokens"]) != gen or r["workers"] != d["n"]:
        raise ValueError(f"{len(r['tokens'])} tokens with {r['workers']} workers, wanted {gen} with {d['n']}")
    s = r.get("split")  # usage.split of a split model: {workers, prompt, completion}
    d.update(workers=r["workers"], pp=t["prompt_tokens"] * 1000 / t["prompt_ms"], tg=gen * 1000 / t["decode_ms"],
             prompt_tokens=t["prompt_tokens"], prompt_ms=t["prompt_ms"], decode_ms=t["decode_ms"], gen=gen,
             expanded=r.get("expanded"), split={"prompt": s["prompt"], "decode": s["completion"]} if s else None)
except Exception as e:  # noqa: BLE001 — recorded, the run goes on
    d["error"] = f"unreadable result: {e!r}"
print(json.dumps(d))
PY
)"
      else
        record "$(err node "$name" "$n" "$(tail -3 "$out/node-$n-$name$tag.log")")"
      fi
    done
  fi
  # Each browser: ours at every worker count (Chromium also runs wllama, on the same page).
  for browser in chromium firefox; do
    eng=""
    if has $browser; then for n in ${workers//,/ }; do eng+="ours$n,"; done; fi
    if [[ $browser == chromium ]] && has wllama && { [[ $wl_files == all ]] || { [[ $wl_files == 8L ]] && [[ $name == *-8L.gguf ]]; }; }; then
      for n in ${wl_threads//,/ }; do eng+="wl$n,"; done
    fi
    if [[ -n $eng ]]; then
      log "$name: $browser: ${eng%,}"
      if (cd tools/bench-wllama && node run.mjs --no-fixtures --repeats 1 --prompt-tokens "$prompt" --gen-tokens "$gen" \
            --ctx "$ctx" --engines "${eng%,}" --browser "$browser" --json "$out/$browser-$name$tag.json" "$f") > "$out/$browser-$name$tag.md" 2> "$out/$browser-$name$tag.log"; then
        python3 - "$out/$browser-$name$tag.json" "$name" "$gen" "$browser" >> "$results" <<'PY'
import json, re, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:  # noqa: BLE001 — recorded, the run goes on
    print(json.dumps({"engine": sys.argv[4], "file": sys.argv[2], "n": 0, "error": f"unreadable run.mjs output: {e!r}"}))
    sys.exit(0)
gen = int(sys.argv[3])
for row in j["results"]:
    for key, v in row.items():
        m = re.fullmatch(r"(ours|wl)(\d+)", key)
        if not m:
            continue
        d = {"engine": sys.argv[4] if m.group(1) == "ours" else "wllama", "file": sys.argv[2], "n": int(m.group(2))}
        if "error" in v:
            d["error"] = v["error"]
        else:
            d.update(pp=v["pp"], tg=v["tg"], prompt_tokens=v["n"], gen=gen, threads=v.get("threads"), simd=v.get("simd"), expanded=v.get("expanded"))
            s = v.get("split")
            if s:  # the page's usage.split ({workers, prompt, completion}) in the Node records' shape
                d["split"] = {"prompt": s["prompt"], "decode": s["completion"]}
        print(json.dumps(d))
PY
      else
        record "$(err $browser "$name" 0 "$(tail -3 "$out/$browser-$name$tag.log")")"
      fi
    fi
  done
done
# This round's records carry its number.
python3 - "$results" "$first" "$round" <<'PY'
import json, sys
path, first, rnd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = open(path).read().splitlines()
out = lines[:first] + [json.dumps({**json.loads(l), "round": rnd}) for l in lines[first:] if l.strip()]
open(path, "w").write("\n".join(out) + "\n")
PY
done

record "$(python3 -c 'import json,os; print(json.dumps({"engine":"machine_end","load_end":os.getloadavg()[0]}))')"
python3 tools/bench_tp_report.py "$results" | tee "$out/report.md"
log "results: $results, report: $out/report.md"
