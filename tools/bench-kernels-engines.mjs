// `clef bench-kernels` in the two other browser engines: Firefox's SpiderMonkey (headless
// `firefox-esr`, a plain page) and Safari's JavaScriptCore (WebKitGTK's `jsc` shell). The same
// command as `node --experimental-wasm-relaxed-simd www/cli.mjs bench-kernels …` and
// tools/bench-kernels-chromium.mjs (V8), so that a kernel change, or reading streams
// (`ops::streams_prior`), is measured on every engine users run.
//
//   node tools/bench-kernels-engines.mjs [--engine firefox|jsc|all] [bench-kernels args: --type T --ms MS --rows R --json …]
//
// Each engine runs the builds it can: the relaxed-SIMD build where relaxed SIMD validates (the
// page's own probe, www/pkg/simd.js), then the SIMD128 build. Output: one "<engine> <build>:" line
// per run, then bench-kernels' output.
// Needs www/pkg (./build.sh) and Debian's `firefox-esr` and `libjavascriptcoregtk-4.0-bin` (`jsc`);
// not part of CI.

import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', 'www', 'pkg');
const argv = process.argv.slice(2);
const at = argv.indexOf('--engine');
const engine = at >= 0 ? argv.splice(at, 2)[1] : 'all';
if (!['firefox', 'jsc', 'all'].includes(engine)) {
  console.error(`bench-kernels-engines: --engine firefox, jsc or all, not '${engine}'`);
  process.exit(2);
}
const BUILDS = [['relaxed-simd', 'clef_web_relaxed_bg.wasm'], ['simd128', 'clef_web_bg.wasm']];
/** Longest a whole engine run may take: each type measures two builds, three columns each. */
const TIMEOUT_MS = 20 * 60 * 1000;

/** Firefox: a page served from here runs both builds and posts its output back. */
async function firefox() {
  const page = `<!doctype html><meta charset=utf-8><script type=module>
import { detectSimd } from '/pkg/simd.js';
const builds = ${JSON.stringify(BUILDS)}.filter(([b]) => b === 'simd128' || detectSimd() === 'relaxed-simd');
let out = '';
for (const [build, file] of builds) {
  try {
    const glue = await import('/pkg/clef_web.js?' + build);
    await glue.default({ module_or_path: '/pkg/' + file });
    let text = '';
    glue.runCli(['bench-kernels', ...${JSON.stringify(argv)}], { write: (s) => (text += s), note: (s) => (text += s), size: () => 0, readAt: () => {} });
    out += 'firefox ' + build + ':\\n' + text;
  } catch (e) {
    out += 'firefox ' + build + ': failed: ' + e + '\\n';
  }
}
await fetch('/result', { method: 'POST', body: out });
</script>`;
  const profile = mkdtempSync(join(tmpdir(), 'clef-ff-'));
  let browser;
  const server = http.createServer();
  try {
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no result from Firefox in ${TIMEOUT_MS / 60000} minutes`)), TIMEOUT_MS);
      server.on('request', (req, res) => {
        const path = new URL(req.url, 'http://x').pathname;
        if (req.method === 'POST' && path === '/result') {
          let body = '';
          req.on('data', (d) => (body += d));
          req.on('end', () => (res.end(), clearTimeout(timer), resolve(body)));
          return;
        }
        if (path === '/') return res.setHeader('content-type', 'text/html'), res.end(page);
        const file = join(pkg, path.replace(/^\/pkg\//, ''));
        if (!path.startsWith('/pkg/') || !existsSync(file)) return (res.statusCode = 404), res.end();
        res.setHeader('content-type', file.endsWith('.wasm') ? 'application/wasm' : 'text/javascript');
        res.end(readFileSync(file));
      });
      server.listen(0, '127.0.0.1', () => {
        const url = `http://127.0.0.1:${server.address().port}/`;
        browser = spawn(process.env.FIREFOX ?? 'firefox-esr', ['--headless', '--no-remote', '--profile', profile, url], { stdio: 'ignore' });
        browser.on('error', (e) => reject(new Error(`cannot start Firefox (apt install firefox-esr, or set $FIREFOX): ${e.message}`)));
      });
    });
  } finally {
    browser?.kill();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

/** JavaScriptCore's shell: no fetch, TextEncoder or performance, so the harness brings its own. */
function jsc() {
  const dir = mkdtempSync(join(tmpdir(), 'clef-jsc-'));
  try {
    // One copy of the glue per build: a module is instantiated once per specifier.
    for (const [build] of BUILDS) copyFileSync(join(pkg, 'clef_web.js'), join(dir, `${build}.js`));
    writeFileSync(
      join(dir, 'run.mjs'),
      `globalThis.performance = { now: () => preciseTime() * 1000 };
const utf8 = (s) => { const o = []; for (const ch of s) { const c = ch.codePointAt(0);
  if (c < 0x80) o.push(c); else if (c < 0x800) o.push(0xc0 | c >> 6, 0x80 | c & 63);
  else if (c < 0x10000) o.push(0xe0 | c >> 12, 0x80 | c >> 6 & 63, 0x80 | c & 63);
  else o.push(0xf0 | c >> 18, 0x80 | c >> 12 & 63, 0x80 | c >> 6 & 63, 0x80 | c & 63); } return new Uint8Array(o); };
globalThis.TextEncoder = class { encode(s) { return utf8(s); }
  encodeInto(s, v) { const b = utf8(s); v.set(b.subarray(0, v.length)); return { read: s.length, written: Math.min(b.length, v.length) }; } };
globalThis.TextDecoder = class { decode(b) { if (!b) return ''; let s = '', i = 0; while (i < b.length) { let c = b[i++];
  if (c >= 0xf0) c = (c & 7) << 18 | (b[i++] & 63) << 12 | (b[i++] & 63) << 6 | b[i++] & 63;
  else if (c >= 0xe0) c = (c & 15) << 12 | (b[i++] & 63) << 6 | b[i++] & 63;
  else if (c >= 0xc0) c = (c & 31) << 6 | b[i++] & 63; s += String.fromCodePoint(c); } return s; } };
for (const [build, file] of ${JSON.stringify(BUILDS)}) {
  const bytes = readFile(${JSON.stringify(pkg)} + '/' + file, 'binary');
  if (!WebAssembly.validate(bytes)) { print('jsc ' + build + ': not supported by this engine'); continue; }
  const glue = await import('./' + build + '.js');
  await glue.default({ module_or_path: bytes });
  let text = '';
  glue.runCli(['bench-kernels', ...${JSON.stringify(argv)}], { write: (s) => (text += s), note: (s) => (text += s), size: () => 0, readAt: () => {} });
  print('jsc ' + build + ':\\n' + text);
}
`,
    );
    const r = spawnSync(process.env.JSC ?? 'jsc', ['-m', 'run.mjs'], { cwd: dir, encoding: 'utf8', timeout: TIMEOUT_MS });
    if (r.error) throw new Error(`cannot run jsc (apt install libjavascriptcoregtk-4.0-bin, or set $JSC): ${r.error.message}`);
    if (r.status !== 0) throw new Error(`jsc exited with ${r.status}: ${r.stderr || r.stdout}`);
    return r.stdout;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (engine !== 'jsc') process.stdout.write(await firefox());
if (engine !== 'firefox') process.stdout.write(jsc());
