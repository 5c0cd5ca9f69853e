"""The estimates of range and numeric campaigns in a shuffled privacy mode, from the debiased
histogram over their index domain (``ldptel.mechanisms.index_stats`` has the formulas).

The accumulator is the frequency one of the index mechanism (``decoders.fakes`` for
``shuffled-fakes``, the oracle's for ``shuffled``); ``index_estimate`` turns its
``FrequencyEstimate`` into what the kind publishes:

- range: a ``RangeEstimate`` (per-value counts and std errors, the CDF and quantiles; ranges with
  ``IndexStatistics.range_variance``, the fakes' multinomial variance included);
- numeric: a ``MeanEstimate`` (the mean of the values from the grid points' counts, its std error
  with the rounding's h²/4 per report).

A range document also carries ``fake_messages`` (F, the fakes of the window's releases: the export
API's range and quantile queries need it for the variances, ``ldptel.store.published.range_estimate``; the
std errors published with every count already reveal it), a numeric one ``grid_points``.
"""

from __future__ import annotations

import math
from typing import Any

from ldptel.aggregator.decoders.base import Accumulator
from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.estimates import FrequencyEstimate, MeanEstimate
from ldptel.mechanisms.index_stats import index_statistics
from ldptel.mechanisms.ranges import RangeEstimate
from ldptel.mechanisms.shuffled_kinds import RANGE_METHOD


def fake_messages(acc: Accumulator) -> int:
    """F: the messages decoded less the devices (0 without fakes)."""
    if "messages" not in acc.state:
        return 0
    return max(int(acc.state["messages"][0]) - acc.n, 0)


def index_estimate(campaign: Campaign, acc: Accumulator, est: FrequencyEstimate
                   ) -> tuple[RangeEstimate | MeanEstimate, dict[str, Any]]:
    """(the kind's estimate, the document's extra fields) of ``acc`` and its ``estimate()``."""
    fakes = fake_messages(acc)
    stats = index_statistics(acc.mech, fakes)
    if campaign.kind == "range":
        return RangeEstimate(n=est.n, counts=est.counts, std_error=est.std_error,
                             range_variance=stats.range_variance, plug_in=est.counts,
                             method=RANGE_METHOD), {"fake_messages": fakes}
    mech: Any = acc.mech  # a grid mechanism (``ldptel.mechanisms.grid``)
    mean, var = stats.mean(mech.grid(), est.counts, est.n, mech.step)
    return MeanEstimate(n=est.n, mean=mean, std_error=math.sqrt(var) if var == var else var), \
        {"grid_points": int(mech.domain_size)}


__all__ = ["fake_messages", "index_estimate"]
