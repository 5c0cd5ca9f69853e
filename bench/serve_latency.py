"""Request latency of the export API and the operator pages under load, with published estimates.

Stores N heavy-hitter, N frequency and N range reports (default N = 10 000 000 each) as committed
aggregator state, starts ``ldptel serve`` (gunicorn), ``ldptel shuffle`` and ``ldptel
aggregate`` (which publishes every window at start) — by default with a reader pool (``serve --read-port``,
``--read-workers`` at ``--read-nice``) that the pollers read from, while ingest goes to the main
port (``--no-read-pool``: one pool for both) — then runs ``--pairs`` pairs of phases of
``--duration`` seconds, in the order AB, BA, AB, … (so that a drift of the machine or of the
state favours neither):

A. ingest alone: batches of ``--batch`` reports POSTed at ``--ingest-rate`` requests/s (open
   loop, spread over the three campaigns), so the aggregator keeps committing and republishing;
B. the same ingest plus ``--clients`` concurrent clients (keep-alive, in ``--client-procs``
   processes, signed in before the phase starts) polling ``/estimates``, ``/heavy-hitters``,
   ``/range`` and the three campaign pages in turn (processes at ``nice --poller-nice``, default 10:
   they stand for browsers and scripts on other machines): as fast as they are answered
   (``--poll-interval 0``, the default: a saturation test), or each waiting ``--poll-interval``
   seconds after every answer, as an open operator page does (it refreshes every 5 s), starting
   at a random phase. Like a browser, each client sends a URL's last ``ETag`` back in
   ``If-None-Match``.

Prints p50/p99 latency per endpoint (and how many answers were 304), ingest p99 of each phase
and its ratio with / without pollers per pair, the median of those ratios, the 5xx count, how
long the first publication of each window took (the decode at N), and each endpoint's own time
per request measured in process afterwards (one client, no HTTP server or queueing: what a
request costs, apart from waiting for a core). The machine is shared: quote the median ratio and
say what else ran (each phase prints the load average before it).

The N reports are not ingested over HTTP (10 M reports at the collector's ~100 k reports/s would
take minutes per campaign): a block of ``--block`` reports is encoded with the campaign's
mechanism and accumulated, the accumulator is scaled to N by merging copies of itself (the state
of N reports is the sum of the blocks' states), and the result is written with ``store.commit``
— the aggregator's own commit — so the server sees exactly the state N real reports leave.

    .venv/bin/python bench/serve_latency.py [--n 10000000] [--duration 60] [--clients 32]
        [--ingest-rate 200] [--batch 100] [--workers 2] [--client-procs 4] [--block 100000]
        [--poll-interval 0] [--pairs 5]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import redis
import requests

from ldptel.aggregator import accumulator_for, store
from ldptel.aggregator.decoders import Accumulator
from ldptel.campaigns.config import Campaign, load_config
from ldptel.proto import ReportBatch
from ldptel.store.redis_server import EmbeddedRedis, free_port

CORES = os.cpu_count() or 1
SLOW_MS = 100.0
EXPORT = "bench-export-token-0123"
INGEST = "bench-ingest-token-0123"
CONFIG = f"""[server]
ingest_tokens = ["{INGEST}"]
export_tokens = ["{EXPORT}"]
rate_limit_per_minute = 1000000000  # as the load test: the ingest rate is the bench's, not 429s
rate_limit_per_address_per_minute = 0  # every simulated device sends from this one address

[[campaigns]]
name = "hh"
kind = "heavy_hitters"
epsilon = 4.0
max_length = 16

[[campaigns]]
name = "freq"
oracle = "olh"
epsilon = 1.0
domain_size = 1024

