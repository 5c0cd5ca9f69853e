// The SDK bounds the fake messages it seals (issue 36 item 6): a shuffled-fakes config whose
// fake_rate exceeds the planner's limits (λ ≤ 100, μ = λ·batch_min/d ≤ 10⁶) or differs from the λ
// its privacy claim was planned with is refused as bad_config; a chunk queued before the config
// turned bad waits, never sealed with that rate; flush() resolves. With fake_rate 2×10⁷ the SDK
// once queued the report and drew 2×10⁷ fakes at every flush.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MAX_FAKE_RATE, MAX_FAKES_PER_BUCKET } from "../src/client/envelope.js";
import { campaign, FakeCollector, openTestClient } from "./fakeCollector.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const analyzer = (JSON.parse(readFileSync(new URL("../../testvectors/sealed.json", import.meta.url), "utf8")) as any)
  .analyzer;
const HONEST = 2.275;
const fakes = (rate: number) =>
  campaign("sf", {
    oracle: "histogram",
    epsilon: null,
    domain_size: 16,
    privacy_mode: "shuffled-fakes",
    fake_rate: rate,
    batch_min: 300,
    window: "all",
    window_seconds: 0,
    reports_per_window: 1,
    analyzer_key: analyzer.config,
    privacy: { fake_rate: HONEST, batch_min: 300 },
  });

const open = (fake: FakeCollector) => openTestClient(fake, { acceptUnrandomized: true });

describe("fake_rate bounds", () => {
  it("are the planner's", () => {
    expect([MAX_FAKE_RATE, MAX_FAKES_PER_BUCKET]).toEqual([100, 1e6]);
  });

  it("a huge fake_rate is refused; a queued chunk waits; flush resolves", async () => {
    const fake = new FakeCollector([fakes(2e7)]);
    const client = await open(fake);
    expect(await client.report("sf", 3)).toBe(false);
    expect(client.health().dropped).toEqual({ bad_config: 1 });
    expect(client.health().lastError).toContain("fake_rate");
    expect(await client.flush(1000)).toMatchObject({ accepted: 0, pending: 0 });

    fake.campaigns = [fakes(HONEST)];
    await client.fetchConfigs();
    expect(await client.report("sf", 4)).toBe(true);
    for (const rate of [1000, HONEST * 1.5]) {
      // over the cap; under it, but not the planned λ
      fake.campaigns = [fakes(rate)];
      await client.fetchConfigs();
      expect(await client.report("sf", 5)).toBe(false);
    }
    fake.campaigns = [fakes(1000)];
    await client.fetchConfigs();
    expect(await client.flush(200)).toMatchObject({ accepted: 0, pending: 1 });
    expect(fake.posts).toBe(0);
    expect(client.health().dropped).toEqual({ bad_config: 3 });

    fake.campaigns = [fakes(HONEST)]; // honest again: the queued report is sealed and sent
    await client.fetchConfigs();
    expect(await client.flush(5000)).toMatchObject({ accepted: 1, pending: 0 });
    await client.close(null);
  });
});
