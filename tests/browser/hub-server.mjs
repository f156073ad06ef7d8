// A small HTTP server that behaves like the Hugging Face Hub for the files of a directory, plus a
// static file server for the pages (www/dist then www/ at /, tests/browser/ at /test/), with NO
// COOP/COEP headers (`startHubServer({isolated: true})`: with them, a cross-origin isolated site).
//
//   GET|HEAD /{owner}/{repo}/resolve/{rev}/{file}   302 → /cdn/{owner}/{repo}/{rev}/{file}
//            (X-Linked-Etag = sha256, X-Linked-Size, ETag, like the Hub)
//   GET|HEAD /cdn/{owner}/{repo}/{rev}/{file}        the bytes: Content-Length, Accept-Ranges, Range → 206
//            + Content-Range, ETag = "sha256", X-Linked-Etag, X-Linked-Size
//   GET      /api/models/{owner}/{repo}/tree/{rev}   [{type, path, size, oid, lfs: {oid, size}}]
//
// Fault injection (server.faults, mutable at any time):
//   killAt: [fileOffset, …]   the first response that covers an offset sends the bytes before it, then
//                             drops the connection (each offset fires once)
//   flipAt: [fileOffset, …]   the first response that covers an offset has that byte inverted (once)
//   offline: true             every model request (resolve, cdn, api) gets its connection dropped
//   delayMs: n                wait before answering each model request
//   bytesPerSecond: n         send model bytes at about this rate (a slow connection)
//   stallAt: [fileOffset, …]  like killAt, but the connection stays open and silent (a stalled body)
//   stallHeaders: n           the next n data requests (/cdn/) never get response headers
//   statuses: [{status, retryAfter?, times?, where?}]   the next data requests (where: 'cdn', the
//                             default, or 'resolve') get this HTTP status instead (times: default 1),
//                             with a Retry-After header when given (seconds or an HTTP-date)
//   ignoreRange: n            the next n Range requests get 200 and the whole file
//   lengthDelta: [n, …]       the next data responses declare Content-Length = real + n and send
//                             min(real, real + n) bytes (n > 0: then the connection is dropped)
//   redirectLoop: true        /resolve/ redirects to itself, forever
//   staticDelayMs: {name: n}  wait n ms before answering a page file of that name (e.g. 'sw.js')
// POST /test/report: the body goes to `options.onReport(text)` (a page that runs on its own — the
// Firefox test, firefox.test.mjs — hands its results back this way).
// server.log: one entry per model response {path, file, start, end, status, sent, complete, killed, stalled, t (ms)}.
//
//   node tests/browser/hub-server.mjs [port]     serves ../shared/fixtures/qwen35-tiny as test-org/clef-flash-GGUF

import { createServer } from 'node:http';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, readSync, readdirSync, statSync } from 'node:fs';
import { dirname, extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '..', '..');
export const fixturesDir = resolve(repoRoot, '..', 'shared', 'fixtures', 'qwen35-tiny');

const MIME = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css', '.ts': 'text/plain; charset=utf-8',
  '.map': 'application/json', '.gguf': 'application/octet-stream', '.png': 'image/png', '.svg': 'image/svg+xml',
};

function sha256File(path) {
  const h = createHash('sha256');
  const fd = openSync(path, 'r');
  const buf = Buffer.alloc(8 << 20);
  try {
    for (let pos = 0; ; ) {
      const n = readSync(fd, buf, 0, buf.length, pos);
      if (n === 0) break;
      h.update(buf.subarray(0, n));
      pos += n;
    }
  } finally {
    closeSync(fd);
  }
  return h.digest('hex');
}

/**
 * A published file: real ({path}) or virtual ({header: Buffer, size[, dataFrom: {path, offset, length}]}:
 * the header, then bytes of another file if given, then zeros: for files too large to exist on disk).
 */
