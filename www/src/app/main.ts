// The chat page: model picker ("will it fit here"), download with progress / pause / resume, the
// models kept on this device, a local .gguf by drag and drop, the conversation (chat.ts),
// settings, themes, and the service worker that makes it all work offline.
//
// Page address options: ?hub=URL (a Hub mirror or the local emulator), ?repo=owner/name,
// ?model=owner/repo:QUANT (preselects it; loads it if it is on this device), ?chunk=KiB (Range
// request size, for tests).

import { ClefEngine, resolveModel, type CacheStatus, type CachedModel, type LoadProgress } from '../index.js';
import { ChatView } from './chat.js';
import { DecideView, mountViewTabs } from './decide.js';
import { icons } from './icons.js';
import {
  DEFAULT_REPO, QUANTS, checkFit, deviceInfo, estimateMemory, fetchRepoSizes, fileOf, parseRepoQuant, refOfCachedUrl,
  type DeviceInfo, type QuantInfo,
} from './models.js';
import { fmtBytes, fmtDuration, fmtMs, fmtPercent, fmtRate } from './format.js';
import { humane } from './errors.js';
import { DEFAULTS, getItem, loadSettings, saveSettings, setItem, type PageSettings } from './settings.js';
import { escapeHtml } from './markdown.js';
import { parseToolsSetting } from './structured.js';

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const params = new URLSearchParams(location.search);
let settings: PageSettings = loadSettings();

const modelParam = parseRepoQuant(params.get('model') ?? '');
const hubUrl = () => (params.get('hub') || settings.hubUrl || 'https://huggingface.co').replace(/\/+$/, '');
const repo = () => params.get('repo') || modelParam?.repo || settings.repo || DEFAULT_REPO;
const chunkSize = Number(params.get('chunk')) > 0 ? Number(params.get('chunk')) * 1024 : undefined;
const isNarrow = () => matchMedia('(max-width: 900px)').matches;

interface Target {
  model: string | File;
  label: string;
  hubUrl?: string;
  revision?: string;
  /** File size when known before loading. */
  size?: number;
}

type State =
  | { kind: 'idle' }
  | { kind: 'loading'; target: Target; progress: LoadProgress | null; pausing?: boolean }
  | { kind: 'paused'; target: Target; loaded: number; total: number }
  | { kind: 'ready'; target: Target; engine: ClefEngine }
  | { kind: 'error'; target: Target; error: unknown };

let state: State = { kind: 'idle' };
let engine: ClefEngine | null = null;
let loadCtl: AbortController | null = null;
let device: DeviceInfo = { ram: null, storageFree: null };
let cached: CachedModel[] = [];
let hubSizes: Map<string, number> | null = null;
let selected = modelParam?.quant ?? getItem<string>('clef.quant') ?? 'IQ2_M';

// ---- small helpers ------------------------------------------------------------------------------

for (const el of document.querySelectorAll<HTMLElement>('[data-icon]')) el.innerHTML = icons[el.dataset.icon as keyof typeof icons] ?? '';
$('brand-logo').innerHTML = icons.logo;

function toast(text: string, action?: { label: string; run: () => void }, ms = 4000) {
  const t = document.createElement('div');
  t.className = 'toast';
  t.textContent = text;
  if (action) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = action.label;
    b.addEventListener('click', () => {
      t.remove();
      action.run();
    });
    t.append(b);
  }
  $('toasts').append(t);
  setTimeout(() => t.remove(), action ? ms * 3 : ms);
}

const keyOf = (model: string, hub = hubUrl()): string | null => {
  try {
    return resolveModel(model, { hubUrl: hub }).cacheKey;
  } catch {
    return null;
  }
};
const cachedOf = (model: string, hub = hubUrl()) => {
  const k = keyOf(model, hub);
  return cached.find((c) => c.key === k) ?? null;
};
const sameTarget = (a: Target | undefined, model: string) => !!a && typeof a.model === 'string' && keyOf(a.model, a.hubUrl) === keyOf(model);
const targetOf = (s: State): Target | undefined => ('target' in s ? s.target : undefined);

function quantList(): QuantInfo[] {
  const r = repo();
  if (!hubSizes) return QUANTS;
  const list = QUANTS.filter((q) => hubSizes!.has(fileOf(r, q.quant))).map((q) => ({ ...q, bytes: hubSizes!.get(fileOf(r, q.quant))! }));
  return list.length ? list : QUANTS;
}

// ---- the conversation ---------------------------------------------------------------------------

