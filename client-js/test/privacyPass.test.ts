// Privacy Pass type 0x0002 in the JS SDK (issue 37), on @cloudflare/privacypass-ts, against the
// RFC 9578 Appendix A vectors (testvectors/privacy_pass_rfc9578.json, shared with the Python
// tests): the challenge's bytes, token_key_id = SHA-256(pkS), the issuer's deterministic
// TokenResponse to the vector's TokenRequest, the vector token verifying (and a flipped one not),
// and ldptel's (campaign, window) challenge equal to the Python one.
import { readFileSync } from "node:fs";
import { publicVerif, TOKEN_TYPES, Token, TokenChallenge, util } from "@cloudflare/privacypass-ts";
import { sha256 } from "@noble/hashes/sha2.js";
import { describe, expect, it } from "vitest";
import { fromHex, toHex } from "../src/draws.js";
import { authorization, challengeFor, redemptionContext } from "../src/tokens/privacyPass.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;
const doc: Any = JSON.parse(
  readFileSync(new URL("../../testvectors/privacy_pass_rfc9578.json", import.meta.url), "utf8"),
);
const RSA = { name: "RSA-PSS", hash: "SHA-384" };

const pem = (hex: string): Uint8Array => {
  const text = new TextDecoder().decode(fromHex(hex));
  const b64 = text.replace(/-----[A-Z ]+-----/g, "").replace(/\s+/g, "");
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
};

describe("RFC 9578 type 2 vectors", () => {
  doc.vectors.forEach((v: Any, i: number) => {
    it(`vector ${i}`, async () => {
      const chl = TokenChallenge.deserialize(fromHex(v.token_challenge));
      expect(toHex(chl.serialize())).toBe(v.token_challenge);
      const pkS = fromHex(v.pkS);
      const token = Token.deserialize(TOKEN_TYPES.BLIND_RSA, fromHex(v.token));
      expect(toHex(token.authInput.tokenKeyId)).toBe(toHex(sha256(pkS)));
      expect(toHex(token.authInput.challengeDigest)).toBe(toHex(sha256(fromHex(v.token_challenge))));
      const publicKey = await crypto.subtle.importKey("spki", util.convertRSASSAPSSToEnc(pkS), RSA, true, ["verify"]);
      const privateKey = await crypto.subtle.importKey("pkcs8", pem(v.skS), RSA, true, ["sign"]);
      const issuer = new publicVerif.Issuer(publicVerif.BlindRSAMode.PSS, "issuer.example", privateKey, publicKey);
      const request = publicVerif.TokenRequest.deserialize(TOKEN_TYPES.BLIND_RSA, fromHex(v.token_request));
      expect(toHex((await issuer.issue(request)).serialize())).toBe(v.token_response);
      const origin = new publicVerif.Origin(publicVerif.BlindRSAMode.PSS);
      expect(await origin.verify(token, publicKey)).toBe(true);
      const bad = fromHex(v.token);
      bad[bad.length - 1]! ^= 1;
      expect(await origin.verify(Token.deserialize(TOKEN_TYPES.BLIND_RSA, bad), publicKey)).toBe(false);
    });
  });
});

describe("ldptel's challenge", () => {
  it("binds a token to (campaign, window) with the Python SDK's bytes", async () => {
    // ldptel.privacy_pass.challenge_for("ldptel-issuer", "tok-grr", 1764288000).encode(), from Python
    const want = readFileSync(new URL("../../testvectors/privacy_pass_ldptel.json", import.meta.url), "utf8");
    const w: Any = JSON.parse(want);
    const chl = await challengeFor(w.issuer_name, w.campaign, w.window);
    expect(toHex(redemptionContext(w.campaign, w.window))).toBe(w.redemption_context);
    expect(toHex(chl.serialize())).toBe(w.challenge);
    expect(authorization(fromHex(w.token))).toBe(w.authorization);
  });
});
