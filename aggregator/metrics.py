"""The aggregator's own metrics (``prometheus_client``; exported by the collector's ``/metrics``
when ``ldptel serve`` runs the aggregator, see ``ldptel.ops.prom``): entries and reports counted,
entries rejected, decode and commit latency per campaign. The lag comes from the heartbeats
(``ldptel.server.health``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from ldptel.ops.prom import WORKER_LATENCY_BUCKETS as LATENCY_BUCKETS

ENTRIES = Counter("ldptel_aggregator_entries", "Stream entries (batches) counted by the aggregator.",
                  ["campaign"])
REPORTS = Counter("ldptel_aggregator_reports", "Reports counted by the aggregator.", ["campaign"])
REJECTED = Counter("ldptel_aggregator_rejected_entries",
                   "Stream entries the aggregator could not decode (acknowledged, not counted).",
                   ["campaign"])
REPLAYED = Counter("ldptel_aggregator_replayed_messages",
                   "Sealed messages dropped because they had been opened before (re-posted under new "
                   "batch ids: replays); each message is counted once.", ["campaign"])
REFUSED_RELEASES = Counter("ldptel_aggregator_refused_releases",
                           "Sealed releases never published: fewer than batch_min envelopes (the "
                           "shuffler's count) or messages opened once (issue 36).", ["campaign"])
DECODE_SECONDS = Histogram("ldptel_aggregator_decode_seconds",
                           "Time to decode one read of a stream into accumulator deltas.",
                           ["campaign"], buckets=LATENCY_BUCKETS)
PUBLISH_FAILURES = Counter("ldptel_aggregator_publish_failures",
                           "Publications that failed (the window is tried again later; the worker goes on).",
                           ["campaign"])
ANALYZER_KEYS_FAILING = Gauge("ldptel_aggregator_analyzer_keys_failing",
                              "1 while this worker cannot write its analyzer keys (keys_dir): its "
                              "shuffled campaigns are not aggregated, the local ones are.",
                              multiprocess_mode="livemax")
COMMIT_SECONDS = Histogram("ldptel_aggregator_commit_seconds",
                           "Time of one commit (fold stored state, run the commit script).",
                           ["campaign"], buckets=LATENCY_BUCKETS)


def observe(campaign: str, entries: int, reports: int, rejected: int, decode_s: float,
            commit_s: float) -> None:
    """Record one successful commit of ``campaign``."""
    ENTRIES.labels(campaign).inc(entries - rejected)
    REPORTS.labels(campaign).inc(reports)
    if rejected:
        REJECTED.labels(campaign).inc(rejected)
    DECODE_SECONDS.labels(campaign).observe(decode_s)
    COMMIT_SECONDS.labels(campaign).observe(commit_s)
