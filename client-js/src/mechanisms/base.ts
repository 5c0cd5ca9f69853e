/** What every mechanism shares: checks of parameters and values, the report's columns, GRR's
 * perturbation and the Bernoulli rows, as `ldptel.mechanisms.base` / `grr` / `unary`. */
import type { Draws } from "../draws.js";

export const MAX_EPSILON = 10.0;
/** The floor of every ε (as `ldptel.mechanisms.base.MIN_EPSILON`: below, exp(ε) − 1 loses its
 * precision and no estimate is usable). */
export const MIN_EPSILON = 0.01;

/** The payload of a `ReportBatch` a mechanism fills (the `oneof payload` of reports.proto). */
export type PayloadName = "grr" | "unary" | "olh" | "hadamard" | "rappor" | "heavy_hitters" | "range" | "numeric";

export type Cell = number | boolean | Uint8Array;

/** One report: its payload and, per column, the report's entries (one each, or none for a column
 * the mechanism does not send). Reports of one campaign concatenate column by column. */
export interface Report {
  payload: PayloadName;
  columns: Record<string, Cell[]>;
}

/** A device-side ε-LDP randomizer built from a public campaign config. */
export interface Mechanism {
  readonly name: string;
  readonly payload: PayloadName;
  /** ε of one report (ε₁). */
  readonly epsilon: number;
  /** Memoized mechanisms (and RAPPOR): what all reports of one value reveal together. */
  readonly epsilonInf?: number;
  /** Memoized mechanisms: the bound over a device's life when its value changes. */
  readonly epsilonLifetime?: number;
  /** Derived parameters (for the test vectors and `describe`). */
  readonly params: Record<string, unknown>;
  /** Randomize one value; a bad value throws `ConfigError`-free `TypeError`/`RangeError`. */
  encode(value: unknown, draws: Draws): Report;
}

/** A malformed campaign config (the Python SDK's ValueError / KeyError while building it). */
export class InvalidConfig extends Error {
  override name = "InvalidConfig";
}

export function isNumber(v: unknown): v is number {
  return typeof v === "number";
}

export function checkEpsilon(v: unknown, name = "epsilon"): number {
  if (!isNumber(v)) throw new InvalidConfig(`${name} must be a number, got ${typeof v}`);
  if (!Number.isFinite(v) || v < MIN_EPSILON || v > MAX_EPSILON) {
    throw new InvalidConfig(`${name} must satisfy ${MIN_EPSILON} <= ${name} <= ${MAX_EPSILON}, got ${v}`);
  }
  return v;
}

export function checkInt(v: unknown, name: string, low: number, high?: number): number {
  if (!isNumber(v) || !Number.isInteger(v)) throw new InvalidConfig(`${name} must be an integer, got ${String(v)}`);
  if (v < low || (high !== undefined && v > high)) {
    throw new InvalidConfig(`${name} must be ${high === undefined ? `>= ${low}` : `in [${low}, ${high}]`}, got ${v}`);
  }
  return v;
}

/** `cfg[key]` that must be present (Python's `cfg[key]`: KeyError). */
export function need(cfg: Record<string, unknown>, key: string): unknown {
  if (!(key in cfg)) throw new InvalidConfig(`missing ${key}`);
  return cfg[key];
}

/** `cfg.get(key, dflt)`: the default only when the key is absent (a null stays null). */
export function get(cfg: Record<string, unknown>, key: string, dflt: unknown = null): unknown {
  return key in cfg && cfg[key] !== undefined ? cfg[key] : dflt;
}

/** Python's truthiness of a JSON value. */
export function truthy(v: unknown): boolean {
  if (Array.isArray(v)) return v.length > 0;
  if (v !== null && typeof v === "object") return Object.keys(v).length > 0;
  return Boolean(v);
}

export function checkValue(value: unknown, d: number): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new TypeError(`value must be an integer in [0, ${d}), got ${String(value)}`);
  }
  if (value < 0 || value >= d) throw new RangeError(`value must be in [0, ${d}), got ${value}`);
  return value;
}

export function bitLength(x: number): number {
  return x <= 0 ? 0 : 32 - Math.clz32(x); // x < 2^32 here
}

/** Python's round(): half to even. */
export function roundHalfEven(x: number): number {
  const f = Math.floor(x);
  const diff = x - f;
  if (diff > 0.5) return f + 1;
  if (diff < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** Keep `value` w.p. `pKeep` (one uniform), else `below(size − 1)` among the others. */
export function perturbOne(value: number, size: number, pKeep: number, draws: Draws): number {
  if (draws.uniform() < pKeep) return value;
  const other = draws.below(size - 1);
  return other + (other >= value ? 1 : 0);
}

/** `size` Bernoulli(`prob`) bits: a byte per bit (`draws.bytes(size)`), each tie broken by one
 * uniform, in bit order. */
export function bernoulliRow(prob: number, size: number, draws: Draws): Uint8Array {
  const scaled = prob * 256.0;
  const threshold = Math.trunc(scaled);
  const raw = draws.bytes(size);
  const bits = new Uint8Array(size);
  for (let i = 0; i < size; i++) bits[i] = raw[i]! < threshold ? 1 : 0;
  for (let i = 0; i < size; i++) {
    if (raw[i] === threshold) bits[i] = draws.uniform() < scaled - threshold ? 1 : 0;
  }
  return bits;
}

/** numpy's packbits of a 0/1 array: MSB first, zero padding. */
export function packBits(bits: ArrayLike<number | boolean>): Uint8Array {
  const out = new Uint8Array(Math.ceil(bits.length / 8));
  for (let i = 0; i < bits.length; i++) if (bits[i]) out[i >> 3]! |= 0x80 >> (i & 7);
  return out;
}

export function grrKeep(epsilon: number, k: number): number {
  const e = Math.exp(epsilon);
  return e / (e + k - 1);
}

/** PureMechanism.variance_star: q(1 − q)/(p − q)². */
export function varianceStar(p: number, q: number): number {
  return (q * (1 - q)) / (p - q) ** 2;
}
