/**
 * `TelemetryClient`: the device SDK for browsers and Node, as the Python `TelemetryClient`.
 *
 *     const client = await TelemetryClient.open({ url, token });
 *     await client.report("homepage", "cart");   // randomized now; only the randomized report is queued
 *     await client.flush();
 *
 * - Campaign configs come from `GET /v1/campaigns` and are cached (memory and the store, so
 *   reporting works offline after a restart); a stale copy is refreshed in the background.
 *   `report` never waits on the network, except on a device's very first run (at most `timeoutMs`).
 * - `report(campaign, value)` randomizes at once with the campaign's mechanism and
 *   `crypto.getRandomValues`; the raw value is never stored or sent. It never throws and never
 *   rejects: a report that cannot be queued resolves to false and is counted by reason in
 *   `health().dropped` (no config, unknown campaign, a config this SDK refuses — malformed, or
 *   its ε over `maxEpsilon` — a bad value, the ledger's `reports_per_window` or
 *   `lifetimeEpsilon`, a storage failure).
 * - Reports wait in a durable queue (IndexedDB in browsers, a file in Node); `flush()` (or the
 *   background sender, `flushIntervalMs`) posts them as `ReportBatch`es, one per chunk of one
 *   campaign version under a batch_id fixed before its first attempt, so a retry (also after a
 *   restart) is deduplicated by the collector; retries back off exponentially with full jitter.
 * - The pipeline per report: config → mechanism (`builder`) → dimension values (`dimensions.ts`)
 *   → encode → ledger + queue; a device-level campaign's event goes to its window's aggregate
 *   instead (`deviceLevel.ts`: one report per window, at its end). Per chunk (rows of one campaign
 *   version and one envelope: window, dimension values): the envelope of its privacy mode
 *   (`envelope.ts`: a plain `ReportBatch`, or for the shuffled modes `SealedBatch`es of HPKE-sealed
 *   messages with their fakes, made anew at each attempt).
 */

import { sha256 } from "@noble/hashes/sha2.js";
import {
  buildMechanism,
  type CampaignConfig,
  type Cost,
  DEVICE_LEVEL_KINDS,
  privacyLoss,
  reportCost,
  valueIndex,
} from "../builder.js";
import { type Dimension, dimensionPairs, type Pairs, parseDimensions, UndeclaredDimension } from "../dimensions.js";
import { cryptoDraws, type Draws, fromHex, toHex } from "../draws.js";
import { type Cell, InvalidConfig, type Mechanism, type Report } from "../mechanisms/base.js";
import { Grid } from "../mechanisms/grid.js";
import { Numeric } from "../mechanisms/numeric.js";
import { fromBase64, importSigningKey } from "../sealed/keySigning.js";
import { rowLayout } from "../sealed/rows.js";
import { ascii, concat, derive } from "../secret.js";
import { type Action, backoff, classify, errorCode, type FlushResult, HttpStatus, request } from "./delivery.js";
import { type Built, DeviceWindows, eventKey, increment } from "./deviceLevel.js";
import {
  type Envelope,
  envelopeFor,
  fakeRate,
  fakeRateProblem,
  KeyNotTrusted,
  NoAnalyzerKey,
  plainEnvelope,
  type Sealed,
  SealingUnavailable,
  windowStart,
} from "./envelope.js";
import { Counter, type Health } from "./health.js";
import { IndexedDbBackend } from "./idb.js";
import { Ledger, REFUSALS, type Refusal, type Scope } from "./ledger.js";
import { type Backend, bytesJson, type Json, jsonBytes, MemoryBackend, Store, type Write } from "./store.js";

export const DEFAULT_MAX_EPSILON = 8.0;
const CAMPAIGN_ANSWERS = new Set(["campaign_paused", "campaign_retired", "version_retired"]);
const DEFAULT_LIMITS = { maxBodyBytes: 1 << 20, maxReportsPerBatch: 10_000 };
// the kinds a campaign in a shuffled privacy mode may be (docs/privacy.md)
const FAKES_KINDS = ["frequency", "range", "numeric"];
const SHUFFLED_KINDS = [...FAKES_KINDS, "heavy_hitters"];
// the collector's answers to a sealed batch that mean "fetch the configs again and seal anew"
const RESEAL_ANSWERS = new Set(["unknown_key", "wrong_window"]);

export interface ClientOptions {
  url: string;
  token: string;
  /** Where the queue, ledger and device secret live (default: IndexedDB in browsers, memory
   * elsewhere; the Node entry point defaults to a file). */
  storage?: Backend;
  batchSize?: number;
  timeoutMs?: number;
  configTtlMs?: number;
  /** Background sender: flush every this many ms (0: only explicit `flush()`). */
  flushIntervalMs?: number;
  backoffBaseS?: number;
  maxBackoffS?: number;
  /** The largest ε (per report, or lifetime ε∞ for memoized campaigns) this device accepts. */
  maxEpsilon?: number;
  lifetimeEpsilon?: number | null;
  scope?: Scope;
  fetch?: typeof fetch;
  /** Randomness for tests only; production draws come from `crypto.getRandomValues`. */
  draws?: Draws;
  /** Default dimension values of this device (the platform, the app version, an experiment arm):
   * each report of a campaign with dimensions carries those it declares, mapped to its closed
   * lists; `report(…, { dimensions })` overrides them per call. */
  dimensions?: Record<string, unknown>;
  /** Also report to `shuffled-fakes` campaigns without local randomization, whose report is the
   * true value (sealed to the analyzer; its privacy is central only). Refused by default
   * (`campaign_refused`), as the Python SDK's `accept_unrandomized`. */
  acceptUnrandomized?: boolean;
  /** The aggregator's Ed25519 signing key, public half (base64 of 32 bytes, as `ldptel
   * analyzer-key show` prints it), pinned by the app: reports of shuffled campaigns are sealed
   * only to an analyzer key signed by it (`sealed/keySigning.ts`). Without it they wait in the
   * queue and `health().sealingError` names this option. */
  analyzerSigningKey?: string | Uint8Array;
  /** Campaigns with `require_tokens` (issue 37): a function returning a fresh attestation for the
   * token issuer (e.g. the app backend's short-lived JWT), sent as `Authorization: Bearer …`. */
  attestation?: () => string | Promise<string>;
}

