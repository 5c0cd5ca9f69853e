"""The publication of a campaign with breakdown dimensions (issue 28): each cell decoded on its own
and released only from the campaign's ``min_reports`` reports in that cell; the fleet-wide
estimate is the sum of the released cells (``cell_sums.sum_cells``), so it equals the sum of the
cells exactly and reveals nothing of a withheld one.

The document is the kind's usual document (``publish.document``: ``n_reports`` counts the
released cells' reports, ``items`` or ``mean``/``sum`` their sum) plus

- ``dimensions``: the campaign's dimensions (name, values, bucket) and ``experiment``;
- ``cells``: every cell that holds reports, in cell order (``Dimensions.cell_index``):
  ``{"dimensions": {name: value}, "n_reports", "withheld", "items" | "mean", "sum"}``; a
  withheld cell has ``n_reports`` null and no estimate;
- ``withheld``: ``{"cells", "n_reports"}``, how many cells are withheld and the reports (devices,
  for the device-level kinds) they hold together, never which cell holds how many.

The document's ``privacy`` states the central ε of the smallest released cell: cells are
shuffled, released and decoded apart, so the claim holds per cell and the weakest is the claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ldptel.aggregator.decoders import Accumulator
from ldptel.aggregator.decoders.cells import CellAccumulator
from ldptel.campaigns.config import Campaign
from ldptel.cell_sums import fragment_of, sum_cells

# publish.document of one inner accumulator: (campaign, window, acc, decoded_at, shuffled) → doc
DecodeOne = Callable[[Campaign, int, Accumulator, float, bool], dict[str, Any]]


def document(campaign: Campaign, window: int, acc: CellAccumulator, decoded_at: float, shuffled: bool,
             decode_one: DecodeOne) -> dict[str, Any]:
    """The document of the module docstring (at least one cell released: the caller checks)."""
    dims = campaign.dimensions
    assert dims is not None
    cells: list[dict[str, Any]] = []
    released: list[tuple[int, dict[str, Any]]] = []
    smallest: dict[str, Any] | None = None
    withheld_cells = withheld_reports = 0
    for index, n in acc.cell_counts().items():
        entry: dict[str, Any] = {"dimensions": dims.labelled(dims.cell_values(index))}
        if n >= campaign.min_reports:
            doc = decode_one(campaign, window, acc.inner[index], decoded_at, shuffled)
            entry.update(n_reports=n, withheld=False, **fragment_of(doc))
            released.append((n, fragment_of(doc)))
            if smallest is None or n < smallest["n_reports"]:
                smallest = doc
        else:
            entry.update(n_reports=None, withheld=True)
            if campaign.estimate_kind == "frequency":
                entry["items"] = []
            withheld_cells, withheld_reports = withheld_cells + 1, withheld_reports + n
        cells.append(entry)
    assert smallest is not None and released, "no released cell"
    total = sum(n for n, _ in released)
    head = {k: v for k, v in smallest.items() if k not in ("items", "mean", "sum")}
    return {**head, "n_reports": total, **sum_cells(released),
            "dimensions": dims.public(), "experiment": dims.experiment, "cells": cells,
            "withheld": {"cells": withheld_cells, "n_reports": withheld_reports}}


def releasable(campaign: Campaign, acc: Accumulator) -> bool:
    """Whether a publication has a document: for cells, one cell holds ``min_reports``."""
    if isinstance(acc, CellAccumulator):
        return any(n >= campaign.min_reports for n in acc.cell_counts().values())
    return acc.n >= campaign.min_reports


__all__ = ["document", "releasable"]
