/** ldptel's device SDK (browsers; the Node entry point, `node.ts`, adds the file store). */
export { TelemetryClient, DEFAULT_MAX_EPSILON, type ClientOptions, type ReportOptions } from "./client/client.js";
export type { Health } from "./client/health.js";
export type { FlushResult } from "./client/delivery.js";
export { IndexedDbBackend } from "./client/idb.js";
export { MemoryBackend, type Backend } from "./client/store.js";
export { plainEnvelope, sealedEnvelope, envelopeFor, type Envelope, type Message } from "./client/envelope.js";
export { dimensionPairs, parseDimensions, OTHER, type Dimension, type Pairs } from "./dimensions.js";
export { buildMechanism, privacyLoss, reportCost, usesDeviceSecret, type CampaignConfig } from "./builder.js";
export { cryptoDraws, type Draws } from "./draws.js";
export type { Mechanism, Report } from "./mechanisms/base.js";
export { encodeBatch, mergeReports, CONTENT_TYPE } from "./wire.js";
