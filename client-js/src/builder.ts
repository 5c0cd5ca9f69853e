/**
 * A public campaign config (one entry of `GET /v1/campaigns`) → its mechanism, as
 * `ldptel.mechanisms.builder.build_mechanism`: a malformed config throws `InvalidConfig`; the
 * privacy loss and a report's cost as `builder.privacy_loss` and `claims.report_cost`.
 */
import { get, InvalidConfig, type Mechanism, need, truthy } from "./mechanisms/base.js";
import { indexMechanism } from "./mechanisms/grid.js";
import { HeavyHitters } from "./mechanisms/heavyHitters.js";
import { LGRR, LHadamard, LHeavyHitters, LOLOHA, LOSUE, LRangeHaar, LRangeHierarchical } from "./mechanisms/memo.js";
import {
  DEFAULT_BUCKETS,
  Duchi,
  defaultNumericMechanism,
  Hybrid,
  OneBitMean,
  Piecewise,
} from "./mechanisms/numeric.js";
import { GRR, Hadamard, Histogram, OLH, Unary } from "./mechanisms/oracles.js";
import { RangeHaar, RangeHierarchical } from "./mechanisms/ranges.js";
import { RAPPOR } from "./mechanisms/rappor.js";

export type CampaignConfig = Record<string, unknown>;
/** One report per device and window, aggregated on the device (issue 28; `deviceLevel.ts`). */
export const DEVICE_LEVEL_KINDS = ["unique_devices", "per_device_histogram", "per_device_count"];
export const CAMPAIGN_KINDS = ["frequency", "heavy_hitters", "range", "numeric", ...DEVICE_LEVEL_KINDS];
/** The kind whose estimates a device-level kind publishes (and whose mechanism it uses). */
const ESTIMATE_KINDS: Record<string, string> = {
  unique_devices: "frequency",
  per_device_histogram: "frequency",
  per_device_count: "numeric",
};
const ORACLES = ["grr", "sue", "oue", "olh", "hadamard", "rappor"];
const NUMERIC = ["piecewise", "duchi", "hybrid", "1bitmean"];

/** True when the campaign's reports are tied to a device secret (RAPPOR, heavy hitters, memoized). */
export function usesDeviceSecret(cfg: CampaignConfig): boolean {
  const kind = get(cfg, "kind", "frequency");
  if (kind === "numeric") return cfg.mechanism === "1bitmean" && get(cfg, "memoize", true) === true;
  return kind === "heavy_hitters" || truthy(cfg.memoize) || (kind === "frequency" && cfg.oracle === "rappor");
}

/** The mechanism of a public config (`builder.build_mechanism`). The privacy mode does not change
 * it (a shuffled campaign's oracle at its ε₀; shuffled-fakes: the histogram, or GRR at
 * local_epsilon): how reports travel is the envelope's business (`client/envelope.ts`). */
