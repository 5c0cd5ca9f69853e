"""The ``privacy`` object (issue 14 item 4): in ``GET /v1/campaigns`` and in every export document
(estimates, heavy hitters, range, quantiles), through the real app over HTTP, the real
worker and Redis; and the campaign page's words about what a device reveals over time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, HttpStack, shuffle_once, write_config

from ldptel.aggregator.worker import Worker
from ldptel.server.pages import labels

KEYS = {"epsilon_report", "epsilon_inf", "epsilon_lifetime", "memoize", "reports_per_window"}
RAPPOR = {"bloom_bits": 16, "hashes": 2, "cohorts": 2, "f": 0.5, "p": 0.5, "q": 0.75,
          "candidates": ["a", "b"]}
CAMPAIGNS = [
    {"name": "freq", "oracle": "grr", "epsilon": 1.5, "domain_size": 4, "min_reports": 10,
     "window": "1d", "reports_per_window": 2},
    {"name": "memo", "oracle": "rappor", **RAPPOR, "min_reports": 10},
    {"name": "hh", "kind": "heavy_hitters", "epsilon": 2.0, "max_length": 2, "min_reports": 10},
    {"name": "rng", "kind": "range", "epsilon": 1.0, "domain_size": 16, "min_reports": 10},
]
EXPORTS = {"freq": ["estimates"], "memo": ["estimates"], "hh": ["heavy-hitters"],
           "rng": ["range?lo=1&hi=5", "quantiles?q=0.5"]}


def get_json(stack: HttpStack, path: str, token: str = EXPORT_TOKEN) -> tuple[int, dict]:
    status, _, body = stack.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    return status, json.loads(body)


def test_privacy_object_in_campaigns_and_every_export_document(redis_client: redis.Redis,
                                                                redis_url: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", CAMPAIGNS)
    stack = HttpStack(cfg, redis_url)
    try:
        status, listing = get_json(stack, "/v1/campaigns", INGEST_TOKEN)
        assert status == 200
        # the local claim; the central fields (issue 15) are tests/test_central_privacy.py's
        claims = {c["name"]: {k: c["privacy"][k] for k in KEYS} for c in listing["campaigns"]}
        assert all(KEYS <= set(c["privacy"]) for c in listing["campaigns"])
        assert claims["freq"] == {"epsilon_report": 1.5, "epsilon_inf": None, "epsilon_lifetime": None,
                                  "memoize": False, "reports_per_window": 2}
        # RAPPOR memoizes: ε∞ = 2h·ln((1 − f/2)/(f/2)) = 4·ln 3; any number of strings: no lifetime bound
        assert claims["memo"]["memoize"] is True and claims["memo"]["epsilon_lifetime"] is None
        assert claims["memo"]["epsilon_inf"] == pytest.approx(4 * math.log(3))
        assert claims["hh"]["reports_per_window"] == 1  # the default
        rng = np.random.default_rng(7)
        for camp in cfg.campaigns:
            values: list = list(rng.integers(0, 4, 50))
            if camp.name == "memo":
                values = ["a", "b"] * 25
            elif camp.name == "hh":
                values = ["ab", "xy"] * 25
            stack.post_batch(camp.mechanism().encode_batch(values, rng=rng, campaign=camp.name))
        shuffle_once(cfg, redis_client)
        Worker(cfg, redis_client).run(once=True)
        for name, paths in EXPORTS.items():
            for path in paths:
                sep = "&" if "?" in path else "?"  # the day in progress (freq has 1 d windows)
                status, doc = get_json(stack, f"/v1/campaigns/{name}/{path}{sep}window=current")
                assert status == 200, (name, path, doc)
                assert {k: doc["privacy"][k] for k in KEYS} == claims[name], (name, path)
                assert doc["privacy"]["central_n"] == doc["n_reports"], (name, path)
    finally:
        stack.close()


def test_campaign_page_words(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", CAMPAIGNS)
    freq, memo = cfg.campaign("freq"), cfg.campaign("memo")
    assert freq is not None and memo is not None
    text = str(labels.epsilon_note(freq))
    assert "at most 2 reports per device per day" in text and "up to ε = 3 per day" in text
    text = str(labels.epsilon_note(memo))
    assert "a device that keeps its value reveals at most ε∞ = 4.39 however long it reports" in text
