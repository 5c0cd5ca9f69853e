"""The device's privacy ledger: what it has spent per campaign (and version), kept in the SDK's
SQLite file with the queue and written in the same transaction as the report it accounts for, so a
report is queued if and only if it is charged (also across kill -9).

Tables (in the queue file):

- ``ledger(campaign, version, reports, epsilon_reports, epsilon_memoized, memoized_values,
  refused, over_window, window_start, window_reports)`` — reports queued; Σ ε₁ of the fresh
  (not memoized) ones; Σ ε∞ charged for memoized values (each distinct value costs ε∞ once, the
  sum never above the mechanism's ``epsilon_lifetime``) and their number; reports refused by
  ``lifetime_epsilon``; ``report()`` calls beyond ``reports_per_window``; the last window's start
  (epoch s, UTC-aligned as ``keys.window_start``; 0 for ``"all"``) and reports queued in it (shown
  by ``snapshot``);
- ``ledger_windows(campaign, window_start, reports)`` — reports queued per campaign and window,
  for every window of the last ``WINDOWS_KEPT_S`` (at most ``WINDOWS_KEPT`` per campaign, the
  newest): the cap of ``reports_per_window`` reads it, so a device clock flipping between two
  days (or any windows) finds each window's own count and admits nothing extra (the ledger once
  kept the last window only, and a clock alternating today/yesterday admitted 10 of 10 reports);
- ``ledger_values(campaign, version, value_key)`` — the memoized values, as HMAC-SHA256 under a
  key derived from the device secret: never the raw value.

A campaign's spend is the sum over its versions; with ``scope = "device"`` the limit applies to the
sum over all campaigns. The window cap counts the reports of all versions of a campaign.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ldptel.client.queue import ReportQueue
from ldptel.keys import window_start
from ldptel.mechanisms.claims import Cost

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    campaign TEXT NOT NULL,
    version INTEGER NOT NULL,
    reports INTEGER NOT NULL DEFAULT 0,
    epsilon_reports REAL NOT NULL DEFAULT 0,
    epsilon_memoized REAL NOT NULL DEFAULT 0,
    memoized_values INTEGER NOT NULL DEFAULT 0,
    refused INTEGER NOT NULL DEFAULT 0,
    over_window INTEGER NOT NULL DEFAULT 0,
    window_start INTEGER NOT NULL DEFAULT -1,
    window_reports INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign, version)
);
CREATE TABLE IF NOT EXISTS ledger_windows (
    campaign TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    reports INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign, window_start)
);
CREATE TABLE IF NOT EXISTS ledger_values (
    campaign TEXT NOT NULL,
    version INTEGER NOT NULL,
    value_key BLOB NOT NULL,
    PRIMARY KEY (campaign, version, value_key)
);
"""
SCOPES = ("campaign", "device")
NO_CAP = 1 << 62  # reports per window of a config without ``reports_per_window`` (an older collector)
REFUSALS = {"reports_per_window": "its reports_per_window were sent in this window",
            "lifetime_epsilon": "it would take the privacy ledger past lifetime_epsilon"}
SPENT = "COALESCE(SUM(epsilon_reports + epsilon_memoized), 0)"
WINDOWS_KEPT_S = 400 * 86_400  # per-window counts older than this (before the newest) are dropped
WINDOWS_KEPT = 10_000  # and at most this many windows per campaign (the newest)
# ledger files written before ledger_windows: their last window's count carries over
MIGRATE_WINDOWS = ("INSERT OR IGNORE INTO ledger_windows (campaign, window_start, reports) "
                   "SELECT campaign, window_start, SUM(window_reports) FROM ledger WHERE window_start >= 0 "
                   "GROUP BY campaign, window_start")
TOLERANCE = 1e-9  # float sums of ε: a charge landing exactly on the limit is within it


@dataclass(frozen=True)
class Charge:
    """One report to account for: ``campaign`` (``version``), its ``cost``, the window it falls in
    and the campaign's ``reports_per_window``, and the keyed hash of its value (memoized costs)."""

    campaign: str
    version: int
    cost: Cost
    window_start: int
    per_window: int
    value_key: bytes


