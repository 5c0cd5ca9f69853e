// A fake collector for the client's unit tests: a `fetch` that answers GET /v1/campaigns (with a
// settable server_time) and POST /v1/reports (ReportBatch and SealedBatch, deduplicating batch
// ids; sealed batches checked as the collector does: the analyzer key, the window), with scripted
// failures.
import { BinaryReader } from "@bufbuild/protobuf/wire";
// a JSON import (bundled by Vite): this module also runs in the browser tests, without node:fs
import sealedVectors from "../../testvectors/sealed.json";
import { fromHex, toHex } from "../src/draws.js";
import { MemoryBackend, TelemetryClient } from "../src/index.js";
import { statement, verifyKey } from "../src/sealed/keySigning.js";
import { concat } from "../src/secret.js";

/** The test vectors' analyzer signing key (`testvectors/sealed.json`: `analyzer.signing`): its
 * Ed25519 seed and the public half the test clients pin. */
export const SIGNING = (sealedVectors as { analyzer: { signing: { seed: string; public: string } } }).analyzer.signing;

/** An analyzer key config signed by the Ed25519 key of `seed` (default: the vectors' signing
 * key) as the aggregator signs it (`ldptel.key_signing`), `current_until` defaulting to
 * `accepted_until` − 1 day. */
export async function signedKey(
  config: Record<string, unknown>,
  seed: string = SIGNING.seed,
): Promise<Record<string, unknown>> {
  const accepted = Number(config.accepted_until);
  const current = Number(config.current_until ?? accepted - 86400);
  const raw = Uint8Array.from(atob(String(config.public)), (c) => c.charCodeAt(0));
  const pkcs8 = concat(fromHex("302e020100300506032b657004220420"), fromHex(seed)); // RFC 8410
  const key = await crypto.subtle.importKey("pkcs8", pkcs8 as Uint8Array<ArrayBuffer>, { name: "Ed25519" }, false, [
    "sign",
  ]);
  const bytes = statement(String(config.suite), raw, Number(config.id), current, accepted);
  const sig = new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, key, bytes as Uint8Array<ArrayBuffer>));
  return { ...config, current_until: current, signature: btoa(String.fromCharCode(...sig)) };
}

export interface Batch {
  campaign: string;
  batchId: string;
  count: number;
  version: number;
  schema: number;
  keyId: number;
  window: number;
  messages: Uint8Array[];
  dimensions: [string, string][];
  /** A GRR payload's values (field 10). */
  grr: number[];
}

export function readBatch(body: Uint8Array): Batch {
  const r = new BinaryReader(body);
  const out: Batch = {
    campaign: "",
    batchId: "",
    count: 0,
    version: 0,
    schema: 0,
    keyId: 0,
    window: 0,
    messages: [],
    dimensions: [],
    grr: [],
  };
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1) out.campaign = r.string();
    else if (no === 2) out.batchId = toHex(r.bytes());
    else if (no === 3) out.count = r.uint32();
    else if (no === 4) out.schema = r.uint32();
    else if (no === 5) out.version = r.uint32();
    else if (no === 6 && wt === 0) out.keyId = r.uint32();
    else if (no === 7) out.window = Number(r.uint64());
    else if (no === 8 && wt === 2) out.messages.push(r.bytes());
    else if (no === 20) {
      const d = new BinaryReader(r.bytes());
      let name = "",
        value = "";
      while (d.pos < d.len) {
        const [n] = d.tag();
        if (n === 1) name = d.string();
        else value = d.string();
      }
      out.dimensions.push([name, value]);
    } else if (no === 10) {
      const g = new BinaryReader(r.bytes());
      while (g.pos < g.len) {
        const [n, t] = g.tag();
        if (n === 1 && t === 2) {
          const end = g.uint32() + g.pos;
          while (g.pos < end) out.grr.push(g.uint32());
        } else g.skip(t);
      }
    } else r.skip(wt);
  }
  return out;
}

export class FakeCollector {
  stored: Batch[] = [];
  seen = new Set<string>();
  posts = 0;
  /** Answers to give before the normal one: a status, "network" (throw), or "lost" (store, then throw). */
  script: (number | "network" | "lost" | { status: number; error: string })[] = [];
  offline = false;
  /** The collector's clock (epoch s; null: this machine's). */
  serverTime: number | null = null;
  /** Key ids a SealedBatch may be sealed to (null: any). */
  acceptedKeys: number[] | null = null;
  /** Superseded versions still taken (each a config with its `version`), sent only when asked for. */
  older: Record<string, unknown>[] = [];
  /** The `versions` asked for by each GET /v1/campaigns. */
  asked: string[][] = [];

  constructor(
    public campaigns: Record<string, unknown>[],
    public limits = { max_body_bytes: 1 << 20, max_reports_per_batch: 10000 },
  ) {}

  get accepted(): number {
    return this.stored.reduce((n, b) => n + b.count, 0);
  }

  now(): number {
    return this.serverTime ?? Date.now() / 1000;
  }

