/** The browser's durable store: one IndexedDB database, one object store of keys and values;
 * each `persist` is one readwrite transaction (all or nothing). */
import type { Backend, Json, Write } from "./store.js";

const STORE = "kv";

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

export class IndexedDbBackend implements Backend {
  readonly kind = "indexeddb";
  private db: Promise<IDBDatabase>;

  constructor(readonly name: string) {
    this.db = new Promise((resolve, reject) => {
      const open = indexedDB.open(name, 1);
      open.onupgradeneeded = () => open.result.createObjectStore(STORE);
      open.onsuccess = () => resolve(open.result);
      open.onerror = () => reject(open.error);
      open.onblocked = () => reject(new Error(`IndexedDB ${name} is blocked by another connection`));
    });
  }

  static available(): boolean {
    return typeof indexedDB !== "undefined";
  }

  async load(): Promise<[string, Json][]> {
    const db = await this.db;
    const tx = db.transaction(STORE, "readonly");
    const store = tx.objectStore(STORE);
    const [keys, values] = await Promise.all([req(store.getAllKeys()), req(store.getAll())]);
    return keys.map((k, i) => [String(k), values[i] as Json]);
  }

  async loadPrefix(prefix: string): Promise<[string, Json][]> {
    const db = await this.db;
    const store = db.transaction(STORE, "readonly").objectStore(STORE);
    const range = IDBKeyRange.bound(prefix, `${prefix}\uffff`);
    const [keys, values] = await Promise.all([req(store.getAllKeys(range)), req(store.getAll(range))]);
    return keys.map((k, i) => [String(k), values[i] as Json]);
  }

  async persist(writes: Write[]): Promise<void> {
    const db = await this.db;
    await new Promise<void>((resolve, reject) => {
      const tx = db.transaction(STORE, "readwrite");
      const store = tx.objectStore(STORE);
      for (const [k, v] of writes) {
        if (v === undefined) store.delete(k);
        else store.put(v, k);
      }
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
    });
  }

  async close(): Promise<void> {
    (await this.db).close();
  }
}