export function buildMechanism(cfg: CampaignConfig, secret: Uint8Array): Mechanism {
  let kind = get(cfg, "kind", "frequency");
  // range / numeric in a shuffled privacy mode: an index histogram (`mechanisms/grid.ts`)
  if (get(cfg, "privacy_mode", "local") !== "local" && (kind === "range" || kind === "numeric"))
    return indexMechanism(cfg);
  if (kind === "unique_devices") return new GRR(need(cfg, "epsilon"), 2); // one randomized bit, whatever the config says
  if (typeof kind === "string" && DEVICE_LEVEL_KINDS.includes(kind)) {
    if (truthy(cfg.memoize) || cfg.mechanism === "1bitmean") {
      throw new InvalidConfig(`${kind} campaigns send one fresh report per window (no memoize, no 1bitmean)`);
    }
    kind = ESTIMATE_KINDS[kind]!;
  }
  const memo = kind !== "numeric" && truthy(cfg.memoize);
  const epsInf = memo ? need(cfg, "epsilon_inf") : undefined;
  if (kind === "heavy_hitters") {
    need(cfg, "epsilon");
    need(cfg, "max_length");
    return memo ? new LHeavyHitters(cfg, epsInf, secret) : new HeavyHitters(cfg, secret);
  }
  if (kind === "range") {
    const method = get(cfg, "method", "haar");
    const eps = need(cfg, "epsilon"),
      d = need(cfg, "domain_size");
    if (method === "haar") {
      if (get(cfg, "branching") !== null) throw new InvalidConfig("branching applies only to method = 'hierarchical'");
      return memo ? new LRangeHaar(eps, d, epsInf, secret) : new RangeHaar(eps, d);
    }
    if (method === "hierarchical") {
      return memo
        ? new LRangeHierarchical(eps, d, get(cfg, "branching"), epsInf, secret)
        : new RangeHierarchical(eps, d, get(cfg, "branching"));
    }
    throw new InvalidConfig(`method must be 'haar' or 'hierarchical', got ${String(method)}`);
  }
  if (kind === "numeric") {
    const name = truthy(cfg.mechanism) ? cfg.mechanism : defaultNumericMechanism(need(cfg, "epsilon") as number);
    if (typeof name !== "string" || !NUMERIC.includes(name))
      throw new InvalidConfig(`mechanism must be one of ${NUMERIC}`);
    const eps = need(cfg, "epsilon"),
      lo = need(cfg, "lower"),
      hi = need(cfg, "upper");
    if (name === "1bitmean") {
      return new OneBitMean(eps, lo, hi, get(cfg, "memoize", true), get(cfg, "buckets", DEFAULT_BUCKETS), secret);
    }
    for (const key of ["memoize", "buckets"]) {
      if (get(cfg, key) !== null) throw new InvalidConfig(`${key} applies only to mechanism = '1bitmean'`);
    }
    return name === "duchi"
      ? new Duchi(eps, lo, hi)
      : name === "hybrid"
        ? new Hybrid(eps, lo, hi)
        : new Piecewise(eps, lo, hi);
  }
  if (kind !== "frequency") throw new InvalidConfig(`kind must be one of ${CAMPAIGN_KINDS}, got ${String(kind)}`);
  const oracle = get(cfg, "oracle");
  if (oracle === "histogram") return new Histogram(need(cfg, "domain_size")); // shuffled-fakes, no local ε
  if (oracle === "rappor") {
    for (const k of ["bloom_bits", "hashes", "cohorts", "f", "p", "q", "candidates"]) need(cfg, k);
    return new RAPPOR(cfg, secret);
  }
  if (typeof oracle !== "string" || !ORACLES.includes(oracle))
    throw new InvalidConfig(`oracle must be one of ${ORACLES}`);
  const eps = need(cfg, "epsilon"),
    d = need(cfg, "domain_size");
  if (memo) {
    switch (oracle) {
      case "grr":
        return new LGRR(eps, d, epsInf, secret);
      case "sue":
      case "oue":
        return new LOSUE(oracle, eps, d, epsInf, secret);
      case "olh":
        return new LOLOHA(eps, d, epsInf, secret);
      default:
        return new LHadamard(eps, d, epsInf, secret);
    }
  }
  switch (oracle) {
    case "grr":
      return new GRR(eps, d);
    case "sue":
    case "oue":
      return new Unary(oracle, eps, d);
    case "olh":
      return new OLH(eps, d);
    default:
      return new Hadamard(eps, d);
  }
}

/** The largest ε one device can spend on the campaign: its lifetime ε∞ when memoized and larger
 * than the per-report ε, else the per-report ε (`builder.privacy_loss`). */
export function privacyLoss(mech: Mechanism): { what: string; epsilon: number } {
  const lifetime = mech.epsilonInf;
  if (lifetime !== undefined && lifetime > mech.epsilon) return { what: "lifetime ε∞", epsilon: lifetime };
  return { what: "per-report ε", epsilon: mech.epsilon };
}

/** What one report costs the ledger (`claims.report_cost`): ε₁ each time, or (memoized) ε∞ once per
 * distinct value, the memoized total capped at the lifetime bound (none: no cap). */
export interface Cost {
  epsilon: number;
  memoized: boolean;
  lifetime: number | null;
}

export function reportCost(cfg: CampaignConfig, mech: Mechanism): Cost {
  const memo = truthy(get(cfg, "memoize", false)) || cfg.oracle === "rappor";
  const epsInf = memo ? mech.epsilonInf : undefined;
  if (memo && epsInf !== undefined) {
    return { epsilon: epsInf, memoized: true, lifetime: mech.epsilonLifetime ?? null };
  }
  // an unrandomized index (shuffled-fakes) has no local ε to charge: the ledger counts the report
  return { epsilon: Number.isFinite(mech.epsilon) ? mech.epsilon : 0, memoized: false, lifetime: null };
}

/** A categorical label → its index in the campaign's `domain`; anything else passes through. */
export function valueIndex(cfg: CampaignConfig, value: unknown): unknown {
  const labels = cfg.domain;
  if (Array.isArray(labels) && typeof value === "string") {
    const i = labels.indexOf(value);
    if (i < 0) throw new RangeError(`value ${JSON.stringify(value)} is not in the domain of ${String(cfg.name)}`);
    return i;
  }
  return value;
}
