"""What ``shuffled-fakes`` would cost a heavy-hitter campaign (issue 39), so that a config asking
for it is refused with the numbers (docs/privacy.md, "Heavy hitters in a shuffled mode").

The design it prices: each level j's prefix hashed by a public hash into B buckets (a sketch), each
device sending (j, bucket) as an index of the J·B cells, and Poisson(μ) fakes per cell in every
release, μ the smallest that certifies the target (``fake_messages.fakes_for``, the histogram's
exact bound; one device moves one message between two cells). A candidate u's count is read back
as its bucket's count less the expected share of the others, (C − μ − (n_j − c_u)/B); besides the
fakes' variance μ it carries the collision term of the other prefixes in u's bucket, over the
public hash Var = Σ_{v≠u} c_v²·(1/B)(1 − 1/B) ≈ n_j²·F₂/B, with n_j = n/J the level's devices and
F₂ = Σ_v f_v² the concentration of the level's prefixes. Keeping the collision term at most the
fakes' own (n_j²·F₂/B ≤ μ) needs B ≥ n_j²·F₂/μ buckets per level, so μ·J·B ≥ J·n_j²·F₂ fakes per
release: quadratic in the release's devices. ``sketch_cost`` evaluates it at F₂ = ``REFERENCE_F2``
(Zipf(1.1) over 10⁴ strings, full strings: the prefixes of the early levels are more concentrated,
so the real cost is higher).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

REFERENCE_F2 = 0.034  # Σ f² of Zipf(1.1) over 10⁴ strings (mechanisms/heavy_hitters.py)
MAX_FAKES_PER_DEVICE = 100.0  # the planner's limit for shuffled-fakes (planner.MAX_FAKE_RATE)


@dataclass(frozen=True)
class SketchCost:
    """The cost of ``shuffled-fakes`` heavy hitters at one release of ``n`` devices."""

    n: int
    levels: int
    mu: float  # fakes per cell certifying the target
    buckets: int  # B per level keeping the collision term ≤ μ at F₂ = REFERENCE_F2
    fakes_per_release: float  # μ·J·B
    fakes_per_device: float  # μ·J·B/n
    std_error: float  # √(2μ): the fakes' and the collisions' variance, per count

    @property
    def practical(self) -> bool:
        return self.fakes_per_device <= MAX_FAKES_PER_DEVICE


def sketch_cost(central_epsilon: float, central_delta: float, n: int, levels: int,
                f2: float = REFERENCE_F2) -> SketchCost:
    """The module docstring's cost for a target (ε, δ) at a release of ``n`` devices over ``levels``."""
    from ldptel.privacy.fake_messages import fakes_for  # scipy: server side only

    mu = fakes_for(central_epsilon, central_delta)
    per_level = n / levels
    buckets = max(1, math.ceil(per_level ** 2 * f2 / mu))
    total = mu * levels * buckets
    return SketchCost(n=n, levels=levels, mu=mu, buckets=buckets, fakes_per_release=total,
                      fakes_per_device=total / n, std_error=math.sqrt(2 * mu))


def refusal(central_epsilon: float, central_delta: float, n: int, levels: int) -> str:
    """Why a heavy-hitter campaign is refused in ``shuffled-fakes``, with its cost at ``batch_min``."""
    cost = sketch_cost(central_epsilon, central_delta, n, levels)
    return (f"shuffled-fakes is not offered for heavy hitters: a sketch of B buckets per level with "
            f"Poisson fakes per bucket would need μ = {cost.mu:.3g} fakes per bucket and B = "
            f"{cost.buckets:,} buckets per level (collisions no larger than the fakes' noise, Zipf(1.1) "
            f"concentration) over {levels} levels: {cost.fakes_per_release:.3g} fakes per release of "
            f"batch_min = {n:,} devices ({cost.fakes_per_device:.3g} per device; it grows with n²); use "
            f"privacy_mode = \"shuffled\" (docs/privacy.md)")


__all__ = ["MAX_FAKES_PER_DEVICE", "REFERENCE_F2", "SketchCost", "refusal", "sketch_cost"]
