"""Windows and time series of a campaign, export token:

- ``GET /v1/campaigns/<name>/windows?from=&to=&version=&format=json|csv`` → ``{"campaign",
  "kind", "window_length", "window_seconds", "min_reports", "version", "windows": [{"window",
  "window_start", "version", "n_reports", "status", "decoded_at", "complete"}]}``: every window
  with counted reports (oldest first), ``status`` ``released`` (a published estimate), ``withheld``
  (fewer than ``min_reports`` reports: nothing is released) or ``pending`` (enough reports, not
  published yet); ``complete``: the window has ended (false for the window in progress, whose
  numbers still grow, and for the one window of a ``window = "all"`` campaign).
- ``GET /v1/campaigns/<name>/series?from=&to=&items=&version=&format=json|csv`` → the same header
  and ``"rows"``: long-form rows ``SERIES_COLUMNS``, one per (window, item) of a released window
  (frequency: every item of the domain or ``items``; heavy hitters: the strings each window's
  publication holds, or those of ``items``; range: the per-value count of each value of ``items``,
  which is required there), and one row with no item for a withheld or pending window, so a gap
  in the series is marked, never silently skipped; each row says whether its window is
  ``complete``.

``format=parquet`` (``/series``): the rows as one Parquet file (``server.parquet``: window start
and end, version, value, estimate, std error, CI, n_reports, status, local and central ε). ``by``
(``/series`` of a campaign with dimensions, issue 28): the rows of each combination of those
dimensions' values in each window (``server.breakdowns``), with one column per dimension (a
withheld cell is a row without an item).

``from``/``to``: window starts, inclusive, as epoch seconds or ISO 8601 (``2026-11-23``,
``2026-11-23T10:00:00Z``; a time without offset is UTC); ``items``: comma-separated values;
``version``: the campaign version (default: the latest with counted reports; ``versions.find_campaign``),
or ``all``: the windows of every version, each row with its ``version`` (the header says
``"version": "all"`` and lists ``versions``); estimates of different versions are never summed:
a window with reports of two versions has rows of each. ``all`` needs the versions to share one
window length (400 ``bad_parameter`` naming ``version`` otherwise). A campaign with ``window =
"all"`` has one window, 0, whose ``window_start`` is null (it has no date).
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
from typing import Any, cast

from flask import Blueprint, Response, request

from ldptel.campaigns.config import Campaign
from ldptel.export import SERIES_COLUMNS
from ldptel.numbers import ascii_int
from ldptel.server import body_cache, breakdowns, parquet
from ldptel.server.app import state
from ldptel.server.auth import require_token
from ldptel.server.body_cache import cache_key
from ldptel.server.documents import (
    FORMATS,
    WITH_PARQUET,
    Params,
    Published,
    cells_withheld,
    csv_bool,
    csv_text,
    finite_row,
    format_param,
    json_text,
    not_modified,
    read_published_many,
    window_complete,
)
from ldptel.server.errors import BadParameter
from ldptel.server.versions import campaign_versions, find_campaign
from ldptel.store import published, tally

bp = Blueprint("series", __name__)

MAX_WINDOWS = 1000  # windows per answer: narrow from/to beyond
MAX_RANGE_ITEMS = 256  # values of a range campaign's series
NEVER = datetime.max.replace(tzinfo=UTC)  # Last-Modified that no If-Modified-Since matches
WINDOW_COLUMNS = ("window_start", "window", "version", "n_reports", "status", "decoded_at", "complete")
VALUE_COLUMNS = SERIES_COLUMNS[4:9]  # what a released row takes from an estimate row


@dataclass
class WindowInfo:
    """One listed window of one campaign version: its count and, when released, its publication."""

    window: int
    n: int  # reports counted (the publication's count once released)
    status: str  # released | withheld | pending
    pub: Published | None
    campaign: Campaign  # the version whose window it is
    complete: bool = False  # the window had ended when listed (``documents.window_complete``)

    @property
    def version(self) -> int:
        return self.campaign.version

    def start(self) -> str | None:
        """The window's start as ISO 8601 (None for a campaign with one window, "all")."""
        return iso(self.window) if self.campaign.window_seconds else None

    def row(self) -> dict[str, Any]:
        return {"window_start": self.start(), "window": self.window, "version": self.version,
                "n_reports": self.n, "status": self.status,
                "decoded_at": self.pub.decoded_at if self.pub is not None else None,
                "complete": self.complete}


