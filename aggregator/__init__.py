"""ldptel aggregator: decoders (mergeable accumulators + estimators) and the stream worker."""

from __future__ import annotations

from collections.abc import Iterable

from ldptel.aggregator.decoders import Accumulator, accumulator_for
from ldptel.mechanisms.base import Mechanism
from ldptel.mechanisms.estimates import FrequencyEstimate, MeanEstimate
from ldptel.mechanisms.postprocess import norm_sub
from ldptel.proto import ReportBatch


def estimate(mech: Mechanism, batches: Iterable[ReportBatch | bytes]) -> FrequencyEstimate | MeanEstimate:
    """Accumulate ``batches`` (``ReportBatch`` messages or their serialized bytes) and
    estimate: ``.n``, ``.counts`` (raw unbiased), ``.std_error``, ``.ci_low``/``.ci_high``
    (95%), ``.normalized`` (Norm-Sub); for a numeric mechanism a ``MeanEstimate``."""
    acc = accumulator_for(mech)
    for batch in batches:
        if isinstance(batch, (bytes, bytearray, memoryview)):
            batch = ReportBatch.FromString(bytes(batch))
        acc.add(batch)
    return acc.estimate()


__all__ = ["Accumulator", "FrequencyEstimate", "MeanEstimate", "accumulator_for", "estimate", "norm_sub"]
