"""The campaign page's trend chart (server-side SVG, like ``server/charts.py``): the estimates of a
few items (or a numeric campaign's mean) over windows as lines with their 95% CI bands, and the
reports counted per window as bars below, on one time axis (a window is drawn at its start;
windows without reports are gaps). The chart runs across campaign versions: each version's points
form their own line segments (estimates of two versions are never joined or summed; a window
with reports of both has a point of each, side by side), and a dashed marker with a label
("v2: ε 2 → 1") stands at the first window of each new version.

It is drawn ``WIDTH`` wide and scales to its box (the page makes it as wide as its card), with
at least ``X_TICKS`` time labels when there are that many windows, one colour per line (the
``fill``/``stroke`` attribute of each element: the pages' CSP allows no inline style, and no
stylesheet rule may set the fill or stroke of ``circle.point``, ``path.trend-line`` or
``path.trend-band``, or it would win over the attribute).

Class names the browser tests rely on: ``svg.chart.trend``, ``path.trend-band`` and
``path.trend-line`` (``data-item``, ``data-version``), ``circle.point``, ``rect.n-bar``
(``data-window``, ``data-n``, ``data-version``; plus ``withheld`` below the release threshold),
``g.version-marker`` (``data-version``), ``text.x-tick``. A point of the window in progress (not
complete: its numbers still grow) is drawn hollow: ``circle.point.in-progress``, filled white with
the line's colour as stroke, and its tooltip says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

from ldptel.server.charts import _finite, _num, fmt_compact, fmt_count, nice_ticks

PALETTE = ("#2f6fde", "#e0752d", "#1a9b6c", "#b03fb5", "#c9a100", "#5b6b86")
WIDTH, HEIGHT = 1100, 380
X_TICKS = 6
MARKER_CHAR_PX = 7.5  # a marker label's width per character (bold 12 px; a safe overestimate)


@dataclass
class Point:
    """One window's estimate of an item (None where the window is withheld or pending)."""

    window: int
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    complete: bool = True  # False: the window in progress (drawn hollow)


@dataclass
class Line:
    label: str
    points: list[Point] = field(default_factory=list)
    version: int = 1
    color: str = PALETTE[0]


@dataclass
class Count:
    """Reports counted in a window (of one version), and whether its estimates are released."""

    window: int
    n: int
    released: bool
    version: int = 1


@dataclass
class Marker:
    """The first window of a new campaign version and what changed ("v2: ε 2 → 1")."""

    window: int
    version: int
    label: str


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


