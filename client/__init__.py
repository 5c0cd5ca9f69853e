"""ldptel client SDK: on-device randomizers (frequency oracles) and report batching."""

from ldptel.client.transport import CampaignRefused, FlushResult, TelemetryClient, TelemetryError
from ldptel.mechanisms import MECHANISMS, Mechanism, create_mechanism, recommend_oracle

__all__ = [
    "MECHANISMS", "CampaignRefused", "FlushResult", "Mechanism", "TelemetryClient", "TelemetryError",
    "create_mechanism", "recommend_oracle",
]
