"""No arrival signal for campaigns in a shuffled mode (issue 36 item 5).

One device's sealed report moved the unauthenticated ``/healthz`` ``ingress_batches`` 0→1 and the
export API's 409 ``waiting`` 0→1 at once: the per-second signal an n−1 attacker needs to know when
a target sits alone in the shuffler's pool. Now ``/healthz`` counts ingress of the ``local``
campaigns only, ``waiting`` is in whole ``batch_min`` units for a shuffled campaign, and
``/metrics`` (with a token) keeps the exact count, pooled under ``campaign="(shuffled)"``. Real
app over HTTP, real Redis, the real SDK; no shuffler runs, so the reports stay in ingress."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from agg_support import HttpStack
from sealed_support import FAKES, LOCAL, devices, publish_keys, sealed_config

BATCH_MIN = FAKES["batch_min"]


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> Iterator[HttpStack]:
    cfg = sealed_config(tmp_path, [FAKES, LOCAL])
    publish_keys(cfg, redis_client)
    s = HttpStack(cfg, redis_url)
    yield s
    s.close()


def signals(stack: HttpStack) -> tuple[dict, object, float]:
    """(/healthz's collector component, the 409's waiting of sf-hist, /metrics' pooled ingress)."""
    status, _, body = stack.get("/healthz", token=None)
    assert status == 200, body
    collector = json.loads(body)["components"]["collector"]
    status, _, body = stack.get("/v1/campaigns/sf-hist/estimates")
    assert status == 409, body
    waiting = json.loads(body)["detail"]["waiting"]
    status, _, body = stack.get("/metrics")
    assert status == 200
    pooled = 'ldptel_ingress_entries{campaign="(shuffled)"}'
    line = next(x for x in body.decode().splitlines() if x.startswith(pooled))
    return collector, waiting, float(line.split()[-1])


def test_one_sealed_report_moves_no_public_count(stack: HttpStack, tmp_path: Path) -> None:
    before = signals(stack)
    assert devices(stack, tmp_path, "victim", "sf-hist", [3]) == 1
    after = signals(stack)
    assert after[0]["ingress_batches"] == before[0]["ingress_batches"] == 0  # was 0 → 1
    assert after[0]["ingress_group_fullest"] == 0 and after[0]["ingress_fullest"] == 0
    assert after[1] == before[1] == 0  # was 0 → 1
    assert (before[2], after[2]) == (0, 1)  # the operator's token still sees it

    # a batch_min's worth more: waiting says one batch_min (301 → 300); healthz still nothing
    assert devices(stack, tmp_path, "fleet", "sf-hist", [v % 16 for v in range(BATCH_MIN)]) == BATCH_MIN
    collector, waiting, pooled = signals(stack)
    # the pooled entries: one envelope per device (issue 36)
    assert (collector["ingress_batches"], waiting, pooled) == (0, BATCH_MIN, BATCH_MIN + 1)

    # a local campaign's ingress is still counted (its publications follow its reports anyway)
    assert devices(stack, tmp_path, "local", "loc-grr", [1, 2]) == 2
    assert signals(stack)[0]["ingress_batches"] == 1