export interface ReportOptions {
  /** The campaign's dimension values for this report (names it does not declare: the report is
   * dropped as `bad_dimension`). */
  dimensions?: Record<string, unknown>;
}

interface Campaign {
  cfg: CampaignConfig;
  mech: Mechanism;
  cost: Cost;
  envelope: Envelope;
  dims: Dimension[] | null;
  deviceLevel: boolean;
}

interface QueuedRow {
  id: string;
  campaign: string;
  version: number;
  chunk: string | null;
  report: Json;
  /** The envelope the rows of a chunk share (`groupOf`): "" for none. */
  group?: string;
  /** Shuffled modes: the window of the collector's clock the report is bound to. */
  window?: number;
}

interface ChunkRow {
  id: string;
  campaign: string;
  version: number;
  batchId: Json;
  group?: string;
}

/** A chunk's envelope: a device-level window (0: none) and dimension values, as a string key
 * ("" for neither, as `ldptel.client.envelope.group_of`). */
function groupOf(window: number, dims: Pairs): string {
  return !window && !dims.length ? "" : JSON.stringify([window, dims]);
}

function ungroup(group: string | undefined): { window: number; dims: Pairs } {
  if (!group) return { window: 0, dims: [] };
  const [window, dims] = JSON.parse(group) as [number, Pairs];
  return { window, dims };
}

interface Attempt {
  action: Action;
  error?: string;
  reason?: string;
  code?: string;
  retryAfter?: number | null;
  accepted?: number;
  duplicates?: number;
  stale?: number;
}

const MAX_ASKED_VERSIONS = 32; // old versions asked for per fetch (the collector's bound)
const NOT_FETCHED = "version_not_fetched"; // an old version still taken, its config not asked for yet

class Refused extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

function reportJson(r: Report): Json {
  const cols: Record<string, Json> = {};
  for (const [k, cells] of Object.entries(r.columns)) {
    cols[k] = cells.map((c) => (c instanceof Uint8Array ? bytesJson(c) : c));
  }
  return { payload: r.payload, columns: cols };
}

function jsonReport(j: Json): Report {
  const o = j as { payload: Report["payload"]; columns: Record<string, Json[]> };
  const columns: Record<string, Cell[]> = {};
  for (const [k, cells] of Object.entries(o.columns)) {
    columns[k] = cells.map((c) => (c !== null && typeof c === "object" ? jsonBytes(c) : (c as number | boolean)));
  }
  return { payload: o.payload, columns };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let sequence = 0;
/** A key that sorts in creation order and never collides with another tab's or process's: the
 * time, a counter, and 32 random bits. */
function newId(): string {
  sequence = (sequence + 1) % 1679616;
  const rnd = cryptoDraws.u32().toString(36).padStart(7, "0");
  return `${Date.now().toString(36).padStart(9, "0")}${sequence.toString(36).padStart(4, "0")}${rnd}`;
}

/** `fn` under the browser's Web Lock `name` (one flush at a time across tabs), else directly. */
function withLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const locks = (
    globalThis.navigator as { locks?: { request(n: string, f: () => Promise<T>): Promise<T> } } | undefined
  )?.locks;
  return locks ? locks.request(name, fn) : fn();
}

export class TelemetryClient {
  readonly url: string;
  readonly token: string;
  readonly batchSize: number;
  readonly timeoutMs: number;
  readonly configTtlMs: number;
  readonly maxEpsilon: number;
  readonly backoffBaseS: number;
  readonly maxBackoffS: number;
  private readonly fetchFn: typeof fetch;
  private readonly draws: Draws;
  private readonly dropped = new Counter();
  private readonly clippedCount = new Counter();
  private configs: Record<string, CampaignConfig> = {};
  private limits = { ...DEFAULT_LIMITS };
  private fetchedAt = -Infinity;
  private configError: string | null = "no configs yet";
  private refreshing: Promise<void> | null = null;
  /** Old versions ("name:version") whose configs every fetch asks for: the device holds reports of
   * them, and the collector sends an old version's config only when asked for by number. */
  private wanted = new Set<string>();
  private campaigns = new Map<string, Campaign>();
  private storageError: string | null = null; // the last write failed
  private openError: string | null = null; // the durable store could not be opened: memory only
  private chunkReports: number;
  private flushing: Promise<FlushResult> | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private closed = false;
  private ledger!: Ledger;
  private deviceSecret!: Uint8Array;
  private readonly defaults: Record<string, unknown>;
  private readonly acceptUnrandomized: boolean;
  /** The pinned analyzer signing key (null: none given, or this runtime cannot import it). */
  private signingKey: CryptoKey | null = null;
  /** Campaign → why its sealed reports wait in the queue (`health().sealingError`). */
  private readonly sealingErrors = new Map<string, string>();
  private pinError: string | null = null;
  private readonly attestation: (() => string | Promise<string>) | null;
  private waiting: Record<string, number> = {};
  /** The collector's clock − this device's, in seconds (`server_time` of `/v1/campaigns`). */
  private clockOffset = 0;
  private windows!: DeviceWindows;

  private constructor(
    private store: Store,
    opts: ClientOptions,
    private lifetime: number | null,
    private scope: Scope,
  ) {
    this.url = opts.url.replace(/\/+$/, "");
    this.token = opts.token;
    this.batchSize = opts.batchSize ?? 1000;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.configTtlMs = opts.configTtlMs ?? 300_000;
    this.maxEpsilon = opts.maxEpsilon ?? DEFAULT_MAX_EPSILON;
    this.backoffBaseS = opts.backoffBaseS ?? 0.2;
    this.maxBackoffS = opts.maxBackoffS ?? 60;
    this.fetchFn = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.draws = opts.draws ?? cryptoDraws;
    this.chunkReports = this.batchSize;
    this.defaults = { ...(opts.dimensions ?? {}) };
    this.acceptUnrandomized = opts.acceptUnrandomized ?? false;
    this.attestation = opts.attestation ?? null;
  }

