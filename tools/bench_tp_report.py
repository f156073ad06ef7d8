#!/usr/bin/env python3
"""The Markdown report of tools/bench-tp.sh, from its results.jsonl (one JSON record per measurement:
engine node|chromium|firefox|wllama|native|native128, file, n = workers or threads, pp/tg tokens/s, and for split runs
`split` = {prompt, decode}: the engine's usage.split counters {stages, wait_ms, shard_ms, mean_shard_ms, coordinator_ms}).

    python3 tools/bench_tp_report.py OUT/results.jsonl

Definitions:
* tokens/s: prompt tokens / prompt time; generated tokens / time from the first to the last of them
  (ours, wllama); llama-bench's pp/tg averages (native).
* coordinator share of a decoded token (ours, split): the time per generated token T splits into
  S = the coordinator's own work between stages (coordinator_ms: norms, residuals, adding the shards'
  partial sums, copies), W = waiting for the shards (wait_ms), of which C = the slowest shard's
  compute per stage (shard_ms) and X = W − C the exchanges (messages, copies), and O = the rest of T
  (starting each step: sampling the 248k logits, detokenizing; the engine's yields and token
  messages). Within C, I = C − the shards' mean compute (mean_shard_ms) is the imbalance: every
  shard has the same work, so I is what a stage loses waiting for one that ran late (another
  thread or tenant on its core).
* projection (Amdahl): with N workers the shards compute C − I per token on average, so the
  parallel work is P = N·(C − I) (an even split), and serial = S + O + X; the imbalance is carried
  to M workers as I_M = I · (N / M) · e(M) / e(N), e(n) = the expected largest of n independent
  standard normal variables (a stage waits for the latest of its shards; each shard's spread in
  time scales with its share of the work): T(M) = serial + P / M + I_M, speed-up T(1) / T(M) with
  T(1) the measured one-worker time (else serial + P). S, O and X are held at their measured values,
  although the coordinator's work and the exchanges grow with M (M messages and M partial sums per
  stage), so the projection is an upper bound. From the run with the most workers. (Records
  without mean_shard_ms: I = 0 and P = N·C, the imbalance counted as parallel work.)
* rounds (bench-tp.sh --rounds R): each measurement R times, interleaved. Tokens/s are the median
  (and the range); a ratio is the median of the rounds' own ratios (both sides from the same round,
  so a slow spell of a shared machine cancels); the time split and the projection come from the
  round whose decode speed is the median one.
"""
import json, math, statistics, sys
from collections import defaultdict

ENGINES = ("node", "chromium", "firefox", "native", "native128", "wllama")
LABEL = {"node": "ours, Node", "chromium": "ours, Chromium", "firefox": "ours, Firefox", "native": "native llama.cpp", "native128": "native, 128-bit (AVX2 off)",
         "wllama": "wllama 3.13"}
PROJECT = (8, 16)


def load(path):
    """meta, rows[file][(engine, n)] = the median record, rounds[file][(engine, n)] = {round: record}."""
    meta, rounds = {}, defaultdict(lambda: defaultdict(dict))
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if r["engine"] in ("machine", "machine_end"):
            meta.update(r)
        else:
            rounds[r["file"]][(r["engine"], r["n"])][r.get("round", 1)] = r
    rows = {f: {k: median_record(list(by.values())) for k, by in runs.items()} for f, runs in rounds.items()}
    return meta, rows, rounds


