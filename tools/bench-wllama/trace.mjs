// What a split run's stage trace says (load option `traceStages`: `usage.split.{prompt,completion}.trace`,
// one record per stage — which stage, each worker's compute and units of work). Used by run.mjs --trace.
//
//   imbalance   per kind of stage: Σ slowest − Σ mean of the workers' compute, as a share of the
//               pass's stage time (Σ wait): what the stages lost waiting for a late worker.
//   bias        per kind: worker 0's cost per unit of work relative to the workers' mean, as a
//               geometric mean over the pass's stages of that kind (1: no systematic difference).
//   lag1        how much one stage's speeds tell of the next: the lag-1 correlation, over the
//               pass's consecutive stages, of the log of worker 0's relative cost (`ffn`: from one
//               FFN stage to the next). Near 0: the late worker changes at random and no balancer
//               can predict it; near 1: it stays late for a while (bursts) and bands pay.
//   replay      what bands of B % (of a worker's share) would have saved in this pass, had the FFN
//               and LM-head stages been cut as src/balance.rs cuts them: each worker's work scaled
//               by its relative cost in the stage before times its learned per-kind bias, each
//               boundary clamped to its band (± B/2 % of a share) and rounded to one of `pieces`
//               steps, the stage then taking as long as its slowest worker at this stage's
//               measured cost per unit. Valid for a trace run without bands (even cuts); workers
//               taken in index order along the chain of boundaries (exact for 2).
//   oracle      the same with each stage cut by its own measured speeds: the most bands of B %
//               could save (what work stealing within a stage would approach).

const KINDS = ['mixer', 'ffn', 'head'];
/** src/balance.rs BIAS_RATE. */
const BIAS_RATE = 0.25;

const sum = (xs) => xs.reduce((a, b) => a + b, 0);
const mean = (xs) => (xs.length ? sum(xs) / xs.length : 0);

/** Pearson correlation of consecutive values (0 when undefined). */
function lag1(xs) {
  if (xs.length < 3) return 0;
  const a = xs.slice(0, -1);
  const b = xs.slice(1);
  const ma = mean(a);
  const mb = mean(b);
  let num = 0;
  let da = 0;
  let db = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - ma) * (b[i] - mb);
    da += (a[i] - ma) ** 2;
    db += (b[i] - mb) ** 2;
  }
  return da > 0 && db > 0 ? num / Math.sqrt(da * db) : 0;
}

/** Each worker's cost per unit of work relative to the workers' mean (null: a worker had none). */
function relCost(t) {
  const per = t.shard_ms.map((ms, s) => (t.work[s] > 0 && ms > 0 ? ms / t.work[s] : null));
  if (per.some((p) => p === null)) return null;
  const m = mean(per);
  return per.map((p) => p / m);
}

/**
 * The slowest worker's time for a stage cut by `cost` (each worker's expected relative cost) with
 * bands of `pct` % in `pieces` steps, at the stage's own measured cost per unit.
 */
function replayStage(t, cost, pct, pieces) {
  const n = t.work.length;
  const total = sum(t.work);
  const even = total / n;
  const band = (even * pct) / 100;
  const want = t.work.map((w, s) => w / cost[s]);
  const scale = total / sum(want);
  const unit = t.work.map((w, s) => t.shard_ms[s] / w);
  let before = 0;
  let prev = 0;
  let slowest = 0;
  for (let s = 0; s < n; s++) {
    let cut = total;
    if (s < n - 1) {
      before += want[s] * scale;
      const at = even * (s + 1);
      const step = band / pieces;
      const off = Math.max(-band / 2, Math.min(band / 2, before - at));
      cut = at + Math.round(off / step) * step;
    }
    slowest = Math.max(slowest, (cut - prev) * unit[s]);
    prev = cut;
  }
  return slowest;
}

