"""Posts per second of sealed envelopes through ``ldptel serve`` (2 workers, embedded Redis): a
simulated fleet of ``--devices`` devices of one shuffled-fakes campaign (d = 1,024, central (1,
10⁻⁸)) reported by the SDK's ``report_many`` and flushed (sealing included), with several
envelopes per POST (``SealedEnvelopes``, the SDK's default) and, with ``--one-per-post``, one POST
per envelope (the per-address rate limit off, to measure the collector alone).

    python bench/sealed_posts.py --devices 20000 [--one-per-post]

Measured (10,000 devices, a 2-core machine shared with other jobs, runs interleaved): 584 and 629
devices/s; one POST per envelope 400/s; before one device per envelope (one envelope of 1,000
reports per POST) 412 and 532/s (docs/sdk.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from served import EXPORT, INGEST, send, served

D = 1024


def config_text(devices: int, keys_dir: Path) -> str:
    return "\n".join([
        "[server]", f'ingest_tokens = ["{INGEST}"]', f'export_tokens = ["{EXPORT}"]',
        "rate_limit_per_address_per_minute = 0", "rate_limit_per_minute = 1000000000",
        "[shuffler]", "batch_reports = 2000", f"max_held_reports = {10 * devices}",
        f"max_ingress_batches = {max(10_000, 4 * devices)}",
        "[analyzer]", f'keys_dir = "{keys_dir}"',
        "[[campaigns]]", 'name = "fleet"', 'privacy_mode = "shuffled-fakes"', f"domain_size = {D}",
        "central_epsilon = 1.0", "central_delta = 1e-8", f"batch_min = {devices}", "min_reports = 1",
    ]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=20_000)
    ap.add_argument("--one-per-post", action="store_true")
    args = ap.parse_args()
    if args.one_per_post:
        from ldptel.client import sealed, sending
        one = sealed.bodies
        sending.bodies = lambda envs, max_bytes, _n: one(envs, max_bytes, 1)  # type: ignore[attr-defined]
    values = np.random.default_rng(1).integers(0, D, size=args.devices).tolist()
    with served(lambda keys: config_text(args.devices, keys)) as stack:
        seconds = send(stack.url, stack.tmp / "fleet.sqlite", "fleet", values)
        shuffle_s = stack.ldptel("shuffle")
        aggregate_s = stack.ldptel("aggregate")
    print(f"devices={args.devices} one_per_post={args.one_per_post} send={seconds:.1f}s "
          f"devices/s={args.devices / seconds:.0f} "
          f"shuffle={shuffle_s:.1f}s aggregate={aggregate_s:.1f}s")


if __name__ == "__main__":
    main()
