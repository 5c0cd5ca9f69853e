"""Server-side SVG charts and number formatting for the operator pages (no JavaScript, no CDN).

- ``bar_chart(rows, …)``: horizontal bars, one row per item, from a zero line (negative raw
  estimates go left of it) with 95% CI whiskers; long labels are shortened with the full text in
  a tooltip. Class names the browser tests rely on: ``svg.chart.bars``, ``rect.bar`` (plus
  ``negative``), ``g.whisker``, ``line.zero``.
- ``cdf_chart(…)``: an estimated CDF as a step line with its 95% CI band (``path.cdf``,
  ``path.band``), quantile markers and an optional highlighted range.
- ``fmt_count``/``fmt_value``/``fmt_compact``/``fmt_pct``/``fmt_eps``/``fmt_rate``: how numbers are printed
  everywhere on the pages (thousands separators, a real minus sign, "—" for missing values).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from markupsafe import Markup, escape

MINUS = "\u2212"
DASH = "\u2014"
CHAR_W = 6.6  # average width of a 12 px system-ui character, for label truncation


# --- numbers -------------------------------------------------------------------------------

def _finite(x: float | None) -> TypeGuard[float]:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _sign(text: str) -> str:
    return MINUS + text[1:] if text.startswith("-") else text


def fmt_count(x: float | None) -> str:
    """A count of devices: rounded to a whole number, thousands separators, "−" for negatives,
    "—" when missing (e.g. ``1234.6`` → ``"1,235"``, ``-3.2`` → ``"−3"``)."""
    if not _finite(x):
        return DASH
    r = round(float(x))
    return _sign(f"{r + 0:,d}")  # + 0: no "−0"


def fmt_value(x: float | None, digits: int = 4) -> str:
    """A measured value (a mean, a sum): ``digits`` significant digits, thousands separators,
    "−" for negatives, "—" when missing (``2.3456`` → ``"2.346"``, ``123456.7`` → ``"123,457"``)."""
    if not _finite(x):
        return DASH
    v = float(x)
    places = max(0, digits - 1 - math.floor(math.log10(abs(v)))) if v else 0
    return _sign(f"{round(v, places) + 0:,.{places}f}")


def fmt_compact(x: float) -> str:
    """Axis labels: ``1500`` → ``"1.5k"``, ``-2000000`` → ``"−2M"``."""
    a = abs(x)
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= scale:
            return _sign(f"{x / scale:.3g}{suffix}")
    if a >= 1 or a == 0:
        return _sign(f"{x:.4g}")
    return _sign(f"{x:.2g}")


def fmt_pct(x: float | None, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage (``0.1234`` → ``"12.3%"``)."""
    if not _finite(x):
        return DASH
    return _sign(f"{100 * float(x):.{digits}f}%")


def fmt_eps(x: float | None) -> str:
    """ε with up to two decimals, trailing zeros dropped (``2.0`` → ``"2"``, ``1.0718`` → ``"1.07"``)."""
    if not _finite(x):
        return DASH
    return f"{float(x):.2f}".rstrip("0").rstrip(".")


def fmt_rate(x: float | None) -> str:
    """Reports per second: one decimal below 10, whole numbers above."""
    if not _finite(x):
        return DASH
    rate = float(x)
    return f"{rate:.1f}" if rate < 10 else f"{round(rate):,d}"


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 × 10^k) covering [lo, hi], about ``target`` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(target, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if (hi - lo) / (m * mag) <= target)
    start, end = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 10) + 0.0 for k in range(start, end + 1)]


