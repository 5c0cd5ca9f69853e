"""The parameter sets of the test vectors (``generate.py``): campaign configs as ``GET
/v1/campaigns`` publishes them, and the values one device reports under each."""

from __future__ import annotations

from typing import Any

RAPPOR = {"oracle": "rappor", "bloom_bits": 60, "hashes": 2, "cohorts": 8, "f": 0.5, "p": 0.5,
          "q": 0.75, "candidates": ["a", "b", "c", "d"]}


def campaign(name: str, kind: str = "frequency", **params: Any) -> dict[str, Any]:
    return {"name": name, "version": 1, "kind": kind, **params, "window": "1d",
            "window_seconds": 86400, "reports_per_window": 1000}


def _frequency() -> list[dict[str, Any]]:
    out = []
    for oracle, params in (("grr", [(2.0, 5), (0.5, 100), (4.0, 3)]),
                           ("sue", [(1.0, 100), (3.0, 9)]),
                           ("oue", [(1.0, 1021), (2.0, 16), (0.25, 8)]),
                           ("olh", [(1.0, 1024), (3.0, 50), (0.5, 1 << 20)]),
                           ("hadamard", [(1.0, 100), (2.0, 1024), (0.75, 2)])):
        for eps, d in params:
            out.append({"config": campaign(f"{oracle}-{eps:g}-{d}", oracle=oracle, epsilon=eps,
                                           domain_size=d),
                        "values": [0, d - 1, 1 % d, (d // 2), 0, d - 1, 3 % d, 2 % d, d // 3]})
            out.append({"config": campaign(f"l{oracle}-{eps:g}-{d}", oracle=oracle, epsilon=eps,
                                           domain_size=d, memoize=True, epsilon_inf=eps * 2.5),
                        "values": [0, 0, d - 1, 0, 1 % d, d - 1, 0, 1 % d, 0]})
    out.append({"config": campaign("grr-labels", oracle="grr", epsilon=2.0,
                                   domain=["apple", "banana", "cherry"], domain_size=3),
                "values": ["apple", "cherry", "banana", 1]})
    return out


def _rappor() -> list[dict[str, Any]]:
    vals = ["a", "b", "a", "zzz", "a", "日本", "", "https://example.com/", "a"]
    return [{"config": campaign("rappor", **RAPPOR, epsilon=1.0), "values": vals},
            {"config": campaign("rappor-wide", oracle="rappor", bloom_bits=128, hashes=4,
                                cohorts=64, f=0.25, p=0.35, q=0.65, candidates=[], epsilon=1.0),
             "values": vals}]


def _heavy_hitters() -> list[dict[str, Any]]:
    vals = ["abc", "a", "", "abcd", "é", "abc", "zz", "abc", "b"]
    return [{"config": campaign("hh-4", "heavy_hitters", epsilon=2.0, oracle="olh", max_length=4,
                                levels=4, width=64), "values": vals},
            {"config": campaign("hh-bits", "heavy_hitters", epsilon=4.0, oracle="olh", max_length=5,
                                levels=3, width=8, pool_seed=7), "values": vals},
            {"config": campaign("lhh", "heavy_hitters", epsilon=1.0, oracle="olh", max_length=4,
                                levels=8, width=16, pool_size=64, memoize=True, epsilon_inf=3.0),
             "values": vals}]


def _ranges() -> list[dict[str, Any]]:
    out = []
    for method, eps, d, extra in (("haar", 1.0, 1024, {}), ("haar", 2.0, 7, {}),
                                  ("hierarchical", 1.0, 1024, {}),
                                  ("hierarchical", 3.0, 100, {"branching": 3}),
                                  ("hierarchical", 0.5, 64, {"branching": 16})):
        vals = [0, d - 1, d // 2, 1, 0, d - 1, d // 3, 5 % d, 0]
        cfg = campaign(f"range-{method}-{eps:g}-{d}", "range", epsilon=eps, domain_size=d,
                       method=method, **extra)
        out.append({"config": cfg, "values": vals})
        out.append({"config": {**cfg, "name": "l" + cfg["name"], "memoize": True,
                               "epsilon_inf": eps * 3}, "values": vals})
    return out


def _numeric() -> list[dict[str, Any]]:
    vals = [0.0, 3600.0, 1800.0, -5.0, 99999.0, 12.5, 3599.999, 0.001, 1800.0]
    out = []
    for mech, eps in (("duchi", 1.0), ("piecewise", 2.0), ("hybrid", 2.0), ("hybrid", 0.5),
                      ("piecewise", 0.3)):
        out.append({"config": campaign(f"num-{mech}-{eps:g}", "numeric", epsilon=eps, lower=0.0,
                                       upper=3600.0, mechanism=mech), "values": vals})
    out.append({"config": campaign("num-default", "numeric", epsilon=1.5, lower=-10, upper=10),
                "values": [0, -10, 10, 3.3, -2.5, 0, 7, 9.99, -9.99]})
    out.append({"config": campaign("num-1bit", "numeric", epsilon=1.0, lower=0.0, upper=4096.0,
                                   mechanism="1bitmean", memoize=True, buckets=16), "values": vals})
    out.append({"config": campaign("num-1bit-fresh", "numeric", epsilon=1.0, lower=0.0,
                                   upper=4096.0, mechanism="1bitmean", memoize=False),
                "values": vals})
    return out


ENCODE_CASES: list[dict[str, Any]] = _frequency() + _rappor() + _heavy_hitters() + _ranges() + _numeric()


def _bad(name: str, **cfg: Any) -> dict[str, Any]:
    return {"name": name, "version": 1, **cfg}


CONFIGS: list[dict[str, Any]] = [case["config"] for case in ENCODE_CASES] + [
    # over the SDK's max_epsilon (8 by default): per-report ε, lifetime ε∞, RAPPOR's ε∞
    _bad("eps9", kind="frequency", oracle="grr", epsilon=9.0, domain_size=4),
    _bad("epsinf9", kind="frequency", oracle="oue", epsilon=1.0, domain_size=4, memoize=True,
         epsilon_inf=9.0),
    _bad("rappor-inf", kind="frequency", oracle="rappor", bloom_bits=16, hashes=4, cohorts=4, f=0.1,
         p=0.3, q=0.7, candidates=[]),
    _bad("app-limit", kind="frequency", oracle="grr", epsilon=2.0, domain_size=4, _max_epsilon=1.5),
    _bad("hh-limit", kind="heavy_hitters", epsilon=3.0, max_length=4, _max_epsilon=2.0),
    _bad("num-limit", kind="numeric", epsilon=3.0, lower=0, upper=1, _max_epsilon=2.5),
    # malformed
    _bad("eps-zero", kind="frequency", oracle="grr", epsilon=0, domain_size=4),
    _bad("eps-neg", kind="frequency", oracle="grr", epsilon=-1.0, domain_size=4),
    _bad("eps-11", kind="frequency", oracle="grr", epsilon=11.0, domain_size=4),
    # degenerate (issue 24): below the ε floor, numeric bounds that overflow, RAPPOR's f ≈ 0 and
    # a vanishing (1 − f)(q − p)
    _bad("eps-tiny", kind="frequency", oracle="grr", epsilon=1e-17, domain_size=4),
    _bad("eps-floor", kind="frequency", oracle="oue", epsilon=0.0099, domain_size=4),
    _bad("num-wide", kind="numeric", epsilon=1.0, lower=-1e308, upper=1e308, mechanism="duchi"),
    _bad("num-huge", kind="numeric", epsilon=1.0, lower=0, upper=1e308, mechanism="piecewise"),
    _bad("num-narrow", kind="numeric", epsilon=1.0, lower=1e15, upper=1e15 + 0.5, mechanism="duchi"),
    _bad("rappor-f-tiny", kind="frequency", oracle="rappor", bloom_bits=1, hashes=1, cohorts=1, f=2.2e-311,
         p=0.25, q=0.5, candidates=[]),
    _bad("rappor-flat", kind="frequency", oracle="rappor", bloom_bits=16, hashes=2, cohorts=4, f=0.5,
         p=1e-9, q=1e-7, candidates=[]),
    _bad("eps-str", kind="frequency", oracle="grr", epsilon="1", domain_size=4),
    _bad("eps-bool", kind="frequency", oracle="grr", epsilon=True, domain_size=4),
    _bad("eps-null", kind="frequency", oracle="grr", epsilon=None, domain_size=4),
    _bad("d-1", kind="frequency", oracle="oue", epsilon=1.0, domain_size=1),
    _bad("d-big", kind="frequency", oracle="oue", epsilon=1.0, domain_size=(1 << 31) + 1),
    _bad("d-str", kind="frequency", oracle="olh", epsilon=1.0, domain_size="8"),
    _bad("d-missing", kind="frequency", oracle="olh", epsilon=1.0),
    _bad("oracle-bad", kind="frequency", oracle="sha", epsilon=1.0, domain_size=8),
    _bad("oracle-missing", kind="frequency", epsilon=1.0, domain_size=8),
    _bad("kind-bad", kind="sketch", epsilon=1.0, domain_size=8),
    _bad("memo-no-inf", kind="frequency", oracle="grr", epsilon=1.0, domain_size=8, memoize=True),
    _bad("memo-inf-low", kind="frequency", oracle="grr", epsilon=2.0, domain_size=8, memoize=True,
         epsilon_inf=2.0),
    _bad("memo-not-bool", kind="frequency", oracle="grr", epsilon=1.0, domain_size=8, memoize="yes",
         epsilon_inf=3.0),
    _bad("rappor-qp", kind="frequency", oracle="rappor", bloom_bits=16, hashes=2, cohorts=4, f=0.5,
         p=0.7, q=0.3, candidates=[]),
    _bad("rappor-f0", kind="frequency", oracle="rappor", bloom_bits=16, hashes=2, cohorts=4, f=0.0,
         p=0.3, q=0.7, candidates=[]),
    _bad("rappor-hashes", kind="frequency", oracle="rappor", bloom_bits=4, hashes=5, cohorts=4,
         f=0.5, p=0.3, q=0.7, candidates=[]),
    _bad("rappor-cohorts", kind="frequency", oracle="rappor", bloom_bits=16, hashes=2, cohorts=0,
         f=0.5, p=0.3, q=0.7, candidates=[]),
    _bad("rappor-missing", kind="frequency", oracle="rappor", bloom_bits=16, hashes=2, f=0.5, p=0.3,
         q=0.7, candidates=[]),
    _bad("rappor-cand", kind="frequency", oracle="rappor", bloom_bits=16, hashes=2, cohorts=4,
         f=0.5, p=0.3, q=0.7, candidates=["a", "a"]),
    _bad("hh-len", kind="heavy_hitters", epsilon=2.0, max_length=65),
    _bad("hh-levels", kind="heavy_hitters", epsilon=2.0, max_length=4, levels=1),
    _bad("hh-pool", kind="heavy_hitters", epsilon=2.0, max_length=4, pool_size=1 << 17),
    _bad("hh-state", kind="heavy_hitters", epsilon=2.0, max_length=64, levels=64, pool_size=1 << 16),
    _bad("hh-width", kind="heavy_hitters", epsilon=2.0, max_length=4, width=0),
    _bad("hh-seed", kind="heavy_hitters", epsilon=2.0, max_length=4, pool_seed=-1),
    _bad("hh-default", kind="heavy_hitters", epsilon=2.0, max_length=16),
    _bad("hh-long-levels", kind="heavy_hitters", epsilon=5.0, max_length=8, levels=8, width=64),
    _bad("range-method", kind="range", epsilon=1.0, domain_size=16, method="wavelet"),
    _bad("range-branch-haar", kind="range", epsilon=1.0, domain_size=16, method="haar", branching=4),
    _bad("range-branch-1", kind="range", epsilon=1.0, domain_size=16, method="hierarchical",
         branching=1),
    _bad("range-default", kind="range", epsilon=1.0, domain_size=1000),
    _bad("range-hier-default", kind="range", epsilon=2.0, domain_size=5000, method="hierarchical"),
    _bad("range-hier-eps", kind="range", epsilon=0.2, domain_size=300, method="hierarchical"),
    _bad("num-bounds", kind="numeric", epsilon=1.0, lower=5, upper=5),
    _bad("num-bound-str", kind="numeric", epsilon=1.0, lower="0", upper=5),
    _bad("num-mech", kind="numeric", epsilon=1.0, lower=0, upper=5, mechanism="laplace"),
    _bad("num-buckets", kind="numeric", epsilon=1.0, lower=0, upper=5, mechanism="1bitmean",
         buckets=0),
    _bad("num-memo-duchi", kind="numeric", epsilon=1.0, lower=0, upper=5, mechanism="duchi",
         memoize=True),
    _bad("num-default-low", kind="numeric", epsilon=0.4, lower=0, upper=5),
    _bad("num-default-high", kind="numeric", epsilon=4.0, lower=0, upper=5),
    _bad("num-1bit-memo-str", kind="numeric", epsilon=1.0, lower=0, upper=5, mechanism="1bitmean",
         memoize="true"),
]
