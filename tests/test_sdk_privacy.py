"""The device's own privacy accounting (issue 14 items 2–3), against the real collector over HTTP:
``reports_per_window`` caps what ``report()`` queues, the ledger refuses reports past
``lifetime_epsilon`` (per campaign, or per device), memoized campaigns pay ε∞ once per distinct
value (kept as keyed hashes, never raw values), and the ledger and the window cap survive a
kill -9 of the app."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from ingest_support import INGEST_TOKEN, config_text, stored_reports

from ldptel.campaigns.config import ConfigError, parse_config
from ldptel.client import TelemetryClient
from ldptel.client.ledger import PrivacyLedger
from ldptel.client.queue import ReportQueue
from ldptel.mechanisms.claims import Cost

CAPPED = """
[[campaigns]]
name = "capped"
oracle = "grr"
epsilon = 1.0
domain_size = 4
window = "1d"
reports_per_window = 3

[[campaigns]]
name = "memo"
oracle = "grr"
epsilon = 0.5
memoize = true
epsilon_inf = 2.0
domain = ["light", "dark", "system"]
reports_per_window = 1000

[[campaigns]]
name = "daily"
oracle = "oue"
epsilon = 0.5
domain_size = 8
window = "1d"
"""
pytestmark = pytest.mark.collector(config_text(extra=CAPPED))
# RAPPOR campaign of ingest_support: f = 0.5, h = 2, so ε∞ = 2h·ln((1 − f/2)/(f/2)) = 4·ln 3
RAPPOR_EPS_INF = 4 * math.log(3)


def make_client(collector, tmp_path, **kw) -> TelemetryClient:
    return TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "queue.sqlite", **kw)


def test_reports_beyond_reports_per_window_are_counted_not_queued(collector, tmp_path, redis_client):
    client = make_client(collector, tmp_path)
    assert [client.report("capped", v) for v in (0, 1, 2, 3, 0)] == [True, True, True, False, False]
    assert client.report("daily", 5) is True  # default reports_per_window = 1
    assert client.report("daily", 5) is False
    assert client.pending() == 4
    assert client.health().dropped == {"reports_per_window": 3}
    ledger = client.privacy_ledger()
    assert ledger["campaigns"]["capped"]["reports"] == 3
    assert ledger["campaigns"]["capped"]["over_window"] == 2
    assert ledger["campaigns"]["daily"]["over_window"] == 1
    result = client.flush(timeout=10)
    assert (result.accepted, result.pending) == (4, 0)
    assert stored_reports(redis_client, "capped") == 3 and stored_reports(redis_client, "daily") == 1
    client.close(flush_timeout=None)


def test_lifetime_epsilon_per_campaign_and_per_device(collector, tmp_path):
    """grr ε = 2 and sue ε = 1 (fresh reports: each costs its ε)."""
    per_campaign = make_client(collector, tmp_path, lifetime_epsilon=3.5)
    assert [per_campaign.report("grr", "apple") for _ in range(2)] == [True, False]  # 2 + 2 > 3.5
    assert [per_campaign.report("sue", 1) for _ in range(4)] == [True, True, True, False]
    ledger = per_campaign.privacy_ledger()
    assert ledger["campaigns"]["grr"]["epsilon_spent"] == pytest.approx(2.0)
    assert ledger["campaigns"]["sue"]["epsilon_spent"] == pytest.approx(3.0)
    assert ledger["campaigns"]["grr"]["refused"] == 1 and ledger["campaigns"]["sue"]["refused"] == 1
    assert per_campaign.health().dropped == {"lifetime_epsilon": 2}
    assert "lifetime_epsilon" in (per_campaign.health().last_error or "")
    per_campaign.close(flush_timeout=None)

    device = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "device.sqlite",
                             lifetime_epsilon=3.5, scope="device")
    assert device.report("grr", "apple") and device.report("sue", 1)  # 3.0 spent on the device
    assert not device.report("sue", 1) and not device.report("grr", "banana")
    assert device.privacy_ledger()["epsilon_spent"] == pytest.approx(3.0)
    assert device.pending() == 2
    device.close(flush_timeout=None)


def test_memoized_values_cost_eps_inf_once_and_are_stored_as_keyed_hashes(collector, tmp_path):
    client = make_client(collector, tmp_path, lifetime_epsilon=10.0, max_epsilon=10.0)
    secret_values = ["https://private.example/alpha", "https://private.example/beta"]
    for value in secret_values:
        assert all(client.report("rappor", value) for _ in range(3))  # repeats cost nothing more
    assert client.report("rappor", "https://private.example/gamma") is False  # 3·ε∞ > 10
    entry = client.privacy_ledger()["campaigns"]["rappor"]
    assert entry["epsilon_spent"] == pytest.approx(2 * RAPPOR_EPS_INF)
    assert entry["versions"]["1"]["memoized_values"] == 2
    assert (entry["reports"], entry["refused"]) == (6, 1)
    client.close(flush_timeout=None)
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("queue.sqlite"))
    assert not any(v.encode() in data for v in [*secret_values, "private.example"])


def test_memoized_campaign_charges_eps_inf_per_value_up_to_its_lifetime_bound(collector, tmp_path):
    """L-GRR with ε₁ = 0.5, ε∞ = 2 over 3 values: each new value costs ε∞ = 2 once, repeats cost
    nothing, and the mechanism's epsilon_lifetime = 3·ε∞ = 6 bounds the total."""
    client = make_client(collector, tmp_path, lifetime_epsilon=5.0)
    assert client.mechanism("memo").epsilon_lifetime == 6.0
    assert all(client.report("memo", "dark") for _ in range(20))
    assert client.report("memo", "light") is True  # 4.0
    assert client.report("memo", "system") is False  # 6.0 > 5
    assert client.report("memo", "light") is True  # memoized already: free
    entry = client.privacy_ledger()["campaigns"]["memo"]
    assert (entry["epsilon_spent"], entry["reports"], entry["refused"]) == (4.0, 22, 1)
    assert entry["versions"]["1"]["memoized_values"] == 2
    assert client.flush(timeout=10).accepted == 22
    client.close(flush_timeout=None)
    roomy = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=tmp_path / "roomy.sqlite",
                            lifetime_epsilon=100.0)
    for _ in range(3):
        assert all(roomy.report("memo", v) for v in ("light", "dark", "system"))
    assert roomy.privacy_ledger()["campaigns"]["memo"]["epsilon_spent"] == 6.0  # = epsilon_lifetime
    roomy.close(flush_timeout=None)


