"""Campaign configs and the collector's limits as the SDK knows them.

They come from ``GET /v1/campaigns`` (an answer over ``MAX_ANSWER_BYTES`` is refused while it is
read: a broken or malicious collector cannot make the device allocate more) and are kept in memory
and in the queue file (so reporting works offline after a restart). ``fetch`` asks the collector
(blocking: for ``flush`` and explicit calls); ``current`` never does: it answers from memory or the
file and, when they are older than the TTL, refreshes them on a background thread. Only when
nothing is known at all (the first run of a device) does ``current`` wait — at most ``wait``
seconds — for that first answer. ``check_config`` checks what the SDK computes with in a
campaign's config, and refuses heavy hitters in ``shuffled-fakes`` (a mode the collector never
offers them in); ``mechanism_cache`` builds the mechanism, which checks the rest.

Every answer of the collector carries a digest of its campaigns (``delivery.HINT_HEADER``); when
an answer's digest differs from that of the configs held (``notice``), they are refreshed on a
background thread at once, so a device follows a campaign change (a new version, a pause) at its
next send, not only after the TTL.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeGuard

from ldptel.campaigns.limits import MAX_DEVICE_ANSWER_BYTES
from ldptel.client.delivery import AUTH_STATUS, HttpStatus
from ldptel.client.errors import BadConfig, TelemetryError, UnknownCampaign, VersionClosed
from ldptel.client.limits import Limits

log = logging.getLogger("ldptel.client")

META_KEY = "campaigns"
MAX_ANSWER_BYTES = MAX_DEVICE_ANSWER_BYTES  # a larger GET /v1/campaigns is refused while reading
# public config keys the SDK computes with, and their smallest value (the mechanism checks the rest)
INT_KEYS = {"version": 1, "window_seconds": 0, "reports_per_window": 1}
MAX_ASKED = 32  # old versions asked for per fetch (the collector's ``MAX_ASKED_VERSIONS``)
# The most fake messages per report a shuffled-fakes config may ask for: the planner's limits
# (``ldptel.privacy.planner.MAX_FAKE_RATE`` and ``MAX_MU``, checked equal by the tests; the SDK
# does not import the planner). A collector sending more (2×10⁷ once made ``flush()`` seal for
# minutes or raise MemoryError, at every flush) is refused: ``bad_config`` (issue 36 item 6).
MAX_FAKE_RATE = 100.0
MAX_FAKES_PER_BUCKET = 1e6


def check_config(campaign: str, cfg: Any) -> None:
    """``BadConfig`` naming the campaign and key unless ``cfg`` is an object whose ``INT_KEYS``
    (when present) are integers at least their minimum."""
    if not isinstance(cfg, dict):
        raise BadConfig(f"campaign {campaign!r}: the collector's config is not an object; its reports "
                        "are dropped")
    for key, low in INT_KEYS.items():
        v = cfg.get(key, low)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise BadConfig(f"campaign {campaign!r}: the collector's config has {key} = {v!r} (an "
                            f"integer of at least {low} is needed); its reports are dropped")
    if cfg.get("privacy_mode") == "shuffled-fakes" and cfg.get("kind") == "heavy_hitters":
        raise BadConfig(f"campaign {campaign!r}: a heavy_hitters campaign in privacy_mode shuffled-fakes "
                        "(heavy hitters are shuffled only: fakes are indices); its reports are dropped")
    if cfg.get("privacy_mode") == "shuffled-fakes":
        why = fake_rate_problem(cfg)
        if why is not None:
            raise BadConfig(f"campaign {campaign!r}: the collector's config has {why}; its reports are "
                            "dropped")


def _number(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fake_rate_problem(cfg: dict[str, Any]) -> str | None:
    """Why a shuffled-fakes config's λ = ``fake_rate`` cannot be used, or None: λ must be a finite
    number in [0, ``MAX_FAKE_RATE``], agree with the planned λ of its ``privacy`` claim (the rate
    the claim was computed from, when it carries one), and give μ = λ·``batch_min``/``domain_size``
    of at most ``MAX_FAKES_PER_BUCKET`` (the planner never plans more): λ = μ·d/``batch_min`` (the
    collector's configs carry both)."""
    rate, n, d = cfg.get("fake_rate"), cfg.get("batch_min"), cfg.get("domain_size")
    if not _number(rate) or rate < 0:
        return f"fake_rate = {rate!r} (a finite number of at least 0 is needed)"
    if rate > MAX_FAKE_RATE:
        return f"fake_rate = {rate:g} (at most {MAX_FAKE_RATE:g} fake messages per report are planned)"
    for key, v in (("batch_min", n), ("domain_size", d)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            return f"{key} = {v!r} (an integer of at least 1 is needed)"
    if isinstance(n, int) and isinstance(d, int) and rate * n / d > MAX_FAKES_PER_BUCKET:
        return (f"fake_rate = {rate:g}: μ = fake_rate·batch_min/domain_size = {rate * n / d:g} fakes per "
                f"bucket (at most {MAX_FAKES_PER_BUCKET:g} are planned)")
    privacy = cfg.get("privacy")
    planned = privacy.get("fake_rate") if isinstance(privacy, dict) else None
    if planned is not None and (not _number(planned) or not math.isclose(planned, rate, rel_tol=1e-9)):
        return f"fake_rate = {rate:g}, but its privacy claim was planned with {planned!r}"
    return None


def version_config(cfg: dict[str, Any], version: int | None) -> dict[str, Any] | None:
    """The public config of ``version`` of a campaign whose ``GET /v1/campaigns`` entry is
    ``cfg``: the entry itself (its ``version``; none means 1; also for ``version`` None), or one
    of its ``older_versions`` (superseded versions the collector still takes); None when the
    collector no longer takes it."""
    if version is None or cfg.get("version", 1) == version:
        return cfg
    return next((old for old in cfg.get("older_versions", []) if old.get("version") == version), None)


def askable(cfg: dict[str, Any], version: int | None) -> bool:
    """Whether ``version`` is a superseded version the collector still takes but whose config
    the entry ``cfg`` does not hold: the collector sends an old version's config only when a
    device asks for it by number (``GET /v1/campaigns?versions=<campaign>:<n>``; issue 34 item 9),
    and says from which version on it takes reports (``oldest_accepted_version``)."""
    oldest = cfg.get("oldest_accepted_version")
    if version is None or not isinstance(oldest, int) or isinstance(oldest, bool):
        return False
    return oldest <= version < cfg.get("version", 1) and version_config(cfg, version) is None


def config_for(campaign: str, configs: dict[str, dict[str, Any]], version: int | None = None
               ) -> dict[str, Any]:
    """The public config of ``campaign`` (of ``version`` if given) among ``configs``;
    ``UnknownCampaign``, or ``VersionClosed`` for a retired campaign or a version the collector no
    longer takes; ``TelemetryError`` (retry later) for an old version it takes whose config has
    not been fetched yet (``askable``)."""
    cfg = configs.get(campaign)
    if cfg is None:
        raise UnknownCampaign(f"unknown campaign {campaign!r} (collector has {sorted(configs)})")
    if cfg.get("status") == "retired":
        raise VersionClosed(f"campaign {campaign!r} is retired: {cfg.get('reason', '')}", "campaign_retired")
    found = version_config(cfg, version)
    if found is None and askable(cfg, version):
        raise TelemetryError(f"campaign {campaign!r} version {version}: its config is not fetched yet "
                             "(asked for at the next fetch)")
    if found is None:
        raise VersionClosed(f"campaign {campaign!r} version {version} is no longer accepted "
                            f"(current: {cfg.get('version', 1)})", "version_retired")
    return found


class CampaignConfigs:
    """Public campaign configs by name and ``Limits``; ``get`` fetches the JSON of
    ``/v1/campaigns``, ``load``/``save`` read and write the copy in the queue file (they may raise
    storage errors: a copy that cannot be written is only logged)."""

    def __init__(self, get: Callable[[], tuple[bytes, str | None]], load: Callable[[], bytes | None],
                 save: Callable[[bytes], None], ttl: float) -> None:
        self._get, self._load, self._save, self.ttl = get, load, save, ttl
        self._lock = threading.Lock()
        self.configs: dict[str, dict[str, Any]] = {}
        self.limits = Limits()
        self.fetched_at = -float("inf")  # monotonic time of the last answer of the collector
        self.last_error: str | None = None
        self.hint: str | None = None  # the collector's campaigns digest of ``configs``
        self._thread: threading.Thread | None = None
        self._first = threading.Event()  # set after the first fetch attempt
        self._closed = False
        self.on_answer: Callable[[dict[str, Any]], None] | None = None  # each answer (its server_time)
        # old versions whose configs every fetch asks for (``askable``): the device holds reports of them
        self.wanted: set[tuple[str, int]] = set()

    def close(self) -> None:
        """The client is closing: a refresh still under way stores and logs nothing."""
        self._closed = True

    def fresh(self) -> bool:
        return time.monotonic() - self.fetched_at < self.ttl

    def fetch(self) -> dict[str, dict[str, Any]]:
        """Ask the collector; on failure keep what is known (memory, then the file). Raises
        ``TelemetryError`` for a refused token, or when nothing is known at all."""
        try:
            raw, hint = self._get()
            data = json.loads(raw)
            self._set(data)
            self.hint = hint
            if self.on_answer is not None:
                self.on_answer(data)
            self.fetched_at, self.last_error = time.monotonic(), None
            if self._closed:
                return self.configs
            try:
                self._save(json.dumps(data).encode())
            except Exception as exc:  # noqa: BLE001 — a storage error only loses the offline copy
                log.warning("cannot store campaign configs: %s", exc)
        except HttpStatus as exc:
            self.last_error = f"collector answered {exc}"
            if exc.status in AUTH_STATUS:
                raise TelemetryError(f"collector refused the token ({exc.status})") from None
            self._fallback(exc)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.last_error = f"collector unreachable: {type(exc).__name__}: {exc}"
            self._fallback(exc)
        finally:
            self._first.set()
        return self.configs

    def current(self, wait: float) -> dict[str, dict[str, Any]] | None:
        """The configs known now, without a network request (a stale copy starts a background
        refresh); None when none are known after waiting ``wait`` s for the first fetch."""
        if not self.configs:
            self._load_stored()
        if not self.fresh():
            self.refresh_in_background()
        if not self.configs:
            self._first.wait(wait)
        return self.configs or None

    def notice(self, hint: str | None) -> None:
        """An answer of the collector carried its campaigns digest ``hint``: refresh in the
        background when it differs from that of the configs held (the campaigns changed)."""
        if hint and hint != self.hint and not self._closed:
            self.refresh_in_background()

    def refresh_in_background(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._refresh, name="ldptel-configs", daemon=True)
            self._thread.start()

    def _refresh(self) -> None:
        try:
            self.fetch()
        except Exception as exc:  # noqa: BLE001 — the background refresh must not die loudly
            self.last_error = str(exc)
            if not self._closed:
                log.warning("campaign config refresh failed: %s", exc)

    def _set(self, data: dict[str, Any]) -> None:
        self.configs = {c["name"]: c for c in data["campaigns"]}
        self.limits = Limits.from_answer(data)

    def _load_stored(self) -> bool:
        try:
            stored = self._load()
            if stored is not None:
                self._set(json.loads(stored))
                return True
        except Exception as exc:  # noqa: BLE001 — an unreadable copy is as good as none
            log.warning("cannot read the stored campaign configs: %s", exc)
        return False

    def _fallback(self, exc: Exception) -> None:
        """Keep what is known after a failed fetch: the configs in memory, else the stored copy
        (not read once the client closed: its store is closed too; nothing logged then)."""
        if self.configs or (not self._closed and self._load_stored()):
            if not self._closed:
                log.info("using cached campaign configs (%s)", self.last_error)
            return
        raise TelemetryError(f"no campaign configs: the collector is unreachable ({exc})") from None
