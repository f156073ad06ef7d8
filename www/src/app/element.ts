// <clef-chat>: a chat with a local model in any static page (built to dist/clef-chat.js).
//
//   <script type="module" src="https://…/dist/clef-chat.js"></script>
//   <clef-chat model="NANI-Nithin/clef-flash-GGUF:IQ1_S" system="You are a helpful assistant." lazy></clef-chat>
//
// Attributes: model (required), system, hub (Hub base URL; relative URLs are resolved against the
// page), revision, lazy (download only after the user clicks), placeholder, thinking (reasoning on),
// temperature, top-p, max-tokens, theme (light | dark | auto), label (the name in the header).
// Styling: --clef-accent, --clef-bg, --clef-fg, --clef-muted, --clef-surface, --clef-border,
// --clef-radius, --clef-font, --clef-font-size, --clef-height; ::part(header), ::part(frame).
// Events (bubbling, composed): clef-progress {LoadProgress}, clef-ready {model, info},
// clef-error {code, message}, clef-message {role, content}.
// Methods: load(), send(text), stop(), clear(); property `engine`.
// No COOP/COEP headers are needed; the engine runs in a Worker started from beside this file.

import { ClefEngine, resolveModel, type LoadProgress } from '../index.js';
import { ChatView, type ChatSettings } from './chat.js';
import { icons } from './icons.js';
import { escapeHtml } from './markdown.js';
import { humane } from './errors.js';
import { DEFAULT_REPO, QUANTS, parseRepoQuant } from './models.js';
import { fmtBytes, fmtDuration, fmtPercent, fmtRate } from './format.js';
import chatCss from './chat.css';

const HOST_CSS = `
:host {
  display: block;
  position: relative;
  height: var(--clef-height, 520px);
  --clef-accent: #4f5bd5;
  --clef-accent-fg: #fff;
  --clef-bg: #ffffff;
  --clef-fg: #1f2023;
  --clef-muted: #6c6e75;
  --clef-surface: #ffffff;
  --clef-surface-2: #f2f2ee;
  --clef-border: #e3e3de;
  --clef-code-bg: #f5f5f1;
  --clef-danger: #c8463d;
  --clef-danger-soft: #fbeceb;
  --clef-radius: 12px;
  --clef-font: ui-sans-serif, system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif;
  --clef-mono: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  --clef-pad-x: 16px;
  --clef-accent-soft: color-mix(in srgb, var(--clef-accent) 12%, var(--clef-bg));
}
:host([theme='dark']) {
  --clef-accent: #8b93f8; --clef-accent-fg: #14151a; --clef-bg: #17181b; --clef-fg: #e8e8ea; --clef-muted: #9a9ca5;
  --clef-surface: #1f2023; --clef-surface-2: #2a2b30; --clef-border: #32343a; --clef-code-bg: #1c1d20;
  --clef-danger: #f07a70; --clef-danger-soft: #3a2221;
}
@media (prefers-color-scheme: dark) {
  :host([theme='auto']) {
    --clef-accent: #8b93f8; --clef-accent-fg: #14151a; --clef-bg: #17181b; --clef-fg: #e8e8ea; --clef-muted: #9a9ca5;
    --clef-surface: #1f2023; --clef-surface-2: #2a2b30; --clef-border: #32343a; --clef-code-bg: #1c1d20;
    --clef-danger: #f07a70; --clef-danger-soft: #3a2221;
  }
}
:host([hidden]) { display: none; }
.frame {
  height: 100%;
  display: flex;
  flex-direction: column;
  box-sizing: border-box;
  border: 1px solid var(--clef-border);
  border-radius: var(--clef-radius);
  overflow: hidden;
  background: var(--clef-bg);
  color: var(--clef-fg);
  font-family: var(--clef-font);
}
.head {
  flex: none;
  display: flex;
  align-items: center;
  gap: 8px;
  padding: 10px 14px;
  border-bottom: 1px solid var(--clef-border);
  font-size: 13px;
}
.head .logo { width: 20px; height: 20px; }
.head .name { font-weight: 650; }
.head .status { margin-left: auto; color: var(--clef-muted); display: flex; align-items: center; gap: 6px; }
.status-dot { width: 7px; height: 7px; border-radius: 50%; background: var(--clef-muted); }
.status-dot:not(.ready, .busy, .error) { display: none; }
.status-dot.ready { background: #2f8a5b; }
.status-dot.busy { background: var(--clef-accent); animation: clef-pulse 1.2s infinite; }
.status-dot.error { background: var(--clef-danger); }
.host { flex: 1; min-height: 0; display: flex; flex-direction: column; }
.host > .clef-chat { flex: 1; }
.gate { display: flex; flex-direction: column; align-items: center; gap: 10px; max-width: 380px; margin: 0 auto; }
.gate .logo { width: 40px; height: 40px; }
.gate h2 { margin: 0; font-size: 1.15em; color: var(--clef-fg); font-weight: 650; }
.gate p { margin: 0; font-size: 0.9em; }
.gate .bar { width: 100%; height: 6px; border-radius: 99px; background: var(--clef-surface-2); overflow: hidden; }
.gate .bar i { display: block; height: 100%; background: var(--clef-accent); border-radius: inherit; transition: width 0.25s; }
.gate .stats { font-size: 0.8em; font-variant-numeric: tabular-nums; }
.gate .err strong { color: var(--clef-danger); display: block; }
`;

