"""One campaign version's table → a validated ``Campaign``: the keys of every kind, the memoized
and numeric parameters, retention; and the ``Campaign`` object the server, aggregator and
registry pass around (``public()`` is what devices fetch, ``privacy()`` its privacy claim)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, SimpleNamespace
from typing import Any

from ldptel.campaigns import modes as privacy_modes
from ldptel.campaigns.kinds import device_level_params, memoize_params, numeric_params
from ldptel.campaigns.limits import (
    MAX_DESCRIPTION_CHARS,
    MAX_FREQUENCY_DOMAIN,
    MAX_RANGE_DOMAIN,
    check_cell_costs,
    check_costs,
    check_labels,
    check_version_bytes,
)
from ldptel.config_values import fail, read_int
from ldptel.dimensions import Dimensions, parse_dimensions
from ldptel.durations import parse_duration, parse_window
from ldptel.mechanisms import MECHANISMS, create_mechanism
from ldptel.mechanisms.base import MAX_EPSILON, MIN_EPSILON, Mechanism
from ldptel.mechanisms.builder import CAMPAIGN_KINDS as KINDS
from ldptel.mechanisms.builder import (
    DEVICE_LEVEL_KINDS,
    RANGE_METHODS,
    RAPPOR_KEYS,
    build_mechanism,
    estimate_kind,
)
from ldptel.mechanisms.claims import privacy_claim
from ldptel.mechanisms.errors import argument_of
from ldptel.mechanisms.heavy_hitters import (
    check_pool_size,
    default_pool_size,
    pool_hash_range,
    walk_candidates,
)
from ldptel.mechanisms.rappor import MAX_CANDIDATES, MAX_CANDIDATES_DEFAULT, RAPPOR
from ldptel.privacy.modes import LOCAL, PrivacyMode

NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
ORACLES = tuple(MECHANISMS)  # grr, sue, oue, olh, hadamard, rappor
COMMON_CAMPAIGN_KEYS = {"name", "kind", "epsilon", "window", "min_reports", "shards", "description",
                        "memoize", "epsilon_inf", "reports_per_window", "retention", "accept_old_versions",
                        "shuffle_min_reports", "shuffle_max_delay", "central_delta",
                        "shuffle_early_release",  # issue 38: opt-in early releases of a shuffled window
                        "dimensions", "experiment",  # breakdowns: ldptel.dimensions
                        "require_tokens",  # issue 37: a Privacy Pass token per envelope
                        *privacy_modes.MODE_KEYS}
MAX_REPORTS_PER_WINDOW = 1_000_000
# keys that may change without a new campaign version (ldptel.store.registry); every other key is a
# randomization parameter (or the window / shards), immutable per version
IN_PLACE_KEYS = ("description", "min_reports", "accept_old_versions", "retention", "reports_per_window",
                 "shuffle_min_reports", "shuffle_max_delay", "central_delta", "experiment", "require_tokens",
                 "shuffle_early_release")
CAMPAIGN_STATUSES = ("active", "paused", "retired")
KIND_KEYS = {
    "frequency": {"oracle", "domain", "domain_size", "max_candidates", *RAPPOR_KEYS},
    "heavy_hitters": {"max_length", "levels", "width", "oracle", "pool_size"},
    "range": {"domain_size", "method", "branching"},
    "numeric": {"lower", "upper", "mechanism", "memoize", "buckets"},
    # device-level kinds (ldptel.campaigns.kinds): one report per device and window
    "unique_devices": set(),
    "per_device_histogram": {"oracle", "domain", "domain_size"},
    "per_device_count": {"lower", "upper", "mechanism"},
}



@dataclass(frozen=True)
class Campaign:
    """One campaign version, immutable: a change is a new object (``dataclasses.replace``).
    ``params`` holds the kind-specific settings as validated values (never mutated after
    ``parse_campaign``)."""

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
    version: int = 1  # randomization parameters are immutable per version (``ldptel.store.registry``)
    accept_old_versions: int = 7 * 86400  # seconds a superseded version's reports are accepted
    superseded_at: float | None = None  # epoch seconds a newer version replaced this one
    status: str = "active"  # CAMPAIGN_STATUSES; "paused" / "retired" refuse reports
    reason: str = ""  # why it is paused or retired
    # the shuffler releases a (version, window)'s reports once it holds this many, or once the
    # oldest has waited shuffle_max_delay (a duration)
    shuffle_min_reports: int = 1000
    shuffle_max_delay: str = "60s"
    central_delta: float | None = None  # δ of the central (shuffled) ε; None: min(1/(10n), 1e-6)
    # a shuffled campaign's (version, window, cell) group is released ONCE, at its window's close
    # (``shuffler.sealed``); > 0: also whenever it holds this many devices (≥ batch_min), at a cost
    # in accuracy: k releases in a window → std error per count ≈ √k·√μ (0: off)
    shuffle_early_release: int = 0
    dimensions: Dimensions | None = None  # public breakdown dimensions (``ldptel.dimensions``)
    # the privacy mode as a type, with its own fields and pinned plan (``ldptel.privacy.modes``:
    # Local, Shuffled, ShuffledFakes), chosen once by the parse (``ldptel.campaigns.modes``)
    mode: PrivacyMode = LOCAL
    # issue 37: a report is taken only with a valid, unspent Privacy Pass token bound to the
    # campaign's window (``ldptel.server.redemption``); None: not said (the file's [issuer] decides,
    # ``config.parse_config``), False: today's behaviour
    require_tokens: bool | None = None

    @property
    def privacy_mode(self) -> str:
        """The mode's name (``local``, ``shuffled``, ``shuffled-fakes``): for serialization and
        messages; code branches on ``mode``'s type."""
        return self.mode.name

    def accepts_until(self) -> float:
        """Epoch seconds until which reports of this version are accepted (inf: the latest)."""
        if self.superseded_at is None:
            return float("inf")
        return self.superseded_at + self.accept_old_versions

    @property
    def estimate_kind(self) -> str:
        """The kind of the estimates it publishes: ``frequency`` for unique_devices and
        per_device_histogram, ``numeric`` for per_device_count, else its ``kind``."""
        return estimate_kind(self.kind)

    @property
    def window_seconds(self) -> int:
        """Seconds per window (``durations.parse_window``; 0 for "all")."""
        return parse_window(self.window)

    @property
    def shuffle_max_delay_seconds(self) -> int:
        """Seconds of ``shuffle_max_delay``."""
        return parse_duration(self.shuffle_max_delay)

    @property
    def retention_seconds(self) -> int | None:
        """Seconds of ``retention`` (None: windows are kept forever)."""
        return None if self.retention is None else parse_duration(self.retention)

    def labels(self) -> list[Any]:
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

    def public(self) -> dict[str, Any]:
        """What clients fetch from ``GET /v1/campaigns`` (no secrets)."""
        out: dict[str, Any] = {"name": self.name, "version": self.version, "kind": self.kind,
                               "epsilon": self.epsilon}
        for key in ("oracle", "domain", "domain_size"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(self.params)
        out.update(window=self.window, window_seconds=self.window_seconds,
                   reports_per_window=self.reports_per_window)
        out.update(privacy_modes.public_fields(self))
        if self.dimensions is not None:
            out["dimensions"] = self.dimensions.public()
        if self.require_tokens:  # only when on: the public config of every other campaign is unchanged
            out["require_tokens"] = True
        return out

    def privacy(self) -> dict[str, Any]:
        """The campaign's privacy claim (``ldptel.mechanisms.claims.privacy_claim``): the ``privacy``
        object of ``/v1/campaigns`` and of every export document (cached per public config)."""
        return dict(_privacy_of(json.dumps(self.public(), sort_keys=True)))


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
        raise fail(key, str(exc)) from None
    if parse_window(window) == 0:
        raise fail(key, 'needs windows of a fixed length (window = "all" is one window)')
    if kept < parse_window(window):
        raise fail(key, f"must be at least the window length ({window}), got {value!r}")
    return str(value)


def _shuffle_max_delay(value: Any, key: str) -> str:
    """A duration (``durations.parse_duration``) of at most a day."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise fail(key, str(exc)) from None
    if seconds > 86400:
        raise fail(key, f"must be at most 1d, got {value!r}")
    return str(value)


# the bound takes log(4/δ) and binomial quantiles at δ·1e-6: scipy finds them down to ~1e-200 (not
# at 1e-300, nor does log(4/δ) exist below 4/1.8e308); 1e-100 keeps a wide margin, far below any δ used
MIN_CENTRAL_DELTA = 1e-100


def _central_delta(value: Any, key: str) -> float | None:
    """δ of the central ε: a number in [``MIN_CENTRAL_DELTA``, 1e-3], or absent (the default
    follows n)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not MIN_CENTRAL_DELTA <= value <= 1e-3:
        raise fail(key, f"must be a number with 1e-100 <= central_delta <= 0.001, got {value!r}")
    return float(value)


def parse_campaign(raw: Any, where: str, pinned: Mapping[str, Any] | None = None) -> Campaign:
    """One ``[[campaigns]]`` table (or an admin API body) → a validated ``Campaign`` (version 1);
    ``ConfigError`` naming the key otherwise. ``privacy_mode`` and its keys:
    ``ldptel.campaigns.modes``; ``pinned``: the plan stored with the version (its registry
    entry's ``plan``), used instead of planning again."""
    if not isinstance(raw, dict):
        raise fail(where, "must be a table")
    campaign: Campaign = privacy_modes.parse(raw, where, lambda table: _parse_campaign(table, where), pinned)
    early = campaign.shuffle_early_release
    batch_min = getattr(campaign.mode, "batch_min", None)
    if early and batch_min is None:
        raise fail(f"campaigns[{campaign.name}].shuffle_early_release",
                   "applies to a campaign in a shuffled privacy_mode only (a local campaign's "
                   "releases follow shuffle_min_reports)")
    if early and batch_min is not None and early < batch_min:
        raise fail(f"campaigns[{campaign.name}].shuffle_early_release",
                   f"must be 0 (one release per window) or at least batch_min ({batch_min:,}), "
                   f"got {early:,}")
    return campaign


def _parse_campaign(raw: Any, where: str) -> Campaign:
    """One local campaign's table (``parse_campaign`` without the privacy mode): the keys every
    kind shares, then RAPPOR's own, or ε and the kind's."""
    camp, where = _common_fields(raw, where)
    kind = camp.kind
    if kind == "frequency" and raw.get("oracle", "olh") == "rappor":
        return _rappor(raw, where, camp)
    eps = raw.get("epsilon")
    if eps is None:
        raise fail(f"{where}.epsilon", "is required (no default: choose the privacy budget)")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not MIN_EPSILON <= eps <= MAX_EPSILON:
        raise fail(f"{where}.epsilon", f"must be a number with {MIN_EPSILON:g} <= epsilon <= {MAX_EPSILON:g} "
                                       "(below 0.01 no campaign gets a usable estimate; above 10 a report "
                                       f"is all but the true value), got {eps!r}")
    camp.epsilon = float(eps)
    if kind in DEVICE_LEVEL_KINDS:
        device_level_params(raw, where, camp)
        if kind == "unique_devices":
            return _finished(camp, where)
        kind = estimate_kind(kind)  # then parsed as the frequency or numeric campaign it publishes
    if kind != "numeric":  # numeric campaigns: 1BitMean's own memoization (numeric_params)
        camp.params.update(memoize_params(raw, where, camp.epsilon))
    if kind == "frequency":
        _frequency_fields(raw, where, camp)
    elif kind == "heavy_hitters":
        _heavy_hitter_fields(raw, where, camp)
    elif kind == "numeric":
        camp.params = numeric_params({"lower": 0, **raw} if camp.kind != kind else raw, where, camp.epsilon)
    else:
        _range_fields(raw, where, camp)
    return _finished(camp, where)


def _common_fields(raw: Any, where: str) -> tuple[SimpleNamespace, str]:
    """The name, kind, allowed keys and the fields every kind has, as a namespace frozen into a
    ``Campaign`` at the end (``_finished``); and the campaign's ``where`` (``campaigns[NAME]``)."""
    if not isinstance(raw, dict):
        raise fail(where, "must be a table")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise fail(f"{where}.name", f"must match [a-z0-9_-]{{1,64}}, got {name!r}")
    where = f"campaigns[{name}]"
    kind = raw.get("kind", "frequency")
    if kind not in KINDS:
        raise fail(f"{where}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    allowed = COMMON_CAMPAIGN_KEYS | KIND_KEYS[kind]
    for key in raw:
        if key not in allowed:
            raise fail(f"{where}.{key}", f"unknown key for a {kind} campaign "
                        f"(allowed: {', '.join(sorted(allowed))})")
    window = raw.get("window", "all")
    try:
        parse_window(window)
    except ValueError as exc:
        raise fail(f"{where}.window", str(exc)) from None
    retention = _retention(raw.get("retention"), f"{where}.retention", window)
    description = raw.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
        raise fail(f"{where}.description", f"must be a string of at most {MAX_DESCRIPTION_CHARS} characters")
    camp = SimpleNamespace(  # the fields as they are validated; frozen into a Campaign at the end
        oracle=None, domain=None, domain_size=None, params={},
        name=name, kind=kind, epsilon=None, window=window, description=description, retention=retention,
        min_reports=read_int(raw, "min_reports", where, 1000, 1, 10**12),
        shards=read_int(raw, "shards", where, 1, 1, 1024),
        reports_per_window=read_int(raw, "reports_per_window", where, 1, 1, MAX_REPORTS_PER_WINDOW),
        accept_old_versions=read_int(raw, "accept_old_versions", where, 7 * 86400, 0, 10**9),
        shuffle_min_reports=read_int(raw, "shuffle_min_reports", where, 1000, 1, 10**7),
        shuffle_early_release=read_int(raw, "shuffle_early_release", where, 0, 0, 10**9),
        shuffle_max_delay=_shuffle_max_delay(raw.get("shuffle_max_delay", "60s"),
                                             f"{where}.shuffle_max_delay"),
        central_delta=_central_delta(raw.get("central_delta"), f"{where}.central_delta"),
        dimensions=parse_dimensions(raw.get("dimensions"), raw.get("experiment"), where),
        require_tokens=_require_tokens(raw.get("require_tokens"), f"{where}.require_tokens"),
    )
    return camp, where


def _require_tokens(value: Any, key: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise fail(key, f"must be true or false, got {value!r}")
    return value


def _rappor(raw: dict[str, Any], where: str, camp: SimpleNamespace) -> Campaign:
    """A RAPPOR frequency campaign: its parameters instead of ε (ε and ε∞ follow from them)."""
    camp.oracle = "rappor"
    missing = [k for k in RAPPOR_KEYS if k not in raw]
    if missing:
        raise fail(f"{where}.{missing[0]}", "is required for the rappor oracle")
    not_rappor = ("epsilon", "domain", "domain_size", "memoize", "epsilon_inf")
    if any(k in raw for k in not_rappor):
        bad = next(k for k in not_rappor if k in raw)
        raise fail(f"{where}.{bad}", "does not apply to rappor (ε, ε∞ follow from f, p, q, "
                    "hashes; its permanent response is always memoized)")
    params = {k: raw[k] for k in RAPPOR_KEYS}
    check_labels(params["candidates"], f"{where}.candidates")
    cap = read_int(raw, "max_candidates", where, MAX_CANDIDATES_DEFAULT, 1, MAX_CANDIDATES)
    if isinstance(params["candidates"], list) and len(params["candidates"]) > cap:
        raise fail(f"{where}.candidates", f"has {len(params['candidates'])} entries, more than "
                   f"max_candidates = {cap}: decoding costs grow as the cube of the candidates "
                   f"(about 1 s at 2,048); raise max_candidates (at most {MAX_CANDIDATES}) or "
                   "split the list over campaigns")
    try:
        mech = create_mechanism("rappor", **params)
    except ValueError as exc:  # RAPPOR names the argument at fault (argument_of)
        key = argument_of(exc)
        raise fail(f"{where}.{key if key in RAPPOR_KEYS else 'rappor'}", str(exc)) from None
    assert isinstance(mech, RAPPOR)
    camp.params = params  # max_candidates is checked here only: not published, no new version
    camp.epsilon = mech.epsilon
    camp.params["epsilon_inf"] = mech.epsilon_inf
    return _finished(camp, where)


def _frequency_fields(raw: dict[str, Any], where: str, camp: SimpleNamespace) -> None:
    """A frequency campaign's oracle and domain (labels, or a size)."""
    oracle = raw.get("oracle", "olh")
    if oracle not in ORACLES:
        raise fail(f"{where}.oracle", f"must be one of {', '.join(ORACLES)}, got {oracle!r}")
    for key in (*RAPPOR_KEYS, "max_candidates"):
        if key in raw:
            raise fail(f"{where}.{key}", "applies only to oracle = \"rappor\"")
    camp.oracle = oracle
    if ("domain" in raw) == ("domain_size" in raw):
        raise fail(f"{where}.domain", "give exactly one of domain (labels) or domain_size")
    if "domain" in raw:
        dom = raw["domain"]
        if (not isinstance(dom, list) or len(dom) < 2
                or not all(isinstance(v, str) and v for v in dom)):
            raise fail(f"{where}.domain", "must be a list of at least 2 non-empty strings")
        if len(set(dom)) != len(dom):
            raise fail(f"{where}.domain", "values must be distinct")
        check_labels(dom, f"{where}.domain")
        camp.domain = list(dom)
        camp.domain_size = len(dom)
    else:
        camp.domain_size = read_int(raw, "domain_size", where, None, 2, MAX_FREQUENCY_DOMAIN)


def _heavy_hitter_fields(raw: dict[str, Any], where: str, camp: SimpleNamespace) -> None:
    """A heavy-hitter campaign's tree (``max_length``, ``levels``, ``width``) and seed pool."""
    camp.oracle = "olh"
    if raw.get("oracle", "olh") != "olh":
        raise fail(f"{where}.oracle", "heavy hitters use olh")
    max_length = read_int(raw, "max_length", where, None, 1, 64)
    camp.params.update({
        "max_length": max_length,
        # at most 16 new bits per level (the walk evaluates width·2^bits candidates)
        "levels": read_int(raw, "levels", where, max_length, -(-max_length // 2), 8 * max_length),
        "width": read_int(raw, "width", where, 64, 1, 4096),
    })
    # always published: an SDK must not have to agree with the server on a default
    levels, g = camp.params["levels"], pool_hash_range(camp.epsilon)
    cands = walk_candidates(max_length, levels, camp.params["width"])
    pool = read_int(raw, "pool_size", where, default_pool_size(levels, g, cands), 1, 1 << 16)
    try:
        camp.params["pool_size"] = check_pool_size(pool, levels, g, cands)
    except ValueError as exc:
        raise fail(f"{where}.pool_size", str(exc)) from None


def _range_fields(raw: dict[str, Any], where: str, camp: SimpleNamespace) -> None:
    """A range campaign's domain and method (``branching`` for the hierarchical one)."""
    camp.domain_size = read_int(raw, "domain_size", where, None, 2, MAX_RANGE_DOMAIN)
    method = raw.get("method", "haar")
    if method not in RANGE_METHODS:
        raise fail(f"{where}.method", f"must be one of {', '.join(RANGE_METHODS)}, got {method!r}")
    camp.params["method"] = method
    if "branching" in raw:
        if method != "hierarchical":
            raise fail(f"{where}.branching", "applies only to method = \"hierarchical\"")
        camp.params["branching"] = read_int(raw, "branching", where, None, 2, 1024)


def _finished(camp: SimpleNamespace, where: str) -> Campaign:
    """The validated fields as a ``Campaign``, once its costs are within ``campaign_limits``."""
    check_costs(camp.kind, camp.oracle, camp.params, where)
    check_cell_costs(camp.dimensions, camp.kind, camp.domain_size, camp.params, where)
    campaign = Campaign(**vars(camp))
    check_version_bytes(campaign.public(), where)
    return campaign
