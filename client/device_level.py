"""Device-level report types (issue 28): the SDK aggregates a campaign's events over its window on
the device and sends ONE randomized report per device and window, at the window's end or at the
next start of the app (``ldptel.campaigns.kinds`` says what each kind reports).

The window's aggregate is a row of ``device_windows`` in the SDK's SQLite file:

- ``device_windows(campaign, window_start, version, dimensions, events, counts)`` — per campaign
  and window (UTC-aligned, ``keys.window_start``): the events recorded (``report()`` calls; for
  ``per_device_count`` the sum of their increments), per value for ``per_device_histogram``
  (``counts``: JSON {label: events}, in the order the values were first seen), the campaign
  version and the dimension values of the last event (``dimensions``: JSON pairs). One row per
  campaign and window, so one report per window whatever the dimensions or versions seen in it.

``touch`` opens the current window's row (with no event) of every ``unique_devices`` and
``per_device_count`` campaign the device knows, at every flush, so a device that was active in a
window but saw no event reports "none" (or 0): the estimate counts devices, and a report's
presence does not reveal the event. Such a row takes the client's default dimension values
(``TelemetryClient(dimensions=…)``: set device-wide values such as the platform or the
experiment arm there); an event's own values replace them. ``per_device_histogram`` reports only
from devices with an event in the window (its report's presence says so, as any frequency report
does).

``finalize`` turns every ended window into its report: the aggregate (``aggregate``) randomized
with the version's mechanism, queued as one row whose ``ReportBatch.window`` names the window,
charged to the privacy ledger under that window (``reports_per_window = 1``), and the aggregate
deleted — one SQLite transaction, so a window is reported once also across kill -9. A window that
ended more than ``campaign_kinds.late_seconds`` ago, or whose campaign the collector no longer
takes, is dropped and counted (``health().dropped``: ``window_closed``, or the config's reason).
"""

from __future__ import annotations

import json
import logging
import numbers
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ldptel.campaigns.kinds import late_seconds
from ldptel.client.envelope import group_of
from ldptel.client.health import DropCounter
from ldptel.client.ledger import Charge, PrivacyLedger
from ldptel.client.queue import ReportQueue
from ldptel.keys import window_start
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.builder import DEVICE_LEVEL_KINDS, value_index
from ldptel.mechanisms.claims import report_cost

log = logging.getLogger("ldptel.client")

SCHEMA = """
CREATE TABLE IF NOT EXISTS device_windows (
    campaign TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    version INTEGER NOT NULL,
    dimensions TEXT NOT NULL DEFAULT '[]',
    events REAL NOT NULL DEFAULT 0,
    counts TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (campaign, window_start)
);
"""
DELETE = "DELETE FROM device_windows WHERE campaign = ? AND window_start = ?"
TOUCHED_KINDS = ("unique_devices", "per_device_count")  # devices without an event report too


