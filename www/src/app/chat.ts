// The chat view shared by the chat page and <clef-chat>: message list with streamed Markdown,
// composer (Enter sends, Shift+Enter newline, Escape stops), stop, regenerate, edit last message,
// reasoning in a collapsible <details>, tool calls as collapsed "called name(args)" blocks and JSON
// answers as copyable code blocks (structured.ts), tokens/s and prompt time under each answer.
// It renders into any element (document or shadow root) and styles itself with chat.css.

import type { ClefEngine, ChatMessageInput, CompletionUsage } from '../index.js';
import type { ChatCompletionMessageToolCall } from '../types.js';
import { renderMarkdown, escapeHtml } from './markdown.js';
import { humane } from './errors.js';
import { icons } from './icons.js';
import { fmtMs } from './format.js';
import { callSignature, jsonAnswerHtml, mergeToolCallDeltas, parseToolsSetting, toolCallsHtml } from './structured.js';

export interface ChatSettings {
  temperature: number;
  top_p: number;
  /** 0 = until the model stops or the context is full. */
  max_tokens: number;
  system: string;
  thinking: boolean;
  /** Answers are JSON objects (`response_format: {type: 'json_object'}`; not with tools). */
  json?: boolean;
  /** Tools the model may call, as JSON text (structured.ts `parseToolsSetting`); '' = none. */
  tools?: string;
}

export interface ChatViewOptions {
  placeholder?: string;
  getEngine(): ClefEngine | null;
  getSettings(): ChatSettings;
  /** A message was sent (user) or finished (assistant). */
  onMessage?(m: { role: 'user' | 'assistant'; content: string; reasoning?: string; stopped?: boolean }): void;
  onError?(e: unknown): void;
  onBusy?(busy: boolean): void;
  /** Shows the thinking toggle in the composer; called when it is switched. */
  onThinking?(on: boolean): void;
  /** Content of the empty conversation (trusted HTML; a function is called on each render). */
  emptyHtml?: string | (() => string);
  /** Prompts offered in the empty conversation. */
  suggestions?: string[];
  /** Name shown above answers. */
  assistantName?: string;
}

interface Msg {
  role: 'user' | 'assistant';
  content: string;
  reasoning: string;
  el: HTMLElement;
  usage?: CompletionUsage;
  finish?: string | null;
  stopped?: boolean;
  error?: unknown;
  thinkStart?: number;
  thinkMs?: number;
  streaming?: boolean;
  /** The calls the answer made (then `finish` is 'tool_calls'). */
  toolCalls: ChatCompletionMessageToolCall[];
  /** The answer was asked for as JSON (shown as a code block). */
  json?: boolean;
  /** The tool-call blocks last rendered (re-rendered only when they change). */
  toolsHtml?: string;
}

let uid = 0;

export class ChatView {
  readonly root: HTMLElement;
  private log: HTMLElement;
  private empty: HTMLElement;
  private form: HTMLFormElement;
  private input: HTMLTextAreaElement;
  private sendBtn: HTMLButtonElement;
  private thinkBtn: HTMLButtonElement | null = null;
  private live: HTMLElement;
  private messages: Msg[] = [];
  private ctl: AbortController | null = null;
  private renderTimer: ReturnType<typeof setTimeout> | null = null;
  private dirty = new Set<Msg>();
  private ready = false;
  private stickToBottom = true;
  busy = false;

