"""ldptel: local-differential-privacy telemetry (SDK, collector, aggregator)."""

__version__ = "0.1.0"
