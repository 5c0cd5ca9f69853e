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

import logging
import time
from typing import Any

from flask import Blueprint, Response, has_app_context, jsonify, request

from ldptel.campaigns.config import Campaign, Config
from ldptel.campaigns.limits import MAX_DEVICE_ANSWER_BYTES, json_bytes
from ldptel.privacy.central import stored_claim
from ldptel.privacy.device_composition import device_composition
from ldptel.privacy.modes import is_shuffled
from ldptel.privacy.release_claims import planned_claim
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.errors import ApiError
from ldptel.server.report_route import HINT_HEADER, ReportRoute, campaigns_digest
from ldptel.server.sealed_ingest import shuffled_config

bp = Blueprint("ingest", __name__)
log = logging.getLogger("ldptel.server")

@bp.after_request
def _hint(response):
    """Every ingest answer says which campaigns it was made under (``campaigns_digest``)."""
    response.headers[HINT_HEADER] = campaigns_digest(state().config)
    return response


MAX_ASKED_VERSIONS = 32  # ``versions=`` pairs read per request (more: 400)


def asked_versions(raw: list[str]) -> set[tuple[str, int]]:
    """The old versions a device asks for: ``versions=<campaign>:<n>`` (repeated, or comma
    separated); ``ApiError`` 400 naming the parameter for a bad pair or more than
    ``MAX_ASKED_VERSIONS``."""
    pairs = [p for item in raw for p in item.split(",") if p]
    if len(pairs) > MAX_ASKED_VERSIONS:
        raise ApiError(400, "bad_parameter", f"versions: at most {MAX_ASKED_VERSIONS} campaign:version "
                                             f"pairs per request, got {len(pairs)}")
    out = set()
    for pair in pairs:
        name, _, number = pair.rpartition(":")
        if not name or not number.isdigit() or len(number) > 9:
            raise ApiError(400, "bad_parameter", f"versions: {pair[:80]!r} is not <campaign>:<version>")
        out.add((name, int(number)))
    return out


def client_config(config: Config, campaign: Campaign, now: float | None = None,
                  asked: set[tuple[str, int]] | None = None) -> dict[str, Any]:
    """What a device needs of the latest version ``campaign``: its public config (with its
    ``version``), ``status`` and ``reason`` unless it is active, ``oldest_accepted_version``:
    the superseded versions from it to the latest take reports still (absent: none), and
    ``older_versions``: the public configs of those of them the device asked for by number
    (``asked``, issue 34 item 9: a device holding reports of an old version asks for its config,
    sends them instead of dropping them; no device gets every old version). Each ``privacy``
    object is ``Campaign.privacy()`` plus the central ε of one shuffler release
    (``central_privacy.stored_claim``)."""
    shuffled = config.shuffler.enabled
    out = {**campaign.public(), "privacy": device_privacy(campaign, shuffled)}
    if is_shuffled(campaign) and has_app_context():
        out.update(shuffled_config(state(), campaign, time.time() if now is None else now))
    if campaign.require_tokens and config.issuer is not None:  # issue 37: where devices get tokens
        out["token_issuer"] = {"url": config.issuer.public_url(), "name": config.issuer.name}
    if campaign.status != "active":
        out.update(status=campaign.status, reason=campaign.reason)
    at = time.time() if now is None else now
    accepted = [v for v in config.versions(campaign.name)[:-1] if at <= v.accepts_until()]
    if accepted:  # superseded in version order, all with the same accept_old_versions: a range
        out["oldest_accepted_version"] = accepted[0].version
    older = [{**v.public(), "privacy": device_privacy(v, shuffled),
              **(shuffled_config(state(), v, at) if is_shuffled(v) and has_app_context() else {})}
             for v in accepted if (campaign.name, v.version) in (asked or ())]
    if older:
        out["older_versions"] = older
    return out


