"""``ldptel audit poisoning``: the gain of data-poisoning attacks (MGA, MGA-A, RIA, RPA: Cao, Jia,
Gong 2021; the math is ``ldptel.privacy.poisoning_attacks``) on each oracle in each privacy mode,
at a fake-device fraction β, beside the input-manipulation floor β(1 − f_T).

Each row has the closed form twice (the paper's, every fake report counted; and after the
collector's checks) and a simulation through the shipped parts: n genuine devices encoded by the
mechanism's own ``randomize`` (shuffled-fakes: their index plus Poisson(λ) fake indices,
``mechanisms.fakes``), the fake reports checked by the mechanism's collector checks
(``mechanisms.rows.valid_rows``, as the collector checks a report and the aggregator a sealed
row: a refused report counts for nothing) and both decoded by the aggregator's
decoders (``accumulator_for``, ``FakesAccumulator``). The simulated gain is
Σ_T f̂(after, n + m devices) − Σ_T f̂(before, n devices) on the same genuine reports; ``sd`` bounds
its standard deviation (``contribution_variance`` for the fakes; the decoder's variances of the
targets' genuine counts, summed: they are independent or negatively correlated).

Modes: ``local`` (the oracle at ε), ``shuffled`` (the oracle at the ε₀ the planner gives for a
central ε at ``batch_min``), ``shuffled-fakes`` (the index as it is, λ from the planner) with the
fakes added by the shuffler (a fake device sends one message: its gain is the floor) or drawn on
the devices (a fake device may fill its envelope up to the collector's message limit).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ldptel.commands.poisoning_sim import Row, Setting

def table(s: Setting, rows: list[Row]) -> str:
    head = (f"poisoning: β = {s.beta:g} ({s.fakes:,} fake beside {s.users:,} genuine devices: "
            f"β = {s.fakes / (s.fakes + s.users):.5f} in the closed forms), "
            f"r = {s.targets} targets (f_T = {s.target_frequency:g}), d = {s.domain_size:,}, "
            f"ε = {s.epsilon:g} (shuffled modes: central, batch_min = {s.batch_min:,}, "
            f"δ = {s.central_delta:g}); floor β(1 − f_T) = {rows[0].floor if rows else 0:.4f}")
    cols = f"{'oracle':9} {'mode':33} {'ε':>6} {'attack':6} {'kept':>6} {'closed':>8} {'checked':>8} " \
           f"{'simulated':>16} {'× floor':>8}"
    lines = [head, cols, "-" * len(cols)]
    for row in rows:
        mode = row.mode + (f" (fakes: {row.fake_source})" if row.fake_source else "")
        eps = "—" if row.epsilon is None else f"{row.epsilon:.3g}"
        sim = f"{row.simulated:.4f} ± {row.sd:.4f}"
        lines.append(f"{row.oracle:9} {mode:33} {eps:>6} {row.attack:6} {row.accepted:6.1%} "
                     f"{row.closed:8.4f} {row.closed_checked:8.4f} {sim:>16} {row.times_floor:8.1f}"
                     + (f"  ({row.note})" if row.note else ""))
    lines.append("closed: the paper's closed form, every fake report counted; checked: after the "
                 "collector's checks (kept: the share of fake reports they took); simulated: "
                 "through the real randomizers, checks and decoders, ± a bound on its sd")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beta", type=float, default=0.05, help="fake devices / all devices, β")
    p.add_argument("--targets", type=int, default=10, help="target items, r")
    p.add_argument("--domain-size", type=int, default=1024, help="items, d")
    p.add_argument("--epsilon", type=float, default=1.0,
                   help="local: the reports' ε; shuffled modes: the central ε the planner targets")
    p.add_argument("--target-frequency", type=float, default=0.05,
                   help="f_T: the targets' summed frequency among the genuine devices")
    p.add_argument("--users", type=int, default=100_000, help="genuine devices simulated, n")
    p.add_argument("--batch-min", type=int, default=10_000, help="shuffled modes: the plan's batch_min")
    p.add_argument("--central-delta", type=float, default=None,
                   help="shuffled modes: δ (default: min(1/(10·batch_min), 1e-6), as a campaign's)")
    p.add_argument("--fakes-local-epsilon", type=float, default=None,
                   help="shuffled-fakes: GRR at this ε on the index (default: the index as it is)")
    p.add_argument("--oracles", default="grr,oue,olh,sue,hadamard", help="comma-separated oracles")
    p.add_argument("--modes", default="local,shuffled,shuffled-fakes",
                   help="comma-separated privacy modes")
    p.add_argument("--attacks", default="mga,mga-a,ria,rpa", help="comma-separated attacks")
    p.add_argument("--seed", type=int, default=None, help="fixed seed (tests); default: OS randomness")
    p.add_argument("--format", choices=("table", "json"), default="table")


def _names(text: str, allowed: tuple[str, ...], flag: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in names if x not in allowed]
    if bad or not names:
        raise ValueError(f"{flag}: {bad[0] if bad else 'nothing'!r} is not one of {', '.join(allowed)}")
    return names


def setting_of(args: argparse.Namespace) -> Setting:
    """The validated setting of the command line (``ValueError`` naming the flag)."""
    from ldptel.commands.poisoning_sim import Setting
    if not 0 < args.beta < 1:
        raise ValueError(f"--beta must be in (0, 1), got {args.beta}")
    if not 2 <= args.domain_size <= 1 << 20:
        raise ValueError(f"--domain-size must be in [2, 1048576], got {args.domain_size}")
    if not 1 <= args.targets < args.domain_size:
        raise ValueError(f"--targets must be in [1, domain size), got {args.targets}")
    if not 0 <= args.target_frequency <= 1:
        raise ValueError(f"--target-frequency must be in [0, 1], got {args.target_frequency}")
    if not 100 <= args.users <= 10_000_000:
        raise ValueError(f"--users must be in [100, 10000000], got {args.users}")
    if args.batch_min < 2:
        raise ValueError(f"--batch-min must be at least 2, got {args.batch_min}")
    delta = args.central_delta if args.central_delta is not None else min(1 / (10 * args.batch_min), 1e-6)
    return Setting(args.beta, args.targets, args.domain_size, args.epsilon, args.target_frequency,
                   args.users, args.batch_min, delta, args.fakes_local_epsilon)


def run_poisoning(args: argparse.Namespace) -> int:
    """Print the audit (table or JSON); 2 on a bad argument."""
    # numpy, the decoders: imported on use (``ldptel --help`` builds this parser)
    from ldptel.commands.poisoning_sim import MODES, ORACLES, audit_poisoning
    from ldptel.privacy.poisoning_attacks import ATTACKS

    try:
        s = setting_of(args)
        rows = audit_poisoning(s, _names(args.oracles, ORACLES, "--oracles"),
                               _names(args.modes, MODES, "--modes"),
                               _names(args.attacks, ATTACKS, "--attacks"), args.seed)
    except ValueError as exc:
        print(f"ldptel audit poisoning: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        doc = {"setting": asdict(s) | {"fakes": s.fakes, "simulated_beta": s.fakes / (s.fakes + s.users)},
               "floor": rows[0].floor if rows else None,
               "rows": [asdict(r) | {"times_floor": r.times_floor} for r in rows]}
        print(json.dumps(doc, indent=2))
    else:
        print(table(s, rows))
    return 0


__all__ = ["add_arguments", "run_poisoning", "setting_of"]
