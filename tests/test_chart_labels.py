"""Time labels of the pages' charts (issue 25): the mean chart repeated its axis labels ("Nov 26
12:30" under every 10 s window of a minute) and the trend had 2 time labels. A window's short
label is distinct for distinct windows of a day; the mean chart never prints one twice; the
trend labels at least 5 windows."""

from __future__ import annotations

import re

from ldptel.campaigns.config import parse_campaign
from ldptel.server import mean_chart, trend_chart
from ldptel.server.pages.labels import tick_label

T0 = 1_795_694_400  # a UTC hour


def camp(window: str):
    return parse_campaign({"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "window": window},
                          "campaigns[c]")


def test_short_labels_are_distinct_within_a_day() -> None:
    for window, step in (("10s", 10), ("5m", 300), ("1h", 3600)):
        labels = [tick_label(camp(window), T0 + k * step) for k in range(12)]
        assert len(set(labels)) == 12, labels
    assert tick_label(camp("1d"), T0) == "Nov 26"


def test_mean_chart_prints_each_label_once() -> None:
    c = camp("10s")
    points = [mean_chart.MeanPoint(tick_label(c, T0 + 10 * k), "w", 5.0 + k, 4.0 + k, 6.0 + k)
              for k in range(30)]
    svg = str(mean_chart.mean_chart(points))
    ticks = re.findall(r'<text class="tick"[^>]*text-anchor="middle">([^<]+)</text>', svg)
    assert len(ticks) >= 5 and len(ticks) == len(set(ticks)), ticks


def test_trend_has_at_least_five_time_labels() -> None:
    counts = [trend_chart.Count(T0 + 10 * k, 100, True) for k in range(30)]
    svg = str(trend_chart.trend_chart([], counts, 10, str, lambda w: tick_label(camp("10s"), w)))
    ticks = re.findall(r'class="tick x-tick"[^>]*>([^<]+)<', svg)
    assert len(ticks) >= 5 and len(set(ticks)) == len(ticks), ticks


def test_issue_35_labels() -> None:
    """"ε = none" for shuffled-fakes read as "no privacy cost" (it sends the true value, sealed);
    the ε error pointed at a source file; a trend of 7 windows had 4 time labels; a version
    marker's label at the right edge ran off the chart."""

    import pytest

    from ldptel.errors import ConfigError
    from ldptel.server.pages.status import Status, status_view

    fakes = parse_campaign({"name": "c", "privacy_mode": "shuffled-fakes", "central_epsilon": 1.0,
                            "batch_min": 1000, "domain_size": 4, "window": "10s"}, "campaigns[c]")
    assert fakes.epsilon is None  # the true index, sealed
    view = status_view(Status(fakes, {}, 0, T0, 0, 0, 0, 0, None, None))
    assert view["epsilon"] == "∞ (the true value, sealed)"
    # 20,000 released reports of a shuffled campaign: not "Last update: never", not "last minute"
    released = status_view(Status(fakes, {T0: 20_000}, 20_000, T0 + 10, 0, 20_000, 0, 0, None, None))
    assert released["updated"] == "with each whole batch" and "last minute" not in released["rate_note"]
    assert view["updated"] == "never" and released["any_reports"] and not view["any_reports"]
    # batches waiting while the aggregator commits (no "no aggregator has committed" note): the
    # normal flow, not amber (issue 35); with the note, amber
    flowing = status_view(Status(camp("10s"), {T0: 9_000}, 9_000, T0, 9_000, 9_100, 3, 100, 10.0, T0))
    assert flowing["lag_class"] == "holding" and flowing["lag_ok"], flowing
    stuck = status_view(Status(camp("10s"), {T0: 9_000}, 9_000, T0, 9_000, 9_100, 3, 100, 10.0, T0,
                               quiet="no aggregator has committed for 40 s"))
    assert stuck["lag_class"] == "lagging" and not stuck["lag_ok"], stuck
    local = status_view(Status(camp("10s"), {T0: 9_450}, 9_450, T0 + 10, 0, 9_450, 0, 0, 0.0, None))
    assert local["rate_note"] == "accepted by the collector, last minute" and local["any_reports"]
    with pytest.raises(ConfigError, match=r"below 0\.01 no campaign gets a usable estimate") as info:
        parse_campaign({"name": "c", "oracle": "grr", "epsilon": 0, "domain_size": 4}, "campaigns[c]")
    assert ".py" not in str(info.value)
    assert len(trend_chart.x_ticks([T0 + 10 * k for k in range(7)], 10)) == 7
    counts = [trend_chart.Count(T0 + 10 * k, 100, True) for k in range(6)]
    svg = str(trend_chart.trend_chart([], counts, 10, str, markers=[
        trend_chart.Marker(T0 + 50, 3, "v3: rollback to v1 (ε 1 → 2)")]))
    assert re.search(r'<text x="[\d.]+" y="[\d.]+" text-anchor="end">v3: rollback', svg), svg


def test_issue_35_central_labels() -> None:
    """"between 1 and 1", "(1 windows)", "1 releases", and δ written "1e-6" beside "10⁻⁶"."""
    from ldptel.server.pages import mode_labels

    privacy = {"privacy_mode": "shuffled-fakes", "batches": [1000], "central_delta": 1e-6,
               "central_epsilon_lower": 1.0, "central_epsilon": 1.0, "central_bound": "PLD",
               "cumulative_epsilon": 1.5, "releases_composed": 1}
    note = str(mode_labels.central_note(privacy))
    assert "between" not in note and "with ε = 1 (" in note and "δ = 10⁻⁶" in note, note
    assert "(1 window)" in note and "1 windows" not in note, note
    assert mode_labels.central_head(privacy) == "· shuffled-fakes: central ε = 1 (δ = 10⁻⁶)"
    wider = {**privacy, "central_epsilon_lower": 0.5, "releases_composed": 3}
    assert "between 0.5 (an explicit attack reaches it) and 1" in str(mode_labels.central_note(wider))
    assert "(3 windows)" in str(mode_labels.central_note(wider))
    one = {"status": "done", "campaigns": [{"name": "s"}], "releases": 1, "epsilon": 1.0, "delta": 1e-6,
           "unbounded": []}
    text = str(mode_labels.composition_note(one))
    assert "— 1 release in all —" in text and "(δ = 10⁻⁶)" in text, text
