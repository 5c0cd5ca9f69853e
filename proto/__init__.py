"""Wire schema ``ldptel/v1/reports.proto`` and its generated Python (committed).

Regenerate with ``python -m ldptel.proto.regenerate``; ``tests/test_proto.py`` checks the
committed file is what protoc produces.
"""

from ldptel.proto.ldptel.v1.reports_pb2 import (
    Dimension,
    GrrPayload,
    HadamardPayload,
    HeavyHitterPayload,
    NumericPayload,
    OlhPayload,
    RangePayload,
    RapporPayload,
    ReportBatch,
    SealedBatch,
    UnaryPayload,
)

SCHEMA_VERSION = 1
SEALED_SCHEMA_VERSION = 2  # SealedBatch: campaigns in a shuffled privacy mode


def batch_version(batch: ReportBatch | SealedBatch) -> int:
    """The campaign version a batch names (0, i.e. absent, is version 1)."""
    return batch.campaign_version or 1


__all__ = [
    "SCHEMA_VERSION",
    "Dimension",
    "GrrPayload",
    "HadamardPayload",
    "HeavyHitterPayload",
    "NumericPayload",
    "OlhPayload",
    "RangePayload",
    "RapporPayload",
    "ReportBatch",
    "SEALED_SCHEMA_VERSION",
    "SealedBatch",
    "UnaryPayload",
    "batch_version",
]
