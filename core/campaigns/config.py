"""The TOML configuration, validated at start.

Every error names the offending key (``campaigns[2].epsilon: …``) and is raised as
``ConfigError``; the CLI prints it and exits non-zero.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ldptel import key_signing
from ldptel.campaigns.campaign import (
    CAMPAIGN_STATUSES,
    IN_PLACE_KEYS,
    KIND_KEYS,
    Campaign,
    numeric_params,
    parse_campaign,
)
from ldptel.config_values import ConfigError, fail, read_int, read_seconds
from ldptel.durations import parse_duration
from ldptel.privacy.modes import Shuffled, ShuffledFakes

__all__ = ["CAMPAIGN_STATUSES", "IN_PLACE_KEYS", "KIND_KEYS", "AggregatorConfig", "AnalyzerConfig",
           "Campaign", "IssuerConfig", "Config",
           "ConfigError", "ServerConfig", "ShufflerConfig", "check_file_rules", "load_config",
           "numeric_params", "with_token_default",
           "parse_campaign", "parse_config"]

SERVER_KEYS = {
    "ingest_tokens", "export_tokens", "admin_tokens", "max_body_bytes", "max_reports_per_batch",
    "rate_limit_per_minute", "secret_key", "session_idle_seconds", "auth_failure_limit",
    "auth_failure_window_seconds", "max_aggregator_lag_seconds", "rate_limit_per_address_per_minute",
    "trusted_proxies", "max_unfinished_bodies_per_address",
}
SHUFFLER_KEYS = {"enabled", "poll_ms", "batch_reports", "max_held_reports", "aof_rewrite_seconds",
                 "max_ingress_batches", "analyzer_signing_key", "fake_processes"}
AGGREGATOR_KEYS = {"read_count", "block_ms", "retention_seconds", "claim_idle_ms", "publish_interval"}
MAX_OPEN_PROCESSES = 256  # [analyzer] open_processes, [shuffler] fake_processes
ANALYZER_KEYS = {"key_rotation", "key_overlap", "keys_dir", "open_processes"}
ISSUER_KEYS = {"attester", "jwt_public_key", "jwt_audience", "tokens_per_window", "window", "name",
               "key_file", "key_lifetime", "url", "port", "max_batch"}
ATTESTERS = ("jwt", "address")


def _tokens(d: dict[str, Any], key: str, env: str) -> list[str]:
    raw = os.environ.get(env)
    tokens: Any = [t.strip() for t in raw.split(",") if t.strip()] if raw else d.get(key, [])
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
        raise fail(f"server.{key}", "must be a list of non-empty strings")
    for t in tokens:
        if len(t) < 8:
            raise fail(f"server.{key}", "tokens must be at least 8 characters")
    return tokens


def _trusted_proxies(d: dict[str, Any]) -> tuple[str, ...]:
    """``[server] trusted_proxies``: addresses or networks (``ipaddress.ip_network``)."""
    value = d.get("trusted_proxies", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail("server.trusted_proxies", "must be a list of IP addresses or networks "
                   '(e.g. ["127.0.0.1", "10.0.0.0/8"])')
    for v in value:
        try:
            ipaddress.ip_network(v.strip(), strict=False)
        except ValueError:
            raise fail("server.trusted_proxies", f"{v!r} is not an IP address or network "
                       "(e.g. 127.0.0.1, 10.0.0.0/8)") from None
    return tuple(v.strip() for v in value)


def _admin_tokens(d: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """``admin_tokens``: strings, or tables ``{name = "…", token = "…"}`` naming the holder (the
    campaign history records who changed what); (tokens, token digest → name)."""
    raw = d.get("admin_tokens", [])
    if os.environ.get("LDPTEL_ADMIN_TOKENS") or not isinstance(raw, list):
        return _tokens(d, "admin_tokens", "LDPTEL_ADMIN_TOKENS"), {}
    plain: list[Any] = []
    names: dict[str, str] = {}
    for item in raw:
        if isinstance(item, dict):
            name, token = item.get("name"), item.get("token")
            if set(item) != {"name", "token"} or not isinstance(name, str) or not 0 < len(name) <= 64:
                raise fail("server.admin_tokens", "a named token is a table {name = \"…\" (1 to 64 "
                                                  "characters), token = \"…\"}")
            plain.append(token)
            if isinstance(token, str):
                names[token_digest(token)] = name
        else:
            plain.append(item)
    return _tokens({"admin_tokens": plain}, "admin_tokens", "LDPTEL_ADMIN_TOKENS"), names


def token_digest(token: str) -> str:
    """A token's identity in logs, rate limits and the history: 24 hex of its SHA-256."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:24]