def test_bad_limits_are_refused_by_name(collector, tmp_path):
    with pytest.raises(ValueError, match="lifetime_epsilon"):
        make_client(collector, tmp_path, lifetime_epsilon=0)
    with pytest.raises(ValueError, match="scope"):
        make_client(collector, tmp_path, scope="planet")


def test_reports_per_window_config_key():
    base = {"campaigns": [{"name": "c", "oracle": "grr", "epsilon": 1.0, "domain_size": 4}]}
    assert parse_config(base).campaigns[0].reports_per_window == 1
    assert parse_config(base).campaigns[0].public()["reports_per_window"] == 1
    for bad in (0, -1, 2.5, True):
        base["campaigns"][0]["reports_per_window"] = bad
        with pytest.raises(ConfigError, match=r"campaigns\[c\]\.reports_per_window"):
            parse_config(base)


def test_window_rollover_and_lifetime_cap_of_memoized_values(tmp_path):
    """Ledger unit: a new window resets the cap; a memoized campaign whose mechanism bounds the
    lifetime (LOLOHA: g·ε∞) is never charged past that bound, however many values it sees."""
    queue = ReportQueue(tmp_path / "q.sqlite")
    ledger = PrivacyLedger(queue, b"k" * 32, lifetime_epsilon=5.0)
    day = 86_400
    cfg = {"window_seconds": day, "reports_per_window": 1}
    fresh = Cost(1.0, memoized=False)

    def admit(cost, value, now, campaign="c"):
        with queue.transaction() as db:
            return ledger.admit(db, ledger.charge(campaign, cfg, cost, value, now))

    assert admit(fresh, 1, 10 * day + 5) is None
    assert admit(fresh, 1, 10 * day + 99) == "reports_per_window"
    assert admit(fresh, 1, 11 * day) is None  # next window
    loloha = Cost(2.0, memoized=True, lifetime=5.0)
    cfg = {"window_seconds": 0, "reports_per_window": 100}
    # charged 2 + 2 + 1 (capped at g·ε∞ = 5) + 0 + 0 + 0: all within lifetime_epsilon = 5
    assert [admit(loloha, v, 0, "m") for v in range(6)] == [None] * 6
    snap = ledger.snapshot()
    memo = snap["campaigns"]["m"]["versions"]["1"]
    assert (memo["epsilon_memoized"], memo["memoized_values"], memo["reports"]) == (5.0, 6, 6)
    assert snap["epsilon_spent"] == pytest.approx(7.0)  # + the two fresh reports of "c"
    assert admit(Cost(2.0, memoized=True), 9, 0, "n") is None
    assert admit(Cost(2.0, memoized=True), 10, 0, "n") is None
    assert admit(Cost(2.0, memoized=True), 11, 0, "n") == "lifetime_epsilon"  # no bound: 6 > 5
    queue.close()


