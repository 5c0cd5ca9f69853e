#!/usr/bin/env bash
# ldptel load test: the whole stack on loopback under locust, then an exactly-once check.
#
#   loadtest/run.sh [--users 16] [--run-time 60s] [--workers 2] [--aggregators 1] [--shufflers 1]
#                   [--kill-shuffler 0] [--sizes 1-500] [--cluster 0] [--shards N] [--processes 1]
#                   [--rate-per-user 0] [--invalid 0.02] [--resend 0.03] [--outage AT[:SECONDS]]
#                   [--out loadtest/out]
#
# Starts an embedded Redis (--cluster M: a Redis Cluster of M masters) from loadtest/redis_up.py,
# `ldptel serve` (its default server, granian; --workers) against it, --shufflers `ldptel shuffle` processes (each
# under loadtest/shuffler_up.py, which restarts it if it dies; 0 with `[shuffler] enabled = false`)
# and --aggregators `ldptel aggregate` workers,
# runs locust headless (loadtest/locustfile.py: --users devices in a closed loop, or at
# --rate-per-user requests/s each, for --run-time; batches of --sizes reports, "lo-hi" or fixed,
# shares --invalid and --resend of invalid batches and re-sent ones), then loadtest/check.py
# drains the aggregator, compares clients, collector metrics, store and export API, and prints
# requests/s, reports/s, statuses and latency percentiles. Locust's CSV and HTML report, the logs and summary.txt go to
# --out. Exits non-zero on a lost or double-counted report, an invalid batch not rejected, or a 5xx.
# --aggregators 0 measures ingest alone (the check then compares clients, collector and streams).
# --outage AT:SECONDS stops Redis (on a cluster, one master) AT seconds into the run for SECONDS
# (default 2) and starts it again: the collector answers 503 meanwhile (intended 503s), the
# devices retry, and the check still demands that nothing accepted is lost.
# --kill-shuffler K kills the (first) shuffler with SIGKILL K times in the first 80 % of the run,
# each time while it is moving reports (shuffler_up.py; kills in shuffler-kills.jsonl); the check then demands that
# every accepted report went through the shuffler exactly once and was counted exactly once.
# Every process started here is stopped on exit (also on Ctrl-C or an error). The Python used is
# $LDPTEL_PYTHON, default .venv/bin/python.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${LDPTEL_PYTHON:-$ROOT/.venv/bin/python}"
USERS=16
RUN_TIME=60s
WORKERS=2
AGGREGATORS=1
SHUFFLERS=1
KILL_SHUFFLER=0
SIZES=1-500
CLUSTER=0
SHARDS=""
PROCESSES=1
RATE_PER_USER=0
INVALID=0.02
RESEND=0.03
OUT="$ROOT/loadtest/out"
OUTAGE=""

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --users) USERS="$2"; shift 2 ;;
    --run-time) RUN_TIME="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --aggregators) AGGREGATORS="$2"; shift 2 ;;
    --shufflers) SHUFFLERS="$2"; shift 2 ;;
    --kill-shuffler) KILL_SHUFFLER="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --cluster) CLUSTER="$2"; shift 2 ;;
    --shards) SHARDS="$2"; shift 2 ;;
    --processes) PROCESSES="$2"; shift 2 ;;
    --rate-per-user) RATE_PER_USER="$2"; shift 2 ;;
    --invalid) INVALID="$2"; shift 2 ;;
    --resend) RESEND="$2"; shift 2 ;;
    --outage) OUTAGE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
if (( USERS < 1 || USERS > 2000 )); then echo "run.sh: --users must be in 1..2000" >&2; exit 2; fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
rm -rf "$OUT/redis" "$OUT"/ledger-*.json "$OUT"/locust* "$OUT"/summary.* "$OUT"/*.log "$OUT/redis.url" \
  "$OUT/pids" "$OUT"/cpu-*.json "$OUT"/shuffler-kills.jsonl "$OUT/lag.jsonl"
CONFIG="$OUT/ldptel.toml"
if [[ -n "$SHARDS" ]]; then
  sed "s/^shards = .*/shards = $SHARDS/" "$ROOT/loadtest/ldptel.toml" > "$CONFIG"
else
  cp "$ROOT/loadtest/ldptel.toml" "$CONFIG"
fi

# the analyzer's keys (shuffled campaigns: lt-sealed) in --out, and its signing key pinned by the
# shuffler (and by the locustfile's devices, which read it from this config)
rm -rf "$OUT/analyzer-keys"
printf '\n[analyzer]\nkeys_dir = "%s"\n' "$OUT/analyzer-keys" >>"$CONFIG"
SIGNING="$(env -u REDIS_URL "$PY" -m ldptel.commands.cli analyzer-key show --config "$CONFIG" --quiet)"
printf '\n[shuffler]\nanalyzer_signing_key = "%s"\n' "$SIGNING" >>"$CONFIG"

PIDS=()
stop_all() {
  local pid i
  # newest first: locust, aggregators, shufflers, collector, then Redis; only our own jobs that
  # still run
  for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
    pid="${PIDS[$i]}"
    running "$pid" || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do running "$pid" || break; sleep 0.2; done
    if running "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
running() { jobs -pr | grep -qx "$1"; }
trap stop_all EXIT
trap 'exit 130' INT TERM

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit="$1" what="$2"; shift 2
  local deadline=$(( SECONDS + limit ))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS > deadline )); then echo "run.sh: $what not ready in ${limit}s" >&2; return 1; fi
    sleep 0.2
  done
}

