"""``ldptel serve --config FILE [--redis-url URL] [--[no-]aggregator] [--host H] [--port P]
[--workers N] [--read-port P --read-workers N --read-nice K]``.

Loads and validates the config (a bad one exits 2 with a message naming the key, via the CLI),
puts its campaigns that the registry in Redis does not hold yet into it (``ldptel.store.registry``;
after that the registry is the source of truth: the drift is printed, ``ldptel campaigns apply``
applies the file),
picks Redis — ``--redis-url``, else ``$REDIS_URL``, else an embedded ``redis-server`` whose URL is
printed, with its data (AOF) under ``$LDPTEL_DATA_DIR`` (default ``~/.local/share/ldptel``) in a
directory per config file, locked (``DataDirLock``: a second ``serve`` of the config exits 2 naming
the holder's pid) — and runs the collector app under gunicorn with ``--workers`` worker processes
bound to ``--host`` (127.0.0.1 by default), in a forked child. With ``--read-port``, a second
gunicorn (the reader pool: ``--read-workers`` workers at CPU priority ``nice --read-nice``, default
10) serves what operators and data teams read — export and query API, series, pages, health — on
that port, so that however hard they poll, ingest requests (on ``--port``, which still serves
everything) are first in line for the cores. An aggregator (``ldptel aggregate``
as a child process) runs beside it with ``--aggregator``, the default with the embedded Redis;
the start says plainly whether one runs. With the aggregator, and ``[shuffler] enabled`` (the
default), a shuffler (``ldptel shuffle``) runs beside it too, as a child restarted like it.
The embedded Redis has a user per role (``ldptel.store.acl``) and a default user only this process
knows the password of; every child connects as its role.

This process then supervises (``server.supervisor``): a dead embedded Redis, shuffler, aggregator
or reader pool is restarted with backoff (ingest and the reader pool are independent children: a
dead reader pool never takes ingest down); when the collector's gunicorn exits, everything stops. It owns the
``PROMETHEUS_MULTIPROC_DIR`` of its children (``ldptel.ops.prom``): a fresh directory, removed at the
end, from which a dead worker's live gauges are removed. Ctrl-C / SIGTERM stop everything cleanly:
the collector's gunicorn first, then the reader pool, the shuffler (it finishes its step) and the aggregator
(it finishes its commit), then Redis. If this process is killed outright, its children get
SIGTERM from the kernel (``ldptel.process.die_with_parent``), so none is left holding the port or
the data directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from ldptel.campaigns.config import Config, load_config
from ldptel.commands import granian_pool
from ldptel.commands.children import ChildCommand
from ldptel.commands.gunicorn_pool import CollectorApplication, gunicorn_options
from ldptel.commands.supervisor import Supervised, stop_pids, wait_pid
from ldptel.process import die_with_parent
from ldptel.store.redis_server import DataDirBusy, DataDirLock, EmbeddedRedis, free_port

# NB: nothing importing prometheus_client may be imported at module level: its multiprocess mode
# is chosen at import, after ``run_serve`` has set PROMETHEUS_MULTIPROC_DIR.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
POLL_S = 0.2

def default_data_dir(config_path: str | os.PathLike[str] | None) -> Path:
    """``$LDPTEL_DATA_DIR`` or ``~/.local/share/ldptel``, plus ``redis-<config stem>-<hash>``, so a
    restarted ``ldptel serve`` of the same config finds its data again
    (``credentials.embedded_data_dir``: every command given ``--config`` finds it the same way)."""
    from ldptel.credentials import embedded_data_dir

    return embedded_data_dir(config_path)


def run_serve(args: argparse.Namespace) -> int:
    """Entry point of ``ldptel serve``; returns the exit status."""
    config = load_config(args.config)
    problem = check_pool_args(args)
    if problem:
        print(f"ldptel serve: {problem}", file=sys.stderr)
        return 2
    redis_url = args.redis_url or os.environ.get("REDIS_URL")
    run_aggregator = args.aggregator if args.aggregator is not None else not redis_url
    lock = None
    children: list[Supervised] = []
    metrics_dir = tempfile.mkdtemp(prefix="ldptel-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir
    try:
        if not redis_url:
            try:
                lock = DataDirLock(default_data_dir(args.config)).acquire()
            except DataDirBusy as exc:
                print(f"ldptel serve: {exc}", file=sys.stderr)
                return 2
            embedded = embedded_redis(config, lock.data_dir)
            children.append(RedisChild(embedded, config.shuffler.aof_rewrite_seconds))
            children[-1].start()
            redis_url = embedded.url
            print(f"ldptel: embedded Redis at {redis_url} (data in {embedded.data_dir})", flush=True)
        apply_campaigns(config, redis_url)
        if run_aggregator:
            children.append(aggregator_child(str(args.config), redis_url))
            pid = children[-1].start()
            print(f"ldptel: aggregator running beside the collector (pid {pid}; restarted if it dies)",
                  flush=True)
            if config.shuffler.enabled:  # stopped first: children stop in reverse
                children.append(shuffler_child(str(args.config), redis_url))
                pid = children[-1].start()
                print(f"ldptel: shuffler running beside the collector (pid {pid}; restarted if it "
                      "dies)", flush=True)
        if config.issuer is not None:  # issue 37: its own process, Redis user and key
            children.append(child_process("issuer", lambda: ChildCommand("issuer", str(args.config),
                                                                         redis_url)))
            pid = children[-1].start()
            print(f"ldptel: token issuer on {config.issuer.public_url()} (pid {pid}; attester "
                  f"{config.issuer.attester}; restarted if it dies)", flush=True)
        if not run_aggregator:
            shuffle = f" and `ldptel shuffle --config {args.config}`" if config.shuffler.enabled else ""
            print("ldptel: no aggregator runs here (--no-aggregator): nothing is counted unless "
                  f"`ldptel aggregate --config {args.config}`{shuffle} run against this Redis",
                  flush=True)
        server = granian_pool.choose(getattr(args, "server", None), args.access_log)
        print(f"ldptel: collector on http://{args.host}:{args.port} "
              f"({args.workers} {server} workers, {len(config.campaigns)} campaigns)", flush=True)
        options = gunicorn_options(args.host, args.port, args.workers,
                                   args.access_log, args.access_log_addresses)
        pools = [fork_collector(config, redis_url, options, run_aggregator, server=server)]
        if args.read_port:
            print(f"ldptel: reader pool on http://{args.host}:{args.read_port} ({args.read_workers} "
                  f"workers at nice {args.read_nice}): export API, queries, series and pages; ingest "
                  f"only on port {args.port}; restarted if it dies", flush=True)
            read_options = gunicorn_options(args.host, args.read_port, args.read_workers, args.access_log,
                                            args.access_log_addresses, proc_name="ldptel-read")
            children.append(reader_pool(config, redis_url, read_options, run_aggregator, args.read_nice))
            children[-1].start()
        return supervise(pools, children)
    finally:
        for child in reversed(children):
            child.stop()
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if lock is not None:
            lock.release()


def check_pool_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the worker pools' arguments, if anything."""
    if args.workers < 1:
        return "--workers must be at least 1"
    if args.read_port:
        if not 0 < args.read_port < 65536 or args.read_port == args.port:
            return f"--read-port must be a port other than --port ({args.port}), got {args.read_port}"
        if args.read_workers < 1:
            return "--read-workers must be at least 1"
        if not 0 <= args.read_nice <= 19:
            return f"--read-nice must be in [0, 19] (a nice increment), got {args.read_nice}"
    return None


