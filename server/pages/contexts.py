"""What the campaign page renders: its query parameters, the header numbers, and per kind the
numbers of the released window — from the export API's document functions
(``export.estimates``, ``queries.heavy_hitters`` / ``quantiles`` / ``range_estimate`` / ``cdf``),
so that the page and the API agree exactly. They read the aggregator's publication of the window
(``ldptel.aggregator.publish``): nothing is decoded here, and the page says when the estimates
were decoded and from how many reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from flask import render_template
from markupsafe import Markup

from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.builder import DEVICE_LEVEL_KINDS, UNIQUE_LABELS
from ldptel.privacy.modes import is_shuffled
from ldptel.server import charts, export, queries
from ldptel.server.app import state
from ldptel.server.documents import (
    latest_released,
    load_released,
    request_published,
    resolve_window,
    window_complete,
)
from ldptel.server.errors import ApiError, BadParameter
from ldptel.server.pages import labels
from ldptel.server.pages.breakdown import breakdown_context
from ldptel.server.pages.numeric import numeric_context
from ldptel.server.pages.status import Status, campaign_status, status_view
from ldptel.server.pages.trend import trend_html
from ldptel.server.versions import find_campaign
from ldptel.store import published, tally

TOP_N = 25  # items shown before "show all"
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
CDF_POINTS = 512  # points of the CDF line and band on the chart
MAX_WINDOWS = 500  # newest windows offered in the selector


PAIR = re.compile(r"(\d{1,12})-v(\d{1,9})")  # a (window, version) of the selector: "1700000000-v1"


class PageArgs:
    """The campaign page's query parameters (kept across links and by the auto-refresh):
    ``window`` (``latest``, ``current``, a window start, or the selector's "<start>-v<version>")
    and ``version`` (as on the export API; the pair's version wins)."""

    def __init__(self, args: Mapping[str, str]) -> None:
        self.window = args.get("window") or "latest"
        self.version: str | None = args.get("version") or None
        pair = PAIR.fullmatch(self.window)
        if pair:
            self.window, self.version = pair.group(1), pair.group(2)
        self.view = "normalized" if args.get("view") == "normalized" else "raw"
        self.sort = "item" if args.get("sort") == "item" else "estimate"
        self.show_all = args.get("show") == "all"
        self.lo, self.hi = args.get("lo", ""), args.get("hi", "")
        self.compare = args.get("compare") or None  # the experiment arm compared (``pages.breakdown``)

    def query(self, **changes: Any) -> dict[str, Any]:
        cur = {"version": self.version, "window": None if self.window == "latest" else self.window,
               "compare": self.compare,
               "view": None if self.view == "raw" else self.view,
               "sort": None if self.sort == "estimate" else self.sort,
               "show": "all" if self.show_all else None, "lo": self.lo or None, "hi": self.hi or None}
        cur.update(changes)
        return {k: v for k, v in cur.items() if v not in (None, "")}

    def qs(self, **changes: Any) -> str:
        return "?" + urlencode(self.query(**changes))


def page_campaign(name: str, a: PageArgs) -> Campaign:
    """The version the page shows: ``a.version`` as ``version=`` of the export API; without one,
    for a window the default version has no reports in, the newest version that has (issue 35:
    a window of an old version read as empty). ``ApiError`` as ``find_campaign``."""
    c = find_campaign(name, a.version or "")
    if a.version is None and a.window.isdigit() and c.window_seconds:
        r, w = state().redis, int(a.window)
        if tally.window_count(r, c, w) == 0:
            for v in reversed(state().config.versions(name)):
                if v.window_seconds == c.window_seconds and tally.window_count(r, v, w) > 0:
                    return v
    return c


def window_options(c: Campaign, a: PageArgs, counts: Mapping[int, int]) -> list[tuple[str, str, bool]]:
    """The selector's windows, newest first (at most ``MAX_WINDOWS``): (value, label, selected)
    of each (version, window) with reports of the versions of ``c``'s window length (issue 35:
    old versions' windows were left out); the value is the window start alone for a campaign
    with one version, else "<start>-v<version>"."""
    versions = [v for v in state().config.versions(c.name) if v.window_seconds == c.window_seconds]
    r = state().redis
    pairs = [(w, v) for v in versions
             for w, n in (counts if v.version == c.version else tally.window_counts(r, v)).items() if n > 0]
    pairs.sort(key=lambda p: (p[0], p[1].version), reverse=True)
    several = len({v.version for _, v in pairs} | {c.version}) > 1
    return [(f"{w}-v{v.version}" if several else str(w),
             labels.window_label(c, w) + (f" · version {v.version}" if several else ""),
             a.window == str(w) and v.version == c.version)
            for w, v in pairs[:MAX_WINDOWS]]


def status(c: Campaign) -> Status:
    """``campaign_status`` with this process's ingest-rate readings (its probe's)."""
    older = [v for v in state().config.versions(c.name) if v.version != c.version]
    return campaign_status(state().redis, c, state().probe.ingest_rates(), older=older,
                           shuffled=state().config.shuffler.enabled)


def list_rows() -> list[dict[str, Any]]:
    """The campaigns list: display strings of every campaign's status, then the quarantined
    campaigns (registry records that cannot be read) with the reason."""
    config = state().config
    return [*(status_view(status(c)) for c in config.campaigns),
            *({"name": name, "broken": why} for name, why in sorted(config.broken.items()))]


def _row_view(rank: int, item: dict[str, Any]) -> dict[str, Any]:
    """A table row: rank, value, display label and the document row's numbers."""
    return {"rank": rank, "value": item["value"], "label": charts.display_label(item["value"]), **{
        k: item.get(k) for k in ("estimate", "std_error", "ci_low", "ci_high", "estimate_normalized",
                                 "z_score", "levels_used")}}


def frequency_context(c: Campaign, window: int, a: PageArgs) -> dict[str, Any]:
    """Rows (raw or normalized, by count or by item, top ``TOP_N`` or all) and the bar chart of
    ``export.estimates``, and the breakdown of a campaign with dimensions (``pages.breakdown``)."""
    by = {"by": ",".join(c.dimensions.names)} if c.dimensions is not None else {}
    doc = export.estimates(c, window, by)
    items = doc["items"]
    key = "estimate_normalized" if a.view == "normalized" else "estimate"
    order = list(range(len(items)))
    if a.sort == "estimate":
        order.sort(key=lambda i: -(items[i][key] if items[i][key] is not None else -math.inf))
    shown = [_row_view(r + 1, items[i]) for r, i in enumerate(order if a.show_all else order[:TOP_N])]
    raw = a.view == "raw"
    chart = charts.bar_chart(
        [charts.Bar(r["label"], r[key], r["ci_low"] if raw else None, r["ci_high"] if raw else None)
         for r in shown],
        whiskers=raw, axis_label="devices" if a.show_all else
        "estimated devices" + (" (raw, with 95% CI)" if raw else " (normalized)"),
        sticky_axis=a.show_all, aria_label=f"Estimated devices per item for {c.name}")
    return {"rows": shown, "total_items": len(items), "chart": chart, "view": a.view,
            "negatives": sum(1 for it in items if (it["estimate"] or 0) < 0),
            "normalized_sum": sum(it["estimate_normalized"] or 0 for it in items),
            "breakdown": breakdown_context(c, doc, a.compare)}


def unique_devices_context(c: Campaign, window: int, a: PageArgs) -> dict[str, Any]:
    """What a ``unique_devices`` campaign estimates: the devices with the event in the window (the
    item ``at_least_once`` of ``export.estimates``, with its 95% CI), and that as a share of the
    reporting devices (issue 35: the page drew the two GRR items, ``none`` and ``at_least_once``,
    as a two-bar histogram); the breakdown of a campaign with dimensions."""
    by = {"by": ",".join(c.dimensions.names)} if c.dimensions is not None else {}
    doc = export.estimates(c, window, by)
    row = next(it for it in doc["items"] if it["value"] == UNIQUE_LABELS[1])
    n = max(int(doc.get("n_reports") or 0), 1)

    def share(x: float | None) -> float | None:
        return None if x is None else x / n

    cols = ("estimate", "std_error", "ci_low", "ci_high")
    return {"devices": {k: row[k] for k in (*cols, "estimate_normalized")},
            "share": {k: share(row[k]) for k in cols},
            # the raw estimate is unbiased and may leave [0, reports]; Norm-Sub's stays inside
            "outside": not 0 <= (row["estimate"] or 0) <= n,
            "breakdown": breakdown_context(c, doc, a.compare)}


def heavy_hitters_context(c: Campaign, window: int, a: PageArgs) -> dict[str, Any]:
    """Rows and bar chart of ``queries.heavy_hitters`` (every string the walk kept)."""
    doc = queries.heavy_hitters(c, window, {})
    rows = [_row_view(i + 1, it) for i, it in enumerate(doc["items"])]
    shown = rows if a.show_all else rows[:TOP_N]
    chart = charts.bar_chart(
        [charts.Bar(r["label"], r["estimate"], r["ci_low"], r["ci_high"]) for r in shown],
        axis_label="devices" if a.show_all else "estimated devices (with 95% CI)",
        sticky_axis=a.show_all, aria_label=f"Heavy hitters of {c.name}") if shown else None
    return {"rows": shown, "total_items": len(rows), "chart": chart, "width": c.params.get("width")}


def range_context(c: Campaign, window: int, a: PageArgs) -> dict[str, Any]:
    """``QUANTILES``, the CDF chart (``CDF_POINTS``) with the median/p90/p99 marked, and the
    answer to the page's ``lo``/``hi`` range (or the parameter's error)."""
    d = int(c.domain_size or 1)
    qdoc = queries.quantiles(c, window, {"q": ",".join(map(str, QUANTILES))})
    answer, error = None, None
    if a.lo != "" or a.hi != "":
        try:
            answer = queries.range_estimate(c, window, {"lo": a.lo, "hi": a.hi})
            answer["share"] = (answer["estimate"] or 0) / max(qdoc["n_reports"], 1)
        except BadParameter as exc:
            error = exc.detail
    cdf = queries.cdf(c, window, {"points": str(CDF_POINTS)})["items"]
    xs, F, band_low, band_high = ([p[k] for p in cdf] for k in queries.CDF_COLUMNS)
    named = {0.5: "median", 0.9: "p90", 0.99: "p99"}
    markers = [charts.Marker(float(q["value"]), f"{named[q['q']]} {charts.fmt_count(q['value'])}")
               for q in qdoc["items"] if q["q"] in named]
    chart = charts.cdf_chart(xs, F, band_low, band_high, domain=(0, d - 1), markers=markers,
                             highlight=(answer["lo"], answer["hi"]) if answer else None,
                             x_label=f"value (0 to {charts.fmt_count(d - 1)})",
                             aria_label=f"Estimated CDF of {c.name}")
    return {"chart": chart, "quantiles": qdoc["items"], "answer": answer, "error": error, "domain_size": d,
            "method": qdoc["method"]}


CONTENT: dict[str, Callable[[Campaign, int, PageArgs], dict[str, Any]]] = {
    "frequency": frequency_context, "heavy_hitters": heavy_hitters_context, "range": range_context,
    "numeric": numeric_context, "unique_devices": unique_devices_context}
# (campaign, window, publication digest, page arguments) → the rendered content fragment
_contents: dict[tuple[str, int, str, str], Markup] = {}
CONTENTS_KEPT = 128


def _latest(c: Campaign, counts: dict[int, int]) -> int:
    """What ``window=latest`` shows: the newest ended released window, else the window
    ``resolve_window`` falls back to."""
    found = latest_released(c, counts) if c.window_seconds else 0
    return found if found is not None else resolve_window(c, None, counts)


def _in_progress(c: Campaign, st: Status, shown: int) -> dict[str, Any] | None:
    """The window in progress, shown apart when it is not the window shown ("800 of 1,000
    reports"), with the reports accepted and not yet counted (held by the shuffler or queued)."""
    if not c.window_seconds or st.current_window == shown:
        return None
    return {"label": labels.window_label(c, st.current_window), "n": charts.fmt_count(st.current_reports),
            "min": charts.fmt_count(c.min_reports), "waiting": charts.fmt_count(st.lag_reports or 0),
            "released": st.current_reports >= c.min_reports,
            # a device-level kind's devices report a window once it has ended: "0 of 200" all day
            # read as "nothing arrives" (issue 35)
            "device_level": c.kind in DEVICE_LEVEL_KINDS}


def _version(window: int, n: int, pub: published.Published | None) -> str:
    """Changes when the page's numbers can: the window, its count, the publication's state."""
    return f"{window}:{n}:{pub.digest[:16] if pub is not None else ''}"


def campaign_context(c: Campaign, a: PageArgs, with_content: bool = True) -> dict[str, Any]:
    """Everything the campaign page renders (``with_content=False``: header numbers only, no
    decoding; ``add_content`` completes it)."""
    window_error = None
    st = status(c)  # one read of the counters: the status, the latest window and its last commit
    try:
        window = resolve_window(c, None if a.window == "latest" else a.window, st.windows)
    except tally.WindowError as exc:
        window_error = str(exc)[:1].upper() + str(exc)[1:]
        window = resolve_window(c, None, st.windows)
    n = st.windows.get(window, 0)
    pub = request_published(c, window)
    ctx: dict[str, Any] = {
        "c": c, "a": a, "s": status_view(st), "window": window,
        "window_label": labels.window_label(c, window), "window_error": window_error,
        # the window shown has not ended: its numbers still grow (the summary and the selector say so)
        "shown_in_progress": bool(c.window_seconds) and not window_complete(c, window),
        "current_label": labels.window_label(c, st.current_window) if c.window_seconds else None,
        "window_length": labels.window_length_label(c),
        "n": n, "n_fmt": charts.fmt_count(n),
        "released": n >= c.min_reports, "epsilon_note": labels.epsilon_note(c),
        "windows": window_options(c, a, st.windows),
        "n_versions": len(state().config.versions(c.name)),
        # the selector's "Latest" entry names the newest released window, whichever is viewed
        "latest_label": labels.window_label(c, _latest(c, st.windows)),
        "in_progress": _in_progress(c, st, window),
        "trend_html": trend_html(c, st.windows),
        "version": _version(window, n, pub), "progress": min(1.0, n / max(c.min_reports, 1)),
        "kind_label": labels.KIND_LABELS.get(c.kind, c.kind), "mechanism": labels.mechanism_label(c),
        "domain": labels.domain_label(c),
        # a shuffled campaign's commit times are its releases'
        "window_updated": ("with each whole batch" if is_shuffled(c)
                           else labels.ago(st.window_updated.get(window))),
        # through the shuffler, decoded_at is the hour plus a count (``aggregator.publish``)
        "decoded": labels.decoded_note(pub.decoded_at, pub.n,
                                       shuffled=is_shuffled(c) or state().config.shuffler.enabled)
        if pub is not None and pub.n >= c.min_reports else None,
        "central_note": None, "central_head": "",  # the released window's central ε (add_content)
    }
    return add_content(ctx) if with_content else ctx


def add_content(ctx: dict[str, Any]) -> dict[str, Any]:
    """Add the kind's numbers of the window's publication (nothing below the release threshold;
    ``pending`` while the aggregator has not published the window yet), the central ε its
    document states (``central_note``, ``central_head``) and ``content_html``, the rendered
    content fragment. A publication never changes, so the fragment of one
    (campaign, window, publication, page arguments) is rendered once per process."""
    c: Campaign = ctx["c"]
    if ctx["released"]:
        try:
            _, pub = load_released(c, ctx["window"])
        except ApiError as exc:
            if exc.status not in (409, 503):
                raise
            if exc.code == "publication_failed":  # shown, with the aggregator's reason
                ctx["failed"] = exc.detail["error"]
            else:
                ctx["released" if exc.status == 409 else "pending"] = exc.status != 409
        else:
            n = pub.doc.get("n_reports", pub.n) if pub.doc is not None else pub.n  # cells: the released
            ctx["n"], ctx["n_fmt"] = n, charts.fmt_count(n)
            privacy = pub.doc.get("privacy") if pub.doc is not None else None
            ctx["central_note"] = labels.central_note(privacy)
            ctx["central_head"] = labels.central_head(privacy)
            key = (c.name, ctx["window"], pub.digest, ctx["a"].qs())
            if key not in _contents:
                if len(_contents) >= CONTENTS_KEPT:
                    _contents.pop(next(iter(_contents)), None)
                ctx["content"] = CONTENT.get(c.kind, CONTENT[c.estimate_kind])(c, ctx["window"], ctx["a"])
                _contents[key] = Markup(render_template("operator_content.html", **ctx))
            ctx["content_html"] = _contents[key]
            return ctx
    ctx["content_html"] = Markup(render_template("operator_content.html", **ctx))
    return ctx
