"""Demo pieces for one heavy-hitter and one range campaign (for ``ldptel demo``), used on the
running stack with ``DemoSection(title, campaigns, simulate, report)`` of core/demo.py:
``HH_TITLE, hh_campaigns, hh_simulate, hh_report`` and ``RANGE_TITLE, range_campaigns,
range_simulate, range_report``.

``*_simulate(stack, client, truth, rng, users)`` encodes the devices' reports with the campaign's
mechanism (seeded: simulation only) and POSTs them to ``/v1/reports`` in batches of 1000;
``*_report(stack, http, truth)`` reads the export API (``http.request(method, path, body, headers)
→ (status, body)``) and prints the answers against the truth.
"""

from __future__ import annotations

import http.client
import json
from typing import Any, cast
from urllib.parse import urlparse

import numpy as np

from ldptel.campaigns.config import Campaign

WORDS = ("weather", "news", "maps", "translate", "recipes", "football", "flights", "hotels", "jobs",
         "movies", "music", "stocks", "bitcoin", "horoscope", "lottery", "cinema", "traffic", "trains",
         "pizza", "sushi", "gym", "yoga", "doctor", "pharmacy", "bank", "insurance", "tax", "visa",
         "passport", "school", "library", "museum", "zoo", "park", "beach", "ski", "camping",
         "bicycle", "car rental", "taxi", "café", "bakery", "florist", "plumber", "electrician")
HH_CAMPAIGN = {"name": "demo-search", "kind": "heavy_hitters", "epsilon": 4.0, "max_length": 12,
               "levels": 12, "width": 32,
               "description": "search terms (strings ≤ 12 bytes), prefix-tree OLH heavy hitters"}
RANGE_CAMPAIGN = {"name": "demo-latency", "kind": "range", "epsilon": 2.0, "domain_size": 1024,
                  "method": "haar", "description": "page latency in ms (0..1023), Haar wavelet ranges"}
RANGES = ((0, 99), (100, 299), (300, 1023), (250, 260))
QUANTILES = (0.5, 0.9, 0.99)
HH_TITLE = "heavy hitters: search terms found by the prefix-tree walk (no candidate list given)"
RANGE_TITLE = "range queries and quantiles: page latency, Haar wavelet method"
BATCH = 1000


def search_terms(users: int, rng: np.random.Generator) -> np.ndarray:
    """Zipf(1.1) over ``WORDS``."""
    w = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.1
    return np.array(WORDS, dtype=object)[rng.choice(len(WORDS), users, p=w / w.sum())]


def latencies(users: int, rng: np.random.Generator) -> np.ndarray:
    """Log-normal page latencies in ms, clipped to [0, 1023]."""
    return np.clip(rng.lognormal(np.log(180), 0.6, users).round(), 0, 1023).astype(np.int64)


# --- printing ----------------------------------------------------------------------------------

def heavy_hitter_lines(items: list[dict[str, Any]], truth: dict[str, int], n: int) -> list[str]:
    lines = [f"{'string':>14} {'true':>7} {'estimate':>9} {'95% CI':>17}"]
    for row in items:
        ci = f"[{row['ci_low']:.0f}, {row['ci_high']:.0f}]"
        t = truth.get(row["value"], 0)
        flag = "" if row["ci_low"] <= t <= row["ci_high"] else "  (outside CI)"
        lines.append(f"{row['value']!r:>14} {t:>7} {row['estimate']:>9.0f} {ci:>17}{flag}")
    top = sorted(truth, key=lambda s: -truth[s])[:10]
    found = {row["value"] for row in items}
    lines.append(f"{len(set(top) & found)}/10 of the true top-10 found among {n} devices; "
                 f"{sum(1 for s in found if truth.get(s, 0) == 0)} reported strings nobody holds")
    return lines


