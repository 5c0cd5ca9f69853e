"""The demo shows the product (issue 25: every demo campaign had window "all", so no trend, and
no admin token, so no live change): its campaigns have 10 s windows, ``examples/demo.toml``
(what ``make demo`` runs) declares exactly the campaigns the demo's devices report to, with
ingest, export and admin tokens, and ``make demo`` uses it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ldptel.campaigns.config import load_config
from ldptel.commands.demo import ISSUER, WINDOW, demo_tables, sections

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo.toml"


def test_demo_campaigns_have_short_windows() -> None:
    tables = demo_tables(sections())
    # the shuffled-fakes campaign keeps window "all": it is released in whole batches of batch_min
    assert WINDOW == "10s" and {t["window"] for t in tables if "privacy_mode" not in t} == {"10s"}
    assert {t["window"] for t in tables if "privacy_mode" in t} == {"all"}
    kinds = {t.get("kind", "frequency") for t in tables}
    assert kinds == {"frequency", "heavy_hitters", "range", "numeric"}


def test_examples_demo_toml_is_the_demo() -> None:
    config = load_config(DEMO)
    assert config.server.admin_tokens == ["demo-admin-token"]
    assert config.server.ingest_tokens == ["demo-ingest-token"]
    assert config.server.export_tokens == ["demo-export-token"]
    assert tomllib.loads(DEMO.read_text())["campaigns"] == demo_tables(sections())
    assert "ldptel demo --config examples/demo.toml" in (ROOT / "Makefile").read_text()
    # tokens on (issue 37): the issuer of the demo's own config, and only the shuffled campaign takes them
    assert tomllib.loads(DEMO.read_text())["issuer"] == ISSUER
    assert [c.name for c in config.campaigns if c.require_tokens] == ["demo-sealed"]
