"""Report expiry: a campaign's ``retention`` (``"30d"``, any duration ≥ its window length).

A window has expired once it *ended* more than ``retention`` ago: window ``w`` of length ``L``
has expired at time ``t`` when ``w + L + retention ≤ t``. The aggregator

- never counts an entry of an expired window (``Worker.decode`` rejects it: a report delivered
  late, or claimed from a dead worker after its window expired, cannot bring the window back),
- never publishes an expired window (``publish.Publisher.due`` drops it), and
- deletes expired windows (``expire``/``expire_all``, from the worker's upkeep every ``TRIM_INTERVAL_S``):
  their publications (``published.delete``) first, then their state (``store.delete_windows``,
  which keeps their counts in the expired totals so the collector-vs-aggregator lag stays right).
  Publications go first: a worker stopped between the two steps leaves counted state without a
  publication, which the next pass deletes (never a publication without state).

A window whose state a commit re-created in the instant after it was deleted (decoded just
before it expired) is deleted again by the next pass.
"""

from __future__ import annotations

import time

from ldptel.aggregator import store
from ldptel.campaigns.config import Campaign
from ldptel.store import published, tally
from ldptel.store.redis_client import AnyRedis


def expired(campaign: Campaign, window: int, now: float | None = None) -> bool:
    """Whether ``window`` of ``campaign`` is past its retention at ``now`` (never without one)."""
    kept = campaign.retention_seconds
    if kept is None:
        return False
    return window + campaign.window_seconds + kept <= (time.time() if now is None else now)


def expire(r: AnyRedis, campaign: Campaign, now: float | None = None) -> list[int]:
    """Delete the publications and state of every expired window of ``campaign``; returns them."""
    if campaign.retention_seconds is None:
        return []
    gone = [w for w in tally.window_counts(r, campaign) if expired(campaign, w, now)]
    published.delete(r, campaign, gone)
    store.delete_windows(r, campaign, gone)
    return gone


def expire_all(r: AnyRedis, campaigns: list[Campaign]) -> int:
    """``expire`` every campaign; returns the number of windows deleted."""
    return sum(len(expire(r, c)) for c in campaigns)