[[campaigns]]
name = "lat"
kind = "range"
epsilon = 2.0
domain_size = 1024
"""
ENDPOINTS = {
    "/estimates": "/v1/campaigns/freq/estimates",
    "/heavy-hitters": "/v1/campaigns/hh/heavy-hitters?k=20",
    "/range": "/v1/campaigns/lat/range?lo=100&hi=600",
    "page freq": "/campaigns/freq",
    "page hh": "/campaigns/hh",
    "page lat": "/campaigns/lat",
}


def population(camp: Campaign, n: int, rng: np.random.Generator) -> np.ndarray:
    """True values: Zipf(1.1) over 10 000 random strings of ≤ 16 bytes (heavy hitters), Zipf
    over the domain (frequency), a rounded normal (range)."""
    if camp.kind == "heavy_hitters":
        alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))
        words = np.array(["".join(rng.choice(alphabet, rng.integers(4, 17))) for _ in range(10_000)],
                         dtype=object)
        p = 1.0 / np.arange(1, words.size + 1) ** 1.1
        return words[rng.choice(words.size, n, p=p / p.sum())]
    d = int(camp.domain_size or 1)
    if camp.kind == "range":
        return np.clip(rng.normal(d / 3, d / 8, n).round(), 0, d - 1).astype(np.int64)
    return (rng.zipf(1.3, n) - 1) % d


def _copy(acc: Accumulator) -> Accumulator:
    return type(acc).from_bytes(acc.mech, acc.to_bytes())


def scaled_state(camp: Campaign, n: int, block: int, rng: np.random.Generator) -> tuple[Accumulator, int]:
    """The state of ``n // block`` blocks of ``block`` encoded reports (binary expansion of
    merges), and how many blocks."""
    mech = camp.mechanism()
    block_acc = accumulator_for(mech)
    values = population(camp, block, rng)
    for s in range(0, block, 10_000):
        block_acc.add(mech.encode_batch(values[s:s + 10_000], rng=rng, campaign=camp.name))
    k = max(1, n // block)
    total: Accumulator | None = None
    power, left = block_acc, k
    while left:
        if left & 1:
            total = _copy(power) if total is None else total.merge(power)
        left >>= 1
        if left:
            power = power.merge(_copy(power))
    assert total is not None
    return total, k


def pool_of_batches(config_path: str, per_batch: int, count: int) -> list[tuple[str, bytes]]:
    """Encoded batches to re-send with fresh batch_ids (campaign, serialized batch)."""
    cfg = load_config(config_path)
    rng = np.random.default_rng(5)
    out = []
    for camp in cfg.campaigns:
        mech = camp.mechanism()
        values = population(camp, per_batch * count, rng)
        for s in range(0, values.size, per_batch):
            out.append((camp.name, mech.encode_batch(values[s:s + per_batch], rng=rng,
                                                     campaign=camp.name).SerializeToString()))
    return out


def ingest(url: str, pool: list[tuple[str, bytes]], rate: float, duration: float, start_at: float,
           threads: int = 8) -> tuple[list[tuple[float, int]], set[int]]:
    """POST the batches of ``pool`` (fresh batch ids) at ``rate`` requests/s (open loop,
    ``threads`` senders) for ``duration`` seconds from ``start_at`` (epoch seconds); returns
    (latency ms, status) per request, and the seconds of the phase in which a request sent took
    over ``SLOW_MS`` (a few such seconds: stalls of the whole machine; many: steady queueing)."""
    results: list[tuple[float, int]] = []
    slow: set[int] = set()
    lock = threading.Lock()
    start = time.perf_counter() + max(0.0, start_at - time.time())

    def sender(t: int) -> None:
        conn = Connection(url)
        headers = {"Authorization": f"Bearer {INGEST}", "Content-Type": "application/x-protobuf"}
        i = t
        while True:
            due = start + i / rate
            if due - start > duration:
                break
            time.sleep(max(0.0, due - time.perf_counter()))
            batch = ReportBatch.FromString(pool[i % len(pool)][1])
            batch.batch_id = os.urandom(16)
            t0 = time.perf_counter()
            status = conn.request("POST", "/v1/reports", batch.SerializeToString(), headers)[0]
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                results.append((ms, status))
                if ms > SLOW_MS:
                    slow.add(int(due - start))
            i += threads

    run_threads(sender, threads)
    return results, slow


def run_threads(fn, n: int) -> None:
    """Run ``fn(0) … fn(n − 1)`` in ``n`` threads and wait for all of them."""
    ts = [threading.Thread(target=fn, args=(t,)) for t in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


class Connection:
    """One keep-alive HTTP/1.1 connection (``http.client``: a small fraction of the client CPU
    ``requests`` spends per request, so that the bench's clients, which stand for remote devices
    and browsers, take as little as possible of the cores they share with the server)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, http.client.HTTPMessage]:
        """(status, headers) after reading the whole answer; status 599 on a transport error."""
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            resp = self.conn.getresponse()
            resp.read()
            return resp.status, resp.headers
        except (http.client.HTTPException, OSError):
            self.conn.close()  # the next request reconnects
            return 599, http.client.HTTPMessage()


