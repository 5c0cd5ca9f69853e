"""Central-DP bounds of one release and the planner: from a central (ε, δ) target to the campaign.

Two ``shuffled*`` modes (docs/privacy.md):

- ``shuffled``: each device sends one ε₀-LDP report of ``oracle``; the shuffler releases batches of
  at least ``batch_min`` reports. ``shuffled_bound(oracle, ε₀, d, n, δ)`` is the release's
  "central ε between L and U": U the least of ``ldptel.privacy.amplification.ShuffleBound``
  (stronger clone, FMT 2023; for GRR also mixture and clones), the generic clone bound
  (Feldman–McMillan–Talwar 2021, ``ldptel.privacy.shuffle_epsilon``) and ε₀; L from an explicit attack.
- ``shuffled-fakes``: each device sends its true index plus Poisson(λ) fake indices (optionally the
  index passed through GRR at ``local_epsilon`` first); ``fakes_bound(μ, d, δ)`` with μ = λ·n/d fakes
  per bucket (``ldptel.privacy.fake_messages``).

``compute_plan`` picks, at n = ``batch_min``, the largest ε₀ (shuffled; a multiple of 0.001, at most 10)
or the smallest μ (shuffled-fakes; λ = μ·d/batch_min) whose certified U is ≤ the target ε at the
target δ, and reports the expected standard error of one count at n = batch_min: √(n·Var*) with the
oracle's Var* for shuffled, √μ for fakes (the estimate subtracts the mean μ; its Poisson variance
is μ), √(n·q(1−q) + μ)/(p − q) with GRR on top. A larger batch only lowers U (every bound falls
in n). ``oracle = "heavy_hitters"`` (issue 39): the pool-OLH of heavy-hitter reports, one per device,
its level inside the report, so one release of n devices holds every level and the bound is at that
n (the generic pairs: any ε₀-LDP randomizer; L from the pool-OLH attack, ``amplification``);
``domain_size`` is then the number of levels J and the std error is one prefix count's at a level,
√((n/J)·Var*) with the pool's Var* = q(1−q)/(p − q)², q = 1/g, g = ``pool_hash_range(ε₀)`` (the
pool's collision term, which grows with the data's concentration, is left out). ``windows=T``
adds the cumulative ε at the target δ of T such releases (``ldptel.privacy.accounting``).
Results are cached per argument tuple.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from ldptel.errors import UncertifiableTarget
from ldptel.mechanisms import MECHANISMS
from ldptel.mechanisms.base import MAX_EPSILON, MIN_EPSILON, check_epsilon
from ldptel.mechanisms.errors import bad_argument
from ldptel.mechanisms.heavy_hitters import pool_hash_range
from ldptel.mechanisms.olh import keep_probability
from ldptel.mechanisms.shuffled_kinds import HEAVY_HITTERS
from ldptel.privacy.accounting import MAX_RELEASES, PrivacyCurve, cumulative_epsilon
from ldptel.privacy.amplification import (
    DEFAULT_RAPPOR_HASHES,
    ORACLES,
    ShuffleBound,
    amplified_epsilon_lower,
    attack_pairs,
)
from ldptel.privacy.blanket_fakes import (
    fakes_attack_epsilon,
    fakes_blanket_delta,
    fakes_blanket_epsilon,
    fakes_for_blanket,
)
from ldptel.privacy.clones import n_bucket, shuffle_epsilon
from ldptel.privacy.fake_messages import (
    fake_delta,
    fake_epsilon,
    fake_rate,
    fakes_for,
    grr_gamma,
    local_fake_delta,
)

MODES = ("shuffled", "shuffled-fakes")
FAKE_ORACLES = ("histogram", "grr")  # shuffled-fakes sends an index; grr = GRR on top (local_epsilon)
BOUND_FMT21 = "clone (Feldman-McMillan-Talwar 2021)"
BOUND_LOCAL = "local (no amplification certified)"
BOUND_FAKES = "poisson-fakes (exact)"
BOUND_FAKES_LOCAL = "poisson-fakes with GRR (advanced joint convexity)"
BOUND_FAKES_BLANKET = "poisson-fakes inside the GRR blanket (exact count pair)"
MAX_FAKE_RATE = 100.0  # fake messages per device above which a plan is refused
EPS0_STEP = 1e-3
# The smallest δ a plan may target: every bound here adds the mass it truncates, each tail at most
# TAIL = 1e-20 (count_pair, fake_messages), so nothing below about 1e-20 can ever be certified
# (the search for μ or ε₀ would grow without end); at 1e-18 the truncation is at most 2 % of δ.
MIN_DELTA = 1e-18
# The most fakes per bucket a plan may use (the search doubles μ; it stops here): μ = 1e6 certifies
# central ε ≈ 0.006 at δ = 1e-8 (std error √μ = 1,000 per count); fake_delta's arrays hold ~20√μ
# entries (20,000 at 1e6, ~30 ms an evaluation). Below that a target is refused naming what works.
MAX_MU = 1e6


@dataclass(frozen=True)
class CentralBound:
    """What one release can claim: central ε between ``epsilon_lower`` and ``epsilon`` (certified)
    at ``delta``; ``bound`` names the analysis that gave ``epsilon``."""

    epsilon: float
    epsilon_lower: float
    delta: float
    bound: str


@dataclass(frozen=True)
class PrivacyPlan:
    """A plan (module docstring); ``as_dict`` is the JSON object of ``ldptel privacy plan``."""

    mode: str
    oracle: str
    domain_size: int
    batch_min: int
    target_epsilon: float
    central_delta: float
    local_epsilon: float | None  # ε₀ of the reports (shuffled), the GRR on top, or None
    fake_rate: float | None  # λ, fake messages per device (shuffled-fakes)
    fakes_per_bucket: float | None  # μ = λ·batch_min/d
    central_epsilon: float
    central_epsilon_lower: float
    std_error: float | None  # None for RAPPOR (its std errors come from the regression)
    bound: str
    windows: int | None = None
    cumulative_epsilon: float | None = None
    # shuffled-fakes with GRR: the μ an explicit attack shows is needed for the target (every μ that
    # certifies it is above this one); None where no attack is computed
    fakes_per_bucket_lower: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(mode: str, oracle: str, domain_size: int, epsilon: float, delta: float, batch_min: int,
           windows: int | None, local_epsilon: float | None) -> None:
    if mode not in MODES:
        raise bad_argument(f"mode must be one of {', '.join(MODES)}, got {mode!r}", "mode")
    allowed = ORACLES if mode == "shuffled" else FAKE_ORACLES
    if oracle not in allowed:
        raise bad_argument(f"oracle for {mode} must be one of {', '.join(allowed)}, got {oracle!r}", "oracle")
    least = 1 if oracle == HEAVY_HITTERS else 2  # heavy hitters: domain_size is the levels J
    if isinstance(domain_size, bool) or not isinstance(domain_size, int) or domain_size < least:
        raise bad_argument(f"domain_size must be an integer ≥ {least}, got {domain_size!r}", "domain_size")
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise bad_argument(f"central_epsilon must be a finite number > 0, got {epsilon!r}", "central_epsilon")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise bad_argument(f"central_delta must be in (0, 1), got {delta!r}", "central_delta")
    if delta < MIN_DELTA:
        raise UncertifiableTarget(
            f"central_delta = {delta:g} is below {MIN_DELTA:g}, the smallest δ the bounds certify (each "
            f"adds the mass it truncates, up to 1e-20); central_delta >= {MIN_DELTA:g} works",
            suggestion={"central_delta": MIN_DELTA}, key="central_delta")
    if isinstance(batch_min, bool) or not isinstance(batch_min, int) or batch_min < 2:
        raise bad_argument(f"batch_min must be an integer ≥ 2, got {batch_min!r}", "batch_min")
    if local_epsilon is not None:
        if mode != "shuffled-fakes":
            raise bad_argument("local_epsilon applies to shuffled-fakes only (shuffled plans its ε₀)",
                              "local_epsilon")
        check_epsilon(local_epsilon, "local_epsilon")
    if windows is not None and (isinstance(windows, bool) or not isinstance(windows, int)
                                or not 1 <= windows <= MAX_RELEASES):
        raise bad_argument(f"windows must be an integer with 1 <= windows <= {MAX_RELEASES:,} (the most "
                           f"releases composed), got {windows!r}", "windows")


@lru_cache(maxsize=4096)
def shuffled_bound(oracle: str, epsilon0: float, domain_size: int, n: int, delta: float,
                   hashes: int = DEFAULT_RAPPOR_HASHES) -> CentralBound:
    """Central ε of n shuffled ε₀-LDP reports of ``oracle`` at δ: U = min(``ShuffleBound`` at the
    n-bucket, FMT21, ε₀), L = the best explicit attack at n (module docstring); L > U raises."""
    bound = ShuffleBound(oracle, epsilon0, domain_size, n_bucket(n))
    vr = bound.epsilon(delta)
    fmt = shuffle_epsilon(epsilon0, n, delta)
    candidates = [(epsilon0, BOUND_LOCAL)]
    if fmt is not None:
        candidates.append((fmt, BOUND_FMT21))
    if vr is not None:
        candidates.append((vr, bound.bound_name(vr)))
    upper, name = min(candidates)
    lower = amplified_epsilon_lower(oracle, epsilon0, domain_size, n, delta, hashes=hashes)
    return _checked(CentralBound(epsilon=upper, epsilon_lower=lower, delta=delta, bound=name))


def shuffled_curve(oracle: str, epsilon0: float, domain_size: int, n: int,
                   hashes: int = DEFAULT_RAPPOR_HASHES) -> PrivacyCurve:
    """The ``ShuffleBound`` curve of one release (for ``ldptel.privacy.accounting``)."""
    bound = ShuffleBound(oracle, epsilon0, domain_size, n_bucket(n))
    return PrivacyCurve(delta=bound.delta, max_loss=bound.max_loss, name=f"shuffled {oracle}")


@lru_cache(maxsize=4096)
def fakes_bound(mu: float, domain_size: int, n: int, delta: float,
                local_epsilon: float | None = None) -> CentralBound:
    """Central ε of a shuffled histogram with Poisson(μ) fakes per bucket (n devices; n matters only
    with GRR on top, whose shuffled reports are also amplified)."""
    if local_epsilon is None:
        upper = fake_epsilon(mu, delta) if mu > 0 else math.inf
        lower = fake_epsilon(mu, delta, upper=False) if mu > 0 else math.inf
        return _checked(CentralBound(epsilon=upper, epsilon_lower=lower, delta=delta, bound=BOUND_FAKES))
    grr = shuffled_bound("grr", local_epsilon, domain_size, n, delta)
    if mu <= 0:
        return grr  # no fakes: shuffled GRR reports
    lower = fakes_attack_epsilon(mu, local_epsilon, domain_size, n, delta)
    blanket = fakes_blanket_epsilon(mu, local_epsilon, domain_size, n_bucket(n), delta,
                                    start=lower if lower > 0 else None)
    candidates = [(grr.epsilon, grr.bound), (_local_fake_epsilon(mu, local_epsilon, domain_size, delta),
                                             BOUND_FAKES_LOCAL)]
    if blanket is not None:
        candidates.append((blanket, BOUND_FAKES_BLANKET))
    upper, name = min(candidates)
    return _checked(CentralBound(epsilon=upper, epsilon_lower=lower, delta=delta, bound=name))


def _checked(bound: CentralBound) -> CentralBound:
    """``bound`` itself; a lower bound above the certified one means an unsound bound (a bug):
    raised, never clipped (clipping would print the unsound U as if certified)."""
    if bound.epsilon_lower > bound.epsilon:
        raise AssertionError(f"unsound bound: the attack's ε {bound.epsilon_lower!r} exceeds the certified "
                             f"{bound.epsilon!r} ({bound.bound}) at δ = {bound.delta:g}")
    return bound


@lru_cache(maxsize=1024)
def adversarial_bound(mu: float, domain_size: int, delta: float,
                      local_epsilon: float | None = None) -> CentralBound:
    """Central ε of one device's message when every other message of its release is the
    attacker's (``ldptel.privacy.fake_sources``): only the Poisson(μ) fakes per bucket it cannot
    see and the device's own ε_l-LDP randomization (GRR, or the ε₀ of a ``shuffled`` report) are
    left; no amplification by other devices is counted. ε = inf (no claim) when neither certifies."""
    candidates = [(math.inf, BOUND_FAKES)]
    lower = 0.0
    if local_epsilon is not None:
        candidates.append((local_epsilon, BOUND_LOCAL))
    if mu > 0:
        if local_epsilon is None:
            candidates.append((fake_epsilon(mu, delta), BOUND_FAKES))
            lower = fake_epsilon(mu, delta, upper=False)
        else:
            candidates.append((_local_fake_epsilon(mu, local_epsilon, domain_size, delta), BOUND_FAKES_LOCAL))
    upper, name = min(candidates)
    return CentralBound(epsilon=upper, epsilon_lower=min(lower, upper), delta=delta, bound=name)


def _local_fake_epsilon(mu: float, local_epsilon: float, domain_size: int, delta: float) -> float:
    lo, hi = 1e-6, local_epsilon
    if local_fake_delta(hi, mu, local_epsilon, domain_size) > delta:
        return math.inf
    for _ in range(40):  # bisection; hi stays certified
        mid = math.sqrt(lo * hi)
        if local_fake_delta(mid, mu, local_epsilon, domain_size) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def fakes_curve(mu: float, local_epsilon: float | None = None,
                domain_size: int | None = None, n: int | None = None) -> PrivacyCurve:
    """The fake-message curve of one release (for ``ldptel.privacy.accounting``); with GRR on top
    and the release's n given, the least of advanced joint convexity and the blanket with fakes."""
    if local_epsilon is None:
        return PrivacyCurve(delta=lambda eps: fake_delta(eps, mu), max_loss=math.inf, name=BOUND_FAKES)
    assert domain_size is not None
    if n is None or mu <= 0:
        return PrivacyCurve(delta=lambda eps: local_fake_delta(eps, mu, local_epsilon, domain_size),
                            max_loss=local_epsilon, name=BOUND_FAKES_LOCAL)
    pair_n = n_bucket(n)

    def least(eps: float) -> float:  # both bound the same release: the lesser δ at each ε
        return min(local_fake_delta(eps, mu, local_epsilon, domain_size),
                   fakes_blanket_delta(eps, mu, local_epsilon, domain_size, pair_n))

    return PrivacyCurve(delta=least, max_loss=local_epsilon, name=BOUND_FAKES_BLANKET)


