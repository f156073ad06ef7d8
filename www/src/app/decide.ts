// The chat page's "Decide" view: Clef's SystemOne decisions in the page. A state (text or JSON),
// a builder for typed questions — yes/no (noul), choice, score — and the answers: a probability
// bar per option, the choice / score / yes-probability, the confidence, and the time the request
// took. A model without a decision head answers by the approximate label readout: the view says
// so before the run, offers to fetch the head, and marks approximate answers with a badge.
//
// State: one `Draft` (kept in localStorage) → `requestText` (JSON text, so question ids keep the
// order they are listed in) → engine.decide → `renderResult`. The view owns its DOM under its
// host element; the page calls `refresh()` when the engine changes and `mountViewTabs` switches
// between the chat and this view.

import type { ClefEngine, DecideProgress, SystemOneAnswer, SystemOneResponse } from '../index.js';
import { escapeHtml } from './markdown.js';
import { humane } from './errors.js';
import { icons } from './icons.js';
import { fmtBytes, fmtMs, fmtPercent } from './format.js';
import { getItem, setItem } from './settings.js';

export type QuestionType = 'noul' | 'choice' | 'score';

export interface QuestionDraft {
  id: string;
  type: QuestionType;
  instructions: string;
  /** choice: key → description ('' = none). */
  options: { key: string; description: string }[];
  /** score: one description per level, 0 first ('' = none). */
  levels: string[];
  /** noul: what true / false mean ('' = the template's default). */
  yes: string;
  no: string;
}

export interface Draft {
  stateMode: 'text' | 'json';
  state: string;
  questions: QuestionDraft[];
}

const TYPE_NAMES: Record<QuestionType, string> = { noul: 'Yes / no', choice: 'Choice', score: 'Score' };
const STORE_KEY = 'clef.decide';
const MAX_CHOICE_OPTIONS = 255;
const SCORE_LEVELS = { min: 2, max: 10 };

const blankQuestion = (type: QuestionType, id: string): QuestionDraft => ({
  id, type, instructions: '',
  options: type === 'choice' ? [{ key: '', description: '' }, { key: '', description: '' }] : [],
  levels: type === 'score' ? ['', '', ''] : [],
  yes: '', no: '',
});

/** The example: llama-server's README request (the decision fixtures' first case). */
export function exampleDraft(): Draft {
  return {
    stateMode: 'text',
    state: 'Customer message: I was charged twice for my order last week and nobody has replied.',
    questions: [
      { ...blankQuestion('choice', 'route'), instructions: 'Which team should handle this?', options: ['billing', 'shipping', 'technical'].map((key) => ({ key, description: '' })) },
      { ...blankQuestion('noul', 'angry'), instructions: 'Is the customer angry?' },
      { ...blankQuestion('score', 'urgency'), instructions: 'How urgent is this?', levels: ['can wait', 'this week', 'today', 'right now'] },
    ],
  };
}

/** A problem with the draft, and where it is (`field`: an element's data-field). */
export class DraftError extends Error {
  constructor(message: string, readonly field: string) {
    super(message);
  }
}

/**
 * The request body of a draft as JSON text, question ids in the listed order (a JS object would
 * put integer-like ids first). Checks what the page can check itself; the engine validates the rest.
 */
