"""Publishing: the aggregator decodes a window after committing its reports and stores the
result document through ``ldptel.store.published`` (the owner of the publications, which the export
API, the queries and the operator pages read). A ``Campaign`` is one campaign version: each
version's windows are published under their own key; ``state_digest`` is the tag's ``digest``.

Per kind the document is what the export API answers (``document``), plus ``decoded_at``:

- frequency: ``campaign, kind, oracle, epsilon, n_reports, window, decoded_at, items`` (every
  item, ``FrequencyEstimate.items``);
- heavy_hitters: ``campaign, kind, epsilon, n_reports, window, decoded_at, alpha, items`` (every
  string the walk kept, by decreasing count);
- range: ``campaign, kind, epsilon, n_reports, window, decoded_at, method``, and the arrays of
  ``RangeEstimate.arrays`` (per-value counts, std errors, Norm-Sub counts, the plug-in counts of
  the variance formula and the monotone CDF): a range, quantile or CDF query is then a cumulative
  sum, a binary search and the method's closed-form variance (``range_estimate``);
- numeric: ``campaign, kind, epsilon, n_reports, window, decoded_at, mechanism, lower, upper,
  mean, sum`` (``MeanEstimate.document``: each ``estimate, std_error, ci_low, ci_high``).

Below the campaign's ``min_reports`` nothing is decoded: the publication holds the tag without a
document (``Published.doc`` is None). A campaign with breakdown dimensions is decoded per cell and
released per cell (``aggregator.breakdown``): it has a document once one cell holds
``min_reports``.

``Publisher`` is the aggregator worker's schedule (``Worker.run`` calls ``due`` every round): a
(campaign, window) noted after a commit, or found missing or behind (``stale_windows``, at the
first round and every ``STALE_CHECK_S``: a worker may die between a commit and its publication),
is published at most once per ``publish_interval`` seconds while reports keep arriving (by all
workers together: ``claim``), and as soon as the worker finds its streams drained (a round
without new entries), so a quiet window converges to the exact estimate of everything counted.
Either way a window is not decoded more often than lets its decoding take ``DECODE_SHARE`` of
the worker's time (a window whose decode takes 2 s is republished at most every 8 s), and
``Worker.run`` publishes everything noted before it returns (``--once``, or stopped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from typing import Any

import numpy as np
import redis as redis_lib

from ldptel.aggregator import breakdown, metrics, retention, store
from ldptel.aggregator.decoders import Accumulator
from ldptel.aggregator.decoders.cells import CellAccumulator
from ldptel.aggregator.index_estimates import index_estimate
from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.estimates import FrequencyEstimate, MeanEstimate
from ldptel.mechanisms.ranges import RangeEstimate
from ldptel.mechanisms.shuffled_kinds import INDEX_KINDS
from ldptel.privacy.central import release_claim
from ldptel.privacy.modes import is_shuffled
from ldptel.privacy.release_claims import window_claim
from ldptel.store import published
from ldptel.store.published import Published, config_digest, finite_row
from ldptel.store.redis_client import AnyRedis

log = logging.getLogger("ldptel.aggregator")

HEAVY_HITTER_ALPHA = 0.05
DECODE_SHARE = 0.25  # while reports arrive, decoding takes at most about this share of the time
STALE_CHECK_S = 10.0  # how often ``due`` looks for windows whose publication is missing or behind


def state_digest(campaign: Campaign, window: int, acc: Accumulator) -> str:
    """SHA-256 over ``config_digest``, the window and the accumulator state: it changes exactly
    when a document decoded from them can change (the API's ETag)."""
    h = hashlib.sha256(f"{config_digest(campaign)}:{window}".encode())
    for key in sorted(acc.state):
        h.update(key.encode())
        h.update(np.ascontiguousarray(acc.state[key]).tobytes())
    return h.hexdigest()


def document(campaign: Campaign, window: int, acc: Accumulator, decoded_at: float,
             shuffled: bool = False, batches: list[int] | None = None
             ) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    """Decode ``acc`` (``Accumulator.estimate``): the kind's document and, for range campaigns,
    the estimate's arrays. Its ``privacy`` is ``Campaign.privacy()`` plus the central claim: a
    shuffled mode's whole releases (``release_claims.window_claim``), or for a local campaign no
    central ε and why (``central_privacy.release_claim``: republished per report; ``shuffled``:
    the reports came through the shuffler). With breakdown dimensions: ``breakdown.document``."""
    if isinstance(acc, CellAccumulator):
        return breakdown.document(campaign, window, acc, decoded_at, shuffled,
                                  lambda c, w, a, t, s: document(c, w, a, t, s, batches)[0]), None
    est = acc.estimate()
    extra: dict[str, Any] = {}
    if is_shuffled(campaign) and campaign.kind in INDEX_KINDS:  # range / numeric: an index histogram
        assert isinstance(est, FrequencyEstimate)
        est, extra = index_estimate(campaign, acc, est)
    if is_shuffled(campaign):  # whole releases: "central ε between L and U" of the worst batch
        privacy = {**campaign.privacy(), **window_claim(campaign, batches or [])}
    else:
        privacy = {**campaign.privacy(), **release_claim(acc.n, shuffled)}
    doc: dict[str, Any] = {"campaign": campaign.name, "version": campaign.version, "kind": campaign.kind,
                           "epsilon": campaign.epsilon, "n_reports": acc.n, "window": window,
                           "decoded_at": decoded_at, "privacy": privacy, **extra}
    if campaign.kind == "range":
        assert isinstance(est, RangeEstimate)
        return {**doc, "method": est.method}, est.arrays()
    if isinstance(est, MeanEstimate):
        params = campaign.public()
        bounds = {k: params[k] for k in ("mechanism", "lower", "upper")}
        return {**doc, **bounds, **{k: finite_row(v) for k, v in est.document().items()}}, None
    if campaign.kind == "heavy_hitters":
        return {**doc, "alpha": HEAVY_HITTER_ALPHA, "items": [finite_row(r) for r in est.items()]}, None
    if est.labels is None:
        est.labels = campaign.labels()
    doc = {"campaign": campaign.name, "version": campaign.version, "kind": campaign.kind,
           "oracle": campaign.oracle, **doc}
    return {**doc, "items": [finite_row(r) for r in est.items()]}, None


def coarse_time(now: float, releases: int) -> float:
    """``decoded_at`` of a campaign in a shuffled mode: the hour, plus the number of releases in
    seconds — it changes with every release (``Last-Modified``) but says no more about when a
    release came than its hour."""
    return float(int(now // 3600) * 3600 + min(releases, 3599))


def counted_time(now: float, previous: Published | None, digest: str) -> float:
    """``decoded_at`` of a local campaign's window published through the shuffler: the hour, plus
    the window's publications in that hour in seconds (the previous publication's ``decoded_at``
    plus one; the same while the state is) — it changes with every publication
    (``Last-Modified``) but says no more about when a report came than its hour (issue 36: it was
    the decode time to the millisecond, a publication a few seconds after each release)."""
    if previous is not None and previous.digest == digest:
        return previous.decoded_at
    hour = float(int(now // 3600) * 3600)
    if previous is None or previous.decoded_at < hour:
        return hour
    return min(float(int(previous.decoded_at)) + 1, hour + 3599)  # (int: after an older ldptel's ms)


def decode(r: AnyRedis, campaign: Campaign, window: int, now: float | None = None,
           shuffled: bool = False) -> Published:
    """Decode what is counted for ``campaign`` in ``window`` (``store.load_accumulator``; the
    document only from ``min_reports`` reports on; ``shuffled``: see ``document``). ``decoded_at``
    is never finer than the hour when the reports came through the shuffler (``coarse_time``,
    ``counted_time``); with the shuffler off, the decode time."""
    acc, n = store.load_accumulator(r, campaign, window)
    decoded_at = round(time.time() if now is None else now, 3)
    batches = None
    replayed = 0
    digest = state_digest(campaign, window, acc)
    if is_shuffled(campaign):
        batches = store.release_sizes(r, campaign, window)
        decoded_at = coarse_time(decoded_at, len(batches))
        replayed = store.replayed_messages(r, campaign, window)  # dropped (``aggregator.sealed``)
        if replayed:  # the document says it: so must its digest (the ETag, the body cache's key)
            digest = hashlib.sha256(f"{digest}:replayed:{replayed}".encode()).hexdigest()
    elif shuffled:
        decoded_at = counted_time(decoded_at, published.read(r, campaign, window, tag_only=True), digest)
    pub = Published(n=n, digest=digest, config=config_digest(campaign), decoded_at=decoded_at, doc=None)
    if breakdown.releasable(campaign, acc):
        pub.doc, pub.arrays = document(campaign, window, acc, decoded_at, shuffled, batches)
        if is_shuffled(campaign):
            pub.doc["replayed_messages"] = replayed
        pub.doc_json = json.dumps(pub.doc, allow_nan=False)
    return pub


def publish(r: AnyRedis, campaign: Campaign, window: int, shuffled: bool = False) -> Published:
    """``decode`` then ``write``: returns the publication made (perhaps kept out by a newer).
    ``shuffled``: the reports came through the shuffler (``[shuffler] enabled``)."""
    pub = decode(r, campaign, window, shuffled=shuffled)
    published.write(r, campaign, window, pub)
    return pub


class Publisher:
    """When the worker publishes: ``note`` a (campaign version, window) after a commit, call
    ``due`` every round (``drained``: the worker found no new entry). ``campaigns``: every
    version of every campaign (``note_stale`` looks at each). ``shuffled``: the reports came
    through the shuffler (``[shuffler] enabled``), so documents state the central ε."""

    def __init__(self, r: AnyRedis, interval: float, campaigns: list[Campaign],
                 shuffled: bool = False) -> None:
        self.r = r
        self.shuffled = shuffled
        self.interval = interval
        self.campaigns = campaigns
        self.stale_checked = -math.inf  # monotonic time of the last ``note_stale``
        # keyed by (campaign, version, window)
        self.dirty: dict[tuple[str, int, int], Campaign] = {}
        self.last: dict[tuple[str, int, int], float] = {}  # monotonic time of the last publication
        self.cost: dict[tuple[str, int, int], float] = {}  # seconds the last publication took
        self.published = 0
        self.failed: dict[tuple[str, int, int], float] = {}  # monotonic time of a failed publication

    def publish_one(self, campaign: Campaign, key: tuple[str, int, int]) -> bool:
        """``publish`` one window; True if it was published. A failure other than Redis's
        (a decode that raises: degenerate parameters a registry record of an older ldptel still
        holds, a bug) fails that window alone: logged, counted
        (``ldptel_aggregator_publish_failures``), stored for the pages and the API
        (``published.write_failure``), and tried again after ``published.FAILED_RETRY_S``; the
        worker goes on with every other window."""
        try:
            publish(self.r, campaign, key[2], self.shuffled)
        except redis_lib.RedisError:
            raise
        except Exception as exc:
            log.exception("campaign %r version %d window %d: publication failed", *key)
            metrics.PUBLISH_FAILURES.labels(campaign.name).inc()
            self.failed[key] = time.monotonic()
            published.write_failure(self.r, campaign, key[2], f"{type(exc).__name__}: {exc}")
            return False
        self.failed.pop(key, None)
        return True

    def note(self, campaign: Campaign, *windows: int) -> None:
        for window in windows:
            self.dirty[campaign.name, campaign.version, window] = campaign

    def note_stale(self) -> None:
        """Note every window whose publication is missing or behind (``stale_windows``: a
        worker may have died between its commit and its publication)."""
        for camp in self.campaigns:
            self.note(camp, *published.stale_windows(self.r, camp))
        self.stale_checked = time.monotonic()

    def due(self, drained: bool, everything: bool = False) -> int:
        """Publish every noted window that is due: never published by this worker, or last
        published ``max(interval, cost / DECODE_SHARE)`` seconds ago (``drained``:
        ``cost / DECODE_SHARE``, so a cheap window is published at once), or all of them with
        ``everything``. ``cost`` is the window's last decode time: decoding takes at most
        ``DECODE_SHARE`` of the worker's time. The gap is also kept between workers: a window
        is published only if no worker started publishing it less than the gap ago (``claim``);
        one that another worker just published stays noted. Returns how many were published."""
        if time.monotonic() - self.stale_checked > STALE_CHECK_S:
            self.note_stale()
        done = 0
        for key, campaign in list(self.dirty.items()):
            if retention.expired(campaign, key[-1]):  # the window (last in the key): past retention
                del self.dirty[key]
                continue
            if time.monotonic() - self.failed.get(key, -math.inf) < published.FAILED_RETRY_S:
                continue  # its last publication failed: kept noted, tried again later
            budget = self.cost.get(key, 0.0) / DECODE_SHARE
            gap = budget if drained else max(self.interval, budget)
            recent = time.monotonic() - self.last.get(key, -math.inf) < gap
            if not everything and (recent or not published.claim(self.r, campaign, key[-1], gap,
                                                                 max(self.interval, budget))):
                continue
            started = time.monotonic()
            if self.publish_one(campaign, key):
                done += 1
            self.last[key] = time.monotonic()
            self.cost[key] = self.last[key] - started
            del self.dirty[key]
        self.published += done
        return done
