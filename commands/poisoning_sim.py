"""The simulation behind ``ldptel audit poisoning`` (``commands.audit_poisoning`` says what it
measures): genuine reports from the mechanisms' own ``randomize``, fake reports from
``ldptel.privacy.poisoning_attacks``, the collector's per-report checks, the aggregator's decoders."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldptel.aggregator.decoders import accumulator_for
from ldptel.aggregator.decoders.base import Accumulator
from ldptel.aggregator.decoders.fakes import FakesAccumulator
from ldptel.mechanisms import create_mechanism
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.estimates import FrequencyEstimate
from ldptel.mechanisms.fakes import envelope_message_limit, fake_indices, poisson_counts
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.rows import valid_rows
from ldptel.privacy import plan
from ldptel.privacy.poisoning_attacks import (
    ATTACKS,
    closed_gain,
    contribution_variance,
    fake_columns,
    floor_gain,
    olh_seeds,
)

ORACLES = ("grr", "oue", "olh", "sue", "hadamard")
MODES = ("local", "shuffled", "shuffled-fakes")


@dataclass
class Setting:
    beta: float
    targets: int
    domain_size: int
    epsilon: float
    target_frequency: float
    users: int
    batch_min: int
    central_delta: float
    fakes_local_epsilon: float | None = None  # shuffled-fakes: GRR at this ε on the index, else none

    @property
    def fakes(self) -> int:
        """m = β·n/(1 − β) fake devices beside the n genuine ones."""
        return int(round(self.beta * self.users / (1 - self.beta)))

@dataclass
class Row:
    """One attack on one oracle in one mode."""

    oracle: str
    mode: str
    epsilon: float | None  # the reports' ε (ε₀ when shuffled; None: the index as it is)
    attack: str
    fake_source: str | None  # shuffled-fakes: "shuffler" or "devices"
    closed: float  # the paper's closed form (every fake report counted)
    closed_checked: float  # the closed form after the collector's checks
    simulated: float
    sd: float  # bound on the simulated gain's standard deviation
    accepted: float  # fraction of the fake reports the collector's checks took
    floor: float
    note: str = ""

    @property
    def times_floor(self) -> float:
        return self.simulated / self.floor if self.floor else math.inf


def genuine_values(s: Setting, targets: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """n values: a target (uniform among them) w.p. f_T, else uniform over the other items."""
    others = np.setdiff1d(np.arange(s.domain_size), targets)
    on_target = rng.random(s.users) < s.target_frequency
    return np.where(on_target, targets[rng.integers(0, targets.size, s.users)],
                    others[rng.integers(0, others.size, s.users)]).astype(np.int64)


def _decode(mech: Mechanism, columns: dict[str, Any], devices: int, messages: int,
            fake_rate: float | None) -> Accumulator:
    """An accumulator of the mode's decoder holding these reports."""
    if fake_rate is not None:
        fakes = FakesAccumulator(mech)
        fakes.add_release(columns, messages, devices)
        return fakes
    acc = accumulator_for(mech)
    acc.add_columns(columns, devices)
    acc.state["n"][0] += devices
    return acc


def _estimate(acc: Accumulator) -> FrequencyEstimate:
    est = acc.estimate()
    if not isinstance(est, FrequencyEstimate):
        raise TypeError(f"{acc.mech!r} does not estimate frequencies")
    return est


def _subset(columns: dict[str, Any], keep: np.ndarray) -> dict[str, Any]:
    return {k: np.asarray(v)[keep] for k, v in columns.items()}


