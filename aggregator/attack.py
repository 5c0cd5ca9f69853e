"""The averaging attack on a device's linked reports (issue 14's longitudinal privacy check).

M devices hold fixed values drawn uniformly from a domain of d candidates (the items 0..d−1 of a
frequency or range mechanism, or a vocabulary of d strings for heavy hitters) and each sends R
reports; the attacker links the R reports of each device, decodes them with the product's own
estimator (the mechanism's accumulator: the estimate's argmax over the d candidates; heavy
hitters: the candidate whose prefix the most reports support, which is the maximum-likelihood
candidate since every report supports its value's prefix w.p. p and another w.p. 1/g) and guesses.

Under a uniform prior no guess from the output of an ε-LDP mechanism is right with probability
above e^ε/(e^ε + d − 1) (the posterior of any candidate is at most e^ε times any other's). Every
report of a memoized device with a fixed value is post-processing of its permanent response, so
the claimed ε is ε∞; without memoization the R reports compose to R·ε₁. The attack passes when
its accuracy ≤ bound + 4·√(bound(1 − bound)/M) (a 4-sigma binomial margin over M devices).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms import hashing
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.estimates import FrequencyEstimate
from ldptel.mechanisms.heavy_hitters import HeavyHitters
from ldptel.mechanisms.memoize import Memoized

ATTACK_DEVICES = 2000
ATTACK_REPORTS = 100
ATTACK_DOMAIN = 8


@dataclass
class AttackResult:
    """``accuracy`` of the attacker's guesses over ``devices`` devices × ``reports`` reports
    among ``domain`` candidates; ``claimed_epsilon`` (ε∞, or R·ε₁ without memoization),
    ``bound`` = e^ε/(e^ε + d − 1) and ``margin`` = 4 binomial sigmas."""

    mechanism: str
    devices: int
    reports: int
    domain: int
    claimed_epsilon: float
    accuracy: float
    bound: float
    margin: float

    @property
    def passed(self) -> bool:
        return self.accuracy <= self.bound + self.margin

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "VIOLATED"
        return (f"{self.mechanism}: averaging attack accuracy {self.accuracy:.4f} vs bound "
                f"{self.bound:.4f} + {self.margin:.4f} (ε = {self.claimed_epsilon:.4g}, d = "
                f"{self.domain}, {self.devices} devices × {self.reports} reports): {verdict}")


def attack_bound(epsilon: float, d: int) -> float:
    """e^ε/(e^ε + d − 1), computed without overflow for large ε."""
    return 1.0 / (1.0 + (d - 1) * math.exp(-epsilon))


def vocabulary(mech: HeavyHitters, d: int) -> list[str]:
    """d distinct one- or two-byte strings ("0".."9", then "a0"...) within ``max_length``."""
    words = [str(i) for i in range(min(d, 10))]
    words += [f"{chr(97 + i // 10)}{i % 10}" for i in range(10, d)]
    return [w[: mech.max_length] for w in words]


def averaging_attack(mech: Mechanism, devices: int = ATTACK_DEVICES,
                     reports: int = ATTACK_REPORTS, domain: int = ATTACK_DOMAIN,
                     seed: int | None = 0) -> AttackResult:
    """Run the attack on ``mech`` as configured (module docstring); ``seed`` fixes the values,
    the device secrets and the randomness (None: OS randomness)."""
    if mech.name == "rappor":
        raise ValueError("averaging_attack does not take rappor (its simulated reports are fresh "
                         "devices; its ε∞ is its own PRR's)")
    rng = np.random.default_rng(seed)
    hh = mech if isinstance(mech, HeavyHitters) else None
    d = domain if hh else min(domain, mech.domain_size)
    values = rng.integers(0, d, devices)
    per_report = np.repeat(values, reports)
    inputs: Any = [vocabulary(hh, d)[v] for v in per_report] if hh else per_report
    if isinstance(mech, Memoized):
        secrets = [rng.bytes(32) if seed is not None else os.urandom(32) for _ in range(devices)]
        batch = mech.encode_batch(inputs, rng=rng, secrets=[secrets[i] for i in
                                                             np.repeat(np.arange(devices), reports)])
        claimed = mech.epsilon_inf
    else:
        batch = mech.encode_batch(inputs, rng=rng)
        claimed = reports * mech.epsilon
    cols = mech.columns(batch)
    if hh:
        scores = hh_support(hh, cols, vocabulary(hh, d)).reshape(devices, reports, d).sum(axis=1)
    else:
        scores = np.stack([device_counts(mech, cols, i * reports, reports)[:d]
                           for i in range(devices)])
    scores = scores.reshape(devices, d) + rng.random((devices, d)) * 1e-9  # random tie-break
    accuracy = float(np.mean(np.argmax(scores, axis=1) == values))
    bound = attack_bound(claimed, d)
    return AttackResult(mech.name, devices, reports, d, claimed, accuracy, bound,
                        4 * math.sqrt(bound * (1 - bound) / devices))


def device_counts(mech: Mechanism, cols: dict[str, Any], start: int, count: int) -> np.ndarray:
    """The estimate of one device's reports (rows ``start`` … ``start + count``)."""
    acc = accumulator_for(mech)
    part = {k: v[start : start + count] if len(v) else v for k, v in cols.items()}
    acc.add_columns(part, count)
    acc.state["n"][0] = count
    est = acc.estimate()
    if not isinstance(est, FrequencyEstimate):
        raise TypeError(f"{mech.name}: the averaging attack decodes frequency estimates")
    return np.asarray(est.counts, dtype=np.float64)


def hh_support(mech: HeavyHitters, cols: dict[str, Any], words: list[str]) -> np.ndarray:
    """Reports × candidates: True where the report (level j, seed index k, y) supports the
    candidate, H_{s_jk}(key_j(word)) = y."""
    distinct, inverse = mech.string_rows(words)
    rows = distinct[inverse]
    levels = cols["levels"]
    keys = np.stack([mech.keys(rows, j) for j in range(mech.levels)])  # (J, d)
    seeds = mech.pool[levels, cols["seed_indices"]]
    hits = np.stack([hashing.olh_hash_batch(seeds, keys[levels, c], mech.g) == cols["values"]
                     for c in range(len(words))], axis=1)
    return hits


__all__ = ["AttackResult", "attack_bound", "averaging_attack"]
