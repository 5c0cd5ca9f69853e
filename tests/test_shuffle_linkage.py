"""Linkage after the shuffler (issue 15): devices whose reports are recognizable send batches
through the real collector (HTTP) into Redis; after ``ldptel shuffle``'s release:

(a) no analysis batch is dominated by one device's batch. Each device b sends one batch of
    ``K`` GRR reports of the value b at ε = 10 with d = ``D`` (GRR keeps the value with probability
    e^ε/(e^ε + d − 1) ≈ 0.982), so a device's batch is one value repeated. Statistic: for each
    analysis batch (m reports), the largest number of its reports that share a value, maximised
    over the analysis batches. Null (a uniform permutation of the N reports of the release, the
    reports themselves held fixed): the count of value v in an analysis batch of m is
    hypergeometric(N, M_v, m), M_v = the reports of value v in the release (≈ K for a device's
    value). A union bound over analysis batches × values with ``scipy.stats.hypergeom.sf`` gives
    P(max ≥ t) ≤ Σ_a Σ_v P(Hyp(N, M_v, m_a) ≥ t); t is the least threshold with bound ≤ 1e-6,
    and every analysis batch's max must stay below it. Negative control: the same run with the
    permutation replaced by the identity (a broken shuffler) must exceed t.
(b) no key or entry in Redis carries a time finer than the window, a batch id or a device's
    grouping once the ingress streams are empty (``redis_audit.audit``; its own negative control
    plants each kind of leak and checks that it is reported).
(c) the estimates equal those of the same batches through a stack with ``[shuffler] enabled =
    false``, exactly (counts are order-free).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack, random_batches, shuffle_once, write_config
from http_support import Poster, start_collector
from ingest_support import INGEST_TOKEN, config_text
from redis_audit import audit, plant_leaks
from scipy.stats import hypergeom

from ldptel import keys
from ldptel.aggregator import store
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Campaign, Config, load_config
from ldptel.proto import ReportBatch
from ldptel.shuffler import repack
from ldptel.store import published, tally
from ldptel.store.redis_server import EmbeddedRedis

EPS, D, DEVICES, K, M = 10.0, 400, 200, 20, 200  # M: [shuffler] batch_reports
ALPHA = 1e-6  # the union bound's false-alarm probability
CAMPAIGN = {"name": "link", "oracle": "grr", "epsilon": EPS, "domain_size": D, "window": "1h",
            "reports_per_window": 1_000_000, "min_reports": 1}


def ingest(tmp_path: Path, redis_url: str, enabled: bool = True, window: str = "1h") -> Config:
    """The devices' batches through the real collector (HTTP) of a config with the shuffler on
    or off; returns the config."""
    cfg = write_config(tmp_path / f"link-{enabled}.toml", [{**CAMPAIGN, "window": window}],
                       shuffler={"enabled": enabled, "batch_reports": M})
    camp = cfg.campaign("link")
    assert camp is not None
    mech = camp.mechanism()
    stack = HttpStack(cfg, redis_url)
    try:
        for b in range(DEVICES):
            batch = mech.encode_batch(np.full(K, b), rng=np.random.default_rng(1000 + b), campaign="link")
            assert stack.post_batch(batch)["accepted"] == K
    finally:
        stack.close()
    return cfg


def analysis_values(r: redis.Redis, camp: Campaign) -> list[tuple[int, np.ndarray]]:
    """(window, reported values) of every analysis-stream batch of ``camp``."""
    mech = camp.mechanism()
    out = []
    for shard in range(camp.shards):
        for _, fields in r.xrange(keys.stream_key(camp.name, shard)):
            batch = ReportBatch.FromString(fields[keys.ENTRY_BATCH])
            out.append((int(fields[keys.ENTRY_WINDOW]), np.asarray(mech.checked_columns(batch)["values"])))
    return out


def threshold(batches: list[tuple[int, np.ndarray]]) -> int:
    """The least t with Σ_a Σ_v P(Hyp(N_w, M_v, m_a) ≥ t) ≤ ALPHA (a: analysis batches, w: the
    window = release it belongs to, M_v: reports of value v in that release)."""
    per_window: dict[int, list[np.ndarray]] = {}
    for w, values in batches:
        per_window.setdefault(w, []).append(values)
    ts = np.arange(1, 4 * K)[:, None]
    bound = np.zeros(ts.shape[0])
    for parts in per_window.values():
        everything = np.concatenate(parts)
        mv, n_values = np.unique(np.bincount(everything), return_counts=True)  # value counts M_v
        for m, n_batches in zip(*np.unique([p.size for p in parts], return_counts=True), strict=True):
            bound += n_batches * (n_values * hypergeom.sf(ts - 1, everything.size, mv, m)).sum(axis=1)
    assert bound[-1] <= ALPHA, "no threshold below 4K"
    return int(ts[np.argmax(bound <= ALPHA), 0])


def worst_share(batches: list[tuple[int, np.ndarray]]) -> int:
    """The statistic: the most reports of one analysis batch that share a value."""
    return max(int(np.bincount(values, minlength=D).max()) for _, values in batches)


def shuffled(tmp_path: Path, r: redis.Redis, redis_url: str) -> tuple[Config, list[tuple[int, np.ndarray]]]:
    cfg = ingest(tmp_path, redis_url)
    camp = cfg.campaign("link")
    assert camp is not None
    stats = shuffle_once(cfg, r)
    batches = analysis_values(r, camp)
    windows = {w for w, _ in batches}
    # the null's N is a release's size: one release per window (shuffle_once holds all of them)
    assert stats.releases == len(windows) and stats.ingress_reports == DEVICES * K
    assert sum(v.size for _, v in batches) == DEVICES * K
    per_window = {w: sum(v.size for x, v in batches if x == w) for w in windows}
    assert max(v.size for _, v in batches) <= M
    assert len(batches) == sum(-(-n // M) for n in per_window.values())  # ⌈N_w / M⌉ per release
    return cfg, batches


def test_no_analysis_batch_is_dominated_by_one_device(redis_client: redis.Redis, redis_url: str,
                                                      tmp_path: Path) -> None:
    _, batches = shuffled(tmp_path, redis_client, redis_url)
    t = threshold(batches)
    # power: a device's whole batch (K ≈ 20 same values; ≥ 17 kept with probability > 0.999)
    # would pass the threshold by far
    assert t <= K // 2 + 3, t
    assert worst_share(batches) < t, (worst_share(batches), t)


def test_negative_control_identity_permutation_is_caught(redis_client: redis.Redis, redis_url: str,
                                                         tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken shuffler (the identity instead of a uniform permutation) fails the statistic."""
    monkeypatch.setattr(repack, "permutation", lambda rng, n: np.arange(n, dtype=np.int64))
    _, batches = shuffled(tmp_path, redis_client, redis_url)
    assert worst_share(batches) >= threshold(batches)