  constructor(host: HTMLElement, private opts: ChatViewOptions) {
    const id = `clef-input-${++uid}`;
    host.innerHTML = `
      <div class="clef-chat">
        <section class="clef-log" aria-label="Conversation">
          <div class="clef-empty"></div>
        </section>
        <form class="clef-composer" novalidate>
          <label class="sr-only" for="${id}">Message</label>
          <div class="clef-input-wrap">
            <textarea id="${id}" rows="1" autocomplete="off" enterkeyhint="send"></textarea>
            <div class="clef-composer-bar">
              <span class="clef-composer-left"></span>
              <span class="clef-hint" aria-hidden="true">Enter to send · Shift+Enter for a new line</span>
              <button type="submit" class="clef-send" aria-label="Send">${icons.send}</button>
            </div>
          </div>
        </form>
        <div class="sr-only" aria-live="polite" aria-atomic="true"></div>
      </div>`;
    this.root = host.querySelector('.clef-chat')!;
    this.log = this.root.querySelector('.clef-log')!;
    this.empty = this.root.querySelector('.clef-empty')!;
    this.form = this.root.querySelector('form')!;
    this.input = this.root.querySelector('textarea')!;
    this.sendBtn = this.root.querySelector('.clef-send')!;
    this.live = this.root.querySelector('[aria-live]')!;
    this.input.placeholder = opts.placeholder ?? 'Message';

    if (opts.onThinking) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'clef-pill clef-think-toggle';
      b.innerHTML = `${icons.brain}<span>Think</span>`;
      b.title = 'Let the model reason before it answers (slower, often better)';
      b.addEventListener('click', () => {
        const on = b.getAttribute('aria-pressed') !== 'true';
        b.setAttribute('aria-pressed', String(on));
        opts.onThinking!(on);
      });
      this.root.querySelector('.clef-composer-left')!.append(b);
      this.thinkBtn = b;
    }
    this.setThinking(opts.getSettings().thinking);
    this.renderEmpty();

    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (this.busy) this.stop();
      else this.submit();
    });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        if (!this.busy) this.submit();
      } else if (e.key === 'Escape' && this.busy) {
        e.preventDefault();
        this.stop();
      }
    });
    this.input.addEventListener('input', () => {
      this.autosize();
      this.updateSend();
    });
    this.log.addEventListener('scroll', () => {
      this.stickToBottom = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 40;
    });
    this.log.addEventListener('click', (e) => this.onLogClick(e));
    this.setReady(false);
  }

  setPlaceholder(text: string) {
    this.opts.placeholder = text;
    this.setReady(this.ready);
  }

  setThinking(on: boolean) {
    this.thinkBtn?.setAttribute('aria-pressed', String(on));
  }

  /** Enables the composer (a model is loaded) or disables it with a reason as placeholder. */
  setReady(ready: boolean, placeholder?: string) {
    this.ready = ready;
    this.input.disabled = !ready;
    this.input.placeholder = ready ? this.opts.placeholder ?? 'Message' : placeholder ?? 'Load a model to start chatting';
    this.updateSend();
    this.refreshActions();
  }

  focus() {
    this.input.focus();
  }

  get length(): number {
    return this.messages.length;
  }

  /** Sends a message (as if typed). */
  send(text: string) {
    if (this.busy || !this.ready || !text.trim()) return;
    this.addUser(text.trim());
    void this.generate();
  }

  stop() {
    this.ctl?.abort();
  }

  /** Starts a new conversation. */
  clear() {
    this.stop();
    for (const m of this.messages) m.el.remove();
    this.messages = [];
    this.renderEmpty();
    this.input.value = '';
    this.autosize();
    this.updateSend();
  }

  // ---- internals ----------------------------------------------------------------------------------

  private submit() {
    const text = this.input.value;
    if (!text.trim() || !this.ready) return;
    this.input.value = '';
    this.autosize();
    this.send(text);
  }

  private autosize() {
    this.input.style.height = 'auto';
    this.input.style.height = `${Math.min(this.input.scrollHeight, 220)}px`;
  }

  private updateSend() {
    const b = this.sendBtn;
    if (this.busy) {
      b.innerHTML = icons.stop;
      b.setAttribute('aria-label', 'Stop');
      b.title = 'Stop (Esc)';
      b.classList.add('is-stop');
      b.disabled = false;
    } else {
      b.innerHTML = icons.send;
      b.setAttribute('aria-label', 'Send');
      b.title = 'Send (Enter)';
      b.classList.remove('is-stop');
      b.disabled = !this.ready || !this.input.value.trim();
    }
  }

  /** Re-renders the empty conversation (its text may depend on the caller's state). */
  refreshEmpty() {
    this.renderEmpty();
  }

  private renderEmpty() {
    this.empty.hidden = this.messages.length > 0;
    if (this.messages.length) return;
    const sugg = (this.opts.suggestions ?? [])
      .map((s) => `<button type="button" class="clef-suggestion" data-suggest="${escapeHtml(s)}">${escapeHtml(s)}</button>`)
      .join('');
    const head = typeof this.opts.emptyHtml === 'function' ? this.opts.emptyHtml() : this.opts.emptyHtml ?? '';
    this.empty.innerHTML = head + (sugg ? `<div class="clef-suggestions">${sugg}</div>` : '');
  }

  private onLogClick(e: MouseEvent) {
    const t = (e.target as HTMLElement).closest('button');
    if (!t) return;
    if (t.dataset.suggest) {
      if (this.ready) this.send(t.dataset.suggest);
      else {
        this.input.value = t.dataset.suggest;
        this.updateSend();
      }
      return;
    }
    if (t.classList.contains('copy-code')) {
      const code = t.closest('.code-block')?.querySelector('code')?.textContent ?? '';
      void this.copy(code, t);
      return;
    }
    const art = t.closest('article');
    const m = this.messages.find((x) => x.el === art);
    if (!m) return;
    const act = t.dataset.act;
    if (act === 'copy') void this.copy(m.content, t);
    else if (act === 'regenerate') this.regenerate();
    else if (act === 'edit') this.editLast();
  }

  private async copy(text: string, button: HTMLElement) {
    try {
      await navigator.clipboard.writeText(text);
      const label = button.getAttribute('aria-label');
      button.classList.add('done');
      button.setAttribute('aria-label', 'Copied');
      setTimeout(() => {
        button.classList.remove('done');
        if (label) button.setAttribute('aria-label', label);
      }, 1200);
    } catch {
      /* clipboard unavailable */
    }
  }

  private addUser(text: string): Msg {
    const el = document.createElement('article');
    el.className = 'clef-msg clef-user';
    el.setAttribute('aria-label', 'You');
    const m: Msg = { role: 'user', content: text, reasoning: '', el, toolCalls: [] };
    this.renderUser(m);
    this.messages.push(m);
    this.log.append(el);
    this.renderEmpty();
    this.stickToBottom = true;
    this.scrollDown();
    this.opts.onMessage?.({ role: 'user', content: text });
    return m;
  }

  private renderUser(m: Msg) {
    m.el.innerHTML =
      `<div class="clef-bubble">${escapeHtml(m.content)}</div>` +
      `<div class="clef-actions"><button type="button" class="clef-icon-btn" data-act="edit" aria-label="Edit message" title="Edit">${icons.edit}</button></div>`;
  }

  private addAssistant(): Msg {
    const el = document.createElement('article');
    el.className = 'clef-msg clef-assistant';
    el.setAttribute('aria-label', this.opts.assistantName ?? 'Clef');
    el.innerHTML =
      `<details class="clef-think" hidden><summary><span class="clef-think-label">Thinking…</span></summary><div class="clef-think-body md"></div></details>` +
      `<div class="clef-body md"><span class="clef-typing" aria-label="Writing"><i></i><i></i><i></i></span></div>` +
      `<div class="clef-tools md" hidden></div>` +
      `<div class="clef-error" hidden></div>` +
      `<div class="clef-meta"></div>` +
      `<div class="clef-actions">` +
      `<button type="button" class="clef-icon-btn" data-act="copy" aria-label="Copy answer" title="Copy">${icons.copy}</button>` +
      `<button type="button" class="clef-icon-btn" data-act="regenerate" aria-label="Regenerate answer" title="Regenerate">${icons.regenerate}</button>` +
      `</div>`;
    const m: Msg = { role: 'assistant', content: '', reasoning: '', el, streaming: true, toolCalls: [] };
    this.messages.push(m);
    this.log.append(el);
    this.scrollDown();
    return m;
  }

  private history(): ChatMessageInput[] {
    const out: ChatMessageInput[] = [];
    const sys = this.opts.getSettings().system.trim();
    if (sys) out.push({ role: 'system', content: sys });
    for (const m of this.messages) {
      if (m.role === 'assistant' && m.toolCalls.length) out.push({ role: 'assistant', content: m.content || null, tool_calls: m.toolCalls });
      else if (m.role === 'assistant' && !m.content.trim()) continue;
      else out.push({ role: m.role, content: m.content });
    }
    // A user turn left without an answer (an error) is merged into the next one.
    const merged: ChatMessageInput[] = [];
    for (const m of out) {
      const prev = merged[merged.length - 1];
      if (prev && prev.role === 'user' && m.role === 'user') prev.content = `${prev.content as string}\n\n${m.content as string}`;
      else merged.push({ ...m });
    }
    return merged;
  }

  private setBusy(b: boolean) {
    this.busy = b;
    this.root.classList.toggle('is-busy', b);
    this.updateSend();
    this.refreshActions();
    this.opts.onBusy?.(b);
  }

  /** Shows the actions that apply now: edit on the last user message, regenerate on the last answer. */
  private refreshActions() {
    const lastUser = [...this.messages].reverse().find((m) => m.role === 'user');
    const last = this.messages[this.messages.length - 1];
    for (const m of this.messages) {
      const edit = m.el.querySelector<HTMLButtonElement>('[data-act="edit"]');
      if (edit) edit.hidden = this.busy || m !== lastUser || !this.ready;
      const regen = m.el.querySelector<HTMLButtonElement>('[data-act="regenerate"]');
      if (regen) regen.hidden = this.busy || m !== last || !this.ready;
      const copy = m.el.querySelector<HTMLButtonElement>('[data-act="copy"]');
      if (copy) copy.hidden = !!m.streaming || !m.content;
    }
  }

  private async generate() {
    const engine = this.opts.getEngine();
    const history = this.history();
    const m = this.addAssistant();
    if (!engine) {
      m.error = { code: 'not_loaded', message: 'no model is loaded' };
      this.finish(m);
      return;
    }
    const s = this.opts.getSettings();
    const tools = parseToolsSetting(s.tools ?? '');
    if ('error' in tools) {
      m.error = { code: 'bad_request', message: `Settings → Tools: ${tools.error}` };
      this.finish(m);
      return;
    }
    // A JSON answer or tool calls: the engine enforces one of them per answer.
    m.json = !!s.json && !tools.tools.length;
    const ctl = new AbortController();
    this.ctl = ctl;
    this.setBusy(true);
    this.live.textContent = `${this.opts.assistantName ?? 'Clef'} is writing…`;
    try {
      const stream = await engine.chat.completions.create({
        messages: history,
        stream: true,
        temperature: s.temperature,
        top_p: s.top_p,
        ...(s.max_tokens > 0 ? { max_tokens: s.max_tokens } : {}),
        enable_thinking: s.thinking,
        ...(tools.tools.length ? { tools: tools.tools } : {}),
        ...(m.json ? { response_format: { type: 'json_object' as const } } : {}),
        signal: ctl.signal,
      });
      for await (const c of stream) {
        const ch = c.choices[0];
        const d = ch?.delta;
        if (d?.reasoning_content) {
          if (m.thinkStart === undefined) m.thinkStart = performance.now();
          m.reasoning += d.reasoning_content;
        }
        if (d?.content) {
          if (m.thinkStart !== undefined && m.thinkMs === undefined) m.thinkMs = performance.now() - m.thinkStart;
          m.content += d.content;
        }
        if (d?.tool_calls) mergeToolCallDeltas(m.toolCalls, d.tool_calls);
        if (ch?.finish_reason) m.finish = ch.finish_reason;
        if (c.usage) m.usage = c.usage;
        this.schedule(m);
      }
    } catch (e) {
      if ((e as { code?: string })?.code === 'aborted' || ctl.signal.aborted) m.stopped = true;
      else {
        m.error = e;
        this.opts.onError?.(e);
      }
    } finally {
      if (this.ctl === ctl) this.ctl = null;
      if (m.thinkStart !== undefined && m.thinkMs === undefined) m.thinkMs = performance.now() - m.thinkStart;
      this.finish(m);
      this.setBusy(false);
    }
  }

  private finish(m: Msg) {
    m.streaming = false;
    this.dirty.delete(m);
    this.renderAssistant(m);
    const body = m.content.trim();
    const calls = m.toolCalls.map((c) => `called ${callSignature(c)}`).join(', ');
    const said = [body.slice(0, 500), calls].filter(Boolean).join(' · ');
    this.live.textContent = m.error ? humane(m.error).title : said ? `${this.opts.assistantName ?? 'Clef'}: ${said}` : m.stopped ? 'Stopped.' : '';
    this.refreshActions();
    this.scrollDown();
    if (!m.error) this.opts.onMessage?.({ role: 'assistant', content: m.content, reasoning: m.reasoning || undefined, stopped: m.stopped });
  }

  private schedule(m: Msg) {
    this.dirty.add(m);
    if (this.renderTimer) return;
    this.renderTimer = setTimeout(() => {
      this.renderTimer = null;
      for (const x of this.dirty) this.renderAssistant(x);
      this.dirty.clear();
      this.scrollDown();
    }, 40);
  }

  private renderAssistant(m: Msg) {
    const el = m.el;
    const think = el.querySelector<HTMLDetailsElement>('.clef-think')!;
    if (m.reasoning) {
      think.hidden = false;
      const label = think.querySelector('.clef-think-label')!;
      const thinking = m.streaming && m.thinkMs === undefined;
      label.textContent = thinking ? 'Thinking…' : `Thought for ${fmtMs(m.thinkMs ?? 0)}`;
      think.classList.toggle('is-thinking', !!thinking);
      think.querySelector('.clef-think-body')!.innerHTML = renderMarkdown(m.reasoning.trim());
    }
    const body = el.querySelector<HTMLElement>('.clef-body')!;
    if (m.content) body.innerHTML = m.json ? jsonAnswerHtml(m.content, !!m.streaming) : renderMarkdown(m.content);
    else if (!m.streaming) body.innerHTML = '';
    else if (m.reasoning || m.toolCalls.length) body.innerHTML = '';
    body.classList.toggle('is-streaming', !!m.streaming);
    body.hidden = !m.content && !m.streaming;
    this.renderToolCalls(m);

    const err = el.querySelector<HTMLElement>('.clef-error')!;
    if (m.error) {
      const h = humane(m.error);
      err.hidden = false;
      err.setAttribute('role', 'alert');
      err.innerHTML =
        `<strong>${escapeHtml(h.title)}</strong>${h.hint ? ` <span>${escapeHtml(h.hint)}</span>` : ''}` +
        `<details><summary>Details</summary><code>${escapeHtml(h.code)}</code>: ${escapeHtml(h.detail)}</details>`;
    }
    const meta = el.querySelector<HTMLElement>('.clef-meta')!;
    const parts: string[] = [];
    if (m.stopped) parts.push('<span class="clef-tag">Stopped</span>');
    if (m.finish === 'length') parts.push('<span class="clef-tag" title="The answer reached the maximum length (Settings)">Length limit</span>');
    if (m.usage) {
      const u = m.usage;
      const fresh = u.prompt_tokens - (u.prompt_tokens_details?.cached_tokens ?? 0);
      parts.push(`<span title="Generation speed">${u.completion_tokens_per_second.toFixed(1)} tok/s</span>`);
      parts.push(`<span title="Tokens generated">${u.completion_tokens} tokens</span>`);
      parts.push(
        `<span title="Time to read the prompt (${fresh} new tokens${u.prompt_tokens_details?.cached_tokens ? `, ${u.prompt_tokens_details.cached_tokens} reused` : ''})">prompt ${fmtMs(u.prompt_ms)}</span>`,
      );
    }
    meta.innerHTML = parts.join('<span class="dot" aria-hidden="true">·</span>');
    meta.hidden = !parts.length;
  }

  /** The answer's calls, collapsed; a block the reader opened stays open while more calls stream in. */
  private renderToolCalls(m: Msg) {
    const box = m.el.querySelector<HTMLElement>('.clef-tools')!;
    const html = toolCallsHtml(m.toolCalls);
    box.hidden = !m.toolCalls.length;
    if (html === m.toolsHtml) return;
    const open = [...box.querySelectorAll<HTMLDetailsElement>('details')].map((d) => d.open);
    box.innerHTML = html;
    box.querySelectorAll<HTMLDetailsElement>('details').forEach((d, i) => (d.open = open[i] ?? false));
    m.toolsHtml = html;
  }

  private scrollDown() {
    if (this.stickToBottom) this.log.scrollTop = this.log.scrollHeight;
  }

  private regenerate() {
    if (this.busy) return;
    const last = this.messages[this.messages.length - 1];
    if (!last || last.role !== 'assistant') return;
    last.el.remove();
    this.messages.pop();
    void this.generate();
  }

  private editLast() {
    if (this.busy) return;
    let i = this.messages.length - 1;
    while (i >= 0 && this.messages[i].role !== 'user') i--;
    if (i < 0) return;
    const m = this.messages[i];
    const bubble = m.el.querySelector('.clef-bubble')!;
    m.el.classList.add('is-editing');
    const eid = `clef-edit-${++uid}`;
    bubble.innerHTML = `<label class="sr-only" for="${eid}">Edit message</label><textarea id="${eid}" class="clef-edit" rows="3"></textarea>
      <div class="clef-edit-bar"><button type="button" class="clef-btn ghost" data-edit="cancel">Cancel</button><button type="button" class="clef-btn primary" data-edit="save">Send</button></div>`;
    m.el.querySelector<HTMLElement>('.clef-actions')!.hidden = true;
    const ta = bubble.querySelector('textarea')!;
    ta.value = m.content;
    ta.style.height = `${Math.min(ta.scrollHeight + 4, 260)}px`;
    ta.focus();
    ta.setSelectionRange(ta.value.length, ta.value.length);
    const done = (save: boolean) => {
      m.el.classList.remove('is-editing');
      const text = ta.value.trim();
      if (save && text) {
        m.content = text;
        for (const x of this.messages.splice(i + 1)) x.el.remove();
      }
      this.renderUser(m);
      this.refreshActions();
      if (save && text) {
        this.opts.onMessage?.({ role: 'user', content: text });
        void this.generate();
      }
    };
    bubble.querySelector('[data-edit="cancel"]')!.addEventListener('click', () => done(false));
    bubble.querySelector('[data-edit="save"]')!.addEventListener('click', () => done(true));
    ta.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        done(true);
      } else if (e.key === 'Escape') {
        e.preventDefault();
        done(false);
      }
    });
  }
}
