// The browser bundle's size budget (30 KB min+gzip, without HPKE) and what it may contain.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";

const BUDGET = 30 * 1024;
const bundle = () => readFileSync(new URL("../dist/ldptel.browser.min.js", import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : [p];
  });
}

describe("browser bundle", () => {
  it(`is at most ${BUDGET / 1024} KB min+gzip`, () => {
    const size = gzipSync(bundle(), { level: 9 }).length;
    console.log(`browser bundle: ${(bundle().length / 1024).toFixed(1)} KB min, ${(size / 1024).toFixed(1)} KB min+gzip`);
    expect(size).toBeLessThanOrEqual(BUDGET);
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
});
