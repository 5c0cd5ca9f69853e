// Used by tests/test_sdk_js_sealed.py: device-level windows from Node processes' SDK against a real
// collector. The devices live one day behind (their fetch moves the collector's server_time back
// a day): each records its events in "yesterday's" window and flushes (which opens the window
// even without an event); then the clock is the collector's again, the window has ended, and the
// next flush reports it — one randomized report per device naming that window.
// Usage: node node-device-level.mjs URL TOKEN CAMPAIGN DEVICES_JSON  (DEVICES_JSON: [[events, platform], …])
// Prints one JSON line: {"window", "queued", "accepted", "pending", "dropped"}.
import { MemoryBackend, TelemetryClient } from "../../dist/ldptel.node.js";

const [url, token, campaign, spec] = process.argv.slice(2);
const DAY = 86400;
let shift = -DAY;
const shifted = async (input, init) => {
  const resp = await fetch(input, init);
  if (!String(input).endsWith("/v1/campaigns") || !resp.ok) return resp;
  const data = await resp.json();
  data.server_time += shift;
  return new Response(JSON.stringify(data), { status: resp.status, headers: { "Content-Type": "application/json" } });
};
const devices = JSON.parse(spec);
const clients = [];
let queued = 0;
for (const [events, platform] of devices) {
  const c = await TelemetryClient.open({
    url,
    token,
    storage: new MemoryBackend(),
    fetch: shifted,
    backoffBaseS: 0.05,
    maxBackoffS: 1,
    dimensions: { platform },
  });
  await c.fetchConfigs();
  for (let i = 0; i < events; i++) if (await c.report(campaign, "opened")) queued += 1;
  await c.flush(10_000); // nothing to send yet; opens the day's window of a device without an event
  clients.push(c);
}
const window = Math.floor((Date.now() / 1000 - DAY) / DAY) * DAY;
shift = 0;
const out = { window, queued, accepted: 0, pending: 0, windows: 0, dropped: {} };
for (const c of clients) {
  await c.fetchConfigs();
  const r = await c.flush(60_000);
  out.accepted += r.accepted;
  out.pending += r.pending;
  out.windows += c.pendingWindows(); // today's, opened by this flush
  for (const [k, n] of Object.entries(c.health().dropped)) out.dropped[k] = (out.dropped[k] ?? 0) + n;
  await c.close(null);
}
console.log(JSON.stringify(out));
