/**
 * The device's privacy ledger, as `ldptel.client.ledger`: per campaign and version, the reports
 * queued, Σ ε₁ of fresh reports, Σ ε∞ of memoized values (each distinct value once, capped at the
 * mechanism's lifetime bound), refusals; the campaign's `reports_per_window` cap and the client's
 * `lifetimeEpsilon` (per campaign, or over the device with `scope = "device"`). Admission reads
 * and writes inside the store's transaction that queues the report.
 */
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import type { Cost } from "../builder.js";
import { toHex } from "../draws.js";
import type { Json, Store, Write } from "./store.js";

export const NO_CAP = 2 ** 62;
export const TOLERANCE = 1e-9;
export type Scope = "campaign" | "device";
export const REFUSALS = {
  reports_per_window: "its reports_per_window were sent in this window",
  lifetime_epsilon: "it would take the privacy ledger past lifetime_epsilon",
} as const;
export type Refusal = keyof typeof REFUSALS;

export interface LedgerRow {
  campaign: string;
  version: number;
  reports: number;
  epsilon_reports: number;
  epsilon_memoized: number;
  memoized_values: number;
  refused: number;
  over_window: number;
  window_start: number;
  window_reports: number;
}

export interface Charge {
  campaign: string;
  version: number;
  cost: Cost;
  windowStart: number;
  perWindow: number;
  valueKey: string;
}

export function windowStart(nowSeconds: number, windowSeconds: number): number {
  return windowSeconds <= 0 ? 0 : Math.floor(nowSeconds / windowSeconds) * windowSeconds;
}

const rowKey = (campaign: string, version: number) => `l/${campaign}\u0000${version}`;

export class Ledger {
  constructor(
    readonly key: Uint8Array,
    readonly lifetimeEpsilon: number | null,
    readonly scope: Scope,
  ) {}

  valueKey(campaign: string, value: unknown): string {
    return toHex(hmac(sha256, this.key, new TextEncoder().encode(`${campaign}\0${typeof value}\0${String(value)}`)));
  }

  charge(campaign: string, cfg: Record<string, unknown>, cost: Cost, value: unknown, nowSeconds: number): Charge {
    const num = (k: string, d: number) => (typeof cfg[k] === "number" ? (cfg[k] as number) : d);
    return {
      campaign,
      version: num("version", 1),
      cost,
      windowStart: windowStart(nowSeconds, num("window_seconds", 0)),
      perWindow: num("reports_per_window", NO_CAP),
      valueKey: cost.memoized ? this.valueKey(campaign, value) : "",
    };
  }

  private rows(store: Store): LedgerRow[] {
    return [...store.entries("l/")].map(([, v]) => v as unknown as LedgerRow);
  }

  /** The writes admitting `c` and null, or the writes counting a refusal and its reason. */
  admit(store: Store, c: Charge): { writes: Write[]; refusal: Refusal | null } {
    const key = rowKey(c.campaign, c.version);
    const row: LedgerRow = {
      ...((store.get(key) as unknown as LedgerRow) ?? {
        campaign: c.campaign,
        version: c.version,
        reports: 0,
        epsilon_reports: 0,
        epsilon_memoized: 0,
        memoized_values: 0,
        refused: 0,
        over_window: 0,
        window_start: -1,
        window_reports: 0,
      }),
    };
    const all = this.rows(store);
    const inWindow = all
      .filter((r) => r.campaign === c.campaign && r.window_start === c.windowStart)
      .reduce((n, r) => n + r.window_reports, 0);
    const put = (): Write => [key, row as unknown as Json];
    if (inWindow >= c.perWindow) {
      row.over_window += 1;
      return { writes: [put()], refusal: "reports_per_window" };
    }
    const memoKey = `v/${c.campaign}\u0000${c.version}\u0000${c.valueKey}`;
    let epsilon = c.cost.epsilon,
      newValue = false;
    if (c.cost.memoized) {
      if (store.get(memoKey) !== undefined) epsilon = 0;
      else {
        newValue = true;
        if (c.cost.lifetime !== null)
          epsilon = Math.max(0, Math.min(c.cost.epsilon, c.cost.lifetime - row.epsilon_memoized));
      }
    }
    if (epsilon && this.lifetimeEpsilon !== null) {
      const spent = all
        .filter((r) => this.scope === "device" || r.campaign === c.campaign)
        .reduce((n, r) => n + r.epsilon_reports + r.epsilon_memoized, 0);
      if (spent + epsilon > this.lifetimeEpsilon + TOLERANCE) {
        row.refused += 1;
        return { writes: [put()], refusal: "lifetime_epsilon" };
      }
    }
    const writes: Write[] = [];
    if (newValue) {
      writes.push([memoKey, 1]);
      row.epsilon_memoized += epsilon;
      row.memoized_values += 1;
    } else if (!c.cost.memoized) {
      row.epsilon_reports += epsilon;
    }
    row.reports += 1;
    row.window_reports = row.window_start === c.windowStart ? row.window_reports + 1 : 1;
    row.window_start = c.windowStart;
    writes.push(put());
    return { writes, refusal: null };
  }

  /** What the device has spent (as `PrivacyLedger.snapshot`). */
  snapshot(store: Store): Record<string, unknown> {
    const campaigns: Record<
      string,
      {
        epsilon_spent: number;
        reports: number;
        refused: number;
        over_window: number;
        versions: Record<string, LedgerRow>;
      }
    > = {};
    for (const r of this.rows(store)) {
      const e = (campaigns[r.campaign] ??= { epsilon_spent: 0, reports: 0, refused: 0, over_window: 0, versions: {} });
      e.versions[String(r.version)] = r;
      e.epsilon_spent += r.epsilon_reports + r.epsilon_memoized;
      e.reports += r.reports;
      e.refused += r.refused;
      e.over_window += r.over_window;
    }
    return {
      scope: this.scope,
      lifetime_epsilon: this.lifetimeEpsilon,
      epsilon_spent: Object.values(campaigns).reduce((n, c) => n + c.epsilon_spent, 0),
      campaigns,
    };
  }
}
