"""The ``ldptel`` command. Each subcommand lives in its own module, imported lazily
so that ``ldptel --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ldptel.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ldptel", description="Local-differential-privacy telemetry: collector, aggregator, demo.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the whole stack on simulated devices and print estimates")
    demo.add_argument("--users", type=int, default=100_000, help="simulated devices (default 100000)")
    demo.add_argument("--port", type=int, default=0, help="HTTP port (default: a free one)")
    demo.add_argument("--seed", type=int, default=2026, help="seed of the simulated population")
    demo.add_argument("--exit", action="store_true", help="print the table and exit")

    serve = sub.add_parser("serve", help="collector, operator pages and export API")
    serve.add_argument("--config", required=True, help="TOML config file")
    serve.add_argument("--redis-url", default=None,
                       help="Redis URL, or redis+cluster://host:port,… for a Redis Cluster "
                            "(default: $REDIS_URL, else embedded)")
    serve.add_argument("--aggregator", action=argparse.BooleanOptionalAction, default=None,
                       help="run (and restart) an aggregator beside the collector "
                            "(default: yes with the embedded Redis, no with --redis-url/$REDIS_URL)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")

    agg = sub.add_parser("aggregate", help="aggregator worker: drain report streams into estimates")
    agg.add_argument("--config", required=True, help="TOML config file")
    agg.add_argument("--redis-url", default=None,
                     help="Redis URL, or redis+cluster://host:port,… for a Redis Cluster "
                          "(default: $REDIS_URL)")
    agg.add_argument("--once", action="store_true", help="drain what is in the streams, save, exit")

    sim = sub.add_parser("simulate", help="one simulated device per line of a values file")
    sim.add_argument("--config", required=True, help="TOML config file")
    sim.add_argument("--campaign", required=True)
    sim.add_argument("--values-file", required=True, help="one true value per line")
    sim.add_argument("--url", required=True, help="collector base URL")
    sim.add_argument("--token", required=True, help="ingest token")
    sim.add_argument("--seed", type=int, default=None, help="seeded randomness (simulation only)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from ldptel.demo import run_demo

            return run_demo(args)
        if args.command == "serve":
            from ldptel.server.serve import run_serve

            return run_serve(args)
        if args.command == "aggregate":
            from ldptel.aggregator.runners import run_aggregate

            return run_aggregate(args)
        if args.command == "simulate":
            from ldptel.client.simulate import run_simulate

            return run_simulate(args)
    except ConfigError as exc:
        print(f"ldptel: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
