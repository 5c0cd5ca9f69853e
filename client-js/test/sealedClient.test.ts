// The client in the shuffled privacy modes against a fake collector: sealed messages that the
// analyzer's key opens (real reports and fakes, shuffled, under the right info), dimension values
// on the envelope, a rotated key (unknown_key: the configs fetched again, sealed anew, nothing
// lost), a missing key (the chunk waits), a lost answer (the same batch ids: stored once), stale
// windows (dropped, counted), and plain chunks grouped by their dimension values.
import { readFileSync } from "node:fs";
import { describe, expect, it, vi } from "vitest";
import { type Draws, fromHex } from "../src/draws.js";
import { info, keyId, suite } from "../src/sealed/sealing.js";
import { type Batch, campaign, FakeCollector, openTestClient, shuffledFakes, signedKey } from "./fakeCollector.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const analyzer = (JSON.parse(readFileSync(new URL("../../testvectors/sealed.json", import.meta.url), "utf8")) as any)
  .analyzer;
const DAY = 86400;
const T0 = 1_700_006_400 + 3600;

async function keyPair(ikm: Uint8Array) {
  const pair = await suite().kem.deriveKeyPair(ikm);
  const raw = new Uint8Array(await suite().kem.serializePublicKey(pair.publicKey));
  return {
    pair,
    config: await signedKey({
      id: keyId(raw),
      public: btoa(String.fromCharCode(...raw)),
      suite: "x25519-hkdf-sha256-aes128gcm",
      accepted_until: 2e9,
    }),
  };
}

/** The plaintexts of a sealed batch, each opened with `pair` under the batch's own info. */
async function openAll(b: Batch, pair: CryptoKeyPair): Promise<Uint8Array[]> {
  const infoBytes = info(b.campaign, b.version, b.window, b.keyId);
  return Promise.all(
    b.messages.map(
      async (m) =>
        new Uint8Array(await suite().open({ recipientKey: pair, enc: m.slice(0, 32), info: infoBytes }, m.slice(32))),
    ),
  );
}

const u32 = (row: Uint8Array) => new DataView(row.buffer, row.byteOffset).getUint32(0, true);

const open = (fake: FakeCollector, extra: Record<string, unknown> = {}) => openTestClient(fake, extra);

const fakes = (extra: Record<string, unknown> = {}) =>
  shuffledFakes({
    analyzer_key: analyzer.config,
    dimensions: [{ name: "platform", values: ["android", "ios"] }],
    ...extra,
  });

