// Bundles the SDK with esbuild: dist/ldptel.browser.min.js (ES module for browsers, minified, HPKE
// included) and dist/ldptel.node.js (ES module for Node, with the file store), and prints the
// browser bundle's size min+gzip with HPKE and without it (`@hpke/core` and the SDK's Privacy Pass
// module left out, the two parts only some campaigns need: the budget, 30 KB, asserted by
// test/bundle.test.ts, which measures both the same way: `browserSizes`).

import { gzipSync } from "node:zlib";
import { build } from "esbuild";

// Privacy Pass (issue 37: campaigns with `require_tokens`) is loaded on first use by a dynamic
// import of the SDK's token module, whose library (@cloudflare/privacypass-ts, ~50 KB min+gzip
// with its ASN.1 and VOPRF code) stays a package import, resolved by the app's bundler or Node:
// devices of campaigns without tokens never load it, and it is outside both sizes below.
export const TOKENS_LIBRARY = "@cloudflare/privacypass-ts";
// the SDK's own token module (loaded by a dynamic import; inlined in the bundle): like HPKE, only a
// campaign with `require_tokens` needs it, so the budget is measured without it
export const TOKENS_MODULE = "../tokens/privacyPass.js";

export const BROWSER = {
  entryPoints: ["src/index.ts"],
  external: [TOKENS_LIBRARY],
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
    ["withHpke", [TOKENS_LIBRARY]],
    ["withoutHpke", ["@hpke/core", TOKENS_LIBRARY, TOKENS_MODULE]],
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
  await build({
    ...common,
    entryPoints: ["src/node.ts"],
    outfile: "dist/ldptel.node.js",
    platform: "node",
    external: [TOKENS_LIBRARY],
  });
  const s = await browserSizes();
  const kb = (n) => (n / 1024).toFixed(1);
  console.log(
    `browser bundle: ${kb(s.withHpke.min)} KB min, ${kb(s.withHpke.gzip)} KB min+gzip; ` +
      `without HPKE ${kb(s.withoutHpke.gzip)} KB min+gzip`,
  );
}