def signed_in_cookie(url: str) -> str:
    """The ``Cookie`` header of an operator session (sign-in form with its CSRF token)."""
    s = requests.Session()
    form = s.get(url + "/signin", timeout=30).text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf, "no CSRF token on the sign-in form"
    resp = s.post(url + "/signin", data={"token": EXPORT, "csrf_token": csrf.group(1)}, timeout=30,
                  allow_redirects=False)
    assert resp.status_code in (302, 303), resp.status_code
    return "; ".join(f"{c.name}={c.value}" for c in s.cookies)


def poll(url: str, threads: int, duration: float, offset: int, interval: float = 0.0,
         start_at: float | None = None) -> tuple[list[tuple[str, float, int]], float]:
    """``threads`` clients, each requesting the ``ENDPOINTS`` in turn for ``duration`` seconds
    from ``start_at`` (epoch seconds; default now: sign-ins happen before it), pausing
    ``interval`` seconds after each answer (first request at a random phase in [0, interval)).
    Each client behaves as a browser: it keeps each URL's last ``ETag`` and sends it back in
    ``If-None-Match`` (a 304 then reuses what it has). Returns (endpoint, latency ms, status) per
    request, and the CPU seconds the clients used."""
    results: list[tuple[str, float, int]] = []
    lock = threading.Lock()
    names = list(ENDPOINTS)
    cookies = [signed_in_cookie(url) for _ in range(threads)]
    begin = time.time() if start_at is None else start_at
    time.sleep(max(0.0, begin - time.time()))
    end = time.perf_counter() + duration
    cpu0 = time.process_time()

    def client(t: int) -> None:
        conn = Connection(url)
        etags: dict[str, str] = {}
        i = offset + t
        if interval > 0:
            time.sleep(random.Random(offset + t).uniform(0, interval))
        while time.perf_counter() < end:
            name = names[i % len(names)]
            i += 1
            api = name.startswith("/")
            headers = {"Authorization": f"Bearer {EXPORT}"} if api else {"Cookie": cookies[t]}
            if name in etags:
                headers["If-None-Match"] = etags[name]
            t0 = time.perf_counter()
            status, answer = conn.request("GET", ENDPOINTS[name], headers=headers)
            if status == 200 and answer["ETag"]:
                etags[name] = answer["ETag"]
            with lock:
                results.append((name, (time.perf_counter() - t0) * 1000, status))
            if interval > 0:
                time.sleep(interval)

    run_threads(client, threads)
    return results, time.process_time() - cpu0


@dataclass
class Cost:
    """One endpoint's own cost per request in process (``server_times``)."""

    wall_ms: list[float]  # per request, answered 200
    cpu_ms: float  # mean CPU per request answered 200 (process time: not moved by the machine's load)
    cpu_304_ms: float  # mean CPU per request sending the ETag back (304 if the endpoint has one)
    commands: float  # Redis commands per request (Redis' command statistics)


