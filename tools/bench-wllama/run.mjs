#!/usr/bin/env node
// clef-web vs wllama (llama.cpp → wasm) on the same GGUF files, in one headless Chromium (or Firefox).
//
//   cd tools/bench-wllama && npm ci && node run.mjs [FILE.gguf …] [--no-fixtures] [--prompt-tokens 64]
//       [--gen-tokens 32] [--repeats 2] [--ctx 512] [--engines ours,ours2,wl1,wl2] [--json OUT.json] [--verbose]
//       [--not-isolated]   (the page without COOP/COEP, as on a plain static host)
//       [--band PCT]       (ours split: bands of PCT % between workers, the `band` load option)
//       [--trace]          (ours split: every stage traced — the `traceStages` load option; the report
//                          adds each run's imbalance, lag-1 and a replay with bands: trace.mjs;
//                          --json keeps the traces)
//       [--browser firefox] (Debian's headless firefox-esr instead of Chromium: no driver there, so a
//                          driver page holds page.html in a frame and takes its calls from this
//                          script's server, one at a time: GET /job, POST /result)
//       [--warmup full|short|none] (the warm-up request: the measured prompt and 2 tokens — one decode
//                          step — as llama-bench warms up before its runs, the default; or 40
//                          characters and 4 tokens; or none: the first measured request cold)
//
// CLEF_CHROMIUM_ARGS: more Chromium flags, space-separated (e.g. `--js-flags=--perf-prof
// --perf-prof-path=/tmp/jd` to profile the engine's wasm with Linux perf, BENCHMARKS.md).
//
// Files: the tiny fixtures (A-Q2_K, A-IQ2_M, A-Q1_0, A-IQ1_S from ../shared) unless --no-fixtures,
// then every FILE given. Needs ./build.sh (www/dist) and /usr/bin/chromium (--browser firefox: firefox-esr).
// For each file: ours (1 thread: the engine is one worker), wllama with 1 thread, and wllama with 2
// threads (--engines picks among ours, oursN = ours split across N workers, apartN, wl1, wl2); each loads the file, does a warm-up request (--warmup), then --repeats
// measured requests: the same prompt of ~--prompt-tokens tokens (prefill tokens/s), then --gen-tokens
// greedy tokens with EOS ignored (decode tokens/s), as each engine reports them (≥ 5 runs for files
// under 64 MiB). The median run is printed as a Markdown table with the ratios ours/wllama.
//
// Output text: with random weights, greedy decoding can emit byte tokens that are not UTF-8 on
// their own; llama-server's JSON layer (inside wllama) then throws. So every token whose bytes are
// not valid UTF-8 by themselves is banned with logit_bias, identically for both engines (944 of
// the real 248k vocabulary; negligible next to the matmuls). The prompt is text: --prompt-tokens " word" tokens
// of the file's own vocabulary, joined (wllama takes only text prompts); both engines tokenize it,
// and the run checks that they count the same prompt tokens.

