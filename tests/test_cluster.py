"""Scale-out on a real Redis Cluster: three masters of the embedded ``redis-server`` on loopback
ports, the real collector (``ldptel serve`` under gunicorn, HTTP) spreading batches over 4 shards,
an ``ldptel shuffle`` shuffler and two ``ldptel aggregate`` workers draining them at once — and
exactly the counts, states and published estimates of a single-node run (one shard, one worker)
fed the same ReportBatch bytes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, aggregate_cmd, run_shuffle, same_state, write_config
from http_support import Poster, request, start_collector

from ldptel import keys
from ldptel.aggregator import store
from ldptel.keys import GROUP, stream_key
from ldptel.store import tally
from ldptel.store.redis_client import connect, is_cluster
from ldptel.store.redis_server import EmbeddedRedisCluster

pytestmark = pytest.mark.slow

SHARDS = 4
CAMPAIGNS = [
    {"name": "grr", "oracle": "grr", "epsilon": 2.0, "domain": ["a", "b", "c", "d", "e"]},
    {"name": "sue", "oracle": "sue", "epsilon": 1.0, "domain_size": 64},
    {"name": "oue", "oracle": "oue", "epsilon": 1.0, "domain_size": 100},
    {"name": "olh", "oracle": "olh", "epsilon": 1.0, "domain_size": 1024},
    {"name": "hadamard", "oracle": "hadamard", "epsilon": 1.0, "domain_size": 100},
    {"name": "rappor", "oracle": "rappor", "bloom_bits": 32, "hashes": 2, "cohorts": 4, "f": 0.5,
     "p": 0.5, "q": 0.75, "candidates": ["w", "x", "y", "z"]},
    {"name": "hh", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 4, "width": 16},
    {"name": "haar", "kind": "range", "epsilon": 2.0, "domain_size": 256, "method": "haar"},
    {"name": "tree", "kind": "range", "epsilon": 2.0, "domain_size": 256, "method": "hierarchical"},
]
WORDS = ["news", "maps", "mail", "chat", "game", "shop", "tv", "bank"]
BATCHES_PER_CAMPAIGN = 24
AGG = {"read_count": 4}  # small reads: both workers get a share of every shard

UNLIMITED = {"rate_limit_per_minute": 10**9, "rate_limit_per_address_per_minute": 0}


def configs(tmp: Path):
    single = write_config(tmp / "single.toml", [{**c, "min_reports": 1} for c in CAMPAIGNS],
                          aggregator=AGG, server=UNLIMITED)
    # the shuffler releases within 1 s, in batches of 100 reports (both workers get a share)
    cluster = write_config(tmp / "cluster.toml",
                           [{**c, "min_reports": 1, "shards": SHARDS, "shuffle_max_delay": "1s"}
                            for c in CAMPAIGNS],
                           aggregator=AGG, server=UNLIMITED,
                           shuffler={"batch_reports": 100, "poll_ms": 50})
    return single, cluster


def batch_bodies(config, seed: int = 11) -> dict[str, list[tuple[bytes, int]]]:
    """Per campaign: serialized batches of 1–500 reports (Zipf-ish values), with their counts."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[tuple[bytes, int]]] = {}
    for camp in config.campaigns:
        mech = camp.mechanism()
        if camp.kind == "heavy_hitters":
            labels = WORDS
        elif camp.kind == "range":
            labels = list(range(camp.domain_size))
        else:
            labels = camp.labels()
        w = 1.0 / np.arange(1, len(labels) + 1)
        bodies = []
        for _ in range(BATCHES_PER_CAMPAIGN):
            idx = rng.choice(len(labels), size=int(rng.integers(1, 501)), p=w / w.sum())
            if camp.kind == "heavy_hitters" or camp.oracle == "rappor":
                values = [labels[i] for i in idx]
            else:
                values = idx  # frequency: label index; range: the value itself
            batch = mech.encode_batch(values, rng=rng, campaign=camp.name)
            batch.batch_id = rng.bytes(16)  # seeded: the spread over shards is fixed, not by chance
            bodies.append((batch.SerializeToString(), batch.count))
        out[camp.name] = bodies
    return out


