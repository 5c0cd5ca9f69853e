"""The shipped example config loads, builds a mechanism for every campaign, and the CLI reports
config errors with the key and a non-zero exit."""

from __future__ import annotations

import math
from pathlib import Path

from ldptel.campaigns.config import load_config
from ldptel.commands.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ldptel.toml"


def test_example_config_builds_every_campaign() -> None:
    config = load_config(EXAMPLE)
    assert {c.kind for c in config.campaigns} == {"frequency", "heavy_hitters", "range", "numeric",
                                                  "unique_devices"}
    assert any(c.dimensions is not None and c.dimensions.experiment for c in config.campaigns)
    for campaign in config.campaigns:
        mech = campaign.mechanism()
        # shuffled-fakes without local randomization: the histogram has no local ε
        assert mech.epsilon == (campaign.epsilon if campaign.epsilon is not None else math.inf)
    assert {c.privacy_mode for c in config.campaigns} == {"local", "shuffled-fakes"}


def test_cli_names_the_bad_key(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.read_text().replace("epsilon = 2.0", "epsilon = 0"))
    assert main(["aggregate", "--config", str(bad), "--once"]) == 2
    assert "campaigns[font-size].epsilon" in capsys.readouterr().err
