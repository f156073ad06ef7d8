// The service worker of the chat page (built to dist/sw.js): keeps the app shell, the bundles and
// the wasm in a versioned cache so the page works offline after one visit (the model itself lives
// in OPFS, see cache.ts). A new build has a new version: it installs beside the old one, waits
// until the page asks for it ("A new version is ready — Reload"), then deletes the old cache.
// Model downloads (the Hub, other origins, anything not in the list) are never touched.
//
// What it serves carries COOP + COEP (`isolated`), so a page it serves is cross-origin isolated
// wherever it is hosted: SharedArrayBuffer exists and a split model's stages go through shared
// memory (exchange.ts) instead of postMessage — ~35 against ~200 µs per stage, the 2-worker decode
// of a 9B ~10 % faster (BENCHMARKS.md, session 46). The first visit's page came from the server
// without them: main.ts reloads it once when this worker takes control, if nothing has been
// touched yet (`reloadToIsolate`); otherwise that visit runs with postMessage. COEP `require-corp`
// asks every cross-origin resource to opt in: the page loads none but the model's bytes, and
// those are CORS requests, which the Hub answers (Access-Control-Allow-Origin: *). Workers need
// the headers too (a worker of an isolated page whose script lacks them is refused): their
// scripts are in the list.

import { detectSimd, wasmFile } from '../simd.js';

declare const __VERSION__: string;
declare const __ASSETS__: string[];

interface ExtendableEvent extends Event {
  waitUntil(p: Promise<unknown>): void;
}
interface FetchEvent extends ExtendableEvent {
  request: Request;
  respondWith(r: Response | Promise<Response>): void;
}
interface SW {
  addEventListener(type: 'install' | 'activate', fn: (e: ExtendableEvent) => void): void;
  addEventListener(type: 'fetch', fn: (e: FetchEvent) => void): void;
  addEventListener(type: 'message', fn: (e: MessageEvent) => void): void;
  skipWaiting(): Promise<void>;
  clients: { claim(): Promise<void> };
  registration: { scope: string };
}

const sw = self as unknown as SW;
const PREFIX = 'clef-app-';
const CACHE = PREFIX + __VERSION__;
const scope = new URL(sw.registration.scope);
// Of the two wasm builds only the one this browser runs (the worker makes the same choice) is
// precached; the other is still served from the network or the HTTP cache if ever asked for.
const skip = wasmFile(detectSimd() === 'relaxed-simd' ? 'simd128' : 'relaxed-simd');
const urls = new Set(__ASSETS__.filter((a) => a !== skip).map((a) => new URL(a, scope).href));
const INDEX = new URL('index.html', scope).href;

sw.addEventListener('install', (e) => {
  e.waitUntil(
    (async () => {
      const c = await caches.open(CACHE);
      // cache: 'reload' skips the HTTP cache, so the files match this version.
      await c.addAll([...urls].map((u) => new Request(u, { cache: 'reload' })));
    })(),
  );
});

sw.addEventListener('activate', (e) => {
  e.waitUntil(
    (async () => {
      for (const k of await caches.keys()) if (k.startsWith(PREFIX) && k !== CACHE) await caches.delete(k);
      await sw.clients.claim();
    })(),
  );
});

sw.addEventListener('message', (e) => {
  if (e.data === 'skip-waiting') void sw.skipWaiting();
});

sw.addEventListener('fetch', (e) => {
  const req = e.request;
  if (req.method !== 'GET') return;
  const url = new URL(req.url);
  if (url.origin !== scope.origin) return;
  url.search = '';
  url.hash = '';
  let key: string | null = null;
  if (req.mode === 'navigate' && (url.href === scope.href || url.href === INDEX)) key = INDEX;
  else if (urls.has(url.href)) key = url.href;
  if (!key) return;
  const k = key;
  // The chat page and every script and wasm it loads; not embed-example.html, which shows
  // <clef-chat> on a plain static page.
  const headers = (r: Response) => (req.mode === 'navigate' && k !== INDEX ? r : isolated(r));
  e.respondWith(
    (async () => {
      const c = await caches.open(CACHE);
      const hit = await c.match(k);
      if (hit) return headers(hit);
      // Not cached yet (first visit while installing): the network, stored for next time.
      const r = await fetch(req);
      if (r.ok && r.type === 'basic') await c.put(k, r.clone()).catch(() => {});
      return headers(r);
    })(),
  );
});

/** `r` with the two headers that make the page (and its workers) cross-origin isolated. */
function isolated(r: Response): Response {
  if (r.type !== 'basic' && r.type !== 'default') return r; // (an error or opaque response: as it is)
  const headers = new Headers(r.headers);
  headers.set('Cross-Origin-Opener-Policy', 'same-origin');
  headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
  return new Response(r.body, { status: r.status, statusText: r.statusText, headers });
}