describe("shuffled-fakes", () => {
  it("every message sealed to the analyzer: the real reports and Poisson fakes, shuffled, with the dimension values", async () => {
    const fake = new FakeCollector([fakes()]);
    const client = await open(fake, { acceptUnrandomized: true, batchSize: 40, dimensions: { platform: "ios" } });
    const values = Array.from({ length: 100 }, (_, i) => (i * 7) % 8);
    for (const v of values) expect(await client.report("sf", v)).toBe(true);
    const result = await client.flush();
    expect(result).toMatchObject({ accepted: 100, pending: 0, dropped: 0 });
    // one envelope per report (one device each, issue 36), the chunks of 40, 40, 20 one POST each
    expect(fake.stored.length).toBe(100);
    expect(fake.stored.every((b) => b.count === 1)).toBe(true);
    expect(new Set(fake.stored.map((b) => b.batchId)).size).toBe(100);
    expect(fake.posts).toBe(3); // 3 SealedEnvelopes bodies
    const { pair } = await keyPair(fromHex(analyzer.ikm));
    const opened = new Array<number>(8).fill(0);
    let messages = 0;
    for (const b of fake.stored) {
      expect(b).toMatchObject({ schema: 2, keyId: analyzer.key_id, window: 0, dimensions: [["platform", "ios"]] });
      expect(b.messages.every((m) => m.length === 32 + 4 + 16)).toBe(true);
      for (const row of await openAll(b, pair)) opened[u32(row)]! += 1;
      messages += b.messages.length;
    }
    const truth = new Array<number>(8).fill(0);
    for (const v of values) truth[v]! += 1;
    for (let v = 0; v < 8; v++) expect(opened[v]).toBeGreaterThanOrEqual(truth[v]!); // every real report is there
    expect(messages - 100).toBeGreaterThan(100); // Poisson(2) fakes per report: about 200
    expect(messages - 100).toBeLessThan(300);
    const ledger = client.privacyLedger() as { campaigns: Record<string, { reports: number; epsilon_spent: number }> };
    expect(ledger.campaigns.sf).toMatchObject({ reports: 100, epsilon_spent: 0 }); // no local ε to charge
  });

  it("a rotated key: 400 unknown_key, the configs fetched again, sealed anew to the new key, nothing lost", async () => {
    const fake = new FakeCollector([fakes()]);
    const client = await open(fake, { acceptUnrandomized: true });
    await client.fetchConfigs();
    for (let i = 0; i < 30; i++) await client.report("sf", i % 8, { dimensions: { platform: "android" } });
    const rotated = await keyPair(new Uint8Array(32).fill(7));
    fake.campaigns = [fakes({ analyzer_key: rotated.config })];
    fake.acceptedKeys = [rotated.config.id];
    const result = await client.flush();
    expect(result).toMatchObject({ accepted: 30, pending: 0 });
    expect(new Set(fake.stored.map((b) => b.keyId))).toEqual(new Set([rotated.config.id as number]));
    expect(fake.stored.length).toBe(30); // one envelope per device
    for (const b of fake.stored) expect((await openAll(b, rotated.pair)).length).toBe(b.messages.length);
    expect(fake.posts).toBe(2);
  });

  it("a runtime without Web Crypto X25519: the chunk is dropped and counted, nothing sent in the clear", async () => {
    const other = await keyPair(new Uint8Array(32).fill(9)); // a key not imported yet in this process
    const fake = new FakeCollector([fakes({ analyzer_key: other.config })]);
    const client = await open(fake, { acceptUnrandomized: true });
    for (let i = 0; i < 5; i++) expect(await client.report("sf", i)).toBe(true);
    const spy = vi
      .spyOn(globalThis.crypto.subtle, "importKey")
      .mockRejectedValue(new DOMException("X25519", "NotSupportedError"));
    try {
      expect(await client.flush()).toMatchObject({ accepted: 0, dropped: 5, pending: 0 });
    } finally {
      spy.mockRestore();
    }
    expect(client.health().dropped).toEqual({ sealing_unavailable: 5 });
    expect(fake.posts).toBe(0);
  });

  it("no analyzer key yet: the reports wait in the queue; delivered once the key is published", async () => {
    const fake = new FakeCollector([fakes({ analyzer_key: null })]);
    const client = await open(fake, { acceptUnrandomized: true });
    for (let i = 0; i < 10; i++) expect(await client.report("sf", i % 8)).toBe(true);
    const waiting = await client.flush(200);
    expect(waiting.pending).toBe(10);
    expect(waiting.error).toContain("no analyzer key");
    expect(fake.posts).toBe(0);
    fake.campaigns = [fakes({ analyzer_key: { ...analyzer.config, id: analyzer.key_id + 1 } })]; // a misnamed key: still waiting
    await client.fetchConfigs();
    expect((await client.flush(200)).error).toContain("not the key id");
    fake.campaigns = [fakes()];
    await client.fetchConfigs();
    expect(await client.flush()).toMatchObject({ accepted: 10, pending: 0 });
  });
});

