"""The campaign page's trend view: the estimates of the top items (a numeric campaign: its mean)
over the newest windows of every version of the campaign's current window length (lines with
95% CI bands, a marker and label at each version change), and the reports counted per window,
from the same publications and rows as ``GET /series?version=all`` (``server/series.py``);
nothing is decoded here. Rendered once per process and per (campaign, windows' state) — the
ETag of ``/series`` — and sent with every live update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flask import render_template
from markupsafe import Markup

from ldptel import keys
from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.builder import UNIQUE_LABELS
from ldptel.server import charts, series, trend_chart
from ldptel.server.pages import labels
from ldptel.store import tally

TREND_ITEMS = 5  # lines: the most-counted items of the newest released window
TREND_WINDOWS = 60  # newest windows drawn
_rendered: dict[tuple[str, str], Markup] = {}
RENDERED_KEPT = 64
CHANGE_NAMES = {"epsilon": "ε", "epsilon_inf": "ε∞", "domain_size": "d", "domain": "domain",
                "oracle": "oracle", "mechanism": "mechanism", "method": "method"}


def top_items(campaign: Campaign, infos: list[series.WindowInfo]) -> list[str]:
    """The ``TREND_ITEMS`` items with the largest estimates in the newest released window of the
    newest version that has one; a numeric campaign's line is its mean; none for range campaigns
    (their trend is the reports per window); a ``unique_devices`` campaign's line is its devices
    with the event (``at_least_once``)."""
    if campaign.estimate_kind == "numeric":
        return ["mean"]
    newest = next((i for i in reversed(infos) if i.pub is not None and i.pub.doc is not None), None)
    if newest is None or campaign.kind == "range":
        return []
    if campaign.kind == "unique_devices":  # what it estimates: the devices with the event
        return [UNIQUE_LABELS[1]]
    assert newest.pub is not None and newest.pub.doc is not None
    ranked = sorted(newest.pub.doc["items"], key=lambda r: -(r["estimate"] or 0.0))
    return [str(r["value"]) for r in ranked[:TREND_ITEMS]]


SKIPPED = ("version", "window_seconds")  # public keys that say nothing about a change


def _params(c: Campaign) -> dict[str, Any]:
    return {k: v for k, v in c.public().items() if k not in SKIPPED}


def change_label(before: Campaign, after: Campaign, earlier: Sequence[Campaign] = ()) -> str:
    """"v2: ε 2 → 1": what changed from one version to the next (its public parameters); a
    version equal to one of ``earlier`` (the versions before ``before``) is a rollback: "v3:
    rollback to v1 (ε 1 → 2)"."""
    old, new = _params(before), _params(after)
    parts = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, list) or isinstance(b, list):
            parts.append(f"{CHANGE_NAMES.get(key, key)} {len(a or [])} → {len(b or [])} items")
        else:
            parts.append(f"{CHANGE_NAMES.get(key, key)} {_short(a)} → {_short(b)}")
    text = ", ".join(parts[:2]) + (" …" if len(parts) > 2 else "") or "new version"
    same = next((e.version for e in reversed(earlier) if _params(e) == new), None)
    if same is not None:
        return f"v{after.version}: rollback to v{same} ({text})"
    return f"v{after.version}: {text}"


def _short(value: object) -> str:
    if isinstance(value, float):
        return charts.fmt_eps(value)
    text = "–" if value is None else str(value)
    return text if len(text) <= 12 else text[:11] + "…"


def markers(versions: list[Campaign], infos: list[series.WindowInfo],
            current: int) -> list[trend_chart.Marker]:
    """A marker where each version after the first starts, if it falls in the drawn range: the
    window its predecessor was superseded in (the version's creation, issue 35: a version without
    reports in the drawn windows was marked at the right edge, after newer versions' markers), or
    its first window with reports if that is earlier; the current window if neither is known."""
    first = min((i.window for i in infos), default=current)
    out = []
    for k, (before, after) in enumerate(zip(versions, versions[1:], strict=False)):
        known = [i.window for i in infos if i.version == after.version]
        if before.superseded_at is not None and after.window_seconds:
            known.append(keys.window_start(before.superseded_at, after.window_seconds))
        start = min(known, default=current)
        if start >= first:
            out.append(trend_chart.Marker(start, after.version, change_label(before, after, versions[:k])))
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
    unique = campaign.kind == "unique_devices"
    y_label = "mean value per window" if numeric else "estimated devices per window"
    marked = markers(versions, infos, current)
    chart = trend_chart.trend_chart(
        drawn, counts, campaign.window_seconds, lambda w: labels.window_label(campaign, w),
        lambda w: labels.tick_label(campaign, w), markers=marked,
        y_label=y_label, aria_label=f"Estimates over windows for {campaign.name}",
        value_text=charts.fmt_compact if campaign.estimate_kind == "numeric" else None)
    windows = len({i.window for i in infos})
    return Markup(render_template("operator_trend.html", c=campaign, chart=chart,
                                  legend=[("devices with the event" if unique else item, color)
                                          for item, color in colors.items()], windows=windows,
                                  released=len({i.window for i in infos if i.status == "released"}),
                                  newest=TREND_WINDOWS,
                                  versions=len({i.version for i in infos} | {m.version for m in marked}),
                                  in_progress=any(i.status == "released" and not i.complete for i in infos),
                                  numeric=campaign.estimate_kind == "numeric", unique=unique))
