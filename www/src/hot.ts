// Keeping a thread awake between the stages of the postMessage exchange (shards.ts, a page that is
// not cross-origin isolated: no SharedArrayBuffer, so no Atomics to spin on).
//
// A worker whose event loop has nothing to do sleeps, and waking it when the next message comes
// costs far more than the message: on a virtual machine the halted vCPU waits for an interrupt.
// A decoded token is ~65 stages of a few ms, each one message out to every shard worker and one
// back, so the shard worker sleeps and is woken every stage, and so is the coordinator whenever a
// shard answers after it has finished its own (local) shard. `HotLoop.keep(ms)` keeps the thread's
// event loop turning for `ms` — a self-addressed MessageChannel message, posted again as long as
// the time lasts — so that the next stage's message is handled a turn after it arrives, not a
// wake-up later. Messages from the worker's port and from the channel are tasks of the same
// source, queued in arrival order (Chromium), so a stage waits at most one turn.
//
// It holds the thread's core for those ms: used only where every shard has a core of its own
// (a local shard 0 and no more shards than cores; the shared exchange's spin follows the same rule,
// exchange.ts SPIN_MS), and only in browsers (Node always has the shared exchange; its ports'
// queues are drained one port at a time, where a turning channel delays the others).

/** How long a thread keeps turning after a stage (ms): longer than the coordinator's work between stages and a shard's usual lead over the other. */
export const HOT_MS = 2;

export class HotLoop {
  private readonly port: MessagePort;
  private until = 0;
  private turning = false;

  constructor() {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => this.turn();
    (ch.port1 as { unref?: () => void }).unref?.(); // Node: an idle loop keeps no process alive
    this.port = ch.port2;
  }

  /** Keeps the event loop turning for `ms` from now. */
  keep(ms: number): void {
    this.until = performance.now() + ms;
    if (!this.turning) {
      this.turning = true;
      this.port.postMessage(null);
    }
  }

  private turn(): void {
    if (performance.now() < this.until) this.port.postMessage(null);
    else this.turning = false;
  }
}
