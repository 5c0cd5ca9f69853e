"""The numeric campaign page's numbers: the released window's mean and sum (``means.mean``, the
API's document) and the chart of the published means of up to ``MEAN_WINDOWS`` windows up to it
(each window's own publication; windows below ``min_reports`` or not yet published are left out)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ldptel import tally
from ldptel.config import Campaign
from ldptel.server import means
from ldptel.server.app import state
from ldptel.server.documents import read_published
from ldptel.server.mean_chart import MeanPoint, mean_chart
from ldptel.server.pages import labels

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
                short = datetime.fromtimestamp(w, UTC).strftime("%b %d %H:%M") if w else "all"
                points.append(MeanPoint(short, labels.window_label(c, w), m["estimate"], m["ci_low"],
                                        m["ci_high"]))
    return points


def numeric_context(c: Campaign, window: int, a: Any) -> dict:
    """Mean, sum, the mechanism's range and the chart of means over windows."""
    doc = means.mean(c, window)
    points = mean_points(c, window)
    chart = mean_chart(points, y_label="mean value", aria_label=f"Mean of {c.name} per window") \
        if points else None
    return {"mean": doc["mean"], "sum": doc["sum"], "chart": chart, "windows": len(points),
            "lower": doc["lower"], "upper": doc["upper"], "mechanism": doc["mechanism"]}
