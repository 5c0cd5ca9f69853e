/**
 * Messages sealed to the analyzer (`ldptel.sealing`): RFC 9180 HPKE, base mode, single shot,
 * DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, with `@hpke/core` on Web Crypto. Each
 * message is sealed on its own (a fresh ephemeral key each, from Web Crypto's key generation) and
 * sent as enc ‖ ciphertext: 32 + row + 16 bytes.
 *
 * `info` binds what the message is for: "ldptel/v2 sealed report\0" ‖ campaign (UTF-8) ‖ 0x00 ‖
 * version (u32) ‖ window start (u64, epoch s) ‖ key id (u32), big-endian; a message opened under
 * another campaign, version, window or key fails its tag. The key id of a public key is the first
 * 4 bytes of SHA-256 over its raw 32 bytes (big-endian u32).
 */
import { Aes128Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { sha256 } from "@noble/hashes/sha2.js";
import { concat } from "../secret.js";

export const INFO_LABEL = new TextEncoder().encode("ldptel/v2 sealed report\u0000");
export const SUITE_ID = "x25519-hkdf-sha256-aes128gcm";
export const ENC_BYTES = 32;
export const TAG_BYTES = 16;

let theSuite: CipherSuite | null = null;

/** The HPKE suite (one per page or process). */
export function suite(): CipherSuite {
  theSuite ??= new CipherSuite({ kem: new DhkemX25519HkdfSha256(), kdf: new HkdfSha256(), aead: new Aes128Gcm() });
  return theSuite;
}

export function ciphertextLength(rowBytes: number): number {
  return ENC_BYTES + rowBytes + TAG_BYTES;
}

/** The HPKE `info` of a message (module docstring). */
export function info(campaign: string, version: number, window: number, keyId: number): Uint8Array {
  const tail = new Uint8Array(17);
  const view = new DataView(tail.buffer);
  view.setUint32(1, version >>> 0);
  view.setBigUint64(5, BigInt(window));
  view.setUint32(13, keyId >>> 0);
  return concat(INFO_LABEL, new TextEncoder().encode(campaign), tail);
}

/** The u32 id of a raw X25519 public key. */
export function keyId(publicKey: Uint8Array): number {
  const h = sha256(publicKey);
  return ((h[0]! << 24) | (h[1]! << 16) | (h[2]! << 8) | h[3]!) >>> 0;
}

export interface AnalyzerKey {
  id: number;
  raw: Uint8Array;
}

function fromBase64(text: string): Uint8Array {
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text))
    throw new TypeError("public is not base64");
  const bin = atob(text);
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

/** The campaign config's `analyzer_key`, checked (as `client.sealed.analyzer_key`): the suite,
 * 32 raw bytes in base64, an `id` that is the key id of them. Throws a `TypeError` saying why;
 * a missing key (the aggregator has published none yet) is `null`. */
export function analyzerKey(cfg: Record<string, unknown>): AnalyzerKey | null {
  const key = cfg.analyzer_key as Record<string, unknown> | null | undefined;
  if (key === undefined || key === null) return null;
  if (typeof key !== "object" || Array.isArray(key)) throw new TypeError("analyzer_key is not an object");
  const suiteId = key.suite ?? SUITE_ID;
  if (suiteId !== SUITE_ID) throw new TypeError(`suite ${JSON.stringify(suiteId)}, not ${SUITE_ID}`);
  if (typeof key.public !== "string") throw new TypeError("public is not a string");
  const raw = fromBase64(key.public);
  if (raw.length !== 32) throw new TypeError(`a public key of ${raw.length} bytes, not 32`);
  const id = keyId(raw);
  if (key.id !== id) throw new TypeError(`id ${JSON.stringify(key.id)} is not the key id of its public key (${id})`);
  return { id, raw };
}

/** A recipient key imported for sealing (cached per raw key). */
const imported = new Map<string, Promise<CryptoKey>>();

export function recipientKey(raw: Uint8Array): Promise<CryptoKey> {
  const name = Array.from(raw, (b) => b.toString(16).padStart(2, "0")).join("");
  let key = imported.get(name);
  if (key === undefined) {
    if (imported.size > 8) imported.clear();
    key = suite().kem.deserializePublicKey(raw);
    imported.set(name, key);
    key.catch(() => imported.delete(name));
  }
  return key;
}

/** Each row sealed on its own to `key` under `infoBytes` (enc ‖ ciphertext each). `ekm`: the
 * ephemeral key material of each message — for the test vectors only; the SDK never passes it,
 * and each message then gets a fresh key pair from Web Crypto. */
export async function seal(
  rows: Uint8Array[],
  key: CryptoKey,
  infoBytes: Uint8Array,
  ekm?: (i: number) => Uint8Array,
): Promise<Uint8Array[]> {
  const s = suite();
  return Promise.all(
    rows.map(async (row, i) => {
      const { enc, ct } = await s.seal(
        { recipientPublicKey: key, info: infoBytes, ...(ekm ? { ekm: ekm(i) } : {}) },
        row,
      );
      return concat(new Uint8Array(enc), new Uint8Array(ct));
    }),
  );
}
