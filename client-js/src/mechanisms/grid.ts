/**
 * Range and numeric campaigns in a shuffled privacy mode (`ldptel.mechanisms.shuffled_kinds`,
 * `grid`): their mechanism is an index mechanism over a histogram, not the local range or numeric
 * mechanisms.
 *
 * - `kind = "range"` (`method = "histogram"`): the value in [0, domain_size) is the index;
 * - `kind = "numeric"` (`mechanism = "grid"`): the value, clipped to [lower, upper], is rounded at
 *   random to one of K = domain_size grid points g_i = lower + i·h, h = (upper − lower)/(K − 1):
 *   with i = ⌊(x − lower)/h⌋ and t = (x − g_i)/h, index i + 1 with probability t (one
 *   `draws.uniform()` < t), else i — unbiased, rounding variance h²·t(1 − t) ≤ h²/4;
 *
 * and the index goes out as it is (`oracle = "histogram"`, shuffled-fakes), through GRR, or as
 * OUE/SUE (shuffled, at the planned ε₀): the same rows, fakes and sealing as a frequency campaign
 * over the index domain. Same draws, same arithmetic as the Python SDK (the shared vectors).
 */
import type { Draws } from "../draws.js";
import { checkInt, InvalidConfig, type Mechanism, need, type Report } from "./base.js";
import { checkBounds } from "./numeric.js";
import { GRR, Histogram, Unary } from "./oracles.js";

export const MIN_GRID_POINTS = 2;
export const MAX_GRID_POINTS = 4096;
export const RANGE_METHOD = "histogram";
export const GRID_MECHANISM = "grid";
type Index = GRR | Unary | Histogram;

/** An index mechanism over K grid points of [lower, upper], taking real values. */
export class Grid implements Mechanism {
  readonly lower: number;
  readonly upper: number;

  constructor(
    readonly inner: Index,
    lower: unknown,
    upper: unknown,
  ) {
    [this.lower, this.upper] = checkBounds(lower, upper);
    checkInt(inner.domainSize, "grid_points", MIN_GRID_POINTS, MAX_GRID_POINTS);
  }

  get name(): string {
    return this.inner.name;
  }

  get payload(): Report["payload"] {
    return this.inner.payload;
  }

  get epsilon(): number {
    return this.inner.epsilon;
  }

  get domainSize(): number {
    return this.inner.domainSize;
  }

  get params(): Record<string, unknown> {
    return { ...this.inner.params, lower: this.lower, upper: this.upper };
  }

  /** h, the distance between two grid points. */
  get step(): number {
    return (this.upper - this.lower) / (this.domainSize - 1);
  }

  /** True when `value` lies outside [lower, upper] (rounded from the bound; counted in `health`). */
  clipped(value: number): boolean {
    return value < this.lower || value > this.upper;
  }

  /** The grid index of `value` from one uniform `u` (`GridRounding.round_indices`). */
  roundIndex(value: number, u: number): number {
    const x = Math.min(Math.max(value, this.lower), this.upper);
    const pos = (x - this.lower) / this.step;
    const below = Math.min(Math.floor(pos), this.domainSize - 1);
    return Math.min(below + (u < pos - below ? 1 : 0), this.domainSize - 1);
  }

  encode(value: unknown, draws: Draws): Report {
    if (typeof value !== "number" || !Number.isFinite(value)) {
      throw new TypeError(`value must be a finite number, got ${String(value)}`);
    }
    return this.inner.encode(this.roundIndex(value, draws.uniform()), draws);
  }
}

function indexOracle(cfg: Record<string, unknown>, what: string, d: unknown): Index {
  const oracle = cfg.oracle;
  if (oracle === "histogram") return new Histogram(d);
  if (oracle !== "grr" && oracle !== "oue" && oracle !== "sue") {
    throw new InvalidConfig(
      `oracle of a shuffled ${what} campaign must be histogram, grr, oue or sue, got ${String(oracle)}`,
    );
  }
  const eps = cfg.epsilon;
  if (eps === undefined || eps === null) throw new InvalidConfig(`oracle ${oracle} needs an epsilon`);
  return oracle === "grr" ? new GRR(eps, d) : new Unary(oracle, eps, d);
}

/** The mechanism of a range or numeric config in a shuffled privacy mode
 * (`shuffled_kinds.index_mechanism`); `InvalidConfig` naming a bad key. */
export function indexMechanism(cfg: Record<string, unknown>): Mechanism {
  const d = need(cfg, "domain_size");
  if (cfg.kind === "numeric") {
    if (cfg.mechanism !== GRID_MECHANISM)
      throw new InvalidConfig(`mechanism of a shuffled numeric campaign must be '${GRID_MECHANISM}'`);
    checkInt(d, "grid_points", MIN_GRID_POINTS, MAX_GRID_POINTS);
    return new Grid(indexOracle(cfg, "numeric", d), need(cfg, "lower"), need(cfg, "upper"));
  }
  if (cfg.method !== RANGE_METHOD)
    throw new InvalidConfig(`method of a shuffled range campaign must be '${RANGE_METHOD}'`);
  return indexOracle(cfg, "range", d);
}