type Phase = 'idle' | 'loading' | 'ready' | 'error';

export class ClefChatElement extends HTMLElement {
  static observedAttributes = ['model', 'hub', 'revision', 'placeholder', 'label', 'thinking'];

  private shadow: ShadowRoot;
  private view: ChatView | null = null;
  private _engine: ClefEngine | null = null;
  private phase: Phase = 'idle';
  private progress: LoadProgress | null = null;
  private error: unknown = null;
  private ctl: AbortController | null = null;
  private savedHere = false;
  private renderTimer: ReturnType<typeof setTimeout> | null = null;
  private connected = false;

  constructor() {
    super();
    this.shadow = this.attachShadow({ mode: 'open' });
  }

  /** The loaded engine (null until `clef-ready`). */
  get engine(): ClefEngine | null {
    return this._engine;
  }

  connectedCallback() {
    if (this.connected) return;
    this.connected = true;
    if (!this.hasAttribute('theme')) this.setAttribute('theme', 'light');
    this.shadow.innerHTML = `<style>${chatCss}${HOST_CSS}</style>
      <div class="frame" part="frame">
        <div class="head" part="header">${icons.logo}<span class="name"></span><span class="status" aria-live="polite"><span class="status-dot"></span><span class="status-text"></span></span></div>
        <div class="host"></div>
      </div>`;
    this.view = new ChatView(this.shadow.querySelector('.host')!, {
      placeholder: this.getAttribute('placeholder') ?? 'Ask anything…',
      getEngine: () => this._engine,
      getSettings: () => this.settings(),
      emptyHtml: () => this.gateHtml(),
      onMessage: (m) => this.emit('clef-message', { role: m.role, content: m.content, ...(m.reasoning ? { reasoning: m.reasoning } : {}) }),
      onError: (e) => this.emit('clef-error', { code: (e as { code?: string }).code ?? 'internal', message: (e as Error).message }),
      assistantName: this.label(),
    });
    this.shadow.addEventListener('click', (e) => {
      const b = (e.target as HTMLElement).closest('[data-start]');
      if (b) void this.load();
    });
    this.renderHead();
    if (!this.hasAttribute('lazy')) void this.load();
    else void this.checkSaved();
  }

  disconnectedCallback() {
    this.connected = false;
    this.ctl?.abort();
    void this._engine?.unload();
    this._engine = null;
    this.phase = 'idle';
  }

