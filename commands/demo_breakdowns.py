"""``ldptel demo``'s breakdown section (issue 28): one campaign with public dimensions,
``platform`` × ``arm``, where ``arm`` is an A/B experiment whose treatment moves 5 points of the
devices from ``bank`` to ``card``. Devices report with their dimension values (the SDK's
``report_many(…, dimensions=…)``); each cell is released from ``min_reports`` reports, and the
section prints treatment − control per value with its 95 % CI from ``?by=arm&compare=treatment``.
The live devices (``demo_live``) keep reporting to every cell the same way (``live_report``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ldptel.commands.demo_queries import export_get
from ldptel.store import tally

BREAKDOWN_TITLE = ("breakdowns: per platform and experiment arm, each cell released on its own; "
                   "treatment − control with 95% CIs (+5 points on card)")
NAME = "demo-checkout"
VALUES = ["card", "paypal", "wallet", "bank"]
CONTROL, TREATMENT = [0.40, 0.30, 0.20, 0.10], [0.45, 0.30, 0.20, 0.05]
PLATFORMS = {"android": 0.5, "ios": 0.48, "web": 0.02}  # web's cells stay below min_reports
CHECKOUT = {"name": NAME, "kind": "frequency", "oracle": "oue", "epsilon": 2.0, "domain": VALUES,
            "dimensions": {"platform": list(PLATFORMS), "arm": ["control", "treatment"]},
            "experiment": "arm", "description": "payment method at checkout, by platform and experiment arm"}


def breakdown_campaigns() -> list[dict[str, Any]]:
    return [json.loads(json.dumps(CHECKOUT))]


def cells(n: int, rng: np.random.Generator) -> list[tuple[dict[str, str], list[str]]]:
    """``n`` devices per arm, split over the platforms by their shares (web takes the rest):
    (dimension values, their values)."""
    out = []
    sizes = {p: round(n * share) for p, share in PLATFORMS.items() if p != "web"}
    sizes["web"] = n - sum(sizes.values())
    for arm, freqs in (("control", CONTROL), ("treatment", TREATMENT)):
        for platform, k in sizes.items():
            values = [VALUES[v] for v in rng.choice(4, size=k, p=freqs)]
            out.append(({"platform": platform, "arm": arm}, values))
    return out


def breakdown_simulate(stack: Any, client: Any, truth: dict[str, Any], rng: np.random.Generator,
                       users: int) -> dict[str, int]:
    """``users`` devices in each arm report through the SDK with their dimension values."""
    queued = sum(client.report_many(NAME, values, dimensions=dims) for dims, values in cells(users, rng))
    return {NAME: queued}


def live_report(client: Any, n: int, rng: np.random.Generator) -> None:
    """About ``n`` more reports over the cells (the live devices)."""
    for dims, values in cells(max(1, n // 2), rng):
        if values:
            client.report_many(NAME, values, dimensions=dims)


def breakdown_report(stack: Any, http: Any, truth: dict[str, Any]) -> None:
    # the window its devices reported in (they report last, perhaps after the window of the first
    # table, perhaps in the window still in progress: not window=latest, the newest ended one)
    counts = tally.window_counts(stack.redis, stack.config.campaign(NAME))
    window = max(counts, key=lambda w: counts[w]) if counts else "current"
    path = f"/v1/campaigns/{NAME}/estimates?by=arm&compare=treatment&window={window}"
    doc = export_get(stack, http, path)
    if doc is None:
        return
    for d in doc["differences"]:
        print(f"{d['value']:>8}  treatment − control {100 * d['estimate']:+6.1f} points  "
              f"(95% CI {100 * d['ci_low']:+.1f} to {100 * d['ci_high']:+.1f})")
    w = doc["withheld"]
    print(f"released cells hold {doc['n_reports']:,} reports; {w['n_reports']:,} more are in {w['cells']} "
          "cells below min_reports (withheld)")


__all__ = ["BREAKDOWN_TITLE", "breakdown_campaigns", "breakdown_report", "breakdown_simulate", "live_report"]
