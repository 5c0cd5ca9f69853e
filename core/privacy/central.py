"""The central (shuffle-model) part of a campaign's privacy claim: what a set of n shuffled
reports reveals about one device to whoever sees only that set (or anything computed from it).

``Campaign.privacy()`` (``ldptel.mechanisms.claims``) is the local claim: what one report reveals.
With the shuffler on, the aggregator only ever reads reports that the shuffler permuted uniformly
across devices, with no batch id, arrival time or grouping; a window's estimate is a function of
the multiset of its n reports. By Feldman–McMillan–Talwar's amplification
(``ldptel.privacy.shuffle_epsilon``) that multiset is (ε_c, δ)-DP with respect to one report,
where ε₀ is the per-report ε (``epsilon_report``: ε₁ for memoized campaigns and RAPPOR, the
ε of the report given the value, the permanent response not fixed).

``release_claim`` — added to every published document's ``privacy`` object of a ``local``
campaign (``ldptel.aggregator.publish``): **no central ε** (issue 36, reproduction 7). The
aggregator republishes a local window as the shuffler's releases arrive, and the shuffler releases a
local group once it holds ``shuffle_min_reports`` *or* its first report waited
``shuffle_max_delay`` (a latency bound), so a release may hold a single report and two successive
publications may differ by exactly one report: their difference is that report, whatever n the
window holds. A bound on "the n reports of the window" says nothing about that difference, so the
document states none:

- ``shuffled``: the shuffler is enabled (``[shuffler] enabled`` of the publishing aggregator);
- ``central_n``: the window's report count;
- ``central_epsilon``, ``central_delta``: None;
- ``central_reason``: ``REPUBLISHED`` (shuffler on) or ``NOT_SHUFFLED`` (off);
- ``central_scope``: None.

A central claim on published estimates needs whole releases of a known minimum size: the shuffled
privacy modes (``ldptel.privacy.release_claims``: whole batches of ≥ ``batch_min`` devices).

``stored_claim`` — added to ``GET /v1/campaigns``' ``privacy`` object: the bound
(``central_bound``) of one release of the shuffler, ``shuffle_min_reports`` reports
(``stored_central_epsilon``, ``stored_central_delta``, ``stored_central_n``,
``stored_central_reason``): what a reader of the analysis stream in Redis faces. A release forced
by ``shuffle_max_delay`` may hold fewer reports (a larger ε); reports still in the ingress stream
are not covered at all (only the local ε).

Scope. The bound is about neighbouring sets that differ in one report. A device that sends k
reports in a window (``reports_per_window`` = k > 1, fresh randomness) changes k of them: by
group privacy the release is (k·ε_c, δ·(e^(k·ε_c) − 1)/(e^ε_c − 1))-DP for it. Releases of
different windows use fresh randomness and compose by adding their (ε, δ). Memoized reports
reuse the device's permanent randomized response: one report is still ε₁-LDP about the value and
independent of the others, so one release with one report per device is covered, but reports
that share the permanent response (several in a window, or in several windows) are not
independent, so neither group privacy at ε₁ nor adding releases applies; what they reveal
together is bounded by the local ε∞ only.
"""

from __future__ import annotations

import math
from typing import Any

from ldptel.privacy.clones import default_central_delta, shuffle_epsilon
from ldptel.privacy.subject import Claimed

NOT_SHUFFLED = ("the shuffler is disabled: the aggregator reads reports as devices sent them, so "
                "only the local ε of each report holds")
REPUBLISHED = ("republished per report: differencing two publications isolates single reports (the "
               "aggregator republishes a local campaign's window as the shuffler's releases arrive, and "
               "a release forced by shuffle_max_delay may hold one report), so only the local ε of each "
               "report holds; a central ε needs a shuffled privacy mode (whole batches of at least "
               "batch_min devices)")


Bound = tuple[float | None, float | None, str | None]  # (ε_c, δ, why ε_c is None)