  attributeChangedCallback(name: string, old: string | null, value: string | null) {
    if (!this.view || old === value) return;
    if (name === 'model' || name === 'hub' || name === 'revision') {
      const wasLoaded = this.phase !== 'idle';
      this.ctl?.abort();
      void this._engine?.unload();
      this._engine = null;
      this.phase = 'idle';
      this.view.clear();
      this.view.setReady(false);
      this.render();
      if (wasLoaded || !this.hasAttribute('lazy')) void this.load();
    } else if (name === 'label') this.renderHead();
    else if (name === 'placeholder') this.view.setPlaceholder(value ?? 'Ask anything…');
    else if (name === 'thinking') this.view.setThinking(this.hasAttribute('thinking'));
  }

  /** Downloads (or reads from this device) and starts the model. */
  async load(): Promise<void> {
    if (this.phase === 'loading' || this.phase === 'ready') return;
    const model = this.getAttribute('model');
    if (!model) {
      this.fail({ code: 'bad_request', message: 'the <clef-chat> element needs a model attribute' });
      return;
    }
    const ctl = new AbortController();
    this.ctl = ctl;
    this.phase = 'loading';
    this.progress = null;
    this.error = null;
    this.render();
    try {
      const w = this.getAttribute('workers');
      const e = await ClefEngine.load(model, {
        hubUrl: this.hubUrl(),
        revision: this.getAttribute('revision') ?? undefined,
        // `workers="4"`: split the model across 4 workers; absent or "auto": the runtime's choice.
        ...(w && w !== 'auto' ? { workers: Number(w) } : {}),
        signal: ctl.signal,
        onProgress: (p) => {
          if (this.ctl !== ctl) return;
          this.progress = p;
          this.emit('clef-progress', p);
          this.scheduleRender();
        },
      });
      if (this.ctl !== ctl) {
        void e.unload();
        return;
      }
      this._engine = e;
      this.phase = 'ready';
      this.view!.setReady(true, undefined);
      this.render();
      this.emit('clef-ready', { model, info: e.info });
    } catch (err) {
      if (this.ctl !== ctl) return;
      if ((err as { code?: string }).code === 'aborted') {
        this.phase = 'idle';
        this.render();
        return;
      }
      this.fail(err);
    } finally {
      if (this.ctl === ctl) this.ctl = null;
    }
  }

  /** Sends a message as if typed (after `clef-ready`). */
  send(text: string) {
    this.view?.send(text);
  }

  stop() {
    this.view?.stop();
  }

  clear() {
    this.view?.clear();
  }

  // ---- internals --------------------------------------------------------------------------------

  private settings(): ChatSettings {
    const num = (name: string, d: number) => {
      const v = Number(this.getAttribute(name));
      return this.hasAttribute(name) && Number.isFinite(v) ? v : d;
    };
    const thinking = this.hasAttribute('thinking') && this.getAttribute('thinking') !== 'false';
    return {
      temperature: num('temperature', thinking ? 0.6 : 0.7),
      top_p: num('top-p', thinking ? 0.95 : 0.8),
      max_tokens: num('max-tokens', 1024),
      system: this.getAttribute('system') ?? '',
      thinking,
    };
  }

  private hubUrl(): string | undefined {
    const h = this.getAttribute('hub');
    return h ? new URL(h, document.baseURI).href.replace(/\/+$/, '') : undefined;
  }

  private label(): string {
    const l = this.getAttribute('label');
    if (l) return l;
    const rq = parseRepoQuant(this.getAttribute('model') ?? '');
    return rq ? 'Clef' : 'Assistant';
  }

  private knownSize(): number | null {
    const rq = parseRepoQuant(this.getAttribute('model') ?? '');
    if (!rq || rq.repo !== DEFAULT_REPO) return null;
    return QUANTS.find((q) => q.quant === rq.quant)?.bytes ?? null;
  }

  private async checkSaved() {
    try {
      const model = this.getAttribute('model');
      if (!model) return;
      const key = resolveModel(model, { hubUrl: this.hubUrl(), baseUrl: location.href }).cacheKey;
      this.savedHere = (await ClefEngine.cache.list()).some((c) => c.key === key && c.complete);
      this.render();
    } catch {
      /* no OPFS */
    }
  }

  private fail(err: unknown) {
    this.phase = 'error';
    this.error = err;
    this.render();
    this.emit('clef-error', { code: (err as { code?: string }).code ?? 'internal', message: (err as Error).message ?? String(err) });
  }

