"""Campaigns in a shuffled privacy mode on the device (``privacy_mode`` ``shuffled`` or
``shuffled-fakes``; docs/sdk.md):

- ``report`` queues an *unsealed* envelope: a ``SealedBatch`` whose ``messages`` hold the report
  rows in the clear (``mechanisms.rows``: the ε₀-LDP report for ``shuffled``; for
  ``shuffled-fakes`` the index — the true one unless ``local_epsilon`` passes it through GRR) and
  whose ``window`` is the window of the report time on the collector's clock
  (``ClockOffset``: ``/v1/campaigns``' ``server_time``). The queue file therefore holds what the
  device would send, before encryption.
- ``seal_rows`` (at flush time) turns a chunk's envelopes into what is posted: ONE ``SealedBatch``
  per report, i.e. per device (``reports`` = 1; ``report_many``'s simulated devices each get their
  own; batch id ``envelope_batch_id``: derived from the chunk's, the window and the report's index,
  so a retry is deduplicated), fakes drawn with OS randomness for ``shuffled-fakes`` (Poisson(λ)
  per report, cut to ``mechanisms.fakes.max_fakes``, uniform over the domain), the envelope's
  messages shuffled, each row sealed on its own to the campaign's ``analyzer_key``
  (``ldptel.sealing``) with the campaign, version, window and key id bound — only once that key
  is the aggregator's (``pinned_key``: its ``signature`` verifies under the app's
  ``analyzer_signing_key``, ``ldptel.key_signing``, and ``accepted_until`` has not passed on the
  device's clock); otherwise the chunk waits in the queue (``KeyNotTrusted``). Envelopes whose window
  the collector no longer takes (neither the current nor the previous one) are dropped, counted.
- ``bodies`` packs several envelopes into one POST (``SealedEnvelopes``, schema_version 3) within
  ``max_body_bytes``: the collector checks and stores each on its own, each one claimed device.

A device reports at most once per campaign window (``reports_per_window = 1``, the ledger), and the
collector takes one device's report per envelope, so a release of n envelopes holds n devices.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from ldptel import key_signing, keys, sealing
from ldptel.client.errors import KeyNotTrusted, TelemetryError
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.fakes import fake_indices, max_fakes, poisson_counts
from ldptel.mechanisms.randomness import OsRandom, resolve
from ldptel.mechanisms.rows import from_rows, row_bytes, row_dtype, to_rows
from ldptel.proto import (
    ENVELOPES_SCHEMA_VERSION,
    SEALED_SCHEMA_VERSION,
    ReportBatch,
    SealedBatch,
)

SHUFFLED_MODES = ("shuffled", "shuffled-fakes")


def is_sealed(cfg: dict[str, Any]) -> bool:
    """True for a campaign config in a shuffled privacy mode."""
    return cfg.get("privacy_mode", "local") in SHUFFLED_MODES


class ClockOffset:
    """The collector's clock as the device knows it: ``server_time`` − local time at the answer."""

    def __init__(self) -> None:
        self.offset = 0.0

    def heard(self, server_time: float | None) -> None:
        if isinstance(server_time, (int, float)):
            self.offset = float(server_time) - time.time()

    def now(self) -> float:
        return time.time() + self.offset


def unsealed(cfg: dict[str, Any], mech: Mechanism, batch: ReportBatch, now: float) -> bytes:
    """The queue row of ``batch``'s reports (module docstring), bound to the window of ``now``."""
    cols = mech.columns(batch)
    rows = to_rows(mech, cols, batch.count)
    env = SealedBatch(campaign=batch.campaign, schema_version=SEALED_SCHEMA_VERSION, reports=batch.count,
                      campaign_version=int(cfg.get("version", 1)),
                      window=keys.window_start(now, int(cfg.get("window_seconds", 0))),
                      messages=row_bytes(rows), dimensions=batch.dimensions)
    return env.SerializeToString()


@dataclass
class Sealed:
    """One envelope to post: its batch id, body and real reports."""

    batch_id: bytes
    body: bytes
    reports: int


def accepted_windows(cfg: dict[str, Any], now: float) -> tuple[int, ...]:
    length = int(cfg.get("window_seconds", 0))
    current = keys.window_start(now, length)
    return (current,) if length == 0 else (current, current - length)


