// Bundles the SDK with esbuild: dist/ldptel.browser.min.js (ES module for browsers, minified) and
// dist/ldptel.node.js (ES module for Node, with the file store), and prints the browser bundle's
// size min+gzip. The budget (30 KB min+gzip without HPKE) is asserted by test/bundle.test.ts.
import { build } from "esbuild";
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const common = { bundle: true, format: "esm", target: "es2022", legalComments: "none", logLevel: "warning" };
await build({ ...common, entryPoints: ["src/index.ts"], outfile: "dist/ldptel.browser.min.js", platform: "browser", minify: true });
await build({ ...common, entryPoints: ["src/node.ts"], outfile: "dist/ldptel.node.js", platform: "node" });
const min = readFileSync("dist/ldptel.browser.min.js");
const gz = gzipSync(min, { level: 9 });
console.log(`browser bundle: ${(min.length / 1024).toFixed(1)} KB min, ${(gz.length / 1024).toFixed(1)} KB min+gzip`);
