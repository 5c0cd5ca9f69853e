"""``ldptel audit poisoning`` (issue 37, build item 6): the closed-form gains of the poisoning
attacks of Cao, Jia and Gong (2021) against a simulation through the real randomizers, collector
checks and decoders; the paper's formulas written out independently here; the shuffled-fakes floor;
and a negative control (an attack that does nothing fails the same checks)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldptel.commands import poisoning_sim
from ldptel.commands.cli import main
from ldptel.commands.poisoning_sim import Row, Setting, audit_poisoning
from ldptel.mechanisms import GRR, OLH, OUE, Hadamard
from ldptel.mechanisms.checks import rejected
from ldptel.mechanisms.errors import InvalidReport
from ldptel.privacy.poisoning_attacks import closed_gain, fake_columns, floor_gain

SEED = 37
ISSUE = Setting(beta=0.05, targets=10, domain_size=1024, epsilon=1.0, target_frequency=0.05,
                users=50_000, batch_min=10_000, central_delta=1e-6)
Z = 4.5  # sd multiples allowed between simulation and closed form (~60 rows: P(any) < 1e-3)


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return audit_poisoning(ISSUE, seed=SEED)


def pick(rows: list[Row], oracle: str, mode: str, attack: str, source: str | None = None) -> Row:
    key = (oracle, mode, attack, source)
    return next(r for r in rows if (r.oracle, r.mode, r.attack, r.fake_source) == key)


def mga_within(row: Row, rel: float = 0.10) -> bool:
    """The must-be-true check: the simulated gain within ``rel`` of the paper's closed form."""
    return abs(row.simulated - row.closed) <= rel * abs(row.closed)


def test_closed_forms_are_the_papers() -> None:
    """The module's G against the formulas of Cao, Jia, Gong written out here (ε = 1, β = 5 %)."""
    b, r, d, f, e = 0.05, 10, 1024, 0.05, math.e
    assert closed_gain(GRR(1.0, d), "mga", b, r, f) == pytest.approx(b * (1 - f) + b * (d - r) / (e - 1))
    oue = closed_gain(OUE(1.0, d), "mga", b, r, f, checked=False)
    assert oue == pytest.approx(b * (2 * r * e / (e - 1) - f))
    assert oue == pytest.approx(1.58, abs=0.005)  # issue 37
    olh = OLH(1.0, d)
    p, q = e / (e + olh.g - 1), 1 / olh.g
    assert closed_gain(olh, "mga", b, r, f) == pytest.approx(b * (r * (1 - q) / (p - q) - f))
    assert closed_gain(Hadamard(1.0, d), "mga", b, r, f) == pytest.approx(b * (r * (e + 1) / (e - 1) - f))
    for mech in (GRR(1.0, d), OUE(1.0, d), olh, Hadamard(1.0, d)):  # RIA: lying about one's value
        assert closed_gain(mech, "ria", b, r, f) == pytest.approx(floor_gain(b, f))
    assert floor_gain(b, f) == pytest.approx(0.0475)
    assert closed_gain(OUE(1.0, d), "rpa", b, r, f, checked=False) == pytest.approx(b * (r - f))  # s = r/2


def test_simulation_matches_the_closed_form_within_its_variance(rows: list[Row]) -> None:
    assert len(rows) == 47
    far = [(r.oracle, r.mode, r.fake_source, r.attack, r.closed_checked, r.simulated, r.sd) for r in rows
           if abs(r.simulated - r.closed_checked) > Z * r.sd + 1e-9 * max(1.0, abs(r.closed_checked))]
    assert not far


def test_mga_gains_within_10_percent_of_the_closed_form(rows: list[Row]) -> None:
    """Issue 37's must-be-true: OUE (padded to the honest weight: the unpadded report is refused),
    OLH and GRR at ε = 1, β = 5 %."""
    oue, olh, grr = (pick(rows, "oue", "local", "mga-a"), pick(rows, "olh", "local", "mga"),
                     pick(rows, "grr", "local", "mga"))
    assert all(mga_within(r) for r in (oue, olh, grr)), (oue, olh, grr)
    assert oue.simulated == pytest.approx(1.58, rel=0.01) and oue.times_floor > 30
    assert olh.note.startswith("best seed hashes 10 of 10")


def test_the_bit_count_check_refuses_unpadded_reports_and_keeps_padded_ones(rows: list[Row]) -> None:
    for oracle in ("oue", "sue"):
        assert pick(rows, oracle, "local", "mga").accepted == 0.0  # r = 10 of 1,024 bits set
        assert pick(rows, oracle, "local", "mga").simulated == 0.0
        padded = pick(rows, oracle, "local", "mga-a")
        assert padded.accepted == 1.0 and padded.simulated > 25 * padded.floor  # ~0 % of the gain removed


