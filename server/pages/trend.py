"""The campaign page's trend view: the estimates of the top items (a numeric campaign: its mean)
over the newest windows of every version of the campaign's current window length (lines with
95% CI bands, a marker and label at each version change), and the reports counted per window,
from the same publications and rows as ``GET /series?version=all`` (``server/series.py``);
nothing is decoded here. Rendered once per process and per (campaign, windows' state) — the
ETag of ``/series`` — and sent with every live update.
"""

from __future__ import annotations

from flask import render_template
from markupsafe import Markup

from ldptel import tally
from ldptel.config import Campaign
from ldptel.server import charts, series, trend_chart
from ldptel.server.pages import labels

TREND_ITEMS = 5  # lines: the most-counted items of the newest released window
TREND_WINDOWS = 60  # newest windows drawn
_rendered: dict[tuple[str, str], Markup] = {}
RENDERED_KEPT = 64
CHANGE_NAMES = {"epsilon": "ε", "epsilon_inf": "ε∞", "domain_size": "d", "domain": "domain",
                "oracle": "oracle", "mechanism": "mechanism", "method": "method"}


def top_items(campaign: Campaign, infos: list[series.WindowInfo]) -> list[str]:
    """The ``TREND_ITEMS`` items with the largest estimates in the newest released window of the
    newest version that has one; a numeric campaign's line is its mean; none for range campaigns
    (their trend is the reports per window)."""
    if campaign.estimate_kind == "numeric":
        return ["mean"]
    newest = next((i for i in reversed(infos) if i.pub is not None and i.pub.doc is not None), None)
    if newest is None or campaign.kind == "range":
        return []
    assert newest.pub is not None and newest.pub.doc is not None
    ranked = sorted(newest.pub.doc["items"], key=lambda r: -(r["estimate"] or 0.0))
    return [str(r["value"]) for r in ranked[:TREND_ITEMS]]


def change_label(before: Campaign, after: Campaign) -> str:
    """"v2: ε 2 → 1": what changed from one version to the next (its public parameters)."""
    old, new = before.public(), after.public()
    parts = []
    for key in sorted(set(old) | set(new)):
        if key in ("version", "window_seconds") or old.get(key) == new.get(key):
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, list) or isinstance(b, list):
            parts.append(f"{CHANGE_NAMES.get(key, key)} {len(a or [])} → {len(b or [])} items")
        else:
            parts.append(f"{CHANGE_NAMES.get(key, key)} {_short(a)} → {_short(b)}")
    return f"v{after.version}: " + (", ".join(parts[:2]) + (" …" if len(parts) > 2 else "") or "new version")


def _short(value: object) -> str:
    if isinstance(value, float):
        return charts.fmt_eps(value)
    text = "–" if value is None else str(value)
    return text if len(text) <= 12 else text[:11] + "…"


def markers(versions: list[Campaign], infos: list[series.WindowInfo],
            current: int) -> list[trend_chart.Marker]:
    """A marker at the first window of each version after the first drawn (the current window
    for a version without reports yet), if it falls in the drawn range."""
    first = min((i.window for i in infos), default=current)
    out = []
    for before, after in zip(versions, versions[1:], strict=False):
        start = min((i.window for i in infos if i.version == after.version), default=current)
        if start >= first:
            out.append(trend_chart.Marker(start, after.version, change_label(before, after)))
    return out


def trend_html(campaign: Campaign, counts: dict[int, int] | None = None) -> Markup:
    """The trend panel (empty for an "all" campaign: it has one window); ``counts``: the reports
    per window of ``campaign``, if already read (the page's status has them)."""
    if campaign.window_seconds == 0:
        return Markup("")
    versions = series.same_length_history(campaign.name)
    known = {} if counts is None else {(campaign.name, campaign.version): counts}
    infos = series.list_all(versions, {}, newest=TREND_WINDOWS, counts=known)
    key = (campaign.name, series.etag(versions, infos, "trend"))
    if key not in _rendered:
        if len(_rendered) >= RENDERED_KEPT:
            _rendered.pop(next(iter(_rendered)), None)
        _rendered[key] = _render(versions, infos)
    return _rendered[key]


def _render(versions: list[Campaign], infos: list[series.WindowInfo]) -> Markup:
    campaign = versions[-1]
    items = top_items(campaign, infos)
    colors = dict(zip(items, trend_chart.legend_colors(len(items)), strict=True))
    lines: dict[tuple[str, int], trend_chart.Line] = {
        (item, v.version): trend_chart.Line(item, version=v.version, color=colors[item])
        for v in versions for item in items}
    for r in series.series_rows(infos, items) if items else []:
        point = trend_chart.Point(r["window"], r["estimate"], r["ci_low"], r["ci_high"], r["complete"])
        targets = [ln for (_, v), ln in lines.items() if v == r["version"]] if r["item"] is None \
            else [lines.get((str(r["item"]), r["version"]))]
        for ln in targets:
            if ln is not None:  # a withheld or pending window: a gap in every line of its version
                ln.points.append(point)
    counts = [trend_chart.Count(i.window, i.n, i.status == "released", i.version) for i in infos]
    current = tally.current_window(campaign)
    drawn = [ln for ln in lines.values() if ln.points]
    numeric = campaign.estimate_kind == "numeric"
    y_label = "mean value per window" if numeric else "estimated devices per window"
    chart = trend_chart.trend_chart(
        drawn, counts, campaign.window_seconds, lambda w: labels.window_label(campaign, w),
        lambda w: labels.tick_label(campaign, w), markers=markers(versions, infos, current),
        y_label=y_label, aria_label=f"Estimates over windows for {campaign.name}",
        value_text=charts.fmt_compact if campaign.estimate_kind == "numeric" else None)
    windows = len({i.window for i in infos})
    return Markup(render_template("operator_trend.html", c=campaign, chart=chart,
                                  legend=list(colors.items()), windows=windows,
                                  released=len({i.window for i in infos if i.status == "released"}),
                                  newest=TREND_WINDOWS, versions=len({i.version for i in infos}),
                                  in_progress=any(i.status == "released" and not i.complete for i in infos),
                                  numeric=campaign.estimate_kind == "numeric"))
