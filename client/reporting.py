"""The parts of ``TelemetryClient.report`` / ``report_many`` beyond one randomized report: a
report's dimension values (``dimension_pairs``), the device-level kinds' events
(``record_event``, ``ldptel.client.device_level``), and the simulation path ``report_many``
(many simulated devices sharing one set of dimension values).

Dimension values (issue 28, ``ldptel.dimensions``): the client's defaults
(``TelemetryClient(dimensions=…)``: device-wide values such as the platform, the app version or
the experiment arm; names a campaign does not declare are ignored) updated with the call's
``dimensions`` (a name the campaign does not declare raises ``ValueError`` naming the campaign:
a typo must not pass silently). Each declared dimension then takes its canonical value — the
version bucket, and ``"other"`` for a value outside the closed list or a dimension not given —
exactly as the collector maps it, so the device never sends more than the bucket.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldptel.client.configs import askable
from ldptel.client.device_level import is_device_level, simulated
from ldptel.client.envelope import group_of, set_envelope
from ldptel.client.errors import TelemetryError, VersionClosed
from ldptel.client.health import DropCounter
from ldptel.client.limits import fit_rows
from ldptel.client.sealed import is_sealed, unsealed
from ldptel.dimensions import Dimensions
from ldptel.keys import window_start
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.builder import uses_device_secret, value_index
from ldptel.mechanisms.numeric import NumericMechanism
from ldptel.proto import ReportBatch

TelemetryClient = Any  # ``ldptel.client.transport.TelemetryClient`` (which imports this module)
_parsed: dict[int, tuple[Any, Dimensions | None]] = {}  # id(dimensions list) → parsed (per config)


def dimensions_of(cfg: Mapping[str, Any]) -> Dimensions | None:
    """The campaign config's ``Dimensions`` (None without), parsed once per config object."""
    raw = cfg.get("dimensions")
    if raw is None:
        return None
    kept = _parsed.get(id(raw))
    if kept is None or kept[0] is not raw:
        if len(_parsed) > 256:
            _parsed.clear()
        kept = _parsed[id(raw)] = (raw, Dimensions.from_public(raw))
    return kept[1]


