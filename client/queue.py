"""The SDK's on-disk queue: randomized reports waiting to be sent, in one SQLite file.

Tables:

- ``reports(id, campaign, count, batch, chunk, version, grp)`` — ``batch`` is a serialized
  ``ReportBatch`` holding ``count`` already-randomized reports (one for ``report()``; raw values
  are never stored) under campaign version ``version``; ``chunk`` is NULL until the row is
  assigned to a chunk; ``grp`` is the row's envelope, its window and dimension values
  (``device_level.group_of``; empty for neither): a chunk holds rows of one ``grp`` only;
- ``chunks(id, campaign, batch_id, version, grp)`` — a group of rows of one campaign version (and
  one ``grp``) that is sent as one
  ``ReportBatch`` under a fixed random ``batch_id``. The assignment is committed *before* the
  first attempt, so every retry (also after a crash or restart) re-sends the same reports under
  the same id and the collector stores them once;
- ``meta(key, value)`` — the device secret (RAPPOR's memoized permanent randomized response must
  survive restarts) and the cached campaign configs;
- the privacy ledger's tables (``ldptel.client.ledger``), written in the same transaction as the
  report they account for.

WAL journal: a committed report survives the process being killed. One connection guarded by a
lock, so a ``ReportQueue`` can be shared by threads; several processes may share the file
(SQLite locking; at worst a chunk is sent twice and deduplicated by the collector).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

log = logging.getLogger("ldptel.client")
SCHEMA = """
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign TEXT NOT NULL,
    count INTEGER NOT NULL,
    batch BLOB NOT NULL,
    chunk INTEGER
);
CREATE INDEX IF NOT EXISTS reports_chunk ON reports (chunk, campaign, id);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign TEXT NOT NULL,
    batch_id BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""
# queue files written before campaign versions (and dimensions) get the columns: their rows are
# version 1, of no window or dimension
VERSION_COLUMNS = ("reports", "chunks")
INSERT_ROW = "INSERT INTO reports (campaign, count, batch, version, grp) VALUES (?, ?, ?, ?, ?)"
ADDED_COLUMNS = (("version", "INTEGER NOT NULL DEFAULT 1"), ("grp", "TEXT NOT NULL DEFAULT ''"))


def _name(url: str) -> str:
    return f"queue-{hashlib.sha256(url.encode()).hexdigest()[:12]}.sqlite"


def default_queue_path(url: str) -> Path:
    """``<user data dir>/ldptel/queue-<hash of url>.sqlite``: ``$XDG_DATA_HOME`` (default
    ``~/.local/share``) on Linux, ``~/Library/Application Support`` on macOS, ``%LOCALAPPDATA%``
    on Windows (``platformdirs.user_data_dir``). Not a cache directory: the file holds the device
    secret and the privacy ledger, which cleaners must not delete (a wipe once made a new device
    secret and charged ε again for a memoized value)."""
    return Path(platformdirs.user_data_dir("ldptel", appauthor=False)) / _name(url)


