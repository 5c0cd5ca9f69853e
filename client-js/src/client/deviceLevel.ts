/**
 * Device-level report types (issue 28, as `ldptel.client.device_level`): the SDK aggregates a
 * campaign's events over its window on the device and sends ONE randomized report per device and
 * window, at the window's end or at the next start of the app.
 *
 * - `unique_devices`: did the event happen at least once in the window (1 or 0, randomized
 *   response on one bit), whatever the number of events;
 * - `per_device_histogram`: the device's most common value in the window (ties: the value seen
 *   first), through the campaign's frequency oracle;
 * - `per_device_count`: the device's number of events (each `report()` adds its value, ≥ 0),
 *   through a numeric mechanism (clipped to [0, upper]).
 *
 * The aggregate lives in the durable store beside the queue and the ledger (table `w/`, one entry
 * per campaign and window: the events, the counts per value in first-seen order, the version and
 * the last dimension values). `touch` opens the current window of every `unique_devices` and
 * `per_device_count` campaign at each flush, so a device active in a window without an event
 * reports "none" (or 0). `finalize` turns each ended window into its report — randomized with the
 * version's mechanism, queued with the window (`ReportBatch.window`) and its dimension values,
 * charged to the ledger under that window (one report per window), and the aggregate deleted — in
 * one store transaction, under the ledger's Web Lock: a window is reported once, also across a
 * crash, a closed tab or two tabs. A window that ended more than max(2 windows, 7 days) ago, or
 * whose campaign the collector no longer takes, is dropped and counted (`window_closed`, or the
 * config's reason).
 */
import type { Cost } from "../builder.js";
import { valueIndex } from "../builder.js";
import type { Pairs } from "../dimensions.js";
import type { Draws } from "../draws.js";
import type { Mechanism, Report } from "../mechanisms/base.js";
import { windowStart } from "./envelope.js";
import type { Ledger, Refusal } from "./ledger.js";
import type { Json, Store, Write } from "./store.js";

export const TOUCHED_KINDS = ["unique_devices", "per_device_count"];
export const MIN_LATE_SECONDS = 7 * 86400;

/** How long after its end a window's report is still taken: two windows, at least 7 days. */
export function lateSeconds(windowSeconds: number): number {
  return Math.max(2 * windowSeconds, MIN_LATE_SECONDS);
}

/** What one `report(campaign, value)` adds to the window's events: 1, or for
 * `per_device_count` the number `value` (≥ 0; a `RangeError` otherwise). */
export function increment(cfg: Record<string, unknown>, value: unknown): number {
  if (cfg.kind !== "per_device_count") return 1;
  if (typeof value !== "number" || !(value >= 0)) {
    throw new RangeError(
      `a per_device_count value is the number of events to add (a number >= 0), got ${String(value)}`,
    );
  }
  return value;
}

/** The key a `per_device_histogram` event of `value` is counted under: its label (a campaign with
 * a `domain`) or its index as a string; null for the other kinds. */
export function eventKey(cfg: Record<string, unknown>, value: unknown): string | null {
  if (cfg.kind !== "per_device_histogram") return null;
  const index = valueIndex(cfg, value);
  if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= (cfg.domain_size as number)) {
    throw new RangeError(`value ${JSON.stringify(value)} is not in its domain`);
  }
  return Array.isArray(cfg.domain) && cfg.domain.length ? String(cfg.domain[index]) : String(index);
}

/** The value a window's report randomizes (`device_level.aggregate`). `counts`: [key, events] in
 * first-seen order (an array, not an object: an object would put integer-like keys first). */
export function aggregate(kind: string, events: number, counts: [string, number][], labels: string[] | null): number {
  if (kind === "unique_devices") return events > 0 ? 1 : 0;
  if (kind === "per_device_count") return events;
  let best = counts[0]!;
  for (const c of counts) if (c[1] > best[1]) best = c; // strictly more: the first seen keeps a tie
  return labels !== null ? labels.indexOf(best[0]) : Number.parseInt(best[0], 10);
}

export interface WindowRow {
  campaign: string;
  window: number;
  version: number;
  dims: Pairs;
  events: number;
  counts: [string, number][];
}

export interface Built {
  cfg: Record<string, unknown>;
  mech: Mechanism;
  cost: Cost;
}

/** What the windows use of their client. */
export interface DeviceHost {
  readonly store: Store;
  readonly ledger: Ledger;
  readonly draws: Draws;
  /** The (campaign, version)'s config and mechanism; null while no config is known; a reason
   * (`version_retired`, `campaign_retired`, `bad_config`) when it cannot be reported to. */
  built(campaign: string, version: number): Built | { reason: string; message: string } | null;
  drop(reason: string, n: number, message: string): void;
  /** A queue row of a report: its key and value. */
  queueRow(campaign: string, version: number, report: Report, window: number, dims: Pairs): [string, Json];
  /** Run `fn` under the lock that admits ledger charges (a Web Lock across tabs). */
  locked<T>(fn: () => Promise<T>): Promise<T>;
}

const keyOf = (campaign: string, window: number) => `w/${campaign}\u0000${window}`;

export class DeviceWindows {
  constructor(private readonly host: DeviceHost) {}

  private rows(campaign?: string): WindowRow[] {
    return [...this.host.store.entries("w/")]
      .map(([, v]) => v as unknown as WindowRow)
      .filter((r) => campaign === undefined || r.campaign === campaign)
      .sort((a, b) => a.window - b.window);
  }

  pending(): number {
    return this.host.store.size("w/");
  }

