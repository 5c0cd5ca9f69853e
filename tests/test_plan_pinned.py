"""A version's plan is pinned (issue 34, item 11; docs/privacy.md, "A version's plan is pinned"): the
plan made when a shuffled version is created is stored in its registry entry and used from there
ever after, so a planner change (an upgrade) leaves every live version's ε₀ / fake rate as it
was, while a new version gets the new planner's plan."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldptel.campaigns import records as registry_records
from ldptel.errors import ConfigError
from ldptel.privacy import plan_cache, planner
from ldptel.privacy.modes import Shuffled, ShuffledFakes

SHUFFLED = {"name": "s", "kind": "frequency", "privacy_mode": "shuffled", "oracle": "grr", "domain_size": 16,
            "central_epsilon": 1.0, "batch_min": 1000, "window": "1h"}
FAKES = {"name": "f", "kind": "frequency", "privacy_mode": "shuffled-fakes", "domain_size": 16,
         "central_epsilon": 1.0, "batch_min": 1000, "window": "1h"}


@pytest.fixture(autouse=True)
def fresh_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "plans.json"
    monkeypatch.setenv("LDPTEL_PLAN_CACHE", str(path))
    monkeypatch.setattr(plan_cache, "_memory", {})
    planner._plan.cache_clear()
    yield path
    planner._plan.cache_clear()


def _new_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    """An upgrade whose planner picks ε₀ on a coarser grid (a changed constant), with its version
    bumped as the plan cache asks."""
    monkeypatch.setattr(plan_cache, "VERSION", plan_cache.VERSION + 1)
    monkeypatch.setattr(planner, "EPS0_STEP", 0.05)
    monkeypatch.setattr(plan_cache, "_memory", {})
    planner._plan.cache_clear()


def test_a_live_version_keeps_its_plan_and_a_new_version_gets_the_new_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    record, change, _ = registry_records.put_table(None, SHUFFLED, 0.0)
    assert change.action == "created"
    pin = record["versions"][0]["plan"]
    assert pin["planner_version"] == plan_cache.VERSION and pin["for"]["mode"] == "shuffled"
    (v1,) = registry_records.versions_of(record)
    assert isinstance(v1.mode, Shuffled) and v1.epsilon == pin["local_epsilon"] == v1.mode.plan.local_epsilon
    stored = json.loads(json.dumps(record, sort_keys=True))  # as the registry holds it

    _new_planner(monkeypatch)
    new_eps0 = planner.compute_plan("shuffled", "grr", 16, 1.0, 1e-6, 1000).local_epsilon
    assert new_eps0 != v1.epsilon  # the new planner would randomize version 1 differently
    (again,) = registry_records.versions_of(stored)
    assert again.epsilon == v1.epsilon and again.public() == v1.public()
    # the same table again: unchanged (the pinned plan is used, no new version)
    _, same, _ = registry_records.put_table(stored, SHUFFLED, 1.0)
    assert same.action == "unchanged"
    # a changed table: version 2, planned by the new planner; version 1 as it was
    after, change, _ = registry_records.put_table(stored, {**SHUFFLED, "central_epsilon": 0.9}, 2.0)
    assert (change.action, change.version) == ("new_version", 2)
    older, newer = registry_records.versions_of(json.loads(json.dumps(after)))
    assert older.epsilon == v1.epsilon and older.mode == v1.mode
    assert newer.epsilon == planner.compute_plan("shuffled", "grr", 16, 0.9, 1e-6, 1000).local_epsilon
    assert after["versions"][1]["plan"]["planner_version"] == plan_cache.VERSION == pin["planner_version"] + 1


def test_an_in_place_change_keeps_the_pinned_fake_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    record, _, _ = registry_records.put_table(None, FAKES, 0.0)
    (v1,) = registry_records.versions_of(record)
    assert isinstance(v1.mode, ShuffledFakes)
    doctored = json.loads(json.dumps(record))
    doctored["versions"][0]["plan"]["fake_rate"] = 0.5  # what an older planner could have chosen
    after, change, _ = registry_records.put_table(doctored, {**FAKES, "description": "edited"}, 1.0)
    assert change.action == "updated" and after["versions"][0]["plan"]["fake_rate"] == 0.5
    (kept,) = registry_records.versions_of(after)
    assert isinstance(kept.mode, ShuffledFakes) and kept.mode.fake_rate == 0.5
    assert kept.public()["fake_rate"] == 0.5 and v1.mode.fake_rate != 0.5


def test_reading_a_stored_version_plans_nothing(tmp_path: Path, fresh_caches: Path) -> None:
    record, _, _ = registry_records.put_table(None, FAKES, 0.0)
    fresh_caches.unlink()  # no cached plan either: a re-plan would have to compute (scipy)
    code = ("import json, sys; from ldptel.campaigns.records import versions_of; "
            f"(v,) = versions_of(json.loads({json.dumps(json.dumps(record))})); "
            "assert 'ldptel.privacy.planner' not in sys.modules and 'scipy' not in sys.modules, "
            "sorted(m for m in sys.modules if 'scipy' in m or 'planner' in m)[:5]; print(v.mode.fake_rate)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"LDPTEL_PLAN_CACHE": str(tmp_path / "empty.json"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == record["versions"][0]["plan"]["fake_rate"]


def test_a_plan_for_other_inputs_is_refused_naming_plan() -> None:
    record, _, _ = registry_records.put_table(None, FAKES, 0.0)
    record["versions"][0]["plan"]["for"]["central_epsilon"] = 2.0
    with pytest.raises(ConfigError) as info:
        registry_records.versions_of(record)
    assert info.value.key == "campaigns[f].plan" and "(version 1)" in str(info.value)


def test_a_version_written_before_pinning_is_pinned_at_the_next_write() -> None:
    record, _, _ = registry_records.put_table(None, FAKES, 0.0)
    pin = record["versions"][0].pop("plan")  # as an older ldptel wrote it
    (v1,) = registry_records.versions_of(record)  # planned when read
    assert v1.mode.plan.to_json() == pin
    assert registry_records.pin_missing(record) == [1] and record["versions"][0]["plan"] == pin
    local = {"name": "l", "kind": "frequency", "epsilon": 1.0, "domain_size": 4}
    rec, _, _ = registry_records.put_table(None, local, 0.0)
    assert "plan" not in rec["versions"][0] and registry_records.pin_missing(rec) == []


def test_the_blanket_with_fakes_planner_keeps_older_versions_plans() -> None:
    """Issue 38 Build 2: planner version 2 plans GRR-with-fakes by the blanket (μ = 7.05 at d = 1,024,
    n = 10⁵, ε_l = 8, central (1, 10⁻⁸)), version 1 by advanced joint convexity (μ = 46.42): a
    version pinned by planner 1 keeps its λ = 0.4753; a new version of the same campaign gets the
    tighter λ = 0.0722 and records planner version 2."""
    table = {**FAKES, "oracle": "grr", "local_epsilon": 8.0, "domain_size": 1024, "batch_min": 100_000,
             "central_delta": 1e-8}
    assert plan_cache.VERSION == 2
    record, _, _ = registry_records.put_table(None, table, 0.0)
    fresh = record["versions"][0]["plan"]
    assert fresh["planner_version"] == 2 and fresh["fake_rate"] <= 0.0737
    old = json.loads(json.dumps(record))  # as planner 1 pinned it (its figures, issue 38)
    old["versions"][0]["plan"].update(planner_version=1, fake_rate=0.475336, fakes_per_bucket=46.419,
                                      bound=planner.BOUND_FAKES_LOCAL)
    (v1,) = registry_records.versions_of(old)
    assert isinstance(v1.mode, ShuffledFakes) and v1.mode.fake_rate == 0.475336
    _, same, _ = registry_records.put_table(old, table, 1.0)
    assert same.action == "unchanged"
    after, change, _ = registry_records.put_table(old, {**table, "central_epsilon": 0.99}, 2.0)
    assert (change.action, change.version) == ("new_version", 2)
    older, newer = registry_records.versions_of(json.loads(json.dumps(after)))
    assert isinstance(older.mode, ShuffledFakes) and isinstance(newer.mode, ShuffledFakes)
    assert older.mode.fake_rate == 0.475336 and after["versions"][0]["plan"]["planner_version"] == 1
    assert newer.mode.fake_rate < 0.08 and after["versions"][1]["plan"]["planner_version"] == 2