CHILD = textwrap.dedent("""
    import os, signal, sys
    from ldptel.client import TelemetryClient
    client = TelemetryClient(sys.argv[1], sys.argv[2], queue_path=sys.argv[3], lifetime_epsilon=2.5)
    assert [client.report("capped", 1) for _ in range(4)] == [True, True, False, False]
    assert client.report("daily", 3) and not client.report("daily", 3)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_ledger_and_window_cap_survive_kill_9(collector, tmp_path, redis_client):
    path = tmp_path / "killed.sqlite"
    child = subprocess.run([sys.executable, "-c", CHILD, collector.url, INGEST_TOKEN, str(path)],
                           capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert child.returncode == -signal.SIGKILL, child.stderr
    client = TelemetryClient(collector.url, INGEST_TOKEN, queue_path=path, lifetime_epsilon=2.5)
    ledger = client.privacy_ledger()
    capped, daily = ledger["campaigns"]["capped"], ledger["campaigns"]["daily"]
    # ε = 1 per report of "capped": the third would make 3 > 2.5
    assert (capped["reports"], capped["refused"], capped["epsilon_spent"]) == (2, 2, 2.0)
    assert (daily["reports"], daily["over_window"], daily["epsilon_spent"]) == (1, 1, 0.5)
    assert client.report("daily", 4) is False  # the window's cap, remembered across the restart
    assert client.report("capped", 0) is False  # and the spend
    assert client.privacy_ledger()["campaigns"]["capped"]["refused"] == 3
    assert client.pending() == 3
    assert client.flush(timeout=10).accepted == 3
    assert stored_reports(redis_client, "capped") == 2
    client.close(flush_timeout=None)


class FlippingClock:
    """The ``time`` module as ``ldptel.client.transport`` sees it, with ``time()`` alternating
    between ``times`` (a device clock flipping between days)."""

    def __init__(self, *times: float) -> None:
        import time as real

        self.real, self.times, self.calls = real, times, 0

    def time(self) -> float:
        self.calls += 1
        return self.times[self.calls % len(self.times)]

    def __getattr__(self, name: str):
        return getattr(self.real, name)


def test_a_flipping_clock_admits_no_extra_report(collector, tmp_path, monkeypatch):
    """Issue 24, item 7: the ledger kept only the last window per campaign, so a clock alternating
    today / yesterday reset the count at every report (10 of 10 admitted with reports_per_window
    = 3, a steady clock 3). Each window keeps its own count: 3 per day, 6 over the two days."""
    import time

    from ldptel.client import transport

    client = make_client(collector, tmp_path)
    today = time.time()
    monkeypatch.setattr(transport, "time", FlippingClock(today, today - 86_400))
    flipped = [client.report("capped", 1) for _ in range(10)]
    assert sum(flipped) == 6, flipped
    monkeypatch.setattr(transport, "time", FlippingClock(today - 2 * 86_400))
    assert sum(client.report("capped", 1) for _ in range(10)) == 3  # a steady clock, another day
    windows = client.ledger.queue.query("SELECT COUNT(*) FROM ledger_windows WHERE campaign = 'capped'")
    assert windows == [(3,)]
    client.close(flush_timeout=None)
