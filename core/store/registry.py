"""The campaign registry in Redis: every campaign's versions, status and history, changed
without a restart. The registry is the source of truth once a campaign is in it.

- ``ldptel serve`` at start applies the TOML file only to the campaigns the registry does not
  hold (``apply(…, only_new=True)``) and reports the drift of the others; ``ldptel campaigns
  apply --config FILE`` applies the file to every campaign it names (``--dry-run`` prints the
  drift, nothing written; a campaign changed through the admin API since the last apply is
  refused without ``--force``);
- the admin API and ``ldptel campaigns set`` change one campaign live (``put``, ``patch``: some
  keys of the latest table, ``set_status``, ``rollback``).

Every write builds the campaign's complete new record, checks it whole
(``registry_records.check_record``: every version, every cross-version rule, the device
answer's size) and writes it with one compare-and-set (``scripts.REGISTRY_PUT``), which also
appends the change to the campaign's history (``history``) and bumps
``keys.REGISTRY_REVISION_KEY``; a refused change raises ``ConfigError`` naming the key and writes
nothing. Nothing is ever deleted (a retired campaign stays, refusing reports, and its estimates
stay readable). Record layout and the kinds of keys: ``ldptel.campaigns.records``.

Every collector worker and aggregator reads the revision at most every ``RELOAD_INTERVAL_S`` and
reloads the campaigns when it changed (``Live``). A record that cannot be read (an older ldptel
wrote it, or a hand edit) quarantines that campaign alone (``Config.broken``: name → reason); the
others serve, and the next successful write repairs it.
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
from typing import Any, cast

import redis as redis_lib

from ldptel import keys
from ldptel.campaigns.config import (
    CAMPAIGN_STATUSES,
    Campaign,
    Config,
    ConfigError,
    ShufflerConfig,
    check_file_rules,
    parse_campaign,
    with_token_default,
)
from ldptel.campaigns.records import (
    DERIVED_KEYS,
    Applied,
    Change,
    check_record,
    drift,
    entry,
    entry_bytes,
    identity,
    parse_stored,
    pin_missing,
    put_table,
    readable,
    readable_versions,
    rollback_table,
    stamp_unreadable,
    versions_of,
    where,
)
from ldptel.store import scripts
from ldptel.store.redis_client import AnyRedis

log = logging.getLogger("ldptel.store.registry")

RELOAD_INTERVAL_S = 0.5  # how often a process reads the registry's revision
CAS_RETRIES = 20
HISTORY_SHOWN = 1000  # the most recent entries ``history`` returns

__all__ = ["DERIVED_KEYS", "Applied", "Change", "Live", "apply", "history", "identity", "load", "patch",
           "put", "readable_versions", "record", "revision", "rollback", "set_status", "stop_pollers",
           "versions_of"]


# --- Redis ---------------------------------------------------------------------------------

def load(r: AnyRedis) -> tuple[int, dict[str, dict[str, Any]]]:
    """(revision, records by name); (0, {}) for an empty registry."""
    pipe = r.pipeline(transaction=False)
    pipe.get(keys.REGISTRY_REVISION_KEY)
    pipe.hgetall(keys.REGISTRY_KEY)
    rev, raw = pipe.execute()
    records = {k.decode(): parse_stored(k.decode(), v) for k, v in cast(dict[bytes, bytes], raw).items()}
    return int(rev or 0), records


def revision(r: AnyRedis) -> int:
    return int(cast(bytes | None, r.get(keys.REGISTRY_REVISION_KEY)) or 0)


def record(r: AnyRedis, name: str) -> dict[str, Any] | None:
    raw = cast(bytes | None, r.hget(keys.REGISTRY_KEY, name))
    return None if raw is None else parse_stored(name, raw)


def history(r: AnyRedis, name: str) -> list[dict[str, Any]]:
    """The campaign's changes, oldest first (the last ``HISTORY_SHOWN``)."""
    raw = cast(list[bytes], r.lrange(keys.registry_history_key(name), -HISTORY_SHOWN, -1))
    return [json.loads(x) for x in raw]


def _others(r: AnyRedis, name: str, now: float) -> dict[str, int]:
    """Device-answer bytes of every other readable campaign (``registry_records.entry_bytes``)."""
    out = {}
    for other, rec in load(r)[1].items():
        if other != name and rec.get("status") != "retired":
            try:
                out[other] = entry_bytes(readable_versions(rec), now)
            except ConfigError:
                continue
    return out


Write = tuple[dict[str, Any] | None, dict[str, Any] | None, Any]  # (new record, history entry, result)


