"""``ldptel demo``'s numeric section: session lengths (hybrid mechanism, the default at ε = 2) and
memory in use (1BitMean, memoized with α-point rounding), each device's value randomized on the
device; the demo prints ``/v1/campaigns/<name>/mean`` against the true mean of the clipped values."""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.commands.demo_queries import export_get, post_reports

NUMERIC_TITLE = "numeric campaigns: mean and sum with 95% CIs (hybrid and 1BitMean)"
NUMERIC_CAMPAIGNS = (
    {"name": "demo-session-seconds", "kind": "numeric", "epsilon": 2.0, "lower": 0, "upper": 3600,
     "description": "session length in seconds (log-normal around 5 min), clipped to one hour"},
    {"name": "demo-memory-mb", "kind": "numeric", "epsilon": 1.0, "lower": 0, "upper": 4096,
     "mechanism": "1bitmean", "buckets": 16, "description": "memory in use in MB (1BitMean)"},
)


def population(name: str, users: int, rng: np.random.Generator) -> np.ndarray:
    """Skewed devices' values: log-normal session seconds, gamma-distributed memory in MB."""
    if name == "demo-session-seconds":
        return rng.lognormal(np.log(300), 1.0, users)
    return rng.gamma(2.0, 400.0, users)


def numeric_campaigns() -> list[dict[str, Any]]:
    return [dict(c) for c in NUMERIC_CAMPAIGNS]


def numeric_simulate(stack: Any, client: Any, truth: dict[str, Any], rng: np.random.Generator,
                     users: int) -> dict[str, int]:
    sent = {}
    for spec in NUMERIC_CAMPAIGNS:
        camp = stack.config.campaign(spec["name"])
        values = population(camp.name, users, rng)
        lower, upper = camp.params["lower"], camp.params["upper"]
        truth[camp.name] = float(np.clip(values, lower, upper).mean())
        sent[camp.name] = post_reports(stack.url, stack.config.server.ingest_tokens[0], camp, values, rng)
    return sent


def numeric_report(stack: Any, http_: Any, truth: dict[Any, Any]) -> None:
    print(f"{'campaign':>22} {'mechanism':>10} {'true mean':>10} {'estimate':>10} {'95% CI':>22} {'sum':>14}")
    for spec in NUMERIC_CAMPAIGNS:
        doc = export_get(stack, http_, f"/v1/campaigns/{spec['name']}/mean")
        if doc is None:
            continue
        m = doc["mean"]
        ci = f"[{m['ci_low']:.1f}, {m['ci_high']:.1f}]"
        print(f"{spec['name']:>22} {doc['mechanism']:>10} {truth[spec['name']]:>10.1f} "
              f"{m['estimate']:>10.1f} {ci:>22} {doc['sum']['estimate']:>14,.0f}")
