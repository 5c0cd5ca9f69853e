"""The parameter sets of the vectors of issues 26 and 28 on the device (``device_vectors.py``):
campaigns in a shuffled privacy mode (sealed messages and fakes), breakdown dimensions, and the
device-level kinds, as ``GET /v1/campaigns`` publishes them."""

from __future__ import annotations

from typing import Any

from cases import campaign

WINDOW = 1_700_006_400  # a day's start (86400 · 19676)
DIMS = [{"name": "app_version", "values": ["4.1", "4.2", "10.0"], "bucket": "major.minor"},
        {"name": "platform", "values": ["android", "ios", "web"]}]
ARM = [{"name": "arm", "values": ["control", "treatment"]},
       {"name": "major", "values": ["3", "4", "12"], "bucket": "major"}]


def shuffled(name: str, mode: str, **params: Any) -> dict[str, Any]:
    out = {**campaign(name, **params), "window": "all", "window_seconds": 0, "reports_per_window": 1,
           "privacy_mode": mode, "central_target": {"epsilon": 1.0, "delta": 1e-6}, "batch_min": 300}
    if mode == "shuffled-fakes":
        out.setdefault("fake_rate", 0.0)
    return out


# (config, values, chunk windows: each report's window on the collector's clock, the time of the
# flush) — the analyzer key is filled in by the generator
SEALED_CASES: list[dict[str, Any]] = [
    {"config": shuffled("sf-hist", "shuffled-fakes", oracle="histogram", epsilon=None, domain_size=16,
                        fake_rate=2.2750876749365494),
     "values": [0, 15, 3, 3, 7, 0, 1]},
    {"config": shuffled("sf-grr", "shuffled-fakes", oracle="grr", epsilon=2.0, domain=["a", "b", "c"],
                        domain_size=3, fake_rate=0.5, dimensions=DIMS[1:]),
     "values": ["a", "c", "b", "a"], "dimensions": [["platform", "ios"]]},
    {"config": shuffled("sh-grr", "shuffled", oracle="grr", epsilon=2.619, domain_size=8),
     "values": [0, 7, 3, 5, 1]},
    {"config": shuffled("sh-olh", "shuffled", oracle="olh", epsilon=3.0, domain_size=1024),
     "values": [0, 1023, 511, 2]},
    {"config": shuffled("sh-oue", "shuffled", oracle="oue", epsilon=2.0, domain_size=20),
     "values": [0, 19, 8]},
    {"config": shuffled("sh-sue", "shuffled", oracle="sue", epsilon=1.5, domain_size=9),
     "values": [4, 8, 0]},
    {"config": shuffled("sh-had", "shuffled", oracle="hadamard", epsilon=2.0, domain_size=64,
                        dimensions=DIMS),
     "values": [0, 63, 31], "dimensions": [["app_version", "4.2"], ["platform", "web"]]},
    # a windowed campaign: reports of the previous and the current window, and one of a window the
    # collector no longer takes (dropped as stale); one envelope per window, batch ids derived
    {"config": {**shuffled("sf-day", "shuffled-fakes", oracle="histogram", epsilon=None, domain_size=5,
                           fake_rate=0.8), "window": "1d", "window_seconds": 86400},
     "values": [1, 2, 3, 4, 0, 1], "windows": [WINDOW - 86400, WINDOW, WINDOW - 86400, WINDOW,
                                                WINDOW - 2 * 86400, WINDOW],
     "now": WINDOW + 3600},
    # a large rate: Poisson(λ) drawn as a sum of k tabulated Poisson(λ/k) (mechanisms.fakes)
    {"config": shuffled("sf-many", "shuffled-fakes", oracle="histogram", epsilon=None, domain_size=3,
                        fake_rate=3.5),
     "values": [2, 1]},
    # range and numeric campaigns in the shuffled modes (mechanisms.shuffled_kinds): the range's
    # value is the index; the numeric value is rounded at random to a grid point (mechanisms.grid:
    # one uniform, then the index mechanism's draws); values outside [lower, upper] are clipped
    {"config": shuffled("sf-range", "shuffled-fakes", kind="range", method="histogram", oracle="histogram",
                        epsilon=None, domain_size=64, fake_rate=0.9),
     "values": [0, 63, 17, 17, 40]},
    {"config": shuffled("sf-range-grr", "shuffled-fakes", kind="range", method="histogram", oracle="grr",
                        epsilon=3.0, domain_size=64, fake_rate=0.0),
     "values": [5, 60, 33]},
    {"config": shuffled("sh-range-oue", "shuffled", kind="range", method="histogram", oracle="oue",
                        epsilon=2.272, domain_size=16),
     "values": [0, 15, 9]},
    {"config": shuffled("sf-grid", "shuffled-fakes", kind="numeric", mechanism="grid", oracle="histogram",
                        epsilon=None, domain_size=16, lower=0.0, upper=100.0, fake_rate=2.2750876749365494),
     "values": [0.0, 100.0, 50.0, 33.3, -5.0, 150.0, 6.666666666666667, 99.99999, 1e-300]},
    {"config": shuffled("sh-grid-grr", "shuffled", kind="numeric", mechanism="grid", oracle="grr",
                        epsilon=3.169, domain_size=32, lower=-1.0, upper=1.0),
     "values": [-1.0, 1.0, 0.0, 0.123456789, -0.999, 2]},
    {"config": shuffled("sh-grid-sue", "shuffled", kind="numeric", mechanism="grid", oracle="sue",
                        epsilon=2.272, domain_size=8, lower=0.0, upper=10.0),
     "values": [3.3, 10, 0.5, 7.142857142857143]},
    # heavy hitters in shuffled (issue 39): the local report (level, pool index, hash) at ε₀ as a
    # 12-byte row; the device secret is 32 zero bytes (both SDKs), so every report of this device
    # has the same level and pool index; values: empty, multi-byte, max_length bytes exactly
    {"config": shuffled("sh-hh", "shuffled", kind="heavy_hitters", oracle="olh", epsilon=2.5, max_length=8,
                        levels=8, width=16, pool_size=64, pool_seed=7),
     "values": ["", "a", "crash:42", "héllo", "日本", "abcdefgh"],
     # refused by both SDKs as in local mode (nothing queued, nothing sent): over max_length bytes
     # of UTF-8, a NUL, a lone surrogate (no UTF-8 encoding)
     "refused": ["abcdefghi", "日本語", "a\0b", "\ud800x", "x\udfff"]},
    {"config": shuffled("sh-hh-bits", "shuffled", kind="heavy_hitters", oracle="olh", epsilon=1.2,
                        max_length=3, levels=5, width=8),
     "values": ["x", "yz", "é"]},
]

