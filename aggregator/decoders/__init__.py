"""One decoder (accumulator + estimator) per mechanism; ``accumulator_for`` picks it."""

from __future__ import annotations

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.aggregator.decoders.grr import GrrAccumulator
from ldptel.aggregator.decoders.hadamard import HadamardAccumulator
from ldptel.aggregator.decoders.heavy_hitters import HeavyHitterAccumulator
from ldptel.aggregator.decoders.numeric import NumericAccumulator
from ldptel.aggregator.decoders.olh import OlhAccumulator
from ldptel.aggregator.decoders.range_haar import RangeHaarAccumulator
from ldptel.aggregator.decoders.range_hierarchical import RangeHierarchicalAccumulator
from ldptel.aggregator.decoders.rappor import RapporAccumulator
from ldptel.aggregator.decoders.unary import UnaryAccumulator
from ldptel.mechanisms import NUMERIC_MECHANISMS
from ldptel.mechanisms.base import Mechanism

ACCUMULATORS: dict[str, type[Accumulator]] = {
    "grr": GrrAccumulator,
    "sue": UnaryAccumulator,
    "oue": UnaryAccumulator,
    "olh": OlhAccumulator,
    "hadamard": HadamardAccumulator,
    "rappor": RapporAccumulator,
    "heavy_hitters": HeavyHitterAccumulator,
    "range_haar": RangeHaarAccumulator,
    "range_hierarchical": RangeHierarchicalAccumulator,
    **dict.fromkeys(NUMERIC_MECHANISMS, NumericAccumulator),
}


def accumulator_for(mech: Mechanism) -> Accumulator:
    """A fresh, empty accumulator for ``mech``."""
    try:
        return ACCUMULATORS[mech.name](mech)
    except KeyError:
        raise ValueError(f"no decoder for mechanism {mech.name!r}") from None


__all__ = ["ACCUMULATORS", "Accumulator", "accumulator_for"]
