/**
 * The fake messages of `privacy_mode = "shuffled-fakes"` and the order of a device's messages, as
 * `ldptel.mechanisms.fakes` and `ldptel.client.sealed`: per real report a Poisson(λ) number of
 * fakes, each an index uniform over [0, d); then the envelope's messages in a uniformly random
 * order. Every draw comes from the SDK's `Draws` (`crypto.getRandomValues` in production).
 *
 * The Poisson count is exact inversion: one uniform per report located in the Poisson(λ) cdf,
 * tabulated as the Python SDK tabulates it (same terms, same summation, same stopping rule: the
 * same table, checked on the shared vectors with the counts it gives); a rate over
 * `MAX_TABLE_RATE` is a sum of k Poisson(λ/k), one uniform each.
 */
import type { Draws } from "../draws.js";

export const TAIL = 1e-18;
export const MAX_TABLE_RATE = 500.0;
const tables = new Map<number, Float64Array>();

/** P(X ≤ k) for k = 0, 1, … (`fakes.poisson_cdf`). */
export function poissonCdf(lam: number): Float64Array {
  if (!(lam >= 0 && lam <= MAX_TABLE_RATE))
    throw new RangeError(`a Poisson rate in [0, ${MAX_TABLE_RATE}] is tabulated, got ${lam}`);
  let table = tables.get(lam);
  if (table !== undefined) return table;
  const terms = [Math.exp(-lam)];
  let total = terms[0]!;
  let k = 0;
  while (1.0 - total > TAIL && k < 10_000 + 20 * lam) {
    k += 1;
    terms.push((terms[terms.length - 1]! * lam) / k);
    total += terms[terms.length - 1]!;
  }
  table = new Float64Array(terms.length);
  let sum = 0;
  for (let i = 0; i < terms.length; i++) table[i] = sum += terms[i]!;
  if (tables.size > 16) tables.clear();
  tables.set(lam, table);
  return table;
}

/** How many cdf entries are ≤ u (numpy's searchsorted, side "right"), at most length − 1. */
function invert(table: Float64Array, u: number): number {
  let lo = 0,
    hi = table.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (table[mid]! <= u) lo = mid + 1;
    else hi = mid;
  }
  return Math.min(lo, table.length - 1);
}

/** `n` independent Poisson(`lam`) counts (`fakes.poisson_counts`): n uniforms (n·k for a rate
 * split in k parts, each count's k consecutive). */
export function poissonCounts(draws: Draws, lam: number, n: number): number[] {
  if (lam === 0 || n === 0) return new Array<number>(n).fill(0);
  const parts = lam > MAX_TABLE_RATE ? Math.ceil(lam / MAX_TABLE_RATE) : 1;
  const table = poissonCdf(lam / parts);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    let c = 0;
    for (let j = 0; j < parts; j++) c += invert(table, draws.uniform());
    out.push(c);
  }
  return out;
}

/** A uniformly random order of `n` items (Fisher–Yates: `below(i + 1)` for i = n − 1 … 1). */
export function permutation(draws: Draws, n: number): number[] {
  const out = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = draws.below(i + 1);
    const t = out[i]!;
    out[i] = out[j]!;
    out[j] = t;
  }
  return out;
}

/**
 * The most fake messages an honest envelope of `reports` real reports carries at rate λ:
 * ⌈λr + 8√(λr) + 16⌉, and 0 at λ = 0 (`ldptel.mechanisms.fakes.max_fakes`, the one cap the
 * collector refuses above; checked equal against testvectors/sealed.json).
 */
export function maxFakes(rate: number, reports = 1): number {
  const m = Math.max(rate, 0) * reports;
  if (m === 0) return 0;
  return Math.ceil(m + 8 * Math.sqrt(m) + 16);
}

/** The indices of an envelope's fakes: Poisson(`rate`) per real report (their sum cut to
 * `maxFakes`), each uniform over [0, d). */
export function fakeIndices(draws: Draws, rate: number, reports: number, d: number): number[] {
  const drawn = poissonCounts(draws, rate, reports).reduce((a, b) => a + b, 0);
  const total = Math.min(drawn, maxFakes(rate, reports));
  const out: number[] = [];
  for (let i = 0; i < total; i++) out.push(draws.below(d));
  return out;
}
