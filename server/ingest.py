"""Ingest API: ``GET /v1/campaigns`` and ``POST /v1/reports``.

``POST /v1/reports`` — ``Authorization: Bearer <ingest token>``,
``Content-Type: application/x-protobuf``, body a serialized ``ReportBatch``:

- checks in order: token (401), content type (415), body size (413), per-token rate limit (429),
  the batch (400 / 413, ``server.validation``); Redis errors answer 503; a request refused before
  its body was read has its body drained first (``server.bodies``), so the client sees the answer;
- stores a valid batch with ``scripts.INGEST``: one atomic step that drops it if its ``batch_id``
  was seen (``keys.seen_key``), else XADDs ``{batch, window, count}`` to the (campaign, shard)'s
  ingress stream (``keys.ingress_key``; the shuffler, ``ldptel shuffle``, moves it on), or, with
  ``[shuffler] enabled = false``, straight to the analysis stream (``keys.stream_key``), with
  shard ``keys.shard_of(batch_id, shards)``, and marks the id seen until
  ``keys.dedupe_expire_at``; it also counts accepted / duplicate batches and reports;
- a ``SealedBatch`` (schema_version 2, campaigns in a shuffled privacy mode) is checked by
  ``server.sealed_ingest`` (envelope only: it holds ciphertext) and stored the same way, its
  entry's ``window`` the one its messages are bound to;
- answers ``202 {"accepted": n, "duplicate": false}``, or ``202 {"accepted": 0, "duplicate": true}``
  for a batch already stored (a retry: the client must not send it again).

Every answer of this blueprint (202s and errors alike) carries ``Ldptel-Campaigns``, a digest of
the campaigns as this process knows them (``campaigns_digest``; also the ``ETag`` of
``GET /v1/campaigns``): the SDK refreshes its configs as soon as the digest moves, so devices
follow a new version or a pause at their next send instead of after their ``config_ttl``.

The stream entry holds no IP, token, user agent or precise time: the receive time is rounded down
to the campaign's window (``keys.window_start``), and the entry id is that window start in ms
(``scripts.INGEST``), not the receive time; the dedupe marker holds ``"1"``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

from flask import Blueprint, g, has_app_context, jsonify, request

from ldptel import keys, scripts
from ldptel.central_privacy import stored_claim
from ldptel.config import Campaign, Config
from ldptel.device_composition import device_composition
from ldptel.privacy_modes import is_shuffled
from ldptel.release_claims import planned_claim
from ldptel.server.app import ServerState, state
from ldptel.server.auth import require_token
from ldptel.server.bodies import drain_unread_body, read_body
from ldptel.server.errors import ApiError
from ldptel.server.sealed_ingest import sealed_keys, shuffled_config, validate_sealed
from ldptel.server.validation import Rejection, ValidBatch, validate_batch

bp = Blueprint("ingest", __name__)

PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")
UNAVAILABLE_RETRY_S = 60  # Retry-After of a batch of a quarantined campaign
INGRESS_FULL_RETRY_S = 5  # Retry-After while the ingress stream is full
HINT_HEADER = "Ldptel-Campaigns"
_digest_lock = threading.Lock()
_digest: tuple[Config, str] | None = None  # the last snapshot's digest (snapshots are immutable)


def campaigns_digest(config: Config) -> str:
    """A short digest of what devices are told about the campaigns: every campaign's latest
    public config, version, status and reason (computed once per registry snapshot)."""
    global _digest
    cached = _digest
    if cached is not None and cached[0] is config:
        return cached[1]
    doc = [[c.public(), c.status, c.reason] for c in config.campaigns]
    value = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]
    with _digest_lock:
        _digest = (config, value)
    return value


@bp.after_request
def _hint(response):
    """Every ingest answer says which campaigns it was made under (``campaigns_digest``)."""
    response.headers[HINT_HEADER] = campaigns_digest(state().config)
    return response


def client_config(config: Config, campaign: Campaign, now: float | None = None) -> dict[str, Any]:
    """What a device needs of the latest version ``campaign``: its public config (with its
    ``version``), ``status`` and ``reason`` unless it is active, and ``older_versions``: the
    public configs of superseded versions whose reports are still accepted, so that a device
    sends what it queued under them instead of dropping it. Each ``privacy`` object is
    ``Campaign.privacy()`` plus the central ε of one shuffler release
    (``central_privacy.stored_claim``)."""
    shuffled = config.shuffler.enabled
    out = {**campaign.public(), "privacy": device_privacy(campaign, shuffled)}
    if is_shuffled(campaign) and has_app_context():
        out.update(shuffled_config(state(), campaign, time.time() if now is None else now))
    if campaign.status != "active":
        out.update(status=campaign.status, reason=campaign.reason)
    at = time.time() if now is None else now
    older = [{**v.public(), "privacy": device_privacy(v, shuffled),
              **(shuffled_config(state(), v, at) if is_shuffled(v) and has_app_context() else {})}
             for v in config.versions(campaign.name)[:-1] if at <= v.accepts_until()]
    if older:
        out["older_versions"] = older
    return out


def device_privacy(campaign: Campaign, shuffled: bool) -> dict[str, Any]:
    """A device config's ``privacy``: the local claim plus the central ε of one shuffler release
    (``central_privacy.stored_claim``), or, in a shuffled privacy mode, the planned claim of one
    batch of ``batch_min`` devices (``release_claims.planned_claim``)."""
    if is_shuffled(campaign):
        return {**campaign.privacy(), **planned_claim(campaign)}
    return {**campaign.privacy(), **stored_claim(campaign, shuffled)}


@bp.get("/v1/campaigns")
@require_token("ingest", "export")
def list_campaigns():
    """Public configs of the campaigns clients can report to (``client_config``, each with its
    ``privacy`` claim), and the request
    limits (the SDK builds no body over ``max_body_bytes`` nor batch over
    ``max_reports_per_batch``); 503 until this process has read the campaign registry once."""
    st = state()
    if not st.live.loaded:  # the file's campaigns may be stale versions of the registry's
        raise ApiError(503, "unavailable", "the campaign registry cannot be read yet; retry later",
                       {"Retry-After": "1"})
    campaigns = [client_config(st.config, c) for c in st.config.campaigns]
    srv = st.config.server
    resp = jsonify({"campaigns": campaigns, "max_body_bytes": srv.max_body_bytes,
                    "max_reports_per_batch": srv.max_reports_per_batch,
                    "server_time": round(time.time(), 3),  # sealed batches bind a window
                    "device_composition": device_composition(st.config.campaigns)})  # across campaigns
    resp.headers["Cache-Control"] = "private, max-age=60"
    resp.headers["ETag"] = f'"{campaigns_digest(st.config)}"'
    return resp


def _validate(st: ServerState, body: bytes) -> ValidBatch:
    try:
        return _validate_plain(st, body)
    except Rejection as rej:
        if rej.reason != "sealed_batch":
            raise
    try:  # schema_version 2: a SealedBatch (``sealed_ingest``); a new key may have just appeared
        return validate_sealed(body, st.config, st.mechanisms, sealed_keys(st))
    except Rejection as rej:
        if rej.error not in ("unknown_key", "unknown_campaign", "unknown_version"):
            raise
        st.refresh()
        return validate_sealed(body, st.config, st.mechanisms, sealed_keys(st, force=True))


def _validate_plain(st: ServerState, body: bytes) -> ValidBatch:
    """``validate_batch`` against this process's campaigns; a batch naming a campaign or version
    this process does not know yet (another worker just took an admin change, and a device
    already fetched it) is checked again after a forced registry refresh, so a device that is
    ahead of this worker by a few hundred milliseconds never gets a 400 that drops its reports."""
    try:
        return validate_batch(body, st.config, st.mechanisms)
    except Rejection as rej:
        if rej.error not in ("unknown_campaign", "unknown_version") or not st.refresh():
            raise
    return validate_batch(body, st.config, st.mechanisms)


@bp.post("/v1/reports")
@require_token("ingest")
def post_reports():
    st = state()
    cfg = st.config.server
    retry_after = 0
    body_read = False
    try:
        if request.mimetype not in PROTOBUF_TYPES:
            raise Rejection(415, "unsupported_media_type",
                            f"Content-Type must be application/x-protobuf, got {request.mimetype or 'none'}",
                            "content_type")
        if request.content_length is not None and request.content_length > cfg.max_body_bytes:
            raise Rejection(413, "too_large", f"request body exceeds {cfg.max_body_bytes} bytes",
                            "body_too_large")
        allowed, retry_after = st.rate_limiter.check(g.ldptel_token_id)
        if not allowed:
            raise Rejection(429, "rate_limited",
                            f"over {cfg.rate_limit_per_minute} requests per minute for this token",
                            "rate_limited")
        body = read_body(cfg.max_body_bytes)
        body_read = True
        valid = _validate(st, body)
    except Rejection as rej:
        st.metrics.reject(rej.campaign, rej.reason)
        headers = {"Retry-After": str(retry_after)} if rej.status == 429 else {}
        if rej.status == 503:
            headers["Retry-After"] = str(UNAVAILABLE_RETRY_S)
        if not body_read and not drain_unread_body():  # so that the client reads the answer
            headers["Connection"] = "close"
        raise ApiError(rej.status, rej.error, rej.detail, headers) from None

    camp = valid.campaign
    shard = keys.shard_of(valid.batch_id, camp.shards)
    now = time.time()
    window = keys.window_start(now, camp.window_seconds) if valid.window is None else valid.window
    shuffled = st.config.shuffler.enabled
    target = keys.ingress_key if shuffled else keys.stream_key
    top = keys.ingress_top_key if shuffled else keys.stream_top_key
    entry = scripts.of(st.collector_redis).call(
        "INGEST", keys=[keys.seen_key(camp.name, shard, valid.batch_id), target(camp.name, shard),
              keys.metrics_key(camp.name, shard), top(camp.name, shard)],
        args=[keys.dedupe_expire_at(now, camp.window_seconds), valid.data, window, valid.count,
              st.config.shuffler.max_ingress_batches if shuffled else 0],
    )
    if entry == b"full":  # a stopped shuffler: refused, never trimmed; the device sends it again
        st.metrics.reject(camp.name, "ingress_full")
        raise ApiError(503, "ingress_full", f"campaign {camp.name!r}: the ingress stream holds "
                       f"{st.config.shuffler.max_ingress_batches} batches not yet shuffled; retry later",
                       {"Retry-After": str(INGRESS_FULL_RETRY_S)})
    if entry is None:
        return jsonify({"accepted": 0, "duplicate": True}), 202
    return jsonify({"accepted": valid.count, "duplicate": False}), 202