const chat = new ChatView($('chat'), {
  placeholder: 'Message Clef…',
  getEngine: () => engine,
  getSettings: () => settings,
  onThinking: (on) => {
    settings.thinking = on;
    saveSettings(settings);
  },
  emptyHtml: () => {
    const st = state;
    const ready = st.kind === 'ready';
    const loading = st.kind === 'loading';
    const text = st.kind === 'ready'
      ? `${escapeHtml(st.target.label)} runs on this device. Ask anything — nothing leaves your browser.`
      : loading
        ? 'The model is loading. You can type your first message in a moment.'
        : 'Pick a model to start. It downloads once, then works offline.';
    return `<div class="hello">${icons.logo}<h2>${ready ? 'How can I help?' : 'Welcome to Clef'}</h2><p>${text}</p></div>`;
  },
  suggestions: ['Explain WebAssembly in two sentences', 'Write a haiku about rain', 'Give me 3 ideas for a weekend project'],
  onError: (e) => {
    if ((e as { fatal?: boolean })?.fatal && state.kind === 'ready') {
      const t = state.target;
      engine = null;
      state = { kind: 'error', target: t, error: e };
      chat.setReady(false, 'The engine stopped — load the model again');
      renderAll();
    }
  },
});

// ---- decisions (decide.ts): the "Decide" view beside the chat ----------------------------------

const decide = new DecideView($('decide'), { getEngine: () => engine, hubUrl });
mountViewTabs($('view-tabs'), { chat: $('chat'), decide: $('decide') });

// ---- loading ------------------------------------------------------------------------------------

async function startLoad(t: Target) {
  if (state.kind === 'loading') return;
  chat.stop();
  if (engine) {
    const e = engine;
    engine = null;
    await e.unload();
  }
  const ctl = new AbortController();
  loadCtl = ctl;
  state = { kind: 'loading', target: t, progress: null };
  chat.setReady(false, `Loading ${t.label}…`);
  if (typeof t.model === 'string') setItem('clef.pending', { model: t.model, hubUrl: t.hubUrl, revision: t.revision, label: t.label });
  renderAll();
  try {
    const e = await ClefEngine.load(t.model, {
      hubUrl: t.hubUrl,
      revision: t.revision,
      signal: ctl.signal,
      chunkSize,
      onProgress: (p) => {
        if (loadCtl === ctl && state.kind === 'loading') {
          state.progress = p;
          scheduleProgress();
        }
      },
      onWarning: (m) => console.warn(`clef: ${m}`),
    });
    if (loadCtl !== ctl) {
      void e.unload();
      return;
    }
    engine = e;
    state = { kind: 'ready', target: t, engine: e };
    if (typeof t.model === 'string') setItem('clef.last', { model: t.model, hubUrl: t.hubUrl, revision: t.revision, label: t.label });
    chat.setReady(true);
    if (isNarrow()) setPanel(false);
    chat.focus();
  } catch (err) {
    if (loadCtl !== ctl) return;
    const s = state;
    if ((err as { code?: string })?.code === 'aborted') {
      state = s.kind === 'loading' && s.pausing ? { kind: 'paused', target: t, loaded: s.progress?.loaded ?? 0, total: s.progress?.total ?? t.size ?? 0 } : { kind: 'idle' };
    } else {
      state = { kind: 'error', target: t, error: err };
    }
    chat.setReady(false);
  } finally {
    if (loadCtl === ctl) loadCtl = null;
    renderAll();
    void refreshCache();
  }
}

function pause() {
  if (state.kind !== 'loading' || !loadCtl) return;
  state.pausing = true;
  loadCtl.abort();
}

function cancelLoad() {
  if (state.kind !== 'loading' || !loadCtl) return;
  state.pausing = false;
  loadCtl.abort();
}

async function unloadModel() {
  chat.stop();
  const e = engine;
  engine = null;
  state = { kind: 'idle' };
  setItem('clef.last', null);
  chat.setReady(false);
  renderAll();
  await e?.unload();
}

const hubTarget = (quant: string, size?: number): Target => ({ model: `${repo()}:${quant}`, label: quant, hubUrl: hubUrl(), size });

// ---- rendering ----------------------------------------------------------------------------------

let progressTimer: ReturnType<typeof setTimeout> | null = null;
function scheduleProgress() {
  if (progressTimer) return;
  progressTimer = setTimeout(() => {
    progressTimer = null;
    renderStatus();
    renderChip();
  }, 120);
}