def std_error(oracle: str, epsilon0: float, domain_size: int, n: int) -> float | None:
    """√(n·Var*): the standard error of one count of n ε₀-LDP reports (None for RAPPOR; heavy
    hitters: one prefix count of the n/J devices of a level, J = ``domain_size``)."""
    if oracle == "rappor":
        return None
    if oracle == HEAVY_HITTERS:  # one prefix count at a level: n/J devices (module docstring)
        g = pool_hash_range(epsilon0)
        p, q = keep_probability(epsilon0, g), 1 / g
        return math.sqrt(n / domain_size * q * (1 - q)) / (p - q)
    mechanism = MECHANISMS[oracle](epsilon=epsilon0, domain_size=domain_size)
    return math.sqrt(n * mechanism.variance_star())


def compute_plan(mode: str, oracle: str, domain_size: int, central_epsilon: float, central_delta: float,
                 batch_min: int, windows: int | None = None, *, local_epsilon: float | None = None,
                 max_fake_rate: float = MAX_FAKE_RATE, hashes: int = DEFAULT_RAPPOR_HASHES) -> PrivacyPlan:
    """The plan of the module docstring, computed (callers use ``ldptel.privacy.plan``: the same
    through the plan cache). Bad arguments raise ValueError naming the argument; a
    target that cannot be certified raises ``ldptel.errors.UncertifiableTarget`` saying what would."""
    _check(mode, oracle, domain_size, central_epsilon, central_delta, batch_min, windows, local_epsilon)
    local = None if local_epsilon is None else float(local_epsilon)
    return _plan(mode, oracle, domain_size, float(central_epsilon), float(central_delta), batch_min,
                 windows, local, float(max_fake_rate), hashes)