  /** Open the client: its store (created if new) and device secret; options are checked here
   * (a bad option is the app's mistake and throws). */
  static async open(opts: ClientOptions): Promise<TelemetryClient> {
    if (typeof opts.url !== "string" || !/^https?:\/\//.test(opts.url))
      throw new TypeError(`url must be an http(s) URL, got ${opts.url}`);
    if (typeof opts.token !== "string" || !opts.token) throw new TypeError("token must be a non-empty string");
    if (opts.batchSize !== undefined && !(Number.isInteger(opts.batchSize) && opts.batchSize >= 1))
      throw new TypeError("batchSize must be a positive integer");
    if (opts.maxEpsilon !== undefined && !(opts.maxEpsilon > 0))
      throw new TypeError("maxEpsilon must be a positive number");
    const lifetime = opts.lifetimeEpsilon ?? null;
    if (lifetime !== null && !(lifetime > 0)) throw new TypeError("lifetimeEpsilon must be a positive number or null");
    const scope = opts.scope ?? "campaign";
    if (scope !== "campaign" && scope !== "device") throw new TypeError("scope must be 'campaign' or 'device'");
    if (
      opts.dimensions !== undefined &&
      (opts.dimensions === null || typeof opts.dimensions !== "object" || Array.isArray(opts.dimensions))
    ) {
      throw new TypeError("dimensions must be an object of name: value");
    }
    const backend =
      opts.storage ?? (IndexedDbBackend.available() ? new IndexedDbBackend(`ldptel-${opts.url}`) : new MemoryBackend());
    let store: Store,
      storageError: string | null = null;
    try {
      store = await Store.open(backend);
    } catch (err) {
      storageError = `cannot open the ${backend.kind} store: ${String(err)}`;
      store = await Store.open(new MemoryBackend());
    }
    let signingKey: CryptoKey | null = null,
      pinError: string | null = null;
    if (opts.analyzerSigningKey !== undefined) {
      const given = opts.analyzerSigningKey;
      if (typeof given === "string") fromBase64(given, "analyzerSigningKey"); // the app's mistake: throws
      try {
        signingKey = await importSigningKey(given);
      } catch (err) {
        if (err instanceof TypeError) throw err;
        pinError = `this runtime cannot verify the analyzer key's signature (Web Crypto Ed25519): ${String(err)}`;
      }
    }
    const client = new TelemetryClient(store, opts, lifetime, scope);
    client.signingKey = signingKey;
    client.pinError = pinError;
    client.openError = storageError;
    await client.init();
    if (opts.flushIntervalMs) client.start(opts.flushIntervalMs);
    return client;
  }

  private async init(): Promise<void> {
    let secret = this.store.get("m/device_secret");
    if (secret === undefined) {
      const fresh = bytesJson(cryptoDraws.bytes(32));
      try {
        await this.store.transact((s) =>
          s.get("m/device_secret") === undefined
            ? { writes: [["m/device_secret", fresh]] as Write[], result: null }
            : { writes: [], result: null },
        );
      } catch (err) {
        this.openError = `cannot store the device secret: ${String(err)}`;
        this.store = await Store.open(new MemoryBackend());
        await this.store.transact(() => ({ writes: [["m/device_secret", fresh]] as Write[], result: null }));
      }
      secret = this.store.get("m/device_secret")!;
    }
    this.deviceSecret = jsonBytes(secret);
    this.ledger = new Ledger(derive(this.deviceSecret, ascii("ldptel/ledger-key")), this.lifetime, this.scope);
    this.windows = this.deviceWindows();
    const stored = this.store.get("m/campaigns");
    if (stored !== undefined) this.setConfigs(stored as Record<string, unknown>);
  }

  /** HMAC-SHA256(device secret, "ldptel/campaign-secret\0" + campaign), as the Python SDK. */
  campaignSecret(campaign: string): Uint8Array {
    return derive(this.deviceSecret, concat(ascii("ldptel/campaign-secret\0"), new TextEncoder().encode(campaign)));
  }

  // --- campaign configs ------------------------------------------------------------------
  private setConfigs(data: Record<string, unknown>): void {
    const list = data.campaigns;
    if (!Array.isArray(list)) throw new TypeError("campaigns is not a list");
    const configs: Record<string, CampaignConfig> = {};
    for (const c of list) if (c && typeof c === "object" && typeof c.name === "string") configs[c.name] = c;
    this.configs = configs;
    const pos = (k: string, d: number) =>
      Number.isInteger(data[k]) && (data[k] as number) > 0 ? (data[k] as number) : d;
    this.limits = {
      maxBodyBytes: pos("max_body_bytes", DEFAULT_LIMITS.maxBodyBytes),
      maxReportsPerBatch: pos("max_reports_per_batch", DEFAULT_LIMITS.maxReportsPerBatch),
    };
    this.configError = null;
  }

  /** Ask the collector for the campaign configs (blocking); on failure keep what is known. */
  async fetchConfigs(): Promise<Record<string, CampaignConfig>> {
    try {
      const asked = [...this.wanted].sort().slice(0, MAX_ASKED_VERSIONS);
      const query = asked.length ? `?versions=${encodeURIComponent(asked.join(","))}` : "";
      const text = await request(this.fetchFn, `${this.url}/v1/campaigns${query}`, this.token, this.timeoutMs, "GET");
      const data = JSON.parse(text);
      this.setConfigs(data);
      this.fetchedAt = Date.now();
      if (typeof data.server_time === "number" && Number.isFinite(data.server_time))
        this.clockOffset = data.server_time - Date.now() / 1000;
      try {
        await this.store.transact(() => ({ writes: [["m/campaigns", data as Json]] as Write[], result: null }));
      } catch {
        /* only the offline copy is lost */
      }
    } catch (err) {
      const why =
        err instanceof HttpStatus ? `collector answered ${err.message}` : `collector unreachable: ${String(err)}`;
      if (!Object.keys(this.configs).length) this.configError = why;
    }
    return this.configs;
  }

  private refreshInBackground(): Promise<void> {
    this.refreshing ??= this.fetchConfigs()
      .then(() => undefined)
      .finally(() => {
        this.refreshing = null;
      });
    return this.refreshing;
  }

  private async currentConfigs(): Promise<Record<string, CampaignConfig> | null> {
    if (Date.now() - this.fetchedAt >= this.configTtlMs) {
      const refresh = this.refreshInBackground();
      if (!Object.keys(this.configs).length) {
        await Promise.race([refresh, sleep(this.timeoutMs)]);
      }
    }
    return Object.keys(this.configs).length ? this.configs : null;
  }

  /** The campaign's config (of `version`) built into its mechanism, or `Refused`. */
  private campaign(name: string, version?: number): Campaign {
    const top = this.configs[name];
    if (top === undefined) throw new Refused("unknown_campaign", `unknown campaign ${JSON.stringify(name)}`);
    if (top.status === "retired") throw new Refused("campaign_retired", `campaign ${name} is retired`);
    let cfg: CampaignConfig | undefined = top;
    if (version !== undefined && (top.version ?? 1) !== version) {
      const older = Array.isArray(top.older_versions) ? (top.older_versions as CampaignConfig[]) : [];
      cfg = older.find((o) => o.version === version);
      const oldest = top.oldest_accepted_version;
      if (
        cfg === undefined &&
        Number.isInteger(oldest) &&
        (oldest as number) <= version &&
        version < ((top.version as number | undefined) ?? 1)
      ) {
        this.wanted.add(`${name}:${version}`); // taken still: its config comes when asked for by number
        throw new Refused(NOT_FETCHED, `campaign ${name} version ${version}: its config is not fetched yet`);
      }
      if (cfg === undefined)
        throw new Refused("version_retired", `campaign ${name} version ${version} is no longer accepted`);
    }
    const key = `${name}\u0000${cfg.version ?? 1}`;
    const known = this.campaigns.get(key);
    if (known && known.cfg === cfg) return known;
    const envelope = envelopeFor(cfg);
    if (envelope === null)
      throw new Refused(
        "unsupported_privacy_mode",
        `campaign ${name}: privacy_mode ${String(cfg.privacy_mode)} is not supported by this SDK`,
      );
    const kind = cfg.kind ?? "frequency";
    // the config refuses the other kinds in a shuffled mode (heavy hitters: `shuffled` only, their
    // fakes would not be indices); never sent as local reports instead
    const sealedKinds = cfg.privacy_mode === "shuffled" ? SHUFFLED_KINDS : FAKES_KINDS;
    if (envelope !== plainEnvelope && !sealedKinds.includes(kind as string)) {
      throw new Refused(
        "bad_config",
        `campaign ${name}: a ${String(kind)} campaign in privacy_mode ${String(cfg.privacy_mode)}`,
      );
    }
    const deviceLevel = typeof kind === "string" && DEVICE_LEVEL_KINDS.includes(kind);
    if (deviceLevel && !(typeof cfg.window_seconds === "number" && cfg.window_seconds > 0)) {
      throw new Refused("bad_config", `campaign ${name}: a ${String(kind)} campaign needs windows of a fixed length`);
    }
    let mech: Mechanism, dims: Dimension[] | null;
    try {
      dims = parseDimensions(cfg.dimensions);
      mech = buildMechanism(cfg, this.campaignSecret(name));
    } catch (err) {
      if (err instanceof InvalidConfig || err instanceof TypeError)
        throw new Refused("bad_config", `campaign ${name}: ${err.message}`);
      throw err;
    }
    const loss = privacyLoss(mech);
    if (!Number.isFinite(loss.epsilon)) {
      if (!this.acceptUnrandomized) {
        throw new Refused(
          "campaign_refused",
          `campaign ${name} refused: it sends the true value, not randomized on the device ` +
            "(privacy_mode shuffled-fakes without local_epsilon: its guarantee is central only); acceptUnrandomized: true allows it",
        );
      }
    } else if (loss.epsilon > this.maxEpsilon) {
      throw new Refused(
        "campaign_refused",
        `campaign ${name} refused: its ${loss.what} = ${loss.epsilon.toPrecision(3)} exceeds this client's maxEpsilon = ${this.maxEpsilon}`,
      );
    }
    if (envelope !== plainEnvelope) {
      if (rowLayout(mech) === null)
        throw new Refused("bad_config", `campaign ${name}: oracle ${mech.name} cannot be sealed (no row layout)`);
      const rate = cfg.fake_rate ?? 0;
      if (typeof rate !== "number" || !Number.isFinite(rate) || rate < 0)
        throw new Refused("bad_config", `campaign ${name}: fake_rate ${String(rate)}`);
      const problem = cfg.privacy_mode === "shuffled-fakes" ? fakeRateProblem(cfg) : null;
      if (problem !== null) throw new Refused("bad_config", `campaign ${name}: the collector's config has ${problem}`);
      if (fakeRate(cfg) > 0 && !["grr", "histogram"].includes(mech.name)) {
        throw new Refused(
          "bad_config",
          `campaign ${name}: fake messages are indices (oracle histogram or grr), not ${mech.name}`,
        );
      }
    }
    const built = { cfg, mech, cost: reportCost(cfg, mech), envelope, dims, deviceLevel };
    this.campaigns.set(key, built);
    return built;
  }

  /** The mechanism a campaign's reports are randomized with (for inspection). */
  async mechanism(name: string): Promise<Mechanism> {
    await this.currentConfigs();
    return this.campaign(name).mech;
  }

  // --- reporting -------------------------------------------------------------------------
  private drop(reason: string, n: number, error: string): false {
    this.dropped.add(reason, n, error);
    return false;
  }

  /** Randomize `value` for `campaign` now and queue the randomized report (for a device-level
   * campaign: add the event to its window's aggregate, reported once when the window has ended).
   * `options.dimensions`: the campaign's dimension values for this report (over the client's
   * defaults). Resolves to true if it was queued (recorded); never throws or rejects (see
   * `health()` for why a report was dropped). */
  async report(campaign: string, value: unknown, options?: ReportOptions): Promise<boolean> {
    try {
      return await this.reportOrThrow(campaign, value, options?.dimensions);
    } catch (err) {
      return this.drop("internal_error", 1, `campaign ${campaign}: ${String(err)}`);
    }
  }

  /** The collector's clock as this device knows it (epoch seconds). */
  now(): number {
    return Date.now() / 1000 + this.clockOffset;
  }

  private async reportOrThrow(campaign: string, value: unknown, given?: Record<string, unknown>): Promise<boolean> {
    if (this.closed) return this.drop("closed", 1, "the client is closed");
    const configs = await this.currentConfigs();
    if (configs === null)
      return this.drop("no_config", 1, `campaign ${campaign}: no campaign configs (${this.configError})`);
    let c: Campaign;
    try {
      if (!(campaign in configs)) void this.refreshInBackground();
      c = this.campaign(campaign);
    } catch (err) {
      if (err instanceof Refused) return this.drop(err.reason, 1, err.message);
      throw err;
    }
    let dims: Pairs;
    try {
      if (given !== undefined && (given === null || typeof given !== "object" || Array.isArray(given))) {
        throw new UndeclaredDimension("dimensions must be an object of name: value");
      }
      dims = dimensionPairs(campaign, c.dims, given, this.defaults);
    } catch (err) {
      if (err instanceof UndeclaredDimension) return this.drop("bad_dimension", 1, err.message);
      throw err;
    }
    if (c.deviceLevel) return this.recordEvent(campaign, c, value, dims);
    let report: Report;
    let index: unknown;
    try {
      index = valueIndex(c.cfg, value);
      report = c.mech.encode(index, this.draws);
    } catch (err) {
      return this.drop("bad_value", 1, `campaign ${campaign}: ${(err as Error).message}`);
    }
    const sealed = c.envelope !== plainEnvelope;
    const sealWindow = sealed
      ? windowStart(this.now(), typeof c.cfg.window_seconds === "number" ? c.cfg.window_seconds : 0)
      : undefined;
    if ((c.mech instanceof Numeric || c.mech instanceof Grid) && c.mech.clipped(value as number))
      this.clippedCount.add(campaign, 1);
    const charge = this.ledger.charge(campaign, c.cfg, c.cost, index, Date.now() / 1000);
    let refusal: Refusal | null;
    try {
      refusal = await withLock(`ldptel-ledger ${this.url}`, async () => {
        // a store shared by tabs: the ledger as the other tabs left it
        await this.store.refresh(["l/", `v/${campaign}\u0000`]);
        return this.store.transact((s) => {
          const { writes, refusal } = this.ledger.admit(s, charge);
          if (refusal === null) {
            const row: QueuedRow = {
              id: newId(),
              campaign,
              version: charge.version,
              chunk: null,
              report: reportJson(report),
              group: groupOf(0, dims),
              ...(sealWindow === undefined ? {} : { window: sealWindow }),
            };
            writes.push([`r/${row.id}`, row as unknown as Json]);
          }
          return { writes, result: refusal };
        });
      });
    } catch (err) {
      this.storageError = `cannot queue: ${String(err)}`;
      return this.drop("queue_write_failed", 1, `campaign ${campaign}: ${this.storageError}`);
    }
    this.storageError = null;
    if (refusal !== null) return this.drop(refusal, 1, `campaign ${campaign}: report refused (${REFUSALS[refusal]})`);
    return true;
  }

  // --- device-level campaigns (deviceLevel.ts) ---------------------------------------------
  private deviceWindows(): DeviceWindows {
    return new DeviceWindows({
      store: this.store,
      ledger: this.ledger,
      draws: this.draws,
      built: (campaign, version): Built | { reason: string; message: string } | null => {
        if (!Object.keys(this.configs).length) return null;
        try {
          const c = this.campaign(campaign, version);
          return { cfg: c.cfg, mech: c.mech, cost: c.cost };
        } catch (err) {
          if (!(err instanceof Refused)) throw err;
          if (err.reason === NOT_FETCHED) {
            void this.refreshInBackground(); // asked for by number; the window waits
            return null;
          }
          const reason = ["version_retired", "campaign_retired"].includes(err.reason) ? err.reason : "bad_config";
          return { reason, message: err.message };
        }
      },
      drop: (reason, n, message) => void this.drop(reason, n, message),
      queueRow: (campaign, version, report, window, dims) => {
        const row: QueuedRow = {
          id: newId(),
          campaign,
          version,
          chunk: null,
          report: reportJson(report),
          group: groupOf(window, dims),
        };
        return [`r/${row.id}`, row as unknown as Json];
      },
      locked: (fn) => withLock(`ldptel-ledger ${this.url}`, fn),
    });
  }

  /** A device-level campaign's `report`: the windows of the campaign that ended are reported
   * first, then the event is added to the current window's aggregate. */
  private async recordEvent(campaign: string, c: Campaign, value: unknown, dims: Pairs): Promise<boolean> {
    const now = this.now();
    try {
      await this.windows.finalize(now, campaign);
    } catch (err) {
      this.storageError = `cannot report a window: ${String(err)}`;
    }
    try {
      increment(c.cfg, value);
      eventKey(c.cfg, value);
    } catch (err) {
      return this.drop("bad_value", 1, `campaign ${campaign}: ${(err as Error).message}`);
    }
    try {
      await this.windows.record(campaign, c.cfg, value, dims, now);
    } catch (err) {
      this.storageError = `cannot record the event: ${String(err)}`;
      return this.drop("queue_write_failed", 1, `campaign ${campaign}: ${this.storageError}`);
    }
    this.storageError = null;
    return true;
  }

  /** Before a flush: open the current window of the device-level campaigns the device knows, and
   * queue the reports of the windows that ended. */
  private async deviceRound(): Promise<void> {
    const configs = (await this.currentConfigs()) ?? {};
    const any = Object.values(configs).some((c) => DEVICE_LEVEL_KINDS.includes(c.kind as string));
    if (!any && this.windows.pending() === 0) return;
    const now = this.now();
    await this.windows.touch(configs, now, (cfg) => {
      try {
        return dimensionPairs(String(cfg.name), parseDimensions(cfg.dimensions), undefined, this.defaults);
      } catch {
        return null;
      }
    });
    await this.windows.finalize(now);
  }

  /** Device-level windows still open or not yet reported. */
  pendingWindows(): number {
    return this.windows.pending();
  }

  /** Reports queued and not yet delivered. */
  pending(): number {
    return this.store.size("r/");
  }

  health(): Health {
    const configError = Object.keys(this.configs).length ? null : this.configError;
    const storageError = this.storageError ?? this.openError;
    const sealingError =
      [...this.sealingErrors.entries()]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([, why]) => why)
        .join("; ") || null;
    return {
      ok: storageError === null && configError === null && sealingError === null,
      sealingError,
      storageError,
      configError,
      dropped: { ...this.dropped.counts },
      lastError: this.dropped.last,
      pending: this.pending(),
      clipped: { ...this.clippedCount.counts },
      storage: this.store.backend.kind,
      waiting: { ...this.waiting },
    };
  }

