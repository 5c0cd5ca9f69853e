// The empirical ε-LDP check of core/privacy/ldp_check.py in TypeScript: every P(o | u) gets a two-sided
// Clopper–Pearson interval at level 1 − α/K (K cells; union bound), and a violation is flagged
// only when max over (o, u ≠ v) of lower(P(o|u)) / upper(P(o|v)) exceeds e^ε — which an honest
// mechanism does with probability ≤ α. The beta quantiles come from the regularized incomplete
// beta function (continued fraction, Numerical Recipes §6.4) by bisection.
export const ALPHA = 1e-6;

function lgamma(x: number): number {
  const c = [
    // biome-ignore lint/correctness/noPrecisionLoss: Lanczos's coefficients as published
    76.18009172947146, -86.50532032941677, 24.01409824083091, -1.231739572450155, 0.1208650973866179e-2,
    -0.5395239384953e-5,
  ];
  let y = x;
  const tmp = x + 5.5 - (x + 0.5) * Math.log(x + 5.5);
  let ser = 1.000000000190015;
  for (const ci of c) ser += ci / ++y;
  // biome-ignore lint/correctness/noPrecisionLoss: √(2π) as published
  return -tmp + Math.log((2.5066282746310005 * ser) / x);
}

function betacf(x: number, a: number, b: number): number {
  const FPMIN = 1e-300;
  let c = 1,
    d = 1 - ((a + b) * x) / (a + 1);
  if (Math.abs(d) < FPMIN) d = FPMIN;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 10000; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((a - 1 + m2) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < FPMIN) d = FPMIN;
    c = 1 + aa / c;
    if (Math.abs(c) < FPMIN) c = FPMIN;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (a + b + m) * x) / ((a + m2) * (a + 1 + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < FPMIN) d = FPMIN;
    c = 1 + aa / c;
    if (Math.abs(c) < FPMIN) c = FPMIN;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-15) break;
  }
  return h;
}

/** I_x(a, b), the regularized incomplete beta function (the Beta(a, b) CDF at x). */
export function betaCdf(x: number, a: number, b: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const bt = Math.exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * Math.log(x) + b * Math.log(1 - x));
  return x < (a + 1) / (a + b + 2) ? (bt * betacf(x, a, b)) / a : 1 - (bt * betacf(1 - x, b, a)) / b;
}

/** The p-quantile of Beta(a, b). */
export function betaPpf(p: number, a: number, b: number): number {
  let lo = 0,
    hi = 1;
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (betaCdf(mid, a, b) < p) lo = mid;
    else hi = mid;
    if (hi - lo < 1e-17) break;
  }
  return (lo + hi) / 2;
}

export interface LdpCheck {
  epsilon: number;
  maxLowerRatio: number;
  maxPointRatio: number;
  argmaxInterval: [number, number];
  violation: boolean;
  attainsBound: boolean;
}

/** `counts[u][o]`: how often input u gave output o. */
export function checkLdp(counts: number[][], epsilon: number, alpha = ALPHA): LdpCheck {
  const U = counts.length,
    O = counts[0]!.length;
  const a = alpha / (2 * U * O);
  const n = counts.map((row) => row.reduce((s, c) => s + c, 0));
  const lower = counts.map((row, u) => row.map((c) => (c > 0 ? betaPpf(a, c, n[u]! - c + 1) : 0)));
  const upper = counts.map((row, u) => row.map((c) => (c < n[u]! ? betaPpf(1 - a, c + 1, n[u]! - c) : 1)));
  let maxLower = 0,
    maxPoint = 0;
  let interval: [number, number] = [0, Infinity];
  for (let u = 0; u < U; u++) {
    for (let v = 0; v < U; v++) {
      if (u === v) continue;
      for (let o = 0; o < O; o++) {
        maxLower = Math.max(maxLower, lower[u]![o]! / upper[v]![o]!);
        if (counts[u]![o]! > 0) {
          const point = counts[u]![o]! / n[u]! / (counts[v]![o]! / n[v]!);
          if (point > maxPoint) {
            maxPoint = point;
            interval = [lower[u]![o]! / upper[v]![o]!, upper[u]![o]! / lower[v]![o]!];
          }
        }
      }
    }
  }
  const e = Math.exp(epsilon);
  return {
    epsilon,
    maxLowerRatio: maxLower,
    maxPointRatio: maxPoint,
    argmaxInterval: interval,
    violation: maxLower > e,
    attainsBound: interval[0] <= e && e <= interval[1],
  };
}