  /** Add one event of `value` to the current window's aggregate (a bad value throws a
   * `RangeError` before anything is written). */
  record(campaign: string, cfg: Record<string, unknown>, value: unknown, dims: Pairs, now: number): Promise<void> {
    const add = increment(cfg, value);
    const key = eventKey(cfg, value);
    const window = windowStart(now, cfg.window_seconds as number);
    return this.host.locked(async () => {
      await this.host.store.refresh(["w/"]);
      await this.host.store.transact((s) => {
        const old = s.get(keyOf(campaign, window)) as unknown as WindowRow | undefined;
        const counts = old ? old.counts.map((c): [string, number] => [c[0], c[1]]) : [];
        if (key !== null) {
          const at = counts.find((c) => c[0] === key);
          if (at) at[1] += 1;
          else counts.push([key, 1]);
        }
        const row: WindowRow = {
          campaign,
          window,
          version: (cfg.version as number) ?? 1,
          dims,
          events: (old?.events ?? 0) + add,
          counts,
        };
        return { writes: [[keyOf(campaign, window), row as unknown as Json]], result: undefined };
      });
    });
  }

  /** Open the current window (no event) of every `TOUCHED_KINDS` campaign of `configs` with the
   * dimension values `dimsOf(cfg)` (the client's defaults; null: skipped). */
  touch(
    configs: Record<string, Record<string, unknown>>,
    now: number,
    dimsOf: (cfg: Record<string, unknown>) => Pairs | null,
  ): Promise<void> {
    const fresh: WindowRow[] = [];
    for (const [name, cfg] of Object.entries(configs)) {
      if (!TOUCHED_KINDS.includes(cfg.kind as string) || (cfg.status ?? "active") !== "active") continue;
      if (typeof cfg.window_seconds !== "number" || !(cfg.window_seconds > 0)) continue;
      const dims = dimsOf(cfg);
      if (dims === null) continue;
      fresh.push({
        campaign: name,
        window: windowStart(now, cfg.window_seconds),
        version: (cfg.version as number) ?? 1,
        dims,
        events: 0,
        counts: [],
      });
    }
    if (!fresh.length) return Promise.resolve();
    return this.host.locked(async () => {
      await this.host.store.refresh(["w/"]);
      await this.host.store.transact((s) => ({
        writes: fresh
          .filter((r) => s.get(keyOf(r.campaign, r.window)) === undefined)
          .map((r): Write => [keyOf(r.campaign, r.window), r as unknown as Json]),
        result: undefined,
      }));
    });
  }

  /** Queue the report of every window that ended by `now` (of `campaign` only, if given); returns
   * how many were queued. */
  async finalize(now: number, campaign?: string): Promise<number> {
    let queued = 0;
    for (const row of this.rows(campaign)) {
      const built = this.host.built(row.campaign, row.version);
      if (built === null) continue; // no config now: kept for a later flush
      if ("reason" in built) {
        await this.forget(row, built.reason, built.message);
        continue;
      }
      const length = built.cfg.window_seconds as number;
      if (row.window + length > now) continue;
      if (now - (row.window + length) > lateSeconds(length)) {
        await this.forget(
          row,
          "window_closed",
          `campaign ${row.campaign}: the window of ${row.window} ended more than ` +
            `${lateSeconds(length)} s ago; its report is dropped`,
        );
        continue;
      }
      queued += await this.report(row, built);
    }
    return queued;
  }

  private forget(row: WindowRow, reason: string, message: string): Promise<void> {
    return this.host.locked(async () => {
      await this.host.store.refresh(["w/"]);
      const gone = await this.host.store.transact((s) =>
        s.get(keyOf(row.campaign, row.window)) === undefined
          ? { writes: [] as Write[], result: true }
          : { writes: [[keyOf(row.campaign, row.window), undefined]] as Write[], result: false },
      );
      if (!gone) this.host.drop(reason, 1, message);
    });
  }

  /** Randomize one window's aggregate and queue it with its ledger charge, deleting the aggregate,
   * in one transaction (a histogram window without an event: deleted, nothing sent). */
  private report(row: WindowRow, b: Built): Promise<number> {
    const kind = b.cfg.kind as string;
    const wkey = keyOf(row.campaign, row.window);
    return this.host.locked(async () => {
      await this.host.store.refresh(["w/", "l/"]);
      const current = this.host.store.get(wkey) as unknown as WindowRow | undefined;
      if (current === undefined) return 0; // another tab reported it
      let report: Report | null = null;
      if (!(kind === "per_device_histogram" && current.counts.length === 0)) {
        const labels = Array.isArray(b.cfg.domain) && b.cfg.domain.length ? b.cfg.domain.map(String) : null;
        report = b.mech.encode(aggregate(kind, current.events, current.counts, labels), this.host.draws);
      }
      const refusal = await this.host.store.transact((s) => {
        const writes: Write[] = [[wkey, undefined]];
        if (report === null) return { writes, result: null as Refusal | null | "none" };
        const charge = {
          campaign: row.campaign,
          version: current.version,
          cost: b.cost,
          windowStart: current.window,
          perWindow: 1,
          valueKey: "",
        };
        const admitted = this.host.ledger.admit(s, charge);
        writes.push(...admitted.writes);
        if (admitted.refusal === null)
          writes.push(this.host.queueRow(row.campaign, current.version, report, current.window, current.dims));
        return { writes, result: admitted.refusal };
      });
      if (report === null) return 0;
      if (refusal !== null && refusal !== "none") {
        this.host.drop(
          refusal,
          1,
          `campaign ${row.campaign}: the report of window ${row.window} was refused (${refusal})`,
        );
        return 0;
      }
      return 1;
    });
  }
}