def state_and_estimates(r: redis.Redis, cfg: Config, redis_url: str) -> tuple[dict, dict]:
    """After the aggregator drained: each window's accumulator arrays and the /estimates doc."""
    camp = cfg.campaign("link")
    assert camp is not None
    Worker(cfg, r).run(once=True)
    state = {}
    for w in tally.list_windows(r, camp):
        acc, n = store.load_accumulator(r, camp, w)
        state[w] = (n, {k: np.asarray(v).tolist() for k, v in acc.state.items()})
    stack = HttpStack(cfg, redis_url)
    try:
        status, _, body = stack.get("/v1/campaigns/link/estimates?window=current")  # the hour in progress
    finally:
        stack.close()
    assert status == 200, body
    doc = json.loads(body)
    return state, {k: doc[k] for k in ("n_reports", "items")}


@pytest.mark.slow  # two stacks: about 4 s
def test_estimates_equal_a_run_without_the_shuffler(redis_client: redis.Redis, redis_url: str,
                                                    tmp_path: Path) -> None:
    # one window ("all"), so that an hour boundary between the two runs cannot split one of them
    cfg = ingest(tmp_path, redis_url, enabled=True, window="all")
    shuffle_once(cfg, redis_client)
    with_shuffler = state_and_estimates(redis_client, cfg, redis_url)
    redis_client.flushdb()
    plain = ingest(tmp_path, redis_url, enabled=False, window="all")
    assert not redis_client.exists(keys.ingress_key("link"))  # the unshuffled path
    without = state_and_estimates(redis_client, plain, redis_url)
    assert with_shuffler[1]["n_reports"] == DEVICES * K
    assert with_shuffler == without


def test_nothing_in_redis_carries_a_fine_time_a_batch_id_or_a_grouping(
        redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    cfg = ingest(tmp_path, redis_url)
    shuffle_once(cfg, redis_client)
    state_and_estimates(redis_client, cfg, redis_url)  # aggregated and published
    assert audit(redis_client, cfg) == []


def test_audit_reports_each_kind_of_leak(redis_client: redis.Redis, tmp_path: Path) -> None:
    """Negative control of (b): every planted leak is named by the audit."""
    cfg = write_config(tmp_path / "c.toml", [CAMPAIGN])
    expected = plant_leaks(redis_client, cfg)
    problems = audit(redis_client, cfg)
    for what in expected:
        assert any(what in p for p in problems), (what, problems)


@pytest.mark.slow  # a served stack: about 10 s
def test_audit_of_a_served_stack(tmp_path: Path) -> None:
    """(b) on the production layout: ``ldptel serve --aggregator`` with its aggregator and
    shuffler children, every oracle of ingest_support's config (shards, an hourly window), batches
    posted over HTTP; once every report is counted, ingress is empty and every window published,
    the audit finds nothing — with the operational keys of a real stack present (registry,
    heartbeat, session secret, rate-limit counters, publication claims). The Redis is the test's
    own (an EmbeddedRedis without users): the audit reads every key, which serve's embedded Redis
    allows only its default user, whose password only serve holds."""
    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    col = start_collector(tmp_path, config_text(), server.url, workers=1, args=["--aggregator"])
    try:
        r = redis.Redis.from_url(server.url)
        cfg = load_config(col.config_path)
        poster = Poster(col.url)
        try:
            for i, camp in enumerate(cfg.campaigns):
                for batch in random_batches(camp, 250, 50, seed=i):
                    assert poster.post(batch.SerializeToString(), token=INGEST_TOKEN)[0] == 202
        finally:
            poster.close()

        def settled() -> bool:
            ingress = sum(r.xlen(keys.ingress_key(c.name, s)) for c in cfg.campaigns for s in range(c.shards))
            counted = all(sum(tally.window_counts(r, c).values()) == 250 for c in cfg.campaigns)
            return ingress == 0 and counted and not any(published.stale_windows(r, c) for c in cfg.campaigns)

        deadline = time.monotonic() + 60
        while not settled():
            assert time.monotonic() < deadline, "the served stack did not shuffle, count and publish in 60 s"
            time.sleep(0.25)
        assert r.exists(keys.REGISTRY_KEY) and r.exists(keys.HEARTBEAT_KEY)  # operational keys present
        assert audit(r, cfg) == []
    finally:
        col.stop()
        server.cleanup()
