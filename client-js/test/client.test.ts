// TelemetryClient against a fake collector: queueing, batching, retries that deduplicate, what is
// dropped and why, the ledger, refusals, and the file store across restarts.
import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TelemetryClient } from "../src/index.js";
import { defaultQueuePath, FileBackend, legacyQueuePath, openClient, userDataDir } from "../src/node.js";
import { campaign, FakeCollector, openTestClient } from "./fakeCollector.js";

const CAMPAIGNS = [
  campaign("grr", { oracle: "grr", epsilon: 2.0, domain: ["a", "b", "c"], domain_size: 3 }),
  campaign("oue", { oracle: "oue", epsilon: 1.0, domain_size: 64 }),
  campaign("rappor", {
    oracle: "rappor",
    bloom_bits: 32,
    hashes: 2,
    cohorts: 4,
    f: 0.5,
    p: 0.5,
    q: 0.75,
    candidates: ["x"],
  }),
  campaign("num", { kind: "numeric", epsilon: 1.0, lower: 0, upper: 10, mechanism: "piecewise" }),
  campaign("greedy", { oracle: "grr", epsilon: 9.0, domain_size: 4 }),
  campaign("once", { oracle: "olh", epsilon: 1.0, domain_size: 100, reports_per_window: 2 }),
  campaign("memo", { oracle: "grr", epsilon: 1.0, domain_size: 8, memoize: true, epsilon_inf: 3.0 }),
  campaign("broken", { oracle: "grr", epsilon: 1.0, domain_size: 1 }),
  campaign("sealed", { oracle: "grr", epsilon: 1.0, domain_size: 4, privacy_mode: "central" }),
  campaign("shuffled-range", {
    kind: "range",
    epsilon: 1.0,
    domain_size: 16,
    method: "histogram",
    privacy_mode: "shuffled-fakes",
  }),
  campaign("truth", {
    oracle: "histogram",
    epsilon: null,
    domain_size: 4,
    privacy_mode: "shuffled-fakes",
    fake_rate: 1.0,
  }),
  campaign("cells", {
    oracle: "grr",
    epsilon: 1.0,
    domain_size: 4,
    dimensions: [{ name: "platform", values: ["android", "ios"] }],
  }),
  campaign("devices", {
    kind: "unique_devices",
    oracle: "grr",
    epsilon: 1.0,
    domain: ["none", "at_least_once"],
    domain_size: 2,
    window: "1d",
    window_seconds: 86400,
  }),
];

const open = (fake: FakeCollector, extra: Record<string, unknown> = {}) => openTestClient(fake, extra);