@dataclass(frozen=True)
class ServerConfig:
    ingest_tokens: list[str] = field(default_factory=list)
    export_tokens: list[str] = field(default_factory=list)
    admin_tokens: list[str] = field(default_factory=list)  # the admin API (/v1/admin/…); none: off
    admin_names: dict[str, str] = field(default_factory=dict)  # token_digest → the holder's name
    max_body_bytes: int = 1 << 20
    max_reports_per_batch: int = 10_000
    rate_limit_per_minute: int = 6_000  # requests per ingest token per minute
    secret_key: str | None = None  # signs operator sessions; random per process if unset
    session_idle_seconds: int = 1800  # an operator session ends after this long without a request
    auth_failure_limit: int = 20  # failed authentications per address or token prefix per window
    auth_failure_window_seconds: int = 60
    max_aggregator_lag_seconds: int = 300  # /healthz answers 503 beyond (supervised aggregator)
    # ingest requests per client address per minute (0: no per-address limit), counted besides
    # the token's rate_limit_per_minute; a request refused here spends nothing of the token's
    rate_limit_per_address_per_minute: int = 600
    # proxies whose X-Forwarded-For (client address) and X-Forwarded-Proto (https: Secure cookies)
    # are believed (addresses or networks); none: the peer is
    trusted_proxies: tuple[str, ...] = ()
    max_unfinished_bodies_per_address: int = 4  # bodies still arriving, per address and process


@dataclass(frozen=True)
class AggregatorConfig:
    read_count: int = 500  # stream entries (batches) per XREADGROUP
    block_ms: int = 1000
    retention_seconds: int = 7 * 86400  # acked entries older than this are trimmed
    claim_idle_ms: int = 60_000  # pending entries idle this long are claimed from dead workers
    publish_interval: float = 5.0  # seconds between two publications of one (campaign, window)


@dataclass(frozen=True)
class ShufflerConfig:
    """``[shuffler]``: with ``enabled`` the collector appends to the ingress streams and
    ``ldptel shuffle`` moves shuffled reports to the analysis streams the aggregator reads;
    without, the collector appends to the analysis streams directly (no shuffle model)."""
    enabled: bool = True
    poll_ms: int = 200  # how often the shuffler reads the ingress streams
    batch_reports: int = 1000  # reports per re-packed analysis batch
    # a (campaign, version, window) is released at this many (a shuffled one before its window
    # closes: forced early, a warning; issue 38: a window of 10⁶ devices is one release, held in
    # ~0.2 GB: docs/operations.md)
    max_held_reports: int = 2_000_000
    # serve rewrites its embedded Redis's AOF this often: until a rewrite, the AOF still holds the
    # ingress batches (as devices sent them) that the shuffler deleted from memory
    aof_rewrite_seconds: int = 600
    # the collector refuses new batches (503, Retry-After) while a campaign shard's ingress stream
    # holds this many (a stopped shuffler): bounded, and no accepted report is ever trimmed
    max_ingress_batches: int = 4_000_000  # per (version, window, cell) group; half of it forces a release
    # the aggregator's signing key (``ldptel analyzer-key show``): the shuffler seals its fakes only
    # to a published key signed by it; unset: checked by key id only (``shuffler.fakes``)
    analyzer_signing_key: str | None = None
    # processes that seal the shuffler's own fakes (``shuffler.sealer``): 0 = every core, 1 = in the
    # shuffler's process
    fake_processes: int = 0


@dataclass(frozen=True)
class AnalyzerConfig:
    """``[analyzer]``: the aggregator's HPKE key pairs for campaigns in a shuffled privacy mode
    (``ldptel.aggregator.keyring``): a new key every ``key_rotation``, the previous one still
    accepted for ``key_overlap``; private keys in ``keys_dir`` (default
    ``<LDPTEL_DATA_DIR>/analyzer-keys``), never in Redis; a release's messages are opened on
    ``open_processes`` processes (0: every core; ``aggregator.opening``)."""
    key_rotation: str = "30d"
    key_overlap: str = "7d"
    keys_dir: str | None = None
    open_processes: int = 0