def iso(epoch: int) -> str:
    """``1700000000`` → ``"2023-11-14T22:13:20Z"``."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def members(name: str, params: Params) -> list[Campaign]:
    """The versions a request reads, ascending: ``version=all`` → every version (all of one
    window length, else ``BadParameter``), else the one ``find_campaign`` resolves."""
    if params.get("version") != "all":
        return [find_campaign(name)]
    versions = campaign_versions(name)
    lengths = sorted({v.window for v in versions})
    if len(lengths) > 1:
        raise BadParameter("version", "'all' needs the versions to share one window length; "
                                      f"campaign {name!r} has {', '.join(lengths)}: ask for one version")
    return versions


def same_length_history(name: str) -> list[Campaign]:
    """The trend's versions: the newest back to the last change of window length, ascending."""
    versions = campaign_versions(name)
    out = [versions[-1]]
    for v in reversed(versions[:-1]):
        if v.window_seconds != out[0].window_seconds:
            break
        out.insert(0, v)
    return out


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


def version_param(campaign: Campaign, params: Params) -> int | str:
    """What the header's ``version`` says: ``all``, or the one version read."""
    return "all" if params.get("version") == "all" else campaign.version


def list_all(versions: list[Campaign], params: Params, newest: int | None = None,
             counts: dict[tuple[str, int], dict[int, int]] | None = None) -> list[WindowInfo]:
    """``list_windows`` of every version, by window then version (``newest``: the windows of
    the newest that many window starts; ``counts``: reports per window of a version, if read)."""
    infos = [i for v in versions
             for i in list_windows(v, params, counts=(counts or {}).get((v.name, v.version)))]
    infos.sort(key=lambda i: (i.window, i.version))
    if newest is not None:
        keep = sorted({i.window for i in infos})[-newest:]
        infos = [i for i in infos if keep and i.window >= keep[0]]
    if len(infos) > MAX_WINDOWS:
        raise BadParameter("from", f"the range holds {len(infos)} windows, at most {MAX_WINDOWS} per "
                                   "request: narrow from/to")
    return infos


