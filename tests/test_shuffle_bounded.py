"""Releases too large for one bounded Redis call (``ldptel.shuffler.release``): journaled and moved
in bounded steps, still exactly once — every ingress entry moved once, whatever dies when — and,
for a sealed campaign, still one whole release the aggregator commits at once.

The bounds are made small here (``CALL_IDS`` …) so that a few hundred entries take many calls;
no test times anything (the 70,000-entry figure is ``bench/rows_shuffle.py``'s)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import HttpStack, write_config
from sealed_support import SHUFFLED, devices, publish_keys, sealed_config

from ldptel import keys
from ldptel.aggregator.worker import Worker
from ldptel.proto import ReportBatch, SealedBatch
from ldptel.shuffler import release
from ldptel.shuffler.worker import Shuffler
from ldptel.store import scripts

CAMP = {"name": "b-grr", "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "shuffle_min_reports": 10**6}
N = 400


class Died(Exception):
    """A shuffler killed between two Redis calls."""


@pytest.fixture
def small_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Bounds of 30 ids and 2 batches per call; records (script, ingress ids, batches) per call."""
    monkeypatch.setattr(release, "CALL_IDS", 30)
    monkeypatch.setattr(release, "CALL_BATCHES", 2)
    calls: list[tuple[str, int, int]] = []
    real = scripts.Scripts.call

    def spy(self, name, keys, args=()):
        args = list(args)
        if name == "SHUFFLE":
            calls.append((name, int(args[0]), int(args[3])))
        elif name == "RELEASE_STAGE":
            n = int(args[2])
            calls.append((name, n, (len(args) - 3 - n) // 2))
        elif name == "DISCARD":
            calls.append((name, len(args) - (2 if len(keys) > 3 else 1), 0))
        res = real(self, name, keys, args)
        if name == "RELEASE_STEP":
            status = res[0].decode()
            n = int(res[1]) if status in ("moved", "deleted") else 0
            calls.append((name, n if status == "deleted" else 0, n if status == "moved" else 0))
        return res

    monkeypatch.setattr(scripts.Scripts, "call", spy)
    return calls


def fill(r: redis.Redis, cfg, n: int = N, seed: int = 1) -> list[int]:
    """``n`` one-report ingress entries as the collector stores them; their values."""
    camp = cfg.campaigns[0]
    mech = camp.mechanism()
    values = np.random.default_rng(seed).integers(0, 8, n)
    for i, v in enumerate(values):
        batch = mech.pack({"values": np.array([v])}, 1, camp.name, batch_id=i.to_bytes(16, "big"))
        r.xadd(keys.ingress_key(camp.name), {"batch": batch.SerializeToString(), "window": 0, "count": 1},
               id=f"0-{i + 1}")
    return [int(v) for v in values]


def released_values(r: redis.Redis, name: str) -> list[int]:
    out = []
    for _, fields in r.xrange(keys.stream_key(name)):
        batch = ReportBatch.FromString(fields[b"batch"])
        assert batch.count == int(fields[b"count"]) == len(batch.grr.values)
        out += list(batch.grr.values)
    return out


def assert_moved_once(r: redis.Redis, name: str, values: list[int]) -> None:
    assert r.xlen(keys.ingress_key(name)) == 0
    assert Counter(released_values(r, name)) == Counter(values)  # each report once, none lost
    counters = {k.decode(): int(v) for k, v in r.hgetall(keys.shuffle_metrics_key(name)).items()}
    assert counters["ingress_batches"] == counters["ingress_reports"] == len(values)
    assert counters["analysis_reports"] == len(values)
    assert not r.exists(keys.release_key(name), keys.release_batches_key(name), keys.release_ids_key(name))


def test_a_large_release_moves_in_bounded_calls(small_calls, redis_client: redis.Redis,
                                                tmp_path: Path) -> None:
    """400 entries, 30 ids and 2 batches per call at most: every call within the bounds, the
    release moved exactly once, its batches consecutive in the analysis stream."""
    cfg = write_config(tmp_path / "c.toml", [CAMP], shuffler={"batch_reports": 40})
    values = fill(redis_client, cfg)
    stats = Shuffler(cfg, redis_client, log=lambda _m: None).run(once=True)
    assert stats.releases == 1 and stats.ingress_reports == N and stats.refused == 0
    assert_moved_once(redis_client, "b-grr", values)
    assert all(ids <= 30 and batches <= 2 for _, ids, batches in small_calls), small_calls
    assert sum(ids for name, ids, _ in small_calls if name == "RELEASE_STAGE") == N
    assert sum(ids for name, ids, _ in small_calls if name == "RELEASE_STEP") == N
    assert sum(b for name, _, b in small_calls if name == "RELEASE_STEP") == 10  # 400 / 40
    seqs = [int(eid.split(b"-")[1]) for eid, _ in redis_client.xrange(keys.stream_key("b-grr"))]
    assert seqs == list(range(seqs[0], seqs[0] + 10))


@pytest.mark.parametrize("die_at", [("RELEASE_STEP", 1), ("RELEASE_STEP", 8), ("RELEASE_STAGE", 3),
                                    ("RELEASE_COMMIT", 0)])
def test_a_shuffler_dying_mid_release_loses_nothing_and_doubles_nothing(
        small_calls, monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, tmp_path: Path,
        die_at: tuple[str, int]) -> None:
    """A shuffler dies after its ``k``-th call of a script (a committed release half moved, or one
    still staging); the next shuffler completes or drops it, and every report is moved once."""
    monkeypatch.setattr(release, "IDLE_MS", 0)  # the dead one's staging release is idle at once
    cfg = write_config(tmp_path / "c.toml", [CAMP], shuffler={"batch_reports": 40})
    values = fill(redis_client, cfg)
    script, k = die_at
    spy = scripts.Scripts.call
    seen = Counter()

    def dying(self, name, keys, args=()):
        res = spy(self, name, keys, args)
        if name == script:
            seen[name] += 1
            if seen[name] > k:
                raise Died(name)
        return res

    monkeypatch.setattr(scripts.Scripts, "call", dying)
    with pytest.raises(Died):
        Shuffler(cfg, redis_client, log=lambda _m: None).run(once=True)
    assert redis_client.exists(keys.release_key("b-grr"))  # the release it left behind
    monkeypatch.setattr(scripts.Scripts, "call", spy)
    Shuffler(cfg, redis_client, log=lambda _m: None).run(once=True)
    assert_moved_once(redis_client, "b-grr", values)


def test_shuffle_and_discard_wait_for_a_release_in_progress(redis_client: redis.Redis) -> None:
    """While a journal holds the stream, SHUFFLE, DISCARD and another RELEASE_BEGIN write nothing."""
    s = scripts.of(redis_client)
    ingress, analysis = keys.ingress_key("x"), keys.stream_key("x")
    redis_client.xadd(ingress, {"batch": b"b", "window": 0, "count": 1}, id="0-1")
    staged = [keys.release_key("x"), keys.release_batches_key("x"), keys.release_ids_key("x")]
    assert s.call("RELEASE_BEGIN", keys=staged, args=["r1", 1, 1, 1, 0, 60_000]) == [b"ok"]
    assert s.call("RELEASE_BEGIN", keys=staged, args=["r2", 1, 1, 1, 0, 60_000])[0] == b"busy"
    res = s.call("SHUFFLE", keys=[ingress, analysis, keys.shuffle_metrics_key("x"), staged[0]],
                 args=[1, 1, 0, 1, "0-1", b"new", 1])
    assert res == [b"busy"]
    res = s.call("DISCARD", keys=[ingress, keys.shuffle_metrics_key("x"), staged[0]], args=[1, "0-1"])
    assert res == [b"busy"]
    assert redis_client.xlen(ingress) == 1 and redis_client.xlen(analysis) == 0
    assert s.call("RELEASE_ABORT", keys=staged, args=["r1", 60_000, 5_000]) == [b"ok"]
    assert not redis_client.exists(staged[0])


@pytest.mark.slow
def test_a_sealed_release_split_over_calls_is_committed_whole(
        small_calls, monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, redis_url: str,
        tmp_path: Path) -> None:
    """A shuffled campaign's release of 400 envelopes (one per device, issue 36; more than one
    call's 30 ids) is journaled:
    its 2 parts reach the analysis stream in separate steps, with consecutive ids, and the
    aggregator commits the whole release once (issue 26: a window changes by whole batches)."""
    cfg = sealed_config(tmp_path, [SHUFFLED])
    publish_keys(cfg, redis_client)
    stack = HttpStack(cfg, redis_url)
    try:
        values = np.random.default_rng(7).integers(0, 8, size=400)
        assert devices(stack, tmp_path, "d", "sh-grr", values, seed=2, batch_size=10) == 400
    finally:
        stack.close()
    assert redis_client.xlen(keys.ingress_key("sh-grr")) == 400  # one envelope per device
    monkeypatch.setattr(release, "CALL_BATCHES", 1)  # one part per step
    Shuffler(cfg, redis_client, log=lambda _m: None).run(once=True)
    assert any(name == "RELEASE_STAGE" for name, _, _ in small_calls)
    assert sum(b for name, _, b in small_calls if name == "RELEASE_STEP") == 2  # two steps
    parts = redis_client.xrange(keys.stream_key("sh-grr"))
    (ms0, seq0), (ms1, seq1) = (tuple(int(x) for x in e.split(b"-")) for e, _ in parts)
    assert ms0 == ms1 and seq1 == seq0 + 1  # consecutive, as the aggregator's claim expects
    envs = [SealedBatch.FromString(f[b"batch"]) for _, f in parts]
    assert {e.release for e in envs} == {envs[0].release} and sorted(e.release_part for e in envs) == [0, 1]
    assert sum(len(e.messages) for e in envs) == 400 and envs[0].release_reports == 400
    Worker(cfg, redis_client, log=lambda _m: None).run(once=True)
    counts = redis_client.hgetall(keys.counts_key("sh-grr"))
    rel = {k: int(v) for k, v in counts.items() if k.startswith(b"rel:")}
    assert list(rel.values()) == [400]  # one release of 400 reports, committed once
    assert sum(int(v) for k, v in counts.items() if k.startswith(b"n:")) == 400
