"""The campaign page's trend view: the estimates of the top items over the newest windows (lines
with 95% CI bands) and the reports counted per window, from the same publications and rows as
``GET /series`` (``server/series.py``); nothing is decoded here. Rendered once per process and
per (campaign, windows' state) — the ETag of ``/series`` — and sent with every live update.
"""

from __future__ import annotations

from flask import render_template
from markupsafe import Markup

from ldptel.config import Campaign
from ldptel.server import series, trend_chart
from ldptel.server.pages import labels

TREND_ITEMS = 5  # lines: the most-counted items of the newest released window
TREND_WINDOWS = 60  # newest windows drawn
_rendered: dict[tuple[str, str], Markup] = {}
RENDERED_KEPT = 64


def top_items(campaign: Campaign, infos: list[series.WindowInfo]) -> list[str]:
    """The ``TREND_ITEMS`` items with the largest estimates in the newest released window (none
    for range and numeric campaigns: their trend is the reports per window; a numeric campaign's
    panel draws its mean per window, ``server/mean_chart.py``)."""
    newest = next((i for i in reversed(infos) if i.pub is not None and i.pub.doc is not None), None)
    if newest is None or campaign.kind in ("range", "numeric"):
        return []
    assert newest.pub is not None and newest.pub.doc is not None
    ranked = sorted(newest.pub.doc["items"], key=lambda r: -(r["estimate"] or 0.0))
    return [str(r["value"]) for r in ranked[:TREND_ITEMS]]


def trend_html(campaign: Campaign, counts: dict[int, int] | None = None) -> Markup:
    """The trend panel (empty for an "all" campaign: it has one window); ``counts``: the reports
    per window, if already read (the page's status has them)."""
    if campaign.window_seconds == 0:
        return Markup("")
    infos = series.list_windows(campaign, {}, newest=TREND_WINDOWS, counts=counts)
    key = (campaign.name, series.etag(campaign, infos, "trend"))
    if key not in _rendered:
        if len(_rendered) >= RENDERED_KEPT:
            _rendered.pop(next(iter(_rendered)), None)
        _rendered[key] = _render(campaign, infos)
    return _rendered[key]


def _render(campaign: Campaign, infos: list[series.WindowInfo]) -> Markup:
    items = top_items(campaign, infos)
    rows = series.series_rows(campaign, infos, items) if items else []
    lines = {item: trend_chart.Line(item) for item in items}
    for r in rows:
        point = trend_chart.Point(r["window"], r["estimate"], r["ci_low"], r["ci_high"])
        for ln in lines.values() if r["item"] is None else [lines.get(str(r["item"]))]:
            if ln is not None:  # a withheld or pending window: a gap in every line
                ln.points.append(point)
    counts = [trend_chart.Count(i.window, i.n, i.status == "released") for i in infos]
    chart = trend_chart.trend_chart(
        list(lines.values()), counts, campaign.window_seconds, lambda w: labels.window_label(campaign, w),
        aria_label=f"Estimates over windows for {campaign.name}")
    legend = list(zip(items, trend_chart.legend_colors(len(items)), strict=True))
    return Markup(render_template("operator_trend.html", c=campaign, chart=chart, legend=legend,
                                  windows=len(infos), released=sum(c.released for c in counts),
                                  newest=TREND_WINDOWS))