function renderAll() {
  renderChip();
  renderStatus();
  renderPicker();
  renderCached();
  chat.refreshEmpty();
  decide.refresh();
}

function renderChip() {
  const dot = $('status-dot');
  const text = $('chip-text');
  dot.className = 'status-dot';
  const s = state;
  if (s.kind === 'ready') {
    dot.classList.add('ready');
    text.textContent = `${s.target.label} · ready`;
  } else if (s.kind === 'loading') {
    dot.classList.add('busy');
    const p = s.progress;
    text.textContent = p && p.total && p.phase !== 'header' ? `${s.target.label} · ${fmtPercent(p.loaded / p.total)}` : `${s.target.label} · loading`;
  } else if (s.kind === 'paused') {
    dot.classList.add('paused');
    text.textContent = `${s.target.label} · paused`;
  } else if (s.kind === 'error') {
    dot.classList.add('error');
    text.textContent = `${s.target.label} · failed`;
  } else text.textContent = 'Choose a model';
}

/** Why a loaded model is not saved on this device (ModelInfo.cache), where it is not. */
const NOT_SAVED: Partial<Record<CacheStatus, string>> = {
  unavailable: 'No — this browser gives no storage here (a private window?): it downloads again next time',
  quota: 'Partly — the storage is full: free space, then load it again to finish saving it',
  failed: 'No — the storage refused it (see the console)',
};

function progressLine(p: LoadProgress | null): { title: string; stats: string[]; frac: number | null } {
  if (p?.phase === 'waiting') {
    // Another tab is downloading this model into the cache; this one loads from it afterwards.
    const got = p.total ? `${fmtBytes(p.loaded)} of ${fmtBytes(p.total)}` : 'starting';
    return { title: 'Loading in another tab', stats: [got, 'this tab continues from the saved copy'], frac: p.total ? p.loaded / p.total : null };
  }
  if (!p || p.phase === 'header') return { title: 'Connecting…', stats: [p?.retry ? `retrying in ${p.retry.inSeconds} s` : 'Reading the model header'], frac: null };
  const frac = p.total ? p.loaded / p.total : null;
  const stats = [`${fmtBytes(p.loaded)} of ${fmtBytes(p.total)}`];
  if (p.retry) {
    // A request failed and waits for its next attempt (the loader retries with backoff / Retry-After).
    stats.push(`retrying in ${p.retry.inSeconds} s`);
    return { title: 'Connection problem', stats, frac };
  }
  if (p.phase === 'download') {
    stats.push(fmtRate(p.bytesPerSecond));
    const eta = fmtDuration(p.etaSeconds);
    if (eta) stats.push(`${eta} left`);
    return { title: p.fromCache > 0 ? 'Resuming download' : 'Downloading', stats, frac };
  }
  if (p.phase === 'cache') {
    stats.push(fmtRate(p.bytesPerSecond));
    return { title: 'Loading from this device', stats, frac };
  }
  if (p.phase === 'verify') return { title: 'Verifying', stats: ['Checking the file’s checksum'], frac };
  return { title: 'Starting the engine', stats, frac: 1 };
}