def analyzer_key(cfg: dict[str, Any], campaign: str) -> tuple[X25519PublicKey, int]:
    """The config's ``analyzer_key`` as (public key, key id), checked: the suite of
    ``sealing.SUITE_ID``, 32 raw bytes in base64, and an ``id`` that is ``sealing.key_id`` of them
    (a key the config misnames would only be refused by the collector). ``TelemetryError`` (the
    chunk waits: the configs are fetched again) when it is missing or fails a check."""
    key = cfg.get("analyzer_key")
    if not key:
        raise TelemetryError(f"campaign {campaign!r}: the collector has no analyzer key yet")
    try:
        if key.get("suite", sealing.SUITE_ID) != sealing.SUITE_ID:
            raise ValueError(f"suite {key.get('suite')!r}, not {sealing.SUITE_ID!r}")
        raw = base64.b64decode(key["public"], validate=True)
        public = sealing.load_public(raw)
        key_id = key["id"]
        if isinstance(key_id, bool) or not isinstance(key_id, int) or key_id != sealing.key_id(raw):
            raise ValueError(f"id {key_id!r} is not the key id of its public key ({sealing.key_id(raw)})")
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error) as exc:
        raise TelemetryError(f"campaign {campaign!r}: unusable analyzer_key in the collector's config: "
                             f"{exc}") from None
    return public, key_id


PIN_HINT = ("pass analyzer_signing_key= to TelemetryClient (the value `ldptel analyzer-key show` "
            "prints); until then its reports wait in the queue, never sealed")


def pinned_key(cfg: dict[str, Any], campaign: str, signing_key: Ed25519PublicKey | None,
               now: float | None = None) -> tuple[X25519PublicKey, int]:
    """``analyzer_key`` once it is the aggregator's: its ``signature`` verifies under the
    pinned ``signing_key`` over its suite, key, id, ``current_until`` and ``accepted_until``, and
    ``now`` (the device's clock, not the collector's) is before ``accepted_until``.
    ``KeyNotTrusted`` saying why otherwise (no pinned key, a bad or missing signature, expired)."""
    if signing_key is None:
        raise KeyNotTrusted(f"campaign {campaign!r} is in a shuffled privacy mode and no analyzer "
                            f"signing key is pinned: {PIN_HINT}")
    public, key_id = analyzer_key(cfg, campaign)
    key = cfg["analyzer_key"]
    try:
        signature = key_signing.decode_signature(key.get("signature"))
        current_until, accepted_until = key.get("current_until"), key.get("accepted_until")
        for name, value in (("current_until", current_until), ("accepted_until", accepted_until)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} {value!r} is not an integer")
    except ValueError as exc:
        raise KeyNotTrusted(f"campaign {campaign!r}: the collector's analyzer_key is not signed ({exc}); "
                            "not sealed to it") from None
    raw = sealing.public_bytes(public)
    if not key_signing.verify_key(key.get("suite", sealing.SUITE_ID), raw, key_id, current_until,
                                  accepted_until, signature, signing_key):
        raise KeyNotTrusted(f"campaign {campaign!r}: the collector's analyzer_key {key_id} is not signed by "
                            "the pinned analyzer_signing_key; not sealed to it")
    if (time.time() if now is None else now) >= accepted_until:
        raise KeyNotTrusted(f"campaign {campaign!r}: the collector's analyzer_key {key_id} expired at "
                            f"{accepted_until} (accepted_until, on this device's clock); not sealed to it")
    return public, key_id



def envelope_batch_id(batch_id: bytes, window: int, index: int) -> bytes:
    """The batch id of the chunk's ``index``-th report's envelope: SHA-256(chunk batch id ‖ window
    (u64) ‖ index (u32))[:16], the same at every attempt (a retry is deduplicated)."""
    return hashlib.sha256(batch_id + window.to_bytes(8, "big") + index.to_bytes(4, "big")).digest()[:16]


