// Tool calls in the model's answer: Qwen3.5 / Qwen3-Coder XML → OpenAI `tool_calls`.
//
// The Qwen3.5 chat template asks the model to call a function like this (after optional text):
//
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
//   </tool_call>
//
// `ToolCallParser` reads the answer text as it streams (any split: a tag may arrive in pieces) and
// gives back content text and complete calls. A call is given out when its `</function>` arrives,
// so a call that turns out malformed can still be handed back as plain text: nothing is retracted.
// Text that only might start a call (`<tool_`) is held back until it is decided.
//
// Parameter values are text in the XML; they are typed by the tool's JSON schema (`integer`,
// `number`, `boolean`, `null`, `object` / `array` as JSON, `string` as is), the way the template
// wrote them (`True` / `False` are Python's booleans). `function.arguments` is the JSON text of
// the parameters in the order the model wrote them.

/** A complete call, in OpenAI's shape. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ToolCallEvent = { kind: 'content'; text: string } | { kind: 'call'; call: ToolCall };

/** An OpenAI tool definition (`{type: 'function', function: {name, parameters}}`), as far as the parser reads it. */
export interface ToolDefinition {
  type?: string;
  function?: { name?: string; parameters?: JsonSchema };
}

type JsonSchema = { type?: string | string[]; properties?: Record<string, JsonSchema>; anyOf?: JsonSchema[]; oneOf?: JsonSchema[]; [k: string]: unknown };

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';
const FUNCTION_OPEN = '<function=';
const FUNCTION_CLOSE = '</function>';
const PARAM_OPEN = '<parameter=';
const PARAM_CLOSE = '</parameter>';
/** Longest function / parameter name accepted (a longer one means the text is not a call). */
const MAX_NAME = 256;

/** A fresh call id: `call_` + 24 random characters (OpenAI's form). */
export function newCallId(): string {
  const abc = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
  let s = 'call_';
  for (let i = 0; i < 24; i++) s += abc[Math.floor(Math.random() * abc.length)];
  return s;
}

/** How many characters at the end of `text` could begin `tag` (0 if none). */
function partialTag(text: string, tag: string): number {
  for (let k = Math.min(tag.length - 1, text.length); k > 0; k--) if (text.endsWith(tag.slice(0, k))) return k;
  return 0;
}

function schemaTypes(s: JsonSchema | undefined): string[] {
  if (!s) return [];
  if (typeof s.type === 'string') return [s.type];
  if (Array.isArray(s.type)) return s.type.filter((t): t is string => typeof t === 'string');
  const alts = [...(s.anyOf ?? []), ...(s.oneOf ?? [])];
  return alts.flatMap((a) => schemaTypes(a));
}

/** A parameter's text → its value, by the JSON schema of the parameter (strings when nothing fits). */
export function typedValue(text: string, schema: JsonSchema | undefined): unknown {
  const types = schemaTypes(schema);
  const t = text.trim();
  const tryJson = (): { ok: boolean; v?: unknown } => {
    try {
      return { ok: true, v: JSON.parse(t) };
    } catch {
      return { ok: false };
    }
  };
  for (const ty of types) {
    if (ty === 'string') continue; // decided last: a string takes anything
    if (ty === 'null' && (t === 'null' || t === 'None')) return null;
    if (ty === 'boolean') {
      if (/^true$/i.test(t)) return true;
      if (/^false$/i.test(t)) return false;
    }
    if (ty === 'integer' && /^-?\d+$/.test(t)) {
      const n = Number(t);
      if (Number.isSafeInteger(n)) return n;
    }
    if ((ty === 'number' || ty === 'integer') && /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t)) return Number(t);
    if (ty === 'object' || ty === 'array') {
      const j = tryJson();
      if (j.ok && (ty === 'array' ? Array.isArray(j.v) : j.v !== null && typeof j.v === 'object' && !Array.isArray(j.v))) return j.v;
    }
  }
  if (types.includes('string')) return text;
  if (types.length === 0) {
    // No schema for this parameter: JSON when it reads as JSON other than a bare string, Python's
    // True / False / None as the template writes JSON's true / false / null, else the text.
    const j = tryJson();
    if (j.ok && typeof j.v !== 'string') return j.v;
    const py: Record<string, unknown> = { True: true, False: false, None: null };
    if (t in py) return py[t];
  }
  return text;
}

/** Parameter schemas by function name. */
function schemasOf(tools: ToolDefinition[] | undefined): Map<string, Record<string, JsonSchema>> {
  const m = new Map<string, Record<string, JsonSchema>>();
  for (const t of tools ?? []) {
    const f = t?.function;
    if (f && typeof f.name === 'string') m.set(f.name, (f.parameters?.properties as Record<string, JsonSchema>) ?? {});
  }
  return m;
}

/**
 * Parses one tool call's XML (from `<tool_call>`): the call and the length it took, `null` when it is
 * malformed, or `'more'` when the text ends before it could be decided.
 */