def post_all(url: str, bodies: dict[str, list[tuple[bytes, int]]]) -> dict[str, int]:
    """POST every batch (and one retry of each tenth: stored once); accepted reports per campaign."""
    poster = Poster(url)
    accepted = {}
    try:
        for name, items in bodies.items():
            accepted[name] = 0
            for i, (body, _count) in enumerate(items):
                status, resp = poster.post(body, token=INGEST_TOKEN)
                assert status == 202 and not resp["duplicate"], (name, status, resp)
                accepted[name] += resp["accepted"]
                if i % 10 == 0:
                    status, resp = poster.post(body, token=INGEST_TOKEN)
                    assert status == 202 and resp == {"accepted": 0, "duplicate": True}, resp
    finally:
        poster.close()
    return accepted


def published(url: str, config) -> dict[str, list]:
    """What the export API publishes for every campaign (JSON documents and ETags)."""
    auth = {"Authorization": f"Bearer {EXPORT_TOKEN}"}
    paths = {"frequency": ["/estimates"],
             "heavy_hitters": ["/heavy-hitters?k=16"],
             "range": ["/range?lo=0&hi=9", "/range?lo=20&hi=200", "/quantiles?q=0.25,0.5,0.9"]}
    out = {}
    for camp in config.campaigns:
        docs = []
        for path in paths[camp.kind]:
            status, doc = request(url, "GET", f"/v1/campaigns/{camp.name}{path}", headers=auth)
            assert status == 200, (camp.name, path, status, doc)
            assert doc.pop("decoded_at") > 0  # when it was decoded differs between the two runs
            docs.append(doc)
        out[camp.name] = docs
    return out


