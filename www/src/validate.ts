// Every caller-supplied value the public API accepts, checked in one place.
//
//   SAMPLING   the generation parameters, with OpenAI's ranges (temperature 0–2, top_p 0–1, …)
//   LOAD       the numeric load options, with their ranges and the defaults the loader uses
//
// One table row per parameter: its range, whether it must be an integer (or a power of two) and,
// for load options, the default. `samplingParams` (chat / completions), `loadParams` (ClefEngine
// .load) and `checkMessages` turn a request into what the worker runs or throw a `BadRequest`
// whose message names the parameter, the allowed range and the value given. The worker resolves
// load options with the same table (`resolveLoadParams`), so a default is written once.
// `chatRequest` and `completionRequest` check a whole request body (every field the engine reads)
// and return what the engine runs; tests/js/validate-fuzz.test.mjs feeds them arbitrary values.

import type { ChatMessageInput, GenerateParams, LoadParams, OutputSpec, PromptSpec } from './protocol.js';
import type { ChatCompletionCreateParams, ChatCompletionTool, CompletionCreateParams, LoadOptions, SamplingParams } from './types.js';
import { WASM_MAX_MEMORY } from './load/fit.js';

/** An invalid argument (code `bad_request`); index.ts turns it into a ClefError. */
export class BadRequest extends Error {
  readonly code = 'bad_request' as const;
}

export interface Range {
  min?: number;
  max?: number;
  /** `min` itself is not allowed. */
  minExclusive?: boolean;
  integer?: boolean;
  powerOfTwo?: boolean;
  /** A size in bytes (messages say KiB / MiB / GiB). */
  bytes?: boolean;
}

const KiB = 1024;
const MiB = KiB * KiB;
const GiB = KiB * MiB;

/** Generation parameters (OpenAI names and ranges; top_k, min_p, repetition_penalty as llama.cpp's). */
export const SAMPLING = {
  max_tokens: { integer: true, min: 1 },
  max_completion_tokens: { integer: true, min: 1 },
  temperature: { min: 0, max: 2 },
  top_p: { min: 0, max: 1 },
  top_k: { integer: true, min: 0 },
  min_p: { min: 0, max: 1 },
  presence_penalty: { min: -2, max: 2 },
  frequency_penalty: { min: -2, max: 2 },
  repetition_penalty: { min: 0, minExclusive: true, max: 10 },
  seed: { integer: true, min: 0, max: Number.MAX_SAFE_INTEGER },
  /** Each value of logit_bias. */
  logit_bias: { min: -100, max: 100 },
  /** Alternatives per token (chat `top_logprobs`, completions `logprobs`; src/sampler.rs MAX_TOP_LOGPROBS). */
  top_logprobs: { integer: true, min: 0, max: 20 },
} satisfies Record<string, Range>;

type LoadKey = 'contextLength' | 'chunkSize' | 'concurrency' | 'maxRetries' | 'retryDelayMs' | 'memoryLimit' | 'workers' | 'band' |
  'timeoutMs' | 'idleTimeoutMs' | 'retryBudgetMs' | 'maxRetryAfterMs';

/** Numeric load options: range and default (contextLength's default depends on the model: see load/fit.ts). */
export const LOAD: Record<LoadKey, Range & { default?: number }> = {
  contextLength: { integer: true, min: 16, max: 1 << 24 },
  chunkSize: { powerOfTwo: true, bytes: true, min: 64 * KiB, max: GiB, default: 16 * MiB },
  concurrency: { integer: true, min: 1, max: 16, default: 3 },
  /** Failed attempts in a row (without a byte of progress) before a request gives up. */
  maxRetries: { integer: true, min: 0, max: 1000, default: 8 },
  /** First backoff delay; it doubles with each failure (up to retry.ts MAX_BACKOFF_MS). */
  retryDelayMs: { min: 1, max: 60_000, default: 250 },
  memoryLimit: { bytes: true, min: MiB, default: WASM_MAX_MEMORY },
  /** Shard workers (default: load/workers.ts picks from the cores and the model's size). */
  workers: { integer: true, min: 1, max: 64 },
  /** Bands between shards, % of a shard's share (src/split.rs); off until measured to pay (BENCHMARKS.md session 44). */
  band: { integer: true, min: 0, max: 100, default: 0 },
  /** Waiting for a response's headers (connect + server think time). */
  timeoutMs: { min: 1, max: 3_600_000, default: 30_000 },
  /** A response body that sends nothing for this long is aborted and resumed. */
  idleTimeoutMs: { min: 1, max: 3_600_000, default: 30_000 },
  /** Time a request may spend failing (from its first failure without progress) before giving up. */
  retryBudgetMs: { min: 0, max: 24 * 3_600_000, default: 300_000 },
  /** The longest Retry-After honoured (a longer one waits this long). */
  maxRetryAfterMs: { min: 0, max: 3_600_000, default: 60_000 },
};