def median_record(recs):
    """The record of median decode speed (the lower middle one of an even count) as it was measured,
    plus the medians and ranges of pp and tg over the rounds (`pp_med`, `pp_range`, …); an error only
    when every round failed."""
    ok = [r for r in recs if "error" not in r]
    if not ok:
        return recs[0]
    ok.sort(key=lambda r: r.get("tg") or 0)
    r = dict(ok[(len(ok) - 1) // 2])
    for k in ("pp", "tg"):
        v = [x[k] for x in ok if x.get(k)]
        if v:
            r[k + "_med"], r[k + "_range"] = statistics.median(v), (min(v), max(v))
    r["rounds"] = len(recs)
    return r


def fmt(x, d=2):
    return "—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.{d}f}"


def round_ratio(ra, rb, k):
    """The median over rounds of ra[round][k] / rb[round][k] (both sides measured in that round)."""
    v = [ra[i][k] / rb[i][k] for i in ra if i in rb and get(ra[i], k) and get(rb[i], k)]
    return "—" if not v else f"{statistics.median(v):.2f}×"


def speed(r, k):
    """A median tokens/s figure, with its range over the rounds when there were several."""
    lo_hi = r.get(k + "_range")
    if r.get("rounds", 1) > 1 and lo_hi and lo_hi[0] != lo_hi[1]:
        return f"{fmt(r.get(k + '_med'))} ({fmt(lo_hi[0])}–{fmt(lo_hi[1])})"
    return fmt(r.get(k + "_med", r.get(k)))


def get(rec, k):
    return None if rec is None or "error" in rec else rec.get(k)


def per_token(rec):
    """{T, S, W, C, X, O, k} of a split run's decode, ms per generated token (k: stages per pass)."""
    s = rec.get("split") if rec and "error" not in rec else None
    if not s or not rec.get("tg"):
        return None
    gen, d = rec["gen"], s["decode"]
    t = 1000 / rec["tg"]
    c, w, sh = d["coordinator_ms"] / gen, d["wait_ms"] / gen, d["shard_ms"] / gen
    imbalance = sh - d["mean_shard_ms"] / gen if "mean_shard_ms" in d else None
    return {"T": t, "S": c, "W": w, "C": sh, "I": imbalance, "X": w - sh, "O": t - c - w, "k": d["stages"] / max(1, gen - 1)}


def expected_max(n):
    """E[max of n independent standard normal variables] (0 for n = 1), by numerical integration."""
    if n <= 1:
        return 0.0
    h, total = 0.001, 0.0
    for i in range(-10000, 10001):
        x = i * h
        pdf = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * n * pdf * cdf ** (n - 1) * h
    return total


def project(runs, engine):
    """Amdahl projection from one engine's runs {n: record} (see the module doc); None without data."""
    split = {n: per_token(r) for n, r in runs.items() if n > 1 and per_token(r)}
    if not split:
        return None
    n = max(split)
    m = split[n]
    imb = m["I"] or 0.0
    p = n * (m["C"] - imb)
    serial = m["S"] + m["O"] + m["X"]
    t1 = 1000 / get(runs.get(1), "tg") if get(runs.get(1), "tg") else serial + p
    proj = {}
    for k in PROJECT:
        imb_k = imb * (n / k) * expected_max(k) / expected_max(n)
        t_k = serial + p / k + imb_k
        proj[k] = (t1 / t_k, 1000 / t_k, imb_k)
    one = runs.get(1)
    forms_differ = get(one, "tg") is not None and bool(runs[n].get("expanded")) != bool(one.get("expanded"))
    return {"engine": engine, "n": n, "t1": t1, "P": p, "X": m["X"], "I": imb, "k": m["k"], "serial": serial, "forms_differ": forms_differ,
            "fraction": serial / (serial + p), "proj": proj}


def main():
    meta, rows, rounds = load(sys.argv[1])
    n_rounds = meta.get("rounds", 1)
    out = []
    p = out.append
    p(f"Machine: {meta.get('cores')} cores, {meta.get('cpu')}; Node {meta.get('node')}; {meta.get('chromium') or 'Chromium ?'}; "
      f"load average {meta.get('load_start', 0):.1f} at start, {meta.get('load_end', 0):.1f} at end. "
      f"Prompt {meta.get('prompt')} tokens, {meta.get('gen')} decoded tokens (greedy, EOS ignored), "
      f"{'one run each' if n_rounds == 1 else f'{n_rounds} rounds (every measurement once per round, in turn): medians (range); ratios are medians of the per-round ratios'}"
      f"{' (quick mode)' if meta.get('quick') else ''}. Native: {meta.get('llama_bench') or '—'}.")
    p("")
    counts = sorted({n for f in rows.values() for (_, n) in f})
    # ---- tokens/s
    p("### Tokens/s (prompt / decode)")
    p("")
    engines = [e for e in ENGINES if any(k[0] == e for runs in rows.values() for k in runs)]
    p("| file | workers / threads | " + " | ".join(LABEL[e] for e in engines) + " |")
    p("|---|---|" + "---|" * len(engines))
    for f, runs in rows.items():
        for n in counts:
            if not any((e, n) in runs for e in ENGINES):
                continue
            cells = []
            for e in engines:
                r = runs.get((e, n))
                mark = " ˣ" if r and r.get("expanded") else ""
                cells.append("—" if r is None else f"failed: {r['error'][:80]}" if "error" in r else f"{speed(r, 'pp')} / {speed(r, 'tg')}{mark}")
            p(f"| {f} | {n} | " + " | ".join(cells) + " |")
    p("")
    if any(r.get("expanded") for runs in rows.values() for r in runs.values()):
        p("ˣ IQ2_S / IQ2_XS / IQ3_S / Q3_K matrices held expanded (IQ2_SX, IQ3_SX, Q3_KX, where memory allows it with the same context): "
          "ratios between a ˣ run and a plain one compare two weight forms.")
        p("")
    # ---- ratios
    p("### Ratios (prompt / decode)")
    p("")
    firefox = any(k[0] == "firefox" for runs in rows.values() for k in runs)
    p("| file | N | Node / native N threads | Chromium / native | Node / native 128-bit | Chromium / native 128-bit | "
      "Chromium / wllama N threads | Node N / Node 1 | Chromium N / Chromium 1 |" + (" Firefox / native | Firefox N / Firefox 1 |" if firefox else ""))
    p("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if firefox else ""))
    for f, by_round in rounds.items():
        for n in counts:
            def rr(a, b):  # prompt / decode ratios of (engine, count) a over b, per round
                ra, rb = by_round.get(a, {}), by_round.get(b, {})
                return f"{round_ratio(ra, rb, 'pp')} / {round_ratio(ra, rb, 'tg')}"
            cells = [
                rr(("node", n), ("native", n)),
                rr(("chromium", n), ("native", n)),
                rr(("node", n), ("native128", n)),
                rr(("chromium", n), ("native128", n)),
                rr(("chromium", n), ("wllama", n)),
                rr(("node", n), ("node", 1)) if n > 1 else "—",
                rr(("chromium", n), ("chromium", 1)) if n > 1 else "—",
            ] + ([rr(("firefox", n), ("native", n)), rr(("firefox", n), ("firefox", 1)) if n > 1 else "—"] if firefox else [])
            if any(c not in ("— / —", "—") for c in cells):
                p(f"| {f} | {n} | " + " | ".join(cells) + " |")
    p("")
    # ---- coordinator share
    p("### Where a decoded token's time goes (ours, split across N workers)")
    p("")
    p("T = ms per generated token; S = the coordinator's work between stages; W = waiting for the shards, of which C = the slowest "
      "shard's compute per stage, of which I = the imbalance (C − the shards' mean compute: the wait for a shard that ran late), "
      "and X = W − C the exchanges; O = the rest (sampling, detokenizing, yields, token messages). "
      "Prompt: S and I shares of the prompt time.")
    p("")
    p("| file | engine | N | T ms | S ms (share) | W ms (share) | C ms (share) | I ms (share) | X ms (share, µs / stage) | O ms (share) | "
      "stages / token | prompt: S, I share |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for f, runs in rows.items():
        for e in ("node", "chromium", "firefox"):
            for n in counts:
                r = runs.get((e, n))
                pt = per_token(r)
                if not pt:
                    continue
                t = pt["T"]
                share = lambda x: f"{x:.2f} ({100 * x / t:.1f} %)"  # noqa: E731
                sp = r["split"]["prompt"]
                prompt_ms = r.get("prompt_ms") or (r["prompt_tokens"] * 1000 / r["pp"] if r.get("pp") else None)
                pi = f", {100 * (sp['shard_ms'] - sp['mean_shard_ms']) / prompt_ms:.1f} %" if prompt_ms and "mean_shard_ms" in sp else ""
                ps = f"{100 * sp['coordinator_ms'] / prompt_ms:.1f} %{pi}" if prompt_ms else "—"
                imb = share(pt["I"]) if pt["I"] is not None else "—"
                p(f"| {f} | {LABEL[e]} | {n} | {t:.1f} | {share(pt['S'])} | {share(pt['W'])} | {share(pt['C'])} | {imb} | "
                  f"{pt['X']:.2f} ({100 * pt['X'] / t:.1f} %, {1000 * pt['X'] / pt['k']:.0f}) | {share(pt['O'])} | {pt['k']:.0f} | {ps} |")
    p("")
    # ---- projection
    p("### Projection for more workers (Amdahl; see tools/bench_tp_report.py)")
    p("")
    p("From the run with the most workers N: P = N × (C − I) (the parallel compute per token), serial = S + O + X per token, "
      "the imbalance I carried to M workers as the wait for the latest of M shards (I_M, ms; tools/bench_tp_report.py); "
      "speed-up over the measured one-worker time T(1), projected decode tokens/s. An upper bound (S and X grow with the workers).")
    p("")
    p("| file | engine | from N | T(1) ms | P ms | serial ms | X ms (µs / stage) | I ms | serial fraction | " +
      " | ".join(f"{n} workers (I_M)" for n in PROJECT) + " |")
    p("|---|---|---|---|---|---|---|---|---|" + "---|" * len(PROJECT))
    stale = forms = False  # footnotes owed
    for f, runs in rows.items():
        for e in ("node", "chromium", "firefox"):
            pr = project({n: r for (eng, n), r in runs.items() if eng == e}, e)
            if not pr:
                continue
            per_stage = 1000 * pr["X"] / pr["k"] if pr["k"] else float("nan")
            stale |= pr["P"] > pr["t1"]
            forms |= pr["forms_differ"]
            odd = (" †" if pr["P"] > pr["t1"] else "") + (" ˣ" if pr["forms_differ"] else "")
            p(f"| {f} | {LABEL[e]} | {pr['n']} | {pr['t1']:.1f}{odd} | {pr['P']:.1f} | {pr['serial']:.2f} | {pr['X']:.2f} ({per_stage:.0f}) | {pr['I']:.2f} | "
              f"{100 * pr['fraction']:.1f} % | " + " | ".join(f"{s:.2f}× ({tps:.2f} tok/s; {i:.1f})" for s, tps, i in pr["proj"].values()) + " |")
    if stale:
        p("")
        p("† P > T(1): the N-worker run's compute exceeded the one-worker run's whole time — the two ran in minutes of a "
          "different speed (a shared host), so that projection is not meaningful.")
    if forms:
        p("")
        p("ˣ beside T(1): one of the two runs held matrices expanded and the other did not (see above), so T(1) and P time "
          "two weight forms and the speed-up includes the expanded form's own gain.")
    errors = [(f, k, r["error"]) for f, runs in rounds.items() for k, by in runs.items() for r in by.values() if "error" in r]
    if errors:
        p("")
        p("Failures:")
        for f, (e, n), msg in errors:
            p(f"- {f}, {e} {n}: {msg}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
