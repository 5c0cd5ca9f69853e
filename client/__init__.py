"""ldptel client SDK: on-device randomizers (frequency oracles) and report batching."""

from ldptel.client.mechanisms import MECHANISMS, Mechanism, create_mechanism, recommend_oracle

__all__ = ["MECHANISMS", "Mechanism", "create_mechanism", "recommend_oracle"]
