"""A device's cumulative central ε across every shuffled campaign (ldptel.privacy.device_composition): the
PLD accountant composes each campaign's curve over its releases (retention / window) and across
campaigns; it is at least each campaign's own cumulative ε and grows with every campaign added;
it is computed off the request path (a thread; ``computing`` until then) and cached on disk, once
per machine; ``GET /v1/campaigns`` and the campaigns list page show it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import redis
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, HttpStack, signed_in
from sealed_support import LOCAL, publish_keys, sealed_config

from ldptel.campaigns.config import parse_campaign
from ldptel.privacy import device_composition as dc
from ldptel.privacy import plan_cache
from ldptel.privacy.accounting import cumulative_epsilon
from ldptel.privacy.planner import fakes_curve, shuffled_curve
from ldptel.privacy.release_claims import cumulative

FAKES = {"name": "f", "privacy_mode": "shuffled-fakes", "domain_size": 16, "central_epsilon": 1.0,
         "central_delta": 1e-6, "batch_min": 300, "window": "1d", "retention": "7d", "min_reports": 1}
GRR = {"name": "g", "privacy_mode": "shuffled", "oracle": "grr", "domain_size": 8, "central_epsilon": 0.8,
       "central_delta": 1e-7, "batch_min": 300, "window": "1h", "retention": "1d", "min_reports": 1}
FOREVER = {**FAKES, "name": "k", "window": "1d"}
FOREVER.pop("retention")


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDPTEL_PLAN_CACHE", str(tmp_path / "plans.json"))
    monkeypatch.setattr(plan_cache, "_memory", {})


def camps(*tables: dict) -> list:
    return [parse_campaign(t, "t") for t in tables]


def test_composes_windows_and_campaigns() -> None:
    f, g = camps(FAKES, GRR)
    doc = dc.device_composition([f, g], wait=True)
    assert doc["status"] == "ready" and doc["delta"] == 1e-7
    assert [(c["name"], c["releases"]) for c in doc["campaigns"]] == [("f", 7), ("g", 24)]
    assert doc["releases"] == 31 and doc["unbounded"] == []
    mu = f.mode.plan.fakes_per_bucket  # μ at batch_min = 300, the devices' and the shuffler's
    grr = shuffled_curve("grr", g.epsilon, 8, 300)
    expected = cumulative_epsilon([(fakes_curve(mu), 7), (grr, 24)], 1e-7)
    assert doc["epsilon"] == pytest.approx(expected)
    alone = [cumulative_epsilon([(fakes_curve(mu), 7)], 1e-7),
             cumulative_epsilon([(grr, 24)], 1e-7)]
    assert doc["epsilon"] > max(alone)
    # each campaign's own figure (its documents') is at its own δ: the composition is above both
    assert doc["epsilon"] > max(cumulative(f, 300)[1] or 0, cumulative(g, 300)[1] or 0)


def test_local_and_unbounded_campaigns() -> None:
    f, k, local = camps(FAKES, FOREVER, LOCAL)
    doc = dc.device_composition([local, k, f], wait=True)
    assert [c["name"] for c in doc["campaigns"]] == ["f"] and doc["unbounded"] == ["k"]
    assert "not composed: k" in doc["scope"]
    none = dc.device_composition([local])
    assert none["status"] == "none" and none["epsilon"] is None and none["campaigns"] == []


def test_computed_off_the_request_path_once_then_cached_on_disk(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    f, g = camps(FAKES, GRR)
    first = dc.device_composition([f, g])
    assert first["status"] == "computing" and first["epsilon"] is None
    deadline = time.monotonic() + 60
    while (doc := dc.device_composition([f, g]))["status"] != "ready":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert doc["epsilon"] > 0
    monkeypatch.setattr(plan_cache, "_memory", {})  # another process: the file has it
    monkeypatch.setattr(dc, "compose", lambda parts: pytest.fail("computed again"))
    assert dc.device_composition([f, g]) == doc
    stored = json.loads((tmp_path / "plans.json").read_text())
    assert any(key.startswith('["device_composition"') for key in stored)


def test_a_composition_that_cannot_be_computed_fails_once_and_is_not_retried() -> None:
    """Issue 34 item 4: T = 10⁷ releases gave MemoryError, not cached, so every fetch started it
    again (and 5.27 M grew the process by > 1 GB). A campaign as an older ldptel accepted it (1m
    windows kept 3660d) is now refused by the accountant at once, and the failure is kept."""
    import dataclasses
    import threading

    from proc_support import budget

    (f,) = camps(FAKES)
    old = dataclasses.replace(f, window="1m", retention="3660d")  # T = 5,270,400 (parse refuses it now)
    with budget() as cost:
        first = dc.device_composition([old])
        deadline = time.monotonic() + 10
        while (doc := dc.device_composition([old]))["status"] == "computing":
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert first["status"] == "computing" and doc["status"] == "failed" and "10,000" in doc["reason"], doc
    assert cost["seconds"] < 1 and cost["rss_growth_mb"] < 50, cost
    assert dc.device_composition([old])["status"] == "failed"
    assert not [t for t in threading.enumerate() if t.name == "ldptel-composition"]  # not started again


@pytest.mark.integration
def test_shown_in_the_device_answer_and_on_the_campaigns_page(redis_client: redis.Redis, redis_url: str,
                                                             tmp_path: Path) -> None:
    cfg = sealed_config(tmp_path, [FAKES, GRR, LOCAL])
    publish_keys(cfg, redis_client)
    http = HttpStack(cfg, redis_url)
    try:
        deadline = time.monotonic() + 60
        while True:
            status, _, raw = http.get("/v1/campaigns", token=INGEST_TOKEN)
            doc = json.loads(raw)["device_composition"]
            if doc["status"] == "ready":
                break
            assert status == 200 and doc["status"] == "computing" and time.monotonic() < deadline
            time.sleep(0.1)
        assert doc["releases"] == 31 and doc["epsilon"] == pytest.approx(
            dc.device_composition(cfg.campaigns, wait=True)["epsilon"])
        status, _, raw = http.get("/v1/campaigns", token=EXPORT_TOKEN)  # the export token reads it too
        assert status == 200 and json.loads(raw)["device_composition"] == doc
        status, _, page = http.request("GET", "/", headers={"Cookie": signed_in(http)})
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.decode()))
        assert status == 200
        words = (f"reports to every shuffled campaign (f, g) in every window over their retention periods "
                 f"— 31 releases in all — reveals at most central ε = {doc['epsilon']:.3g}")
        assert words in text, text[:2000]
    finally:
        http.close()