def within_answer_cap(campaigns: list[dict[str, Any]]) -> None:
    """Leave out the asked-for old versions that would take the answer past what the SDK reads
    (``MAX_DEVICE_ANSWER_BYTES``, less a margin for the rest of the answer), kept in campaign
    and version order (a device asks again at its next fetch); the registry's checks bound the
    latest versions with one old version each (``records.entry_bytes``), so the answer never
    outgrows the SDK's cap."""
    budget = MAX_DEVICE_ANSWER_BYTES - 64 * 1024 - sum(
        json_bytes({k: v for k, v in c.items() if k != "older_versions"}) for c in campaigns)
    for c in campaigns:
        kept = []
        for old in c.get("older_versions", []):
            budget -= json_bytes(old)
            if budget >= 0:
                kept.append(old)
        if kept:
            c["older_versions"] = kept
        else:
            c.pop("older_versions", None)


def device_privacy(campaign: Campaign, shuffled: bool) -> dict[str, Any]:
    """A device config's ``privacy``: the local claim plus the central ε of one shuffler release
    (``central_privacy.stored_claim``), or, in a shuffled privacy mode, the planned claim of one
    batch of ``batch_min`` devices (``release_claims.planned_claim``)."""
    if is_shuffled(campaign):
        return {**campaign.privacy(), **planned_claim(campaign)}
    return {**campaign.privacy(), **stored_claim(campaign, shuffled)}


_reported: dict[str, str] = {}  # campaign → the last failure logged (once per reason)


def _report_unavailable(name: str, exc: BaseException) -> None:
    reason = f"{type(exc).__name__}: {exc}"
    if _reported.get(name) != reason:
        _reported[name] = reason
        log.error("GET /v1/campaigns: campaign %s left out: %s", name, reason, exc_info=exc)


@bp.get("/v1/campaigns")
@require_token("ingest", "export")
def list_campaigns():
    """Public configs of the campaigns clients can report to (``client_config``, each with its
    ``privacy`` claim), and the request
    limits (the SDK builds no body over ``max_body_bytes`` nor batch over
    ``max_reports_per_batch``); 503 until this process has read the campaign registry once. A
    campaign whose config cannot be made (its claims fail: they are computed when its version is
    made, so this is a bug or a record written by another release) is left out, logged once per
    reason and named in ``unavailable``, and the others are served (as for a broken record)."""
    st = state()
    if not st.live.loaded:  # the file's campaigns may be stale versions of the registry's
        raise ApiError(503, "unavailable", "the campaign registry cannot be read yet; retry later",
                       {"Retry-After": "1"})
    asked = asked_versions(request.args.getlist("versions"))
    campaigns, unavailable = [], []
    for c in st.config.campaigns:
        try:
            campaigns.append(client_config(st.config, c, asked=asked))
        except Exception as exc:  # noqa: BLE001 - that campaign alone is left out (module docstring)
            _report_unavailable(c.name, exc)
            unavailable.append({"name": c.name, "reason": "its configuration cannot be served: "
                                "see the collector's log and GET /v1/admin/campaigns"})
    if asked:
        within_answer_cap(campaigns)
    srv = st.config.server
    try:
        composition = device_composition(st.config.campaigns)  # across campaigns
    except Exception as exc:  # noqa: BLE001 - the figure alone is left out
        _report_unavailable("(device_composition)", exc)
        composition = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}", "epsilon": None,
                       "delta": None, "campaigns": [], "releases": 0, "unbounded": []}
    body = {"campaigns": campaigns, "max_body_bytes": srv.max_body_bytes,
            "max_reports_per_batch": srv.max_reports_per_batch,
            "server_time": round(time.time(), 3),  # sealed batches bind a window
            "device_composition": composition}
    if unavailable:
        body["unavailable"] = unavailable
    resp = jsonify(body)
    resp.headers["Cache-Control"] = "private, max-age=60"
    resp.headers["ETag"] = f'"{campaigns_digest(st.config)}"'
    return resp


@bp.post("/v1/reports")
def post_reports():
    """``report_route.ReportRoute`` answers this path in front of Flask (``create_app`` installs
    it); this view answers through it when it is not installed."""
    status, headers, body = ReportRoute(state()).answer(request.environ)
    return Response(body, status, headers, mimetype="application/json")