def _table(raw: Any, name: str, allowed: set[str]) -> dict[str, Any]:
    """The ``[name]`` table ``raw``, every key in ``allowed`` (else ``ConfigError`` naming it)."""
    if not isinstance(raw, dict):
        raise fail(name, "must be a table")
    for key in raw:
        if key not in allowed:
            raise fail(f"{name}.{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
    return raw


def _duration(raw: dict[str, Any], table: str, key: str, default: str, low: int) -> str:
    """``[table] key``: a duration (``ldptel.durations``) of at least ``low`` seconds, as given."""
    value = raw.get(key, default)
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise fail(f"{table}.{key}", str(exc)) from None
    if seconds < low:
        raise fail(f"{table}.{key}", f"must be at least {low} s, got {value!r}")
    return str(value)


def _analyzer(raw: Any) -> AnalyzerConfig:
    raw = _table(raw, "analyzer", ANALYZER_KEYS)
    out = {key: _duration(raw, "analyzer", key, getattr(AnalyzerConfig, key), low)
           for key, low in (("key_rotation", 60), ("key_overlap", 1))}
    keys_dir = raw.get("keys_dir")
    if keys_dir is not None and (not isinstance(keys_dir, str) or not keys_dir):
        raise fail("analyzer.keys_dir", "must be a non-empty path")
    return AnalyzerConfig(keys_dir=keys_dir, open_processes=read_int(raw, "open_processes", "analyzer", 0, 0,
                                                                     MAX_OPEN_PROCESSES), **out)


@dataclass(frozen=True)
class IssuerConfig:
    """``[issuer]`` (issue 37): the Privacy Pass issuer (``ldptel issuer``, ``ldptel.server.issuer``).
    It gives at most ``tokens_per_window`` tokens per attested subject per ``window`` (default: one
    per campaign that requires tokens, over the shortest such campaign window); ``attester`` says
    who a subject is (``jwt``: the ``sub`` of a JWT signed by ``jwt_public_key``, a PEM or JWKS
    file, for ``jwt_audience``; ``address``: the client address, weak, for demos and tests). Its
    RSA key lives in ``key_file`` (default ``<LDPTEL_DATA_DIR>/issuer/key.pem``; the collector
    reads only ``<key_file>.pub.json``, the public key directory), replaced after ``key_lifetime``."""
    attester: str = "address"
    jwt_public_key: str | None = None
    jwt_audience: str | None = None
    tokens_per_window: int = 1
    window: str = "1d"
    name: str = "ldptel-issuer"
    key_file: str | None = None
    key_lifetime: str = "30d"
    url: str | None = None  # what devices are told (default: http://127.0.0.1:<port>)
    port: int = 8101
    max_batch: int = 64  # TokenRequests per batch request (more: 413)

    @property
    def window_seconds(self) -> int:
        return parse_duration(self.window)

    @property
    def key_lifetime_seconds(self) -> int:
        return parse_duration(self.key_lifetime)

    def key_path(self) -> Path:
        from ldptel.credentials import data_dir

        return Path(self.key_file) if self.key_file else data_dir() / "issuer" / "key.pem"

    def public_path(self) -> Path:
        """The public key directory the issuer writes and the collector reads."""
        return self.key_path().with_suffix(".pub.json")

    def public_url(self) -> str:
        return self.url or f"http://127.0.0.1:{self.port}"


def _issuer(raw: Any, campaigns: list[Campaign]) -> IssuerConfig:
    """``[issuer]``, every value checked (``ConfigError`` naming the key)."""
    raw = _table(raw, "issuer", ISSUER_KEYS)
    attester = raw.get("attester", "address")
    if attester not in ATTESTERS:
        raise fail("issuer.attester", f"must be one of {', '.join(ATTESTERS)}, got {attester!r}")
    strings: dict[str, Any] = {}
    for key in ("jwt_public_key", "jwt_audience", "name", "key_file", "url"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 1024):
            raise fail(f"issuer.{key}", "must be a non-empty string of at most 1024 characters")
        strings[key] = value
    if attester == "jwt":
        for key in ("jwt_public_key", "jwt_audience"):
            if not strings[key]:
                raise fail(f"issuer.{key}", 'is required with attester = "jwt"')
        if not Path(strings["jwt_public_key"]).is_file():
            raise fail("issuer.jwt_public_key", f"file not found: {strings['jwt_public_key']}")
    token_campaigns = [c for c in campaigns if c.require_tokens]
    windows = [c.window_seconds for c in token_campaigns if c.window_seconds > 0]
    default_window = f"{min(windows)}s" if windows else "1d"
    durations = {key: _duration(raw, "issuer", key, default, low)
                 for key, default, low in (("window", default_window, 60), ("key_lifetime", "30d", 3600))}
    return IssuerConfig(
        attester=attester, jwt_public_key=strings["jwt_public_key"], jwt_audience=strings["jwt_audience"],
        tokens_per_window=read_int(raw, "tokens_per_window", "issuer", max(1, len(token_campaigns)), 1,
                                   10**6),
        name=strings["name"] or "ldptel-issuer", key_file=strings["key_file"], url=strings["url"],
        port=read_int(raw, "port", "issuer", 8101, 1, 65535),
        max_batch=read_int(raw, "max_batch", "issuer", 64, 1, 1024), **durations)


@dataclass(frozen=True)
class Config:
    """The whole configuration, immutable: ``registry.Live`` swaps in a new snapshot when the
    campaign registry changes, so whoever holds one sees one consistent set of campaigns."""

    server: ServerConfig
    aggregator: AggregatorConfig
    campaigns: list[Campaign]  # the latest version of each campaign
    path: Path | None = None
    shuffler: ShufflerConfig = field(default_factory=ShufflerConfig)
    history: dict[str, list[Campaign]] = field(default_factory=dict)  # older versions, ascending
    tables: list[dict[str, Any]] = field(default_factory=list)  # the file's [[campaigns]] tables, as given
    declared: list[Campaign] = field(default_factory=list)  # the file's campaigns, as parsed
    # campaigns whose registry record cannot be read (``ldptel.store.registry``): name → why; quarantined
    broken: dict[str, str] = field(default_factory=dict)
    analyzer: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    issuer: IssuerConfig | None = None  # [issuer]: Privacy Pass tokens (issue 37); None: no issuer

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


def _shuffler(shf: Any) -> ShufflerConfig:
    shf = _table(shf, "shuffler", SHUFFLER_KEYS)
    enabled = shf.get("enabled", True)
    if not isinstance(enabled, bool):
        raise fail("shuffler.enabled", f"must be true or false, got {enabled!r}")
    return ShufflerConfig(
        enabled=enabled,
        poll_ms=read_int(shf, "poll_ms", "shuffler", 200, 1, 60_000),
        batch_reports=read_int(shf, "batch_reports", "shuffler", 1000, 1, 100_000),
        max_held_reports=read_int(shf, "max_held_reports", "shuffler", 2_000_000, 1, 10_000_000),
        aof_rewrite_seconds=read_int(shf, "aof_rewrite_seconds", "shuffler", 600, 1, 86400),
        max_ingress_batches=read_int(shf, "max_ingress_batches", "shuffler", 4_000_000, 1, 10**8),
        analyzer_signing_key=_signing_key_text(shf.get("analyzer_signing_key")),
        fake_processes=read_int(shf, "fake_processes", "shuffler", 0, 0, MAX_OPEN_PROCESSES),
    )


def _signing_key_text(value: Any) -> str | None:
    """``[shuffler] analyzer_signing_key``: None, or the base64 Ed25519 public key (checked)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise fail("shuffler.analyzer_signing_key", f"must be a string, got {value!r}")
    try:
        key_signing.signing_public(value)
    except ValueError as exc:
        raise fail("shuffler.analyzer_signing_key", str(exc)) from None
    return value


def parse_config(data: dict[str, Any], path: Path | None = None) -> Config:
    """Validate a parsed TOML document."""
    for key in data:
        if key not in ("server", "aggregator", "shuffler", "campaigns", "analyzer", "issuer"):
            raise fail(key, "unknown top-level key (allowed: server, aggregator, shuffler, analyzer, "
                       "issuer, campaigns)")
    srv = _table(data.get("server", {}), "server", SERVER_KEYS)
    secret = srv.get("secret_key")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise fail("server.secret_key", "must be a string of at least 16 characters")
    admin_tokens, admin_names = _admin_tokens(srv)
    server = ServerConfig(
        ingest_tokens=_tokens(srv, "ingest_tokens", "LDPTEL_INGEST_TOKENS"),
        export_tokens=_tokens(srv, "export_tokens", "LDPTEL_EXPORT_TOKENS"),
        admin_tokens=admin_tokens, admin_names=admin_names,
        max_body_bytes=read_int(srv, "max_body_bytes", "server", 1 << 20, 1024, 1 << 30),
        max_reports_per_batch=read_int(srv, "max_reports_per_batch", "server", 10_000, 1, 1_000_000),
        rate_limit_per_minute=read_int(srv, "rate_limit_per_minute", "server", 6_000, 1, 10**9),
        secret_key=os.environ.get("LDPTEL_SECRET_KEY", secret),
        session_idle_seconds=read_int(srv, "session_idle_seconds", "server", 1800, 60, 7 * 86400),
        auth_failure_limit=read_int(srv, "auth_failure_limit", "server", 20, 1, 10**6),
        auth_failure_window_seconds=read_int(srv, "auth_failure_window_seconds", "server", 60, 1, 86400),
        max_aggregator_lag_seconds=read_int(srv, "max_aggregator_lag_seconds", "server", 300, 1, 10**7),
        rate_limit_per_address_per_minute=read_int(srv, "rate_limit_per_address_per_minute", "server", 600, 0,
                                                   10**9),
        trusted_proxies=_trusted_proxies(srv),
        max_unfinished_bodies_per_address=read_int(srv, "max_unfinished_bodies_per_address", "server", 4, 1,
                                                   10**6),
    )
    agg = _table(data.get("aggregator", {}), "aggregator", AGGREGATOR_KEYS)
    aggregator = AggregatorConfig(
        read_count=read_int(agg, "read_count", "aggregator", 500, 1, 100_000),
        block_ms=read_int(agg, "block_ms", "aggregator", 1000, 1, 600_000),
        retention_seconds=read_int(agg, "retention_seconds", "aggregator", 7 * 86400, 0, 10**9),
        claim_idle_ms=read_int(agg, "claim_idle_ms", "aggregator", 60_000, 1, 10**9),
        publish_interval=read_seconds(agg, "publish_interval", "aggregator", 5.0, 0.0, 3600.0),
    )
    shuffler = _shuffler(data.get("shuffler", {}))
    raw_campaigns = data.get("campaigns", [])
    if not isinstance(raw_campaigns, list) or not raw_campaigns:
        raise fail("campaigns", "at least one [[campaigns]] table is required")
    campaigns = [parse_campaign(c, f"campaigns[{i}]") for i, c in enumerate(raw_campaigns)]
    names = [c.name for c in campaigns]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise fail(f"campaigns[{dup}].name", "is used by more than one campaign")
    for camp in campaigns:
        check_file_rules(camp, shuffler)
    issuer = None
    if "issuer" in data:  # a config with an [issuer] (a new one): shuffled campaigns take tokens by default
        campaigns = with_token_default(campaigns, True)
        issuer = _issuer(data["issuer"], campaigns)
    else:
        bad = next((c for c in campaigns if c.require_tokens), None)
        if bad is not None:
            raise fail(f"campaigns[{bad.name}].require_tokens", "needs an [issuer] table (the token "
                       "issuer whose public key the collector checks tokens with)")
    return Config(server=server, aggregator=aggregator, campaigns=campaigns, path=path, shuffler=shuffler,
                  tables=[dict(c) for c in raw_campaigns], declared=list(campaigns),
                  analyzer=_analyzer(data.get("analyzer", {})), issuer=issuer)


def with_token_default(campaigns: list[Campaign], issuer: bool) -> list[Campaign]:
    """``require_tokens`` not said: true for a shuffled campaign of a config with an ``[issuer]``
    (issue 37: a new config), else as today (off). Applied by ``parse_config`` and by the
    registry (``registry.Live``) to the versions it reads, so the file and the registry agree."""
    if not issuer:
        return campaigns
    return [replace(c, require_tokens=True) if c.require_tokens is None and c.privacy_mode != "local" else c
            for c in campaigns]


def check_file_rules(camp: Campaign, shuffler: ShufflerConfig) -> None:
    """The rules between a campaign and the file's other tables (issue 34 item 6: one validation
    for every write path): run by ``parse_config``, by the registry's ``check_record`` on every
    write (admin API, ``ldptel campaigns``, apply) and by ``registry.Live`` on every load (so at
    ``serve`` start too). ``ConfigError`` naming the key.

    - ``batch_min`` ≤ ``[shuffler] max_ingress_batches`` / 2: a (version, window, cell) group's
      batch must fit in its share of ingress (one entry per device at worst), else the group can
      never be released and is refused until its window closes."""
    mode = camp.mode
    if isinstance(mode, (Shuffled, ShuffledFakes)) and mode.batch_min > shuffler.max_ingress_batches // 2:
        raise fail(f"campaigns[{camp.name}].batch_min",
                   f"{mode.batch_min:,} devices do not fit in half of a group's ingress "
                   f"([shuffler] max_ingress_batches = {shuffler.max_ingress_batches:,} per (version, "
                   "window, cell), one entry per device at worst): the largest batch_min that works is "
                   f"{shuffler.max_ingress_batches // 2:,}; raise max_ingress_batches, or lower batch_min")


def load_config(path: str | os.PathLike[str]) -> Config:
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