/** The summary of one pass's trace (see the top of this file). */
export function summarize(trace, { bands = [25, 50], pieces = [2, 16] } = {}) {
  const out = { stages: trace.length, waitMs: sum(trace.map((t) => t.wait_ms)), imbalance: {}, bias: {}, lag1: {}, replay: {}, oracle: {} };
  if (!trace.length || trace[0].shard_ms.length < 2) return out;
  const slow = (t) => Math.max(...t.shard_ms);
  for (const [k, name] of KINDS.entries()) {
    const ts = trace.filter((t) => t.stage === name);
    out.imbalance[name] = sum(ts.map((t) => slow(t) - mean(t.shard_ms))) / out.waitMs;
  }
  out.imbalance.all = sum(trace.map((t) => slow(t) - mean(t.shard_ms))) / out.waitMs;
  const costs = trace.map(relCost);
  const log0 = (pick) => costs.filter((c, i) => c && pick(trace[i])).map((c) => Math.log(c[0]));
  out.lag1.all = lag1(log0(() => true));
  for (const name of KINDS) {
    const xs = log0((t) => t.stage === name);
    out.bias[name] = Math.exp(mean(xs));
    out.lag1[name] = lag1(xs);
  }
  const n = trace[0].work.length;
  for (const pct of bands) {
    let saved = 0;
    let best = 0;
    let cost = Array(n).fill(1);
    const bias = KINDS.map(() => Array(n).fill(1));
    for (const [i, t] of trace.entries()) {
      const k = KINDS.indexOf(t.stage);
      const want = cost.map((c, s) => c * bias[k][s]);
      if (k > 0 && t.work.every((w) => w > 0)) {
        saved += slow(t) - replayStage(t, want, pct, pieces[k - 1]);
        if (costs[i]) best += slow(t) - replayStage(t, costs[i], pct, pieces[k - 1]);
      }
      if (costs[i]) {
        for (let s = 0; s < n; s++) {
          bias[k][s] += BIAS_RATE * (costs[i][s] / cost[s] - bias[k][s]);
          cost[s] = costs[i][s];
        }
      }
    }
    out.replay[pct] = saved / out.waitMs;
    out.oracle[pct] = best / out.waitMs;
  }
  return out;
}

/**
 * One instance's kernel trials (`usage.split.kernels`) in a line: per trial and type, the form
 * chosen (the first or second, `?` while undecided) and the two forms' measured rates.
 */
export function describeKernels(k) {
  const forms = { streams: ['rows', 'streams'], gemm_dot: ['pairs', 'quads'], r4_form: ['first', 'second'] };
  return Object.entries(forms)
    .map(([trial, [a, b]]) => {
      const types = Object.entries(k[trial] ?? {}).map(([ty, r]) => {
        const [pick, ra, rb] = Object.values(r);
        const f = (x) => (x === null ? '–' : x.toFixed(1));
        return `${ty} ${pick === null ? '?' : pick ? b : a} (${f(ra)} / ${f(rb)})`;
      });
      return types.length ? `${trial}: ${types.join(', ')}` : '';
    })
    .filter(Boolean)
    .join('; ');
}

/**
 * Per layer, each worker's compute in the pass's FFN and mixer stages (ms, summed over the pass's
 * stages of that layer): `FFN 0: 204/199 1: 201/201 …` — where a systematic difference starts.
 */
export function describeLayers(trace) {
  const line = (stage) => {
    const by = new Map();
    for (const t of trace) {
      if (t.stage !== stage) continue;
      const acc = by.get(t.layer) ?? t.shard_ms.map(() => 0);
      t.shard_ms.forEach((ms, s) => (acc[s] += ms));
      by.set(t.layer, acc);
    }
    return [...by].map(([l, ms]) => `${l}: ${ms.map((x) => x.toFixed(0)).join('/')}`).join(' ');
  };
  return `FFN ${line('ffn')}\n    mixer ${line('mixer')}`;
}

/** One line of the summary, for the harness's report. */
export function describe(s) {
  const pc = (x) => `${(100 * x).toFixed(1)} %`;
  const kinds = KINDS.filter((k) => s.bias[k] > 0);
  const im = kinds.map((k) => `${k} ${pc(s.imbalance[k])}`).join(', ');
  const bias = kinds.map((k) => `${k} ${s.bias[k].toFixed(3)}`).join(', ');
  const l1 = kinds.map((k) => `${k} ${s.lag1[k].toFixed(2)}`).join(', ');
  const rp = Object.entries(s.replay).map(([b, x]) => `${b} %: ${pc(x)} (each stage's own speeds: ${pc(s.oracle[b])})`).join(', ');
  return `${s.stages} stages, ${s.waitMs.toFixed(0)} ms; imbalance ${pc(s.imbalance.all ?? 0)} (${im}); worker 0's relative cost ${bias}; ` +
    `lag-1 ${(s.lag1.all ?? 0).toFixed(2)} (${l1}); bands would save ${rp}`;
}
