/** Heavy hitters' device side (`ldptel.mechanisms.heavy_hitters`): a prefix of the string at the
 * device's level, hashed with its pool seed (OLH over g = a power of two). */
import type { Draws } from "../draws.js";
import { olhHash, utf8, xxh32, xxh32Int } from "../hashing.js";
import { ascii, deriveIndex } from "../secret.js";
import {
  checkEpsilon,
  checkInt,
  get,
  grrKeep,
  InvalidConfig,
  type Mechanism,
  perturbOne,
  type Report,
  varianceStar,
} from "./base.js";

// a UTF-16 surrogate without its partner: a string that is not Unicode text, so not UTF-8 encodable
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
export const MAX_LEVEL_BITS = 16;
export const MAX_G = 256;
export const DEFAULT_POOL = 2048;
export const MAX_POOL = 1 << 16;
export const MAX_STATE_CELLS = 2 ** 23;
export const DECODE_BUDGET = 2 ** 29;
export const MAX_DECODE_LOOKUPS = 2 ** 31;

export function poolHashRange(epsilon: number): number {
  let best = Infinity,
    bestG = 2;
  for (let t = 1; t < 9; t++) {
    const g = 2 ** t;
    const v = varianceStar(grrKeep(epsilon, g), 1 / g);
    if (v < best) {
      best = v;
      bestG = g;
    }
  }
  return bestG;
}

export function levelBits(totalBits: number, levels: number): number[] {
  const out: number[] = [];
  for (let j = 1; j <= levels; j++) out.push(Math.ceil((j * totalBits) / levels));
  return out;
}

export function walkCandidates(maxLength: number, levels: number, width: number): number {
  const bits = levelBits(8 * maxLength, levels);
  let m = 2 ** bits[0]!;
  for (let j = 1; j < bits.length; j++) m += width * 2 ** (bits[j]! - bits[j - 1]!);
  return m;
}

export function defaultPoolSize(levels: number, g: number, candidates: number): number {
  let k = DEFAULT_POOL;
  while (k > 1 && (levels * k * g > MAX_STATE_CELLS || k * candidates > DECODE_BUDGET)) k = Math.floor(k / 2);
  return k;
}

export class HeavyHitters implements Mechanism {
  readonly name: string = "heavy_hitters";
  readonly payload = "heavy_hitters" as const;
  readonly epsilon: number;
  readonly maxLength: number;
  readonly levels: number;
  readonly width: number;
  readonly g: number;
  readonly poolSize: number;
  readonly poolSeed: number;
  readonly bits: number[];
  protected slot: [number, number] | null = null;

  constructor(
    cfg: Record<string, unknown>,
    readonly secret: Uint8Array,
  ) {
    this.epsilon = checkEpsilon(cfg.epsilon);
    this.maxLength = checkInt(cfg.max_length, "max_length", 1, 64);
    const total = 8 * this.maxLength;
    const levels = get(cfg, "levels");
    this.levels = checkInt(
      levels === null ? this.maxLength : levels,
      "levels",
      Math.ceil(total / MAX_LEVEL_BITS),
      total,
    );
    this.width = checkInt(get(cfg, "width", 64), "width", 1, 4096);
    this.g = poolHashRange(this.epsilon);
    const cands = walkCandidates(this.maxLength, this.levels, this.width);
    const pool = get(cfg, "pool_size");
    const k = checkInt(pool === null ? defaultPoolSize(this.levels, this.g, cands) : pool, "pool_size", 1, MAX_POOL);
    if (this.levels * k * this.g > MAX_STATE_CELLS)
      throw new InvalidConfig(`pool_size = ${k}: levels·pool_size·g over ${MAX_STATE_CELLS}`);
    if (k * cands > MAX_DECODE_LOOKUPS)
      throw new InvalidConfig(`pool_size = ${k}: decode over ${MAX_DECODE_LOOKUPS} lookups`);
    this.poolSize = k;
    this.poolSeed = checkInt(get(cfg, "pool_seed", 0), "pool_seed", 0, 0xffffffff);
    this.bits = levelBits(total, this.levels);
  }

  get p(): number {
    return grrKeep(this.epsilon, this.g);
  }

  get params(): Record<string, unknown> {
    return {
      epsilon: this.epsilon,
      g: this.g,
      pool_size: this.poolSize,
      levels: this.levels,
      bits: this.bits,
      p: this.p,
    };
  }

  /** UTF-8 of a valid value, zero-padded to max_length bytes. */
  padded(value: unknown): Uint8Array {
    if (typeof value !== "string") throw new TypeError(`value must be a string, got ${typeof value}`);
    // a lone surrogate has no UTF-8 encoding (TextEncoder would send U+FFFD in its place): refused,
    // as Python's str.encode("utf-8") refuses it
    const lone = LONE_SURROGATE.exec(value);
    if (lone !== null) throw new RangeError(`value is not valid Unicode: a lone surrogate at position ${lone.index}`);
    const data = utf8(value);
    if (data.length > this.maxLength)
      throw new RangeError(`value is ${data.length} bytes in UTF-8, longer than max_length = ${this.maxLength}`);
    if (data.includes(0)) throw new RangeError("value must not contain NUL characters");
    const out = new Uint8Array(this.maxLength);
    out.set(data);
    return out;
  }

  deviceSlot(): [number, number] {
    if (this.slot === null) {
      this.slot = [
        deriveIndex(this.secret, ascii("ldptel/heavy_hitters/level"), this.levels),
        deriveIndex(this.secret, ascii("ldptel/heavy_hitters/pool"), this.poolSize),
      ];
    }
    return this.slot;
  }

  /** The OLH key of the level's prefix: xxh32(prefix bytes, seed = prefix bits). */
  prefixKey(data: Uint8Array, level: number): number {
    const b = this.bits[level]!;
    const pref = data.slice(0, Math.ceil(b / 8));
    if (b % 8) pref[pref.length - 1]! &= (0xff << (8 - (b % 8))) & 0xff;
    return xxh32(pref, b);
  }

  poolSeedOf(level: number, index: number): number {
    return xxh32Int(level * this.poolSize + index, this.poolSeed);
  }

  hashed(data: Uint8Array, level: number, index: number): number {
    return olhHash(this.poolSeedOf(level, index), this.prefixKey(data, level), this.g);
  }

  encode(value: unknown, draws: Draws): Report {
    const data = this.padded(value);
    const [level, index] = this.deviceSlot();
    const y = this.hashed(data, level, index);
    return {
      payload: this.payload,
      columns: { levels: [level], seed_indices: [index], values: [perturbOne(y, this.g, this.p, draws)] },
    };
  }
}
