"""``ldptel demo [--users N] [--port P] [--seed S] [--exit]``: the whole pipeline on one machine.

Starts an embedded Redis, the collector app on a real HTTP server (127.0.0.1, ``--port`` or a free
port) with the export API, and an aggregator worker; simulates ``--users`` devices per campaign —
one frequency campaign per oracle (grr, sue, oue, olh, hadamard, rappor) — that randomize their
values (vectorized ``encode_batch``, seeded: simulation only) and POST ``ReportBatch``es of 1000
reports to ``/v1/reports``; waits until the aggregator has counted every accepted report; reads the
estimates back from the export API and prints them against the truth, with the export URL and the
demo's export token. ``--exit`` stops everything and exits 0; otherwise the stack keeps running
until Ctrl-C.

Each campaign kind is a ``DemoSection`` (``sections()``): the frequency oracles here, heavy hitters
and range queries from ``ldptel.commands.demo_queries`` (``heavy_hitter_section``, ``range_section``), means
from ``ldptel.commands.demo_numeric`` (``numeric_section``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldptel import published, tally
from ldptel.client.transport import TelemetryClient
from ldptel.config import Config, parse_config

DOMAIN = 64
EPSILON = 2.0
TOP_ROWS = 8
BATCH = 1000
ORACLES = ("grr", "sue", "oue", "olh", "hadamard", "rappor")
RAPPOR = {"bloom_bits": 128, "hashes": 2, "cohorts": 32, "f": 0.25, "p": 0.35, "q": 0.65}
AGGREGATE_TIMEOUT_S = 120.0


def zipf_population(n: int, d: int, rng: np.random.Generator, s: float = 1.1) -> np.ndarray:
    """n values in [0, d) with P(v) ∝ 1/(v+1)^s."""
    w = 1.0 / np.arange(1, d + 1) ** s
    return rng.choice(d, size=n, p=w / w.sum())


# --- the running stack ---------------------------------------------------------------------

class Stack:
    """Embedded Redis + collector (Werkzeug HTTP server thread) + shuffler and aggregator threads."""

    def __init__(self, config: Config, port: int) -> None:
        from werkzeug.serving import make_server

        from ldptel.aggregator.runners import BackgroundAggregator
        from ldptel.redis_server import EmbeddedRedis
        from ldptel.server.app import create_app
        from ldptel.shuffler.runners import BackgroundShuffler

        self.config = config
        self.redis_server = EmbeddedRedis().start()
        self.server = self.agg = self.shuffler = None
        try:
            self.app = create_app(config, self.redis_server.url)
            if "export" not in self.app.blueprints:
                from ldptel.server.export import bp

                self.app.register_blueprint(bp)
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
            self.server = make_server("127.0.0.1", port, self.app, threaded=True)
            self.port = self.server.server_port
            self.url = f"http://127.0.0.1:{self.port}"
            self._http = threading.Thread(target=self.server.serve_forever, name="ldptel-http", daemon=True)
            self._http.start()
            self.shuffler = BackgroundShuffler(config, self.redis_server.url).start()
            self.agg = BackgroundAggregator(config, self.redis_server.url, log=lambda _m: None).start()
        except BaseException:
            self.stop()
            raise
        import redis

        self.redis = redis.Redis.from_url(self.redis_server.url)

    def stop(self) -> None:
        if self.shuffler is not None:
            self.shuffler.stop()
        if self.agg is not None:
            self.agg.stop()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.redis_server.cleanup()


class Http:
    """One keep-alive connection to the collector."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, bytes]:
        for attempt in range(5):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                time.sleep(0.1 * (attempt + 1))
                continue
            if resp.status in (429, 503):
                time.sleep(float(resp.getheader("Retry-After") or 1))
                continue
            return resp.status, data
        raise RuntimeError(f"{method} {path}: collector unreachable")

    def close(self) -> None:
        self.conn.close()


# --- demo sections -------------------------------------------------------------------------

@dataclass
class DemoSection:
    """A group of demo campaigns: their config tables, a simulation that queues reports in the
    SDK client (``TelemetryClient``; the demo flushes it) and returns the number queued per
    campaign, and a printer of results (reading the export API over ``Http``)."""

    title: str
    campaigns: Callable[[], list[dict]]
    simulate: Callable[[Stack, Any, dict, np.random.Generator, int], dict[str, int]]  # → queued per campaign
    report: Callable[[Stack, Http, dict], None]
    truth: dict = field(default_factory=dict)


def frequency_campaigns() -> list[dict]:
    out = []
    for oracle in ORACLES:
        if oracle == "rappor":
            out.append({"name": "demo-rappor", "kind": "frequency", "oracle": "rappor", **RAPPOR,
                        "candidates": [f"item-{i}" for i in range(DOMAIN)],
                        "description": "RAPPOR over 64 candidate strings"})
        else:
            out.append({"name": f"demo-{oracle}", "kind": "frequency", "oracle": oracle,
                        "epsilon": EPSILON, "domain_size": DOMAIN,
                        "description": f"{oracle.upper()} over {DOMAIN} items"})
    return out


