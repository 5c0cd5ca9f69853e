/** Numeric mechanisms' device side (`ldptel.mechanisms.numeric`, `onebitmean`). */
import type { Draws } from "../draws.js";
import { ascii, concat, hmacUniform } from "../secret.js";
import { checkEpsilon, checkInt, InvalidConfig, type Mechanism, type Report } from "./base.js";

export const HYBRID_EPSILON = Math.log(
  (-5 + 2 * (6353 - 405 * Math.sqrt(241)) ** (1 / 3) + 2 * (6353 + 405 * Math.sqrt(241)) ** (1 / 3)) / 27,
);

export const MAX_BOUND = 1e150;
export const MIN_SPAN = 1e-150;
export const MIN_RELATIVE_SPAN = 2 ** -30;

function finite(v: unknown, name: string): number {
  if (typeof v !== "number" || !Number.isFinite(v))
    throw new InvalidConfig(`${name} must be a finite number, got ${String(v)}`);
  return v;
}

/** Finite `lower` < `upper` within the limits of `ldptel.mechanisms.numeric.check_bounds` (its
 * docstring derives them); `InvalidConfig` naming the key otherwise. */
export function checkBounds(lower: unknown, upper: unknown): [number, number] {
  const lo = finite(lower, "lower"),
    hi = finite(upper, "upper");
  for (const [name, v] of [
    ["lower", lo],
    ["upper", hi],
  ] as const) {
    if (Math.abs(v) > MAX_BOUND) throw new InvalidConfig(`${name} must be within ±${MAX_BOUND}, got ${v}`);
  }
  if (!(lo < hi)) throw new InvalidConfig("upper must be above lower");
  const least = Math.max(MIN_SPAN, MIN_RELATIVE_SPAN * Math.max(Math.abs(lo), Math.abs(hi)));
  if (hi - lo < least) throw new InvalidConfig(`upper must exceed lower by at least ${least}`);
  return [lo, hi];
}

export abstract class Numeric implements Mechanism {
  abstract readonly name: string;
  readonly payload = "numeric" as const;
  readonly epsilon: number;
  readonly lower: number;
  readonly upper: number;
  /** The report column: "bits" (packed over the batch) or "values" (doubles). */
  abstract readonly column: "bits" | "values";

  constructor(epsilon: unknown, lower: unknown, upper: unknown) {
    this.epsilon = checkEpsilon(epsilon);
    [this.lower, this.upper] = checkBounds(lower, upper);
  }

  abstract get bound(): number;
  abstract outputVariance(t: number): number;

  worstVariance(): number {
    return Math.max(this.outputVariance(-1), this.outputVariance(0), this.outputVariance(1));
  }

  get halfWidth(): number {
    return (this.upper - this.lower) / 2;
  }

  unitOne(value: number): number {
    const v = Math.min(Math.max(value, this.lower), this.upper);
    return Math.min(Math.max((v - this.lower) / this.halfWidth - 1.0, -1.0), 1.0);
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, bound: this.bound };
  }

  /** True when `value` lies outside [lower, upper] (reported clipped; counted in `health`). */
  clipped(value: number): boolean {
    return value < this.lower || value > this.upper;
  }

  encode(value: unknown, draws: Draws): Report {
    if (typeof value !== "number" || !Number.isFinite(value)) {
      throw new TypeError(`value must be a finite real number, got ${String(value)}`);
    }
    const y = this.randomizeOne(value, draws);
    return {
      payload: this.payload,
      columns: this.column === "bits" ? { bits: [y as boolean] } : { values: [y as number] },
    };
  }

  abstract randomizeOne(value: number, draws: Draws): number | boolean;
}

export class Duchi extends Numeric {
  readonly name: string = "duchi";
  readonly column: "bits" | "values" = "bits";

  get bound(): number {
    const e = Math.exp(this.epsilon);
    return (e + 1) / (e - 1);
  }

  pPlus(t: number): number {
    return 0.5 + t / (2 * this.bound);
  }

  outputVariance(t: number): number {
    return this.bound ** 2 - t * t;
  }

  randomizeOne(value: number, draws: Draws): number | boolean {
    return draws.uniform() < this.pPlus(this.unitOne(value));
  }
}

export class Piecewise extends Numeric {
  readonly name: string = "piecewise";
  readonly column: "bits" | "values" = "values";

