// The analyzer key signature vectors in real Chromium: Web Crypto's Ed25519 there verifies every
// signed statement of testvectors/analyzer_key_signature.json (RFC 8032's TEST 1 too) and refuses
// every changed case, as in Node (test/keySigning.test.ts).
import { describe, expect, it } from "vitest";
import doc from "../../../testvectors/analyzer_key_signature.json";
import { fromHex } from "../../src/draws.js";
import { importSigningKey, statement } from "../../src/sealed/keySigning.js";
import { verifyCase } from "../fakeCollector.js";

describe("analyzer key signatures in the browser", () => {
  it("verifies the vectors' signatures and refuses the changed ones", async () => {
    const rfc = doc.rfc8032_test1;
    const rfcKey = await importSigningKey(fromHex(rfc.public));
    expect(await crypto.subtle.verify({ name: "Ed25519" }, rfcKey, fromHex(rfc.signature), fromHex(rfc.message))).toBe(
      true,
    );
    const pinned = await importSigningKey(doc.signing.public);
    for (const c of doc.cases) {
      const raw = fromHex(c.public);
      expect(statement(c.suite, raw, c.key_id, c.current_until, c.accepted_until)).toEqual(fromHex(c.statement));
      expect(await verifyCase(c, pinned)).toBe(true);
    }
    for (const c of doc.invalid) expect(await verifyCase(c, pinned), c.changed).toBe(false);
  });
});
