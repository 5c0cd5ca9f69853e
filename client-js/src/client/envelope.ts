/**
 * The stage after encoding: a chunk of randomized reports of one campaign version → the messages
 * that carry it to the collector. Local campaigns (`privacy_mode` absent or "local") send one
 * plain `ReportBatch` (wire format v1). This is the seam for the shuffled modes of issue 26: a
 * sealed envelope (HPKE-encrypted messages to the shuffler's key, with their `info` strings) and
 * fake messages plug in here as other `Envelope`s chosen by `envelopeFor`, without touching the
 * mechanisms, the queue or the ledger.
 */
import type { Report } from "../mechanisms/base.js";
import { CONTENT_TYPE, encodeBatch } from "../wire.js";

export interface Sealable {
  campaign: string;
  version: number;
  batchId: Uint8Array;
  count: number;
  /** The chunk's reports, merged column by column. */
  report: Report;
  config: Record<string, unknown>;
}

export interface Message {
  path: string;
  body: Uint8Array;
  contentType: string;
}

export interface Envelope {
  readonly mode: string;
  /** The messages of one chunk, all delivered under the chunk's batch_id (retries resend them). */
  seal(chunk: Sealable): Message[];
}

export const plainEnvelope: Envelope = {
  mode: "local",
  seal(c: Sealable): Message[] {
    const body = encodeBatch({ campaign: c.campaign, batchId: c.batchId, count: c.count, campaignVersion: c.version }, c.report);
    return [{ path: "/v1/reports", body, contentType: CONTENT_TYPE }];
  },
};

/** The envelope of a campaign's `privacy_mode`; null for a mode this SDK cannot send yet (its
 * reports are dropped and counted as `unsupported_privacy_mode`, never sent in the clear). */
export function envelopeFor(cfg: Record<string, unknown>): Envelope | null {
  const mode = cfg.privacy_mode ?? "local";
  return mode === "local" ? plainEnvelope : null;
}
