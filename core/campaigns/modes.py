"""A campaign's ``privacy_mode`` and what it plans (docs/privacy.md):

- ``local`` (default): every report is ε-LDP and sent as a ``ReportBatch`` (today's behaviour).
- ``shuffled``: every device sends one ε₀-LDP report of the campaign's oracle, sealed to the
  analyzer (``ldptel.sealing``); the shuffler releases whole batches of ≥ ``batch_min`` devices.
  ``epsilon`` is planned: the largest ε₀ whose certified central ε at n = ``batch_min`` is ≤
  ``central_epsilon`` at δ = ``central_delta`` (``ldptel.privacy.plan``); an ``epsilon``
  given by the operator must be ≤ that ε₀ and is then used.
- ``shuffled-fakes``: every device sends its index (the true one, or through GRR at
  ``local_epsilon``) plus Poisson(λ) fake indices uniform over the domain, each message sealed;
  λ = ``fake_rate`` is planned (the smallest that certifies the target at ``batch_min``).
  ``fake_source`` (``devices``, ``shuffler`` or ``both``, default ``both``; shuffled-fakes only)
  says who adds the planned μ fakes per bucket (``ldptel.privacy.fake_sources.split``): the
  devices (λ), the shuffler (Poisson(μ_s) per bucket in every release) or half each. A pinned
  plan without the key was made with ``devices``; a table's explicit key must match its pin.

Both shuffled modes: frequency campaigns (oracles grr, oue, sue, olh, hadamard for ``shuffled``;
the histogram for ``shuffled-fakes``), and range and numeric campaigns as a histogram over their
index domain (``ldptel.campaigns.shuffled_kinds``: the range's values, the numeric campaign's grid points);
``reports_per_window = 1`` (a window's reports are its devices), no ``memoize`` (nor RAPPOR:
docs/privacy.md says why). Heavy hitters in ``shuffled`` only (issue 39): today's local report
(level, pool index, hash) at the planned ε₀, planned as oracle ``heavy_hitters`` with the levels J
as its ``domain_size`` (``ldptel.privacy.planner``); ``shuffled-fakes`` is refused with its cost
(``ldptel.privacy.heavy_hitter_fakes``). ``central_delta`` defaults to min(1/(10·batch_min), 10⁻⁶). A
target that cannot be certified raises ``UncertifiableTarget`` naming ``central_epsilon`` (or
``central_delta`` below the planner's floor) with the planner's suggestion; every other error is a
``ConfigError`` naming its key (``.key``).

The mode is chosen here once, as a type (``ldptel.privacy.modes``: ``Local``, ``Shuffled``,
``ShuffledFakes``), and held by the campaign as ``Campaign.mode``. A shuffled mode's plan is
pinned: ``parse`` given a version's stored plan (``pinned``, the ``plan`` of its registry entry)
uses it and does not plan again; without one (a new version, the config file) it plans through
``ldptel.privacy.plan``; a stored plan made for other inputs than the table's is a
``ConfigError`` naming ``plan``. A shuffled version's claims are evaluated here, when its plan is
made (``_claims``: T = retention / window at most ``release_claims.MAX_RELEASES_COMPOSED``, else
refused naming ``retention``), never on a request; reading a pinned version computes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ldptel.campaigns import shuffled_kinds
from ldptel.config_values import fail, read_int
from ldptel.errors import UncertifiableTarget
from ldptel.mechanisms.errors import argument_of
from ldptel.mechanisms.shuffled_kinds import HEAVY_HITTERS, INDEX_KINDS
from ldptel.privacy.fake_sources import DEFAULT_FAKE_SOURCE, FAKE_SOURCES, split
from ldptel.privacy.modes import MODES, Local, Pinned, PlanInputs, Shuffled, ShuffledFakes

MODE_KEYS = ("privacy_mode", "central_epsilon", "batch_min", "local_epsilon", "grid_points", "fake_source")
SHUFFLED_ORACLES = ("grr", "oue", "sue", "olh", "hadamard")
MAX_BATCH_MIN = 10**7
# the planner's arguments that are also config keys (any other bad argument is the target's)
PLAN_ARGUMENT_KEYS = ("central_delta", "batch_min", "local_epsilon", "oracle")


def parse(raw: dict[str, Any], where: str, base: Callable[[dict[str, Any]], Any],
          pinned: Mapping[str, Any] | None = None) -> Any:
    """``base(table)`` (the campaign parser) of ``raw`` with its privacy mode applied: the
    mode's keys checked and the mode (``Campaign.mode``) filled in with its plan, the ``pinned``
    one when given (module docstring)."""
    mode = raw.get("privacy_mode", "local")
    name = raw.get("name")
    at = f"campaigns[{name}]" if isinstance(name, str) else where
    if mode not in MODES:
        raise fail(f"{at}.privacy_mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == Local.name:
        bad = next((k for k in MODE_KEYS[1:] if k in raw), None)
        if bad:
            raise fail(f"{at}.{bad}", 'applies only with privacy_mode = "shuffled" or "shuffled-fakes"')
        return base({k: v for k, v in raw.items() if k != "privacy_mode"})
    kind = raw.get("kind", "frequency")
    if kind not in ("frequency", HEAVY_HITTERS, *INDEX_KINDS):
        raise fail(f"{at}.privacy_mode", f"{mode} is for frequency, heavy-hitter, range and numeric "
                   f"campaigns (got kind = {kind!r}; docs/privacy.md says why); use privacy_mode = \"local\"")
    for key in ("memoize", "epsilon_inf"):
        if key in raw:
            raise fail(f"{at}.{key}", f"does not apply with privacy_mode = {mode!r}")
    if raw.get("reports_per_window", 1) != 1:
        raise fail(f"{at}.reports_per_window", f"must be 1 with privacy_mode = {mode!r} (a window's "
                   f"reports are its devices), got {raw['reports_per_window']!r}")
    target = raw.get("central_epsilon")
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 10:
        raise fail(f"{at}.central_epsilon", f"is required with privacy_mode = {mode!r}: a number "
                   f"with 0 < central_epsilon <= 10, got {target!r}")
    batch_min = read_int(raw, "batch_min", at, None, 2, MAX_BATCH_MIN)
    delta = raw.get("central_delta")
    if delta is None:
        delta = min(1.0 / (10 * batch_min), 1e-6)
    domain = raw.get("domain")
    d = len(domain) if isinstance(domain, list) else raw.get("domain_size")
    if kind in INDEX_KINDS:
        d = shuffled_kinds.index_domain(raw, at, kind)
    elif kind == HEAVY_HITTERS:
        d = shuffled_kinds.heavy_hitter_levels(raw, at)
    if kind not in INDEX_KINDS and "grid_points" in raw:
        raise fail(f"{at}.grid_points", "applies to numeric campaigns only")
    table = {k: v for k, v in raw.items() if k not in MODE_KEYS}

    def build(oracle: str, epsilon: float | None) -> Any:  # the campaign of the kind, mechanism chosen
        if kind in INDEX_KINDS:
            return shuffled_kinds.build(kind, raw, table, oracle, epsilon, at, base)
        return base({**table, "oracle": oracle, "epsilon": epsilon})

    def planned(oracle: str, local_epsilon: float | None = None) -> Pinned:  # (after the oracle's checks)
        if kind == HEAVY_HITTERS:  # planned as the pool-OLH, d = the levels J (≥ 1)
            oracle = HEAVY_HITTERS
        if isinstance(d, bool) or not isinstance(d, int) or d < (1 if kind == HEAVY_HITTERS else 2):
            raise fail(f"{at}.domain_size", "give domain (labels) or domain_size (≥ 2)")
        inputs = PlanInputs(mode, oracle, d, float(target), float(delta), batch_min, local_epsilon)
        return _plan(inputs, at) if pinned is None else _pinned(pinned, inputs, at)

    if mode == Shuffled.name:
        camp = _shuffled(raw, at, kind, build, planned)
    elif kind == HEAVY_HITTERS:
        raise fail(f"{at}.privacy_mode", shuffled_kinds.heavy_hitter_fakes_refusal(
            float(target), float(delta), batch_min, shuffled_kinds.heavy_hitter_levels(raw, at)))
    else:
        camp = _fakes(raw, at, kind, build, planned)
    _claims(camp, at, compute=pinned is None)
    return camp


def _claims(camp: Any, at: str, compute: bool) -> None:
    """A shuffled version's claims (``release_claims.version_claims``: the planned bound and the
    cumulative ε over T = retention / window releases) evaluated now, when the version is made or
    loaded, so that no request computes them; T above ``MAX_RELEASES_COMPOSED`` is refused.
    ``compute=False`` (a pinned version read back): T is checked, nothing is computed."""
    from ldptel.privacy import release_claims  # (light: its math imports scipy when called)

    releases = release_claims.releases_composed(camp)
    if releases is not None and releases > release_claims.MAX_RELEASES_COMPOSED:
        largest = release_claims.MAX_RELEASES_COMPOSED * camp.window_seconds
        unit, size = next((u, n) for u, n in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)) if largest >= n)
        raise fail(f"{at}.retention", f"keeps {releases:,} windows of {camp.window}: a shuffled campaign's "
                   f"cumulative ε composes at most {release_claims.MAX_RELEASES_COMPOSED:,} "
                   f"(MAX_RELEASES_COMPOSED); retention <= \"{largest // size}{unit}\" works with window = "
                   f"{camp.window!r}, got {camp.retention!r}")
    if not compute:  # a pinned version: its claims were computed when it was made (no scipy here)
        return
    try:
        release_claims.version_claims(camp)
    except (ValueError, ArithmeticError, MemoryError) as exc:
        raise fail(f"{at}.central_delta", f"the claims of this version cannot be computed ({exc}); "
                   "a larger central_delta or a shorter retention may") from None


def _plan(inputs: PlanInputs, at: str) -> Pinned:
    """A new plan of ``inputs`` (``ldptel.privacy.plan``; scipy on a cache miss, server side)."""
    from ldptel.privacy import plan, plan_cache

    try:
        made = plan(inputs.mode, inputs.oracle, inputs.domain_size, inputs.central_epsilon,
                    inputs.central_delta, inputs.batch_min, local_epsilon=inputs.local_epsilon)
    except UncertifiableTarget as exc:  # named by the planner (central_delta below its floor)
        target_key = exc.key if exc.key in PLAN_ARGUMENT_KEYS else "central_epsilon"
        raise UncertifiableTarget(f"{at}.{target_key}: cannot certify: {exc}", exc.suggestion,
                                  key=f"{at}.{target_key}") from None
    except ValueError as exc:  # the planner names its argument (argument_of)
        named = argument_of(exc)
        key = named if named in PLAN_ARGUMENT_KEYS else "central_epsilon"
        raise fail(f"{at}.{key}", str(exc)) from None
    rate = made.fake_rate
    return Pinned(inputs=inputs, local_epsilon=made.local_epsilon,
                  fake_rate=None if rate is None else float(rate),
                  fakes_per_bucket=None if made.fakes_per_bucket is None else float(made.fakes_per_bucket),
                  bound=str(made.bound), planner_version=plan_cache.VERSION)


def _pinned(stored: Mapping[str, Any], inputs: PlanInputs, at: str) -> Pinned:
    """A version's stored plan, checked to be a plan of ``inputs`` (never planned again)."""
    try:
        pin = Pinned.from_json(stored)
    except ValueError as exc:
        raise fail(f"{at}.plan", f"the version's stored plan cannot be read: {exc}") from None
    if pin.inputs != inputs:
        raise fail(f"{at}.plan", f"the version's stored plan was made for {pin.inputs}, not for its "
                   f"table's {inputs}")
    return pin


