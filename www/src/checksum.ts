// A fast streaming checksum (two 32-bit multiply–xor lanes over little-endian 32-bit words, plus
// the length) for the OPFS cache: every chunk's checksum is recorded when it is written and
// checked when it is read back, so a truncated or bit-flipped cache chunk is found and fetched
// again. Each step is a bijection of the state for a fixed word, so any single changed word is
// always detected. Not a cryptographic hash: the file itself is verified with sha256.
// ~2–3 GB/s in V8 on word-aligned data (sha256 in wasm: ~0.23 GB/s).

export class Checksum {
  private a = 0x811c9dc5 | 0;
  private b = 0x1b873593 | 0;
  private pend = 0;
  private pendN = 0;
  private n = 0;

  update(u8: Uint8Array): this {
    const len = u8.length;
    let i = 0;
    let a = this.a;
    let b = this.b;
    while (this.pendN !== 0 && i < len) {
      this.pend |= u8[i++] << (8 * this.pendN);
      if (++this.pendN === 4) {
        const w = this.pend;
        a = Math.imul(a ^ w, 0x01000193);
        b = Math.imul(((b << 5) | (b >>> 27)) ^ w, 0x5bd1e995);
        this.pend = 0;
        this.pendN = 0;
      }
    }
    const nWords = (len - i) >>> 2;
    if (nWords > 0) {
      const off = u8.byteOffset + i;
      if ((off & 3) === 0) {
        const w32 = new Uint32Array(u8.buffer, off, nWords);
        for (let k = 0; k < nWords; k++) {
          const w = w32[k];
          a = Math.imul(a ^ w, 0x01000193);
          b = Math.imul(((b << 5) | (b >>> 27)) ^ w, 0x5bd1e995);
        }
      } else {
        const dv = new DataView(u8.buffer, off, nWords * 4);
        for (let k = 0; k < nWords; k++) {
          const w = dv.getUint32(k * 4, true);
          a = Math.imul(a ^ w, 0x01000193);
          b = Math.imul(((b << 5) | (b >>> 27)) ^ w, 0x5bd1e995);
        }
      }
      i += nWords * 4;
    }
    this.a = a;
    this.b = b;
    while (i < len) {
      this.pend |= u8[i++] << (8 * this.pendN);
      this.pendN++;
    }
    this.n += len;
    return this;
  }

  /** 16 hex digits + ':' + length. */
  digest(): string {
    let a = this.a;
    let b = this.b;
    if (this.pendN) {
      const w = this.pend ^ (this.pendN << 30);
      a = Math.imul(a ^ w, 0x01000193);
      b = Math.imul(((b << 5) | (b >>> 27)) ^ w, 0x5bd1e995);
    }
    const hex = (x: number) => (x >>> 0).toString(16).padStart(8, '0');
    return `${hex(a)}${hex(b)}:${this.n}`;
  }
}