def apply_campaigns(config: Config, redis_url: str) -> None:
    """Put the file's campaigns that the registry does not hold into it (``registry.apply`` with
    ``only_new``): after the first start the registry is the source of truth, so admin changes
    survive a restart. Say what was created, where the registry differs from the file (the
    drift: ``ldptel campaigns apply --config FILE`` applies the file), and which campaigns are
    quarantined (a record that cannot be read: the others serve). A Redis that cannot be reached
    only warns (the processes then serve the file's campaigns until the registry holds them)."""
    from redis.exceptions import RedisError

    from ldptel.campaigns.config import ConfigError
    from ldptel.commands.campaigns import print_drift
    from ldptel.store import registry
    from ldptel.store.redis_client import connect

    try:
        r = connect(redis_url, role="admin", socket_connect_timeout=5.0, socket_timeout=10.0)
        applied = registry.apply(r, config.tables, by=f"serve ({config.path})", via="serve", only_new=True,
                                 shuffler=config.shuffler)
        for change in applied.changes:
            if change.action != "unchanged":
                print(f"ldptel: campaign {change.line()}", file=sys.stderr, flush=True)
        if applied.drift:
            print(f"ldptel: the registry differs from {config.path}; the registry's campaigns are kept "
                  f"(`ldptel campaigns apply --config {config.path}` applies the file):",
                  file=sys.stderr, flush=True)
            print_drift(applied, "ldptel:   ", file=sys.stderr)
        for name, why in applied.broken.items():
            print(f"ldptel: warning: campaign {name!r} is quarantined ({why}); the others serve; "
                  "an admin PUT or `ldptel campaigns apply` repairs it", file=sys.stderr, flush=True)
    except ConfigError as exc:  # a new campaign of the file that the registry refuses
        print(f"ldptel: warning: cannot register the file's new campaigns ({exc})", file=sys.stderr,
              flush=True)
    except RedisError as exc:
        print(f"ldptel: warning: cannot apply the campaigns to the registry ({exc}); "
              "run `ldptel campaigns apply` once Redis is reachable", file=sys.stderr, flush=True)


