"""The TOML configuration, validated at start.

Every error names the offending key (``campaigns[2].epsilon: …``) and is raised as
``ConfigError``; the CLI prints it and exits non-zero.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ldptel.client.builder import CAMPAIGN_KINDS as KINDS
from ldptel.client.builder import RANGE_METHODS, RAPPOR_KEYS, build_mechanism
from ldptel.client.mechanisms import MECHANISMS, NUMERIC_MECHANISMS
from ldptel.client.mechanisms.base import Mechanism
from ldptel.client.mechanisms.heavy_hitters import (
    check_pool_size,
    default_pool_size,
    pool_hash_range,
    walk_candidates,
)
from ldptel.client.mechanisms.numeric import default_numeric_mechanism
from ldptel.client.mechanisms.onebitmean import DEFAULT_BUCKETS, MAX_BUCKETS
from ldptel.client.privacy import privacy_claim
from ldptel.durations import parse_duration, parse_window

NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
ORACLES = tuple(MECHANISMS)  # grr, sue, oue, olh, hadamard, rappor

SERVER_KEYS = {
    "ingest_tokens", "export_tokens", "admin_tokens", "max_body_bytes", "max_reports_per_batch",
    "rate_limit_per_minute", "secret_key", "session_idle_seconds", "auth_failure_limit",
    "auth_failure_window_seconds", "max_aggregator_lag_seconds",
}
AGGREGATOR_KEYS = {"read_count", "block_ms", "retention_seconds", "claim_idle_ms", "publish_interval"}
COMMON_CAMPAIGN_KEYS = {"name", "kind", "epsilon", "window", "min_reports", "shards", "description",
                        "memoize", "epsilon_inf", "reports_per_window", "retention", "accept_old_versions"}
MAX_REPORTS_PER_WINDOW = 1_000_000
# keys that may change without a new campaign version (ldptel.registry); every other key is a
# randomization parameter (or the window / shards), immutable per version
IN_PLACE_KEYS = ("description", "min_reports", "accept_old_versions", "retention", "reports_per_window")
CAMPAIGN_STATUSES = ("active", "paused", "retired")
KIND_KEYS = {
    "frequency": {"oracle", "domain", "domain_size", *RAPPOR_KEYS},
    "heavy_hitters": {"max_length", "levels", "width", "oracle", "pool_size"},
    "range": {"domain_size", "method", "branching"},
    "numeric": {"lower", "upper", "mechanism", "memoize", "buckets"},
}


class ConfigError(ValueError):
    """A configuration problem; the message starts with the key."""


def _fail(key: str, msg: str) -> ConfigError:
    return ConfigError(f"{key}: {msg}")


def _int(d: dict, key: str, where: str, default: int | None, low: int, high: int) -> int:
    if key not in d:
        if default is None:
            raise _fail(f"{where}.{key}", "is required")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise _fail(f"{where}.{key}", f"must be an integer in [{low}, {high}], got {v!r}")
    return v


def _seconds(d: dict, key: str, where: str, default: float, low: float, high: float) -> float:
    """A number of seconds (integer or float, not a bool, NaN or infinity) in [low, high]."""
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
        raise _fail(f"{where}.{key}", f"must be a number of seconds in [{low:g}, {high:g}], got {v!r}")
    return float(v)


def _tokens(d: dict, key: str, env: str) -> list[str]:
    raw = os.environ.get(env)
    tokens: Any = [t.strip() for t in raw.split(",") if t.strip()] if raw else d.get(key, [])
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
        raise _fail(f"server.{key}", "must be a list of non-empty strings")
    for t in tokens:
        if len(t) < 8:
            raise _fail(f"server.{key}", "tokens must be at least 8 characters")
    return tokens


@dataclass
class ServerConfig:
    ingest_tokens: list[str] = field(default_factory=list)
    export_tokens: list[str] = field(default_factory=list)
    admin_tokens: list[str] = field(default_factory=list)  # the admin API (/v1/admin/…); none: off
    max_body_bytes: int = 1 << 20
    max_reports_per_batch: int = 10_000
    rate_limit_per_minute: int = 6_000  # requests per ingest token per minute
    secret_key: str | None = None  # signs operator sessions; random per process if unset
    session_idle_seconds: int = 1800  # an operator session ends after this long without a request
    auth_failure_limit: int = 20  # failed authentications per address or token prefix per window
    auth_failure_window_seconds: int = 60
    max_aggregator_lag_seconds: int = 300  # /healthz answers 503 beyond (supervised aggregator)


@dataclass
class AggregatorConfig:
    read_count: int = 500  # stream entries (batches) per XREADGROUP
    block_ms: int = 1000
    retention_seconds: int = 7 * 86400  # acked entries older than this are trimmed
    claim_idle_ms: int = 60_000  # pending entries idle this long are claimed from dead workers
    publish_interval: float = 5.0  # seconds between two publications of one (campaign, window)


@dataclass
class Campaign:
    """One campaign. ``params`` holds the kind-specific settings as validated values."""

    name: str
    kind: str
    epsilon: float | None
    window: str = "all"
    min_reports: int = 1000
    shards: int = 1
    description: str = ""
    retention: str | None = None  # windows that ended longer ago than this are deleted (None: kept)
    oracle: str | None = None
    domain: list[str] | None = None
    domain_size: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    reports_per_window: int = 1  # the SDK sends at most this many reports per device and window
    version: int = 1  # randomization parameters are immutable per version (``ldptel.registry``)
    accept_old_versions: int = 7 * 86400  # seconds a superseded version's reports are accepted
    superseded_at: float | None = None  # epoch seconds a newer version replaced this one
    status: str = "active"  # CAMPAIGN_STATUSES; "paused" / "retired" refuse reports
    reason: str = ""  # why it is paused or retired

    def accepts_until(self) -> float:
        """Epoch seconds until which reports of this version are accepted (inf: the latest)."""
        if self.superseded_at is None:
            return float("inf")
        return self.superseded_at + self.accept_old_versions

    @property
    def window_seconds(self) -> int:
        """Seconds per window (``durations.parse_window``; 0 for "all")."""
        return parse_window(self.window)

    @property
    def retention_seconds(self) -> int | None:
        """Seconds of ``retention`` (None: windows are kept forever)."""
        return None if self.retention is None else parse_duration(self.retention)

    def labels(self) -> list:
        """Item labels for estimates: the categorical domain, RAPPOR candidates, or 0..d-1."""
        if self.domain is not None:
            return list(self.domain)
        if self.oracle == "rappor":
            return list(self.params["candidates"])
        return list(range(self.domain_size or 0))

    def mechanism(self) -> Mechanism:
        """The campaign's mechanism (``ldptel.client`` object): the frequency oracle, the
        heavy-hitter prefix tree or the range method, built from ``public()``."""
        return build_mechanism(self.public())

    def public(self) -> dict:
        """What clients fetch from ``GET /v1/campaigns`` (no secrets)."""
        out: dict[str, Any] = {"name": self.name, "version": self.version, "kind": self.kind,
                               "epsilon": self.epsilon}
        for key in ("oracle", "domain", "domain_size"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(self.params)
        out.update(window=self.window, window_seconds=self.window_seconds,
                   reports_per_window=self.reports_per_window)
        return out

    def privacy(self) -> dict[str, Any]:
        """The campaign's privacy claim (``ldptel.client.privacy.privacy_claim``): the ``privacy``
        object of ``/v1/campaigns`` and of every export document (cached per public config)."""
        return dict(_privacy_of(json.dumps(self.public(), sort_keys=True)))


@dataclass
class Config:
    server: ServerConfig
    aggregator: AggregatorConfig
    campaigns: list[Campaign]  # the latest version of each campaign
    path: Path | None = None
    history: dict[str, list[Campaign]] = field(default_factory=dict)  # older versions, ascending
    tables: list[dict] = field(default_factory=list)  # the file's [[campaigns]] tables, as given
    declared: list[Campaign] = field(default_factory=list)  # the file's campaigns, as parsed

    def campaign(self, name: str) -> Campaign | None:
        """The latest version of campaign ``name``."""
        return next((c for c in self.campaigns if c.name == name), None)

    def versions(self, name: str) -> list[Campaign]:
        """Every known version of campaign ``name``, ascending (empty if unknown)."""
        latest = self.campaign(name)
        if latest is None:
            return []
        return [*(c for c in self.history.get(name, []) if c.version < latest.version), latest]

    def campaign_version(self, name: str, version: int) -> Campaign | None:
        """Version ``version`` of campaign ``name``, or None."""
        return next((c for c in self.versions(name) if c.version == version), None)


@functools.lru_cache(maxsize=1024)
def _privacy_of(public: str) -> Mapping[str, Any]:
    cfg = json.loads(public)
    return MappingProxyType(privacy_claim(cfg, build_mechanism(cfg)))


def _retention(value: Any, key: str, window: str) -> str | None:
    """A campaign's ``retention``: a duration at least its window's length (not with "all")."""
    if value is None:
        return None
    try:
        kept = parse_duration(value)
    except ValueError as exc:
        raise _fail(key, str(exc)) from None
    if parse_window(window) == 0:
        raise _fail(key, 'needs windows of a fixed length (window = "all" is one window)')
    if kept < parse_window(window):
        raise _fail(key, f"must be at least the window length ({window}), got {value!r}")
    return str(value)


def parse_campaign(raw: Any, where: str) -> Campaign:
    """One ``[[campaigns]]`` table (or an admin API body) → a validated ``Campaign`` (version 1);
    ``ConfigError`` naming the key otherwise."""
    if not isinstance(raw, dict):
        raise _fail(where, "must be a table")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _fail(f"{where}.name", f"must match [a-z0-9_-]{{1,64}}, got {name!r}")
    where = f"campaigns[{name}]"
    kind = raw.get("kind", "frequency")
    if kind not in KINDS:
        raise _fail(f"{where}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    allowed = COMMON_CAMPAIGN_KEYS | KIND_KEYS[kind]
    for key in raw:
        if key not in allowed:
            raise _fail(f"{where}.{key}", f"unknown key for a {kind} campaign "
                        f"(allowed: {', '.join(sorted(allowed))})")
    window = raw.get("window", "all")
    try:
        parse_window(window)
    except ValueError as exc:
        raise _fail(f"{where}.window", str(exc)) from None
    retention = _retention(raw.get("retention"), f"{where}.retention", window)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise _fail(f"{where}.description", "must be a string")
    camp = Campaign(
        name=name, kind=kind, epsilon=None, window=window, description=description, retention=retention,
        min_reports=_int(raw, "min_reports", where, 1000, 1, 10**12),
        shards=_int(raw, "shards", where, 1, 1, 1024),
        reports_per_window=_int(raw, "reports_per_window", where, 1, 1, MAX_REPORTS_PER_WINDOW),
        accept_old_versions=_int(raw, "accept_old_versions", where, 7 * 86400, 0, 10**9),
    )
    oracle = raw.get("oracle", "olh")
    if kind == "frequency" and oracle == "rappor":
        camp.oracle = "rappor"
        missing = [k for k in RAPPOR_KEYS if k not in raw]
        if missing:
            raise _fail(f"{where}.{missing[0]}", "is required for the rappor oracle")
        not_rappor = ("epsilon", "domain", "domain_size", "memoize", "epsilon_inf")
        if any(k in raw for k in not_rappor):
            bad = next(k for k in not_rappor if k in raw)
            raise _fail(f"{where}.{bad}", "does not apply to rappor (ε, ε∞ follow from f, p, q, "
                        "hashes; its permanent response is always memoized)")
        params = {k: raw[k] for k in RAPPOR_KEYS}
        from ldptel.client import create_mechanism
        from ldptel.client.mechanisms.rappor import RAPPOR

        try:
            mech = create_mechanism("rappor", **params)
        except ValueError as exc:
            key = str(exc).split()[0]
            raise _fail(f"{where}.{key if key in RAPPOR_KEYS else 'rappor'}", str(exc)) from None
        assert isinstance(mech, RAPPOR)
        camp.params = params
        camp.epsilon = mech.epsilon
        camp.params["epsilon_inf"] = mech.epsilon_inf
        return camp

    eps = raw.get("epsilon")
    if eps is None:
        raise _fail(f"{where}.epsilon", "is required (no default: choose the privacy budget)")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps <= 10:
        raise _fail(f"{where}.epsilon", f"must be a number with 0 < epsilon <= 10, got {eps!r}")
    camp.epsilon = float(eps)
    if kind != "numeric":  # numeric campaigns: 1BitMean's own memoization (numeric_params)
        camp.params.update(_memoize(raw, where, camp.epsilon))

    if kind == "frequency":
        if oracle not in ORACLES:
            raise _fail(f"{where}.oracle", f"must be one of {', '.join(ORACLES)}, got {oracle!r}")
        for key in RAPPOR_KEYS:
            if key in raw:
                raise _fail(f"{where}.{key}", "applies only to oracle = \"rappor\"")
        camp.oracle = oracle
        if ("domain" in raw) == ("domain_size" in raw):
            raise _fail(f"{where}.domain", "give exactly one of domain (labels) or domain_size")
        if "domain" in raw:
            dom = raw["domain"]
            if (not isinstance(dom, list) or len(dom) < 2
                    or not all(isinstance(v, str) and v for v in dom)):
                raise _fail(f"{where}.domain", "must be a list of at least 2 non-empty strings")
            if len(set(dom)) != len(dom):
                raise _fail(f"{where}.domain", "values must be distinct")
            camp.domain = list(dom)
            camp.domain_size = len(dom)
        else:
            camp.domain_size = _int(raw, "domain_size", where, None, 2, 1 << 24)
    elif kind == "heavy_hitters":
        camp.oracle = "olh"
        if raw.get("oracle", "olh") != "olh":
            raise _fail(f"{where}.oracle", "heavy hitters use olh")
        max_length = _int(raw, "max_length", where, None, 1, 64)
        camp.params.update({
            "max_length": max_length,
            # at most 16 new bits per level (the walk evaluates width·2^bits candidates)
            "levels": _int(raw, "levels", where, max_length, -(-max_length // 2), 8 * max_length),
            "width": _int(raw, "width", where, 64, 1, 4096),
        })
        # always published: an SDK must not have to agree with the server on a default
        levels, g = camp.params["levels"], pool_hash_range(camp.epsilon)
        cands = walk_candidates(max_length, levels, camp.params["width"])
        pool = _int(raw, "pool_size", where, default_pool_size(levels, g, cands), 1, 1 << 16)
        try:
            camp.params["pool_size"] = check_pool_size(pool, levels, g, cands)
        except ValueError as exc:
            raise _fail(f"{where}.pool_size", str(exc)) from None
    elif kind == "numeric":
        camp.params = numeric_params(raw, where, camp.epsilon)
    else:  # range
        camp.domain_size = _int(raw, "domain_size", where, None, 2, 1 << 24)
        method = raw.get("method", "haar")
        if method not in RANGE_METHODS:
            raise _fail(f"{where}.method", f"must be one of {', '.join(RANGE_METHODS)}, got {method!r}")
        camp.params["method"] = method
        if "branching" in raw:
            if method != "hierarchical":
                raise _fail(f"{where}.branching", "applies only to method = \"hierarchical\"")
            camp.params["branching"] = _int(raw, "branching", where, None, 2, 1024)
    return camp


def _memoize(raw: dict, where: str, epsilon: float) -> dict[str, Any]:
    """``{"memoize": True, "epsilon_inf": ε∞}`` for ``memoize = true`` (ε∞ required, ε < ε∞ ≤ 10),
    ``{}`` for ``memoize = false`` or absent (then ``epsilon_inf`` must be absent too)."""
    memoize = raw.get("memoize", False)
    if not isinstance(memoize, bool):
        raise _fail(f"{where}.memoize", f"must be true or false, got {memoize!r}")
    eps_inf = raw.get("epsilon_inf")
    if not memoize:
        if eps_inf is not None:
            raise _fail(f"{where}.epsilon_inf", "applies only with memoize = true")
        return {}
    if eps_inf is None:
        raise _fail(f"{where}.epsilon_inf", "is required with memoize = true (the lifetime ε of "
                    "one value; choose it greater than epsilon)")
    if isinstance(eps_inf, bool) or not isinstance(eps_inf, (int, float)) or not 0 < eps_inf <= 10:
        raise _fail(f"{where}.epsilon_inf", f"must be a number with 0 < epsilon_inf <= 10, got {eps_inf!r}")
    if not eps_inf > epsilon:
        raise _fail(f"{where}.epsilon_inf", f"must be greater than epsilon = {epsilon:g} (the "
                    f"per-report ε), got {eps_inf!r}")
    return {"memoize": True, "epsilon_inf": float(eps_inf)}


def numeric_params(raw: dict, where: str, epsilon: float) -> dict[str, Any]:
    """A numeric campaign's ``lower``, ``upper``, ``mechanism`` (default: the lowest worst-case
    variance for ε) and, for 1bitmean, ``memoize`` (default true) and ``buckets`` (default 8):
    all published, so an SDK never has to agree with the server on a default."""
    if "epsilon_inf" in raw:
        raise _fail(f"{where}.epsilon_inf", "does not apply to numeric campaigns (1BitMean's "
                    "memoization costs (buckets + 1)·epsilon over a device's life)")
    for key in ("lower", "upper"):
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _fail(f"{where}.{key}", f"is required: a finite number, got {v!r}")
    if not raw["lower"] < raw["upper"]:
        raise _fail(f"{where}.upper", f"must be above lower = {raw['lower']!r}, got {raw['upper']!r}")
    mechanism = raw.get("mechanism", default_numeric_mechanism(epsilon))
    if mechanism not in NUMERIC_MECHANISMS:
        raise _fail(f"{where}.mechanism",
                    f"must be one of {', '.join(NUMERIC_MECHANISMS)}, got {mechanism!r}")
    params: dict[str, Any] = {"lower": float(raw["lower"]), "upper": float(raw["upper"]),
                              "mechanism": mechanism}
    if mechanism != "1bitmean":
        bad = next((k for k in ("memoize", "buckets") if k in raw), None)
        if bad:
            raise _fail(f"{where}.{bad}", "applies only to mechanism = \"1bitmean\"")
        return params
    memoize = raw.get("memoize", True)
    if not isinstance(memoize, bool):
        raise _fail(f"{where}.memoize", f"must be true or false, got {memoize!r}")
    params["memoize"] = memoize
    params["buckets"] = _int(raw, "buckets", where, DEFAULT_BUCKETS, 1, MAX_BUCKETS)
    return params


def parse_config(data: dict, path: Path | None = None) -> Config:
    """Validate a parsed TOML document."""
    for key in data:
        if key not in ("server", "aggregator", "campaigns"):
            raise _fail(key, "unknown top-level key (allowed: server, aggregator, campaigns)")
    srv = data.get("server", {})
    if not isinstance(srv, dict):
        raise _fail("server", "must be a table")
    for key in srv:
        if key not in SERVER_KEYS:
            raise _fail(f"server.{key}", f"unknown key (allowed: {', '.join(sorted(SERVER_KEYS))})")
    secret = srv.get("secret_key")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise _fail("server.secret_key", "must be a string of at least 16 characters")
    server = ServerConfig(
        ingest_tokens=_tokens(srv, "ingest_tokens", "LDPTEL_INGEST_TOKENS"),
        export_tokens=_tokens(srv, "export_tokens", "LDPTEL_EXPORT_TOKENS"),
        admin_tokens=_tokens(srv, "admin_tokens", "LDPTEL_ADMIN_TOKENS"),
        max_body_bytes=_int(srv, "max_body_bytes", "server", 1 << 20, 1024, 1 << 30),
        max_reports_per_batch=_int(srv, "max_reports_per_batch", "server", 10_000, 1, 1_000_000),
        rate_limit_per_minute=_int(srv, "rate_limit_per_minute", "server", 6_000, 1, 10**9),
        secret_key=os.environ.get("LDPTEL_SECRET_KEY", secret),
        session_idle_seconds=_int(srv, "session_idle_seconds", "server", 1800, 60, 7 * 86400),
        auth_failure_limit=_int(srv, "auth_failure_limit", "server", 20, 1, 10**6),
        auth_failure_window_seconds=_int(srv, "auth_failure_window_seconds", "server", 60, 1, 86400),
        max_aggregator_lag_seconds=_int(srv, "max_aggregator_lag_seconds", "server", 300, 1, 10**7),
    )
    agg = data.get("aggregator", {})
    if not isinstance(agg, dict):
        raise _fail("aggregator", "must be a table")
    for key in agg:
        if key not in AGGREGATOR_KEYS:
            raise _fail(f"aggregator.{key}",
                        f"unknown key (allowed: {', '.join(sorted(AGGREGATOR_KEYS))})")
    aggregator = AggregatorConfig(
        read_count=_int(agg, "read_count", "aggregator", 500, 1, 100_000),
        block_ms=_int(agg, "block_ms", "aggregator", 1000, 1, 600_000),
        retention_seconds=_int(agg, "retention_seconds", "aggregator", 7 * 86400, 0, 10**9),
        claim_idle_ms=_int(agg, "claim_idle_ms", "aggregator", 60_000, 1, 10**9),
        publish_interval=_seconds(agg, "publish_interval", "aggregator", 5.0, 0.0, 3600.0),
    )
    raw_campaigns = data.get("campaigns", [])
    if not isinstance(raw_campaigns, list) or not raw_campaigns:
        raise _fail("campaigns", "at least one [[campaigns]] table is required")
    campaigns = [parse_campaign(c, f"campaigns[{i}]") for i, c in enumerate(raw_campaigns)]
    names = [c.name for c in campaigns]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise _fail(f"campaigns[{dup}].name", "is used by more than one campaign")
    return Config(server=server, aggregator=aggregator, campaigns=campaigns, path=path,
                  tables=[dict(c) for c in raw_campaigns], declared=list(campaigns))


def load_config(path: str | os.PathLike) -> Config:
    """Read and validate a TOML config file."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config: file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {p} is not valid TOML: {exc}") from None
    return parse_config(data, p)