  get s(): number {
    return Math.exp(this.epsilon / 2);
  }

  get bound(): number {
    return (this.s + 1) / (this.s - 1);
  }

  outputVariance(t: number): number {
    const s = this.s;
    return (t * t) / (s - 1) + (s + 3) / (3 * (s - 1) ** 2);
  }

  pieceOne(t: number, draws: Draws): number {
    const c = this.bound,
      u = draws.uniform();
    const left = ((c + 1) / 2) * t - (c - 1) / 2;
    let y: number;
    if (draws.uniform() < this.s / (this.s + 1)) {
      y = left + u * (c - 1);
    } else {
      const out = u * (c + 1);
      y = out < left + c ? out - c : left + c - 1 + (out - (left + c));
    }
    return Math.min(Math.max(y, -c), c);
  }

  randomizeOne(value: number, draws: Draws): number | boolean {
    return this.pieceOne(this.unitOne(value), draws);
  }
}

export class Hybrid extends Piecewise {
  override readonly name: string = "hybrid";

  get alpha(): number {
    return this.epsilon > HYBRID_EPSILON ? 1 - Math.exp(-this.epsilon / 2) : 0.0;
  }

  get duchi(): Duchi {
    return new Duchi(this.epsilon, this.lower, this.upper);
  }

  override get bound(): number {
    return this.alpha > 0 ? Math.max(super.bound, this.duchi.bound) : this.duchi.bound;
  }

  override outputVariance(t: number): number {
    const a = this.alpha;
    return a * super.outputVariance(t) + (1 - a) * this.duchi.outputVariance(t);
  }

  override get params(): Record<string, unknown> {
    return { ...super.params, alpha: this.alpha };
  }

  override randomizeOne(value: number, draws: Draws): number | boolean {
    const t = this.unitOne(value);
    if (draws.uniform() < this.alpha) return this.pieceOne(t, draws);
    const duchi = this.duchi;
    return draws.uniform() < duchi.pPlus(t) ? duchi.bound : -duchi.bound;
  }
}

export const DEFAULT_BUCKETS = 8;
export const MAX_BUCKETS = 1024;

export class OneBitMean extends Duchi {
  override readonly name: string = "1bitmean";
  readonly memoize: boolean;
  readonly buckets: number;

  constructor(
    epsilon: unknown,
    lower: unknown,
    upper: unknown,
    memoize: unknown,
    buckets: unknown,
    readonly secret: Uint8Array,
  ) {
    super(epsilon, lower, upper);
    if (typeof memoize !== "boolean") throw new InvalidConfig(`memoize must be true or false, got ${String(memoize)}`);
    this.memoize = memoize;
    this.buckets = checkInt(buckets, "buckets", 1, MAX_BUCKETS);
  }

  get epsilonInf(): number | undefined {
    return this.memoize ? this.epsilon : undefined;
  }

  get epsilonLifetime(): number | undefined {
    return this.memoize ? (this.buckets + 1) * this.epsilon : undefined;
  }

  get alpha(): number {
    return hmacUniform(this.secret, ascii("ldptel/1bitmean/alpha"));
  }

  memoBit(k: number): boolean {
    const u = hmacUniform(this.secret, concat(ascii("ldptel/1bitmean/bit\0"), ascii(String(k))));
    return u < this.pPlus((2 * k) / this.buckets - 1);
  }

  override randomizeOne(value: number, draws: Draws): number | boolean {
    if (!this.memoize) return super.randomizeOne(value, draws);
    const pos = ((this.unitOne(value) + 1.0) / 2) * this.buckets;
    let k = Math.min(Math.floor(pos), this.buckets - 1);
    k += pos - k > this.alpha ? 1 : 0;
    return this.memoBit(k);
  }
}

/** The numeric mechanism of the lowest worst-case variance at ε (ties: Duchi, hybrid, piecewise). */
export function defaultNumericMechanism(epsilon: number): string {
  const choices = [new Duchi(epsilon, -1, 1), new Hybrid(epsilon, -1, 1), new Piecewise(epsilon, -1, 1)];
  let best = 0;
  for (let i = 1; i < choices.length; i++) {
    if (choices[i]!.worstVariance() < choices[best]!.worstVariance()) best = i;
  }
  return choices[best]!.name;
}
