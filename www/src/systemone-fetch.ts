// Clef's SystemOne HTTP API (llama-server's `/v1/systemone`), answered locally: a `fetch` for the
// npm `@typesafe-ai/sdk` (or any client of that API), and the decision route of
// `node www/cli.mjs serve`.
//
//   import { TypeSafeClient, choice } from '@typesafe-ai/sdk';
//   const client = new TypeSafeClient({ baseURL: 'http://clef.local', apiKey: 'local', dangerouslyAllowBrowser: true,
//                                       timeout: 120_000, fetch: createSystemOneFetch(engine) });
//   const { answers } = await client.systemOne({ state, questions: { route: choice('Which team?', {…}) } });
//
// Routes (under any base path):
//   POST …/systemone   engine.decideJson: the body's JSON text goes to the engine as it came (its
//                      key order is the question order), the answer's JSON text comes back as the
//                      engine wrote it (llama-server's key order)
//   GET  …/models      the loaded model, in TypeSafe's shape ({models: [{name, description,
//                      release_date}]}) and OpenAI's ({object: 'list', data}) at once
// Anything else goes to `options.fallback` (e.g. createOpenAIFetch(engine)), else 404.
// Errors are llama-server's `{error: {code: <HTTP status>, type, message}}` plus `clef_code`, the
// engine's typed ErrorCode; the status is the decision class's (DECISION_STATUS: 400 malformed,
// 422 invalid, 413 too large, 501 not a decision model, 500 evaluation failed). The request's
// `signal` (the SDK's timeout, the caller's abort) stops the decision.

import type { ClefEngine, ClefError } from './index.js';
import { DECISION_STATUS, type ErrorCode } from './protocol.js';

/** HTTP status of the engine's other errors. */
const OTHER_STATUS: Partial<Record<ErrorCode, number>> = {
  bad_request: 400,
  not_loaded: 503,
  worker_crashed: 503,
  out_of_memory: 507,
};

/** llama-server's error `type` per status (spec clef-head.md §3.5). */
function errorType(status: number): string {
  switch (status) {
    case 400: return 'invalid_request_error';
    case 404: return 'not_found_error';
    case 405: return 'invalid_request_error';
    case 413: return 'request_too_large_error';
    case 422: return 'unprocessable_entity_error';
    case 501: return 'not_supported_error';
    default: return status >= 500 ? 'server_error' : 'invalid_request_error';
  }
}

export function statusOf(code: ErrorCode): number {
  return DECISION_STATUS[code] ?? OTHER_STATUS[code] ?? 500;
}

function errorResponse(status: number, message: string, code: string): Response {
  const body = { error: { code: status, type: errorType(status), message, clef_code: code } };
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
}

function abortError(): DOMException {
  return new DOMException('This operation was aborted', 'AbortError');
}

export interface SystemOneFetchOptions {
  /** The model name `GET …/models` reports (default: the name the engine was loaded with). */
  modelId?: string;
  /** Where requests that are not SystemOne's go (default: 404). */
  fetch?: typeof fetch;
}

/** A `fetch` that answers `POST …/systemone` (and `GET …/models`) from `engine`, without a server. */
export function createSystemOneFetch(engine: ClefEngine, options: SystemOneFetchOptions = {}): typeof fetch {
  const modelId = () => options.modelId ?? engine.model;
  const created = Math.floor(Date.now() / 1000);
  const released = new Date(created * 1000).toISOString().slice(0, 10);

  async function handle(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const req = input instanceof Request ? input : null;
    const url = new URL(req ? req.url : String(input), 'http://localhost/');
    const method = (init?.method ?? req?.method ?? 'GET').toUpperCase();
    const signal = init?.signal ?? req?.signal ?? undefined;
    if (signal?.aborted) throw abortError();
    const path = url.pathname.replace(/\/+$/, '');

    if (/\/models$/.test(path) && method === 'GET') {
      const body = {
        models: [{ name: modelId(), description: `${engine.info.name} (clef-web, decisions: ${engine.decisions.available ? engine.decisions.form : 'none'})`, release_date: released }],
        object: 'list',
        data: [{ id: modelId(), object: 'model', created, owned_by: 'clef-web' }],
      };
      return new Response(JSON.stringify(body), { status: 200, headers: { 'content-type': 'application/json' } });
    }
    if (!/\/systemone$/.test(path)) {
      if (options.fetch) return options.fetch(input, init);
      return errorResponse(404, `no route ${method} ${url.pathname}`, 'not_found');
    }
    if (method !== 'POST') return errorResponse(405, `${method} is not allowed here (use POST)`, 'bad_request');
    const text = init?.body !== undefined && init.body !== null ? await new Response(init.body).text() : req ? await req.text() : '';
    try {
      const r = await engine.decideJson(text, { signal });
      return new Response(r.json, {
        status: 200,
        headers: {
          'content-type': 'application/json',
          'x-clef-prompt-tokens': String(r.promptTokens),
          'x-clef-cached-tokens': String(r.cachedTokens),
          'x-clef-decision-ms': String(Math.round(r.totalMs)),
        },
      });
    } catch (e) {
      const code = ((e as ClefError)?.code ?? 'internal') as ErrorCode;
      if (signal?.aborted || code === 'aborted') throw abortError();
      return errorResponse(statusOf(code), (e as Error)?.message ?? String(e), code);
    }
  }

  return handle as typeof fetch;
}
