"""The central ε of shuffled releases of local campaigns (issue 15, item 3; issue 36, reproduction
7): a published document's ``privacy`` object states no central ε (the window is republished per
report, so two publications can differ by one report: ``tests/test_differencing.py``) and says why
— the shuffler is off, or "republished per report" (computed at publication by the real worker on
a real Redis); ``GET /v1/campaigns`` (real app over HTTP) states the bound of one shuffler release
of ``shuffle_min_reports`` reports and what it covers."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import redis
from agg_support import INGEST_TOKEN, HttpStack, random_batches, write_config, xadd_batches

from ldptel import keys
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Config, load_config
from ldptel.privacy import central as central_privacy
from ldptel.privacy.clones import default_central_delta, shuffle_epsilon
from ldptel.server.pages import labels
from ldptel.store import published

LOCAL = {"epsilon_report", "epsilon_inf", "epsilon_lifetime", "memoize", "reports_per_window"}
CENTRAL = {"shuffled", "central_epsilon", "central_delta", "central_n", "central_reason", "central_scope"}
STORED = {"shuffled", "stored_central_epsilon", "stored_central_delta", "stored_central_n",
          "stored_central_reason", "central_scope"}
RAPPOR = {"bloom_bits": 16, "hashes": 2, "cohorts": 2, "f": 0.5, "p": 0.5, "q": 0.75,
          "candidates": ["a", "b"]}
CAMPAIGNS = [
    {"name": "fresh", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "min_reports": 10},
    {"name": "three", "oracle": "grr", "epsilon": 2.0, "domain_size": 4, "min_reports": 10,
     "window": "1d", "reports_per_window": 3, "central_delta": 1e-5, "shuffle_min_reports": 5000},
    {"name": "memo", "oracle": "rappor", **RAPPOR, "min_reports": 10},
    # ε₀ = 8 and 400 reports: the bound certifies no ε below ε₀ (None)
    {"name": "wide", "oracle": "grr", "epsilon": 8.0, "domain_size": 4, "min_reports": 10},
]
N = 400  # reports per campaign


def _config(tmp_path: Path, shuffler_enabled: bool = True) -> Config:
    path = tmp_path / "c.toml"
    write_config(path, CAMPAIGNS)
    if not shuffler_enabled:
        path.write_text(path.read_text() + "\n[shuffler]\nenabled = false\n")
    return load_config(path)


def _publish_all(cfg: Config, r: redis.Redis) -> dict[str, dict]:
    """Store N reports per campaign in its analysis stream (what the shuffler, or the collector
    without it, writes), run the real worker once, return each campaign's document privacy."""
    out = {}
    for i, camp in enumerate(cfg.campaigns):
        window = 0 if camp.window == "all" else 86400 * 20_000
        assert xadd_batches(r, camp, random_batches(camp, N, 100, seed=i), window=window) == N
    Worker(cfg, r).run(once=True)
    for camp in cfg.campaigns:
        window = 0 if camp.window == "all" else 86400 * 20_000
        pub = published.read(r, camp, window)
        assert pub is not None and pub.doc is not None and pub.n == N, camp.name
        assert {k: pub.doc["privacy"][k] for k in LOCAL} == camp.privacy()
        out[camp.name] = pub.doc["privacy"]
    return out


