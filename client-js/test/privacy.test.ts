// Empirical ε-LDP of the JS device path, with the method of tests/test_privacy.py (test/ldpCheck.ts:
// Clopper–Pearson at α = 1e-6, union bound): for every mechanism no output's probability ratio
// between two inputs provably exceeds e^ε, and the bound is attained (the interval at the largest
// point ratio contains e^ε: the test has power); a deliberately broken mechanism (randomizing with
// 2ε while claiming ε) is flagged. Randomness: crypto.getRandomValues, as in production.
import { describe, expect, it } from "vitest";
import { buildMechanism } from "../src/builder.js";
import { cryptoDraws, type Draws } from "../src/draws.js";
import { olhHash, xxh32Int } from "../src/hashing.js";
import type { Mechanism, Report } from "../src/mechanisms/base.js";
import { GRR, Unary } from "../src/mechanisms/oracles.js";
import { betaCdf, betaPpf, checkLdp } from "./ldpCheck.js";

const N = 40_000; // reports per input (the Python one-report path's N_SCALAR)
const N_DEVICES = 25_000;

type Code = (r: Report) => number;

function counts(
  make: () => Mechanism,
  inputs: unknown[],
  code: Code,
  size: number,
  n: number,
  freshDevice = false,
): number[][] {
  let mech = make();
  return inputs.map((u) => {
    const row = new Array<number>(size).fill(0);
    for (let i = 0; i < n; i++) {
      if (freshDevice) mech = make();
      row[code(mech.encode(u, cryptoDraws))]! += 1;
    }
    return row;
  });
}

const first = (r: Report, col: string) => r.columns[col]![0]!;
const bitsCode =
  (d: number): Code =>
  (r) =>
    (first(r, "bits") as Uint8Array)[0]! >> (8 - d);
const random32 = () => cryptoDraws.bytes(32);

/** A GRR that randomizes with `factor`·ε but claims ε (the negative control). */
class LeakyGRR extends GRR {
  constructor(
    eps: number,
    d: number,
    readonly factor: number,
  ) {
    super(eps, d);
  }
  override get p(): number {
    const e = Math.exp(this.factor * this.epsilon);
    return e / (e + this.domainSize - 1);
  }
}

class LeakyOUE extends Unary {
  override get q(): number {
    return 1.0 / (Math.exp(2 * this.epsilon) + 1);
  }
}

const cases: [string, () => Mechanism, unknown[], Code, number, boolean?][] = [
  [
    "grr d=3 ε=1",
    () => buildMechanism({ oracle: "grr", epsilon: 1.0, domain_size: 3 }, random32()),
    [0, 1, 2],
    (r) => first(r, "values") as number,
    3,
  ],
  [
    "grr d=4 ε=2",
    () => buildMechanism({ oracle: "grr", epsilon: 2.0, domain_size: 4 }, random32()),
    [0, 1, 3],
    (r) => first(r, "values") as number,
    4,
  ],
  [
    "oue d=3 ε=1",
    () => buildMechanism({ oracle: "oue", epsilon: 1.0, domain_size: 3 }, random32()),
    [0, 1, 2],
    bitsCode(3),
    8,
  ],
  [
    "sue d=3 ε=1",
    () => buildMechanism({ oracle: "sue", epsilon: 1.0, domain_size: 3 }, random32()),
    [0, 1, 2],
    bitsCode(3),
    8,
  ],
  [
    "hadamard d=3 ε=1",
    () => buildMechanism({ oracle: "hadamard", epsilon: 1.0, domain_size: 3 }, random32()),
    [0, 1, 2],
    (r) => (first(r, "indices") as number) * 2 + (first(r, "signs") ? 1 : 0),
    8,
  ],
  [
    "olh d=3 ε=1 (match vector)",
    () => buildMechanism({ oracle: "olh", epsilon: 1.0, domain_size: 3 }, random32()),
    [0, 1, 2],
    (r) => {
      const seed = first(r, "seeds") as number,
        y = first(r, "values") as number;
      let code = 0;
      for (let v = 0; v < 3; v++) if (olhHash(seed, xxh32Int(v), 4) === y) code |= 1 << v;
      return code;
    },
    8,
  ],
  [
    "grid grr K=3 ε=1 (a shuffled numeric campaign: rounded, then GRR)",
    () =>
      buildMechanism(
        {
          kind: "numeric",
          privacy_mode: "shuffled",
          mechanism: "grid",
          oracle: "grr",
          epsilon: 1.0,
          domain_size: 3,
          lower: 0,
          upper: 2,
        },
        random32(),
      ),
    [0, 2, 1.5],
    (r) => first(r, "values") as number,
    3,
  ],
  [
    "grid oue K=3 ε=1 (a shuffled numeric campaign: rounded, then OUE)",
    () =>
      buildMechanism(
        {
          kind: "numeric",
          privacy_mode: "shuffled",
          mechanism: "grid",
          oracle: "oue",
          epsilon: 1.0,
          domain_size: 3,
          lower: -1,
          upper: 1,
        },
        random32(),
      ),
    [-1, 1, 0.3],
    bitsCode(3),
    8,
  ],
  [
    "unique_devices ε=1 (one bit per window)",
    () => buildMechanism({ kind: "unique_devices", oracle: "grr", epsilon: 1.0, domain_size: 2 }, random32()),
    [0, 1],
    (r) => first(r, "values") as number,
    2,
  ],
  [
    "duchi ε=1",
    () => buildMechanism({ kind: "numeric", mechanism: "duchi", epsilon: 1.0, lower: 0, upper: 1 }, random32()),
    [0, 1, 0.5],
    (r) => (first(r, "bits") ? 1 : 0),
    2,
  ],
  [
    "l-grr d=3 ε₁=1 (fresh device per report)",
    () => buildMechanism({ oracle: "grr", epsilon: 1.0, domain_size: 3, memoize: true, epsilon_inf: 2.0 }, random32()),
    [0, 1, 2],
    (r) => first(r, "values") as number,
    3,
    true,
  ],
  [
    "heavy hitters 2 levels, K=4, g=4 (fresh device per report)",
    () => buildMechanism({ kind: "heavy_hitters", epsilon: 1.0, max_length: 2, levels: 2, pool_size: 4 }, random32()),
    ["ab", "zz", "q"],
    (r) =>
      ((first(r, "levels") as number) * 4 + (first(r, "seed_indices") as number)) * 4 + (first(r, "values") as number),
    32,
    true,
  ],
  [
    "rappor k=4 m=2 (fresh device per report)",
    () =>
      buildMechanism(
        { oracle: "rappor", bloom_bits: 4, hashes: 2, cohorts: 2, f: 0.5, p: 0.5, q: 0.75, candidates: [] },
        random32(),
      ),
    ["value-3", "value-9", "value-1"],
    (r) => (first(r, "cohorts") as number) * 16 + ((first(r, "bits") as Uint8Array)[0]! >> 4),
    32,
    true,
  ],
];

