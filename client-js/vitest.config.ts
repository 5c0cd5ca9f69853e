import { existsSync } from "node:fs";
import { playwright } from "@vitest/browser-playwright";
import { defineConfig } from "vitest/config";

// Two projects: the Node tests (test/*.test.ts) and the browser tests (test/browser/), which run in
// real Chromium: Debian's /usr/bin/chromium (or $CHROMIUM), launched headless by Playwright.
// Without Chromium the browser project is left out (with a warning) unless
// LDPTEL_REQUIRE_BROWSER=1 (CI), which then fails on the missing browser.
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const browser = existsSync(chromium) || process.env.LDPTEL_REQUIRE_BROWSER === "1";
if (!browser) console.warn(`client-js: no Chromium at ${chromium}: the browser tests are skipped`);

export default defineConfig({
  server: { fs: { allow: [".."] } },
  test: {
    testTimeout: 60_000,
    projects: [
      { extends: true, test: { name: "node", include: ["test/*.test.ts"], environment: "node" } },
      ...(browser
        ? [
            {
              extends: true,
              test: {
                name: "chromium",
                include: ["test/browser/*.test.ts"],
                browser: {
                  enabled: true,
                  headless: true,
                  screenshotFailures: false,
                  provider: playwright({
                    launchOptions: {
                      executablePath: chromium,
                      args: [
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-quic",
                        "--no-first-run",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                      ],
                    },
                  }),
                  instances: [{ browser: "chromium" as const }],
                },
              },
            },
          ]
        : []),
    ],
  },
});