@lru_cache(maxsize=1024)
def _plan(mode: str, oracle: str, d: int, target: float, delta: float, n: int, windows: int | None,
          local_epsilon: float | None, max_fake_rate: float, hashes: int) -> PrivacyPlan:
    if mode == "shuffled":
        eps0 = _largest_epsilon0(oracle, d, target, delta, n, hashes)
        if eps0 < MIN_EPSILON:  # the mechanisms take no smaller ε₀ (mechanisms/base.py says why)
            least = shuffled_bound(oracle, MIN_EPSILON, d, n, delta, hashes).epsilon
            raise UncertifiableTarget(
                f"central_epsilon = {target:g} at δ = {delta:g} would need ε₀ < {MIN_EPSILON:g} (the "
                f"smallest ε a mechanism takes); central_epsilon >= {_up(least):g} works at "
                f"batch_min = {n:,}",
                suggestion={"central_epsilon": _up(least)})
        bound = shuffled_bound(oracle, eps0, d, n, delta, hashes)
        cumulative = None
        if windows is not None:
            curve = shuffled_curve(oracle, eps0, d, n, hashes)
            cumulative = cumulative_epsilon([(curve, windows)], delta)
        return PrivacyPlan(mode, oracle, d, n, target, delta, eps0, None, None, bound.epsilon,
                           bound.epsilon_lower, std_error(oracle, eps0, d, n), bound.bound, windows,
                           cumulative)
    if oracle == "histogram" and local_epsilon is not None:
        raise bad_argument("local_epsilon needs oracle grr (the index is passed through GRR)",
                           "local_epsilon")
    mu = _smallest_mu(target, delta, d, n, local_epsilon)
    if not math.isfinite(mu):  # the smallest target at the most fakes allowed (μ and the rate)
        def smallest_target(most: float) -> float:
            return (fake_epsilon(most, delta) if local_epsilon is None
                    else _local_fake_epsilon(most, local_epsilon, d, delta))

        here = smallest_target(min(MAX_MU, max_fake_rate * n / d))
        if math.isfinite(here):
            works, suggestion = (f"central_epsilon >= {_up(here):g} works at batch_min = {n:,}",
                                 {"central_epsilon": _up(here)})
        else:  # too few devices for any target: the fake rate limits μ first
            needed, anywhere = math.ceil(MAX_MU * d / max_fake_rate), smallest_target(MAX_MU)
            works, suggestion = (f"central_epsilon >= {_up(anywhere):g} works with batch_min >= {needed:,}",
                                 {"central_epsilon": _up(anywhere), "batch_min": needed})
        raise UncertifiableTarget(
            f"central_epsilon = {target:g} at δ = {delta:g} needs more than {MAX_MU:g} fakes per bucket "
            f"(the planner's limit); {works}", suggestion=suggestion)
    rate = fake_rate(mu, d, n)
    if rate > max_fake_rate:
        needed = math.ceil(mu * d / max_fake_rate)
        raise UncertifiableTarget(
            f"central_epsilon: {target:g} at δ = {delta:g} needs μ = {mu:.4g} fakes per bucket, "
            f"{rate:.4g} fake messages per device at batch_min = {n:,} (over the limit of "
            f"{max_fake_rate:g}); batch_min ≥ {needed:,} would need at most {max_fake_rate:g}",
            suggestion={"batch_min": needed}, key="central_epsilon")
    bound = fakes_bound(mu, d, n, delta, local_epsilon)
    if local_epsilon is None:
        error = math.sqrt(mu)
    else:
        q = 1 / (math.exp(local_epsilon) + d - 1)
        error = math.sqrt(n * q * (1 - q) + mu) / grr_gamma(local_epsilon, d)
    cumulative = None
    if windows is not None:
        cumulative = cumulative_epsilon([(fakes_curve(mu, local_epsilon, d, n), windows)], delta)
    mu_lower = None
    if local_epsilon is not None and mu > 0:
        mu_lower = fakes_for_blanket(target, delta, local_epsilon, d, n, MAX_MU, upper=False)
    return PrivacyPlan(mode, oracle, d, n, target, delta, local_epsilon, rate, mu, bound.epsilon,
                       bound.epsilon_lower, error, bound.bound, windows, cumulative, mu_lower)