def test_published_documents_state_no_central_epsilon(redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert cfg.shuffler.enabled  # the default
    claims = _publish_all(cfg, redis_client)
    for camp in cfg.campaigns:
        p = claims[camp.name]
        assert set(p) == LOCAL | CENTRAL
        assert p["shuffled"] is True and p["central_n"] == N
        assert p["central_epsilon"] is None and p["central_delta"] is None and p["central_scope"] is None
        assert p["central_reason"] == central_privacy.REPUBLISHED, camp.name
    # what the old documents claimed here, from the window's n (ε₀ = 1, n = 400: 0.30)
    assert 0 < shuffle_epsilon(1.0, N, 1e-6) < 0.5
    assert central_privacy.REPUBLISHED.startswith("republished per report: differencing two publications "
                                                  "isolates single reports")
    for camp in cfg.campaigns:  # the hour plus the window's publications (one): no finer time
        window = 0 if camp.window == "all" else 86400 * 20_000
        pub = published.read(redis_client, camp, window)
        assert pub is not None and pub.decoded_at % 3600 == 0 and pub.doc["decoded_at"] == pub.decoded_at


def test_disabled_shuffler_claims_no_central_epsilon(redis_client: redis.Redis, tmp_path: Path) -> None:
    cfg = _config(tmp_path, shuffler_enabled=False)
    claims = _publish_all(cfg, redis_client)
    for p in claims.values():
        assert p["shuffled"] is False
        assert p["central_epsilon"] is None and p["central_delta"] is None and p["central_scope"] is None
        assert p["central_reason"] == central_privacy.NOT_SHUFFLED and p["central_n"] == N


def test_scope_group_privacy_and_memoized(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    three, memo, fresh = (cfg.campaign(n) for n in ("three", "memo", "fresh"))
    assert three is not None and memo is not None and fresh is not None
    claim = central_privacy.stored_claim(three, True)
    eps, delta = claim["stored_central_epsilon"], claim["stored_central_delta"]
    # group privacy over k = 3 reports, by chaining (ε, δ) three times:
    # P ≤ e^ε(e^ε(e^ε Q + δ) + δ) + δ = e^(3ε) Q + δ(1 + e^ε + e^(2ε))
    group = (3 * eps, delta * (1 + math.exp(eps) + math.exp(2 * eps)))
    assert f"= ({group[0]:.4g}, {group[1]:.3g})-DP" in claim["central_scope"]
    assert "up to 3 reports in a window: by group privacy" in claim["central_scope"]
    assert "compose by adding" in claim["central_scope"]
    one = central_privacy.stored_claim(fresh, True)["central_scope"]
    assert one.startswith("one report per device in one release") and "group privacy" not in one
    text = central_privacy.stored_claim(memo, True)["central_scope"]
    assert "Memoized" in text and "permanent randomized response" in text
    assert f"local ε∞ = {memo.privacy()['epsilon_inf']:.4g} only" in text
    assert "compose by adding (ε, δ)" not in text  # releases of memoized reports do not add up


@pytest.mark.parametrize("enabled", [True, False])
def test_campaigns_listing_states_the_bound_of_one_shuffler_release(redis_client: redis.Redis, redis_url: str,
                                                                    tmp_path: Path, enabled: bool) -> None:
    cfg = _config(tmp_path, shuffler_enabled=enabled)
    stack = HttpStack(cfg, redis_url)
    try:
        status, _, body = stack.request("GET", "/v1/campaigns",
                                        headers={"Authorization": f"Bearer {INGEST_TOKEN}"})
    finally:
        stack.close()
    assert status == 200
    claims = {c["name"]: c["privacy"] for c in json.loads(body)["campaigns"]}
    for camp in cfg.campaigns:
        p = claims[camp.name]
        assert set(p) == LOCAL | STORED and {k: p[k] for k in LOCAL} == camp.privacy()
        assert p["shuffled"] is enabled and p["stored_central_n"] == camp.shuffle_min_reports
        if not enabled:
            assert p["stored_central_epsilon"] is None and p["stored_central_delta"] is None
            assert p["stored_central_reason"] == central_privacy.NOT_SHUFFLED
            continue
        m = camp.shuffle_min_reports
        delta = camp.central_delta if camp.central_delta is not None else default_central_delta(m)
        assert p["stored_central_delta"] == delta
        assert p["stored_central_epsilon"] == shuffle_epsilon(p["epsilon_report"], m, delta)
    if enabled:
        assert "a release forced by shuffle_max_delay may hold fewer (down to one report: its local ε only)" \
            in claims["fresh"]["central_scope"]
        assert claims["three"]["stored_central_n"] == 5000 and claims["fresh"]["stored_central_n"] == 1000
        assert claims["wide"]["stored_central_epsilon"] is None  # ε₀ = 8 at 1,000 reports: no amplification
        assert claims["wide"]["stored_central_reason"].startswith("no amplification: for 1,000 shuffled")



def test_group_privacy_of_many_reports_is_stated_without_overflow(tmp_path: Path) -> None:
    """Regression: reports_per_window = 1,000,000 made δ·(e^(k·ε_c) − 1) overflow (OverflowError,
    a 500 from GET /v1/campaigns). When the group δ reaches 1, the scope says so and gives the
    local bound k·ε₀ instead."""
    cfg = write_config(tmp_path / "c.toml", [
        {"name": "many", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "reports_per_window": 1_000_000,
         "window": "1d"},
        {"name": "some", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "reports_per_window": 40,
         "window": "1d"}])
    many, some = cfg.campaign("many"), cfg.campaign("some")
    assert many is not None and some is not None
    text = central_privacy.stored_claim(many, True)["central_scope"]
    assert "group privacy gives no δ below 1 for 1000000 reports" in text and "k·ε₀ = 1e+06" in text
    eps, delta, _ = central_privacy.central_bound(some, 10**6, True)
    assert eps is not None and delta is not None
    scope = central_privacy.central_scope(some, eps, delta)
    group_delta = delta * sum(math.exp(i * eps) for i in range(40))
    assert group_delta < 1 and f"= ({40 * eps:.4g}, {group_delta:.3g})-DP" in scope


def test_page_words_of_each_case(tmp_path: Path) -> None:
    """The campaign page's words (``labels.central_note`` / ``central_head``) for the two cases, for
    an older publication that still states a number (no central ε either: it was not certified)
    and for a publication made before the central fields existed (nothing said)."""
    cfg = _config(tmp_path)
    fresh = cfg.campaign("fresh")
    assert fresh is not None
    on = {**fresh.privacy(), **central_privacy.release_claim(2_000_000, True)}
    old = {**on, "central_epsilon": 0.0053, "central_delta": 5e-8, "central_reason": None}
    for privacy in (on, old):
        note = str(labels.central_note(privacy))
        assert "comparing two publications can isolate one report, so no central ε is claimed" in note
        assert "each report's own ε = 1 is the guarantee" in note and "0.0053" not in note
        assert labels.central_head(privacy) == "· no central ε (republished per report)"
    off = {**fresh.privacy(), **central_privacy.release_claim(300, False)}
    assert str(labels.central_note(off)).startswith("The shuffler is off: reports reach the aggregator as "
                                                    "devices sent them, so there is no central ε")
    assert labels.central_head(off) == ""
    assert labels.central_note(fresh.privacy()) is None and labels.central_head(fresh.privacy()) == ""


def test_an_older_claim_is_published_again(redis_client: redis.Redis, tmp_path: Path) -> None:
    """A window published by an older ldptel (its claim a number from the window's n, its config
    digest without ``DOCUMENT_VERSION``) is stale: a starting worker publishes it again, with no
    central ε, though no report arrived."""
    cfg = _config(tmp_path)
    _publish_all(cfg, redis_client)
    fresh = cfg.campaign("fresh")
    assert fresh is not None
    key = keys.published_key("fresh", 0, fresh.version)
    old = json.loads(redis_client.hget(key, keys.PUB_DOC))
    old["privacy"].update(central_epsilon=0.3, central_delta=1e-6, central_reason=None)
    before = json.dumps([fresh.public(), fresh.labels(), fresh.min_reports], sort_keys=True, default=str)
    redis_client.hset(key, mapping={keys.PUB_DOC: json.dumps(old),  # the digest before issue 36
                                    keys.PUB_CONFIG: hashlib.sha256(before.encode()).hexdigest()})
    assert published.stale_windows(redis_client, fresh) == [0]
    Worker(cfg, redis_client).run(once=True)
    pub = published.read(redis_client, fresh, 0)
    assert pub is not None and pub.config == published.config_digest(fresh) and pub.doc is not None
    assert pub.doc["privacy"]["central_epsilon"] is None
    assert pub.doc["privacy"]["central_reason"] == central_privacy.REPUBLISHED
