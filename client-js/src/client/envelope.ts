/**
 * The stage after encoding: a chunk of randomized reports of one campaign version (rows that share
 * their envelope: the window of a device-level report, the dimension values) → the messages that
 * carry it to the collector, by the campaign's `privacy_mode`:
 *
 * - `local` (or absent): one plain `ReportBatch` (wire format v1) with the chunk's window and
 *   dimension values;
 * - `shuffled` / `shuffled-fakes` (`ldptel.client.sealed`): per report — one device: the
 *   collector takes `reports` = 1 per envelope and the shuffler counts envelopes (issue 36) — one
 *   `SealedBatch` whose batch_id is derived from the chunk's (SHA-256(batch_id ‖ window as u64 ‖
 *   the report's index in the chunk as u32)[:16], so a retry is deduplicated), holding the report
 *   as one message — for `shuffled-fakes` with Poisson(λ) fake messages (cut to `maxFakes`),
 *   uniform over the domain — in a uniformly random order, each message sealed on its own to the
 *   campaign's analyzer key with the campaign, version, window and key id bound (`info`). Reports
 *   of a window the collector no longer takes (neither the current nor the previous one) are left
 *   out and counted (`stale`). Everything random is drawn from the client's `Draws`
 *   (`crypto.getRandomValues`) and Web Crypto's key generation; the ciphertexts are made anew at
 *   each attempt, under the same batch ids. Several envelopes share one POST as a
 *   `SealedEnvelopes` body (`packEnvelopes`) within `max_body_bytes` and `max_reports_per_batch`.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import type { Draws } from "../draws.js";
import type { Mechanism, Report } from "../mechanisms/base.js";
import { fakeIndices, permutation } from "../sealed/fakes.js";
import { untrustedBecause } from "../sealed/keySigning.js";
import { indexRow, rowOf } from "../sealed/rows.js";
import { analyzerKey, info, recipientKey, seal } from "../sealed/sealing.js";
import { concat } from "../secret.js";
import { CONTENT_TYPE, encodeBatch, encodeSealedBatch, encodeSealedEnvelopes, mergeReports } from "../wire.js";

export const SHUFFLED_MODES = ["shuffled", "shuffled-fakes"];

export interface ChunkRow {
  report: Report;
  /** Shuffled modes: the window (collector's clock) the report was bound to when it was made. */
  window?: number;
}

export interface Sealable {
  campaign: string;
  version: number;
  batchId: Uint8Array;
  config: Record<string, unknown>;
  mech: Mechanism;
  rows: ChunkRow[];
  /** The chunk's envelope: a device-level report's window (0: none) and dimension values. */
  window: number;
  dimensions: [string, string][];
  /** The collector's clock, epoch seconds. */
  now: number;
  draws: Draws;
  /** The pinned analyzer signing key (`analyzerSigningKey`), or null when the app passed none:
   * a sealed campaign's chunk then waits (`KeyNotTrusted`). */
  signingKey: CryptoKey | null;
  /** The collector's limits a POST body keeps within (`max_body_bytes`, `max_reports_per_batch`). */
  maxBodyBytes?: number;
  maxEnvelopes?: number;
}

export interface Message {
  path: string;
  body: Uint8Array;
  contentType: string;
  /** The real reports it carries. */
  reports: number;
}

export interface Sealed {
  messages: Message[];
  /** Reports left out: their window is no longer taken by the collector. */
  stale: number;
}

export interface Envelope {
  readonly mode: string;
  /** The messages of one chunk, all delivered under ids derived from the chunk's batch_id. */
  seal(chunk: Sealable): Promise<Sealed>;
}

/** The analyzer key of a sealed campaign's config is missing or fails its checks: the chunk
 * waits (the configs are fetched again), nothing is dropped. */
export class NoAnalyzerKey extends Error {}

/** The config's analyzer key is not one to seal to: no `analyzerSigningKey` is pinned, or the
 * key's signature does not verify under it, or it expired. The chunk waits in the queue, never
 * sealed to it; `health().sealingError` says why. */
export class KeyNotTrusted extends Error {}

export const PIN_HINT =
  "pass analyzerSigningKey to TelemetryClient.open (the value `ldptel analyzer-key show` prints); until then its reports wait in the queue, never sealed";

/** The runtime cannot seal (no Web Crypto X25519): the chunk is dropped and counted
 * (`sealing_unavailable`), never sent in the clear. */
export class SealingUnavailable extends Error {}