def simulate_mode(s: Setting, mech: Mechanism, oracle: str, mode: str, attacks: tuple[str, ...],
                  rng: np.random.Generator, fake_rate: float | None = None) -> list[Row]:
    """Every attack of ``attacks`` on ``mech`` in ``mode`` (module docstring)."""
    targets = np.sort(rng.choice(s.domain_size, s.targets, replace=False))
    values = genuine_values(s, targets, rng)
    n, m, r, f_t = s.users, s.fakes, s.targets, s.target_frequency
    beta = m / (n + m)  # the simulated β (m is rounded): the closed forms are at the same β
    columns, messages = mech.randomize(values, rng), n
    if fake_rate is not None:  # each genuine device adds Poisson(λ) uniform fake indices
        extra = fake_indices(rng, int(poisson_counts(rng, fake_rate, n).sum()), s.domain_size)
        columns = {"values": np.concatenate([columns["values"], extra.astype(np.uint32)])}
        messages += extra.size
    honest = _decode(mech, columns, n, messages, fake_rate)
    before = _estimate(honest)
    f_before = float(before.counts[targets].sum()) / n
    # the targets' counts are independent or negatively correlated (multinomial), so Σ var bounds
    var_before = float((before.std_error[targets] ** 2).sum()) / n**2
    floor = floor_gain(beta, f_t)
    sources: list[str | None] = ["shuffler", "devices"] if fake_rate is not None else [None]
    together: int | None = None
    olh_note, olh_reports = "", None
    if isinstance(mech, OLH) and any(a in ("mga", "mga-a") for a in attacks):
        olh_reports = olh_seeds(mech, targets, rng)
        together = olh_reports[2]
        olh_note = f"best seed hashes {together} of {r} targets to one value (g = {mech.g})"
    rows = []
    for source in sources:
        extra_messages = (envelope_message_limit(fake_rate or 0.0, 1) - 1) if source == "devices" else 0
        for attack in attacks:
            if source == "shuffler" and attack == "mga-a":
                continue  # nothing to pad: one message per device
            cols, msgs = fake_columns(mech, attack, targets, m, rng, extra_messages, olh_reports)
            # the checks a report meets (the collector's, or the aggregator's on a sealed row): a
            # device sends its reports one per batch, so each is refused alone
            keep = valid_rows(mech, cols, msgs) if fake_rate is None else np.ones(msgs, bool)
            kept = int(keep.sum())
            accepted = kept / msgs if msgs else 1.0
            devices = kept if fake_rate is None else m
            fake = _decode(mech, _subset(cols, keep), devices, kept, fake_rate)
            after = _estimate(honest.blank().merge(honest).merge(fake))
            f_after = float(after.counts[targets].sum()) / (n + devices)
            share = devices / (n + devices)
            sd = math.sqrt(share**2 * var_before
                           + devices * contribution_variance(mech, attack, r) / (n + devices) ** 2)
            note = olh_note if attack in ("mga", "mga-a") else ""
            if source == "devices" and attack == "mga-a":
                note = (f"{extra_messages + 1} messages in a fake device's envelope (λ = {fake_rate:.3g}), "
                        "all on targets")
            rows.append(Row(
                oracle=oracle, mode=mode, epsilon=None if isinstance(mech, Histogram) else mech.epsilon,
                attack=attack, fake_source=source,
                closed=closed_gain(mech, attack, beta, r, f_t, extra_messages, together, checked=False),
                closed_checked=closed_gain(mech, attack, beta, r, f_t, extra_messages, together),
                simulated=f_after - f_before, sd=sd, accepted=accepted, floor=floor, note=note))
    return rows


def audit_poisoning(s: Setting, oracles: tuple[str, ...] = ORACLES, modes: tuple[str, ...] = MODES,
                    attacks: tuple[str, ...] = ATTACKS, seed: int | None = None) -> list[Row]:
    """The rows of the audit (``seed``: a fixed one for tests; None: OS entropy)."""
    rng = np.random.default_rng(seed)
    rows: list[Row] = []
    for mode in modes:
        if mode == "shuffled-fakes":
            eps_l = s.fakes_local_epsilon
            index: Mechanism = Histogram(s.domain_size) if eps_l is None else GRR(eps_l, s.domain_size)
            pl = plan("shuffled-fakes", index.name, s.domain_size, s.epsilon, s.central_delta, s.batch_min,
                      local_epsilon=eps_l)
            rows += simulate_mode(s, index, index.name, mode, attacks, rng,
                                  fake_rate=float(pl.fake_rate or 0.0))
            continue
        for oracle in oracles:
            eps = s.epsilon
            if mode == "shuffled":
                eps = float(plan("shuffled", oracle, s.domain_size, s.epsilon, s.central_delta,
                                 s.batch_min).local_epsilon or s.epsilon)
            mech = create_mechanism(oracle, epsilon=eps, domain_size=s.domain_size)
            rows += simulate_mode(s, mech, oracle, mode, attacks, rng)
    return rows


__all__ = ["MODES", "ORACLES", "Row", "Setting", "audit_poisoning", "simulate_mode"]