def list_windows(campaign: Campaign, params: Params, newest: int | None = None,
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
    return [_window_info(w, n, pubs.get(w), campaign) for w, n in chosen]


def _window_info(window: int, n: int, pub: Published | None, campaign: Campaign) -> WindowInfo:
    complete = window_complete(campaign, window)
    if n < campaign.min_reports or cells_withheld(campaign, pub, n):
        return WindowInfo(window, n, "withheld", None, campaign, complete)
    if pub is None or pub.doc is None:
        return WindowInfo(window, n, "pending", None, campaign, complete)
    return WindowInfo(window, pub.n, "released", pub, campaign, complete)


def header(campaign: Campaign, params: Params, infos: list[WindowInfo]) -> dict[str, Any]:
    """What both documents start with (``version=all``: the versions listed, too)."""
    out = {"campaign": campaign.name, "kind": campaign.kind, "window_length": campaign.window,
           "window_seconds": campaign.window_seconds, "min_reports": campaign.min_reports,
           "version": version_param(campaign, params)}
    if out["version"] == "all":
        out["versions"] = [v.version for v in campaign_versions(campaign.name)]
    return out


def windows_document(campaign: Campaign, params: Params, infos: list[WindowInfo] | None = None
                     ) -> dict[str, Any]:
    """The ``/windows`` document (``infos``: the listed windows, if already read)."""
    infos = list_all(members(campaign.name, params), params) if infos is None else infos
    return {**header(campaign, params, infos), "windows": [i.row() for i in infos]}


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


def series_rows(infos: list[WindowInfo], items: list[str] | None,
                by: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Long-form rows (``SERIES_COLUMNS``) of the listed windows (each of its own version); with
    ``by``, of each cell of those dimensions (``_cell_rows``)."""
    rows: list[dict[str, Any]] = []
    for info in infos:
        base = {"window_start": info.start(), "window": info.window, "version": info.version,
                "n_reports": info.n, "status": info.status}
        done = {"complete": info.complete}
        if info.pub is None:
            rows.append({**base, "item": None, **dict.fromkeys(VALUE_COLUMNS), **done})
        elif by is not None:
            rows += [{**r, **done} for r in _cell_rows(info, base, items, by)]
        else:
            for est in _estimate_rows(info.campaign, info.pub, items):
                rows.append({**base, "item": est["item"], **{k: est.get(k) for k in VALUE_COLUMNS}, **done})
    return rows


def _cell_rows(info: WindowInfo, base: dict[str, Any], items: list[str] | None,
               by: tuple[str, ...]) -> list[dict[str, Any]]:
    """A released window's rows per cell of ``by`` (``breakdowns.rows``; ``items``: only these)."""
    assert info.pub is not None and info.pub.doc is not None
    doc = breakdowns.shaped(info.campaign, info.pub.doc, by, None)
    wanted = None if items is None else set(items)
    out = []
    for r in breakdowns.rows(info.campaign, doc, by):
        item = r.get("value", r.get("statistic"))
        if wanted is not None and item is not None and str(item) not in wanted:
            continue
        out.append({**base, **{d: r[d] for d in by}, "item": item, "n_reports": r["n_reports"],
                    "status": r["status"], **{k: r.get(k) for k in VALUE_COLUMNS}})
    return out


def series_parquet(campaign: Campaign, doc: dict[str, Any], infos: list[WindowInfo],
                   by: tuple[str, ...] | None) -> bytes:
    """The ``/series`` rows as a Parquet file (``server.parquet``)."""
    privacy = {(i.window, i.version): i.pub.doc.get("privacy") for i in infos if i.pub and i.pub.doc}
    lengths = {i.version: i.campaign.window_seconds for i in infos}
    return parquet.parquet_bytes(
        (parquet.row(r["window"], lengths.get(r["version"], campaign.window_seconds), r["version"],
                     privacy.get((r["window"], r["version"])), r["status"],
                     {**{k: r.get(k) for k in (*(by or ()), *VALUE_COLUMNS, "n_reports", "complete")},
                      "value": r["item"]})
         for r in doc["rows"]), by or ())


def series_document(campaign: Campaign, params: Params, infos: list[WindowInfo] | None = None
                    ) -> dict[str, Any]:
    """The ``/series`` document (``infos``: the listed windows, if already read)."""
    items = _items_param(campaign, params)
    by = breakdowns.by_param(campaign, params)
    infos = list_all(members(campaign.name, params), params) if infos is None else infos
    return {**header(campaign, params, infos), "rows": series_rows(infos, items, by)}


def _series_check(campaign: Campaign, params: Params) -> None:
    _items_param(campaign, params)
    breakdowns.by_param(campaign, params)


def etag(versions: list[Campaign], infos: list[WindowInfo], query: str) -> str:
    """Changes exactly when an answer can: the versions' parameters, each window's count, status,
    completeness and publication digest, and the ``query`` (endpoint and query string)."""
    h = hashlib.sha256(f"{':'.join(published.config_digest(v) for v in versions)}:{query}".encode())
    for i in infos:
        h.update(f"|{i.window}:{i.version}:{i.n}:{i.status}:{i.complete}:{i.pub.digest if i.pub else ''}"
                 .encode())
    return f'"{h.hexdigest()[:32]}"'


def _view(document: Callable[[Campaign, Params, list[WindowInfo]], dict[str, Any]], key: str,
          columns: tuple[str, ...], check: Callable[[Campaign, Params], Any]) -> Callable[[str], Response]:
    """The API view of ``document``: JSON, or its ``key`` rows as CSV of ``columns``; ``ETag``
    (304 on a match). ``check`` validates the parameters before anything is read."""

    def view(name: str) -> Response:
        versions = members(name, request.args)
        campaign = versions[-1]
        fmt = format_param(request.args, WITH_PARQUET if key == "rows" else FORMATS)
        check(campaign, request.args)
        infos = list_all(versions, request.args)
        tag = etag(versions, infos, f"{key}?{request.query_string.decode(errors='replace')}")
        headers = {"ETag": tag, "Cache-Control": "private, no-cache", "Vary": "Authorization",
                   "X-Ldptel-Campaign": campaign.name, "X-Ldptel-Windows": str(len(infos))}
        # If-None-Match only: a withheld window's count changes without a new publication
        if not_modified(tag, NEVER):
            return Response(status=304, headers=headers)
        if fmt != "json":
            headers["Content-Disposition"] = f'attachment; filename="{campaign.name}-{key}.{fmt}"'
        cached = cache_key(key, campaign.name, tag)  # the ETag covers the query, format included
        body = body_cache.CACHE.get(cached)
        by = breakdowns.by_param(campaign, request.args) if key == "rows" else None
        if body is None:
            doc = document(campaign, request.args, infos)
            if fmt == "parquet":
                body = series_parquet(campaign, doc, infos, by)
            else:
                cols = (*columns[:3], *(by or ()), *columns[3:])
                body = (csv_text(({**r, "complete": csv_bool(r["complete"])} for r in doc[key]), cols)
                        if fmt == "csv" else json_text(doc)).encode()
            body_cache.CACHE.put(cached, body)
        mimetype = {"csv": "text/csv", "parquet": parquet.MIMETYPE}.get(fmt, "application/json")
        return Response(body, mimetype=mimetype, headers=headers)

    view.__name__ = f"{key}_view"
    return cast("Callable[[str], Response]", require_token("export")(view))


bp.add_url_rule("/v1/campaigns/<name>/windows", "windows",
                _view(windows_document, "windows", WINDOW_COLUMNS, version_param))
bp.add_url_rule("/v1/campaigns/<name>/series", "series",
                _view(series_document, "rows", SERIES_COLUMNS, _series_check))
