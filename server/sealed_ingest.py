"""Sealed batches (``SealedBatch``, schema_version 2): campaigns in a shuffled privacy mode.

The collector checks the envelope only — it cannot read a message — and in this order (the first
failure rejects the whole batch, nothing is stored):

1. the body parses as a ``SealedBatch`` (400 ``malformed_batch``), ``batch_id`` of 16 bytes;
2. the campaign and version take reports (``validation.accepted_version``), and the campaign is in
   a shuffled mode (400 ``invalid_batch``: a local campaign takes schema_version 1); the shuffler is
   enabled (503 ``shuffler_disabled``: nothing would shuffle the messages);
3. ``key_id`` names an analyzer key the collector accepts now (400 ``unknown_key``, detail naming
   the current key: the SDK refreshes its config and seals again);
4. ``window`` is the current or the previous window of the campaign (400 ``wrong_window``, with the
   server time: a device whose clock is off resyncs from ``/v1/campaigns``);
5. one device per envelope (issue 36): 1 ≤ ``reports`` ≤ the campaign's ``reports_per_window``
   (1 in the shuffled modes; 400 ``invalid_batch``, detail ``field: "reports"``); ``shuffled``: one
   message per report; ``shuffled-fakes``: at least one per report, at most ``max_messages``
   (``mechanisms.fakes.max_fakes``: ⌈λr + 8√(λr) + 16⌉ fakes, the one cap the SDKs draw within;
   detail ``field: "messages"``). An envelope is stored with ``count`` = 1: the shuffler's n counts
   envelopes, never the claimed field;
6. every message is exactly ``sealing.ciphertext_length(row width)`` bytes (400 ``invalid_report``
   naming the first bad index): real and fake messages are indistinguishable by size;
7. the envelope's dimension values (issue 28: in the clear, public by declaration) are mapped to
   the campaign's closed lists (``validation.canonical_dimensions``: an unknown or missing value is
   ``other``, never a rejection).

What is stored (``scripts.INGEST`` into the ingress stream, as for schema 1) is the parsed message
re-serialized without unknown fields, with ``window`` = the envelope's window and ``count`` = 1
(one device). No message can be opened by anyone but the aggregator.

A ``SealedEnvelopes`` body (schema_version 3, ``validate_envelopes``) carries several envelopes in
one POST (a simulated fleet: one POST per device would hit the per-address rate limit long before
10⁴ devices): each is checked by the same steps and stored on its own (its batch id deduplicated,
its shard), and each is one claimed device — batching changes nothing of what a device may claim.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from ldptel import keys, sealing
from ldptel.campaigns.config import Campaign, Config
from ldptel.mechanisms.fakes import envelope_message_limit
from ldptel.mechanisms.rows import row_dtype
from ldptel.privacy.modes import ShuffledFakes, is_shuffled
from ldptel.proto import SEALED_SCHEMA_VERSION, SealedBatch, SealedEnvelopes
from ldptel.server.validation import (
    BATCH_ID_BYTES,
    Rejection,
    ValidBatch,
    accepted_version,
    canonical_dimensions,
    mechanism_of,
)
from ldptel.store import analyzer_keys
from ldptel.store.analyzer_keys import PublicKey
from ldptel.store.redis_client import AnyRedis

KEY_CACHE_SECONDS = 2.0


class KeyCache:
    """The published analyzer keys, read at most every ``KEY_CACHE_SECONDS`` (one HGETALL)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at = -math.inf
        self._keys: dict[int, PublicKey] = {}

    def get(self, r: AnyRedis, force: bool = False) -> dict[int, PublicKey]:
        with self._lock:
            if force or time.monotonic() - self._at > KEY_CACHE_SECONDS:
                self._keys, self._at = analyzer_keys.read(r), time.monotonic()
            return self._keys


@dataclass
class SealedValid(ValidBatch):
    """A valid sealed batch (``window``: the one its messages are bound to; ``key_id``: the
    analyzer key they are sealed to)."""

    key_id: int = 0


def max_messages(campaign: Campaign, reports: int) -> int:
    """The most messages an honest envelope of ``reports`` real reports holds: ``reports``, plus
    for shuffled-fakes ``fakes.max_fakes(λ, reports)`` (the one cap, shared with the SDKs)."""
    if not isinstance(campaign.mode, ShuffledFakes):
        return reports
    return envelope_message_limit(campaign.mode.fake_rate, reports)


def validate_sealed(body: bytes, config: Config, mechanisms: dict[tuple[str, int], Any],
                    published: dict[int, PublicKey],
                    now: float | None = None) -> SealedValid:
    """Validate ``body``, one ``SealedBatch`` (module docstring); ``Rejection`` otherwise."""
    try:
        batch = SealedBatch.FromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise Rejection(400, "malformed_batch", f"not a valid SealedBatch protobuf: {exc}") from None
    return check_envelope(batch, config, mechanisms, published, time.time() if now is None else now)


