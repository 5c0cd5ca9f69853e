"""Breakdowns in the shuffled privacy modes (issues 26 and 28), against a real Redis and the real
collector over HTTP: the SDK seals each message and sends the cell's dimension values in the clear
in the envelope, the collector maps them to the closed lists, the shuffler releases a cell only as
a whole batch of at least ``batch_min`` of its own devices (never mixed with another cell's), and
the aggregator decrypts each release into its cell; the document's claim is the worst batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack
from sealed_support import FAKES, SHUFFLED, pinned, publish_keys, sealed_config, shuffle_and_aggregate

from ldptel import keys
from ldptel.client import TelemetryClient
from ldptel.proto import SealedBatch

CELLS_FAKES = {**FAKES, "name": "sf-cells", "dimensions": {"platform": ["android", "ios"]}}
CELLS_GRR = {**SHUFFLED, "name": "sh-arms", "dimensions": {"arm": ["control", "treatment"]},
             "experiment": "arm"}


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = sealed_config(tmp_path, [CELLS_FAKES, CELLS_GRR])
    publish_keys(cfg, redis_client)
    s = HttpStack(cfg, redis_url)
    yield cfg, s
    s.close()


def send(stack: HttpStack, tmp: Path, name: str, campaign: str, values, dims: dict, seed: int = 1) -> int:
    with TelemetryClient(stack.url, INGEST_TOKEN, queue_path=tmp / f"{name}.sqlite", accept_unrandomized=True,
                         rng=np.random.default_rng(seed), analyzer_signing_key=pinned(tmp)) as client:
        assert client.report_many(campaign, list(values), dimensions=dims) == len(values)
        result = client.flush(timeout=60)
        assert result.pending == 0, result
        return result.accepted


def doc(stack: HttpStack, campaign: str, query: str) -> dict:
    status, _, body = stack.get(f"/v1/campaigns/{campaign}/estimates?{query}")
    assert status == 200, body
    return json.loads(body)


def test_each_cell_released_on_its_own_batch_min(stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, s = stack
    rng = np.random.default_rng(8)
    android, ios = rng.integers(0, 16, 400), rng.integers(0, 16, 120)
    assert send(s, tmp_path, "a", "sf-cells", android, {"platform": "android"}) == 400
    assert send(s, tmp_path, "i", "sf-cells", ios, {"platform": "ios"}) == 120
    shuffle_and_aggregate(cfg, redis_client)
    parts = [SealedBatch.FromString(f[keys.ENTRY_BATCH])
             for _, f in redis_client.xrange(keys.stream_key("sf-cells"))]
    cells = {tuple((d.name, d.value) for d in p.dimensions) for p in parts}
    assert parts and cells == {(("platform", "android"),)}
    assert redis_client.xlen(keys.ingress_key("sf-cells")) > 0  # ios waits for its own batch_min
    first = doc(s, "sf-cells", "by=platform")
    assert [c["dimensions"] for c in first["cells"]] == [{"platform": "android"}]
    assert first["n_reports"] == 400 and first["privacy"]["batches"] == [400]
    assert send(s, tmp_path, "j", "sf-cells", rng.integers(0, 16, 200), {"platform": "ios"}) == 200
    shuffle_and_aggregate(cfg, redis_client)
    second = doc(s, "sf-cells", "by=platform")
    cells = {c["dimensions"]["platform"]: c for c in second["cells"]}
    assert cells["ios"]["n_reports"] == 320 and cells["android"]["n_reports"] == 400
    assert second["privacy"]["batches"] == [320, 400]  # the claim: the worst (smallest) batch
    fleet = doc(s, "sf-cells", "")
    for i, item in enumerate(fleet["items"]):
        assert item["estimate"] == pytest.approx(cells["ios"]["items"][i]["estimate"]
                                                 + cells["android"]["items"][i]["estimate"], abs=1e-6)


def test_shuffled_arms_compared(stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, s = stack
    rng = np.random.default_rng(9)
    control = rng.choice(8, size=400, p=[0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    treatment = rng.choice(8, size=400, p=[0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    send(s, tmp_path, "c", "sh-arms", control, {"arm": "control"}, seed=2)
    send(s, tmp_path, "t", "sh-arms", treatment, {"arm": "treatment"}, seed=3)
    shuffle_and_aggregate(cfg, redis_client)
    out = doc(s, "sh-arms", "by=arm&compare=treatment")
    assert out["comparison"]["withheld"] is False and out["privacy"]["batches"] == [400, 400]
    truth = {"control": np.bincount(control, minlength=8), "treatment": np.bincount(treatment, minlength=8)}
    for cell in out["cells"]:
        est = np.array([it["estimate"] for it in cell["items"]])
        se = np.array([it["std_error"] for it in cell["items"]])
        assert np.all(np.abs(est - truth[cell["dimensions"]["arm"]]) < 5 * se)
    covered = sum(d["ci_low"] <= (truth["treatment"][k] - truth["control"][k]) / 400 <= d["ci_high"]
                  for k, d in enumerate(out["differences"]))
    assert covered >= 7  # 8 intervals of the (here null) population difference