def wait_counted(r, config, expected: dict[str, int], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counted = {c.name: sum(tally.window_counts(r, c).values()) for c in config.campaigns}
        if counted == expected:
            return
        assert time.monotonic() < deadline, f"not drained in {timeout}s: {counted} != {expected}"
        time.sleep(0.1)


class AggregatorProc:
    """A long-running ``ldptel aggregate`` process whose output is collected by a thread."""

    def __init__(self, config_path: Path, url: str) -> None:
        self.proc = subprocess.Popen(aggregate_cmd(config_path, url, once=False), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if "ldptel.aggregator" in line and ": consumer " in line:
                self.ready.set()

    def stop(self) -> int:
        """SIGTERM, wait; the number of entries the worker committed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(5)
        done = [ln for ln in self.lines if "drained " in ln]
        assert self.proc.returncode == 0 and done, "".join(self.lines)
        return int(done[-1].split("drained ")[1].split()[0])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedRedisCluster(masters=3, data_dir=tmp_path_factory.mktemp("cluster")) as c:
        yield c


def test_cluster_equals_single_node(cluster: EmbeddedRedisCluster, redis_client: redis.Redis,
                                    redis_url: str, tmp_path: Path) -> None:
    single_cfg, cluster_cfg = configs(tmp_path)
    bodies = batch_bodies(single_cfg)
    expected = {name: sum(n for _, n in items) for name, items in bodies.items()}

    rc = connect(cluster.url)
    assert is_cluster(rc) and is_cluster(connect(cluster.node_urls[0]))  # scheme and auto-detection
    rc.flushall()
    procs: list = []
    try:
        # --- cluster: collector (gunicorn, 2 workers), 2 aggregator workers, 4 shards ----------
        shuffler = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "shuffle", "--config",
                                     str(tmp_path / "cluster.toml"), "--redis-url", cluster.url],
                                    stderr=subprocess.PIPE, text=True)
        procs.append(shuffler)
        aggs = [AggregatorProc(tmp_path / "cluster.toml", cluster.url) for _ in range(2)]
        procs += aggs
        for a in aggs:
            assert a.ready.wait(30), "".join(a.lines)
        col = start_collector(tmp_path / "col-cluster", (tmp_path / "cluster.toml").read_text(),
                              cluster.url, workers=2)
        procs.append(col)
        assert post_all(col.url, bodies) == expected
        wait_counted(rc, cluster_cfg, expected)
        shuffler.send_signal(signal.SIGTERM)
        assert shuffler.wait(20) == 0, shuffler.stderr.read() if shuffler.stderr else ""
        drained = [a.stop() for a in aggs]
        assert all(d > 0 for d in drained), f"both workers must have committed entries: {drained}"

        # the batches were spread over every shard, and the shards over the nodes; the shuffler
        # moved each ingress batch once, and the workers counted each re-packed batch once
        nodes = set()
        analysis_entries = 0
        for camp in cluster_cfg.campaigns:
            moved = [rc.hgetall(keys.shuffle_metrics_key(camp.name, s)) for s in range(SHARDS)]
            ingress = [int(m.get(b"ingress_batches", 0)) for m in moved]
            assert sum(ingress) == len(bodies[camp.name]) and min(ingress) > 0, (camp.name, ingress)
            lens = [rc.xlen(stream_key(camp.name, s)) for s in range(SHARDS)]
            assert lens == [int(m[b"analysis_batches"]) for m in moved], (camp.name, lens)
            analysis_entries += sum(lens)
            for s in range(SHARDS):
                assert rc.xlen(keys.ingress_key(camp.name, s)) == 0
                assert rc.xpending(stream_key(camp.name, s), GROUP)["pending"] == 0
                nodes.add(rc.get_node_from_key(stream_key(camp.name, s)).name)
                # the shuffler's keys share the (campaign, shard)'s hash tag: one slot
                slots = {rc.keyslot(k) for k in (stream_key(camp.name, s), keys.ingress_key(camp.name, s),
                                                 keys.shuffle_lease_key(camp.name, s),
                                                 keys.shuffle_metrics_key(camp.name, s))}
                assert len(slots) == 1, (camp.name, s)
        assert len(nodes) == 3
        assert sum(drained) == analysis_entries
        cluster_docs = published(col.url, cluster_cfg)
        status, metrics = request(col.url, "GET", "/metrics",
                                  headers={"Authorization": f"Bearer {EXPORT_TOKEN}"})
        assert status == 200
        for name, n in expected.items():
            assert f'ldptel_reports_accepted_total{{campaign="{name}"}} {n}\n' in metrics
        col.stop()

        # --- single node: one shard, one worker, the same bytes -------------------------------
        col1 = start_collector(tmp_path / "col-single", (tmp_path / "single.toml").read_text(),
                               redis_url, workers=2)
        procs.append(col1)
        assert post_all(col1.url, bodies) == expected
        run_shuffle(tmp_path / "single.toml", redis_url)
        subprocess.run(aggregate_cmd(tmp_path / "single.toml", redis_url), check=True, timeout=60,
                       capture_output=True)
        wait_counted(redis_client, single_cfg, expected, timeout=1)
        single_docs = published(col1.url, single_cfg)
        col1.stop()
    finally:
        for p in procs:
            if isinstance(p, subprocess.Popen):
                if p.poll() is None:
                    p.kill()
                    p.wait()
            elif not isinstance(p, AggregatorProc):
                p.stop()
            elif p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
        rc.close()

    # same accumulator state (the sum over shards) and the same published estimates
    rc = connect(cluster.url)
    for c1, c4 in zip(single_cfg.campaigns, cluster_cfg.campaigns, strict=True):
        acc1, n1 = store.load_accumulator(redis_client, c1, 0)
        acc4, n4 = store.load_accumulator(rc, c4, 0)
        assert n1 == n4 == expected[c1.name]
        assert same_state(acc1, acc4), c1.name  # every state (heavy hitters' too) is a sum of counts
    rc.close()
    for name in expected:
        assert cluster_docs[name] == single_docs[name], name  # parsed JSON: exact floats