export const plainEnvelope: Envelope = {
  mode: "local",
  async seal(c: Sealable): Promise<Sealed> {
    const body = encodeBatch(
      {
        campaign: c.campaign,
        batchId: c.batchId,
        count: c.rows.length,
        campaignVersion: c.version,
        window: c.window,
        dimensions: c.dimensions,
      },
      mergeReports(c.rows.map((r) => r.report)),
    );
    return { messages: [{ path: "/v1/reports", body, contentType: CONTENT_TYPE, reports: c.rows.length }], stale: 0 };
  },
};

/** floor(t / length)·length, exactly (`keys.window_start`); 0 for the "all" window. */
export function windowStart(t: number, length: number): number {
  if (length <= 0) return 0;
  let q = Math.floor(t / length);
  if (q * length > t) q -= 1;
  return q * length;
}

function u64be(v: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(v));
  return out;
}

function u32be(v: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, v);
  return out;
}

/** The batch_id of the envelope of a chunk's `index`-th report, bound to `window`: SHA-256(chunk
 * batch_id ‖ window (u64) ‖ index (u32))[:16] (`envelope_batch_id`). */
export function envelopeBatchId(chunkId: Uint8Array, window: number, index: number): Uint8Array {
  return sha256(concat(chunkId, u64be(window), u32be(index))).slice(0, 16);
}

/** The POST bodies of encoded envelopes: one alone as itself, several as a `SealedEnvelopes` of at
 * most `maxEnvelopes` envelopes and `maxBytes` bytes (`client.sealed.bodies`). */
export function packEnvelopes(envelopes: Uint8Array[], maxBytes: number, maxEnvelopes: number): Message[] {
  const out: Message[] = [];
  let group: Uint8Array[] = [];
  let size = 2;
  const flush = () => {
    const body = group.length === 1 ? group[0]! : encodeSealedEnvelopes(group);
    out.push({ path: "/v1/reports", body, contentType: CONTENT_TYPE, reports: group.length });
    group = [];
    size = 2;
  };
  for (const e of envelopes) {
    const cost = e.length + 2 + Math.max(1, Math.ceil(Math.log2(e.length + 1) / 7));
    if (group.length && (size + cost > maxBytes || group.length >= maxEnvelopes)) flush();
    group.push(e);
    size += cost;
  }
  if (group.length) flush();
  return out;
}

/** The most fake messages per report a shuffled-fakes config may ask for: the planner's limits
 * (`ldptel.privacy.planner.MAX_FAKE_RATE` and `MAX_MU`, as `ldptel.client.configs`). A collector
 * sending more (2×10⁷ once made every flush seal for minutes) is refused: `bad_config`. */
export const MAX_FAKE_RATE = 100;
export const MAX_FAKES_PER_BUCKET = 1e6;

const isCount = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 1;

/** Why a shuffled-fakes config's λ = `fake_rate` cannot be used, or null (`configs.fake_rate_problem`):
 * a finite number in [0, `MAX_FAKE_RATE`], μ = λ·`batch_min`/`domain_size` at most
 * `MAX_FAKES_PER_BUCKET` (λ = μ·d/`batch_min`; the collector's configs carry both), and the λ its
 * `privacy` claim was planned with (when it carries one). */
export function fakeRateProblem(cfg: Record<string, unknown>): string | null {
  const rate = cfg.fake_rate,
    n = cfg.batch_min,
    d = cfg.domain_size;
  if (typeof rate !== "number" || !Number.isFinite(rate) || rate < 0)
    return `fake_rate = ${String(rate)} (a finite number of at least 0 is needed)`;
  if (rate > MAX_FAKE_RATE)
    return `fake_rate = ${rate} (at most ${MAX_FAKE_RATE} fake messages per report are planned)`;
  if (n !== undefined && !isCount(n)) return `batch_min = ${String(n)} (an integer of at least 1 is needed)`;
  if (d !== undefined && !isCount(d)) return `domain_size = ${String(d)} (an integer of at least 1 is needed)`;
  if (isCount(n) && isCount(d) && (rate * n) / d > MAX_FAKES_PER_BUCKET) {
    return `fake_rate = ${rate}: μ = fake_rate·batch_min/domain_size = ${(rate * n) / d} fakes per bucket (at most ${MAX_FAKES_PER_BUCKET} are planned)`;
  }
  const privacy = cfg.privacy;
  const planned =
    privacy !== null && typeof privacy === "object" ? (privacy as Record<string, unknown>).fake_rate : undefined;
  if (
    planned !== undefined &&
    planned !== null &&
    (typeof planned !== "number" ||
      !Number.isFinite(planned) ||
      Math.abs(planned - rate) > 1e-9 * Math.max(Math.abs(planned), Math.abs(rate)))
  ) {
    return `fake_rate = ${rate}, but its privacy claim was planned with ${String(planned)}`;
  }
  return null;
}

