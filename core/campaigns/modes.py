"""A campaign's ``privacy_mode`` and what it plans (docs/privacy.md):

- ``local`` (default): every report is ε-LDP and sent as a ``ReportBatch`` (today's behaviour).
- ``shuffled``: every device sends one ε₀-LDP report of the campaign's oracle, sealed to the
  analyzer (``ldptel.sealing``); the shuffler releases whole batches of ≥ ``batch_min`` devices.
  ``epsilon`` is planned: the largest ε₀ whose certified central ε at n = ``batch_min`` is ≤
  ``central_epsilon`` at δ = ``central_delta`` (``ldptel.privacy.planner.plan``); an ``epsilon``
  given by the operator must be ≤ that ε₀ and is then used.
- ``shuffled-fakes``: every device sends its index (the true one, or through GRR at
  ``local_epsilon``) plus Poisson(λ) fake indices uniform over the domain, each message sealed;
  λ = ``fake_rate`` is planned (the smallest that certifies the target at ``batch_min``).

Both shuffled modes: frequency campaigns (oracles grr, oue, sue, olh, hadamard for ``shuffled``;
the histogram for ``shuffled-fakes``), and range and numeric campaigns as a histogram over their
index domain (``ldptel.campaigns.shuffled_kinds``: the range's values, the numeric campaign's grid points);
``reports_per_window = 1`` (a window's reports are its devices), no ``memoize`` (nor RAPPOR or
heavy hitters: docs/privacy.md says why). ``central_delta`` defaults to min(1/(10·batch_min), 10⁻⁶). A
target that cannot be certified raises ``UncertifiableTarget`` naming ``central_epsilon`` (or
``central_delta`` below the planner's floor) with the planner's
suggestion; every other error is a ``ConfigError`` naming its key. A shuffled version's claims are
evaluated here, when it is made or read (``_claims``: T = retention / window at most
``release_claims.MAX_RELEASES_COMPOSED``, else refused naming ``retention``), never on a request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ldptel.campaigns import shuffled_kinds
from ldptel.config_values import fail, read_int
from ldptel.errors import UncertifiableTarget
from ldptel.mechanisms.shuffled_kinds import INDEX_KINDS
from ldptel.privacy.modes import MODES

MODE_KEYS = ("privacy_mode", "central_epsilon", "batch_min", "local_epsilon", "grid_points")
SHUFFLED_ORACLES = ("grr", "oue", "sue", "olh", "hadamard")
MAX_BATCH_MIN = 10**7


def parse(raw: dict, where: str, base: Callable[[dict], Any]) -> Any:
    """``base(table)`` (the campaign parser) of ``raw`` with its privacy mode applied: the
    mode's keys checked and the planned ε₀ or fake rate filled in (module docstring)."""
    mode = raw.get("privacy_mode", "local")
    name = raw.get("name")
    at = f"campaigns[{name}]" if isinstance(name, str) else where
    if mode not in MODES:
        raise fail(f"{at}.privacy_mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "local":
        bad = next((k for k in MODE_KEYS[1:] if k in raw), None)
        if bad:
            raise fail(f"{at}.{bad}", 'applies only with privacy_mode = "shuffled" or "shuffled-fakes"')
        return base({k: v for k, v in raw.items() if k != "privacy_mode"})
    kind = raw.get("kind", "frequency")
    if kind not in ("frequency", *INDEX_KINDS):
        raise fail(f"{at}.privacy_mode", f"{mode} is for frequency, range and numeric campaigns "
                   f"(got kind = {kind!r}; docs/privacy.md says why); use privacy_mode = \"local\"")
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
    elif "grid_points" in raw:
        raise fail(f"{at}.grid_points", "applies to numeric campaigns only")
    table = {k: v for k, v in raw.items() if k not in MODE_KEYS}

    def build(oracle: str, epsilon: float | None) -> Any:  # the campaign of the kind, mechanism chosen
        if kind in INDEX_KINDS:
            return shuffled_kinds.build(kind, raw, table, oracle, epsilon, at, base)
        return base({**table, "oracle": oracle, "epsilon": epsilon})

    if mode == "shuffled":
        camp = _shuffled(raw, at, kind, float(target), float(delta), batch_min, d, build)
    else:
        camp = _fakes(raw, at, kind, float(target), float(delta), batch_min, d, build)
    _claims(camp, at)
    return camp


def _claims(camp: Any, at: str) -> None:
    """A shuffled version's claims (``release_claims.version_claims``: the planned bound and the
    cumulative ε over T = retention / window releases) evaluated now, when the version is made or
    loaded, so that no request computes them; T above ``MAX_RELEASES_COMPOSED`` is refused."""
    from ldptel.privacy import release_claims  # scipy: server side only

    releases = release_claims.releases_composed(camp)
    if releases is not None and releases > release_claims.MAX_RELEASES_COMPOSED:
        largest = release_claims.MAX_RELEASES_COMPOSED * camp.window_seconds
        unit, size = next((u, n) for u, n in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)) if largest >= n)
        raise fail(f"{at}.retention", f"keeps {releases:,} windows of {camp.window}: a shuffled campaign's "
                   f"cumulative ε composes at most {release_claims.MAX_RELEASES_COMPOSED:,} "
                   f"(MAX_RELEASES_COMPOSED); retention <= \"{largest // size}{unit}\" works with window = "
                   f"{camp.window!r}, got {camp.retention!r}")
    try:
        release_claims.version_claims(camp)
    except (ValueError, ArithmeticError, MemoryError) as exc:
        raise fail(f"{at}.central_delta", f"the claims of this version cannot be computed ({exc}); "
                   "a larger central_delta or a shorter retention may") from None


