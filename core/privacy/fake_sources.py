"""Who adds the fake messages of a ``shuffled-fakes`` campaign (``fake_source``), and the two claims
each choice certifies (docs/privacy.md, "Fakes added by the shuffler").

The planner picks μ, the fakes per bucket a batch of ``batch_min`` honest devices needs for the
target (``planner.compute_plan``). ``split`` shares μ between the devices and the shuffler:

- ``devices``: each device sends Poisson(λ) fakes, λ = μ·d/batch_min; the shuffler adds none;
- ``shuffler``: devices send their index only (λ = 0); the shuffler draws Poisson(μ_s = μ) fakes per
  bucket for every release, seals each to the release's analyzer key as a device would, and mixes
  them into the release's one permutation;
- ``both`` (default): half each, μ_s = μ/2 and λ = (μ/2)·d/batch_min.

An honest batch of n ≥ ``batch_min`` devices holds μ_s + λ·n/d fakes per bucket (``honest_mu``):
the same μ at n = batch_min whatever the source, so the accuracy of honest batches is unchanged.
When every other device of the batch is adversarial (a Sybil flood: the n − 1 attack), their
messages are known to the attacker and independent of the victim's value: post-processing. What
is left is the victim's index (through its GRR, if ``local_epsilon``), its own Poisson(λ) fakes
(Poisson(λ/d) per bucket) and the shuffler's: μ_adv = μ_s + λ/d (``adversarial_mu``), certified by
``planner.adversarial_bound`` (no amplification by the other devices). ``claims`` gives both,
each with the ``assumes`` it rests on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FAKE_SOURCES = ("devices", "shuffler", "both")
DEFAULT_FAKE_SOURCE = "both"
SHUFFLER_SHARE = {"devices": 0.0, "shuffler": 1.0, "both": 0.5}  # of μ, the rest on the devices

ASSUME_SHUFFLER = ("the shuffler adds its Poisson fakes to every release and does not collude with "
                   "the aggregator")
ASSUME_HONEST = "at least batch_min honest devices in the batch (each sends its own fakes)"
ASSUME_HONEST_SHUFFLED = "at least batch_min honest devices in the batch"
ASSUME_NO_COLLUSION = "the shuffler does not collude with the aggregator"
ASSUME_KEY = "the analyzer key the device sealed to is the aggregator's"


@dataclass(frozen=True)
class FakeSplit:
    """``source`` with the devices' λ (``device_rate``) and the shuffler's μ_s per bucket per
    release (``shuffler_mu``)."""

    source: str
    device_rate: float
    shuffler_mu: float

    def honest_mu(self, n: int, domain_size: int) -> float:
        """Fakes per bucket of a release of n honest devices: μ_s + λ·n/d."""
        return self.shuffler_mu + self.device_rate * n / domain_size

    def adversarial_mu(self, domain_size: int) -> float:
        """Fakes per bucket not known to an attacker who sent every other message: μ_s + λ/d."""
        return self.shuffler_mu + self.device_rate / domain_size


def check_source(source: Any) -> str:
    """``source`` if it is one of ``FAKE_SOURCES`` (``ValueError`` naming ``fake_source``)."""
    if source not in FAKE_SOURCES:
        raise ValueError(f"fake_source must be one of {', '.join(FAKE_SOURCES)}, got {source!r}")
    return str(source)


def split(mu: float, source: str, domain_size: int, batch_min: int) -> FakeSplit:
    """μ (the plan's fakes per bucket at ``batch_min``) shared as ``source`` says (module docstring)."""
    share = SHUFFLER_SHARE[check_source(source)]
    shuffler_mu = mu * share
    return FakeSplit(source, (mu - shuffler_mu) * domain_size / batch_min, shuffler_mu)


def claims(fakes: FakeSplit | None, domain_size: int, n: int, delta: float, local_epsilon: float | None,
           honest: Any) -> list[dict[str, Any]]:
    """The claims of one release of n devices (``against`` = ``"adversarial_devices"``, then
    ``"honest_devices"``), each {against, central_epsilon, central_epsilon_lower, central_delta,
    central_bound, fakes_per_bucket, assumes}. ``fakes`` None: a ``shuffled`` campaign (ε₀-LDP
    reports at ``local_epsilon``). ``honest``: the ``CentralBound`` of the honest batch (the
    campaign's plan or window claim, computed by the caller)."""
    from ldptel.privacy.planner import adversarial_bound  # scipy: server side only

    key = [ASSUME_KEY]
    rows: list[tuple[str, Any, float | None, list[str]]]
    if fakes is None:
        assert local_epsilon is not None
        adversarial = adversarial_bound(0.0, domain_size, delta, local_epsilon)
        rows = [("adversarial_devices", adversarial, None, key),
                ("honest_devices", honest, None, [ASSUME_HONEST_SHUFFLED, ASSUME_NO_COLLUSION, *key])]
    else:
        mu_adv = fakes.adversarial_mu(domain_size)
        adversarial = adversarial_bound(mu_adv, domain_size, delta, local_epsilon)
        shuffler = [ASSUME_SHUFFLER] if fakes.shuffler_mu > 0 else [ASSUME_NO_COLLUSION]
        honest_assumes = ([ASSUME_HONEST] if fakes.device_rate > 0 else [ASSUME_HONEST_SHUFFLED])
        rows = [("adversarial_devices", adversarial, mu_adv, [*shuffler, *key]),
                ("honest_devices", honest, fakes.honest_mu(n, domain_size),
                 [*honest_assumes, *([ASSUME_SHUFFLER] if fakes.shuffler_mu > 0 else [ASSUME_NO_COLLUSION]),
                  *key])]
    return [{"against": against, "central_epsilon": _finite(b.epsilon),
             "central_epsilon_lower": _finite(b.epsilon_lower), "central_delta": delta,
             "central_bound": b.bound, "fakes_per_bucket": mu, "assumes": assumes}
            for against, b, mu, assumes in rows]


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


__all__ = ["ASSUME_HONEST", "ASSUME_SHUFFLER", "DEFAULT_FAKE_SOURCE", "FAKE_SOURCES", "SHUFFLER_SHARE",
           "FakeSplit", "check_source", "claims", "split"]
