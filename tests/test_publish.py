"""Published estimates (``ldptel.aggregator.publish``): the aggregator decodes a window after its
commits and the API only reads what it published. Real Redis, the real app over HTTP, real
workers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack, random_batches, shuffle_once, write_config, xadd_batches

from ldptel import keys
from ldptel.aggregator import publish
from ldptel.aggregator.worker import Worker
from ldptel.campaigns.config import Campaign, ConfigError, load_config
from ldptel.server.documents import with_complete
from ldptel.store import published, tally

FREQ = {"name": "colors", "oracle": "oue", "epsilon": 1.0, "domain_size": 8, "shards": 2, "min_reports": 300}
HH = {"name": "words", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 8, "levels": 8, "width": 8,
      "shards": 2, "min_reports": 300}
RANGE = {"name": "latency", "kind": "range", "epsilon": 2.0, "domain_size": 32, "method": "hierarchical",
         "shards": 2, "min_reports": 300}
N_REPORTS = 1000
PATHS = {"colors": "/v1/campaigns/colors/estimates",
         "words": "/v1/campaigns/words/heavy-hitters?k=5",
         "latency": "/v1/campaigns/latency/range?lo=3&hi=17"}


def hh_batches(camp: Campaign, n: int, per_batch: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    words = np.array(["alpha", "beta", "gamma", "delta", "eps"], dtype=object)
    values = words[rng.choice(words.size, n, p=[0.4, 0.25, 0.15, 0.12, 0.08])]
    mech = camp.mechanism()
    return [mech.encode_batch(values[s:s + per_batch], rng=rng, campaign=camp.name)
            for s in range(0, n, per_batch)]


def batches_of(camp: Campaign, n: int, seed: int) -> list:
    if camp.kind == "heavy_hitters":
        return hh_batches(camp, n, 50, seed)
    return random_batches(camp, n, 50, seed)


def tag(pub: published.Published | None) -> tuple | None:
    return None if pub is None else (pub.n, pub.digest, pub.decoded_at)


def expected_answer(camp: Campaign, pub: published.Published) -> dict:
    """What the endpoint of ``PATHS`` must answer from publication ``pub`` (decoded offline)."""
    assert pub.doc is not None
    if camp.kind == "frequency":
        return pub.doc
    if camp.kind == "heavy_hitters":
        return {**pub.doc, "items": pub.doc["items"][:5]}
    assert pub.arrays is not None
    est = published.range_estimate(camp, pub)
    return {**pub.header(), "method": "hierarchical", **est.range(3, 17)}


@pytest.mark.slow  # about 3 s: hundreds of commits, each decoded by the test
def test_interleaved_ingest_commits_and_reads_never_mix_states(redis_client: redis.Redis, redis_url: str,
                                                               tmp_path: Path) -> None:
    """Ingest over HTTP, commits by two workers (2 entries per stream per step, on 2 shards),
    publications, publications decoded earlier and written late, and reads of every kind's
    endpoint, interleaved in a fixed random order. After every commit the test decodes the stored
    state itself and records its digest → (report count, expected answer). Every 200 answer must
    carry (ETag) the digest of a state that existed, its ``n_reports`` and ``X-Ldptel-N-Reports``
    must be that state's count, and its numbers exactly those decoded from that state; a late
    write of an older decode must never replace a newer publication. At the end the published
    documents are those of the final state."""
    cfg = write_config(tmp_path / "c.toml", [FREQ, HH, RANGE],
                       aggregator={"read_count": 2, "publish_interval": 0})
    camps = {c.name: c for c in cfg.campaigns}
    pending = {c.name: batches_of(c, N_REPORTS, seed=i) for i, c in enumerate(cfg.campaigns)}
    stack = HttpStack(cfg, redis_url)
    workers = [Worker(cfg, redis_client, consumer=f"w{i}") for i in range(2)]
    for w in workers:
        w.setup()
    states: dict[str, dict[str, tuple[int, dict | None]]] = {name: {} for name in camps}
    held: list[tuple[Campaign, published.Published]] = []
    rng = random.Random(12)
    seen = {"ok": 0, "409": 0, "503": 0, "kept_out": 0}

    def record() -> None:  # states change only at commits, and then their report count does
        for camp in camps.values():
            if tally.window_count(redis_client, camp, 0) in [n for n, _ in states[camp.name].values()]:
                continue
            pub = publish.decode(redis_client, camp, 0, shuffled=cfg.shuffler.enabled)
            expected = expected_answer(camp, pub) if pub.doc else None
            states[camp.name].setdefault(pub.digest[:32], (pub.n, expected))
            # a window in progress is answered under an ETag of its own (``with_complete``)
            in_progress = with_complete(pub, False).digest[:32]
            states[camp.name].setdefault(in_progress, (pub.n, expected))

    def read(name: str) -> None:
        status, headers, body = stack.get(PATHS[name])
        doc = json.loads(body)
        if status == 409:
            seen["409"] += 1
            assert doc["detail"]["n_reports"] < camps[name].min_reports
            return
        if status == 503:
            seen["503"] += 1
            assert doc["error"] == "not_yet_published" and int(headers["retry-after"]) >= 1
            pub = published.read(redis_client, camps[name], 0)
            assert pub is None or pub.doc is None
            return
        assert status == 200, (status, doc)
        seen["ok"] += 1
        n, expected = states[name][headers["etag"].strip('"')]  # a state that existed
        assert doc["n_reports"] == n == int(headers["x-ldptel-n-reports"])
        assert expected is not None
        assert doc.pop("complete") is False  # window = "all": the one window never ends
        assert {k: v for k, v in doc.items() if k != "decoded_at"} == \
               {k: v for k, v in expected.items() if k != "decoded_at"}

    record()
    while any(pending.values()) or any(tally.backlog(redis_client, c) for c in camps.values()):
        action = rng.choice(["ingest", "ingest", "commit", "commit", "commit", "publish", "hold", "late",
                             "read", "read"])
        if action == "ingest":
            name = rng.choice([n for n, b in pending.items() if b] or list(camps))
            for _ in range(rng.randint(1, 3)):
                if pending[name]:
                    stack.post_batch(pending[name].pop(0))
        elif action == "commit":
            shuffle_once(cfg, redis_client)  # what was ingested reaches the analysis streams
            rng.choice(workers).step(block_ms=None)
            record()
        elif action == "publish":
            rng.choice(workers).publisher.due(drained=rng.random() < 0.5)
        elif action == "hold":  # a publisher that decodes now and writes later
            camp = rng.choice(list(camps.values()))
            held.append((camp, publish.decode(redis_client, camp, 0, shuffled=cfg.shuffler.enabled)))
        elif action == "late" and held:
            camp, old = held.pop(rng.randrange(len(held)))
            before = published.read(redis_client, camp, 0)
            written = published.write(redis_client, camp, 0, old)
            if before is not None and before.n > old.n:
                assert not written and tag(published.read(redis_client, camp, 0)) == tag(before)
                seen["kept_out"] += 1
        elif action == "read":
            for name in camps:
                read(name)
    shuffle_once(cfg, redis_client)
    for w in workers:
        w.run(once=True)
    record()
    for name, camp in camps.items():
        final = publish.decode(redis_client, camp, 0, shuffled=cfg.shuffler.enabled)
        assert final.n == N_REPORTS
        status, headers, _ = stack.get(PATHS[name])
        assert status == 200 and headers["etag"] == with_complete(final, False).etag  # in progress
        read(name)
    stack.close()
    assert seen["ok"] >= 30 and seen["409"] >= 3 and seen["kept_out"] >= 1, seen


def test_late_write_of_an_older_decode_is_kept_out(redis_client: redis.Redis, tmp_path: Path) -> None:
    """``scripts.PUBLISH`` compares report counts: a publication decoded before a commit and
    written after a newer one's publication changes nothing."""
    cfg = write_config(tmp_path / "c.toml", [{**FREQ, "min_reports": 10}])
    camp = cfg.campaigns[0]
    batches = random_batches(camp, 400, 100, seed=3)
    worker = Worker(cfg, redis_client)
    xadd_batches(redis_client, camp, batches[:2])
    worker.run(once=True)
    old = publish.decode(redis_client, camp, 0, shuffled=cfg.shuffler.enabled)
    xadd_batches(redis_client, camp, batches[2:])
    worker.run(once=True)
    newer = published.read(redis_client, camp, 0)
    assert newer is not None and newer.n == 400 and old.n == 200
    assert published.write(redis_client, camp, 0, old) is False
    assert tag(published.read(redis_client, camp, 0)) == tag(newer)


