// The sealed-message vectors (testvectors/sealed.json) reproduced inside real Chromium: HPKE on its
// Web Crypto (X25519, HKDF-SHA256, AES-128-GCM through @hpke/core), RFC 9180 A.1.1 first, then
// every shuffled campaign's messages with the ephemeral keys the vectors record and the whole
// SealedBatch bodies; the grid rounding of numeric campaigns on its V8.
import { describe, expect, it } from "vitest";
import sealed from "../../../testvectors/sealed.json";
import { buildMechanism, valueIndex } from "../../src/builder.js";
import { envelopeBatchId } from "../../src/client/envelope.js";
import { fromHex, ReplayDraws, type TapeEntry, toHex } from "../../src/draws.js";
import { Grid } from "../../src/mechanisms/grid.js";
import { Histogram } from "../../src/mechanisms/oracles.js";
import { rowOf } from "../../src/sealed/rows.js";
import { analyzerKey, info, recipientKey, seal, suite } from "../../src/sealed/sealing.js";
import { encodeSealedBatch } from "../../src/wire.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const v = sealed as any;

describe("sealed vectors in Chromium", () => {
  it("RFC 9180 A.1.1 with Chromium's Web Crypto", async () => {
    const r = v.rfc9180_a11;
    const s = suite();
    const recipient = await s.kem.deriveKeyPair(fromHex(r.ikmR));
    const out = await s.seal(
      { recipientPublicKey: recipient.publicKey, info: fromHex(r.info), ekm: fromHex(r.ikmE) },
      fromHex(r.pt),
      fromHex(r.aad),
    );
    expect(toHex(new Uint8Array(out.enc))).toBe(r.pkEm);
    expect(toHex(new Uint8Array(out.ct))).toBe(r.ct);
  });

  it("every shuffled campaign's reports, rows, sealed messages and bodies", async () => {
    let messages = 0;
    for (const c of v.cases) {
      const mech = buildMechanism(c.config, new Uint8Array(32));
      for (const r of c.reports) {
        const report = mech.encode(valueIndex(c.config, r.value), new ReplayDraws(r.draws as TapeEntry[]));
        expect(toHex(rowOf(mech, report)), c.name).toBe(r.row);
      }
      const key = analyzerKey(c.config)!;
      const recipient = await recipientKey(key.raw);
      for (const env of c.envelopes) {
        const infoBytes = info(c.name, c.config.version, env.window, key.id);
        expect(toHex(infoBytes)).toBe(env.info);
        const plain = env.messages.map((m: { plaintext: string }) => fromHex(m.plaintext));
        const out = await seal(plain, recipient, infoBytes, (i) => fromHex(env.messages[i].ikm_e));
        expect(out.map(toHex)).toEqual(env.messages.map((m: { message: string }) => m.message));
        const body = encodeSealedBatch({
          campaign: c.name,
          batchId: envelopeBatchId(fromHex(c.batch_id), env.window, env.index),
          reports: env.reports,
          campaignVersion: c.config.version,
          keyId: key.id,
          window: env.window,
          messages: out,
          dimensions: c.dimensions,
        });
        expect(toHex(body)).toBe(env.body);
        messages += out.length;
      }
    }
    expect(messages).toBeGreaterThan(50);
  });

  it("grid rounding", () => {
    for (const g of v.grid) {
      const mech = new Grid(new Histogram(g.points), g.lower, g.upper);
      g.values.forEach((x: number, j: number) => {
        expect(mech.roundIndex(x, g.uniforms[j])).toBe(g.indices[j]);
      });
    }
  });
});
