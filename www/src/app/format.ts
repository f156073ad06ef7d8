// Numbers for people: sizes, rates, durations.

/** Bytes in binary units labelled the usual way (the model card's "GB" are GiB). */
export function fmtBytes(n: number, digits?: number): string {
  if (!Number.isFinite(n) || n < 0) return '–';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  const d = digits ?? (i === 0 ? 0 : n >= 100 ? 0 : n >= 10 ? 1 : 2);
  return `${n.toFixed(d)} ${units[i]}`;
}

export function fmtRate(bytesPerSecond: number): string {
  return bytesPerSecond > 0 ? `${fmtBytes(bytesPerSecond, bytesPerSecond >= 10 * 1024 * 1024 ? 0 : 1)}/s` : '–';
}

/** "12 s", "3 min", "1 h 05 min". */
export function fmtDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '';
  if (seconds < 1) return '<1 s';
  if (seconds < 60) return `${Math.round(seconds)} s`;
  const m = Math.round(seconds / 60);
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min`;
}

export function fmtMs(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

export function fmtPercent(x: number): string {
  return `${Math.floor(Math.max(0, Math.min(1, x)) * 100)}%`;
}
