"""The numeric campaign page's numbers: the released window's mean and sum (``means.mean``, the
API's document) and, for a campaign of one window (``window = "all"``), its mean with the CI (a
campaign with windows draws the mean of each in the trend, ``server/pages/trend.py``). The chart
takes the published means of up to ``MEAN_WINDOWS`` windows up to the window shown (windows below
``min_reports`` or not yet published are left out)."""

from __future__ import annotations

from typing import Any

from ldptel.campaigns.config import Campaign
from ldptel.server import means
from ldptel.server.app import state
from ldptel.server.documents import read_published
from ldptel.server.mean_chart import MeanPoint, mean_chart
from ldptel.server.pages import labels
from ldptel.server.pages.breakdown import breakdown_context
from ldptel.store import tally

MEAN_WINDOWS = 48


def mean_points(c: Campaign, window: int) -> list[MeanPoint]:
    """The published means of the newest ``MEAN_WINDOWS`` windows up to ``window``, oldest first."""
    windows = sorted(w for w in tally.window_counts(state().redis, c) if w <= window)[-MEAN_WINDOWS:]
    points = []
    for w in windows:
        pub = read_published(c, w)
        if pub is not None and pub.doc is not None and pub.doc.get("mean"):
            m = pub.doc["mean"]
            if None not in (m["estimate"], m["ci_low"], m["ci_high"]):
                points.append(MeanPoint(labels.tick_label(c, w), labels.window_label(c, w),
                                        m["estimate"], m["ci_low"], m["ci_high"]))
    return points


def numeric_context(c: Campaign, window: int, a: Any) -> dict[str, Any]:
    """Mean, sum, the mechanism's range and the chart of means over windows."""
    doc = means.mean(c, window)
    # a campaign with windows draws its means in the trend (server/pages/trend.py), with its
    # versions; the panel's own chart is for a campaign of one window ("all")
    points = [] if c.window_seconds else mean_points(c, window)
    chart = mean_chart(points, y_label="mean value", aria_label=f"Mean of {c.name} per window") \
        if points else None
    return {"mean": doc["mean"], "sum": doc["sum"], "chart": chart, "windows": len(points),
            "lower": doc["lower"], "upper": doc["upper"], "mechanism": doc["mechanism"],
            "grid_points": doc.get("grid_points"),  # a shuffled campaign's values rounded to a grid
            "breakdown": breakdown_context(c, doc, getattr(a, "compare", None))}
