"""``ldptel simulate --config FILE --campaign NAME --values-file F --url URL --token T [--seed S]``.

One simulated device per line of F (the line is that device's true value: a label of a
categorical domain, an integer in [0, d) (also for range campaigns), a real number for numeric
campaigns (clipped to [lower, upper] by the SDK), or any string for RAPPOR and heavy hitters; a
device-level campaign's line is that device's window: ``at_least_once`` or ``none``, its most
common value, or its number of events — sent for the last window that ended).
Every device's value is
randomized by the SDK (``TelemetryClient.report_many``: vectorized, each value an independent
device with its own randomness — for RAPPOR its own cohort and permanent response), queued in a
temporary SQLite queue and sent through the real HTTP path (``flush``: batches, retries, dedupe).
``--seed`` seeds that randomness (simulations only; production clients always use the OS).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldptel.client.transport import TelemetryClient, TelemetryError


def read_values(path: str | Path, campaign) -> list[Any]:
    """The values file as a list of device values, checked against the campaign's domain."""
    lines = [ln.strip() for ln in Path(path).read_text().splitlines()]
    values: list[Any] = [ln for ln in lines if ln]
    if campaign.oracle == "rappor" or campaign.kind == "heavy_hitters":
        return values
    if campaign.estimate_kind == "numeric":  # per_device_count: each line one device's events
        return [real_value(path, i, v) for i, v in enumerate(values, 1)]
    labels = campaign.domain
    out = []
    for i, v in enumerate(values, 1):
        if labels is not None and v in labels:
            out.append(labels.index(v))
            continue
        try:
            n = int(v)
        except ValueError:
            raise ValueError(f"{path}: line {i}: {v!r} is not in the domain of {campaign.name!r}") from None
        if not 0 <= n < campaign.domain_size:
            raise ValueError(f"{path}: line {i}: {n} is not in [0, {campaign.domain_size})")
        out.append(n)
    return out


def real_value(path: str | Path, line: int, text: str) -> float:
    """A finite real number, else ``ValueError`` naming the file and line."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise ValueError(f"{path}: line {line}: {text!r} is not a finite number")
    return value


def run_simulate(args: argparse.Namespace) -> int:
    from ldptel.campaigns.config import load_config

    config = load_config(args.config)
    campaign = config.campaign(args.campaign)
    if campaign is None:
        print(f"ldptel simulate: --campaign: no campaign named {args.campaign!r} in {args.config}",
              file=sys.stderr)
        return 2
    try:
        values = read_values(args.values_file, campaign)
    except (OSError, ValueError) as exc:
        print(f"ldptel simulate: --values-file: {exc}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed) if args.seed is not None else None
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ldptel-simulate-") as tmp:
        # simulated values: the unrandomized index of a shuffled-fakes campaign reveals no real device
        client = TelemetryClient(args.url, args.token, queue_path=Path(tmp) / "queue.sqlite", rng=rng,
                                 accept_unrandomized=True, analyzer_signing_key=args.analyzer_signing_key)
        try:
            client.report_many(campaign.name, values)
            result = client.flush(timeout=120.0)
        except TelemetryError as exc:
            print(f"ldptel simulate: {exc}", file=sys.stderr)
            return 1
        except ValueError as exc:  # a value the campaign's mechanism refuses
            print(f"ldptel simulate: --values-file: {exc}", file=sys.stderr)
            return 2
        finally:
            client.close(flush_timeout=None)
    dt = time.perf_counter() - t0
    print(f"ldptel simulate: {len(values)} devices → {campaign.name}: {result.accepted} accepted, "
          f"{result.duplicates} duplicates, {result.dropped} dropped, {result.pending} not delivered "
          f"({dt:.1f} s)")
    if result.error:
        print(f"ldptel simulate: last error: {result.error}", file=sys.stderr)
    return 0 if result.ok and result.dropped == 0 else 1
