// Settings of the chat page, kept in localStorage.

import type { ChatSettings } from './chat.js';

export interface PageSettings extends Required<ChatSettings> {
  /** Hub base URL ('' = https://huggingface.co). */
  hubUrl: string;
  /** Repository of the model picker ('' = the default). */
  repo: string;
}

export const DEFAULTS: PageSettings = {
  // Qwen3.5's recommended sampling for direct answers; thinking uses 0.6 / 0.95.
  temperature: 0.7,
  top_p: 0.8,
  max_tokens: 1024,
  system: '',
  thinking: false,
  json: false,
  tools: '',
  hubUrl: '',
  repo: '',
};

const KEY = 'clef.settings';

export function loadSettings(): PageSettings {
  try {
    const raw = JSON.parse(localStorage.getItem(KEY) ?? '{}') as Partial<PageSettings>;
    const s = { ...DEFAULTS };
    for (const k of Object.keys(DEFAULTS) as Array<keyof PageSettings>) {
      if (raw[k] !== undefined && typeof raw[k] === typeof DEFAULTS[k]) (s as Record<string, unknown>)[k] = raw[k];
    }
    return s;
  } catch {
    return { ...DEFAULTS };
  }
}

export function saveSettings(s: PageSettings) {
  try {
    localStorage.setItem(KEY, JSON.stringify(s));
  } catch {
    /* private mode */
  }
}

export function getItem<T>(key: string): T | null {
  try {
    const v = localStorage.getItem(key);
    return v === null ? null : (JSON.parse(v) as T);
  } catch {
    return null;
  }
}

export function setItem(key: string, v: unknown) {
  try {
    if (v === null) localStorage.removeItem(key);
    else localStorage.setItem(key, JSON.stringify(v));
  } catch {
    /* private mode */
  }
}
