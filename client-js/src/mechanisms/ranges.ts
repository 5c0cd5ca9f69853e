/** Range mechanisms' device side (`ldptel.mechanisms.range_haar`, `range_hierarchical`). */
import type { Draws } from "../draws.js";
import { popcount } from "../hashing.js";
import { bitLength, checkEpsilon, checkInt, checkValue, type Mechanism, type Report } from "./base.js";
import { type GRR, localOracle, OLH, signKeep } from "./oracles.js";

export class RangeHaar implements Mechanism {
  readonly name: string = "range_haar";
  readonly payload = "range" as const;
  readonly epsilon: number;
  readonly domainSize: number;
  readonly h: number;
  readonly D: number;
  readonly K: number[];

  constructor(epsilon: unknown, domainSize: unknown) {
    this.epsilon = checkEpsilon(epsilon);
    this.domainSize = checkInt(domainSize, "domain_size", 2, 2 ** 31);
    this.h = Math.max(1, bitLength(this.domainSize - 1));
    this.D = 2 ** this.h;
    this.K = [];
    for (let l = 1; l <= this.h; l++) this.K.push(this.D / 2 ** l);
  }

  get pKeep(): number {
    return signKeep(this.epsilon);
  }

  get params(): Record<string, unknown> {
    return { epsilon: this.epsilon, h: this.h, D: this.D, K: this.K, p_keep: this.pKeep };
  }

  encode(value: unknown, draws: Draws): Report {
    const v = checkValue(value, this.domainSize);
    const lev = draws.below(this.h) + 1;
    const i = Math.floor(v / 2 ** lev);
    const sigma = 1 - 2 * (Math.floor(v / 2 ** (lev - 1)) & 1);
    const j = draws.below(this.K[lev - 1]!);
    const positive = sigma > 0 === (popcount((i & j) >>> 0) % 2 === 0);
    const keep = draws.uniform() < this.pKeep;
    return { payload: this.payload, columns: { levels: [lev - 1], indices: [j], signs: [positive === keep] } };
  }
}

export function treeShape(d: number, branching: number): [number, number[], number[]] {
  let H = 0,
    cover = 1;
  while (cover < d) {
    cover *= branching;
    H += 1;
  }
  H = Math.max(H, 1);
  const widths: number[] = [];
  for (let l = 1; l <= H; l++) widths.push(branching ** (H - l));
  return [H, widths, widths.map((w) => Math.ceil(d / w))];
}

export function chooseBranching(epsilon: number, d: number): number {
  let best = Infinity,
    bestB = 2;
  for (let b = 2; b < 17; b++) {
    if (b > Math.max(d, 2)) break;
    const [H, , nodes] = treeShape(d, b);
    let sum = 0;
    for (const m of nodes) sum += localOracle(epsilon, Math.max(m, 2)).varianceStar();
    const bound = H * 2 * (b - 1) * sum;
    if (bound < best) {
      best = bound;
      bestB = b;
    }
  }
  return bestB;
}

export class RangeHierarchical implements Mechanism {
  readonly name: string = "range_hierarchical";
  readonly payload = "range" as const;
  readonly epsilon: number;
  readonly domainSize: number;
  readonly B: number;
  readonly H: number;
  readonly widths: number[];
  readonly nodes: number[];
  readonly oracles: (GRR | OLH)[];
  readonly usesOlh: boolean;

  constructor(epsilon: unknown, domainSize: unknown, branching: unknown) {
    this.epsilon = checkEpsilon(epsilon);
    this.domainSize = checkInt(domainSize, "domain_size", 2, 2 ** 31);
    this.B =
      branching === null || branching === undefined
        ? chooseBranching(this.epsilon, this.domainSize)
        : checkInt(branching, "branching", 2, 1024);
    [this.H, this.widths, this.nodes] = treeShape(this.domainSize, this.B);
    this.oracles = this.nodes.map((m) => localOracle(this.epsilon, m));
    this.usesOlh = this.oracles.some((o) => o instanceof OLH);
  }

  get params(): Record<string, unknown> {
    return {
      epsilon: this.epsilon,
      B: this.B,
      H: this.H,
      widths: this.widths,
      nodes: this.nodes,
      oracles: this.oracles.map((o) => o.name),
    };
  }

  encode(value: unknown, draws: Draws): Report {
    const v = checkValue(value, this.domainSize);
    const lev = draws.below(this.H);
    const cols = this.oracles[lev]!.randomizeOne(Math.floor(v / this.widths[lev]!), draws);
    const seeds = this.usesOlh ? [cols.seeds?.[0] ?? 0] : [];
    return { payload: this.payload, columns: { levels: [lev], values: cols.values!, seeds } };
  }
}
