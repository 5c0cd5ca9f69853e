/** Memoized (longitudinal) mechanisms' device side (`ldptel.mechanisms.memoize`, `longitudinal`,
 * `longitudinal_kinds`): a permanent randomized response per memo key, derived from the device
 * secret with HMAC-SHA256 (no stored table), then a fresh instantaneous response per report. */
import type { Draws } from "../draws.js";
import { olhHash, popcount, xxh32Int } from "../hashing.js";
import { ascii, concat, derive, deriveIndex, le64, shakeUniforms, u64, u64Double } from "../secret.js";
import {
  bernoulliRow,
  checkEpsilon,
  checkValue,
  grrKeep,
  InvalidConfig,
  type Mechanism,
  packBits,
  perturbOne,
  type Report,
} from "./base.js";
import { HeavyHitters } from "./heavyHitters.js";
import { GRR, Hadamard, OLH, Unary } from "./oracles.js";
import { RangeHaar, RangeHierarchical } from "./ranges.js";

// biome-ignore lint/correctness/noPrecisionLoss: 2^64 is exact in a double
const U64 = 18446744073709551616;

export function checkMemoEpsilons(epsilon: number, epsilonInf: unknown): number {
  if (epsilonInf === null || epsilonInf === undefined) throw new InvalidConfig("epsilon_inf is required with memoize");
  const e = checkEpsilon(epsilonInf, "epsilon_inf");
  if (!(e > epsilon)) throw new InvalidConfig("epsilon_inf must be greater than epsilon");
  return e;
}

export function instantKeep(epsilon: number, epsilonInf: number, k: number): number {
  const p1 = grrKeep(epsilonInf, k);
  const q1 = (1 - p1) / (k - 1);
  return (grrKeep(epsilon, k) - q1) / (p1 - q1);
}

/** PRR at ε∞ then IRR over [k], one report ε₁-LDP GRR. */
export class Chain {
  readonly p1: number;
  readonly q1: number;
  readonly p2: number;
  readonly q2: number;

  constructor(
    epsilon: number,
    epsilonInf: number,
    readonly k: number,
    readonly label: Uint8Array,
  ) {
    this.p1 = grrKeep(epsilonInf, k);
    this.q1 = (1 - this.p1) / (k - 1);
    this.p2 = instantKeep(epsilon, epsilonInf, k);
    this.q2 = (1 - this.p2) / (k - 1);
  }

  get pStar(): number {
    return this.p1 * this.p2 + (1 - this.p1) * this.q2;
  }

  get qStar(): number {
    return this.q1 * this.p2 + (1 - this.q1) * this.q2;
  }

  permanent(secret: Uint8Array, key: number): number {
    const digest = derive(secret, concat(this.label, le64(key)));
    if (u64Double(digest, 0) / U64 < this.p1) return key;
    const other = Number(u64(digest, 8) % BigInt(this.k - 1));
    return other + (other >= key ? 1 : 0);
  }

  instantOne(prr: number, draws: Draws): number {
    return perturbOne(prr, this.k, this.p2, draws);
  }
}

/** The memoized machinery on a device: fixed parts, a memo key per value, PRR per key (kept in
 * memory; recomputing gives the same), IRR per report. */
export abstract class Memoized<V> implements Mechanism {
  abstract readonly name: string;
  abstract readonly payload: Report["payload"];
  abstract readonly epsilon: number;
  abstract readonly epsilonInf: number;
  abstract readonly alphabet: number;
  abstract get params(): Record<string, unknown>;
  private memo = new Map<number, unknown>();

  protected abstract secret: Uint8Array;
  abstract checkOne(value: unknown): V;
  abstract key(value: V): number;
  abstract permanent(key: number): unknown;
  abstract instant(prr: unknown, draws: Draws): unknown;
  abstract columns(irr: unknown): Report["columns"];

  get epsilonLifetime(): number {
    return this.alphabet * this.epsilonInf;
  }

  encode(value: unknown, draws: Draws): Report {
    const key = this.key(this.checkOne(value));
    let prr = this.memo.get(key);
    if (prr === undefined) {
      prr = this.permanent(key);
      if (this.memo.size < 10_000) this.memo.set(key, prr);
    }
    return { payload: this.payload, columns: this.columns(this.instant(prr, draws)) };
  }
}

export class LGRR extends Memoized<number> {
  readonly name = "grr";
  readonly payload = "grr" as const;
  readonly epsilon: number;
  readonly epsilonInf: number;
  readonly alphabet: number;
  readonly chain: Chain;
  readonly plain: GRR;