def embedded_redis(config: Config, data_dir: Path) -> EmbeddedRedis:
    """The embedded Redis with a user per role (``ldptel.store.acl``): its ACL file and the
    credentials file are written in ``data_dir`` (new passwords at every start), the default
    user's password stays in this process, and the children find the credentials through
    ``$LDPTEL_REDIS_CREDENTIALS`` (set here, inherited), so each connects as its role and none
    can fall back to the default user."""
    from ldptel.commands.acl_admin import embedded_acl
    from ldptel.credentials import ENV

    port = free_port()
    args, password, creds = embedded_acl(config, data_dir, port)
    os.environ[ENV] = str(creds)
    return EmbeddedRedis(data_dir=data_dir, port=port, extra_args=args, password=password,
                         die_with_parent=True)


class RedisChild(Supervised):
    """The embedded Redis as a supervised child: restarted on its port and data directory, and
    its AOF rewritten every ``rewrite_every`` seconds (``[shuffler] aof_rewrite_seconds``). The
    AOF logs every write, so the ingress batches the shuffler deleted — whole, with batch ids, in
    arrival order — stay on disk until a rewrite writes only the current data."""

    def __init__(self, embedded: EmbeddedRedis, rewrite_every: float) -> None:
        def launch() -> subprocess.Popen[bytes]:
            proc = embedded.start().process
            assert proc is not None
            return proc

        super().__init__("embedded Redis", launch, embedded.stop)
        self.embedded, self.rewrite_every = embedded, rewrite_every
        self._next_rewrite = time.monotonic() + rewrite_every

    def check(self) -> None:
        super().check()
        now = time.monotonic()
        if now >= self._next_rewrite and self.proc is not None and self.proc.poll() is None:
            self._next_rewrite = now + self.rewrite_every
            self.embedded.rewrite_aof()


def aggregator_child(config_path: str, redis_url: str) -> Supervised:
    """``ldptel aggregate`` as a supervised child; its live gauges go when it dies."""
    return child_process("aggregator", lambda: ChildCommand("aggregate", config_path, redis_url))


