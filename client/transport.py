"""``TelemetryClient``: the SDK's batching HTTP transport.

    client = TelemetryClient("https://collector.example", token, queue_path="ldptel-queue.sqlite")
    client.report("homepage", "b")     # randomized now (ε-LDP); only the randomized report is queued
    client.flush()                     # or client.start() for a background sender

- Campaign configs come from ``GET /v1/campaigns`` and are cached (memory, and the SQLite file so
  reporting works offline after a restart), refreshed after ``config_ttl`` seconds.
- ``report(campaign, value)`` randomizes immediately with the campaign's mechanism and OS
  randomness; the raw value is never stored or sent. Reports wait in a SQLite queue
  (``ldptel.client.queue``), which survives restarts.
- ``flush()`` (and the background sender) posts the queue as columnar ``ReportBatch`` es, one per
  chunk of at most ``batch_size`` reports of one campaign, each chunk under a batch_id fixed before
  its first attempt, so a retry is deduplicated by the collector. Network errors, 5xx, 408 and
  429 are retried with exponential backoff and full jitter (delay uniform in
  [0, min(max_backoff, backoff_base·2^attempt)], at least the server's Retry-After); a chunk is
  dropped (and logged) only on a 4xx that retrying cannot fix (400, 404, 409, 415, 422, or 413
  for a single row). 401/403 stop the flush and keep the queue (a token problem is fixable).
- RAPPOR and heavy hitters: the device secret (RAPPOR's cohort and memoized permanent randomized
  response, the heavy-hitter level) is created once and kept in the SQLite file; each campaign
  uses HMAC-SHA256(secret, campaign name). Heavy-hitter and range campaigns use the mechanisms of
  ``ldptel.client.mechanisms.structured``.

Thread-safe: ``report`` and ``flush`` may be called from any thread.
Depends only on the standard library, numpy and protobuf (through the mechanisms).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldptel.client.device_secret import derive, device_secret
from ldptel.client.mechanisms import create_mechanism
from ldptel.client.mechanisms.base import Mechanism
from ldptel.client.queue import Chunk, ReportQueue
from ldptel.proto import ReportBatch

log = logging.getLogger("ldptel.client")

RAPPOR_KEYS = ("bloom_bits", "hashes", "cohorts", "f", "p", "q", "candidates")
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
AUTH_STATUS = frozenset({401, 403})
CONTENT_TYPE = "application/x-protobuf"


class TelemetryError(RuntimeError):
    """The SDK cannot proceed (no campaign config, unknown campaign, authentication)."""


class UnknownCampaign(TelemetryError, ValueError):
    """The collector has no campaign of that name."""


@dataclass
class FlushResult:
    """Outcome of one ``flush``: reports the collector accepted, reports in batches it already had
    (retries), reports dropped as invalid, reports still queued, and the last error if any."""

    accepted: int = 0
    duplicates: int = 0
    dropped: int = 0
    pending: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the queue is empty."""
        return self.pending == 0