def test_not_yet_published_then_throttled_then_converges(redis_client: redis.Redis, redis_url: str,
                                                          tmp_path: Path) -> None:
    """Before the first publication of a released window: 503 ``not_yet_published`` with
    Retry-After (below the threshold: 409 as always). The first commit's window is published at
    once; later commits wait ``publish_interval`` while reports keep arriving, and the drained
    worker publishes the exact final state."""
    cfg = write_config(tmp_path / "c.toml", [{**FREQ, "min_reports": 100}],
                       aggregator={"read_count": 1, "publish_interval": 3600},
                       shuffler={"batch_reports": 50})  # analysis batches as posted: 50 reports
    camp = cfg.campaigns[0]
    stack = HttpStack(cfg, redis_url)
    try:
        path = PATHS["colors"]
        batches = random_batches(camp, 1000, 50, seed=5)
        for b in batches[:1]:
            stack.post_batch(b)
        shuffle_once(cfg, redis_client)
        worker = Worker(cfg, redis_client)
        worker.setup()
        worker.step(block_ms=None)
        status, _, body = stack.get(path)
        assert status == 409 and json.loads(body)["detail"]["n_reports"] == 50
        for b in batches[1:]:
            stack.post_batch(b)
        shuffle_once(cfg, redis_client)
        while worker.step(block_ms=None) and tally.window_count(redis_client, camp, 0) < 200:
            pass
        status, headers, body = stack.get(path)  # committed, not published yet
        assert status == 503 and json.loads(body)["error"] == "not_yet_published"
        assert headers["retry-after"] == "3600"
        assert worker.publisher.due(drained=False) == 1  # never published: due at once
        first = json.loads(stack.get(path)[2])
        assert first["n_reports"] >= 200 and first["decoded_at"] > 0
        worker.step(block_ms=None)
        assert worker.publisher.due(drained=False) == 0  # throttled while reports arrive
        assert json.loads(stack.get(path)[2])["n_reports"] == first["n_reports"]
        worker.run(once=True)  # drains, then publishes
        final = json.loads(stack.get(path)[2])
        assert final["n_reports"] == 1000 and final["decoded_at"] >= first["decoded_at"]
    finally:
        stack.close()


