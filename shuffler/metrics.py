"""The shuffler's own metrics (``prometheus_client``; exported by the collector's ``/metrics`` when
``ldptel serve`` runs the shuffler, see ``ldptel.ops.prom``): ingress batches and reports released,
analysis batches written, refused releases, the shuffler's own fakes and their sealing time,
and the time of one release, per campaign. The
totals of every shuffler are also in Redis (``keys.shuffle_metrics_key``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from ldptel.ops.prom import WORKER_LATENCY_BUCKETS as LATENCY_BUCKETS


def _counter(name: str, doc: str) -> Counter:
    return Counter(f"ldptel_shuffler_{name}", doc, ["campaign"])


INGRESS_BATCHES = _counter("ingress_batches", "Ingress batches released (moved to the analysis stream).")
REPORTS = _counter("reports", "Reports the shuffler released.")
ANALYSIS_BATCHES = _counter("analysis_batches", "Re-packed batches written to the analysis stream.")
REFUSED = _counter("refused_releases",
                   "Releases refused because an ingress entry had been moved by another shuffler.")
FAKES = _counter("fakes", "Fake messages the shuffler drew and sealed (fake_source shuffler or both).")
FAKES_SECONDS = _counter("fakes_seconds", "Seconds from drawing the shuffler's fakes of a release to "
                         "their release (sealed on the pool meanwhile, the shuffler's loop going on).")
EARLY = Counter("ldptel_shuffler_early_releases_total",
                "Sealed groups released before their window closed (issue 38), by reason: early "
                "(shuffle_early_release), max_held / ingress_full (forced by a memory bound), drain "
                "(shuffle --once). Each adds a release's fakes to its window: k releases, std error "
                "≈ √k·√μ per count.", ["campaign", "reason"])
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


def observe_fakes(campaign: str, fakes: int, seconds: float) -> None:
    """Record the shuffler's fakes of one release of ``campaign`` (how many, the time to seal them)."""
    FAKES.labels(campaign).inc(fakes)
    FAKES_SECONDS.labels(campaign).inc(seconds)
