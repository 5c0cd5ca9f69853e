// Used by tests/test_sdk_js.py: a Node process that reports N values to a real collector through
// the SDK's file queue and flushes. Usage:
//   node node-report.mjs URL TOKEN QUEUE CAMPAIGN N [report|flush|both] [batchSize]
// Prints one JSON line: {"queued", "result", "health"}.
import { openClient } from "../../dist/ldptel.node.js";

const [url, token, queuePath, campaign, n, mode = "both", batchSize = "1000"] = process.argv.slice(2);
const client = await openClient({
  url,
  token,
  queuePath,
  batchSize: Number(batchSize),
  backoffBaseS: 0.05,
  maxBackoffS: 1,
});
let queued = 0;
if (mode !== "flush") {
  for (let i = 0; i < Number(n); i++) if (await client.report(campaign, i % 16)) queued += 1;
  console.log(JSON.stringify({ event: "reported", queued }));
}
let result = null;
if (mode !== "report") result = await client.flush(120_000);
console.log(JSON.stringify({ queued, result, health: client.health() }));
await client.close(null);
