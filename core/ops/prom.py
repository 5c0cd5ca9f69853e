"""Per-process metrics with ``prometheus_client``: what every ldptel process (collector worker,
aggregator) exports about itself — build info and process gauges — and the exposition of all
processes' metrics.

Multiprocess mode: ``ldptel serve`` creates a fresh directory, sets ``PROMETHEUS_MULTIPROC_DIR``
to it before it starts gunicorn and the aggregator (``prometheus_client`` reads the variable when
it is imported), and removes a dead process's live gauges (``mark_dead``). Counters and
histograms of every process are summed by ``render``; the process gauges carry a ``pid`` label
and vanish with their process. Without the variable (tests, a standalone ``ldptel aggregate``)
the metrics live in this process's default registry. Nothing here touches Redis, so these
metrics survive a Redis outage.
"""

from __future__ import annotations

import os
import platform
import re

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Gauge,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)

from ldptel import __version__

# the latency buckets of the workers' histograms (aggregator decode and commit, shuffler release)
WORKER_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
disable_created_metrics()  # no *_created samples: the same families in both modes

BUILD_INFO = Gauge("ldptel_build_info", "Version of ldptel and Python (value 1).",
                   ["version", "python"], multiprocess_mode="max")
BUILD_INFO.labels(__version__, platform.python_version()).set(1)

# process_* families of prometheus_client's ProcessCollector, per process (label pid in
# multiprocess mode) and role (collector / aggregator)
PROCESS_GAUGES = {
    name: Gauge(f"ldptel_{name}", help_, ["role"], multiprocess_mode="liveall")
    for name, help_ in (
        ("process_cpu_seconds", "CPU time (user + system) of the process, seconds."),
        ("process_resident_memory_bytes", "Resident memory of the process."),
        ("process_start_time_seconds", "Start time of the process, epoch seconds."),
        ("process_open_fds", "Open file descriptors of the process."),
    )
}
_PROCESS = ProcessCollector(registry=None)


def update_process_gauges(role: str) -> None:
    """Copy this process's figures (``/proc``; nothing on systems without it) into the gauges."""
    for family in _PROCESS.collect():
        name = family.name.removesuffix("_total")
        gauge = PROCESS_GAUGES.get(name)
        if gauge is not None and family.samples:
            gauge.labels(role).set(family.samples[0].value)


def multiproc_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def render() -> str:
    """Prometheus text of this process's metrics, or of every process's in multiprocess mode;
    whole numbers without ``.0`` (as the counters kept in Redis are written)."""
    path = multiproc_dir()
    registry = REGISTRY
    if path is not None:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)
    return _WHOLE.sub(r" \1", generate_latest(registry).decode())


_WHOLE = re.compile(r" (-?\d+)\.0$", re.MULTILINE)


def mark_dead(pid: int) -> None:
    """Remove the live gauges of a dead process (its counters stay in the sums)."""
    if multiproc_dir() is not None:
        multiprocess.mark_process_dead(pid)


_LIVE_FILE = re.compile(r"^gauge_live\w*_(\d+)\.db$")


def mark_dead_gone() -> list[int]:
    """``mark_dead`` every process whose live gauges are in the directory but which is gone (a
    server whose worker exits without telling anyone: granian has no hook for it); the pids."""
    path = multiproc_dir()
    if path is None:
        return []
    try:
        names = os.listdir(path)
    except OSError:
        return []
    gone = []
    for pid in {int(m.group(1)) for m in map(_LIVE_FILE.match, names) if m}:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            gone.append(pid)
            multiprocess.mark_process_dead(pid, path)
        except OSError:
            continue  # alive, another user's
    return gone
