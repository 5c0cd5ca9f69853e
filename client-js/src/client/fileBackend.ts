/** Node's durable store: an append-only file of JSON lines, one line per transaction (its writes),
 * replayed on open; a torn last line (a crash mid-write) is ignored. Compacted (a snapshot
 * written beside it, then renamed over it) when the log grows past 4× the live keys. */
import {
  appendFileSync,
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  writeFileSync,
} from "node:fs";
import { dirname } from "node:path";
import type { Backend, Json, Write } from "./store.js";

export class FileBackend implements Backend {
  readonly kind = "file";
  private live = new Map<string, Json>();
  private lines = 0;

  /** `durable`: fsync after every write (survives a power cut, not only a killed process). */
  constructor(
    readonly path: string,
    readonly durable = false,
  ) {}

  async load(): Promise<[string, Json][]> {
    mkdirSync(dirname(this.path), { recursive: true });
    this.live.clear();
    this.lines = 0;
    if (existsSync(this.path)) {
      const text = readFileSync(this.path, "utf8");
      for (const line of text.split("\n")) {
        if (!line) continue;
        let writes: Write[];
        try {
          writes = JSON.parse(line) as Write[];
        } catch {
          break; // a torn last line: that transaction never completed
        }
        this.lines += 1;
        for (const [k, v] of writes) {
          if (v === undefined || v === null) this.live.delete(k);
          else this.live.set(k, v);
        }
      }
      if (!text.endsWith("\n") || this.lines > 4 * this.live.size + 1000) this.compact();
    }
    return [...this.live];
  }

  async persist(writes: Write[]): Promise<void> {
    const line = `${JSON.stringify(writes.map(([k, v]) => [k, v === undefined ? null : v]))}\n`;
    if (this.durable) {
      const fd = openSync(this.path, "a");
      try {
        appendFileSync(fd, line);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    } else {
      appendFileSync(this.path, line);
    }
    this.lines += 1;
    for (const [k, v] of writes) {
      if (v === undefined) this.live.delete(k);
      else this.live.set(k, v);
    }
    if (this.lines > 4 * this.live.size + 1000) this.compact();
  }

  private compact(): void {
    const tmp = `${this.path}.tmp`;
    const body = this.live.size ? `${JSON.stringify([...this.live])}\n` : "";
    writeFileSync(tmp, body);
    renameSync(tmp, this.path);
    this.lines = this.live.size ? 1 : 0;
  }

  async close(): Promise<void> {}
}