function renderStatus() {
  const sec = $('status-section');
  const card = $('status-card');
  const s = state;
  sec.hidden = s.kind === 'idle';
  if (s.kind === 'idle') return;
  const name = escapeHtml(s.target.label);
  if (s.kind === 'loading') {
    const { title, stats, frac } = progressLine(s.progress);
    const cacheOnly = s.progress?.phase === 'cache';
    card.innerHTML = `
      <div class="progress-title"><span>${title} <code>${name}</code></span><span class="pct">${frac !== null ? fmtPercent(frac) : ''}</span></div>
      <div class="bar${frac === null ? ' indeterminate' : ''}" role="progressbar" aria-label="Loading ${name}" aria-valuemin="0" aria-valuemax="100" ${frac !== null ? `aria-valuenow="${Math.floor(frac * 100)}"` : ''}><i style="width:${((frac ?? 0) * 100).toFixed(1)}%"></i></div>
      <div class="progress-stats" id="progress-stats">${stats.map((x) => `<span>${escapeHtml(x)}</span>`).join('')}</div>
      <div class="row">${
        cacheOnly || typeof s.target.model !== 'string'
          ? `<button type="button" class="clef-btn" data-action="cancel">Cancel</button>`
          : `<button type="button" class="clef-btn" data-action="pause">${icons.pause}Pause</button><button type="button" class="clef-btn ghost" data-action="cancel">Cancel</button>`
      }</div>`;
    return;
  }
  if (s.kind === 'paused') {
    const c = typeof s.target.model === 'string' ? cachedOf(s.target.model, s.target.hubUrl) : null;
    const saved = c ? c.cachedBytes : s.loaded;
    const total = c?.size || s.total;
    card.innerHTML = `
      <div class="progress-title"><span>Paused <code>${name}</code></span><span class="pct">${total ? fmtPercent(saved / total) : ''}</span></div>
      <div class="bar" role="progressbar" aria-label="Saved part of ${name}" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${total ? Math.floor((saved / total) * 100) : 0}"><i style="width:${total ? ((saved / total) * 100).toFixed(1) : 0}%"></i></div>
      <div class="progress-stats"><span>${fmtBytes(saved)} of ${fmtBytes(total)} saved on this device</span></div>
      <div class="row"><button type="button" class="clef-btn primary" data-action="resume">${icons.play}Resume</button></div>`;
    return;
  }
  if (s.kind === 'error') {
    const h = humane(s.error);
    card.innerHTML = `
      <div class="error-box" role="alert"><strong>${escapeHtml(h.title)}</strong>${escapeHtml(h.hint)}
      <details><summary>Details</summary><code>${escapeHtml(h.code)}</code>: ${escapeHtml(h.detail)}</details></div>
      <div class="row">${typeof s.target.model === 'string' || s.target.model instanceof Blob ? `<button type="button" class="clef-btn primary" data-action="resume">Try again</button>` : ''}
      <button type="button" class="clef-btn ghost" data-action="dismiss">Dismiss</button></div>`;
    return;
  }
  const info = s.engine.info;
  const from = info.source === 'cache' ? 'from this device' : info.source === 'file' ? 'from the file' : info.source === 'network' ? 'downloaded' : 'download resumed,';
  card.innerHTML = `
    <div class="progress-title"><span><span class="status-dot ready" style="display:inline-block;margin-right:8px;vertical-align:1px"></span><code>${name}</code> is ready</span></div>
    <dl class="facts">
      <dt>Context</dt><dd>${info.contextLength.toLocaleString('en')} tokens</dd>
      <dt>Memory</dt><dd>${fmtBytes(info.stats.wasmMemoryBytes)}</dd>
      <dt>Kernels</dt><dd>${info.stats.simd === 'relaxed-simd' ? 'relaxed SIMD' : 'SIMD128'}</dd>
      <dt>Loaded</dt><dd>${from} in ${fmtMs(info.stats.seconds * 1000)}</dd>
      ${NOT_SAVED[info.cache] ? `<dt>Saved</dt><dd>${NOT_SAVED[info.cache]}</dd>` : ''}
    </dl>
    <div class="row"><button type="button" class="clef-btn" data-action="unload">Unload</button></div>`;
}

$('status-card').addEventListener('click', (e) => {
  const b = (e.target as HTMLElement).closest<HTMLButtonElement>('[data-action]');
  if (!b) return;
  const a = b.dataset.action;
  if (a === 'pause') pause();
  else if (a === 'cancel') cancelLoad();
  else if (a === 'resume' && (state.kind === 'paused' || state.kind === 'error')) void startLoad(state.target);
  else if (a === 'dismiss') {
    state = { kind: 'idle' };
    renderAll();
  } else if (a === 'unload') void unloadModel();
});

function renderPicker() {
  const list = $('quant-list');
  const quants = quantList();
  if (!quants.some((q) => q.quant === selected)) selected = quants[0].quant;
  const busy = state.kind === 'loading';
  const hadFocus = list.contains(document.activeElement) && (document.activeElement as HTMLElement).tagName === 'INPUT';
  list.innerHTML = quants
    .map((q) => {
      const c = cachedOf(`${repo()}:${q.quant}`);
      const fit = checkFit(q.bytes, device, c?.cachedBytes ?? 0);
      const badge = q.recommended ? '<span class="badge">Recommended</span>' : '';
      const saved = c?.complete ? '<span class="badge saved">Saved</span>' : c ? '<span class="badge saved">Partly saved</span>' : '';
      const on = q.quant === selected;
      return `<div class="quant-item${on ? ' is-selected' : ''}"><label class="quant" data-quant="${q.quant}">
        <input type="radio" name="quant" value="${q.quant}" ${on ? 'checked' : ''} ${busy ? 'disabled' : ''}>
        <span class="q-name">${q.quant}${badge}${saved}</span>
        <span class="q-size">${fmtBytes(q.bytes)}<span class="fit-dot ${fit.level}" title="${escapeHtml(fit.label)}: ${escapeHtml(fit.detail)}"></span><span class="sr-only">, ${fit.label}</span></span>
        <span class="q-note">${escapeHtml(q.note)}</span>
      </label>${on ? detailHtml(q) : ''}</div>`;
    })
    .join('');
  if (hadFocus) list.querySelector<HTMLInputElement>('input:checked')?.focus();
}