# the Poisson(λ) inversion of mechanisms.fakes: rates, including one over MAX_TABLE_RATE
POISSON_RATES = [0.0, 0.05, 0.5, 1.0, 2.2750876749365494, 7.3, 40.0, 499.0, 1234.5]

# analyzer key ids and HPKE info strings (windows are epoch seconds: JSON numbers below 2^53)
INFO_CASES = [("homepage", 1, 0, 0), ("sf-hist", 3, 1_700_006_400, 0xDEADBEEF), ("日本語", 4294967295,
              (1 << 53) - 1, 1), ("", 2, 86400, 12345), ("a\u0301-é", 1, 604800, 7)]

DIMENSION_CONFIGS: list[list[dict[str, Any]]] = [DIMS, ARM, [{"name": "country", "values": ["de", "fr"]}]]
# (defaults of the client, the call's dimensions); "!" marks a name the campaign does not declare
DIMENSION_GIVEN: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {}),
    ({"platform": "ios", "app_version": "4.2.17"}, {}),
    ({"platform": "ios"}, {"platform": "web", "app_version": "v4.1"}),
    ({}, {"platform": "iOS", "app_version": "4"}),
    ({}, {"platform": "android", "app_version": "10.0.3-beta"}),
    ({}, {"platform": "", "app_version": "4.x"}),
    ({}, {"platform": None, "app_version": 4.2}),
    ({}, {"platform": 3, "app_version": "V10"}),
    ({}, {"platform": True, "app_version": "04.02"}),
    ({}, {"platform": ["ios"], "app_version": "4."}),
    ({}, {"platform": {"x": 1}, "app_version": ".4"}),
    ({}, {"app_version": "9999999999.1"}),
    ({}, {"app_version": "4.2.17 "}),
    ({}, {"app_version": " 4.2"}),
    ({}, {"app_version": "x4.2"}),
    ({}, {"app_version": "\u0664.\u0662"}),  # Arabic-Indic digits: not a version (ASCII digits only)
    ({}, {"app_version": "\uff14.\uff12"}),  # full-width digits
    ({}, {"app_version": "4.02"}),
    ({}, {"app_version": "12.0.0", "arm": "treatment"}),
    ({"arm": "treatment", "major": "12.7"}, {}),
    ({"arm": "control", "major": "v3.9", "platform": "ios"}, {"major": "4.0"}),
    ({}, {"arm": "Treatment", "major": "012"}),
    ({}, {"major": "4294967296.1"}),
    ({}, {"country": "de", "typo!": "x"}),
    ({"country": "fr", "unused": 1}, {}),
]

