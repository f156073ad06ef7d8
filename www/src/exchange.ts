// The shared-memory exchange between the engine worker and its shard workers: a stage's input and
// every shard's output through one SharedArrayBuffer, handed over with Atomics.wait / notify
// instead of a postMessage round trip per shard per stage. Available where SharedArrayBuffer is:
// Node, and pages that are cross-origin isolated (COOP + COEP); elsewhere shards.ts exchanges
// by postMessage, the same stages in the same order.
//
//   SAB   ctrl  Int32 × CTRL_INTS   SEQ (bumped once per command), CMD, the stage (kind, layer,
//                                   pos, input length), DONE (shards finished with this command),
//                                   per shard: output length, compute µs, failed, and its share of
//                                   a balanced stage (has one, first piece, end, separate)
//         data  Float32             input [0, cap) | shard 0's output [cap, cap + outCap) | shard 1's …
//
// A drive (one pass of the model) runs in serve mode: the coordinator posts `serve` to every shard,
// which then blocks in a loop — wait for SEQ to move, run the stage, write its output, add one to
// DONE — until the command is STOP. While serving, a shard reads no messages: state changes go
// before (`ops`), and a failure is flagged in `ctrl` (and posted as an error). The coordinator
// waits for DONE with Atomics.wait in slices, yielding between them so that a shard that died is
// noticed (its worker's error event).
//
// Shard 0 may be local (computed by the engine worker itself, shards.ts `localShard`): it does not
// serve; the coordinator runs its stage between waking the others and waiting for them, so N
// shards keep N threads busy, not N + 1.

import type { ExchangeBuffer } from './protocol.js';

/** Commands (ctrl[CMD]). */
const STAGE = 1;
const STOP = 2;

/** ctrl indexes. */
const SEQ = 0;
const CMD = 1;
const KIND = 2;
const LAYER = 3;
const POS = 4;
const XLEN = 5;
const DONE = 6;
/**
 * Per shard i, from OUT + PER·i: output length, compute µs, failed, then its share of the stage
 * (src/balance.rs): whether it has one (else its even share), first piece, end piece, separate.
 */
const OUT = 8;
const PER = 7;
const SHARE = 3;
const MAX_SHARDS = 16;
const CTRL_INTS = OUT + PER * MAX_SHARDS;
const CTRL_BYTES = CTRL_INTS * 4;

/** How long one blocking wait lasts before the coordinator yields to its event loop (ms). */
const WAIT_SLICE_MS = 100;

/**
 * How long a waiting thread first spins on the control word before it blocks (ms), when shard 0
 * is local. Blocking and being woken costs tens to hundreds of µs (on a virtual machine a halted
 * core waits for an interrupt) and the next command usually comes sooner: the shards finish a
 * stage within a few hundred µs of each other, and the coordinator's work between stages is ~70 µs.
 * With a local shard N shards are N threads, so on at least N cores a spinning one holds no core
 * another needs; with every shard in a worker of its own (N + 1 threads), or more shards than
 * cores, nothing spins (shards.ts `serve` decides).
 */
export const SPIN_MS = 0.5;

/** Whether this runtime can use the shared exchange (SharedArrayBuffer and a blocking Atomics.wait). */
export function sharedExchangeAvailable(): boolean {
  const g = globalThis as { crossOriginIsolated?: boolean; process?: { versions?: { node?: string } } };
  return typeof SharedArrayBuffer !== 'undefined' && typeof Atomics !== 'undefined' && (!!g.process?.versions?.node || g.crossOriginIsolated === true);
}

/** A SharedArrayBuffer laid out for `shards` shards, an input of `cap` floats and outputs of `outCap` floats. */
export function exchangeBuffer(shards: number, cap: number, outCap: number, spinMs = 0): ExchangeBuffer {
  if (shards > MAX_SHARDS) throw new Error(`the shared exchange serves at most ${MAX_SHARDS} shards`);
  return { sab: new SharedArrayBuffer(CTRL_BYTES + 4 * (cap + shards * outCap)), shards, cap, outCap, spinMs };
}

/** Spins until `ctrl[at]` is no longer `value` or `ms` have passed; whether it moved. */
function spin(ctrl: Int32Array, at: number, value: number, ms: number): boolean {
  if (ms <= 0) return false;
  const until = performance.now() + ms;
  do {
    if (Atomics.load(ctrl, at) !== value) return true;
  } while (performance.now() < until);
  return false;
}

/** One stage's result from one shard (a view into the shared buffer: valid until the next stage). */
export interface StageOutput {
  out: Float32Array;
  ms: number;
}

/**
 * A stage computed in the coordinator's thread (a local shard 0); `share`: [start, end, separate]
 * of a balanced stage (absent: the even share).
 */
export type LocalStage = (kind: number, layer: number, pos: number, x: Float32Array, share?: Uint32Array) => StageOutput;

/** The coordinator's side. */
export class SharedExchange {
  private ctrl: Int32Array;
  private data: Float32Array;
  /** Shards that serve (all but a local shard 0). */
  private serving: number;

  constructor(
    readonly buf: ExchangeBuffer,
    /** Shard 0's stage when it is computed here (it then does not serve). */
    private local: LocalStage | null = null,
  ) {
    this.ctrl = new Int32Array(buf.sab, 0, CTRL_INTS);
    this.data = new Float32Array(buf.sab, CTRL_BYTES);
    this.serving = buf.shards - (local ? 1 : 0);
  }

  /** Whether a stage with `xLen` input floats and outputs of up to `outLen` floats fits. */
  fits(xLen: number, outLen: number): boolean {
    return xLen <= this.buf.cap && outLen <= this.buf.outCap;
  }