def test_report_checks_refuse_what_validate_columns_refuses() -> None:
    """The audit's per-report mask (``report_checks``) against the collector's ``validate_columns``
    on each report alone, for reports of every attack on OUE (weights 10, ~256, ~512)."""
    mech, rng = OUE(1.0, 1024), np.random.default_rng(SEED)
    targets = np.arange(0, 1000, 100)
    rows = np.concatenate([fake_columns(mech, attack, targets, 20, rng)[0]["bits"]
                           for attack in ("mga", "mga-a", "ria", "rpa")])
    mask = rejected(mech.report_checks({"bits": rows}), len(rows))
    for i, row in enumerate(rows):
        try:
            mech.validate_columns({"bits": row[None, :]}, 1)
            refused = False
        except InvalidReport:
            refused = True
        assert refused == mask[i], i
    assert mask[:20].all() and not mask[20:60].any() and mask[60:].all()


def test_shuffled_fakes_gain_is_the_floor_when_a_device_sends_one_message(rows: list[Row]) -> None:
    for attack in ("mga", "ria"):
        row = pick(rows, "histogram", "shuffled-fakes", attack, "shuffler")
        assert 0.9 * row.floor <= row.simulated <= 1.1 * row.floor, row
    # with the fakes drawn on the devices, a fake device fills its envelope with targets
    padded = pick(rows, "histogram", "shuffled-fakes", "mga-a", "devices")
    assert padded.simulated > 10 * padded.floor and "messages in a fake device's envelope" in padded.note


def test_shuffled_fakes_with_grr_on_the_index_is_grr_again() -> None:
    """``local_epsilon`` (GRR on the index): a fake message counts (e^ε + d − 1)/(e^ε − 1) times,
    as in local GRR; simulation and closed form agree within their variance."""
    setting = Setting(**{**ISSUE.__dict__, "fakes_local_epsilon": 2.0})
    rows = audit_poisoning(setting, modes=("shuffled-fakes",), seed=SEED)
    assert {r.oracle for r in rows} == {"grr"} and len(rows) == 7
    assert all(abs(r.simulated - r.closed_checked) <= Z * r.sd + 1e-9 for r in rows)
    mga = pick(rows, "grr", "shuffled-fakes", "mga", "shuffler")
    e, d, b = math.exp(2.0), 1024, mga.floor / (1 - 0.05)
    assert mga.closed == pytest.approx(b * (1 - 0.05) + b * (d - 10) / (e - 1))


def test_shuffled_mode_plans_a_larger_epsilon0_and_a_smaller_gain(rows: list[Row]) -> None:
    local, shuffled = pick(rows, "oue", "local", "mga-a"), pick(rows, "oue", "shuffled", "mga-a")
    assert shuffled.epsilon is not None and shuffled.epsilon > 1.0
    assert shuffled.floor < shuffled.simulated < local.simulated


def test_negative_control_an_attack_that_does_nothing_fails_the_checks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake devices that report honestly encoded non-target values: the simulated gain is ≈ −β·f_T,
    so neither the 10 % check nor the variance check passes against MGA's closed form."""
    def nothing(mech, attack, targets, m, rng, *_):
        others = np.setdiff1d(np.arange(mech.domain_size), targets)
        return mech.randomize(others[rng.integers(0, others.size, m)], rng), m

    monkeypatch.setattr(poisoning_sim, "fake_columns", nothing)
    broken = audit_poisoning(ISSUE, oracles=("grr", "oue", "olh"), modes=("local",), attacks=("mga", "mga-a"),
                             seed=SEED)
    for oracle, attack in (("oue", "mga-a"), ("olh", "mga"), ("grr", "mga")):
        row = pick(broken, oracle, "local", attack)
        assert not mga_within(row)
        assert abs(row.simulated - row.closed_checked) > Z * row.sd
        assert row.simulated < 0.01


def test_cli_prints_json_and_names_a_bad_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """The command itself (JSON): the must-be-true figures, and a bad flag named (exit 2)."""
    assert main(["audit", "poisoning", "--format", "json", "--seed", "1", "--modes", "local,shuffled-fakes",
                 "--oracles", "grr,oue,olh", "--users", "20000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["floor"] == pytest.approx(0.0475, rel=1e-3)
    assert doc["setting"]["fakes"] == 1053
    rows = {(r["oracle"], r["attack"], r["fake_source"]): r for r in doc["rows"]}
    oue = rows["oue", "mga-a", None]
    assert oue["closed"] == pytest.approx(1.5795, rel=1e-3) and oue["times_floor"] > 30
    for key in (("oue", "mga-a", None), ("olh", "mga", None), ("grr", "mga", None)):
        assert abs(rows[key]["simulated"] - rows[key]["closed"]) <= 0.1 * rows[key]["closed"], key
    fakes = rows["histogram", "mga", "shuffler"]
    assert fakes["times_floor"] <= 1.1 and fakes["simulated"] >= 0.9 * doc["floor"]
    assert main(["audit", "poisoning", "--beta", "1.5"]) == 2
    assert "--beta must be in (0, 1)" in capsys.readouterr().err
    assert main(["audit", "poisoning", "--oracles", "rappor"]) == 2
    assert "--oracles: 'rappor' is not one of" in capsys.readouterr().err
