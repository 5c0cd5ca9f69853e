/** What an answer of the collector means for a chunk (`ldptel.client.delivery.classify`), and the
 * retry delay: exponential backoff with full jitter (the jitter from `crypto.getRandomValues`). */
import { cryptoDraws } from "../draws.js";

export const RETRY_STATUS = new Set([408, 425, 429, 500, 502, 503, 504]);
export const AUTH_STATUS = new Set([401, 403]);
/** `hold`: the chunk stays queued and this flush goes on without it (a sealed campaign whose
 * analyzer key the device does not trust). */
export type Action = "sent" | "retry" | "drop" | "regroup" | "stop" | "hold";

export function classify(status: number, reports = 1): Action {
  if (AUTH_STATUS.has(status)) return "stop";
  if (status === 413 && reports > 1) return "regroup";
  return RETRY_STATUS.has(status) ? "retry" : "drop";
}

/** Uniform in [0, min(cap, base·2^attempt)] seconds, at least min(Retry-After, cap). */
export function backoff(attempt: number, base: number, cap: number, retryAfter: number | null): number {
  let delay = cryptoDraws.uniform() * Math.min(cap, base * 2 ** Math.min(attempt, 30));
  if (retryAfter !== null) delay = Math.max(delay, Math.min(retryAfter, cap));
  return delay;
}

export class HttpStatus extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    readonly retryAfter: number | null,
  ) {
    super(`HTTP ${status}: ${body.slice(0, 300)}`);
  }
}

/** One bearer-authenticated request; `HttpStatus` for a non-2xx answer, a network error or a
 * timeout as thrown by `fetch`. */
export async function request(
  fetchFn: typeof fetch,
  url: string,
  token: string,
  timeoutMs: number,
  method: string,
  body?: Uint8Array,
  contentType?: string,
  authorization?: string,
): Promise<string> {
  // `authorization`: the whole header instead of the bearer token (a Privacy Pass token, issue 37)
  const headers: Record<string, string> = {
    Authorization: authorization ?? `Bearer ${token}`,
    Accept: "application/json",
  };
  if (contentType) headers["Content-Type"] = contentType;
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const resp = await fetchFn(url, {
      method,
      headers,
      body: body as BodyInit | undefined,
      signal: ctl.signal,
      cache: "no-store",
    });
    const text = await resp.text();
    if (!resp.ok) {
      const ra = resp.headers.get("Retry-After");
      const retryAfter = ra !== null && Number.isFinite(Number(ra)) ? Number(ra) : null;
      throw new HttpStatus(resp.status, text, retryAfter);
    }
    return text;
  } finally {
    clearTimeout(timer);
  }
}

export function errorCode(body: string): string | null {
  try {
    const doc = JSON.parse(body);
    return doc && typeof doc.error === "string" ? doc.error : null;
  } catch {
    return null;
  }
}

export interface FlushResult {
  accepted: number;
  duplicates: number;
  dropped: number;
  pending: number;
  error: string | null;
}