/** The fake rate λ of a config (0 unless shuffled-fakes). */
export function fakeRate(cfg: Record<string, unknown>): number {
  return cfg.privacy_mode === "shuffled-fakes" ? Number(cfg.fake_rate ?? 0) || 0 : 0;
}

/** An envelope's plaintext messages: the real rows and the fakes, in a uniformly random order. */
export function withFakes(
  cfg: Record<string, unknown>,
  mech: Mechanism,
  rows: Uint8Array[],
  draws: Draws,
): Uint8Array[] {
  const rate = fakeRate(cfg);
  const all = rows.slice();
  if (rate > 0) {
    const d = (mech as unknown as { domainSize: number }).domainSize;
    for (const index of fakeIndices(draws, rate, rows.length, d)) all.push(indexRow(index));
  }
  return permutation(draws, all.length).map((i) => all[i]!);
}

export const sealedEnvelope: Envelope = {
  mode: "shuffled",
  async seal(c: Sealable): Promise<Sealed> {
    if (c.signingKey === null)
      throw new KeyNotTrusted(
        `campaign ${c.campaign} is in a shuffled privacy mode and no analyzer signing key is pinned: ${PIN_HINT}`,
      );
    let key: ReturnType<typeof analyzerKey>;
    try {
      key = analyzerKey(c.config);
    } catch (err) {
      throw new NoAnalyzerKey(
        `campaign ${c.campaign}: unusable analyzer_key in the collector's config: ${(err as Error).message}`,
      );
    }
    if (key === null) throw new NoAnalyzerKey(`campaign ${c.campaign}: the collector has no analyzer key yet`);
    let why: string | null;
    try {
      why = await untrustedBecause(
        c.config.analyzer_key as Record<string, unknown>,
        key.raw,
        key.id,
        c.signingKey,
        Date.now() / 1000,
      );
    } catch (err) {
      throw new SealingUnavailable(
        `campaign ${c.campaign}: this runtime cannot verify (Web Crypto Ed25519): ${String(err)}`,
      );
    }
    if (why !== null) throw new KeyNotTrusted(`campaign ${c.campaign}: the collector's ${why}; not sealed to it`);
    const length = typeof c.config.window_seconds === "number" ? c.config.window_seconds : 0;
    const current = windowStart(c.now, length);
    const accepted = length === 0 ? [current] : [current, current - length];
    const kept: { window: number; index: number; row: Uint8Array }[] = [];
    let stale = 0;
    c.rows.forEach((r, index) => {
      const w = r.window ?? 0;
      if (!accepted.includes(w)) stale += 1;
      else kept.push({ window: w, index, row: rowOf(c.mech, r.report) });
    });
    let recipient: CryptoKey;
    try {
      recipient = await recipientKey(key.raw);
    } catch (err) {
      throw new SealingUnavailable(
        `campaign ${c.campaign}: this runtime cannot seal (Web Crypto X25519): ${String(err)}`,
      );
    }
    // one envelope per report, i.e. per device (issue 36): the collector takes reports = 1 and
    // the shuffler counts envelopes; several envelopes may share one POST (`packEnvelopes`)
    const envelopes: Uint8Array[] = [];
    for (const { window, index, row } of kept) {
      const plain = withFakes(c.config, c.mech, [row], c.draws);
      let sealed: Uint8Array[];
      try {
        sealed = await seal(plain, recipient, info(c.campaign, c.version, window, key.id));
      } catch (err) {
        throw new SealingUnavailable(
          `campaign ${c.campaign}: sealing failed (Web Crypto X25519, AES-GCM): ${String(err)}`,
        );
      }
      envelopes.push(
        encodeSealedBatch({
          campaign: c.campaign,
          batchId: envelopeBatchId(c.batchId, window, index),
          reports: 1,
          campaignVersion: c.version,
          keyId: key.id,
          window,
          messages: sealed,
          dimensions: c.dimensions,
        }),
      );
    }
    return { messages: packEnvelopes(envelopes, c.maxBodyBytes ?? 1 << 20, c.maxEnvelopes ?? 10_000), stale };
  },
};

/** The envelope of a campaign's `privacy_mode`; null for a mode this SDK does not know (its
 * reports are dropped and counted as `unsupported_privacy_mode`, never sent in the clear). */
export function envelopeFor(cfg: Record<string, unknown>): Envelope | null {
  const mode = cfg.privacy_mode ?? "local";
  if (mode === "local") return plainEnvelope;
  return typeof mode === "string" && SHUFFLED_MODES.includes(mode) ? sealedEnvelope : null;
}
