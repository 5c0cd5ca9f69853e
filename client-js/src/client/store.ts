/**
 * The SDK's durable state — queued reports, chunks (a batch_id fixed before the first attempt),
 * the privacy ledger, the device secret and the cached campaign configs — as one key-value map
 * kept in memory and persisted by a `Backend` (IndexedDB in browsers, an append-only file in
 * Node, memory in tests). Every change is one `transact` whose writes the backend stores
 * atomically (one IndexedDB transaction, one appended line), so a report is queued if and only if
 * the ledger charged it, also across a crash or a closed tab.
 */
import { fromHex, toHex } from "../draws.js";

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
/** A write: a key and its new value, or `undefined` to delete it. */
export type Write = [string, Json | undefined];

export interface Backend {
  readonly kind: string;
  /** Everything stored, in any order. */
  load(): Promise<[string, Json][]>;
  /** Store these writes all or none. */
  persist(writes: Write[]): Promise<void>;
  /** The entries whose key starts with `prefix` (a backend shared by tabs reads them fresh). */
  loadPrefix?(prefix: string): Promise<[string, Json][]>;
  close(): Promise<void>;
}

export class MemoryBackend implements Backend {
  readonly kind = "memory";
  async load(): Promise<[string, Json][]> {
    return [];
  }
  async persist(): Promise<void> {}
  async close(): Promise<void> {}
}

export class Store {
  // keys are "<table>/<rest>"; one map per table, so a scan reads only its table
  private tables = new Map<string, Map<string, Json>>();
  private chain: Promise<unknown> = Promise.resolve();

  private constructor(readonly backend: Backend) {}

  static async open(backend: Backend): Promise<Store> {
    const store = new Store(backend);
    const loaded = await backend.load();
    loaded.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    for (const [k, v] of loaded) store.set(k, v);
    return store;
  }

  /** Read the backend again (another tab may have written to the same database). */
  reload(): Promise<void> {
    const run = this.chain.then(async () => {
      const loaded = await this.backend.load();
      this.tables.clear();
      loaded.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      for (const [k, v] of loaded) this.set(k, v);
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  /** Read the entries under each of `prefixes` again from a shared backend (the ledger, before a
   * report is admitted: another tab may have charged it meanwhile). */
  refresh(prefixes: string[]): Promise<void> {
    const load = this.backend.loadPrefix?.bind(this.backend);
    if (load === undefined) return Promise.resolve();
    const run = this.chain.then(async () => {
      for (const prefix of prefixes) {
        const fresh = await load(prefix);
        const table = this.table(prefix);
        for (const k of [...table.keys()]) if (k.startsWith(prefix)) table.delete(k);
        for (const [k, v] of fresh) table.set(k, v);
      }
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  private table(key: string): Map<string, Json> {
    const name = key.slice(0, key.indexOf("/") + 1);
    let t = this.tables.get(name);
    if (t === undefined) this.tables.set(name, (t = new Map()));
    return t;
  }

  private set(key: string, value: Json | undefined): void {
    if (value === undefined) this.table(key).delete(key);
    else this.table(key).set(key, value);
  }

  get(key: string): Json | undefined {
    return this.table(key).get(key);
  }

  /** The entries of table `prefix` ("r/", "c/", …), in insertion order (key order after a load). */
  entries(prefix: string): Iterable<[string, Json]> {
    return this.table(prefix).entries();
  }

  size(prefix: string): number {
    return this.table(prefix).size;
  }

  /** Run `fn` alone (transactions are serialized): it reads the current state and returns its
   * writes and a result; the writes are persisted, then applied. A failed persist applies nothing. */
  transact<T>(fn: (store: Store) => { writes: Write[]; result: T }): Promise<T> {
    const run = this.chain.then(async () => {
      const { writes, result } = fn(this);
      if (writes.length) {
        await this.backend.persist(writes);
        for (const [k, v] of writes) this.set(k, v);
      }
      return result;
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  close(): Promise<void> {
    return this.chain.then(() => this.backend.close());
  }
}

/** Bytes in JSON (hex). */
export const bytesJson = (b: Uint8Array): Json => ({ $hex: toHex(b) });
export const jsonBytes = (j: Json): Uint8Array => fromHex((j as { $hex: string }).$hex);
