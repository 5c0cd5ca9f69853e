"""The privacy modes a campaign can be in (docs/privacy.md), as types: one frozen dataclass per
mode, holding that mode's own fields and nothing else (privacy definitions as types, as OpenDP
states them), so that code branches on the type (``isinstance``, ``match``) and never on a string
or on optional fields that one mode has and another has not.

- ``Local``: every report is ε-LDP on its own (the campaign's ``epsilon``);
- ``Shuffled``: one ε₀-LDP report per device (``local_epsilon``: the planned ε₀, or a smaller one
  the operator gave), sealed to the analyzer, released in whole batches of ≥ ``batch_min``
  devices; the claim is central (amplification by shuffling) at (``central_epsilon``,
  ``central_delta``);
- ``ShuffledFakes``: the device's index (true, or through GRR at ``local_epsilon``; None: the
  index as it is) plus Poisson(``fake_rate``) fake indices, each sealed, and the shuffler's
  Poisson(``shuffler_fakes``) fakes per bucket in every release (``fake_source``,
  ``ldptel.privacy.fake_sources``); the claim is central (the fakes' noise).

A shuffled mode also holds its ``Pinned`` plan: what the planner chose when the version was
created (ε₀, fake rate, μ, the bound's name, the planner's version), stored in the version's
registry record and read from there ever after (docs/privacy.md, "A version's plan is pinned").

How a campaign's table chooses and plans its mode is ``ldptel.campaigns.modes``; ``name`` is the
mode's ``privacy_mode`` string of the public config and of the claims (serialization only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol, TypeAlias


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is a plan of: the planner's arguments (``ldptel.privacy.plan``)."""

    mode: str
    oracle: str
    domain_size: int
    central_epsilon: float
    central_delta: float
    batch_min: int
    local_epsilon: float | None  # shuffled-fakes with GRR on top; None otherwise


@dataclass(frozen=True)
class Pinned:
    """A version's plan as the planner made it, pinned in the version's registry record.

    ``local_epsilon``: the ε₀ the planner chose (shuffled) or the GRR's ε (shuffled-fakes, an
    input); ``fake_rate``: λ (shuffled-fakes); ``fakes_per_bucket``: μ = λ·batch_min/d;
    ``bound``: the name of the bound that certified it; ``planner_version``: the planner's
    version then (``ldptel.privacy.plan_cache.VERSION``); ``inputs``: what it is a plan of.
    ``fake_source`` (shuffled-fakes): who adds the fakes (``ldptel.privacy.fake_sources``), with
    ``fake_rate`` the devices' λ and ``shuffler_fakes`` the shuffler's μ per bucket per release;
    a plan stored before the key existed reads as ``"devices"`` (what it was made with)."""

    inputs: PlanInputs
    local_epsilon: float | None
    fake_rate: float | None
    fakes_per_bucket: float | None
    bound: str
    planner_version: int
    fake_source: str | None = None  # shuffled-fakes: "devices", "shuffler" or "both"
    shuffler_fakes: float = 0.0  # μ per bucket the shuffler adds to every release

    def to_json(self) -> dict[str, Any]:
        """The ``plan`` object of a version entry in the registry record."""
        out = asdict(self)
        out["for"] = out.pop("inputs")
        if self.fake_source is None:  # (a shuffled plan: no fake keys)
            del out["fake_source"], out["shuffler_fakes"]
        return out

    @classmethod
    def from_json(cls, doc: Any) -> Pinned:
        """The inverse of ``to_json``; ``ValueError`` saying what is wrong with a stored one."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("for"), Mapping):
            raise ValueError("must be an object with a 'for' object")
        inputs = doc["for"]
        try:
            pinned = cls(
                inputs=PlanInputs(str(inputs["mode"]), str(inputs["oracle"]), _int(inputs["domain_size"]),
                                  _number(inputs["central_epsilon"]), _number(inputs["central_delta"]),
                                  _int(inputs["batch_min"]), _optional(inputs["local_epsilon"])),
                local_epsilon=_optional(doc["local_epsilon"]), fake_rate=_optional(doc["fake_rate"]),
                fakes_per_bucket=_optional(doc["fakes_per_bucket"]), bound=str(doc["bound"]),
                planner_version=_int(doc["planner_version"]),
                fake_source=_source(doc, str(inputs["mode"])),
                shuffler_fakes=_number(doc.get("shuffler_fakes", 0.0)))
        except KeyError as exc:
            raise ValueError(f"has no {exc.args[0]!r}") from None
        if pinned.inputs.mode == "shuffled" and pinned.local_epsilon is None:
            raise ValueError("a shuffled plan needs local_epsilon")
        if pinned.inputs.mode == "shuffled-fakes" and pinned.fake_rate is None:
            raise ValueError("a shuffled-fakes plan needs fake_rate")
        return pinned


def _source(doc: Mapping[str, Any], mode: str) -> str | None:
    """A stored plan's ``fake_source``: as stored, else ``"devices"`` for shuffled-fakes (a plan
    made before the key existed: only devices added fakes then), None for shuffled."""
    source = doc.get("fake_source")
    if source is None:
        return "devices" if mode == "shuffled-fakes" else None
    if source not in ("devices", "shuffler", "both"):
        raise ValueError(f"fake_source must be devices, shuffler or both, got {source!r}")
    return str(source)


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"a finite number expected, got {v!r}")
    return float(v)


def _optional(v: Any) -> float | None:
    return None if v is None else _number(v)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"an integer expected, got {v!r}")
    return v


@dataclass(frozen=True)
class Local:
    """Every report is ε-LDP on its own; no central claim is planned."""

    name: ClassVar[str] = "local"


@dataclass(frozen=True)
class Shuffled:
    """Amplification by shuffling: ε₀-LDP reports of the campaign's oracle, whole batches."""

    name: ClassVar[str] = "shuffled"
    central_epsilon: float  # the operator's target
    central_delta: float  # with its default applied
    batch_min: int
    local_epsilon: float  # ε₀ the devices use (≤ the plan's)
    plan: Pinned


@dataclass(frozen=True)
class ShuffledFakes:
    """Poisson fake messages: the index (or GRR of it) plus fakes uniform over the domain."""

    name: ClassVar[str] = "shuffled-fakes"
    central_epsilon: float
    central_delta: float
    batch_min: int
    fake_rate: float  # λ, fake messages per device (0 with fake_source "shuffler")
    local_epsilon: float | None  # the GRR's ε, or None: the index as it is (oracle "histogram")
    plan: Pinned
    fake_source: str = "devices"  # who adds fakes (``ldptel.privacy.fake_sources``)
    shuffler_fakes: float = 0.0  # μ_s: fakes per bucket the shuffler adds to every release


PrivacyMode: TypeAlias = Local | Shuffled | ShuffledFakes
ShuffledMode: TypeAlias = Shuffled | ShuffledFakes
LOCAL = Local()
MODES = (Local.name, Shuffled.name, ShuffledFakes.name)


class HasMode(Protocol):
    @property
    def mode(self) -> PrivacyMode: ...


def is_shuffled(campaign: HasMode) -> bool:
    """True for a campaign in a shuffled mode (sealed reports, whole-batch releases)."""
    return isinstance(campaign.mode, (Shuffled, ShuffledFakes))


__all__ = ["LOCAL", "MODES", "HasMode", "Local", "PlanInputs", "Pinned", "PrivacyMode", "Shuffled",
           "ShuffledFakes", "ShuffledMode", "is_shuffled"]
