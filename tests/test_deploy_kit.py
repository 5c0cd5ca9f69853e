"""The operations kit in ``deploy/``: the Prometheus alert rules (``deploy/prometheus/``) and the
Grafana dashboard (``deploy/grafana/``). ``promtool`` is not installed, so this is its
equivalent: the rules file has the structure Prometheus loads (groups, rules with ``alert``,
``expr``, ``for``, a severity and a summary), every expression is well formed as far as a small
PromQL scanner can tell (balanced brackets, only known functions and operators), and every metric
they name is one a real ``ldptel serve`` exports on ``/metrics`` (scraped after reports went
through its collector, shuffler and aggregator)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from agg_support import EXPORT_TOKEN, INGEST_TOKEN, random_batches, write_config
from http_support import http_request, request, start_collector

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "ldptel-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "ldptel-dashboard.json"
REQUIRED_ALERTS = {"LdptelIngestErrors", "LdptelAggregatorLagging", "LdptelShufflerStalled",
                   "LdptelCampaignBelowThreshold", "LdptelIngestBudgetRefusals"}
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "by", "without", "and",
                "or", "unless", "on", "ignoring", "histogram_quantile", "min_over_time", "max_over_time",
                "avg_over_time", "le", "bool", "offset", "absent", "clamp_min", "topk"}
DURATION = re.compile(r"^\d+[smhd]$")
METRIC = re.compile(r"\bldptel_[a-z0-9_]+")


def rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in doc["panels"] for t in panel["targets"]]


def check_promql(expr: str) -> None:
    """Balanced brackets; outside label matchers and ``by (…)`` lists, every word is a metric,
    a number, a duration or a known PromQL function, aggregation or keyword."""
    depth = {"(": 0, "{": 0, "[": 0}
    pairs = {")": "(", "}": "{", "]": "["}
    for ch in expr:
        if ch in depth:
            depth[ch] += 1
        elif ch in pairs:
            depth[pairs[ch]] -= 1
            assert depth[pairs[ch]] >= 0, f"unbalanced {ch!r} in {expr!r}"
    assert not any(depth.values()), f"unbalanced brackets in {expr!r}"
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(by|without|on|ignoring)\s*\([^)]*\)", " ", expr)
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare):
        assert word.startswith("ldptel_") or word in PROMQL_WORDS, f"unknown word {word!r} in {expr!r}"


def test_rules_have_the_structure_prometheus_loads() -> None:
    doc = yaml.safe_load(RULES.read_text())
    assert [g["name"] for g in doc["groups"]] == ["ldptel"]
    names = set()
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["alert"].startswith("Ldptel") and rule["alert"] not in names
        names.add(rule["alert"])
        assert DURATION.match(rule["for"]), rule["for"]
        assert rule["labels"]["severity"] in ("page", "ticket")
        assert rule["annotations"]["summary"]
        check_promql(rule["expr"])
    assert REQUIRED_ALERTS <= names


def test_dashboard_is_grafana_json() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["panels"] and doc["templating"]["list"][0]["type"] == "datasource"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for expr in dashboard_exprs():
        check_promql(expr)


@pytest.mark.slow
def test_every_metric_named_is_exported(tmp_path: Path) -> None:
    """Scrape a real ``ldptel serve`` (embedded Redis, shuffler, aggregator) after reports went
    through it: every metric the rules and the dashboard name is on its ``/metrics``."""
    cfg = write_config(tmp_path / "kit.toml", [
        {"name": "kit", "oracle": "grr", "epsilon": 1.0, "domain_size": 4, "min_reports": 100,
         "window": "1h", "shuffle_max_delay": "1s"}], aggregator={"block_ms": 100})
    col = start_collector(tmp_path / "serve", (tmp_path / "kit.toml").read_text(), None,
                          env={"LDPTEL_DATA_DIR": str(tmp_path / "data")})
    try:
        for batch in random_batches(cfg.campaigns[0], 300, 100, seed=np.uint32(5)):
            status, _ = request(col.url, "POST", "/v1/reports", batch.SerializeToString(), {
                "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {INGEST_TOKEN}"})
            assert status == 202
        http_request(col.url, "GET", "/v1/campaigns/kit/estimates",
                     headers={"Authorization": f"Bearer {EXPORT_TOKEN}"})  # a request latency
        deadline, text = time.monotonic() + 30, ""
        while time.monotonic() < deadline:
            text = http_request(col.url, "GET", "/metrics",
                                headers={"Authorization": f"Bearer {EXPORT_TOKEN}"}).body.decode()
            if all(f"{m}{{" in text for m in ("ldptel_shuffler_ingress_batches_total",
                                              "ldptel_aggregator_reports_total")):
                break
            time.sleep(0.5)
    finally:
        col.stop()
    # samples, and families declared without a sample yet (a counter of rejections before any)
    exported = set(re.findall(r"^(?:# TYPE )?(ldptel_[a-z0-9_]+)", text, re.M))
    named = {m for r in rules() for m in METRIC.findall(r["expr"])}
    named |= {m for e in dashboard_exprs() for m in METRIC.findall(e)}
    assert named and named <= exported, sorted(named - exported)
