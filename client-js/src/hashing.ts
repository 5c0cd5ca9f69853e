/**
 * xxh32 and the OLH hash family, bit for bit as `ldptel.mechanisms.hashing` (checked by the test
 * vectors against the Python `xxhash` library).
 *
 * H_seed(x) = floor(⌊((a·x + b) mod 2^64) / 2^32⌋ · g / 2^32) with
 * a = (xxh32(seed, A_HI)·2^32 + xxh32(seed, A_LO)) | 1, b = xxh32(seed, B_HI)·2^32 + xxh32(seed, B_LO).
 */
const P1 = 0x9e3779b1;
const P2 = 0x85ebca77;
const P3 = 0xc2b2ae3d;
const P4 = 0x27d4eb2f;
const P5 = 0x165667b1;
export const SEED_A_HI = 0x5eed0a1;
export const SEED_A_LO = 0x5eed0a0;
export const SEED_B_HI = 0x5eed0b1;
export const SEED_B_LO = 0x5eed0b0;

const rotl = (x: number, r: number): number => (x << r) | (x >>> (32 - r));
const mul = Math.imul;

function word(d: Uint8Array, i: number): number {
  return (d[i]! | (d[i + 1]! << 8) | (d[i + 2]! << 16) | (d[i + 3]! << 24)) >>> 0;
}

/** xxh32 of `data` with `seed` (uint32). */
export function xxh32(data: Uint8Array, seed = 0): number {
  const n = data.length;
  let h: number;
  let i = 0;
  if (n >= 16) {
    let v1 = (seed + P1 + P2) | 0;
    let v2 = (seed + P2) | 0;
    let v3 = seed | 0;
    let v4 = (seed - P1) | 0;
    const limit = n - 16;
    while (i <= limit) {
      v1 = mul(rotl((v1 + mul(word(data, i), P2)) | 0, 13), P1);
      v2 = mul(rotl((v2 + mul(word(data, i + 4), P2)) | 0, 13), P1);
      v3 = mul(rotl((v3 + mul(word(data, i + 8), P2)) | 0, 13), P1);
      v4 = mul(rotl((v4 + mul(word(data, i + 12), P2)) | 0, 13), P1);
      i += 16;
    }
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) | 0;
  } else {
    h = (seed + P5) | 0;
  }
  h = (h + n) | 0;
  while (i + 4 <= n) {
    h = mul(rotl((h + mul(word(data, i), P3)) | 0, 17), P4);
    i += 4;
  }
  while (i < n) {
    h = mul(rotl((h + mul(data[i]!, P5)) | 0, 11), P1);
    i += 1;
  }
  h ^= h >>> 15;
  h = mul(h, P2);
  h ^= h >>> 13;
  h = mul(h, P3);
  h ^= h >>> 16;
  return h >>> 0;
}

/** xxh32 of a uint32 as 4 little-endian bytes. */
export function xxh32Int(value: number, seed = 0): number {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, value >>> 0, true);
  return xxh32(b, seed);
}

const M64 = (1n << 64n) - 1n;

/** (a, b) of the OLH hash for a uint32 seed, as BigInts. */
export function seedParams(seed: number): [bigint, bigint] {
  const a = (BigInt(xxh32Int(seed, SEED_A_HI)) << 32n) | BigInt(xxh32Int(seed, SEED_A_LO)) | 1n;
  const b = (BigInt(xxh32Int(seed, SEED_B_HI)) << 32n) | BigInt(xxh32Int(seed, SEED_B_LO));
  return [a, b];
}

/** H_seed(key) in [0, g). */
export function olhHash(seed: number, key: number, g: number): number {
  const [a, b] = seedParams(seed);
  const hi = ((a * BigInt(key >>> 0) + b) & M64) >> 32n;
  return Number((hi * BigInt(g)) >> 32n);
}

export function popcount(x: number): number {
  x = x - ((x >>> 1) & 0x55555555);
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return mul((x + (x >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24;
}

export const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);
