// Privacy Pass tokens of type 0x0002 (RFC 9578 §6, blind RSA) for campaigns with `require_tokens`
// (issue 37), on @cloudflare/privacypass-ts: the challenge binding a token to one (campaign,
// window), a batch of tokens from ldptel's issuer, and the RFC 9577 Authorization header. The same
// bytes as the Python SDK (ldptel.privacy_pass): testvectors/privacy_pass_rfc9578.json and
// tests/test_tokens_e2e.py check both ways.
import type { Token, TokenChallenge } from "@cloudflare/privacypass-ts";
import { sha256 } from "@noble/hashes/sha2.js";

// the library is imported on first use only (never at the bundle's top level: it stays a package
// import for the app's bundler or Node to resolve, and a device without such campaigns never loads it)
const library = () => import("@cloudflare/privacypass-ts");
const BLIND_RSA = 0x0002;

export const NK = 256;
export const REQUEST_LEN = 2 + 1 + NK;
export const BATCH_REQUEST_TYPE = "application/ldptel-private-token-batch-request";
export const DIRECTORY_PATH = "/.well-known/private-token-issuer-directory";
const LABEL = new TextEncoder().encode("ldptel token v1");

/** SHA-256("ldptel token v1" | campaign | 0x00 | window): the token's redemption context. */
export function redemptionContext(campaign: string, window: number): Uint8Array {
  const c = new TextEncoder().encode(campaign);
  const w = new TextEncoder().encode(String(Math.trunc(window)));
  const buf = new Uint8Array(LABEL.length + c.length + 1 + w.length);
  buf.set(LABEL, 0);
  buf.set(c, LABEL.length);
  buf.set(w, LABEL.length + c.length + 1);
  return sha256(buf);
}

/** The challenge a token for (campaign, window) answers (origin_info empty). */
export async function challengeFor(issuerName: string, campaign: string, window: number): Promise<TokenChallenge> {
  const { TokenChallenge } = await library();
  return new TokenChallenge(BLIND_RSA, issuerName, redemptionContext(campaign, window), []);
}

export function b64urlDecode(text: string): Uint8Array {
  const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(raw, (ch) => ch.charCodeAt(0));
}

export function b64url(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** `PrivateToken token="…"` (RFC 9577). */
export function authorization(token: Uint8Array): string {
  return `PrivateToken token="${b64url(token)}"`;
}

export type Fetcher = (url: string, init?: RequestInit) => Promise<Response>;

/** `n` serialized tokens for (campaign, window) from the issuer at `url`, in one batch request;
 * `attestation`, when given, is sent as `Authorization: Bearer …`. Throws on any failure. */
export async function fetchTokens(
  url: string,
  issuerName: string,
  campaign: string,
  window: number,
  n: number,
  attestation: string | null,
  fetcher: Fetcher = fetch,
): Promise<Uint8Array[]> {
  const dir = await fetcher(url + DIRECTORY_PATH);
  if (!dir.ok) throw new Error(`issuer directory: HTTP ${dir.status}`);
  const doc = (await dir.json()) as { "token-keys": { "token-type": number; "token-key": string }[] };
  const entry = doc["token-keys"].find((k) => k["token-type"] === BLIND_RSA);
  if (!entry) throw new Error("the issuer's directory has no type 2 key");
  const pk = b64urlDecode(entry["token-key"]);
  const { publicVerif } = await library();
  const challenge = await challengeFor(issuerName, campaign, window);
  const clients = Array.from({ length: n }, () => new publicVerif.Client(publicVerif.BlindRSAMode.PSS));
  const requests = await Promise.all(clients.map((c) => c.createTokenRequest(challenge, pk)));
  const body = new Uint8Array(2 + n * REQUEST_LEN);
  new DataView(body.buffer).setUint16(0, n);
  for (const [i, r] of requests.entries()) body.set(r.serialize(), 2 + i * REQUEST_LEN);
  const headers: Record<string, string> = { "Content-Type": BATCH_REQUEST_TYPE };
  if (attestation) headers.Authorization = `Bearer ${attestation}`;
  const res = await fetcher(`${url}/token-request`, { method: "POST", body, headers });
  if (!res.ok) throw new Error(`issuer: HTTP ${res.status} ${await res.text()}`);
  const out = new Uint8Array(await res.arrayBuffer());
  if (out.length !== 2 + n * NK || new DataView(out.buffer).getUint16(0) !== n) {
    throw new Error("issuer: malformed batch response");
  }
  const tokens: Token[] = await Promise.all(
    clients.map((c, i) => c.finalize(new publicVerif.TokenResponse(out.slice(2 + i * NK, 2 + (i + 1) * NK)))),
  );
  return tokens.map((t) => t.serialize());
}
