"""After a load-test run (``loadtest/run.sh``): wait for the aggregator to drain, check that every
accepted report was counted exactly once and every invalid batch rejected, and print the summary.

Sources compared, per campaign:

- the clients' ledgers (``ledger-<pid>.json``, written by the locustfile): reports of every
  batch_id answered 202, plus the batches that got no definitive answer and whose dedupe marker
  (``keys.seen_key``) shows they were stored;
- the collector's counters (``GET /metrics``: accepted, duplicate and rejected batches);
- what the aggregator counted: ``n_reports`` of the export API (``/estimates``, ``/heavy-hitters``,
  ``/range``) and of the store (sum over shards and windows), and the entries it could not decode;
- with the shuffler (``[shuffler] enabled``, the default): its counters (``keys.shuffle_metrics_key``:
  reports taken from ingress and written to the analysis streams), which must both equal what the
  collector accepted, and the ingress streams, which must be empty once drained.

A campaign in a shuffled privacy mode (``lt-sealed``) is released only in whole batches of
``batch_min`` devices: fewer than that may wait in its ingress streams when the load stops, by
design (counted as ``waiting``, never lost); its check is clients = collector = store + waiting =
export + waiting with 0 ≤ waiting < batch_min (nothing due left unreleased). The summary gives its
releases, the shuffler's CPU-seconds per release and whether ``/healthz`` says the shuffler is
caught up (issue 36: it keeps up with its fakes).

Fails (exit 1) on a lost or double-counted report, an invalid batch not rejected with its expected
status, a re-sent batch stored twice, or a 5xx (503 too unless ``--allow-503``). Writes
``summary.json`` and ``summary.txt`` into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlparse

from cpu import snapshot

from ldptel import keys
from ldptel.campaigns.config import load_config
from ldptel.privacy.modes import is_shuffled
from ldptel.server.metrics import SHUFFLED_LABEL
from ldptel.store import published, tally
from ldptel.store.redis_client import connect, is_cluster

METRIC_RE = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')


def http_get(base: str, path: str, token: str | None = None, timeout: float = 60) -> tuple[int, str]:
    u = urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list] = defaultdict(list)
    for line in text.splitlines():
        m = METRIC_RE.match(line)
        if m:
            labels = dict(kv.split("=", 1) for kv in m.group(2).split(",")) if m.group(2) else {}
            out[m.group(1)].append(({k: v.strip('"') for k, v in labels.items()}, float(m.group(3))))
    return out


def metric_by(metrics: dict, name: str, label: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for labels, v in metrics.get(name, []):
        out[labels.get(label, "")] += int(v)
    return out


def load_ledgers(out: Path) -> dict:
    total: dict = {"accepted_reports": defaultdict(int), "accepted_batches": defaultdict(int),
                   "duplicate_answers": 0, "invalid": defaultdict(lambda: defaultdict(int)),
                   "status": defaultdict(lambda: defaultdict(int)), "ambiguous": [], "unexpected": [],
                   "unanswered": defaultdict(int), "retries": 0, "cpu_seconds": 0.0, "t_first": None,
                   "t_last": None, "processes": 0}
    for path in sorted(out.glob("ledger-*.json")):
        doc = json.loads(path.read_text())
        total["processes"] += 1
        for key in ("accepted_reports", "accepted_batches"):
            for k, v in doc[key].items():
                total[key][k] += v
        total["duplicate_answers"] += doc["duplicate_answers"]
        for key in ("invalid", "status"):
            for k, per in doc[key].items():
                for s, v in per.items():
                    total[key][k][s] += v
        total["ambiguous"] += doc["ambiguous"]
        total["retries"] = doc["retries"]
        total["cpu_seconds"] += doc["cpu_seconds"]
        for k, v in doc["unanswered"].items():
            total["unanswered"][k] += v
        total["unexpected"] += doc["unexpected"]
        for key, pick in (("t_first", min), ("t_last", max)):
            if doc[key] is not None:
                total[key] = doc[key] if total[key] is None else pick(total[key], doc[key])
    return total


def counted(r, config) -> dict[str, int]:
    return {c.name: sum(tally.window_counts(r, c).values()) for c in config.campaigns}


def collector_accepted(r, config) -> dict[str, int]:
    return {c.name: sum(int(r.hget(keys.metrics_key(c.name, s), keys.ACCEPTED_REPORTS) or 0)
                        for s in range(c.shards)) for c in config.campaigns}


def waiting(r, config) -> dict[str, int]:
    """Reports of each shuffled campaign still in its ingress streams (below ``batch_min``: they
    wait for more devices by design); 0 for the others."""
    return {c.name: sum(stream_reports(r, keys.ingress_key(c.name, s)) for s in range(c.shards))
            if is_shuffled(c) else 0 for c in config.campaigns}


def wait_drained(r, config, timeout: float) -> tuple[bool, float]:
    """Until the store has counted what the collector accepted, less what waits below
    ``batch_min`` in a shuffled campaign's ingress (stable over two looks), and the aggregator has
    published every window's estimates of what it counted."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        held = waiting(r, config)
        accepted = collector_accepted(r, config)
        now = (counted(r, config), {k: v - held[k] for k, v in accepted.items()})
        all_published = not any(published.stale_windows(r, c) for c in config.campaigns)
        if now[0] == now[1] and now == last and all_published:
            return True, time.monotonic() - t0
        last = now
        time.sleep(0.5)
    return False, time.monotonic() - t0


