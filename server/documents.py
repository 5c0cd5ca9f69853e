"""What every export document is computed from, and how documents are written.

The document functions of ``server/export.py`` and ``server/queries.py`` take ``(campaign,
window, params)`` and return a dict; the API views and the operator pages both call them. They
start from:

- ``versions.find_campaign(name)``: the campaign version the request's ``version=`` names (default: the
  latest with reports; ``ApiError`` 404 ``not_found``);
- ``resolve_window(campaign, window)``: ``window=`` → a window start; ``latest`` (the default)
  is the newest *ended* released window (``latest_released``: the window is over, enough reports,
  published), never the window in progress, so a client polling ``latest`` only ever stores
  complete windows (issue 35); ``current`` is the window in progress (the pages show it apart);
  a campaign with ``window = "all"`` has one window, 0, which never ends: ``current`` and no
  ``window=`` answer it (``complete: false``), an explicit ``latest`` answers 409
  ``no_complete_window`` (``no_window_ends``), so ``latest`` never answers a window in progress;
- ``load_released(campaign, window)``: the window's start and its publication
  (``ldptel.store.published``: the document the aggregator decoded, tagged with the report
  count and state digest it was decoded from), or ``ApiError`` 400 ``bad_window``, 409
  ``below_threshold`` (with both counts: nothing below the campaign's ``min_reports`` is ever
  released) or 503 ``not_yet_published`` (with ``Retry-After``: the window has enough reports but
  the aggregator has not published it yet). Nothing is decoded on the request path. Within one
  request a window is read from Redis once (``read_published``: the tag with one HMGET, and the
  whole publication with one HGETALL only when this process has not parsed it yet), so the
  ETag, the document and every number of a page come from one publication.

are answered with ``conditional_response`` (``ETag`` and ``Last-Modified`` of the publication: a
304 when the request's validators match, else a body rendered once per URL and publication in
this process), and are written with ``json_text`` and ``csv_text`` (every CSV the product writes: a header row
of ``columns``, then one line per row, missing values empty; a text cell that a spreadsheet would
run as a formula gets a leading ``'``: ``csv_cell``). Numbers are printed as shortest
round-trip floats in both, so JSON and CSV agree exactly. A document's CSV (``document_csv``)
is its rows with the document's ``window``, ``n_reports`` and ``complete`` as the last three
columns (``WINDOW_COLUMNS``), so a file on its own says which window, how many reports it holds
and whether the window had ended;
``format_param`` reads ``format=json|csv``.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from flask import Response, g, request

from ldptel.campaigns.config import Campaign
from ldptel.privacy.modes import Shuffled, ShuffledFakes
from ldptel.server import body_cache
from ldptel.server.app import state
from ldptel.server.body_cache import cache_key
from ldptel.server.errors import ApiError, BadParameter
from ldptel.store import published, tally
from ldptel.store.published import Published, finite_row

Window = int | str | None  # a window start, or a ``window=`` query value ("latest", "current", "", None)
Params = Mapping[str, str]  # a document's query parameters (e.g. ``request.args``)
__all__ = ["FORMATS", "WINDOW_COLUMNS", "WITH_PARQUET", "Params", "Published", "Window",
           "conditional_response", "csv_bool", "csv_cell", "csv_text", "document_csv", "finite_row",
           "format_param", "json_text", "latest_released", "window_complete", "with_complete",
           "load_released", "no_window_ends", "not_modified", "read_published", "read_published_many",
           "request_published", "require_kind", "resolve_window"]


# (campaign, version, window) → its last publication read
_parsed: dict[tuple[str, int, int], Published] = {}
PARSED_KEPT = 256  # a longer series re-reads (its windows then push each other out)


def read_published(campaign: Campaign, window: int) -> Published | None:
    """The window's publication (``published.read``). A publication is immutable, so this process
    keeps the last one it parsed per window and reuses it while the stored tag (digest and
    ``decoded_at``) is unchanged: one small HMGET instead of transferring and parsing the
    document again."""
    r = state().redis
    tag = published.read(r, campaign, window, tag_only=True)
    if tag is None:
        return None
    kept = _kept(campaign, window, tag)
    return kept if kept is not None else _keep(campaign, window, published.read(r, campaign, window))


def read_published_many(campaign: Campaign, windows: list[int]) -> list[Published | None]:
    """``read_published`` of many windows in two round trips: their tags, then the publications
    this process has not parsed yet (``published.read_many``)."""
    r = state().redis
    found: dict[int, Published | None] = {}
    unread: list[int] = []
    for w, tag in zip(windows, published.read_many(r, campaign, windows, tag_only=True), strict=True):
        found[w] = None if tag is None else _kept(campaign, w, tag)
        if tag is not None and found[w] is None:
            unread.append(w)
    if unread:
        for w, pub in zip(unread, published.read_many(r, campaign, unread), strict=True):
            found[w] = _keep(campaign, w, pub)
    return [found[w] for w in windows]


def _kept(campaign: Campaign, window: int, tag: Published) -> Published | None:
    """The publication of ``window`` this process parsed, if its tag is still ``tag``."""
    kept = _parsed.get((campaign.name, campaign.version, window))
    if kept is None or (kept.digest, kept.decoded_at) != (tag.digest, tag.decoded_at):
        return None
    return kept


def _keep(campaign: Campaign, window: int, pub: Published | None) -> Published | None:
    """Remember ``pub`` (the last ``PARSED_KEPT`` publications parsed) and return it."""
    if pub is not None:
        if len(_parsed) >= PARSED_KEPT:
            _parsed.pop(next(iter(_parsed)), None)
        _parsed[campaign.name, campaign.version, window] = pub
    return pub


def request_published(campaign: Campaign, start: int) -> Published | None:
    """``read_published`` once per request: every number of one answer or page comes from one
    publication."""
    loaded: dict[tuple[str, int, int], Published | None] = g.setdefault("ldptel_released", {})
    at = (campaign.name, campaign.version, start)
    if at not in loaded:
        loaded[at] = read_published(campaign, start)
    return loaded[at]


LATEST_TRIED = 3  # newest ended windows over min_reports checked for a publication


def window_complete(campaign: Campaign, window: int, now: float | None = None) -> bool:
    """Whether ``window`` has ended: no report received from then on falls in it (a campaign with
    ``window = "all"`` has one window, which never ends). Its publication may still take in the
    few reports the shuffler or the aggregator held at the end (its ETag then changes)."""
    length = campaign.window_seconds
    return bool(length) and window + length <= (time.time() if now is None else now)


def with_complete(pub: Published, complete: bool) -> Published:
    """``pub`` with ``complete`` in its document (last key) and, for a window in progress, a
    digest (so an ETag) of its own: the same publication is another document once its window
    has ended."""
    if pub.doc is None:
        return pub
    doc = {**pub.doc, "complete": complete}
    text = pub.doc_json if pub.doc_json is not None else json.dumps(pub.doc, allow_nan=False)
    if text.endswith("}") and "complete" not in pub.doc:
        text = text[:-1] + (", " if pub.doc else "") + f'"complete": {json.dumps(complete)}}}'
    else:
        text = json.dumps(doc, allow_nan=False)
    digest = pub.digest if complete else hashlib.sha256(f"in progress:{pub.digest}".encode()).hexdigest()
    return dataclasses.replace(pub, doc=doc, doc_json=text, digest=digest)


def latest_released(campaign: Campaign, counts: Mapping[int, int], now: float | None = None) -> int | None:
    """The newest released window that has ended (``window_complete``): at least ``min_reports``
    counted reports and a publication (of the newest ``LATEST_TRIED`` such windows: one just past
    the threshold may not be published yet), or None. The window in progress never is."""
    now = time.time() if now is None else now
    ready = [w for w, n in sorted(counts.items())
             if n >= campaign.min_reports and window_complete(campaign, w, now)]
    for w in reversed(ready[-LATEST_TRIED:]):
        pub = request_published(campaign, w)
        if pub is not None and pub.doc is not None:
            return w
    return None


def resolve_window(campaign: Campaign, window: Window, counts: Mapping[int, int] | None = None) -> int:
    """``window=`` → the window start (``tally.resolve_window``): ``current`` the window in
    progress; ``latest``/empty/None the newest ended released window (``latest_released``), else,
    while none is released, the newest ended window with reports, else the window in progress
    (``counts``: the reports per window, if already read); ``WindowError``."""
    st = state()
    spec = None if window is None else str(window)
    if spec == "current":
        return tally.current_window(campaign)
    if spec in (None, "", "latest") and campaign.window_seconds:
        counts = tally.window_counts(st.redis, campaign) if counts is None else counts
        newest = latest_released(campaign, counts)
        if newest is not None:
            return newest
        now = time.time()
        ended = {w: n for w, n in counts.items() if window_complete(campaign, w, now)}
        if any(n > 0 for n in ended.values()):
            counts = ended
    return tally.resolve_window(st.redis, campaign, spec, None if counts is None else dict(counts))


def waiting_reports(campaign: Campaign) -> int:
    """Reports the collector accepted for the campaign that no aggregator has counted yet: held
    by the shuffler or queued for the aggregator (``tally.summary``; the campaign's other
    versions share its streams)."""
    st = state()
    older = [v for v in st.config.versions(campaign.name) if v.version != campaign.version]
    summ = tally.summary(st.redis, campaign, older)
    held = summ.held_reports if st.config.shuffler.enabled else 0
    return max(summ.lag_reports or 0, held)


def coarse_waiting(campaign: Campaign, waiting: int) -> int:
    """``waiting`` as answered: for a campaign in a shuffled privacy mode rounded down to whole
    ``batch_min`` units (one device's sealed report moved it 0→1 at once, the arrival signal an
    n−1 attacker waits for; issue 36 item 5), else exact."""
    mode = campaign.mode
    if not isinstance(mode, (Shuffled, ShuffledFakes)):
        return waiting
    return waiting // mode.batch_min * mode.batch_min


ONE_WINDOW_MESSAGE = ('this campaign has window = "all": one window, which never ends, so none is complete; '
                      'its one window is window=current (also what no window= answers), complete: false')


def no_window_ends(campaign: Campaign, n: int | None = None) -> ApiError:
    """The 409 ``no_complete_window`` of ``window=latest`` on a campaign with ``window = "all"``:
    its one window never ends, so ``latest`` (the newest *ended* window) has nothing to answer,
    and a client polling ``latest`` never receives ``complete: false`` (issue 35); the detail
    points at ``window=current``."""
    detail: dict[str, Any] = {"window": 0, "current": "window=current", "message": ONE_WINDOW_MESSAGE}
    if n is not None:
        detail.update(n_reports=n, min_reports=campaign.min_reports)
    return ApiError(409, "no_complete_window", detail)


def load_released(campaign: Campaign, window: Window) -> tuple[int, Published]:
    """(window start, publication) of ``window`` (``resolve_window``) once it holds at least
    ``min_reports`` reports; ``ApiError`` 400 ``bad_window``, 409 ``no_complete_window`` (``latest``
    while no window has ended with estimates, or ever on a ``window = "all"`` campaign:
    ``no_window_ends``), 409 ``below_threshold`` (with
    ``waiting``: reports accepted and not yet counted, for the window in progress; in whole
    ``batch_min`` units for a shuffled campaign, ``coarse_waiting``) or 503
    ``not_yet_published``."""
    st = state()
    if str(window) == "latest" and not campaign.window_seconds:
        raise no_window_ends(campaign, tally.window_count(st.redis, campaign, 0))
    try:
        start = resolve_window(campaign, window)
    except tally.WindowError as exc:
        raise ApiError(400, "bad_window", str(exc)) from None
    complete = window_complete(campaign, start)
    if str(window) in ("None", "", "latest") and campaign.window_seconds and not complete:
        raise ApiError(409, "no_complete_window",
                       {"window": start, "n_reports": tally.window_count(st.redis, campaign, start),
                        "min_reports": campaign.min_reports,
                        "message": "no window of this campaign has ended with its estimates released yet; "
                                   "the window in progress is window=current"})
    pub = request_published(campaign, start)
    n = pub.n if pub is not None and pub.doc is not None else tally.window_count(st.redis, campaign, start)
    if cells_withheld(campaign, pub, n):
        raise ApiError(409, "below_threshold",
                       {"n_reports": n, "min_reports": campaign.min_reports, "window": start, "waiting": 0,
                        "message": f"estimates are withheld until one cell holds {campaign.min_reports} "
                                   f"reports ({n} are counted, spread over the campaign's cells)"})
    if n < campaign.min_reports:
        current = start == tally.current_window(campaign)
        waiting = coarse_waiting(campaign, waiting_reports(campaign)) if current else 0
        more = (f"; {waiting} more accepted and waiting in the shuffler or the aggregator"
                if waiting else "")
        holders = other_versions_holding(campaign, start)
        if holders:
            more += "; " + "; ".join(f"version {v} holds {k:,} reports of this window (version={v})"
                                     for v, k in holders.items())
        raise ApiError(409, "below_threshold",
                       {"n_reports": n, "min_reports": campaign.min_reports, "window": start,
                        "waiting": waiting, "version": campaign.version,
                        "versions_with_reports": [{"version": v, "n_reports": k} for v, k in holders.items()],
                        "message": f"estimates of version {campaign.version} are withheld until "
                                   f"{campaign.min_reports} reports are counted ({n:,} so far{more})"})
    if pub is not None and pub.error is not None and pub.doc is None:
        raise ApiError(503, "publication_failed",
                       {"n_reports": n, "window": start, "error": pub.error,
                        "message": "the aggregator could not publish this window's estimates; it "
                                   "retries every few minutes (other campaigns are not affected)"},
                       headers={"Retry-After": str(published.FAILED_RETRY_S)})
    if pub is None or pub.doc is None:
        retry = max(1, math.ceil(st.config.aggregator.publish_interval))
        raise ApiError(503, "not_yet_published",
                       {"n_reports": n, "window": start,
                        "message": "the aggregator has not published this window's estimates yet"},
                       headers={"Retry-After": str(retry)})
    return start, with_complete(pub, complete)


def other_versions_holding(campaign: Campaign, window: int) -> dict[int, int]:
    """The campaign's other versions with counted reports in ``window``: version → reports (the
    409 of a window read under the wrong version names them, issue 35)."""
    st = state()
    out = {}
    for v in st.config.versions(campaign.name):
        if v.version != campaign.version and v.window_seconds == campaign.window_seconds:
            k = tally.window_count(st.redis, v, window)
            if k > 0:
                out[v.version] = k
    return out


def cells_withheld(campaign: Campaign, pub: Published | None, n: int) -> bool:
    """Whether a campaign with dimensions published the window's ``n`` reports without a document:
    none of its cells holds ``min_reports`` (``aggregator.breakdown``)."""
    return (campaign.dimensions is not None and pub is not None and pub.doc is None and pub.error is None
            and pub.n >= n > 0)


def not_modified(etag: str, last_modified: datetime) -> bool:
    """Whether the request's ``If-None-Match`` matches ``etag`` or, without it, its
    ``If-Modified-Since`` is not older than ``last_modified`` (answer 304)."""
    inm = request.headers.get("If-None-Match")
    if inm is not None:
        tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
        return "*" in tags or etag in tags
    ims = request.headers.get("If-Modified-Since")
    if ims:
        try:
            return last_modified.replace(microsecond=0) <= parsedate_to_datetime(ims)
        except (TypeError, ValueError):
            return False
    return False


def conditional_response(etag: str, modified: float, headers: dict[str, str],
                         render: Callable[[], str | bytes], mimetype: str,
                         attachment: str | None = None) -> Response:
    """The answer for this URL's document identified by ``etag`` (quoted) and ``modified``
    (epoch seconds; the publication's ``decoded_at``): 304 with ``headers`` when the request's
    ``If-None-Match`` / ``If-Modified-Since`` match (``not_modified``), else 200 with ``headers``
    (and ``Content-Disposition: attachment`` with the file name ``attachment``, if given) and the
    body ``render()``. A document identified so never changes, so its body is rendered
    once per (URL, ETag, modified) in this process (``body_cache.CACHE``, bounded in bytes):
    polling clients cost a tag read, not a rendering. Validate the request's parameters before calling
    this (a 304 says the URL's document is unchanged)."""
    if not_modified(etag, datetime.fromtimestamp(modified, UTC)):
        return Response(status=304, headers=headers)
    key = cache_key("document", request.path, request.query_string, etag, modified)
    body = body_cache.CACHE.get(key)
    if body is None:
        rendered = render()
        body = rendered.encode() if isinstance(rendered, str) else rendered
        body_cache.CACHE.put(key, body)
    if attachment is not None:
        headers = {**headers, "Content-Disposition": f'attachment; filename="{attachment}"'}
    return Response(body, mimetype=mimetype, headers=headers)


def require_kind(campaign: Campaign, kind: str, what: str) -> None:
    """``ApiError`` 400 ``bad_request`` unless ``campaign`` is of ``kind`` (``what`` completes
    "campaign 'x' is a range campaign: no …")."""
    if campaign.estimate_kind != kind:  # unique_devices publishes frequency estimates, …
        raise ApiError(400, "bad_request",
                       f"campaign {campaign.name!r} is a {campaign.kind} campaign: {what}")


FORMATS = ("json", "csv")
WITH_PARQUET = ("json", "csv", "parquet")  # the estimate documents and series (``server.parquet``)
WINDOW_COLUMNS = ("window", "n_reports", "complete")


def format_param(params: Params, allowed: Sequence[str] = FORMATS) -> str:
    """``format=json|csv`` (default json; ``allowed``: the endpoint's formats); ``BadParameter``
    otherwise."""
    fmt = params.get("format") or "json"
    if fmt not in allowed:
        raise BadParameter("format", f"must be one of {', '.join(allowed)}, got {fmt!r}")
    return fmt


def document_csv(doc: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """CSV of a document's ``rows`` (``columns``), each with the document's ``window``,
    ``n_reports`` and ``complete`` appended (``WINDOW_COLUMNS``)."""
    extra = {k: doc.get(k) for k in WINDOW_COLUMNS}
    extra["complete"] = csv_bool(extra["complete"])
    return csv_text(({**row, **extra} for row in rows), (*columns, *WINDOW_COLUMNS))


def csv_bool(value: Any) -> str | None:
    """A boolean as CSV writes it: ``true``/``false`` as in the JSON (None: empty)."""
    return None if value is None else ("true" if value else "false")


def json_text(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, allow_nan=False) + "\n"


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """One CSV cell, safe to open in a spreadsheet (OWASP's CSV-injection rule): a text cell that
    starts with ``= + - @`` TAB or CR gets a leading ``'`` unless it is a plain decimal number
    (``-12.5``, ``+3e-2``); numbers stay numbers; None is empty."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """CSV of ``rows``: a header of ``columns``, then each row's values in that order (None and
    missing values empty; every cell through ``csv_cell``). Lines end in ``\n``; a cell holding
    a CR or LF is quoted (the writer runs with a ``\r\n`` terminator, which makes it quote both,
    and each line's terminator is then cut to ``\n``)."""
    lines: list[str] = []
    writer = csv.writer(_LineSink(lines), lineterminator="\r\n")
    writer.writerow([csv_cell(c) for c in columns])
    for row in rows:
        writer.writerow([csv_cell(row.get(k)) for k in columns])
    return "".join(line[:-2] + "\n" for line in lines)


class _LineSink:
    """A file for ``csv.writer`` that keeps each written line (the writer writes a row at once)."""

    def __init__(self, lines: list[str]) -> None:
        self.write = lines.append