  constructor(
    epsilon: unknown,
    domainSize: unknown,
    epsilonInf: unknown,
    protected secret: Uint8Array,
  ) {
    super();
    this.plain = new GRR(epsilon, domainSize);
    this.epsilon = this.plain.epsilon;
    this.epsilonInf = checkMemoEpsilons(this.epsilon, epsilonInf);
    this.alphabet = this.plain.domainSize;
    this.chain = new Chain(this.epsilon, this.epsilonInf, this.alphabet, ascii("ldptel/memo/grr\0"));
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, epsilon_inf: this.epsilonInf, p: this.chain.pStar, q: this.chain.qStar };
  }

  checkOne(value: unknown): number {
    return checkValue(value, this.alphabet);
  }

  key(v: number): number {
    return v;
  }

  permanent(key: number): number {
    return this.chain.permanent(this.secret, key);
  }

  instant(prr: unknown, draws: Draws): number {
    return this.chain.instantOne(prr as number, draws);
  }

  columns(irr: unknown): Report["columns"] {
    return { values: [irr as number] };
  }
}

/** L-OSUE (`oue` or `sue` with memoize): OUE's PRR at ε∞ per bit, SUE's IRR per bit. */
export class LOSUE extends Memoized<number> {
  readonly payload = "unary" as const;
  readonly epsilon: number;
  readonly epsilonInf: number;
  readonly alphabet: number;
  readonly q1: number;
  readonly p2: number;

  constructor(
    readonly name: "oue" | "sue",
    epsilon: unknown,
    domainSize: unknown,
    epsilonInf: unknown,
    protected secret: Uint8Array,
  ) {
    super();
    const plain = new Unary("oue", epsilon, domainSize);
    this.epsilon = plain.epsilon;
    this.alphabet = plain.domainSize;
    this.epsilonInf = checkMemoEpsilons(this.epsilon, epsilonInf);
    this.q1 = 1 / (Math.exp(this.epsilonInf) + 1);
    const qStar = 1 / (Math.exp(this.epsilon) + 1);
    this.p2 = (1 - this.q1 - qStar) / (1 - 2 * this.q1);
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, epsilon_inf: this.epsilonInf, p2: this.p2, q1: this.q1 };
  }

  checkOne(value: unknown): number {
    return checkValue(value, this.alphabet);
  }

  key(v: number): number {
    return v;
  }

  permanent(key: number): Uint8Array {
    const d = this.alphabet;
    const u = shakeUniforms(this.secret, concat(ascii("ldptel/memo/unary\0"), le64(key)), d);
    const bits = new Uint8Array(d);
    for (let i = 0; i < d; i++) bits[i] = u[i]! < (i === key ? 0.5 : this.q1) ? 1 : 0;
    return packBits(bits);
  }

  instant(prr: unknown, draws: Draws): Uint8Array {
    const flips = packBits(bernoulliRow(1 - this.p2, this.alphabet, draws));
    const row = prr as Uint8Array;
    return row.map((b, i) => b ^ flips[i]!);
  }

  columns(irr: unknown): Report["columns"] {
    return { bits: [irr as Uint8Array] };
  }
}

export class LOLOHA extends Memoized<number> {
  readonly name = "olh";
  readonly payload = "olh" as const;
  readonly epsilon: number;
  readonly epsilonInf: number;
  readonly alphabet: number;
  readonly chain: Chain;
  readonly plain: OLH;
  readonly seed: number;

  constructor(
    epsilon: unknown,
    domainSize: unknown,
    epsilonInf: unknown,
    protected secret: Uint8Array,
  ) {
    super();
    this.plain = new OLH(epsilon, domainSize);
    this.epsilon = this.plain.epsilon;
    this.epsilonInf = checkMemoEpsilons(this.epsilon, epsilonInf);
    this.alphabet = this.plain.g;
    this.chain = new Chain(this.epsilon, this.epsilonInf, this.alphabet, ascii("ldptel/memo/olh\0"));
    this.seed = deriveIndex(secret, ascii("ldptel/memo/olh-seed"), 2 ** 32);
  }