def exported_n(base: str, token: str, camp) -> int | None:
    path = {"frequency": "/estimates", "heavy_hitters": "/heavy-hitters?k=1",
            "range": f"/range?lo=0&hi={(camp.domain_size or 1) - 1}"}[camp.kind]
    status, body = http_get(base, f"/v1/campaigns/{camp.name}{path}", token)
    doc = json.loads(body)
    if status == 200:
        return int(doc["n_reports"])
    if status == 409:
        return int(doc["detail"]["n_reports"])
    return None


def redis_memory(r) -> int:
    """Memory used since start (``used_memory`` − ``used_memory_startup``), summed over a cluster."""
    if is_cluster(r):
        return sum(int(i["used_memory"]) - int(i["used_memory_startup"])
                   for i in r.info("memory", target_nodes=r.PRIMARIES).values())
    info = r.info("memory")
    return int(info["used_memory"]) - int(info["used_memory_startup"])


def cpu_used(out: Path) -> dict[str, float]:
    """CPU seconds per component since ``cpu-start.json`` (empty without it)."""
    start_file, pids = out / "cpu-start.json", out / "pids"
    if not start_file.exists() or not pids.exists():
        return {}
    start, end = json.loads(start_file.read_text()), snapshot(pids)
    (out / "cpu-end.json").write_text(json.dumps(end))
    roles = ("collector", "redis", "shuffler", "aggregator")
    return {k: end[k] - start.get(k, 0.0) for k in roles if k in end}


def shuffler_counts(r, config) -> dict[str, int]:
    """The shufflers' counters summed over campaigns and shards, and the ingress entries waiting."""
    out = {"ingress_entries": sum(r.xlen(keys.ingress_key(c.name, s)) for c in config.campaigns
                                  for s in range(c.shards))}
    for field in (keys.INGRESS_BATCHES, keys.INGRESS_REPORTS, keys.ANALYSIS_BATCHES, keys.ANALYSIS_REPORTS,
                  keys.SHUFFLE_REFUSED):
        out[field] = sum(int(r.hget(keys.shuffle_metrics_key(c.name, s), field) or 0)
                         for c in config.campaigns for s in range(c.shards))
    return out


def stream_reports(r, key: str) -> int:
    """Reports in a stream (its entries' ``count`` fields)."""
    total, start = 0, "-"
    while True:
        page = r.xrange(key, min=start, count=5000)
        total += sum(int(f[b"count"]) for _, f in page)
        if len(page) < 5000:
            return total
        start = "(" + page[-1][0].decode()