  private emit(type: string, detail: unknown) {
    this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }

  private scheduleRender() {
    if (this.renderTimer) return;
    this.renderTimer = setTimeout(() => {
      this.renderTimer = null;
      this.render();
    }, 150);
  }

  private renderHead() {
    const model = this.getAttribute('model') ?? '';
    const rq = parseRepoQuant(model);
    this.shadow.querySelector('.name')!.textContent = this.getAttribute('label') ?? (rq ? `Clef-Flash · ${rq.quant}` : model.split('/').pop() ?? '');
  }

  private render() {
    if (!this.view) return;
    this.renderHead();
    const dot = this.shadow.querySelector('.status-dot')!;
    const st = this.shadow.querySelector('.status-text')!;
    dot.className = `status-dot ${this.phase === 'ready' ? 'ready' : this.phase === 'loading' ? 'busy' : this.phase === 'error' ? 'error' : ''}`;
    const p = this.progress;
    st.textContent =
      this.phase === 'ready' ? 'On this device' : this.phase === 'loading' ? (p && p.total && p.phase !== 'header' ? fmtPercent(p.loaded / p.total) : 'Loading…') : this.phase === 'error' ? 'Error' : '';
    if (this.phase !== 'ready') this.view.setReady(false, this.phase === 'loading' ? 'Loading the model…' : this.hasAttribute('lazy') && this.phase === 'idle' ? 'Start the chat to load the model' : undefined);
    this.view.refreshEmpty();
  }

  private gateHtml(): string {
    const name = escapeHtml(this.label());
    if (this.phase === 'ready') return `<div class="gate">${icons.logo}<h2>Ask ${name} anything</h2><p>It runs in your browser — nothing you type leaves this page.</p></div>`;
    if (this.phase === 'loading') {
      const p = this.progress;
      const frac = p && p.total && p.phase !== 'header' ? p.loaded / p.total : 0;
      const what = !p || p.phase === 'header' ? 'Connecting…' : p.phase === 'cache' ? 'Loading from this device…' : p.phase === 'download' ? 'Downloading the model…' : p.phase === 'waiting' ? 'Loading in another tab…' : 'Starting…';
      const stats = p && p.total && p.phase !== 'header'
        ? [`${fmtBytes(p.loaded)} of ${fmtBytes(p.total)}`, p.phase === 'download' ? fmtRate(p.bytesPerSecond) : '', p.phase === 'download' && fmtDuration(p.etaSeconds) ? `${fmtDuration(p.etaSeconds)} left` : '']
            .filter(Boolean).join(' · ')
        : '';
      const retry = p?.retry ? `Connection problem: retrying in ${p.retry.inSeconds} s` : '';
      return `<div class="gate">${icons.logo}<h2>${what}</h2><div class="bar" role="progressbar" aria-label="Loading the model" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${Math.floor(frac * 100)}"><i style="width:${(frac * 100).toFixed(1)}%"></i></div><div class="stats">${escapeHtml(retry || stats)}</div></div>`;
    }
    if (this.phase === 'error') {
      const h = humane(this.error);
      return `<div class="gate">${icons.logo}<div class="err" role="alert"><strong>${escapeHtml(h.title)}</strong>${escapeHtml(h.hint)}</div><button type="button" class="clef-btn primary" data-start>Try again</button></div>`;
    }
    const size = this.knownSize();
    const note = this.savedHere
      ? 'The model is saved on this device: it starts without a download.'
      : `The model${size ? ` (${fmtBytes(size)})` : ''} downloads once, then runs on your device — even offline.`;
    return `<div class="gate">${icons.logo}<h2>Chat with ${name}</h2><p>${note}</p><button type="button" class="clef-btn primary" data-start>${this.savedHere ? 'Start chat' : `${icons.download}Download and start`}</button></div>`;
  }
}

if (!customElements.get('clef-chat')) customElements.define('clef-chat', ClefChatElement);

declare global {
  interface HTMLElementTagNameMap {
    'clef-chat': ClefChatElement;
  }
}