class HubFile {
  constructor(spec) {
    this.path = spec.path ?? null;
    this.header = spec.header ?? null;
    // Virtual files may continue their header with the bytes of a real file: {path, offset}.
    this.dataFrom = spec.dataFrom ?? null;
    this.size = this.path ? statSync(this.path).size : spec.size;
    this._sha = spec.sha256 ?? null;
  }
  get sha256() {
    if (!this._sha && this.path) this._sha = sha256File(this.path);
    if (!this._sha && this.size <= 2 ** 31) {
      // Virtual files up to 2 GiB get one too (hashing the 6.5 GB "too large" file would be slow).
      const h = createHash('sha256');
      for (let p = 0; p < this.size; p += 8 << 20) h.update(this.read(p, Math.min(this.size, p + (8 << 20))));
      this._sha = h.digest('hex');
    }
    return this._sha;
  }
  read(start, end) {
    const out = Buffer.alloc(end - start);
    if (this.path) {
      this.fd ??= openSync(this.path, 'r');
      let done = 0;
      while (done < out.length) {
        const n = readSync(this.fd, out, done, out.length - done, start + done);
        if (n === 0) break;
        done += n;
      }
    } else {
      if (start < this.header.length) this.header.copy(out, 0, start, Math.min(end, this.header.length));
      if (this.dataFrom) {
        const { path, offset, length } = this.dataFrom;
        const a = Math.max(start, this.header.length);
        const e = Math.min(end, this.header.length + length);
        if (e > a) {
          this.fd ??= openSync(path, 'r');
          readSync(this.fd, out, a - start, e - a, offset + (a - this.header.length));
        }
      }
    }
    return out;
  }
}

/**
 * Starts the server. Options:
 *   repos: more files {'owner/repo': {'file.gguf': {path} | {header, size} | 'path'}}, beside every A-*.gguf
 *          of the fixtures as test-org/clef-flash-GGUF/clef-flash-*.gguf (A-F32.gguf → clef-flash-F32.gguf)
 *   port:  default 0 (any free port)
 */