function describe(r: Range): string {
  const kind = r.powerOfTwo ? 'a power of two' : r.integer ? 'an integer' : 'a number';
  const fmt = (n: number) => (!r.bytes || n % KiB ? String(n) : n >= GiB ? `${n / GiB} GiB` : n >= MiB ? `${n / MiB} MiB` : `${n / KiB} KiB`);
  if (r.min !== undefined && r.max !== undefined) {
    return r.minExclusive ? `${kind} greater than ${fmt(r.min)} and at most ${fmt(r.max)}` : `${kind} between ${fmt(r.min)} and ${fmt(r.max)}`;
  }
  if (r.min !== undefined) {
    if (r.minExclusive) return `${kind} greater than ${fmt(r.min)}`;
    return r.integer && r.min === 0 ? `a non-negative integer` : r.integer && r.min === 1 ? 'a positive integer' : `${kind} ≥ ${fmt(r.min)}`;
  }
  if (r.max !== undefined) return `${kind} ≤ ${fmt(r.max)}`;
  return kind;
}

function shown(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? v.slice(0, 40) + '…' : v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null) return String(v);
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : typeof v;
}

/** Checks one number against its range; returns it. */
export function checkNumber(name: string, v: unknown, r: Range): number {
  const ok =
    typeof v === 'number' && Number.isFinite(v) &&
    (!r.integer || Number.isInteger(v)) &&
    (!r.powerOfTwo || (Number.isInteger(v) && v > 0 && (v & (v - 1)) === 0)) &&
    (r.min === undefined || (r.minExclusive ? v > r.min : v >= r.min)) &&
    (r.max === undefined || v <= r.max);
  if (!ok) throw new BadRequest(`${name} must be ${describe(r)} (got ${shown(v)})`);
  return v as number;
}

const given = (v: unknown) => v !== undefined && v !== null;

/** OpenAI sampling fields → the worker's GenerateParams (only what was given). */
export function samplingParams(r: SamplingParams): GenerateParams {
  if (given(r.n) && r.n !== 1) throw new BadRequest(`only n = 1 is supported (got ${shown(r.n)})`);
  const p: GenerateParams = {};
  const num = (k: keyof typeof SAMPLING) => {
    const v = (r as Record<string, unknown>)[k];
    return given(v) ? checkNumber(k, v, SAMPLING[k]) : undefined;
  };
  p.max_tokens = num('max_tokens') ?? num('max_completion_tokens');
  p.temperature = num('temperature');
  p.top_p = num('top_p');
  p.top_k = num('top_k');
  p.min_p = num('min_p');
  p.seed = num('seed');
  p.presence_penalty = num('presence_penalty');
  p.frequency_penalty = num('frequency_penalty');
  p.repetition_penalty = num('repetition_penalty');
  if (given(r.stop)) {
    // Array.from: a sparse array's holes are read as undefined (every / filter would skip them).
    const s = typeof r.stop === 'string' ? [r.stop] : Array.isArray(r.stop) ? Array.from(r.stop as unknown[]) : r.stop;
    if (!Array.isArray(s) || !s.every((x) => typeof x === 'string')) throw new BadRequest(`stop must be a string or an array of strings (got ${shown(r.stop)})`);
    p.stop = s.filter((x) => x.length > 0);
  }
  if (given(r.logit_bias)) {
    if (typeof r.logit_bias !== 'object' || Array.isArray(r.logit_bias)) throw new BadRequest(`logit_bias must be an object of token id → bias (got ${shown(r.logit_bias)})`);
    for (const [k, v] of Object.entries(r.logit_bias!)) {
      if (!/^\d+$/.test(k)) throw new BadRequest(`logit_bias: '${k}' is not a token id`);
      checkNumber(`logit_bias['${k}']`, v, SAMPLING.logit_bias);
    }
    p.logit_bias = { ...r.logit_bias };
  }
  if (given(r.ignore_eos) && typeof r.ignore_eos !== 'boolean') throw new BadRequest(`ignore_eos must be true or false (got ${shown(r.ignore_eos)})`);
  if (r.ignore_eos) p.ignore_eos = true;
  for (const k of Object.keys(p) as Array<keyof GenerateParams>) if (p[k] === undefined) delete p[k];
  return p;
}