function parseCall(
  text: string,
  schemas: Map<string, Record<string, JsonSchema>>,
  final: boolean,
): { name: string; args: string; end: number } | null | 'more' {
  let i = OPEN.length;
  const skipWs = () => {
    while (i < text.length && /\s/.test(text[i])) i++;
  };
  /** Does `tag` start at `i`? true / false / 'more' (the text ends inside it). */
  const at = (tag: string): boolean | 'more' => {
    const part = text.slice(i, i + tag.length);
    if (part === tag) return true;
    return tag.startsWith(part) ? 'more' : false;
  };
  skipWs();
  const f = at(FUNCTION_OPEN);
  if (f !== true) return f === 'more' || i >= text.length ? 'more' : null;
  i += FUNCTION_OPEN.length;
  const nameEnd = text.indexOf('>', i);
  if (nameEnd < 0) return /[\n<]/.test(text.slice(i)) || text.length - i > MAX_NAME ? null : 'more';
  const name = text.slice(i, nameEnd).trim();
  if (!name || /[\n<]/.test(name) || name.length > MAX_NAME) return null;
  i = nameEnd + 1;
  const props = schemas.get(name) ?? {};
  let args = '';
  for (;;) {
    skipWs();
    if (i >= text.length) return 'more';
    const close = at(FUNCTION_CLOSE);
    if (close === true) {
      i += FUNCTION_CLOSE.length;
      // `</tool_call>` normally follows; a call cut off after `</function>` (a stop string, the end) still counts.
      const j = i;
      skipWs();
      const end = at(CLOSE);
      if (end === 'more' && !final) return 'more';
      if (end === true) i += CLOSE.length;
      else i = j;
      return { name, args: args ? `${args}}` : '{}', end: i };
    }
    const p = at(PARAM_OPEN);
    if (p === 'more' || close === 'more') return 'more';
    if (!p) return null;
    i += PARAM_OPEN.length;
    const pEnd = text.indexOf('>', i);
    if (pEnd < 0) return /[\n<]/.test(text.slice(i)) || text.length - i > MAX_NAME ? null : 'more';
    const pname = text.slice(i, pEnd).trim();
    if (!pname || /[\n<]/.test(pname) || pname.length > MAX_NAME) return null;
    i = pEnd + 1;
    const vEnd = text.indexOf(PARAM_CLOSE, i);
    if (vEnd < 0) return 'more';
    // The template writes "\n" + value + "\n" between the tags.
    let value = text.slice(i, vEnd);
    if (value.startsWith('\n')) value = value.slice(1);
    if (value.endsWith('\n')) value = value.slice(0, -1);
    i = vEnd + PARAM_CLOSE.length;
    args += `${args ? ',' : '{'}${JSON.stringify(pname)}:${JSON.stringify(typedValue(value, props[pname]) ?? null)}`;
  }
}

/** Length of the whitespace at the end of `text`. */
function trailingSpace(text: string): number {
  return text.length - text.trimEnd().length;
}

export class ToolCallParser {
  /** Text not given out yet: a possible start of a call, a call still arriving, trailing whitespace. */
  private buf = '';
  /** After a call, whitespace is the format's (between calls, after the last), not content. */
  private afterCall = false;
  private schemas: Map<string, Record<string, JsonSchema>>;
  /** Calls given out so far. */
  readonly calls: ToolCall[] = [];

  constructor(tools?: ToolDefinition[], private makeId: () => string = newCallId) {
    this.schemas = schemasOf(tools);
  }

  /** Adds answer text; returns what can be given out now. `final`: the answer is complete. */
  push(text: string, final = false): ToolCallEvent[] {
    this.buf += text;
    const out: ToolCallEvent[] = [];
    const content = (t: string) => {
      if (this.afterCall) {
        t = t.trimStart();
        if (!t) return;
        this.afterCall = false;
      }
      if (!t) return;
      const last = out[out.length - 1];
      if (last?.kind === 'content') last.text += t;
      else out.push({ kind: 'content', text: t });
    };
    for (;;) {
      const start = this.buf.indexOf(OPEN);
      if (start < 0) {
        // Hold back what could start a call, and the whitespace before it (it would precede the call).
        let keep = 0;
        if (!final) {
          keep = partialTag(this.buf, OPEN);
          keep += trailingSpace(this.buf.slice(0, this.buf.length - keep));
        }
        content(this.buf.slice(0, this.buf.length - keep));
        this.buf = this.buf.slice(this.buf.length - keep);
        return out;
      }
      const r = parseCall(this.buf.slice(start), this.schemas, final);
      if (r === 'more' && !final) {
        const before = this.buf.slice(0, start);
        const cut = before.length - trailingSpace(before);
        content(before.slice(0, cut));
        this.buf = this.buf.slice(cut);
        return out;
      }
      if (r === null || r === 'more') {
        // Not a call (or one cut off by the end): the tag is text; parse on after it.
        content(this.buf.slice(0, start + OPEN.length));
        this.buf = this.buf.slice(start + OPEN.length);
        continue;
      }
      content(this.buf.slice(0, start).trimEnd());
      const call: ToolCall = { id: this.makeId(), type: 'function', function: { name: r.name, arguments: r.args } };
      this.calls.push(call);
      out.push({ kind: 'call', call });
      this.afterCall = true;
      this.buf = this.buf.slice(start + r.end);
    }
  }

  /** The rest of the text at the end of the answer. */
  finish(): ToolCallEvent[] {
    return this.push('', true);
  }
}

/** Parses a complete answer: its content (null when it is only calls) and its calls. */
export function parseToolCalls(text: string, tools?: ToolDefinition[], makeId?: () => string): { content: string | null; calls: ToolCall[] } {
  const p = new ToolCallParser(tools, makeId);
  let content = '';
  for (const e of p.push(text, true)) if (e.kind === 'content') content += e.text;
  if (p.calls.length) content = content.trim();
  return { content: p.calls.length && !content ? null : content, calls: p.calls };
}