def _update(r: AnyRedis, name: str, change: Any, shuffler: ShufflerConfig | None = None) -> Any:
    """Compare-and-set loop: ``change(record or None, raw)`` → (new record or None to write
    nothing, history entry, result). The new record is checked whole (``check_record``) before
    the one write; ``ConfigError`` (nothing written) when it breaks a rule."""
    for _ in range(CAS_RETRIES):
        raw = cast(bytes | None, r.hget(keys.REGISTRY_KEY, name))
        new, hist, result = change(None if raw is None else parse_stored(name, raw))
        if new is None:
            return result
        check_record(new, _others(r, name, time.time()), time.time(), shuffler)
        ok = scripts.of(r).call("REGISTRY_PUT", keys=[keys.REGISTRY_KEY, keys.REGISTRY_REVISION_KEY,
                                                      keys.registry_history_key(name)],
                                args=[name, b"" if raw is None else raw, json.dumps(new, sort_keys=True),
                                      json.dumps(hist, sort_keys=True)])
        if ok:
            return result
    raise RuntimeError(f"campaign {name!r} changed {CAS_RETRIES} times while being updated")


def _put_change(table: Mapping[str, Any], when: float, by: str, via: str, action: str | None = None,
                **detail: Any):
    """The ``_update`` function of putting ``table`` (``action``: the history's name for it)."""
    def change(rec: dict[str, Any] | None) -> Write:
        new, ch, what = put_table(rec, table, when)
        if ch.action == "unchanged":
            return None, None, ch
        repaired = stamp_unreadable(new, rec)
        pin_missing(new)  # versions written before plans were pinned (registry_records)
        kept = via == "cli" and bool(rec and rec.get("admin_since_apply"))
        new["admin_since_apply"] = via == "admin" or kept
        hist = entry(action or ch.action, ch.version, by, via, when, changed=what, repaired=repaired,
                     **detail)
        return new, hist, ch

    return change


def put(r: AnyRedis, table: Mapping[str, Any], now: float | None = None, by: str = "unknown",
        via: str = "cli", shuffler: ShufflerConfig | None = None) -> Change:
    """Create or update one campaign from its table (``registry_records.put_table``), checked whole;
    ``ConfigError`` names a bad key. ``by``/``via``: who, through what (the history)."""
    name = table.get("name")
    if not isinstance(name, str):
        parse_campaign(dict(table), "campaigns[?]")  # raises the ConfigError naming "name"
    when = time.time() if now is None else now
    return cast(Change, _update(r, cast(str, name), _put_change(table, when, by, via), shuffler))


def rollback(r: AnyRedis, name: str, to: int, by: str = "unknown", via: str = "cli",
             shuffler: ShufflerConfig | None = None) -> Change | None:
    """Make a new version equal to version ``to`` (``registry_records.rollback_table``); None for
    an unknown campaign, ``ConfigError`` for an unknown or unreadable version."""
    when = time.time()

    def change(rec: dict[str, Any] | None) -> Write:
        if rec is None:
            return None, None, None
        return cast("Write", _put_change(rollback_table(rec, to), when, by, via, "rollback", to=to)(rec))

    return cast(Change | None, _update(r, name, change, shuffler))


def patch(r: AnyRedis, name: str, changes: Mapping[str, Any], now: float | None = None, by: str = "unknown",
          via: str = "cli", shuffler: ShufflerConfig | None = None) -> Change | None:
    """Change some keys of a campaign's latest table (the others as they are; ``put`` of the
    merged table); None if the registry has no such campaign. ``ConfigError`` names a bad key."""
    if "name" in changes and changes["name"] != name:
        raise ConfigError(f"{where(name)}.name: cannot change (create a new campaign instead)")
    when = time.time() if now is None else now

    def change(rec: dict[str, Any] | None) -> Write:
        if rec is None or not readable(rec):
            return None, None, None
        table = {**readable(rec)[-1]["table"], **changes, "name": name}
        return cast("Write", _put_change(table, when, by, via)(rec))

    return cast(Change | None, _update(r, name, change, shuffler))


def set_status(r: AnyRedis, name: str, status: str, reason: str | None = None, by: str = "unknown",
               via: str = "cli") -> dict[str, Any] | None:
    """Pause, resume (``active``) or retire a campaign; the new record (None if unknown).
    ``reason`` None keeps the current reason when the status does not change (pausing a paused
    campaign again without a reason keeps why it was paused), else clears it."""
    if status not in CAMPAIGN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(CAMPAIGN_STATUSES)}, got {status!r}")
    when = time.time()

    def change(rec: dict[str, Any] | None) -> Write:
        if rec is None:
            return None, None, None
        why = reason if reason is not None else rec.get("reason", "") if rec.get("status") == status else ""
        rec = {**rec, "status": status, "reason": why, "updated_at": when}
        last = int(rec["versions"][-1]["version"]) if rec["versions"] else 0
        return rec, entry(status, last, by, via, when, reason=why or None), rec

    return cast(dict[str, Any] | None, _update(r, name, change))


