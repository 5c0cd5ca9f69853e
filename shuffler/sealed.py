"""Releases of campaigns in a shuffled privacy mode (``privacy_mode`` shuffled*): whole batches of
sealed messages.

The shuffler cannot read a message (each is sealed to the analyzer, ``ldptel.sealing``); it holds
the envelopes of one (campaign version, window, cell) — a cell is the envelopes' dimension values
(issue 28), so each cell is released on its own and ``batch_min`` holds per cell — whatever analyzer
key each is sealed to (a key rotation inside a window never splits its group: issue 36), and
releases them only as a **whole batch of at least ``batch_min`` real reports** — devices, i.e.
**envelopes**: the collector takes one device's report per envelope (``server.sealed_ingest``) and
the shuffler counts envelopes, never the envelope's ``reports`` field, which a hostile device writes
(issue 36) — each batch once (``scripts.SHUFFLE`` deletes the ingress entries it moves,
atomically):

- ``due``: a group is released **once, when its window closes** (``durations.window_close``: the
  collector takes nothing more for it) with ≥ ``batch_min`` reports, after every shard handed it
  off (``settled``): one release per (version, window, cell), whatever the window's size, shard
  count or key rotations (issue 38: the noise of a release is μ fakes per bucket whatever its
  size, so k releases in a window give a std error per count of ≈ √k·√μ, one gives √μ). Before the
  close, only:

  - ``"early"``: the campaign opted in (``shuffle_early_release`` = m ≥ ``batch_min``, 0 = off):
    a group of ≥ m devices is released at once (each release still ≥ ``batch_min``: the claim per
    device holds; the accuracy cost is the √k above);
  - ``"max_held"`` / ``"ingress_full"``: forced by the memory bounds — the group holds
    ``[shuffler] max_held_reports``, or half the collector's ``[shuffler] max_ingress_batches``
    (it refuses more: a batch must be released before it fills; the config refuses a
    ``batch_min`` over that half). Counted (``ldptel_shuffler_early_releases_total``) and logged
    as a warning naming the cost (``worker``);
  - ``"drain"``: ``ldptel shuffle --once`` releases what it holds (an operator's drain);
  - ``window = "all"`` never closes: a group is released at its early-release size,
    ``shuffle_early_release`` or by default ``batch_min`` (``"all"``: as before, the least delay;
    each release a batch of its own in the window's estimate, so its std error per count grows as
    √k·√μ with its k releases — a campaign that wants accuracy over a long span uses windows of a
    fixed length, or a larger ``shuffle_early_release``).

  Never below ``batch_min``, whatever the delay.
- a campaign with several shards: every shard hands its envelopes to shard 0, which releases
  (``shuffler.handoff``): a group is the union of the shards', and a closed window is released or
  discarded only once every shard has handed it off;
- a window that closes below ``batch_min`` is **discarded**: its ingress entries are deleted
  (``scripts.DISCARD``) and counted (``keys.SHUFFLE_DISCARDED`` of ``{…}:shuffled``); its
  devices' reports are never decoded (the window's publication holds the batches released
  before, or none). With ``window = "all"`` nothing is discarded: a group waits for ``batch_min``.
- ``repack``: every message of every envelope (and, for a ``shuffled-fakes`` campaign whose
  ``fake_source`` is ``shuffler`` or ``both``, the shuffler's own sealed fakes: ``shuffler.fakes``),
  permuted by ONE uniform permutation (OS
  randomness), split into parts of about ``[shuffler] batch_reports`` messages, each a
  ``SealedBatch`` without batch id carrying the release id (16 random bytes), the number of parts,
  the part's index and the release's envelope count (``release_reports``: its devices, which the
  aggregator re-checks against ``batch_min``), so the aggregator can commit the whole release at
  once (``scripts.SHUFFLE`` gives the parts consecutive entry ids). A release of messages sealed
  to several keys carries each message's key id (``key_ids``, parallel to ``messages``, permuted
  with them; ``key_id`` = the key of the envelope read last); a release of one key leaves
  ``key_ids`` empty (``key_id`` names it), as before. What the key id tells the aggregator is what
  opening tells it anyway: which key a message was sealed to, i.e. at most whether its device
  sealed before or after a rotation (docs/privacy.md).
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

EARLY_REASONS = ("early", "max_held", "ingress_full", "drain")  # a release before the window closes
FORCED_REASONS = ("max_held", "ingress_full")  # forced by the memory bounds (a warning)


def early_size(campaign: Campaign) -> int:
    """The devices at which an open group is released before its window closes: the campaign's
    ``shuffle_early_release``; for ``window = "all"`` (never closes) ``batch_min`` by default;
    0: never (one release at the close)."""
    assert isinstance(campaign.mode, (Shuffled, ShuffledFakes)), "sealed groups are of shuffled campaigns"
    if campaign.shuffle_early_release:
        return campaign.shuffle_early_release
    return campaign.mode.batch_min if campaign.window_seconds == 0 else 0


def due(campaign: Campaign, window: int, reports: int, max_held: int, once: bool,
        now: float | None = None, filling: bool = False, settled: bool = True) -> str | None:
    """Why a sealed group is released now — ``"close"`` (its window closed), ``"all"`` (the
    early-release size of a ``window = "all"`` group), ``"early"`` (opted in), ``"max_held"``,
    ``"ingress_full"`` (forced by the memory bounds), ``"drain"`` (``once``) — or discarded
    (``"discard"``: closed below ``batch_min``), or None (module docstring). ``filling``: the
    ingress group holds half its ``max_ingress_batches``; ``settled``: every other shard handed
    off its envelopes of the window (``handoff.settled``: until then a closed window is neither
    released nor discarded)."""
    assert isinstance(campaign.mode, (Shuffled, ShuffledFakes)), "sealed groups are of shuffled campaigns"
    batch_min = campaign.mode.batch_min
    if campaign.window_seconds == 0:
        closed = False
    else:
        closed = settled and (time.time() if now is None else now) >= window_close(
            window, campaign.window_seconds)
    if reports < batch_min:
        return "discard" if closed else None
    early = early_size(campaign)
    if closed:
        return "close"
    if early and reports >= early:
        return "all" if campaign.window_seconds == 0 and not campaign.shuffle_early_release else "early"
    if reports >= max_held:
        return "max_held"
    if filling:
        return "ingress_full"
    if once:
        return "drain"
    return None


def repack(messages: Sequence[bytes], sizes: Sequence[int], key_ids: Sequence[int], campaign: str,
           version: int, window: int, key_id: int, batch_reports: int,
           rng: np.random.Generator | OsRandom = OS_RANDOM, cell: Sequence[tuple[str, str]] = (),
           fakes: Sequence[bytes] = ()) -> tuple[list[tuple[bytes, int]], int]:
    """The release's parts as (serialized ``SealedBatch``, count) — count = the release's real
    reports on the first part, 0 on the others, so the analysis counters add up to it — and the
    number of real reports. ``messages``: every envelope's messages in order, ``sizes`` and
    ``key_ids`` per envelope (``held.Group``: one envelope per device). ``cell``: the envelopes'
    dimension values (issue 28), on every part. Each message keeps the key id of its envelope
    (``key_ids`` when the release holds several keys); ``key_id``: the parts' ``key_id`` when it
    does not, and the key ``fakes`` are sealed to. ``fakes``: the shuffler's sealed fakes
    (``shuffler.fakes``), permuted with the rest."""
    everything = [*messages, *fakes]
    per_message = np.concatenate([
        np.repeat(np.asarray(key_ids, dtype=np.uint32), np.asarray(sizes, dtype=np.int64)),
        np.full(len(fakes), key_id, dtype=np.uint32)])
    mixed = len(np.unique(per_message)) > 1
    reports = len(sizes)  # one device per envelope (issue 36): never the claimed ``reports``
    order = permutation(rng, len(everything))
    release = os.urandom(16)
    sizes_out = split_sizes(len(everything), batch_reports)
    single = int(per_message[0]) if len(per_message) and not mixed else key_id
    parts = []
    start = 0
    for i, size in enumerate(sizes_out):
        take = order[start:start + size]
        part = SealedBatch(campaign=campaign, campaign_version=version, schema_version=SEALED_SCHEMA_VERSION,
                           key_id=single, window=window, release=release, release_parts=len(sizes_out),
                           release_reports=reports, release_part=i,
                           messages=[everything[j] for j in take],
                           key_ids=per_message[take].tolist() if mixed else [],
                           dimensions=[Dimension(name=k, value=v) for k, v in cell])
        parts.append((part.SerializeToString(), reports if i == 0 else 0))
        start += size
    return parts, reports


__all__ = ["EARLY_REASONS", "FORCED_REASONS", "due", "early_size", "repack"]