  override get epsilonLifetime(): number {
    return Math.min(this.plain.domainSize, this.alphabet) * this.epsilonInf;
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, epsilon_inf: this.epsilonInf, g: this.alphabet, p: this.chain.pStar };
  }

  checkOne(value: unknown): number {
    return checkValue(value, this.plain.domainSize);
  }

  key(v: number): number {
    return olhHash(this.seed, xxh32Int(v), this.alphabet);
  }

  permanent(key: number): number {
    return this.chain.permanent(this.secret, key);
  }

  instant(prr: unknown, draws: Draws): number {
    return this.chain.instantOne(prr as number, draws);
  }

  columns(irr: unknown): Report["columns"] {
    return { seeds: [this.seed], values: [irr as number] };
  }
}

/** A memoized sign response (Hadamard, Haar ranges): memo key = the ±1 entry as 1/0, k = 2. */
abstract class MemoizedSign extends Memoized<number> {
  readonly alphabet = 2;
  abstract readonly chain: Chain;

  permanent(key: number): number {
    return this.chain.permanent(this.secret, key);
  }

  instant(prr: unknown, draws: Draws): number {
    return this.chain.instantOne(prr as number, draws);
  }
}

export class LHadamard extends MemoizedSign {
  readonly name = "hadamard";
  readonly payload = "hadamard" as const;
  readonly epsilon: number;
  readonly epsilonInf: number;
  readonly chain: Chain;
  readonly plain: Hadamard;
  readonly row: number;

  constructor(
    epsilon: unknown,
    domainSize: unknown,
    epsilonInf: unknown,
    protected secret: Uint8Array,
  ) {
    super();
    this.plain = new Hadamard(epsilon, domainSize);
    this.epsilon = this.plain.epsilon;
    this.epsilonInf = checkMemoEpsilons(this.epsilon, epsilonInf);
    this.chain = new Chain(this.epsilon, this.epsilonInf, 2, ascii("ldptel/memo/hadamard\0"));
    this.row = deriveIndex(secret, ascii("ldptel/memo/hadamard-row"), this.plain.D);
  }

  override get epsilonLifetime(): number {
    return Math.min(this.plain.domainSize, 2) * this.epsilonInf;
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, epsilon_inf: this.epsilonInf, D: this.plain.D, p_keep: this.chain.pStar };
  }

  checkOne(value: unknown): number {
    return checkValue(value, this.plain.domainSize);
  }

  key(v: number): number {
    return popcount((this.row & v) >>> 0) % 2 === 0 ? 1 : 0;
  }

  columns(irr: unknown): Report["columns"] {
    return { indices: [this.row], signs: [irr === 1] };
  }
}

export class LRangeHaar extends MemoizedSign {
  readonly name = "range_haar";
  readonly payload = "range" as const;
  readonly epsilon: number;
  readonly epsilonInf: number;
  readonly chain: Chain;
  readonly plain: RangeHaar;
  readonly level: number;
  readonly index: number;

  constructor(
    epsilon: unknown,
    domainSize: unknown,
    epsilonInf: unknown,
    protected secret: Uint8Array,
  ) {
    super();
    this.plain = new RangeHaar(epsilon, domainSize);
    this.epsilon = this.plain.epsilon;
    this.epsilonInf = checkMemoEpsilons(this.epsilon, epsilonInf);
    this.chain = new Chain(this.epsilon, this.epsilonInf, 2, ascii("ldptel/memo/range-haar\0"));
    this.level = deriveIndex(secret, ascii("ldptel/memo/range-level"), this.plain.h);
    this.index = deriveIndex(secret, ascii("ldptel/memo/range-index"), this.plain.K[this.level]!);
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, epsilon_inf: this.epsilonInf, h: this.plain.h, p_keep: this.chain.pStar };
  }

  checkOne(value: unknown): number {
    return checkValue(value, this.plain.domainSize);
  }

  key(v: number): number {
    const lev = this.level + 1;
    const positive = (Math.floor(v / 2 ** (lev - 1)) & 1) === 0;
    return positive === (popcount((Math.floor(v / 2 ** lev) & this.index) >>> 0) % 2 === 0) ? 1 : 0;
  }

  columns(irr: unknown): Report["columns"] {
    return { levels: [this.level], indices: [this.index], signs: [irr === 1] };
  }
}

export class LRangeHierarchical extends Memoized<number> {
  readonly name = "range_hierarchical";
  readonly payload = "range" as const;
  readonly epsilon: number;
  readonly epsilonInf: number;
  readonly alphabet: number;
  readonly plain: RangeHierarchical;
  readonly offsets: number[];
  readonly chains: Chain[];
  readonly level: number;
  readonly seed: number;

