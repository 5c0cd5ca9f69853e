"""The kind-specific keys of a campaign table that ``campaign.parse_campaign`` delegates: a
memoized campaign's ``memoize``/``epsilon_inf``, a numeric campaign's bounds and mechanism, and the
device-level kinds of issue 28 (``DEVICE_LEVEL_KINDS``, ``device_level_params``).

Device-level kinds send one report per device and window, computed on the device from what it
recorded during the window (``ldptel.client.device_level``) and randomized once at the window's
end; the collector files it under the window it names (``ReportBatch.window``), which must have
ended and be at most ``late_seconds`` old:

- ``unique_devices``: did the event happen at least once in the window (one randomized bit:
  randomized response, ``builder.UNIQUE_LABELS``), whatever the number of events; ``window`` is
  one of ``UNIQUE_WINDOWS``. The estimate of ``at_least_once`` counts devices, not events.
- ``per_device_histogram``: the device's most common value in the window (ties: the value seen
  first), through a frequency oracle (``oracle``, ``domain``/``domain_size`` as a frequency
  campaign; not RAPPOR).
- ``per_device_count``: the device's number of events in the window, clipped to [0, ``upper``],
  through a numeric mechanism (``mechanism``: piecewise, duchi or hybrid): the mean count per
  device and the sum.

Every device-level kind has ``reports_per_window = 1`` and no ``memoize``: the ledger charges the
one report of each window once.
"""

from __future__ import annotations

from typing import Any

from ldptel.config_values import fail, read_int
from ldptel.durations import parse_window
from ldptel.mechanisms import NUMERIC_MECHANISMS
from ldptel.mechanisms.base import MAX_EPSILON
from ldptel.mechanisms.builder import DEVICE_LEVEL_KINDS, UNIQUE_LABELS
from ldptel.mechanisms.errors import argument_of
from ldptel.mechanisms.numeric import check_bounds, default_numeric_mechanism
from ldptel.mechanisms.onebitmean import DEFAULT_BUCKETS, MAX_BUCKETS

UNIQUE_WINDOWS = ("1d", "7d", "28d")
FREQUENCY_ORACLES = ("grr", "sue", "oue", "olh", "hadamard")  # per_device_histogram's
COUNT_MECHANISMS = ("piecewise", "duchi", "hybrid")  # per_device_count's
MIN_LATE_SECONDS = 7 * 86400


def late_seconds(window_seconds: int) -> int:
    """How long after its end a device-level window's report is still accepted: two windows, at
    least 7 days (a device that was off over a weekend still reports its Friday)."""
    return max(2 * window_seconds, MIN_LATE_SECONDS)


def device_level_params(raw: dict[str, Any], where: str, camp: Any) -> None:
    """The device-level kinds' checks and fields, set on ``camp`` (``campaign.parse_campaign``'s
    namespace, ``kind``, ``window`` and ``epsilon`` already read); ``ConfigError`` naming the key."""
    kind = camp.kind
    assert kind in DEVICE_LEVEL_KINDS
    if parse_window(camp.window) == 0:
        raise fail(f"{where}.window", f"a {kind} campaign needs windows of a fixed length (one report "
                                      "per device and window)")
    if kind == "unique_devices" and camp.window not in UNIQUE_WINDOWS:
        raise fail(f"{where}.window", f"must be one of {', '.join(UNIQUE_WINDOWS)} for unique_devices, "
                                      f"got {camp.window!r}")
    for key in ("memoize", "epsilon_inf"):
        if key in raw:
            raise fail(f"{where}.{key}", f"does not apply to a {kind} campaign (one fresh report per "
                                         "window)")
    if raw.get("reports_per_window", 1) != 1:
        raise fail(f"{where}.reports_per_window", f"is 1 for a {kind} campaign (one report per device "
                                                  "and window, aggregated on the device)")
    if kind == "unique_devices":
        camp.oracle, camp.domain, camp.domain_size = "grr", list(UNIQUE_LABELS), 2
    elif kind == "per_device_histogram":
        oracle = raw.get("oracle", "olh")
        if oracle not in FREQUENCY_ORACLES:
            raise fail(f"{where}.oracle", f"must be one of {', '.join(FREQUENCY_ORACLES)} for "
                                          f"per_device_histogram, got {oracle!r}")
    elif "lower" in raw:
        raise fail(f"{where}.lower", "a count starts at 0: give upper only (the most events counted "
                                     "per device and window)")
    elif raw.get("mechanism", default_numeric_mechanism(camp.epsilon)) not in COUNT_MECHANISMS:
        raise fail(f"{where}.mechanism", f"must be one of {', '.join(COUNT_MECHANISMS)} for "
                                         f"per_device_count, got {raw.get('mechanism')!r}")


