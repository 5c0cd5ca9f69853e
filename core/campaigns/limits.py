"""What one campaign may cost: the bounds ``campaign.parse_campaign`` and the registry enforce
beyond each key's own range, so that no accepted value makes a process run out of memory or a
device download megabytes (issue 24). Each bound says what it protects.

Per version (``check_costs``, at parse):

- a frequency domain of at most ``MAX_FREQUENCY_DOMAIN`` = 2¹⁶ values: the state is 8·d bytes per
  window and shard (512 KiB), the published document ~120 B per item (7.5 MiB); a larger domain
  is a heavy-hitters campaign (its state is bounded by ``heavy_hitters.MAX_STATE_CELLS``);
- a range domain of at most ``MAX_RANGE_DOMAIN`` = 2²⁰ values: 2·d int64 of state and 2·d float64
  of published arrays (16 MiB each);
- RAPPOR: cohorts·bloom_bits ≤ ``MAX_RAPPOR_CELLS`` = 2²² (32 MiB of int64 state) and
  cohorts·hashes·candidates ≤ ``MAX_RAPPOR_DESIGN`` = 2²³ (the decode's design: one set entry per
  cohort, hash and candidate, three int64 each: 192 MiB at the bound; ``max_candidates`` bounds
  the candidates alone);
- labels (a domain's, RAPPOR's candidates) of at most ``MAX_LABEL_CHARS`` characters; a
  ``description`` of at most ``MAX_DESCRIPTION_CHARS``;
- the version's public config (what a device downloads for it) at most ``MAX_VERSION_BYTES``;
- breakdown dimensions (``ldptel.dimensions``: at most ``dimensions.MAX_CELLS`` cells) only for
  the kinds whose estimates add up over cells (frequency, numeric and the device-level kinds);
  cells × one cell's state at most ``MAX_CELL_STATE`` = 2²² counts (32 MiB of int64 per window
  and shard: each cell holds the state of a whole campaign), and cells × items at most
  ``MAX_CELL_ITEMS`` = 2¹⁶ (the published document holds every cell's items, ~120 B each: the
  bound of one frequency document, 7.5 MiB).

Per campaign and per answer (``ldptel.store.registry`` checks them on every write; ``answer_bytes``):
a campaign's entry in ``GET /v1/campaigns`` — its latest version, and the largest older version
whose reports are still accepted (a device asks for an old version by number, issue 34 item 9) —
at most ``MAX_CAMPAIGN_ANSWER_BYTES``, and the whole answer at most
``MAX_DEVICE_ANSWER_BYTES``, the most the SDK reads (``client.configs.MAX_ANSWER_BYTES``): six
PUTs of a 60,000-label domain once made every device download 5.5 MiB per config refresh for the
7 days of ``accept_old_versions``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ldptel.config_values import fail

MAX_FREQUENCY_DOMAIN = 1 << 16
MAX_RANGE_DOMAIN = 1 << 20
MAX_RAPPOR_CELLS = 1 << 22
MAX_RAPPOR_DESIGN = 1 << 23
MAX_LABELS = 1 << 16
MAX_LABEL_CHARS = 256
MAX_DESCRIPTION_CHARS = 2000
MAX_VERSION_BYTES = 256 * 1024
MAX_CAMPAIGN_ANSWER_BYTES = 512 * 1024
MAX_DEVICE_ANSWER_BYTES = 1024 * 1024
MAX_CELL_STATE = 1 << 22
MAX_CELL_ITEMS = 1 << 16
CELL_KINDS = ("frequency", "numeric", "unique_devices", "per_device_histogram", "per_device_count")


def check_labels(labels: Any, key: str) -> None:
    """At most ``MAX_LABELS`` labels of at most ``MAX_LABEL_CHARS`` characters each."""
    if isinstance(labels, list):
        if len(labels) > MAX_LABELS:
            raise fail(key, f"at most {MAX_LABELS} values, got {len(labels)}")
        long = next((v for v in labels if isinstance(v, str) and len(v) > MAX_LABEL_CHARS), None)
        if long is not None:
            raise fail(key, f"values of at most {MAX_LABEL_CHARS} characters, got one of {len(long)}")


def check_costs(kind: str, oracle: str | None, params: Mapping[str, Any], where: str) -> None:
    """RAPPOR's bounds of the module docstring (the domain sizes are ``parse_campaign``'s key
    ranges); ``ConfigError`` naming the key."""
    if kind == "frequency" and oracle == "rappor":
        cells = int(params["cohorts"]) * int(params["bloom_bits"])
        if cells > MAX_RAPPOR_CELLS:
            raise fail(f"{where}.cohorts", f"cohorts·bloom_bits = {cells} counts per window, over "
                                           f"{MAX_RAPPOR_CELLS} (32 MiB of state)")
        design = int(params["cohorts"]) * int(params["hashes"]) * len(params["candidates"])
        if design > MAX_RAPPOR_DESIGN:
            raise fail(f"{where}.candidates", f"cohorts·hashes·candidates = {design}, over "
                                              f"{MAX_RAPPOR_DESIGN} (the decode's design entries)")


def check_cell_costs(dims: Any, kind: str, domain_size: int | None, params: Mapping[str, Any],
                     where: str) -> None:
    """A campaign with ``dims`` (``dimensions.Dimensions``, or None) is of a ``CELL_KINDS`` kind
    and its cells' state is at most ``MAX_CELL_STATE`` counts; ``ConfigError`` naming
    ``dimensions`` otherwise."""
    if dims is None:
        return
    if kind not in CELL_KINDS:
        raise fail(f"{where}.dimensions", f"apply to {', '.join(CELL_KINDS)} campaigns, not {kind} (its "
                                          "estimates do not add up over cells)")
    per_cell = (int(params["cohorts"]) * int(params["bloom_bits"]) if "cohorts" in params
                else int(domain_size or 2))
    if dims.n_cells * per_cell > MAX_CELL_STATE:
        raise fail(f"{where}.dimensions", f"{dims.n_cells} cells × {per_cell} counts per cell = "
                                          f"{dims.n_cells * per_cell} counts of state per window, over "
                                          f"{MAX_CELL_STATE}: fewer cells or a smaller domain")
    items = len(params["candidates"]) if "candidates" in params else int(domain_size or 2)
    if dims.n_cells * items > MAX_CELL_ITEMS:
        raise fail(f"{where}.dimensions", f"{dims.n_cells} cells × {items} items = {dims.n_cells * items} "
                                          f"published estimates per window, over {MAX_CELL_ITEMS}: fewer "
                                          "cells or a smaller domain")


def json_bytes(doc: Any) -> int:
    """Bytes of ``doc`` as the collector's JSON (compact enough to bound; Flask's is similar)."""
    return len(json.dumps(doc, separators=(",", ":")).encode())


def check_version_bytes(public: Mapping[str, Any], where: str) -> None:
    """At most ``MAX_VERSION_BYTES``; the error names the largest key (the labels, mostly)."""
    size = json_bytes(public)
    if size > MAX_VERSION_BYTES:
        largest = max(public, key=lambda k: json_bytes(public[k]))
        raise fail(f"{where}.{largest}", f"makes the public config {size} bytes, over {MAX_VERSION_BYTES} "
                                         "(what every device downloads for it): fewer or shorter labels")


def check_answer_bytes(campaign_entries: Mapping[str, int], where: str, name: str) -> None:
    """``campaign_entries``: bytes of each campaign's entry in ``GET /v1/campaigns``; ``name`` the
    campaign being written (named in the error)."""
    own = campaign_entries.get(name, 0)
    if own > MAX_CAMPAIGN_ANSWER_BYTES:
        raise fail(where, f"its entry in GET /v1/campaigns (the latest version and the largest older "
                          f"version still accepted) would be {own} bytes, over {MAX_CAMPAIGN_ANSWER_BYTES}: "
                          "lower accept_old_versions or the labels")
    total = sum(campaign_entries.values())
    if total > MAX_DEVICE_ANSWER_BYTES:
        raise fail(where, f"GET /v1/campaigns would be {total} bytes for all campaigns, over "
                          f"{MAX_DEVICE_ANSWER_BYTES} (the most a device reads)")


__all__ = ["CELL_KINDS", "MAX_CAMPAIGN_ANSWER_BYTES", "MAX_CELL_ITEMS", "MAX_CELL_STATE",
           "MAX_DESCRIPTION_CHARS", "MAX_DEVICE_ANSWER_BYTES", "MAX_FREQUENCY_DOMAIN", "MAX_LABEL_CHARS",
           "MAX_LABELS", "MAX_RANGE_DOMAIN", "MAX_RAPPOR_CELLS", "MAX_RAPPOR_DESIGN", "MAX_VERSION_BYTES",
           "check_answer_bytes", "check_cell_costs", "check_costs", "check_labels", "check_version_bytes",
           "json_bytes"]
