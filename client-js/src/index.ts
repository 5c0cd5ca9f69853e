/** ldptel's device SDK (browsers; the Node entry point, `node.ts`, adds the file store). */

export { buildMechanism, type CampaignConfig, privacyLoss, reportCost, usesDeviceSecret } from "./builder.js";
export { type ClientOptions, DEFAULT_MAX_EPSILON, type ReportOptions, TelemetryClient } from "./client/client.js";
export type { FlushResult } from "./client/delivery.js";
export { type Envelope, envelopeFor, type Message, plainEnvelope, sealedEnvelope } from "./client/envelope.js";
export type { Health } from "./client/health.js";
export { IndexedDbBackend } from "./client/idb.js";
export { type Backend, MemoryBackend } from "./client/store.js";
export { type Dimension, dimensionPairs, OTHER, type Pairs, parseDimensions } from "./dimensions.js";
export { cryptoDraws, type Draws } from "./draws.js";
export type { Mechanism, Report } from "./mechanisms/base.js";
export { CONTENT_TYPE, encodeBatch, mergeReports } from "./wire.js";
