"""The published estimates of each (campaign version, window): the one owner of
``keys.published_key``, below both the aggregator (which decodes and writes them:
``ldptel.aggregator.publish``) and the server (the export API, queries and pages read them).

A publication is one hash (fields in ``ldptel.keys``) written by one ``scripts.PUBLISH`` call, so
a reader's HGETALL sees one publication whole: the document, the report count ``n``, the
``digest`` of the state it was decoded from, the ``config`` digest of the campaign it was decoded
under, and ``decoded_at``. The script keeps a document decoded from more reports, so a slow
publisher never replaces a newer one. Below the campaign's ``min_reports`` the publication holds
the tag without a document (``Published.doc`` is None). What each kind's document holds:
``ldptel.aggregator.publish``.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import time
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ldptel import keys
from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.index_stats import index_statistics
from ldptel.mechanisms.ranges import RangeEstimate
from ldptel.privacy.modes import is_shuffled
from ldptel.store import scripts, tally
from ldptel.store.redis_client import AnyRedis

FAILED_RETRY_S = 300  # the aggregator tries a window whose publication failed again after this
HEADER = ("campaign", "version", "kind", "epsilon", "n_reports", "window", "decoded_at", "privacy")


# what the aggregator's documents claim, beyond the config: a change makes every stored publication
# stale (``stale_windows``), so each window is published again with the current claim. 2 (issue 36):
# a local campaign's documents claim no central ε (``ldptel.privacy.central.release_claim``)
DOCUMENT_VERSION = 2


def config_digest(campaign: Campaign) -> str:
    """SHA-256 over what a document depends on besides the state: the campaign's public config,
    labels and release threshold, and ``DOCUMENT_VERSION``."""
    blob = json.dumps([campaign.public(), campaign.labels(), campaign.min_reports, DOCUMENT_VERSION],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def finite_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with non-finite floats as None (JSON has no NaN or infinity)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


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
    error: str | None = None  # why the window's last publication failed (``write_failure``)

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


def write(r: AnyRedis, campaign: Campaign, window: int, pub: Published) -> bool:
    """Store ``pub`` whole in one ``scripts.PUBLISH`` call; False (nothing written) if a
    publication decoded from more reports is stored."""
    fields: list[Any] = [keys.PUB_DIGEST, pub.digest, keys.PUB_CONFIG, pub.config,
                         keys.PUB_DECODED_AT, repr(pub.decoded_at)]
    if pub.doc_json is not None:
        fields += [keys.PUB_DOC, pub.doc_json]
    if pub.arrays is not None:
        fields += [keys.PUB_ARRAYS, _npz(pub.arrays)]
    key = keys.published_key(campaign.name, window, campaign.version)
    return bool(scripts.of(r).call("PUBLISH", keys=[key], args=[pub.n, *fields]))


def write_failure(r: AnyRedis, campaign: Campaign, window: int, error: str) -> None:
    """Mark the window's publication as failed (``PUB_ERROR``, one line of at most 300
    characters), keeping whatever was published before; a publication without any gets an empty
    tag (n = 0), so readers see the failure. The next ``PUBLISH`` replaces it all."""
    key = keys.published_key(campaign.name, window, campaign.version)
    pipe = r.pipeline(transaction=False)  # each field idempotent: no MULTI needed
    for field, empty in ((keys.PUB_N, 0), (keys.PUB_DIGEST, ""), (keys.PUB_CONFIG, ""),
                         (keys.PUB_DECODED_AT, "0")):
        pipe.hsetnx(key, field, empty)
    pipe.hset(key, keys.PUB_ERROR, " ".join(error.split())[:300])
    pipe.execute()


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


TAG_FIELDS = (keys.PUB_N, keys.PUB_DIGEST, keys.PUB_CONFIG, keys.PUB_DECODED_AT, keys.PUB_ERROR)


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
                     doc=None if doc_json is None else json.loads(doc_json), arrays=arrays, doc_json=doc_json,
                     error=raw[keys.PUB_ERROR].decode(errors="replace") if keys.PUB_ERROR in raw else None)


def delete(r: AnyRedis, campaign: Campaign, windows: list[int]) -> int:
    """Delete the publications of ``windows`` (retention); returns how many existed."""
    if not windows:
        return 0
    return int(r.delete(*[keys.published_key(campaign.name, w, campaign.version) for w in windows]))


_range_variances: dict[str, Any] = {}  # a range variance, or the index mechanism


def range_estimate(campaign: Campaign, pub: Published) -> RangeEstimate:
    """A range campaign's published estimate as a ``RangeEstimate`` (no decoding: the arrays,
    and the variance formula of the campaign's mechanism, built once per parameter set; in a
    shuffled privacy mode the index histogram's, with the document's ``fake_messages``)."""
    assert pub.arrays is not None and pub.doc is not None
    params = json.dumps(campaign.public(), sort_keys=True, default=str)
    if params not in _range_variances:
        mech = campaign.mechanism()
        _range_variances[params] = (mech if is_shuffled(campaign)
                                    else mech.range_variance)  # type: ignore[attr-defined]
    found = _range_variances[params]
    if is_shuffled(campaign):  # ``ldptel.aggregator.index_estimates``
        found = index_statistics(found, int(pub.doc.get("fake_messages", 0))).range_variance
    return RangeEstimate.from_arrays(pub.n, pub.arrays, found, pub.doc["method"])


def stale_windows(r: AnyRedis, campaign: Campaign) -> list[int]:
    """Windows whose publication is missing or behind the counted reports, or was decoded under
    other campaign parameters (what a starting worker publishes)."""
    config = config_digest(campaign)
    out = []
    for w, n in tally.window_counts(r, campaign).items():
        pub = read(r, campaign, w, tag_only=True)
        if pub is None or pub.n != n or pub.config != config:
            out.append(w)
    return out


def claim(r: AnyRedis, campaign: Campaign, window: int, gap: float, longest: float) -> bool:
    """Whether this worker may publish ``window`` now: no worker started publishing it less than
    ``gap`` seconds ago (``scripts.PUBLISH_CLAIM`` on ``keys.publish_claim_key``, which then
    holds now; kept ``longest`` seconds, the longest gap any worker waits, plus one)."""
    now_ms = int(time.time() * 1000)
    args = [now_ms, int(gap * 1000), int((longest + 1.0) * 1000)]
    key = keys.publish_claim_key(campaign.name, window, campaign.version)
    return bool(scripts.of(r).call("PUBLISH_CLAIM", keys=[key], args=args))
