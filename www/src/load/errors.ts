// The loader's error types.
//
//   LoadError   a typed failure the caller sees (`code` is a protocol.ts ErrorCode); `retryable`
//               marks the few that a fresh attempt may cure (worker.ts starts over once)
//   HttpError   one failed HTTP exchange (status 0 = no usable answer: a dropped connection, a
//               stall, a timeout); the retry policy (retry.ts) decides whether to try again and
//               when (`retryAfterMs` is the server's Retry-After, when it sent one)

import type { ErrorCode } from '../protocol.js';

export class LoadError extends Error {
  constructor(public code: ErrorCode, message: string, public retryable = false) {
    super(message);
  }
}

export class HttpError extends Error {
  constructor(
    public status: number,
    message: string,
    /** The server's Retry-After, in ms from when the answer arrived (null: it sent none). */
    public retryAfterMs: number | null = null,
  ) {
    super(message);
  }
}

/** The `code` property of a thrown value (wasm errors carry one), if any. */
export function errCode(e: unknown): string | undefined {
  return (e as { code?: string })?.code;
}