$('quant-list').addEventListener('change', (e) => {
  const v = (e.target as HTMLInputElement).value;
  if (!v) return;
  selected = v;
  setItem('clef.quant', v);
  renderPicker();
});

function detailHtml(q: QuantInfo): string {
  const model = `${repo()}:${q.quant}`;
  const c = cachedOf(model);
  const fit = checkFit(q.bytes, device, c?.cachedBytes ?? 0);
  const mem = estimateMemory(q.bytes);
  const cur = targetOf(state);
  const isCur = sameTarget(cur, model);
  let button: string;
  if (isCur && state.kind === 'ready') button = `<button type="button" class="clef-btn" disabled>${icons.check}Loaded</button>`;
  else if (state.kind === 'loading') button = `<button type="button" class="clef-btn primary" disabled>${isCur ? 'Loading…' : 'Another model is loading'}</button>`;
  else if (c?.complete) button = `<button type="button" class="clef-btn primary" data-load="${q.quant}">Load from this device</button>`;
  else if (c) button = `<button type="button" class="clef-btn primary" data-load="${q.quant}">${icons.download}Resume download · ${fmtBytes(Math.max(0, q.bytes - c.cachedBytes))} left</button>`;
  else button = `<button type="button" class="clef-btn primary" data-load="${q.quant}">${icons.download}Download ${fmtBytes(q.bytes)}</button>`;
  return `<div class="detail" aria-live="polite">
    <dl class="facts">
      <dt>Download</dt><dd>${c?.complete ? `${fmtBytes(q.bytes)} · saved on this device` : fmtBytes(q.bytes)}</dd>
      <dt>Memory</dt><dd>~${fmtBytes(mem.bytes)}${mem.context ? ` with a ${mem.context.toLocaleString('en')}-token context` : ''}</dd>
      <dt>Workers</dt><dd>${mem.workers === 1 ? '1 (one core)' : `${mem.workers} (one core each, up to ${fmtBytes(mem.perWorker)} of memory each)`}</dd>
    </dl>
    <div class="fit ${fit.level}"><span class="fit-dot ${fit.level}"></span><span><strong>${fit.level === 'good' ? 'Fits here' : fit.level === 'tight' ? 'Tight on this device' : 'Probably won’t fit here'}</strong> — ${escapeHtml(fit.detail)}.</span></div>
    <div class="row">${button}</div>
  </div>`;
}

$('quant-list').addEventListener('click', (e) => {
  const b = (e.target as HTMLElement).closest<HTMLButtonElement>('[data-load]');
  if (!b) return;
  const q = quantList().find((x) => x.quant === b.dataset.load);
  if (q) void startLoad(hubTarget(q.quant, q.bytes));
});

function renderCached() {
  const ul = $('cached-list');
  if (!cached.length) {
    ul.innerHTML = `<li class="empty-note">No models saved yet. A downloaded model stays here for offline use.</li>`;
    return;
  }
  const cur = targetOf(state);
  ul.innerHTML = cached
    .map((c, i) => {
      const ref = refOfCachedUrl(c.url);
      const inUse = !!cur && typeof cur.model === 'string' && keyOf(cur.model, cur.hubUrl) === c.key && (state.kind === 'ready' || state.kind === 'loading');
      const info = c.complete
        ? `${fmtBytes(c.size)} · saved${inUse ? ' · in use' : ''}`
        : `${fmtBytes(c.cachedBytes)} of ${fmtBytes(c.size)} (${fmtPercent(c.size ? c.cachedBytes / c.size : 0)})${inUse ? ' · loading' : ' · paused'}`;
      const load = inUse ? '' : `<button type="button" class="clef-btn" data-c-load="${i}">${c.complete ? 'Load' : 'Resume'}</button>`;
      return `<li class="cached"><span class="c-name" title="${escapeHtml(c.url || c.name)}">${escapeHtml(ref.label)}</span>
        <span class="c-info">${info}</span>
        <span class="c-actions">${load}<button type="button" class="clef-btn ghost" data-c-delete="${i}" aria-label="Delete ${escapeHtml(ref.label)} from this device" ${inUse && state.kind === 'loading' ? 'disabled' : ''}>${icons.trash}</button></span></li>`;
    })
    .join('');
}