export function requestText(d: Draft): string {
  let state: unknown = d.state;
  if (d.stateMode === 'json') {
    try {
      state = JSON.parse(d.state);
    } catch (e) {
      throw new DraftError(`The state is not valid JSON: ${(e as Error).message}`, 'state');
    }
  } else if (!d.state.trim()) throw new DraftError('Describe the state the questions are about.', 'state');
  if (!d.questions.length) throw new DraftError('Add at least one question.', 'add');
  const ids = new Set<string>();
  const parts = d.questions.map((q, i) => {
    const at = (f: string) => `q${i}.${f}`;
    const id = q.id.trim();
    if (!id) throw new DraftError(`Question ${i + 1} needs a name.`, at('id'));
    if (ids.has(id)) throw new DraftError(`Two questions are named “${id}”.`, at('id'));
    ids.add(id);
    if (!q.instructions.trim()) throw new DraftError(`“${id}” needs its question.`, at('instructions'));
    const none = (s: string) => (s.trim() ? s : null);
    let criteria: unknown;
    if (q.type === 'choice') {
      const keys = new Set<string>();
      const entries: [string, unknown][] = [];
      q.options.forEach((o, j) => {
        const key = o.key.trim();
        if (!key) throw new DraftError(`Option ${j + 1} of “${id}” needs a name.`, `${at('option')}.${j}`);
        if (keys.has(key)) throw new DraftError(`“${id}” lists “${key}” twice.`, `${at('option')}.${j}`);
        keys.add(key);
        entries.push([key, none(o.description)]);
      });
      if (!entries.length) throw new DraftError(`“${id}” needs at least one option.`, at('add-option'));
      criteria = Object.fromEntries(entries);
    } else if (q.type === 'score') {
      criteria = q.levels.map(none);
    } else {
      criteria = q.yes.trim() || q.no.trim() ? { ...(q.yes.trim() ? { true: q.yes } : {}), ...(q.no.trim() ? { false: q.no } : {}) } : undefined;
    }
    const body = { type: q.type, instructions: q.instructions, ...(criteria === undefined ? {} : { criteria }) };
    return `${JSON.stringify(id)}:${JSON.stringify(body)}`;
  });
  return `{"state":${JSON.stringify(state)},"questions":{${parts.join(',')}}}`;
}

function loadDraft(): Draft {
  const d = getItem<Draft>(STORE_KEY);
  return d && Array.isArray(d.questions) && typeof d.state === 'string' ? d : exampleDraft();
}

export interface DecideViewOptions {
  getEngine(): ClefEngine | null;
  /** The Hub the decision head is fetched from (the page's). */
  hubUrl(): string;
}

type Run =
  | { kind: 'idle' }
  | { kind: 'running'; ctl: AbortController; progress: DecideProgress | null }
  | { kind: 'done'; response: SystemOneResponse; request: Draft }
  | { kind: 'error'; error: unknown };

export class DecideView {
  readonly root: HTMLElement;
  private draft: Draft = loadDraft();
  private run: Run = { kind: 'idle' };
  private head: { ctl: AbortController; loaded: number; total: number } | null = null;
  private els: { status: HTMLElement; state: HTMLTextAreaElement; questions: HTMLElement; problem: HTMLElement; go: HTMLButtonElement; progress: HTMLElement; results: HTMLElement; json: HTMLElement; live: HTMLElement };

