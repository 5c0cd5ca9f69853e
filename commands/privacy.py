"""``ldptel privacy plan``: the plan of a central (ε, δ) target (``ldptel.privacy.plan``), as
one JSON object (``--format json``) or readable text, with the claims a campaign of it states
(against adversarial devices, with honest ones; ``ldptel.privacy.fake_sources``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from ldptel.campaigns.modes import SHUFFLED_ORACLES
from ldptel.errors import UncertifiableTarget

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
    p.add_argument("--oracle", required=True, choices=ORACLE_CHOICES,
                   help="frequency oracle (shuffled); histogram, or grr with --local-epsilon "
                        "(shuffled-fakes)")
    p.add_argument("--domain-size", type=int, required=True, help="number of values d")
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


def run_privacy(args: argparse.Namespace) -> int:
    from ldptel.privacy import plan  # through the plan cache: a plan is computed once per machine

    refused = config_refusal(args.mode, args.oracle, args.local_epsilon, args.fake_source)
    if refused is not None:
        print(f"ldptel privacy plan: {refused}", file=sys.stderr)
        return 2
    try:
        result = plan(args.mode, args.oracle, args.domain_size, args.central_epsilon, args.central_delta,
                      args.batch_min, args.windows, local_epsilon=args.local_epsilon)
    except UncertifiableTarget as exc:
        print(f"ldptel privacy plan: cannot certify: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"ldptel privacy plan: {exc}", file=sys.stderr)
        return 2
    doc = with_claims(result.as_dict(), args.fake_source)
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


def _finite(value: Any) -> Any:
    """JSON has no Infinity: an infinite ε (nothing certified) is written as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _text(doc: dict[str, Any]) -> str:
    lines = [f"mode {doc['mode']}, oracle {doc['oracle']}, d = {doc['domain_size']:,}, "
             f"batch_min = {doc['batch_min']:,}",
             f"target: central ε ≤ {doc['target_epsilon']:g} at δ = {doc['central_delta']:g}"]
    if doc["mode"] == "shuffled":
        lines.append(f"local ε₀ of each report: {doc['local_epsilon']:g}")
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
    lines.append("standard error of one count: " + ("from the RAPPOR regression (no closed form)"
                                                    if error is None else f"{error:.4g}"))
    if doc["windows"] is not None:
        lines.append(f"cumulative ε over {doc['windows']} releases at δ = {doc['central_delta']:g}: "
                     f"{doc['cumulative_epsilon']:.4g}")
    return "\n".join(lines)
