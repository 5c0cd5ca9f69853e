"""The one HTTP client of the tests (``http_request``; ``request`` and ``Poster`` on top of it) and
the one way to run the collector as a process (``start_collector``: ``ldptel serve`` under
gunicorn on a free 127.0.0.1 port), used by every test that talks HTTP or runs the collector, and by
the module-scoped ``collector`` fixture of conftest.py; ``AppServer``: a Flask app in this process
behind a Werkzeug server thread (the collector's ``HttpStack``, the issuer's ``IssuerStack``)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from ingest_support import EXPORT_TOKEN, INGEST_TOKEN, PROTOBUF

from ldptel import credentials
from ldptel.store.redis_server import free_port

METRICS_AUTH = {"Authorization": f"Bearer {EXPORT_TOKEN}"}  # /metrics needs an export or admin token


@dataclass(frozen=True)
class Reply:
    """A response read to the end. ``headers``: lower-case names, a repeated header's values
    joined by ", "; ``cookies``: every ``Set-Cookie`` value."""

    status: int
    headers: dict[str, str]
    cookies: list[str]
    body: bytes

    def parsed(self) -> object:
        """The body as JSON when the content type says so, else as text."""
        return parse_body(self.headers.get("content-type", ""), self.body)


def parse_body(content_type: str, raw: bytes) -> object:
    return json.loads(raw) if "json" in content_type else raw.decode(errors="replace")


def _connection(url: str, timeout: float) -> http.client.HTTPConnection:
    return http.client.HTTPConnection(urlsplit(url).netloc, timeout=timeout)


def http_request(url: str, method: str, path: str, body: bytes | str | Iterable[bytes] | None = None,
                 headers: dict | None = None, timeout: float = 30.0, chunked: bool = False) -> Reply:
    """One request on a fresh connection to ``url`` (``http://host:port``); ``chunked`` sends an
    iterable ``body`` with ``Transfer-Encoding: chunked`` (no Content-Length)."""
    conn = _connection(url, timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    merged: dict[str, str] = {}
    for name, value in resp.getheaders():
        key = name.lower()
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return Reply(resp.status, merged, resp.msg.get_all("Set-Cookie") or [], raw)


def request(url: str, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None, timeout: float = 15.0) -> tuple[int, object]:
    """``http_request`` as (status, parsed JSON or text)."""
    reply = http_request(url, method, path, body, headers, timeout)
    return reply.status, reply.parsed()


class Poster:
    """A keep-alive connection POSTing batches to ``/v1/reports`` (fast enough for property
    tests); reconnects once when the server closed it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = _connection(url, 15)

    def post(self, body: bytes, token: str | None = INGEST_TOKEN, content_type: str = PROTOBUF,
             headers: dict | None = None) -> tuple[int, object]:
        hdrs = {"Content-Type": content_type, **(headers or {})}
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        for attempt in range(2):
            try:
                self.conn.request("POST", "/v1/reports", body=body, headers=hdrs)
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = _connection(self.url, 15)
                if attempt:
                    raise
        if resp.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = _connection(self.url, 15)
        return resp.status, parse_body(resp.getheader("Content-Type", ""), raw)

    def close(self) -> None:
        self.conn.close()


def _error(doc: object) -> object:
    return doc.get("error") if isinstance(doc, dict) else None


def not_yet_published(status: int, doc: object) -> bool:
    """Whether an answer is 503 ``not_yet_published``: a released window before its first
    publication (README), the one 5xx a healthy stack gives."""
    return status == 503 and _error(doc) == "not_yet_published"


def waiting_answer(status: int, doc: object) -> bool:
    """Whether an estimates answer only says "not yet": 200 (fewer reports counted), 409
    ``below_threshold`` or ``not_yet_published``."""
    return (status == 200 or (status == 409 and _error(doc) == "below_threshold")
            or not_yet_published(status, doc))


def wait_counted(fetch: Callable[[], tuple[int, dict]], n_reports: int, timeout: float = 60.0) -> dict:
    """Poll ``fetch`` (→ status, JSON document) until it answers 200 with ``n_reports``; every other
    answer meanwhile must be a ``waiting_answer`` (AssertionError otherwise, or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        status, doc = fetch()
        if status == 200 and doc["n_reports"] == n_reports:
            return doc
        assert waiting_answer(status, doc), (status, doc)
        assert time.monotonic() < deadline, (status, doc)
        time.sleep(0.1)


class AppServer:
    """A WSGI ``app`` served by a threaded Werkzeug server on a free 127.0.0.1 port, in a daemon
    thread of this process, until ``close()``."""

    def __init__(self, app: Any) -> None:
        from werkzeug.serving import make_server

        self.app = app
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stops the server and the app's registry poller (``registry.Live``), which would
        otherwise read the session Redis until the app is garbage-collected: every change a
        later test makes to the registry then reloads every campaign in each stale poller."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        state = getattr(self.app, "extensions", {}).get("ldptel")
        if getattr(state, "live", None) is not None:
            state.live.stop()


# --- the collector process -------------------------------------------------------------------

@dataclass
class Collector:
    proc: subprocess.Popen
    port: int
    config_path: Path
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """SIGTERM (gunicorn stops its workers, an embedded Redis and aggregator); SIGKILL only
        after 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_healthy(self, url: str | None = None, timeout: float = 30.0) -> None:
        """Until ``url``'s (default: this collector's) ``/healthz`` answers 200; ``RuntimeError``
        with the log if ``serve`` exits first or ``timeout`` s pass."""
        url = url or self.url
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ldptel serve exited ({self.proc.returncode}):\n{self.log()}")
            try:
                if http_request(url, "GET", "/healthz", timeout=5).status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ldptel serve did not answer on {url} in {timeout}s:\n{self.log()}")
            time.sleep(0.05)


def start_collector(tmp: Path, text: str, redis_url: str | None, workers: int = 1,
                    env: dict[str, str] | None = None, stdout: int = subprocess.DEVNULL,
                    timeout: float = 30.0, args: Iterable[str] = ()) -> Collector:
    """``ldptel serve`` with the TOML config ``text`` (written to ``tmp/ldptel.toml``) on a free
    loopback port against ``redis_url`` (``None``: the embedded Redis and an aggregator beside
    it); waits until ``/healthz`` answers 200. The process inherits no ``LDPTEL_*`` variable nor
    ``REDIS_URL`` (``env`` adds variables); its stderr goes to ``tmp/serve.log``; ``stdout`` is
    a ``subprocess`` target (text mode); ``args`` are more ``ldptel serve`` options."""
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "ldptel.toml"
    cfg.write_text(text)
    port = free_port()
    log_path = tmp / "serve.log"
    clean = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("LDPTEL_")
             or k == "LDPTEL_REDIS_CREDENTIALS"}  # conftest's LDPTEL_TEST_ACL=1
    cmd = [sys.executable, "-m", "ldptel.commands.cli", "serve", "--config", str(cfg), "--host", "127.0.0.1",
           "--port", str(port), "--workers", str(workers)]
    if redis_url is not None:
        cmd += ["--redis-url", redis_url]
    cmd += list(args)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=log, env={**clean, **(env or {})}, text=True)
    collector = Collector(proc, port, cfg, log_path)
    try:
        collector.wait_healthy(timeout=timeout)
    except RuntimeError:
        collector.stop()
        raise
    return collector


def embedded_redis_client(data_dir: Path, url: str, role: str = "reader") -> redis.Redis:
    """A client on the embedded Redis of a ``start_collector(…, None, env={"LDPTEL_DATA_DIR":
    data_dir})`` as ``role``: its default user has a password only ``ldptel serve`` knows, and each
    role's is in the credentials file serve wrote in its data directory (``ldptel.commands.acl_admin``)."""
    creds = credentials.load(next(Path(data_dir).glob(f"redis-*/{credentials.DEFAULT_NAME}")))
    assert creds.fits(url), (creds.servers, url)
    user, password = creds.users[role]
    return redis.Redis.from_url(url, username=user, password=password)