def x_ticks(windows: Sequence[int], step: int, wanted: int = X_TICKS) -> list[int]:
    """About ``wanted`` evenly spaced window starts from the first to the last (every window when
    there are at most one more)."""
    if not windows:
        return []
    w0, w1 = min(windows), max(windows)
    count = (w1 - w0) // step + 1
    if count <= wanted + 1:  # every one (one more than wanted: every other one would be too few)
        return [w0 + i * step for i in range(count)]
    every = -(-(count - 1) // (wanted - 1))  # ceil: at most ``wanted`` ticks, the last at w1
    ticks = list(range(w0, w1 + 1, every * step))
    if w1 - ticks[-1] >= every * step / 2:
        ticks.append(w1)
    else:
        ticks[-1] = w1
    return ticks


def trend_chart(lines: Sequence[Line], counts: Sequence[Count], window_seconds: int,
                window_label: Callable[[int], str], tick_label: Callable[[int], str] | None = None, *,
                markers: Sequence[Marker] = (), y_label: str = "estimated devices per window",
                value_text: Callable[[float], str] | None = None, aria_label: str = "") -> Markup:
    """``lines`` (each with its colour) with CI bands over the windows of ``counts`` and of
    ``markers``, a bar per (window, version) of ``counts`` below, a marker per new version;
    ``window_label`` names a window in tooltips, ``tick_label`` on the time axis, ``value_text``
    a value in tooltips (default: "1,234 devices")."""
    width, height = WIDTH, HEIGHT if lines else 190
    tick_label = tick_label or window_label
    left, right, top = 56, width - 14, 22
    lines_bottom = height - 136 if lines else top
    bars_top, bars_bottom = (lines_bottom + 52 if lines else top + 30), height - 30
    windows = sorted({c.window for c in counts} | {m.window for m in markers})
    w0, w1 = (windows[0], windows[-1]) if windows else (0, 1)
    step = max(window_seconds, 1)
    span = max(w1 - w0, step)
    slot = (right - left) / (span / step + 1)  # one window's width on the axis

    def sx(w: float) -> float:
        return left + slot / 2 + (w - w0) / span * (right - left - slot)

    out = [f'<svg class="chart trend" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" preserveAspectRatio="xMinYMin meet" role="img" '
           f'aria-label="{escape(aria_label)}" data-windows="{len({c.window for c in counts})}" '
           f'data-lines="{len({ln.label for ln in lines})}">']
    if lines:
        out += _lines(lines, sx, top, lines_bottom, left, right, window_label, y_label,
                      value_text or (lambda v: f"{fmt_count(v)} devices"))
    out += _bars(counts, sx, slot, bars_top, bars_bottom, left, window_label)
    for m in markers:
        at = sx(m.window) - slot / 2
        x = _num(at)
        # a label that would run past the right edge is drawn to the left of its line
        end = at + 4 + MARKER_CHAR_PX * len(m.label) > width
        text = (f'<text x="{_num(at - 4)}" y="{top - 10 + 12}" text-anchor="end">' if end
                else f'<text x="{_num(at + 4)}" y="{top - 10 + 12}">')
        out.append(f'<g class="version-marker" data-version="{m.version}"><line x1="{x}" y1="{top - 8}" '
                   f'x2="{x}" y2="{bars_bottom}"/>{text}{escape(m.label)}</text><title>{escape(m.label)}: '
                   f'from {escape(window_label(m.window))}</title></g>')
    out.append(f'<line class="axis" x1="{left}" y1="{bars_bottom}" x2="{right}" y2="{bars_bottom}"/>')
    ticks = x_ticks([c.window for c in counts] + [m.window for m in markers], step)
    for t in ticks:
        edge = len(ticks) > 1 and t in (w0, w1)
        anchor = ("start" if t == w0 else "end") if edge else "middle"
        tx = float(left if anchor == "start" else right if anchor == "end" else sx(t))
        out.append(f'<text class="tick x-tick" x="{_num(tx)}" y="{height - 10}" '
                   f'text-anchor="{anchor}">{escape(tick_label(t))}</text>')
    out.append("</svg>")
    axis = y_axis(lines, top, lines_bottom, left, height) if lines else Markup("")
    return axis + Markup("".join(out))


Scale = Callable[[float], float]


def _y_scale(lines: Sequence[Line], top: float, bottom: float) -> tuple[list[float], Scale]:
    """The value ticks of ``lines`` and the value → y map."""
    values = [v for ln in lines for p in ln.points for v in (p.estimate, p.ci_low, p.ci_high) if _finite(v)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if lo >= 0 and hi > 0 and lo < hi / 3:
        lo = 0.0  # counts: from zero, unless every value sits far above it (a mean)
    ticks = nice_ticks(lo, hi if hi > lo else lo + 1, target=5)

    def sy(v: float) -> float:
        return bottom - (v - ticks[0]) / (ticks[-1] - ticks[0]) * (bottom - top)

    return ticks, sy


def y_axis(lines: Sequence[Line], top: float, bottom: float, left: float, height: float) -> Markup:
    """The value axis alone (``svg.chart.trend-y-axis``, same scale as the chart): on a phone the
    chart scrolls sideways inside its box and the page keeps this one at the box's left edge
    (``position: sticky``; issue 35: at 390 px the trend lost its y-axis). Hidden on wider screens."""
    ticks, sy = _y_scale(lines, top, bottom)
    out = [f'<svg class="chart trend-y-axis" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {left} {height}" width="{left}" height="{height}" aria-hidden="true">'
           f'<rect x="0" y="0" width="{left}" height="{_num(bottom + 6)}" fill="#ffffff"/>']
    for t in ticks:
        out.append(f'<text class="tick" x="{left - 6}" y="{_num(sy(t) + 4)}" '
                   f'text-anchor="end">{fmt_compact(t)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def _lines(lines: Sequence[Line], sx: Callable[[float], float], top: float, bottom: float, left: float,
           right: float, window_label: Callable[[int], str], y_label: str,
           value_text: Callable[[float], str]) -> list[str]:
    ticks, sy = _y_scale(lines, top, bottom)

    out = []
    several = len({ln.version for ln in lines}) > 1
    for t in ticks:
        y = _num(sy(t))
        out.append(f'<line class="grid" x1="{left}" y1="{y}" x2="{right}" y2="{y}"/>'
                   f'<text class="tick" x="{left - 6}" y="{_num(sy(t) + 4)}" '
                   f'text-anchor="end">{fmt_compact(t)}</text>')
    out.append(f'<text class="axis-label" x="{left}" y="{bottom + 16}">{escape(y_label)} '
               f'(95% CI bands)</text>')
    for ln in lines:
        item, color = escape(ln.label), ln.color
        open_windows = {p.window for p in ln.points if not p.complete}
        for est in _runs(ln.points):
            upper = [(sx(w), sy(h)) for w, _, _, h in est]
            lower = [(sx(w), sy(lo)) for w, _, lo, _ in reversed(est)]
            if len(est) > 1:
                out.append(f'<path class="trend-band" data-item="{item}" data-version="{ln.version}" '
                           f'fill="{color}" d="{_path(upper + lower)} Z"/>')
            out.append(f'<path class="trend-line" data-item="{item}" data-version="{ln.version}" '
                       f'stroke="{color}" d="{_path([(sx(w), sy(e)) for w, e, _, _ in est])}"/>')
            for w, e, lo, hi in est:
                name = f"{ln.label} (v{ln.version})" if several else ln.label
                low, high = value_text(lo).split(" ")[0], value_text(hi).split(" ")[0]
                tip = f"{name}, {window_label(w)}: {value_text(e)} (95% CI {low} to {high})"
                if w in open_windows:
                    out.append(f'<circle class="point in-progress" cx="{_num(sx(w))}" cy="{_num(sy(e))}" '
                               f'r="4" fill="#ffffff" stroke="{color}" stroke-width="2"><title>'
                               f'{escape(tip)}; in progress: not complete, still growing</title></circle>')
                    continue
                out.append(f'<circle class="point" cx="{_num(sx(w))}" cy="{_num(sy(e))}" r="3" '
                           f'fill="{color}"><title>{escape(tip)}</title></circle>')
    return out


def _bars(counts: Sequence[Count], sx: Callable[[float], float], slot: float, top: float, bottom: float,
          left: float, window_label: Callable[[int], str]) -> list[str]:
    """A bar per (window, version); the versions of one window side by side."""
    n_max = max([c.n for c in counts] + [1])
    out = [f'<text class="axis-label" x="{left}" y="{top - 8}">reports per window '
           f'(max {fmt_count(n_max)})</text>']
    per_window: dict[int, list[Count]] = {}
    for c in counts:
        per_window.setdefault(c.window, []).append(c)
    for window, group in per_window.items():
        bar_w = max(1.0, min(slot * 0.7, 40.0)) / len(group)
        for k, c in enumerate(sorted(group, key=lambda c: c.version)):
            h = (bottom - top) * c.n / n_max
            x = sx(window) - bar_w * len(group) / 2 + k * bar_w
            cls = "n-bar" if c.released else "n-bar withheld"
            tip = (f"{window_label(c.window)}: {fmt_count(c.n)} reports of version {c.version}"
                   + ("" if c.released else " (withheld)"))
            out.append(f'<rect class="{cls}" x="{_num(x)}" y="{_num(bottom - h)}" width="{_num(bar_w)}" '
                       f'height="{_num(max(h, 0.5))}" data-window="{c.window}" data-n="{c.n}" '
                       f'data-version="{c.version}"><title>{escape(tip)}</title></rect>')
    return out


def legend_colors(n: int) -> list[str]:
    """The colours of the first ``n`` items (the page's legend)."""
    return [PALETTE[i % len(PALETTE)] for i in range(n)]
