"""Collector metrics kept in Redis, so that every gunicorn worker adds to the same counters.

- accepted / duplicate batches and reports per (campaign, shard): ``keys.metrics_key``, updated
  by the ingest script in the same atomic step as the XADD (exact);
- everything else (rejections by campaign and reason, requests by endpoint and status, the
  request-latency histogram) in the hash ``keys.GLOBAL_METRICS_KEY``: each worker buffers increments in
  memory and adds them with one pipelined round trip at most every ``flush_interval`` seconds
  (a daemon thread), and right away after a rejection. An increment that cannot be written
  (Redis down) stays buffered and is written later.

``render()`` produces the Prometheus text format (version 0.0.4).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections import defaultdict

import redis

from ldptel import keys
from ldptel.config import Config
from ldptel.redis_client import AnyRedis

log = logging.getLogger("ldptel.server.metrics")

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNKNOWN_CAMPAIGN = ""  # label of rejections that name no configured campaign


class Metrics:
    """Per-process buffer of counter increments, flushed to the Redis hash ``keys.GLOBAL_METRICS_KEY``."""

    def __init__(self, client: AnyRedis, flush_interval: float = 1.0) -> None:
        self.client = client
        self.flush_interval = flush_interval
        self._lock = threading.Lock()
        self._ints: dict[str, int] = defaultdict(int)
        self._floats: dict[str, float] = defaultdict(float)
        self._thread_pid: int | None = None
        self._last_failure = 0.0

    # --- recording ----------------------------------------------------------------------------
    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        """Count a request and put its latency into the histogram."""
        bucket = bisect.bisect_left(LATENCY_BUCKETS, seconds)  # index len(...) = +Inf
        with self._lock:
            self._ints[f"req|{endpoint}|{status}"] += 1
            self._ints[f"lat|{endpoint}|{bucket}"] += 1
            self._floats[f"latsum|{endpoint}"] += seconds
        self._ensure_thread()

    def reject(self, campaign: str | None, reason: str, flush: bool = True) -> None:
        """Count a rejected request (``campaign`` only when it is a configured one)."""
        with self._lock:
            self._ints[f"rej|{campaign or UNKNOWN_CAMPAIGN}|{reason}"] += 1
        if flush and time.monotonic() - self._last_failure > self.flush_interval:
            self.flush()
        self._ensure_thread()

    # --- flushing -----------------------------------------------------------------------------
    def flush(self) -> bool:
        """Write the buffered increments (one pipelined round trip); False if Redis failed, in
        which case they stay buffered."""
        with self._lock:
            ints, floats = dict(self._ints), dict(self._floats)
            self._ints.clear()
            self._floats.clear()
        if not ints and not floats:
            return True
        try:
            pipe = self.client.pipeline(transaction=False)
            for k, n in ints.items():
                pipe.hincrby(keys.GLOBAL_METRICS_KEY, k, n)
            for k, x in floats.items():
                pipe.hincrbyfloat(keys.GLOBAL_METRICS_KEY, k, x)
            pipe.execute()
            return True
        except redis.RedisError as exc:
            self._last_failure = time.monotonic()
            log.debug("metrics flush failed: %s", exc)
            with self._lock:
                for k, n in ints.items():
                    self._ints[k] += n
                for k, x in floats.items():
                    self._floats[k] += x
            return False

    def _ensure_thread(self) -> None:
        pid = os.getpid()
        if self._thread_pid == pid:
            return
        with self._lock:
            if self._thread_pid == pid:
                return
            self._thread_pid = pid
        threading.Thread(target=self._run, name="ldptel-metrics", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.flush_interval)
            try:
                self.flush()
            except Exception:  # never let the flusher die
                log.exception("metrics flush")

    # --- exposition ---------------------------------------------------------------------------
    def render(self, config: Config) -> str:
        """Prometheus text exposition of the counters of all workers."""
        self.flush()
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(keys.GLOBAL_METRICS_KEY)
        shards = [(c.name, s) for c in config.campaigns for s in range(c.shards)]
        for name, s in shards:
            pipe.hgetall(keys.metrics_key(name, s))
            pipe.xlen(keys.stream_key(name, s))
        res = pipe.execute()
        glob = {k.decode(): v.decode() for k, v in res[0].items()}
        per: dict[str, dict[str, int]] = {c.name: defaultdict(int) for c in config.campaigns}
        for i, (name, _) in enumerate(shards):
            for k, v in res[1 + 2 * i].items():
                per[name][k.decode()] += int(v)
            per[name]["stream_entries"] += int(res[2 + 2 * i])

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
        family("ldptel_stream_entries", "gauge", "Entries currently in the campaign's streams.")
        out.extend(f'ldptel_stream_entries{{campaign="{n}"}} {per[n]["stream_entries"]}' for n in per)

        family("ldptel_batches_rejected_total", "counter",
               "Rejected ingest requests by campaign (empty: none or unknown) and reason.")
        for k, v in sorted(glob.items()):
            if k.startswith("rej|"):
                _, camp, reason = k.split("|", 2)
                out.append(f'ldptel_batches_rejected_total{{campaign="{camp}",reason="{reason}"}} {v}')

        family("ldptel_http_requests_total", "counter", "HTTP requests by endpoint and status.")
        for k, v in sorted(glob.items()):
            if k.startswith("req|"):
                _, endpoint, status = k.split("|", 2)
                out.append(f'ldptel_http_requests_total{{endpoint="{endpoint}",code="{status}"}} {v}')

        family("ldptel_request_duration_seconds", "histogram", "Request latency by endpoint.")
        hist: dict[str, list[int]] = defaultdict(lambda: [0] * (len(LATENCY_BUCKETS) + 1))
        for k, v in glob.items():
            if k.startswith("lat|"):
                _, endpoint, idx = k.split("|", 2)
                hist[endpoint][int(idx)] += int(v)
        for endpoint in sorted(hist):
            cum = 0
            for le, n in zip((*LATENCY_BUCKETS, "+Inf"), hist[endpoint], strict=True):
                cum += n
                out.append(f'ldptel_request_duration_seconds_bucket{{endpoint="{endpoint}",le="{le}"}} {cum}')
            total = float(glob.get(f"latsum|{endpoint}", 0.0))
            out.append(f'ldptel_request_duration_seconds_sum{{endpoint="{endpoint}"}} {total:.6f}')
            out.append(f'ldptel_request_duration_seconds_count{{endpoint="{endpoint}"}} {cum}')
        return "\n".join(out) + "\n"