def apply(r: AnyRedis, campaigns: Iterable[Mapping[str, Any]], by: str = "unknown", via: str = "apply",
          only_new: bool = False, dry_run: bool = False, force: bool = False,
          shuffler: ShufflerConfig | None = None) -> Applied:
    """Apply the file's ``[[campaigns]]`` tables. Every table is planned and checked whole
    before any is written (``ConfigError`` naming the key: nothing written). ``only_new``
    (``serve``'s start): only campaigns the registry does not hold are written, the others'
    drift is reported. Otherwise a campaign changed through the admin API since the last apply
    is refused (``Applied.refused``, nothing written at all) unless ``force``; ``dry_run``
    writes nothing. Campaigns of the registry the file does not name are left alone."""
    tables = list(campaigns)
    now = time.time()
    current = load(r)[1]
    out = Applied()
    todo = []
    for table in tables:
        name = str(table.get("name"))
        rec = current.get(name)
        if rec is not None:
            diff = drift(rec, table)
            if diff:
                out.drift[name] = diff
            try:
                latest = readable_versions(rec)[-1]
                if shuffler is not None:
                    check_file_rules(latest, shuffler)
            except ConfigError as exc:
                out.broken[name] = str(exc)
            if only_new:
                out.kept.append(name)
                continue
            if diff and rec.get("admin_since_apply") and not force:
                out.refused.append(name)
        new, ch, _ = put_table(rec, table, now)  # each table alone, then the record whole
        if ch.action != "unchanged":
            stamp_unreadable(new, rec)
            check_record(new, {}, now, shuffler)
        todo.append(table)
        out.changes.append(ch)
    if dry_run or out.refused:
        return out
    out.changes = [cast(Change, _update(r, str(t["name"]), _put_change(t, now, by, via), shuffler))
                   for t in todo]
    for name in [str(t["name"]) for t in todo]:
        if name in current and current[name].get("admin_since_apply"):
            _clear_admin_mark(r, name, by, via)
    return out


def _clear_admin_mark(r: AnyRedis, name: str, by: str, via: str) -> None:
    """After an apply (forced, or unchanged): the registry agrees with the file again."""
    for _ in range(CAS_RETRIES):
        raw = cast(bytes | None, r.hget(keys.REGISTRY_KEY, name))
        if raw is None:
            return
        rec = parse_stored(name, raw)
        if not rec.get("admin_since_apply"):
            return
        rec["admin_since_apply"] = False
        hist = entry("applied", int(rec["versions"][-1]["version"]), by, via, time.time())
        if scripts.of(r).call("REGISTRY_PUT", keys=[keys.REGISTRY_KEY, keys.REGISTRY_REVISION_KEY,
                                                    keys.registry_history_key(name)],
                              args=[name, raw, json.dumps(rec, sort_keys=True), json.dumps(hist)]):
            return


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
        """Swap in the campaigns of ``records``; a record that cannot be read quarantines that
        campaign alone (``Config.broken``, logged once per reason): not served, not counted,
        its batches answered 503 until a write repairs it."""
        latest: list[Campaign] = []
        history: dict[str, list[Campaign]] = {}
        broken: dict[str, str] = {}
        seen = set()
        for camp in self.file_campaigns:
            rec = records.get(camp.name)
            if rec is None:
                latest.append(camp)
            seen.add(camp.name)
        for name in [*[c.name for c in self.file_campaigns if c.name in records],
                     *sorted(n for n in records if n not in seen)]:
            try:
                versions = readable_versions(records[name])
                check_file_rules(versions[-1], self.config.shuffler)  # the file's rules, at start too
            except ConfigError as exc:  # a record this version of ldptel cannot read, or breaking them
                broken[name] = str(exc)
                if self.config.broken.get(name) != str(exc):
                    log.error("campaign registry: campaign %r quarantined (%s); the other campaigns "
                              "serve; an admin PUT or `ldptel campaigns apply` repairs it", name, exc)
                continue
            latest.append(versions[-1])
            history[name] = versions[:-1]
        issuer = self.config.issuer is not None  # issue 37: require_tokens as parse_config defaults it
        latest = with_token_default(latest, issuer)
        history = {name: with_token_default(vs, issuer) for name, vs in history.items()}
        # one new snapshot, swapped in by one assignment: a reader holds either the old or the new
        self.config = dataclasses.replace(self.config, campaigns=latest, history=history, broken=broken)


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
        except Exception:
            log.exception("campaign registry refresh failed")
        live.polled.set()
        del live
        stopped.wait(interval)
