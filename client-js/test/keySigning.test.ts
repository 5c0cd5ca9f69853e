// Issue 36: the analyzer key pinned by the aggregator's Ed25519 signing key. The shared vectors
// (testvectors/analyzer_key_signature.json: RFC 8032's TEST 1, each key's statement and signature,
// changed fields that must not verify), then the client: without `analyzerSigningKey`, or with a
// collector serving a key the pinned key did not sign (its own, with a correct id), or an expired
// one, nothing is sealed or posted, the reports wait in the queue, `health().sealingError` says why
// and `flush()` resolves.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { fromHex, toHex } from "../src/draws.js";
import { importSigningKey, STATEMENT_LABEL, statement } from "../src/sealed/keySigning.js";
import { keyId } from "../src/sealed/sealing.js";
import {
  campaign,
  FakeCollector,
  openTestClient,
  SIGNING,
  shuffledFakes,
  signedKey,
  verifyCase,
} from "./fakeCollector.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const doc = JSON.parse(
  readFileSync(new URL("../../testvectors/analyzer_key_signature.json", import.meta.url), "utf8"),
) as any;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const analyzer = (JSON.parse(readFileSync(new URL("../../testvectors/sealed.json", import.meta.url), "utf8")) as any)
  .analyzer;
const b64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));

describe("analyzer key signature vectors", () => {
  it("RFC 8032 TEST 1 verifies with Web Crypto's Ed25519 (and a flipped bit does not)", async () => {
    const v = doc.rfc8032_test1;
    const key = await importSigningKey(fromHex(v.public));
    expect(await crypto.subtle.verify({ name: "Ed25519" }, key, fromHex(v.signature), fromHex(v.message))).toBe(true);
    const bad = fromHex(v.signature);
    bad[0]! ^= 1;
    expect(await crypto.subtle.verify({ name: "Ed25519" }, key, bad, fromHex(v.message))).toBe(false);
  });

  it("every statement byte for byte, every signature verifies, every changed case does not", async () => {
    expect(new TextDecoder().decode(STATEMENT_LABEL)).toBe(doc.label);
    expect(SIGNING.public).toBe(doc.signing.public);
    const pinned = await importSigningKey(doc.signing.public);
    expect(doc.cases.length).toBeGreaterThanOrEqual(6);
    for (const c of doc.cases) {
      const raw = fromHex(c.public);
      expect(keyId(raw)).toBe(c.key_id);
      expect(toHex(statement(c.suite, raw, c.key_id, c.current_until, c.accepted_until))).toBe(c.statement);
      expect(await verifyCase(c, pinned)).toBe(true);
    }
    const changed = new Set<string>();
    for (const c of doc.invalid) {
      changed.add(c.changed);
      expect(await verifyCase(c, pinned), c.changed).toBe(false);
    }
    expect([...changed].sort()).toEqual(
      ["accepted_until", "current_until", "key_id", "public", "signature", "signer", "suite"].sort(),
    );
  });

  it("a malformed analyzerSigningKey is the app's mistake: open() throws naming the option", async () => {
    const fake = new FakeCollector([]);
    await expect(openTestClient(fake, { analyzerSigningKey: "not base64!" })).rejects.toThrow("analyzerSigningKey");
    await expect(openTestClient(fake, { analyzerSigningKey: b64(new Uint8Array(31)) })).rejects.toThrow("31 bytes");
  });
});

const fakes = (key: unknown) => shuffledFakes({ analyzer_key: key });

describe("the client seals only to a key the pinned signing key signed", () => {
  it("without analyzerSigningKey: nothing sealed, the reports wait, health names the option", async () => {
    const fake = new FakeCollector([
      fakes(analyzer.config),
      campaign("plain", { oracle: "grr", epsilon: 1.0, domain_size: 4 }),
    ]);
    const client = await openTestClient(fake, { acceptUnrandomized: true, analyzerSigningKey: undefined });
    for (let i = 0; i < 5; i++) expect(await client.report("sf", i)).toBe(true);
    expect(await client.report("plain", 1)).toBe(true);
    const result = await client.flush(2000);
    expect(result).toMatchObject({ accepted: 1, pending: 5, dropped: 0 }); // the local campaign still goes
    expect(fake.stored.map((b) => b.campaign)).toEqual(["plain"]);
    const health = client.health();
    expect(health.ok).toBe(false);
    expect(health.sealingError).toContain("analyzerSigningKey");
    expect(health.dropped).toEqual({});
  });

  it("a collector serving its own key (a correct id, signed by another key, or unsigned): refused", async () => {
    const raw = new Uint8Array(32).fill(42); // the attacker's X25519 public key
    const own = { id: keyId(raw), public: b64(raw), suite: "x25519-hkdf-sha256-aes128gcm", accepted_until: 2e9 };
    const otherSeed = toHex(new Uint8Array(32).fill(3));
    for (const key of [own, await signedKey(own, otherSeed), { ...analyzer.config, public: own.public, id: own.id }]) {
      const fake = new FakeCollector([fakes(key)]);
      const client = await openTestClient(fake, { acceptUnrandomized: true });
      for (let i = 0; i < 4; i++) expect(await client.report("sf", i)).toBe(true);
      const result = await client.flush(2000);
      expect(result).toMatchObject({ accepted: 0, pending: 4, dropped: 0 });
      expect(fake.posts).toBe(0);
      expect(client.health().sealingError).toMatch(/not signed|signature is missing/);
      // the aggregator's signed key comes back: the same reports are sealed and delivered
      fake.campaigns = [fakes(analyzer.config)];
      await client.fetchConfigs();
      expect(await client.flush()).toMatchObject({ accepted: 4, pending: 0 });
      expect(client.health().sealingError).toBeNull();
      await client.close(null);
    }
  });

  it("an expired key (accepted_until passed on the device's clock), even validly signed: refused", async () => {
    const expired = await signedKey({ ...analyzer.config, accepted_until: Math.floor(Date.now() / 1000) - 60 });
    const fake = new FakeCollector([fakes(expired)]);
    const client = await openTestClient(fake, { acceptUnrandomized: true });
    expect(await client.report("sf", 1)).toBe(true);
    expect(await client.flush(1000)).toMatchObject({ accepted: 0, pending: 1 });
    expect(fake.posts).toBe(0);
    expect(client.health().sealingError).toContain("expired");
  });
});
