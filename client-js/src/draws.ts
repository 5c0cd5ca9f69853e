/**
 * The random draws of a device's one-report encode: the same four primitives as the Python SDK's
 * `ldptel.mechanisms.draws`, so a recorded tape of draws replays to the same report in both
 * languages (the test vectors of `testvectors/`).
 *
 * - `uniform()`: a double in [0, 1) (53 random bits);
 * - `below(n)`: an integer uniform in [0, n), unbiased;
 * - `u32()`: an integer uniform in [0, 2^32);
 * - `bytes(n)`: n uniform bytes.
 *
 * Production randomness is `crypto.getRandomValues` only (`cryptoDraws`); nothing else.
 */
export interface Draws {
  uniform(): number;
  below(n: number): number;
  u32(): number;
  bytes(n: number): Uint8Array;
}

const MAX_CHUNK = 65536; // getRandomValues fills at most 64 KiB per call

function fill(out: Uint8Array): Uint8Array {
  for (let i = 0; i < out.length; i += MAX_CHUNK) {
    globalThis.crypto.getRandomValues(out.subarray(i, Math.min(out.length, i + MAX_CHUNK)));
  }
  return out;
}

/** Randomness from `crypto.getRandomValues` (Web Crypto: browsers, Node ≥ 19, workers). */
export const cryptoDraws: Draws = {
  uniform(): number {
    const w = globalThis.crypto.getRandomValues(new Uint32Array(2));
    // 53 bits: 27 from the first word, 26 from the second
    return ((w[0]! >>> 5) * 67108864 + (w[1]! >>> 6)) / 9007199254740992;
  },
  below(n: number): number {
    if (!(n >= 1) || n > 2 ** 32 || !Number.isInteger(n)) throw new RangeError(`below(${n})`);
    if (n === 1) return 0;
    // rejection sampling: unbiased
    const limit = Math.floor(2 ** 32 / n) * n;
    const w = new Uint32Array(1);
    for (;;) {
      globalThis.crypto.getRandomValues(w);
      if (w[0]! < limit) return w[0]! % n;
    }
  },
  u32(): number {
    return globalThis.crypto.getRandomValues(new Uint32Array(1))[0]!;
  },
  bytes(n: number): Uint8Array {
    return fill(new Uint8Array(n));
  },
};

export type TapeEntry = [string, ...unknown[]];

/** Plays back a recorded tape (the test vectors); a draw of another kind or past the end throws. */
export class ReplayDraws implements Draws {
  pos = 0;
  constructor(readonly tape: TapeEntry[]) {}

  private next(kind: string): TapeEntry {
    const entry = this.tape[this.pos];
    if (entry === undefined) throw new Error(`draw ${this.pos} (${kind}) is past the end of the tape`);
    if (entry[0] !== kind) throw new Error(`draw ${this.pos} is ${entry[0]}, the encode asked for ${kind}`);
    this.pos += 1;
    return entry;
  }

  get done(): boolean {
    return this.pos === this.tape.length;
  }

  uniform(): number {
    return this.next("uniform")[1] as number;
  }

  below(n: number): number {
    const e = this.next("below");
    if (e[2] !== n) throw new Error(`draw ${this.pos - 1} is below(${e[2]}), the encode asked for below(${n})`);
    return e[1] as number;
  }

  u32(): number {
    return this.next("u32")[1] as number;
  }

  bytes(n: number): Uint8Array {
    const data = fromHex(this.next("bytes")[1] as string);
    if (data.length !== n) throw new Error(`draw ${this.pos - 1} holds ${data.length} bytes, not ${n}`);
    return data;
  }
}

export function fromHex(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function toHex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}
