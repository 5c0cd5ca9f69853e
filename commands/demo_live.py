"""``ldptel demo`` after its first table: devices keep reporting, so the product shows itself.

Every ``TICK_S`` seconds each demo campaign gets ``per_window / windows-per-tick`` new reports
from simulated devices through the SDK (``TelemetryClient.report_many``: randomized on the
"device", queued, flushed), from populations that drift slowly (the popular items rotate, the
means swing), so each campaign's trend grows by one released window every 10 s while you watch.
Once, ``change_after`` seconds in, the demo changes a campaign live (``CHANGE``: a new version)
through the registry, as ``ldptel campaigns set`` does; the devices follow at their next send
(the collector's ``Ldptel-Campaigns`` digest) and the campaign's trend shows the version marker.
Any change made meanwhile (``ldptel campaigns set … --config examples/demo.toml``) is followed
the same way.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ldptel.campaigns.config import Campaign
from ldptel.commands import demo_breakdowns, demo_numeric, demo_queries
from ldptel.privacy.modes import is_shuffled
from ldptel.store import registry

TICK_S = 1.0
CHANGE = ("demo-grr", {"epsilon": 1.0})  # the demo's own live change: ε 2 → 1, version 2


def drifting_values(camp: Campaign, n: int, t: float, rng: np.random.Generator) -> Any:
    """``n`` device values of ``camp`` at ``t`` seconds into the demo: the same shapes as the
    first table's populations, slowly moving."""
    if camp.kind == "frequency":
        d = len(camp.labels())
        w = 1.0 / np.arange(1, d + 1) ** 1.1
        shift = int(t // 30)  # the ranking rotates by one item every 30 s
        values = (rng.choice(d, size=n, p=w / w.sum()) + shift) % d
        labels = camp.labels()
        return [labels[v] for v in values] if camp.oracle == "rappor" else values
    if camp.kind == "heavy_hitters":
        words = np.array(demo_queries.WORDS, dtype=object)
        w = 1.0 / np.arange(1, len(words) + 1) ** 1.1
        order = np.roll(np.arange(len(words)), int(t // 40))
        return list(words[order[rng.choice(len(words), n, p=w / w.sum())]])
    swing = 1.0 + 0.25 * math.sin(2 * math.pi * t / 120.0)
    if camp.kind == "range":
        return np.clip(rng.lognormal(np.log(180 * swing), 0.6, n).round(), 0, 1023).astype(np.int64)
    return demo_numeric.population(camp.name, n, rng) * swing


class LiveDevices:
    """The demo's devices after the first table (see the module docstring)."""

    def __init__(self, client: Any, campaigns: Callable[[], list[Campaign]], admin: Any,
                 per_window: int, change_after: float | None, say: Callable[[str], None],
                 rng: np.random.Generator) -> None:
        self.client, self.campaigns, self.admin = client, campaigns, admin
        self.per_window, self.change_after, self.say, self.rng = per_window, change_after, say, rng
        self.started = time.monotonic()
        self.changed = False

    def run(self, stop: threading.Event) -> None:
        """Report, flush, and make the live change when due, until ``stop`` is set."""
        while not stop.wait(TICK_S):
            t = time.monotonic() - self.started
            for camp in self.campaigns():
                if is_shuffled(camp):  # released in whole batches: the first table shows it
                    continue
                n = max(1, round(self.per_window * TICK_S / max(camp.window_seconds, 1)))
                try:
                    if camp.name == demo_breakdowns.NAME:  # every cell, with its dimension values
                        demo_breakdowns.live_report(self.client, n, self.rng)
                        continue
                    self.client.report_many(camp.name, drifting_values(camp, n, t, self.rng))
                except Exception as exc:  # noqa: BLE001 — a campaign changed under us: say it, go on
                    self.say(f"demo: {camp.name}: {exc}")
            self.client.flush(timeout=5.0)
            if self.change_after is not None and not self.changed and t >= self.change_after:
                self.changed = True
                self.change()

    def change(self) -> None:
        name, keys = CHANGE
        done = registry.patch(self.admin, name, keys, by="ldptel demo (live change)", via="cli")
        if done is not None:
            self.say(f"live change: {done.line()} — devices follow at their next send; its trend "
                     f"marks where version {done.version} starts")