  constructor(host: HTMLElement, private opts: DecideViewOptions) {
    host.innerHTML = `
      <div class="decide">
        <div class="d-inner">
          <header class="d-head">
            <h1>Decide</h1>
            <p>Describe a situation and ask typed questions about it. Clef answers every question with a probability for each allowed option — all questions in one pass, on this device.</p>
            <div class="d-status" aria-live="polite"></div>
          </header>

          <section class="d-card" aria-labelledby="d-state-h">
            <div class="d-card-head">
              <h2 id="d-state-h">State</h2>
              <div class="d-seg" role="radiogroup" aria-label="State format">
                <button type="button" role="radio" data-mode="text">Text</button>
                <button type="button" role="radio" data-mode="json">JSON</button>
              </div>
            </div>
            <label class="sr-only" for="d-state">State</label>
            <textarea id="d-state" class="field d-state" rows="4" spellcheck="false" data-field="state"></textarea>
          </section>

          <section aria-labelledby="d-q-h" class="d-qs">
            <div class="d-section-head">
              <h2 id="d-q-h">Questions</h2>
              <div class="row">
                <button type="button" class="clef-btn ghost" data-act="example">Example</button>
                <button type="button" class="clef-btn ghost" data-act="clear">Clear</button>
              </div>
            </div>
            <ol class="d-questions"></ol>
            <div class="d-add" data-field="add">
              <span>Add a question:</span>
              <button type="button" class="clef-btn" data-add="noul" aria-label="Add a yes / no question">${icons.plus}Yes / no</button>
              <button type="button" class="clef-btn" data-add="choice" aria-label="Add a choice question">${icons.plus}Choice</button>
              <button type="button" class="clef-btn" data-add="score" aria-label="Add a score question">${icons.plus}Score</button>
            </div>
          </section>

          <div class="d-actions">
            <button type="button" class="clef-btn primary d-go" data-act="go">Decide</button>
            <span class="d-kbd" aria-hidden="true">Ctrl+Enter</span>
            <div class="d-progress" hidden></div>
          </div>
          <div class="d-problem error-box" role="alert" hidden></div>

          <section class="d-results" aria-label="Answers" hidden></section>

          <details class="d-json">
            <summary>Request JSON</summary>
            <div class="d-json-body"><pre><code></code></pre><button type="button" class="clef-btn ghost" data-act="copy">${icons.copy}Copy</button></div>
          </details>
        </div>
        <div class="sr-only" aria-live="polite" aria-atomic="true"></div>
      </div>`;
    this.root = host.querySelector('.decide')!;
    const q = <T extends HTMLElement>(s: string) => this.root.querySelector<T>(s)!;
    this.els = {
      status: q('.d-status'), state: q('.d-state'), questions: q('.d-questions'), problem: q('.d-problem'),
      go: q('.d-go'), progress: q('.d-progress'), results: q('.d-results'), json: q('.d-json code'), live: q(':scope > [aria-live]'),
    };
    this.els.state.value = this.draft.state;
    this.els.state.addEventListener('input', () => {
      this.draft.state = this.els.state.value;
      this.changed();
    });
    this.root.addEventListener('click', (e) => this.onClick(e));
    this.root.addEventListener('input', (e) => this.onInput(e));
    this.root.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        this.go();
      } else if (e.key === 'Escape' && this.run.kind === 'running') {
        e.preventDefault();
        this.run.ctl.abort();
      }
    });
    this.renderMode();
    this.renderQuestions();
    this.renderJson();
    this.refresh();
  }

  /** Re-renders what depends on the engine (call when a model loads, unloads or gets its head). */
  refresh() {
    const engine = this.opts.getEngine();
    const s = this.els.status;
    const running = this.run.kind === 'running';
    this.els.go.disabled = !engine || !engine.decisions.available;
    this.els.go.textContent = running ? 'Stop' : 'Decide';
    this.els.go.classList.toggle('is-stop', running);
    if (running) this.els.go.disabled = false;
    if (!engine) {
      s.innerHTML = `<span class="d-note">Load a model to decide. A Clef GGUF with its decision head gives the real answers.</span>`;
      return;
    }
    const d = engine.decisions;
    if (!d.available) {
      s.innerHTML = `<span class="d-note is-bad">${escapeHtml(humane(d).title)} ${escapeHtml(d.message ?? '')}</span>`;
      return;
    }
    if (d.form !== 'approximate') {
      s.innerHTML = `<span class="d-note is-good">${icons.check}Clef’s joint decision head (${d.form === 'gguf' ? 'inside the model file' : 'joint_head.safetensors'}) answers all questions together.</span>`;
      return;
    }
    const h = this.head;
    s.innerHTML = `<div class="d-approx-note"><span class="badge approx">Approximate</span>
      <span>This model has no decision head: each question is asked of the language model with labelled options, both option orders averaged. Answers are uncalibrated.</span>
      ${h
        ? `<span class="d-head-progress">Fetching the head · ${h.total ? fmtPercent(h.loaded / h.total) : '…'} ${h.total ? `of ${fmtBytes(h.total)}` : ''}</span><button type="button" class="clef-btn ghost" data-act="cancel-head">Cancel</button>`
        : `<button type="button" class="clef-btn" data-act="head">${icons.download}Get the decision head</button>`}</div>`;
  }

  // ---- editing ----------------------------------------------------------------------------------

  private changed() {
    setItem(STORE_KEY, this.draft);
    this.renderJson();
    if (!this.els.problem.hidden) this.showProblem(null);
  }

  private renderMode() {
    for (const b of this.root.querySelectorAll<HTMLButtonElement>('.d-seg [data-mode]')) b.setAttribute('aria-checked', String(b.dataset.mode === this.draft.stateMode));
    this.els.state.placeholder = this.draft.stateMode === 'json' ? '{"ticket": "…", "customer": {"tier": "gold"}}' : 'What the questions are about: a message, a document, a conversation…';
    this.els.state.classList.toggle('mono', this.draft.stateMode === 'json');
  }

  private renderQuestions() {
    const ol = this.els.questions;
    ol.innerHTML = this.draft.questions.map((q, i) => this.questionHtml(q, i)).join('');
    for (const ta of ol.querySelectorAll<HTMLTextAreaElement>('textarea')) this.autosize(ta);
  }

  private questionHtml(q: QuestionDraft, i: number): string {
    const f = (name: string) => `q${i}.${name}`;
    const input = (name: string, value: string, label: string, placeholder: string, cls = '') =>
      `<input type="text" class="${cls}" data-field="${f(name)}" aria-label="${escapeHtml(label)}" placeholder="${escapeHtml(placeholder)}" value="${escapeHtml(value)}" spellcheck="false" autocomplete="off">`;
    // Labels name the question by position: they stay right while its name is being typed.
    const name = `question ${i + 1}`;
    let body = '';
    if (q.type === 'choice') {
      body = `<div class="d-opts" role="group" aria-label="Options of ${escapeHtml(name)}">${q.options
        .map((o, j) => `<div class="d-opt">${input(`option.${j}`, o.key, `Option ${j + 1} of ${name}`, `option ${j + 1}`, 'd-key')}${input(`description.${j}`, o.description, `Description of option ${j + 1} of ${name}`, 'description (optional)')}<button type="button" class="clef-btn ghost icon" data-act="remove-option" data-j="${j}" aria-label="Remove option ${j + 1} of ${escapeHtml(name)}" ${q.options.length <= 1 ? 'disabled' : ''}>${icons.close}</button></div>`)
        .join('')}</div>
        <button type="button" class="clef-btn ghost d-more" data-act="add-option" data-field="${f('add-option')}" ${q.options.length >= MAX_CHOICE_OPTIONS ? 'disabled' : ''}>${icons.plus}Add option</button>`;
    } else if (q.type === 'score') {
      body = `<div class="d-opts" role="group" aria-label="Levels of ${escapeHtml(name)}">${q.levels
        .map((l, j) => `<div class="d-opt"><span class="d-level">${j}</span>${input(`level.${j}`, l, `Level ${j} of ${name}`, j === 0 ? 'lowest (optional)' : j === q.levels.length - 1 ? 'highest (optional)' : 'description (optional)')}<button type="button" class="clef-btn ghost icon" data-act="remove-level" data-j="${j}" aria-label="Remove level ${j} of ${escapeHtml(name)}" ${q.levels.length <= SCORE_LEVELS.min ? 'disabled' : ''}>${icons.close}</button></div>`)
        .join('')}</div>
        <button type="button" class="clef-btn ghost d-more" data-act="add-level" ${q.levels.length >= SCORE_LEVELS.max ? 'disabled' : ''}>${icons.plus}Add level</button>`;
    } else {
      body = `<div class="d-opts d-yesno">
        <div class="d-opt"><span class="d-level">yes</span>${input('yes', q.yes, `What yes means for ${name}`, 'The proposition is true or the answer is yes.')}</div>
        <div class="d-opt"><span class="d-level">no</span>${input('no', q.no, `What no means for ${name}`, 'The proposition is false or the answer is no.')}</div></div>`;
    }
    return `<li class="d-q" data-i="${i}">
      <div class="d-q-head">
        ${input('id', q.id, `Name of ${name}`, 'name', 'd-id')}
        <div class="d-seg small" role="radiogroup" aria-label="Type of ${escapeHtml(name)}">${(['noul', 'choice', 'score'] as const)
          .map((t) => `<button type="button" role="radio" data-type="${t}" aria-checked="${q.type === t}">${TYPE_NAMES[t]}</button>`)
          .join('')}</div>
        <span class="d-q-tools">
          <button type="button" class="clef-btn ghost icon" data-act="up" aria-label="Move ${escapeHtml(name)} up" ${i === 0 ? 'disabled' : ''}>↑</button>
          <button type="button" class="clef-btn ghost icon" data-act="remove" aria-label="Remove ${escapeHtml(name)}">${icons.trash}</button>
        </span>
      </div>
      <textarea class="field d-instr" rows="1" data-field="${f('instructions')}" aria-label="What ${escapeHtml(name)} asks" placeholder="The question, e.g. Which team should handle this?">${escapeHtml(q.instructions)}</textarea>
      ${body}
    </li>`;
  }

  private autosize(ta: HTMLTextAreaElement) {
    ta.style.height = 'auto';
    ta.style.height = `${Math.min(ta.scrollHeight + 2, 240)}px`;
  }

  private onInput(e: Event) {
    const el = e.target as HTMLInputElement | HTMLTextAreaElement;
    const field = el.dataset.field;
    const li = el.closest<HTMLElement>('.d-q');
    if (!field || !li || field === 'state') return;
    const q = this.draft.questions[Number(li.dataset.i)];
    const [, name, j] = field.split('.');
    if (name === 'id') q.id = el.value;
    else if (name === 'instructions') {
      q.instructions = el.value;
      this.autosize(el as HTMLTextAreaElement);
    } else if (name === 'option') q.options[Number(j)].key = el.value;
    else if (name === 'description') q.options[Number(j)].description = el.value;
    else if (name === 'level') q.levels[Number(j)] = el.value;
    else if (name === 'yes') q.yes = el.value;
    else if (name === 'no') q.no = el.value;
    this.changed();
  }

  private onClick(e: Event) {
    const t = e.target as HTMLElement;
    const b = t.closest<HTMLButtonElement>('button');
    if (!b || b.disabled) return;
    const li = b.closest<HTMLElement>('.d-q');
    const q = li ? this.draft.questions[Number(li.dataset.i)] : null;
    const i = li ? Number(li.dataset.i) : -1;
    let rerender = true;
    let focus: string | null = null;
    if (b.dataset.mode) {
      this.draft.stateMode = b.dataset.mode as Draft['stateMode'];
      this.renderMode();
      rerender = false;
    } else if (b.dataset.add) {
      const type = b.dataset.add as QuestionType;
      const taken = new Set(this.draft.questions.map((x) => x.id));
      let n = this.draft.questions.length + 1;
      while (taken.has(`q${n}`)) n++;
      this.draft.questions.push(blankQuestion(type, `q${n}`));
      focus = `q${this.draft.questions.length - 1}.instructions`;
    } else if (q && b.dataset.type) {
      const type = b.dataset.type as QuestionType;
      if (type === q.type) return;
      Object.assign(q, { ...blankQuestion(type, q.id), instructions: q.instructions, options: q.options.length ? q.options : blankQuestion(type, '').options, levels: q.levels.length ? q.levels : blankQuestion(type, '').levels });
    } else {
      switch (b.dataset.act) {
        case 'example':
          this.draft = exampleDraft();
          this.els.state.value = this.draft.state;
          this.renderMode();
          break;
        case 'clear':
          this.draft = { stateMode: this.draft.stateMode, state: '', questions: [] };
          this.els.state.value = '';
          focus = 'state';
          break;
        case 'remove':
          this.draft.questions.splice(i, 1);
          break;
        case 'up':
          [this.draft.questions[i - 1], this.draft.questions[i]] = [this.draft.questions[i], this.draft.questions[i - 1]];
          break;
        case 'add-option':
          q!.options.push({ key: '', description: '' });
          focus = `q${i}.option.${q!.options.length - 1}`;
          break;
        case 'remove-option':
          q!.options.splice(Number(b.dataset.j), 1);
          break;
        case 'add-level':
          q!.levels.push('');
          focus = `q${i}.level.${q!.levels.length - 1}`;
          break;
        case 'remove-level':
          q!.levels.splice(Number(b.dataset.j), 1);
          break;
        case 'go':
          this.go();
          return;
        case 'copy':
          void navigator.clipboard?.writeText(this.els.json.textContent ?? '').then(() => {
            b.innerHTML = `${icons.check}Copied`;
            setTimeout(() => (b.innerHTML = `${icons.copy}Copy`), 1500);
          }, () => {});
          return;
        case 'head':
          void this.fetchHead();
          return;
        case 'cancel-head':
          this.head?.ctl.abort();
          return;
        default:
          return;
      }
    }
    if (rerender) this.renderQuestions();
    this.changed();
    if (focus) this.root.querySelector<HTMLElement>(`[data-field="${focus}"]`)?.focus();
  }

  private renderJson() {
    let text: string;
    try {
      text = JSON.stringify(JSON.parse(requestText(this.draft)), null, 2);
    } catch (e) {
      text = `// ${(e as Error).message}`;
    }
    this.els.json.textContent = text;
  }

  private showProblem(p: { title: string; hint?: string; detail?: string; code?: string } | null, field?: string) {
    const box = this.els.problem;
    for (const el of this.root.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
    box.hidden = !p;
    if (!p) return;
    box.innerHTML = `<strong>${escapeHtml(p.title)}</strong>${escapeHtml(p.hint ?? '')}${p.detail ? `<details><summary>Details</summary><code>${escapeHtml(p.code ?? '')}</code>: ${escapeHtml(p.detail)}</details>` : ''}`;
    const el = field ? this.root.querySelector<HTMLElement>(`[data-field="${field}"]`) : null;
    if (el) {
      el.setAttribute('aria-invalid', 'true');
      el.focus();
    }
  }

  // ---- running ----------------------------------------------------------------------------------

  private async go() {
    if (this.run.kind === 'running') {
      this.run.ctl.abort();
      return;
    }
    const engine = this.opts.getEngine();
    if (!engine?.decisions.available) return;
    let body: string;
    try {
      body = requestText(this.draft);
    } catch (e) {
      this.showProblem({ title: (e as Error).message }, (e as DraftError).field);
      return;
    }
    this.showProblem(null);
    const ctl = new AbortController();
    const draft = structuredClone(this.draft);
    this.run = { kind: 'running', ctl, progress: null };
    this.refresh();
    this.renderProgress();
    this.announce('Deciding…');
    try {
      const response = await engine.decide(body, {
        signal: ctl.signal,
        onProgress: (p) => {
          if (this.run.kind === 'running' && this.run.ctl === ctl) {
            this.run.progress = p;
            this.renderProgress();
          }
        },
      });
      this.run = { kind: 'done', response, request: draft };
      this.renderResult(response, draft);
      this.announce(`Answered ${Object.keys(response.answers).length} questions${response.approximate ? ' (approximate)' : ''}.`);
    } catch (e) {
      this.run = (e as { code?: string }).code === 'aborted' ? { kind: 'idle' } : { kind: 'error', error: e };
      if (this.run.kind === 'error') this.showProblem(humane(e));
    } finally {
      this.renderProgress();
      this.refresh();
    }
  }

  private renderProgress() {
    const el = this.els.progress;
    if (this.run.kind !== 'running') {
      el.hidden = true;
      return;
    }
    el.hidden = false;
    const p = this.run.progress;
    const frac = p && p.total ? p.done / p.total : null;
    el.innerHTML = `<div class="bar${frac === null ? ' indeterminate' : ''}" role="progressbar" aria-label="Reading the prompt" aria-valuemin="0" aria-valuemax="100" ${frac !== null ? `aria-valuenow="${Math.floor(frac * 100)}"` : ''}><i style="width:${((frac ?? 0) * 100).toFixed(1)}%"></i></div>
      <span class="d-progress-text">${p ? `${p.done.toLocaleString('en')} of ${p.total.toLocaleString('en')} prompt tokens` : 'Waiting for the engine…'}</span>`;
  }

  private renderResult(r: SystemOneResponse, d: Draft) {
    const el = this.els.results;
    const t = r.timings;
    const facts = [
      t ? `<span class="d-time" title="The whole decision: reading the request, the prompt, the head and the answers">${fmtMs(t.total_ms)}</span>` : '',
      t ? `<span>${t.prompt_tokens.toLocaleString('en')} prompt tokens${t.cached_tokens ? ` · ${t.cached_tokens.toLocaleString('en')} from cache` : ''}</span>` : '',
      `<span>${escapeHtml(r.model)}</span>`,
    ];
    el.innerHTML = `
      <div class="d-summary">
        <h2>Answers</h2>
        ${r.approximate ? `<span class="badge approx" title="No decision head: each question was asked of the language model with labelled options (both orders averaged). Uncalibrated.">Approximate</span>` : ''}
        <span class="d-facts">${facts.filter(Boolean).join('')}</span>
      </div>
      ${Object.entries(r.answers).map(([id, a]) => this.answerHtml(id, a, d.questions.find((q) => q.id.trim() === id))).join('')}`;
    el.hidden = false;
    // Scroll this view only (scrollIntoView would also move the page around it).
    const scroller = this.root.parentElement!;
    const top = el.getBoundingClientRect().top - scroller.getBoundingClientRect().top + scroller.scrollTop - 12;
    scroller.scrollTo({ top, behavior: matchMedia('(prefers-reduced-motion: reduce)').matches ? 'auto' : 'smooth' });
  }

  private answerHtml(id: string, a: SystemOneAnswer, q: QuestionDraft | undefined): string {
    const pct = (p: number) => `${(p * 100).toFixed(1)}%`;
    let verdict: string;
    let rows: { key: string; label: string; p: number }[];
    let conf: number | null = null;
    if (a.type === 'noul') {
      verdict = a.noul >= 0.5 ? 'Yes' : 'No';
      rows = [{ key: 'true', label: 'yes', p: a.noul }, { key: 'false', label: 'no', p: 1 - a.noul }];
    } else if (a.type === 'choice') {
      verdict = a.choice;
      conf = a.confidence;
      rows = Object.entries(a.probabilities).map(([k, p]) => ({ key: k, label: k, p }));
    } else {
      verdict = `${a.score.toFixed(2)} <small>on 0–${Object.keys(a.probabilities).length - 1}</small>`;
      conf = a.confidence;
      rows = Object.entries(a.probabilities).map(([k, p]) => {
        const legend = a.legend[k];
        return { key: k, label: legend === null || legend === undefined ? k : `${k} · ${typeof legend === 'string' ? legend : JSON.stringify(legend)}`, p };
      });
    }
    const top = rows.reduce((m, r, i) => (r.p > rows[m].p ? i : m), 0);
    const type = TYPE_NAMES[a.type];
    return `<article class="d-answer" data-question="${escapeHtml(id)}" aria-label="${escapeHtml(id)}">
      <div class="d-answer-head">
        <code class="d-answer-id">${escapeHtml(id)}</code><span class="d-type">${type}</span>
        ${q?.instructions ? `<span class="d-answer-q">${escapeHtml(q.instructions)}</span>` : ''}
      </div>
      <div class="d-verdict"><span class="d-verdict-value">${a.type === 'score' ? verdict : escapeHtml(verdict)}</span>
        ${conf !== null ? `<span class="d-conf" title="How sure the answer is (0: no better than uniform)"><span class="d-conf-bar"><i style="width:${(conf * 100).toFixed(1)}%"></i></span>${fmtPercent(conf)} confidence</span>` : `<span class="d-conf">p(yes) ${pct(a.type === 'noul' ? a.noul : 0)}</span>`}
      </div>
      <ul class="d-bars">${rows
        .map((r, i) => `<li class="d-bar${i === top ? ' is-top' : ''}" data-option="${escapeHtml(r.key)}" data-p="${r.p}">
          <span class="d-bar-label" title="${escapeHtml(r.label)}">${escapeHtml(r.label)}</span>
          <span class="d-track" role="meter" aria-label="${escapeHtml(r.label)}" aria-valuemin="0" aria-valuemax="1" aria-valuenow="${r.p}"><i style="width:${(r.p * 100).toFixed(2)}%"></i></span>
          <span class="d-pct">${pct(r.p)}</span></li>`)
        .join('')}</ul>
    </article>`;
  }

  private announce(text: string) {
    this.els.live.textContent = text;
  }

  // ---- the decision head of a head-less model ---------------------------------------------------

  private async fetchHead() {
    const engine = this.opts.getEngine();
    if (!engine || this.head) return;
    const ctl = new AbortController();
    this.head = { ctl, loaded: 0, total: 0 };
    this.refresh();
    try {
      await engine.loadHead({}, {
        hubUrl: this.opts.hubUrl(), signal: ctl.signal,
        onProgress: (p) => {
          if (this.head?.ctl === ctl) {
            this.head.loaded = p.loaded;
            this.head.total = p.total;
            this.refresh();
          }
        },
      });
      this.announce('The decision head is loaded.');
    } catch (e) {
      if ((e as { code?: string }).code !== 'aborted') this.showProblem(humane(e));
    } finally {
      this.head = null;
      this.refresh();
    }
  }
}