def seal_rows(cfg: dict[str, Any], mech: Mechanism, campaign: str, version: int, batch_id: bytes,
              rows: list[bytes], now: float, rng: np.random.Generator | None = None,
              signing_key: Ed25519PublicKey | None = None) -> tuple[list[Sealed], int]:
    """A chunk's unsealed envelopes → (the envelopes to post, reports dropped as stale): ONE
    envelope per report — one device's (issue 36: the collector takes ``reports`` = 1 and the
    shuffler counts envelopes) — in the chunk's report order, with its own fakes; sealed only to a
    key that ``pinned_key`` trusts under ``signing_key``."""
    public, key_id = pinned_key(cfg, campaign, signing_key)
    windows = accepted_windows(cfg, now)
    width = row_dtype(mech).itemsize
    source: np.random.Generator | OsRandom = resolve(rng)
    kept: list[bytes] = []  # the rows of the reports kept, with their window, index and dimensions
    meta: list[tuple[int, int, Any]] = []
    stale = index = 0
    for raw in rows:
        env = SealedBatch.FromString(raw)
        plain = b"".join(env.messages)
        if len(plain) != env.reports * width:
            raise ValueError(f"{len(plain) // max(width, 1)} rows for {env.reports} reports")
        if env.window not in windows:
            stale += env.reports
        else:
            kept.append(plain)
            meta += [(int(env.window), index + j, env.dimensions) for j in range(env.reports)]
        index += env.reports
    messages = _each_with_fakes(cfg, mech, b"".join(kept), len(meta), source)
    out = []
    for (window, i, dims), plain_msgs in zip(meta, messages, strict=True):
        body = SealedBatch(campaign=campaign, campaign_version=version, schema_version=SEALED_SCHEMA_VERSION,
                           batch_id=envelope_batch_id(batch_id, window, i), reports=1, key_id=key_id,
                           window=window, dimensions=dims,
                           messages=sealing.seal(plain_msgs, public, sealing.info(campaign, version, window,
                                                                                 key_id)))
        out.append(Sealed(bytes(body.batch_id), body.SerializeToString(), 1))
    return out, stale


def bodies(envelopes: list[Sealed], max_bytes: int, max_envelopes: int) -> list[tuple[bytes, int]]:
    """The POST bodies carrying ``envelopes``: one alone as its ``SealedBatch``, several as
    ``SealedEnvelopes`` (schema_version 3) of at most ``max_envelopes`` and ``max_bytes`` each —
    each envelope still one claimed device at the collector. (body, envelopes) pairs; an
    envelope too large alone is its own body (the caller refuses it)."""
    out: list[tuple[bytes, int]] = []
    group: list[bytes] = []
    size = 2  # the schema_version field
    for env in envelopes:
        cost = len(env.body) + 2 + _varint_len(len(env.body))  # tag 21 takes two bytes
        if group and (size + cost > max_bytes or len(group) >= max_envelopes):
            out.append(_body(group))
            group, size = [], 2
        group.append(env.body)
        size += cost
    if group:
        out.append(_body(group))
    return out


_SCHEMA_FIELD = bytes([4 << 3, ENVELOPES_SCHEMA_VERSION])  # SealedEnvelopes.schema_version (varint)
_ENVELOPE_TAG = bytes([(21 << 3 | 2) & 0x7F | 0x80, (21 << 3 | 2) >> 7])  # SealedEnvelopes.envelopes


def _body(group: list[bytes]) -> tuple[bytes, int]:
    """One envelope as itself; several as a ``SealedEnvelopes`` written field by field (the bytes
    ``SealedEnvelopes.SerializeToString`` gives, without parsing the envelopes again)."""
    if len(group) == 1:
        return group[0], 1
    return _SCHEMA_FIELD + b"".join(_ENVELOPE_TAG + _varint(len(b)) + b for b in group), len(group)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def _each_with_fakes(cfg: dict[str, Any], mech: Mechanism, plain: bytes, reports: int,
                     rng: np.random.Generator | OsRandom) -> list[list[bytes]]:
    """Per report (one envelope each): its real row plus its own fakes (shuffled-fakes: Poisson(λ),
    cut to ``mechanisms.fakes.max_fakes``, the collector's cap; uniform over the domain), in a
    uniformly random order — drawn for the whole chunk at once (one sort by (envelope, random key))."""
    cols, n = from_rows(mech, plain)
    if n != reports:
        raise ValueError(f"{n} rows for {reports} reports")
    if reports == 0:
        return []
    rate = float(cfg.get("fake_rate") or 0.0) if cfg.get("privacy_mode") == "shuffled-fakes" else 0.0
    counts = np.zeros(reports, dtype=np.int64)
    if rate > 0:
        counts = np.minimum(poisson_counts(rng, rate, reports), max_fakes(rate))
        fakes = fake_indices(rng, int(counts.sum()), mech.domain_size)
        cols = {"values": np.concatenate([cols["values"], fakes])}
    total = reports + int(counts.sum())
    owner = np.concatenate([np.arange(reports), np.repeat(np.arange(reports), counts)])
    order = np.lexsort((np.asarray(rng.random(total), dtype=np.float64), owner))
    flat = row_bytes(to_rows(mech, cols, total)[order])
    ends = np.cumsum(counts + 1).tolist()
    return [flat[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


__all__ = ["PIN_HINT", "ClockOffset", "Sealed", "accepted_windows", "analyzer_key", "bodies",
           "envelope_batch_id", "is_sealed", "pinned_key", "seal_rows", "unsealed"]
