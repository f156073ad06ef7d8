// OpenAI's HTTP API, answered locally: a `fetch` function for the official `openai` package (or any
// client that takes a custom fetch), and the request handler behind `node www/cli.mjs serve`.
//
//   import OpenAI from 'openai';
//   const client = new OpenAI({ baseURL: 'http://clef.local/v1', apiKey: 'local', dangerouslyAllowBrowser: true,
//                               fetch: createOpenAIFetch(engine) });
//
// Routes (under any base path, e.g. /v1):
//   POST …/chat/completions   engine.chat.completions.create (SSE stream when `stream: true`)
//   POST …/completions        engine.completions.create
//   GET  …/models, …/models/{id}
// Streams are Server-Sent Events in OpenAI's wire format: `data: {chunk}\n\n` … `data: [DONE]\n\n`;
// usage comes on a last chunk with no choices when `stream_options.include_usage` is set (and
// only then). Errors are OpenAI's `{error: {message, type, param, code}}` with the engine's typed
// code and an HTTP status by code. The request's `signal` (the SDK's timeout, the caller's abort)
// and a reader cancelling the stream both stop the generation.

import type { ClefEngine, ClefError } from './index.js';
import type { ErrorCode } from './protocol.js';

/** HTTP status for each error code (client errors 4xx, the engine's failures 5xx). */
const STATUS: Partial<Record<ErrorCode, number>> = {
  bad_request: 400,
  bad_schema: 400,
  context_full: 400,
  template: 400,
  not_found: 404,
  not_loaded: 503,
  worker_crashed: 503,
  out_of_memory: 507,
};

const JSON_HEADERS = { 'content-type': 'application/json' };

function errorBody(status: number, message: string, code: string | null, param: string | null = null) {
  const type = status >= 500 ? 'server_error' : status === 404 ? 'not_found_error' : 'invalid_request_error';
  return { error: { message, type, param, code } };
}

function jsonResponse(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

function errorResponse(e: unknown): Response {
  const code = (e as ClefError)?.code ?? 'internal';
  const status = STATUS[code as ErrorCode] ?? 500;
  return jsonResponse(status, errorBody(status, (e as Error)?.message ?? String(e), code));
}

function abortError(): DOMException {
  return new DOMException('This operation was aborted', 'AbortError');
}

/** Options of `createOpenAIFetch`. */
export interface OpenAIFetchOptions {
  /** The model id `GET /models` lists (default: the name the engine was loaded with). */
  modelId?: string;
}

/** Server-Sent Events of a stream of chunks, in OpenAI's format. */
function sseResponse(
  stream: AsyncIterable<Record<string, unknown>> & { abort(): void },
  includeUsage: boolean,
  signal: AbortSignal | undefined,
): Response {
  const enc = new TextEncoder();
  const it = stream[Symbol.asyncIterator]();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const send = (data: unknown) => controller.enqueue(enc.encode(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`));
      try {
        const r = await it.next();
        if (r.done) {
          send('[DONE]');
          controller.close();
          return;
        }
        const chunk = r.value;
        const usage = chunk.usage;
        if (usage !== undefined) {
          delete chunk.usage;
          send(chunk);
          if (includeUsage) send({ ...chunk, choices: [], usage });
        } else send(chunk);
      } catch (e) {
        if (signal?.aborted || (e as Error)?.name === 'AbortError') {
          controller.error(abortError());
          return;
        }
        const code = (e as ClefError)?.code ?? 'internal';
        const status = STATUS[code as ErrorCode] ?? 500;
        send(errorBody(status, (e as Error)?.message ?? String(e), code));
        controller.close();
      }
    },
    cancel() {
      stream.abort();
    },
  });
  return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } });
}

/**
 * A `fetch` that answers OpenAI's API from `engine`, in the page (or in Node), without a server.
 * Requests to other paths answer 404 in OpenAI's error format.
 */
export function createOpenAIFetch(engine: ClefEngine, options: OpenAIFetchOptions = {}): typeof fetch {
  const modelId = () => options.modelId ?? engine.model;
  const created = Math.floor(Date.now() / 1000);
  const modelObject = () => ({ id: modelId(), object: 'model', created, owned_by: 'clef-web' });

  async function handle(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const req = input instanceof Request ? input : null;
    const url = new URL(req ? req.url : String(input), 'http://localhost/');
    const method = (init?.method ?? req?.method ?? 'GET').toUpperCase();
    const signal = init?.signal ?? req?.signal ?? undefined;
    if (signal?.aborted) throw abortError();
    const path = url.pathname.replace(/\/+$/, '');

    const route = /\/chat\/completions$/.test(path) ? 'chat' : /\/completions$/.test(path) ? 'completions' : /\/models(\/[^/]+)?$/.test(path) ? 'models' : null;
    if (!route) return jsonResponse(404, errorBody(404, `no route ${method} ${url.pathname}`, 'not_found'));
    if (route === 'models') {
      if (method !== 'GET') return jsonResponse(405, errorBody(405, `${method} is not allowed here (use GET)`, 'method_not_allowed'));
      const id = /\/models\/([^/]+)$/.exec(path)?.[1];
      if (id === undefined) return jsonResponse(200, { object: 'list', data: [modelObject()] });
      return decodeURIComponent(id) === modelId() ? jsonResponse(200, modelObject()) : jsonResponse(404, errorBody(404, `no model '${decodeURIComponent(id)}'`, 'model_not_found'));
    }
    if (method !== 'POST') return jsonResponse(405, errorBody(405, `${method} is not allowed here (use POST)`, 'method_not_allowed'));

    let body: Record<string, unknown>;
    try {
      const text = init?.body !== undefined && init.body !== null ? await new Response(init.body).text() : req ? await req.text() : '';
      body = JSON.parse(text);
      if (!body || typeof body !== 'object' || Array.isArray(body)) throw new Error('the body must be a JSON object');
    } catch (e) {
      return jsonResponse(400, errorBody(400, `the request body is not valid JSON: ${(e as Error).message}`, 'bad_request'));
    }
    const stream = body.stream === true;
    const includeUsage = !!(body.stream_options as { include_usage?: boolean } | undefined)?.include_usage;
    const params = { ...body, signal } as never;
    try {
      const result = route === 'chat' ? await engine.chat.completions.create(params) : await engine.completions.create(params);
      if (!stream) return jsonResponse(200, result);
      return sseResponse(result as unknown as AsyncIterable<Record<string, unknown>> & { abort(): void }, includeUsage, signal);
    } catch (e) {
      if (signal?.aborted || (e as ClefError)?.code === 'aborted') throw abortError();
      return errorResponse(e);
    }
  }

  return handle as typeof fetch;
}
