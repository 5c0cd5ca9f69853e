"""Display strings of a campaign: kind, mechanism, domain, what its ε means, window names, times."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from markupsafe import Markup

from ldptel.campaigns.config import Campaign
from ldptel.durations import duration_label
from ldptel.privacy.modes import is_shuffled
from ldptel.server import charts
from ldptel.server.pages import mode_labels

KIND_LABELS = {"frequency": "Frequency", "heavy_hitters": "Heavy hitters", "range": "Range",
               "numeric": "Numeric (mean)",
               "unique_devices": "Unique devices (one report per device and window)",
               "per_device_histogram": "Per-device histogram (each device's most common value per window)",
               "per_device_count": "Per-device count (events per device and window, clipped)"}
NUMERIC_LABELS = {"duchi": "Duchi et al. (one bit)", "piecewise": "Piecewise (Wang et al.)",
                  "hybrid": "Hybrid (Wang et al.)", "1bitmean": "1BitMean"}
ORACLE_LABELS = {"grr": "GRR (direct encoding)", "sue": "SUE (basic RAPPOR)", "oue": "OUE (optimized unary)",
                 "olh": "OLH (local hashing)", "hadamard": "Hadamard response"}


def mechanism_label(c: Campaign) -> str:
    """The randomizer and its main parameters."""
    if is_shuffled(c) and c.kind in ("range", "numeric"):
        return mode_labels.index_label(c)
    if c.kind == "unique_devices":
        return "Randomized response on one bit (did the event happen in the window)"
    if c.estimate_kind == "numeric":
        name = NUMERIC_LABELS.get(c.params["mechanism"], c.params["mechanism"])
        if c.params.get("memoize"):
            name += f" (memoized, {c.params['buckets']} buckets)"
        return cast("str", name)
    if c.kind == "heavy_hitters":
        return f"Prefix tree + OLH ({c.params.get('levels')} levels)"
    if c.kind == "range":
        if c.params.get("method") == "hierarchical":
            b = c.params.get("branching")
            return "Hierarchical tree" + (f" (B = {b})" if b else "")
        return "Haar wavelet"
    if c.oracle == "rappor":
        p = c.params
        return f"RAPPOR ({p['bloom_bits']}-bit Bloom, {p['hashes']} hashes, {p['cohorts']} cohorts)"
    return ORACLE_LABELS.get(c.oracle or "", (c.oracle or "").upper())


def domain_label(c: Campaign) -> str:
    """What devices report: labels, items, strings or values."""
    if c.kind == "unique_devices":
        return "whether the event happened at least once in the window"
    if c.kind == "per_device_count":
        return f"events per window, clipped to {charts.fmt_count(c.params['upper'])}"
    if c.kind == "numeric":
        return (f"real values from {charts.fmt_count(c.params['lower'])} to "
                f"{charts.fmt_count(c.params['upper'])} (clipped on the device)")
    if c.kind == "heavy_hitters":
        return f"strings up to {c.params.get('max_length')} bytes"
    if c.kind == "range":
        return f"values 0 to {charts.fmt_count((c.domain_size or 1) - 1)}"
    if c.oracle == "rappor":
        return f"{len(c.params['candidates']):,} candidate strings"
    if c.domain is not None:
        return f"{len(c.domain):,} labels"
    return f"{c.domain_size:,} items (0 to {c.domain_size - 1:,})" if c.domain_size else ""


def epsilon_note(c: Campaign) -> Markup:
    """What ε means for this campaign, in plain words."""
    if is_shuffled(c):
        return mode_labels.epsilon_note(c)
    eps = float(c.epsilon or 0)
    e = charts.fmt_eps(eps)
    ratio = math.exp(eps)
    ratio_s = f"{ratio:,.1f}" if ratio < 100 else f"{ratio:,.0f}"
    what = {"heavy_hitters": "one prefix of its string",
            "range": "one coefficient of its value"}.get(c.kind, "its value")
    text = Markup(
        "Each device sends {what}, randomized on the device with ε = {e} per report. Whatever a device's "
        "true value, no report is more than e<sup>{e}</sup> ≈ {ratio} times as likely under it as under "
        "any other value, so a single report says little about its sender. Only counts over many devices "
        "carry signal; the error bars show the noise that remains. Smaller ε means more privacy and wider "
        "error bars.").format(what=what, e=e, ratio=ratio_s)
    return text + " " + over_time_note(c)


def over_time_note(c: Campaign) -> Markup:
    """What a device reveals over many reports (``Campaign.privacy``): the reports-per-window cap,
    and ε∞ however long it reports (memoized) or ε adding up over windows (fresh reports)."""
    p = c.privacy()
    n, eps = p["reports_per_window"], p["epsilon_report"]
    unit = {"1h": "hour", "1d": "day"}.get(c.window, f"{c.window} window")
    period = "in all" if c.window == "all" else f"per {unit}"
    text = Markup("The SDK sends at most {n} report{s} per device {period}.").format(
        n=n, s="" if n == 1 else "s", period=period)
    if p["memoize"] and p["epsilon_inf"] is not None:
        text += Markup(" Reports of the same value reuse the same permanent noise, so a device that keeps "
                       "its value reveals at most ε∞ = {inf} however long it reports;").format(
                           inf=charts.fmt_eps(p["epsilon_inf"]))
        if p["epsilon_lifetime"] is not None:
            life = charts.fmt_eps(p["epsilon_lifetime"])
            return text + Markup(" one whose value changes reveals at most {life} over its whole "
                                 "life.").format(life=life)
        return text + " each further distinct value it reports costs another ε∞."
    total = charts.fmt_eps(n * eps)
    if c.window == "all":
        return text + Markup(" Its reports together reveal at most ε = {t}.").format(t=total)
    return text + Markup(" Every report is fresh noise, so a device reveals up to ε = {t} {period}, and that "
                         "adds up over the windows it reports in (the SDK's lifetime_epsilon caps the "
                         "total on the device).").format(t=total, period=period)


def central_note(privacy: Mapping[str, Any] | None) -> Markup | None:
    """The central claim of a published window in words, from its document's ``privacy`` object
    (a shuffled mode: ``mode_labels``; a local campaign: no central ε, and why —
    ``ldptel.privacy.central.release_claim``, whatever an older publication stated); None for a
    publication made before it had one."""
    if privacy and "privacy_mode" in privacy:
        return mode_labels.central_note(privacy)
    if not privacy or "shuffled" not in privacy:
        return None
    eps = charts.fmt_eps(privacy["epsilon_report"])
    if not privacy["shuffled"]:
        return Markup("The shuffler is off: reports reach the aggregator as devices sent them, so there is "
                      "no central ε; each report's own ε = {e} is the guarantee.").format(e=eps)
    return Markup("Reports pass through the shuffler, which strips who sent them and mixes them across "
                  "devices, but this window is republished as the shuffler's releases arrive and a release "
                  "may hold a single report: comparing two publications can isolate one report, so no "
                  "central ε is claimed and each report's own ε = {e} is the guarantee (a shuffled privacy "
                  "mode publishes whole batches only, and claims a central ε).").format(e=eps)


def central_head(privacy: Mapping[str, Any] | None) -> str:
    """The central claim for the page head, beside ε and ε∞ ("" without the shuffler)."""
    if privacy and "privacy_mode" in privacy:
        return mode_labels.central_head(privacy)
    if not privacy or not privacy.get("shuffled"):
        return ""
    return "· no central ε (republished per report)"


def window_label(c: Campaign, w: int) -> str:
    """The window starting at ``w``: "All time", a UTC day, several days, or a span of time of
    the day (to the second for windows shorter than a minute)."""
    length = c.window_seconds
    if length == 0:
        return "All time"
    start = datetime.fromtimestamp(w, UTC)
    end = start + timedelta(seconds=length)
    if length == 86400:
        return f"{start:%Y-%m-%d} (UTC day)"
    if length % 86400 == 0:
        return f"{start:%Y-%m-%d}–{end - timedelta(days=1):%Y-%m-%d} (UTC)"
    clock = "%H:%M" if length % 60 == 0 else "%H:%M:%S"
    day = "" if (end - timedelta(seconds=1)).date() == start.date() else f"{end:%Y-%m-%d} "
    return f"{start:%Y-%m-%d} {start:{clock}}–{day}{end:{clock}} UTC"


def window_length_label(c: Campaign) -> str:
    """"1 hour", "5 minutes", … (the campaign's window length)."""
    return duration_label(c.window_seconds)


def tick_label(c: Campaign, w: int) -> str:
    """A window's short name on a time axis: the time of day to the second for windows shorter
    than a minute, to the minute below a day, else the date (UTC); distinct for distinct windows
    of one day."""
    length = c.window_seconds
    if length == 0:
        return "all"
    start = datetime.fromtimestamp(w, UTC)
    if length % 86400 == 0:
        return f"{start:%b %d}"
    return f"{start:%H:%M:%S}" if length % 60 else f"{start:%H:%M}"


def decoded_note(decoded_at: float, n: int, now: float | None = None, shuffled: bool = False) -> str:
    """"decoded 3 s ago from 12,345 reports" (seconds up to a minute, then ``ago``); a campaign in
    a shuffled privacy mode, and any campaign whose reports come through the shuffler, publishes no
    time finer than the hour (``shuffled``: ``mode_labels.decoded_note``)."""
    if shuffled:
        return mode_labels.decoded_note(decoded_at, n)
    dt = max(0.0, (time.time() if now is None else now) - decoded_at)
    when = f"{int(dt)} s ago" if dt < 60 else ago(decoded_at, now)
    return f"decoded {when} from {n:,} reports"


def ago(ts: float | None, now: float | None = None) -> str:
    """How long ago ``ts`` (epoch seconds) was, coarsely; a UTC date past a day."""
    if ts is None:
        return "never"
    dt = max(0.0, (time.time() if now is None else now) - ts)
    if dt < 5:
        return "just now"
    if dt < 60:
        return f"{int(dt)} s ago"
    if dt < 3600:
        return f"{int(dt // 60)} min ago"
    if dt < 86400:
        return f"{int(dt // 3600)} h ago"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def utc(ts: float | None) -> str:
    """``ts`` as a UTC timestamp ("" for None)."""
    return "" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