/** Chat `logprobs` / `top_logprobs` → alternatives per token (undefined: no log-probabilities). */
export function chatLogprobs(r: { logprobs?: unknown; top_logprobs?: unknown }): number | undefined {
  if (given(r.logprobs) && typeof r.logprobs !== 'boolean') throw new BadRequest(`logprobs must be true or false (got ${shown(r.logprobs)})`);
  const top = given(r.top_logprobs) ? checkNumber('top_logprobs', r.top_logprobs, SAMPLING.top_logprobs) : undefined;
  if (top !== undefined && !r.logprobs) throw new BadRequest('top_logprobs needs logprobs: true');
  return r.logprobs ? (top ?? 0) : undefined;
}

/** Completions `logprobs` (a number of alternatives, OpenAI's legacy form) → alternatives per token. */
export function completionLogprobs(r: { logprobs?: unknown; echo?: unknown }): number | undefined {
  if (!given(r.logprobs)) return undefined;
  const n = checkNumber('logprobs', r.logprobs, SAMPLING.top_logprobs);
  if (r.echo) throw new BadRequest("logprobs with echo would need the prompt's log-probabilities, which are not computed");
  return n;
}

/** The roles a chat message may have (`developer` is OpenAI's newer name for `system`). */
export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

/** Checks a chat's messages; returns them with `developer` renamed `system` (what the template knows). */
export function checkMessages(messages: unknown): ChatMessageInput[] {
  if (!Array.isArray(messages) || messages.length === 0) throw new BadRequest('messages must be a non-empty array');
  return Array.from(messages, (m: unknown, i) => {
    const at = `messages[${i}]`;
    if (!m || typeof m !== 'object' || Array.isArray(m)) throw new BadRequest(`${at} must be an object {role, content} (got ${shown(m)})`);
    const msg = m as ChatMessageInput;
    if (typeof msg.role !== 'string') throw new BadRequest(`${at} needs a role (one of ${ROLES.join(', ')})`);
    if (!(ROLES as readonly string[]).includes(msg.role)) {
      throw new BadRequest(`${at} has the unknown role ${shown(msg.role)}: the roles are ${ROLES.join(', ')}`);
    }
    const c = msg.content;
    if (Array.isArray(c)) {
      Array.from(c as unknown[]).forEach((part: unknown, j) => {
        const p = part as { type?: unknown; text?: unknown };
        if (!p || typeof p !== 'object') throw new BadRequest(`${at}.content[${j}] must be a content part {type: 'text', text} (got ${shown(part)})`);
        if (p.type !== 'text') throw new BadRequest(`${at}.content[${j}] has type ${shown(p.type)}: only text parts are supported`);
        if (typeof p.text !== 'string') throw new BadRequest(`${at}.content[${j}].text must be a string (got ${shown(p.text)})`);
      });
    } else if (given(c) && typeof c !== 'string') {
      throw new BadRequest(`${at}.content must be a string or an array of text parts (got ${shown(c)})`);
    } else if (!given(c) && msg.role !== 'assistant') {
      throw new BadRequest(`${at} (${msg.role}) needs content: a string or an array of text parts`);
    }
    if (given(msg.reasoning_content) && typeof msg.reasoning_content !== 'string') {
      throw new BadRequest(`${at}.reasoning_content must be a string (got ${shown(msg.reasoning_content)})`);
    }
    return msg.role === 'developer' ? { ...msg, role: 'system' } : msg;
  });
}

