// The browser bundle's size budget (30 KB min+gzip without HPKE and the SDK's Privacy Pass module, the
// parts only some campaigns need; the size with them is stated) and
// what it may contain.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
// @ts-expect-error: a plain ES module script (no types)
import { browserSizes } from "../scripts/bundle.mjs";

const BUDGET = 30 * 1024;
const WITH_HPKE_CAP = 38 * 1024; // not a budget: catches a dependency pulled in by mistake (36.9 KB with the token module)
const bundle = () => readFileSync(new URL("../dist/ldptel.browser.min.js", import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : [p];
  });
}

describe("browser bundle", () => {
  it(`is at most ${BUDGET / 1024} KB min+gzip without HPKE or tokens (and stated with them)`, async () => {
    const s = await browserSizes();
    const kb = (n: number) => (n / 1024).toFixed(1);
    console.log(
      `browser bundle: ${kb(s.withoutHpke.gzip)} KB min+gzip without HPKE or tokens (${kb(s.withoutHpke.min)} KB min), ` +
        `${kb(s.withHpke.gzip)} KB with them (${kb(s.withHpke.min)} KB min)`,
    );
    expect(s.withoutHpke.gzip).toBeLessThanOrEqual(BUDGET);
    expect(s.withHpke.gzip).toBeLessThanOrEqual(WITH_HPKE_CAP);
    expect(gzipSync(bundle(), { level: 9 }).length).toBe(s.withHpke.gzip); // what dist/ holds
  });
  it("loads the Privacy Pass library only on first use (no static import of it)", () => {
    expect(bundle().toString()).not.toMatch(/from\s*"@cloudflare\/privacypass-ts"/);
    expect(bundle().toString()).toMatch(/import\("@cloudflare\/privacypass-ts"\)/);
  });
  it("imports nothing of Node", () => {
    expect(bundle().toString()).not.toMatch(/from\s*"node:|require\(/);
  });
  it("takes its randomness from crypto.getRandomValues only", () => {
    const src = sources(new URL("../src", import.meta.url).pathname);
    for (const f of src) expect(readFileSync(f, "utf8"), f).not.toMatch(/Math\.random|randomBytes|randomInt/);
    const uses = src.filter((f) => /getRandomValues\(/.test(readFileSync(f, "utf8")));
    expect(uses.map((f) => f.split("/src/")[1])).toEqual(["draws.ts"]);
  });
  it("never passes a fixed ephemeral key (ekm) outside the test hook of sealing.ts", () => {
    const src = sources(new URL("../src", import.meta.url).pathname);
    const uses = src.filter((f) => /\bekm\b/.test(readFileSync(f, "utf8")));
    expect(uses.map((f) => f.split("/src/")[1])).toEqual(["sealed/sealing.ts"]);
    expect(readFileSync(new URL("../src/client/envelope.ts", import.meta.url), "utf8")).toMatch(
      /await seal\(plain, recipient, info\([^)]*\)\);/,
    );
  });
});
