// Device-level campaigns on the device (unique_devices, per_device_histogram, per_device_count)
// against a fake collector whose clock the test moves: events aggregate in the store, one report
// per device and window once the window has ended (its window and dimension values on the
// envelope), charged once by the ledger; a device with no event still reports its window
// (unique_devices: "none"); windows survive a restart of the file store; late windows dropped.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { Draws } from "../src/draws.js";
import type { TelemetryClient } from "../src/index.js";
import { openClient } from "../src/node.js";
import { campaign, FakeCollector, openTestClient } from "./fakeCollector.js";

const DAY = 86400;
const D0 = 1_700_006_400; // a day's start
/** Draws under which GRR keeps its value (uniform 0 < p): the aggregate is visible on the wire. */
const keep: Draws = { uniform: () => 0, below: () => 0, u32: () => 0, bytes: (n) => new Uint8Array(n) };

const UD = campaign("ud", {
  kind: "unique_devices",
  oracle: "grr",
  epsilon: 1.0,
  domain: ["none", "at_least_once"],
  domain_size: 2,
  reports_per_window: 1,
  dimensions: [{ name: "platform", values: ["android", "ios"] }],
});
const HIST = campaign("hist", {
  kind: "per_device_histogram",
  oracle: "grr",
  epsilon: 1.0,
  domain_size: 40,
  reports_per_window: 1,
});
const COUNT = campaign("count", {
  kind: "per_device_count",
  epsilon: 1.0,
  lower: 0,
  upper: 50,
  mechanism: "piecewise",
  window: "7d",
  window_seconds: 7 * DAY,
  reports_per_window: 1,
});

const open = (fake: FakeCollector, extra: Record<string, unknown> = {}) =>
  openTestClient(fake, { draws: keep, ...extra });

async function at(fake: FakeCollector, client: TelemetryClient, t: number): Promise<void> {
  fake.serverTime = t;
  await client.fetchConfigs(); // the device hears the collector's clock
}

describe("device-level windows", () => {
  it("unique_devices: one report per window, at its end, whatever the number of events; none for a quiet window", async () => {
    const fake = new FakeCollector([UD]);
    const client = await open(fake, { dimensions: { platform: "ios" } });
    await at(fake, client, D0 + 100);
    for (let i = 0; i < 5; i++) expect(await client.report("ud", "opened")).toBe(true);
    expect(client.pending()).toBe(0);
    expect(await client.flush()).toMatchObject({ accepted: 0, pending: 0 });
    await at(fake, client, D0 + DAY + 100);
    expect(await client.flush()).toMatchObject({ accepted: 1, pending: 0 });
    await at(fake, client, D0 + 2 * DAY + 5);
    expect(await client.flush()).toMatchObject({ accepted: 1 }); // the quiet day D0 + 1: "none"
    expect(fake.stored.map((b) => [b.window, b.grr, b.dimensions])).toEqual([
      [D0, [1], [["platform", "ios"]]],
      [D0 + DAY, [0], [["platform", "ios"]]],
    ]);
    const ledger = client.privacyLedger() as { campaigns: Record<string, { reports: number; epsilon_spent: number }> };
    expect(ledger.campaigns.ud).toMatchObject({ reports: 2, epsilon_spent: 2 });
    expect(client.pendingWindows()).toBe(1); // the current day, opened by the flush
  });

  it("per_device_histogram: the most common value (ties: the first seen), reported by devices with an event", async () => {
    const fake = new FakeCollector([HIST]);
    const client = await open(fake);
    await at(fake, client, D0 + 10);
    for (const v of [30, 7, 30, 7, 2]) await client.report("hist", v);
    expect(await client.report("hist", 40)).toBe(false); // outside the domain
    await at(fake, client, D0 + DAY + 10);
    await client.report("hist", 5); // the next window's first event reports the ended one first
    expect(client.pending()).toBe(1);
    await at(fake, client, D0 + 2 * DAY + 10);
    expect(await client.flush()).toMatchObject({ accepted: 2 });
    expect(fake.stored.map((b) => [b.window, b.grr])).toEqual([
      [D0, [30]],
      [D0 + DAY, [5]],
    ]);
    expect(client.health().dropped).toEqual({ bad_value: 1 });
  });

  it("per_device_count: the window's events summed, clipped by the mechanism; a window too late is dropped", async () => {
    const fake = new FakeCollector([COUNT]);
    const client = await open(fake);
    await at(fake, client, D0 + 10);
    for (const n of [1, 2.5, 0, 10]) expect(await client.report("count", n)).toBe(true);
    expect(await client.report("count", -1)).toBe(false);
    await at(fake, client, D0 + 7 * DAY + 10 + 15 * DAY); // the window ended 15 days ago (> max(2 windows, 7 d))
    await client.flush();
    expect(fake.stored.length).toBe(0);
    expect(client.health().dropped).toEqual({ bad_value: 1, window_closed: 1 });
  });

  it("the aggregate survives a restart (file store) and is reported at the next start, once", async () => {
    const path = join(mkdtempSync(join(tmpdir(), "ldptel-")), "q.jsonl");
    const fake = new FakeCollector([UD, COUNT]);
    let client = await openClient({
      url: "http://collector.test",
      token: "t",
      queuePath: path,
      fetch: fake.fetch as typeof fetch,
      backoffBaseS: 0.001,
      draws: keep,
    });
    await at(fake, client, D0 + 10);
    await client.report("ud", 1, { dimensions: { platform: "android" } });
    await client.report("count", 3);
    await client.close(null);
    client = await openClient({
      url: "http://collector.test",
      token: "t",
      queuePath: path,
      fetch: fake.fetch as typeof fetch,
      backoffBaseS: 0.001,
      draws: keep,
    });
    expect(client.pendingWindows()).toBe(2);
    // a day of the window's 7 d of lateness left (exactly 7 d after its end is the boundary: the
    // milliseconds between the configs' answer and the flush would push it past)
    await at(fake, client, D0 + 7 * DAY);
    expect(await client.flush()).toMatchObject({ accepted: 2, pending: 0 });
    await client.close(null);
    client = await openClient({
      url: "http://collector.test",
      token: "t",
      queuePath: path,
      fetch: fake.fetch as typeof fetch,
      draws: keep,
    });
    await at(fake, client, D0 + 7 * DAY + 60);
    expect(await client.flush()).toMatchObject({ accepted: 0, pending: 0 }); // nothing twice
    expect(fake.stored.map((b) => [b.campaign, b.window]).sort()).toEqual([
      ["count", D0 - (D0 % (7 * DAY))],
      ["ud", D0],
    ]);
    expect(fake.stored.find((b) => b.campaign === "ud")!.dimensions).toEqual([["platform", "android"]]);
    await client.close(null);
  });
});
