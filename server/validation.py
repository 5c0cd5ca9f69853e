"""All-or-nothing validation of one ``ReportBatch`` body against its campaign.

Order of checks (the first failure rejects the whole batch, nothing is stored):

1. the body parses as a ``ReportBatch`` (else 400 ``malformed_batch``);
2. ``schema_version`` = 1, ``batch_id`` of 16 bytes (400 ``invalid_batch``; schema_version 2, a
   ``SealedBatch``, is ``server.sealed_ingest``'s);
3. the campaign exists (400 ``unknown_campaign``; 503 ``campaign_unavailable`` with
   ``Retry-After`` while its registry record cannot be read: quarantined, ``Config.broken``, so a
   device keeps the batch and sends it again), takes reports (409 ``campaign_paused``, 410
   ``campaign_retired``) and the version the batch names (``campaign_version``; 0 is version 1)
   is still accepted (400 ``unknown_version``, 409 ``version_retired``: ``accepted_version``);
   every later check uses that version's parameters; a campaign in a shuffled privacy mode takes
   sealed batches only (400 ``sealed_required``);
4. 1 ≤ ``count`` ≤ ``server.max_reports_per_batch`` (400 ``invalid_batch`` / 413 ``too_many_reports``);
5. the payload kind is the campaign's (400 ``wrong_payload``);
6. the campaign's mechanism checks its payload (``Mechanism.checked_columns``: wire shape, column
   lengths, ranges, the poisoning defence); its ``InvalidReport`` becomes 400 ``invalid_report``
   naming the lowest bad index and the reason (metric ``implausible_bits`` for an
   ``ImplausibleReport``, else ``invalid_report``);
7. the envelope (``checked_envelope``, issue 28): the dimension values are mapped to the
   campaign's closed lists (an unknown value, or a missing dimension, becomes ``"other"``, counted
   in ``ldptel_dimension_other_batches``; never a rejection) and stored for every dimension of the
   campaign in name order (none for a campaign without dimensions); a device-level
   campaign's batch names the window it aggregates (``ReportBatch.window``: a window start that
   has ended, else 400 ``invalid_batch``; 409 ``window_closed`` when it ended more than
   ``campaign_kinds.late_seconds`` ago), which the batch is filed under; any other batch's
   ``window`` is cleared (it is filed under its receive time's window).

The batch that is stored is the parsed message re-serialized without unknown fields, so nothing a
client adds beyond the schema reaches the stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from prometheus_client import Counter

from ldptel.campaigns.config import Campaign, Config
from ldptel.campaigns.kinds import late_seconds
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.builder import DEVICE_LEVEL_KINDS
from ldptel.mechanisms.errors import ImplausibleReport, InvalidReport
from ldptel.privacy.modes import is_shuffled
from ldptel.proto import SCHEMA_VERSION, SEALED_SCHEMA_VERSION, ReportBatch

BATCH_ID_BYTES = 16
CLOCK_SKEW_S = 300  # a device-level window may end this far in the collector's future (device clocks)
OTHER_BATCHES = Counter("ldptel_dimension_other_batches", "Batches with a dimension value mapped to "
                        "'other' (unknown or missing), by campaign and dimension.", ["campaign", "dimension"])


class Rejection(Exception):
    """A rejected request: HTTP ``status``, ``error`` code and ``detail`` of the JSON body, and the
    metric ``reason`` (with ``campaign`` when it names a configured one)."""

    def __init__(self, status: int, error: str, detail: Any, reason: str | None = None,
                 campaign: str | None = None) -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status, self.error, self.detail = status, error, detail
        self.reason = reason or error
        self.campaign = campaign


@dataclass
class ValidBatch:
    campaign: Campaign
    batch_id: bytes
    count: int
    data: bytes  # the batch to store (re-serialized, unknown fields dropped)
    window: int | None = None  # the window it aggregates (device-level kinds), else None
    cell: tuple[tuple[str, str], ...] = ()  # its canonical dimension values (its ingress group's cell)


def invalid_report(campaign: str, index: int | None, reason: str,
                   metric: str = "invalid_report") -> Rejection:
    return Rejection(400, "invalid_report", {"index": index, "reason": reason}, metric, campaign)


def parse_batch(body: bytes) -> ReportBatch:
    """The ``ReportBatch`` of ``body`` (400 ``malformed_batch`` if it does not parse)."""
    if not body:
        raise Rejection(400, "malformed_batch", "empty body: expected a serialized ReportBatch")
    try:
        return ReportBatch.FromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise Rejection(400, "malformed_batch", f"not a valid ReportBatch protobuf: {exc}") from None


def validate_batch(body: bytes, config: Config, mechanisms: dict[tuple[str, int], Any],
                   now: float | None = None) -> ValidBatch:
    """Validate ``body`` as one batch of a configured campaign; raise ``Rejection`` otherwise.
    ``mechanisms``: this process's cache of each campaign version's mechanism."""
    batch = parse_batch(body)
    if batch.schema_version == SEALED_SCHEMA_VERSION:  # ``server.sealed_ingest`` takes it
        raise Rejection(400, "invalid_batch", "a SealedBatch", reason="sealed_batch")
    if batch.schema_version != SCHEMA_VERSION:
        raise Rejection(400, "invalid_batch",
                        f"schema_version must be {SCHEMA_VERSION}, got {batch.schema_version}")
    if len(batch.batch_id) != BATCH_ID_BYTES:
        raise Rejection(400, "invalid_batch",
                        f"batch_id must be {BATCH_ID_BYTES} bytes, got {len(batch.batch_id)}")
    latest = config.campaign(batch.campaign)
    if latest is None and batch.campaign in config.broken:  # quarantined: the device keeps them
        raise Rejection(503, "campaign_unavailable",
                        {"campaign": batch.campaign, "reason": "the campaign's registry record cannot be "
                                                               "read; retry later (nothing was stored)"},
                        campaign=batch.campaign)
    if latest is None:
        shown = batch.campaign if len(batch.campaign) <= 64 else batch.campaign[:64] + "…"
        raise Rejection(400, "unknown_campaign", f"no campaign named {shown!r}")
    campaign = accepted_version(config, latest, batch.campaign_version or 1, now)
    name = campaign.name
    if is_shuffled(campaign):
        raise Rejection(400, "sealed_required", f"campaign {name!r} is in privacy_mode "
                        f"{campaign.privacy_mode}: its reports are sealed to the analyzer "
                        "(SealedBatch, schema_version 2; an SDK that supports it)", campaign=name)
    mech = mechanism_of(campaign, mechanisms)
    count = batch.count
    if count < 1:
        raise Rejection(400, "invalid_batch", "count must be at least 1", campaign=name)
    limit = config.server.max_reports_per_batch
    if count > limit:
        raise Rejection(413, "too_many_reports", f"count {count} exceeds {limit} reports per batch",
                        campaign=name)
    payload = batch.WhichOneof("payload")
    if payload != mech.payload:
        raise Rejection(400, "wrong_payload", f"campaign {name!r} takes {mech.payload} payloads, "
                                              f"got {payload or 'none'}", campaign=name)
    try:
        mech.checked_columns(batch)
    except InvalidReport as exc:
        metric = "implausible_bits" if isinstance(exc, ImplausibleReport) else "invalid_report"
        raise invalid_report(name, exc.index, exc.reason, metric) from None
    window = checked_envelope(batch, campaign, time.time() if now is None else now)
    batch.DiscardUnknownFields()
    return ValidBatch(campaign=campaign, batch_id=bytes(batch.batch_id), count=int(count),
                      data=batch.SerializeToString(), window=window,
                      cell=tuple((d.name, d.value) for d in batch.dimensions))


def checked_envelope(batch: Any, campaign: Campaign, now: float) -> int | None:
    """Check 7 of the module docstring on ``batch`` in place: the canonical dimension values
    (``canonical_dimensions``), and the device-level window (returned; None for other kinds,
    whose ``window`` is cleared)."""
    canonical_dimensions(batch, campaign)
    return device_window(batch, campaign, now)


def canonical_dimensions(batch: Any, campaign: Campaign) -> None:
    """``batch.dimensions`` (a ``ReportBatch``'s, or a ``SealedBatch``'s envelope) replaced by
    the campaign's canonical values, every dimension in name order (none without dimensions);
    a value mapped to ``other`` that was not ``other`` is counted (``OTHER_BATCHES``)."""
    name, dims = campaign.name, campaign.dimensions
    given = {d.name: d.value for d in batch.dimensions}
    del batch.dimensions[:]
    if dims is not None:
        values = dims.canonical(given)
        for dim, value in zip(dims.dims, values, strict=True):
            if value == "other" and given.get(dim.name) != "other":
                # a shuffled campaign's counts are pooled, as in /metrics: none moves with one device
                label = "(shuffled)" if is_shuffled(campaign) else name
                OTHER_BATCHES.labels(label, dim.name).inc()
            batch.dimensions.add(name=dim.name, value=value)


def device_window(batch: Any, campaign: Campaign, now: float) -> int | None:
    """The device-level window a batch names, checked (check 7); None for other kinds, whose
    ``window`` is cleared."""
    name = campaign.name
    if campaign.kind not in DEVICE_LEVEL_KINDS:
        batch.window = 0
        return None
    length, window = campaign.window_seconds, int(batch.window)
    if window <= 0 or window % length or window + length > now + CLOCK_SKEW_S:
        raise Rejection(400, "invalid_batch", f"a {campaign.kind} batch names the window it aggregates "
                        f"(a multiple of {length} s that has ended), got window = {window}", campaign=name)
    if now - (window + length) > late_seconds(length):
        raise Rejection(409, "window_closed", {"campaign": name, "window": window, "reason": "the window "
                        f"ended more than {late_seconds(length)} s ago: its reports are no longer taken"},
                        campaign=name)
    return window


def accepted_version(config: Config, latest: Campaign, version: int, now: float | None = None) -> Campaign:
    """The campaign version a batch names, if it takes reports now: ``Rejection`` 409
    ``campaign_paused`` / 410 ``campaign_retired`` (with the operator's reason), 400
    ``unknown_version`` (newer than the latest), 409 ``version_retired`` (superseded more than
    its ``accept_old_versions`` seconds ago)."""
    name = latest.name
    if latest.status == "paused":
        raise Rejection(409, "campaign_paused", {"campaign": name, "reason": latest.reason},
                        campaign=name)
    if latest.status == "retired":
        raise Rejection(410, "campaign_retired", {"campaign": name, "reason": latest.reason},
                        campaign=name)
    campaign = config.campaign_version(name, version)
    if campaign is None and version > latest.version:
        raise Rejection(400, "unknown_version", f"campaign {name!r} has no version {version} "
                                                f"(latest: {latest.version})", campaign=name)
    if campaign is None or (time.time() if now is None else now) > campaign.accepts_until():
        raise Rejection(409, "version_retired",
                        {"campaign": name, "version": version, "latest": latest.version,
                         "reason": f"version {version} was superseded by version {latest.version} "
                                   f"more than accept_old_versions ago"}, campaign=name)
    return campaign


def mechanism_of(campaign: Campaign, mechanisms: dict[tuple[str, int], Any]) -> Mechanism:
    """The mechanism of one campaign version (``Campaign.mechanism``), built once per
    ``Campaign`` object (a registry reload makes new objects)."""
    cached = mechanisms.get((campaign.name, campaign.version))
    if cached is None or cached[0] is not campaign:
        cached = mechanisms[campaign.name, campaign.version] = (campaign, campaign.mechanism())
    return cached[1]


__all__ = ["Rejection", "ValidBatch", "accepted_version", "canonical_dimensions", "checked_envelope",
           "device_window", "mechanism_of", "parse_batch",
           "validate_batch"]
