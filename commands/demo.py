"""``ldptel demo [--config FILE] [--users N] [--port P] [--seed S] [--exit] [--change-after S]``:
the whole pipeline on one machine.

Starts an embedded Redis (with the role users of ``ldptel serve``, and, with ``--config FILE``,
in the data directory of ``ldptel serve --config FILE``, emptied first, so that every command
given ``--config FILE`` finds it: ``ldptel campaigns set … --config FILE``), applies the demo's
campaigns to the registry, and runs the collector app on a real HTTP server (127.0.0.1,
``--port`` or a free port) with the export API and operator pages, a shuffler and an aggregator.
The campaigns have 10 s windows. At the start of a window, ``--users`` simulated devices per
campaign — one frequency campaign per oracle (grr, sue, oue, olh, hadamard, rappor), heavy
hitters, a range and two numeric campaigns — randomize their values (vectorized, seeded:
simulation only) and send them; once the aggregator has counted and published them, the demo
prints that window's estimates against the truth, the page URL and the ingest, export and admin
tokens, and how long it took. ``--exit`` stops there. Otherwise devices keep reporting every
second from slowly drifting populations (``ldptel.commands.demo_live``; ``--users`` reports per
campaign and window), so each trend grows by a window every 10 s, and ``--change-after`` seconds
later the demo changes a campaign live (a new version, marked on its trend), until Ctrl-C.
``--config`` (``examples/demo.toml``, which ``make demo`` uses) must hold the demo's campaigns;
its ``[server]`` gives the tokens (random without it).

Each campaign kind is a ``DemoSection`` (``sections()``): the frequency oracles here, heavy hitters
and range queries from ``ldptel.commands.demo_queries`` (``heavy_hitter_section``, ``range_section``), means
from ``ldptel.commands.demo_numeric`` (``numeric_section``).
"""

from __future__ import annotations

import argparse
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

from ldptel.aggregator.keyring import signing_public_text
from ldptel.campaigns.config import Config, parse_config
from ldptel.client.transport import TelemetryClient
from ldptel.commands.demo_live import LiveDevices
from ldptel.commands.demo_queries import export_get
from ldptel.commands.demo_stack import Http, Stack
from ldptel.credentials import embedded_data_dir
from ldptel.privacy.modes import is_shuffled
from ldptel.store import published, tally
from ldptel.store.redis_server import DataDirBusy, DataDirLock

DOMAIN = 64
EPSILON = 2.0
WINDOW = "10s"  # every demo campaign's window: a trend grows while you watch
MIN_REPORTS = 500
BURST_ROOM_S = 6.0  # the first devices report at a window's start if less than this is left of it
TOP_ROWS = 8
BATCH = 1000
ORACLES = ("grr", "sue", "oue", "olh", "hadamard", "rappor")
RAPPOR = {"bloom_bits": 128, "hashes": 2, "cohorts": 32, "f": 0.25, "p": 0.35, "q": 0.65}
AGGREGATE_TIMEOUT_S = 120.0
# the demo's token issuer: every simulated device posts from 127.0.0.1, one subject to the address
# attester (weak: demos and tests), so its quota is set high (examples/demo.toml holds the same)
ISSUER = {"attester": "address", "tokens_per_window": 1_000_000}


def zipf_population(n: int, d: int, rng: np.random.Generator, s: float = 1.1) -> np.ndarray:
    """n values in [0, d) with P(v) ∝ 1/(v+1)^s."""
    w = 1.0 / np.arange(1, d + 1) ** s
    return rng.choice(d, size=n, p=w / w.sum())


# --- demo sections -------------------------------------------------------------------------

@dataclass
class DemoSection:
    """A group of demo campaigns: their config tables, a simulation that queues reports in the
    SDK client (``TelemetryClient``; the demo flushes it) and returns the number queued per
    campaign, and a printer of results (reading the export API over ``Http``)."""

    title: str
    campaigns: Callable[[], list[dict[str, Any]]]
    # → queued per campaign
    simulate: Callable[[Stack, Any, dict[str, Any], np.random.Generator, int], dict[str, int]]
    report: Callable[[Stack, Http, dict[str, Any]], None]
    truth: dict[str, Any] = field(default_factory=dict)


def frequency_campaigns() -> list[dict[str, Any]]:
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


def frequency_simulate(stack: Stack, client: Any, truth: dict[str, Any], rng: np.random.Generator,
                       users: int) -> dict[str, int]:
    """The same ``users`` devices (Zipf values) report to every frequency campaign through the SDK
    (``TelemetryClient.report_many``: vectorized randomization, SQLite queue, batched POSTs)."""
    values = zipf_population(users, DOMAIN, rng)
    truth["counts"] = np.bincount(values, minlength=DOMAIN)
    queued: dict[str, int] = {}
    for camp in stack.config.campaigns:
        if camp.kind != "frequency" or is_shuffled(camp) or camp.dimensions is not None:
            continue
        labels = camp.labels()
        queued[camp.name] = client.report_many(
            camp.name, [labels[v] for v in values] if camp.oracle == "rappor" else values)
    return queued