const LOAD_KEYS = Object.keys(LOAD) as LoadKey[];

/** The load options the worker needs (numbers checked against LOAD, sha256 against its shape). */
export function loadParams(o: LoadOptions): Partial<Pick<LoadParams, LoadKey | 'sha256' | 'kvCache' | 'exchange' | 'engineShard' | 'traceStages'>> {
  const out: Partial<Pick<LoadParams, LoadKey | 'sha256' | 'kvCache' | 'exchange' | 'engineShard' | 'traceStages'>> = {};
  for (const k of LOAD_KEYS) {
    const v = (o as Record<string, unknown>)[k];
    if (given(v)) out[k] = checkNumber(k, v, LOAD[k]);
  }
  if (given(o.kvCache)) {
    if (o.kvCache !== 'f32' && o.kvCache !== 'f16') throw new BadRequest(`kvCache must be 'f32' or 'f16' (got ${shown(o.kvCache)})`);
    out.kvCache = o.kvCache;
  }
  if (given(o.exchange)) {
    if (!['auto', 'shared', 'message'].includes(o.exchange as string)) throw new BadRequest(`exchange must be 'auto', 'shared' or 'message' (got ${shown(o.exchange)})`);
    out.exchange = o.exchange;
  }
  if (given(o.engineShard)) {
    if (typeof o.engineShard !== 'boolean') throw new BadRequest(`engineShard must be true or false (got ${shown(o.engineShard)})`);
    out.engineShard = o.engineShard;
  }
  if (given(o.traceStages)) {
    if (typeof o.traceStages !== 'boolean') throw new BadRequest(`traceStages must be true or false (got ${shown(o.traceStages)})`);
    out.traceStages = o.traceStages;
  }
  if (given(o.sha256)) {
    if (typeof o.sha256 !== 'string' || !/^[0-9a-f]{64}$/i.test(o.sha256)) throw new BadRequest(`sha256 must be 64 hexadecimal digits (got ${shown(o.sha256)})`);
    out.sha256 = o.sha256.toLowerCase();
  }
  return out;
}

/** Load options with every default filled in (what the loader runs with). */
export type ResolvedLoadParams = Omit<LoadParams, LoadKey> & Required<Omit<Pick<LoadParams, LoadKey>, 'contextLength'>> & Pick<LoadParams, 'contextLength'>;

/** Checks the load options the worker received and fills in the defaults. */
export function resolveLoadParams(p: LoadParams): ResolvedLoadParams {
  const checked = loadParams(p as LoadOptions);
  const out = { ...p, ...checked } as Record<string, unknown>;
  // null means "not given" here too (loadParams skips it): the default, or undefined where the model decides.
  for (const k of LOAD_KEYS) if (!given(out[k])) out[k] = LOAD[k].default;
  return out as ResolvedLoadParams;
}

// ------------------------------------------------------------------------------------------------
// Whole requests

/** What a request's `tools`, `tool_choice` and `parallel_tool_calls` mean for the prompt and the answer. */
export interface ToolSetup {
  /** Tools given to the chat template. */
  render?: ChatCompletionTool[];
  /** Tools whose calls are parsed out of the answer (null: none). */
  parse: ChatCompletionTool[] | null;
  /** Answer start written into the prompt (`required` / a named function). */
  prefix: string;
  /** Stop string (one call only). */
  stop?: string;
  /** `required` / named: the call is constrained to the tools' schemas (see outputSpec). */
  forced?: { name?: string; parallel: boolean };
}

