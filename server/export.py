"""Export API: ``GET /v1/campaigns/<name>/estimates?format=json|csv&window=…`` (DESIGN §3).

Export token (``Authorization: Bearer …``). ``window``: ``latest`` (default: the newest window
with counted reports) or a window's epoch start (``0`` for "all" campaigns). Answers:

- ``200`` JSON ``{"campaign", "kind", "oracle", "epsilon", "n_reports", "window", "items": [{"value",
  "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized"}]}`` — counts of devices: the
  raw unbiased estimate, its std error and 95% CI, and the Norm-Sub consistent count; items in
  domain order. ``format=csv``: the same rows with a header in the same column order
  (``ITEM_COLUMNS``); campaign, window and n_reports in ``X-Ldptel-*`` headers. Numbers are
  printed as shortest round-trip floats in both formats, so JSON and CSV agree exactly.
- ``304`` when ``If-None-Match`` matches the ``ETag`` (a digest of the campaign's parameters, the
  window and the accumulated state, so it changes exactly when the numbers can change) or, without
  ``If-None-Match``, when ``If-Modified-Since`` is not older than ``Last-Modified`` (last commit
  of the window).
- ``401`` missing/wrong token, ``404`` unknown campaign, ``400`` bad ``window``/``format`` or a
  campaign kind without frequency estimates, ``409`` while ``n_reports`` < ``min_reports``
  (``detail`` holds both counts). Nothing below the threshold is ever released.
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from flask import Blueprint, Response, request

from ldptel.aggregator import store
from ldptel.config import Campaign
from ldptel.server.app import error_response, state
from ldptel.server.auth import require_token
from ldptel.server.cache import LruCache, state_digest

bp = Blueprint("export", __name__)

ITEM_COLUMNS = ("value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized")
FORMATS = ("json", "csv")
_documents = LruCache(64)  # state digest → estimate document (RAPPOR fits are costly)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def estimate_document(campaign: Campaign, window: int, acc) -> dict:
    """The JSON document of an accumulated window (no threshold check)."""
    est = acc.estimate()
    if est.labels is None:
        est.labels = campaign.labels()
    items = [{k: (_finite(v) if isinstance(v, float) else v) for k, v in row.items()} for row in est.items()]
    return {
        "campaign": campaign.name,
        "kind": campaign.kind,
        "oracle": campaign.oracle,
        "epsilon": campaign.epsilon,
        "n_reports": acc.n,
        "window": window,
        "items": [{k: row[k] for k in ITEM_COLUMNS} for row in items],
    }


def to_csv(doc: dict) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(ITEM_COLUMNS)
    for row in doc["items"]:
        writer.writerow(["" if row[k] is None else row[k] for k in ITEM_COLUMNS])
    return buf.getvalue()


def _etag(campaign: Campaign, window: int, acc) -> str:
    return f'"{state_digest(campaign, window, acc)[:32]}"'


def cached_document(campaign: Campaign, window: int, acc) -> tuple[str, dict]:
    """(ETag, estimate document) of an accumulated window, from an LRU cache keyed by the ETag
    (a RAPPOR fit is costly; the document changes exactly when the ETag does)."""
    etag = _etag(campaign, window, acc)
    doc = _documents.get_or_compute(etag, lambda: estimate_document(campaign, window, acc))
    return etag, doc


def load_released(campaign: Campaign) -> tuple[int, object] | Response:
    """(window, accumulator) of the request's ``window`` (default ``latest``), or the error
    response: ``400`` bad window, ``409`` below the campaign's ``min_reports`` (with the count)."""
    st = state()
    try:
        window = store.resolve_window(st.redis, campaign, request.args.get("window"))
    except store.WindowError as exc:
        return error_response(400, "bad_window", str(exc))
    acc, n = store.load_accumulator(st.redis, campaign, window)
    if n < campaign.min_reports:
        return error_response(409, "below_threshold",
                              {"n_reports": n, "min_reports": campaign.min_reports, "window": window,
                               "message": f"estimates are withheld until {campaign.min_reports} "
                                          f"reports are counted ({n} so far)"})
    return window, acc


def _not_modified(etag: str, last_modified: datetime | None) -> bool:
    inm = request.headers.get("If-None-Match")
    if inm is not None:
        tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
        return "*" in tags or etag in tags
    ims = request.headers.get("If-Modified-Since")
    if ims and last_modified is not None:
        try:
            return last_modified.replace(microsecond=0) <= parsedate_to_datetime(ims)
        except (TypeError, ValueError):
            return False
    return False


@bp.get("/v1/campaigns/<name>/estimates")
@require_token("export")
def estimates(name: str):
    st = state()
    campaign = st.config.campaign(name)
    if campaign is None:
        return error_response(404, "not_found", f"unknown campaign {name!r}")
    fmt = request.args.get("format", "json")
    if fmt not in FORMATS:
        return error_response(400, "bad_request", f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if campaign.kind != "frequency":
        return error_response(400, "bad_request",
                              f"campaign {name!r} is a {campaign.kind} campaign: no frequency estimates")
    loaded = load_released(campaign)
    if not isinstance(loaded, tuple):
        return loaded
    window, acc = loaded
    n = acc.n
    etag = _etag(campaign, window, acc)
    updated = store.last_updated(st.redis, campaign, window)
    last_modified = datetime.fromtimestamp(updated, UTC) if updated is not None else None
    headers = {"ETag": etag, "Cache-Control": "private, no-cache", "Vary": "Authorization",
               "X-Ldptel-Campaign": campaign.name, "X-Ldptel-Window": str(window),
               "X-Ldptel-N-Reports": str(n)}
    if last_modified is not None:
        headers["Last-Modified"] = format_datetime(last_modified, usegmt=True)
    if _not_modified(etag, last_modified):
        return Response(status=304, headers=headers)
    _, doc = cached_document(campaign, window, acc)
    if fmt == "csv":
        headers["Content-Disposition"] = f'attachment; filename="{campaign.name}-{window}.csv"'
        return Response(to_csv(doc), mimetype="text/csv", headers=headers)
    return Response(json.dumps(doc, allow_nan=False) + "\n", mimetype="application/json", headers=headers)