describe("TelemetryClient", () => {
  it("queues randomized reports and delivers them in batches per campaign", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const client = await open(fake, { batchSize: 40 });
    for (let i = 0; i < 100; i++) {
      expect(await client.report("grr", ["a", "b", "c"][i % 3])).toBe(true);
      expect(await client.report("oue", i % 64)).toBe(true);
      expect(await client.report("rappor", "x")).toBe(true);
      expect(await client.report("num", i / 10)).toBe(true);
    }
    expect(client.pending()).toBe(400);
    const result = await client.flush();
    expect(result).toEqual({ accepted: 400, duplicates: 0, dropped: 0, pending: 0, error: null });
    expect(fake.stored.every((b) => b.count <= 40 && b.version === 1)).toBe(true);
    expect(new Set(fake.stored.map((b) => b.campaign))).toEqual(new Set(["grr", "oue", "rappor", "num"]));
  });

  it("asks for an old version's config by number and sends its queued reports under it", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const client = await open(fake);
    for (let i = 0; i < 10; i++) expect(await client.report("grr", "a")).toBe(true);
    // version 2: the collector lists the latest only, and from which version on it takes reports
    const v1 = CAMPAIGNS[0];
    fake.older = [v1];
    fake.campaigns = [{ ...v1, version: 2, epsilon: 1.0, oldest_accepted_version: 1 }, ...CAMPAIGNS.slice(1)];
    await client.fetchConfigs();
    expect(fake.asked.at(-1)).toEqual([]);
    const result = await client.flush();
    expect(result).toEqual({ accepted: 10, duplicates: 0, dropped: 0, pending: 0, error: null });
    expect(fake.asked.at(-1)).toEqual(["grr:1"]);
    expect(fake.stored.map((b) => [b.version, b.count])).toEqual([[1, 10]]);
  });

  it("never throws from report(): bad values, unknown campaigns, refused configs are counted", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const client = await open(fake, { lifetimeEpsilon: 5 });
    expect(await client.report("grr", "durian")).toBe(false);
    expect(await client.report("oue", 64)).toBe(false);
    expect(await client.report("oue", "7")).toBe(false);
    expect(await client.report("nope", 1)).toBe(false);
    expect(await client.report("greedy", 1)).toBe(false);
    expect(await client.report("broken", 0)).toBe(false);
    expect(await client.report("sealed", 0)).toBe(false); // a privacy mode this SDK does not know
    expect(await client.report("shuffled-range", 3)).toBe(false); // a shuffled range campaign without an oracle (as Python)
    expect(await client.report("truth", 0)).toBe(false); // the true value: only with acceptUnrandomized
    expect(await client.report("cells", 0, { dimensions: { platfrom: "ios" } })).toBe(false); // a typo
    expect(await client.report("cells", 0, { dimensions: { platform: "ios" } })).toBe(true);
    expect(await client.report("devices", "x")).toBe(true); // an event of the window, not a queued report
    expect(await client.report("once", 1)).toBe(true);
    expect(await client.report("once", 1)).toBe(true);
    expect(await client.report("once", 1)).toBe(false);
    expect(await client.report("num", Number.NaN)).toBe(false);
    expect(await client.report("num", 99)).toBe(true);
    const h = client.health();
    expect(h.dropped).toEqual({
      bad_value: 4,
      unknown_campaign: 1,
      campaign_refused: 2,
      bad_config: 2,
      unsupported_privacy_mode: 1,
      bad_dimension: 1,
      reports_per_window: 1,
    });
    expect(h.clipped).toEqual({ num: 1 });
    expect(h.pending).toBe(4);
    expect(client.pendingWindows()).toBe(1);
    expect(h.lastError).toContain("finite");
    // lifetime ε: 5 per campaign; olh ε = 1 each: the ledger refuses the 6th report
    const ledger = client.privacyLedger() as { campaigns: Record<string, { epsilon_spent: number }> };
    expect(ledger.campaigns.once!.epsilon_spent).toBeCloseTo(2);
  });

  it("lifetime ε and memoized values: each distinct value costs ε∞ once", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const client = await open(fake, { lifetimeEpsilon: 7 });
    for (let i = 0; i < 5; i++) expect(await client.report("memo", 3)).toBe(true);
    expect(await client.report("memo", 4)).toBe(true);
    expect(await client.report("memo", 5)).toBe(false); // 3 + 3 + 3 > 7
    expect(client.health().dropped).toEqual({ lifetime_epsilon: 1 });
    const ledger = client.privacyLedger() as { campaigns: Record<string, { epsilon_spent: number; reports: number }> };
    expect(ledger.campaigns.memo).toMatchObject({ epsilon_spent: 6, reports: 6 });
  });

  it("a lost answer is retried under the same batch_id and stored once", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const client = await open(fake);
    for (let i = 0; i < 10; i++) await client.report("oue", i);
    fake.script = ["lost", 503, "network", 429];
    const result = await client.flush();
    expect(result.pending).toBe(0);
    expect(result.accepted + result.duplicates).toBe(10);
    expect(result.duplicates).toBe(10);
    expect(fake.accepted).toBe(10);
    expect(fake.posts).toBe(5);
  });

  it("413 splits a chunk; 401 stops and keeps the queue; a 400 drops the chunk", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const client = await open(fake);
    for (let i = 0; i < 8; i++) await client.report("oue", i);
    fake.script = [413, 413];
    let result = await client.flush();
    expect(result.accepted).toBe(8);
    expect(fake.stored.map((b) => b.count)).toEqual([2, 2, 2, 2]);
    for (let i = 0; i < 4; i++) await client.report("oue", i);
    fake.script = [401];
    result = await client.flush();
    expect(result.pending).toBe(4);
    fake.script = [400];
    result = await client.flush(); // chunks of 2 since the 413s: the first is dropped
    expect(result).toMatchObject({ dropped: 2, accepted: 2, pending: 0 });
  });

  it("offline: reports queue, the flush gives up within its timeout, and they go once online", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const client = await open(fake);
    await client.fetchConfigs();
    fake.offline = true;
    for (let i = 0; i < 20; i++) expect(await client.report("grr", i % 3)).toBe(true);
    const r1 = await client.flush(200);
    expect(r1.pending).toBe(20);
    expect(r1.error).toContain("offline");
    fake.offline = false;
    const r2 = await client.flush();
    expect(r2.accepted).toBe(20);
    expect(fake.accepted).toBe(20);
  });

  it("the file store survives a restart: queue, chunk batch_ids, ledger, device secret", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ldptel-"));
    const path = join(dir, "q.jsonl");
    const fake = new FakeCollector(CAMPAIGNS);
    let client = await openClient({
      url: "http://collector.test",
      token: "t",
      queuePath: path,
      fetch: fake.fetch as typeof fetch,
      backoffBaseS: 0.001,
    });
    const secret = client.campaignSecret("rappor");
    for (let i = 0; i < 30; i++) await client.report("rappor", "x");
    await client.report("once", 1);
    await client.report("once", 1);
    fake.script = ["lost"];
    await client.flush(1); // the first chunk was stored, its answer lost; then the deadline
    await client.close(null);
    appendFileSync(path, '[["r/x", {"torn'); // a crash in the middle of a write
    client = await openClient({
      url: "http://collector.test",
      token: "t",
      queuePath: path,
      fetch: fake.fetch as typeof fetch,
      backoffBaseS: 0.001,
    });
    expect(client.campaignSecret("rappor")).toEqual(secret);
    expect(await client.report("once", 1)).toBe(false); // the window's cap survived the restart
    const result = await client.flush();
    expect(result.pending).toBe(0);
    expect(fake.accepted).toBe(32);
    expect(client.health().storage).toBe("file");
    await client.close();
    expect(readFileSync(path, "utf8").length).toBeGreaterThan(0);
  });

  it("the default file is in the user's data directory; an older SDK's file in the cache directory is moved there", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ldptel-"));
    const saved = { data: process.env.XDG_DATA_HOME, cache: process.env.XDG_CACHE_HOME };
    process.env.XDG_DATA_HOME = join(dir, "data");
    process.env.XDG_CACHE_HOME = join(dir, "cache");
    try {
      const url = "http://collector.test";
      expect(userDataDir({ XDG_DATA_HOME: "/d" }, "linux")).toBe("/d/ldptel");
      expect(userDataDir({ LOCALAPPDATA: "C:/L" }, "win32")).toBe(join("C:/L", "ldptel"));
      expect(userDataDir({}, "darwin")).toContain(join("Library", "Application Support", "ldptel"));
      expect(defaultQueuePath(url).startsWith(join(dir, "data", "ldptel", "queue-"))).toBe(true);
      const fake = new FakeCollector(CAMPAIGNS);
      const opts = { url, token: "t", fetch: fake.fetch as typeof fetch };
      // an older SDK's file in the cache directory (the issue-35 default): its secret and ledger
      let client = await openClient({ ...opts, queuePath: legacyQueuePath(url) });
      const secret = client.campaignSecret("rappor");
      await client.report("once", 1);
      await client.report("once", 1);
      await client.close(null);
      expect(existsSync(legacyQueuePath(url))).toBe(true);
      client = await openClient(opts); // the default path: the file moved, the device unchanged
      expect(existsSync(legacyQueuePath(url))).toBe(false);
      expect(existsSync(defaultQueuePath(url))).toBe(true);
      expect(client.campaignSecret("rappor")).toEqual(secret);
      expect(await client.report("once", 1)).toBe(false); // the ledger's window cap came along
      await client.close(null);
    } finally {
      for (const [k, v] of [
        ["XDG_DATA_HOME", saved.data],
        ["XDG_CACHE_HOME", saved.cache],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  it("an unusable store drops reports and says why", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const dir = mkdtempSync(join(tmpdir(), "ldptel-"));
    writeFileSync(join(dir, "file"), "");
    const client = await TelemetryClient.open({
      url: "http://c.test",
      token: "t",
      fetch: fake.fetch as typeof fetch,
      storage: new FileBackend(join(dir, "file", "q.jsonl")),
    });
    expect(await client.report("oue", 1)).toBe(true); // the memory fallback still queues
    expect(client.health()).toMatchObject({ ok: false, storage: "memory" });
    expect(client.health().storageError).toContain("cannot open");
  });

  it("no configs and no collector: the report is dropped as no_config within timeoutMs", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    fake.offline = true;
    const client = await open(fake, { timeoutMs: 100 });
    expect(await client.report("oue", 1)).toBe(false);
    expect(client.health().dropped).toEqual({ no_config: 1 });
    expect(client.health().configError).toContain("unreachable");
  });
});