describe("shuffled (windowed)", () => {
  const grr = (extra: Record<string, unknown> = {}) =>
    campaign("sg", {
      oracle: "grr",
      epsilon: 2.0,
      domain_size: 4,
      privacy_mode: "shuffled",
      window: "1d",
      window_seconds: DAY,
      reports_per_window: 1,
      analyzer_key: analyzer.config,
      ...extra,
    });

  it("bound to the collector's window; a lost answer is retried under the same batch id and stored once", async () => {
    const fake = new FakeCollector([grr()]);
    fake.serverTime = T0;
    const clients = await Promise.all(Array.from({ length: 5 }, () => open(fake)));
    for (const c of clients) expect(await c.report("sg", 2)).toBe(true);
    for (const c of clients) expect(await c.report("sg", 2)).toBe(false); // reports_per_window = 1
    fake.script = ["lost"];
    const results = await Promise.all(clients.map((c) => c.flush()));
    expect(results.reduce((n, r) => n + r.accepted + r.duplicates, 0)).toBe(5);
    expect(results.reduce((n, r) => n + r.duplicates, 0)).toBe(1);
    expect(fake.stored.length).toBe(5);
    const windowOf = Math.floor(T0 / DAY) * DAY;
    expect(fake.stored.every((b) => b.window === windowOf && b.messages.length === 1 && b.count === 1)).toBe(true);
  });

  it("a window the collector no longer takes: dropped on the device and counted (stale_window)", async () => {
    const fake = new FakeCollector([grr({ reports_per_window: 10 })]);
    fake.serverTime = T0;
    const client = await open(fake);
    for (let i = 0; i < 4; i++) await client.report("sg", i);
    fake.serverTime = T0 + DAY; // the previous window is still taken
    await client.fetchConfigs();
    for (let i = 0; i < 3; i++) await client.report("sg", i);
    expect(await client.flush()).toMatchObject({ accepted: 7, pending: 0 });
    // one envelope per report (the fake collector's reports_per_window 10 is the SDK's ledger's),
    // bound to the window it was made in
    expect(fake.stored.map((b) => [b.count, b.window])).toEqual([
      ...Array.from({ length: 4 }, () => [1, T0 - (T0 % DAY)]),
      ...Array.from({ length: 3 }, () => [1, T0 + DAY - (T0 % DAY)]),
    ]);
    for (let i = 0; i < 2; i++) await client.report("sg", i);
    fake.serverTime = T0 + 3 * DAY; // the collector moved on; the device's clock has not heard yet
    const result = await client.flush();
    expect(result).toMatchObject({ accepted: 0, dropped: 2, pending: 0 });
    expect(client.health().dropped).toEqual({ stale_window: 2 });
  });
});

describe("range and numeric campaigns in the shuffled modes (an index histogram)", () => {
  const grid = (extra: Record<string, unknown> = {}) =>
    campaign("sg-mean", {
      kind: "numeric",
      mechanism: "grid",
      oracle: "histogram",
      epsilon: null,
      domain_size: 11,
      lower: 0,
      upper: 10,
      privacy_mode: "shuffled-fakes",
      fake_rate: 0,
      window: "all",
      window_seconds: 0,
      reports_per_window: 1_000_000,
      analyzer_key: analyzer.config,
      ...extra,
    });

  it("numeric: each value rounded at random to a grid point, unbiased; clipped values counted; sealed as indices", async () => {
    const fake = new FakeCollector([grid()]);
    const client = await open(fake, { acceptUnrandomized: true, batchSize: 500 });
    // 3.3 is 30 % of the way from point 3 to point 4: about 30 % of 2,000 reports say 4
    const values = [...new Array<number>(2000).fill(3.3), 7, 10, -4, 12.5];
    for (const v of values) expect(await client.report("sg-mean", v)).toBe(true);
    expect(await client.report("sg-mean", Number.NaN)).toBe(false);
    expect(await client.flush()).toMatchObject({ accepted: values.length, pending: 0 });
    expect(client.health()).toMatchObject({ clipped: { "sg-mean": 2 }, dropped: { bad_value: 1 } });
    const { pair } = await keyPair(fromHex(analyzer.ikm));
    const counts = new Array<number>(11).fill(0);
    for (const b of fake.stored) for (const row of await openAll(b, pair)) counts[u32(row)]! += 1;
    expect(counts[7]).toBe(1);
    expect(counts[10]).toBe(2); // 10 and 12.5 (clipped to the upper bound)
    expect(counts[0]).toBe(1); // -4, clipped to the lower bound
    expect(counts[3]! + counts[4]!).toBe(2000);
    // Binomial(2000, 0.3): std dev 20.5; 5 of them either side
    expect(Math.abs(counts[4]! - 600)).toBeLessThan(103);
  });

  it("range: the value is the index; OUE rows at the planned ε₀ (shuffled)", async () => {
    const fake = new FakeCollector([
      campaign("sg-range", {
        kind: "range",
        method: "histogram",
        oracle: "oue",
        epsilon: 2.0,
        domain_size: 16,
        privacy_mode: "shuffled",
        window: "all",
        window_seconds: 0,
        reports_per_window: 1_000_000,
        analyzer_key: analyzer.config,
      }),
    ]);
    const client = await open(fake);
    for (let i = 0; i < 40; i++) expect(await client.report("sg-range", i % 16)).toBe(true);
    expect(await client.report("sg-range", 16)).toBe(false);
    expect(await client.flush()).toMatchObject({ accepted: 40, pending: 0 });
    expect(fake.stored.flatMap((b) => b.messages).every((m) => m.length === 32 + 2 + 16)).toBe(true);
  });

  it("a local range or numeric mechanism in a shuffled mode is refused, never sent", async () => {
    const fake = new FakeCollector([grid({ mechanism: "piecewise", oracle: "grr", epsilon: 1.0 })]);
    const client = await open(fake, { acceptUnrandomized: true });
    expect(await client.report("sg-mean", 3)).toBe(false);
    expect(client.health().dropped).toEqual({ bad_config: 1 });
    expect(fake.posts).toBe(0);
  });
});