class _HttpStatus(Exception):
    def __init__(self, status: int, body: bytes, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status, self.body, self.retry_after = status, body, retry_after


def uses_device_secret(cfg: dict) -> bool:
    """RAPPOR (cohort, memoized permanent response) and heavy hitters (the device's level) tie a
    device's reports to a secret that must outlive restarts."""
    return cfg.get("kind") == "heavy_hitters" or (cfg.get("kind", "frequency") == "frequency"
                                                   and cfg.get("oracle") == "rappor")


def mechanism_from_config(cfg: dict, secret: bytes | None = None) -> Mechanism:
    """The mechanism of a public campaign config (``GET /v1/campaigns``); ``secret`` is the
    device's secret for the campaign (see ``uses_device_secret``)."""
    kind = cfg.get("kind", "frequency")
    if kind in ("heavy_hitters", "range"):
        try:
            from ldptel.client.mechanisms.structured import structured_mechanism
        except ImportError:
            raise TelemetryError(f"campaign {cfg.get('name')!r}: {kind} campaigns are not supported "
                                 "by this SDK version") from None
        return structured_mechanism(kind, cfg, secret=secret if kind == "heavy_hitters" else None)
    if kind != "frequency":
        raise TelemetryError(f"campaign {cfg.get('name')!r}: unknown campaign kind {kind!r}")
    oracle = cfg.get("oracle")
    if oracle == "rappor":
        return create_mechanism("rappor", **{k: cfg[k] for k in RAPPOR_KEYS}, secret=secret)
    return create_mechanism(oracle, epsilon=cfg["epsilon"], domain_size=cfg["domain_size"])


def default_queue_path(url: str) -> Path:
    """``~/.cache/ldptel/queue-<hash of url>.sqlite``."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ldptel"
    return base / f"queue-{hashlib.sha256(url.encode()).hexdigest()[:12]}.sqlite"


class TelemetryClient:
    """Randomize on the device, queue on disk, send in batches (see the module docstring).

    ``rng`` (a seeded ``numpy.random.Generator``) is for tests and simulations only; without it
    all randomness comes from the OS.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        queue_path: str | os.PathLike | None = None,
        batch_size: int = 1000,
        timeout: float = 10.0,
        config_ttl: float = 300.0,
        flush_interval: float = 10.0,
        backoff_base: float = 0.2,
        max_backoff: float = 60.0,
        background: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL, got {url!r}")
        if not isinstance(token, str) or not token:
            raise ValueError("token must be a non-empty string")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.batch_size = batch_size
        self.timeout = timeout
        self.config_ttl = config_ttl
        self.flush_interval = flush_interval
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.rng = rng
        self.queue = ReportQueue(queue_path or default_queue_path(self.url))
        self._lock = threading.RLock()  # configs and mechanisms
        self._flush_lock = threading.Lock()  # one flush at a time
        self._configs: dict[str, dict] = {}
        self._configs_at = -float("inf")
        self._mechs: dict[str, tuple[dict, Mechanism]] = {}
        self._jitter = random.Random()
        self._chunk_reports = batch_size
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._since_wake = 0
        self._thread: threading.Thread | None = None
        if background:
            self.start()

    # --- campaign configs ---------------------------------------------------------------------
    def campaigns(self, refresh: bool = False) -> dict[str, dict]:
        """Public campaign configs by name: fetched from the collector at most every
        ``config_ttl`` seconds; the last copy (memory, then the queue file) if it is unreachable."""
        with self._lock:
            fresh = time.monotonic() - self._configs_at < self.config_ttl
            if self._configs and fresh and not refresh:
                return self._configs
            try:
                data = json.loads(self._request("GET", "/v1/campaigns"))
                configs = {c["name"]: c for c in data["campaigns"]}
                self.queue.set_meta("campaigns", json.dumps(configs).encode())
            except _HttpStatus as exc:
                if exc.status in AUTH_STATUS:
                    raise TelemetryError(f"collector refused the token ({exc.status})") from None
                configs = self._stored_configs(exc)
            except (OSError, ValueError, KeyError) as exc:
                configs = self._stored_configs(exc)
            self._configs, self._configs_at = configs, time.monotonic()
            return configs

    def _stored_configs(self, exc: Exception) -> dict[str, dict]:
        if self._configs:
            return self._configs
        stored = self.queue.get_meta("campaigns")
        if stored is None:
            raise TelemetryError(f"no campaign configs: the collector is unreachable ({exc})") from None
        log.info("using cached campaign configs (collector unreachable: %s)", exc)
        return json.loads(stored)

    def mechanism(self, campaign: str) -> Mechanism:
        """The mechanism of ``campaign`` as configured on the collector (cached)."""
        configs = self.campaigns()
        cfg = configs.get(campaign)
        if cfg is None:
            configs = self.campaigns(refresh=True)
            cfg = configs.get(campaign)
        if cfg is None:
            raise UnknownCampaign(f"unknown campaign {campaign!r} (collector has {sorted(configs)})")
        with self._lock:
            cached = self._mechs.get(campaign)
            if cached is None or cached[0] != cfg:
                secret = self._device_secret(campaign) if uses_device_secret(cfg) else None
                cached = self._mechs[campaign] = (cfg, mechanism_from_config(cfg, secret))
            return cached[1]

    def _config_and_mechanism(self, campaign: str) -> tuple[dict, Mechanism]:
        mech = self.mechanism(campaign)
        with self._lock:
            return self._mechs[campaign][0], mech

    def _device_secret(self, campaign: str) -> bytes:
        """HMAC-SHA256(device secret, campaign): the device secret is drawn once and kept in the
        queue file, so cohorts, memoized responses and levels survive restarts."""
        device = self.queue.meta_setdefault("device_secret", device_secret)
        return derive(device, b"ldptel/campaign-secret\0" + campaign.encode())

    def _index(self, cfg: dict, value: Any) -> Any:
        """A categorical label → its index; integers (and RAPPOR strings) pass through."""
        labels = cfg.get("domain")
        if labels is not None and isinstance(value, str):
            try:
                return labels.index(value)
            except ValueError:
                raise ValueError(f"value {value!r} is not in the domain of {cfg['name']!r}") from None
        return value

    # --- reporting ----------------------------------------------------------------------------
    def report(self, campaign: str, value: Any) -> None:
        """Randomize ``value`` for ``campaign`` now and queue the randomized report."""
        cfg, mech = self._config_and_mechanism(campaign)
        value = self._index(cfg, value)
        if self.rng is not None and not uses_device_secret(cfg):
            batch = mech.encode_batch([value], rng=self.rng, campaign=campaign, batch_id=b"")
        else:
            batch = mech.encode(value, campaign=campaign)
            batch.batch_id = b""
        self.queue.append(campaign, 1, batch.SerializeToString())
        self._maybe_wake()

    def report_many(self, campaign: str, values: Sequence[Any]) -> int:
        """Randomize many values at once (vectorized), each as an independent report — for RAPPOR
        each value is a separate simulated device (own cohort and permanent response). For
        simulations and load tests; returns the number queued. (Heavy hitters: each value a device
        with its own level.)"""
        cfg, mech = self._config_and_mechanism(campaign)
        vals = [self._index(cfg, v) for v in values]
        rows = []
        for start in range(0, len(vals), self.batch_size):
            part = vals[start:start + self.batch_size]
            batch = mech.encode_batch(part, rng=self.rng, campaign=campaign, batch_id=b"")
            rows.append((campaign, len(part), batch.SerializeToString()))
        self.queue.append_many(rows)
        self._maybe_wake(len(vals))
        return len(vals)

    def pending(self) -> int:
        """Reports queued and not yet delivered."""
        return self.queue.pending()

    # --- sending ------------------------------------------------------------------------------
    def flush(self, timeout: float | None = 30.0) -> FlushResult:
        """Send everything queued; retry with backoff until done or ``timeout`` seconds have passed
        (None: no limit). What is not delivered stays queued."""
        deadline = None if timeout is None else time.monotonic() + timeout
        result = FlushResult()
        with self._flush_lock:
            attempt = 0
            while not (self._stop.is_set() and timeout is None):
                chunk = self.queue.next_chunk(self._chunk_reports)
                if chunk is None:
                    break
                try:
                    body = self._batch_body(chunk)
                except TelemetryError as exc:  # no campaign configs yet: retry later
                    if not isinstance(exc, UnknownCampaign):
                        result.error = str(exc)
                        delay = self._backoff(attempt, None)
                        if not self._wait(delay, deadline):
                            break
                        attempt += 1
                        continue
                    self._drop(chunk, result, str(exc))
                    continue
                except ValueError as exc:  # rows that no longer match the campaign's config
                    self._drop(chunk, result, f"undecodable queued reports: {exc}")
                    continue
                try:
                    outcome = json.loads(self._request("POST", "/v1/reports", body, CONTENT_TYPE) or b"{}")
                except _HttpStatus as exc:
                    result.error = str(exc)
                    if exc.status in AUTH_STATUS:
                        log.error("collector refused the token (%s); keeping %d queued reports",
                                  exc.status, self.queue.pending())
                        break
                    if exc.status == 413 and len(chunk.batches) > 1:
                        self._chunk_reports = max(1, chunk.count // 2)
                        log.warning("batch of %d reports too large; regrouping", chunk.count)
                        self.queue.release(chunk)
                        continue
                    if exc.status not in RETRY_STATUS:
                        self._drop(chunk, result, f"collector answered {exc}")
                        continue
                    delay = self._backoff(attempt, exc.retry_after)
                except (OSError, ValueError) as exc:  # network errors, timeouts, garbled answers
                    result.error = f"{type(exc).__name__}: {exc}"
                    delay = self._backoff(attempt, None)
                else:
                    self.queue.complete(chunk)
                    if outcome.get("duplicate"):
                        result.duplicates += chunk.count
                    else:
                        result.accepted += chunk.count
                    attempt = 0
                    continue
                attempt += 1
                log.info("send failed (%s); retrying in %.2f s", result.error, delay)
                if not self._wait(delay, deadline):
                    break
        result.pending = self.queue.pending()
        if result.pending == 0:
            result.error = None
        return result

    def _wait(self, delay: float, deadline: float | None) -> bool:
        """Sleep ``delay`` unless that passes the deadline or the client is stopping."""
        if deadline is not None and time.monotonic() + delay > deadline:
            return False
        return not self._stop.wait(delay)

    def _drop(self, chunk: Chunk, result: FlushResult, why: str) -> None:
        log.error("dropping %d reports of %s: %s", chunk.count, chunk.campaign, why)
        self.queue.complete(chunk)
        result.dropped += chunk.count

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self._jitter.uniform(0, min(self.max_backoff, self.backoff_base * 2 ** min(attempt, 30)))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay

    def _batch_body(self, chunk: Chunk) -> bytes:
        """The chunk's rows as one columnar ``ReportBatch`` under the chunk's batch_id."""
        if len(chunk.batches) == 1:
            batch = ReportBatch.FromString(chunk.batches[0])
        else:
            mech = self.mechanism(chunk.campaign)
            parts = [mech.columns(ReportBatch.FromString(b)) for b in chunk.batches]
            columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            batch = mech.pack(columns, chunk.count, chunk.campaign)
        batch.campaign = chunk.campaign
        batch.batch_id = chunk.batch_id
        return batch.SerializeToString()

    def _request(self, method: str, path: str, body: bytes | None = None,
                 content_type: str | None = None) -> bytes:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read() if exc.fp is not None else b""
            retry = exc.headers.get("Retry-After") if exc.headers else None
            try:
                retry_after = float(retry) if retry is not None else None
            except ValueError:
                retry_after = None
            raise _HttpStatus(exc.code, raw, retry_after) from None

    # --- background sender ------------------------------------------------------------------
    def _maybe_wake(self, n: int = 1) -> None:
        """Wake the background sender once a full batch was queued since it last ran."""
        with self._lock:
            self._since_wake += n
            full = self._since_wake >= self.batch_size
        if full and self._thread is not None:
            self._wake.set()

    def start(self) -> None:
        """Start the background sender: flushes every ``flush_interval`` seconds, or sooner when a
        full batch is queued."""
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="ldptel-sender", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            with self._lock:
                self._since_wake = 0
            if self._stop.is_set():
                break
            try:
                self.flush(timeout=None)
            except Exception:  # keep the sender alive; the queue is intact
                log.exception("background flush failed")

    def close(self, flush_timeout: float | None = 5.0) -> FlushResult | None:
        """Stop the background sender, try a last flush (``flush_timeout`` seconds; None: skip),
        and close the queue file. Undelivered reports stay in it for the next start."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        self._stop.clear()
        result = None
        if flush_timeout is not None:
            try:
                result = self.flush(timeout=flush_timeout)
            except TelemetryError as exc:
                log.warning("final flush: %s", exc)
        self.queue.close()
        return result

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