def child_process(name: str, make: Callable[[], Any]) -> Supervised:
    """A supervised ``ldptel`` child process: ``make()`` starts it (an object with ``proc`` and
    ``stop()``), a restart makes a new one; its live gauges go when it dies."""
    from ldptel.ops import prom

    current: list[Any] = []

    def launch() -> subprocess.Popen[bytes]:
        current[:] = [make()]
        return cast("subprocess.Popen[bytes]", current[0].proc)

    def halt() -> None:
        for child in current:
            child.stop()

    return Supervised(name, launch, halt, prom.mark_dead)


def shuffler_child(config_path: str, redis_url: str) -> Supervised:
    """``ldptel shuffle`` as a supervised child; its live gauges go when it dies."""
    return child_process("shuffler", lambda: ChildCommand("shuffle", config_path, redis_url))


def fork_collector(config: Config, redis_url: str, options: dict[str, Any], supervised: bool,
                   reader: bool = False, nice: int = 0, server: str = "gunicorn") -> int:
    """gunicorn (or granian: ``server``, the collector's pool only) in a forked child (it takes
    over signals and reaps its own children), at ``nice`` (its workers inherit it), serving
    everything or (``reader``) the reader pool's part; its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        die_with_parent(parent)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if nice:
            os.nice(nice)
        if server == "granian" and not reader:
            host, _, port = str(options["bind"]).rpartition(":")
            granian_pool.run(str(config.path), redis_url, host.strip("[]"), int(port),
                             int(options["workers"]), supervised)
        else:
            CollectorApplication(config, redis_url, options, supervised, reader).run()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must never return into the parent's code
        traceback.print_exc()
    finally:
        os._exit(code)


class ForkedPool:
    """A gunicorn forked by ``fork_collector``, as ``Supervised`` sees a child process: ``pid``,
    ``poll()`` (reaping it), ``returncode``."""

    def __init__(self, pid: int) -> None:
        self.pid: int = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = wait_pid(self.pid, 0)
        return self.returncode

    def stop(self) -> None:
        if self.poll() is None:
            self.returncode = stop_pids([self.pid])[0]


def reader_pool(config: Config, redis_url: str, options: dict[str, Any], supervised: bool,
                nice: int) -> Supervised:
    """The reader pool (``--read-port``) as a supervised child: a dead one is forked again with
    backoff, and ingest (the other gunicorn, a sibling) never notices."""
    current: list[ForkedPool] = []

    def launch() -> Any:
        current[:] = [ForkedPool(fork_collector(config, redis_url, options, supervised, reader=True,
                                                nice=nice))]
        return current[0]

    def halt() -> None:
        for pool in current:
            pool.stop()

    from ldptel.ops import prom

    return Supervised("reader pool", launch, halt, prom.mark_dead)


def supervise(pools: list[int], children: list[Supervised]) -> int:
    """Restart dead ``children`` until a gunicorn of ``pools`` exits (the others are stopped; its
    exit status is returned) or a SIGTERM/SIGINT arrives (every pool is stopped; 0 if the first
    stopped cleanly)."""
    from ldptel.ops import prom

    stop = threading.Event()
    reaped_at = 0.0
    previous: dict[int, Callable[..., Any] | int | None] = {}
    for sig in (signal.SIGTERM.value, signal.SIGINT.value):
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.is_set():
            for pid in pools:
                code = wait_pid(pid, 0)
                if code is not None:
                    stop_pids([other for other in pools if other != pid])
                    return code if code >= 0 else 1
            for child in children:
                child.check()
            if time.monotonic() - reaped_at >= 1.0:  # a granian worker that died: its live gauges
                prom.mark_dead_gone()
                reaped_at = time.monotonic()
            stop.wait(POLL_S)
        return stop_pids(pools)[0]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
