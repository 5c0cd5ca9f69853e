/** The Node entry point: everything of the browser one, the file store, and a `TelemetryClient`
 * whose default storage is a file (`queuePath`, default
 * `$XDG_CACHE_HOME/ldptel/queue-<hash of url>.jsonl` or `~/.cache/ldptel/…`). */
import { createHash } from "node:crypto";
import { homedir } from "node:os";
import { join } from "node:path";
import { TelemetryClient as BaseClient, type ClientOptions } from "./client/client.js";
import { FileBackend } from "./client/fileBackend.js";

export * from "./index.js";
export { FileBackend };

export function defaultQueuePath(url: string): string {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return join(base, "ldptel", `queue-${createHash("sha256").update(url).digest("hex").slice(0, 12)}.jsonl`);
}

export interface NodeClientOptions extends ClientOptions {
  /** The queue file (ignored when `storage` is given). */
  queuePath?: string;
  /** fsync every write (survives a power cut, not only a killed process). */
  durable?: boolean;
}

export async function openClient(opts: NodeClientOptions): Promise<BaseClient> {
  const storage = opts.storage ?? new FileBackend(opts.queuePath ?? defaultQueuePath(opts.url), opts.durable ?? false);
  return BaseClient.open({ ...opts, storage });
}
