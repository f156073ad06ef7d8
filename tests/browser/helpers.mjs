// Shared helpers of the browser tests: Chromium through playwright-core, headless Firefox on a fresh
// profile (`launchFirefox`), a JS-heap sampler for the engine worker (Chrome DevTools Protocol),
// fixtures, and a synthetic "too large" GGUF.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { fixturesDir, repoRoot } from './hub-server.mjs';

export { fixturesDir, repoRoot };
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync',
];
/** The benchmark tools' extra Chromium flags: `CLEF_CHROMIUM_ARGS`, space-separated. */
export const ENV_ARGS = (process.env.CLEF_CHROMIUM_ARGS ?? '').split(' ').filter(Boolean);

/** Debian's Firefox ESR (firefox.test.mjs, tools/bench-wllama/run.mjs --browser firefox). */
export const FIREFOX = process.env.FIREFOX ?? '/usr/bin/firefox-esr';

/**
 * Headless Firefox on a fresh profile (its own OPFS; no first-run pages, updates or telemetry),
 * started with `args` (a URL last); returns {process, close} — `close` kills it and removes the
 * profile. The child's stdio as `stdio` says (spawn's option).
 */
export function launchFirefox(args, { stdio = 'ignore' } = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'clef-ff-'));
  writeFileSync(join(profile, 'user.js'), [
    'user_pref("browser.shell.checkDefaultBrowser", false);',
    'user_pref("browser.startup.homepage_override.mstone", "ignore");',
    'user_pref("datareporting.policy.dataSubmissionEnabled", false);',
    'user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);',
    'user_pref("app.update.disabledForTesting", true);',
    '',
  ].join('\n'));
  const child = spawn(FIREFOX, ['--headless', '--no-remote', '--profile', profile, ...args], { stdio });
  return {
    process: child,
    close() {
      child.kill('SIGKILL');
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Whether the browser tests can run here (chromium + a built www/dist). */
export function skipReason() {
  if (!existsSync(CHROMIUM)) return `no ${CHROMIUM} (apt-get install chromium)`;
  if (!existsSync(join(repoRoot, 'www', 'dist', 'clef.js'))) return 'www/dist is not built (./build.sh)';
  return false;
}

export const fixture = (name) => JSON.parse(readFileSync(join(fixturesDir, name), 'utf8'));
export const A = fixture('A-F32.llama.json');
export const PROMPT_TEXT = 'What is the capital of France?';

/** Chromium with a fresh profile (its own OPFS); returns {ctx, page, close}. `args`: more command-line flags. */
export async function launch(serverUrl, { path = '/test/page.html', args = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'clef-browser-'));
  const ctx = await chromium.launchPersistentContext(dir, { executablePath: CHROMIUM, headless: true, args: [...ARGS, ...args] });
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  const logs = [];
  page.on('console', (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
  const close = async () => {
    await ctx.close().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  };
  let response = null;
  try {
    if (serverUrl) response = await open(page, serverUrl + path);
  } catch (e) {
    await close();
    throw e;
  }
  return { ctx, page, logs, response, close };
}

export async function open(page, url) {
  const response = await page.goto(url);
  await page.waitForFunction(() => document.title === 'ready', null, { timeout: 20000 });
  return response;
}

/**
 * Samples the engine worker's JS heap (Runtime.getHeapUsage over CDP) every few ms while running.
 * `stop()` returns {peakUsed, peakBacking, samples} (bytes): the V8 heap, and ArrayBuffer backing
 * stores outside it (fetch chunks would show up there).
 */
export async function heapSampler(ctx, page, everyMs = 20) {
  const s = await ctx.newCDPSession(page);
  let sessionId = null;
  let next = 1;
  const waiting = new Map();
  s.on('Target.receivedMessageFromTarget', (e) => {
    const msg = JSON.parse(e.message);
    waiting.get(msg.id)?.(msg);
    waiting.delete(msg.id);
  });
  const send = (method, params = {}) =>
    new Promise((resolve) => {
      const id = next++;
      waiting.set(id, resolve);
      s.send('Target.sendMessageToTarget', { sessionId, message: JSON.stringify({ id, method, params }) }).catch(() => resolve({}));
      setTimeout(() => {
        if (waiting.delete(id)) resolve({ timeout: true });
      }, 1000);
    });
  const stats = { peakUsed: 0, peakBacking: 0, samples: 0 };
  const silent = new Set();
  let targetId = null;
  let running = true;
  const loop = (async () => {
    while (running) {
      if (!sessionId) {
        // A worker that was just terminated can still be listed: skip targets that did not answer.
        const { targetInfos } = await s.send('Target.getTargets');
        const workers = targetInfos.filter((t) => t.type === 'worker' && t.url.includes('clef-worker'));
        if (workers.length && workers.every((t) => silent.has(t.targetId))) silent.clear();
        const w = workers.find((t) => !silent.has(t.targetId));
        if (w) {
          targetId = w.targetId;
          sessionId = (await s.send('Target.attachToTarget', { targetId, flatten: false }).catch(() => ({}))).sessionId ?? null;
        }
      }
      if (sessionId) {
        const reply = await send('Runtime.getHeapUsage');
        if (reply.timeout) {
          silent.add(targetId);
          sessionId = null;
        }
        const r = reply.result;
        if (r) {
          stats.samples++;
          stats.peakUsed = Math.max(stats.peakUsed, r.usedSize);
          stats.peakBacking = Math.max(stats.peakBacking, r.backingStorageSize ?? 0);
        }
      }
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    /** Current heap of the worker after a forced GC. */
    async heapNow() {
      if (!sessionId) return null;
      await send('HeapProfiler.collectGarbage');
      return (await send('Runtime.getHeapUsage')).result ?? null;
    },
    async stop() {
      running = false;
      await loop;
      await s.detach().catch(() => {});
      return stats;
    },
  };
}

// ---- a GGUF whose tensors claim far more than a tab can hold -----------------------------------

/** Walks a GGUF header; returns {kvEnd, nTensors, nKv, tensorsEnd} byte offsets. */
function walkGguf(b) {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let p = 4 + 4;
  const nTensors = Number(dv.getBigUint64(p, true));
  const nKv = Number(dv.getBigUint64(p + 8, true));
  p += 16;
  const fixed = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const str = () => {
    const n = Number(dv.getBigUint64(p, true));
    p += 8 + n;
  };
  const val = (t) => {
    if (fixed[t]) p += fixed[t];
    else if (t === 8) str();
    else if (t === 9) {
      const et = dv.getUint32(p, true);
      const n = Number(dv.getBigUint64(p + 4, true));
      p += 12;
      if (fixed[et]) p += fixed[et] * n;
      else for (let i = 0; i < n; i++) val(et);
    } else throw new Error(`gguf type ${t}`);
  };
  for (let i = 0; i < nKv; i++) {
    str();
    const t = dv.getUint32(p, true);
    p += 4;
    val(t);
  }
  const kvEnd = p;
  let dataEnd = 0;
  for (let i = 0; i < nTensors; i++) {
    str();
    const nd = dv.getUint32(p, true);
    p += 4;
    let elems = 1n;
    for (let d = 0; d < nd; d++) {
      elems *= dv.getBigUint64(p, true);
      p += 8;
    }
    const type = dv.getUint32(p, true);
    const off = Number(dv.getBigUint64(p + 4, true));
    p += 12;
    if (type !== 0) throw new Error('expects an F32 file');
    dataEnd = Math.max(dataEnd, off + Number(elems) * 4);
  }
  return { nTensors, nKv, kvEnd, tensorsEnd: p, dataEnd };
}

/**
 * The header of A-F32.gguf plus `extra` F32 tensors of `rows`×`cols` each (not used by the model, but
 * loaded like weights): a file of ~6.5 GB by default. Returns {header, size, dataFrom}: hub-server
 * serves the header, A-F32.gguf's tensor data, then zeros, so the model still runs.
 */
export function hugeGguf({ extra = 3, rows = 16384, cols = 32768 } = {}) {
  const src = readFileSync(join(fixturesDir, 'A-F32.gguf'));
  const w = walkGguf(src);
  const parts = [];
  const u64 = (n) => {
    const b = Buffer.alloc(8);
    b.writeBigUint64LE(BigInt(n));
    return b;
  };
  const u32 = (n) => {
    const b = Buffer.alloc(4);
    b.writeUint32LE(n);
    return b;
  };
  const head = Buffer.from(src.subarray(0, 24));
  head.writeBigUint64LE(BigInt(w.nTensors + extra), 8);
  parts.push(head, src.subarray(24, w.tensorsEnd));
  let off = Math.ceil(w.dataEnd / 32) * 32;
  for (let i = 0; i < extra; i++) {
    const name = Buffer.from(`extra.${i}.weight`);
    parts.push(u64(name.length), name, u32(2), u64(cols), u64(rows), u32(0), u64(off));
    off += rows * cols * 4;
  }
  let header = Buffer.concat(parts);
  const pad = (32 - (header.length % 32)) % 32;
  header = Buffer.concat([header, Buffer.alloc(pad)]);
  // The original tensors keep their data: serve A-F32.gguf's data section right after this header.
  const origData = src.length - Math.ceil(w.tensorsEnd / 32) * 32;
  const dataFrom = { path: join(fixturesDir, 'A-F32.gguf'), offset: src.length - origData, length: origData };
  return { header, size: header.length + off, dataFrom };
}

/** A deterministic pseudo-random generator (tests pick "random" offsets reproducibly). */
export function rng(seed = 1) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0;
    s ^= s + Math.imul(s ^ (s >>> 7), 61 | s);
    return ((s ^ (s >>> 14)) >>> 0) / 4294967296;
  };
}

// ---- a GGUF with the real 248k-token vocabulary (a ~11 MB header) --------------------------------

/** Splits a GGUF header into raw KV records and parsed tensor infos. */
function splitGguf(b) {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const nTensors = Number(dv.getBigUint64(8, true));
  const nKv = Number(dv.getBigUint64(16, true));
  let p = 24;
  const fixed = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const str = () => {
    const n = Number(dv.getBigUint64(p, true));
    const s = b.subarray(p + 8, p + 8 + n).toString();
    p += 8 + n;
    return s;
  };
  const val = (t) => {
    if (fixed[t]) p += fixed[t];
    else if (t === 8) str();
    else {
      const et = dv.getUint32(p, true);
      const n = Number(dv.getBigUint64(p + 4, true));
      p += 12;
      if (fixed[et]) p += fixed[et] * n;
      else for (let i = 0; i < n; i++) val(et);
    }
  };
  const kvs = [];
  for (let i = 0; i < nKv; i++) {
    const s = p;
    const key = str();
    const t = dv.getUint32(p, true);
    p += 4;
    val(t);
    kvs.push({ key, raw: b.subarray(s, p) });
  }
  const tensors = [];
  for (let i = 0; i < nTensors; i++) {
    const name = str();
    const nd = dv.getUint32(p, true);
    p += 4;
    const dims = [];
    for (let d = 0; d < nd; d++, p += 8) dims.push(Number(dv.getBigUint64(p, true)));
    const type = dv.getUint32(p, true);
    p += 12;
    tensors.push({ name, dims, type });
  }
  return { kvs, tensors };
}

/**
 * A-F32's hyper-parameters and tensors, with the real Qwen3.5 tokenizer (248,320 tokens: token_embd
 * and output grow to match): {header (~11 MB), size}; hub-server serves zeros after the header.
 */
export function realVocabGguf() {
  const a = splitGguf(readFileSync(join(fixturesDir, 'A-F32.gguf')));
  const v = splitGguf(readFileSync(join(fixturesDir, '..', 'tokenizer', 'qwen35-vocab.gguf')));
  const kvs = [...a.kvs.filter((k) => !k.key.startsWith('tokenizer.')), ...v.kvs.filter((k) => k.key.startsWith('tokenizer.'))];
  const nVocab = 248320;
  const parts = [];
  const head = Buffer.alloc(24);
  head.write('GGUF', 0);
  head.writeUint32LE(3, 4);
  head.writeBigUint64LE(BigInt(a.tensors.length), 8);
  head.writeBigUint64LE(BigInt(kvs.length), 16);
  parts.push(head, ...kvs.map((k) => k.raw));
  let off = 0;
  for (const t of a.tensors) {
    const dims = t.name === 'token_embd.weight' || t.name === 'output.weight' ? [t.dims[0], nVocab] : t.dims;
    const name = Buffer.from(t.name);
    const rec = Buffer.alloc(8 + name.length + 4 + 8 * dims.length + 12);
    let p = 0;
    rec.writeBigUint64LE(BigInt(name.length), p);
    name.copy(rec, (p += 8));
    rec.writeUint32LE(dims.length, (p += name.length));
    p += 4;
    for (const d of dims) {
      rec.writeBigUint64LE(BigInt(d), p);
      p += 8;
    }
    rec.writeUint32LE(t.type, p);
    rec.writeBigUint64LE(BigInt(off), p + 4);
    parts.push(rec);
    off += Math.ceil((dims.reduce((x, y) => x * y, 1) * 4) / 32) * 32;
  }
  let header = Buffer.concat(parts);
  header = Buffer.concat([header, Buffer.alloc((32 - (header.length % 32)) % 32)]);
  return { header, size: header.length + off };
}

/** Flips one byte of the (only) cached model's first OPFS piece, at offset `at`, from the page. */
export function flipCachedByte(page, at) {
  return page.evaluate(async (at) => {
    const cache = await (await navigator.storage.getDirectory()).getDirectoryHandle('clef-cache');
    let dir = null;
    for await (const [, h] of cache.entries()) if (h.kind === 'directory') dir = h;
    const fh = await dir.getFileHandle('piece-0.bin');
    const byte = new Uint8Array(await (await fh.getFile()).slice(at, at + 1).arrayBuffer());
    const w = await fh.createWritable({ keepExistingData: true });
    await w.write({ type: 'write', position: at, data: new Uint8Array([byte[0] ^ 0x5a]) });
    await w.close();
  }, at);
}