def frequency_simulate(stack: Stack, client: Any, truth: dict, rng: np.random.Generator,
                       users: int) -> dict[str, int]:
    """The same ``users`` devices (Zipf values) report to every frequency campaign through the SDK
    (``TelemetryClient.report_many``: vectorized randomization, SQLite queue, batched POSTs)."""
    values = zipf_population(users, DOMAIN, rng)
    truth["counts"] = np.bincount(values, minlength=DOMAIN)
    queued: dict[str, int] = {}
    for camp in stack.config.campaigns:
        if camp.kind != "frequency" or camp.privacy_mode != "local":
            continue
        labels = camp.labels()
        queued[camp.name] = client.report_many(
            camp.name, [labels[v] for v in values] if camp.oracle == "rappor" else values)
    return queued


def frequency_report(stack: Stack, http: Http, truth: dict) -> None:
    """Raw unbiased estimates of the most frequent items per oracle, read from the export API."""
    token = stack.config.server.export_tokens[0]
    docs = {}
    for camp in stack.config.campaigns:
        if camp.kind != "frequency" or camp.privacy_mode != "local":
            continue
        status, body = http.request("GET", f"/v1/campaigns/{camp.name}/estimates?format=json", None,
                                    {"Authorization": f"Bearer {token}"})
        if status != 200:
            print(f"{camp.name}: the export API answered {status}: {body[:120]!r}")
            continue
        docs[camp.oracle] = json.loads(body)
    t = truth["counts"]
    width = 9
    print(f"{'item':>6} {'true':>8} |" + "".join(f"{o:>{width}}" for o in docs))
    for v in np.argsort(-t, kind="stable")[:TOP_ROWS]:
        row = "".join(f"{d['items'][v]['estimate']:>{width}.0f}" for d in docs.values())
        print(f"{v:>6} {t[v]:>8} |{row}")
    print(f"{'…':>6} {'':>8} |")
    print(f"{'s.e. (top item)':>15} |"
          + "".join(f"{d['items'][int(np.argmax(t))]['std_error']:>{width}.0f}" for d in docs.values()))
    covered = [np.mean([it["ci_low"] <= t[i] <= it["ci_high"] for i, it in enumerate(d["items"])])
               for d in docs.values()]
    print(f"{'items in 95% CI':>15} |" + "".join(f"{c:>{width}.0%}" for c in covered))
    z = [np.max(np.abs((np.array([it["estimate"] for it in d["items"]]) - t)
                       / np.array([it["std_error"] for it in d["items"]]))) for d in docs.values()]
    print(f"{'max |err|/s.e.':>15} |" + "".join(f"{x:>{width}.1f}" for x in z))
    print(f"{'reports':>15} |" + "".join(f"{d['n_reports']:>{width}}" for d in docs.values()))
    print(f"{'ε per report':>15} |" + "".join(f"{d['epsilon']:>{width}.2f}" for d in docs.values()))


def heavy_hitter_section() -> DemoSection | None:
    """Heavy hitters: one ``kind = "heavy_hitters"`` campaign (``ldptel.commands.demo_queries``)."""
    from ldptel.commands import demo_queries as q

    return DemoSection(q.HH_TITLE, q.hh_campaigns, q.hh_simulate, q.hh_report)


def range_section() -> DemoSection | None:
    """Range queries and quantiles: one ``kind = "range"`` campaign (``ldptel.commands.demo_queries``)."""
    from ldptel.commands import demo_queries as q

    return DemoSection(q.RANGE_TITLE, q.range_campaigns, q.range_simulate, q.range_report)


def numeric_section() -> DemoSection:
    """Means: two ``kind = "numeric"`` campaigns (``ldptel.commands.demo_numeric``)."""
    from ldptel.commands import demo_numeric as n

    return DemoSection(n.NUMERIC_TITLE, n.numeric_campaigns, n.numeric_simulate, n.numeric_report)


def sections() -> list[DemoSection]:
    out = [DemoSection(f"frequency oracles: raw unbiased count estimates vs truth (Zipf(1.1) over {DOMAIN} "
                       "items, every value randomized on its device)",
                       frequency_campaigns, frequency_simulate, frequency_report)]
    return out + [s for s in (heavy_hitter_section(), range_section(), numeric_section(), sealed_section())
                  if s is not None]


def sealed_section() -> DemoSection:
    """shuffled-fakes: one campaign in a shuffled privacy mode (``ldptel.commands.demo_sealed``)."""
    from ldptel.commands import demo_sealed as s

    return DemoSection(s.SEALED_TITLE, s.sealed_campaigns, s.sealed_simulate, s.sealed_report)


