"""``ldptel audit`` for campaigns in a shuffled privacy mode: an empirical δ of the central claim.

Neighbouring datasets: n = ``batch_min`` devices, the target on value a (D) or b (D′), every other
device on a third value c (the attack of ``ldptel.privacy.amplification``'s lower bound). Each
trial simulates the statistic (N_a, N_b) — the counts at a and b of one release, a post-processing
of it — from its exact distribution (``_counts``: the mechanism's p and q, the fakes' Poisson total
drawn by the SDK's own sampler, uniform over the domain), seeded. With S_ε = {N_a >
e^ε·N_b}, the set where the exact pair's privacy loss exceeds ε,

    δ̂(ε) = P̂_D(S_ε) − e^ε·P̂_D′(S_ε)

estimates a lower bound on the release's δ(ε). It is compared with the certified δ(ε) of the
campaign's claim at that n (``privacy_plan.fakes_curve`` / ``shuffled_curve``) at the ε where the
certified δ is between 10⁻³ and 0.3 (measurable with ``TRIALS`` trials): the claim is violated when
δ̂ − 4·σ̂ exceeds it. The negative control (``fakes=False``: the fakes switched off, checked
against the claim made with them) must fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.fakes import poisson_counts
from ldptel.privacy.modes import Shuffled, ShuffledFakes
from ldptel.privacy.release_claims import fake_split

N_DEVICES = 200  # when a campaign has no batch_min
TRIALS = 40_000
SEED = 2026


@dataclass
class CentralAudit:
    campaign: str
    n: int
    points: list[tuple[float, float, float, float]]  # (ε, certified δ, empirical δ, its σ)

    @property
    def violated(self) -> bool:
        return any(emp - 4 * sd > cert + 1e-12 for _, cert, emp, sd in self.points)

    def lines(self) -> list[str]:
        worst = max(self.points, key=lambda p: p[2] - 4 * p[3] - p[1])
        eps, cert, emp, sd = worst
        return [f"  central claim at n = {self.n} ({len(self.points)} ε points, {TRIALS:,} releases per "
                f"dataset): tightest at ε = {eps:.3f}: empirical δ {emp:.4g} ± {sd:.2g} vs certified "
                f"{cert:.4g}: {'VIOLATED' if self.violated else 'ok'}"]


def _counts(campaign: Campaign, target: int, n: int, trials: int, rng: np.random.Generator,
            fakes: bool) -> tuple[np.ndarray, np.ndarray]:
    """(N_a, N_b) of ``trials`` simulated releases (module docstring), the target on a (0) or b (1),
    drawn at the level of counts, exactly: the target's message is a, b or another value with the
    mechanism's p and q; the n − 1 others' messages on c fall on a and on b with q each
    (multinomial); the fakes of n devices total Poisson(n·λ) (a sum of n Poisson(λ), drawn by the
    SDK's sampler ``poisson_counts``), each uniform over d (multinomial)."""
    mech = campaign.mechanism()
    d = mech.domain_size
    p, q = float(mech.p), float(mech.q)  # type: ignore[attr-defined]
    u = rng.random(trials)
    own, other = (u < p), (u >= p) & (u < p + q)  # the target's message on its value / the other one
    hit_a, hit_b = (own, other) if target == 0 else (other, own)
    others = rng.multinomial(n - 1, [q, q, 1 - 2 * q], size=trials) if q > 0 else np.zeros((trials, 3), int)
    na = hit_a.astype(np.int64) + others[:, 0]
    nb = hit_b.astype(np.int64) + others[:, 1]
    mode = campaign.mode
    mu = fake_split(mode).honest_mu(n, d) if fakes and isinstance(mode, ShuffledFakes) else 0.0
    if mu > 0:  # the devices' and the shuffler's fakes (``fake_source``): Poisson(d·μ) in all
        total = poisson_counts(rng, mu * d, trials)
        spread = rng.multinomial(total, [1 / d, 1 / d, 1 - 2 / d])
        na, nb = na + spread[:, 0], nb + spread[:, 1]
    return na, nb


def _certified(campaign: Campaign, n: int):
    from ldptel.privacy.planner import fakes_curve, shuffled_curve

    d = int(campaign.domain_size or 0)
    match campaign.mode:
        case Shuffled(local_epsilon=eps0):
            return shuffled_curve(str(campaign.oracle), eps0, d, n).delta
        case ShuffledFakes(local_epsilon=eps) as mode:
            return fakes_curve(fake_split(mode).honest_mu(n, d), eps, d, n).delta
    raise ValueError(f"campaign {campaign.name!r} has no central claim (privacy_mode local)")


def central_audit(campaign: Campaign, n: int | None = None, trials: int = TRIALS, seed: int = SEED,
                  fakes: bool = True) -> CentralAudit:
    """The empirical-δ audit of ``campaign``'s central claim at n devices (default ``batch_min``:
    the claim as planned; module docstring)."""
    mode = campaign.mode
    if isinstance(mode, Shuffled) and campaign.oracle != "grr":
        raise ValueError("the central audit simulates GRR or the fake-message histogram")
    n = int(n or (mode.batch_min if isinstance(mode, (Shuffled, ShuffledFakes)) else N_DEVICES))
    rng = np.random.default_rng(seed)
    p_a, p_b = _counts(campaign, 0, n, trials, rng, fakes)
    q_a, q_b = _counts(campaign, 1, n, trials, rng, fakes)
    delta = _certified(campaign, n)
    points = []
    for eps in np.linspace(0.05, 6.0, 120):
        cert = float(delta(float(eps)))
        if not 1e-3 <= cert <= 0.3:
            continue
        p = float(np.mean(p_a > math.exp(eps) * p_b))
        q = float(np.mean(q_a > math.exp(eps) * q_b))
        sd = math.sqrt((p * (1 - p) + math.exp(2 * eps) * q * (1 - q)) / trials)
        points.append((float(eps), cert, p - math.exp(eps) * q, sd))
    if not points:  # the curve never enters the measurable band: test its largest ε point
        eps = 0.05
        cert = float(delta(eps))
        p = float(np.mean(p_a > math.exp(eps) * p_b))
        q = float(np.mean(q_a > math.exp(eps) * q_b))
        points.append((eps, cert, p - math.exp(eps) * q, math.sqrt((p + q) / trials)))
    return CentralAudit(campaign.name, n, points)


__all__ = ["N_DEVICES", "TRIALS", "CentralAudit", "central_audit"]
