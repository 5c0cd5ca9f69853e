// Cross-language Privacy Pass (issue 37), driven by tests/test_tokens_e2e.py (skipped unless
// LDPTEL_INTEROP_OUT is set): the JS SDK fetches tokens from the Python issuer (which the Python
// collector then redeems), and a JS issuer (@cloudflare/privacypass-ts) mints one for ldptel's
// challenge, which the Python collector redeems with that issuer's public key.
import { writeFileSync } from "node:fs";
import { publicVerif, TOKEN_TYPES, util } from "@cloudflare/privacypass-ts";
import { describe, expect, it } from "vitest";
import { TelemetryClient } from "../src/client/client.js";
import { toHex } from "../src/draws.js";
import { challengeFor, fetchTokens } from "../src/tokens/privacyPass.js";

const env = process.env;
const out = env.LDPTEL_INTEROP_OUT;

describe.skipIf(!out)("tokens across languages", () => {
  it("fetches from the Python issuer and mints with a JS issuer", async () => {
    const campaign = env.LDPTEL_CAMPAIGN ?? "";
    const window = Number(env.LDPTEL_WINDOW);
    const fromPython = await fetchTokens(
      env.LDPTEL_ISSUER_URL ?? "",
      env.LDPTEL_ISSUER_NAME ?? "",
      campaign,
      window,
      1,
      env.LDPTEL_ATTESTATION ?? null,
    );
    const keys = await publicVerif.Issuer.generateKey(publicVerif.BlindRSAMode.PSS, {
      modulusLength: 2048,
      publicExponent: Uint8Array.from([1, 0, 1]),
    });
    const issuer = new publicVerif.Issuer(publicVerif.BlindRSAMode.PSS, "js", keys.privateKey, keys.publicKey);
    const pk = await publicVerif.getPublicKeyBytes(keys.publicKey);
    const client = new publicVerif.Client(publicVerif.BlindRSAMode.PSS);
    const chl = await challengeFor(env.LDPTEL_ISSUER_NAME ?? "", campaign, window);
    const request = await client.createTokenRequest(chl, pk);
    const token = await client.finalize(await issuer.issue(request));
    expect(token.authInput.tokenType).toBe(TOKEN_TYPES.BLIND_RSA.value);
    const spki = util.convertEncToRSASSAPSS(new Uint8Array(await crypto.subtle.exportKey("spki", keys.publicKey)));
    writeFileSync(
      out ?? "",
      JSON.stringify({
        python_issued: fromPython.map(toHex),
        js_issued: toHex(token.serialize()),
        js_issuer_pk: toHex(pk),
        js_issuer_spki: toHex(spki),
      }),
    );
  });
});

describe.skipIf(!out)("the JS SDK with tokens", () => {
  it("sends each report with a token, and without attestation keeps it waiting", async () => {
    const url = env.LDPTEL_COLLECTOR_URL ?? "";
    const campaign = env.LDPTEL_CAMPAIGN ?? "";
    const withToken = await TelemetryClient.open({
      url,
      token: env.LDPTEL_INGEST_TOKEN ?? "",
      attestation: () => env.LDPTEL_ATTESTATION_SDK ?? "",
      analyzerSigningKey: env.LDPTEL_ANALYZER_SIGNING_KEY ?? "",
    });
    expect(await withToken.report(campaign, 6)).toBe(true);
    const sent = await withToken.flush(30_000);
    expect([sent.accepted, sent.pending]).toEqual([1, 0]);
    await withToken.close(null);

    const without = await TelemetryClient.open({
      url,
      token: env.LDPTEL_INGEST_TOKEN ?? "",
      analyzerSigningKey: env.LDPTEL_ANALYZER_SIGNING_KEY ?? "",
    });
    expect(await without.report(campaign, 1)).toBe(true);
    const waiting = await without.flush(2_000);
    expect(waiting.pending).toBe(1);
    expect(without.health().waiting).toEqual({ no_token: 1 });
    await without.close(null);
  });
});
