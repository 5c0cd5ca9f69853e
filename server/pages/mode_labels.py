"""Words for campaigns in a shuffled privacy mode (``ldptel.campaigns.modes``) on the operator pages:
the mode and its trust model (``epsilon_note``), and a published window's claim, "central ε between
L and U", with the batches it rests on and the cumulative ε over the retention period
(``central_note``, ``central_head``; from the document's ``privacy``,
``ldptel.privacy.release_claims.window_claim``)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from ldptel.campaigns.config import Campaign
from ldptel.privacy.modes import Shuffled, ShuffledFakes
from ldptel.server import charts


def _eps(x: float | None) -> str:
    return charts.DASH if x is None else f"{x:.3g}"


def _delta(x: float) -> str:
    """δ as the pages write it: ``10⁻⁶`` for a power of ten (issue 35:
    this note said "1e-6" beside "10⁻⁶"), else 2 significant digits."""
    exp = round(math.log10(x))
    if math.isclose(x, 10.0 ** exp, rel_tol=1e-9):
        return "10" + str(exp).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{x:.2g}"


def epsilon_note(c: Campaign) -> Markup:
    """What a shuffled campaign's privacy rests on, in plain words (docs/privacy.md, "Trust model")."""
    mode = c.mode
    assert isinstance(mode, (Shuffled, ShuffledFakes)), "a local campaign's note is labels.epsilon_note"
    n = charts.fmt_count(mode.batch_min)
    target = Markup("The aggregator's estimates are planned for a central ε of at most {t} (δ = {d}) per "
                    "window, for batches of at least {n} devices.").format(
                        t=_eps(mode.central_epsilon), d=_delta(mode.central_delta), n=n)
    sealed = Markup("Every message is encrypted on the device to the aggregator (which alone can read it, "
                    "after the shuffler mixed it with at least {n} devices' messages); the collector, Redis "
                    "and the shuffler hold ciphertext only. The shuffler must not collude with the "
                    "aggregator.").format(n=n)
    if isinstance(mode, Shuffled):
        local = Markup("Each device sends one report, randomized on the device with ε₀ = {e}: against the "
                       "shuffler, or anyone who could read one message, that is its guarantee.").format(
                           e=charts.fmt_eps(c.epsilon))
    elif mode.local_epsilon is None:
        value = ("its value rounded at random to one of the grid points" if c.kind == "numeric"
                 else "its true value")
        local = Markup("Each device sends {v}{f}; it is not randomized on the device, so its guarantee "
                       "is central only: the shuffler must also keep every fake.").format(
                           v=value, f=_device_fakes(mode))
    else:
        local = Markup("Each device sends its value through GRR at ε = {e} (its local guarantee){f}.").format(
            e=charts.fmt_eps(mode.local_epsilon), f=_device_fakes(mode))
    if isinstance(mode, ShuffledFakes):
        local += " " + _shuffler_fakes(mode)
    return local + " " + sealed + " " + target


def _device_fakes(mode: ShuffledFakes) -> Markup:
    if mode.fake_rate <= 0:
        return Markup(" and no fake values")
    return Markup(" plus on average {r} fake values (uniform over the domain)").format(
        r=f"{mode.fake_rate:.3g}")


def _shuffler_fakes(mode: ShuffledFakes) -> Markup:
    """What ``fake_source`` adds (``ldptel.privacy.fake_sources``), in words."""
    if mode.shuffler_fakes <= 0:
        return Markup("Fakes come from the devices only (fake_source = devices): a batch whose other "
                      "devices are one attacker's protects a device with its own fakes only.")
    return Markup("The shuffler adds on average {m} fake values per bucket to every batch, sealed as a "
                  "device's (fake_source = {s}), so a device keeps a central guarantee even when every "
                  "other device of its batch is an attacker's.").format(
                      m=f"{mode.shuffler_fakes:.3g}", s=mode.fake_source)


def index_label(c: Campaign) -> str:
    """A range or numeric campaign's mechanism in a shuffled mode: a histogram over its values or
    over grid points (``ldptel.mechanisms.shuffled_kinds``), and how each index is sent."""
    how = {"histogram": "true index + fakes", "grr": "GRR", "oue": "OUE", "sue": "SUE"}.get(str(c.oracle),
                                                                                          str(c.oracle))
    if isinstance(c.mode, ShuffledFakes) and c.oracle == "grr":
        how = "GRR + fakes"
    if c.kind == "range":
        return f"Histogram over the values ({how})"
    return f"{c.domain_size} grid points, randomized rounding ({how})"


