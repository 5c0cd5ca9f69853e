"""Published estimates: the aggregator decodes a window after committing its reports and stores
the result document next to the state; the export API, the queries and the operator pages only
read it. The only module that reads or writes ``keys.published_key``. A ``Campaign`` is one
campaign version: each version's windows are published under their own key.

A publication is one hash (fields in ``ldptel.keys``) written by one ``scripts.PUBLISH`` call, so
a reader's HGETALL sees one publication whole: the document, the report count ``n`` and the
``digest`` of the state it was decoded from (``state_digest``), and ``decoded_at``. The script
keeps a document decoded from more reports, so a slow publisher never replaces a newer one.

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
document (``Published.doc`` is None).

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
import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ldptel import keys, scripts
from ldptel.aggregator import retention, store
from ldptel.aggregator.decoders import Accumulator
from ldptel.aggregator.decoders.ranges import RangeEstimate
from ldptel.aggregator.result import MeanEstimate
from ldptel.central_privacy import release_claim
from ldptel.config import Campaign
from ldptel.redis_client import AnyRedis

HEADER = ("campaign", "version", "kind", "epsilon", "n_reports", "window", "decoded_at", "privacy")
HEAVY_HITTER_ALPHA = 0.05
DECODE_SHARE = 0.25  # while reports arrive, decoding takes at most about this share of the time
STALE_CHECK_S = 10.0  # how often ``due`` looks for windows whose publication is missing or behind


def config_digest(campaign: Campaign) -> str:
    """SHA-256 over what a document depends on besides the state: the campaign's public config,
    labels and release threshold."""
    blob = json.dumps([campaign.public(), campaign.labels(), campaign.min_reports], sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def state_digest(campaign: Campaign, window: int, acc: Accumulator) -> str:
    """SHA-256 over ``config_digest``, the window and the accumulator state: it changes exactly
    when a document decoded from them can change (the API's ETag)."""
    h = hashlib.sha256(f"{config_digest(campaign)}:{window}".encode())
    for key in sorted(acc.state):
        h.update(key.encode())
        h.update(np.ascontiguousarray(acc.state[key]).tobytes())
    return h.hexdigest()


def finite_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with non-finite floats as None (JSON has no NaN or infinity)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def document(campaign: Campaign, window: int, acc: Accumulator, decoded_at: float,
             shuffled: bool = False) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    """Decode ``acc`` (``Accumulator.estimate``): the kind's document and, for range campaigns,
    the estimate's arrays. Its ``privacy`` is ``Campaign.privacy()`` plus the central ε of the
    window's ``acc.n`` reports (``central_privacy.release_claim``; ``shuffled``: the reports came
    through the shuffler)."""
    est = acc.estimate()
    privacy = {**campaign.privacy(), **release_claim(campaign, acc.n, shuffled)}
    doc: dict[str, Any] = {"campaign": campaign.name, "version": campaign.version, "kind": campaign.kind,
                           "epsilon": campaign.epsilon, "n_reports": acc.n, "window": window,
                           "decoded_at": decoded_at, "privacy": privacy}
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


@dataclass
class Published:
    """One publication of a (campaign, window)."""

    n: int  # reports decoded
    digest: str  # state_digest of the state decoded
    config: str  # config_digest of the campaign it was decoded under
    decoded_at: float  # epoch seconds
    doc: dict[str, Any] | None  # None: below min_reports, nothing decoded
    arrays: dict[str, np.ndarray] | None = None  # range campaigns
    doc_json: str | None = None  # ``doc`` as stored: ``json.dumps(doc, allow_nan=False)``

    @property
    def etag(self) -> str:
        """The HTTP entity tag of documents made from this publication (quoted)."""
        return f'"{self.digest[:32]}"'

    def header(self) -> dict[str, Any]:
        """The fields every query document starts with (``HEADER``)."""
        assert self.doc is not None
        # a publication made before a field existed lacks it until republished (at the worker's start)
        return {k: self.doc[k] for k in HEADER if k in self.doc}


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def decode(r: AnyRedis, campaign: Campaign, window: int, now: float | None = None,
           shuffled: bool = False) -> Published:
    """Decode what is counted for ``campaign`` in ``window`` (``store.load_accumulator``; the
    document only from ``min_reports`` reports on; ``shuffled``: see ``document``)."""
    acc, n = store.load_accumulator(r, campaign, window)
    decoded_at = round(time.time() if now is None else now, 3)
    pub = Published(n=n, digest=state_digest(campaign, window, acc), config=config_digest(campaign),
                    decoded_at=decoded_at, doc=None)
    if n >= campaign.min_reports:
        pub.doc, pub.arrays = document(campaign, window, acc, decoded_at, shuffled)
        pub.doc_json = json.dumps(pub.doc, allow_nan=False)
    return pub


def write(r: AnyRedis, campaign: Campaign, window: int, pub: Published) -> bool:
    """Store ``pub`` whole in one ``scripts.PUBLISH`` call; False (nothing written) if a
    publication decoded from more reports is stored."""
    fields: list[Any] = [keys.PUB_DIGEST, pub.digest, keys.PUB_CONFIG, pub.config,
                         keys.PUB_DECODED_AT, repr(pub.decoded_at)]
    if pub.doc_json is not None:
        fields += [keys.PUB_DOC, pub.doc_json]
    if pub.arrays is not None:
        fields += [keys.PUB_ARRAYS, _npz(pub.arrays)]
    script = r.register_script(scripts.PUBLISH)
    key = keys.published_key(campaign.name, window, campaign.version)
    return bool(script(keys=[key], args=[pub.n, *fields]))


def publish(r: AnyRedis, campaign: Campaign, window: int, shuffled: bool = False) -> Published:
    """``decode`` then ``write``: returns the publication made (perhaps kept out by a newer).
    ``shuffled``: the reports came through the shuffler (``[shuffler] enabled``)."""
    pub = decode(r, campaign, window, shuffled=shuffled)
    write(r, campaign, window, pub)
    return pub


def read(r: AnyRedis, campaign: Campaign, window: int, tag_only: bool = False,
         version: int | None = None) -> Published | None:
    """The publication of ``campaign``'s ``window`` (one HGETALL: one publication, whole), or None
    before the first. ``tag_only``: without the document (n, digest, decoded_at only).
    ``version``: of that campaign version (default: ``campaign.version``)."""
    key = keys.published_key(campaign.name, window, campaign.version if version is None else version)
    raw: dict[str, bytes]
    if tag_only:
        raw = _tag(cast(list[bytes | None], r.hmget(key, TAG_FIELDS)))
    else:
        raw = {k.decode(): v for k, v in cast(dict[bytes, bytes], r.hgetall(key)).items()}
    return _parse(raw)


TAG_FIELDS = (keys.PUB_N, keys.PUB_DIGEST, keys.PUB_CONFIG, keys.PUB_DECODED_AT)


def _tag(values: list[bytes | None]) -> dict[str, bytes]:
    return {k: v for k, v in zip(TAG_FIELDS, values, strict=True) if v is not None}


def read_many(r: AnyRedis, campaign: Campaign, windows: list[int],
              tag_only: bool = False) -> list[Published | None]:
    """``read`` of many windows in one pipelined round trip (each HMGET or HGETALL reads one
    publication whole)."""
    pipe = r.pipeline(transaction=False)
    for w in windows:
        key = keys.published_key(campaign.name, w, campaign.version)
        pipe.hmget(key, TAG_FIELDS) if tag_only else pipe.hgetall(key)
    return [_parse(_tag(got) if tag_only else {k.decode(): v for k, v in got.items()})
            for got in pipe.execute()]


def _parse(raw: dict[str, bytes]) -> Published | None:
    if keys.PUB_N not in raw:
        return None
    doc_json = raw[keys.PUB_DOC].decode() if keys.PUB_DOC in raw else None
    arrays = None
    if keys.PUB_ARRAYS in raw:
        with np.load(io.BytesIO(raw[keys.PUB_ARRAYS]), allow_pickle=False) as stored:
            arrays = {k: stored[k] for k in stored.files}
    return Published(n=int(raw[keys.PUB_N]), digest=raw[keys.PUB_DIGEST].decode(),
                     config=raw[keys.PUB_CONFIG].decode(), decoded_at=float(raw[keys.PUB_DECODED_AT]),
                     doc=None if doc_json is None else json.loads(doc_json), arrays=arrays, doc_json=doc_json)


def delete(r: AnyRedis, campaign: Campaign, windows: list[int]) -> int:
    """Delete the publications of ``windows`` (retention); returns how many existed."""
    if not windows:
        return 0
    return int(r.delete(*[keys.published_key(campaign.name, w, campaign.version) for w in windows]))


_range_variances: dict[str, Callable] = {}


def range_estimate(campaign: Campaign, pub: Published) -> RangeEstimate:
    """A range campaign's published estimate as a ``RangeEstimate`` (no decoding: the arrays,
    and the variance formula of the campaign's mechanism, built once per parameter set)."""
    assert pub.arrays is not None and pub.doc is not None
    params = json.dumps(campaign.public(), sort_keys=True, default=str)
    if params not in _range_variances:
        _range_variances[params] = campaign.mechanism().range_variance  # type: ignore[attr-defined]
    return RangeEstimate.from_arrays(pub.n, pub.arrays, _range_variances[params], pub.doc["method"])


def stale_windows(r: AnyRedis, campaign: Campaign) -> list[int]:
    """Windows whose publication is missing or behind the counted reports, or was decoded under
    other campaign parameters (what a starting worker publishes)."""
    config = config_digest(campaign)
    out = []
    for w, n in store.window_counts(r, campaign).items():
        pub = read(r, campaign, w, tag_only=True)
        if pub is None or pub.n != n or pub.config != config:
            out.append(w)
    return out


def claim(r: AnyRedis, campaign: Campaign, window: int, gap: float, longest: float) -> bool:
    """Whether this worker may publish ``window`` now: no worker started publishing it less than
    ``gap`` seconds ago (``scripts.PUBLISH_CLAIM`` on ``keys.publish_claim_key``, which then
    holds now; kept ``longest`` seconds, the longest gap any worker waits, plus one)."""
    script = r.register_script(scripts.PUBLISH_CLAIM)
    now_ms = int(time.time() * 1000)
    args = [now_ms, int(gap * 1000), int((longest + 1.0) * 1000)]
    return bool(script(keys=[keys.publish_claim_key(campaign.name, window, campaign.version)], args=args))


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

    def note(self, campaign: Campaign, *windows: int) -> None:
        for window in windows:
            self.dirty[campaign.name, campaign.version, window] = campaign

    def note_stale(self) -> None:
        """Note every window whose publication is missing or behind (``stale_windows``: a
        worker may have died between its commit and its publication)."""
        for camp in self.campaigns:
            self.note(camp, *stale_windows(self.r, camp))
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
            budget = self.cost.get(key, 0.0) / DECODE_SHARE
            gap = budget if drained else max(self.interval, budget)
            if not everything and (time.monotonic() - self.last.get(key, -math.inf) < gap
                                   or not claim(self.r, campaign, key[-1], gap, max(self.interval, budget))):
                continue
            started = time.monotonic()
            publish(self.r, campaign, key[2], self.shuffled)
            self.last[key] = time.monotonic()
            self.cost[key] = self.last[key] - started
            del self.dirty[key]
            done += 1
        self.published += done
        return done
