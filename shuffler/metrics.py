"""The shuffler's own metrics (``prometheus_client``; exported by the collector's ``/metrics`` when
``ldptel serve`` runs the shuffler, see ``ldptel.prom``): ingress batches and reports released,
analysis batches written, refused releases, and the time of one release, per campaign. The
totals of every shuffler are also in Redis (``keys.shuffle_metrics_key``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from ldptel.aggregator.metrics import LATENCY_BUCKETS

INGRESS_BATCHES = Counter("ldptel_shuffler_ingress_batches",
                          "Ingress batches the shuffler released (moved to the analysis stream).",
                          ["campaign"])
REPORTS = Counter("ldptel_shuffler_reports", "Reports the shuffler released.", ["campaign"])
ANALYSIS_BATCHES = Counter("ldptel_shuffler_analysis_batches",
                           "Re-packed batches the shuffler wrote to the analysis stream.", ["campaign"])
REFUSED = Counter("ldptel_shuffler_refused_releases",
                  "Releases refused because an ingress entry had been moved by another shuffler.",
                  ["campaign"])
RELEASE_SECONDS = Histogram("ldptel_shuffler_release_seconds",
                            "Time of one release (parse, permute, re-pack, the SHUFFLE script).",
                            ["campaign"], buckets=LATENCY_BUCKETS)


def observe(campaign: str, ingress_batches: int, reports: int, analysis_batches: int,
            seconds: float) -> None:
    """Record one release of ``campaign``."""
    INGRESS_BATCHES.labels(campaign).inc(ingress_batches)
    REPORTS.labels(campaign).inc(reports)
    ANALYSIS_BATCHES.labels(campaign).inc(analysis_batches)
    RELEASE_SECONDS.labels(campaign).observe(seconds)
