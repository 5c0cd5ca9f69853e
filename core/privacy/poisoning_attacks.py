"""Data-poisoning attacks on the frequency oracles (Cao, Jia, Gong, "Data Poisoning Attacks to
Local Differential Privacy Protocols", USENIX Security 2021): the fake reports of each attack
(vectorized, ``fake_columns``) and the closed form of its gain (``closed_gain``).

Setting. n genuine devices, m fake ones, β = m/(n + m); a target set T of r items whose summed
true frequency among the genuine devices is f_T. The gain is the expected rise of the estimated
summed frequency of T, G = Σ_{t∈T} E[f̂_t(after) − f̂_t(before)], each estimate over the devices it
saw (n + m after, n before). Every oracle here estimates a count as a sum of per-report
contributions, unbiased for genuine reports, so with u the expected contribution of one fake
report to the summed target count,

    G = β·(u − f_T).

A pure protocol (support probabilities p, q; Ĉ_v = (C_v − N·q)/(p − q)) has u = (s − r·q)/(p − q),
s the expected number of targets a fake report supports; Hadamard response has u = E[k·b·Σ_t H[j,t]].

Attacks (u per oracle):

- ``mga`` (maximal gain): the report supporting the most targets. GRR: one target, s = 1, so
  G = β(1 − f_T) + β(d − r)/(e^ε − 1). Unary (OUE, SUE): the r target bits set and nothing else,
  s = r (OUE: G = β(2r·e^ε/(e^ε − 1) − f_T)). OLH: a seed hashing all r targets to one value y,
  reported with y (s = r; ``olh_seeds`` searches for it). Hadamard: j = 0 (H[0, v] = 1 for every v)
  with b = +1, u = k·r. An index sent as it is (``shuffled-fakes``): one target, u = 1.
- ``mga-a`` (adaptive, the MGA-A / APA of issue 37: padded to the honest weight): unary reports
  also set random non-target bits up to a weight W drawn from the honest law Bernoulli(p) +
  Binomial(d − 1, q), so they pass the collector's bit-count check (``mechanisms.poisoning``) with
  probability 1 − 10⁻⁹; s = r still.
  With ``shuffled-fakes`` and fakes drawn on the device, the fake device fills its envelope up to
  the collector's message limit K (``mechanisms.fakes.envelope_message_limit``) with targets; the
  decoder subtracts the K − 1 extra messages as fakes spread over d buckets, so
  u = (K − r(K − 1)/d − r·q)/(p − q) (an index as it is: p = 1, q = 0; or GRR at ``local_epsilon``).
  Elsewhere there is nothing to pad: as ``mga``.
- ``ria`` (random item): a target at random, encoded honestly: u = 1 for every oracle, so
  G = β(1 − f_T) — the input-manipulation floor (``floor_gain``), what lying about one's value gets.
- ``rpa`` (random perturbed value): a uniform report. GRR: s = r/d; unary: each bit a fair coin,
  s = r/2 (its ~d/2 set bits fail the bit-count check); OLH: a uniform y, s = r/g = r·q, u = 0;
  Hadamard: u = 0; an index as it is: u = r/d.

The collector's checks (``acceptance``): a fake report the collector refuses counts for nothing,
so with a fraction a accepted the effective fraction is β_a = a·m/(n + a·m) and G = β_a·(u_a − f_T),
u_a the contribution of an accepted report (u, but for a check that keeps a biased subset).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldptel.mechanisms import hashing
from ldptel.mechanisms.base import Mechanism, PureMechanism
from ldptel.mechanisms.grr import GRR
from ldptel.mechanisms.hadamard import Hadamard
from ldptel.mechanisms.histogram import Histogram
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.poisoning import binomial_pmf
from ldptel.mechanisms.unary import UnaryEncoding

ATTACKS = ("mga", "mga-a", "ria", "rpa")
OLH_SEARCH = 1 << 21  # seeds tried by ``olh_seeds`` (r = 10, g = 4: ~8 seeds put all 10 together)


def floor_gain(beta: float, target_frequency: float) -> float:
    """β(1 − f_T): the gain of fake devices that only lie about their value (``ria``)."""
    return beta * (1.0 - target_frequency)


def effective_beta(beta: float, accepted: float) -> float:
    """β_a = a·β/(1 − β + a·β): the fake fraction among the reports the collector keeps."""
    return accepted * beta / (1.0 - beta + accepted * beta) if accepted > 0 else 0.0


def per_fake(mech: Mechanism, attack: str, r: int, extra_messages: int = 0,
             together: int | None = None) -> float:
    """u: one fake report's expected contribution to the summed estimated count of the r targets
    (module docstring); ``extra_messages``: K − 1 for an index sent as it is with device fakes;
    ``together``: the targets the OLH ``mga`` seed hashes to one value (default: all r)."""
    d = mech.domain_size
    if attack not in ATTACKS:
        raise ValueError(f"attack must be one of {', '.join(ATTACKS)}, got {attack!r}")
    if isinstance(mech, Hadamard):
        return {"mga": mech.scale * r, "mga-a": mech.scale * r, "ria": 1.0, "rpa": 0.0}[attack]
    if not isinstance(mech, PureMechanism):
        raise ValueError(f"no poisoning model for {type(mech).__name__}")
    p, q = mech.p, mech.q
    if attack == "ria":
        return 1.0
    if isinstance(mech, UnaryEncoding):
        s = r / 2 if attack == "rpa" else float(r)
    elif isinstance(mech, OLH):
        s = r * q if attack == "rpa" else float(r if together is None else together)
    elif isinstance(mech, GRR | Histogram):  # an index: K = 1 + extra messages, the extras as fakes
        if attack == "mga-a" and extra_messages:
            k = 1 + extra_messages
            return (k - r * (k - 1) / d - r * q) / (p - q)
        s = r / d if attack == "rpa" else 1.0
    else:
        raise ValueError(f"no poisoning model for {type(mech).__name__}")
    return (s - r * q) / (p - q)


def acceptance(mech: Mechanism, attack: str, r: int) -> tuple[float, float | None]:
    """(a, s_a): the fraction of an attack's fake reports the collector's checks accept (the
    bit-count check of unary reports, ``UnaryEncoding.weight_bounds``; other reports have nothing
    to check), and the expected number of targets an accepted one supports when that differs from
    the attack's s (unary ``rpa``: a uniform row of W ~ Binomial(d, 1/2) bits is kept iff
    lo ≤ W ≤ hi, and then supports r·E[W | kept]/d targets), else None."""
    if not isinstance(mech, UnaryEncoding):
        return 1.0, None
    lo, hi = mech.weight_bounds()
    if attack == "mga":
        return float(lo <= r <= hi), None
    if attack == "rpa":
        off, pmf = binomial_pmf(mech.domain_size, 0.5)
        w = np.arange(off, off + pmf.size)
        kept = (w >= lo) & (w <= hi)
        a = float(pmf[kept].sum())
        return a, (r * float((w[kept] * pmf[kept]).sum()) / a / mech.domain_size if a > 0 else None)
    return 1.0, None  # mga-a (the honest weight: refused w.p. < 1e-9) and ria (an honest report)


def closed_gain(mech: Mechanism, attack: str, beta: float, r: int, target_frequency: float,
                extra_messages: int = 0, together: int | None = None, checked: bool = True) -> float:
    """G = β_a·(u_a − f_T) (module docstring) over the reports the collector keeps;
    ``checked=False``: the paper's G = β·(u − f_T), every report kept."""
    u = per_fake(mech, attack, r, extra_messages, together)
    if not checked:
        return beta * (u - target_frequency)
    a, s_kept = acceptance(mech, attack, r)
    if s_kept is not None and isinstance(mech, PureMechanism):
        u = (s_kept - r * mech.q) / (mech.p - mech.q)
    return effective_beta(beta, a) * (u - target_frequency)


