// Verification: the sha256 of the whole file, fed in file order as chunks complete.
//
// Chunks complete out of order (several in flight); the hash needs file order. `FileHasher`
// keeps a cursor on the chunk list: each completed chunk moves it over every completed chunk that
// follows, hashing their bytes where they lie (wasm memory by address, no copy; JS buffers
// directly, then dropped). Without an expected sha256 it only frees the gap buffers.

import { Sha256 } from '../../pkg/clef_web.js';
import { type Placement, hashParts } from './placement.js';
import type { Chunk } from './plan.js';

export class FileHasher {
  private sha: Sha256 | null;
  /** Chunks before this index are hashed (and their gap buffers released). */
  next = 0;

  constructor(
    private chunks: Chunk[],
    private placement: Placement,
    /** The header bytes [0, dataStart) that precede the first chunk. */
    header: Uint8Array,
    hashing: boolean,
  ) {
    this.sha = hashing ? new Sha256() : null;
    this.sha?.update(header);
  }

  /** Hashes every completed chunk at the cursor (call after marking a chunk done). */
  advance(): void {
    const { chunks, placement, sha } = this;
    while (this.next < chunks.length && chunks[this.next].done) {
      const c = chunks[this.next++];
      if (sha) hashParts(placement, c.parts, sha);
      for (const p of c.parts) placement.release(p);
    }
  }

  /** The hex digest (every chunk must be hashed); frees the hasher. Null when not hashing. */
  finish(): string | null {
    if (!this.sha) return null;
    const d = this.sha.hex();
    this.sha.free();
    this.sha = null;
    return d;
  }

  /** Frees the hasher without a digest (a failed pass). */
  dispose(): void {
    this.sha?.free();
    this.sha = null;
  }
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