export async function startHubServer(options = {}) {
  const repos = new Map();
  const add = (repo, file, spec) => {
    if (!repos.has(repo)) repos.set(repo, new Map());
    repos.get(repo).set(file, new HubFile(typeof spec === 'string' ? { path: spec } : spec));
  };
  for (const f of existsSync(fixturesDir) ? readdirSync(fixturesDir) : []) {
    const m = /^A-(.+)\.gguf$/.exec(f);
    if (m && m[1] !== 'imatrix') add('test-org/clef-flash-GGUF', `clef-flash-${m[1]}.gguf`, join(fixturesDir, f));
  }
  for (const [repo, files] of Object.entries(options.repos ?? {})) for (const [f, s] of Object.entries(files)) add(repo, f, s);
  // The built site first (the chat page at /), then www/ itself (/dist/… is the package, and the page again at /dist/).
  const staticDirs = options.staticDirs ?? [['/test/', join(repoRoot, 'tests', 'browser')], ['/', join(repoRoot, 'www', 'dist')], ['/', join(repoRoot, 'www')]];
  const faults = {
    killAt: [], flipAt: [], offline: false, delayMs: 0, bytesPerSecond: 0,
    stallAt: [], stallHeaders: 0, statuses: [], ignoreRange: 0, lengthDelta: [], redirectLoop: false,
    staticDelayMs: {},
  };
  /** The next injected status for `where` ('cdn' | 'resolve'), consumed. */
  const takeStatus = (where) => {
    const i = faults.statuses.findIndex((x) => (x.where ?? 'cdn') === where);
    if (i < 0) return null;
    const x = faults.statuses[i];
    x.times = (x.times ?? 1) - 1;
    if (x.times <= 0) faults.statuses.splice(i, 1);
    return x;
  };
  /** Holds a response open and silent until the client goes away (or the server closes). */
  const hold = (res) => new Promise((r) => (res.destroyed ? r() : res.once('close', r)));
  const log = [];
  const sockets = new Set();

  const findFile = (owner, repo, file) => repos.get(`${owner}/${repo}`)?.get(decodeURIComponent(file));

  const hubHeaders = (f) => ({
    'ETag': `"${f.sha256 ?? 'nosha'}"`,
    'X-Linked-Size': String(f.size),
    ...(f.sha256 ? { 'X-Linked-Etag': `"${f.sha256}"` } : {}),
    'Access-Control-Allow-Origin': '*',
    'Access-Control-Expose-Headers': 'Content-Range, Content-Length, ETag, X-Linked-Etag, X-Linked-Size, Accept-Ranges, Retry-After',
  });

  async function serveModel(req, res, f, path, fileName) {
    let start = 0;
    let end = f.size; // exclusive
    let status = 200;
    const range = req.headers.range;
    if (range) {
      const m = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
      if (!m || (m[1] === '' && m[2] === '')) {
        res.writeHead(416, { 'Content-Range': `bytes */${f.size}` }).end();
        return;
      }
      if (m[1] === '') {
        start = Math.max(0, f.size - Number(m[2]));
      } else {
        start = Number(m[1]);
        end = m[2] === '' ? f.size : Math.min(f.size, Number(m[2]) + 1);
      }
      if (start >= f.size || start >= end) {
        res.writeHead(416, { 'Content-Range': `bytes */${f.size}` }).end();
        return;
      }
      status = 206;
      if (faults.ignoreRange > 0) {
        faults.ignoreRange--;
        start = 0;
        end = f.size;
        status = 200;
      }
    }
    const delta = faults.lengthDelta.length ? faults.lengthDelta.shift() : 0;
    const headers = {
      ...hubHeaders(f),
      'Content-Type': 'application/octet-stream',
      'Content-Length': String(end - start + delta),
      'Accept-Ranges': 'bytes',
      'Cache-Control': 'public, max-age=3600',
      ...(status === 206 ? { 'Content-Range': `bytes ${start}-${end - 1}/${f.size}` } : {}),
    };
    const entry = { path, file: fileName, start, end, status, sent: 0, complete: false, killed: false, stalled: false, t: Date.now() };
    log.push(entry);
    res.writeHead(status, headers);
    if (req.method === 'HEAD') {
      entry.complete = true;
      res.end();
      return;
    }
    let killAt = null;
    for (const x of faults.killAt) if (x >= start && x < end && (killAt === null || x < killAt)) killAt = x;
    if (killAt !== null) faults.killAt = faults.killAt.filter((x) => x !== killAt);
    let stallAt = null;
    for (const x of faults.stallAt) if (x >= start && x < end && (stallAt === null || x < stallAt)) stallAt = x;
    if (stallAt !== null) faults.stallAt = faults.stallAt.filter((x) => x !== stallAt);
    const stop = Math.min(killAt ?? end, stallAt ?? end, end + Math.min(0, delta));
    // Send in 256 KiB pieces (a real server streams; the client sees several body chunks).
    const PIECE = 256 * 1024;
    for (let pos = start; pos < stop; pos += PIECE) {
      const b = f.read(pos, Math.min(stop, pos + PIECE));
      for (const x of faults.flipAt) {
        if (x >= pos && x < pos + b.length) {
          b[x - pos] ^= 0xff;
          faults.flipAt = faults.flipAt.filter((y) => y !== x);
        }
      }
      if (faults.bytesPerSecond > 0) await new Promise((r) => setTimeout(r, (b.length / faults.bytesPerSecond) * 1000));
      if (res.destroyed) return;
      const ok = res.write(b);
      entry.sent += b.length;
      if (!ok) await new Promise((r) => res.once('drain', r));
      if (res.destroyed) return;
    }
    if (stallAt !== null && stop === stallAt) {
      entry.stalled = true;
      await hold(res);
      return;
    }
    if (killAt !== null || delta > 0) {
      entry.killed = true;
      // Let the bytes reach the socket, then drop the connection mid-body.
      await new Promise((r) => setTimeout(r, 20));
      res.socket?.destroy();
      return;
    }
    entry.complete = true;
    res.end();
  }

  /** Answers with an injected status (faults.statuses) if one is due for `where`. */
  function injected(res, path, file, where) {
    const x = takeStatus(where);
    if (!x) return false;
    log.push({ path, file, start: 0, end: 0, status: x.status, sent: 0, complete: true, killed: false, stalled: false, t: Date.now() });
    const headers = { 'Content-Type': 'text/plain', 'Access-Control-Allow-Origin': '*', 'Access-Control-Expose-Headers': 'Retry-After' };
    if (x.retryAfter !== undefined) headers['Retry-After'] = String(x.retryAfter);
    res.writeHead(x.status, headers).end(`injected HTTP ${x.status}`);
    return true;
  }

  function serveStatic(req, res, urlPath) {
    for (const [prefix, dir] of staticDirs) {
      if (!urlPath.startsWith(prefix)) continue;
      let rel = decodeURIComponent(urlPath.slice(prefix.length));
      if (rel === '' || rel.endsWith('/')) rel += 'index.html';
      const p = normalize(join(dir, rel));
      if (!p.startsWith(dir + sep) && p !== dir) continue;
      if (!existsSync(p) || !statSync(p).isFile()) continue;
      const body = readFileSync(p);
      // No Cross-Origin-Opener-Policy / Cross-Origin-Embedder-Policy (a plain static host) unless
      // `isolated` (a cross-origin isolated site: SharedArrayBuffer). CORS like a public CDN (the
      // package can be imported from another origin).
      res.writeHead(200, {
        'Content-Type': MIME[extname(p)] ?? 'application/octet-stream', 'Content-Length': body.length, 'Cache-Control': 'no-cache',
        'Access-Control-Allow-Origin': '*',
        ...(options.isolated ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' } : {}),
      });
      res.end(req.method === 'HEAD' ? undefined : body);
      return true;
    }
    return false;
  }

  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    const p = url.pathname;
    try {
      let m;
      const isModel = /^\/(cdn|api)\//.test(p) || /^\/[^/]+\/[^/]+\/resolve\//.test(p);
      if (isModel && faults.offline) {
        req.socket.destroy();
        return;
      }
      if (isModel && faults.delayMs) await new Promise((r) => setTimeout(r, faults.delayMs));
      if ((m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(p))) {
        const [, owner, repo, rev, file] = m;
        const f = findFile(owner, repo, file);
        if (!f) {
          res.writeHead(404, { 'Content-Type': 'text/plain', 'X-Error-Code': 'EntryNotFound' }).end('Entry not found');
          return;
        }
        if (faults.redirectLoop) {
          log.push({ path: p, file, start: 0, end: 0, status: 302, sent: 0, complete: true, killed: false, stalled: false, t: Date.now() });
          res.writeHead(302, { Location: p, 'Access-Control-Allow-Origin': '*' }).end();
          return;
        }
        if (injected(res, p, file, 'resolve')) return;
        res.writeHead(302, { ...hubHeaders(f), Location: `/cdn/${owner}/${repo}/${rev}/${file}` }).end();
        return;
      }
      if ((m = /^\/cdn\/([^/]+)\/([^/]+)\/([^/]+)\/(.+)$/.exec(p))) {
        const [, owner, repo, , file] = m;
        const f = findFile(owner, repo, file);
        if (!f) {
          res.writeHead(404).end();
          return;
        }
        if (faults.stallHeaders > 0) {
          faults.stallHeaders--;
          log.push({ path: p, file, start: 0, end: 0, status: 0, sent: 0, complete: false, killed: false, stalled: true, t: Date.now() });
          await hold(res);
          return;
        }
        if (injected(res, p, decodeURIComponent(file), 'cdn')) return;
        await serveModel(req, res, f, p, decodeURIComponent(file));
        return;
      }
      if ((m = /^\/api\/models\/([^/]+)\/([^/]+)\/tree\/([^/]+)$/.exec(p))) {
        const files = repos.get(`${m[1]}/${m[2]}`);
        if (!files) {
          res.writeHead(404).end();
          return;
        }
        const list = [...files].map(([path, f]) => ({
          type: 'file', path, size: f.size, oid: createHash('sha1').update(path).digest('hex'),
          ...(f.sha256 ? { lfs: { oid: f.sha256, size: f.size, pointerSize: 134 } } : {}),
        }));
        res.writeHead(200, { 'Content-Type': 'application/json', 'Access-Control-Allow-Origin': '*' }).end(JSON.stringify(list));
        return;
      }
      if (req.method === 'POST' && p === '/test/report' && options.onReport) {
        let body = '';
        req.setEncoding('utf8');
        req.on('data', (d) => (body += d));
        req.on('end', () => {
          res.writeHead(204, { 'Access-Control-Allow-Origin': '*' }).end();
          options.onReport(body);
        });
        return;
      }
      const delay = faults.staticDelayMs[p.split('/').pop()];
      if (delay) await new Promise((r) => setTimeout(r, delay));
      if ((req.method === 'GET' || req.method === 'HEAD') && serveStatic(req, res, p)) return;
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found');
    } catch (e) {
      if (!res.headersSent) res.writeHead(500).end(String(e));
      else res.destroy();
    }
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((r) => server.listen(options.port ?? 0, '127.0.0.1', r));
  const port = server.address().port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    faults,
    log,
    files: repos,
    /** Bytes of model data served (all responses, complete or not). */
    bytesServed: () => log.reduce((n, e) => n + e.sent, 0),
    clearLog: () => {
      log.length = 0;
    },
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        for (const files of repos.values()) for (const f of files.values()) if (f.fd !== undefined) closeSync(f.fd);
        server.close(() => r());
      }),
  };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const s = await startHubServer({ port: Number(process.argv[2] ?? 8080) });
  console.log(`hub server on ${s.url}: test-org/clef-flash-GGUF:F32 → ${s.url}/test-org/clef-flash-GGUF/resolve/main/clef-flash-F32.gguf`);
  console.log(`chat page: ${s.url}/?hub=${s.url}&repo=test-org/clef-flash-GGUF`);
}