def lags(out: Path, t_end: float | None) -> dict[str, dict[str, float]]:
    """The shuffler's and aggregator's ``/healthz`` lag (``lag.py``) during the run (up to the last
    request, ``t_end``) and after it: max and median seconds."""
    path = out / "lag.jsonl"
    if not path.exists():
        return {}
    looks = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    res: dict[str, dict[str, float]] = {}
    for who in ("shuffler", "aggregator"):
        run = [x[f"{who}_lag"] for x in looks if x.get(f"{who}_lag") is not None and x["t"] <= (t_end or 0)]
        drain = [x[f"{who}_lag"] for x in looks if x.get(f"{who}_lag") is not None and x["t"] > (t_end or 0)]
        if run:
            res[who] = {"run_max": max(run), "run_median": sorted(run)[len(run) // 2],
                        "drain_max": max(drain, default=0.0)}
    return res


def kills(out: Path) -> list[dict]:
    path = out / "shuffler-kills.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def locust_stats(out: Path) -> dict[str, dict[str, str]]:
    path = out / "locust_stats.csv"
    if not path.exists():
        return {}
    with path.open() as fh:
        return {row["Name"]: row for row in csv.DictReader(fh)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--redis-url", required=True)
    ap.add_argument("--collector", required=True, help="collector base URL")
    ap.add_argument("--drain-timeout", type=float, default=180.0)
    ap.add_argument("--allow-503", action="store_true", help="503s were intended (Redis stopped on purpose)")
    ap.add_argument("--label", default="", help="run description for the summary")
    ap.add_argument("--ingest-only", action="store_true",
                    help="no aggregator ran: compare clients, collector and stream lengths only")
    args = ap.parse_args()
    out = Path(args.out)
    config = load_config(args.config)
    token = config.server.export_tokens[0]
    problems: list[str] = []

    ledger = load_ledgers(out)
    if ledger["processes"] == 0:
        print("check: no client ledger found", file=sys.stderr)
        return 1
    r = connect(args.redis_url, socket_timeout=60)
    time.sleep(1.5)  # collector workers flush their rejection counters every second
    drained, drain_s = (True, 0.0) if args.ingest_only else wait_drained(r, config, args.drain_timeout)
    if not drained:
        problems.append(f"aggregator did not drain in {args.drain_timeout:.0f} s")

    # batches without a definitive answer: stored iff their dedupe marker exists
    ambiguous_stored: dict[str, int] = defaultdict(int)
    ambiguous_lost = 0
    for name, hexid, n in ledger["ambiguous"]:
        camp = config.campaign(name)
        bid = bytes.fromhex(hexid)
        if r.exists(keys.seen_key(name, keys.shard_of(bid, camp.shards), bid)):
            ambiguous_stored[name] += n
        else:
            ambiguous_lost += 1

    cpu = cpu_used(out)
    memory = redis_memory(r)
    status, text = http_get(args.collector, "/metrics", token)  # /metrics needs a token
    metrics = parse_metrics(text) if status == 200 else {}
    if status != 200:
        problems.append(f"GET /metrics answered {status}")
    m_accepted = metric_by(metrics, "ldptel_reports_accepted_total", "campaign")
    m_batches = metric_by(metrics, "ldptel_batches_accepted_total", "campaign")
    m_dup = sum(metric_by(metrics, "ldptel_batches_duplicate_total", "campaign").values())
    m_rejected = metric_by(metrics, "ldptel_batches_rejected_total", "reason")
    # shuffled campaigns are summed under one label in /metrics (no per-campaign timing signal,
    # issue 36): their accepted reports and batches per campaign from the collector's Redis counters
    sealed_names = [c.name for c in config.campaigns if is_shuffled(c)]
    if sealed_names:
        for per in (m_accepted, m_batches):
            per.pop(SHUFFLED_LABEL, None)
        from_redis = collector_accepted(r, config)
        for name in sealed_names:
            m_accepted[name] = from_redis[name]
            camp = config.campaign(name)
            m_batches[name] = sum(int(r.hget(keys.metrics_key(name, s), keys.ACCEPTED_BATCHES) or 0)
                                  for s in range(camp.shards))
    store_n = counted(r, config) if not args.ingest_only else dict(m_accepted)
    if args.ingest_only:  # reports in the ingress and analysis streams (a shuffler re-packs batches)
        in_streams = {c.name: sum(stream_reports(r, key(c.name, s)) for s in range(c.shards)
                                  for key in (keys.ingress_key, keys.stream_key)) for c in config.campaigns}
        if in_streams != {c.name: m_accepted.get(c.name, 0) for c in config.campaigns}:
            problems.append(f"reports in the streams {in_streams} differ from the collector's accepted "
                            "reports")
    shuffled = shuffler_counts(r, config)
    held = waiting(r, config) if not args.ingest_only else {c.name: 0 for c in config.campaigns}
    for camp in config.campaigns:
        if is_shuffled(camp) and not held[camp.name] < camp.mode.batch_min:  # type: ignore[union-attr]
            problems.append(f"{camp.name}: {held[camp.name]} reports wait in ingress, not below batch_min "
                            f"{camp.mode.batch_min}: a due release was not made")  # type: ignore[union-attr]
    if config.shuffler.enabled and not args.ingest_only:
        accepted_total = sum(m_accepted.values()) - sum(held.values())
        if not shuffled[keys.INGRESS_REPORTS] == shuffled[keys.ANALYSIS_REPORTS] == accepted_total:
            problems.append(f"the shuffler took {shuffled[keys.INGRESS_REPORTS]} reports from ingress "
                            f"and wrote {shuffled[keys.ANALYSIS_REPORTS]}; the collector accepted "
                            f"{accepted_total}")
        if shuffled["ingress_entries"] - sum(held.values()):  # a sealed entry is one report
            problems.append(f"{shuffled['ingress_entries']} entries left in the ingress streams")
    undecodable = sum(int(r.hget(keys.counts_key(c.name, s), keys.REJECTED) or 0)
                      for c in config.campaigns for s in range(c.shards))
    if undecodable:
        problems.append(f"the aggregator could not decode {undecodable} stored entries")

    rows = []
    for camp in config.campaigns:
        client = ledger["accepted_reports"].get(camp.name, 0) + ambiguous_stored.get(camp.name, 0)
        exported = store_n[camp.name] if args.ingest_only else exported_n(args.collector, token, camp)
        row = (camp.name, ledger["accepted_reports"].get(camp.name, 0), ambiguous_stored.get(camp.name, 0),
               m_accepted.get(camp.name, 0), store_n[camp.name], exported, held[camp.name])
        rows.append(row)
        wait = held[camp.name]  # below batch_min in a shuffled campaign's ingress: not lost
        if not client == m_accepted.get(camp.name, 0) == store_n[camp.name] + wait == (exported or 0) + wait:
            problems.append(f"{camp.name}: clients {client}, collector {m_accepted.get(camp.name)}, "
                            f"store {store_n[camp.name]}, export {exported}: reports lost or counted twice")

    # invalid batches: all rejected with the expected status, and counted as rejections
    invalid_sent = sum(v for per in ledger["invalid"].values() for v in per.values())
    invalid_4xx = sum(v for per in ledger["invalid"].values() for s, v in per.items() if s.startswith("4"))
    rejected_total = sum(v for reason, v in m_rejected.items() if reason != "redis_unavailable")
    # (requests cut off when the run stopped may have reached the collector without an answer)
    unanswered = ledger["unanswered"]
    if not invalid_4xx <= rejected_total <= invalid_4xx + unanswered["invalid"]:
        problems.append(f"collector counted {rejected_total} rejections, clients got {invalid_4xx} "
                        f"(+{unanswered['invalid']} unanswered)")
    dup_slack = unanswered["resend"] + ledger["retries"] * len(ledger["ambiguous"])
    if not ledger["duplicate_answers"] <= m_dup <= ledger["duplicate_answers"] + dup_slack:
        problems.append(f"collector counted {m_dup} duplicate batches, "
                        f"clients got {ledger['duplicate_answers']} (+{dup_slack} unanswered)")
    problems += [f"client: {u}" for u in ledger["unexpected"][:20]]

    statuses: dict[str, int] = defaultdict(int)
    for per in ledger["status"].values():
        for s, v in per.items():
            statuses[s] += v
    for s, v in sorted(statuses.items()):
        code = int(s)
        if code >= 500 and not (code == 503 and args.allow_503):
            problems.append(f"{v} responses with status {code}")

    # --- summary ---------------------------------------------------------------------------
    stats = locust_stats(out)
    agg = stats.get("Aggregated", {})
    span = max((ledger["t_last"] or 0) - (ledger["t_first"] or 0), 1e-9)
    locust_rps = float(agg.get("Requests/s", 0))
    accepted_reports = sum(ledger["accepted_reports"].values())
    requests = sum(statuses.values())
    lines = [f"ldptel load test {args.label}".rstrip(),
             f"  client processes {ledger['processes']}, duration {span:.1f} s, load average now "
             + " ".join(f"{x:.2f}" for x in os.getloadavg()),
             f"  requests/s {requests / span:,.0f} (locust: {locust_rps:,.0f}); "
             f"accepted reports/s {accepted_reports / span:,.0f} "
             f"({accepted_reports:,} reports in {sum(ledger['accepted_batches'].values()):,} batches)",
             "  latency ms (all requests): p50 {} p95 {} p99 {} max {}".format(
                 agg.get("50%", "?"), agg.get("95%", "?"), agg.get("99%", "?"), agg.get("100%", "?"))]
    for name, row in stats.items():
        if name != "Aggregated":
            lines.append(f"    {name:<28} n={row['Request Count']:>8} failures={row['Failure Count']:>5} "
                         f"p50 {row['50%']:>5} p95 {row['95%']:>5} p99 {row['99%']:>5} ms")
    lines.append("  responses by status: " + ", ".join(f"{s}: {v:,}" for s, v in sorted(statuses.items())))
    kinds = sorted(ledger["invalid"].items())
    lines.append(f"  invalid batches ({invalid_sent:,}) by kind and status: " + "; ".join(
        f"{k} " + ",".join(f"{s}×{v}" for s, v in sorted(per.items())) for k, per in kinds))
    lines.append(f"  duplicates answered {ledger['duplicate_answers']:,} (collector {m_dup:,}); rejections "
                 f"{invalid_4xx:,} (collector {rejected_total:,}); batches without an answer "
                 f"{len(ledger['ambiguous'])} ({sum(ambiguous_stored.values())} reports stored, "
                 f"{ambiguous_lost} batches not stored)")
    lines.append("  ingest only: no aggregator (store and export = collector)" if args.ingest_only
                 else f"  drained in {drain_s:.1f} s after the run")
    killed = kills(out)
    if config.shuffler.enabled:
        lines.append(f"  shuffler: {shuffled[keys.INGRESS_REPORTS]:,} reports in "
                     f"{shuffled[keys.INGRESS_BATCHES]:,} ingress batches -> "
                     f"{shuffled[keys.ANALYSIS_REPORTS]:,} in {shuffled[keys.ANALYSIS_BATCHES]:,} analysis "
                     f"batches, {shuffled[keys.SHUFFLE_REFUSED]} releases refused, "
                     f"{shuffled['ingress_entries']} ingress entries left"
                     + (f"; killed (SIGKILL) {len(killed)} times while moving reports, at "
                        + ", ".join(f"{k['t']:.0f}" for k in killed) + " s" if killed else ""))
    if cpu:
        lines.append("  CPU seconds (run + drain): " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
                     + f", load generator {ledger['cpu_seconds']:.1f} (incl. its start-up)")
        total_reports = sum(store_n.values())
        lines.append("  reports per CPU-second (≈ capacity per core): " + ", ".join(
            f"{k} {total_reports / v:,.0f}" for k, v in cpu.items() if v > 0))
        lines.append("  CPU seconds per 1 M reports: " + ", ".join(
            f"{k} {v / max(total_reports, 1) * 1e6:,.1f}" for k, v in cpu.items()))
    stored_batches = sum(m_batches.values())
    per_batch, per_report = memory / max(stored_batches, 1), memory / max(sum(store_n.values()), 1)
    lines.append(f"  Redis memory {memory / 2**20:,.1f} MiB: {per_batch:,.0f} B per stored batch, "
                 f"{per_report:,.1f} B per report (streams, dedupe markers, state)")
    for camp in config.campaigns:
        if is_shuffled(camp) and not args.ingest_only:
            bmin = camp.mode.batch_min  # type: ignore[union-attr]
            lines.append(f"  {camp.name} (sealed, one device a post): {store_n[camp.name]:,} devices "
                         f"released in ≥ {store_n[camp.name] // bmin} releases of ≥ batch_min {bmin:,}, "
                         f"{held[camp.name]} waiting below batch_min")
    lag = lags(out, ledger["t_last"])
    if lag:
        lines.append("  lag (/healthz every 0.5 s, loadtest/lag.py): " + "; ".join(
            f"{who} during the run max {v['run_max']:.1f} s (median {v['run_median']:.1f}), "
            f"during the drain max {v['drain_max']:.1f} s" for who, v in lag.items()))
    if not args.ingest_only:
        hz_status, hz_body = http_get(args.collector, "/healthz")
        lines.append(f"  /healthz after the drain: {hz_status} {hz_body.strip()[:300]}")
    lines.append(f"  {'campaign':<14}{'clients':>11}{'+unanswered':>12}{'collector':>11}{'store':>11}"
                 f"{'export':>11}{'waiting':>9}")
    for name, cl, amb, col, st, ex, wt in rows:
        shown = f"{ex:,}" if ex is not None else "-"
        lines.append(f"  {name:<14}{cl:>11,}{amb:>12,}{col:>11,}{st:>11,}{shown:>11}{wt:>9,}")
    verdict = "OK: every accepted report counted exactly once, every invalid batch rejected" if not problems \
        else "FAILED:\n" + "\n".join(f"  - {p}" for p in problems)
    lines.append(verdict)
    text = "\n".join(lines)
    print(text)
    (out / "summary.txt").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps({
        "label": args.label, "duration_s": span, "requests": requests, "accepted_reports": accepted_reports,
        "requests_per_s": requests / span, "reports_per_s": accepted_reports / span,
        "latency_ms": {p: agg.get(p) for p in ("50%", "95%", "99%", "100%")},
        "statuses": statuses, "invalid": ledger["invalid"], "campaigns": rows, "problems": problems,
        "loadavg": os.getloadavg(), "cpu_seconds": {**cpu, "load_generator": ledger["cpu_seconds"]},
        "redis_used_memory": memory, "shuffler": shuffled, "shuffler_kills": killed, "lag": lag,
        "waiting": held,
    }, indent=1, default=dict) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
