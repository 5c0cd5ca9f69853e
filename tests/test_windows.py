"""Windows of any length (``ldptel.durations``): config parsing with errors naming the key, UTC
alignment, and the page's window labels."""

from __future__ import annotations

import pytest

from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.durations import duration_label, parse_duration, parse_window
from ldptel.keys import window_start
from ldptel.server.pages.labels import window_label

SERVER = {"ingest_tokens": ["ingest-token-1"], "export_tokens": ["export-token-1"]}


def _campaign(**extra: object) -> dict:
    return {"server": SERVER, "campaigns": [
        {"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, **extra}]}


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1), ("2s", 2), ("10s", 10), ("5m", 300), ("1h", 3600), ("1d", 86400), ("7d", 604800),
    ("90s", 90), ("all", 0)])
def test_window_lengths(text: str, seconds: int) -> None:
    assert parse_window(text) == seconds
    camp = parse_config(_campaign(window=text)).campaigns[0]
    assert camp.window == text and camp.window_seconds == seconds


@pytest.mark.parametrize("bad", ["0s", "1", "s", "1w", "1.5h", "-1h", " 1h", "1H", "", 10, True,
                                 "99999999d", "01s"])
def test_bad_window_names_the_key(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_campaign(window=bad))
    assert str(err.value).startswith("campaigns[c].window: must be ")
    assert "at most 3660d" in str(err.value) if bad == "99999999d" else "10s" in str(err.value)


def test_durations() -> None:
    assert parse_duration("3d") == 3 * 86400
    with pytest.raises(ValueError):
        parse_duration("all")  # a retention is a duration, never "all"
    assert [duration_label(s) for s in (1, 2, 60, 300, 3600, 86400, 7 * 86400, 90, 0)] == [
        "1 second", "2 seconds", "1 minute", "5 minutes", "1 hour", "1 day", "7 days", "90 seconds",
        "all time"]


def test_windows_are_utc_aligned() -> None:
    t = 1_700_000_123.7  # 2023-11-14 22:15:23.7 UTC
    assert window_start(t, 2) == 1_700_000_122
    assert window_start(t, 300) == 1_700_000_100  # 22:15:00
    assert window_start(t, 86400) % 86400 == 0 and window_start(t, 86400) == 1_699_920_000
    assert window_start(t, 0) == 0


def test_window_labels() -> None:
    def label(window: str, start: int) -> str:
        return window_label(parse_config(_campaign(window=window)).campaigns[0], start)

    assert label("all", 0) == "All time"
    assert label("1h", 1_699_999_200) == "2023-11-14 22:00–23:00 UTC"
    assert label("1h", 1_700_002_800) == "2023-11-14 23:00–00:00 UTC"  # ends at midnight
    assert label("1d", 1_699_920_000) == "2023-11-14 (UTC day)"
    assert label("2s", 1_700_000_122) == "2023-11-14 22:15:22–22:15:24 UTC"
    assert label("5m", 1_700_000_100) == "2023-11-14 22:15–22:20 UTC"
    assert label("7d", 1_699_488_000) == "2023-11-09–2023-11-15 (UTC)"
    assert label("5h", 1_699_992_000) == "2023-11-14 20:00–2023-11-15 01:00 UTC"  # crosses midnight
