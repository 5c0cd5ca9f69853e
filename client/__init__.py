"""ldptel client SDK: on-device randomizers (frequency oracles) and report batching.

``TelemetryClient`` is the device side (configs, ledger, queue, delivery); ``create_mechanism``
builds a mechanism for simulations and notebooks. Errors: ``TelemetryError`` and its subclasses
(all ``ldptel.LdptelError``); ``health()`` returns a ``Health``, ``flush()`` a ``FlushResult``.
"""

from ldptel.client.delivery import FlushResult
from ldptel.client.errors import (
    BadConfig,
    CampaignRefused,
    QueueUnavailable,
    TelemetryError,
    UnknownCampaign,
    VersionClosed,
)
from ldptel.client.health import Health
from ldptel.client.transport import TelemetryClient
from ldptel.errors import LdptelError
from ldptel.mechanisms import MECHANISMS, Mechanism, create_mechanism, recommend_oracle

__all__ = [
    "MECHANISMS", "BadConfig", "CampaignRefused", "FlushResult", "Health", "LdptelError", "Mechanism",
    "QueueUnavailable", "TelemetryClient", "TelemetryError", "UnknownCampaign", "VersionClosed",
    "create_mechanism", "recommend_oracle",
]
