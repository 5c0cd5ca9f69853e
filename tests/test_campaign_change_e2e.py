"""Issue 13's scenario end to end against ``ldptel serve`` (embedded Redis, aggregator beside it):
change ε of one campaign and, separately, shrink another's domain through the admin API while
devices with cached configs keep sending. No restart, no 5xx, every version's estimates within 4
of its own std errors of its own truth, no valid report dropped by the SDK, and the untouched
campaign keeps counting.

Tolerance: 4 published std errors per item (GRR's exact count variance; ~6e-5 false-failure
probability per item, 26 items)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from http_support import http_request, not_yet_published, start_collector, wait_counted

from ldptel.client import TelemetryClient

pytestmark = pytest.mark.slow

INGEST, EXPORT, ADMIN = "ingest-token-e2e-1", "export-token-e2e-1", "admin-token-e2e-1"
SHAPE = {"name": "shape", "oracle": "grr", "epsilon": 1.0, "domain_size": 5, "min_reports": 100}
SIZES = {"name": "sizes", "oracle": "grr", "epsilon": 2.0, "domain_size": 8, "min_reports": 100}
TRUTH = {  # (campaign, version) → true counts of what devices send under that version
    ("shape", 1): [6000, 2000, 1000, 500, 500],
    ("shape", 2): [500, 500, 1000, 2000, 6000],
    ("sizes", 1): [1000, 800, 600, 400, 200, 100, 50, 50],
    ("sizes", 2): [200, 400, 600, 800, 1000, 200],
}
CONFIG = f"""
[server]
ingest_tokens = ["{INGEST}"]
export_tokens = ["{EXPORT}"]
admin_tokens = ["{ADMIN}"]
rate_limit_per_address_per_minute = 0   # the whole fleet sends from one loopback address
max_unfinished_bodies_per_address = 64  # … concurrently

[aggregator]
publish_interval = 0.5
block_ms = 200

[[campaigns]]
name = "shape"
oracle = "grr"
epsilon = 1.0
domain_size = 5
min_reports = 100
shuffle_max_delay = "1s"

[[campaigns]]
name = "sizes"
oracle = "grr"
epsilon = 2.0
domain_size = 8
min_reports = 100
shuffle_max_delay = "1s"

[[campaigns]]
name = "steady"
oracle = "oue"
epsilon = 1.0
domain = ["a", "b", "c"]
min_reports = 100
shuffle_max_delay = "1s"
"""


def values(truth: list[int], seed: int) -> list[int]:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(len(truth)), truth)).tolist()


NOT_YET = "503 not_yet_published"  # a released window before its first publication (README)


class Calls:
    """HTTP calls of the test, every status kept (none may be 5xx but ``NOT_YET``)."""

    def __init__(self, url: str) -> None:
        self.url, self.statuses = url, []

    def __call__(self, method: str, path: str, token: str, body: object = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        reply = http_request(self.url, method, path, data, {"Authorization": f"Bearer {token}",
                                                           "Content-Type": "application/json"})
        parsed = reply.parsed()
        self.statuses.append(NOT_YET if not_yet_published(reply.status, parsed) else reply.status)
        return reply.status, parsed


def test_changing_a_campaign_under_live_traffic(tmp_path: Path) -> None:
    col = start_collector(tmp_path, CONFIG, None, workers=2, stdout=subprocess.DEVNULL,
                          env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
    call = Calls(col.url)
    devices: list[TelemetryClient] = []

    def device(seed: int) -> TelemetryClient:
        devices.append(TelemetryClient(col.url, INGEST, queue_path=tmp_path / f"dev{seed}.sqlite",
                                       rng=np.random.default_rng(seed), batch_size=500))
        return devices[-1]

    try:
        old = device(1)  # caches version 1 of every campaign (config_ttl 300 s)
        v1_shape, v1_sizes = values(TRUTH["shape", 1], 11), values(TRUTH["sizes", 1], 12)
        old.report_many("shape", v1_shape[:5000])
        old.report_many("steady", ["a", "b", "c"] * 200)
        assert old.flush(timeout=60).ok
        old.report_many("sizes", v1_sizes)  # queued, not sent yet, when the domain shrinks

        status, doc = call("PUT", "/v1/admin/campaigns/shape", ADMIN, {**SHAPE, "epsilon": 3.0})
        assert status == 200 and (doc["action"], doc["version"]) == ("new_version", 2)
        old.report_many("shape", v1_shape[5000:])  # still the cached ε = 1 config
        old.report_many("steady", ["c"] * 300)
        status, doc = call("PUT", "/v1/admin/campaigns/sizes", ADMIN, {**SIZES, "domain_size": 6})
        assert status == 200 and (doc["action"], doc["version"]) == ("new_version", 2)
        result = old.flush(timeout=60)
        assert result.ok and result.dropped == 0, result

        time.sleep(2.0)  # every collector worker has the new versions (reloaded within 2 s)
        new = device(2)  # fetches version 2 of shape and sizes
        assert new.campaigns()["shape"]["version"] == 2 and new.campaigns()["sizes"]["domain_size"] == 6
        new.report_many("shape", values(TRUTH["shape", 2], 21))
        new.report_many("sizes", values(TRUTH["sizes", 2], 22))
        new.report_many("steady", ["b"] * 100)
        result = new.flush(timeout=60)
        assert result.ok and result.dropped == 0, result
        for dev in devices:
            assert dev.health().dropped == {}

        def estimates(name: str, version: int) -> dict:
            expected = sum(TRUTH.get((name, version), [])) or 1000
            return wait_counted(lambda: call("GET", f"/v1/campaigns/{name}/estimates?version={version}",
                                             EXPORT), expected)

        for (name, version), truth in TRUTH.items():
            doc = estimates(name, version)
            est = np.array([it["estimate"] for it in doc["items"]])
            se = np.array([it["std_error"] for it in doc["items"]])
            assert doc["version"] == version and len(est) == len(truth)
            assert np.all(np.abs(est - np.array(truth)) <= 4 * se), (name, version, est, truth, se)
        assert estimates("shape", 1)["epsilon"] == 1.0 and estimates("shape", 2)["epsilon"] == 3.0
        steady = estimates("steady", 1)  # untouched: kept counting through both changes
        assert steady["n_reports"] == 1000
        status, listing = call("GET", "/v1/campaigns/shape/versions", EXPORT)
        assert [v["n_reports"] for v in listing["versions"]] == [10000, 10000]
        assert col.proc.poll() is None  # never restarted
        assert all(s == NOT_YET or s < 500 for s in call.statuses), call.statuses
        log = col.log()
        assert "Traceback" not in log and "StateMismatch" not in log and "restart" not in log, log
    finally:
        for dev in devices:
            dev.close(flush_timeout=None)
        col.stop()
