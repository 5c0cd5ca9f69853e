"""Breakdown dimensions (issue 28), unit tier: the config (closed lists, buckets, ``other``, the
bound on cells naming the key), the canonical mapping the SDK, collector and aggregator share, the
per-cell accumulator (state, bytes, merge) and the publication (cells released from
``min_reports``, the fleet-wide estimate the sum of the released cells, marginals)."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest

from ldptel.aggregator import breakdown, publish, store
from ldptel.aggregator.decoders import accumulator_for
from ldptel.campaigns.config import ConfigError, parse_campaign
from ldptel.cell_sums import differences, fragment_of, group_cells, sum_cells
from ldptel.dimensions import MAX_CELLS, OTHER, bucketed
from ldptel.proto import ReportBatch

DIMS = {"platform": ["android", "ios", "web"], "arm": ["control", "treatment"],
        "app_version": {"values": ["4.1", "4.2"], "bucket": "major.minor"}}


def campaign(**extra):
    table = {"name": "checkout", "epsilon": 2.0, "oracle": "oue", "domain": ["a", "b", "c", "d"],
             "min_reports": 500, "dimensions": DIMS, "experiment": "arm", **extra}
    return parse_campaign(table, "campaigns[0]")


def test_cells_and_canonical_values() -> None:
    dims = campaign().dimensions
    assert dims.names == ("app_version", "arm", "platform") and dims.experiment == "arm"  # name order
    assert dims.n_cells == 4 * 3 * 3
    assert [dims.cell_index(dims.cell_values(i)) for i in range(dims.n_cells)] == list(range(dims.n_cells))
    assert dims.canonical({"platform": "ios", "arm": "treatment", "app_version": "4.2.17"}) == \
        ("4.2", "treatment", "ios")
    # an unknown value, a missing dimension, a non-string and an undeclared name: "other", no error
    assert dims.canonical({"platform": "blackberry", "app_version": 4.2, "colour": "red"}) == \
        (OTHER, OTHER, OTHER)
    assert dims.canonical({"platform": "iOS", "arm": "control", "app_version": "v4.1"}) == \
        ("4.1", "control", OTHER)
    assert bucketed("10.3.1-beta", "major.minor") == "10.3" and bucketed("7", "major.minor") == "7.0"
    assert bucketed("7.9.2", "major") == "7" and bucketed("nightly", "major") == "nightly"
    public = campaign().public()["dimensions"]
    assert public[0] == {"name": "app_version", "values": ["4.1", "4.2"], "bucket": "major.minor"}


@pytest.mark.parametrize(("extra", "key", "words"), [
    ({"dimensions": {"a": [str(i) for i in range(20)], "b": [str(i) for i in range(20)]}}, "dimensions",
     "441 cells"),
    ({"dimensions": {"a": ["x", "other"]}}, "dimensions.a", "implicit"),
    ({"dimensions": {"a": ["x", "x"]}}, "dimensions.a", "distinct"),
    ({"dimensions": {"Platform": ["x"]}}, "dimensions.Platform", "name"),
    ({"dimensions": {"a": []}}, "dimensions.a", "non-empty"),
    ({"dimensions": {"v": {"values": ["4.1.2"], "bucket": "major.minor"}}}, "dimensions.v", "bucket"),
    ({"dimensions": {"v": {"values": ["4.1"], "bucket": "minor"}}}, "dimensions.v.bucket", "major"),
    ({"dimensions": {"a": ["x"]}, "experiment": "arm"}, "experiment", "one of the dimensions"),
    ({"dimensions": {"a": ["x"]}, "experiment": "a"}, "experiment", "at least 2 values"),
    ({"dimensions": None, "experiment": "arm"}, "experiment", "needs dimensions"),
])
def test_bad_dimensions_name_the_key(extra, key, words) -> None:
    table = {"name": "c", "epsilon": 1.0, "domain_size": 4, **extra}
    if table.get("dimensions") is None:
        table.pop("dimensions")
    with pytest.raises(ConfigError, match=words) as err:
        parse_campaign(table, "campaigns[0]")
    assert str(err.value).startswith(f"campaigns[c].{key}:")


def test_dimensions_only_where_cells_add_up_and_within_the_state_bound() -> None:
    for kind in ({"kind": "range", "domain_size": 16}, {"kind": "heavy_hitters", "max_length": 4}):
        with pytest.raises(ConfigError, match="campaigns\\[c\\].dimensions: apply to"):
            parse_campaign({"name": "c", "epsilon": 1.0, "dimensions": {"a": ["x"]}, **kind}, "w")
    big = {"a": [f"v{i}" for i in range(64)]}  # 65 cells × 65,536 values: over 2^22 counts
    with pytest.raises(ConfigError, match="campaigns\\[c\\].dimensions: 65 cells"):
        parse_campaign({"name": "c", "epsilon": 1.0, "domain_size": 65536, "dimensions": big}, "w")
    with pytest.raises(ConfigError, match="campaigns\\[c\\].dimensions: 65 cells × 2048 items"):
        parse_campaign({"name": "c", "epsilon": 1.0, "domain_size": 2048, "dimensions": big}, "w")
    assert MAX_CELLS == 256


def batch_of(camp, values, rng, **dims) -> ReportBatch:
    b = camp.mechanism().encode_batch(values, rng=rng, campaign=camp.name)
    for k, v in dims.items():
        b.dimensions.add(name=k, value=v)
    return b


def filled(camp, rng, sizes):
    acc = store.new_accumulator(camp)
    truth = {}
    for (plat, arm), n in sizes.items():
        values = rng.choice(4, size=n, p=[0.4, 0.3, 0.2, 0.1])
        acc.add(batch_of(camp, values, rng, platform=plat, arm=arm, app_version="4.2.0"))
        truth[plat, arm] = np.bincount(values, minlength=4)
    return acc, truth


SIZES = {("android", "control"): 3000, ("android", "treatment"): 3000, ("ios", "control"): 2000,
         ("ios", "treatment"): 2000, ("web", "control"): 300, ("web", "treatment"): 300}


def test_cell_accumulator_bytes_merge_and_digest() -> None:
    camp = campaign()
    rng = np.random.default_rng(3)
    acc, _ = filled(camp, rng, SIZES)
    assert acc.n == sum(SIZES.values()) and len(acc.cell_counts()) == len(SIZES)
    back = store.decode_accumulator(camp, acc.to_bytes(), acc)
    assert back.cell_counts() == acc.cell_counts()
    assert publish.state_digest(camp, 0, back) == publish.state_digest(camp, 0, acc)
    half_a, half_b = store.new_accumulator(camp), store.new_accumulator(camp)
    for i, (key, n) in enumerate(SIZES.items()):
        (half_a if i % 2 else half_b).add(batch_of(camp, np.zeros(n, dtype=int), rng, platform=key[0],
                                                   arm=key[1]))
    merged = half_a.blank().merge(half_a).merge(store.decode_accumulator(camp, half_b.to_bytes(), half_b))
    assert merged.n == sum(SIZES.values()) and merged.stored_nbytes() > 0
    other = parse_campaign({"name": "checkout", "epsilon": 2.0, "oracle": "oue",
                            "domain": ["a", "b", "c", "d"], "dimensions": {"platform": ["ios"]}}, "w")
    with pytest.raises(ValueError):
        store.decode_accumulator(other, acc.to_bytes())
    with pytest.raises(ValueError):
        store.decode_accumulator(parse_campaign({"name": "checkout", "epsilon": 2.0, "oracle": "oue",
                                                 "domain": ["a", "b", "c", "d"]}, "w"), acc.to_bytes())


def test_publication_releases_cells_and_sums_them() -> None:
    camp = campaign()
    acc, truth = filled(camp, np.random.default_rng(4), SIZES)
    bad = batch_of(camp, np.zeros(7, dtype=int), np.random.default_rng(5), platform="blackberry")
    acc.add(bad)  # "other" platform and arm: a cell of its own, withheld
    doc, _ = publish.document(camp, 0, acc, time.time())
    cells = {(c["dimensions"]["platform"], c["dimensions"]["arm"]): c for c in doc["cells"]}
    assert cells["web", "control"]["withheld"] and cells["web", "control"]["n_reports"] is None
    assert cells["web", "control"]["items"] == [] and cells[OTHER, OTHER]["withheld"]
    assert doc["withheld"] == {"cells": 3, "n_reports": 607}
    released = [c for c in doc["cells"] if not c["withheld"]]
    assert doc["n_reports"] == 10000 == sum(c["n_reports"] for c in released)
    for i, item in enumerate(doc["items"]):  # the fleet-wide estimate is the sum of the cells
        assert item["estimate"] == pytest.approx(sum(c["items"][i]["estimate"] for c in released), rel=1e-12)
        assert item["std_error"] ** 2 == pytest.approx(sum(c["items"][i]["std_error"] ** 2 for c in released))
    for key, c in cells.items():  # each released cell within its std errors of the truth
        if not c["withheld"]:
            z = [(it["estimate"] - t) / it["std_error"] for it, t in zip(c["items"], truth[key], strict=True)]
            assert max(map(abs, z)) < 4, (key, z)
    # a plain campaign decoding the released cells' reports at once gives the same (linear) counts
    plain = parse_campaign({"name": "checkout", "epsilon": 2.0, "oracle": "oue",
                            "domain": ["a", "b", "c", "d"]}, "w")
    whole = accumulator_for(plain.mechanism())
    for index in acc.cell_counts():
        if acc.inner[index].n >= camp.min_reports:
            whole.merge(copy.deepcopy(acc.inner[index]))
    direct, _ = publish.document(plain, 0, whole, time.time())
    for a, b in zip(doc["items"], direct["items"], strict=True):
        assert a["estimate"] == pytest.approx(b["estimate"], rel=1e-9)
        assert a["std_error"] == pytest.approx(b["std_error"], rel=1e-9)
    # marginals: by arm sums the platforms' released cells
    arms = {g["dimensions"]["arm"]: g for g in group_cells(doc["cells"], ("arm",))}
    assert arms["control"]["n_reports"] == 5000 and arms["control"]["withheld_cells"] == 1
    assert arms[OTHER]["withheld"] and arms[OTHER]["n_reports"] is None


def test_nothing_released_below_min_reports_in_every_cell() -> None:
    camp = campaign(min_reports=5000)
    acc, _ = filled(camp, np.random.default_rng(6), SIZES)
    assert acc.n >= camp.min_reports and not breakdown.releasable(camp, acc)
    assert breakdown.releasable(campaign(min_reports=3000), acc)


def test_numeric_cells_and_differences_by_hand() -> None:
    a = {"mean": {"estimate": 10.0, "std_error": 3.0}, "sum": {"estimate": 1000.0, "std_error": 300.0}}
    b = {"mean": {"estimate": 20.0, "std_error": 4.0}, "sum": {"estimate": 6000.0, "std_error": 1200.0}}
    total = sum_cells([(100, a), (300, b)])
    assert total["sum"]["estimate"] == 7000.0 and total["mean"]["estimate"] == 17.5
    assert total["sum"]["std_error"] == pytest.approx((300 ** 2 + 1200 ** 2) ** 0.5)
    assert total["mean"]["std_error"] == pytest.approx((300 ** 2 + 1200 ** 2) ** 0.5 / 400)
    [d] = differences((300, b), (100, a))
    assert d["value"] == "mean" and d["estimate"] == 10.0 and d["std_error"] == pytest.approx(5.0)
    t = {"items": [{"value": "x", "estimate": 600.0, "std_error": 40.0}]}
    c = {"items": [{"value": "x", "estimate": 300.0, "std_error": 30.0}]}
    [f] = differences((1000, t), (1000, c))
    var = (0.04 ** 2 + 0.6 * 0.4 / 1000) + (0.03 ** 2 + 0.3 * 0.7 / 1000)
    assert f["estimate"] == pytest.approx(0.3) and f["std_error"] == pytest.approx(var ** 0.5)
    assert f["ci_low"] == pytest.approx(0.3 - 1.959963984540054 * var ** 0.5)
    assert fragment_of({"mean": 1, "sum": 2, "n_reports": 3}) == {"mean": 1, "sum": 2}


def test_versions_read_ascii_digits_only() -> None:
    """Another script's digits are not a version (Python's ``\\d`` and ``int`` would read them; the
    JS SDK's mapping does not): such a value falls into ``other`` on every side."""
    from ldptel.dimensions import Dimension, bucketed

    assert bucketed("\u0664.\u0662", "major.minor") == "\u0664.\u0662"
    assert bucketed("\uff14.\uff12", "major") == "\uff14.\uff12"
    assert bucketed("v4.2.17", "major.minor") == "4.2"
    assert Dimension("v", ("4.2",), "major.minor").value_of("\u0664.\u0662") == "other"
