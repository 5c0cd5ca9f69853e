"""Range and numeric campaigns in the shuffled modes end to end (issue 26): the real collector over
HTTP, the SDK sealing every message (and its fakes), the shuffler releasing a whole batch, the
aggregator decrypting and decoding it; the export API's ``/range``, ``/quantiles`` and ``/mean``
answer from the debiased histogram with the stated std errors and the central claim, and
the operator pages show them. Tolerances: 4.5 stated std errors (one release per campaign; the
variances themselves are checked over thousands of releases in tests/test_index_stats.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import EXPORT_TOKEN, HttpStack, signed_in
from sealed_support import devices, publish_keys, sealed_config, shuffle_and_aggregate

from ldptel.privacy.release_claims import fake_split

pytestmark = pytest.mark.slow

COMMON = {"central_epsilon": 1.0, "central_delta": 1e-6, "batch_min": 600, "min_reports": 1}
RANGE_FAKES = {"name": "r-fakes", "kind": "range", "privacy_mode": "shuffled-fakes", "domain_size": 64,
               **COMMON}
RANGE_GRR = {"name": "r-grr", "kind": "range", "privacy_mode": "shuffled", "domain_size": 64, **COMMON}
MEAN_FAKES = {"name": "m-fakes", "kind": "numeric", "privacy_mode": "shuffled-fakes", "lower": 0,
              "upper": 100, "grid_points": 16, **COMMON}
MEAN_OUE = {"name": "m-oue", "kind": "numeric", "privacy_mode": "shuffled", "oracle": "oue", "lower": 0,
            "upper": 100, **COMMON}
Z = 4.5


@pytest.fixture
def stack(redis_client: redis.Redis, redis_url: str, tmp_path: Path):
    cfg = sealed_config(tmp_path, [RANGE_FAKES, RANGE_GRR, MEAN_FAKES, MEAN_OUE])
    publish_keys(cfg, redis_client)
    http = HttpStack(cfg, redis_url)
    yield cfg, http
    http.close()


def get(http: HttpStack, path: str) -> dict:
    status, _, body = http.request("GET", path, headers={"Authorization": f"Bearer {EXPORT_TOKEN}"})
    assert status == 200, body
    return json.loads(body)


def claim_ok(doc: dict, mode: str) -> None:
    p = doc["privacy"]
    assert p["privacy_mode"] == mode and p["batches"] == [doc["n_reports"]]
    assert 0 < p["central_epsilon_lower"] <= p["central_epsilon"] <= 1.0


def test_ranges_quantiles_means_and_pages(stack, redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg, http = stack
    rng = np.random.default_rng(2026)
    values = np.minimum(rng.geometric(0.05, 800) - 1, 63)
    reals = rng.gamma(4.0, 8.0, 800)  # some above 100: clipped on the device
    assert devices(http, tmp_path, "a", "r-fakes", values.tolist()) == 800
    assert devices(http, tmp_path, "b", "r-grr", values.tolist(), seed=1) == 800
    assert devices(http, tmp_path, "c", "m-fakes", reals.tolist()) == 800
    assert devices(http, tmp_path, "d", "m-oue", reals.tolist(), seed=2) == 800
    shuffle_and_aggregate(cfg, redis_client)

    for name, mode in (("r-fakes", "shuffled-fakes"), ("r-grr", "shuffled")):
        for lo, hi in ((0, 9), (10, 40), (0, 63)):
            doc = get(http, f"/v1/campaigns/{name}/range?lo={lo}&hi={hi}&window=current")
            claim_ok(doc, mode)
            truth = int(((values >= lo) & (values <= hi)).sum())
            assert doc["method"] == "histogram" and doc["n_reports"] == 800
            assert abs(doc["estimate"] - truth) <= Z * doc["std_error"] + 1e-6, (name, lo, hi, doc)
        quant = get(http, f"/v1/campaigns/{name}/quantiles?q=0.25,0.5,0.9&window=current")
        claim_ok(quant, mode)
        for row in quant["items"]:  # the rank of the value found is within 4.5 rank std errors of q
            x = row["value"]
            below, upto = float(np.mean(values < x)), float(np.mean(values <= x))
            slack = Z * row["rank_std_error"]
            assert below - slack <= row["q"] <= upto + slack, (name, row, below, upto)

    clipped = np.clip(reals, 0, 100)
    for name, mode in (("m-fakes", "shuffled-fakes"), ("m-oue", "shuffled")):
        doc = get(http, f"/v1/campaigns/{name}/mean?window=current")
        claim_ok(doc, mode)
        assert doc["mechanism"] == "grid" and doc["grid_points"] == (16 if name == "m-fakes" else 32)
        assert abs(doc["mean"]["estimate"] - clipped.mean()) <= Z * doc["mean"]["std_error"], doc
        assert doc["sum"]["estimate"] == pytest.approx(800 * doc["mean"]["estimate"])
    # the histogram's std error is the rounding and the fakes only: √(n·h²/4 + F·σ²_g)/n, F the
    # release's fakes, Poisson(d·μ) with μ = μ_s + λ·n/d (the shuffler's and the devices')
    fakes_doc = get(http, "/v1/campaigns/m-fakes/mean?window=current")
    h, grid_var = 100 / 15, np.var(np.linspace(0, 100, 16))
    mean_f = fake_split(cfg.campaign("m-fakes").mode).honest_mu(800, 16) * 16
    low, high = (np.sqrt(800 * h * h / 4 + f * grid_var) / 800
                 for f in (mean_f - Z * np.sqrt(mean_f), mean_f + Z * np.sqrt(mean_f)))
    assert low <= fakes_doc["mean"]["std_error"] <= high, (low, fakes_doc["mean"], high)

    session = {"Cookie": signed_in(http)}
    for name, words in (("r-fakes", "Histogram over the values (true index + fakes)"),
                        ("m-fakes", "16 grid points, randomized rounding (true index + fakes)"),
                        ("m-oue", "32 grid points, randomized rounding (OUE)")):
        status, _, page = http.request("GET", f"/campaigns/{name}?window=0", headers=session)
        text = re.sub(r"\s+", " ", page.decode())
        assert status == 200 and words in text, text[:500]
        assert re.search(r"central ε (between [\d.]+ and [\d.]+|= [\d.]+) \(δ", text), text[-3000:]
        assert "1 shuffled batch of 800 devices" in text
    status, _, page = http.request("GET", "/campaigns/m-fakes?window=0", headers=session)
    assert "rounds its value" in page.decode() and "Mean per device" in page.decode()
    status, _, csv = http.request("GET", "/campaigns/r-fakes/download/cdf.csv?window=0", headers=session)
    rows = csv.decode().splitlines()
    assert status == 200 and rows[0].startswith("value,cdf") and rows[-1].split(",")[1] == "1.0", rows[:3]
