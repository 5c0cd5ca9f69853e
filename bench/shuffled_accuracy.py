"""Issue 26's accuracy benchmark, end to end: ``ldptel serve`` (gunicorn), the SDK, ``ldptel
shuffle`` and ``ldptel aggregate`` on an embedded Redis, at central ε = 1, δ = 10⁻⁸, d = 1,024.

- ``shuffled-fakes``: ``--runs`` campaigns of one batch of ``--devices`` (10⁵) devices each, every
  device's true index plus Poisson(λ) fakes sealed by the SDK (OS randomness), released by the
  shuffler as one batch with its own Poisson(μ_s) fakes per bucket (``--fake-source``: both, the
  default, shuffler or devices), decrypted and decoded by the aggregator, read from the export API. The
  empirical standard error per count is √(mean (estimate − truth)²) over every bucket of every run
  (runs × 1,024 errors), beside the mean std error the documents state.
- ``shuffled`` GRR at n = 10⁶: the plan's ε₀ and std error (``ldptel.privacy.plan``), and the decode
  simulated at that n (vectorized encode, the aggregator's GRR decoder): the empirical error.
- local OUE at ε = 1 on the same data (the same values; simulated decode): its empirical error, and
  each mode's ratio to it.
- ``--window-devices`` N (issue 38, e.g. 10⁶): ONE daily window of N devices of a ``shuffled-fakes``
  campaign (``fake_source = "shuffler"``: the fakes of a release do not grow with its size;
  ``batch_min`` 10⁵) over 4 shards, the analyzer key rotated halfway (the aggregator's keyring, as
  at ``current_until``), every device posted through the SDK (``SealedEnvelopes`` bodies of 1,000
  envelopes); ``serve``'s own shuffler runs throughout and releases nothing while the window is
  open; then ``ldptel shuffle --once`` (a drain: it stands in for the window's close, which the
  suite's ``test_one_release`` reaches with a clock) and ``ldptel aggregate --once``. Asserts the
  published document's ``batches`` is ONE release of N devices (exactly once) and the std error per
  count (empirical over the 1,024 buckets, and stated) ≤ 8.5; prints the drain's peak RSS.
- throughput of ``shuffled-fakes`` against a local OUE campaign of the same devices through the
  same stack: the SDK's seal-and-post time, the shuffler's and the aggregator's time, per message
  and per device.

    .venv/bin/python bench/shuffled_accuracy.py [--runs 3] [--devices 100000] [--window-devices 1000000]
"""

from __future__ import annotations

import argparse
import math
import resource
import time
import urllib.error
from pathlib import Path

import numpy as np
import redis
from served import EXPORT, INGEST, Served, get, send, served

from ldptel import keys
from ldptel.aggregator.decoders import accumulator_for
from ldptel.client import create_mechanism
from ldptel.privacy import plan

D, EPS, DELTA = 1024, 1.0, 1e-8


WINDOW_SHARDS = 4