def test_workers_share_the_publication_throttle(redis_client: redis.Redis, tmp_path: Path) -> None:
    """While reports arrive, W workers publish a window at most once per ``publish_interval``
    between them (the throttle is shared through Redis), not once each; a stopping worker still
    publishes what it committed."""
    cfg = write_config(tmp_path / "c.toml", [{**FREQ, "min_reports": 10}],
                       aggregator={"read_count": 1, "publish_interval": 3600})
    camp = cfg.campaigns[0]
    xadd_batches(redis_client, camp, random_batches(camp, 600, 50, seed=3))
    workers = [Worker(cfg, redis_client) for _ in range(3)]
    for w in workers:
        w.setup()
    for _ in range(2):
        for w in workers:
            assert w.step(block_ms=None) > 0  # commits entries of window 0 and notes it
            w.publisher.due(drained=False)
    assert [w.publisher.published for w in workers] == [1, 0, 0]
    assert published.read(redis_client, camp, 0) is not None
    workers[1].run(once=True)  # drains the streams, then publishes everything it noted
    final = published.read(redis_client, camp, 0)
    assert final is not None and final.n == 600 == tally.window_count(redis_client, camp, 0)


def test_a_starting_worker_publishes_unpublished_windows(redis_client: redis.Redis, tmp_path: Path) -> None:
    """State counted before publications existed (or whose publication was lost) is published by
    the next worker, with nothing new in the streams."""
    cfg = write_config(tmp_path / "c.toml", [{**FREQ, "min_reports": 10, "window": "1h"}])
    camp = cfg.campaigns[0]
    xadd_batches(redis_client, camp, random_batches(camp, 300, 100, seed=1), window=3600)
    xadd_batches(redis_client, camp, random_batches(camp, 200, 100, seed=2), window=7200)
    Worker(cfg, redis_client).run(once=True)
    redis_client.delete(keys.published_key(camp.name, 3600))
    assert published.stale_windows(redis_client, camp) == [3600]
    Worker(cfg, redis_client).run(once=True)
    pub = published.read(redis_client, camp, 3600)
    assert pub is not None and pub.n == 300 and pub.doc is not None
    assert published.stale_windows(redis_client, camp) == []


@pytest.mark.parametrize("value", ["-1", "3601", '"5"', "true", "nan", "inf"])
def test_publish_interval_is_validated(value: str, tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[aggregator]\npublish_interval = {value}\n\n[[campaigns]]\nname = \"ok\"\n"
                    "oracle = \"grr\"\nepsilon = 1.0\ndomain_size = 4\n")
    with pytest.raises(ConfigError, match="aggregator.publish_interval"):
        load_config(path)


def test_publish_interval_default_and_fraction(tmp_path: Path) -> None:
    assert write_config(tmp_path / "a.toml", [FREQ]).aggregator.publish_interval == 5.0
    assert write_config(tmp_path / "b.toml", [FREQ], aggregator={"publish_interval": 0.5}
                        ).aggregator.publish_interval == 0.5


def test_request_path_reads_never_scan_the_accumulator_blobs(redis_client: redis.Redis,
                                                             tmp_path: Path) -> None:
    """The store reads behind every page view and ``window=latest`` (summary, window counts,
    last update, backlog) must not HSCAN the state hash: HSCAN's MATCH filters only after the
    server has copied every value, so each call cost O(state bytes) (45 ms at an 80 MB
    heavy-hitter state, Redis at 100 % CPU under 32 pollers). Counted with Redis' command
    statistics; the numbers must stay right."""
    cfg = write_config(tmp_path / "c.toml", [{**HH, "min_reports": 10, "window": "1h"}])
    camp = cfg.campaigns[0]
    xadd_batches(redis_client, camp, hh_batches(camp, 400, 100, seed=1), window=3600)
    Worker(cfg, redis_client).run(once=True)
    redis_client.config_resetstat()
    summ = tally.summary(redis_client, camp)
    assert summ.windows == {3600: 400} and summ.updated and summ.backlog == 0
    assert tally.resolve_window(redis_client, camp, None) == 3600
    assert tally.last_updated(redis_client, camp, 3600) == summ.updated
    assert "cmdstat_hscan" not in redis_client.info("commandstats")
