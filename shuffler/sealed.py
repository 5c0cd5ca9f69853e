"""Releases of campaigns in a shuffled privacy mode (``privacy_mode`` shuffled*): whole batches of
sealed messages.

The shuffler cannot read a message (each is sealed to the analyzer, ``ldptel.sealing``); it holds
the envelopes of one (campaign version, window, cell, analyzer key) — a cell is the envelopes'
dimension values (issue 28), so each cell is released on its own and ``batch_min`` holds per cell; a
key's messages only ever mix with messages sealed to the same key, so that the key id partitions
nothing inside a release — and releases them only as a **whole batch of at least ``batch_min`` real
reports** — devices, i.e. **envelopes**: the collector takes one device's report per envelope
(``server.sealed_ingest``) and the shuffler counts envelopes, never the envelope's ``reports``
field, which a hostile device writes (issue 36) — each batch once (``scripts.SHUFFLE`` deletes the
ingress entries it moves, atomically):

- ``due``: a group is released when it holds ≥ ``batch_min`` reports and its window is closed
  (``durations.window_close``: the collector takes nothing more for it), or it holds
  ≥ 2·``batch_min`` (or ``[shuffler] max_held_reports``, if larger), or the ingress stream holds
  half its ``[shuffler] max_ingress_batches`` (the collector refuses more: a batch must be released
  before it fills; the config refuses a ``batch_min`` over that half), or the campaign has one
  window (``"all"``), or on a drain (``--once``); never below ``batch_min``, whatever the delay;
- a window that closes below ``batch_min`` is **discarded**: its ingress entries are deleted
  (``scripts.DISCARD``) and counted (``keys.SHUFFLE_DISCARDED`` of ``{…}:shuffled``); its
  devices' reports are never decoded (the window's publication holds the batches released
  before, or none). With ``window = "all"`` nothing is discarded: a group waits for ``batch_min``.
- ``repack``: every message of every envelope, permuted by ONE uniform permutation (OS
  randomness), split into parts of about ``[shuffler] batch_reports`` messages, each a
  ``SealedBatch`` without batch id carrying the release id (16 random bytes), the number of parts,
  the part's index and the release's envelope count (``release_reports``: its devices, which the
  aggregator re-checks against ``batch_min``), so the aggregator can commit the whole release at
  once (``scripts.SHUFFLE`` gives the parts consecutive entry ids).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

from ldptel.campaigns.config import Campaign
from ldptel.durations import window_close
from ldptel.mechanisms.randomness import OS_RANDOM, OsRandom, permutation
from ldptel.privacy.modes import Shuffled, ShuffledFakes
from ldptel.proto import SEALED_SCHEMA_VERSION, Dimension, SealedBatch
from ldptel.shuffler.repack import split_sizes


def due(campaign: Campaign, window: int, reports: int, max_held: int, once: bool,
        now: float | None = None, filling: bool = False) -> str | None:
    """Why a sealed group is released (``"batch"``) or discarded (``"discard"``) now, or None
    (module docstring); ``filling``: the ingress stream holds half its ``max_ingress_batches``."""
    assert isinstance(campaign.mode, (Shuffled, ShuffledFakes)), "sealed groups are of shuffled campaigns"
    batch_min = campaign.mode.batch_min
    closed = (time.time() if now is None else now) >= window_close(window, campaign.window_seconds)
    if reports >= batch_min and (closed or once or filling or campaign.window_seconds == 0
                                 or reports >= max(2 * batch_min, max_held)):
        return "batch"
    if closed and reports < batch_min:
        return "discard"
    return None


def repack(envelopes: list[SealedBatch], campaign: str, version: int, window: int, key_id: int,
           batch_reports: int, rng: np.random.Generator | OsRandom = OS_RANDOM,
           cell: Sequence[tuple[str, str]] = ()) -> tuple[list[tuple[bytes, int]], int]:
    """The release's parts as (serialized ``SealedBatch``, count) — count = the release's real
    reports on the first part, 0 on the others, so the analysis counters add up to it — and the
    number of real reports. ``cell``: the envelopes' dimension values (issue 28), on every part."""
    messages = [m for env in envelopes for m in env.messages]
    reports = len(envelopes)  # one device per envelope (issue 36): never the claimed ``reports``
    order = permutation(rng, len(messages))
    release = os.urandom(16)
    sizes = split_sizes(len(messages), batch_reports)
    parts = []
    start = 0
    for i, size in enumerate(sizes):
        part = SealedBatch(campaign=campaign, campaign_version=version, schema_version=SEALED_SCHEMA_VERSION,
                           key_id=key_id, window=window, release=release, release_parts=len(sizes),
                           release_reports=reports, release_part=i,
                           messages=[messages[j] for j in order[start:start + size]],
                           dimensions=[Dimension(name=k, value=v) for k, v in cell])
        parts.append((part.SerializeToString(), reports if i == 0 else 0))
        start += size
    return parts, reports


__all__ = ["due", "repack"]