def validate_envelopes(body: bytes, config: Config, mechanisms: dict[tuple[str, int], Any],
                       published: dict[int, PublicKey], max_envelopes: int,
                       now: float | None = None) -> list[SealedValid]:
    """Validate ``body``, a ``SealedEnvelopes`` (schema_version 3): 1..``max_envelopes``
    envelopes, each checked on its own as one device's (``check_envelope``); the first invalid one
    refuses the whole body, its detail naming the envelope's ``index``."""
    try:
        many = SealedEnvelopes.FromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise Rejection(400, "malformed_batch", f"not a valid SealedEnvelopes protobuf: {exc}") from None
    if not 1 <= len(many.envelopes) <= max_envelopes:
        raise Rejection(413 if len(many.envelopes) > max_envelopes else 400, "invalid_batch",
                        {"field": "envelopes", "envelopes": len(many.envelopes),
                         "reason": f"a SealedEnvelopes body holds 1..{max_envelopes} envelopes "
                                   "(max_reports_per_batch)"})
    at = time.time() if now is None else now
    out = []
    for i, env in enumerate(many.envelopes):
        try:
            out.append(check_envelope(env, config, mechanisms, published, at))
        except Rejection as rej:
            detail = rej.detail if isinstance(rej.detail, dict) else {"reason": rej.detail}
            raise Rejection(rej.status, rej.error, {"envelope": i, **detail}, rej.reason,
                            rej.campaign) from None
    if len({v.batch_id for v in out}) < len(out):
        raise Rejection(400, "invalid_batch", {"field": "batch_id", "reason": "two envelopes of one "
                                               "body share a batch_id"})
    return out


def _refuse(name: str, field: str, reason: str, **detail: Any) -> Rejection:
    return Rejection(400, "invalid_batch", {"field": field, **detail, "reason": reason}, campaign=name)


def check_envelope(batch: SealedBatch, config: Config, mechanisms: dict[tuple[str, int], Any],
                   published: dict[int, PublicKey], at: float) -> SealedValid:
    """Check one parsed envelope (module docstring, steps 1-7)."""
    if batch.schema_version != SEALED_SCHEMA_VERSION or len(batch.batch_id) != BATCH_ID_BYTES:
        raise Rejection(400, "invalid_batch", f"a SealedBatch has schema_version {SEALED_SCHEMA_VERSION} "
                        f"and a batch_id of {BATCH_ID_BYTES} bytes")
    latest = config.campaign(batch.campaign)
    if latest is None:
        raise Rejection(400, "unknown_campaign", f"no campaign named {batch.campaign[:64]!r}")
    camp = accepted_version(config, latest, batch.campaign_version or 1, at)
    name = camp.name
    if not is_shuffled(camp):
        raise Rejection(400, "invalid_batch", f"schema_version 2 (a SealedBatch) is for campaigns in a "
                        f"shuffled privacy mode; campaign {name!r} is local: send schema_version 1",
                        campaign=name)
    if not config.shuffler.enabled:
        raise Rejection(503, "shuffler_disabled", f"campaign {name!r} needs the shuffler ([shuffler] "
                        "enabled = true); nothing is stored", campaign=name)
    if not analyzer_keys.accepted(published, batch.key_id, at):
        cur = analyzer_keys.current(published, at)
        raise Rejection(400, "unknown_key", {"key_id": batch.key_id,
                                             "current_key_id": None if cur is None else cur.key_id,
                                             "reason": "unknown or expired analyzer key: fetch "
                                                       "/v1/campaigns again and seal to its analyzer_key"},
                        campaign=name)
    length = camp.window_seconds
    current = keys.window_start(at, length)
    allowed = (current,) if length == 0 else (current, current - length)
    if batch.window not in allowed:
        raise Rejection(400, "wrong_window", {"window": batch.window, "current_window": current,
                                              "server_time": round(at, 3)}, campaign=name)
    reports, messages = batch.reports, len(batch.messages)
    most_reports = camp.reports_per_window  # 1 in the shuffled modes: one device's report
    if not 1 <= reports <= most_reports:
        raise _refuse(name, "reports", f"a sealed envelope carries one device's reports: 1..{most_reports} "
                      f"(reports_per_window), got {reports}", reports=reports)
    most = max_messages(camp, reports)
    if not reports <= messages <= most:
        raise _refuse(name, "messages", f"{messages} messages for {reports} reports (allowed: {reports}.."
                      f"{most})", messages=messages)
    size = sealing.ciphertext_length(row_dtype(mechanism_of(camp, mechanisms)).itemsize)
    bad = next((i for i, m in enumerate(batch.messages) if len(m) != size), None)
    if bad is not None:
        raise Rejection(400, "invalid_report", {"index": bad, "reason": f"a message of this campaign "
                                                f"is {size} bytes, got {len(batch.messages[bad])}"},
                        "invalid_report", name)
    canonical_dimensions(batch, camp)  # in the clear: the closed lists, "other" (``validation``)
    batch.DiscardUnknownFields()
    batch.ClearField("release")
    batch.ClearField("release_parts")
    batch.ClearField("release_reports")
    batch.ClearField("release_part")
    batch.ClearField("key_ids")  # the shuffler's alone: a device's messages are sealed to key_id
    # ``count`` is the envelope's one device: what the shuffler and the ingress counters count
    return SealedValid(campaign=camp, batch_id=bytes(batch.batch_id), count=1,
                       data=batch.SerializeToString(), window=int(batch.window),
                       cell=tuple((d.name, d.value) for d in batch.dimensions), key_id=int(batch.key_id))


def sealed_keys(st, force: bool = False) -> dict[int, PublicKey]:
    """This process's ``KeyCache`` of ``st`` (a ``ServerState``)."""
    cache = getattr(st, "_analyzer_keys", None)
    if cache is None:
        cache = st._analyzer_keys = KeyCache()
    return cache.get(st.redis, force)


def shuffled_config(st, campaign: Campaign, now: float) -> dict[str, Any]:
    """What a shuffled campaign's device config adds: the current ``analyzer_key`` (None while
    the aggregator has published none: the SDK then keeps its reports queued)."""
    cur = analyzer_keys.current(sealed_keys(st), now)
    return {"analyzer_key": None if cur is None else cur.config()}


__all__ = ["KeyCache", "SealedValid", "check_envelope", "max_messages", "sealed_keys", "shuffled_config",
           "validate_envelopes", "validate_sealed"]
