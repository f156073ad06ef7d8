#!/usr/bin/env python3
"""The Markdown report of tools/bench-tp.sh, from its results.jsonl (one JSON record per measurement:
engine node|chromium|wllama|native, file, n = workers or threads, pp/tg tokens/s, and for split runs
`split` = {prompt, decode}: {coordinator_ms, wait_ms, stages}).

    python3 tools/bench_tp_report.py OUT/results.jsonl

Definitions:
* tokens/s: prompt tokens / prompt time; generated tokens / time from the first to the last of them
  (ours, wllama); llama-bench's pp/tg averages (native).
* coordinator share of a decoded token (ours, split): the time per generated token T splits into
  S = the coordinator's own serial work (starting passes, sampling, norms, residuals, adding the
  shards' partial sums), W = waiting for the shards (their compute in parallel + the exchanges), and
  O = the rest (the engine's yields and token messages between steps).
* projection (Amdahl): T(N) = serial + P / N, where P is the shards' parallel compute per token and
  serial = S + O + X, X the exchange cost per token (stages per token × cost per stage). With split runs
  at two or more worker counts, W(N) = P / N + X is fitted by least squares; with one (N = 2), P comes
  from the one-worker time T(1) ≈ P + S + O (the whole model in one worker does the same work without
  exchanges) and X = W(2) − P / 2. S, O and X are held at their measured values, although the
  coordinator's work and the exchanges grow with N (N messages and N partial sums per stage), so the
  projection is an upper bound.
"""
import json, sys
from collections import defaultdict

ENGINES = ("node", "chromium", "native", "wllama")
LABEL = {"node": "ours, Node", "chromium": "ours, Chromium", "native": "native llama.cpp", "wllama": "wllama 3.13"}
PROJECT = (8, 16)


def load(path):
    meta, rows = {}, defaultdict(dict)  # rows[file][(engine, n)] = record
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if r["engine"] in ("machine", "machine_end"):
            meta.update(r)
        else:
            rows[r["file"]][(r["engine"], r["n"])] = r
    return meta, rows


def fmt(x, d=2):
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.{d}f}"


def ratio(a, b):
    return "—" if not a or not b else f"{a / b:.2f}×"


def get(rec, k):
    return None if rec is None or "error" in rec else rec.get(k)


def per_token(rec):
    """(T, S, W, O, stages per token) of a split run's decode, ms per generated token."""
    s = rec.get("split") if rec and "error" not in rec else None
    if not s or not rec.get("tg"):
        return None
    gen = rec["gen"]
    t = 1000 / rec["tg"]
    c, w = s["decode"]["coordinator_ms"] / gen, s["decode"]["wait_ms"] / gen
    return t, c, w, t - c - w, s["decode"]["stages"] / max(1, gen - 1)


def project(runs, engine):
    """Amdahl projection from one engine's runs {n: record} (see the module doc); None without data."""
    t1 = get(runs.get(1), "tg")
    split = {n: per_token(r) for n, r in runs.items() if n > 1 and per_token(r)}
    if not t1 or not split:
        return None
    t1 = 1000 / t1
    ns = sorted(split)
    s = sum(split[n][1] for n in ns) / len(ns)
    o = sum(split[n][3] for n in ns) / len(ns)
    k = sum(split[n][4] for n in ns) / len(ns)
    if len(ns) >= 2:  # least squares W = P·(1/N) + X
        xs, ys = [1 / n for n in ns], [split[n][2] for n in ns]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        p = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        x_cost = my - p * mx
        how = f"W(N) fitted over N = {', '.join(map(str, ns))}"
    else:
        n = ns[0]
        p = t1 - s - o
        x_cost = split[n][2] - p / n
        how = f"P = T(1) − S − O, X = W({n}) − P/{n}"
    serial = s + o + max(0.0, x_cost)
    return {"engine": engine, "t1": t1, "S": s, "O": o, "X": x_cost, "P": p, "k": k, "serial": serial,
            "fraction": serial / (serial + p) if serial + p > 0 else None, "how": how,
            "proj": {n: (t1 / (serial + p / n), 1000 / (serial + p / n)) for n in PROJECT}}


