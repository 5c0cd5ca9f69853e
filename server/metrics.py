"""Collector metrics.

- accepted / duplicate batches and reports per (campaign, shard): ``keys.metrics_key``, updated
  by the ingest script in the same atomic step as the XADD (exact);
- rejections by campaign and reason: the hash ``keys.GLOBAL_METRICS_KEY``; each worker buffers
  increments in memory and adds them with one pipelined round trip at most every
  ``flush_interval`` seconds (a daemon thread), and right away after a rejection. An increment
  that cannot be written (Redis down) stays buffered and is written later;
- requests by endpoint and status and the request-latency histogram, per process, in
  ``prometheus_client`` (multiprocess mode under ``ldptel serve``, see ``ldptel.ops.prom``): they need
  no Redis. The flush thread also refreshes the process gauges.

``render(snapshot)`` produces the Prometheus text format (version 0.0.4): the Redis counters as
last read by ``ldptel.server.probe`` (so ``/metrics`` answers while Redis is down or frozen), the
aggregator's lag and heartbeat, then every process's ``prometheus_client`` metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

import redis
from prometheus_client import Counter, Histogram

from ldptel import keys
from ldptel.ops import prom
from ldptel.server.background import ProcessThread
from ldptel.server.probe import Snapshot
from ldptel.store.redis_client import AnyRedis

log = logging.getLogger("ldptel.server.metrics")

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNKNOWN_CAMPAIGN = ""  # label of rejections that name no configured campaign

HTTP_REQUESTS = Counter("ldptel_http_requests", "HTTP requests by endpoint and status.", ["endpoint", "code"])
REQUEST_SECONDS = Histogram("ldptel_request_duration_seconds", "Request latency by endpoint.", ["endpoint"],
                            buckets=LATENCY_BUCKETS)


class Metrics:
    """Per-process buffer of rejection counts, flushed to the Redis hash ``keys.GLOBAL_METRICS_KEY``,
    and the per-process request metrics."""

    def __init__(self, client: AnyRedis, flush_interval: float = 1.0) -> None:
        self.client = client
        self.flush_interval = flush_interval
        self._lock = threading.Lock()
        self._ints: dict[str, int] = defaultdict(int)
        self._thread = ProcessThread(self._round, "ldptel-metrics")
        self._last_failure = 0.0
        self._thread.ensure()  # it also refreshes the process gauges

    # --- recording ----------------------------------------------------------------------------
    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        """Count a request and put its latency into the histogram (``prometheus_client``)."""
        HTTP_REQUESTS.labels(endpoint, str(status)).inc()
        REQUEST_SECONDS.labels(endpoint).observe(seconds)
        self._thread.ensure()

    def reject(self, campaign: str | None, reason: str, flush: bool = True) -> None:
        """Count a rejected request (``campaign`` only when it is a configured one)."""
        with self._lock:
            self._ints[f"rej|{campaign or UNKNOWN_CAMPAIGN}|{reason}"] += 1
        if flush and time.monotonic() - self._last_failure > self.flush_interval:
            self.flush()
        self._thread.ensure()

    # --- flushing -----------------------------------------------------------------------------
    def flush(self) -> bool:
        """Write the buffered increments (one pipelined round trip); False if Redis failed, in
        which case they stay buffered."""
        with self._lock:
            ints = dict(self._ints)
            self._ints.clear()
        if not ints:
            return True
        try:
            pipe = self.client.pipeline(transaction=False)
            for k, n in ints.items():
                pipe.hincrby(keys.GLOBAL_METRICS_KEY, k, n)
            pipe.execute()
            return True
        except redis.RedisError as exc:
            self._last_failure = time.monotonic()
            log.debug("metrics flush failed: %s", exc)
            with self._lock:
                for k, n in ints.items():
                    self._ints[k] += n
            return False

    def _round(self) -> float:
        """One round of the background thread: the process gauges, a flush; the seconds to wait."""
        try:
            prom.update_process_gauges("collector")
            self.flush()
        except Exception:  # never let the flusher die
            log.exception("metrics flush")
        return self.flush_interval

    # --- exposition ---------------------------------------------------------------------------
    def render(self, snap: Snapshot, aggregator: dict[str, float | None],
               shuffler: dict[str, float | None] | None = None,
               pooled: set[str] | frozenset[str] = frozenset()) -> str:
        """Prometheus text: the Redis counters of ``snap`` (last known), the ``aggregator`` and
        ``shuffler`` gauges (``ldptel.server.health``), every process's own metrics. The
        campaigns of ``pooled`` (a shuffled privacy mode) are summed under ``SHUFFLED_LABEL``."""
        glob, per = snap.global_counters, pool(snap.campaign_counters, pooled)
        out: list[str] = []

        def family(metric: str, kind: str, help_: str) -> None:
            out.append(f"# HELP {metric} {help_}")
            out.append(f"# TYPE {metric} {kind}")

        for metric, field, help_ in (
            ("ldptel_reports_accepted_total", keys.ACCEPTED_REPORTS, "Reports stored in the streams."),
            ("ldptel_batches_accepted_total", keys.ACCEPTED_BATCHES,
             "Batches stored (one stream entry each)."),
            ("ldptel_reports_duplicate_total", keys.DUPLICATE_REPORTS,
             "Reports of duplicate batches dropped."),
            ("ldptel_batches_duplicate_total", keys.DUPLICATE_BATCHES, "Batches dropped as duplicates."),
        ):
            family(metric, "counter", help_)
            out.extend(f'{metric}{{campaign="{n}"}} {per[n].get(field, 0)}' for n in per)
        for metric, field, help_ in (
            ("ldptel_stream_entries", "stream_entries", "Entries currently in the campaign's streams."),
            ("ldptel_ingress_entries", "ingress_entries",
             "Of them, entries in the ingress streams: not yet moved by a shuffler ([shuffler] "
             "max_ingress_batches per shard)."),
            ("ldptel_campaign_last_window_reports", "last_window_reports",
             "Reports counted in the campaign's newest ended window (its one window for window = all)."),
            ("ldptel_campaign_min_reports", "min_reports",
             "The campaign's release threshold: nothing of a window below it is released."),
        ):
            family(metric, "gauge", help_)
            out.extend(f'{metric}{{campaign="{n}"}} {per[n].get(field, 0)}' for n in per)

        family("ldptel_batches_rejected_total", "counter",
               "Rejected ingest requests by campaign (empty: none or unknown) and reason.")
        rejected: dict[tuple[str, str], int] = defaultdict(int)
        for k, v in sorted(glob.items()):
            if k.startswith("rej|"):
                _, camp, reason = k.split("|", 2)
                rejected[SHUFFLED_LABEL if camp in pooled else camp, reason] += int(v)
        out.extend(f'ldptel_batches_rejected_total{{campaign="{c}",reason="{r}"}} {v}'
                   for (c, r), v in rejected.items())

        family("ldptel_redis_up", "gauge", "1 if the last reading of Redis succeeded.")
        out.append(f"ldptel_redis_up {int(snap.redis_ok)}")
        if snap.read_at is not None:
            family("ldptel_redis_read_age_seconds", "gauge",
                   "Age of the Redis counters above (they are the last known while Redis is down).")
            out.append(f"ldptel_redis_read_age_seconds {max(0.0, time.time() - snap.read_at):.3f}")
        for name, help_ in AGGREGATOR_GAUGES.items():
            if aggregator.get(name) is not None:
                family(f"ldptel_aggregator_{name}", "gauge", help_)
                out.append(f"ldptel_aggregator_{name} {aggregator[name]:.3f}")
        for name, help_ in SHUFFLER_GAUGES.items():
            value = (shuffler or {}).get(name)
            if value is not None:
                family(f"ldptel_shuffler_{name}", "gauge", help_)
                out.append(f"ldptel_shuffler_{name} {value:.3f}")
        return "\n".join(out) + "\n" + prom.render()


SHUFFLED_LABEL = "(shuffled)"


def pool(per: dict[str, dict[str, int]], pooled: set[str] | frozenset[str]) -> dict[str, dict[str, int]]:
    """``per`` with the campaigns of ``pooled`` summed into one ``SHUFFLED_LABEL`` entry."""
    if not pooled or not pooled & set(per):
        return per
    out = {n: c for n, c in per.items() if n not in pooled}
    total: dict[str, int] = defaultdict(int)
    for n in pooled & set(per):
        for k, v in per[n].items():
            total[k] += v
    out[SHUFFLED_LABEL] = dict(total)
    return out


SHUFFLER_GAUGES = {
    "lag_seconds": "Seconds since a shuffler last ended a round with nothing overdue (/healthz: 503 past "
                   "the smallest shuffle_max_delay).",
    "heartbeat_age_seconds": "Seconds since the last shuffler heartbeat.",
    "workers": "Shufflers whose heartbeat is fresh.",
}
AGGREGATOR_GAUGES = {
    "lag_seconds": "Seconds since an aggregator last found every stream drained (since it started if "
                   "it has not yet).",
    "heartbeat_age_seconds": "Seconds since the last aggregator heartbeat.",
    "last_commit_age_seconds": "Seconds since an aggregator last committed.",
    "workers": "Aggregator workers whose heartbeat is fresh.",
}