describe("heavy hitters in shuffled (issue 39)", () => {
  const hh = (extra: Record<string, unknown> = {}) =>
    campaign("hh", {
      kind: "heavy_hitters",
      oracle: "olh",
      epsilon: 2.5, // ε₀
      max_length: 8,
      levels: 8,
      width: 16,
      pool_size: 64,
      privacy_mode: "shuffled",
      window: "all",
      window_seconds: 0,
      reports_per_window: 1_000_000,
      analyzer_key: analyzer.config,
      ...extra,
    });

  it("each report sealed as the local report's row (level, pool index, hash) at ε₀; bad values refused, nothing sent for them", async () => {
    const fake = new FakeCollector([hh()]);
    const client = await open(fake);
    const good = ["", "crash:42", "héllo", "日本", "abcdefgh"];
    for (let i = 0; i < 30; i++) expect(await client.report("hh", good[i % good.length])).toBe(true);
    // over max_length (9 bytes of UTF-8), a NUL, lone surrogates, not a string
    for (const bad of ["abcdefghi", "日本語", "a\u0000b", "\ud800x", "x\udfff", 42, new Uint8Array([0xff])])
      expect(await client.report("hh", bad), String(bad)).toBe(false);
    expect(client.health().dropped).toEqual({ bad_value: 7 });
    expect(await client.flush()).toMatchObject({ accepted: 30, pending: 0 });
    const messages = fake.stored.flatMap((b) => b.messages);
    expect(messages.length).toBe(30); // one message per report: no fakes
    expect(messages.every((m) => m.length === 32 + 12 + 16)).toBe(true);
    const mech = (await client.mechanism("hh")) as unknown as { deviceSlot(): [number, number]; g: number };
    const [level, index] = mech.deviceSlot();
    const { pair } = await keyPair(fromHex(analyzer.ikm));
    for (const b of fake.stored)
      for (const row of await openAll(b, pair)) {
        const view = new DataView(row.buffer, row.byteOffset);
        expect([view.getUint32(0, true), view.getUint32(4, true)]).toEqual([level, index]);
        expect(view.getUint32(8, true)).toBeLessThan(mech.g);
      }
  });

  it("in shuffled-fakes (never offered: fakes are indices) refused, never sent", async () => {
    const fake = new FakeCollector([hh({ privacy_mode: "shuffled-fakes", fake_rate: 0 })]);
    const client = await open(fake);
    expect(await client.report("hh", "a")).toBe(false);
    expect(client.health().dropped).toEqual({ bad_config: 1 });
    await client.flush();
    expect(fake.posts).toBe(0);
  });
});

describe("dimension values (local campaigns)", () => {
  it("each report carries the campaign's canonical values; chunks group them", async () => {
    const fake = new FakeCollector([
      campaign("cells", {
        oracle: "grr",
        epsilon: 1.0,
        domain_size: 4,
        dimensions: [
          { name: "app_version", values: ["4.1", "4.2"], bucket: "major.minor" },
          { name: "platform", values: ["android", "ios"] },
        ],
      }),
    ]);
    const client = await open(fake, { dimensions: { platform: "ios", app_version: "4.2.17", unrelated: "x" } });
    for (let i = 0; i < 6; i++) await client.report("cells", i % 4);
    for (let i = 0; i < 4; i++) await client.report("cells", i % 4, { dimensions: { platform: "web" } });
    for (let i = 0; i < 2; i++)
      await client.report("cells", 1, { dimensions: { app_version: "5.0", platform: "android" } });
    expect(await client.flush()).toMatchObject({ accepted: 12, pending: 0 });
    const cells = fake.stored
      .map((b) => [b.count, b.dimensions])
      .sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
    expect(cells).toEqual([
      [
        2,
        [
          ["app_version", "other"],
          ["platform", "android"],
        ],
      ],
      [
        4,
        [
          ["app_version", "4.2"],
          ["platform", "other"],
        ],
      ],
      [
        6,
        [
          ["app_version", "4.2"],
          ["platform", "ios"],
        ],
      ],
    ]);
  });
});

export type { Draws };
