"""Shuffler rows of ``bench/table.py``, on an embedded Redis:

- CPU-seconds of one shuffler process per million one-report ingress batches (OLH, d = 1,024,
  ε = 1; ``Shuffler.run(once=True)`` draining them: read, group, permute, re-pack, move), against
  the Redis I/O alone through the hiredis parser: the same XRANGE pages, a pipelined XADD of the
  same re-packed bytes and the XDEL of the ingress ids (what no shuffler can avoid);
- the longest single Redis command during one release of a 70,000-entry group (Redis's SLOWLOG
  with a threshold of 0, so every command and script is timed by the server itself), against the
  issue's bound of 100 ms.
"""

from __future__ import annotations

import atexit
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
from table import Row, Timed

from ldptel import keys
from ldptel.campaigns.config import parse_config
from ldptel.shuffler.held import Held
from ldptel.shuffler.worker import Shuffler
from ldptel.store.redis_server import EmbeddedRedis

CAMPAIGN = "bench-shuffle"


class Store:
    """One embedded Redis for the shuffler rows, started on first use, stopped at exit."""

    _made: Store | None = None

    def __init__(self) -> None:
        self.server = EmbeddedRedis(data_dir=Path(tempfile.mkdtemp(prefix="ldptel-bench-shuffle-"))).start()
        self.r = redis.Redis.from_url(self.server.url)
        atexit.register(self.server.stop)

    @classmethod
    def get(cls) -> Store:
        if cls._made is None:
            cls._made = Store()
        return cls._made


def config(min_reports: int):
    return parse_config({"shuffler": {"batch_reports": 1000, "max_held_reports": 10_000_000,
                                      "max_ingress_batches": 10_000_000},
                         "campaigns": [{"name": CAMPAIGN, "oracle": "olh", "epsilon": 1.0,
                                        "domain_size": 1024, "shuffle_min_reports": min_reports}]})


def one_report_entries(n: int) -> list[bytes]:
    """``n`` serialized one-report batches (distinct batch ids), as the collector stores them."""
    cfg = config(1000)
    camp = cfg.campaigns[0]
    mech = camp.mechanism()
    rng = np.random.default_rng(27)
    batch = mech.encode_batch(rng.integers(0, 1024, n), rng=rng, campaign=camp.name)
    cols = mech.columns(batch)
    out = []
    for i in range(n):
        one = mech.pack({k: v[i:i + 1] for k, v in cols.items()}, 1, camp.name,
                        batch_id=i.to_bytes(16, "little"))
        out.append(one.SerializeToString())
    return out


def fill(r: redis.Redis, entries: list[bytes]) -> None:
    r.delete(keys.ingress_key(CAMPAIGN), keys.stream_key(CAMPAIGN), keys.shuffle_metrics_key(CAMPAIGN))
    pipe = r.pipeline(transaction=False)
    for i, data in enumerate(entries):
        pipe.xadd(keys.ingress_key(CAMPAIGN), {"batch": data, "window": 0, "count": 1}, id=f"0-{i + 1}")
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def hiredis_client(url: str) -> redis.Redis:
    """A client reading replies with hiredis (redis-py's default parser where it is missing: a run
    of an install without it, whose floor is then the pure-Python parser's)."""
    from redis._parsers import _HiredisParser
    from redis.utils import HIREDIS_AVAILABLE

    return redis.Redis.from_url(url, **({"parser_class": _HiredisParser} if HIREDIS_AVAILABLE else {}))


def shuffler_cpu(n: int):
    def setup(quick: bool) -> Timed:
        m = n // 5 if quick else n
        store = Store.get()
        entries = one_report_entries(m)
        repacked: list[bytes] = []

        def ours() -> float:
            fill(store.r, entries)
            shuffler = Shuffler(config(1000), redis.Redis.from_url(store.server.url), log=lambda _: None)
            c0 = time.process_time()
            stats = shuffler.run(once=True)
            cpu = time.process_time() - c0
            assert stats.ingress_reports == m and store.r.xlen(keys.ingress_key(CAMPAIGN)) == 0
            if not repacked:
                repacked.extend(d for _, d in ((e, f[b"batch"]) for e, f in
                                               store.r.xrange(keys.stream_key(CAMPAIGN))))
            return cpu

        def floor() -> float:
            if not repacked:
                ours()
            fill(store.r, entries)
            r = hiredis_client(store.server.url)
            ingress, analysis = keys.ingress_key(CAMPAIGN), keys.stream_key(CAMPAIGN)
            c0 = time.process_time()
            cursor, ids = "-", []
            while True:
                page = r.xrange(ingress, min=cursor, max="+", count=1000)
                ids += [eid for eid, _ in page]
                if len(page) < 1000:
                    break
                cursor = "(" + page[-1][0].decode()
            pipe = r.pipeline(transaction=False)
            for data in repacked:
                pipe.xadd(analysis, {"batch": data, "window": 0, "count": 1000})
            for s in range(0, len(ids), 1000):
                pipe.xdel(ingress, *ids[s:s + 1000])
            pipe.execute()
            cpu = time.process_time() - c0
            r.close()
            return cpu

        return Timed(ours, floor, m / 1e6)
    return setup


def longest_call(n: int):
    def setup(quick: bool) -> Timed:
        m = n // 5 if quick else n
        store = Store.get()
        entries = one_report_entries(m)

        def release() -> float:
            fill(store.r, entries)
            client = redis.Redis.from_url(store.server.url)
            shuffler = Shuffler(config(10_000_000), client, log=lambda _: None)
            camp = shuffler.config.campaigns[0]
            held = Held(camp.name, 0)
            while shuffler.read(held):
                pass
            assert sum(len(g.ids) for g in held.groups.values()) == m
            store.r.config_set("slowlog-log-slower-than", 0)
            store.r.config_set("slowlog-max-len", 100_000)
            store.r.slowlog_reset()
            moved = shuffler.release_due(camp, held, once=True)
            log = store.r.slowlog_get(100_000)
            store.r.config_set("slowlog-log-slower-than", 10_000)
            assert moved == m and store.r.xlen(keys.ingress_key(CAMPAIGN)) == 0
            return max(e["duration"] for e in log) / 1e6

        return Timed(release, None, 1.0, None)
    return setup


ROWS = [
    Row("shuffler CPU per million one-report batches", "s", "hiredis alone (XRANGE, XADD, XDEL)",
        "≥ 2× fewer CPU-s than before", shuffler_cpu(50_000), group="shuffler", repeats=1, self_timed=True,
        before="0.43–0.47 CPU-s; hiredis alone 1.6× less"),
    Row("longest Redis call during a 70,000-entry release", "ms", "", "≤ 100 ms", longest_call(70_000),
        group="shuffler", repeats=1, self_timed=True, rounds=3, before="0.86–1.0 s"),
]
