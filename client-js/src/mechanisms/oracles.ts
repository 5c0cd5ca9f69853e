/** The frequency oracles' device side: GRR, SUE/OUE, OLH, Hadamard (`ldptel.mechanisms.grr`,
 * `unary`, `olh`, `hadamard`). */
import type { Draws } from "../draws.js";
import { olhHash, popcount, xxh32Int } from "../hashing.js";
import {
  bernoulliRow,
  bitLength,
  checkEpsilon,
  checkInt,
  checkValue,
  grrKeep,
  type Mechanism,
  type PayloadName,
  packBits,
  perturbOne,
  type Report,
  roundHalfEven,
  varianceStar,
} from "./base.js";

export abstract class Oracle implements Mechanism {
  abstract readonly name: string;
  abstract readonly payload: PayloadName;
  readonly epsilon: number;
  readonly domainSize: number;

  constructor(epsilon: unknown, domainSize: unknown) {
    this.epsilon = checkEpsilon(epsilon);
    this.domainSize = checkInt(domainSize, "domain_size", 2, 2 ** 31);
  }

  abstract get p(): number;
  abstract get q(): number;

  varianceStar(): number {
    return varianceStar(this.p, this.q);
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, p: this.p, q: this.q };
  }

  encode(value: unknown, draws: Draws): Report {
    return { payload: this.payload, columns: this.randomizeOne(checkValue(value, this.domainSize), draws) };
  }

  abstract randomizeOne(value: number, draws: Draws): Report["columns"];
}

export class GRR extends Oracle {
  readonly name: string = "grr";
  readonly payload = "grr" as const;

  get p(): number {
    const e = Math.exp(this.epsilon);
    return e / (e + this.domainSize - 1);
  }

  get q(): number {
    return 1.0 / (Math.exp(this.epsilon) + this.domainSize - 1);
  }

  randomizeOne(value: number, draws: Draws): Report["columns"] {
    return { values: [perturbOne(value, this.domainSize, this.p, draws)] };
  }
}

export class Unary extends Oracle {
  readonly payload = "unary" as const;
  constructor(
    readonly name: "sue" | "oue",
    epsilon: unknown,
    domainSize: unknown,
  ) {
    super(epsilon, domainSize);
  }

  get p(): number {
    if (this.name === "oue") return 0.5;
    const h = Math.exp(this.epsilon / 2);
    return h / (h + 1);
  }

  get q(): number {
    return this.name === "oue" ? 1.0 / (Math.exp(this.epsilon) + 1) : 1.0 / (Math.exp(this.epsilon / 2) + 1);
  }

  randomizeOne(value: number, draws: Draws): Report["columns"] {
    const bits = bernoulliRow(this.q, this.domainSize, draws);
    bits[value] = draws.uniform() < this.p ? 1 : 0;
    return { bits: [packBits(bits)] };
  }
}

export function olhG(epsilon: number): number {
  return Math.max(2, roundHalfEven(Math.exp(epsilon)) + 1);
}

export class OLH extends Oracle {
  readonly name: string = "olh";
  readonly payload = "olh" as const;
  readonly g: number;

  constructor(epsilon: unknown, domainSize: unknown) {
    super(epsilon, domainSize);
    this.g = olhG(this.epsilon);
  }

  get p(): number {
    return grrKeep(this.epsilon, this.g);
  }

  get q(): number {
    return 1.0 / this.g;
  }

  override get params(): Record<string, unknown> {
    return { ...super.params, g: this.g };
  }

  randomizeOne(value: number, draws: Draws): Report["columns"] {
    const seed = draws.u32();
    const y = olhHash(seed, xxh32Int(value), this.g);
    return { seeds: [seed], values: [perturbOne(y, this.g, this.p, draws)] };
  }
}

export function signKeep(epsilon: number): number {
  const e = Math.exp(epsilon);
  return e / (e + 1);
}

export class Hadamard implements Mechanism {
  readonly name: string = "hadamard";
  readonly payload = "hadamard" as const;
  readonly epsilon: number;
  readonly domainSize: number;
  readonly D: number;

  constructor(epsilon: unknown, domainSize: unknown) {
    this.epsilon = checkEpsilon(epsilon);
    this.domainSize = checkInt(domainSize, "domain_size", 2, 2 ** 31);
    this.D = 2 ** bitLength(this.domainSize - 1);
  }

  get pKeep(): number {
    return signKeep(this.epsilon);
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, D: this.D, p_keep: this.pKeep };
  }

  encode(value: unknown, draws: Draws): Report {
    const v = checkValue(value, this.domainSize);
    const j = draws.below(this.D);
    const positive = popcount((j & v) >>> 0) % 2 === 0;
    const keep = draws.uniform() < this.pKeep;
    return { payload: this.payload, columns: { indices: [j], signs: [positive === keep] } };
  }
}

/** `chooser.local_oracle`: GRR when d < 3e^ε + 2, else OLH. */
export function localOracle(epsilon: number, d: number): GRR | OLH {
  return d < 3 * Math.exp(epsilon) + 2 ? new GRR(epsilon, d) : new OLH(epsilon, d);
}

/** The `shuffled-fakes` mode's index without local randomization (`ldptel.mechanisms.histogram`):
 * the true index, no ε (its privacy is central only: the sealing, the shuffler and the fakes);
 * the client sends it only when the app passes `acceptUnrandomized`. GRR's wire shape. */
export class Histogram implements Mechanism {
  readonly name = "histogram";
  readonly payload = "grr" as const;
  readonly epsilon = Infinity;
  readonly domainSize: number;

  constructor(domainSize: unknown) {
    this.domainSize = checkInt(domainSize, "domain_size", 2, 2 ** 31);
  }

  get params(): Record<string, unknown> {
    return { p: 1, q: 0 };
  }

  encode(value: unknown): Report {
    return { payload: this.payload, columns: { values: [checkValue(value, this.domainSize)] } };
  }
}
