"""A config refresh still under way when the SDK client closes (``client.configs.CampaignConfigs``)
neither reads the closed store nor logs: the full suite printed "Logging error" tracebacks of such
refreshes ("using cached campaign configs", "cannot read the stored campaign configs: Cannot
operate on a closed database") after their tests had ended."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from ldptel.client.configs import CampaignConfigs


def _configs(loads: list[int]) -> CampaignConfigs:
    def get() -> tuple[bytes, str | None]:
        raise ConnectionResetError(104, "Connection reset by peer")

    def load() -> bytes | None:
        loads.append(1)
        raise sqlite3.ProgrammingError("Cannot operate on a closed database.")

    return CampaignConfigs(get, load, lambda raw: None, ttl=300.0)


@pytest.mark.parametrize("known", [True, False], ids=["configs-in-memory", "none-known"])
def test_a_refresh_under_way_at_close_reads_and_logs_nothing(known, caplog):
    loads: list[int] = []
    configs = _configs(loads)
    if known:
        configs.configs = {"c": {"name": "c", "version": 1}}
    configs.close()
    with caplog.at_level(logging.DEBUG, logger="ldptel.client"):
        configs._refresh()  # what the background thread runs
    assert [r.getMessage() for r in caplog.records] == [] and loads == []
    assert configs.last_error is not None  # the failure is still recorded


def test_an_open_client_still_falls_back_and_says_so(caplog):
    loads: list[int] = []
    configs = _configs(loads)
    configs.configs = {"c": {"name": "c", "version": 1}}
    with caplog.at_level(logging.INFO, logger="ldptel.client"):
        assert configs.fetch() == {"c": {"name": "c", "version": 1}}
    assert any("using cached campaign configs" in r.getMessage() for r in caplog.records)