def server_times(config_path: str, redis_url: str, repeat: int) -> dict[str, Cost]:
    """Each endpoint's own cost per request in the app (one client, no HTTP server or queueing,
    nothing else using Redis: run after the server and aggregator stopped): ``repeat`` requests
    after one warm-up, then ``repeat`` with the ETag of the answer sent back."""
    from ldptel.server.app import create_app

    r = redis.Redis.from_url(redis_url)
    client = create_app(load_config(config_path), redis_url).test_client()
    form = client.get("/signin").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf
    client.post("/signin", data={"token": EXPORT, "csrf_token": csrf.group(1)})
    out: dict[str, Cost] = {}
    for name, path in ENDPOINTS.items():
        headers = {"Authorization": f"Bearer {EXPORT}"} if name.startswith("/") else {}
        etag = client.get(path, headers=headers).headers.get("ETag")
        wall = []
        calls = sum(v["calls"] for v in r.info("commandstats").values())
        cpu0 = time.process_time()
        for _ in range(repeat):
            t0 = time.perf_counter()
            assert client.get(path, headers=headers).status_code == 200
            wall.append((time.perf_counter() - t0) * 1000)
        cpu = (time.process_time() - cpu0) / repeat * 1000
        commands = (sum(v["calls"] for v in r.info("commandstats").values()) - calls - 1) / repeat
        cpu0 = time.process_time()
        for _ in range(repeat):
            client.get(path, headers={**headers, **({"If-None-Match": etag} if etag else {})})
        out[name] = Cost(wall, cpu, (time.process_time() - cpu0) / repeat * 1000, commands)
    return out


TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """pid → (parent pid, user + system CPU seconds including reaped children) of every process."""
    procs: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2:].split()
            procs[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK)
    return procs


def _tree(procs: dict[int, tuple[int, float]], root: int) -> list[int]:
    """``root`` and every process under it in ``procs``."""
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(c for c, (ppid, _) in procs.items() if ppid == pid)
    return out


def cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each root process and its descendants, including children
    they reaped (Linux ``/proc``, as ``loadtest/cpu.py``): CPU used does not depend on how busy
    the shared machine is, latency does."""
    procs = _processes()
    return {role: sum(procs.get(pid, (0, 0.0))[1] for pid in _tree(procs, root))
            for role, root in roots.items()}


def descendants(root: int) -> set[int]:
    """``root`` and every process under it (Linux ``/proc``)."""
    return set(_tree(_processes(), root))


def children(parent: int) -> list[int]:
    """The processes whose parent is ``parent`` (Linux ``/proc``)."""
    return [pid for pid, (ppid, _) in _processes().items() if ppid == parent]


def thread_cpu(pids: set[int]) -> dict[int, float]:
    """CPU seconds so far of each live thread of ``pids``: the scheduler's nanosecond count
    (``/proc/<pid>/task/<tid>/schedstat``), else its ticks (``stat``'s utime + stime). Precise
    enough for blocks of a few ms, where ``cpu_seconds``'s ticks (10 ms) are not; a thread that
    ends between two readings is lost (``thread_cpu_used``): for a server's long-lived threads."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                out[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
            except FileNotFoundError:  # a kernel without CONFIG_SCHED_INFO
                try:
                    raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                except OSError:
                    continue
                fields = raw[raw.rindex(")") + 2:].split()
                out[int(tid)] = (int(fields[11]) + int(fields[12])) / TICK
            except OSError:
                continue
    return out


def thread_cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the threads of ``after`` used since ``before`` (a new thread: all of it)."""
    return sum(t - before.get(tid, 0.0) for tid, t in after.items())


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def wait_published(url: str, timeout: float) -> dict[str, float]:
    """Seconds until each API endpoint first answers 200 (the aggregator's first publication)."""
    t0 = time.perf_counter()
    done: dict[str, float] = {}
    api = {"Authorization": f"Bearer {EXPORT}"}
    while len(done) < 3 and time.perf_counter() - t0 < timeout:
        for name in ("/estimates", "/heavy-hitters", "/range"):
            if name not in done:
                try:
                    if requests.get(url + ENDPOINTS[name], headers=api, timeout=30).status_code == 200:
                        done[name] = time.perf_counter() - t0
                except requests.RequestException:
                    pass
        time.sleep(0.2)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="stored reports per campaign")
    ap.add_argument("--block", type=int, default=100_000, help="reports encoded per block")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of each phase")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--poll-interval", type=float, default=0.0,
                    help="seconds each client waits after an answer (0: as fast as answered)")
    ap.add_argument("--client-procs", type=int, default=4)
    ap.add_argument("--ingest-rate", type=float, default=200.0, help="ingest requests/s")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of ingest before the first phase")
    ap.add_argument("--ingest-threads", type=int, default=32,
                    help="ingest senders (enough that the open-loop rate holds while requests wait)")
    ap.add_argument("--batch", type=int, default=100, help="reports per ingest request")
    ap.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    ap.add_argument("--read-pool", action=argparse.BooleanOptionalAction, default=True,
                    help="serve --read-port: the pollers read from the reader pool (default), "
                         "ingest goes to --port")
    ap.add_argument("--read-workers", type=int, default=2, help="reader pool workers")
    ap.add_argument("--read-nice", type=int, default=10, help="reader pool nice increment")
    ap.add_argument("--poller-nice", type=int, default=10,
                    help="nice increment of the poller processes (they stand for remote browsers "
                         "and scripts; here they share the cores with the server)")
    ap.add_argument("--pairs", type=int, default=5,
                    help="pairs of phases (ingest alone, ingest with pollers), interleaved")
    ap.add_argument("--publish-timeout", type=float, default=1800.0,
                    help="seconds to wait for the first publications")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(data_dir=Path(tmp) / "redis") as server:
        config_path = str(Path(tmp) / "bench.toml")
        Path(config_path).write_text(CONFIG)
        cfg = load_config(config_path)
        r = redis.Redis.from_url(server.url)
        for camp in cfg.campaigns:
            t0 = time.perf_counter()
            acc, k = scaled_state(camp, args.n, min(args.block, args.n), rng)
            status = store.commit(r, camp, 0, "bench", [], [], {0: acc}, {0: acc}, {0: k}, 0)
            assert status == b"ok", status
            print(f"stored {camp.name}: {acc.n:,} reports, state {len(acc.to_bytes()) / 1e6:.1f} MB "
                  f"({time.perf_counter() - t0:.1f} s)", flush=True)
        port, read_port = free_port(), free_port()
        url = f"http://127.0.0.1:{port}"
        read_url = f"http://127.0.0.1:{read_port}" if args.read_pool else url
        pool_args = (["--read-port", str(read_port), "--read-workers", str(args.read_workers),
                      "--read-nice", str(args.read_nice)] if args.read_pool else [])
        serve = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "serve",
                                  "--config", config_path,
                                  "--redis-url", server.url, "--port", str(port),
                                  "--workers", str(args.workers), *pool_args],
                                 stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "serve.log", "w"))
        aggregate = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "aggregate",
                                      "--config", config_path, "--redis-url", server.url],
                                     stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "aggregate.log", "w"))
        shuffle = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", "shuffle",
                                    "--config", config_path, "--redis-url", server.url],
                                   stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "shuffle.log", "w"))
        try:
            first = wait_published(read_url, timeout=args.publish_timeout)
            if len(first) < 3:
                sys.exit("no publication in time; aggregate log:\n"
                         + (Path(tmp) / "aggregate.log").read_text()[-3000:])
            print("first publication after start: " + ", ".join(f"{k} {v:.1f} s" for k, v in first.items()),
                  flush=True)
            pool = pool_of_batches(config_path, args.batch, 20)
            assert server.process is not None
            roots = {"server": serve.pid, "aggregator": aggregate.pid, "shuffler": shuffle.pid,
                     "redis": server.process.pid}
            r.slowlog_reset()  # the bench's own commits of N reports' state are not the server's
            runs = measure(url, read_url, pool, args, roots)
            slowlog = [e for e in r.slowlog_get(128) if e["duration"] > 10_000]
            print(f"Redis: {r.info('persistence').get('aof_delayed_fsync', 0)} delayed AOF fsyncs, "
                  f"{len(slowlog)} commands over 10 ms in its slow log"
                  + (f" (slowest {max(e['duration'] for e in slowlog) / 1000:.0f} ms)" if slowlog else ""),
                  flush=True)
        finally:
            for proc in (serve, aggregate, shuffle):
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:  # the aggregator finishes a decode first
                    proc.kill()
                    proc.wait()
        in_process = server_times(config_path, server.url, 200)
        report(args, runs, in_process)


