"""The SDK's store and its trust in the collector (issue 24, items 8 and 12).

- The device secret and the privacy ledger live in a data directory (``platformdirs``), not a
  cache: wiping ``$XDG_CACHE_HOME`` between runs changes nothing (it once gave a new device secret
  and a fresh ledger at every wipe: ε∞ charged again, ``lifetime_epsilon`` never refusing). A store
  deleted or replaced while open is detected (``health()``), not written into unseen.
- A config from a broken or malicious collector that fails validation drops that campaign's
  reports as ``bad_config`` (counted, logged), never raises into the app; a 150 MiB answer is
  refused while it is read (it once cost the device 299 MiB)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from ingest_support import INGEST_TOKEN, config_text

from ldptel.client import TelemetryClient
from ldptel.client.queue import default_queue_path, legacy_queue_path

MEMO = """
[[campaigns]]
name = "memo"
oracle = "grr"
epsilon = 0.5
memoize = true
epsilon_inf = 2.0
domain = ["light", "dark", "system"]
reports_per_window = 1000
"""

pytestmark = pytest.mark.collector(config_text(extra=MEMO))
CHILD = textwrap.dedent("""
    import hashlib, json, sys
    from ldptel.client import TelemetryClient
    client = TelemetryClient(sys.argv[1], sys.argv[2], lifetime_epsilon=3.0)
    admitted = client.report("memo", sys.argv[3])
    secret = hashlib.sha256(client.queue.get_meta("device_secret")).hexdigest()[:16]
    print(json.dumps({"admitted": admitted, "secret": secret, "path": str(client.queue_path),
                      "spent": client.privacy_ledger()["epsilon_spent"]}))
    client.close(flush_timeout=None)
""")


def test_a_cache_wipe_changes_nothing(collector, tmp_path: Path) -> None:
    """Five runs of an app, the cache directory wiped before each: one device secret, ε∞ = 2
    charged for "light" once, and "dark" refused by lifetime_epsilon = 3 (2 + 2 > 3)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data")}
    runs = []
    for value in ("light", "dark", "light", "dark", "light"):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        out = subprocess.run([sys.executable, "-c", CHILD, collector.url, INGEST_TOKEN, value], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    assert len({r["secret"] for r in runs}) == 1, runs
    assert [r["admitted"] for r in runs] == [True, False, True, False, True]
    assert runs[-1]["spent"] == 2.0
    assert runs[0]["path"].startswith(str(tmp_path / "data" / "ldptel")), runs[0]


def test_the_default_path_is_a_data_directory_and_an_old_cache_file_moves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = "http://127.0.0.1:9"
    assert default_queue_path(url).parent == tmp_path / "data" / "ldptel"
    old = legacy_queue_path(url)
    old.parent.mkdir(parents=True)
    first = TelemetryClient(url, INGEST_TOKEN, queue_path=old, timeout=0.2)  # an older SDK's file
    secret = first.queue.meta_setdefault("device_secret", lambda: b"s" * 32)
    first.close(flush_timeout=None)
    moved = TelemetryClient(url, INGEST_TOKEN, timeout=0.2)
    assert moved.queue_path == default_queue_path(url) and not old.exists()
    assert moved.queue.get_meta("device_secret") == secret  # the same device
    moved.close(flush_timeout=None)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_deleted_or_replaced_while_open_is_reported(collector, tmp_path: Path, how: str) -> None:
    """It once kept "queuing" into the unlinked file with health ok: everything queued then, the
    device secret and the ledger went with the process."""
    path = tmp_path / "q.sqlite"
    client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=path)
    assert client.report("grr", "apple") is True and client.health().ok
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if how == "replaced":
        path.write_bytes(b"")
    assert client.report("grr", "apple") is False
    health = client.health()
    assert not health.ok and how in (health.store_error or ""), health
    assert health.dropped.get("store_lost") == 1
    client.close(flush_timeout=None)


# --- a broken or malicious collector ------------------------------------------------------------

BAD = [
    ("eps-huge", {"oracle": "grr", "epsilon": 1e9, "domain_size": 4}),
    ("eps-nan", {"oracle": "grr", "epsilon": float("nan"), "domain_size": 4}),
    ("eps-negative", {"oracle": "grr", "epsilon": -1, "domain_size": 4}),
    ("eps-tiny", {"oracle": "grr", "epsilon": 1e-17, "domain_size": 4}),
    ("domain-negative", {"oracle": "oue", "epsilon": 1.0, "domain_size": -5}),
    ("rappor-f0", {"oracle": "rappor", "epsilon": 1.0, "bloom_bits": 16, "hashes": 2, "cohorts": 4, "f": 0,
                   "p": 0.5, "q": 0.75, "candidates": ["a", "b"]}),
    ("inf-nan", {"oracle": "grr", "epsilon": 1.0, "domain_size": 4, "memoize": True,
                 "epsilon_inf": float("nan")}),
    ("numeric-wide", {"kind": "numeric", "epsilon": 1.0, "lower": -1e308, "upper": 1e308,
                      "mechanism": "duchi"}),
    ("window-text", {"oracle": "grr", "epsilon": 1.0, "domain_size": 4, "window_seconds": "soon"}),
    ("version-zero", {"oracle": "grr", "epsilon": 1.0, "domain_size": 4, "version": 0}),
]
HUGE = 150 << 20
CHUNK = b" " * (1 << 20)


class FakeCollector(http.server.BaseHTTPRequestHandler):
    """``GET /v1/campaigns``: the BAD configs, or (``/huge``) a 150 MiB answer."""

    def do_GET(self) -> None:  # http.server's name
        if self.server.huge:  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                for _ in range(HUGE // len(CHUNK)):
                    self.wfile.write(CHUNK)
            except OSError:
                pass  # the device stopped reading
            return
        body = json.dumps({"campaigns": [{"name": n, "version": 1, "window_seconds": 0, **c} for n, c in BAD],
                           "max_body_bytes": 1 << 20, "max_reports_per_batch": 1000}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeCollector)
    server.huge = False  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_bad_configs_are_dropped_never_raised(fake, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{fake.server_address[1]}"
    client = TelemetryClient(url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite")
    for name, cfg in BAD:
        value = "a" if cfg.get("oracle") == "rappor" else 1
        assert client.report(name, value) is False, name  # no exception, whatever the config
    health = client.health()
    assert health.dropped == {"bad_config": len(BAD)}, health
    assert "campaign 'version-zero'" in (health.last_error or ""), health.last_error
    client.close(flush_timeout=None)


def test_a_huge_config_answer_is_refused_while_read(fake, tmp_path: Path) -> None:
    fake.huge = True
    url = f"http://127.0.0.1:{fake.server_address[1]}"
    client = TelemetryClient(url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite", timeout=30)
    tracemalloc.start()
    try:
        with pytest.raises(Exception, match="no campaign configs"):
            client.campaigns(refresh=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"peak traced memory while refusing a 150 MiB answer: {peak / 2**20:.1f} MiB")
    assert peak < 8 << 20, peak
    assert "over 1048576 bytes" in (client.health().config_error or ""), client.health()
    client.close(flush_timeout=None)