def contribution_variance(mech: Mechanism, attack: str, r: int) -> float:
    """The variance of one fake report's contribution to the summed target count (an upper bound
    where marked): 0 where the attack fixes it (``mga``, ``mga-a``, an index's ``ria``); a support
    S ∈ {0, 1} (GRR, an index) s(1 − s)/(p − q)²; unary ``ria`` (p(1 − p) + (r − 1)q(1 − q))/(p − q)²
    and ``rpa`` (r/4)/(p − q)² (independent bits); Hadamard E[k²(Σ_t H[j,t])²] = k²·r (rows
    orthogonal), a bound; OLH Popoviciu's (r/(p − q))²/4, a bound."""
    if attack in ("mga", "mga-a"):
        return 0.0
    if isinstance(mech, Hadamard):
        return mech.scale**2 * r
    if not isinstance(mech, PureMechanism):
        raise ValueError(f"no poisoning model for {type(mech).__name__}")
    p, q = mech.p, mech.q
    if isinstance(mech, GRR | Histogram):
        s = p + (r - 1) * q if attack == "ria" else r / mech.domain_size
        return s * (1 - s) / (p - q) ** 2
    if isinstance(mech, UnaryEncoding):
        v = p * (1 - p) + (r - 1) * q * (1 - q) if attack == "ria" else r / 4
        return v / (p - q) ** 2
    return (r / (p - q)) ** 2 / 4