def measure(url: str, read_url: str, pool: list[tuple[str, bytes]], args: argparse.Namespace,
            roots: dict[str, int]) -> list[Run]:
    """``args.warmup`` seconds of ingest, then ``args.pairs`` pairs of phases (ingest alone,
    ingest with the pollers), in the order AB, BA, AB, … so that a drift of the machine or of
    the stored state favours neither. Each
    phase also records the CPU seconds of the ``roots`` (server, aggregator, Redis) and of the
    bench's own ingest senders and pollers."""
    runs: list[Run] = []
    per = args.clients // args.client_procs
    ingest(url, pool, args.ingest_rate, args.warmup, time.time() + 0.5, args.ingest_threads)  # not counted
    with mp.get_context("spawn").Pool(args.client_procs, os.nice, (args.poller_nice,)) as procs:
        for pair in range(args.pairs):
            for polled in ((False, True) if pair % 2 == 0 else (True, False)):
                load = os.getloadavg()[0]
                start_at = time.time() + (3.0 if polled else 0.5)  # pollers sign in first
                pollers = [procs.apply_async(poll, (read_url, per, args.duration, i * per, args.poll_interval,
                                                    start_at))
                           for i in range(args.client_procs)] if polled else []
                time.sleep(max(0.0, start_at - time.time() - 0.1))
                cpu0, own0 = cpu_seconds(roots), time.process_time()
                sent, slow = ingest(url, pool, args.ingest_rate, args.duration, start_at, args.ingest_threads)
                took = time.time() - start_at
                cpu = cpu_seconds(roots)
                cpu = {k: cpu[k] - cpu0[k] for k in cpu} | {"ingest clients": time.process_time() - own0}
                answers = [p.get() for p in pollers]
                cpu["pollers"] = sum(c for _, c in answers)
                runs.append(Run(pair, polled, sent, [row for rows, _ in answers for row in rows], load, cpu,
                                len(slow)))
                print(f"pair {pair + 1}/{args.pairs} {'with' if polled else 'without'} pollers: "
                      f"ingest p99 {pct([ms for ms, _ in sent], 99):.1f} ms "
                      f"({len(sent) / took:.0f} requests/s, {len(runs[-1].polls)} polls, {len(slow)} s "
                      f"with an ingest request over {SLOW_MS:.0f} ms; load average "
                      f"before {load:.2f}); CPU s: "
                      + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()), flush=True)
    return runs


@dataclass
class Run:
    pair: int
    polled: bool  # with the pollers
    ingest: list[tuple[float, int]]  # (latency ms, status)
    polls: list[tuple[str, float, int]]  # (endpoint, latency ms, status)
    load: float  # 1-minute load average before the phase
    cpu: dict[str, float]  # CPU seconds used during the phase, per component
    slow_seconds: int  # seconds of the phase with an ingest request over SLOW_MS


