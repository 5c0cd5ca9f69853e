"""The aggregator worker: drains the campaigns' report streams into accumulator state, exactly once.

``ldptel aggregate --config FILE [--redis-url URL] [--once]`` runs one worker; any number may run
at once (consumer group ``aggregators`` on every (campaign, shard) stream, see ``ldptel.streams``).

Exactly-once design
-------------------
A commit is one Lua script on the keys of one (campaign, shard) — the stream and its state hash
share a hash tag. It (1) checks that every entry the worker decoded is still pending *to this
worker's consumer* (``XPENDING … id id 1 consumer``), (2) checks that every state field it read
still exists, then (3) deletes those fields, writes one new ``acc:<window>:<uid>`` field per window
holding their sum plus the new entries, bumps the counters and (4) ``XACK``s the entries — or, if
a check fails, changes nothing. State fields are immutable (each has a fresh uid), so "the field
still exists" means "it still holds what I read": a set of fields is replaced by their sum at most
once, and the state of a window is always the sum of its fields (``ldptel.aggregator.store``).
Which fields a commit folds in is size-tiered (``pick_fields``): for the fixed-size frequency
states that is all of them, so a window normally has one field.

Why nothing is lost or counted twice, wherever a worker or Redis dies:

- Before the script runs, nothing is written: the entries stay pending to the dead consumer and a
  later worker takes them over with ``XAUTOCLAIM`` once they are idle ``claim_idle_ms``.
- The script is atomic (also in the AOF), so state and XACK move together.
- A worker that was only slow, and whose entries another worker claimed meanwhile, fails check (1)
  and throws away its whole uncommitted delta; it then re-reads what is still pending to it.
  An entry is therefore added by exactly one commit: the one that acknowledged it.
- Two workers compacting the same window: the second fails check (2) and retries on fresh fields.
- Every consumer name is unique per process (``host:pid:random``), so two processes never
  believe they own the same pending entry.

Reads are ``XREADGROUP`` of up to ``read_count`` entries per stream; entries are grouped by their
``window`` field and decoded with the campaign's accumulator (vectorized per batch). On start a
worker loads and checks the stored state of every campaign (a state that no longer fits the
campaign's parameters stops it with a message), claims entries of dead consumers, and first
drains what is pending to itself. Acknowledged entries older than ``retention_seconds`` are
trimmed (``XTRIM MINID``, never past the oldest pending or undelivered entry); consumers of the
group that are idle and own no pending entry are removed.

Redis Cluster (``ldptel.redis_client``): every script above touches the keys of one (campaign,
shard) hash tag, so it runs on that shard's node. New entries are then read with one
``XREADGROUP`` per stream (one pipelined round trip; a multi-stream read would cross slots), and
when all are empty the worker blocks on one stream at a time, in turn, for at most
``CLUSTER_BLOCK_MS``. Each shard's stream has its own consumer group, so several workers share
the shards entry by entry, and the estimate is the sum over shards of the committed states
(``store.load_accumulator``): the same as one worker's.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis as redis_lib
from redis.exceptions import ClusterDownError, SlotNotCoveredError

from ldptel.aggregator import store
from ldptel.aggregator.decoders import Accumulator
from ldptel.config import Campaign, Config, load_config
from ldptel.proto import ReportBatch
from ldptel.redis_client import connect, is_cluster
from ldptel.streams import GROUP, state_key, stream_key

COMMIT_LUA = """
local group, consumer = ARGV[1], ARGV[2]
local n_ids, n_del, n_set, n_incr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local i = 7
local ids = {}
for _ = 1, n_ids do
  local id = ARGV[i]; i = i + 1
  if #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) == 0 then
    return {'lost', id}
  end
  ids[#ids + 1] = id
end
local dels = {}
for _ = 1, n_del do
  local f = ARGV[i]; i = i + 1
  if redis.call('HEXISTS', KEYS[2], f) == 0 then return {'stale', f} end
  dels[#dels + 1] = f
end
for _, f in ipairs(dels) do redis.call('HDEL', KEYS[2], f) end
for _ = 1, n_set do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]); i = i + 2
end
for _ = 1, n_incr do
  redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]); i = i + 2
