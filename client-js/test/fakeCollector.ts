// A fake collector for the client's unit tests: a `fetch` that answers GET /v1/campaigns and
// POST /v1/reports (deduplicating batch ids), with scripted failures.
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { toHex } from "../src/draws.js";

export interface Batch {
  campaign: string;
  batchId: string;
  count: number;
  version: number;
}

export function readBatch(body: Uint8Array): Batch {
  const r = new BinaryReader(body);
  const out: Batch = { campaign: "", batchId: "", count: 0, version: 0 };
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1) out.campaign = r.string();
    else if (no === 2) out.batchId = toHex(r.bytes());
    else if (no === 3) out.count = r.uint32();
    else if (no === 5) out.version = r.uint32();
    else r.skip(wt);
  }
  return out;
}

export class FakeCollector {
  stored: Batch[] = [];
  seen = new Set<string>();
  posts = 0;
  /** Answers to give before the normal one: a status, "network" (throw), or "lost" (store, then throw). */
  script: (number | "network" | "lost")[] = [];
  offline = false;

  constructor(public campaigns: Record<string, unknown>[], public limits = { max_body_bytes: 1 << 20, max_reports_per_batch: 10000 }) {}

  get accepted(): number {
    return this.stored.reduce((n, b) => n + b.count, 0);
  }

  fetch = async (url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (this.offline) throw new TypeError("fetch failed (offline)");
    const path = new URL(String(url)).pathname;
    if (path === "/v1/campaigns") return Response.json({ campaigns: this.campaigns, ...this.limits });
    this.posts += 1;
    const next = this.script.shift();
    if (next === "network") throw new TypeError("fetch failed");
    if (typeof next === "number") {
      return new Response(JSON.stringify({ error: next === 409 ? "campaign_paused" : "x" }), { status: next, headers: next === 429 ? { "Retry-After": "0" } : {} });
    }
    const body = new Uint8Array(init!.body as ArrayBuffer);
    if (body.length > this.limits.max_body_bytes) return new Response("{}", { status: 413 });
    const batch = readBatch(body);
    const duplicate = this.seen.has(batch.batchId);
    if (!duplicate) {
      this.seen.add(batch.batchId);
      this.stored.push(batch);
    }
    if (next === "lost") throw new TypeError("connection reset after the collector stored it");
    return Response.json({ accepted: batch.count, duplicate }, { status: 202 });
  };
}

export const campaign = (name: string, extra: Record<string, unknown>) => ({
  name, version: 1, kind: "frequency", window: "1d", window_seconds: 86400, reports_per_window: 1_000_000, ...extra,
});