def _largest_epsilon0(oracle: str, d: int, target: float, delta: float, n: int, hashes: int) -> float:
    """The largest multiple of EPS0_STEP (≤ MAX_EPSILON) whose ``ShuffleBound`` δ at the target ε
    is ≤ δ; at worst ε₀ = the target itself (no amplification needed)."""
    pair_n = n_bucket(n)

    def certified(k: int) -> bool:
        eps0 = k * EPS0_STEP
        if eps0 <= target:
            return True
        return ShuffleBound(oracle, eps0, d, pair_n).delta(target) <= delta

    top = round(MAX_EPSILON / EPS0_STEP)
    good = max(1, math.floor(min(target, MAX_EPSILON) / EPS0_STEP))
    if certified(top):
        return top * EPS0_STEP
    bad = top
    if oracle == "grr":  # the blanket bound costs ~10 ms an evaluation: bracket it with the attack
        good, bad = _attack_bracket(d, target, delta, pair_n, good, bad, certified)
    good, bad = _bisect_steps(good, bad, certified)
    return round(good * EPS0_STEP, 6) if good * EPS0_STEP > target else min(target, MAX_EPSILON)


def _bisect_steps(good: int, bad: int, holds: Callable[[int], bool]) -> tuple[int, int]:
    """(good, bad) narrowed to adjacent steps by bisection, ``holds(good)`` and not ``holds(bad)``
    kept (``holds`` monotone: true below a threshold, false above)."""
    while bad - good > 1:
        mid = (good + bad) // 2
        if holds(mid):
            good = mid
        else:
            bad = mid
    return good, bad