end
local acked = 0
for s = 1, #ids, 1000 do
  acked = acked + redis.call('XACK', KEYS[1], group, unpack(ids, s, math.min(s + 999, #ids)))
end
return {'ok', tostring(acked)}
"""

# Remove a consumer only if it owns no pending entry (checked atomically with the removal).
DELCONSUMER_LUA = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
"""

# XAUTOCLAIM … JUSTID, returning (next cursor, number claimed) (redis-py drops the cursor).
AUTOCLAIM_LUA = """
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5], 'JUSTID')
return {r[1], #r[2]}
"""

TRIM_INTERVAL_S = 10.0
PROGRESS_INTERVAL_S = 2.0
COMPACT_RETRIES = 3
TIER_SLACK_BYTES = 64 * 1024  # savez headers, and small states always merge
ONCE_GIVE_UP_S = 60.0  # --once: give up when Redis stays unreachable this long
# errors after which the worker waits and retries (a cluster node down or slots not served)
UNAVAILABLE = (redis_lib.ConnectionError, redis_lib.TimeoutError, redis_lib.BusyLoadingError,
               ClusterDownError, SlotNotCoveredError)
CLUSTER_BLOCK_MS = 100  # Redis Cluster: longest block on one stream while all are empty


class StateMismatch(RuntimeError):
    """Stored state that does not fit a campaign's current parameters."""


@dataclass
class Slot:
    """One (campaign, shard) stream the worker consumes."""

    campaign: Campaign
    shard: int
    template: Accumulator
    history: bool = True  # entries may be pending to this consumer: read them before new ones

    def fresh(self) -> Accumulator:
        """An empty accumulator (sharing the template's mechanism object)."""
        return type(self.template)(self.template.mech)

    @property
    def stream(self) -> str:
        return stream_key(self.campaign.name, self.shard)

    @property
    def state(self) -> str:
        return state_key(self.campaign.name, self.shard)


@dataclass
class DrainStats:
    entries: int = 0
    reports: int = 0
    rejected: int = 0
    commits: int = 0
    lost: int = 0  # commits refused because another worker had claimed an entry
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        dt = max(self.elapsed, 1e-9)
        return (f"{self.entries} entries, {self.reports} reports in {dt:.1f} s "
                f"({self.reports / dt:,.0f} reports/s)"
                + (f", {self.rejected} rejected" if self.rejected else ""))


def new_consumer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Consumes every aggregatable campaign of ``config``. ``run()`` until stopped (or drained,
    with ``once``); ``step()`` does one read-decode-commit round."""

    def __init__(self, config: Config, r: redis_lib.Redis, consumer: str | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.cfg = config.aggregator
        self.r = r
        self.consumer = consumer or new_consumer_name()
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.stats = DrainStats()
        self.slots: list[Slot] = []
        for camp in config.campaigns:
            if not store.has_accumulator(camp):
                self.log(f"aggregate: campaign {camp.name!r} ({camp.kind}) has no aggregator yet; "
                         "its entries stay in the stream")
                continue
            template = store.new_accumulator(camp)
            self.slots.extend(Slot(camp, s, template) for s in range(camp.shards))
        self._commit = r.register_script(COMMIT_LUA)
        self._delconsumer = r.register_script(DELCONSUMER_LUA)
        self._autoclaim = r.register_script(AUTOCLAIM_LUA)
        self._last_claim = 0.0
        self._last_trim = time.monotonic()
        self._cluster = is_cluster(r)
        self._turn = 0  # Redis Cluster: which stream the next idle blocking read waits on

    # --- setup ------------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the groups, check the stored state, take over dead consumers' entries."""
        for slot in self.slots:
            try:
                self.r.xgroup_create(slot.stream, GROUP, id="0", mkstream=True)
            except redis_lib.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self.check_state(slot)
            slot.history = True
        self.claim_dead()
        self.remove_idle_consumers()

    def check_state(self, slot: Slot) -> None:
        """Decode every stored accumulator of the slot: state written under other campaign
        parameters (changed domain, ε, oracle) must not be merged silently."""
        for fld, data in self.r.hscan_iter(slot.state, match=f"{store.ACC_PREFIX}*", count=100):
            try:
                store.decode_accumulator(slot.campaign, data, slot.template)
            except (ValueError, OSError) as exc:
                raise StateMismatch(
                    f"campaign {slot.campaign.name!r}: stored state {slot.state} field "
                    f"{fld.decode()} does not fit the configured mechanism ({exc}); the campaign's "
                    "parameters changed — give it a new name or delete its state") from None

    def claim_dead(self) -> int:
        """``XAUTOCLAIM`` every entry pending for at least ``claim_idle_ms`` to any consumer."""
        claimed = 0
        for slot in self.slots:
            start = "0-0"
            while True:
                nxt, n = self._autoclaim(keys=[slot.stream], args=[
                    GROUP, self.consumer, self.cfg.claim_idle_ms, start, 1000])
                if n:
                    claimed += n
                    slot.history = True
                if nxt == b"0-0":
                    break
                start = nxt
        self._last_claim = time.monotonic()
        if claimed:
            self.log(f"aggregate: claimed {claimed} entries left pending by other consumers")
        return claimed

    def remove_idle_consumers(self) -> None:
        """Drop group consumers idle longer than ``claim_idle_ms`` that own no pending entry
        (a live one is re-created by its next read; nothing pending means nothing to lose)."""
        for slot in self.slots:
            try:
                consumers = self.r.xinfo_consumers(slot.stream, GROUP)
            except redis_lib.ResponseError:
                continue
            for c in consumers:
                name = c["name"].decode() if isinstance(c["name"], bytes) else c["name"]
                if name != self.consumer and c["pending"] == 0 and c["idle"] > self.cfg.claim_idle_ms:
                    self._delconsumer(keys=[slot.stream], args=[GROUP, name])

    # --- main loop --------------------------------------------------------------------------
    def run(self, once: bool = False, stop: threading.Event | None = None,
            progress: bool = False) -> DrainStats:
        """Consume until ``stop`` is set (or, with ``once``, until no entry is left that this
        worker may take). Connection errors are retried with backoff (commits are atomic, so a
        dropped connection at any point is harmless)."""
        stop = stop or threading.Event()
        self.stats = DrainStats()
        backoff = 0.1
        ready = False
        last_progress, last_entries = time.monotonic(), 0
        down_since: float | None = None
        while not stop.is_set():
            try:
                if not ready:
                    self.setup()
                    ready = True
                if not self.slots:  # nothing this worker can aggregate
                    if once:
                        break
                    stop.wait(self.cfg.block_ms / 1000)
                    continue
                n = self.step(block_ms=None if once else self.cfg.block_ms)
                backoff, down_since = 0.1, None
                self.housekeeping()
                if once and n == 0 and not any(slot.history for slot in self.slots):
                    break
            except UNAVAILABLE as exc:
                down_since = down_since or time.monotonic()
                if once and time.monotonic() - down_since > ONCE_GIVE_UP_S:
                    raise
                self.log(f"aggregate: redis unavailable ({exc}); retrying in {backoff:.1f} s")
                for slot in self.slots:
                    slot.history = True
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            except redis_lib.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self.log("aggregate: a consumer group vanished (Redis data reset?); setting up again")
                ready = False
                continue
            if (progress and time.monotonic() - last_progress > PROGRESS_INTERVAL_S
                    and self.stats.entries != last_entries):
                self.log(f"aggregate: {self.stats.line()}")
                last_progress, last_entries = time.monotonic(), self.stats.entries
        if ready:
            try:
                self.trim()
            except redis_lib.RedisError:
                pass
        return self.stats

    def housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_claim > min(max(self.cfg.claim_idle_ms / 2000.0, 0.05), 30.0):
            self.claim_dead()
        if now - self._last_trim > TRIM_INTERVAL_S:
            self.trim()
            self.remove_idle_consumers()
            self._last_trim = now

    def step(self, block_ms: int | None = None) -> int:
        """One round: entries pending to this consumer first, else new ones (blocking up to
        ``block_ms``). Returns the number of entries committed."""
        done = 0
        for slot in self.slots:
            if slot.history:
                resp = self.r.xreadgroup(GROUP, self.consumer, {slot.stream: "0"}, count=self.cfg.read_count)
                entries = resp[0][1] if resp else []
                if not entries:
                    slot.history = False
                else:
                    done += self.process(slot, entries)
        if done or not self.slots:
            return done
        by_stream = {slot.stream: slot for slot in self.slots}
        if self._cluster:
            resp = self.read_new_cluster(block_ms)
        else:
            resp = self.r.xreadgroup(GROUP, self.consumer, {k: ">" for k in by_stream},
                                     count=self.cfg.read_count, block=block_ms)
        for key, entries in resp or []:
            key = key.decode() if isinstance(key, bytes) else key
            if entries:
                done += self.process(by_stream[key], entries)
        return done

    def read_new_cluster(self, block_ms: int | None) -> list:
        """New entries of every stream on a Redis Cluster: one XREADGROUP per stream, pipelined;
        if all are empty and ``block_ms`` is set, block on one stream (in turn) for a short time."""
        pipe = self.r.pipeline(transaction=False)
        for slot in self.slots:
            pipe.xreadgroup(GROUP, self.consumer, {slot.stream: ">"}, count=self.cfg.read_count)
        resp = [item for res in pipe.execute() for item in (res or [])]
        if resp or not block_ms:
            return resp
        slot = self.slots[self._turn % len(self.slots)]
        self._turn += 1
        return self.r.xreadgroup(GROUP, self.consumer, {slot.stream: ">"}, count=self.cfg.read_count,
                                 block=min(block_ms, CLUSTER_BLOCK_MS)) or []

    # --- decode and commit ------------------------------------------------------------------
    def decode(self, slot: Slot, entries: list) -> tuple[dict[int, Accumulator], dict[int, int], int]:
        """Entries → (accumulator delta per window, entries per window, rejected entries).

        An entry that does not decode is counted as rejected, logged, and acknowledged with the
        rest (it stays in the stream until retention trims it)."""
        deltas: dict[int, Accumulator] = {}
        n_entries: dict[int, int] = {}
        good: dict[int, list[ReportBatch]] = {}
        rejected = 0
        for eid, fields in entries:
            if not fields:  # pending entry whose data is gone (cannot happen with our trimming)
                rejected += 1
                self.log(f"aggregate: {slot.stream} entry {eid!r} has no data; skipped")
                continue
            try:
                window = int(fields[b"window"])
                batch = ReportBatch.FromString(fields[b"batch"])
            except Exception as exc:  # KeyError, ValueError, protobuf's DecodeError
                rejected += 1
                self.log(f"aggregate: {slot.stream} entry {eid!r} unreadable ({exc}); skipped")
                continue
            acc = deltas.get(window)
            if acc is None:
                acc = deltas[window] = slot.fresh()
            try:
                acc.add(batch)
            except Exception as exc:  # a bad batch must not stop the worker
                rejected += 1
                self.log(f"aggregate: {slot.stream} entry {eid!r} does not decode ({exc}); skipped")
                # add() may have changed part of the state: rebuild this window from good batches
                deltas[window] = slot.fresh()
                for b in good.get(window, []):
                    deltas[window].add(b)
                continue
            good.setdefault(window, []).append(batch)
            n_entries[window] = n_entries.get(window, 0) + 1
        return deltas, n_entries, rejected

    def process(self, slot: Slot, entries: list) -> int:
        """Decode and commit ``entries`` (all pending to this consumer). On a lost entry the
        delta is dropped and the slot re-reads what is still pending to it."""
        ids = [eid for eid, _ in entries]
        deltas, n_entries, rejected = self.decode(slot, entries)
        reports = sum(acc.n for acc in deltas.values())
        if not self.commit(slot, ids, deltas, n_entries, rejected):
            self.stats.lost += 1
            slot.history = True
            return 0
        self.stats.entries += len(ids)
        self.stats.reports += reports
        self.stats.rejected += rejected
        self.stats.commits += 1
        return len(ids)

    def commit(self, slot: Slot, ids: list, deltas: dict[int, Accumulator], n_entries: dict[int, int],
               rejected: int) -> bool:
        """Merge ``deltas`` into the stored state and acknowledge ``ids``, atomically.

        Returns False (nothing written) if an entry is no longer pending to this consumer."""
        now_ms = str(int(time.time() * 1000))
        incr: list = []
        for w, acc in deltas.items():
            incr += [f"n:{w}", acc.n, f"entries:{w}", n_entries.get(w, 0)]
        if rejected:
            incr += ["rejected", rejected]
        for attempt in range(COMPACT_RETRIES + 1):
            compact = attempt < COMPACT_RETRIES
            dels: list[bytes] = []
            sets: list = []
            fields = self.r.hkeys(slot.state) if compact and deltas else []
            for w, acc in deltas.items():
                total = acc
                old = self.pick_fields(slot, [f for f in fields if store.field_window(f) == w], acc)
                if old:
                    total = slot.fresh().merge(acc)
                    for f, data in zip(old, self.r.hmget(slot.state, old), strict=True):
                        if data is None:
                            continue  # replaced meanwhile by another worker's field: left alone
                        total.merge(store.decode_accumulator(slot.campaign, data, slot.template))
                        dels.append(f)
                sets += [store.acc_field(w, secrets.token_hex(8)), total.to_bytes(), f"updated:{w}", now_ms]
            args = [GROUP, self.consumer, len(ids), len(dels), len(sets) // 2, len(incr) // 2,
                    *ids, *dels, *sets, *incr]
            status = self._commit(keys=[slot.stream, slot.state], args=args)[0]
            if status == b"ok":
                return True
            if status == b"lost":
                return False
            # b"stale": another worker compacted this window meanwhile; read again
        raise RuntimeError("commit without compaction cannot be stale")  # pragma: no cover

    def pick_fields(self, slot: Slot, fields: list[bytes], delta: Accumulator) -> list[bytes]:
        """The stored fields of a window to fold into this commit's new field: smallest first, while
        a field is at most twice the size gathered so far (size-tiered). Fixed-size states (every
        frequency oracle) thus always end up as one field per window; a state that grows with
        the reports keeps O(log N) fields and is rewritten O(log N) times, not on every commit."""
        if not fields:
            return []
        pipe = self.r.pipeline(transaction=False)
        for f in fields:
            pipe.hstrlen(slot.state, f)
        gathered = sum(a.nbytes for a in delta.state.values())
        chosen = []
        for size, f in sorted(zip(pipe.execute(), fields, strict=True)):
            if size == 0:
                continue  # already replaced by another worker
            if size > 2 * gathered + TIER_SLACK_BYTES:
                break
            chosen.append(f)
            gathered += size
        return chosen

    # --- retention --------------------------------------------------------------------------
    def trim(self) -> int:
        """Trim entries older than ``retention_seconds`` that are acknowledged: MINID is the
        smallest of the retention cutoff, the oldest pending entry and the first undelivered
        one. Returns the number of entries removed."""
        sec, usec = self.r.time()
        cutoff_ms = sec * 1000 + usec // 1000 - self.cfg.retention_seconds * 1000
        bound = (max(cutoff_ms, 0), 0)
        removed = 0
        for slot in self.slots:
            try:
                groups = self.r.xinfo_groups(slot.stream)
            except redis_lib.ResponseError:
                continue
            minid = bound
            for g in groups:
                ms, seq = _parse_id(g["last-delivered-id"])
                minid = min(minid, (ms, seq + 1))
                if g.get("pending", 0):
                    lowest = self.r.xpending(slot.stream, g["name"])["min"]
                    if lowest is not None:
                        minid = min(minid, _parse_id(lowest))
            if minid > (0, 0):
                removed += self.r.xtrim(slot.stream, minid=f"{minid[0]}-{minid[1]}", approximate=False)
        return removed


def _parse_id(eid: bytes | str) -> tuple[int, int]:
    s = eid.decode() if isinstance(eid, bytes) else eid
    ms, _, seq = s.partition("-")
    return int(ms), int(seq or 0)


def run_aggregate(args: argparse.Namespace) -> int:
    """``ldptel aggregate``: one worker; ``--once`` drains, prints what it did, exits 0."""
    config = load_config(args.config)
    url = args.redis_url or os.environ.get("REDIS_URL")
    if not url:
        print("ldptel aggregate: no Redis: pass --redis-url or set REDIS_URL "
              "(the embedded Redis runs with `ldptel serve`)", file=sys.stderr)
        return 2
    try:
        r = connect(url, socket_timeout=config.aggregator.block_ms / 1000 + 60)
    except (redis_lib.RedisError, redis_lib.RedisClusterException) as exc:
        print(f"ldptel aggregate: cannot connect to {url}: {exc}", file=sys.stderr)
        return 1
    worker = Worker(config, r)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if not args.once:
        print(f"ldptel aggregate: consumer {worker.consumer} on "
              f"{len(worker.slots)} stream(s) of {url}", flush=True)
    try:
        stats = worker.run(once=args.once, stop=stop, progress=True)
    except StateMismatch as exc:
        print(f"ldptel aggregate: {exc}", file=sys.stderr)
        return 2
    except redis_lib.RedisError as exc:
        print(f"ldptel aggregate: redis error: {exc}", file=sys.stderr)
        return 1
    print(f"ldptel aggregate: drained {stats.line()}", flush=True)
    return 0


class BackgroundAggregator:
    """A worker in a daemon thread (``ldptel serve``/``demo`` run one beside the collector).
    ``stop()`` finishes the current commit and joins."""

    def __init__(self, config: Config, redis_url: str, log: Callable[[str], None] | None = None) -> None:
        r = connect(redis_url, socket_timeout=config.aggregator.block_ms / 1000 + 60)
        self.worker = Worker(config, r, log=log)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ldptel-aggregator", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.worker.run(stop=self._stop)
        except BaseException as exc:  # noqa: BLE001 - surfaced through .error
            self.error = exc
            self.worker.log(f"aggregate: worker stopped: {exc!r}")

    def start(self) -> BackgroundAggregator:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()


class AggregatorProcess:
    """``ldptel aggregate`` as a child process (what ``ldptel serve`` runs beside gunicorn: a
    separate process, so gunicorn's forks never copy a running worker thread). ``stop()`` sends
    SIGTERM — the worker finishes its current commit — and waits."""

    def __init__(self, config_path: str, redis_url: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "ldptel.cli", "aggregate",
                                      "--config", str(config_path), "--redis-url", redis_url])

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def is_alive(self) -> bool:
        return self.proc.poll() is None


def start_beside_collector(config: Config, redis_url: str) -> AggregatorProcess | BackgroundAggregator:
    """The ``ldptel serve`` hook (embedded Redis): an aggregator running next to the collector
    until ``stop()``. A child ``ldptel aggregate`` process when the config came from a file, else
    a thread."""
    if config.path is not None:
        return AggregatorProcess(str(config.path), redis_url)
    return BackgroundAggregator(config, redis_url).start()