def dimension_pairs(campaign: str, cfg: Mapping[str, Any], given: Mapping[str, Any] | None,
                    defaults: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ``(name, value)`` pairs a report of ``campaign`` carries (module docstring)."""
    dims = dimensions_of(cfg)
    undeclared = sorted(set(given or ()) - set(dims.names if dims is not None else ()))
    if undeclared:
        raise ValueError(f"campaign {campaign!r} has no dimension {undeclared[0]!r} (it declares "
                         f"{', '.join(dims.names) if dims is not None else 'none'})")
    if dims is None:
        return []
    return dims.pairs(dims.canonical({**defaults, **(given or {})}))


def encoded(client: TelemetryClient, campaign: str, cfg: Mapping[str, Any], mech: Mechanism, value: Any,
            dims: list[tuple[str, str]]) -> ReportBatch:
    """One report of ``value`` (an index, ``value_index``) randomized now (the client's ``rng``
    when it has one and the campaign uses no device secret), with its dimension values."""
    try:
        if client.rng is not None and not uses_device_secret(cfg):
            batch = mech.encode_batch([value], rng=client.rng, campaign=campaign, batch_id=b"")
        else:
            batch = mech.encode(value, campaign=campaign)
            batch.batch_id = b""
    except ValueError as exc:
        raise ValueError(f"campaign {campaign!r}: {exc}") from None
    count_clipped(client._clipped, campaign, mech, [value])
    return set_envelope(batch, 0, dims)


def queue_row(client: TelemetryClient, campaign: str, cfg: Mapping[str, Any], mech: Mechanism,
              batch: ReportBatch) -> tuple[str, int, bytes, int, str]:
    """The queue row of ``batch``: the batch, or for a shuffled privacy mode its unsealed envelope
    (``client.sealed.unsealed``, bound to the collector's window now), grouped by its envelope."""
    data = (unsealed(dict(cfg), mech, batch, client.clock.now()) if is_sealed(dict(cfg))
            else batch.SerializeToString())
    return campaign, int(batch.count), data, int(cfg.get("version", 1)), group_of(batch)


def record_event(client: TelemetryClient, campaign: str, cfg: dict[str, Any], value: Any,
                 dims: list[tuple[str, str]]) -> bool:
    """A device-level campaign's ``report``: the event is added to the window's aggregate (ended
    windows of the campaign are reported first); nothing is randomized or queued now."""
    now = client.clock.now()
    try:
        client.device_windows.finalize(now, campaign)
        client.device_windows.record(campaign, cfg, value, dims, now)
    except ValueError:
        raise
    except client.storage_errors as exc:
        client._drop_here("queue_unavailable", 1, f"campaign {campaign!r}: cannot record the event: "
                                                  f"{type(exc).__name__}: {exc}")
        return False
    return True


def report_many(client: TelemetryClient, campaign: str, values: Sequence[Any],
                dimensions: Mapping[str, Any] | None = None, window: int | None = None) -> int:
    """``TelemetryClient.report_many``: one independent report per value, each a simulated device
    sharing ``dimensions``; for a device-level campaign each value is one device's window
    (``device_level.simulated``: its number of events, or its events' values) and the reports
    name ``window`` (default: the last window that ended)."""
    prepared = client._for_report(campaign, len(values))
    if prepared is None:
        return 0
    cfg, mech = prepared
    dims = dimension_pairs(campaign, cfg, dimensions, client.dimensions)
    if is_device_level(cfg):
        length = int(cfg["window_seconds"])
        vals = [simulated(cfg, v) for v in values]
        window = window_start(client.clock.now(), length) - length if window is None else int(window)
    else:
        vals = [value_index(cfg, v) for v in values]
        window = 0
    budget = client.limits.row_budget(campaign)
    rows = []
    step = client._sender.max_reports()
    for start in range(0, len(vals), step):
        part = vals[start:start + step]
        try:
            batch = mech.encode_batch(part, rng=client.rng, campaign=campaign, batch_id=b"")
        except ValueError as exc:
            raise ValueError(f"campaign {campaign!r}: {exc}") from None
        set_envelope(batch, window, dims)
        for n, data in fit_rows(mech, batch, budget):
            if is_sealed(cfg):  # simulated devices: one envelope of n reports (``client.sealed``)
                data = unsealed(cfg, mech, ReportBatch.FromString(data), client.clock.now())
            rows.append((campaign, n, data, cfg.get("version", 1), group_of(batch)))
    count_clipped(client._clipped, campaign, mech, vals)
    if not client._store(campaign, rows, len(vals)):
        return 0
    client._background.queued(len(vals))
    return len(vals)


def count_clipped(counter: DropCounter, campaign: str, mech: Mechanism, values: Sequence[Any]) -> None:
    """Count the values of a numeric campaign that were clipped to its [lower, upper]."""
    if isinstance(mech, NumericMechanism) or hasattr(mech, "clipped"):  # also a shuffled one's grid
        clipped = mech.clipped(np.asarray(values, dtype=np.float64))
        if clipped:
            counter.add(campaign, clipped)


def device_mechanism(client: TelemetryClient, campaign: str, version: int
                     ) -> tuple[dict[str, Any], Mechanism] | None:
    """A device-level window's config and mechanism (``device_level.DeviceWindows``), or None
    while none is known; a campaign (version) the collector no longer takes drops its windows."""
    configs = client._configs.configs
    if configs and campaign in configs and askable(configs[campaign], version):
        client._configs.wanted.add((campaign, version))  # asked for by number (issue 34 item 9)
        try:
            configs = client.campaigns(refresh=True)
        except TelemetryError:
            return None
        if askable(configs.get(campaign, {}), version):
            return None  # not fetched yet: the windows wait
    try:
        return client._mechanism(campaign, configs, version) if configs else None
    except TelemetryError as exc:
        reason = exc.reason if isinstance(exc, VersionClosed) else "bad_config"
        client.device_windows.forget(campaign, reason, str(exc))
        return None


def device_round(client: TelemetryClient) -> None:
    """Before a flush: open the current window of the device-level campaigns the device knows,
    and queue the reports of the windows that ended (``device_level.DeviceWindows``). Storage
    trouble is logged by the flush that follows; nothing is raised."""
    configs = client._configs.current(wait=client.timeout) or {}  # a flush may ask the collector
    if not any(is_device_level(c) for c in configs.values()):
        try:
            if not client.device_windows.pending_windows():
                return
        except client.storage_errors:
            return
    now = client.clock.now()
    try:
        client.device_windows.touch(configs, now, lambda cfg: dimension_pairs(
            str(cfg.get("name")), cfg, None, client.dimensions))
        client.device_windows.finalize(now)
    except client.storage_errors as exc:
        client._drop_here("queue_unavailable", 0, f"device-level windows: {type(exc).__name__}: {exc}")


__all__ = ["count_clipped", "device_mechanism", "device_round", "dimension_pairs", "dimensions_of", "encoded",
           "queue_row", "record_event", "report_many"]
