// The shared test vectors, reproduced inside real Chromium (its V8, Web Crypto and TextEncoder).
import { describe, expect, it } from "vitest";
import encode from "../../../testvectors/encode.json";
import hashing from "../../../testvectors/hashing.json";
import secrets from "../../../testvectors/secrets.json";
import { buildMechanism, valueIndex } from "../../src/builder.js";
import { cryptoDraws, fromHex, ReplayDraws, type TapeEntry, toHex } from "../../src/draws.js";
import { olhHash, xxh32, xxh32Int } from "../../src/hashing.js";
import type { Report } from "../../src/mechanisms/base.js";
import { derive, shakeUniforms } from "../../src/secret.js";
import { encodeBatch, mergeReports } from "../../src/wire.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

describe("vectors in Chromium", () => {
  it("runs in a browser", () => {
    expect(typeof window).toBe("object");
    expect(typeof indexedDB).toBe("object");
    const u = cryptoDraws.uniform();
    expect(u >= 0 && u < 1).toBe(true);
  });
  it("hashes and derivations", () => {
    for (const e of (hashing as Any).xxh32_int) expect(xxh32Int(e.value, e.seed)).toBe(e.hash);
    for (const e of (hashing as Any).xxh32_bytes) expect(xxh32(fromHex(e.data), e.seed)).toBe(e.hash);
    for (const e of (hashing as Any).olh_hash) expect(olhHash(e.seed, e.key, e.g)).toBe(e.hash);
    for (const e of (secrets as Any).derive) expect(toHex(derive(fromHex(e.secret), fromHex(e.label)))).toBe(e.digest);
    for (const e of (secrets as Any).shake_uniforms)
      expect([...shakeUniforms(fromHex(e.secret), fromHex(e.label), e.count)]).toEqual(e.uniforms);
  });
  it("every encode case: reports from their draws and the chunk's wire bytes", () => {
    let n = 0;
    for (const c of (encode as Any).cases) {
      const mech = buildMechanism(c.config, c.secret ? fromHex(c.secret) : new Uint8Array(32));
      const reports: Report[] = [];
      for (const r of c.reports) {
        const draws = new ReplayDraws(r.draws as TapeEntry[]);
        const report = mech.encode(valueIndex(c.config, r.value), draws);
        expect(draws.done).toBe(true);
        expect(
          toHex(
            encodeBatch({ campaign: c.config.name, batchId: new Uint8Array(0), count: 1, campaignVersion: 0 }, report),
          ),
        ).toBe(r.row);
        reports.push(report);
        n += 1;
      }
      expect(
        toHex(
          encodeBatch(
            {
              campaign: c.config.name,
              batchId: fromHex(c.batch_id),
              count: reports.length,
              campaignVersion: c.config.version ?? 1,
            },
            mergeReports(reports),
          ),
        ),
      ).toBe(c.batch);
    }
    expect(n).toBeGreaterThan(400);
  });
});