  fetch = async (url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (this.offline) throw new TypeError("fetch failed (offline)");
    const parsed = new URL(String(url));
    const path = parsed.pathname;
    if (path === "/v1/campaigns") {
      // an old version's config only when asked for by number (`versions=<campaign>:<n>`)
      const asked = new Set((parsed.searchParams.get("versions") ?? "").split(",").filter(Boolean));
      this.asked.push([...asked]);
      const campaigns = this.campaigns.map((c) => {
        const older = this.older.filter((o) => o.name === c.name && asked.has(`${c.name}:${o.version}`));
        return older.length ? { ...c, older_versions: older } : c;
      });
      return Response.json({ campaigns, ...this.limits, server_time: this.now() });
    }
    this.posts += 1;
    const next = this.script.shift();
    if (next === "network") throw new TypeError("fetch failed");
    if (typeof next === "number") {
      return new Response(JSON.stringify({ error: next === 409 ? "campaign_paused" : "x" }), {
        status: next,
        headers: next === 429 ? { "Retry-After": "0" } : {},
      });
    }
    if (typeof next === "object") return new Response(JSON.stringify({ error: next.error }), { status: next.status });
    const body = new Uint8Array(init!.body as ArrayBuffer);
    if (body.length > this.limits.max_body_bytes) return new Response("{}", { status: 413 });
    const first = readBatch(body);
    // a SealedEnvelopes body (schema 3): each envelope checked and stored on its own
    const batches = first.schema === 3 ? readEnvelopes(body).map(readBatch) : [first];
    let accepted = 0,
      duplicates = 0;
    for (const batch of batches) {
      const refused = this.check(batch);
      if (refused) return refused;
    }
    for (const batch of batches) {
      const duplicate = this.seen.has(batch.batchId);
      if (!duplicate) {
        this.seen.add(batch.batchId);
        this.stored.push(batch);
        accepted += batch.schema === 2 ? 1 : batch.count;
      } else duplicates += 1;
    }
    if (next === "lost") throw new TypeError("connection reset after the collector stored it");
    if (first.schema === 3)
      return Response.json({ accepted, duplicate: duplicates === batches.length, duplicates }, { status: 202 });
    return Response.json({ accepted: first.count, duplicate: duplicates > 0 }, { status: 202 });
  };

  private check(batch: Batch): Response | null {
    if (batch.schema === 2) {
      if (this.acceptedKeys !== null && !this.acceptedKeys.includes(batch.keyId)) {
        return new Response(JSON.stringify({ error: "unknown_key" }), { status: 400 });
      }
      const cfg = this.campaigns.find((c) => c.name === batch.campaign)!;
      const length = (cfg.window_seconds as number) ?? 0;
      const current = length ? Math.floor(this.now() / length) * length : 0;
      if (![current, current - length].includes(batch.window) && !(length === 0 && batch.window === 0)) {
        return new Response(JSON.stringify({ error: "wrong_window" }), { status: 400 });
      }
      if (batch.count !== 1) return new Response(JSON.stringify({ error: "invalid_batch" }), { status: 400 });
    }
    return null;
  }
}

/** The envelopes (field 21) of a SealedEnvelopes body. */
export function readEnvelopes(body: Uint8Array): Uint8Array[] {
  const r = new BinaryReader(body);
  const out: Uint8Array[] = [];
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 21 && wt === 2) out.push(r.bytes());
    else r.skip(wt);
  }
  return out;
}

export const campaign = (name: string, extra: Record<string, unknown>) => ({
  name,
  version: 1,
  kind: "frequency",
  window: "1d",
  window_seconds: 86400,
  reports_per_window: 1_000_000,
  ...extra,
});

/** A client of `fake` as the unit tests open it: memory storage, millisecond backoff; `extra`
 * overrides or adds options. */
export const openTestClient = (fake: FakeCollector, extra: Record<string, unknown> = {}) =>
  TelemetryClient.open({
    url: "http://collector.test",
    token: "t",
    storage: new MemoryBackend(),
    fetch: fake.fetch as typeof fetch,
    backoffBaseS: 0.001,
    maxBackoffS: 0.01,
    analyzerSigningKey: SIGNING.public,
    ...extra,
  });

/** A `shuffled-fakes` histogram campaign "sf" of 8 values, window "all", as the collector serves
 * it (`analyzer_key` and the rest in `extra`). */
export const shuffledFakes = (extra: Record<string, unknown>) =>
  campaign("sf", {
    oracle: "histogram",
    epsilon: null,
    domain_size: 8,
    privacy_mode: "shuffled-fakes",
    fake_rate: 2.0,
    window: "all",
    window_seconds: 0,
    reports_per_window: 1_000_000,
    ...extra,
  });

/** One case of testvectors/analyzer_key_signature.json. */
export interface SignatureCase {
  suite: string;
  public: string; // hex
  key_id: number;
  current_until: number;
  accepted_until: number;
  signature: string; // base64
}

/** `verifyKey` on a vectors case against the `pinned` signing key. */
export const verifyCase = (c: SignatureCase, pinned: CryptoKey): Promise<boolean> =>
  verifyKey(
    c.suite,
    fromHex(c.public),
    c.key_id,
    c.current_until,
    c.accepted_until,
    Uint8Array.from(atob(c.signature), (ch) => ch.charCodeAt(0)),
    pinned,
  );
