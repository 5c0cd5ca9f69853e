"""The SDK transport (``TelemetryClient``) and ``ldptel simulate`` against the real collector
(gunicorn subprocess) and the real Redis: batching per campaign, retries that deduplicate, drops
only on unfixable 4xx, a persistent RAPPOR device secret, thread safety, the background sender,
and a client killed with SIGKILL (before and in the middle of a flush) that loses nothing and
duplicates nothing after a restart."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from http_support import request
from ingest_support import INGEST_TOKEN, config_text, entries, stored_reports, total_entries

from ldptel.client import TelemetryClient
from ldptel.client.queue import ReportQueue
from ldptel.client.transport import UnknownCampaign
from ldptel.proto import ReportBatch
from ldptel.store.redis_server import free_port

STRUCTURED = """
[[campaigns]]
name = "hh"
reports_per_window = 1000000  # one client plays many devices
kind = "heavy_hitters"
epsilon = 2.0
max_length = 4

[[campaigns]]
name = "range"
reports_per_window = 1000000  # one client plays many devices
kind = "range"
epsilon = 1.0
domain_size = 64
"""
pytestmark = pytest.mark.collector(config_text(extra=STRUCTURED))


def make_client(collector, tmp_path, name="queue.sqlite", **kw) -> TelemetryClient:
    return TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / name, **kw)


def test_reports_of_every_oracle_arrive_in_columnar_batches(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path, batch_size=40)
    values = {"grr": ["apple", "durian", 4], "sue": [3, 99], "oue": [0, 1020], "olh": [17, 1023],
              "hadamard": [0, 99], "rappor": ["a", "zzz"]}
    for i in range(50):
        for camp, vals in values.items():
            client.report(camp, vals[i % len(vals)])
    assert client.pending() == 300
    result = client.flush()
    assert (result.accepted, result.duplicates, result.dropped, result.pending) == (300, 0, 0, 0)
    for camp in values:
        got = entries(redis_client, camp)
        assert sorted(int(e[b"count"]) for e in got) == [10, 40], camp  # 50 = 40 + 10, one campaign each
        for e in got:
            batch = ReportBatch.FromString(e[b"batch"])
            assert batch.campaign == camp and batch.count == int(e[b"count"]) and len(batch.batch_id) == 16
    client.close()


def test_heavy_hitter_and_range_campaigns(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path, batch_size=30)
    assert {"hh", "range"} <= set(client.campaigns()), client.campaigns()
    for i in range(40):
        client.report("hh", ["abcd", "ab", "zz"][i % 3])
        client.report("range", i % 64)
    client.report_many("hh", ["abcd"] * 25)
    slot = client.mechanism("hh").device_slot()
    result = client.flush()
    assert (result.accepted, result.dropped, result.pending) == (105, 0, 0)
    assert stored_reports(redis_client, "hh") == 65 and stored_reports(redis_client, "range") == 40
    device = [ReportBatch.FromString(e[b"batch"]) for e in entries(redis_client, "hh")]
    assert sorted(b.count for b in device) == [10, 25, 30]  # 40 device reports, then 25 simulated
    reports = [b.heavy_hitters for b in device if b.count != 25]
    assert {(lv, k) for h in reports for lv, k in zip(h.levels, h.seed_indices, strict=True)} == {slot}
    client.close()
    again = make_client(collector, tmp_path, batch_size=30)  # the same queue file: the same device
    assert again.mechanism("hh").device_slot() == slot
    again.close()


def test_raw_values_never_stored(collector, tmp_path):
    client = make_client(collector, tmp_path)
    client.report("grr", "cherry")
    client.report("rappor", "my-very-private-string")
    blob = b"".join(p.read_bytes() for p in tmp_path.glob("queue.sqlite*"))
    assert b"cherry" not in blob.replace(b'"cherry"', b"")  # only in the cached public config
    assert b"my-very-private-string" not in blob
    client.close(flush_timeout=None)


def test_retry_after_lost_response_is_deduplicated(collector, tmp_path, redis_client):
    """The collector stored a chunk but the client never saw the answer: the retry carries the same
    batch_id, is answered as a duplicate, and the reports are stored once."""
    client = make_client(collector, tmp_path, batch_size=100)
    for v in range(30):
        client.report("olh", v)
    chunk = client.queue.next_chunk(100)
    body = client._sender.batch_body(chunk)
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"}
    status, data = request(collector.url, "POST", "/v1/reports", body, headers)
    assert (status, data) == (202, {"accepted": 30, "duplicate": False})
    result = client.flush()
    assert (result.accepted, result.duplicates, result.pending) == (0, 30, 0)
    assert total_entries(redis_client) == 1 and stored_reports(redis_client) == 30
    client.close()


def test_unfixable_4xx_is_dropped_and_logged(collector, tmp_path, redis_client, caplog):
    client = make_client(collector, tmp_path)
    client.report("grr", "banana")
    bad = client.mechanism("grr").encode_batch([1, 2], campaign="grr", batch_id=b"")
    bad.grr.values[1] = 77  # not a value an honest client sends
    client.queue.append("grr", 2, bad.SerializeToString())
    client.report("sue", 5)
    with caplog.at_level(logging.ERROR, logger="ldptel.client"):
        result = client.flush()
    # the bad row was grouped with the good grr report: that chunk is refused as a whole
    assert (result.accepted, result.dropped, result.pending) == (1, 3, 0)
    assert "dropping 3 reports of grr" in caplog.text and "invalid_report" in caplog.text
    assert stored_reports(redis_client) == 1
    client.close()


def test_network_errors_keep_the_queue(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path)
    for v in range(10):
        client.report("hadamard", v)
    client.close(flush_timeout=None)
    dead = TelemetryClient(f"http://127.0.0.1:{free_port()}", INGEST_TOKEN,
                           queue_path=tmp_path / "queue.sqlite", backoff_base=0.05)
    t0 = time.monotonic()
    result = dead.flush(timeout=0.6)
    assert time.monotonic() - t0 < 2.0
    assert result.pending == 10 and not result.ok and "URLError" in result.error
    dead.report("hadamard", 3)  # campaign configs come from the queue file while offline
    dead.close(flush_timeout=None)
    client = make_client(collector, tmp_path)
    assert client.flush().accepted == 11
    assert stored_reports(redis_client) == 11
    client.close()


def test_bad_token_keeps_the_queue(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path)
    client.report("olh", 1)
    client.close(flush_timeout=None)
    wrong = TelemetryClient(collector.url, "not-the-token", queue_path=tmp_path / "queue.sqlite")
    result = wrong.flush(timeout=2)
    assert result.pending == 1 and "401" in result.error
    wrong.close(flush_timeout=None)
    assert total_entries(redis_client) == 0


def test_unknown_campaign_and_bad_value(collector, tmp_path):
    client = make_client(collector, tmp_path)
    with pytest.raises(UnknownCampaign):
        client.report("nope", 1)
    with pytest.raises(ValueError, match="not in the domain"):
        client.report("grr", "fig")
    with pytest.raises(ValueError, match="value"):
        client.report("sue", 100)
    assert client.pending() == 0
    client.close()


def test_rappor_device_secret_survives_restart(collector, tmp_path):
    a = make_client(collector, tmp_path, "a.sqlite")
    mech = a.mechanism("rappor")
    cohort, prr = mech.device_cohort(), mech.permanent_bits("x", mech.device_cohort())
    a.close(flush_timeout=None)
    a2 = make_client(collector, tmp_path, "a.sqlite")
    mech2 = a2.mechanism("rappor")
    assert mech2.secret == mech.secret and mech2.device_cohort() == cohort
    assert np.array_equal(mech2.permanent_bits("x", cohort), prr)
    a2.close(flush_timeout=None)
    b = make_client(collector, tmp_path, "b.sqlite")
    assert b.mechanism("rappor").secret != mech.secret
    b.close(flush_timeout=None)


def test_thread_safe_reporting_and_background_sender(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path, batch_size=50, flush_interval=0.2)
    client.start()

    def work(k: int) -> None:
        for i in range(40):
            client.report("oue", (k * 40 + i) % 1021)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 15
    while client.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    client.close()
    assert stored_reports(redis_client, "oue") == 200


def test_report_many_and_simulate_cli(collector, tmp_path, redis_client):
    values = tmp_path / "values.txt"
    values.write_text("\n".join(["apple", "banana", "3", "elder"] * 250) + "\n")
    argv = [sys.executable, "-m", "ldptel.commands.cli", "simulate", "--config", str(collector.config_path),
            "--campaign", "grr", "--values-file", str(values), "--url", collector.url,
            "--token", INGEST_TOKEN, "--seed", "7"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "1000 devices" in out.stdout and "1000 accepted" in out.stdout
    first = [ReportBatch.FromString(e[b"batch"]).grr.values[:] for e in entries(redis_client, "grr")]
    assert stored_reports(redis_client, "grr") == 1000
    redis_client.flushdb()
    assert subprocess.run(argv, capture_output=True, timeout=60).returncode == 0
    again = [ReportBatch.FromString(e[b"batch"]).grr.values[:] for e in entries(redis_client, "grr")]
    assert again == first  # --seed makes the randomized reports reproducible
    bad = subprocess.run([*argv[:-2], "--campaign", "nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--campaign" in bad.stderr


CHILD = textwrap.dedent("""
    import os, signal, sys
    from ldptel.client import TelemetryClient
    url, token, path, mode = sys.argv[1:5]
    client = TelemetryClient(url, token, queue_path=path, batch_size=25)
    if mode == "queue":
        for v in range(100):
            client.report("olh", v)
        print("queued", flush=True)
        signal.pause()
    else:  # crash after the collector stored the second chunk, before the queue recorded it
        done = []
        complete = client.queue.complete
        def crash(chunk):
            done.append(chunk)
            if len(done) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            complete(chunk)
        client.queue.complete = crash
        client.flush()
""")


@pytest.mark.slow
def test_sdk_killed_and_restarted_delivers_everything_once(collector, tmp_path, redis_client):
    queue = tmp_path / "device.sqlite"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    argv = [sys.executable, str(script), collector.url, INGEST_TOKEN, str(queue)]
    child = subprocess.Popen([*argv, "queue"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "queued"
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    assert ReportQueue(queue).pending() == 100 and total_entries(redis_client) == 0

    crashing = subprocess.run([*argv, "flush"], timeout=60)
    assert crashing.returncode == -signal.SIGKILL
    assert stored_reports(redis_client) == 50 and ReportQueue(queue).pending() == 75

    client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=queue, batch_size=25)
    result = client.flush()
    client.close()
    assert (result.accepted, result.duplicates, result.pending) == (50, 25, 0)
    assert stored_reports(redis_client, "olh") == 100 and total_entries(redis_client) == 4
