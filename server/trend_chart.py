"""The campaign page's trend chart (server-side SVG, like ``server/charts.py``): the estimates of a
few items over windows as lines with their 95% CI bands, and the reports counted per window as
bars below, on one time axis (a window is drawn at its start; windows without reports are gaps).

Class names the browser tests rely on: ``svg.chart.trend``, ``path.trend-band`` and
``path.trend-line`` (``data-item``), ``circle.point``, ``rect.n-bar`` (``data-window``,
``data-n``; plus ``withheld`` below the release threshold).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

from ldptel.server.charts import _finite, _num, fmt_compact, fmt_count, nice_ticks

PALETTE = ("#2f6fde", "#e0752d", "#1a9b6c", "#b03fb5", "#c9a100", "#5b6b86")


@dataclass
class Point:
    """One window's estimate of an item (None where the window is withheld or pending)."""

    window: int
    estimate: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass
class Line:
    label: str
    points: list[Point] = field(default_factory=list)


@dataclass
class Count:
    """Reports counted in a window, and whether its estimates are released."""

    window: int
    n: int
    released: bool


def _path(pts: Sequence[tuple[float, float]]) -> str:
    return "M" + " L".join(f"{_num(x)},{_num(y)}" for x, y in pts)


def _runs(points: Sequence[Point]) -> list[list[tuple[int, float, float, float]]]:
    """(window, estimate, CI low, CI high) of consecutive points with all three (a withheld window
    breaks a line)."""
    runs: list[list[tuple[int, float, float, float]]] = [[]]
    for p in points:
        if p.estimate is not None and p.ci_low is not None and p.ci_high is not None \
                and _finite(p.estimate) and _finite(p.ci_low) and _finite(p.ci_high):
            runs[-1].append((p.window, float(p.estimate), float(p.ci_low), float(p.ci_high)))
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def trend_chart(lines: Sequence[Line], counts: Sequence[Count], window_seconds: int,
                window_label: Callable[[int], str], *, width: int = 720, height: int = 380,
                aria_label: str = "") -> Markup:
    """Lines of ``lines`` (colours ``PALETTE`` in order) with CI bands over the windows of
    ``counts``, and a bar per window of ``counts`` below (``window_label`` names a window in the
    tooltips and the first and last tick)."""
    left, right, top = 56, width - 14, 14
    lines_bottom = height - 136
    bars_top, bars_bottom = lines_bottom + 52, height - 24
    windows = [c.window for c in counts]
    w0, w1 = (min(windows), max(windows)) if windows else (0, 1)
    step = max(window_seconds, 1)
    span = max(w1 - w0, step)
    slot = (right - left) / (span / step + 1)  # one window's width on the axis

    def sx(w: float) -> float:
        return left + slot / 2 + (w - w0) / span * (right - left - slot)

    values = [v for ln in lines for p in ln.points for v in (p.estimate, p.ci_low, p.ci_high) if _finite(v)]
    lo, hi = min([0.0, *values]), max([1.0, *values])
    ticks = nice_ticks(lo, hi, target=5)

    def sy(v: float) -> float:
        return lines_bottom - (v - ticks[0]) / (ticks[-1] - ticks[0]) * (lines_bottom - top)

    out = [f'<svg class="chart trend" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(aria_label)}" '
           f'data-windows="{len(counts)}" data-lines="{len(lines)}">']
    for t in ticks:
        y = _num(sy(t))
        out.append(f'<line class="grid" x1="{left}" y1="{y}" x2="{right}" y2="{y}"/>'
                   f'<text class="tick" x="{left - 6}" y="{_num(sy(t) + 4)}" '
                   f'text-anchor="end">{fmt_compact(t)}</text>')
    out.append(f'<text class="axis-label" x="{left}" y="{lines_bottom + 16}">estimated devices per window '
               f'(95% CI bands)</text>')
    for i, ln in enumerate(lines):
        color = PALETTE[i % len(PALETTE)]
        for est in _runs(ln.points):
            upper = [(sx(w), sy(h)) for w, _, _, h in est]
            lower = [(sx(w), sy(lo)) for w, _, lo, _ in reversed(est)]
            if len(est) > 1:
                out.append(f'<path class="trend-band" data-item="{escape(ln.label)}" fill="{color}" '
                           f'd="{_path(upper + lower)} Z"/>')
            out.append(f'<path class="trend-line" data-item="{escape(ln.label)}" stroke="{color}" '
                       f'd="{_path([(sx(w), sy(e)) for w, e, _, _ in est])}"/>')
            for w, e, lo, hi in est:
                tip = (f"{ln.label}, {window_label(w)}: {fmt_count(e)} devices "
                       f"(95% CI {fmt_count(lo)} to {fmt_count(hi)})")
                cx, cy = _num(sx(w)), _num(sy(e))
                out.append(f'<circle class="point" cx="{cx}" cy="{cy}" r="3" fill="{color}">'
                           f'<title>{escape(tip)}</title></circle>')
    n_max = max([c.n for c in counts] + [1])
    bar_w = max(1.0, min(slot * 0.7, 40.0))
    out.append(f'<text class="axis-label" x="{left}" y="{bars_top - 8}">reports per window '
               f'(max {fmt_count(n_max)})</text>')
    for c in counts:
        h = (bars_bottom - bars_top) * c.n / n_max
        cls = "n-bar" if c.released else "n-bar withheld"
        tip = f"{window_label(c.window)}: {fmt_count(c.n)} reports" + ("" if c.released else " (withheld)")
        out.append(f'<rect class="{cls}" x="{_num(sx(c.window) - bar_w / 2)}" y="{_num(bars_bottom - h)}" '
                   f'width="{_num(bar_w)}" height="{_num(max(h, 0.5))}" data-window="{c.window}" '
                   f'data-n="{c.n}"><title>{escape(tip)}</title></rect>')
    out.append(f'<line class="axis" x1="{left}" y1="{bars_bottom}" x2="{right}" y2="{bars_bottom}"/>')
    if windows:
        first, last = window_label(w0), window_label(w1)
        out.append(f'<text class="tick" x="{left}" y="{height - 6}">{escape(first)}</text>')
        if w1 != w0:
            out.append(f'<text class="tick" x="{right}" y="{height - 6}" '
                       f'text-anchor="end">{escape(last)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def legend_colors(n: int) -> list[str]:
    """The colours of the first ``n`` lines (the page's legend)."""
    return [PALETTE[i % len(PALETTE)] for i in range(n)]