def shorten(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters with an ellipsis."""
    return text if len(text) <= max_chars else text[: max(1, max_chars - 1)] + "…"


def display_label(value: object) -> str:
    """An item's label as shown: control characters made visible, empty strings marked."""
    text = str(value)
    if text == "":
        return "(empty string)"
    return "".join(ch if ch.isprintable() or ch == " " else f"\\x{ord(ch):02x}" for ch in text)


# --- bar chart -------------------------------------------------------------------------------

@dataclass
class Bar:
    """One row of a bar chart: the bar's value and, if known, its 95% CI."""

    label: str
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None


def _num(x: float) -> str:
    return f"{x:.1f}"


def bar_chart(bars: Sequence[Bar], *, unit: str = "devices", axis_label: str = "", whiskers: bool = True,
              width: int = 600, row_height: int = 32, header_px: int = 30, max_label_px: int = 220,
              sticky_axis: bool = False, aria_label: str = "",
              fmt: Callable[[float | None], str] = fmt_count) -> Markup:
    """Horizontal bars with a zero line and (``whiskers``) 95% CI whiskers, one row per ``Bar``
    in the given order. Tick labels on top; ``sticky_axis`` puts them (and ``axis_label``) in a
    separate header SVG (``div.axis-sticky``) that stays visible while a long chart scrolls.
    ``header_px`` and ``row_height`` match the estimates table's header and rows, so that the
    chart's rows line up with the table's beside it. ``fmt`` prints the values (default: counts)."""
    n = len(bars)
    labels = [display_label(b.label) for b in bars]
    label_px = int(min(max_label_px, max(80 if sticky_axis else 48,
                                         CHAR_W * max((len(t) for t in labels), default=4) + 16)))
    max_chars = max(4, int((label_px - 14) / CHAR_W))
    value_px = 60
    left, right = label_px, width - value_px
    top = 0 if sticky_axis else header_px
    plot_bottom = top + n * row_height
    height = plot_bottom + (4 if sticky_axis else 8) + (18 if axis_label and not sticky_axis else 0)

    points = [0.0]
    for b in bars:
        for x in (b.value, b.ci_low if whiskers else None, b.ci_high if whiskers else None):
            if _finite(x):
                points.append(float(x))
    lo, hi = min(points), max(points)
    if hi - lo <= 0:
        hi = lo + 1.0
    ticks = nice_ticks(lo, hi, target=max(2, min(6, (right - left) // 80)))
    dmin, dmax = ticks[0], ticks[-1]

    def sx(x: float) -> float:
        return left + (x - dmin) / (dmax - dmin) * (right - left)

    zero = sx(0.0)
    head = _sticky_axis(ticks, sx, width, header_px, axis_label, max_chars) if sticky_axis else []
    out: list[str] = head + [
        f'<svg class="chart bars" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(aria_label)}" '
        f'data-rows="{n}" data-zero-x="{_num(zero)}">'
    ]
    for t in ticks:
        tx = _num(sx(t))
        out.append(f'<line class="grid" x1="{tx}" y1="{max(top - 4, 0)}" x2="{tx}" y2="{plot_bottom}"/>')
        if not sticky_axis:
            out.append(f'<text class="tick" x="{tx}" y="{top - 10}" '
                       f'text-anchor="middle">{fmt_compact(t)}</text>')
    geometry = _RowGeometry(top, row_height, width, left, zero, sx, max_chars)
    for i, (b, label) in enumerate(zip(bars, labels, strict=True)):
        out.extend(_bar_row(i, b, label, geometry, unit, whiskers, fmt))
    out.append(f'<line class="zero" x1="{_num(zero)}" y1="{max(top - 4, 0)}" x2="{_num(zero)}" '
               f'y2="{plot_bottom}"/>')
    if axis_label and not sticky_axis:
        out.append(f'<text class="axis-label" x="{_num((left + right) / 2)}" y="{height - 4}" '
                   f'text-anchor="middle">{escape(axis_label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def _sticky_axis(ticks: list[float], sx: Callable[[float], float], width: int, header_px: int,
                 axis_label: str, max_chars: int) -> list[str]:
    """``bar_chart``'s tick labels (and axis label) in their own header SVG (``div.axis-sticky``)."""
    hh = header_px - 1  # + the div's 1 px border = the table header's height
    head = [f'<div class="axis-sticky"><svg class="chart axis" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {hh}" width="{width}" height="{hh}" aria-hidden="true">']
    if axis_label:
        head.append(f'<text class="axis-label" x="4" y="{hh - 10}">'
                    f'{escape(shorten(axis_label, max_chars - 2))}</text>')
    for t in ticks:
        head.append(f'<text class="tick" x="{_num(sx(t))}" y="{hh - 10}" '
                    f'text-anchor="middle">{fmt_compact(t)}</text>')
    head.append("</svg></div>")
    return head


@dataclass(frozen=True)
class _RowGeometry:
    """Where ``bar_chart``'s rows go: the plot's top, a row's height, the chart's width, the
    plot's left edge, the zero line's x, the value → x map, and the label's width in characters."""

    top: int
    row_height: int
    width: int
    left: int
    zero: float
    sx: Callable[[float], float]
    max_chars: int


def _bar_row(i: int, b: Bar, label: str, g: _RowGeometry, unit: str, whiskers: bool,
             fmt: Callable[[float | None], str]) -> list[str]:
    """One row of ``bar_chart``: its tooltip, stripe, label, bar, whisker and value."""
    y = g.top + i * g.row_height
    cy = y + g.row_height / 2
    bar_h = max(4, min(g.row_height - 10, 16))
    tip = f"{label}: {fmt(b.value)} {unit}"
    if whiskers and _finite(b.ci_low) and _finite(b.ci_high):
        tip += f" (95% CI {fmt(b.ci_low)} to {fmt(b.ci_high)})"
    out = [f'<g class="row" data-label="{escape(str(b.label))}"><title>{escape(tip)}</title>']
    if i % 2:
        out.append(f'<rect class="stripe" x="0" y="{y}" width="{g.width}" height="{g.row_height}"/>')
    out.append(f'<text class="label" x="{g.left - 8}" y="{_num(cy + 4)}" '
               f'text-anchor="end">{escape(shorten(label, g.max_chars))}</text>')
    if _finite(b.value):
        v = float(b.value)
        x0, x1 = sorted((g.zero, g.sx(v)))
        cls = "bar negative" if v < 0 else "bar"
        out.append(f'<rect class="{cls}" x="{_num(x0)}" y="{_num(cy - bar_h / 2)}" '
                   f'width="{_num(max(x1 - x0, 0.0))}" height="{bar_h}" data-value="{v!r}"/>')
    if whiskers and _finite(b.ci_low) and _finite(b.ci_high):
        wl, wh = _num(g.sx(float(b.ci_low))), _num(g.sx(float(b.ci_high)))
        c1, c2 = _num(cy - 5), _num(cy + 5)
        out.append(f'<g class="whisker"><line x1="{wl}" y1="{_num(cy)}" x2="{wh}" y2="{_num(cy)}"/>'
                   f'<line x1="{wl}" y1="{c1}" x2="{wl}" y2="{c2}"/>'
                   f'<line x1="{wh}" y1="{c1}" x2="{wh}" y2="{c2}"/></g>')
    out.append(f'<text class="value" x="{g.width - 4}" y="{_num(cy + 4)}" '
               f'text-anchor="end">{fmt(b.value)}</text></g>')
    return out


# --- CDF chart -------------------------------------------------------------------------------

def y_grid(ticks: Sequence[tuple[float, str]], sy: Callable[[float], float], left: float,
           right: float) -> list[str]:
    """SVG of horizontal grid lines at the ``(value, label)`` ticks, labelled left of ``left``."""
    out = []
    for v, label in ticks:
        out.append(f'<line class="grid" x1="{left}" y1="{_num(sy(v))}" x2="{right}" y2="{_num(sy(v))}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{_num(sy(v) + 4)}" '
                   f'text-anchor="end">{escape(label)}</text>')
    return out


@dataclass
class Marker:
    """A labelled vertical line on the CDF chart (e.g. a quantile)."""

    x: float
    label: str


def cdf_chart(xs: Sequence[float], cdf: Sequence[float], band_low: Sequence[float],
              band_high: Sequence[float], *, domain: tuple[float, float], markers: Sequence[Marker] = (),
              highlight: tuple[float, float] | None = None, x_label: str = "value",
              width: int = 720, height: int = 320, aria_label: str = "") -> Markup:
    """The estimated CDF F(x) = share of devices with a value ≤ x as a step line over ``xs``
    (ascending), its 95% CI band, ``markers`` and an optional shaded ``highlight`` = [lo, hi]."""
    left, right, top, bottom = 52, width - 16, 40, height - 44
    d0, d1 = domain
    if d1 <= d0:
        d1 = d0 + 1

    def sx(x: float) -> float:
        return left + (x - d0) / (d1 - d0) * (right - left)

    def sy(p: float) -> float:
        return bottom - min(max(p, 0.0), 1.0) * (bottom - top)

    out = [f'<svg class="chart cdf" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(aria_label)}">']
    out += y_grid([(p, f"{p:.0%}") for p in (0.0, 0.25, 0.5, 0.75, 1.0)], sy, left, right)
    for t in nice_ticks(d0, d1, target=8):
        if d0 <= t <= d1:
            x = _num(sx(t))
            out.append(f'<line class="grid" x1="{x}" y1="{top}" x2="{x}" y2="{bottom}"/>')
            out.append(f'<text class="tick" x="{x}" y="{bottom + 16}" '
                       f'text-anchor="middle">{fmt_compact(t)}</text>')
    if highlight is not None:
        pad = 0.5 if d1 - d0 < 400 else 0.0  # small domains: cover whole value cells
        h0, h1 = sx(highlight[0] - pad), sx(highlight[1] + pad)
        h0, h1 = max(h0, left), min(h1, right)
        out.append(f'<rect class="highlight" x="{_num(h0)}" y="{top}" width="{_num(max(h1 - h0, 1.5))}" '
                   f'height="{bottom - top}"/>')
    if len(xs):
        def steps(values: Sequence[float]) -> list[tuple[float, float]]:
            pts: list[tuple[float, float]] = []
            for i, (x, v) in enumerate(zip(xs, values, strict=True)):
                if i:
                    pts.append((sx(x), pts[-1][1]))
                pts.append((sx(x), sy(v)))
            pts.append((sx(d1), pts[-1][1]))
            return pts

        upper, lower = steps(band_high), steps(band_low)
        band = "M" + " L".join(f"{_num(x)},{_num(y)}" for x, y in upper)
        band += " L" + " L".join(f"{_num(x)},{_num(y)}" for x, y in reversed(lower)) + " Z"
        out.append(f'<path class="band" d="{band}"/>')
        line = "M" + " L".join(f"{_num(x)},{_num(y)}" for x, y in steps(cdf))
        out.append(f'<path class="cdf" d="{line}"/>')
    ends = [-math.inf, -math.inf]  # right end of the last label on each of two lines
    for m in sorted(markers, key=lambda m: m.x):
        x = _num(sx(m.x))
        half = CHAR_W * 0.92 * len(m.label) / 2 + 4
        tier = 0 if sx(m.x) - half > ends[0] else (1 if sx(m.x) - half > ends[1] else 0)
        ends[tier] = sx(m.x) + half
        ly = top - 6 - 14 * tier
        out.append(f'<g class="marker"><line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}"/>'
                   f'<text x="{x}" y="{ly}" text-anchor="middle">{escape(m.label)}</text></g>')
    out.append(f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>')
    out.append(f'<text class="axis-label" x="{_num((left + right) / 2)}" y="{height - 6}" '
               f'text-anchor="middle">{escape(x_label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))