def legacy_queue_path(url: str) -> Path:
    """Where SDKs before the data directory kept the file: ``$XDG_CACHE_HOME/ldptel/…``."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ldptel"
    return base / _name(url)


def store_path(given: str | os.PathLike[str] | None, url: str) -> Path:
    """The SDK's file: ``given``, else ``default_queue_path(url)``, where an older SDK's file in
    the cache directory is moved first (``adopt_legacy``)."""
    if given:
        return Path(given)
    path = default_queue_path(url)
    if adopt_legacy(path, legacy_queue_path(url)):
        log.info("moved the SDK's file from the cache directory to %s", path)
    return path


def adopt_legacy(path: Path, legacy: Path) -> bool:
    """Move the file an older SDK kept at ``legacy`` (with its WAL and shared-memory files) to
    ``path`` if only the legacy one exists; True if moved (the device keeps its secret and ledger)."""
    if path.exists() or not legacy.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        old = legacy.with_name(legacy.name + suffix)
        if old.exists():
            shutil.move(str(old), str(path.with_name(path.name + suffix)))
    return True


@dataclass(frozen=True)
class Chunk:
    """Rows of one campaign version to send as one batch under ``batch_id``."""

    id: int
    campaign: str
    batch_id: bytes
    batches: list[bytes]  # serialized ReportBatch rows, in queue order
    count: int  # reports in all rows
    version: int = 1  # the campaign version the rows were randomized under
    group: str = ""  # the rows' window and dimension values (``device_level.group_of``)


class ReportQueue:
    """Thread-safe SQLite queue of randomized report rows (see module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # durable against process crashes
        self._db.executescript(SCHEMA)
        st = os.stat(self.path)
        self.identity = (st.st_dev, st.st_ino)  # the file this connection writes (``lost``)
        self._lost: str | None = None
        for table in VERSION_COLUMNS:
            columns = [row[1] for row in self._db.execute(f"PRAGMA table_info({table})")]
            for name, spec in ADDED_COLUMNS:
                if name not in columns:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {spec}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock (BEGIN IMMEDIATE; COMMIT, or ROLLBACK on error)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back already (disk full)
                    self._db.execute("ROLLBACK")
                raise

    # --- writing ------------------------------------------------------------------------------
    def append(self, campaign: str, count: int, batch: bytes) -> None:
        """Queue one row of ``count`` randomized reports (committed on return)."""
        self.append_many([(campaign, count, batch)])

    def append_many(self, rows: Iterable[tuple[Any, ...]],
                    guard: Callable[[sqlite3.Connection], bool] | None = None
                    ) -> bool:
        """Queue rows ``(campaign, count, batch[, version[, grp]])`` (version 1 and no group when
        left out) in one transaction. ``guard`` (the privacy ledger) runs first in the same
        transaction: when it returns False nothing is queued (what it wrote is committed)."""
        with self.transaction() as db:
            if guard is not None and not guard(db):
                return False
            db.executemany(INSERT_ROW, ((r[0], int(r[1]), r[2], int(r[3]) if len(r) > 3 else 1,
                                         r[4] if len(r) > 4 else "") for r in rows))
            return True

    def execute_script(self, script: str) -> None:
        """Run ``script`` (a schema of another table kept in this file, e.g. the ledger's)."""
        with self._lock:
            self._db.executescript(script)

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # --- chunks -------------------------------------------------------------------------------
    def next_chunk(self, max_reports: int, max_bytes: int | None = None,
                   skip: Collection[int] = (), skip_campaigns: Collection[str] = ()) -> Chunk | None:
        """The oldest chunk not yet delivered (other than those in ``skip`` and those of
        ``skip_campaigns``), or a new one: the oldest unassigned rows of one campaign (not of
        ``skip_campaigns``), at most ``max_reports`` reports and ``max_bytes`` bytes of rows (at
        least one row). None if nothing is left."""
        with self.transaction():
            return (self._open_chunk(set(skip), set(skip_campaigns))
                    or self._new_chunk(max_reports, max_bytes, set(skip_campaigns)))

    def _open_chunk(self, skip: set[int], skip_campaigns: set[str]) -> Chunk | None:
        for cid, campaign, batch_id, version, grp in self._db.execute(
                "SELECT id, campaign, batch_id, version, grp FROM chunks ORDER BY id").fetchall():
            if cid in skip or campaign in skip_campaigns:
                continue
            rows = self._db.execute("SELECT count, batch FROM reports WHERE chunk = ? ORDER BY id",
                                    (cid,)).fetchall()
            if not rows:  # emptied by another process
                self._db.execute("DELETE FROM chunks WHERE id = ?", (cid,))
                continue
            return Chunk(cid, campaign, bytes(batch_id), [bytes(b) for _, b in rows],
                         sum(n for n, _ in rows), int(version), grp)
        return None

    def _new_chunk(self, max_reports: int, max_bytes: int | None, skip_campaigns: set[str]) -> Chunk | None:
        names = sorted(skip_campaigns)
        first = self._db.execute(
            "SELECT campaign, version, grp FROM reports WHERE chunk IS NULL AND campaign NOT IN "
            f"({', '.join('?' * len(names))}) ORDER BY id LIMIT 1", names).fetchone()
        if first is None:
            return None
        campaign, version, grp = first
        picked: list[tuple[int, int, bytes]] = []
        total = size = 0
        for rid, n, b in self._db.execute(
                "SELECT id, count, batch FROM reports WHERE chunk IS NULL AND campaign = ? AND version = ? "
                "AND grp = ? ORDER BY id LIMIT ?", (campaign, version, grp, max(1, max_reports))):
            if picked and (total + n > max_reports or
                           (max_bytes is not None and size + len(b) > max_bytes)):
                break
            picked.append((rid, n, bytes(b)))
            total, size = total + n, size + len(b)
        batch_id = os.urandom(16)
        cur = self._db.execute("INSERT INTO chunks (campaign, batch_id, version, grp) VALUES (?, ?, ?, ?)",
                               (campaign, batch_id, version, grp))
        chunk_id = cur.lastrowid
        assert chunk_id is not None  # sqlite sets it on every successful INSERT
        self._db.executemany("UPDATE reports SET chunk = ? WHERE id = ?", ((chunk_id, r[0]) for r in picked))
        return Chunk(chunk_id, campaign, batch_id, [r[2] for r in picked], total, int(version), grp)

    def complete(self, chunk: Chunk) -> None:
        """Remove a delivered (or deliberately dropped) chunk and its reports."""
        with self.transaction():
            self._db.execute("DELETE FROM reports WHERE chunk = ?", (chunk.id,))
            self._db.execute("DELETE FROM chunks WHERE id = ?", (chunk.id,))

    def release(self, chunk: Chunk) -> None:
        """Return a chunk's rows to the queue unassigned (only for a chunk the collector refused
        as a whole, e.g. too large, so that it is regrouped under a new batch_id)."""
        with self.transaction():
            self._db.execute("UPDATE reports SET chunk = NULL WHERE chunk = ?", (chunk.id,))
            self._db.execute("DELETE FROM chunks WHERE id = ?", (chunk.id,))

    def split(self, chunk: Chunk, rows: Iterable[tuple[int, bytes]]) -> None:
        """Replace a chunk the collector refused as too large (nothing of it was stored) by
        ``rows`` (``(count, batch)``, the same reports in smaller rows), unassigned."""
        with self.transaction():
            self._db.execute("DELETE FROM reports WHERE chunk = ?", (chunk.id,))
            self._db.execute("DELETE FROM chunks WHERE id = ?", (chunk.id,))
            self._db.executemany(INSERT_ROW, ((chunk.campaign, int(n), b, chunk.version, chunk.group)
                                              for n, b in rows))

    # --- inspection and metadata ---------------------------------------------------------------
    def pending(self, campaign: str | None = None) -> int:
        """Reports still queued (assigned to a chunk or not)."""
        with self._lock:
            if campaign is None:
                row = self._db.execute("SELECT COALESCE(SUM(count), 0) FROM reports").fetchone()
            else:
                row = self._db.execute("SELECT COALESCE(SUM(count), 0) FROM reports WHERE campaign = ?",
                                       (campaign,)).fetchone()
            return int(row[0])

    def get_meta(self, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return None if row is None else bytes(row[0])

    def set_meta(self, key: str, value: bytes) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def meta_setdefault(self, key: str, make: Callable[[], bytes]) -> bytes:
        """The value of ``key``, storing ``make()`` first if there is none (atomic)."""
        with self.transaction():
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row is None:
                value = make()
                self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
            else:
                value = bytes(row[0])
            return value

    def lost(self) -> str | None:
        """Why the open file is no longer the one at ``path`` (deleted, or replaced by another
        file), else None: what is written now would be lost with the process (its device secret
        and ledger too). Once lost, always lost (logged once)."""
        if self._lost is None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) != self.identity:
                    self._lost = f"{self.path} was replaced by another file while open"
            except FileNotFoundError:
                self._lost = f"{self.path} was deleted while open"
            if self._lost is not None:
                log.error("the SDK's store is gone: %s", self._lost)
        return self._lost

    def close(self) -> None:
        with self._lock:
            self._db.close()
