// The IndexedDB queue in real Chromium: reports made offline survive the client being closed
// (a closed tab) and are delivered once after reconnecting; nothing lost or doubled.
import { describe, expect, it } from "vitest";
import { IndexedDbBackend, TelemetryClient } from "../../src/index.js";
import { campaign, FakeCollector } from "../fakeCollector.js";

const CAMPAIGNS = [
  campaign("oue", { oracle: "oue", epsilon: 1.0, domain_size: 16 }),
  campaign("rappor", {
    oracle: "rappor",
    bloom_bits: 16,
    hashes: 2,
    cohorts: 4,
    f: 0.5,
    p: 0.5,
    q: 0.75,
    candidates: [],
  }),
];

describe("IndexedDB queue", () => {
  it("is the default store in a browser, keeps the queue across a reopen, delivers once", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const name = `ldptel-test-${Math.random()}`;
    const opts = {
      url: "http://collector.test",
      token: "t",
      fetch: fake.fetch as typeof fetch,
      backoffBaseS: 0.001,
      maxBackoffS: 0.01,
    };
    let client = await TelemetryClient.open({ ...opts, storage: new IndexedDbBackend(name) });
    await client.fetchConfigs();
    const secret = client.campaignSecret("rappor");
    fake.offline = true;
    for (let i = 0; i < 50; i++) expect(await client.report("oue", i % 16)).toBe(true);
    for (let i = 0; i < 10; i++) expect(await client.report("rappor", "x")).toBe(true);
    const offline = await client.flush(100);
    expect(offline.pending).toBe(60);
    expect(client.health().storage).toBe("indexeddb");
    await client.close(null);
    fake.offline = false;
    client = await TelemetryClient.open({ ...opts, storage: new IndexedDbBackend(name) });
    expect(client.pending()).toBe(60);
    expect(client.campaignSecret("rappor")).toEqual(secret);
    fake.script = ["lost"]; // the first chunk is stored but its answer lost: retried, deduplicated
    const result = await client.flush();
    expect(result.pending).toBe(0);
    expect(fake.accepted).toBe(60);
    await client.close();
    const defaulted = await TelemetryClient.open({
      url: "http://other.test",
      token: "t",
      fetch: fake.fetch as typeof fetch,
    });
    expect(defaulted.health().storage).toBe("indexeddb");
    await defaulted.close(null);
  });

  it("two tabs on one database: each report delivered once", async () => {
    const fake = new FakeCollector(CAMPAIGNS);
    const name = `ldptel-tabs-${Math.random()}`;
    const opts = {
      url: "http://collector.test",
      token: "t",
      fetch: fake.fetch as typeof fetch,
      backoffBaseS: 0.001,
      maxBackoffS: 0.01,
    };
    const a = await TelemetryClient.open({ ...opts, storage: new IndexedDbBackend(name), batchSize: 7 });
    const b = await TelemetryClient.open({ ...opts, storage: new IndexedDbBackend(name), batchSize: 5 });
    await a.fetchConfigs();
    await b.fetchConfigs();
    for (let i = 0; i < 30; i++) {
      expect(await a.report("oue", i % 16)).toBe(true);
      expect(await b.report("oue", (i + 3) % 16)).toBe(true);
    }
    const [ra, rb] = await Promise.all([a.flush(), b.flush()]);
    expect(ra.pending + rb.pending).toBe(0);
    expect(fake.accepted).toBe(60);
    expect(ra.duplicates + rb.duplicates).toBe(0);
    await a.close(null);
    await b.close(null);
  });

  it("two tabs share the ledger: reports_per_window holds across them", async () => {
    const fake = new FakeCollector([
      campaign("capped", { oracle: "grr", epsilon: 1.0, domain_size: 4, reports_per_window: 5 }),
    ]);
    const name = `ldptel-ledger-${Math.random()}`;
    const opts = { url: "http://collector.test", token: "t", fetch: fake.fetch as typeof fetch };
    const a = await TelemetryClient.open({ ...opts, storage: new IndexedDbBackend(name) });
    const b = await TelemetryClient.open({ ...opts, storage: new IndexedDbBackend(name) });
    await Promise.all([a.fetchConfigs(), b.fetchConfigs()]);
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 ? a : b).report("capped", i % 4)));
    expect(results.filter(Boolean).length).toBe(5);
    expect((a.health().dropped.reports_per_window ?? 0) + (b.health().dropped.reports_per_window ?? 0)).toBe(7);
    await a.close(null);
    await b.close(null);
  });
});
