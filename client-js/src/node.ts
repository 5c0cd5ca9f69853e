/** The Node entry point: everything of the browser one, the file store, and a `TelemetryClient`
 * whose default storage is a file (`queuePath`, default `defaultQueuePath(url)`: in the user's
 * data directory, as the Python SDK's `platformdirs.user_data_dir`; a file an older SDK kept in
 * the cache directory is moved there first). */
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, renameSync, unlinkSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { TelemetryClient as BaseClient, type ClientOptions } from "./client/client.js";
import { FileBackend } from "./client/fileBackend.js";

export * from "./index.js";
export { FileBackend };

function queueName(url: string): string {
  return `queue-${createHash("sha256").update(url).digest("hex").slice(0, 12)}.jsonl`;
}

/** The user's data directory for ldptel, as Python's `platformdirs.user_data_dir("ldptel",
 * appauthor=False)`: `$XDG_DATA_HOME/ldptel` (default `~/.local/share/ldptel`) on Linux,
 * `~/Library/Application Support/ldptel` on macOS, `%LOCALAPPDATA%\ldptel` on Windows. Not a
 * cache directory: the file holds the device secret and the privacy ledger, which cache cleaners
 * must not delete (a new secret re-charges ε for a memoized value). */
export function userDataDir(env: NodeJS.ProcessEnv = process.env, platform: string = process.platform): string {
  if (platform === "win32") return join(env.LOCALAPPDATA || join(homedir(), "AppData", "Local"), "ldptel");
  if (platform === "darwin") return join(homedir(), "Library", "Application Support", "ldptel");
  return join(env.XDG_DATA_HOME || join(homedir(), ".local", "share"), "ldptel");
}

/** The queue file of the collector at `url`: `<userDataDir()>/queue-<hash of url>.jsonl`. */
export function defaultQueuePath(url: string): string {
  return join(userDataDir(), queueName(url));
}

/** Where SDKs before the data directory kept it: `$XDG_CACHE_HOME/ldptel/…` (or `~/.cache`). */
export function legacyQueuePath(url: string): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "ldptel", queueName(url));
}

/** Move the file an older SDK kept at `legacy` to `path` if only the legacy one exists (the
 * device keeps its queue, secret and ledger); true if moved. */
export function adoptLegacy(path: string, legacy: string): boolean {
  if (existsSync(path) || !existsSync(legacy)) return false;
  mkdirSync(dirname(path), { recursive: true });
  try {
    renameSync(legacy, path);
  } catch {
    copyFileSync(legacy, path); // another file system: copy, then remove
    unlinkSync(legacy);
  }
  return true;
}

export interface NodeClientOptions extends ClientOptions {
  /** The queue file (ignored when `storage` is given). */
  queuePath?: string;
  /** fsync every write (survives a power cut, not only a killed process). */
  durable?: boolean;
}

export async function openClient(opts: NodeClientOptions): Promise<BaseClient> {
  let path = opts.queuePath;
  if (!opts.storage && !path) {
    path = defaultQueuePath(opts.url);
    adoptLegacy(path, legacyQueuePath(opts.url));
  }
  const storage = opts.storage ?? new FileBackend(path as string, opts.durable ?? false);
  return BaseClient.open({ ...opts, storage });
}