def olh_seeds(mech: OLH, targets: np.ndarray, rng: np.random.Generator,
              tries: int = OLH_SEARCH) -> tuple[np.ndarray, np.ndarray, int]:
    """(seeds, values, k): of up to ``tries`` random seeds, those hashing the most targets (k of r)
    to one value, with that value — the OLH ``mga`` report (vectorized over chunks of seeds; stops
    at the first chunk where some seed puts all r together)."""
    keys = hashing.xxh32_u32(np.asarray(targets, dtype=np.uint32))
    r = keys.size
    best_k, seeds, values = -1, [np.zeros(0, np.uint32)], [np.zeros(0, np.int64)]
    chunk = max(1, (1 << 21) // r)
    for start in range(0, tries, chunk):
        s = rng.integers(0, 2**32, min(chunk, tries - start), dtype=np.uint64).astype(np.uint32)
        y = hashing.olh_hash_batch(np.repeat(s, r), np.tile(keys, s.size), mech.g)
        y = np.sort(y.reshape(s.size, r).astype(np.int64), axis=1)
        run = np.ones(s.size, dtype=np.int64)  # the longest run of equal values in each sorted row
        k, value = run.copy(), y[:, 0].copy()
        for j in range(1, r):
            run = np.where(y[:, j] == y[:, j - 1], run + 1, 1)
            longer = run > k
            k, value = np.where(longer, run, k), np.where(longer, y[:, j], value)
        top = int(k.max())
        if top > best_k:
            best_k, seeds, values = top, [], []
        if top == best_k:
            seeds.append(s[k == top])
            values.append(value[k == top])
        if best_k == r:
            break
    return np.concatenate(seeds), np.concatenate(values), best_k


def fake_columns(mech: Mechanism, attack: str, targets: np.ndarray, m: int, rng: np.random.Generator,
                 extra_messages: int = 0,
                 olh_reports: tuple[np.ndarray, np.ndarray, int] | None = None,
                 ) -> tuple[dict[str, Any], int]:
    """The columns of m fake devices' reports for ``attack`` and how many messages they are (m, but
    m·(1 + ``extra_messages``) for ``mga-a`` on an index with device fakes). Honest encodings go
    through the mechanism's own ``randomize``; ``olh_reports``: ``olh_seeds``' answer, else
    searched here."""
    r, d = targets.size, mech.domain_size
    pick = targets[rng.integers(0, r, m)]
    if attack == "ria":
        return mech.randomize(pick, rng), m
    if isinstance(mech, GRR | Histogram):
        if attack == "rpa":
            return {"values": rng.integers(0, d, m).astype(np.uint32)}, m
        if attack == "mga" or not extra_messages:
            return {"values": pick.astype(np.uint32)}, m
        k = m * (1 + extra_messages)
        return {"values": targets[rng.integers(0, r, k)].astype(np.uint32)}, k
    if isinstance(mech, UnaryEncoding):
        return {"bits": _unary_rows(mech, attack, targets, m, rng)}, m
    if isinstance(mech, OLH):
        if attack == "rpa":
            return {"seeds": rng.integers(0, 2**32, m, dtype=np.uint64).astype(np.uint32),
                    "values": rng.integers(0, mech.g, m).astype(np.uint32)}, m
        seeds, values, _ = olh_reports if olh_reports is not None else olh_seeds(mech, targets, rng)
        i = np.arange(m) % seeds.size
        return {"seeds": seeds[i], "values": values[i].astype(np.uint32)}, m
    if isinstance(mech, Hadamard):
        if attack == "rpa":
            return {"indices": rng.integers(0, mech.D, m).astype(np.uint32),
                    "signs": rng.random(m) < 0.5}, m
        return {"indices": np.zeros(m, dtype=np.uint32), "signs": np.ones(m, dtype=bool)}, m
    raise ValueError(f"no poisoning model for {type(mech).__name__}")


def _unary_rows(mech: UnaryEncoding, attack: str, targets: np.ndarray, m: int,
                rng: np.random.Generator) -> np.ndarray:
    """Packed bit rows: ``rpa`` fair coins; ``mga`` the targets; ``mga-a`` the targets padded with
    random other bits to a weight drawn from the honest law."""
    d = mech.domain_size
    if attack == "rpa":
        bits = rng.random((m, d)) < 0.5
    else:
        bits = np.zeros((m, d), dtype=bool)
        bits[:, targets] = True
        if attack == "mga-a":
            weight = (rng.random(m) < mech.p).astype(np.int64) + rng.binomial(d - 1, mech.q, m)
            pad = np.maximum(weight - targets.size, 0)
            others = np.setdiff1d(np.arange(d), targets)
            order = np.argsort(rng.random((m, others.size)), axis=1)  # a random order per row
            chosen = np.zeros((m, others.size), dtype=bool)
            np.put_along_axis(chosen, order, np.arange(others.size)[None, :] < pad[:, None], axis=1)
            bits[:, others] = chosen
    return np.packbits(bits, axis=1)


__all__ = ["ATTACKS", "acceptance", "closed_gain", "contribution_variance", "effective_beta",
           "fake_columns", "floor_gain", "olh_seeds", "per_fake"]
