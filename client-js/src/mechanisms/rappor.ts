/** RAPPOR's device side (`ldptel.mechanisms.rappor`): cohort and memoized permanent randomized
 * response from the device secret, instantaneous response from 8 bytes per Bloom bit. */

import { shake256 } from "@noble/hashes/sha3.js";
import type { Draws } from "../draws.js";
import { utf8, xxh32 } from "../hashing.js";
import { ascii, concat, derive, deriveIndex } from "../secret.js";
import {
  checkInt,
  InvalidConfig,
  isNumber,
  MAX_EPSILON,
  type Mechanism,
  MIN_EPSILON,
  packBits,
  type Report,
} from "./base.js";

/** As `ldptel.mechanisms.rappor`: ε∞ beyond this is no privacy (f ≈ 0 made it infinite), and the
 * bit estimates' variances divide by ((1 − f)(q − p))². */
export const MAX_EPSILON_INF = 100.0;
export const MIN_BIT_SCALE = 1e-6;

export const MAX_CANDIDATES = 16384;

function prob(v: unknown, name: string): number {
  if (!isNumber(v)) throw new InvalidConfig(`${name} must be a probability, got ${typeof v}`);
  if (!(v >= 0 && v <= 1)) throw new InvalidConfig(`${name} must be in [0, 1], got ${v}`);
  return v;
}

export class RAPPOR implements Mechanism {
  readonly name = "rappor";
  readonly payload = "rappor" as const;
  readonly bloomBits: number;
  readonly hashes: number;
  readonly cohorts: number;
  readonly f: number;
  readonly p: number;
  readonly q: number;
  readonly epsilon: number;
  readonly epsilonInf: number;
  private cohort: number | null = null;
  private memo = new Map<string, Uint8Array>();

  constructor(
    cfg: Record<string, unknown>,
    readonly secret: Uint8Array,
  ) {
    this.bloomBits = checkInt(cfg.bloom_bits, "bloom_bits", 1, 4096);
    this.hashes = checkInt(cfg.hashes, "hashes", 1, this.bloomBits);
    this.cohorts = checkInt(cfg.cohorts, "cohorts", 1, 1 << 16);
    this.f = prob(cfg.f, "f");
    this.p = prob(cfg.p, "p");
    this.q = prob(cfg.q, "q");
    if (!(this.f > 0 && this.f < 1)) throw new InvalidConfig("f must be in (0, 1)");
    if (!(this.q > this.p)) throw new InvalidConfig("q must be greater than p");
    if (this.pStar <= 0 || this.qStar >= 1) throw new InvalidConfig("p and q must give 0 < p* and q* < 1");
    const qs = this.qStar,
      ps = this.pStar;
    this.epsilon = this.hashes * Math.log((qs * (1 - ps)) / (ps * (1 - qs)));
    if (!(this.epsilon >= MIN_EPSILON && this.epsilon <= MAX_EPSILON)) {
      throw new InvalidConfig(`p, q, f, hashes give ε₁ = ${this.epsilon}, outside [${MIN_EPSILON}, ${MAX_EPSILON}]`);
    }
    if ((1 - this.f) * (this.q - this.p) < MIN_BIT_SCALE) {
      throw new InvalidConfig(`f, p, q give (1 − f)(q − p) below ${MIN_BIT_SCALE}`);
    }
    const c = cfg.candidates;
    if (!Array.isArray(c) || !c.every((x) => typeof x === "string")) {
      throw new InvalidConfig("candidates must be a list of strings");
    }
    if (new Set(c).size !== c.length) throw new InvalidConfig("candidates must be distinct");
    if (c.length > MAX_CANDIDATES) throw new InvalidConfig(`candidates has more than ${MAX_CANDIDATES} entries`);
    this.epsilonInf = 2 * this.hashes * Math.log((1 - this.f / 2) / (this.f / 2));
    if (!(this.epsilonInf <= MAX_EPSILON_INF)) throw new InvalidConfig(`f must give ε∞ <= ${MAX_EPSILON_INF}`);
  }

  get qStar(): number {
    return 0.5 * this.f * (this.p + this.q) + (1 - this.f) * this.q;
  }

  get pStar(): number {
    return 0.5 * this.f * (this.p + this.q) + (1 - this.f) * this.p;
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, epsilon_inf: this.epsilonInf, p_star: this.pStar, q_star: this.qStar };
  }

  bloomPositions(value: string, cohort: number): number[] {
    const data = utf8(value);
    const base = cohort * this.hashes;
    const out: number[] = [];
    for (let i = 0; i < this.hashes; i++) out.push(xxh32(data, (base + i) >>> 0) % this.bloomBits);
    return out;
  }

  deviceCohort(): number {
    if (this.cohort === null) this.cohort = deriveIndex(this.secret, ascii("ldptel/rappor/cohort"), this.cohorts);
    return this.cohort;
  }

  /** B' of `value`: a function of (secret, value), recomputed or kept in memory. */
  permanentBits(value: string, cohort: number): Uint8Array {
    const known = this.memo.get(value);
    if (known) return known;
    const k = this.bloomBits;
    const key = derive(this.secret, concat(ascii("ldptel/rappor/prr\0"), utf8(value)));
    const stream = shake256(key, { dkLen: 4 * k });
    const view = new DataView(stream.buffer, stream.byteOffset, stream.byteLength);
    const bloom = new Uint8Array(k);
    for (const b of this.bloomPositions(value, cohort)) bloom[b] = 1;
    const bits = new Uint8Array(k);
    for (let b = 0; b < k; b++) {
      const u = view.getUint32(4 * b, true) / 4294967296;
      bits[b] = u < this.f / 2 ? 1 : u < this.f ? 0 : bloom[b]!;
    }
    if (this.memo.size < 10_000) this.memo.set(value, bits);
    return bits;
  }

  encode(value: unknown, draws: Draws): Report {
    if (typeof value !== "string") throw new TypeError(`value must be a string, got ${typeof value}`);
    const cohort = this.deviceCohort();
    const prr = this.permanentBits(value, cohort);
    const k = this.bloomBits;
    const raw = draws.bytes(8 * k);
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const bits = new Uint8Array(k);
    for (let b = 0; b < k; b++) {
      const u = Number(view.getBigUint64(8 * b, true) >> 11n) * (1 / 9007199254740992);
      bits[b] = u < (prr[b] ? this.q : this.p) ? 1 : 0;
    }
    return { payload: this.payload, columns: { cohorts: [cohort], bits: [packBits(bits)] } };
  }
}