def window_batch_min(n: int) -> int:
    """The one-window run's ``batch_min``: 10⁵ (issue 38's shape), a tenth of a smaller run."""
    return min(100_000, max(1_000, n // 10))


def config_text(runs: int, devices: int, keys_dir: Path, fake_source: str = "both",
                window_devices: int = 0) -> str:
    """The bench's config; the ``[shuffler]`` bounds at their defaults (a window of 10⁶ devices is
    one release: issue 38)."""
    lines = ["[server]", f'ingest_tokens = ["{INGEST}"]', f'export_tokens = ["{EXPORT}"]',
             "[shuffler]", "batch_reports = 2000",
             "[analyzer]", f'keys_dir = "{keys_dir}"']
    if window_devices:
        lines += ["[[campaigns]]", 'name = "window"', 'privacy_mode = "shuffled-fakes"',
                  f"domain_size = {D}", f"central_epsilon = {EPS}", f"central_delta = {DELTA}",
                  f"batch_min = {window_batch_min(window_devices)}", 'window = "1d"',
                  f"shards = {WINDOW_SHARDS}", 'fake_source = "shuffler"', "min_reports = 1"]
    for i in range(runs):
        lines += ["[[campaigns]]", f'name = "fakes-{i}"', 'privacy_mode = "shuffled-fakes"',
                  f"domain_size = {D}", f"central_epsilon = {EPS}", f"central_delta = {DELTA}",
                  f"batch_min = {devices}", "min_reports = 1", f'fake_source = "{fake_source}"']
    lines += ["[[campaigns]]", 'name = "local-oue"', 'oracle = "oue"', f"epsilon = {EPS}",
              f"domain_size = {D}", "min_reports = 1"]
    return "\n".join(lines) + "\n"


def population(rng: np.random.Generator, n: int) -> np.ndarray:
    w = 1.0 / np.arange(1, D + 1) ** 0.8
    return rng.choice(D, size=n, p=w / w.sum())


def simulated_error(mech, values: np.ndarray, rng: np.random.Generator,
                    rare: int | None = None) -> tuple[float, float]:
    """(empirical, stated mean) std error per count of one simulated decode of ``values`` (over
    the ``rare`` % least frequent items only, if given: where Var*, the variance of a count of
    frequency ≈ 0, nearly applies)."""
    acc = accumulator_for(mech)
    for start in range(0, values.size, 200_000):
        part = values[start:start + 200_000]
        acc.add_columns(mech.randomize(part, rng), part.size)
        acc.state["n"][0] += part.size
    est = acc.estimate()
    truth = np.bincount(values, minlength=mech.domain_size)
    sel = np.ones(truth.size, dtype=bool) if rare is None else truth <= np.quantile(truth, rare / 100)
    return (float(np.sqrt(np.mean((est.counts - truth)[sel] ** 2))), float(np.mean(est.std_error[sel])))


def window_run(stack: Served, n: int, rng: np.random.Generator) -> None:
    """Issue 38's end-to-end check (module docstring: ``--window-devices``)."""
    from ldptel.aggregator.keyring import Keyring
    from ldptel.campaigns.config import load_config
    from ldptel.server.sealed_ingest import KEY_CACHE_SECONDS

    name = "window"
    values = population(rng, n)
    truth = np.bincount(values, minlength=D)
    r = redis.Redis.from_url(stack.redis_url)
    ring = Keyring(load_config(stack.config).analyzer)
    ring.ensure(r)
    (old,) = ring.public
    t0 = time.perf_counter()
    window = int(time.time() // 86400) * 86400  # the daily window the devices seal to
    t_send = send(stack.url, stack.tmp / "w1.sqlite", name, values[:n // 2].tolist(), stack.signing_key)
    ring.ensure(r, now=ring.public[old].current_until + 1)  # the aggregator rotates inside the window
    time.sleep(KEY_CACHE_SECONDS + 0.5)
    t_send += send(stack.url, stack.tmp / "w2.sqlite", name, values[n // 2:].tolist(), stack.signing_key)
    assert int(time.time() // 86400) * 86400 == window, "the devices straddle two windows: run it again"
    time.sleep(2)  # serve's shuffler: a few rounds with the window open
    early = sum(r.xlen(keys.stream_key(name, s)) for s in range(WINDOW_SHARDS))
    assert early == 0, f"{early} analysis entries while the window is open"
    t_shuffle = stack.ldptel("shuffle")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    t_agg = stack.ldptel("aggregate")
    try:
        doc = get(stack.url, f"/v1/campaigns/{name}/estimates?window={window}")
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"estimates of {name!r}: {exc.code} {exc.read()[:2000]!r}") from None
    est = np.array([row["estimate"] for row in doc["items"]])
    empirical = float(np.sqrt(np.mean((est - truth) ** 2)))
    stated = float(np.mean([row["std_error"] for row in doc["items"]]))
    p = doc["privacy"]
    mu = p.get("shuffler_fakes_per_bucket", 0)
    print(f"\nONE window of {n:,} devices, {WINDOW_SHARDS} shards, a key rotation inside it "
          f"(batch_min {window_batch_min(n):,}, fake_source shuffler, μ = {mu:.2f}): batches {p['batches']}, "
          f"n_reports {doc['n_reports']:,}; std error per count empirical {empirical:.3f}, stated "
          f"{stated:.3f} (√μ = {math.sqrt(mu):.3f}); central ε ≤ {p['central_epsilon']:.4f}; send "
          f"{t_send:.0f} s, shuffle --once {t_shuffle:.0f} s (peak RSS of a child ≤ {rss:.0f} MB), "
          f"aggregate --once {t_agg:.0f} s; {time.perf_counter() - t0:.0f} s in all", flush=True)
    assert p["batches"] == [n] and doc["n_reports"] == n, (p["batches"], doc["n_reports"])
    assert empirical <= 8.5 and stated <= 8.5, (empirical, stated)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--devices", type=int, default=100_000)
    ap.add_argument("--fake-source", choices=("devices", "shuffler", "both"), default="both",
                    help="who adds the fakes (the campaigns' fake_source)")
    ap.add_argument("--window-devices", type=int, default=0,
                    help="also the one-window run of issue 38 with this many devices (e.g. 1000000)")
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    values = population(rng, args.devices)
    truth = np.bincount(values, minlength=D)
    with served(lambda keys: config_text(args.runs, args.devices, keys, args.fake_source,
                                         args.window_devices)) as stack:
        url = stack.url
        if args.window_devices:
            window_run(stack, args.window_devices, np.random.default_rng(38))
            if not args.runs:  # --runs 0: the window run alone
                return
        errors, stated, timing = [], [], []
        for i in range(args.runs):
            name = f"fakes-{i}"
            t_send = send(url, stack.tmp / f"{name}.sqlite", name, values.tolist(), stack.signing_key)
            t_shuffle = stack.ldptel("shuffle")
            t_agg = stack.ldptel("aggregate")
            doc = get(url, f"/v1/campaigns/{name}/estimates?window=current")
            est = np.array([row["estimate"] for row in doc["items"]])
            errors.append(est - truth)
            stated.append(np.mean([row["std_error"] for row in doc["items"]]))
            timing.append((t_send, t_shuffle, t_agg))
            p = doc["privacy"]
            run_se = np.sqrt(np.mean(errors[-1] ** 2))
            print(f"run {i + 1}: batches {p['batches']}, central ε between "
                  f"{p['central_epsilon_lower']:.4f} and {p['central_epsilon']:.4f} "
                  f"(δ = {p['central_delta']:g}), fake_source {p.get('fake_source', 'devices')}: λ = "
                  f"{p['fake_rate']:.4f}, shuffler μ_s = {p.get('shuffler_fakes_per_bucket', 0):.2f}; "
                  "empirical std error "
                  f"{run_se:.3f}, stated {stated[-1]:.3f}; send {t_send:.1f} s, shuffle "
                  f"{t_shuffle:.1f} s, aggregate {t_agg:.1f} s", flush=True)
        lam = doc["privacy"]["fake_rate"]
        messages = args.devices * (1 + lam) + D * doc["privacy"].get("shuffler_fakes_per_bucket", 0)
        t_local_send = send(url, stack.tmp / "local-oue.sqlite", "local-oue", values.tolist())
        t_local_shuffle = stack.ldptel("shuffle")
        t_local_agg = stack.ldptel("aggregate")
    fakes_se = float(np.sqrt(np.mean(np.concatenate(errors) ** 2)))
    oue_se, oue_stated = simulated_error(create_mechanism("oue", epsilon=EPS, domain_size=D), values, rng)
    print(f"\nshuffled-fakes (fake_source {args.fake_source}), {args.devices:,} devices, d = {D}: "
          "empirical std error per count "
          f"{fakes_se:.3f} "
          f"over {args.runs} runs × {D} counts (stated {np.mean(stated):.3f}; plan √μ = "
          f"{plan('shuffled-fakes', 'histogram', D, EPS, DELTA, args.devices).std_error:.3f})")
    print(f"local OUE ε = 1, same data: empirical {oue_se:.1f} (stated {oue_stated:.1f}); "
          f"ratio {oue_se / fakes_se:.1f}×")
    big = 1_000_000
    grr_plan = plan("shuffled", "grr", D, EPS, DELTA, big)
    values_big = population(rng, big)
    grr_mech = create_mechanism("grr", epsilon=grr_plan.local_epsilon, domain_size=D)
    grr_se, grr_stated = simulated_error(grr_mech, values_big, rng, rare=25)
    grr_all, grr_all_stated = simulated_error(grr_mech, values_big, rng)
    half = rng.integers(0, D // 2, size=big)  # the upper half of the domain empty: the plan's Var*
    acc = accumulator_for(grr_mech)
    for start in range(0, big, 200_000):
        part = half[start:start + 200_000]
        acc.add_columns(grr_mech.randomize(part, rng), part.size)
        acc.state["n"][0] += part.size
    grr_null = float(np.sqrt(np.mean(acc.estimate().counts[D // 2:] ** 2)))
    oue_big, _ = simulated_error(create_mechanism("oue", epsilon=EPS, domain_size=D), values_big, rng)
    print(f"shuffled GRR, n = {big:,}: plan ε₀ = {grr_plan.local_epsilon:g}, central ε between "
          f"{grr_plan.central_epsilon_lower:.4f} and {grr_plan.central_epsilon:.4f}, planned std error "
          f"{grr_plan.std_error:.3f}; simulated decode: items nobody holds {grr_null:.3f}; "
          f"the 25 % least frequent items: "
          f"{grr_se:.3f} (stated {grr_stated:.3f}); every item: {grr_all:.3f} (stated {grr_all_stated:.3f}: "
          f"frequent items add c·p(1−p)); local OUE {oue_big:.1f}: ratio {oue_big / grr_se:.1f}× "
          f"({oue_big / grr_all:.1f}× over every item)")
    send_s, shuffle_s, agg_s = (float(np.mean(col)) for col in zip(*timing, strict=True))
    n = args.devices
    print(f"\nthroughput (mean of {args.runs} runs; {messages:,.0f} messages for {n:,} devices):")
    for what, sealed_t, local_t in (("SDK seal + post", send_s, t_local_send),
                                    ("shuffle --once (process)", shuffle_s, t_local_shuffle),
                                    ("aggregate --once (process)", agg_s, t_local_agg)):
        print(f"  {what:28s} shuffled-fakes {messages / sealed_t:10,.0f} msg/s "
              f"{n / sealed_t:10,.0f} devices/s | local OUE {n / local_t:10,.0f} devices/s "
              f"({sealed_t:.1f} s vs {local_t:.1f} s)")
    print(f"  (fakes std error ≤ 8.5: {'yes' if fakes_se <= 8.5 else 'NO'}; GRR planned ≤ 10: "
          f"{'yes' if grr_plan.std_error <= 10 else 'NO'}, simulated {grr_se:.2f}; λ = {lam:.4f}; "
          f"{math.ceil(messages):,} messages)")


if __name__ == "__main__":
    main()