def _attack_bracket(d: int, target: float, delta: float, n: int, good: int, bad: int,
                    certified: Callable[[int], bool]) -> tuple[int, int]:
    """Narrow (good, bad) for GRR: an ε₀ whose attack (the others on a third value, a lower bound)
    has δ > δ at the target cannot be certified (U ≥ L), so the cheap attack is bisected first,
    and the certified ε₀ — within a step or two of it (the blanket bound is within 0.3 % of the
    attack) — is then found going down from there in doubling steps."""
    def possible(k: int) -> bool:
        return attack_pairs("grr", k * EPS0_STEP, d, n)[0].delta(target, upper=False) <= delta

    lo, hi = _bisect_steps(good, bad, possible)  # possible(good) (certified); bad not certified
    step = 1
    bad = hi
    while True:
        k = max(bad - step, good)
        if k == good or certified(k):
            return k, bad
        bad, step = k, step * 2


def _smallest_mu(target: float, delta: float, d: int, n: int, local_epsilon: float | None) -> float:
    """The smallest μ certifying the target, at most ``MAX_MU`` (inf when that is not enough)."""
    if local_epsilon is None:
        return fakes_for(target, delta, max_mu=MAX_MU)
    if shuffled_bound("grr", local_epsilon, d, n, delta).epsilon <= target:
        return 0.0  # shuffled GRR at ε_l alone meets the target
    joint = fakes_for(target, delta, local_epsilon, d, max_mu=MAX_MU)
    return min(joint, fakes_for_blanket(target, delta, local_epsilon, d, n_bucket(n), max_mu=MAX_MU))


def _up(x: float) -> float:
    """x rounded up to 3 significant digits (a value that works, to print and suggest)."""
    if not math.isfinite(x) or x <= 0:
        return x
    scale = 10.0 ** (math.floor(math.log10(x)) - 2)
    return float(f"{math.ceil(x / scale - 1e-9) * scale:.3g}")


__all__ = ["BOUND_FAKES", "BOUND_FAKES_BLANKET", "BOUND_FAKES_LOCAL", "BOUND_FMT21", "BOUND_LOCAL",
           "FAKE_ORACLES", "MAX_FAKE_RATE", "MAX_MU", "MIN_DELTA", "MODES", "CentralBound", "PrivacyPlan",
           "adversarial_bound", "compute_plan", "fakes_bound", "fakes_curve", "shuffled_bound",
           "shuffled_curve", "std_error"]
