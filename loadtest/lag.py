"""The shuffler's and aggregator's lag during a load test (``run.sh`` starts it with locust):
every ``--every`` seconds, ``GET /healthz`` of the collector, one JSON line per look to ``--out``:
``{"t", "status", "shuffler_lag", "aggregator_lag"}`` — ``lag_seconds`` of each component, for the
shuffler the time since its last round that left nothing overdue (``shuffler.worker``: a release
that waits, e.g. sealing its fakes, shows here). ``check.py`` prints their maxima.

    python loadtest/lag.py --url http://127.0.0.1:PORT --out lag.jsonl [--every 0.5]
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--every", type=float, default=0.5)
    args = ap.parse_args()
    with open(args.out, "a", buffering=1) as out:
        while True:
            t0 = time.time()
            try:
                with urllib.request.urlopen(f"{args.url}/healthz", timeout=5) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
            except OSError:
                status, body = 0, b"{}"
            try:
                comp = json.loads(body).get("components", {})
            except ValueError:
                comp = {}
            out.write(json.dumps({"t": t0, "status": status,
                                  "shuffler_lag": comp.get("shuffler", {}).get("lag_seconds"),
                                  "aggregator_lag": comp.get("aggregator", {}).get("lag_seconds")}) + "\n")
            time.sleep(max(0.0, args.every - (time.time() - t0)))


if __name__ == "__main__":
    main()
