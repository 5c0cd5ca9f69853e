"""Wire schema ``ldptel/v1/reports.proto`` and its generated Python (committed).

Regenerate with ``python -m ldptel.proto.regenerate``; ``tests/test_proto.py`` checks the
committed file is what protoc produces.
"""

from ldptel.proto.ldptel.v1.reports_pb2 import (
    GrrPayload,
    HadamardPayload,
    HeavyHitterPayload,
    NumericPayload,
    OlhPayload,
    RangePayload,
    RapporPayload,
    ReportBatch,
    UnaryPayload,
)

SCHEMA_VERSION = 1

__all__ = [
    "SCHEMA_VERSION",
    "GrrPayload",
    "HadamardPayload",
    "HeavyHitterPayload",
    "NumericPayload",
    "OlhPayload",
    "RangePayload",
    "RapporPayload",
    "ReportBatch",
    "UnaryPayload",
]