def _plan(mode: str, oracle: str, d: Any, target: float, delta: float, batch_min: int, at: str,
          local_epsilon: float | None = None) -> Any:
    from ldptel.privacy.plan_cache import cached_plan as plan  # scipy: server side only

    if isinstance(d, bool) or not isinstance(d, int) or d < 2:
        raise fail(f"{at}.domain_size", "give domain (labels) or domain_size (≥ 2)")
    try:
        return plan(mode, oracle, d, target, delta, batch_min, local_epsilon=local_epsilon)
    except UncertifiableTarget as exc:  # named by what it suggests (central_delta below the floor)
        key = "central_delta" if "central_delta" in exc.suggestion else "central_epsilon"
        raise UncertifiableTarget(f"{at}.{key}: cannot certify: {exc}", exc.suggestion) from None
    except ValueError as exc:
        key = next((k for k in ("central_delta", "batch_min", "local_epsilon", "oracle")
                    if k in str(exc)), "central_epsilon")
        raise fail(f"{at}.{key}", str(exc)) from None


def _shuffled(raw: dict, at: str, kind: str, target: float, delta: float, batch_min: int, d: Any,
              build: Callable[[str, float | None], Any]) -> Any:
    oracle = raw.get("oracle", "olh" if kind == "frequency" else "grr")
    if kind != "frequency":
        shuffled_kinds.check_oracle(oracle, at)
    elif oracle not in SHUFFLED_ORACLES:
        raise fail(f"{at}.oracle", f"must be one of {', '.join(SHUFFLED_ORACLES)} with privacy_mode = "
                   f"\"shuffled\", got {oracle!r}")
    if "local_epsilon" in raw:
        raise fail(f"{at}.local_epsilon", "applies to shuffled-fakes (shuffled plans epsilon)")
    planned = _plan("shuffled", oracle, d, target, delta, batch_min, at)
    eps = raw.get("epsilon")
    if eps is not None:
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps <= planned.local_epsilon:
            raise fail(f"{at}.epsilon", f"must be a number with 0 < epsilon <= {planned.local_epsilon:g} "
                       f"(the largest ε₀ certifying central ε {target:g} at δ = {delta:g} for batches "
                       f"of {batch_min:,}), got {eps!r}")
    eps0 = float(eps if eps is not None else planned.local_epsilon)
    camp = build(oracle, eps0)
    return dataclasses.replace(camp, privacy_mode="shuffled", central_epsilon=target, central_delta=delta,
                               batch_min=batch_min)


def _fakes(raw: dict, at: str, kind: str, target: float, delta: float, batch_min: int, d: Any,
           build: Callable[[str, float | None], Any]) -> Any:
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
    planned = _plan("shuffled-fakes", oracle, d, target, delta, batch_min, at,
                    None if local is None else float(local))
    # the base parser validates a frequency campaign's keys with GRR's; the histogram has no ε
    if kind == "frequency":
        camp = build("grr", float(local) if local is not None else 1.0)
    else:
        camp = build(oracle, None if local is None else float(local))
    return dataclasses.replace(camp, privacy_mode="shuffled-fakes", central_epsilon=target,
                               central_delta=delta, batch_min=batch_min, fake_rate=float(planned.fake_rate),
                               oracle=oracle, epsilon=None if local is None else float(local))


def public_fields(campaign: Any) -> dict[str, Any]:
    """What a shuffled campaign adds to ``Campaign.public()`` (nothing for ``local``, so local
    campaigns' public configs and digests are unchanged): the mode, the target, ``batch_min``
    and, for shuffled-fakes, ``fake_rate`` (λ)."""
    if campaign.privacy_mode == "local":
        return {}
    out = {"privacy_mode": campaign.privacy_mode,
           "central_target": {"epsilon": campaign.central_epsilon, "delta": campaign.central_delta},
           "batch_min": campaign.batch_min}
    if campaign.privacy_mode == "shuffled-fakes":
        out["fake_rate"] = campaign.fake_rate
    return out


__all__ = ["MODE_KEYS", "SHUFFLED_ORACLES", "parse", "public_fields"]