def range_lines(rows: list[dict[str, Any]], qrows: list[dict[str, Any]], values: np.ndarray) -> list[str]:
    n = values.size
    cum = np.concatenate(([0], np.cumsum(np.bincount(values, minlength=1024))))
    lines = [f"{'range (ms)':>12} {'true':>8} {'estimate':>9} {'std err':>8}"]
    for row in rows:
        t = cum[row["hi"] + 1] - cum[row["lo"]]
        span = f"[{row['lo']}, {row['hi']}]"
        lines.append(f"{span:>12} {t:>8} {row['estimate']:>9.0f} {row['std_error']:>8.0f}")
    lines.append(f"{'quantile':>12} {'true':>8} {'estimate':>9} {'rank err':>8} {'rank s.e.':>9}")
    for row in qrows:
        q, x = row["q"], row["value"]
        true_x = int(np.searchsorted(cum[1:], q * n, side="left"))
        err = max(0.0, cum[x] / n - q, q - cum[x + 1] / n)
        lines.append(f"{q:>12} {true_x:>8} {x:>9} {err:>8.4f} {row['rank_std_error']:>9.4f}")
    return lines


# --- on the running stack -------------------------------------------------------------------

def post_reports(url: str, token: str, campaign: Campaign, values: Any, rng: np.random.Generator) -> int:
    """Encode ``values`` with the campaign's mechanism and POST them in batches of 1000."""
    mech = campaign.mechanism()
    conn = http.client.HTTPConnection(urlparse(url).netloc, timeout=60)
    sent = 0
    try:
        for start in range(0, len(values), BATCH):
            chunk = values[start:start + BATCH]
            body = mech.encode_batch(chunk, rng=rng, campaign=campaign.name).SerializeToString()
            conn.request("POST", "/v1/reports", body=body, headers={
                "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 202:
                raise RuntimeError(f"POST /v1/reports for {campaign.name}: {resp.status} {data[:200]!r}")
            sent += len(chunk)
    finally:
        conn.close()
    return sent


def hh_campaigns() -> list[dict[str, Any]]:
    return [dict(HH_CAMPAIGN)]


def range_campaigns() -> list[dict[str, Any]]:
    return [dict(RANGE_CAMPAIGN)]


def hh_simulate(stack: Any, client: Any, truth: dict[str, Any], rng: np.random.Generator,
                users: int) -> dict[str, int]:
    values = search_terms(users, rng)
    truth["words"] = {k: int(v) for k, v in zip(*np.unique(values, return_counts=True), strict=True)}
    truth["users"] = users
    camp = stack.config.campaign(HH_CAMPAIGN["name"])
    return {camp.name: post_reports(stack.url, stack.config.server.ingest_tokens[0], camp, values, rng)}


def range_simulate(stack: Any, client: Any, truth: dict[str, Any], rng: np.random.Generator,
                   users: int) -> dict[str, int]:
    values = latencies(users, rng)
    truth["values"] = values
    camp = stack.config.campaign(RANGE_CAMPAIGN["name"])
    return {camp.name: post_reports(stack.url, stack.config.server.ingest_tokens[0], camp, values, rng)}


def export_get(stack: Any, http_: Any, path: str) -> dict[str, Any] | None:
    """GET an export API path with the demo's export token: its JSON, or None (said) on a non-200."""
    status, body = http_.request("GET", path, None,
                                 {"Authorization": f"Bearer {stack.config.server.export_tokens[0]}"})
    if status != 200:
        print(f"{path}: the export API answered {status}: {body[:160]!r}")
        return None
    return cast("dict[str, Any] | None", json.loads(body))


def hh_report(stack: Any, http_: Any, truth: dict[str, Any]) -> None:
    doc = export_get(stack, http_, f"/v1/campaigns/{HH_CAMPAIGN['name']}/heavy-hitters?k=10")
    if doc is not None:
        print("\n".join(heavy_hitter_lines(doc["items"], truth["words"], doc["n_reports"])))


def range_report(stack: Any, http_: Any, truth: dict[str, Any]) -> None:
    name = RANGE_CAMPAIGN["name"]
    docs = [export_get(stack, http_, f"/v1/campaigns/{name}/range?lo={lo}&hi={hi}") for lo, hi in RANGES]
    rows = [doc for doc in docs if doc is not None]
    qdoc = export_get(stack, http_, f"/v1/campaigns/{name}/quantiles?q={','.join(map(str, QUANTILES))}")
    if qdoc is not None and len(rows) == len(docs):
        print("\n".join(range_lines(rows, qdoc["items"], truth["values"])))