def is_device_level(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("kind") in DEVICE_LEVEL_KINDS


def increment(cfg: Mapping[str, Any], value: Any, count: bool | None = None) -> float:
    """What one ``report(campaign, value)`` adds to the window's ``events``: 1, or for
    ``per_device_count`` (``count``: whatever the kind, as ``simulated`` reads a number of
    events) the number ``value`` (≥ 0, NumPy numbers too; ``ValueError`` naming the campaign and
    its kind)."""
    if not (cfg.get("kind") == "per_device_count" if count is None else count):
        return 1.0
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not float(value) >= 0:
        raise ValueError(f"campaign {cfg['name']!r}: a {cfg.get('kind')} value is the number of events "
                         f"to add (a number >= 0), got {value!r}")
    return float(value)


def event_key(cfg: Mapping[str, Any], value: Any) -> str | None:
    """The key under which a ``per_device_histogram`` event of ``value`` is counted in the
    window's ``counts``: its label (a campaign with ``domain``) or its index as a string; None for
    the other kinds. ``ValueError`` naming the campaign for a value outside the domain."""
    if cfg.get("kind") != "per_device_histogram":
        return None
    index = value_index(cfg, value)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < int(cfg["domain_size"]):
        raise ValueError(f"campaign {cfg['name']!r}: value {value!r} is not in its domain")
    return str(cfg["domain"][index]) if cfg.get("domain") else str(index)


def aggregate(kind: str, events: float, counts: Mapping[str, int], labels: Sequence[Any] | None) -> Any:
    """The value a window's report randomizes: ``unique_devices`` 1 if any event else 0;
    ``per_device_histogram`` the most common value (ties: the first seen; its index in
    ``labels`` when the campaign has labels); ``per_device_count`` the events (the mechanism
    clips them to [0, upper])."""
    if kind == "unique_devices":
        return 1 if events > 0 else 0
    if kind == "per_device_count":
        return float(events)
    best = max(counts, key=lambda k: counts[k])  # max keeps the first of equal counts
    return labels.index(best) if labels is not None else int(best)


def simulated(cfg: Mapping[str, Any], value: Any) -> Any:
    """One simulated device's window for ``report_many``: ``value`` is its number of events
    (``unique_devices``, ``per_device_count``; a sequence counts as its length) or the values of
    its events (``per_device_histogram``: a sequence, or one value)."""
    kind = cfg["kind"]
    if kind == "per_device_histogram":
        events = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
        counts: dict[str, int] = {}
        for v in events:
            key = str(value_index(cfg, v))
            counts[key] = counts.get(key, 0) + 1
        return aggregate(kind, len(events), counts, None)
    n = len(value) if isinstance(value, (list, tuple, np.ndarray)) else value
    return aggregate(kind, increment(cfg, n, count=True), {}, None)


class DeviceClient(Protocol):
    """What the device windows use of their ``TelemetryClient``."""

    _dropped: DropCounter

    @property
    def queue(self) -> ReportQueue: ...

    @property
    def ledger(self) -> PrivacyLedger: ...

    def device_mechanism(self, campaign: str, version: int) -> tuple[dict[str, Any], Mechanism] | None: ...


class DeviceWindows:
    """The on-device aggregates of the device-level campaigns (see the module docstring)."""

    def __init__(self, client: DeviceClient) -> None:
        self.client = client
        self._ready = False

    def _db(self) -> ReportQueue:
        queue = self.client.queue
        if not self._ready:
            queue.execute_script(SCHEMA)
            self._ready = True
        return queue

    def record(self, campaign: str, cfg: Mapping[str, Any], value: Any, dims: list[tuple[str, str]],
               now: float) -> None:
        """Add one event of ``value`` to the current window's aggregate (storage errors raise)."""
        add = increment(cfg, value)
        key = event_key(cfg, value)
        window = window_start(now, int(cfg["window_seconds"]))
        with self._db().transaction() as db:
            row = db.execute("SELECT counts FROM device_windows WHERE campaign = ? AND window_start = ?",
                             (campaign, window)).fetchone()
            counts: dict[str, int] = json.loads(row[0]) if row else {}
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
            db.execute("INSERT INTO device_windows (campaign, window_start, version, dimensions, events, "
                       "counts) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (campaign, window_start) DO UPDATE "
                       "SET version = excluded.version, dimensions = excluded.dimensions, "
                       "events = events + excluded.events, counts = excluded.counts",
                       (campaign, window, int(cfg.get("version", 1)), json.dumps(dims), add,
                        json.dumps(counts)))

    def touch(self, configs: Mapping[str, Mapping[str, Any]], now: float,
              dims_of: Callable[[Mapping[str, Any]], list[tuple[str, str]]]) -> None:
        """Open the current window (no event) of every ``TOUCHED_KINDS`` campaign in ``configs``,
        with the dimension values ``dims_of(cfg)`` (the client's defaults)."""
        rows = [(name, window_start(now, int(cfg["window_seconds"])), int(cfg.get("version", 1)),
                 json.dumps(dims_of(cfg)))
                for name, cfg in configs.items()
                if cfg.get("kind") in TOUCHED_KINDS and cfg.get("status", "active") == "active"]
        if rows:
            with self._db().transaction() as db:
                db.executemany("INSERT OR IGNORE INTO device_windows (campaign, window_start, version, "
                               "dimensions) VALUES (?, ?, ?, ?)", rows)

    def pending_windows(self) -> int:
        return int(self._db().query("SELECT COUNT(*) FROM device_windows")[0][0])

    def finalize(self, now: float, campaign: str | None = None) -> int:
        """Queue the report of every window that ended by ``now`` (of ``campaign`` only, if given);
        returns how many were queued."""
        where, args = ("", ()) if campaign is None else (" WHERE campaign = ?", (campaign,))
        rows = self._db().query("SELECT campaign, window_start, version, dimensions, events, counts "
                                f"FROM device_windows{where} ORDER BY window_start", args)
        queued = 0
        for name, window, version, dims, events, counts in rows:
            built = self.client.device_mechanism(name, int(version))
            if built is None:  # no config for it now: kept (a later flush tries again)
                continue
            cfg, mech = built
            length = int(cfg["window_seconds"])
            if window + length > now:
                continue
            if now - (window + length) > late_seconds(length):
                self._forget(name, window, "window_closed", f"campaign {name!r}: the window of "
                             f"{window} ended more than {late_seconds(length)} s ago; its report is dropped")
                continue
            queued += self._report(name, window, cfg, mech, json.loads(dims), events, json.loads(counts))
        return queued

    def forget(self, campaign: str, reason: str, error: str) -> None:
        """Drop every aggregate of ``campaign`` (a campaign the collector no longer takes)."""
        for (window,) in self._db().query("SELECT window_start FROM device_windows WHERE campaign = ?",
                                          (campaign,)):
            self._forget(campaign, window, reason, error)

    def _forget(self, campaign: str, window: int, reason: str, error: str) -> None:
        with self._db().transaction() as db:
            db.execute(DELETE, (campaign, window))
        self.client._dropped.add(reason, 1, error)

    def _report(self, campaign: str, window: int, cfg: dict[str, Any], mech: Mechanism, dims: list[Any],
                events: float, counts: dict[str, int]) -> int:
        """Randomize one window's aggregate and queue it with its ledger charge, deleting the
        aggregate, in one transaction (a window with no event of a histogram: deleted, nothing
        sent)."""
        queue = self._db()
        if cfg["kind"] == "per_device_histogram" and not counts:
            with queue.transaction() as db:
                db.execute(DELETE, (campaign, window))
            return 0
        labels = [str(v) for v in cfg["domain"]] if cfg.get("domain") else None
        value = aggregate(cfg["kind"], events, counts, labels)
        batch = mech.encode(value, campaign=campaign)
        batch.batch_id, batch.window = b"", window
        for name, v in dims:
            batch.dimensions.add(name=name, value=v)
        charge = Charge(campaign, int(cfg.get("version", 1)), report_cost(cfg, mech), window, 1, b"")
        ledger = self.client.ledger

        def admit(db: sqlite3.Connection) -> bool:
            db.execute(DELETE, (campaign, window))
            why = ledger.admit(db, charge)
            if why is not None:
                self.client._dropped.add(why, 1, f"campaign {campaign!r}: the report of window {window} "
                                                 f"was refused ({why})")
            return why is None

        row = (campaign, 1, batch.SerializeToString(), int(cfg.get("version", 1)), group_of(batch))
        return 1 if queue.append_many([row], admit) else 0


__all__ = ["DeviceWindows", "aggregate", "event_key", "increment", "is_device_level", "simulated"]
