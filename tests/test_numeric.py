"""Numeric campaigns: config validation (errors name the key), the builder's defaults, the
wire round trip, bad values on the device, and 1BitMean's memoization (same value → same bit)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.mechanisms import NUMERIC_MECHANISMS, Hybrid, OneBitMean
from ldptel.mechanisms.builder import build_mechanism, uses_device_secret
from ldptel.mechanisms.numeric import HYBRID_EPSILON, default_numeric_mechanism
from ldptel.proto import ReportBatch


def numeric(**raw) -> dict:
    camp = {"name": "s", "kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 600, **raw}
    return parse_config({"campaigns": [camp]}).campaigns[0].public()


@pytest.mark.parametrize(("raw", "key"), [
    ({"lower": True}, "lower"), ({"upper": "x"}, "upper"), ({"lower": 5, "upper": 5}, "upper"),
    ({"upper": math.inf}, "upper"), ({"mechanism": "laplace"}, "mechanism"),
    ({"buckets": 4}, "buckets"), ({"memoize": True, "mechanism": "duchi"}, "memoize"),
    ({"mechanism": "1bitmean", "memoize": "yes"}, "memoize"),
    ({"mechanism": "1bitmean", "buckets": 0}, "buckets"), ({"domain_size": 4}, "domain_size"),
    ({"epsilon": 0}, "epsilon"),
])
def test_config_errors_name_the_key(raw: dict, key: str) -> None:
    camp = {"name": "s", "kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 600, **raw}
    with pytest.raises(ConfigError, match=rf"^campaigns\[s\]\.{key}: "):
        parse_config({"campaigns": [camp]})


def test_missing_lower_names_it() -> None:
    with pytest.raises(ConfigError, match=r"^campaigns\[s\]\.lower: is required"):
        parse_config({"campaigns": [{"name": "s", "kind": "numeric", "epsilon": 1.0, "upper": 1}]})


def test_defaults_are_published() -> None:
    assert numeric()["mechanism"] == default_numeric_mechanism(1.0) == "hybrid"
    assert numeric(epsilon=0.5)["mechanism"] == "duchi"  # hybrid = Duchi below ε* ≈ 0.61
    assert numeric(mechanism="1bitmean") | {} == {
        "name": "s", "kind": "numeric", "epsilon": 1.0, "lower": 0.0, "upper": 600.0,
        "mechanism": "1bitmean", "memoize": True, "buckets": 8, "window": "all",
        "window_seconds": 0, "reports_per_window": 1, "version": 1}


def test_default_has_the_lowest_worst_case_variance() -> None:
    for eps in (0.3, HYBRID_EPSILON + 0.01, 1.0, 2.0, 4.0, 8.0):
        worst = {n: c(eps, 0, 1).worst_variance() for n, c in NUMERIC_MECHANISMS.items()}
        assert worst[default_numeric_mechanism(eps)] == min(worst.values())
    # the hybrid's variance does not depend on t above ε*
    h = Hybrid(2.0, 0, 1)
    assert np.ptp(h.output_variance(np.linspace(-1, 1, 11))) < 1e-12


def test_builder_and_device_secret() -> None:
    cfg = numeric(mechanism="1bitmean", buckets=4)
    assert uses_device_secret(cfg)
    assert not uses_device_secret({**cfg, "memoize": False})
    assert not uses_device_secret(numeric())
    mech = build_mechanism(cfg, secret=bytes(32))
    assert isinstance(mech, OneBitMean) and mech.buckets == 4 and mech.memoize
    with pytest.raises(ValueError, match="buckets applies only"):
        build_mechanism({**numeric(mechanism="piecewise"), "buckets": 4})


@pytest.mark.parametrize("name", list(NUMERIC_MECHANISMS))
def test_round_trip(name: str) -> None:
    mech = NUMERIC_MECHANISMS[name](1.0, 0, 10)
    batch = mech.encode_batch(np.linspace(-5, 15, 37), rng=np.random.default_rng(1), campaign="c")
    parsed = ReportBatch.FromString(batch.SerializeToString())
    assert parsed.WhichOneof("payload") == "numeric"
    cols = mech.checked_columns(parsed)
    np.testing.assert_array_equal(mech.unbiased_unit(cols), mech.unbiased_unit(mech.columns(batch)))
    assert np.all(np.abs(mech.unbiased_unit(cols)) <= mech.bound)
    assert mech.clipped(np.linspace(-5, 15, 37)) == 2 * 9  # 9 below 0 and 9 above 10


@pytest.mark.parametrize("bad", [float("nan"), math.inf, "3", None, True])
def test_bad_values_refused_on_the_device(bad) -> None:
    mech = NUMERIC_MECHANISMS["piecewise"](1.0, 0, 10)
    with pytest.raises(ValueError, match="value must be"):
        mech.encode(bad)
    if bad is not True:  # a bool inside a list of floats is numpy's 1.0
        with pytest.raises(ValueError, match="value must be"):
            mech.encode_batch([1.0, bad])


def test_memoized_device_repeats_its_bit() -> None:
    """A device holding one value sends one and the same bit every time (averaging gains
    nothing); a value inside a bucket uses at most its two boundaries' bits."""
    for _ in range(50):
        dev = OneBitMean(1.0, 0, 100, buckets=4, secret=os.urandom(32))
        assert len({dev.encode(37.0).numeric.bits for _ in range(100)}) == 1
        seen = {dev.randomize_one(x)["bits"][0] for x in np.linspace(25, 50, 40)}
        assert seen <= {dev.memo_bit(1), dev.memo_bit(2)}  # boundaries 25 and 50