def central_bound(campaign: Claimed, n: int, shuffled: bool) -> Bound:
    """(ε_c, δ, reason) of n shuffled reports of ``campaign``: ε_c = ``shuffle_epsilon(ε₀, n, δ)``
    with ε₀ = ``epsilon_report`` and δ = ``central_delta`` or ``default_central_delta(n)``;
    ε_c None with a reason when the shuffler is off (δ None too) or nothing is certified."""
    if not shuffled:
        return None, None, NOT_SHUFFLED
    eps0 = float(campaign.privacy()["epsilon_report"])
    delta = campaign.central_delta if campaign.central_delta is not None else default_central_delta(n)
    eps = shuffle_epsilon(eps0, n, delta)
    if eps is None:
        return None, delta, (f"no amplification: for {n:,} shuffled reports of ε₀ = {eps0:.4g} the bound "
                             f"certifies no central ε below ε₀ at δ = {delta:.3g}; only the local ε holds")
    return eps, delta, None


def central_scope(campaign: Claimed, eps: float | None, delta: float | None) -> str:
    """What the bound covers for this campaign (module docstring, "Scope"), with the group-privacy
    figures of a device's ``reports_per_window`` reports when they apply."""
    claim = campaign.privacy()
    k = int(claim["reports_per_window"])
    base = "one report per device in one release (a set of shuffled reports, or anything computed from it)"
    if claim["memoize"]:
        inf = claim["epsilon_inf"]
        local = "the local ε∞" if inf is None else f"the local ε∞ = {inf:.4g}"
        which = ("a device's several reports in one window, and its reports in different releases,"
                 if k > 1 else "a device's reports in different releases")
        return (f"{base}. Memoized: {which} share its permanent randomized response, so they are "
                f"not covered by adding central ε or by group privacy; what they reveal together is "
                f"bounded by {local} only")
    text = f"{base}; releases of different windows use fresh randomness and compose by adding (ε, δ)"
    if k > 1 and eps is not None and delta is not None:
        group_delta = _group_delta(delta, eps, k)
        text += f". A device sends up to {k} reports in a window: "
        if group_delta < 1:
            text += (f"by group privacy they are (k·ε_c, δ·(e^(k·ε_c) − 1)/(e^ε_c − 1)) = "
                     f"({k * eps:.4g}, {group_delta:.3g})-DP")
        else:
            eps0 = float(claim["epsilon_report"])
            text += (f"group privacy gives no δ below 1 for {k} reports; their local bound "
                     f"k·ε₀ = {k * eps0:.4g} holds")
    return text


def _group_delta(delta: float, eps: float, k: int) -> float:
    """δ·(e^(k·ε) − 1)/(e^ε − 1) (= δ·Σ_{i<k} e^(i·ε), group privacy over k changes), computed in
    logs; inf from 1 on (no bound)."""
    log = math.log(delta) + _log_expm1(k * eps) - _log_expm1(eps)
    return math.exp(log) if log < 0 else math.inf


def _log_expm1(x: float) -> float:
    """log(e^x − 1) for x > 0 without overflow."""
    return x + math.log(-math.expm1(-x))


def release_claim(n: int, shuffled: bool) -> dict[str, Any]:
    """The central fields of a local campaign's published document: no central ε, and why
    (module docstring); ``n``: the window's reports."""
    return {"shuffled": shuffled, "central_epsilon": None, "central_delta": None, "central_n": n,
            "central_reason": REPUBLISHED if shuffled else NOT_SHUFFLED, "central_scope": None}


def stored_claim(campaign: Claimed, shuffled: bool) -> dict[str, Any]:
    """The fields ``GET /v1/campaigns`` adds: the bound for one shuffler release of
    ``shuffle_min_reports`` reports (module docstring)."""
    n = campaign.shuffle_min_reports
    eps, delta, reason = central_bound(campaign, n, shuffled)
    scope = None
    if shuffled:
        scope = (f"{central_scope(campaign, eps, delta)}. This is the bound of a release of {n:,} reports, "
                 f"as a reader of the analysis stream sees it; a release forced by shuffle_max_delay may "
                 f"hold fewer (down to one report: its local ε only), and the published estimates claim no "
                 f"central ε (republished per report)")
    return {"shuffled": shuffled, "stored_central_epsilon": eps, "stored_central_delta": delta,
            "stored_central_n": n, "stored_central_reason": reason, "central_scope": scope}


__all__ = ["NOT_SHUFFLED", "REPUBLISHED", "central_bound", "central_scope", "release_claim", "stored_claim"]
