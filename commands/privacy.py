"""``ldptel privacy plan``: the plan of a central (ε, δ) target (``ldptel.privacy.plan``), as
one JSON object (``--format json``) or readable text, with the claims a campaign of it states
(against adversarial devices, with honest ones; ``ldptel.privacy.fake_sources``).

``--kind heavy_hitters`` (issue 39; ``--mode shuffled`` only) plans a heavy-hitter campaign: the
pool-OLH at ε₀ over ``--levels`` J (default ``--max-length``), one report per device with its level
inside, so one release of ``batch_min`` devices holds every level: ε₀, the hash range g, the
devices per level (batch_min/J) and the std error of one prefix count at a level, U and L."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from ldptel.campaigns.modes import SHUFFLED_ORACLES
from ldptel.errors import UncertifiableTarget
from ldptel.mechanisms.shuffled_kinds import HEAVY_HITTERS

ORACLE_CHOICES = ("grr", "oue", "sue", "olh", "hadamard", "rappor", "histogram")  # refused: config_refusal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("plan", help="plan a campaign from a central (ε, δ) target: the largest local ε₀ "
                                        "(shuffled) or the smallest fake-message rate (shuffled-fakes)",
                           description="plan a campaign from a central (ε, δ) target",
                           formatter_class=parser.formatter_class)
    p.add_argument("--mode", required=True, choices=("shuffled", "shuffled-fakes"),
                   help="shuffled: ε₀-LDP reports, amplified; shuffled-fakes: the true index plus "
                        "Poisson fake indices")
    p.add_argument("--kind", choices=("frequency", "heavy_hitters"), default="frequency",
                   help="frequency (also range, numeric: an index over --domain-size), or heavy_hitters "
                        "(--max-length, --levels; --mode shuffled)")
    p.add_argument("--oracle", choices=ORACLE_CHOICES, default=None,
                   help="frequency oracle (shuffled); histogram, or grr with --local-epsilon "
                        "(shuffled-fakes); required for --kind frequency")
    p.add_argument("--domain-size", type=int, default=None,
                   help="number of values d (required for --kind frequency)")
    p.add_argument("--max-length", type=int, default=None,
                   help="heavy_hitters: the longest value in UTF-8 bytes (1-64)")
    p.add_argument("--levels", type=int, default=None,
                   help="heavy_hitters: levels J of the prefix tree (default --max-length)")
    p.add_argument("--central-epsilon", type=float, required=True, help="target central ε")
    p.add_argument("--central-delta", type=float, required=True, help="target central δ")
    p.add_argument("--batch-min", type=int, required=True, help="devices per shuffled batch, at least")
    p.add_argument("--windows", type=int, default=None,
                   help="also the cumulative ε at the target δ over this many releases (default: none)")
    p.add_argument("--local-epsilon", type=float, default=None,
                   help="shuffled-fakes with --oracle grr: pass the index through GRR at this ε first "
                        "(default: none)")
    p.add_argument("--fake-source", choices=("devices", "shuffler", "both"), default=None,
                   help="shuffled-fakes: who adds the planned fakes (default both, as a campaign's "
                        "fake_source); the plan then states the claim against adversarial devices too")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def config_refusal(mode: str, oracle: str, local_epsilon: float | None,
                   fake_source: str | None = None) -> str | None:
    """Why a campaign config with this mode and oracle is refused (``ldptel.campaigns.modes``), or
    None: the command prints no plan a config cannot use (issue 35: it planned rappor in
    ``shuffled``, which the config then refused)."""
    if mode == "shuffled" and oracle not in SHUFFLED_ORACLES:
        return (f"--oracle must be one of {', '.join(SHUFFLED_ORACLES)} with --mode shuffled (a campaign's "
                f"privacy_mode = \"shuffled\" takes these), got {oracle!r}")
    grr_needs_local = (oracle == "grr") != (local_epsilon is not None)
    if mode == "shuffled-fakes" and (oracle not in ("histogram", "grr") or grr_needs_local):
        return ("--mode shuffled-fakes sends an index: --oracle histogram (no local randomization), or "
                f"--oracle grr with --local-epsilon (as a campaign's config); got {oracle!r}"
                + ("" if local_epsilon is None else f" with --local-epsilon {local_epsilon:g}"))
    if mode == "shuffled" and local_epsilon is not None:
        return "--local-epsilon applies to --mode shuffled-fakes (shuffled plans the local ε₀)"
    if mode == "shuffled" and fake_source is not None:
        return "--fake-source applies to --mode shuffled-fakes (shuffled reports carry no fakes)"
    return None


def kind_arguments(args: argparse.Namespace) -> tuple[str, int] | str:
    """(oracle, d) the planner takes for ``--kind``, or why the arguments are refused: heavy
    hitters plan the pool-OLH (``heavy_hitters``) with d = the levels J (``ldptel.privacy.planner``)."""
    if args.kind == "frequency":
        for flag, value in (("--max-length", args.max_length), ("--levels", args.levels)):
            if value is not None:
                return f"{flag} applies to --kind heavy_hitters"
        missing = [f for f, v in (("--oracle", args.oracle), ("--domain-size", args.domain_size))
                   if v is None]
        if missing:
            return f"{' and '.join(missing)} required with --kind frequency"
        return str(args.oracle), int(args.domain_size)
    if args.mode != "shuffled":
        from ldptel.privacy.heavy_hitter_fakes import refusal

        levels = args.levels or args.max_length or 16
        return refusal(args.central_epsilon, args.central_delta, max(args.batch_min, 2), max(levels, 1))
    if args.oracle not in (None, "olh") or args.domain_size is not None:
        return ("--kind heavy_hitters takes no --oracle (the pool-OLH) nor --domain-size (--max-length, "
                "--levels)")
    if args.max_length is None or not 1 <= args.max_length <= 64:
        return f"--max-length must be an integer with 1 <= max_length <= 64, got {args.max_length!r}"
    levels = args.max_length if args.levels is None else args.levels
    if not -(-args.max_length // 2) <= levels <= 8 * args.max_length:
        return (f"--levels must be between {-(-args.max_length // 2)} and {8 * args.max_length} for "
                f"--max-length {args.max_length} (at most 16 new bits per level), got {levels}")
    return HEAVY_HITTERS, levels


def run_privacy(args: argparse.Namespace) -> int:
    from ldptel.privacy import plan  # through the plan cache: a plan is computed once per machine

    chosen = kind_arguments(args)
    refused = chosen if isinstance(chosen, str) else config_refusal(
        args.mode, "olh" if chosen[0] == HEAVY_HITTERS else chosen[0], args.local_epsilon, args.fake_source)
    if refused is not None or isinstance(chosen, str):
        print(f"ldptel privacy plan: {refused}", file=sys.stderr)
        return 2
    oracle, d = chosen
    try:
        result = plan(args.mode, oracle, d, args.central_epsilon, args.central_delta,
                      args.batch_min, args.windows, local_epsilon=args.local_epsilon)
    except UncertifiableTarget as exc:
        print(f"ldptel privacy plan: cannot certify: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"ldptel privacy plan: {exc}", file=sys.stderr)
        return 2
    doc = with_claims(result.as_dict(), args.fake_source)
    if oracle == HEAVY_HITTERS:
        doc = heavy_hitter_fields(doc)
    if args.format == "json":
        print(json.dumps({k: _finite(v) for k, v in doc.items()}, sort_keys=False))
    else:
        print(_text(doc))
    return 0


def with_claims(doc: dict[str, Any], fake_source: str | None) -> dict[str, Any]:
    """The plan with what a campaign of it states (``ldptel.privacy.fake_sources``): for
    shuffled-fakes the split of its μ (``fake_source``, the devices' ``fake_rate``, the shuffler's
    ``shuffler_fakes_per_bucket``), and ``claims``: against adversarial devices and with honest ones."""
    from ldptel.privacy.fake_sources import DEFAULT_FAKE_SOURCE, claims, split
    from ldptel.privacy.planner import CentralBound

    out = dict(doc)
    d, n, delta = doc["domain_size"], doc["batch_min"], doc["central_delta"]
    honest = CentralBound(doc["central_epsilon"], doc["central_epsilon_lower"], delta, doc["bound"])
    if doc["mode"] == "shuffled":
        out["claims"] = claims(None, d, n, delta, doc["local_epsilon"], honest)
        return out
    fakes = split(float(doc["fakes_per_bucket"]), fake_source or DEFAULT_FAKE_SOURCE, d, n)
    out.update(fake_source=fakes.source, fake_rate=fakes.device_rate,
               shuffler_fakes_per_bucket=fakes.shuffler_mu)
    out["claims"] = claims(fakes, d, n, delta, doc["local_epsilon"], honest)
    return out


def heavy_hitter_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """A heavy-hitter plan with its own names: ``kind``, ``levels`` (the planner's d), the pool's
    hash range ``g`` and the devices per level at ``batch_min`` (``std_error`` is one prefix count's
    at a level)."""
    from ldptel.mechanisms.heavy_hitters import pool_hash_range

    out = {"kind": HEAVY_HITTERS, **doc, "levels": doc["domain_size"]}
    out.update(g=pool_hash_range(float(doc["local_epsilon"])),
               devices_per_level=doc["batch_min"] / doc["domain_size"])
    return out


def _finite(value: Any) -> Any:
    """JSON has no Infinity: an infinite ε (nothing certified) is written as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _text(doc: dict[str, Any]) -> str:
    hh = doc.get("kind") == HEAVY_HITTERS
    lines = [(f"heavy hitters, mode {doc['mode']}, pool-OLH over {doc['levels']} levels (one report per "
              f"device, its level inside), batch_min = {doc['batch_min']:,}" if hh else
              f"mode {doc['mode']}, oracle {doc['oracle']}, d = {doc['domain_size']:,}, "
              f"batch_min = {doc['batch_min']:,}"),
             f"target: central ε ≤ {doc['target_epsilon']:g} at δ = {doc['central_delta']:g}"]
    if doc["mode"] == "shuffled":
        lines.append(f"local ε₀ of each report: {doc['local_epsilon']:g}"
                     + (f" (hash range g = {doc['g']})" if hh else ""))
        if hh:
            lines.append(f"devices per level at batch_min: {doc['devices_per_level']:,.0f} (levels drawn "
                         "per device: one release holds every level)")
    else:
        lines.append(f"fakes per bucket at batch_min: {doc['fakes_per_bucket']:.4g} (fake_source = "
                     f"{doc['fake_source']}: {doc['fake_rate']:.4g} fake messages per device, "
                     f"{doc['shuffler_fakes_per_bucket']:.4g} per bucket added by the shuffler to every "
                     "release)")
        if doc["local_epsilon"] is not None:
            lines.append(f"index passed through GRR at ε = {doc['local_epsilon']:g}")
        if doc.get("fakes_per_bucket_lower") is not None:
            lines.append(f"an explicit attack needs μ ≥ {doc['fakes_per_bucket_lower']:.4g} per bucket "
                         "for this target (lower bound)")
    lines.append(f"central ε between {doc['central_epsilon_lower']:.4g} (lower bound) and "
                 f"{doc['central_epsilon']:.4g} (certified: {doc['bound']})")
    for claim in doc["claims"]:
        eps = claim["central_epsilon"]
        who = ("every other device of the batch adversarial" if claim["against"] == "adversarial_devices"
               else "honest devices")
        lines.append(f"claim with {who}: " + ("nothing central certified" if eps is None
                                             else f"central ε ≤ {eps:.4g} ({claim['central_bound']})")
                     + "; assumes: " + "; ".join(claim["assumes"]))
    error = doc["std_error"]
    lines.append(("standard error of one prefix count at a level (batch_min/levels devices; the pool's "
                  "collision term, which grows with the data's concentration, comes on top): " if hh
                  else "standard error of one count: ")
                 + ("from the RAPPOR regression (no closed form)" if error is None else f"{error:.4g}"))
    if doc["windows"] is not None:
        lines.append(f"cumulative ε over {doc['windows']} releases at δ = {doc['central_delta']:g}: "
                     f"{doc['cumulative_epsilon']:.4g}")
    return "\n".join(lines)
