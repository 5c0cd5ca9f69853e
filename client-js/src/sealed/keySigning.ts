/**
 * The analyzer's HPKE public keys signed by its long-term Ed25519 key (`ldptel.key_signing`):
 * the device seals only to a key whose signature verifies under the signing key the app pinned
 * (`analyzerSigningKey`, the value `ldptel analyzer-key show` prints), whoever serves the config.
 *
 *     statement = "ldptel/v1 analyzer key\0" ‖ suite (ASCII) ‖ 0x00 ‖ public key (32 raw bytes)
 *                 ‖ key id (u32) ‖ current_until (u64, epoch s) ‖ accepted_until (u64, epoch s)
 *
 * big-endian; `signature` = Ed25519 over it (64 bytes, base64). Verified with Web Crypto's Ed25519
 * (Node ≥ 20, current browsers), so the SDK adds no dependency for it.
 */
import { concat } from "../secret.js";

export const STATEMENT_LABEL = new TextEncoder().encode("ldptel/v1 analyzer key\u0000");
export const SIGNING_KEY_BYTES = 32;
export const SIGNATURE_BYTES = 64;

/** The bytes signed for one analyzer key (module docstring). */
export function statement(
  suite: string,
  publicKey: Uint8Array,
  keyId: number,
  currentUntil: number,
  acceptedUntil: number,
): Uint8Array {
  if (publicKey.length !== 32) throw new TypeError(`a public key of ${publicKey.length} bytes, not 32`);
  const tail = new Uint8Array(20);
  const view = new DataView(tail.buffer);
  view.setUint32(0, keyId >>> 0);
  view.setBigUint64(4, BigInt(Math.trunc(currentUntil)));
  view.setBigUint64(12, BigInt(Math.trunc(acceptedUntil)));
  return concat(STATEMENT_LABEL, new TextEncoder().encode(suite), new Uint8Array([0]), publicKey, tail);
}

/** Standard base64 → bytes (a `TypeError` naming `field` when it is not base64). */
export function fromBase64(text: unknown, field: string): Uint8Array {
  if (typeof text !== "string" || !/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text))
    throw new TypeError(`${field} is not base64`);
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/** The app's pinned key (base64 of 32 raw bytes, or the bytes), imported for verifying; a
 * `TypeError` saying why not. */
export async function importSigningKey(key: string | Uint8Array): Promise<CryptoKey> {
  const raw = typeof key === "string" ? fromBase64(key, "analyzerSigningKey") : key;
  if (raw.length !== SIGNING_KEY_BYTES)
    throw new TypeError(
      `analyzerSigningKey: ${raw.length} bytes, not ${SIGNING_KEY_BYTES} (an Ed25519 public key in base64, as \`ldptel analyzer-key show\` prints it)`,
    );
  return crypto.subtle.importKey("raw", raw as Uint8Array<ArrayBuffer>, { name: "Ed25519" }, false, ["verify"]);
}

/** Whether `signature` is the signing key's over this key's statement (malformed: false). */
export async function verifyKey(
  suite: string,
  publicKey: Uint8Array,
  keyId: number,
  currentUntil: number,
  acceptedUntil: number,
  signature: Uint8Array,
  signingKey: CryptoKey,
): Promise<boolean> {
  if (signature.length !== SIGNATURE_BYTES) return false;
  try {
    const bytes = statement(suite, publicKey, keyId, currentUntil, acceptedUntil);
    return await crypto.subtle.verify(
      { name: "Ed25519" },
      signingKey,
      signature as Uint8Array<ArrayBuffer>,
      bytes as Uint8Array<ArrayBuffer>,
    );
  } catch {
    return false;
  }
}

/** Why the config's `analyzer_key` (already checked by `analyzerKey`: `raw`, `id`) is not one to
 * seal to under `signingKey` — a missing or malformed signature or time, a signature that does
 * not verify, `accepted_until` passed on this device's clock (`nowS`) — or null when it is. */
export async function untrustedBecause(
  key: Record<string, unknown>,
  raw: Uint8Array,
  id: number,
  signingKey: CryptoKey,
  nowS: number,
): Promise<string | null> {
  let signature: Uint8Array;
  try {
    signature = fromBase64(key.signature, "signature");
  } catch {
    return "its signature is missing or not base64";
  }
  const { current_until: current, accepted_until: accepted } = key;
  if (!Number.isSafeInteger(current) || !Number.isSafeInteger(accepted))
    return "its current_until / accepted_until are not integers";
  const suite = typeof key.suite === "string" ? key.suite : "";
  if (!(await verifyKey(suite, raw, id, current as number, accepted as number, signature, signingKey)))
    return `analyzer_key ${id} is not signed by the pinned analyzerSigningKey`;
  if (nowS >= (accepted as number))
    return `analyzer_key ${id} expired at ${accepted} (accepted_until, this device's clock)`;
  return null;
}
