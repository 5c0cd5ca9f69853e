"""Export API of numeric campaigns: ``GET /v1/campaigns/<name>/mean?format=json|csv&window=…``.

Export token. ``window`` as for ``/estimates``. Answers ``200`` with the aggregator's publication
(``ldptel.aggregator.publish``): JSON ``{"campaign", "kind", "epsilon", "n_reports", "window",
"decoded_at", "mechanism", "lower", "upper", "mean": {"estimate", "std_error", "ci_low",
"ci_high"}, "sum": {…}}`` — the mean of the devices' values (clipped to [lower, upper]) and their
sum (mean·n_reports), each with its std error and 95 % CI; ``format=csv``: one row per statistic
(``MEAN_COLUMNS``). ``304``, ``401``, ``404``, ``409``, ``503`` as ``/estimates``; ``400`` for a bad
``window``/``format`` or a campaign that is not numeric.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from ldptel.campaigns.config import Campaign
from ldptel.server.auth import require_token
from ldptel.server.documents import Params, Published, Window
from ldptel.server.export import published_response, validators

bp = Blueprint("means", __name__)

MEAN_COLUMNS = ("statistic", "estimate", "std_error", "ci_low", "ci_high")  # + window, n_reports
STATISTICS = ("mean", "sum")
NOT_NUMERIC = "no mean (only numeric campaigns)"


def mean(campaign: Campaign, window: Window, params: Params | None = None) -> dict[str, Any]:
    """The published mean document of a numeric campaign's released ``window`` (``ApiError`` 400
    for another kind or a bad window, 409 below ``min_reports``, 503 before the first publication)."""
    _, pub, _ = mean_validators(campaign, window)
    assert pub.doc is not None
    return pub.doc


def mean_validators(campaign: Campaign, window: Window) -> tuple[int, Published, dict[str, str]]:
    """``export.validators`` of a numeric campaign's window (400 for another kind)."""
    return validators(campaign, window, "numeric", NOT_NUMERIC)


def mean_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's ``mean`` and ``sum`` as CSV rows (``MEAN_COLUMNS``)."""
    return [{"statistic": s, **doc[s]} for s in STATISTICS]


@bp.get("/v1/campaigns/<name>/mean", endpoint="mean")
@require_token("export")
def mean_view(name: str) -> Response:
    return published_response(name, mean_validators, mean_rows, MEAN_COLUMNS, "-mean")
