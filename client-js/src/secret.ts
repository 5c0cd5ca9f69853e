/**
 * A device's secret and what is derived from it with HMAC-SHA256, as
 * `ldptel.mechanisms.device_secret` (and the SHAKE-256 streams of memoized responses). Synchronous
 * (`@noble/hashes`): Web Crypto's HMAC is asynchronous and it has no SHAKE-256.
 */
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { shake256 } from "@noble/hashes/sha3.js";

export const MIN_SECRET_BYTES = 16;

export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export const ascii = (s: string): Uint8Array => new TextEncoder().encode(s);

/** HMAC-SHA256(secret, label): 32 bytes. */
export function derive(secret: Uint8Array, label: Uint8Array): Uint8Array {
  return hmac(sha256, secret, label);
}

function u64le(d: Uint8Array, at = 0): bigint {
  let v = 0n;
  for (let i = 7; i >= 0; i--) v = (v << 8n) | BigInt(d[at + i]!);
  return v;
}

/** The first 8 bytes of `derive(secret, label)` (little endian) modulo `size`. */
export function deriveIndex(secret: Uint8Array, label: Uint8Array, size: number): number {
  return Number(u64le(derive(secret, label)) % BigInt(size));
}

/** An unsigned 64-bit little-endian integer of `d` at `at`, as a double (round to nearest). */
export function u64Double(d: Uint8Array, at = 0): number {
  return Number(u64le(d, at));
}

/** The 64-bit little-endian integer at `at`, as a BigInt. */
export const u64 = u64le;

/** `count` uniforms in [0, 1) from SHAKE-256 of HMAC-SHA256(secret, label) (4 bytes each). */
export function shakeUniforms(secret: Uint8Array, label: Uint8Array, count: number): Float64Array {
  const stream = shake256(derive(secret, label), { dkLen: 4 * count });
  const view = new DataView(stream.buffer, stream.byteOffset, stream.byteLength);
  const out = new Float64Array(count);
  for (let i = 0; i < count; i++) out[i] = view.getUint32(4 * i, true) / 4294967296;
  return out;
}

/** A uniform in [0, 1) from the first 53 bits of HMAC-SHA256(secret, label) (1BitMean). */
export function hmacUniform(secret: Uint8Array, label: Uint8Array): number {
  return Number(u64le(derive(secret, label)) >> 11n) * (1 / 9007199254740992);
}

/** 8 little-endian bytes of a non-negative integer. */
export function le64(n: number): Uint8Array {
  const out = new Uint8Array(8);
  let v = BigInt(n);
  for (let i = 0; i < 8; i++) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return out;
}