$('cached-list').addEventListener('click', async (e) => {
  const b = (e.target as HTMLElement).closest<HTMLButtonElement>('button');
  if (!b) return;
  if (b.dataset.cLoad !== undefined) {
    const c = cached[Number(b.dataset.cLoad)];
    const ref = refOfCachedUrl(c.url);
    void startLoad({ model: ref.model, label: ref.label, hubUrl: ref.hubUrl, revision: ref.revision, size: c.size });
  } else if (b.dataset.cDelete !== undefined) {
    const c = cached[Number(b.dataset.cDelete)];
    const label = refOfCachedUrl(c.url).label;
    if (!b.classList.contains('danger-confirm')) {
      b.classList.add('danger-confirm');
      b.textContent = 'Delete?';
      b.setAttribute('aria-label', `Confirm: delete ${label} from this device`);
      setTimeout(() => renderCached(), 4000);
      return;
    }
    const cur = targetOf(state);
    if (cur && typeof cur.model === 'string' && keyOf(cur.model, cur.hubUrl) === c.key && state.kind === 'ready') await unloadModel();
    if (cur && typeof cur.model === 'string' && keyOf(cur.model, cur.hubUrl) === c.key && state.kind === 'paused') state = { kind: 'idle' };
    try {
      await ClefEngine.cache.delete(c.key);
      toast(`Deleted ${label} (${fmtBytes(c.diskBytes || c.cachedBytes)} freed)`);
    } catch (err) {
      toast(humane(err).title + ' ' + (err as Error).message);
    }
    await refreshCache();
    renderAll();
  }
});

async function refreshCache() {
  try {
    const list = await ClefEngine.cache.list();
    // A load that failed before its first byte (a wrong name, a 404) leaves an empty directory
    // without a manifest: not worth showing; removed when no load is running.
    const junk = list.filter((c) => !c.url && c.diskBytes === 0);
    if (state.kind !== 'loading') for (const j of junk) await ClefEngine.cache.delete(j.key).catch(() => {});
    cached = list.filter((c) => !junk.includes(c));
  } catch {
    cached = [];
  }
  device = await deviceInfo();
  try {
    const est = await navigator.storage?.estimate?.();
    $('storage-note').textContent = est?.quota ? `This site uses ${fmtBytes(est.usage ?? 0)} of ${fmtBytes(est.quota)} available to it.` : '';
  } catch {
    /* unknown */
  }
  renderPicker();
  renderCached();
  if (state.kind === 'paused') renderStatus();
}

// ---- other sources: a local file, a name or URL -------------------------------------------------

function openFile(f: File) {
  if (!/\.gguf$/i.test(f.name)) {
    toast(`${f.name} is not a .gguf file`);
    return;
  }
  const fit = checkFit(f.size, { ...device, storageFree: null });
  if (fit.level === 'no') toast(`${f.name} may not fit: ${fit.detail}`);
  void startLoad({ model: f, label: f.name, size: f.size });
}

$('pick-file').addEventListener('click', () => $<HTMLInputElement>('file-input').click());
$<HTMLInputElement>('file-input').addEventListener('change', (e) => {
  const f = (e.target as HTMLInputElement).files?.[0];
  if (f) openFile(f);
  (e.target as HTMLInputElement).value = '';
});

let dragDepth = 0;
const hasFiles = (e: DragEvent) => !!e.dataTransfer && [...e.dataTransfer.types].includes('Files');
window.addEventListener('dragenter', (e) => {
  if (!hasFiles(e)) return;
  e.preventDefault();
  dragDepth++;
  $('drop-overlay').hidden = false;
});
window.addEventListener('dragover', (e) => {
  if (hasFiles(e)) e.preventDefault();
});
window.addEventListener('dragleave', (e) => {
  if (!hasFiles(e)) return;
  if (--dragDepth <= 0) {
    dragDepth = 0;
    $('drop-overlay').hidden = true;
  }
});
window.addEventListener('drop', (e) => {
  if (!hasFiles(e)) return;
  e.preventDefault();
  dragDepth = 0;
  $('drop-overlay').hidden = true;
  const f = e.dataTransfer?.files?.[0];
  if (f) openFile(f);
});