  constructor(
    epsilon: unknown,
    domainSize: unknown,
    branching: unknown,
    epsilonInf: unknown,
    protected secret: Uint8Array,
  ) {
    super();
    this.plain = new RangeHierarchical(epsilon, domainSize, branching);
    this.epsilon = this.plain.epsilon;
    const sizes = this.plain.oracles.map((o) => (o instanceof OLH ? o.g : o.domainSize));
    this.offsets = [0];
    for (const s of sizes) this.offsets.push(this.offsets[this.offsets.length - 1]! + s);
    this.alphabet = this.offsets[this.offsets.length - 1]!;
    this.epsilonInf = checkMemoEpsilons(this.epsilon, epsilonInf);
    this.chains = sizes.map(
      (k, i) => new Chain(this.epsilon, this.epsilonInf, k, ascii(`ldptel/memo/range-tree\0${i}\0`)),
    );
    this.level = deriveIndex(secret, ascii("ldptel/memo/range-level"), this.plain.H);
    this.seed = this.plain.usesOlh ? deriveIndex(secret, ascii("ldptel/memo/range-seed"), 2 ** 32) : 0;
  }

  override get epsilonLifetime(): number {
    let worst = 0;
    this.chains.forEach((c, i) => {
      worst = Math.max(worst, Math.min(c.k, this.plain.nodes[i]!));
    });
    return worst * this.epsilonInf;
  }

  get params(): Record<string, unknown> {
    return { ...this.plain.params, epsilon_inf: this.epsilonInf, offsets: this.offsets };
  }

  checkOne(value: unknown): number {
    return checkValue(value, this.plain.domainSize);
  }

  key(v: number): number {
    const ell = this.level;
    let node = Math.floor(v / this.plain.widths[ell]!);
    const o = this.plain.oracles[ell]!;
    if (o instanceof OLH) node = olhHash(this.seed, xxh32Int(node), o.g);
    return this.offsets[ell]! + node;
  }

  private split(key: number): [number, number] {
    let ell = 0;
    while (ell + 1 < this.chains.length && this.offsets[ell + 1]! <= key) ell += 1;
    return [ell, key - this.offsets[ell]!];
  }

  permanent(key: number): number {
    const [ell, local] = this.split(key);
    return this.offsets[ell]! + this.chains[ell]!.permanent(this.secret, local);
  }

  instant(prr: unknown, draws: Draws): number {
    const [ell, local] = this.split(prr as number);
    return this.chains[ell]!.instantOne(local, draws);
  }

  columns(irr: unknown): Report["columns"] {
    return { levels: [this.level], values: [irr as number], seeds: this.plain.usesOlh ? [this.seed] : [] };
  }
}

export class LHeavyHitters extends Memoized<Uint8Array> {
  readonly name = "heavy_hitters";
  readonly payload = "heavy_hitters" as const;
  readonly epsilon: number;
  readonly epsilonInf: number;
  readonly alphabet: number;
  readonly plain: HeavyHitters;
  readonly chain: Chain;
  private data: Uint8Array = new Uint8Array(0);

  constructor(
    cfg: Record<string, unknown>,
    epsilonInf: unknown,
    protected secret: Uint8Array,
  ) {
    super();
    this.plain = new HeavyHitters(cfg, secret);
    this.epsilon = this.plain.epsilon;
    this.epsilonInf = checkMemoEpsilons(this.epsilon, epsilonInf);
    this.alphabet = this.plain.g;
    this.chain = new Chain(this.epsilon, this.epsilonInf, this.alphabet, ascii("ldptel/memo/hh\0"));
  }

  get params(): Record<string, unknown> {
    return { ...this.plain.params, epsilon_inf: this.epsilonInf, p: this.chain.pStar };
  }

  checkOne(value: unknown): Uint8Array {
    this.data = this.plain.padded(value);
    return this.data;
  }

  key(data: Uint8Array): number {
    const [level, index] = this.plain.deviceSlot();
    return this.plain.hashed(data, level, index);
  }

  permanent(key: number): number {
    return this.chain.permanent(this.secret, key);
  }

  instant(prr: unknown, draws: Draws): number {
    return this.chain.instantOne(prr as number, draws);
  }

  columns(irr: unknown): Report["columns"] {
    const [level, index] = this.plain.deviceSlot();
    return { levels: [level], seed_indices: [index], values: [irr as number] };
  }
}