def frequency_report(stack: Stack, http: Http, truth: dict[str, Any]) -> None:
    """Raw unbiased estimates of the most frequent items per oracle, read from the export API."""
    docs = {}
    for camp in stack.config.campaigns:
        if camp.kind != "frequency" or is_shuffled(camp) or camp.dimensions is not None:
            continue
        doc = export_get(stack, http, f"/v1/campaigns/{camp.name}/estimates?format=json")
        if doc is not None:
            docs[camp.oracle] = doc
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
    return out + [s for s in (heavy_hitter_section(), range_section(), numeric_section(), sealed_section(),
                              shuffled_hh_section(), breakdown_section()) if s is not None]


def breakdown_section() -> DemoSection:
    """Breakdowns and an experiment (``ldptel.commands.demo_breakdowns``)."""
    from ldptel.commands import demo_breakdowns as b

    return DemoSection(b.BREAKDOWN_TITLE, b.breakdown_campaigns, b.breakdown_simulate, b.breakdown_report)


def sealed_section() -> DemoSection:
    """shuffled-fakes: one campaign in a shuffled privacy mode (``ldptel.commands.demo_sealed``)."""
    from ldptel.commands import demo_sealed as s

    return DemoSection(s.SEALED_TITLE, s.sealed_campaigns, s.sealed_simulate, s.sealed_report)


def shuffled_hh_section() -> DemoSection:
    """Heavy hitters in privacy_mode shuffled beside the local ones (``ldptel.commands.demo_shuffled_hh``)."""
    from ldptel.commands import demo_shuffled_hh as h

    return DemoSection(h.SHUFFLED_HH_TITLE, h.shuffled_hh_campaigns, h.shuffled_hh_simulate,
                       h.shuffled_hh_report)


# --- main ----------------------------------------------------------------------------------

def demo_tables(secs: list[DemoSection]) -> list[dict[str, Any]]:
    """The demo's ``[[campaigns]]`` tables (``examples/demo.toml`` holds the same)."""
    # 10 s windows; a short shuffle delay: each window's reports are shuffled within 1 s
    # (a campaign may keep its own window: the shuffled-fakes one is "all", released at batch_min)
    return [{**c, "window": c.get("window", WINDOW), "min_reports": MIN_REPORTS, "shuffle_max_delay": "1s"}
            for s in secs for c in s.campaigns()]


def demo_config(secs: list[DemoSection], ingest: str, export: str, admin: str) -> Config:
    from ldptel.store.redis_server import free_port

    return parse_config({
        "server": {"ingest_tokens": [ingest], "export_tokens": [export], "admin_tokens": [admin],
                   "rate_limit_per_minute": 10**9, "rate_limit_per_address_per_minute": 0,
                   "secret_key": secrets.token_hex(16)},
        "aggregator": {"block_ms": 100, "read_count": 200, "publish_interval": 1},
        # the analyzer's keys of shuffled campaigns: this run's own (``aggregator.keyring``)
        "analyzer": {"keys_dir": tempfile.mkdtemp(prefix="ldptel-demo-keys-")},
        # the Privacy Pass issuer (issue 37): the shuffled campaign takes a token per envelope
        "issuer": {**ISSUER, "port": free_port(),
                   "key_file": str(Path(tempfile.mkdtemp(prefix="ldptel-demo-issuer-")) / "key.pem")},
        "campaigns": demo_tables(secs),
    })


def file_config(path: str, secs: list[DemoSection]) -> Config:
    """``--config``: the file's config, which must declare every demo campaign (``ConfigError``
    naming the missing ones: the demo's devices report to them)."""
    from ldptel.campaigns.config import ConfigError, load_config

    config = load_config(path)
    missing = [t["name"] for t in demo_tables(secs) if config.campaign(t["name"]) is None]
    if missing:
        raise ConfigError(f"{path}: the demo reports to {', '.join(missing)}: declare "
                          "them as examples/demo.toml does")
    return config


def wait_for_room(window_seconds: int, room: float = BURST_ROOM_S) -> None:
    """Sleep until a window starts if less than ``room`` seconds are left of the current one,
    so the first devices' reports all fall in one window."""
    left = window_seconds - time.time() % window_seconds
    if left < room:
        time.sleep(left + 0.05)


def wait_ended(window: int | None, window_seconds: int) -> None:
    """Sleep until the first table's window has ended, so that ``window=latest`` (the newest
    window that has ended) answers from the moment the access lines are printed."""
    if window is not None and window_seconds:
        time.sleep(max(0.0, window + window_seconds - time.time()) + 0.05)


