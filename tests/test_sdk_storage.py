"""SDK storage and network trouble never reaches the host app: a full disk (a real write limit:
RLIMIT_FSIZE, so SQLite's writes fail with EFBIG as on a full file system) and a read-only queue
directory drop the report, count it, and ``health()`` says why; ``report()`` makes no network
request (a stale config is refreshed in the background); value errors name the campaign."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from ingest_support import INGEST_TOKEN, config_text, stored_reports

from ldptel.client import TelemetryClient

pytestmark = pytest.mark.collector(config_text())

DISK_FULL_CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    from ldptel.client import TelemetryClient
    url, token, path = sys.argv[1:4]
    client = TelemetryClient(url, token, queue_path=path)
    client.campaigns()
    for v in range(10):
        client.report("grr", v % 5)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
    size = max(p.stat().st_size for p in Path(path).parent.glob("*.sqlite*"))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 8192, hard))
    for v in range(300):
        client.report("grr", v % 5)
    client.report_many("oue", list(range(500)))
    full = client.health()
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    for v in range(5):
        client.report("grr", v % 5)
    after = client.health()
    result = client.flush(timeout=20)
    print(json.dumps({"full": full.__dict__, "after": after.__dict__, "accepted": result.accepted,
                      "pending": result.pending, "ledger": client.privacy_ledger()}))
""")


def test_disk_full_drops_and_counts_instead_of_raising(collector, tmp_path, redis_client):
    script = tmp_path / "child.py"
    script.write_text(DISK_FULL_CHILD)
    out = subprocess.run([sys.executable, str(script), collector.url, INGEST_TOKEN,
                          str(tmp_path / "q" / "queue.sqlite")], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    full, after = got["full"], got["after"]
    assert not full["ok"] and "disk" in full["queue_error"].lower(), full  # EFBIG: disk I/O error
    assert "'grr'" in full["queue_error"] or "'oue'" in full["queue_error"]
    dropped = full["dropped"]["queue_write_failed"]
    assert 500 <= dropped <= 800, full  # the 500 of report_many and most of the 300
    assert after["ok"] and after["queue_error"] is None
    # everything that was queued (10 + 300 + 500 - dropped + 5) is delivered once
    assert got["pending"] == 0 and got["accepted"] == 815 - dropped
    assert stored_reports(redis_client) == 815 - dropped
    # the ledger is written in the report's transaction: it charged exactly the reports queued
    # (report_many simulates other devices: not charged)
    assert got["ledger"]["campaigns"]["grr"]["reports"] == stored_reports(redis_client, "grr")


@pytest.fixture
def read_only_dir(tmp_path):
    path = tmp_path / "ro"
    path.mkdir()
    path.chmod(0o555)
    immutable = os.geteuid() == 0  # root writes to any mode: make the directory immutable
    if immutable:
        chattr = shutil.which("chattr")
        if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode:
            pytest.skip("running as root without chattr +i: no read-only directory")
    yield path
    if immutable:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    path.chmod(0o755)


def test_read_only_directory_does_not_raise(collector, read_only_dir):
    client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=read_only_dir / "queue.sqlite")
    client.report("grr", "apple")
    client.report_many("sue", [1, 2, 3])
    health = client.health()
    assert not health.ok and "cannot open" in health.queue_error, health
    assert sum(health.dropped.values()) == 4 and client.pending() == 0
    assert "cannot open" in (client.flush(timeout=1).error or "")
    client.close()


def test_report_never_waits_for_the_network(collector, tmp_path):
    """A collector that accepts connections but never answers: with a cached (stale) config,
    report() returns at once; the refresh happens in the background."""
    path = tmp_path / "queue.sqlite"
    TelemetryClient(collector.url, INGEST_TOKEN, queue_path=path).close(flush_timeout=None)
    first = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=path)
    first.campaigns()
    first.close(flush_timeout=None)
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # never accepted: requests hang until the client's timeout
    try:
        client = TelemetryClient(f"http://127.0.0.1:{hung.getsockname()[1]}", INGEST_TOKEN,
                                 queue_path=path, timeout=5.0, config_ttl=0.0)
        t0 = time.monotonic()
        for v in range(20):
            client.report("grr", v % 5)
        assert time.monotonic() - t0 < 1.0
        assert client.pending() == 20
        client.close(flush_timeout=None)
    finally:
        hung.close()


def test_value_errors_name_the_campaign(collector, tmp_path):
    client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "q.sqlite")
    with pytest.raises(ValueError, match="campaign 'sue'"):
        client.report("sue", 100)
    with pytest.raises(ValueError, match="campaign 'olh'"):
        client.report_many("olh", [1, 5000])
    with pytest.raises(ValueError, match="'grr'"):
        client.report("grr", "fig")
    client.report("rappor", "not-a-candidate")  # valid: estimated only once added to candidates
    assert client.pending() == 1
    client.close(flush_timeout=None)