$('other-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const v = $<HTMLInputElement>('other-model').value.trim();
  if (!v) return;
  try {
    resolveModel(v, { hubUrl: hubUrl(), baseUrl: location.href });
  } catch (err) {
    toast((err as Error).message);
    return;
  }
  const rq = parseRepoQuant(v);
  void startLoad({ model: v, label: rq ? rq.quant : v.split(/[/:]/).pop() || v, hubUrl: hubUrl() });
});

// ---- top bar: panel, new chat, theme, settings --------------------------------------------------

function setPanel(open: boolean) {
  document.body.classList.toggle('panel-open', open);
  $('model-chip').setAttribute('aria-expanded', String(open || !isNarrow()));
}
$('model-chip').addEventListener('click', () => {
  if (isNarrow()) setPanel(!document.body.classList.contains('panel-open'));
  else $('models-panel').focus();
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && isNarrow() && document.body.classList.contains('panel-open') && !($('settings') as HTMLDialogElement).open) setPanel(false);
});

$('new-chat').addEventListener('click', () => {
  chat.clear();
  if (isNarrow()) setPanel(false);
  chat.focus();
});

type Theme = 'auto' | 'light' | 'dark';
let theme: Theme = (getItem<string>('clef.theme-choice') as Theme) ?? 'auto';
function applyTheme() {
  const root = document.documentElement;
  if (theme === 'auto') delete root.dataset.theme;
  else root.dataset.theme = theme;
  try {
    if (theme === 'auto') localStorage.removeItem('clef.theme');
    else localStorage.setItem('clef.theme', theme);
  } catch {
    /* private mode */
  }
  setItem('clef.theme-choice', theme);
  const b = $('theme-toggle');
  const next: Theme = theme === 'auto' ? 'light' : theme === 'light' ? 'dark' : 'auto';
  b.querySelector('.ic')!.innerHTML = theme === 'auto' ? icons.auto : theme === 'light' ? icons.sun : icons.moon;
  const names = { auto: 'automatic (system)', light: 'light', dark: 'dark' };
  b.setAttribute('aria-label', `Theme: ${names[theme]}. Switch to ${names[next]}`);
  b.title = `Theme: ${names[theme]}`;
}
$('theme-toggle').addEventListener('click', () => {
  theme = theme === 'auto' ? 'light' : theme === 'light' ? 'dark' : 'auto';
  applyTheme();
});
applyTheme();

const dialog = $<HTMLDialogElement>('settings');
const field = <T extends HTMLInputElement | HTMLTextAreaElement>(id: string) => $<T>(id);
function fillSettings() {
  field('s-system').value = settings.system;
  field('s-temperature').value = String(settings.temperature);
  field('s-top-p').value = String(settings.top_p);
  field('s-max-tokens').value = String(settings.max_tokens);
  field('s-hub').value = settings.hubUrl;
  field('s-repo').value = settings.repo;
  field<HTMLInputElement>('s-json').checked = settings.json;
  field('s-tools').value = settings.tools;
  showOutputChecks();
  $('o-temperature').textContent = settings.temperature.toFixed(2);
  $('o-top-p').textContent = settings.top_p.toFixed(2);
}
/** The tools field checked as it is typed (a clear error under it); JSON output is off while tools are set. */
function showOutputChecks() {
  const r = parseToolsSetting(settings.tools);
  const err = $('s-tools-error');
  err.hidden = !('error' in r);
  err.textContent = 'error' in r ? `${r.error[0].toUpperCase()}${r.error.slice(1)}. Answers are refused until it is fixed.` : '';
  field('s-tools').setAttribute('aria-invalid', String('error' in r));
  const withTools = 'tools' in r && r.tools.length > 0;
  field<HTMLInputElement>('s-json').disabled = withTools;
  $('s-json-help').textContent = withTools
    ? 'Off while tools are set: an answer is either JSON or tool calls.'
    : 'Every answer is a JSON object, shown as a code block.';
}
$('open-settings').addEventListener('click', () => {
  fillSettings();
  dialog.showModal();
});
$('settings-form').addEventListener('input', () => {
  const num = (id: string, d: number) => {
    const v = Number(field(id).value);
    return Number.isFinite(v) ? v : d;
  };
  settings = {
    ...settings,
    system: field('s-system').value,
    temperature: num('s-temperature', DEFAULTS.temperature),
    top_p: num('s-top-p', DEFAULTS.top_p),
    max_tokens: Math.max(0, Math.round(num('s-max-tokens', DEFAULTS.max_tokens))),
    hubUrl: field('s-hub').value.trim(),
    repo: field('s-repo').value.trim(),
    json: field<HTMLInputElement>('s-json').checked,
    tools: field('s-tools').value,
  };
  showOutputChecks();
  $('o-temperature').textContent = settings.temperature.toFixed(2);
  $('o-top-p').textContent = settings.top_p.toFixed(2);
  saveSettings(settings);
});
$('settings-reset').addEventListener('click', () => {
  settings = { ...DEFAULTS, thinking: settings.thinking };
  saveSettings(settings);
  fillSettings();
});
let lastSource = `${hubUrl()} ${repo()}`;
dialog.addEventListener('close', () => {
  if (`${hubUrl()} ${repo()}` !== lastSource) {
    lastSource = `${hubUrl()} ${repo()}`;
    void refreshSizes();
  }
});

