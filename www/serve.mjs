// `node www/cli.mjs serve --model F [--head joint_head.safetensors [--head-config C]] [--port P] [--host H] [--ctx N] [--workers N]`:
// OpenAI's API and Clef's SystemOne API over HTTP from a local GGUF, for apps and tools that speak
// them (as they use llama-server):
//   POST /v1/chat/completions, POST /v1/completions (Server-Sent Events with "stream": true),
//   POST /v1/systemone (decisions: a `clef` GGUF, or --head beside a head-less one),
//   GET /v1/models (OpenAI's and TypeSafe's shapes in one).
// The engine is the package's (www/dist/clef.js, in-process under Node); the routes are
// createSystemOneFetch's and createOpenAIFetch's (www/src/systemone-fetch.ts, openai-fetch.ts), so
// HTTP and the in-page fetch answer alike. A client that disconnects aborts its generation or
// decision. CORS is open (a local server for local pages).
import { createServer } from 'node:http';
import { basename, dirname, join } from 'node:path';
import { Readable } from 'node:stream';

const USAGE = 'usage: node www/cli.mjs serve --model F.gguf [--head joint_head.safetensors [--head-config joint_head_config.json]] [--port 8080] [--host 127.0.0.1] [--ctx N] [--workers N]';

function parseArgs(argv) {
  const o = { port: 8080, host: '127.0.0.1' };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    if (!['--model', '--head', '--head-config', '--port', '--host', '--ctx', '--workers'].includes(k) || v === undefined) throw new Error(`unknown or incomplete option '${k}'\n${USAGE}`);
    o[k.slice(2)] = v;
    i++;
  }
  if (!o.model) throw new Error(`--model is required\n${USAGE}`);
  o.port = Number(o.port);
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) throw new Error('--port must be 0…65535');
  if (o.ctx !== undefined) o.ctx = Number(o.ctx);
  if (o.workers !== undefined) o.workers = Number(o.workers);
  if (o['head-config'] && !o.head) throw new Error(`--head-config needs --head\n${USAGE}`);
  return o;
}

const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'GET, POST, OPTIONS',
  'access-control-allow-headers': '*',
};

/** Starts the server; resolves with {server, url, engine, close()}. */
export async function serve(argv, { log = (m) => process.stderr.write(`${m}\n`) } = {}) {
  const opts = parseArgs(argv);
  const { ClefEngine, createOpenAIFetch, createSystemOneFetch } = await import(new URL('./dist/clef.js', import.meta.url).href);
  // The head's config defaults to joint_head_config.json beside the head (as the clef command line's).
  const head = opts.head ? { safetensors: opts.head, config: opts['head-config'] ?? join(dirname(opts.head), 'joint_head_config.json') } : undefined;
  const engine = await ClefEngine.load(opts.model, { contextLength: opts.ctx, workers: opts.workers, head });
  const modelId = basename(opts.model).replace(/\.gguf$/i, '');
  const handle = createSystemOneFetch(engine, { modelId, fetch: createOpenAIFetch(engine, { modelId }) });
  const server = createServer(async (req, res) => {
    if (req.method === 'OPTIONS') {
      res.writeHead(204, CORS).end();
      return;
    }
    const ac = new AbortController();
    // The client went away before the answer was complete: stop generating.
    res.on('close', () => {
      if (!res.writableFinished) ac.abort();
    });
    try {
      const body = req.method === 'POST' ? Readable.toWeb(req) : undefined;
      const r = await handle(`http://${req.headers.host ?? 'localhost'}${req.url}`, { method: req.method, body, signal: ac.signal, duplex: 'half' });
      res.writeHead(r.status, { ...Object.fromEntries(r.headers), ...CORS });
      if (!r.body) return res.end();
      for await (const chunk of r.body) {
        if (!res.write(chunk)) await new Promise((ok) => res.once('drain', ok));
      }
      res.end();
    } catch (e) {
      if (ac.signal.aborted) return res.destroy();
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json', ...CORS });
      res.end(JSON.stringify({ error: { message: e?.message ?? String(e), type: 'server_error', param: null, code: 'internal' } }));
    }
  });
  await new Promise((ok, fail) => server.once('error', fail).listen(opts.port, opts.host, ok));
  const { port } = server.address();
  const url = `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}/v1`;
  const d = engine.decisions;
  const decisions = !d.available ? 'no decisions' : d.form === 'approximate' ? 'decisions: approximate (no head: label readout; --head adds it)' : `decisions: ${d.form} head`;
  log(`clef: serving ${engine.info.name} (context ${engine.info.contextLength}, ${decisions}) at ${url}`);
  return {
    server, url, engine,
    close: async () => {
      server.closeAllConnections?.();
      await new Promise((ok) => server.close(ok));
      await engine.unload();
    },
  };
}