/** A checked chat request: what the engine runs (`params` include the output grammar and the tool stop string). */
export interface ChatRequest {
  params: GenerateParams;
  prompt: Extract<PromptSpec, { kind: 'chat' }>;
  tools: ToolSetup;
  stream: boolean;
}

/** A checked completions request. */
export interface CompletionRequest {
  params: GenerateParams;
  prompt: Extract<PromptSpec, { kind: 'text' | 'tokens' }>;
  /** The prompt text written before the completion ('' without `echo`). */
  echo: string;
  stream: boolean;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkBoolean(name: string, v: unknown): boolean | undefined {
  if (!given(v)) return undefined;
  if (typeof v !== 'boolean') throw new BadRequest(`${name} must be true or false (got ${shown(v)})`);
  return v;
}

/** `tools`, `tool_choice`, `parallel_tool_calls` → how the prompt and the answer treat tools. */
export function toolSetup(body: { tools?: unknown; tool_choice?: unknown; parallel_tool_calls?: unknown }): ToolSetup {
  const tools = body.tools ?? undefined;
  const choice = body.tool_choice ?? 'auto';
  const parallel = checkBoolean('parallel_tool_calls', body.parallel_tool_calls);
  if (tools !== undefined) {
    if (!Array.isArray(tools)) throw new BadRequest(`tools must be an array (got ${shown(tools)})`);
    Array.from(tools as unknown[]).forEach((t: unknown, i) => {
      const f = isObject(t) ? t.function : undefined;
      if (!isObject(t) || t.type !== 'function' || !isObject(f) || typeof f.name !== 'string' || !f.name) {
        throw new BadRequest(`tools[${i}] must be {type: 'function', function: {name, parameters?}}`);
      }
    });
  }
  const list = tools as ChatCompletionTool[] | undefined;
  let named: string | undefined;
  if (typeof choice === 'string') {
    if (!['auto', 'none', 'required'].includes(choice)) throw new BadRequest(`tool_choice '${choice}' is not one of 'auto', 'none', 'required'`);
  } else {
    const f = isObject(choice) ? choice.function : undefined;
    if (!isObject(choice) || choice.type !== 'function' || !isObject(f) || typeof f.name !== 'string') {
      throw new BadRequest(`tool_choice must be 'auto', 'none', 'required' or {type: 'function', function: {name}} (got ${shown(choice)})`);
    }
    named = f.name;
  }
  if (!list?.length) {
    if (choice === 'required' || named !== undefined) throw new BadRequest('tool_choice needs tools');
    return { render: list, parse: null, prefix: '' };
  }
  if (named !== undefined && !list.some((t) => t.function.name === named)) throw new BadRequest(`tool_choice names '${named}', which is not in tools`);
  if (choice === 'none') return { parse: null, prefix: '' };
  return {
    render: list,
    parse: list,
    prefix: named !== undefined ? `<tool_call>\n<function=${named}>\n` : choice === 'required' ? '<tool_call>\n<function=' : '',
    stop: parallel === false ? '</tool_call>' : undefined,
    forced: named !== undefined || choice === 'required' ? { name: named, parallel: named === undefined && parallel !== false } : undefined,
  };
}

/**
 * The grammar a chat answer must follow: `response_format` JSON, or the rest of a forced tool call
 * (`tool_choice` required / named: the prompt already holds the call's start, see toolSetup).
 */
export function outputSpec(body: { response_format?: unknown }, tools: ToolSetup): OutputSpec | undefined {
  const rf = body.response_format;
  let json: OutputSpec | undefined;
  if (given(rf)) {
    if (!isObject(rf) || typeof rf.type !== 'string') throw new BadRequest(`response_format must be {type: 'text' | 'json_object' | 'json_schema', …} (got ${shown(rf)})`);
    if (rf.type === 'json_object') json = { type: 'json_object' };
    else if (rf.type === 'json_schema') {
      const js = rf.json_schema;
      if (!isObject(js)) throw new BadRequest('response_format json_schema needs json_schema: {name, schema}');
      if (typeof js.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(js.name)) throw new BadRequest('json_schema.name must be 1–64 letters, digits, _ or -');
      const schema = js.schema ?? {};
      if (typeof schema !== 'boolean' && !isObject(schema)) throw new BadRequest(`json_schema.schema must be a JSON schema object (got ${shown(schema)})`);
      json = { type: 'json_schema', schema };
    } else if (rf.type !== 'text') throw new BadRequest(`response_format type ${shown(rf.type)} is not one of 'text', 'json_object', 'json_schema'`);
  }
  if (tools.forced) {
    // A forced call is the whole answer: response_format (for text answers) does not apply.
    return { type: 'tool_calls', tools: tools.parse!, ...(tools.forced.name !== undefined ? { name: tools.forced.name } : {}), parallel: tools.forced.parallel };
  }
  if (json && tools.parse) throw new BadRequest("response_format JSON with tool_choice 'auto' is not supported: use tool_choice 'none' (a JSON answer) or 'required' (a call)");
  return json;
}

/** `chat_template_kwargs` with `enable_thinking` (the top-level option wins). */
export function templateKwargs(enableThinking: unknown, kwargs: unknown): Record<string, unknown> | undefined {
  const thinking = checkBoolean('enable_thinking', enableThinking);
  if (given(kwargs) && !isObject(kwargs)) throw new BadRequest(`chat_template_kwargs must be an object (got ${shown(kwargs)})`);
  const k = (kwargs ?? undefined) as Record<string, unknown> | undefined;
  return thinking === undefined ? k : { ...k, enable_thinking: thinking };
}

/** A chat completions body → what the engine runs. */
export function chatRequest(body: ChatCompletionCreateParams): ChatRequest {
  if (!isObject(body)) throw new BadRequest(`create() needs a request object {messages, …} (got ${shown(body)})`);
  const params = samplingParams(body);
  const messages = checkMessages(body.messages);
  const tools = toolSetup(body);
  const output = outputSpec(body, tools);
  if (output) params.output = output;
  const lp = chatLogprobs(body);
  if (lp !== undefined) params.logprobs = lp;
  if (tools.stop) params.stop = [...(params.stop ?? []), tools.stop];
  const chatTemplateKwargs = templateKwargs(body.enable_thinking, body.chat_template_kwargs);
  const prompt: ChatRequest['prompt'] = {
    kind: 'chat', messages, tools: tools.render,
    chatTemplateKwargs,
    // A constrained answer starts right after the (closed) reasoning block.
    ...(tools.prefix || params.output ? { assistantPrefix: tools.prefix } : {}),
  };
  checkBoolean('return_token_ids', body.return_token_ids);
  return { params, prompt, tools, stream: checkBoolean('stream', body.stream) ?? false };
}

/** A completions body → what the engine runs. */
export function completionRequest(body: CompletionCreateParams): CompletionRequest {
  if (!isObject(body)) throw new BadRequest(`create() needs a request object {prompt, …} (got ${shown(body)})`);
  const params = samplingParams(body);
  const p: unknown = body.prompt;
  let prompt: CompletionRequest['prompt'];
  if (typeof p === 'string') prompt = { kind: 'text', text: p };
  else if (Array.isArray(p) && Array.from(p as unknown[]).every((x) => Number.isInteger(x) && (x as number) >= 0 && (x as number) <= 0xffffffff)) {
    prompt = { kind: 'tokens', ids: Array.from(p as number[]) };
  }
  else throw new BadRequest(`prompt must be a string or an array of token ids (non-negative integers) (got ${shown(p)})`);
  const echo = checkBoolean('echo', body.echo) ?? false;
  if (echo && prompt.kind !== 'text') throw new BadRequest('echo needs a text prompt');
  const lp = completionLogprobs(body);
  if (lp !== undefined) params.logprobs = lp;
  checkBoolean('return_token_ids', body.return_token_ids);
  return { params, prompt, echo: echo && prompt.kind === 'text' ? prompt.text : '', stream: checkBoolean('stream', body.stream) ?? false };
}