def check_limit(lifetime_epsilon: Any, scope: Any) -> tuple[float | None, str]:
    """``TelemetryClient``'s ``lifetime_epsilon`` (a positive number or None) and ``scope``, checked;
    ``ValueError`` naming the bad one."""
    if lifetime_epsilon is not None and (isinstance(lifetime_epsilon, bool) or not isinstance(
            lifetime_epsilon, (int, float)) or not lifetime_epsilon > 0):
        raise ValueError(f"lifetime_epsilon must be a positive number or None, got {lifetime_epsilon!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return (None if lifetime_epsilon is None else float(lifetime_epsilon)), scope


class PrivacyLedger:
    """Admits or refuses reports against ``reports_per_window`` and ``lifetime_epsilon`` (None: no
    limit), per campaign or (``scope = "device"``) over all campaigns."""

    def __init__(self, queue: ReportQueue, key: bytes, lifetime_epsilon: float | None = None,
                 scope: str = "campaign") -> None:
        self.queue, self.key = queue, key
        self.lifetime_epsilon, self.scope = check_limit(lifetime_epsilon, scope)
        fresh = not queue.query("SELECT name FROM sqlite_master WHERE name = 'ledger_windows'")
        queue.execute_script(SCHEMA)
        if fresh:
            queue.execute_script(MIGRATE_WINDOWS + ";")

    def value_key(self, campaign: str, value: Any) -> bytes:
        """HMAC-SHA256 of (campaign, value's type and text) under the device's ledger key."""
        text = f"{campaign}\0{type(value).__name__}\0{value}".encode()
        return hmac.new(self.key, text, hashlib.sha256).digest()

    def charge(self, campaign: str, cfg: Mapping[str, Any], cost: Cost, value: Any, now: float) -> Charge:
        """The ``Charge`` of one report of ``value`` at ``now`` (epoch s) to the campaign whose
        public config is ``cfg`` (``version``, default 1; ``window_seconds``, default 0 = "all";
        ``reports_per_window``, default: no cap, a collector older than this SDK)."""
        window = window_start(now, int(cfg.get("window_seconds", 0)))
        return Charge(campaign, int(cfg.get("version", 1)), cost, window,
                      int(cfg.get("reports_per_window", NO_CAP)),
                      self.value_key(campaign, value) if cost.memoized else b"")

    def guard(self, c: Charge, refused: Callable[[str], None]) -> Callable[[sqlite3.Connection], bool]:
        """``ReportQueue.append_many``'s guard admitting ``c``; ``refused(reason)`` on a refusal."""
        def admit(db: sqlite3.Connection) -> bool:
            reason = self.admit(db, c)
            if reason is not None:
                refused(reason)
            return reason is None

        return admit

    def admit(self, db: sqlite3.Connection, c: Charge) -> str | None:
        """Inside the queue's transaction: None and the charge recorded, or the reason of a
        refusal (``"reports_per_window"``, ``"lifetime_epsilon"``), counted."""
        db.execute("INSERT OR IGNORE INTO ledger (campaign, version) VALUES (?, ?)", (c.campaign, c.version))
        in_window = db.execute("SELECT COALESCE(SUM(reports), 0) FROM ledger_windows WHERE campaign = ? "
                               "AND window_start = ?", (c.campaign, c.window_start)).fetchone()[0]
        if in_window >= c.per_window:
            self._count(db, c, "over_window")
            return "reports_per_window"
        epsilon, new_value = self._epsilon(db, c)
        if epsilon and self.lifetime_epsilon is not None:
            where, args = ("", ()) if self.scope == "device" else (" WHERE campaign = ?", (c.campaign,))
            spent = db.execute(f"SELECT {SPENT} FROM ledger{where}", args).fetchone()[0]
            if spent + epsilon > self.lifetime_epsilon + TOLERANCE:
                self._count(db, c, "refused")
                return "lifetime_epsilon"
        if new_value:
            db.execute("INSERT OR IGNORE INTO ledger_values VALUES (?, ?, ?)",
                       (c.campaign, c.version, c.value_key))
            db.execute("UPDATE ledger SET epsilon_memoized = epsilon_memoized + ?, memoized_values = "
                       "memoized_values + 1 WHERE campaign = ? AND version = ?",
                       (epsilon, c.campaign, c.version))
        elif not c.cost.memoized:
            db.execute("UPDATE ledger SET epsilon_reports = epsilon_reports + ? WHERE campaign = ? "
                       "AND version = ?", (epsilon, c.campaign, c.version))
        db.execute("UPDATE ledger SET reports = reports + 1, window_reports = CASE WHEN window_start = ? "
                   "THEN window_reports + 1 ELSE 1 END, window_start = ? WHERE campaign = ? AND version = ?",
                   (c.window_start, c.window_start, c.campaign, c.version))
        db.execute("INSERT INTO ledger_windows (campaign, window_start, reports) VALUES (?, ?, 1) "
                   "ON CONFLICT (campaign, window_start) DO UPDATE SET reports = reports + 1",
                   (c.campaign, c.window_start))
        self._prune(db, c.campaign)
        return None

    def _prune(self, db: sqlite3.Connection, campaign: str) -> None:
        """Drop the campaign's window counts older than ``WINDOWS_KEPT_S`` before its newest
        window, and beyond the newest ``WINDOWS_KEPT``."""
        newest = db.execute("SELECT MAX(window_start) FROM ledger_windows WHERE campaign = ?",
                            (campaign,)).fetchone()[0]
        db.execute("DELETE FROM ledger_windows WHERE campaign = ? AND (window_start < ? OR window_start < "
                   "(SELECT window_start FROM ledger_windows WHERE campaign = ? ORDER BY window_start DESC "
                   "LIMIT 1 OFFSET ?))", (campaign, newest - WINDOWS_KEPT_S, campaign, WINDOWS_KEPT - 1))

    def _epsilon(self, db: sqlite3.Connection, c: Charge) -> tuple[float, bool]:
        """(what admitting ``c`` adds, whether its value is newly memoized): ε₁ for a fresh
        report; for a memoized one ε∞ when its value is new (0 for a value memoized already),
        capped so the campaign version's memoized total stays within ``epsilon_lifetime``."""
        if not c.cost.memoized:
            return c.cost.epsilon, False
        known = db.execute("SELECT 1 FROM ledger_values WHERE campaign = ? AND version = ? AND "
                           "value_key = ?", (c.campaign, c.version, c.value_key)).fetchone()
        if known is not None:
            return 0.0, False
        if c.cost.lifetime is None:
            return c.cost.epsilon, True
        spent = db.execute("SELECT epsilon_memoized FROM ledger WHERE campaign = ? AND version = ?",
                           (c.campaign, c.version)).fetchone()[0]
        return max(0.0, min(c.cost.epsilon, c.cost.lifetime - spent)), True

    def _count(self, db: sqlite3.Connection, c: Charge, column: str) -> None:
        db.execute(f"UPDATE ledger SET {column} = {column} + 1 WHERE campaign = ? AND version = ?",
                   (c.campaign, c.version))

    def snapshot(self) -> dict[str, Any]:
        """The ledger as a dict: ``scope``, ``lifetime_epsilon``, ``epsilon_spent`` (all campaigns),
        and per campaign ``epsilon_spent``, ``reports``, ``refused``, ``over_window`` and
        ``versions`` (per version: ``reports``, ``epsilon_reports``, ``epsilon_memoized``,
        ``memoized_values``, ``refused``, ``over_window``, ``window_start``, ``window_reports``)."""
        columns = ("reports", "epsilon_reports", "epsilon_memoized", "memoized_values", "refused",
                   "over_window", "window_start", "window_reports")
        rows = self.queue.query(f"SELECT campaign, version, {', '.join(columns)} FROM ledger "
                                "ORDER BY campaign, version")
        campaigns: dict[str, dict[str, Any]] = {}
        for campaign, version, *values in rows:
            entry = campaigns.setdefault(campaign, {"epsilon_spent": 0.0, "reports": 0, "refused": 0,
                                                    "over_window": 0, "versions": {}})
            row = dict(zip(columns, values, strict=True))
            entry["versions"][str(version)] = row
            entry["epsilon_spent"] += row["epsilon_reports"] + row["epsilon_memoized"]
            for name in ("reports", "refused", "over_window"):
                entry[name] += row[name]
        return {"scope": self.scope, "lifetime_epsilon": self.lifetime_epsilon,
                "epsilon_spent": sum(c["epsilon_spent"] for c in campaigns.values()),
                "campaigns": campaigns}
