/** What the SDK lost on the device and why (`TelemetryClient.health()`). */
export interface Health {
  /** Reports are being queued. */
  ok: boolean;
  /** Why the durable store cannot be used (reports then dropped), or null. */
  storageError: string | null;
  /** Why no campaign config is known, or null. */
  configError: string | null;
  /** Why reports of shuffled campaigns wait in the queue unsealed (no `analyzerSigningKey`, or
   * the collector's analyzer key not signed by it or expired), or null. */
  sealingError: string | null;
  /** Reports dropped on the device since the client started, by reason. */
  dropped: Record<string, number>;
  lastError: string | null;
  /** Reports queued, not yet delivered. */
  pending: number;
  /** Values of numeric campaigns outside [lower, upper], reported clipped, by campaign. */
  clipped: Record<string, number>;
  /** The durable store in use: "indexeddb", "file" or "memory". */
  storage: string;
  /** Reports waiting in the queue, by reason: `no_token` (a campaign that requires Privacy Pass
   * tokens, none to be had: no attestation, issuer unreachable or its quota reached; issue 37). */
  waiting: Record<string, number>;
}

export class Counter {
  readonly counts: Record<string, number> = {};
  last: string | null = null;

  add(reason: string, n: number, error?: string): void {
    this.counts[reason] = (this.counts[reason] ?? 0) + n;
    if (error !== undefined) this.last = error;
  }
}