# --- main ----------------------------------------------------------------------------------

def demo_config(secs: list[DemoSection], ingest: str, export: str) -> Config:
    return parse_config({
        "server": {"ingest_tokens": [ingest], "export_tokens": [export],
                   "rate_limit_per_minute": 10**9, "secret_key": secrets.token_hex(16)},
        "aggregator": {"block_ms": 100, "read_count": 200},
        # the analyzer's keys of shuffled campaigns: this run's own (``aggregator.keyring``)
        "analyzer": {"keys_dir": tempfile.mkdtemp(prefix="ldptel-demo-keys-")},
        # a short shuffle delay: the last reports of each campaign are shuffled within 1 s
        "campaigns": [{"shuffle_max_delay": "1s", **c} for s in secs for c in s.campaigns()],
    })


def wait_counted(stack: Stack, sent: dict[str, int], timeout: float) -> None:
    """Until the aggregator has counted ``sent`` reports per campaign and published them."""

    deadline = time.monotonic() + timeout
    while True:
        counts = {c.name: sum(tally.window_counts(stack.redis, c).values())
                  for c in stack.config.campaigns if c.name in sent}
        if all(counts[k] >= v for k, v in sent.items()) and not any(
                published.stale_windows(stack.redis, c) for c in stack.config.campaigns if c.name in sent):
            return
        if stack.agg is not None and stack.agg.error is not None:
            raise RuntimeError(f"aggregator failed: {stack.agg.error}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"aggregator did not catch up in {timeout:.0f} s: {counts} of {sent}")
        time.sleep(0.05)


def run_demo(args: argparse.Namespace) -> int:
    if args.users < 1000:
        print("ldptel demo: --users must be at least 1000", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    secs = sections()
    ingest, export = f"demo-ingest-{secrets.token_hex(8)}", f"demo-export-{secrets.token_hex(8)}"
    config = demo_config(secs, ingest, export)
    workdir = Path(tempfile.mkdtemp(prefix="ldptel-demo-"))
    stack = Stack(config, args.port)
    http = Http(stack.port)
    rng = np.random.default_rng(args.seed)
    client = TelemetryClient(stack.url, ingest, queue_path=workdir / "device-queue.sqlite",
                             batch_size=BATCH, rng=rng, accept_unrandomized=True)
    try:
        print(f"ldptel demo: embedded Redis {stack.redis_server.url}, collector {stack.url}, "
              f"aggregator running")
        sent: dict[str, int] = {}
        t0 = time.perf_counter()
        for sec in secs:
            sent.update(sec.simulate(stack, client, sec.truth, rng, args.users))
        result = client.flush(timeout=AGGREGATE_TIMEOUT_S)
        if result.pending or result.dropped or result.duplicates:
            raise RuntimeError(f"the SDK did not deliver every report exactly once: {result}")
        total = sum(sent.values())
        dt = time.perf_counter() - t0
        print(f"{args.users:,} simulated devices per campaign sent {total:,} randomized reports through "
              f"the SDK (POST /v1/reports, batches of {BATCH}) in {dt:.1f} s ({total / dt:,.0f} reports/s)")
        t0 = time.perf_counter()
        wait_counted(stack, sent, AGGREGATE_TIMEOUT_S)
        print(f"aggregator counted all of them {time.perf_counter() - t0:.1f} s after the last POST\n")
        for sec in secs:
            print(f"== {sec.title} ==")
            sec.report(stack, http, sec.truth)
            print()
        first = config.campaigns[0].name
        print(f"export API: {stack.url}/v1/campaigns/<name>/estimates?format=json|csv&window=latest")
        print(f"  also /v1/campaigns/<name>/heavy-hitters?k=10, …/range?lo=&hi=, …/quantiles?q=0.5,0.9, "
              f"…/mean; "
              f"campaigns: {', '.join(c.name for c in config.campaigns)}")
        print(f"  curl -H 'Authorization: Bearer {export}' \\\n"
              f"       '{stack.url}/v1/campaigns/{first}/estimates?format=csv'")
        if any(rule.rule == "/" for rule in stack.app.url_map.iter_rules()):
            print(f"operator page: {stack.url}/  (sign in with the export token {export})")
        print(f"export token: {export}")
        print(f"ingest token: {ingest}")
        print(f"(demo finished in {time.perf_counter() - t_start:.1f} s)")
        if not args.exit:
            print("\nthe stack keeps running; Ctrl-C to stop", flush=True)
            stopped = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            try:
                stopped.wait()
            except KeyboardInterrupt:
                pass
            print("\nstopping", flush=True)
        return 0
    finally:
        client.close(flush_timeout=0)
        http.close()
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)