import { createServer } from 'node:http';
import { createReadStream, existsSync, mkdtempSync, openSync, readSync, readFileSync, closeSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { ARGS, CHROMIUM, ENV_ARGS, launchFirefox } from '../../tests/browser/helpers.mjs';
import { describe, describeKernels, describeLayers, summarize } from './trace.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const fixtures = resolve(repo, '../shared/fixtures/qwen35-tiny');
const wllamaDir = join(here, 'node_modules/@wllama/wllama/esm');

// ---- arguments ---------------------------------------------------------------------------------
const opt = { verbose: false, promptTokens: 64, genTokens: 32, repeats: 2, ctx: 512, engines: 'ours,wl1,wl2', fixtures: true, json: null, isolated: true, warmup: 'full', browser: 'chromium' };
const files = [];
for (let a = process.argv.slice(2); a.length; ) {
  const k = a.shift();
  if (k === '--no-fixtures') opt.fixtures = false;
  else if (k === '--not-isolated') opt.isolated = false;
  else if (k === '--engines') opt.engines = a.shift();
  else if (k === '--verbose') opt.verbose = true;
  else if (k === '--json') opt.json = a.shift();
  else if (k === '--warmup') opt.warmup = a.shift();
  else if (k === '--browser') opt.browser = a.shift();
  else if (k === '--trace') opt.trace = true;
  else if (k.startsWith('--')) opt[k.slice(2).replace(/-(.)/g, (_, c) => c.toUpperCase())] = Number(a.shift());
  else files.push(resolve(k));
}
if (!['full', 'short', 'none'].includes(opt.warmup)) throw new Error(`--warmup: full, short or none, not '${opt.warmup}'`);
if (!['chromium', 'firefox'].includes(opt.browser)) throw new Error(`--browser: chromium or firefox, not '${opt.browser}'`);
if (opt.fixtures) files.unshift(...['Q2_K', 'IQ2_M', 'Q1_0', 'IQ1_S'].map((q) => join(fixtures, `A-${q}.gguf`)));
// `ours` = ours1 (the whole model in the engine worker); `oursN` splits it across N workers (the
// engine worker computing one shard: engineShard), `apartN` across N shard workers besides it.
const runs = opt.engines.split(',').map((k) => {
  const m = /^(ours|apart|wl)(\d*)$/.exec(k);
  if (!m) throw new Error(`--engines: unknown engine '${k}' (ours, oursN, apartN, wl1, wl2)`);
  return [k, m[1] === 'wl' ? 'wllama' : 'ours', Number(m[2] || 1), m[1] !== 'apart'];
});
for (const f of [...files, join(repo, 'www/dist/clef.js'), join(wllamaDir, 'index.js')]) {
  if (!existsSync(f)) throw new Error(`missing ${f} (./build.sh; npm ci in tools/bench-wllama)`);
}

// ---- the vocabulary of a GGUF: prompt ids and the ids to ban ------------------------------------
/** Reads tokenizer.ggml.tokens / token_type from the GGUF header. */
function readVocab(path) {
  const fd = openSync(path, 'r');
  const b = Buffer.alloc(Math.min(statSync(path).size, 64 << 20));
  readSync(fd, b, 0, b.length, 0);
  closeSync(fd);
  let p = 24;
  const u32 = () => ((p += 4), b.readUInt32LE(p - 4));
  const u64 = () => ((p += 8), Number(b.readBigUInt64LE(p - 8)));
  const str = () => {
    const n = u64();
    return ((p += n), b.toString('latin1', p - n, p));
  };
  const fixed = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const out = {};
  const nKv = Number(b.readBigUInt64LE(16));
  for (let i = 0; i < nKv; i++) {
    const key = str();
    const t = u32();
    if (t === 9) {
      const et = u32();
      const n = u64();
      if (key === 'tokenizer.ggml.tokens') out.tokens = Array.from({ length: n }, () => Buffer.from(str(), 'latin1').toString('utf8'));
      else if (key === 'tokenizer.ggml.token_type') out.types = Array.from({ length: n }, () => b.readInt32LE((p += 4) - 4));
      else if (fixed[et]) p += fixed[et] * n;
      else for (let j = 0; j < n; j++) str();
    } else if (t === 8) str();
    else p += fixed[t];
  }
  return out;
}

// GPT-2 byte-level BPE: each byte is shown as one printable character.
const byteOf = new Map();
for (let b = 0, n = 0; b < 256; b++) {
  const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  byteOf.set(String.fromCodePoint(printable ? b : 256 + n++), b);
}
const tokenBytes = (s) => Uint8Array.from([...s], (c) => byteOf.get(c) ?? 0);
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
const isUtf8 = (bytes) => {
  try {
    strictUtf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
};

function promptAndBans(path, nPrompt) {
  const { tokens, types } = readVocab(path);
  const normal = (i) => !types || types[i] === 1;
  const bans = {};
  const words = [];
  tokens.forEach((s, i) => {
    if (!normal(i)) return;
    const bytes = tokenBytes(s);
    // −100: the lowest bias our engine accepts (OpenAI's range); wllama gets these ids as hard bans.
    if (!isUtf8(bytes)) bans[i] = -100;
    else if (/^ [a-z]{3,}$/.test(strictUtf8.decode(bytes))) words.push(strictUtf8.decode(bytes));
  });
  const stride = Math.max(1, Math.floor(words.length / nPrompt));
  const prompt = Array.from({ length: nPrompt }, (_, i) => words[(i * stride) % words.length]).join('');
  return { prompt, logitBias: bans, nVocab: tokens.length };
}

// ---- a static server with COOP/COEP and Range ---------------------------------------------------
const MIME = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm' };
function route(url) {
  if (url === '/') return join(here, 'page.html');
  if (url.startsWith('/dist/')) return join(repo, 'www', url);
  if (url.startsWith('/wllama/')) return join(wllamaDir, url.slice('/wllama/'.length));
  const m = /^\/model\/(\d+)\//.exec(url);
  if (m) return files[Number(m[1])];
  return null;
}
// Firefox's driver (--browser firefox): page.html in a frame, and the calls this script makes
// handed out one at a time (GET /job: the next call, held until there is one; POST /result).
const DRIVER = `<!doctype html><meta charset="utf-8"><title>driver</title>
<iframe id="f" src="/" style="width:800px;height:200px"></iframe>
<script type="module">
const frame = document.getElementById('f');
while (frame.contentDocument?.title !== 'ready') await new Promise((r) => setTimeout(r, 50));
const bench = frame.contentWindow.bench;
for (;;) {
  const job = await (await fetch('/job', { cache: 'no-store' })).json();
  if (job.stop) break;
  let out;
  try {
    out = { ok: job.fn === 'env' ? { coi: bench.crossOriginIsolated, libllama: bench.libllama, ua: navigator.userAgent } : await bench[job.fn](job.url, job.o) };
  } catch (e) {
    out = { error: String(e?.message ?? e) };
  }
  await fetch('/result', { method: 'POST', body: JSON.stringify(out) });
}
</script>`;
const jobs = [];
let jobWaiter = null;
let resultWaiter = null;
/** Runs window.bench[fn](url, o) in the browser's page (Firefox: through the driver). */
function call(fn, url, o) {
  return new Promise((resolve, reject) => {
    resultWaiter = (r) => (r.error ? reject(new Error(r.error)) : resolve(r.ok));
    jobs.push({ fn, url, o });
    jobWaiter?.();
  });
}
function driverRoute(req, res, url) {
  if (url === '/driver.html') return res.writeHead(200, { 'Content-Type': 'text/html', ...isolation() }).end(DRIVER), true;
  if (url === '/job') {
    const send = () => res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store', ...isolation() }).end(JSON.stringify(jobs.shift()));
    if (jobs.length) send();
    else jobWaiter = () => ((jobWaiter = null), send());
    return true;
  }
  if (url === '/result' && req.method === 'POST') {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => (res.writeHead(204, isolation()).end(), resultWaiter?.(JSON.parse(body))));
    return true;
  }
  return false;
}
/** COOP + COEP, unless --not-isolated: a plain static host (no SharedArrayBuffer: wllama runs one thread, ours exchanges by postMessage). */
const isolation = () => (opt.isolated ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' } : {});

const server = createServer((req, res) => {
  const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  if (opt.browser === 'firefox' && driverRoute(req, res, url)) return;
  const path = route(url);
  const headers = {
    ...isolation(),
    'Cross-Origin-Resource-Policy': 'same-origin', 'Cache-Control': 'no-store', 'Accept-Ranges': 'bytes',
    'Content-Type': MIME[extname(path ?? '')] ?? 'application/octet-stream',
  };
  if (!path || path.includes('..') || !existsSync(path)) {
    if (!req.url.endsWith('favicon.ico')) console.error(`  404 ${req.url}`);
    return res.writeHead(404, headers).end();
  }
  const size = statSync(path).size;
  let [start, end] = [0, size - 1];
  const r = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '');
  if (r) {
    start = r[1] ? Number(r[1]) : size - Number(r[2]);
    end = r[1] && r[2] ? Math.min(Number(r[2]), size - 1) : size - 1;
    if (start > end) return res.writeHead(416, { ...headers, 'Content-Range': `bytes */${size}` }).end();
    headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
  }
  headers['Content-Length'] = end - start + 1;
  res.writeHead(r ? 206 : 200, headers);
  if (req.method === 'HEAD') return res.end();
  createReadStream(path, { start, end }).pipe(res);
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}`;

// ---- the browser --------------------------------------------------------------------------------
let profile = null;
let ctx = null;
let firefox = null;
let bench;
if (opt.browser === 'firefox') {
  firefox = launchFirefox([base + '/driver.html']);
  firefox.process.on('error', (e) => console.error(`cannot start Firefox (apt install firefox-esr, or set $FIREFOX): ${e.message}`));
  bench = call;
} else {
  profile = mkdtempSync(join(tmpdir(), 'bench-wllama-'));
  ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [...ARGS, ...ENV_ARGS],
  });
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on('pageerror', (e) => console.error(`  page error: ${e.message}`));
  page.on('console', (m) => (opt.verbose || m.type() === 'error') && console.error(`  console: ${m.text()}`));
  await page.goto(base + '/');
  await page.waitForFunction(() => document.title === 'ready', null, { timeout: 30000 });
  bench = (fn, url, o) =>
    fn === 'env'
      ? page.evaluate(() => ({ coi: window.bench.crossOriginIsolated, libllama: window.bench.libllama, ua: navigator.userAgent }))
      : page.evaluate(([fn, url, o]) => window.bench[fn](url, o), [fn, url, o]);
}
const env = await bench('env');
const browserName = env.ua.match(/(Chrome|Firefox)\/\S+/)?.[0];
const wllamaVersion = JSON.parse(readFileSync(join(here, 'node_modules/@wllama/wllama/package.json'), 'utf8')).version;
console.error(`wllama ${wllamaVersion} (llama.cpp ${env.libllama}); crossOriginIsolated=${env.coi}; ${browserName}`);

// ---- measure -----------------------------------------------------------------------------------
const load0 = loadavg()[0];
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const results = [];
for (const [i, file] of files.entries()) {
  const { prompt, logitBias, nVocab } = promptAndBans(file, opt.promptTokens);
  const url = `/model/${i}/${basename(file)}`;
  // Tiny files take milliseconds per run and are noisy: give them at least 5 runs.
  const repeats = statSync(file).size < 64 << 20 ? Math.max(opt.repeats, 5) : opt.repeats;
  const o = { verbose: opt.verbose, prompt, promptTokens: opt.promptTokens, genTokens: opt.genTokens, nCtx: opt.ctx, repeats, logitBias, warmup: opt.warmup, band: opt.band ?? 0, traceStages: !!opt.trace };
  const row = { file: basename(file), bytes: statSync(file).size, nVocab, banned: Object.keys(logitBias).length };
  for (const [key, fn, threads, engineShard] of runs) {
    const t0 = Date.now();
    try {
      const r = await bench(fn, url, { ...o, threads, engineShard });
      const mid = [...r.runs].sort((a, b) => a.tg - b.tg)[Math.floor((r.runs.length - 1) / 2)];
      row[key] = { n: r.runs[0].n, pp: median(r.runs.map((x) => x.pp)), tg: median(r.runs.map((x) => x.tg)), loadS: r.loadS, threads: r.threads, simd: r.simd, exchange: r.exchange, expanded: r.expanded, band: r.band, text: r.runs[0].text, split: mid.split, ppRuns: r.runs.map((x) => x.pp), tgRuns: r.runs.map((x) => x.tg) };
      console.error(`${row.file} ${key}: pp ${row[key].pp.toFixed(2)} t/s, tg ${row[key].tg.toFixed(2)} t/s, load ${r.loadS.toFixed(1)} s (threads ${r.threads}${r.simd ? `, ${r.simd}` : ''}${r.exchange ? `, ${r.exchange} exchange` : ''}${r.expanded ? ', IQ2_S expanded' : ''}${r.band ? `, bands ${r.band} %` : ''}) [${((Date.now() - t0) / 1000).toFixed(0)} s]`);
    } catch (e) {
      row[key] = { error: String(e.message ?? e).split('\n')[0].slice(0, 200) };
      console.error(`${row.file} ${key}: FAILED ${row[key].error}`);
    }
  }
  for (const [k] of runs) {
    const o = row.ours ?? row.ours1;
    if (k !== 'ours' && o?.n && row[k]?.n && row[k].n !== o.n) row[k].error = `prompt tokens differ: ours ${o.n}, ${k} ${row[k].n}`;
  }
  results.push(row);
}
await ctx?.close();
if (firefox) {
  jobs.push({ stop: true });
  jobWaiter?.();
  await new Promise((r) => setTimeout(r, 200));
  firefox.close();
}
if (profile) rmSync(profile, { recursive: true, force: true });
server.close();

// ---- report ------------------------------------------------------------------------------------
const f = (x, d = 2) => (x === undefined ? 'n/a' : x >= 100 ? x.toFixed(0) : x.toFixed(d));
const ratio = (a, b) => (a && b ? `**${(a / b).toFixed(2)}×**` : 'n/a');
const same = (a, b) => {
  if (a === undefined || b === undefined) return 'n/a';
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return a === b ? 'yes' : `first ${i} of ${a.length} chars`;
};
const size = (b) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / 2 ** 20).toFixed(1)} MiB`);
console.log(`\nclef-web vs wllama ${wllamaVersion} (llama.cpp ${env.libllama}), ${browserName}, ` +
  `prompt ${opt.promptTokens} tokens, decode ${opt.genTokens} tokens greedy (EOS ignored), median of ${opt.repeats} runs (≥ 5 for files < 64 MiB) after a ${opt.warmup} warm-up; tokens/s; ` +
  `load average ${load0.toFixed(1)} at start, ${loadavg()[0].toFixed(1)} at end\n`);
const split = runs.filter(([k]) => /^(ours|apart)\d+$/.test(k) && k !== 'ours1').map(([k]) => k);
console.log('| file | size | prefill ours | prefill wllama 1t | **ours/wllama** | decode ours | decode wllama 1t | **ours/wllama** | wllama 2t prefill / decode | ' +
  split.map((k) => `${k.startsWith('apart') ? `ours ${k.slice(5)} shard workers + engine` : `ours ${k.slice(4)} workers`} prefill / decode | `).join('') + 'same greedy text |');
console.log('|---|---|---|---|---|---|---|---|---|' + '---|'.repeat(split.length) + '---|');
for (const r of results) {
  const o = r.ours ?? r.ours1;
  console.log(`| ${r.file} | ${size(r.bytes)} | ${f(o?.pp)} | ${f(r.wl1?.pp)} | ${ratio(o?.pp, r.wl1?.pp)} | ${f(o?.tg)} | ${f(r.wl1?.tg)} | ` +
    `${ratio(o?.tg, r.wl1?.tg)} | ${f(r.wl2?.pp)} / ${f(r.wl2?.tg)} | ` + split.map((k) => `${f(r[k]?.pp)} / ${f(r[k]?.tg)} | `).join('') + `${same(o?.text, r.wl1?.text)} |`);
}
if (opt.trace) {
  console.log('\nStage traces (the median run; trace.mjs):');
  for (const r of results) {
    for (const k of split) {
      for (const part of ['prompt', 'completion']) {
        const t = r[k]?.split?.[part]?.trace;
        if (!t) continue;
        console.log(`- ${r.file}, ${k}${r[k].band ? ` (bands ${r[k].band} %)` : ''}, ${part}: ${describe(summarize(t))}`);
        if (part === 'prompt') console.log(`  - each worker's ms by layer: ${describeLayers(t)}`);
      }
      const kn = r[k]?.split?.kernels;
      if (kn) [kn.coordinator, ...kn.shards].forEach((x, i) => console.log(`  - kernels, ${i ? `shard ${i - 1}` : 'coordinator'}: ${describeKernels(x)}`));
    }
  }
}
for (const r of results) for (const [k] of runs) if (r[k]?.error) console.log(`\n- ${r.file}, ${k}: ${r[k].error}`);
if (opt.json) writeFileSync(opt.json, JSON.stringify({ wllamaVersion, libllama: env.libllama, opt, results }, null, 1));
