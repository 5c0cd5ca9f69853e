/**
 * Wire format v1 (`proto/ldptel/v1/reports.proto`): reports of one campaign concatenated column by
 * column into one `ReportBatch`, serialized exactly as the Python client does (fields in number
 * order, packed repeated fields, empty fields left out), with `@bufbuild/protobuf`'s wire writer.
 */
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { type Cell, type PayloadName, packBits, type Report } from "./mechanisms/base.js";

export const SCHEMA_VERSION = 1;
export const CONTENT_TYPE = "application/x-protobuf";

type ColumnType = "u32" | "rows" | "packed" | "double";

/** Per payload: its field in `ReportBatch` and its columns (name, field number, type). */
export const PAYLOADS: Record<PayloadName, { field: number; columns: [string, number, ColumnType][] }> = {
  grr: { field: 10, columns: [["values", 1, "u32"]] },
  unary: { field: 11, columns: [["bits", 1, "rows"]] },
  olh: {
    field: 12,
    columns: [
      ["seeds", 1, "u32"],
      ["values", 2, "u32"],
    ],
  },
  hadamard: {
    field: 13,
    columns: [
      ["indices", 1, "u32"],
      ["signs", 2, "packed"],
    ],
  },
  rappor: {
    field: 14,
    columns: [
      ["cohorts", 1, "u32"],
      ["bits", 2, "rows"],
    ],
  },
  heavy_hitters: {
    field: 15,
    columns: [
      ["levels", 1, "u32"],
      ["values", 3, "u32"],
      ["seed_indices", 4, "u32"],
    ],
  },
  range: {
    field: 16,
    columns: [
      ["levels", 1, "u32"],
      ["indices", 2, "u32"],
      ["signs", 3, "packed"],
      ["seeds", 4, "u32"],
      ["values", 5, "u32"],
    ],
  },
  numeric: {
    field: 17,
    columns: [
      ["bits", 1, "packed"],
      ["values", 2, "double"],
    ],
  },
};

/** Reports of one payload as one set of columns (concatenated in order). */
export function mergeReports(reports: Report[]): Report {
  const payload = reports[0]!.payload;
  const columns: Record<string, Cell[]> = {};
  for (const r of reports) {
    if (r.payload !== payload) throw new Error("reports of different payloads in one batch");
    for (const [k, v] of Object.entries(r.columns)) (columns[k] ??= []).push(...v);
  }
  return { payload, columns };
}

function payloadBytes(report: Report): Uint8Array {
  const w = new BinaryWriter();
  for (const [name, no, type] of PAYLOADS[report.payload].columns) {
    const cells = report.columns[name] ?? [];
    if (cells.length === 0) continue;
    if (type === "u32") {
      w.tag(no, WireType.LengthDelimited).fork();
      for (const c of cells) w.uint32(c as number);
      w.join();
    } else if (type === "double") {
      w.tag(no, WireType.LengthDelimited).fork();
      for (const c of cells) w.double(c as number);
      w.join();
    } else if (type === "packed") {
      w.tag(no, WireType.LengthDelimited).bytes(packBits(cells as boolean[]));
    } else {
      const rows = cells as Uint8Array[];
      const out = new Uint8Array(rows.reduce((n, r) => n + r.length, 0));
      let at = 0;
      for (const r of rows) {
        out.set(r, at);
        at += r.length;
      }
      w.tag(no, WireType.LengthDelimited).bytes(out);
    }
  }
  return w.finish();
}

export interface BatchHeader {
  campaign: string;
  batchId: Uint8Array;
  count: number;
  campaignVersion: number;
  /** Device-level kinds (issue 28): the start of the window the reports aggregate (field 7). */
  window?: number;
  /** The campaign's dimension values, (name, value) in name order (field 20, issue 28). */
  dimensions?: [string, string][];
}

/** A serialized `ReportBatch` of `report` (the merged columns of `header.count` reports). */
export function encodeBatch(header: BatchHeader, report: Report): Uint8Array {
  const w = new BinaryWriter();
  if (header.campaign) w.tag(1, WireType.LengthDelimited).string(header.campaign);
  if (header.batchId.length) w.tag(2, WireType.LengthDelimited).bytes(header.batchId);
  if (header.count) w.tag(3, WireType.Varint).uint32(header.count);
  w.tag(4, WireType.Varint).uint32(SCHEMA_VERSION);
  if (header.campaignVersion) w.tag(5, WireType.Varint).uint32(header.campaignVersion);
  if (header.window) w.tag(7, WireType.Varint).uint64(header.window);
  w.tag(PAYLOADS[report.payload].field, WireType.LengthDelimited).bytes(payloadBytes(report));
  for (const [name, value] of header.dimensions ?? []) {
    w.tag(20, WireType.LengthDelimited).fork();
    if (name) w.tag(1, WireType.LengthDelimited).string(name);
    if (value) w.tag(2, WireType.LengthDelimited).string(value);
    w.join();
  }
  return w.finish();
}

export { payloadBytes };

export const SEALED_SCHEMA_VERSION = 2;

export interface SealedHeader {
  campaign: string;
  batchId: Uint8Array;
  /** Real reports (devices) whose messages the envelope holds. */
  reports: number;
  campaignVersion: number;
  keyId: number;
  /** The window start (epoch s) the messages are bound to (0: the "all" window). */
  window: number;
  /** One ciphertext per message, in their shuffled order. */
  messages: Uint8Array[];
  dimensions?: [string, string][];
}

/** A serialized `SealedBatch` (schema_version 2, campaigns in a shuffled privacy mode), fields in
 * number order as the Python SDK writes it. */
export const ENVELOPES_SCHEMA_VERSION = 3;

/** A `SealedEnvelopes` body (schema_version 3): several encoded `SealedBatch` envelopes in one
 * POST, each still one device at the collector. */
export function encodeSealedEnvelopes(envelopes: Uint8Array[]): Uint8Array {
  const w = new BinaryWriter();
  w.tag(4, WireType.Varint).uint32(ENVELOPES_SCHEMA_VERSION);
  for (const e of envelopes) w.tag(21, WireType.LengthDelimited).bytes(e);
  return w.finish();
}

export function encodeSealedBatch(h: SealedHeader): Uint8Array {
  const w = new BinaryWriter();
  if (h.campaign) w.tag(1, WireType.LengthDelimited).string(h.campaign);
  if (h.batchId.length) w.tag(2, WireType.LengthDelimited).bytes(h.batchId);
  if (h.reports) w.tag(3, WireType.Varint).uint32(h.reports);
  w.tag(4, WireType.Varint).uint32(SEALED_SCHEMA_VERSION);
  if (h.campaignVersion) w.tag(5, WireType.Varint).uint32(h.campaignVersion);
  if (h.keyId) w.tag(6, WireType.Varint).uint32(h.keyId);
  if (h.window) w.tag(7, WireType.Varint).uint64(h.window);
  for (const m of h.messages) w.tag(8, WireType.LengthDelimited).bytes(m);
  for (const [name, value] of h.dimensions ?? []) {
    w.tag(20, WireType.LengthDelimited).fork();
    if (name) w.tag(1, WireType.LengthDelimited).string(name);
    if (value) w.tag(2, WireType.LengthDelimited).string(value);
    w.join();
  }
  return w.finish();
}