def _shuffled(raw: dict[str, Any], at: str, kind: str, build: Callable[[str, float | None], Any],
              planned: Callable[[str], Pinned]) -> Any:
    oracle = raw.get("oracle", "olh" if kind in ("frequency", HEAVY_HITTERS) else "grr")
    if kind == HEAVY_HITTERS:
        if oracle != "olh":
            raise fail(f"{at}.oracle", f"heavy hitters use olh (the pool-OLH of each level), got {oracle!r}")
    elif kind != "frequency":
        shuffled_kinds.check_oracle(oracle, at)
    elif oracle not in SHUFFLED_ORACLES:
        raise fail(f"{at}.oracle", f"must be one of {', '.join(SHUFFLED_ORACLES)} with privacy_mode = "
                   f"\"shuffled\", got {oracle!r}")
    if "local_epsilon" in raw:
        raise fail(f"{at}.local_epsilon", "applies to shuffled-fakes (shuffled plans epsilon)")
    if "fake_source" in raw:
        raise fail(f"{at}.fake_source", 'applies to privacy_mode = "shuffled-fakes" only (shuffled '
                   "reports carry no fakes)")
    pin = planned(oracle)
    largest = pin.local_epsilon
    assert largest is not None  # Pinned.from_json and the planner: a shuffled plan has its ε₀
    target, delta, batch_min = pin.inputs.central_epsilon, pin.inputs.central_delta, pin.inputs.batch_min
    eps = raw.get("epsilon")
    if eps is not None:
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps <= largest:
            raise fail(f"{at}.epsilon", f"must be a number with 0 < epsilon <= {largest:g} "
                       f"(the largest ε₀ certifying central ε {target:g} at δ = {delta:g} for batches "
                       f"of {batch_min:,}), got {eps!r}")
    eps0 = float(eps if eps is not None else largest)
    camp = build(oracle, eps0)
    return dataclasses.replace(camp, central_delta=delta,
                               mode=Shuffled(target, delta, batch_min, eps0, pin))