OUTAGE_AT="${OUTAGE%%:*}"
OUTAGE_SECONDS=2
if [[ "$OUTAGE" == *:* ]]; then OUTAGE_SECONDS="${OUTAGE#*:}"; fi
"$PY" "$ROOT/loadtest/redis_up.py" --data "$OUT/redis" --url-file "$OUT/redis.url" --cluster "$CLUSTER" \
  --outage-seconds "$OUTAGE_SECONDS" >"$OUT/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
echo "redis $REDIS_PID" >"$OUT/pids"
wait_for 60 "Redis" test -s "$OUT/redis.url"
REDIS_URL="$(cat "$OUT/redis.url")"

PORT="$("$PY" -c 'from ldptel.store.redis_server import free_port; print(free_port())')"
URL="http://127.0.0.1:$PORT"
env -u REDIS_URL "$PY" -m ldptel.commands.cli serve --config "$CONFIG" --redis-url "$REDIS_URL" --host 127.0.0.1 \
  --port "$PORT" --workers "$WORKERS" >"$OUT/serve.log" 2>&1 &
PIDS+=($!)
echo "collector $!" >>"$OUT/pids"
wait_for 60 "collector" "$PY" -c "import urllib.request as u; u.urlopen('$URL/healthz', timeout=1)"

RUN_SECONDS="$("$PY" -c 'import sys; from ldptel.durations import parse_duration as p; print(p(sys.argv[1]))' "$RUN_TIME" 2>/dev/null || echo 60)"
for (( i=0; i<SHUFFLERS; i++ )); do
  KILLS=0; (( i == 0 )) && KILLS="$KILL_SHUFFLER"
  "$PY" "$ROOT/loadtest/shuffler_up.py" --config "$CONFIG" --redis-url "$REDIS_URL" --log "$OUT/shuffle-$i.log" \
    --kills "$KILLS" --spread "$(( RUN_SECONDS * 4 / 5 ))" --events "$OUT/shuffler-kills.jsonl" >"$OUT/shuffler_up-$i.log" 2>&1 &
  PIDS+=($!)
  echo "shuffler $!" >>"$OUT/pids"
done
# the shufflers' start-up (imports) competes with locust's for the CPU: let it finish first, so
# that the run (and an --outage timed from locust's start) meets the devices already sending
for (( i=0; i<SHUFFLERS; i++ )); do
  wait_for 60 "shuffler $i" grep -q "shuffler .* on " "$OUT/shuffle-$i.log"
done

for (( i=0; i<AGGREGATORS; i++ )); do
  "$PY" -m ldptel.commands.cli aggregate --config "$CONFIG" --redis-url "$REDIS_URL" >"$OUT/aggregate-$i.log" 2>&1 &
  PIDS+=($!)
  echo "aggregator $!" >>"$OUT/pids"
done

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
LABEL="(users $USERS, $RUN_TIME, collector workers $WORKERS, aggregators $AGGREGATORS, shufflers $SHUFFLERS$( (( KILL_SHUFFLER > 0 )) && echo " killed $KILL_SHUFFLER times"), sizes $SIZES, redis $([[ $CLUSTER -gt 0 ]] && echo "cluster of $CLUSTER" || echo "single node"), load average before $LOAD_BEFORE)"
echo "run.sh: Redis $REDIS_URL, collector $URL; locust: $USERS users for $RUN_TIME"

LOCUST_ARGS=(-f "$ROOT/loadtest/locustfile.py" --headless --users "$USERS" --spawn-rate "$USERS"
             --run-time "$RUN_TIME" --host "$URL" --csv "$OUT/locust" --html "$OUT/locust.html"
             --only-summary --exit-code-on-error 0 --stop-timeout 0 --loglevel WARNING)
if (( PROCESSES > 1 )); then LOCUST_ARGS+=(--processes "$PROCESSES"); fi
"$PY" "$ROOT/loadtest/cpu.py" "$OUT/pids" "$OUT/cpu-start.json"
LDPTEL_LT_CONFIG="$CONFIG" LDPTEL_LT_OUT="$OUT" LDPTEL_LT_SIZES="$SIZES" LDPTEL_LT_INVALID="$INVALID" \
LDPTEL_LT_RESEND="$RESEND" LDPTEL_LT_RATE_PER_USER="$RATE_PER_USER" \
  "$PY" -m locust "${LOCUST_ARGS[@]}" >"$OUT/locust.log" 2>&1 &
LOCUST_PID=$!
PIDS+=("$LOCUST_PID")
# the shuffler's and aggregator's lag (/healthz) every 0.5 s during the run and the drain (lag.py)
"$PY" "$ROOT/loadtest/lag.py" --url "$URL" --out "$OUT/lag.jsonl" >"$OUT/lag.log" 2>&1 &
PIDS+=($!)
CHECK_ARGS=()
if [[ -n "$OUTAGE" ]]; then
  ( sleep "$OUTAGE_AT"; kill -USR1 "$REDIS_PID" 2>/dev/null || true ) &
  PIDS+=($!)
  CHECK_ARGS+=(--allow-503)
  LABEL="${LABEL%)}, Redis outage of ${OUTAGE_SECONDS}s at ${OUTAGE_AT}s)"
fi
wait "$LOCUST_PID" || { echo "run.sh: locust failed; see $OUT/locust.log" >&2; tail -20 "$OUT/locust.log" >&2; exit 1; }

status=0
"$PY" "$ROOT/loadtest/check.py" --out "$OUT" --config "$CONFIG" --redis-url "$REDIS_URL" --collector "$URL" \
  --label "$LABEL" ${CHECK_ARGS[@]+"${CHECK_ARGS[@]}"} $( (( AGGREGATORS == 0 )) && echo --ingest-only ) \
  || status=$?
echo "run.sh: report in $OUT (summary.txt, locust_stats.csv, locust.html)"
exit "$status"