def wait_counted(stack: Stack, sent: dict[str, int], timeout: float) -> None:
    """Until the aggregator has counted ``sent`` reports per campaign and published them. A
    shuffled campaign releases only whole batches of ``batch_min`` devices: the last fewer than
    ``batch_min`` of its devices may wait in the shuffler for more (by design), so it has caught up
    at ``sent`` − (``batch_min`` − 1)."""

    deadline = time.monotonic() + timeout
    waits = {c.name: max(int(getattr(c.mode, "batch_min", 0) or 0) - 1, 0)
             for c in stack.config.campaigns if c.name in sent}
    while True:
        counts = {c.name: sum(tally.window_counts(stack.redis, c).values())
                  for c in stack.config.campaigns if c.name in sent}
        if all(counts[k] >= v - waits[k] for k, v in sent.items()) and not any(
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
    if args.config:
        config = file_config(args.config, secs)
        lock = DataDirLock(embedded_data_dir(args.config))
    else:
        tokens = (f"demo-{k}-{secrets.token_hex(8)}" for k in ("ingest", "export", "admin"))
        config = demo_config(secs, *tokens)
        lock = DataDirLock(tempfile.mkdtemp(prefix="ldptel-demo-"))
    try:
        lock.acquire()
    except DataDirBusy as exc:
        print(f"ldptel demo: {exc}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="ldptel-demo-"))
    try:
        stack = Stack(config, args.port, lock.data_dir)
    except BaseException:
        lock.release()
        raise
    http = Http(stack.port)
    rng = np.random.default_rng(args.seed)
    ingest = config.server.ingest_tokens[0]
    client = TelemetryClient(stack.url, ingest, queue_path=workdir / "device-queue.sqlite",
                             batch_size=BATCH, rng=rng, accept_unrandomized=True,
                             analyzer_signing_key=signing_public_text(config.analyzer))
    try:
        print(f"ldptel demo: embedded Redis {stack.redis_server.url}, collector {stack.url}, "
              f"shuffler and aggregator running; campaigns of {WINDOW} windows")
        first_table(args, stack, http, client, secs, rng)
        wait_ended(http.window, stack.config.campaigns[0].window_seconds)
        print_access(args, stack, config, time.perf_counter() - t_start)
        if args.exit:
            return 0
        live = LiveDevices(client, stack.campaigns, stack.admin, args.users,
                           None if args.change_after < 0 else args.change_after,
                           lambda line: print(line, flush=True), rng)
        stopped = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):  # as `ldptel shuffle` and `serve`: even where the
            signal.signal(sig, lambda *_: stopped.set())  # SIGINT came ignored (a background job)
        print("\ndevices keep reporting every second (a new window every 10 s); Ctrl-C to stop",
              flush=True)
        try:
            live.run(stopped)
        except KeyboardInterrupt:
            pass
        print("\nstopping", flush=True)
        return 0
    finally:
        client.close(flush_timeout=0)
        http.close()
        stack.stop()
        lock.release()
        shutil.rmtree(workdir, ignore_errors=True)


def first_table(args: argparse.Namespace, stack: Stack, http: Http, client: TelemetryClient,
                secs: list[DemoSection], rng: np.random.Generator) -> None:
    """``--users`` devices per campaign report at a window's start; once counted and published,
    that window's estimates are printed against the truth."""
    wait_for_room(stack.config.campaigns[0].window_seconds)
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
    if stack.config.issuer is not None:
        from ldptel.commands.demo_sealed import NAME, token_flood

        flood = token_flood(stack, http, sent.get(NAME, 0))
        if flood:
            print(flood)
    t0 = time.perf_counter()
    wait_counted(stack, sent, AGGREGATE_TIMEOUT_S)
    first = stack.config.campaigns[0]
    counts = tally.window_counts(stack.redis, first)
    http.window = max(counts, key=lambda w: counts[w])  # the window (nearly) all of them fell in
    spread = f" (they fell in {len(counts)} windows: this machine is slow)" if len(counts) > 1 else ""
    print(f"aggregator counted all of them {time.perf_counter() - t0:.1f} s after the last POST{spread}\n")
    for sec in secs:
        print(f"== {sec.title} ==")
        sec.report(stack, http, sec.truth)
        print()


def print_access(args: argparse.Namespace, stack: Stack, config: Config, took: float) -> None:
    """The URLs, tokens and commands of the running demo."""
    first = config.campaigns[0].name
    print(f"export API: {stack.url}/v1/campaigns/<name>/estimates?format=json|csv&window=latest")
    print(f"  also /v1/campaigns/<name>/heavy-hitters?k=10, …/range?lo=&hi=, …/quantiles?q=0.5,0.9, "
          f"…/mean, …/series?version=all; campaigns: {', '.join(c.name for c in config.campaigns)}")
    print(f"  curl -H 'Authorization: Bearer {config.server.export_tokens[0]}' \\\n"
          f"       '{stack.url}/v1/campaigns/{first}/estimates?format=csv'")
    print(f"operator page: {stack.url}/  (sign in with the export token {config.server.export_tokens[0]})")
    print(f"export token: {config.server.export_tokens[0]}")
    print(f"ingest token: {config.server.ingest_tokens[0]}")
    print(f"admin token: {config.server.admin_tokens[0]}")
    where = f" --config {args.config}" if args.config else ""
    if where:
        print(f"change a campaign live: ldptel campaigns set demo-olh epsilon=1{where}")
    print(f"(first page ready {took:.1f} s after the start)", flush=True)
