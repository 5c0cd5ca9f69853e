// Bundles the SDK with esbuild: dist/ldptel.browser.min.js (ES module for browsers, minified, HPKE
// included) and dist/ldptel.node.js (ES module for Node, with the file store), and prints the
// browser bundle's size min+gzip with HPKE and without it (`@hpke/core` left out: the budget, 30 KB,
// asserted by test/bundle.test.ts, which measures both the same way: `browserSizes`).

import { gzipSync } from "node:zlib";
import { build } from "esbuild";

export const BROWSER = {
  entryPoints: ["src/index.ts"],
  bundle: true,
  format: "esm",
  target: "es2022",
  legalComments: "none",
  logLevel: "warning",
  platform: "browser",
  minify: true,
};

/** min and min+gzip bytes of the browser bundle, with and without HPKE. */
export async function browserSizes() {
  const out = {};
  for (const [name, external] of [
    ["withHpke", []],
    ["withoutHpke", ["@hpke/core"]],
  ]) {
    const r = await build({ ...BROWSER, write: false, external });
    const min = r.outputFiles[0].contents;
    out[name] = { min: min.length, gzip: gzipSync(min, { level: 9 }).length };
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const common = { bundle: true, format: "esm", target: "es2022", legalComments: "none", logLevel: "warning" };
  await build({ ...BROWSER, outfile: "dist/ldptel.browser.min.js" });
  await build({ ...common, entryPoints: ["src/node.ts"], outfile: "dist/ldptel.node.js", platform: "node" });
  const s = await browserSizes();
  const kb = (n) => (n / 1024).toFixed(1);
  console.log(
    `browser bundle: ${kb(s.withHpke.min)} KB min, ${kb(s.withHpke.gzip)} KB min+gzip; ` +
      `without HPKE ${kb(s.withoutHpke.gzip)} KB min+gzip`,
  );
}