def memoize_params(raw: dict[str, Any], where: str, epsilon: float) -> dict[str, Any]:
    """``{"memoize": True, "epsilon_inf": ε∞}`` for ``memoize = true`` (ε∞ required, ε < ε∞ ≤ 10),
    ``{}`` for ``memoize = false`` or absent (then ``epsilon_inf`` must be absent too)."""
    memoize = raw.get("memoize", False)
    if not isinstance(memoize, bool):
        raise fail(f"{where}.memoize", f"must be true or false, got {memoize!r}")
    eps_inf = raw.get("epsilon_inf")
    if not memoize:
        if eps_inf is not None:
            raise fail(f"{where}.epsilon_inf", "applies only with memoize = true")
        return {}
    if eps_inf is None:
        raise fail(f"{where}.epsilon_inf", "is required with memoize = true (the lifetime ε of "
                    "one value; choose it greater than epsilon)")
    if isinstance(eps_inf, bool) or not isinstance(eps_inf, (int, float)) or not 0 < eps_inf <= MAX_EPSILON:
        raise fail(f"{where}.epsilon_inf", f"must be a number with 0 < epsilon_inf <= {MAX_EPSILON:g}, "
                                           f"got {eps_inf!r}")
    if not eps_inf > epsilon:
        raise fail(f"{where}.epsilon_inf", f"must be greater than epsilon = {epsilon:g} (the "
                    f"per-report ε), got {eps_inf!r}")
    return {"memoize": True, "epsilon_inf": float(eps_inf)}


def numeric_params(raw: dict[str, Any], where: str, epsilon: float) -> dict[str, Any]:
    """A numeric campaign's ``lower``, ``upper``, ``mechanism`` (default: the lowest worst-case
    variance for ε) and, for 1bitmean, ``memoize`` (default true) and ``buckets`` (default 8):
    all published, so an SDK never has to agree with the server on a default."""
    if "epsilon_inf" in raw:
        raise fail(f"{where}.epsilon_inf", "does not apply to numeric campaigns (1BitMean's "
                    "memoization costs (buckets + 1)·epsilon over a device's life)")
    for key in ("lower", "upper"):
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise fail(f"{where}.{key}", f"is required: a finite number, got {v!r}")
    try:  # the limits that keep every formula on the path finite (mechanisms/numeric.py)
        check_bounds(raw["lower"], raw["upper"])
    except ValueError as exc:  # check_bounds names the bound at fault (argument_of)
        raise fail(f"{where}.{argument_of(exc) or 'upper'}", str(exc)) from None
    mechanism = raw.get("mechanism", default_numeric_mechanism(epsilon))
    if mechanism not in NUMERIC_MECHANISMS:
        raise fail(f"{where}.mechanism",
                    f"must be one of {', '.join(NUMERIC_MECHANISMS)}, got {mechanism!r}")
    params: dict[str, Any] = {"lower": float(raw["lower"]), "upper": float(raw["upper"]),
                              "mechanism": mechanism}
    if mechanism != "1bitmean":
        bad = next((k for k in ("memoize", "buckets") if k in raw), None)
        if bad:
            raise fail(f"{where}.{bad}", "applies only to mechanism = \"1bitmean\"")
        return params
    memoize = raw.get("memoize", True)
    if not isinstance(memoize, bool):
        raise fail(f"{where}.memoize", f"must be true or false, got {memoize!r}")
    params["memoize"] = memoize
    params["buckets"] = read_int(raw, "buckets", where, DEFAULT_BUCKETS, 1, MAX_BUCKETS)
    return params
