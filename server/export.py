"""Export API: ``GET /v1/campaigns/<name>/estimates?format=json|csv&window=…``.

Export token (``Authorization: Bearer …``). ``window``: ``latest`` (default: the newest window
with counted reports) or a window's epoch start (``0`` for "all" campaigns). Answers:

- ``200`` JSON ``{"campaign", "kind", "oracle", "epsilon", "n_reports", "window", "decoded_at",
  "privacy" (``Campaign.privacy``), "items": [{"value",
  "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized"}]}`` — counts of devices: the
  raw unbiased estimate, its std error and 95% CI, and the Norm-Sub consistent count; items in
  domain order. ``format=csv``: the same rows with a header in the same column order
  (``ITEM_COLUMNS``), then ``window`` and ``n_reports`` (``documents.document_csv``); campaign,
  window and n_reports also in ``X-Ldptel-*`` headers. Numbers are
  printed as shortest round-trip floats in both formats, so JSON and CSV agree exactly.
  The document is the aggregator's publication (``ldptel.aggregator.publish``): ``n_reports``
  reports decoded at ``decoded_at`` (epoch seconds); nothing is decoded here.
- ``format=parquet``: the same rows as one Parquet file (``server.parquet``: the Arrow schema,
  window start/end, version, value, estimate, std error, CI, n_reports, local and central ε).
- breakdowns (a campaign with ``dimensions``, issue 28): ``by=platform,arm`` adds ``cells`` (the
  estimate of each combination, from the cells holding ``min_reports``) and ``compare=<arm>``
  ``differences`` against the experiment's control (``server.breakdowns``); CSV and Parquet rows
  then have one column per dimension of ``by``.
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
publication and response headers, for the view and the operator pages' downloads. A document is
rendered once per URL and publication in each process (``documents.conditional_response``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from flask import Blueprint, Response, request

from ldptel.campaigns.config import Campaign
from ldptel.server import breakdowns, parquet
from ldptel.server.auth import require_token
from ldptel.server.documents import (
    WINDOW_COLUMNS,
    WITH_PARQUET,
    Params,
    Published,
    Window,
    conditional_response,
    csv_bool,
    csv_text,
    document_csv,
    format_param,
    json_text,
    load_released,
    require_kind,
)
from ldptel.server.versions import combined_response, find_campaign

bp = Blueprint("export", __name__)

ITEM_COLUMNS = ("value", "estimate", "std_error", "ci_low", "ci_high", "estimate_normalized")


def estimates(campaign: Campaign, window: Window, params: Params | None = None) -> dict[str, Any]:
    """The published estimate document of a frequency campaign's released ``window`` (``params``:
    ``by`` and ``compare``, ``server.breakdowns``). ``ApiError`` 400 for another kind or a bad
    window or parameter, 409 below ``min_reports``, 503 before the first publication."""
    by, compare = breakdowns.check(campaign, params or {})
    _, pub, _ = validators(campaign, window)
    assert pub.doc is not None
    return pub.doc if campaign.dimensions is None else breakdowns.shaped(campaign, pub.doc, by, compare)


def validators(campaign: Campaign, window: Window, kind: str = "frequency",
               what: str = "no frequency estimates") -> tuple[int, Published, dict[str, str]]:
    """(window start, publication, response headers) of a ``kind`` campaign's released
    ``window``: the headers are ``ETag``, ``Last-Modified``, private caching and ``X-Ldptel-*``
    (answer with ``documents.conditional_response``). ``ApiError`` as ``estimates`` (400
    ``what`` for another kind)."""
    require_kind(campaign, kind, what)
    start, pub = load_released(campaign, window)
    last_modified = datetime.fromtimestamp(pub.decoded_at, UTC)
    headers = {"ETag": pub.etag, "Last-Modified": format_datetime(last_modified, usegmt=True),
               "Cache-Control": "private, no-cache", "Vary": "Authorization",
               "X-Ldptel-Campaign": campaign.name, "X-Ldptel-Window": str(start),
               "X-Ldptel-N-Reports": str(pub.n)}
    return start, pub, headers


Validators = Callable[[Campaign, Window], tuple[int, Published, dict[str, str]]]  # ``validators``


def published_response(name: str, validate: Validators,
                       rows: Callable[[dict[str, Any]], list[dict[str, Any]]], columns: Sequence[str],
                       suffix: str = "") -> Response:
    """The API answer for campaign ``name``'s released window (``validate``: the kind's
    ``validators``): the publication's document as stored (JSON) or its ``rows`` as CSV of
    ``columns``, or Parquet (``server.parquet``), through ``documents.conditional_response`` (304
    when the request's validators match; a body rendered once per URL and publication). A
    campaign with dimensions: the document of ``by``/``compare`` (``server.breakdowns``), whose
    CSV and Parquet rows have a column per dimension of ``by``."""
    campaign, fmt = find_campaign(name), format_param(request.args, WITH_PARQUET)
    by, compare = breakdowns.check(campaign, request.args)
    window, pub, headers = validate(campaign, request.args.get("window"))
    doc, doc_json = pub.doc, pub.doc_json
    assert doc is not None
    file = f"{campaign.name}-{window}{suffix}"
    if campaign.dimensions is not None:
        doc = breakdowns.shaped(campaign, doc, by, compare)
        doc_json = json_text(doc).rstrip("\n")
    if fmt == "parquet":
        return conditional_response(pub.etag, pub.decoded_at, headers,
                                    lambda: parquet_file(campaign, window, doc, by), parquet.MIMETYPE,
                                    attachment=f"{file}.parquet")
    if fmt == "csv" and campaign.dimensions is not None:
        # the same last columns as every other document's CSV (issue 35: a campaign with
        # dimensions ended "…, n_reports, window", the others "…, window, n_reports")
        cols = (*breakdowns.columns(campaign, by)[:-1], *WINDOW_COLUMNS)
        done = csv_bool(doc.get("complete"))
        return conditional_response(pub.etag, pub.decoded_at, headers, lambda: csv_text(
            ({**r, "window": window, "complete": done} for r in breakdowns.rows(campaign, doc, by)), cols),
            "text/csv", attachment=f"{file}.csv")
    if fmt == "csv":
        return conditional_response(pub.etag, pub.decoded_at, headers,
                                    lambda: document_csv(doc, rows(doc), columns), "text/csv",
                                    attachment=f"{file}.csv")
    return conditional_response(pub.etag, pub.decoded_at, headers, lambda: f"{doc_json}\n",
                                "application/json")


def parquet_file(campaign: Campaign, window: int, doc: dict[str, Any], by: tuple[str, ...] | None) -> bytes:
    """One window's document (``breakdowns.rows``) as a Parquet file (``server.parquet``)."""
    return parquet.parquet_bytes((parquet.row(window, campaign.window_seconds, campaign.version,
                                              doc.get("privacy"), r.pop("status"),
                                              {**r, "complete": doc.get("complete")})
                                  for r in breakdowns.rows(campaign, doc, by)), by or ())


@bp.get("/v1/campaigns/<name>/estimates", endpoint="estimates")
@require_token("export")
def estimates_view(name: str) -> Response:
    if request.args.get("version") == "all":  # versions sharing a domain, combined
        return combined_response(name, ITEM_COLUMNS)
    return published_response(name, validators, lambda doc: doc["items"], ITEM_COLUMNS)
