"""Estimates over cells (issue 28): the sum of released cells, the marginals over dimensions and
the differences between experiment arms — the one implementation the aggregator (the fleet-wide
estimate of a campaign with dimensions) and the export API (``?by=``, ``?compare=``) share, so
the fleet-wide estimate is exactly the sum of its cells.

A cell's estimate is a *fragment* of an estimate document: ``{"items": [...]}`` (frequency
kinds: per value ``estimate, std_error, ci_low, ci_high, estimate_normalized``, counts of
devices) or ``{"mean": row, "sum": row}`` (numeric kinds: ``estimate, std_error, ci_low,
ci_high``). Cells are independent (disjoint sets of devices), so over released cells c:

- counts: Ĉ = Σ_c Ĉ_c, Var = Σ_c Var_c; Norm-Sub recomputed on Ĉ with N = Σ_c n_c;
- numeric: sum Ŝ = Σ_c Ŝ_c with Var = Σ_c Var(Ŝ_c), and mean = Ŝ/N with std error √Var/N;
- 95 % CIs: estimate ± z₀.₉₇₅·std error.

Differences (``differences``) of an arm t against the control c, per value, as frequencies
(fractions of each arm's reports; n_t, n_c known exactly): f̂ = Ĉ/n estimates the arm's
*population* frequency f, the devices of an arm being a random sample of it, so its variance adds
the sampling term to the mechanism's (``count_variance`` is conditional on the devices' values):
Var(f̂) = Var(Ĉ | values)/n² + f(1 − f)/n, with f̃ = clip(f̂, 0, 1) plugged in; then
D̂ = f̂_t − f̂_c with Var(D̂) = Var(f̂_t) + Var(f̂_c) (independent arms) and the CI D̂ ± z·√Var.
Numeric: the difference of the means, Var = Var(mean_t) + Var(mean_c) (a mean's std error,
s/√N over the devices' unbiased values, already holds the sampling spread).
``tests/test_experiment_coverage.py`` measures the coverage (95 ± 1.5 % over 2,000 trials at
two ε).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldptel.mechanisms.base import Z95
from ldptel.mechanisms.postprocess import norm_sub

Fragment = dict[str, Any]  # {"items": [...]} or {"mean": row, "sum": row}
STATS = ("mean", "sum")


def _row(estimate: float, variance: float) -> dict[str, float | None]:
    se = math.sqrt(variance) if math.isfinite(variance) and variance >= 0 else float("nan")
    out = {"estimate": estimate, "std_error": se, "ci_low": estimate - Z95 * se,
           "ci_high": estimate + Z95 * se}
    return {k: (v if math.isfinite(v) else None) for k, v in out.items()}


def _num(v: Any) -> float:
    return float("nan") if v is None else float(v)


def is_numeric(fragment: Mapping[str, Any]) -> bool:
    return "items" not in fragment


def sum_cells(parts: Sequence[tuple[int, Fragment]]) -> Fragment:
    """The estimate of the union of independent cells ``parts`` ((n_reports, fragment) each,
    at least one): see the module docstring."""
    n = sum(k for k, _ in parts)
    first = parts[0][1]
    if is_numeric(first):
        total = sum(_num(f["sum"]["estimate"]) for _, f in parts)
        var = sum(_num(f["sum"]["std_error"]) ** 2 for _, f in parts)
        mean = _row(total / n, var / n ** 2) if n else _row(float("nan"), float("nan"))
        return {"mean": mean, "sum": _row(total, var)}
    values = [it["value"] for it in first["items"]]
    est = np.sum([[_num(it["estimate"]) for it in f["items"]] for _, f in parts], axis=0)
    var = np.sum([[_num(it["std_error"]) ** 2 for it in f["items"]] for _, f in parts], axis=0)
    normalized = norm_sub(np.nan_to_num(est), n)
    rows = zip(values, est.tolist(), var.tolist(), normalized.tolist(), strict=True)
    return {"items": [{"value": v, **_row(e, s), "estimate_normalized": z} for v, e, s, z in rows]}


def differences(treatment: tuple[int, Fragment], control: tuple[int, Fragment]) -> list[dict[str, Any]]:
    """Treatment − control per value as frequencies (numeric: of the means), with std error and
    95 % CI (module docstring); ``(n_reports, fragment)`` of each arm."""
    (n_t, t), (n_c, c) = treatment, control
    if is_numeric(t):
        a, b = t["mean"], c["mean"]
        row = _row(_num(a["estimate"]) - _num(b["estimate"]),
                   _num(a["std_error"]) ** 2 + _num(b["std_error"]) ** 2)
        return [{"value": "mean", **row}]
    out = []
    for a, b in zip(t["items"], c["items"], strict=True):
        f_t, f_c = _num(a["estimate"]) / n_t, _num(b["estimate"]) / n_c
        out.append({"value": a["value"], **_row(f_t - f_c, frequency_variance(f_t, _num(a["std_error"]), n_t)
                                                + frequency_variance(f_c, _num(b["std_error"]), n_c))})
    return out


def frequency_variance(f: float, count_se: float, n: int) -> float:
    """Var(f̂) of an arm's population frequency: the mechanism's (count std error / n)² plus the
    sampling term f̃(1 − f̃)/n (module docstring)."""
    clipped = min(max(f, 0.0), 1.0) if math.isfinite(f) else 0.0
    return (count_se / n) ** 2 + clipped * (1.0 - clipped) / n


def fragment_of(doc: Mapping[str, Any]) -> Fragment:
    """The estimate part of a document or cell: its ``items``, or its ``mean`` and ``sum``."""
    if "items" in doc:
        return {"items": doc["items"]}
    return {k: doc[k] for k in STATS}


def group_cells(cells: Sequence[Mapping[str, Any]], by: Sequence[str]) -> list[dict[str, Any]]:
    """The marginal over ``by`` (dimension names) of a document's ``cells`` (every cell that holds
    reports, each ``{"dimensions", "n_reports", "withheld", …fragment}``): one group per
    combination of ``by``'s values that a cell has, in the cells' order, each the sum of its
    released cells (``sum_cells``) with ``n_reports`` (None when all its cells are withheld),
    ``withheld`` (no released cell) and ``withheld_cells`` (its cells below the threshold)."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for cell in cells:
        groups.setdefault(tuple(cell["dimensions"][d] for d in by), []).append(cell)
    out = []
    for values, members in groups.items():
        released = [(int(c["n_reports"]), fragment_of(c)) for c in members if not c["withheld"]]
        entry: dict[str, Any] = {"dimensions": dict(zip(by, values, strict=True)),
                                 "n_reports": sum(n for n, _ in released) if released else None,
                                 "withheld": not released,
                                 "withheld_cells": sum(1 for c in members if c["withheld"])}
        entry.update(sum_cells(released) if released else {"items": []} if "items" in members[0] else {})
        out.append(entry)
    return out


__all__ = ["Fragment", "differences", "fragment_of", "frequency_variance", "group_cells", "is_numeric",
           "sum_cells"]
