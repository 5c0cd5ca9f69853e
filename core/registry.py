"""The campaign registry in Redis: every campaign's versions and status, changed without a restart.

The TOML file stays the declarative source: ``ldptel campaigns apply --config FILE`` (and
``ldptel serve`` at start) diffs its ``[[campaigns]]`` tables against the registry and applies
them (``apply``); the admin API and ``ldptel campaigns set`` change one campaign live (``put``,
``patch``: some keys of the latest table, ``set_status``). Every
collector worker and aggregator reads the registry's revision at most every
``RELOAD_INTERVAL_S`` and reloads the campaigns when it changed (``Live``), so a change is seen
everywhere within about a second, without a restart.

One record per campaign (JSON in the hash ``keys.REGISTRY_KEY``, field = the name)::

    {"name", "status": "active" | "paused" | "retired", "reason", "updated_at",
     "versions": [{"version": 1, "table": {...}, "created_at", "superseded_at"}, ...]}

``table`` is the campaign's TOML table as given (validated by ``config.parse_campaign``). A change
of anything but ``config.IN_PLACE_KEYS`` (the randomization parameters, ``window``) appends version
n+1 and marks version n superseded; the in-place keys of the latest table apply to every version.
``shards`` cannot change (the streams are per shard). Every write is a compare-and-set of the
record (``scripts.REGISTRY_PUT``) that bumps ``keys.REGISTRY_REVISION_KEY``; nothing is ever
deleted (a retired campaign stays, refusing reports, and its estimates stay readable).

A process started from a TOML file sees that file's campaigns as version 1 until the registry
holds them; a campaign in the registry replaces the file's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis as redis_lib

from ldptel import keys, scripts
from ldptel.config import (
    CAMPAIGN_STATUSES,
    IN_PLACE_KEYS,
    Campaign,
    Config,
    ConfigError,
    parse_campaign,
)
from ldptel.redis_client import AnyRedis

log = logging.getLogger("ldptel.registry")

RELOAD_INTERVAL_S = 0.5  # how often a process reads the registry's revision
CAS_RETRIES = 20
DERIVED_KEYS = ("window_seconds",)  # public keys computed from others (not named as changed)


@dataclass
class Change:
    """What ``put`` / ``apply`` did to one campaign: ``action`` is ``created``, ``new_version``,
    ``updated`` (in-place keys only) or ``unchanged``; ``version`` the latest version after it."""

    name: str
    action: str
    version: int
    changed: list[str] = dataclasses.field(default_factory=list)  # keys that differ

    def line(self) -> str:
        what = f" ({', '.join(self.changed)})" if self.changed else ""
        return f"{self.name}: {self.action.replace('_', ' ')}, version {self.version}{what}"


def _where(name: str) -> str:
    return f"campaigns[{name}]"


def identity(campaign: Campaign) -> dict[str, Any]:
    """What makes a version: the public parameters (less the version number and any in-place
    key), the window and the shards."""
    out = {k: v for k, v in campaign.public().items() if k != "version" and k not in IN_PLACE_KEYS}
    return {**out, "window": campaign.window, "shards": campaign.shards}


def versions_of(record: Mapping[str, Any]) -> list[Campaign]:
    """The record's versions as ``Campaign`` objects, ascending (in-place keys and the status
    from the latest table)."""
    entries = record["versions"]
    latest_table = entries[-1]["table"]
    out = []
    for entry in entries:
        table = {**entry["table"], **{k: latest_table[k] for k in IN_PLACE_KEYS if k in latest_table}}
        for k in IN_PLACE_KEYS:
            if k not in latest_table:
                table.pop(k, None)
        camp = parse_campaign(table, _where(record["name"]))
        out.append(dataclasses.replace(camp, version=int(entry["version"]),
                                       superseded_at=entry.get("superseded_at"),
                                       status=record.get("status", "active"),
                                       reason=record.get("reason", "")))
    return out


def plan(record: Mapping[str, Any] | None, table: Mapping[str, Any], now: float
         ) -> tuple[dict[str, Any], Change]:
    """The record after putting ``table`` (a campaign's TOML table) and what changed;
    ``ConfigError`` naming the key for a bad table or a change of ``shards``."""
    name = table.get("name")
    new = parse_campaign(dict(table), f"campaigns[{name}]")
    if record is None:
        rec = {"name": new.name, "status": "active", "reason": "", "updated_at": now,
               "versions": [{"version": 1, "table": dict(table), "created_at": now, "superseded_at": None}]}
        return rec, Change(new.name, "created", 1)
    rec = json.loads(json.dumps(record))
    latest = versions_of(rec)[-1]
    before, after = identity(latest), identity(new)
    if before["shards"] != after["shards"]:
        raise ConfigError(f"{_where(new.name)}.shards: cannot change ({before['shards']} → "
                          f"{after['shards']}): the reports streams are per shard; create a new campaign")
    changed = sorted(k for k in set(before) | set(after)
                     if before.get(k) != after.get(k) and k not in DERIVED_KEYS)
    last = rec["versions"][-1]
    if changed:
        last["superseded_at"] = now
        version = latest.version + 1
        rec["versions"].append({"version": version, "table": dict(table), "created_at": now,
                                "superseded_at": None})
        rec["updated_at"] = now
        return rec, Change(new.name, "new_version", version, changed)
    in_place = [k for k in IN_PLACE_KEYS if last["table"].get(k) != table.get(k)]
    if not in_place:
        return rec, Change(new.name, "unchanged", latest.version)
    last["table"] = dict(table)
    rec["updated_at"] = now
    return rec, Change(new.name, "updated", latest.version, in_place)


# --- Redis ---------------------------------------------------------------------------------

def load(r: AnyRedis) -> tuple[int, dict[str, dict[str, Any]]]:
    """(revision, records by name); (0, {}) for an empty registry."""
    pipe = r.pipeline(transaction=False)
    pipe.get(keys.REGISTRY_REVISION_KEY)
    pipe.hgetall(keys.REGISTRY_KEY)
    rev, raw = pipe.execute()
    records = {k.decode(): json.loads(v) for k, v in cast(dict[bytes, bytes], raw).items()}
    return int(rev or 0), records


def revision(r: AnyRedis) -> int:
    return int(cast(bytes | None, r.get(keys.REGISTRY_REVISION_KEY)) or 0)


def record(r: AnyRedis, name: str) -> dict[str, Any] | None:
    raw = cast(bytes | None, r.hget(keys.REGISTRY_KEY, name))
    return None if raw is None else json.loads(raw)


def _swap(r: AnyRedis, name: str, old: bytes | None, new: dict[str, Any]) -> bool:
    return bool(scripts.of(r).call("REGISTRY_PUT", keys=[keys.REGISTRY_KEY, keys.REGISTRY_REVISION_KEY],
                       args=[name, b"" if old is None else old, json.dumps(new, sort_keys=True)]))


def _update(r: AnyRedis, name: str, change: Any) -> Any:
    """Compare-and-set loop: ``change(record or None)`` → (new record or None to skip, result)."""
    for _ in range(CAS_RETRIES):
        raw = cast(bytes | None, r.hget(keys.REGISTRY_KEY, name))
        new, result = change(None if raw is None else json.loads(raw))
        if new is None or _swap(r, name, raw, new):
            return result
    raise RuntimeError(f"campaign {name!r} changed {CAS_RETRIES} times while being updated")


def put(r: AnyRedis, table: Mapping[str, Any], now: float | None = None) -> Change:
    """Create or update one campaign from its table (``plan``); ``ConfigError`` names a bad key."""
    name = table.get("name")
    if not isinstance(name, str):
        parse_campaign(dict(table), "campaigns[?]")  # raises the ConfigError naming "name"
    when = time.time() if now is None else now

    def change(rec: dict[str, Any] | None) -> tuple[dict[str, Any] | None, Change]:
        new, ch = plan(rec, table, when)
        return (None if ch.action == "unchanged" else new), ch

    return cast(Change, _update(r, cast(str, name), change))


def patch(r: AnyRedis, name: str, changes: Mapping[str, Any], now: float | None = None) -> Change | None:
    """Change some keys of a campaign's latest table (the others as they are; ``put`` of the
    merged table); None if the registry has no such campaign. ``ConfigError`` names a bad key."""
    if "name" in changes and changes["name"] != name:
        raise ConfigError(f"{_where(name)}.name: cannot change (create a new campaign instead)")
    when = time.time() if now is None else now

    def change(rec: dict[str, Any] | None) -> tuple[dict[str, Any] | None, Change | None]:
        if rec is None:
            return None, None
        table = {**rec["versions"][-1]["table"], **changes, "name": name}
        new, ch = plan(rec, table, when)
        return (None if ch.action == "unchanged" else new), ch

    return cast(Change | None, _update(r, name, change))


def set_status(r: AnyRedis, name: str, status: str, reason: str | None = None) -> dict[str, Any] | None:
    """Pause, resume (``active``) or retire a campaign; the new record (None if unknown).
    ``reason`` None keeps the current reason when the status does not change (pausing a paused
    campaign again without a reason keeps why it was paused), else clears it."""
    if status not in CAMPAIGN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(CAMPAIGN_STATUSES)}, got {status!r}")

    def change(rec: dict[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        if rec is None:
            return None, None
        why = reason if reason is not None else rec.get("reason", "") if rec.get("status") == status else ""
        rec = {**rec, "status": status, "reason": why, "updated_at": time.time()}
        return rec, rec

    return cast(dict[str, Any] | None, _update(r, name, change))


def apply(r: AnyRedis, campaigns: Iterable[Mapping[str, Any]]) -> list[Change]:
    """``put`` every table (the file's ``[[campaigns]]``); all are validated before any is
    written. Campaigns of the registry that are not in the file are left as they are."""
    tables = list(campaigns)
    now = time.time()
    current = load(r)[1]
    for table in tables:
        plan(current.get(str(table.get("name"))), table, now)
    return [put(r, table, now) for table in tables]


# --- live configs --------------------------------------------------------------------------

class Live:
    """Keeps ``config``'s campaigns equal to the registry's (``refresh``): the file's campaigns
    that the registry does not hold stay as parsed; every campaign the registry holds is replaced
    by its versions (``Config.campaigns``: the latest, ``Config.history``: the older ones)."""

    def __init__(self, config: Config, r: AnyRedis, interval: float = RELOAD_INTERVAL_S) -> None:
        self.config, self.r, self.interval = config, r, interval
        self.file_campaigns = list(config.declared or config.campaigns)
        self.revision = 0
        self.loaded = False  # the registry was read at least once (else: the file's campaigns)
        self.failing = False  # the last read failed (logged once per outage)
        self.checked = -float("inf")
        self._lock = threading.Lock()
        self._poller: threading.Thread | None = None
        self._pid = 0
        self.stopped = threading.Event()  # ``stop``: the poller ends at its next wake-up
        self.polled = threading.Event()  # set after each read of the poller (``first_read``)

    def poll_in_background(self) -> bool:
        """Refresh every ``interval`` s on a daemon thread of this process (started once per
        process: a forked gunicorn worker starts its own), so no request waits on the registry,
        even when Redis hangs. True when it (re)started the poller: this process was not
        polling, so its campaigns may be old (``first_read`` waits, briefly, for its first read)."""
        if self._poller is not None and self._pid == os.getpid() and self._poller.is_alive():
            return False
        with self._lock:
            if self._poller is not None and self._pid == os.getpid() and self._poller.is_alive():
                return False
            self._pid = os.getpid()
            self.stopped.clear()
            self.polled.clear()
            _POLLING.add(self)
            self._poller = threading.Thread(target=_poll, name="ldptel-registry", daemon=True,
                                            args=(weakref.ref(self), self.interval, self.stopped))
            self._poller.start()
            return True

    def first_read(self, timeout: float = 0.25) -> bool:
        """Wait up to ``timeout`` s for the poller's first read of the registry (a worker's
        first request would otherwise answer from the campaigns it had when it was forked);
        never longer, so a request does not hang on a Redis that hangs. True if it read."""
        return self.polled.wait(timeout)

    def stop(self) -> None:
        """End the background poller (``refresh`` still works on call)."""
        self.stopped.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=self.interval + 5)

    def refresh(self, force: bool = False) -> bool:
        """Reload when the registry's revision changed (read at most every ``interval`` s unless
        ``force``, which also waits for a refresh under way); True if the campaigns changed.
        Redis errors keep the last campaigns."""
        if not force and time.monotonic() - self.checked < self.interval:
            return False
        if not self._lock.acquire(blocking=force):
            return False
        try:
            self.checked = time.monotonic()
            current = revision(self.r)
            self.failing = False
            if current == self.revision:
                self.loaded = True
                return False
            rev, records = load(self.r)
            self.install(records)
            self.revision, self.loaded = rev, True
            return True
        except redis_lib.RedisError as exc:
            if not self.failing:  # once per outage, not every interval
                log.warning("campaign registry unavailable (%s); keeping the campaigns known", exc)
            self.failing = True
            return False
        finally:
            self._lock.release()

    def install(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        latest: list[Campaign] = []
        history: dict[str, list[Campaign]] = {}
        seen = set()
        for camp in self.file_campaigns:
            rec = records.get(camp.name)
            if rec is None:
                latest.append(camp)
            seen.add(camp.name)
        for name in [*[c.name for c in self.file_campaigns if c.name in records],
                     *sorted(n for n in records if n not in seen)]:
            try:
                versions = versions_of(records[name])
            except ConfigError as exc:  # a record this version of ldptel cannot read
                log.error("campaign registry: %s; ignored", exc)
                continue
            latest.append(versions[-1])
            history[name] = versions[:-1]
        # one new snapshot, swapped in by one assignment: a reader holds either the old or the new
        self.config = dataclasses.replace(self.config, campaigns=latest, history=history)


_POLLING: weakref.WeakSet[Live] = weakref.WeakSet()  # every Live whose poller this process started


def stop_pollers() -> None:
    """``Live.stop`` on every poller of this process (before its Redis goes away, so none keeps
    reading and logging after shutdown)."""
    for live in list(_POLLING):
        live.stop()


def _poll(ref: weakref.ref[Live], interval: float, stopped: threading.Event) -> None:
    """``Live.poll_in_background``'s loop; it ends once its ``Live`` is gone (an app dropped) or
    ``stopped`` is set (``Live.stop``)."""
    while not stopped.is_set() and (live := ref()) is not None:
        try:
            live.refresh(force=not live.loaded)
        except Exception:  # noqa: BLE001 — the poller must outlive a bad record
            log.exception("campaign registry refresh failed")
        live.polled.set()
        del live
        stopped.wait(interval)
