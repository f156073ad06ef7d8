// A few WebDriver BiDi commands to headless Firefox (its own remote protocol; playwright-core's
// Firefox needs Playwright's build, and its BiDi channel stops at a command Firefox 153 lacks).
// Run with Node's WebSocket: `node --experimental-websocket firefox-bidi.mjs` — firefox.test.mjs
// starts it as a child process and reads one JSON line.
//
//   node --experimental-websocket tests/browser/firefox-bidi.mjs URL EXPR…
//
// Opens URL in a fresh profile, then for each EXPR (a JavaScript expression, awaited) polls until
// it is truthy (15 s at most) and prints [{expr, value, ms}, …] — values are JSON-serialized in
// the page, so a later navigation or reload in between is fine.

import { launchFirefox } from './helpers.mjs';

const [url, ...exprs] = process.argv.slice(2);

const firefox = launchFirefox(['--remote-debugging-port=0', 'about:blank'], { stdio: ['ignore', 'ignore', 'pipe'] });
const ff = firefox.process;

try {
  const endpoint = await new Promise((resolve, reject) => {
    let err = '';
    ff.stderr.on('data', (d) => {
      err += d;
      const m = /WebDriver BiDi listening on (ws:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    ff.on('exit', (c) => reject(new Error(`Firefox exited (${c}): ${err.slice(-2000)}`)));
    setTimeout(() => reject(new Error(`no BiDi endpoint from Firefox: ${err.slice(-2000)}`)), 30000);
  });
  const ws = new WebSocket(`${endpoint}/session`);
  await new Promise((resolve, reject) => ((ws.onopen = resolve), (ws.onerror = () => reject(new Error('BiDi connection failed')))));
  let next = 1;
  const waiting = new Map();
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    const w = waiting.get(m.id);
    if (!w) return;
    waiting.delete(m.id);
    if (m.type === 'error') w.reject(new Error(`${m.error}: ${m.message}`));
    else w.resolve(m.result);
  };
  const send = (method, params) =>
    new Promise((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject });
      ws.send(JSON.stringify({ id, method, params }));
    });

  await send('session.new', { capabilities: {} });
  const { contexts } = await send('browsingContext.getTree', {});
  const context = contexts[0].context;
  await send('browsingContext.navigate', { context, url, wait: 'complete' });
  const out = [];
  for (const expr of exprs) {
    const t0 = Date.now();
    let value;
    for (;;) {
      try {
        const r = await send('script.evaluate', { expression: `(async () => JSON.stringify(await (${expr})))()`, target: { context }, awaitPromise: true });
        value = r.type === 'success' && r.result.type === 'string' ? JSON.parse(r.result.value) : undefined;
      } catch {
        value = undefined; // (the page navigating: try again)
      }
      if (value || Date.now() - t0 > 15000) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    out.push({ expr, value, ms: Date.now() - t0 });
  }
  console.log(JSON.stringify(out));
  ws.close();
} finally {
  firefox.close();
}
