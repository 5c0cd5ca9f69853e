"""Range and numeric campaigns in the shuffled modes, end to end: ``ldptel serve`` (gunicorn), the
SDK, ``ldptel shuffle`` and ``ldptel aggregate`` on an embedded Redis, at central ε = 1, δ = 10⁻⁸.

Per run, one batch of ``--devices`` devices (the same values every run) reports to four campaigns:

- ``range-fakes``: range, d = 1,024, ``shuffled-fakes`` (the value plus Poisson fakes);
- ``range-grr``: range, d = 1,024, ``shuffled`` (GRR at the planned ε₀);
- ``mean-fakes``: numeric on [0, 100], K = 32 grid points, ``shuffled-fakes``;
- ``mean-oue``: numeric on [0, 100], K = 32, ``shuffled`` with OUE.

Read back from the export API (``/range`` over 12 ranges, ``/quantiles``, ``/mean``): for each
estimate the z-score (estimate − truth)/stated std error. If the stated variances are the variances
the z-scores' root mean square is ≈ 1 (over runs × ranges; ranges of one run are correlated, so it
is rougher than its count suggests); the quantiles' true values are inside their intervals. Beside
it, the stated std errors against the local mechanisms at ε = 1 (Haar ranges; the hybrid mean).

    .venv/bin/python bench/shuffled_kinds.py [--runs 3] [--devices 20000]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from served import EXPORT, INGEST, get, send, served

from ldptel.mechanisms.numeric import Hybrid
from ldptel.mechanisms.range_haar import RangeHaar

D, EPS, DELTA, LOWER, UPPER = 1024, 1.0, 1e-8, 0.0, 100.0
RANGES = [(0, 0), (0, 9), (0, 99), (0, 511), (10, 19), (100, 199), (200, 700), (500, 1023), (900, 1023),
          (5, 5), (300, 301), (0, 1022)]
CAMPAIGNS = {
    "range-fakes": {"kind": "range", "privacy_mode": "shuffled-fakes", "domain_size": D},
    "range-grr": {"kind": "range", "privacy_mode": "shuffled", "domain_size": D},
    "mean-fakes": {"kind": "numeric", "privacy_mode": "shuffled-fakes", "lower": LOWER, "upper": UPPER},
    "mean-oue": {"kind": "numeric", "privacy_mode": "shuffled", "oracle": "oue", "lower": LOWER,
                 "upper": UPPER},
}


def toml_value(v: object) -> str:
    return json.dumps(v)


def config_text(devices: int, keys_dir: Path) -> str:
    lines = ["[server]", f'ingest_tokens = ["{INGEST}"]', f'export_tokens = ["{EXPORT}"]',
             "[shuffler]", "batch_reports = 2000", f"max_held_reports = {40 * devices}",
             f"max_ingress_batches = {max(10_000, 4 * devices)}", "[analyzer]", f'keys_dir = "{keys_dir}"']
    for name, table in CAMPAIGNS.items():
        lines += ["[[campaigns]]", f'name = "{name}"', f"central_epsilon = {EPS}", f"central_delta = {DELTA}",
                  f"batch_min = {devices}", "min_reports = 1"]
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--devices", type=int, default=20_000)
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    n = args.devices
    values = np.minimum(rng.geometric(1 / 150, n) - 1, D - 1)  # skewed latencies
    reals = rng.gamma(3.0, 12.0, n)  # a few above 100: clipped on the device
    clipped = np.clip(reals, LOWER, UPPER)
    z: dict[str, list[float]] = {name: [] for name in CAMPAIGNS}
    stated: dict[str, list[float]] = {name: [] for name in CAMPAIGNS}
    covered, quantiles = 0, 0
    with served(lambda keys: config_text(n, keys)) as stack:
        url = stack.url
        for run in range(args.runs):
            t0 = time.perf_counter()
            for name in CAMPAIGNS:
                data = values.tolist() if name.startswith("range") else reals.tolist()
                send(url, stack.tmp / f"{name}-{run}.sqlite", name, data, stack.signing_key)
            stack.ldptel("shuffle")
            stack.ldptel("aggregate")
            window = "window=current"  # window = "all": one window, never complete
            for name in ("range-fakes", "range-grr"):
                for lo, hi in RANGES:
                    doc = get(url, f"/v1/campaigns/{name}/range?lo={lo}&hi={hi}&{window}")
                    # each run adds one batch of the same devices: the window holds run + 1 batches
                    truth = int(((values >= lo) & (values <= hi)).sum()) * (run + 1)
                    z[name].append((doc["estimate"] - truth) / doc["std_error"])
                    stated[name].append(doc["std_error"])
                q = get(url, f"/v1/campaigns/{name}/quantiles?q=0.1,0.5,0.9,0.99&{window}")
                for row in q["items"]:
                    true_q = int(np.quantile(values, row["q"], method="inverted_cdf"))
                    quantiles += 1
                    covered += row["value_ci_low"] <= true_q <= row["value_ci_high"]
            for name in ("mean-fakes", "mean-oue"):
                doc = get(url, f"/v1/campaigns/{name}/mean?{window}")
                z[name].append((doc["mean"]["estimate"] - clipped.mean()) / doc["mean"]["std_error"])
                stated[name].append(doc["mean"]["std_error"])
            p = doc["privacy"]
            print(f"run {run + 1}: {run + 1} batches of {n:,} devices per campaign, central ε between "
                  f"{p['central_epsilon_lower']:.4f} and {p['central_epsilon']:.4f} (last campaign); "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
    haar = RangeHaar(EPS, D)
    plug = np.bincount(values, minlength=D).astype(float)
    print(f"\n{n:,} devices, {args.runs} runs (the window grows by one batch per run), δ = {DELTA:g}:")
    for name in CAMPAIGNS:
        zz = np.array(z[name])
        print(f"  {name:12s} z-scores: RMS {math.sqrt(np.mean(zz ** 2)):.3f}, mean {zz.mean():+.3f}, "
              f"max |z| {np.abs(zz).max():.2f} over {zz.size}; mean stated std error "
              f"{np.mean(stated[name]):.4g}")
    print(f"  quantiles: the true value inside the 95 % value interval {covered} of {quantiles}")
    lo, hi = np.array([r[0] for r in RANGES]), np.array([r[1] for r in RANGES])
    local = np.sqrt(haar.range_variance(lo, hi, plug, n))
    first = np.array(stated["range-fakes"][:len(RANGES)])
    print(f"  range std errors, one batch: shuffled-fakes {np.round(first, 1).tolist()}\n"
          f"                               local Haar ε = 1 {np.round(local, 0).tolist()}")
    hybrid = Hybrid(EPS, LOWER, UPPER)
    local_mean = math.sqrt(hybrid.worst_variance() * ((UPPER - LOWER) / 2) ** 2 / n)
    print(f"  mean std error, one batch: shuffled-fakes {stated['mean-fakes'][0]:.4g}, shuffled OUE "
          f"{stated['mean-oue'][0]:.4g}, local hybrid ε = 1 (worst case) {local_mean:.4g}")


if __name__ == "__main__":
    main()
