// Used by tests/test_analyzer_key_pin.py: a Node device (memory store) that reports N values to a
// shuffled campaign of a real collector and flushes for at most FLUSH_MS. Usage:
//   node node-sealed.mjs URL TOKEN CAMPAIGN N FLUSH_MS [ANALYZER_SIGNING_KEY]
// Prints one JSON line: {"queued", "result", "health"}.
import { MemoryBackend, TelemetryClient } from "../../dist/ldptel.node.js";

const [url, token, campaign, n, flushMs, signingKey] = process.argv.slice(2);
const client = await TelemetryClient.open({
  url,
  token,
  storage: new MemoryBackend(),
  acceptUnrandomized: true,
  backoffBaseS: 0.05,
  maxBackoffS: 0.5,
  ...(signingKey ? { analyzerSigningKey: signingKey } : {}),
});
let queued = 0;
for (let i = 0; i < Number(n); i++) if (await client.report(campaign, i % 16)) queued += 1;
const result = await client.flush(Number(flushMs));
console.log(JSON.stringify({ queued, result, health: client.health() }));
await client.close(null);
process.exit(0); // not waiting for idle keep-alive connections to close