  /** What this device has spent, per campaign and version. */
  privacyLedger(): Record<string, unknown> {
    return this.ledger.snapshot(this.store);
  }

  // --- sending ---------------------------------------------------------------------------
  /** Send everything queued; retry with backoff until done or `timeoutMs` (default 30 s) has
   * passed. What is not delivered stays queued. Never rejects. */
  flush(timeoutMs = 30_000): Promise<FlushResult> {
    this.flushing ??= withLock(`ldptel-flush ${this.url}`, async () => {
      // another tab may have sent or queued since this one loaded the store
      if (this.store.backend.kind === "indexeddb") await this.store.reload();
      try {
        await this.deviceRound(); // device-level windows that ended: their reports queued
      } catch (err) {
        this.storageError = `device-level windows: ${String(err)}`;
      }
      return this.flushLoop(timeoutMs);
    }).finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  private maxReports(): number {
    return Math.max(1, Math.min(this.chunkReports, this.batchSize, this.limits.maxReportsPerBatch));
  }

  /** An assigned chunk not in `skip`, else a new one from the oldest unassigned rows (committed
   * with its batch_id before any attempt). */
  private async nextChunk(skip: Set<string>): Promise<{ chunk: ChunkRow; rows: QueuedRow[] } | null> {
    const max = this.maxReports();
    return this.store.transact((s) => {
      const rowsOf = new Map<string, QueuedRow[]>();
      const free: QueuedRow[] = [];
      for (const [, v] of s.entries("r/")) {
        const row = v as unknown as QueuedRow;
        if (row.chunk === null) free.push(row);
        else (rowsOf.get(row.chunk) ?? rowsOf.set(row.chunk, []).get(row.chunk)!).push(row);
      }
      for (const [, v] of s.entries("c/")) {
        const chunk = v as unknown as ChunkRow;
        if (!skip.has(chunk.id)) return { writes: [] as Write[], result: { chunk, rows: rowsOf.get(chunk.id) ?? [] } };
      }
      const first = free[0];
      if (first === undefined) return { writes: [] as Write[], result: null };
      const group = first.group ?? "";
      const rows = free
        .filter((r) => r.campaign === first.campaign && r.version === first.version && (r.group ?? "") === group)
        .slice(0, max);
      const id = newId();
      const chunk: ChunkRow = {
        id,
        campaign: first.campaign,
        version: first.version,
        batchId: bytesJson(cryptoDraws.bytes(16)),
        group,
      };
      const writes: Write[] = [[`c/${id}`, chunk as unknown as Json]];
      for (const r of rows) writes.push([`r/${r.id}`, { ...r, chunk: id } as unknown as Json]);
      return { writes, result: { chunk, rows: rows.map((r) => ({ ...r, chunk: id })) } };
    });
  }

  /** Delivered or dropped: the chunk and its rows leave the queue. */
  private complete(chunk: ChunkRow, rows: QueuedRow[]): Promise<void> {
    return this.store.transact(() => ({
      writes: [[`c/${chunk.id}`, undefined], ...rows.map((r): Write => [`r/${r.id}`, undefined])],
      result: undefined,
    }));
  }

  /** Too large: the rows go back to the queue, to be sent in smaller chunks under new batch_ids
   * (the collector stored nothing of this one). */
  private release(chunk: ChunkRow, rows: QueuedRow[]): Promise<void> {
    return this.store.transact(() => ({
      writes: [
        [`c/${chunk.id}`, undefined],
        ...rows.map((r): Write => [`r/${r.id}`, { ...r, chunk: null } as unknown as Json]),
      ],
      result: undefined,
    }));
  }

  private async attempt(chunk: ChunkRow, rows: QueuedRow[]): Promise<Attempt> {
    if (!Object.keys(this.configs).length) await this.fetchConfigs();
    if (!Object.keys(this.configs).length)
      return { action: "retry", error: `no campaign configs (${this.configError})` };
    let c: Campaign;
    try {
      try {
        c = this.campaign(chunk.campaign, chunk.version);
      } catch (err) {
        if (!(err instanceof Refused && err.reason === NOT_FETCHED)) throw err;
        await this.fetchConfigs(); // asks for the old version by number
        c = this.campaign(chunk.campaign, chunk.version);
      }
    } catch (err) {
      if (err instanceof Refused && err.reason === NOT_FETCHED) return { action: "retry", error: err.message };
      if (err instanceof Refused) {
        // a config this SDK refuses (a fake_rate over its bounds, …): never sealed with it; the chunk
        // waits for a usable config, as in the Python SDK
        if (err.reason === "bad_config") return { action: "retry", error: err.message };
        const counted = ["version_retired", "campaign_retired"].includes(err.reason) ? err.reason : "";
        return { action: "drop", reason: err.message, code: counted };
      }
      throw err;
    }
    if (c.cfg.require_tokens) return this.attemptTokens(chunk, rows, c);
    let sealed: Sealed;
    try {
      const { window, dims } = ungroup(chunk.group);
      sealed = await c.envelope.seal({
        campaign: chunk.campaign,
        version: chunk.version,
        batchId: jsonBytes(chunk.batchId),
        config: c.cfg,
        mech: c.mech,
        rows: rows.map((r) => ({ report: jsonReport(r.report), window: r.window })),
        window,
        dimensions: dims,
        now: this.now(),
        draws: this.draws,
        signingKey: this.signingKey,
        maxBodyBytes: this.limits.maxBodyBytes,
        maxEnvelopes: this.limits.maxReportsPerBatch,
      });
    } catch (err) {
      return this.notSealed(chunk, err);
    }
    let accepted = 0,
      duplicates = 0;
    for (const m of sealed.messages) {
      if (m.body.length > this.limits.maxBodyBytes) {
        const why = `body of ${m.body.length} bytes over max_body_bytes ${this.limits.maxBodyBytes}`;
        return { action: classify(413, rows.length), error: why, reason: why };
      }
      const answer = await this.postSealed(m, rows.length);
      if ("action" in answer) return answer;
      // a SealedEnvelopes body answers how many of its envelopes were duplicates
      const dups = typeof answer.duplicates === "number" ? answer.duplicates : answer.duplicate ? m.reports : 0;
      duplicates += dups;
      accepted += m.reports - dups;
    }
    this.sealingErrors.delete(chunk.campaign);
    if (sealed.stale) {
      this.dropped.add(
        "stale_window",
        sealed.stale,
        `campaign ${chunk.campaign}: ${sealed.stale} reports of a window the collector no longer takes`,
      );
    }
    return { action: "sent", accepted, duplicates, stale: sealed.stale };
  }

  /** A campaign with `require_tokens` (issue 37): each row (one report) sealed into an envelope of
   * its own (batch id derived from the chunk's and the row's index: a retry is the same envelope)
   * and sent with its own Privacy Pass token (`tokens/privacyPass.ts`), kept in the store (table
   * "k/") bound to its envelope, never reused; without a token the chunk waits (`no_token`). */
  private async attemptTokens(chunk: ChunkRow, rows: QueuedRow[], c: Campaign): Promise<Attempt> {
    const { dims } = ungroup(chunk.group);
    const envelopes: { body: Uint8Array; path: string; contentType: string; window: number; id: string }[] = [];
    let stale = 0;
    for (const [i, r] of rows.entries()) {
      const rowId = sha256(concat(jsonBytes(chunk.batchId), Uint8Array.of(0, 0, i >> 8, i & 255))).slice(0, 16);
      let sealed: Sealed;
      try {
        sealed = await c.envelope.seal({
          campaign: chunk.campaign,
          version: chunk.version,
          batchId: rowId,
          config: c.cfg,
          mech: c.mech,
          rows: [{ report: jsonReport(r.report), window: r.window }],
          window: 0,
          dimensions: dims,
          now: this.now(),
          draws: this.draws,
          signingKey: this.signingKey,
          maxBodyBytes: this.limits.maxBodyBytes,
          maxEnvelopes: 1, // a token covers one envelope, posted alone
        });
      } catch (err) {
        return this.notSealed(chunk, err);
      }
      stale += sealed.stale;
      for (const m of sealed.messages)
        envelopes.push({ ...m, window: r.window ?? 0, id: toHex(rowId) + (r.window ?? 0) });
    }
    let accepted = 0;
    let duplicates = 0;
    for (const env of envelopes) {
      let token: string;
      try {
        token = await this.tokenFor(c.cfg, chunk.campaign, env.window, env.id, envelopes.length);
      } catch (err) {
        this.waiting = { no_token: rows.length };
        return { action: "retry", error: `no_token: ${String(err)}` };
      }
      const { authorization } = await import("../tokens/privacyPass.js");
      const answer = await this.postSealed(env, rows.length, { header: authorization(fromHex(token)), id: env.id });
      if ("action" in answer) return answer;
      if (answer.duplicate) duplicates += 1;
      else accepted += 1;
    }
    this.waiting = {};
    this.sealingErrors.delete(chunk.campaign);
    await this.dropTokens(envelopes.map((e) => e.id));
    if (stale) this.dropped.add("stale_window", stale, `campaign ${chunk.campaign}: a report of a closed window`);
    return { action: "sent", accepted, duplicates, stale };
  }

  /** What to do with a chunk whose envelopes could not be sealed (`err` from `envelope.seal`). */
  private notSealed(chunk: ChunkRow, err: unknown): Attempt {
    if (err instanceof KeyNotTrusted) {
      // never sealed to a key the pinned signing key did not sign: held, said in health()
      const why = this.pinError === null ? err.message : `campaign ${chunk.campaign}: ${this.pinError}`;
      this.sealingErrors.set(chunk.campaign, why);
      if (this.signingKey !== null) void this.refreshInBackground(); // a rotation may bring a signed key
      return { action: "hold", error: why };
    }
    if (err instanceof NoAnalyzerKey) {
      void this.refreshInBackground();
      return { action: "retry", error: err.message };
    }
    if (err instanceof SealingUnavailable)
      return { action: "drop", error: err.message, reason: err.message, code: "sealing_unavailable" };
    return { action: "drop", reason: `undecodable queued reports: ${String(err)}` };
  }

  /** POST one sealed body (with a Privacy Pass `token`'s authorization header when given): the
   * answer's JSON, or the attempt after a failure. `token_spent`/`bad_token`: that envelope's
   * token is never offered again, retry; `unknown_key`/`wrong_window` (a rotated key, or a window
   * the collector's clock does not take): fetch the configs (the key, the clock) and seal anew at
   * the next attempt under the same batch ids; a campaign's status answers as for any chunk. */
  private async postSealed(
    m: { path: string; body: Uint8Array; contentType: string },
    count: number,
    token?: { header: string; id: string },
  ): Promise<Attempt | { duplicate?: boolean; duplicates?: number }> {
    try {
      const answer = await request(
        this.fetchFn,
        this.url + m.path,
        this.token,
        this.timeoutMs,
        "POST",
        m.body,
        m.contentType,
        token?.header,
      );
      return JSON.parse(answer || "{}");
    } catch (err) {
      if (!(err instanceof HttpStatus)) return { action: "retry", error: String(err) };
      const code = [400, 401, 409, 410].includes(err.status) ? errorCode(err.body) : null;
      if (token !== undefined && (code === "token_spent" || code === "bad_token")) {
        await this.dropTokens([token.id]);
        return { action: "retry", error: err.message };
      }
      if (code !== null && RESEAL_ANSWERS.has(code)) {
        await this.fetchConfigs();
        return { action: "retry", error: err.message };
      }
      if (code !== null && CAMPAIGN_ANSWERS.has(code)) {
        void this.refreshInBackground();
        if (code === "campaign_paused") return { action: "retry", error: err.message, retryAfter: err.retryAfter };
        return { action: "drop", error: err.message, reason: `collector answered ${err.message}`, code };
      }
      return {
        action: classify(err.status, count),
        error: err.message,
        reason: `collector answered ${err.message}`,
        retryAfter: err.retryAfter,
      };
    }
  }

  /** The token of envelope `id` (hex), else an unused one of (campaign, window), fetched in one
   * batch with `needed` − 1 more when none is held; throws when none can be had. */
  private async tokenFor(
    cfg: CampaignConfig,
    campaign: string,
    window: number,
    id: string,
    needed: number,
  ): Promise<string> {
    const mine = this.store.get(`k/e${id}`);
    if (typeof mine === "string") return mine;
    const free = [...this.store.entries(`k/`)].find(([k, v]) => {
      const t = v as { campaign?: string; window?: number };
      return k.startsWith("k/f") && t.campaign === campaign && t.window === window;
    });
    if (free === undefined) {
      const issuer = cfg.token_issuer as { url?: string; name?: string } | undefined;
      if (!issuer?.url || !issuer.name) throw new Error(`campaign ${campaign} names no token_issuer`);
      const attestation = this.attestation ? await this.attestation() : null;
      // loaded on first use: devices of campaigns without tokens never load the library (bundle.mjs)
      const { fetchTokens } = await import("../tokens/privacyPass.js");
      const fetched = await fetchTokens(
        issuer.url.replace(/\/+$/, ""),
        issuer.name,
        campaign,
        window,
        Math.min(Math.max(needed, 1), 64),
        attestation,
        this.fetchFn,
      );
      await this.store.transact(() => ({
        writes: fetched.map((t): Write => [`k/f${toHex(t.slice(2, 34))}`, { campaign, window, token: toHex(t) }]),
        result: null,
      }));
      return this.tokenFor(cfg, campaign, window, id, needed);
    }
    const [key, value] = free;
    const token = (value as { token: string }).token;
    await this.store.transact(() => ({
      writes: [
        [key, undefined],
        [`k/e${id}`, token],
      ],
      result: null,
    }));
    return token;
  }

  private async dropTokens(ids: string[]): Promise<void> {
    await this.store.transact(() => ({ writes: ids.map((id): Write => [`k/e${id}`, undefined]), result: null }));
  }

  private async flushLoop(timeoutMs: number): Promise<FlushResult> {
    const result: FlushResult = { accepted: 0, duplicates: 0, dropped: 0, pending: 0, error: null };
    const deadline = Date.now() + timeoutMs;
    const deferred = new Set<string>();
    const held = new Set<string>(); // chunks whose campaign cannot be sealed now: not tried again in this flush
    let attempt = 0,
      streak = 0;
    let retryAfter: number | null = null;
    try {
      for (;;) {
        const next = await this.nextChunk(held.size ? new Set([...deferred, ...held]) : deferred);
        if (next === null && deferred.size === 0) break;
        if (next === null || streak >= 2) {
          const delay = backoff(attempt, this.backoffBaseS, this.maxBackoffS, retryAfter) * 1000;
          attempt += 1;
          streak = 0;
          if (Date.now() + delay > deadline || this.closed) break;
          await sleep(delay);
          deferred.clear();
          continue;
        }
        const { chunk, rows } = next;
        if (rows.length === 0) {
          await this.complete(chunk, rows);
          continue;
        }
        const out = await this.attempt(chunk, rows);
        if (out.error) result.error = out.error;
        if (out.action === "sent") {
          await this.complete(chunk, rows);
          result.accepted += out.accepted ?? 0;
          result.duplicates += out.duplicates ?? 0;
          result.dropped += out.stale ?? 0;
          attempt = streak = 0;
        } else if (out.action === "drop") {
          await this.complete(chunk, rows);
          result.dropped += rows.length;
          if (out.code) this.dropped.add(out.code, rows.length, out.reason);
          else this.dropped.last = out.reason ?? null;
        } else if (out.action === "regroup") {
          this.chunkReports = Math.max(1, Math.min(this.chunkReports, Math.floor(rows.length / 2)));
          await this.release(chunk, rows);
        } else if (out.action === "stop") {
          break;
        } else if (out.action === "hold") {
          held.add(chunk.id);
        } else {
          deferred.add(chunk.id);
          streak += 1;
          retryAfter = out.retryAfter ?? null;
        }
      }
    } catch (err) {
      result.error = `flush failed: ${String(err)}`;
      this.storageError = result.error;
    }
    result.pending = this.pending();
    if (result.pending === 0) result.error = null;
    return result;
  }

  /** Flush every `intervalMs` in the background (browsers also flush when the page is hidden). */
  start(intervalMs = 10_000): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => void this.flush(Math.max(1000, intervalMs - 100)), intervalMs);
    (this.timer as { unref?: () => void }).unref?.();
  }

  /** Stop the background sender, try a last flush (`flushTimeoutMs`; null: skip), close the store.
   * Undelivered reports stay queued for the next start. */
  async close(flushTimeoutMs: number | null = 5000): Promise<FlushResult | null> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    const result = flushTimeoutMs === null ? null : await this.flush(flushTimeoutMs);
    this.closed = true;
    await this.flushing;
    await this.store.close();
    return result;
  }
}