def central_note(privacy: Mapping[str, Any]) -> Markup:
    """A published window's claim in words."""
    batches = privacy.get("batches") or []
    sizes = ", ".join(charts.fmt_count(int(b)) for b in batches) or charts.DASH
    lo, hi = _eps(privacy.get("central_epsilon_lower")), _eps(privacy.get("central_epsilon"))
    if lo == hi:  # "between 1 and 1" (issue 35)
        claim = Markup("with ε = {hi} (an explicit attack reaches it, and it is certified: {bound})")
    else:
        claim = Markup("with the true ε between {lo} (an explicit attack reaches it) and {hi} (certified: "
                       "{bound})")
    text = Markup("This window's estimates come from {k} shuffled batch{es} of {sizes} devices: for any "
                  "one device they are (ε, δ = {d})-DP ").format(
                      k=len(batches), es="" if len(batches) == 1 else "es", sizes=sizes,
                      d=_delta(float(privacy["central_delta"])))
    text += claim.format(lo=lo, hi=hi, bound=privacy.get("central_bound", "")) + Markup(".")
    text += _adversarial_note(privacy)
    if privacy.get("cumulative_epsilon") is not None:
        text += Markup(" A device that reports in every window over the retention period ({t}) "
                       "reveals at most ε = {c} at the same δ (composed by a privacy-loss-distribution "
                       "accountant) to whoever holds the exports of one retention period; this is not a "
                       "lifetime bound: someone who keeps older exports holds more windows, and the ε "
                       "grows with them.").format(t=plural(int(privacy["releases_composed"]), "window"),
                                              c=_eps(privacy["cumulative_epsilon"]))
    return text


def _adversarial_note(privacy: Mapping[str, Any]) -> Markup:
    """The claim against adversarial devices (``claims``, ``ldptel.privacy.fake_sources``), in words."""
    adversarial = next((c for c in privacy.get("claims") or [] if c.get("against") == "adversarial_devices"),
                       None)
    if adversarial is None:
        return Markup("")
    if adversarial.get("central_epsilon") is None:
        return Markup(" That assumes honest devices beside it; if every other device of its batch were one "
                      "attacker's, nothing central is certified.")
    return Markup(" That assumes honest devices beside it; if every other device of its batch were one "
                  "attacker's, ε = {e} at the same δ still holds ({bound}).").format(
                      e=_eps(adversarial["central_epsilon"]), bound=adversarial.get("central_bound", ""))


def plural(n: int, word: str) -> str:
    """"1 window", "2 windows", "1,000 releases" (issue 35: "1 releases", "(1 windows)")."""
    return f"{charts.fmt_count(n)} {word}{'' if n == 1 else 's'}"


def composition_note(composition: Mapping[str, Any]) -> Markup | None:
    """A device's cumulative central ε across the shuffled campaigns (``ldptel.privacy.device_composition``)
    in words; None without a shuffled campaign to compose."""
    if composition["status"] == "none" and not composition["unbounded"]:
        return None
    parts, total = composition["campaigns"], composition["releases"]
    if composition["status"] == "none":
        text = Markup("No campaign in a shuffled privacy mode has a retention period, so no device's "
                      "cumulative central ε across them is bounded.")
    elif composition["status"] == "computing":
        text = Markup("A device's cumulative central ε across the {k} shuffled campaign{s} is being computed "
                      "(a privacy-loss-distribution accountant over their {t}); reload in a few "
                      "seconds.").format(k=len(parts), s="" if len(parts) == 1 else "s",
                                         t=plural(total, "release"))
    elif composition["status"] == "failed":
        text = Markup("A device's cumulative central ε across the {k} shuffled campaign{s} could not be "
                      "computed ({reason}).").format(k=len(parts), s="" if len(parts) == 1 else "s",
                                                     reason=composition.get("reason", "see the log"))
    else:
        text = Markup("A device that reports to every shuffled campaign ({names}) in every window over their "
                      "retention periods — {t} in all — reveals at most central ε = {e} (δ = {d}) "
                      "through their published estimates, composed by a privacy-loss-distribution "
                      "accountant, to whoever holds the exports of one retention period (not a "
                      "lifetime bound: older exports kept add their windows).").format(
                                            names=", ".join(p["name"] for p in parts),
                                            t=plural(total, "release"),
                                            e=_eps(composition["epsilon"]),
                                            d=_delta(float(composition["delta"])))
    if composition["unbounded"]:
        text += Markup(" Not counted: {names} (windows kept forever; set a retention).").format(
            names=", ".join(composition["unbounded"]))
    return text


def decoded_note(decoded_at: float, n: int) -> str:
    """"decoded in the hour from 13:00 UTC from 12,345 reports": ``decoded_at`` of a shuffled
    campaign is the hour plus the number of releases (``aggregator.publish.coarse_time``), of a
    local one through the shuffler the hour plus its publications (``counted_time``)."""
    hour = time.strftime("%Y-%m-%d %H:00 UTC", time.gmtime(decoded_at - decoded_at % 3600))
    return f"decoded in the hour from {hour}, from {n:,} reports"


def central_head(privacy: Mapping[str, Any]) -> str:
    """The claim for the page head."""
    lo, hi = _eps(privacy.get("central_epsilon_lower")), _eps(privacy.get("central_epsilon"))
    claim = f"central ε = {hi}" if lo == hi else f"central ε between {lo} and {hi}"
    return f"· {privacy['privacy_mode']}: {claim} (δ = {_delta(float(privacy['central_delta']))})"


__all__ = ["central_head", "central_note", "composition_note", "epsilon_note", "index_label"]