WINDOW_EVENTS: list[dict[str, Any]] = [
    {"config": {**campaign("ud", "unique_devices", epsilon=1.0, oracle="grr",
                           domain=["none", "at_least_once"], domain_size=2), "dimensions": DIMS},
     "events": [None, None, None], "dimensions": [["app_version", "4.2"], ["platform", "ios"]]},
    {"config": {**campaign("ud-none", "unique_devices", epsilon=2.0, oracle="grr",
                           domain=["none", "at_least_once"], domain_size=2), "window": "7d",
                "window_seconds": 604800},
     "events": []},
    {"config": campaign("hist-int", "per_device_histogram", epsilon=1.0, oracle="olh", domain_size=40),
     "events": [30, 7, 30, 7, 2]},  # a tie between "30" and "7": the first seen wins (not "7" < "30")
    {"config": campaign("hist-lab", "per_device_histogram", epsilon=2.0, oracle="oue",
                        domain=["red", "green", "blue"], domain_size=3),
     "events": ["blue", "red", 1, "green", "red", "green"]},
    {"config": campaign("hist-grr", "per_device_histogram", epsilon=1.0, oracle="grr", domain_size=12),
     "events": [11, 10, 9, 10, 11]},
    {"config": campaign("hist-had", "per_device_histogram", epsilon=1.0, oracle="hadamard",
                        domain_size=100), "events": [99, 12, 12, 5, 5, 99, 99]},
    {"config": campaign("count-hy", "per_device_count", epsilon=1.0, lower=0.0, upper=50.0,
                        mechanism="hybrid"), "events": [1, 1, 2.5, 0, 10]},
    {"config": campaign("count-pw", "per_device_count", epsilon=2.0, lower=0.0, upper=5.0,
                        mechanism="piecewise"), "events": [3, 3, 3]},  # 9 events, clipped to 5
    {"config": campaign("count-du", "per_device_count", epsilon=0.5, lower=0.0, upper=100.0,
                        mechanism="duchi"), "events": []},
]

# public configs of the new kinds and modes (configs.json): what the Python SDK makes of each
NEW_CONFIGS: list[dict[str, Any]] = [case["config"] for case in SEALED_CASES] + [
    case["config"] for case in WINDOW_EVENTS] + [
    {"name": "ud-oracle", "version": 1, "kind": "unique_devices", "epsilon": 3.0, "oracle": "oue",
     "domain_size": 9},
    {"name": "pdc-1bit", "version": 1, "kind": "per_device_count", "epsilon": 1.0, "lower": 0.0,
     "upper": 10.0, "mechanism": "1bitmean"},
    {"name": "pdh-memo", "version": 1, "kind": "per_device_histogram", "epsilon": 1.0, "oracle": "grr",
     "domain_size": 4, "memoize": True, "epsilon_inf": 3.0},
    {"name": "sh-eps9", "version": 1, "kind": "frequency", "oracle": "grr", "epsilon": 9.0, "domain_size": 4,
     "privacy_mode": "shuffled"},
    {"name": "hist-d1", "version": 1, "kind": "frequency", "oracle": "histogram", "domain_size": 1,
     "privacy_mode": "shuffled-fakes"},
    # index campaigns the SDKs refuse: a local mechanism in a shuffled mode, an oracle the grid
    # does not take, a grid of one point or over 4,096, bounds out of order, no ε for GRR
    {**shuffled("sh-num-pw", "shuffled", kind="numeric", mechanism="piecewise", oracle="grr", epsilon=2.0,
                domain_size=32, lower=0.0, upper=1.0)},
    {**shuffled("sh-range-haar", "shuffled", kind="range", method="haar", oracle="grr", epsilon=2.0,
                domain_size=16)},
    {**shuffled("sh-grid-olh", "shuffled", kind="numeric", mechanism="grid", oracle="olh", epsilon=2.0,
                domain_size=32, lower=0.0, upper=1.0)},
    {**shuffled("sh-range-had", "shuffled", kind="range", method="histogram", oracle="hadamard",
                epsilon=2.0, domain_size=16)},
    {**shuffled("sf-grid-1", "shuffled-fakes", kind="numeric", mechanism="grid", oracle="histogram",
                epsilon=None, domain_size=1, lower=0.0, upper=1.0)},
    {**shuffled("sf-grid-big", "shuffled-fakes", kind="numeric", mechanism="grid", oracle="histogram",
                epsilon=None, domain_size=4097, lower=0.0, upper=1.0)},
    {**shuffled("sh-grid-bounds", "shuffled", kind="numeric", mechanism="grid", oracle="grr", epsilon=2.0,
                domain_size=8, lower=1.0, upper=1.0)},
    {**shuffled("sh-grid-noeps", "shuffled", kind="numeric", mechanism="grid", oracle="grr", epsilon=None,
                domain_size=8, lower=0.0, upper=1.0)},
    {**shuffled("sh-grid-max", "shuffled", kind="numeric", mechanism="grid", oracle="oue", epsilon=1.0,
                domain_size=4096, lower=-1e6, upper=1e6)},
]
