"""Export API: ``GET /v1/campaigns/<name>/estimates?format=json|csv&window=…``.

Export token (``Authorization: Bearer …``). ``window``: ``latest`` (default: the newest window
with counted reports) or a window's epoch start (``0`` for "all" campaigns). Answers:

- ``200`` JSON ``{"campaign", "kind", "oracle", "epsilon", "n_reports", "window", "decoded_at",
  "items": [{"value",
  "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized"}]}`` — counts of devices: the
  raw unbiased estimate, its std error and 95% CI, and the Norm-Sub consistent count; items in
  domain order. ``format=csv``: the same rows with a header in the same column order
  (``ITEM_COLUMNS``); campaign, window and n_reports in ``X-Ldptel-*`` headers. Numbers are
  printed as shortest round-trip floats in both formats, so JSON and CSV agree exactly.
  The document is the aggregator's publication (``ldptel.aggregator.publish``): ``n_reports``
  reports decoded at ``decoded_at`` (epoch seconds); nothing is decoded here.
- ``304`` when ``If-None-Match`` matches the ``ETag`` (the publication's state digest: the
  campaign's parameters, the window and the accumulated state, so it changes exactly when the
  numbers can change) or, without ``If-None-Match``, when ``If-Modified-Since`` is not older than
  ``Last-Modified`` (``decoded_at``).
- ``401`` missing/wrong token, ``404`` unknown campaign, ``400`` bad ``window``/``format`` or a
  campaign kind without frequency estimates, ``409`` while ``n_reports`` < ``min_reports``
  (``detail`` holds both counts). Nothing below the threshold is ever released. ``503``
  ``not_yet_published`` with ``Retry-After`` when the window has enough reports but the
  aggregator has not published it yet.

``estimates(campaign, window, params)`` is the document and ``validators(campaign, window)`` its
response headers, for the view and the operator pages' downloads.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

from flask import Blueprint, Response, request

from ldptel.config import Campaign
from ldptel.server.auth import require_token
from ldptel.server.documents import (
    Params,
    Window,
    csv_text,
    find_campaign,
    load_released,
    not_modified,
    require_kind,
)
from ldptel.server.errors import ApiError
from ldptel.server.versions import combined_response

bp = Blueprint("export", __name__)

ITEM_COLUMNS = ("value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized")
FORMATS = ("json", "csv")


def _require_frequency(campaign: Campaign) -> None:
    require_kind(campaign, "frequency", "no frequency estimates")


def estimates(campaign: Campaign, window: Window, params: Params | None = None) -> dict:
    """The published estimate document of a frequency campaign's released ``window`` (no
    parameters: ``params`` is accepted for the common signature). ``ApiError`` 400 for another
    kind or a bad window, 409 below ``min_reports``, 503 before the first publication."""
    _require_frequency(campaign)
    _, pub = load_released(campaign, window)
    assert pub.doc is not None
    return pub.doc


def validators(campaign: Campaign, window: Window) -> tuple[int, dict[str, str], bool]:
    """(window start, response headers, unchanged) of a frequency campaign's released ``window``:
    the headers are ``ETag``, ``Last-Modified``, private caching and ``X-Ldptel-*``; ``unchanged``
    is True when the request's ``If-None-Match`` / ``If-Modified-Since`` match them (answer 304).
    ``ApiError`` as ``estimates``."""
    _require_frequency(campaign)
    start, pub = load_released(campaign, window)
    etag = pub.etag
    last_modified = datetime.fromtimestamp(pub.decoded_at, UTC)
    headers = {"ETag": etag, "Last-Modified": format_datetime(last_modified, usegmt=True),
               "Cache-Control": "private, no-cache", "Vary": "Authorization",
               "X-Ldptel-Campaign": campaign.name, "X-Ldptel-Window": str(start),
               "X-Ldptel-N-Reports": str(pub.n)}
    return start, headers, not_modified(etag, last_modified)


@bp.get("/v1/campaigns/<name>/estimates", endpoint="estimates")
@require_token("export")
def estimates_view(name: str) -> Response:
    if request.args.get("version") == "all":  # versions sharing a domain, combined
        return combined_response(name, ITEM_COLUMNS)
    campaign = find_campaign(name)
    fmt = request.args.get("format", "json")
    if fmt not in FORMATS:
        raise ApiError(400, "bad_request", f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    window, headers, unchanged = validators(campaign, request.args.get("window"))
    if unchanged:
        return Response(status=304, headers=headers)
    doc = estimates(campaign, window, request.args)
    if fmt == "csv":
        headers["Content-Disposition"] = f'attachment; filename="{campaign.name}-{window}.csv"'
        return Response(csv_text(doc["items"], ITEM_COLUMNS), mimetype="text/csv", headers=headers)
    _, pub = load_released(campaign, window)  # the publication ``doc`` is (read once per request)
    return Response(f"{pub.doc_json}\n", mimetype="application/json", headers=headers)