def main():
    meta, rows = load(sys.argv[1])
    out = []
    p = out.append
    p(f"Machine: {meta.get('cores')} cores, {meta.get('cpu')}; Node {meta.get('node')}; {meta.get('chromium') or 'Chromium ?'}; "
      f"load average {meta.get('load_start', 0):.1f} at start, {meta.get('load_end', 0):.1f} at end. "
      f"Prompt {meta.get('prompt')} tokens, {meta.get('gen')} decoded tokens (greedy, EOS ignored), one run each"
      f"{' (quick mode)' if meta.get('quick') else ''}. Native: {meta.get('llama_bench') or '—'}.")
    p("")
    counts = sorted({n for f in rows.values() for (_, n) in f})
    # ---- tokens/s
    p("### Tokens/s (prompt / decode)")
    p("")
    p("| file | workers / threads | " + " | ".join(LABEL[e] for e in ENGINES) + " |")
    p("|---|---|" + "---|" * len(ENGINES))
    for f, runs in rows.items():
        for n in counts:
            if not any((e, n) in runs for e in ENGINES):
                continue
            cells = []
            for e in ENGINES:
                r = runs.get((e, n))
                cells.append("—" if r is None else f"failed: {r['error'][:80]}" if "error" in r else f"{fmt(r.get('pp'))} / {fmt(r.get('tg'))}")
            p(f"| {f} | {n} | " + " | ".join(cells) + " |")
    p("")
    # ---- ratios
    p("### Ratios (prompt / decode)")
    p("")
    p("| file | N | Node / native N threads | Chromium / native | Chromium / wllama N threads | Node N / Node 1 | Chromium N / Chromium 1 |")
    p("|---|---|---|---|---|---|---|")
    for f, runs in rows.items():
        for n in counts:
            g = lambda e, m, k: get(runs.get((e, m)), k)  # noqa: E731
            cells = [
                f"{ratio(g('node', n, 'pp'), g('native', n, 'pp'))} / {ratio(g('node', n, 'tg'), g('native', n, 'tg'))}",
                f"{ratio(g('chromium', n, 'pp'), g('native', n, 'pp'))} / {ratio(g('chromium', n, 'tg'), g('native', n, 'tg'))}",
                f"{ratio(g('chromium', n, 'pp'), g('wllama', n, 'pp'))} / {ratio(g('chromium', n, 'tg'), g('wllama', n, 'tg'))}",
                f"{ratio(g('node', n, 'pp'), g('node', 1, 'pp'))} / {ratio(g('node', n, 'tg'), g('node', 1, 'tg'))}" if n > 1 else "—",
                f"{ratio(g('chromium', n, 'pp'), g('chromium', 1, 'pp'))} / {ratio(g('chromium', n, 'tg'), g('chromium', 1, 'tg'))}" if n > 1 else "—",
            ]
            if any(c not in ("— / —", "—") for c in cells):
                p(f"| {f} | {n} | " + " | ".join(cells) + " |")
    p("")
    # ---- coordinator share
    p("### Where a decoded token's time goes (ours, split across N workers)")
    p("")
    p("T = ms per generated token; S = the coordinator's serial work; W = waiting for the shards (their compute + the exchanges); "
      "O = the rest (yields, token messages). Prompt S share: the same for the prompt phase.")
    p("")
    p("| file | engine | N | T ms | S ms (share) | W ms (share) | O ms (share) | stages / token | prompt: S share |")
    p("|---|---|---|---|---|---|---|---|---|")
    for f, runs in rows.items():
        for e in ("node", "chromium"):
            for n in counts:
                r = runs.get((e, n))
                pt = per_token(r)
                if not pt:
                    continue
                t, c, w, o, k = pt
                sp = r["split"]["prompt"]
                prompt_ms = r.get("prompt_ms") or (r["prompt_tokens"] * 1000 / r["pp"] if r.get("pp") else None)
                ps = f"{100 * sp['coordinator_ms'] / prompt_ms:.1f} %" if prompt_ms else "—"
                p(f"| {f} | {LABEL[e]} | {n} | {t:.1f} | {c:.2f} ({100 * c / t:.1f} %) | {w:.1f} ({100 * w / t:.1f} %) | "
                  f"{o:.2f} ({100 * o / t:.1f} %) | {k:.0f} | {ps} |")
    p("")
    # ---- projection
    p("### Projection for more workers (Amdahl; see tools/bench_tp_report.py)")
    p("")
    p("P = the shards' parallel compute per token, X = exchange cost per token (per stage in µs), serial = S + O + X; "
      "speed-up over one worker, projected decode tokens/s.")
    p("")
    p("| file | engine | T(1) ms | P ms | serial ms | X ms (µs / stage) | serial fraction | " +
      " | ".join(f"{n} workers" for n in PROJECT) + " | fit |")
    p("|---|---|---|---|---|---|---|" + "---|" * len(PROJECT) + "---|")
    for f, runs in rows.items():
        for e in ("node", "chromium"):
            pr = project({n: r for (eng, n), r in runs.items() if eng == e}, e)
            if not pr:
                continue
            per_stage = 1000 * pr["X"] / pr["k"] if pr["k"] else float("nan")
            p(f"| {f} | {LABEL[e]} | {pr['t1']:.1f} | {pr['P']:.1f} | {pr['serial']:.2f} | {pr['X']:.2f} ({per_stage:.0f}) | "
              f"{100 * pr['fraction']:.1f} % | " + " | ".join(f"{s:.2f}× ({tps:.2f} tok/s)" for s, tps in pr["proj"].values()) +
              f" | {pr['how']} |")
    errors = [(f, k, r["error"]) for f, runs in rows.items() for k, r in runs.items() if "error" in r]
    if errors:
        p("")
        p("Failures:")
        for f, (e, n), msg in errors:
            p(f"- {f}, {e} {n}: {msg}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
