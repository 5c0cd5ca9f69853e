"""Windows and time series of a campaign, export token:

- ``GET /v1/campaigns/<name>/windows?from=&to=&version=&format=json|csv`` → ``{"campaign",
  "kind", "window_length", "window_seconds", "min_reports", "version", "windows": [{"window",
  "window_start", "version", "n_reports", "status", "decoded_at"}]}``: every window with counted
  reports (oldest first), ``status`` ``released`` (a published estimate), ``withheld`` (fewer than
  ``min_reports`` reports: nothing is released) or ``pending`` (enough reports, not published yet).
- ``GET /v1/campaigns/<name>/series?from=&to=&items=&version=&format=json|csv`` → the same header
  and ``"rows"``: long-form rows ``SERIES_COLUMNS``, one per (window, item) of a released window
  (frequency: every item of the domain or ``items``; heavy hitters: the strings each window's
  publication holds, or those of ``items``; range: the per-value count of each value of ``items``,
  which is required there), and one row with no item for a withheld or pending window, so a gap
  in the series is marked, never silently skipped.

``from``/``to``: window starts, inclusive, as epoch seconds or ISO 8601 (``2026-11-23``,
``2026-11-23T10:00:00Z``; a time without offset is UTC); ``items``: comma-separated values;
``version``: the campaign version (default: the latest with counted reports; ``versions.find_campaign``).
Every number is the aggregator's publication of the window (``documents.read_published``):
nothing is decoded here. ``ETag`` (304 on a match): a digest of the campaign's parameters, each
listed window's count and publication digest and the query, so it changes exactly when an answer
can, and each process keeps answers' bodies by it (``body_cache.CACHE``, bounded in bytes), so a repeated poll
reads only the window counts and tags (``If-Modified-Since`` is not used: a withheld window's
count changes without a new publication). ``400 bad_parameter`` names the bad parameter (also
when the range holds more than ``MAX_WINDOWS`` windows), ``401``, ``404`` unknown campaign.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, request

from ldptel import published, tally
from ldptel.config import Campaign
from ldptel.export import SERIES_COLUMNS
from ldptel.numbers import ascii_int
from ldptel.server import body_cache
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.body_cache import cache_key
from ldptel.server.documents import (
    Params,
    Published,
    csv_text,
    finite_row,
    format_param,
    json_text,
    not_modified,
    read_published_many,
)
from ldptel.server.errors import BadParameter
from ldptel.server.versions import find_campaign

bp = Blueprint("series", __name__)

MAX_WINDOWS = 1000  # windows per answer: narrow from/to beyond
MAX_RANGE_ITEMS = 256  # values of a range campaign's series
NEVER = datetime.max.replace(tzinfo=UTC)  # Last-Modified that no If-Modified-Since matches
WINDOW_COLUMNS = ("window_start", "window", "version", "n_reports", "status", "decoded_at")
VALUE_COLUMNS = SERIES_COLUMNS[4:9]  # what a released row takes from an estimate row


@dataclass
class WindowInfo:
    """One listed window: its count and, when released, its publication."""

    window: int
    n: int  # reports counted (the publication's count once released)
    status: str  # released | withheld | pending
    pub: Published | None

    def row(self, version: int) -> dict[str, Any]:
        return {"window_start": iso(self.window), "window": self.window, "version": version,
                "n_reports": self.n, "status": self.status,
                "decoded_at": self.pub.decoded_at if self.pub is not None else None}


def iso(epoch: int) -> str:
    """``1700000000`` → ``"2023-11-14T22:13:20Z"``."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time_param(params: Params, name: str) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    epoch = ascii_int(raw, 12)
    if epoch is not None:
        return epoch
    try:
        t = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadParameter(name, "must be epoch seconds or ISO 8601 (2026-11-23T10:00:00Z), "
                                 f"got {raw!r}") from None
    return int((t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp())


def version_param(campaign: Campaign, params: Params) -> int:
    """The campaign version the request names: ``find_campaign`` resolved ``version=`` (default:
    the latest with counted reports; 404 for an unknown one, 400 for a malformed one)."""
    return campaign.version


def list_windows(campaign: Campaign, params: Params, version: int = 1, newest: int | None = None,
                 counts: dict[int, int] | None = None) -> list[WindowInfo]:
    """The windows with counted reports whose start is in [``from``, ``to``] (``newest``: only
    the newest that many), oldest first, each with its status and (released) publication
    (``counts``: the reports per window, if already read: ``tally.window_counts``)."""
    lo, hi = _time_param(params, "from"), _time_param(params, "to")
    if lo is not None and hi is not None and lo > hi:
        raise BadParameter("from", f"must be <= to, got from={lo}, to={hi}")
    counts = tally.window_counts(state().redis, campaign) if counts is None else counts
    chosen = [(w, n) for w, n in counts.items()
              if n > 0 and (lo is None or w >= lo) and (hi is None or w <= hi)]
    if newest is not None:
        chosen = chosen[-newest:]
    if len(chosen) > MAX_WINDOWS:
        raise BadParameter("from", f"the range holds {len(chosen)} windows, at most {MAX_WINDOWS} per "
                                   "request: narrow from/to")
    released = [w for w, n in chosen if n >= campaign.min_reports]
    pubs = dict(zip(released, read_published_many(campaign, released), strict=True))
    return [_window_info(w, n, pubs.get(w), campaign.min_reports) for w, n in chosen]


def _window_info(window: int, n: int, pub: Published | None, min_reports: int) -> WindowInfo:
    if n < min_reports:
        return WindowInfo(window, n, "withheld", None)
    if pub is None or pub.doc is None:
        return WindowInfo(window, n, "pending", None)
    return WindowInfo(window, pub.n, "released", pub)


def header(campaign: Campaign, version: int) -> dict[str, Any]:
    """What both documents start with."""
    return {"campaign": campaign.name, "kind": campaign.kind, "window_length": campaign.window,
            "window_seconds": campaign.window_seconds, "min_reports": campaign.min_reports,
            "version": version}


def windows_document(campaign: Campaign, params: Params, infos: list[WindowInfo] | None = None) -> dict:
    """The ``/windows`` document (``infos``: the listed windows, if already read)."""
    version = version_param(campaign, params)
    infos = list_windows(campaign, params, version) if infos is None else infos
    return {**header(campaign, version), "windows": [i.row(version) for i in infos]}


def _items_param(campaign: Campaign, params: Params) -> list[str] | None:
    raw = params.get("items")
    if not raw:
        if campaign.kind == "range":
            raise BadParameter("items", "is required for a range campaign (values, e.g. items=10,20)")
        return None
    items = [v.strip() for v in raw.split(",")]
    if campaign.kind == "range":
        d = int(campaign.domain_size or 1)
        values = [ascii_int(v, 9) for v in items]
        if len(items) > MAX_RANGE_ITEMS or not all(v is not None and v < d for v in values):
            raise BadParameter("items", f"must be at most {MAX_RANGE_ITEMS} values in [0, {d - 1}], "
                                        f"got {raw!r}")
    return items


def _estimate_rows(campaign: Campaign, pub: Published, items: list[str] | None) -> Iterable[dict[str, Any]]:
    """(item, estimate row) of a released window, in the publication's order (range: ``items``;
    numeric: ``mean`` and ``sum``)."""
    assert pub.doc is not None
    if campaign.kind == "range":
        est = published.range_estimate(campaign, pub)
        for v in items or []:
            yield {"item": int(v), **finite_row(est.range(int(v), int(v)))}
        return
    wanted = None if items is None else set(items)
    if campaign.kind == "numeric":  # items "mean" and "sum"
        for stat in ("mean", "sum"):
            if wanted is None or stat in wanted:
                yield {"item": stat, **pub.doc[stat]}
        return
    for row in pub.doc["items"]:
        if wanted is None or str(row["value"]) in wanted:
            yield {"item": row["value"], **row}


def series_rows(campaign: Campaign, infos: list[WindowInfo], items: list[str] | None,
                version: int = 1) -> list[dict[str, Any]]:
    """Long-form rows (``SERIES_COLUMNS``) of the listed windows."""
    rows: list[dict[str, Any]] = []
    for info in infos:
        base = {"window_start": iso(info.window), "window": info.window, "version": version,
                "n_reports": info.n, "status": info.status}
        if info.pub is None:
            rows.append({**base, "item": None, **dict.fromkeys(VALUE_COLUMNS)})
            continue
        for est in _estimate_rows(campaign, info.pub, items):
            rows.append({**base, "item": est["item"], **{k: est.get(k) for k in VALUE_COLUMNS}})
    return rows


def series_document(campaign: Campaign, params: Params, infos: list[WindowInfo] | None = None) -> dict:
    """The ``/series`` document (``infos``: the listed windows, if already read)."""
    version = version_param(campaign, params)
    items = _items_param(campaign, params)
    infos = list_windows(campaign, params, version) if infos is None else infos
    return {**header(campaign, version), "rows": series_rows(campaign, infos, items, version)}


def etag(campaign: Campaign, infos: list[WindowInfo], query: str) -> str:
    """Changes exactly when an answer can: the campaign's parameters, each window's count, status
    and publication digest, and the ``query`` (endpoint and query string)."""
    h = hashlib.sha256(f"{published.config_digest(campaign)}:{query}".encode())
    for i in infos:
        h.update(f"|{i.window}:{i.n}:{i.status}:{i.pub.digest if i.pub else ''}".encode())
    return f'"{h.hexdigest()[:32]}"'


def _view(document: Callable[[Campaign, Params, list[WindowInfo]], dict], key: str,
          columns: tuple[str, ...], check: Callable[[Campaign, Params], Any]) -> Callable[[str], Response]:
    """The API view of ``document``: JSON, or its ``key`` rows as CSV of ``columns``; ``ETag``
    (304 on a match). ``check`` validates the parameters before anything is read."""

    def view(name: str) -> Response:
        campaign = find_campaign(name)
        fmt = format_param(request.args)
        check(campaign, request.args)
        infos = list_windows(campaign, request.args, version_param(campaign, request.args))
        tag = etag(campaign, infos, f"{key}?{request.query_string.decode(errors='replace')}")
        headers = {"ETag": tag, "Cache-Control": "private, no-cache", "Vary": "Authorization",
                   "X-Ldptel-Campaign": campaign.name, "X-Ldptel-Windows": str(len(infos))}
        # If-None-Match only: a withheld window's count changes without a new publication
        if not_modified(tag, NEVER):
            return Response(status=304, headers=headers)
        if fmt == "csv":
            headers["Content-Disposition"] = f'attachment; filename="{campaign.name}-{key}.csv"'
        cached = cache_key(key, campaign.name, tag)  # the ETag covers the query, format included
        body = body_cache.CACHE.get(cached)
        if body is None:
            doc = document(campaign, request.args, infos)
            body = (csv_text(doc[key], columns) if fmt == "csv" else json_text(doc)).encode()
            body_cache.CACHE.put(cached, body)
        mimetype = "text/csv" if fmt == "csv" else "application/json"
        return Response(body, mimetype=mimetype, headers=headers)

    view.__name__ = f"{key}_view"
    return require_token("export")(view)


bp.add_url_rule("/v1/campaigns/<name>/windows", "windows",
                _view(windows_document, "windows", WINDOW_COLUMNS, version_param))
bp.add_url_rule("/v1/campaigns/<name>/series", "series",
                _view(series_document, "rows", SERIES_COLUMNS, _items_param))