def _fakes(raw: dict[str, Any], at: str, kind: str, build: Callable[[str, float | None], Any],
           planned: Callable[[str, float | None], Pinned]) -> Any:
    if "epsilon" in raw:
        raise fail(f"{at}.epsilon", "does not apply to shuffled-fakes: the index is sent as it is, or "
                   "through GRR at local_epsilon")
    local = raw.get("local_epsilon")
    oracle = raw.get("oracle", "grr" if local is not None else "histogram")
    if oracle not in ("histogram", "grr") or (oracle == "grr") != (local is not None):
        raise fail(f"{at}.oracle", f"shuffled-fakes sends an index: oracle = \"histogram\" (no local "
                   f"randomization), or \"grr\" with local_epsilon; got {oracle!r}")
    if local is not None and (isinstance(local, bool) or not isinstance(local, (int, float))
                              or not 0 < local <= 10):
        raise fail(f"{at}.local_epsilon", f"must be a number with 0 < local_epsilon <= 10, got {local!r}")
    local_epsilon = None if local is None else float(local)
    source = raw.get("fake_source")
    if source is not None and source not in FAKE_SOURCES:
        raise fail(f"{at}.fake_source", f"must be one of {', '.join(FAKE_SOURCES)}, got {source!r}")
    pin = _with_source(planned(oracle, local_epsilon), source, at)
    assert pin.fake_rate is not None  # Pinned.from_json and the planner: a fakes plan has its λ
    # the base parser validates a frequency campaign's keys with GRR's; the histogram has no ε
    if kind == "frequency":
        camp = build("grr", local_epsilon if local_epsilon is not None else 1.0)
    else:
        camp = build(oracle, local_epsilon)
    inputs = pin.inputs
    mode = ShuffledFakes(inputs.central_epsilon, inputs.central_delta, inputs.batch_min, pin.fake_rate,
                         local_epsilon, pin, str(pin.fake_source), pin.shuffler_fakes)
    return dataclasses.replace(camp, central_delta=inputs.central_delta, mode=mode, oracle=oracle,
                               epsilon=local_epsilon)