// ---- online / offline, the service worker -------------------------------------------------------

function renderOnline() {
  $('offline-badge').hidden = navigator.onLine;
}
window.addEventListener('online', renderOnline);
window.addEventListener('offline', renderOnline);
renderOnline();

// The first visit: the page came from the server, without the COOP + COEP the service worker adds
// (sw.ts), so it is not cross-origin isolated and a split model would exchange by postMessage. When
// the worker first takes control, the page reloads once to come through it — only while it is as it
// opened (no click or key yet, nothing loading), and only once per tab (sessionStorage), so a browser
// or a frame that does not isolate the page cannot loop.
let touched = false;
for (const type of ['pointerdown', 'keydown']) addEventListener(type, () => (touched = true), { capture: true, once: true });
const ISOLATION_RELOAD = 'clef.isolation-reload';

function reloadToIsolate() {
  if (globalThis.crossOriginIsolated !== false || touched || state.kind !== 'idle' || window.top !== window) return;
  try {
    if (sessionStorage.getItem(ISOLATION_RELOAD)) return;
    sessionStorage.setItem(ISOLATION_RELOAD, '1');
  } catch {
    return; // (no sessionStorage: nothing to guard against a loop with, so no reload)
  }
  location.reload();
}

function registerServiceWorker() {
  if (!('serviceWorker' in navigator) || !isSecureContext || params.has('nosw')) return;
  const hadController = !!navigator.serviceWorker.controller;
  let updating = false;
  navigator.serviceWorker.addEventListener('controllerchange', () => {
    if (hadController && updating) location.reload();
    else if (!hadController) reloadToIsolate();
  });
  const offer = (w: ServiceWorker) =>
    toast('A new version of Clef is ready.', {
      label: 'Reload',
      run: () => {
        updating = true;
        w.postMessage('skip-waiting');
      },
    });
  navigator.serviceWorker
    .register('./sw.js')
    .then((reg) => {
      if (reg.waiting && hadController) offer(reg.waiting);
      reg.addEventListener('updatefound', () => {
        const w = reg.installing;
        w?.addEventListener('statechange', () => {
          if (w.state === 'installed' && navigator.serviceWorker.controller) offer(w);
        });
      });
    })
    .catch((e) => console.warn('clef: service worker not registered:', e));
}

// ---- start --------------------------------------------------------------------------------------

async function refreshSizes() {
  hubSizes = await fetchRepoSizes(hubUrl(), repo());
  renderPicker();
}

async function start() {
  renderAll();
  registerServiceWorker();
  void refreshSizes();
  await refreshCache();
  // Load the last model (or the one named in ?model=) when it is on this device: no download.
  const last = getItem<{ model: string; hubUrl?: string; revision?: string; label: string }>('clef.last');
  const wanted = modelParam ? { model: `${modelParam.repo}:${modelParam.quant}`, hubUrl: hubUrl(), label: modelParam.quant } : last;
  const c = wanted ? cachedOf(wanted.model, wanted.hubUrl) : null;
  if (wanted && c?.complete) {
    void startLoad({ ...wanted, size: c.size });
  } else {
    const pending = getItem<{ model: string; hubUrl?: string; revision?: string; label: string }>('clef.pending');
    const p = pending ? cachedOf(pending.model, pending.hubUrl) : null;
    if (pending && p && !p.complete) state = { kind: 'paused', target: { ...pending, size: p.size }, loaded: p.cachedBytes, total: p.size };
    renderAll();
    if (isNarrow()) setPanel(true);
  }
}

void start();
