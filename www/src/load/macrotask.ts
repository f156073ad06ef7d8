// Yielding to the event loop between steps of long work (loading chunks, generating tokens).

/**
 * Yields to the event loop (a macrotask, so queued messages such as an abort are handled first).
 * One MessageChannel serves every yield: no 4 ms timer clamping, no allocation per token. Its
 * port is unref'd in Node so an idle engine does not keep the process alive.
 */
type NodePort = MessagePort & { ref?: () => void; unref?: () => void };
let yieldPort: { send: NodePort; recv: NodePort; waiting: Array<() => void> } | null = null;
export function macrotask(): Promise<void> {
  // Node: setImmediate. A MessagePort there drains up to ~1000 queued messages in one go, so timers,
  // sockets and aborts would wait that many tokens (an HTTP client's disconnect, the SDK's timeout).
  const immediate = (globalThis as { setImmediate?: (f: () => void) => unknown }).setImmediate;
  if (immediate) return new Promise((r) => immediate(r));
  if (typeof MessageChannel === 'undefined') return new Promise((r) => setTimeout(r, 0));
  if (!yieldPort) {
    const ch = new MessageChannel();
    const y = { send: ch.port2 as NodePort, recv: ch.port1 as NodePort, waiting: [] as Array<() => void> };
    y.recv.onmessage = () => {
      y.waiting.shift()?.();
      if (!y.waiting.length) y.recv.unref?.();
    };
    y.recv.unref?.();
    y.send.unref?.();
    yieldPort = y;
  }
  const y = yieldPort;
  return new Promise((resolve) => {
    y.waiting.push(resolve);
    y.recv.ref?.();
    y.send.postMessage(0);
  });
}
