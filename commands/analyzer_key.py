"""``ldptel analyzer-key show``: the public half of the aggregator's Ed25519 signing key, the value
an app embeds and passes to the SDK (``analyzer_signing_key``), and the file that holds the
private half (made now if the keys directory has none; ``ldptel.aggregator.keyring``)."""

from __future__ import annotations

import argparse

from ldptel.aggregator.keyring import signing_path, signing_public_text
from ldptel.campaigns.config import load_config


def run_analyzer_key(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    value = signing_public_text(config.analyzer)
    if args.quiet:
        print(value)
        return 0
    print(f"analyzer signing key (Ed25519, public half; embed it in the app): {value}")
    print(f"  TelemetryClient(..., analyzer_signing_key=\"{value}\")")
    print(f"  TelemetryClient.open({{..., analyzerSigningKey: \"{value}\"}})")
    print(f"private half: {signing_path(config.analyzer)} (keep it: every pinned app trusts it; "
          "back it up with the keys directory, never rotated)")
    return 0


__all__ = ["run_analyzer_key"]
