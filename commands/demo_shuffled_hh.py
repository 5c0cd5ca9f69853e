"""``ldptel demo``'s shuffled heavy-hitter section (issue 39): ``demo-search-shuffled``, a
``kind = "heavy_hitters"`` campaign in ``privacy_mode = "shuffled"`` beside the local
``demo-search`` (``ldptel.commands.demo_queries``), over the same kind of data (Zipf(1.1) search
terms, its own devices). Each device's SDK sends the local report (level, pool index, hash) at the
planned ε₀, sealed to the analyzer; the shuffler releases whole batches of at least ``batch_min``
devices; the aggregator decodes them with the local decoder. Printed against the truth, with the
release claim "central ε between L and U" and both campaigns' std errors."""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.commands.demo_queries import HH_CAMPAIGN, export_get, heavy_hitter_lines, search_terms

SHUFFLED_HH_TITLE = ("heavy hitters in privacy_mode shuffled: the same prefix-tree report sealed to the "
                     "analyzer at the planned ε₀, released in whole shuffled batches (central ε = 1 planned)")
NAME = "demo-search-shuffled"
SHUFFLED_HH_CAMPAIGN = {"name": NAME, "kind": "heavy_hitters", "privacy_mode": "shuffled",
                        **{k: HH_CAMPAIGN[k] for k in ("max_length", "levels", "width")},
                        "central_epsilon": 1.0, "central_delta": 1e-6, "batch_min": 1000, "window": "all",
                        # tokens are shown on demo-sealed; a deployment leaves them on here too
                        "require_tokens": False,
                        "description": "search terms as demo-search, sealed and shuffled: central ε = 1"}


def shuffled_hh_campaigns() -> list[dict[str, Any]]:
    return [dict(SHUFFLED_HH_CAMPAIGN)]


def shuffled_hh_simulate(stack: Any, client: Any, truth: dict[str, Any], rng: np.random.Generator,
                         users: int) -> dict[str, int]:
    """``users`` devices (search terms as ``demo-search``'s) report through the SDK, which seals at
    flush time (``report_many``: each simulated device its own level and pool index)."""
    values = search_terms(users, rng)
    truth["words"] = {k: int(v) for k, v in zip(*np.unique(values, return_counts=True), strict=True)}
    return {NAME: client.report_many(NAME, list(values))}



def mean_std_error(doc: dict[str, Any]) -> float:
    return float(np.mean([it["std_error"] for it in doc["items"]])) if doc["items"] else float("nan")


def shuffled_hh_report(stack: Any, http: Any, truth: dict[str, Any]) -> None:
    doc = export_get(stack, http, f"/v1/campaigns/{NAME}/heavy-hitters?k=10&window=0")
    if doc is None:
        return
    print("\n".join(heavy_hitter_lines(doc["items"], truth["words"], doc["n_reports"])))
    p = doc["privacy"]
    local = export_get(stack, http, f"/v1/campaigns/{HH_CAMPAIGN['name']}/heavy-hitters?k=10")  # as hh_report
    beside = ("" if local is None else f"; demo-search (local, ε = {local['epsilon']:g} per report, "
              f"no central claim): {mean_std_error(local):.1f} over {local['n_reports']:,} devices")
    print(f"devices {doc['n_reports']:,} in batches {p['batches']}, ε₀ = {doc['epsilon']:.3f} per report; "
          f"central ε between {p['central_epsilon_lower']:.3f} and {p['central_epsilon']:.3f} "
          f"(δ = {p['central_delta']:g}) per release; mean std error per reported count "
          f"{mean_std_error(doc):.1f}{beside}")


__all__ = ["SHUFFLED_HH_TITLE", "shuffled_hh_campaigns", "shuffled_hh_report", "shuffled_hh_simulate"]
