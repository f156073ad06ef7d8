// The service worker of the chat page (built to dist/sw.js): keeps the app shell, the bundles and
// the wasm in a versioned cache so the page works offline after one visit (the model itself lives
// in OPFS, see cache.ts). A new build has a new version: it installs beside the old one, waits
// until the page asks for it ("A new version is ready — Reload"), then deletes the old cache.
// Model downloads (the Hub, other origins, anything not in the list) are never touched.

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
  e.respondWith(
    (async () => {
      const c = await caches.open(CACHE);
      const hit = await c.match(k);
      if (hit) return hit;
      // Not cached yet (first visit while installing): the network, stored for next time.
      const r = await fetch(req);
      if (r.ok && r.type === 'basic') await c.put(k, r.clone()).catch(() => {});
      return r;
    })(),
  );
});
