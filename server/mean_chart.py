"""The numeric campaign page's chart: the published mean of each window as a line through its
points with the 95 % CI band (``path.band``, ``path.mean``, ``circle.point``; one window: a point
with a CI whisker, ``g.whisker``), in the values' units; about 6 time labels, none repeated."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from ldptel.server.charts import _num, fmt_compact, nice_ticks, y_grid


@dataclass(frozen=True)
class MeanPoint:
    label: str  # the window's short name (axis)
    title: str  # the window's full name (tooltip)
    mean: float
    ci_low: float
    ci_high: float


def mean_chart(points: Sequence[MeanPoint], *, y_label: str = "mean", width: int = 720,
               height: int = 300, aria_label: str = "") -> Markup:
    """``points`` (oldest first) at evenly spaced x; the y axis spans every CI."""
    left, right, top, bottom = 64, width - 48, 20, height - 48
    y0 = min(p.ci_low for p in points)
    y1 = max(p.ci_high for p in points)
    pad = (y1 - y0) * 0.1 or max(abs(y1), 1.0) * 0.1
    y0, y1 = y0 - pad, y1 + pad
    step = (right - left) / max(len(points) - 1, 1)

    def sx(i: int) -> float:
        return left + i * step if len(points) > 1 else (left + right) / 2

    def sy(v: float) -> float:
        return bottom - (v - y0) / (y1 - y0) * (bottom - top)

    out = [f'<svg class="chart mean" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(aria_label)}">']
    out += y_grid([(t, fmt_compact(t)) for t in nice_ticks(y0, y1, target=5) if y0 <= t <= y1],
                  sy, left, right)
    if len(points) > 1:
        upper = [f"{_num(sx(i))},{_num(sy(p.ci_high))}" for i, p in enumerate(points)]
        lower = [f"{_num(sx(i))},{_num(sy(p.ci_low))}" for i, p in enumerate(points)]
        out.append(f'<path class="band" d="M{" L".join(upper)} L{" L".join(reversed(lower))} Z"/>')
        line = " L".join(f"{_num(sx(i))},{_num(sy(p.mean))}" for i, p in enumerate(points))
        out.append(f'<path class="mean" d="M{line}"/>')
    else:
        x = _num(sx(0))
        out.append(f'<g class="whisker"><line x1="{x}" y1="{_num(sy(points[0].ci_low))}" x2="{x}" '
                   f'y2="{_num(sy(points[0].ci_high))}"/></g>')
    every = max(1, -(-len(points) // 6))
    shown: set[str] = set()
    for i, p in enumerate(points):
        out.append(f'<circle class="point" cx="{_num(sx(i))}" cy="{_num(sy(p.mean))}" r="3">'
                   f'<title>{escape(p.title)}: {fmt_compact(p.mean)} ({fmt_compact(p.ci_low)} to '
                   f'{fmt_compact(p.ci_high)})</title></circle>')
        labelled = (i % every == 0 and len(points) - 1 - i >= every / 2) or i == len(points) - 1
        if labelled and p.label not in shown:  # each axis label once
            shown.add(p.label)
            out.append(f'<text class="tick" x="{_num(sx(i))}" y="{bottom + 16}" '
                       f'text-anchor="middle">{escape(p.label)}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>')
    out.append(f'<text class="axis-label" x="{_num((left + right) / 2)}" y="{height - 6}" '
               f'text-anchor="middle">{escape(y_label)} per window, with its 95% confidence band</text>')
    out.append("</svg>")
    return Markup("".join(out))
