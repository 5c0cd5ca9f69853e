"""Campaign durations: window lengths and retention periods as ``"<n><unit>"`` strings.

A duration is a positive integer followed by ``s``, ``m``, ``h`` or ``d`` (``"2s"``, ``"5m"``,
``"1h"``, ``"7d"``); a window may also be ``"all"`` (one window covering all time, length 0).
Windows start at multiples of their length in seconds since the Unix epoch, so they are aligned
to UTC (a ``"1d"`` window is a UTC day, a ``"1h"`` window a UTC hour; ``"7d"`` windows start on
Thursdays, the weekday of 1970-01-01).
"""

from __future__ import annotations

import math
import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
UNIT_NAMES = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
MAX_SECONDS = 3660 * 86400  # ten years and a bit: longer is a typo, not a window
_DURATION = re.compile(r"^([1-9][0-9]{0,9})([smhd])$")
ALL = "all"


def parse_duration(text: object) -> int:
    """Seconds of ``"<n><unit>"`` (1 ≤ seconds ≤ ``MAX_SECONDS``); ``ValueError`` otherwise."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f'must be a duration like "10s", "5m", "1h", "1d" or "7d", got {text!r}')
    seconds = int(m.group(1)) * UNITS[m.group(2)]
    if seconds > MAX_SECONDS:
        raise ValueError(f"must be at most {MAX_SECONDS // 86400}d, got {text!r}")
    return seconds


def parse_window(text: object) -> int:
    """Seconds of a window (``"all"`` → 0); ``ValueError`` otherwise."""
    if text == ALL:
        return 0
    if not isinstance(text, str) or not _DURATION.match(text):
        raise ValueError(f'must be "all" or a duration like "10s", "5m", "1h", "1d" or "7d", got {text!r}')
    return parse_duration(text)


def duration_label(seconds: int) -> str:
    """``3600`` → ``"1 hour"``, ``120`` → ``"2 minutes"`` (the largest unit dividing it)."""
    for unit in ("d", "h", "m", "s"):
        n, rest = divmod(seconds, UNITS[unit])
        if rest == 0 and n:
            return f"{n} {UNIT_NAMES[unit]}{'' if n == 1 else 's'}"
    return "all time"


def window_close(window_start: int, window_seconds: int) -> float:
    """Epoch s from which no report of the window can arrive: the collector takes the current and
    the previous window, so two window lengths after its start (never, for ``"all"``)."""
    return math.inf if window_seconds == 0 else float(window_start + 2 * window_seconds)
