// Answers that are not prose, in the chat view: tool calls and JSON (`response_format`), and the
// page's "Tools" setting that asks for them.
//
//   tools setting (JSON text) ──parseToolsSetting──► ChatCompletionTool[] | a message naming what is wrong
//   streamed delta.tool_calls ──mergeToolCallDeltas──► calls ──toolCallsHtml──► one collapsed
//       <details> per call: summary "called get_weather({"city":"Paris"})", body the pretty arguments
//   JSON content ──jsonAnswerHtml──► a copyable code block (indented once complete; raw while streaming
//       or when cut short)
//
// JSON is re-indented from its own text (prettyJson), never through JSON.parse + stringify, so the
// numbers and strings shown are exactly what the model wrote (1.50 stays 1.50, big integers keep
// their digits).

import type { ChatCompletionChunkToolCall, ChatCompletionMessageToolCall, ChatCompletionTool } from '../types.js';
import { escapeHtml } from './markdown.js';

/** OpenAI's rule for function names. */
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The "Tools" setting: '' (no tools), or a JSON array (or one item) of OpenAI tools
 * `{type: 'function', function: {name, description?, parameters?}}` or bare functions
 * `{name, description?, parameters?}`. Returns the tools in OpenAI's shape, or what is wrong.
 */
export function parseToolsSetting(text: string): { tools: ChatCompletionTool[] } | { error: string } {
  if (!text.trim()) return { tools: [] };
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return { error: `not valid JSON (${(e as Error).message})` };
  }
  const items = Array.isArray(v) ? v : [v];
  const tools: ChatCompletionTool[] = [];
  for (const [i, item] of items.entries()) {
    const where = Array.isArray(v) ? `item ${i + 1}` : 'the tool';
    if (!isObject(item)) return { error: `${where} is not an object` };
    const fn = item.type === 'function' && isObject(item.function) ? item.function : item;
    if (item.type !== undefined && item.type !== 'function') return { error: `${where}: type must be "function"` };
    if (typeof fn.name !== 'string' || !TOOL_NAME.test(fn.name)) {
      return { error: `${where}: "name" must be 1–64 letters, digits, _ or - (got ${JSON.stringify(fn.name ?? null)})` };
    }
    if (fn.description !== undefined && typeof fn.description !== 'string') return { error: `${fn.name}: "description" must be a string` };
    if (fn.parameters !== undefined && !isObject(fn.parameters)) return { error: `${fn.name}: "parameters" must be a JSON schema object` };
    if (tools.some((t) => t.function.name === fn.name)) return { error: `two tools are named ${fn.name}` };
    tools.push({
      type: 'function',
      function: {
        name: fn.name,
        ...(fn.description !== undefined ? { description: fn.description as string } : {}),
        ...(fn.parameters !== undefined ? { parameters: fn.parameters as Record<string, unknown> } : {}),
      },
    });
  }
  if (!tools.length) return { error: 'the list is empty (leave the field empty for no tools)' };
  return { tools };
}

/** Adds streamed tool-call pieces (by `index`) to the calls so far. */
export function mergeToolCallDeltas(calls: ChatCompletionMessageToolCall[], deltas: ChatCompletionChunkToolCall[]) {
  for (const d of deltas) {
    const c = (calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
    if (d.id) c.id = d.id;
    if (d.function?.name) c.function.name += d.function.name;
    if (d.function?.arguments) c.function.arguments += d.function.arguments;
  }
}

/**
 * Complete JSON text re-indented by two spaces (a space after each colon; empty `{}` / `[]` kept
 * inline), its tokens unchanged; null when the text is not complete, valid JSON.
 */
export function prettyJson(text: string): string | null {
  try {
    JSON.parse(text);
  } catch {
    return null;
  }
  let out = '';
  let depth = 0;
  const nl = () => `\n${'  '.repeat(depth)}`;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === '"') {
      // A string, copied as written (escapes included).
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j;
    } else if (ch === '{' || ch === '[') {
      let j = i + 1;
      while (/\s/.test(text[j])) j++;
      if (text[j] === (ch === '{' ? '}' : ']')) {
        out += ch === '{' ? '{}' : '[]';
        i = j;
      } else {
        depth++;
        out += ch + nl();
      }
    } else if (ch === '}' || ch === ']') {
      depth--;
      out += nl() + ch;
    } else if (ch === ',') out += `,${nl()}`;
    else if (ch === ':') out += ': ';
    else if (!/\s/.test(ch)) out += ch;
  }
  return out;
}

/** A copyable code block (the Markdown renderer's markup, so it shares its style and Copy button). */
function codeBlock(label: string, code: string, lang: string, open = false): string {
  return (
    `<div class="code-block${open ? ' open' : ''}"><div class="code-head"><span>${escapeHtml(label)}</span>` +
    `<button type="button" class="copy-code" aria-label="Copy ${escapeHtml(label)}">Copy</button></div>` +
    `<pre><code class="language-${lang}">${escapeHtml(code)}</code></pre></div>`
  );
}

/** The call as one line: `name(args)`, arguments shortened past `max` characters. */
export function callSignature(c: ChatCompletionMessageToolCall, max = 60): string {
  const args = c.function.arguments.trim();
  const inner = args === '{}' ? '' : args.length > max ? `${args.slice(0, max - 1)}…` : args;
  return `${c.function.name}(${inner})`;
}

/** One collapsed block per call: "called name(args)", the arguments indented inside. */
export function toolCallsHtml(calls: ChatCompletionMessageToolCall[]): string {
  return calls
    .map((c) => {
      const pretty = prettyJson(c.function.arguments);
      return (
        `<details class="clef-tool-call" data-call-id="${escapeHtml(c.id)}"><summary><span class="clef-tool-label">called</span> ` +
        `<code class="clef-tool-sig">${escapeHtml(callSignature(c))}</code></summary>` +
        `<div class="clef-tool-body">${codeBlock(`${c.function.name} arguments`, pretty ?? c.function.arguments, 'json')}</div></details>`
      );
    })
    .join('');
}

/** A JSON answer: indented once it is complete JSON; as written while it streams or when it was cut. */
export function jsonAnswerHtml(content: string, streaming: boolean): string {
  const pretty = streaming ? null : prettyJson(content);
  const label = streaming || pretty !== null ? 'JSON' : 'JSON (incomplete)';
  return codeBlock(label, pretty ?? content, 'json', streaming);
}