describe("the beta quantiles of the check", () => {
  it("match scipy.stats.beta (the Python check's quantiles)", () => {
    const rel = (a: number, b: number) => Math.abs(a - b) / b;
    expect(betaCdf(0.5, 2, 2)).toBeCloseTo(0.5, 12);
    expect(betaCdf(0.3, 1, 1)).toBeCloseTo(0.3, 12);
    expect(rel(betaPpf(0.975, 5, 10), 0.5810352571836608)).toBeLessThan(1e-7);
    expect(rel(betaPpf(1e-9 / 24, 400, 39601), 0.007097810002713266)).toBeLessThan(1e-7);
    expect(rel(betaPpf(1 - 1e-9 / 24, 13401, 26600), 0.35045266197352865)).toBeLessThan(1e-7);
    expect(rel(betaPpf(1e-7, 1, 40000), 2.5000001249968835e-12)).toBeLessThan(1e-5);
  });
});

describe("ε-LDP of every device path", () => {
  for (const [name, make, inputs, code, size, fresh] of cases) {
    it(name, () => {
      const mech = make();
      const result = checkLdp(counts(make, inputs, code, size, fresh ? N_DEVICES : N, fresh), mech.epsilon);
      expect(result.violation, JSON.stringify(result)).toBe(false);
      if (!name.startsWith("rappor")) expect(result.attainsBound, JSON.stringify(result)).toBe(true);
    });
  }
});

describe("negative controls: a mechanism leaking more than its ε is flagged", () => {
  it("GRR randomizing with 2ε", () => {
    const result = checkLdp(
      counts(
        () => new LeakyGRR(1.0, 3, 2),
        [0, 1, 2],
        (r) => first(r, "values") as number,
        3,
        N,
      ),
      1.0,
    );
    expect(result.violation).toBe(true);
  });
  it("OUE whose zeros flip at 2ε", () => {
    const result = checkLdp(
      counts(() => new LeakyOUE("oue", 1.0, 3), [0, 1, 2], bitsCode(3), 8, N),
      1.0,
    );
    expect(result.violation).toBe(true);
  });
  it("GRR at 1.25ε", () => {
    const result = checkLdp(
      counts(
        () => new LeakyGRR(2.0, 3, 1.25),
        [0, 1, 2],
        (r) => first(r, "values") as number,
        3,
        4 * N,
      ),
      2.0,
    );
    expect(result.violation).toBe(true);
  });
});

export type { Draws };
