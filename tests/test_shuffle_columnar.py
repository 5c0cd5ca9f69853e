"""Unit tier: the shuffler reads a group's columns once (``repack.merged_columns``) and the result is
the batch-by-batch columns (``repack.parse_all``) concatenated, for every mechanism; where it
cannot merge (a bit vector packed over the batch, mixed fields, a batch of the wrong size) it says
so and the batch-by-batch path is taken; a re-packed release holds exactly the reports it took."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ldptel.campaigns.config import parse_config
from ldptel.proto import ReportBatch
from ldptel.shuffler.repack import merged_columns, parse_all, repack

CAMPAIGNS = [
    {"name": "grr", "oracle": "grr", "epsilon": 1.0, "domain_size": 12},
    {"name": "olh", "oracle": "olh", "epsilon": 1.0, "domain_size": 64},
    {"name": "oue", "oracle": "oue", "epsilon": 1.0, "domain_size": 30},
    {"name": "sue", "oracle": "sue", "epsilon": 1.0, "domain_size": 9},
    {"name": "had", "oracle": "hadamard", "epsilon": 1.0, "domain_size": 20},
    {"name": "rap", "oracle": "rappor", "bloom_bits": 32, "hashes": 2, "cohorts": 4, "f": 0.25, "p": 0.35,
     "q": 0.65, "candidates": [f"c{i}" for i in range(12)]},
    {"name": "hh", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 4, "width": 16},
    {"name": "haar", "kind": "range", "epsilon": 2.0, "domain_size": 64, "method": "haar"},
    {"name": "tree", "kind": "range", "epsilon": 2.0, "domain_size": 64, "method": "hierarchical"},
    {"name": "num", "kind": "numeric", "mechanism": "piecewise", "epsilon": 1.0, "lower": 0.0, "upper": 10.0},
]
MERGED = {"grr", "olh", "oue", "sue", "rap", "hh"}  # payloads without a bit vector packed over the batch


def batches(camp, sizes: list[int], seed: int = 3):
    mech = camp.mechanism()
    rng = np.random.default_rng(seed)
    out = []
    for size in sizes:
        if camp.kind == "numeric":
            values = rng.uniform(0, 10, size)
        elif camp.kind == "heavy_hitters":
            values = [f"w{i}" for i in rng.integers(0, 20, size)]
        elif camp.kind == "range":
            values = rng.integers(0, 64, size)
        elif camp.oracle == "rappor":
            values = [f"c{i}" for i in rng.integers(0, 12, size)]
        else:
            values = rng.integers(0, camp.domain_size, size)
        out.append(mech.encode_batch(values, rng=rng, campaign=camp.name))
    return out


@pytest.mark.parametrize("table", CAMPAIGNS, ids=[c["name"] for c in CAMPAIGNS])
def test_merged_columns_are_the_batches_columns_concatenated(table: dict) -> None:
    camp = parse_config({"campaigns": [table]}).campaigns[0]
    mech = camp.mechanism()
    group = batches(camp, [1, 7, 1, 13, 2, 1, 40])
    parsed, bad = parse_all(mech, group)
    assert bad == [] and len(parsed) == len(group)
    whole = merged_columns(mech, group)
    if table["name"] not in MERGED:
        assert whole is None
        return
    assert whole is not None
    cols, n = whole
    assert n == sum(b.count for b in group)
    for name, col in cols.items():
        expect = np.concatenate([np.asarray(c[name]) for c, _ in parsed], axis=0)
        assert np.array_equal(np.asarray(col), expect), name


def test_a_batch_of_the_wrong_size_is_not_merged() -> None:
    camp = parse_config({"campaigns": [CAMPAIGNS[1]]}).campaigns[0]
    group = batches(camp, [3, 4])
    group[1].olh.values.append(5)  # 5 values for 4 reports
    assert merged_columns(camp.mechanism(), group) is None
    parsed, bad = parse_all(camp.mechanism(), group)
    assert len(parsed) == 1 and bad == [group[1]]


@pytest.mark.parametrize("table", CAMPAIGNS, ids=[c["name"] for c in CAMPAIGNS])
def test_a_release_holds_exactly_the_reports_it_took(table: dict) -> None:
    camp = parse_config({"campaigns": [table]}).campaigns[0]
    mech = camp.mechanism()
    group = batches(camp, [1, 9, 30, 1, 5], seed=8)
    out = repack(mech, group, camp.name, 1, batch_reports=10)
    assert out.forwarded == [] and sum(c for _, c in out.shuffled) == 46

    def rows(bs) -> Counter:
        cols = [mech.columns(b) for b in bs]
        names = sorted(cols[0])
        return Counter(tuple(np.asarray(c[k])[i].tobytes() if len(c[k]) else b"" for k in names)
                       for c, b in zip(cols, bs, strict=True) for i in range(b.count))

    assert rows([ReportBatch.FromString(d) for d, _ in out.shuffled]) == rows(group)


def test_a_cells_batches_merge_and_the_release_names_the_cell() -> None:
    """Batches of one cell (their dimension values, issue 28) and a window field merge like any;
    the re-packed batches carry the cell's values (``repack(cell=)``)."""
    camp = parse_config({"campaigns": [CAMPAIGNS[1]]}).campaigns[0]
    mech = camp.mechanism()
    group = batches(camp, [2, 5, 1])
    for b in group:
        b.dimensions.add(name="platform", value="ios")
        b.window = 1_700_000_000
    assert merged_columns(mech, group) is not None
    out = repack(mech, group, camp.name, 1, batch_reports=100, cell=(("platform", "ios"),))
    [(data, count)] = out.shuffled
    batch = ReportBatch.FromString(data)
    assert count == 8 and [(d.name, d.value) for d in batch.dimensions] == [("platform", "ios")]