/**
 * The page's two views: tabs that show the chat or the decide view (`#decide` in the address
 * opens the latter). Sets `data-view` on <body> so the page's CSS can adapt the top bar.
 */
export function mountViewTabs(tabs: HTMLElement, views: Record<'chat' | 'decide', HTMLElement>, onShow?: (v: 'chat' | 'decide') => void) {
  const buttons = [...tabs.querySelectorAll<HTMLButtonElement>('[data-view]')];
  const show = (v: 'chat' | 'decide', focus = false) => {
    document.body.dataset.view = v;
    for (const b of buttons) {
      const on = b.dataset.view === v;
      b.setAttribute('aria-selected', String(on));
      b.tabIndex = on ? 0 : -1;
    }
    views.chat.hidden = v !== 'chat';
    views.decide.hidden = v !== 'decide';
    if (location.hash !== (v === 'decide' ? '#decide' : '') && (v === 'decide' || location.hash === '#decide')) {
      history.replaceState(null, '', v === 'decide' ? '#decide' : location.pathname + location.search);
    }
    if (focus) views[v].focus();
    onShow?.(v);
  };
  tabs.addEventListener('click', (e) => {
    const b = (e.target as HTMLElement).closest<HTMLButtonElement>('[data-view]');
    if (b) show(b.dataset.view as 'chat' | 'decide', true);
  });
  tabs.addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') return;
    const i = buttons.findIndex((b) => b.getAttribute('aria-selected') === 'true');
    const next = buttons[(i + (e.key === 'ArrowRight' ? 1 : buttons.length - 1)) % buttons.length];
    show(next.dataset.view as 'chat' | 'decide');
    next.focus();
  });
  show(location.hash === '#decide' ? 'decide' : 'chat');
  return show;
}