def report(args: argparse.Namespace, runs: list[Run], in_process: dict[str, Cost]) -> None:
    """Per endpoint over all phases with pollers: requests, 304s, p50/p99/max, 5xx; ingest p99 of
    each phase and, per pair, with / without; the median of those ratios."""
    print(f"\nN = {args.n:,} reports per campaign; {args.clients} clients for {args.duration:.0f} s "
          f"({'closed loop' if args.poll_interval <= 0 else f'polling every {args.poll_interval:g} s'}); "
          f"ingest {args.ingest_rate:.0f} requests/s × {args.batch} reports; {args.pairs} pairs")
    polled = [row for run in runs for row in run.polls]
    print(f"{'endpoint':16} {'requests':>9} {'304':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'5xx':>5}"
          "   in process: p50 / p99 ms, CPU ms 200 / 304, Redis commands")
    for name in ENDPOINTS:
        cost = in_process[name]
        lat = [ms for e, ms, _ in polled if e == name]
        bad = sum(1 for e, _, st in polled if e == name and st >= 500)
        unchanged = sum(1 for e, _, st in polled if e == name and st == 304)
        other = {st for e, _, st in polled if e == name and st not in (200, 304)}
        print(f"{name:16} {len(lat):9d} {unchanged:6d} {pct(lat, 50):8.1f} {pct(lat, 99):8.1f} "
              f"{max(lat, default=float('nan')):8.1f} {bad:5d}"
              f"   {pct(cost.wall_ms, 50):.1f} / {pct(cost.wall_ms, 99):.1f}, "
              f"{cost.cpu_ms:.2f} / {cost.cpu_304_ms:.2f}, {cost.commands:.0f}"
              + (f"  other statuses {other}" if other else ""))
    ratios = []
    for pair in range(args.pairs):
        alone, loaded = (next(r for r in runs if r.pair == pair and r.polled == p) for p in (False, True))
        p99 = [pct([ms for ms, _ in r.ingest], 99) for r in (alone, loaded)]
        ok = [sum(1 for _, st in r.ingest if st == 202) for r in (alone, loaded)]
        ratios.append(p99[1] / p99[0])
        print(f"pair {pair + 1}: ingest p99 {p99[0]:.1f} ms alone ({len(alone.ingest)} requests, "
              f"{ok[0]} accepted), {p99[1]:.1f} ms with pollers ({len(loaded.ingest)} requests, {ok[1]} "
              f"accepted): ×{ratios[-1]:.2f}")
    for label, polled_phase in (("ingest alone", False), ("ingest + pollers", True)):
        lat = [ms for r in runs if r.polled == polled_phase for ms, _ in r.ingest]
        statuses = [st for r in runs if r.polled == polled_phase for _, st in r.ingest]
        others = {st: statuses.count(st) for st in set(statuses) - {202}}
        print(f"{label:16} {len(lat):9d} {'':6} {pct(lat, 50):8.1f} {pct(lat, 99):8.1f} "
              f"{max(lat, default=float('nan')):8.1f} {sum(1 for st in statuses if st >= 500):5d}"
              + (f"   statuses other than 202: {others}" if others else ""))
    extra, per_poll = [], []
    for pair in range(args.pairs):  # the phase with pollers minus its ingest at the other phase's cost
        alone, loaded = (next(r for r in runs if r.pair == pair and r.polled == p) for p in (False, True))
        used = [sum(r.cpu[k] for k in ("server", "redis")) for r in (alone, loaded)]
        served = used[1] - used[0] * len(loaded.ingest) / max(len(alone.ingest), 1)
        extra.append(served / args.duration / CORES)
        per_poll.append(served / max(len(loaded.polls), 1) * 1000)
    polls = [r for r in runs if r.polled]
    client_ms = sum(r.cpu["pollers"] for r in polls) / max(sum(len(r.polls) for r in polls), 1) * 1000
    print(f"CPU the pollers add to the server and Redis (per pair: with − without, the ingest requests "
          f"priced at the phase without): median "
          f"{float(np.median(per_poll)):.2f} ms per poll, {100 * float(np.median(extra)):.1f} % of "
          f"{CORES} cores (pairs: {', '.join(f'{x:.2f}' for x in per_poll)} ms); "
          f"the pollers' own CPU {client_ms:.2f} ms per poll")
    for role in runs[0].cpu:
        a = float(np.median([r.cpu[role] for r in runs if not r.polled])) / args.duration
        b = float(np.median([r.cpu[role] for r in runs if r.polled])) / args.duration
        print(f"  {role:16} {a:5.2f} → {b:5.2f} cores (median without → with pollers)")
    print(f"ingest p99 with pollers / without: median over pairs ×{float(np.median(ratios)):.2f} "
          f"(pairs: {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