  /** The sequence number the shards start serving from (sent with `serve`). */
  get seq(): number {
    return Atomics.load(this.ctrl, SEQ);
  }

  /**
   * Runs one stage on every shard; `failed(i)` says why shard i gave up (its error message has been
   * posted), `dead()` whether the pool failed meanwhile (checked between wait slices).
   */
  async run(kind: number, layer: number, pos: number, x: Float32Array, shares: Array<Uint32Array | undefined>, dead: () => Error | null): Promise<StageOutput[]> {
    const { ctrl, data, buf } = this;
    data.set(x, 0);
    ctrl[KIND] = kind;
    ctrl[LAYER] = layer;
    ctrl[POS] = pos;
    ctrl[XLEN] = x.length;
    for (let i = 0; i < buf.shards; i++) {
      const at = OUT + PER * i + SHARE;
      const s = shares[i];
      ctrl[at] = s ? 1 : 0;
      if (s) ctrl.set(s, at + 1);
    }
    this.issue(STAGE);
    const outs: StageOutput[] = [];
    if (this.local) {
      // Shard 0's part while the others compute theirs; when it throws, they finish first (the
      // exchange is not reused under them).
      try {
        outs.push(this.local(kind, layer, pos, x, shares[0]));
      } catch (e) {
        await this.wait(dead).catch(() => {});
        throw e;
      }
    }
    await this.wait(dead);
    for (let i = outs.length; i < buf.shards; i++) {
      if (ctrl[OUT + PER * i + 2]) {
        // The shard posted its error as it gave up: let it arrive (it fails the pool), then throw it.
        for (let k = 0; k < 100 && !dead(); k++) await new Promise((r) => setTimeout(r, 1));
        throw dead() ?? new Error(`shard worker ${i + 1} failed a stage`);
      }
      const at = buf.cap + i * buf.outCap;
      outs.push({ out: data.subarray(at, at + ctrl[OUT + PER * i]), ms: ctrl[OUT + PER * i + 1] / 1000 });
    }
    return outs;
  }

  /** Ends serve mode: every shard is back to reading messages when this resolves. */
  stop(dead: () => Error | null): Promise<void> {
    return this.command(STOP, dead);
  }

  private command(cmd: number, dead: () => Error | null): Promise<void> {
    this.issue(cmd);
    return this.wait(dead);
  }

  /** Wakes the serving shards with command `cmd`. */
  private issue(cmd: number): void {
    const { ctrl } = this;
    Atomics.store(ctrl, DONE, 0);
    ctrl[CMD] = cmd;
    Atomics.add(ctrl, SEQ, 1);
    Atomics.notify(ctrl, SEQ);
  }

  /** Until every serving shard is done with the last command. */
  private async wait(dead: () => Error | null): Promise<void> {
    const { ctrl } = this;
    for (;;) {
      const done = Atomics.load(ctrl, DONE);
      if (done >= this.serving) return;
      if (spin(ctrl, DONE, done, this.buf.spinMs)) continue;
      if (Atomics.wait(ctrl, DONE, done, WAIT_SLICE_MS) === 'timed-out') {
        // Let the event loop run: a shard worker's death arrives as an event.
        await new Promise((r) => setTimeout(r, 0));
        const e = dead();
        if (e) throw e;
      }
    }
  }
}

/** A shard's side: serves stages until STOP. `run` computes a stage; a throw is flagged and reported. */
export function serve(
  buf: ExchangeBuffer,
  index: number,
  seq: number,
  run: (kind: number, layer: number, pos: number, x: Float32Array, share?: Uint32Array) => { out: Float32Array; ms: number },
  report: (e: unknown) => void,
): void {
  const ctrl = new Int32Array(buf.sab, 0, CTRL_INTS);
  const data = new Float32Array(buf.sab, CTRL_BYTES);
  const at = buf.cap + index * buf.outCap;
  for (;;) {
    // Wait until SEQ really moves: a wake-up is no command. The coordinator bumps SEQ, then notifies;
    // descheduled in between, its notify can arrive after this shard has already seen the new SEQ,
    // run that command and come back to wait — and running it again would count it twice in DONE
    // (the coordinator would then read a shard's output before it is written).
    spin(ctrl, SEQ, seq, buf.spinMs);
    while (Atomics.load(ctrl, SEQ) === seq) Atomics.wait(ctrl, SEQ, seq);
    seq = Atomics.load(ctrl, SEQ);
    if (ctrl[CMD] === STOP) {
      finish(ctrl);
      return;
    }
    const mine = OUT + PER * index;
    try {
      const share = ctrl[mine + SHARE] ? Uint32Array.from(ctrl.subarray(mine + SHARE + 1, mine + SHARE + 4)) : undefined;
      const r = run(ctrl[KIND], ctrl[LAYER], ctrl[POS], data.subarray(0, ctrl[XLEN]), share);
      if (r.out.length > buf.outCap) throw new Error(`a stage output of ${r.out.length} floats does not fit the exchange (${buf.outCap})`);
      data.set(r.out, at);
      ctrl[mine] = r.out.length;
      ctrl[mine + 1] = Math.round(r.ms * 1000);
      ctrl[mine + 2] = 0;
    } catch (e) {
      ctrl[mine + 2] = 1;
      report(e);
      finish(ctrl);
      return; // back to messages; the pool fails on the report
    }
    finish(ctrl);
  }
}

function finish(ctrl: Int32Array): void {
  Atomics.add(ctrl, DONE, 1);
  Atomics.notify(ctrl, DONE);
}
