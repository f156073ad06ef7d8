// Progress of one load: the phase, bytes in place, the rate over the last half second, and the
// retry being waited for. Events are throttled to one per 100 ms (phase changes, retries and the
// end always go out).

import type { LoadPhase, LoadProgress, LoadRetry, LoadStats } from '../protocol.js';

/** JS heap in use: performance.memory (Chromium pages), process.memoryUsage (Node); 0 where neither exists (Chromium workers). */
export function jsHeap(): number {
  const m = (performance as unknown as { memory?: { usedJSHeapSize: number } }).memory;
  if (m) return m.usedJSHeapSize;
  const p = (globalThis as { process?: { memoryUsage?: () => { heapUsed: number } } }).process;
  return p?.memoryUsage ? p.memoryUsage().heapUsed : 0;
}

export function emptyStats(): LoadStats {
  return {
    seconds: 0, downloadedBytes: 0, cachedBytes: 0, downloadBytesPerSecond: 0, cacheBytesPerSecond: 0,
    retries: 0, refetchedChunks: 0, peakJsHeapBytes: jsHeap(), wasmMemoryBytes: 0, simd: '',
    phaseMs: { header: 0, allocate: 0, warm: 0, data: 0, cacheRead: 0, deliver: 0, settle: 0, build: 0 },
    pulledByWorkers: false,
    pulledBytes: 0,
    expanded: false,
    band: 0,
  };
}

const EVERY_MS = 100;
const RATE_WINDOW_MS = 500;

export class Progress {
  phase: LoadPhase = 'header';
  /** Bytes of the file in place. */
  loaded = 0;
  total = 0;
  retry: LoadRetry | null = null;
  private last = 0;
  private rate = { t: performance.now(), bytes: 0, value: 0 };

  constructor(
    private stats: LoadStats,
    private send: (p: LoadProgress) => void,
  ) {}

  /** Bytes counted by the rate of the current phase. */
  private counted(): number {
    return this.phase === 'cache' ? this.stats.cachedBytes : this.stats.downloadedBytes;
  }

  emit(force = false): void {
    const now = performance.now();
    this.stats.peakJsHeapBytes = Math.max(this.stats.peakJsHeapBytes, jsHeap());
    if (!force && now - this.last < EVERY_MS) return;
    this.last = now;
    const r = this.rate;
    if (now - r.t >= RATE_WINDOW_MS) {
      const bytes = this.counted();
      r.value = ((bytes - r.bytes) * 1000) / (now - r.t);
      r.t = now;
      r.bytes = bytes;
    }
    const bps = r.value;
    const p: LoadProgress = {
      phase: this.phase, loaded: this.loaded, total: this.total, bytesPerSecond: Math.round(bps),
      etaSeconds: bps > 0 ? (this.total - this.loaded) / bps : this.phase === 'ready' ? 0 : NaN,
      downloaded: this.stats.downloadedBytes, fromCache: this.stats.cachedBytes,
    };
    if (this.retry) p.retry = { ...this.retry };
    this.send(p);
  }

  setPhase(p: LoadPhase): void {
    if (p === this.phase) return;
    this.phase = p;
    this.rate.t = performance.now();
    this.rate.bytes = this.counted();
    this.emit(true);
  }

  /** A retry is being waited for (null: none). Always reported at once. */
  setRetry(info: LoadRetry | null): void {
    if (!info && !this.retry) return;
    this.retry = info;
    this.emit(true);
  }
}
