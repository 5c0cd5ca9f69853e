// `npm install ./client-js` (and `npm ci` here) run this `prepare` script: it builds dist/ (the
// bundles and the type declarations) so that the installed package is usable. Installed from a
// folder of a fresh clone, the package's own devDependencies (TypeScript, esbuild) are not there
// yet: they are installed into client-js/node_modules first (`npm ci`, scripts off: nothing
// runs but the build below).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

function run(args) {
  const r = spawnSync(npm, args, { cwd: root, stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!existsSync(join(root, "node_modules", "typescript")) || !existsSync(join(root, "node_modules", "esbuild"))) {
  run(["ci", "--no-audit", "--no-fund", "--ignore-scripts"]);
}
run(["run", "build"]);