def _with_source(pin: Pinned, source: str | None, at: str) -> Pinned:
    """A fakes plan with its ``fake_source``: a new plan (``fake_source`` None) split as the
    table's key says (default ``both``); a pinned one keeps its own, which an explicit key must
    match (``fake_source`` is part of what a version is)."""
    if pin.fake_source is None:  # made now: λ and μ_s from the planner's μ
        mu = pin.fakes_per_bucket
        assert mu is not None
        inputs = pin.inputs
        made = split(mu, source or DEFAULT_FAKE_SOURCE, inputs.domain_size, inputs.batch_min)
        return dataclasses.replace(pin, fake_rate=made.device_rate, shuffler_fakes=made.shuffler_mu,
                                   fake_source=made.source)
    if source is not None and source != pin.fake_source:
        raise fail(f"{at}.plan", f"the version's stored plan has fake_source = {pin.fake_source!r}, not "
                   f"its table's {source!r} (a new version takes a new fake_source)")
    return pin


def public_fields(campaign: Any) -> dict[str, Any]:
    """What a shuffled campaign adds to ``Campaign.public()`` (nothing for ``local``, so local
    campaigns' public configs and digests are unchanged): the mode, the target, ``batch_min``
    and, for shuffled-fakes, ``fake_rate`` (λ, the devices'; 0 with ``fake_source = "shuffler"``)
    with ``fake_source`` and the shuffler's μ per bucket (``shuffler_fakes_per_bucket``)."""
    mode = campaign.mode
    if not isinstance(mode, (Shuffled, ShuffledFakes)):
        return {}
    out: dict[str, Any] = {"privacy_mode": mode.name,
                           "central_target": {"epsilon": mode.central_epsilon, "delta": mode.central_delta},
                           "batch_min": mode.batch_min}
    if isinstance(mode, ShuffledFakes):
        out["fake_rate"] = mode.fake_rate
        if mode.fake_source != "devices":  # (configs of device-only versions unchanged)
            out["fake_source"] = mode.fake_source
            out["shuffler_fakes_per_bucket"] = mode.shuffler_fakes
    return out


__all__ = ["MODE_KEYS", "PLAN_ARGUMENT_KEYS", "SHUFFLED_ORACLES", "parse", "public_fields"]
