// Error codes of the runtime → what a person should read, and what they can do about it.

import type { ErrorCode } from '../protocol.js';

export interface Humane {
  title: string;
  /** What to do next. */
  hint: string;
  /** The runtime's own message (shown under "Details"). */
  detail: string;
  code: string;
}

const TEXT: Record<ErrorCode, [string, string]> = {
  out_of_memory: ["This model is too big for this browser tab.", 'Pick a smaller quant — the list marks the ones that fit.'],
  not_found: ["The model file wasn't found.", 'Check the model name and the Hub address in Settings.'],
  network: ['The download was interrupted.', "Check your connection and press Resume — what's downloaded so far is kept."],
  offline: ["You're offline and this model isn't fully saved on this device.", 'Connect to the internet to finish the download, then it works offline.'],
  integrity: ["The downloaded file didn't match its checksum.", 'Delete it from "On this device" and download it again.'],
  quota: ['Not enough storage space for this model.', 'Delete other cached models or free disk space, then try again.'],
  cache: ['The model cache is busy.', 'Is the model loading in another tab? Close it, then try again.'],
  bad_gguf: ["That file isn't a valid GGUF model.", 'Use a .gguf file of Clef-Flash or another Qwen3.5 model.'],
  wrong_architecture: ["That model can't run here.", 'Only Qwen3.5 (qwen35) GGUF files, such as Clef-Flash, are supported.'],
  unsupported_type: ['This file uses a format this build cannot run.', 'Try another quant of the model.'],
  context_full: ['The conversation is longer than the model can remember.', 'Start a new chat, or shorten your message.'],
  template: ["The model's chat template failed.", 'Try a new chat; if it keeps happening, try another file.'],
  worker_crashed: ['The engine stopped unexpectedly.', 'Load the model again (it loads from this device, no download).'],
  bad_request: ['That request was not accepted.', 'Check the values in Settings.'],
  bad_schema: ['The requested output format cannot be enforced.', 'Simplify the JSON schema or the tool definitions.'],
  not_loaded: ['No model is loaded.', 'Pick a model first.'],
  aborted: ['Stopped.', ''],
  malformed_request: ["The decision request isn't valid JSON.", 'Check the state and the questions.'],
  invalid_decision: ["The decision request isn't valid.", 'The details say which question or field to fix.'],
  request_too_large: ['The decision request is too large.', 'Shorten the state, or ask fewer questions at once.'],
  not_a_decision_model: ["This model can't make decisions by itself.", 'Load its decision head (joint_head.safetensors), or use a Clef GGUF with the head inside.'],
  not_supported: ["Decisions can't run with this setup.", 'Load the model again, or try another model file.'],
  bad_head: ["The decision head couldn't be used.", 'Check that the head belongs to this model, then load it again.'],
  evaluation_failed: ['The model could not evaluate this decision.', 'Rephrase the questions and options, then try again.'],
  internal: ['Something went wrong inside clef-web.', 'Reload the page and try again; if it keeps happening, please report it.'],
};

export function humane(e: unknown): Humane {
  const code = ((e as { code?: string })?.code ?? 'internal') as ErrorCode;
  const detail = (e as Error)?.message ?? String(e);
  const [title, hint] = TEXT[code] ?? TEXT.internal;
  // The runtime names a smaller quant that would fit: surface it.
  let h = hint;
  if (code === 'out_of_memory') {
    const m = /e\.g\. '?([^'\s]+:[\w]+)'?/.exec(detail);
    if (m) h = `Try a smaller quant, such as ${m[1].split(':').pop()}.`;
  }
  return { title, hint: h, detail, code };
}
