"""Decoder rows of ``bench/table.py``: OLH, OUE, Hadamard (ldptel's accumulator ``add_columns`` on
the mechanism's columns against the compiled floors of ``bench/floors.py``), RAPPOR's estimate
over 128 → 2,048 candidates, Haar and hierarchical range estimates with std errors, and the
kernels' speed-up on every core over one."""

from __future__ import annotations

import os

import floors
import numpy as np
from table import Row, Timed

from ldptel.aggregator.decoders import accumulator_for
from ldptel.mechanisms.hadamard import Hadamard
from ldptel.mechanisms.olh import OLH
from ldptel.mechanisms.range_haar import RangeHaar
from ldptel.mechanisms.range_hierarchical import RangeHierarchical
from ldptel.mechanisms.rappor import RAPPOR
from ldptel.mechanisms.unary import OUE

RNG_SEED = 27


def zipf_values(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    w = 1.0 / np.arange(1, d + 1) ** 1.1
    return rng.choice(d, size=n, p=w / w.sum())


def same(a: np.ndarray, b: np.ndarray) -> str:
    return "counts identical" if np.array_equal(np.asarray(a), np.asarray(b)) else "COUNTS DIFFER"


def olh(d: int, eps: float, n: int):
    def setup(quick: bool) -> Timed:
        m = n // 10 if quick else n
        rng = np.random.default_rng(RNG_SEED)
        mech = OLH(eps, d)
        cols = mech.columns(mech.encode_batch(zipf_values(m, d, rng), rng=rng))
        keys = mech.keys.astype(np.uint64)

        def ours() -> np.ndarray:
            acc = accumulator_for(mech)
            acc.add_columns(cols, m)
            return acc.state["support"]

        def floor() -> np.ndarray:
            return floors.olh_fused(cols["seeds"], cols["values"], mech.g, keys)

        return Timed(ours, floor, float(m) * d, lambda: same(ours(), floor()))
    return setup


def oue(d: int, n: int):
    def setup(quick: bool) -> Timed:
        m = n // 10 if quick else n
        rng = np.random.default_rng(RNG_SEED)
        mech = OUE(1.0, d)
        cols = mech.columns(mech.encode_batch(zipf_values(m, d, rng), rng=rng))

        def ours() -> np.ndarray:
            acc = accumulator_for(mech)
            acc.add_columns(cols, m)
            return acc.state["support"]

        def floor() -> np.ndarray:
            return floors.byte_lut(cols["bits"], floors.LANES)[:d]

        return Timed(ours, floor, float(m) * d, lambda: same(ours(), floor()))
    return setup


def hadamard(d: int, n: int, numpy_floor: bool = False):
    def setup(quick: bool) -> Timed:
        m = n // 10 if quick else n
        rng = np.random.default_rng(RNG_SEED)
        mech = Hadamard(1.0, d)
        cols = mech.columns(mech.encode_batch(zipf_values(m, d, rng), rng=rng))
        idx, signs = cols["indices"], cols["signs"]

        def ours() -> np.ndarray:
            acc = accumulator_for(mech)
            acc.add_columns(cols, m)
            return acc.state["signs"]

        def floor() -> np.ndarray:
            if numpy_floor:
                return floors.bincount_signed(idx, signs.astype(np.int64), mech.D)
            return floors.signed_histogram(idx, signs, mech.D)

        return Timed(ours, floor, float(m), lambda: same(ours(), floor()))
    return setup


RAPPOR_PARAMS = {"bloom_bits": 128, "hashes": 2, "cohorts": 64, "f": 0.5, "p": 0.5, "q": 0.75}


def rappor(candidates: int, n: int):
    def setup(quick: bool) -> Timed:
        m = n // 10 if quick else n
        rng = np.random.default_rng(RNG_SEED)
        mech = RAPPOR(**RAPPOR_PARAMS, candidates=[f"value-{i}" for i in range(candidates)])
        truth = zipf_values(m, candidates, rng)
        acc = accumulator_for(mech)
        acc.add(mech.encode_batch([f"value-{v}" for v in truth], rng=rng))
        return Timed(acc.estimate, None, 1.0)
    return setup


def rappor_selection(n: int):
    """google/rappor's 'typical' 8×128 case: v1..v1000 ~ Zipf(1), candidates the values not ending
    in 9 plus v1001..v1190 (1,090 > 1,024 equations); the state drawn from its exact distribution
    (per value a multinomial split over cohorts, then binomial ones per bit, as tests/gen_counts.R)."""
    def setup(quick: bool) -> Timed:
        m_n = n // 10 if quick else n
        rng = np.random.default_rng(RNG_SEED)
        names = [f"v{i}" for i in range(1, 1001)]
        pdf = 1.0 / np.arange(1, 1001)
        counts = rng.multinomial(m_n, pdf / pdf.sum())
        cands = [s for s in names if not s.endswith("9")] + [f"v{i}" for i in range(1001, 1191)]
        mech = RAPPOR(bloom_bits=8, hashes=2, cohorts=128, f=0.45, p=0.39, q=0.61, candidates=cands)
        per = np.stack([rng.multinomial(int(c), np.full(128, 1 / 128)) for c in counts])
        T = np.einsum("vm,vmk->mk", per, np.stack([mech.bloom_table(s) for s in names]).astype(np.int64))
        acc = accumulator_for(mech)
        acc.state["cohort_n"][:] = per.sum(axis=0)
        acc.state["ones"][:] = (rng.binomial(T, mech.q_star)
                                + rng.binomial(per.sum(axis=0)[:, None] - T, mech.p_star))
        acc.state["n"][0] = m_n

        def check() -> str:
            est = acc.estimate()
            truth = dict(zip(names, counts / m_n, strict=True))
            got = dict(zip(cands, est.normalized / m_n, strict=True))
            tv = 0.5 * sum(abs(truth.get(k, 0) - got.get(k, 0)) for k in set(truth) | set(got))
            top = set(names[i] for i in np.argsort(-counts)[:20])
            found = {cands[i] for i in np.argsort(-est.normalized)[:20] if est.normalized[i] > 0}
            return f"TV {tv:.3f}, top-20 recall {len(top & found) / 20:.2f}"

        return Timed(acc.estimate, None, 1.0, check)
    return setup


def haar(D: int, n: int, errors_only: bool):
    def setup(quick: bool) -> Timed:
        rng = np.random.default_rng(RNG_SEED)
        mech = RangeHaar(1.0, D)
        acc = accumulator_for(mech)
        acc.add(mech.encode_batch(zipf_values(n // 10 if quick else n, D, rng), rng=rng))
        est = acc.estimate()
        v = np.arange(D)
        lo = rng.integers(0, D // 2, 1000)
        hi = lo + rng.integers(0, D // 2, 1000)
        if not errors_only:
            return Timed(lambda: (acc.estimate().ranges(lo, hi)), None, 1.0)
        W2 = sum(4.0 ** -ell for ell in range(1, mech.h + 1))
        k2, nn, rho = mech.scale**2, float(acc.n), 1.0 / mech.D

        def floor() -> np.ndarray:
            c = np.clip(est.counts, 0, nn)
            return np.sqrt(np.maximum(nn * mech.h * k2 * W2 - c * (1 - rho) ** 2 - (nn - c) * rho**2, 0))

        def ours() -> np.ndarray:  # the per-value errors as the decoder computes them
            if hasattr(mech, "value_variance"):
                return np.sqrt(np.maximum(mech.value_variance(est.counts, acc.n), 0))
            return np.sqrt(np.maximum(mech.range_variance(v, v, est.counts, acc.n), 0))  # before

        def check() -> str:
            ok = np.allclose(ours(), floor(), rtol=1e-9)
            return "errors equal" if ok else "ERRORS DIFFER"

        return Timed(ours, floor, 1.0, check)
    return setup


def hierarchical(D: int, n: int):
    def setup(quick: bool) -> Timed:
        rng = np.random.default_rng(RNG_SEED)
        mech = RangeHierarchical(1.0, D)
        acc = accumulator_for(mech)
        acc.add(mech.encode_batch(zipf_values(n // 10 if quick else n, D, rng), rng=rng))
        lo = rng.integers(0, D // 2, 1000)
        hi = lo + rng.integers(0, D // 2, 1000)
        return Timed(lambda: acc.estimate().ranges(lo, hi), None, 1.0)
    return setup


def parallel(what: str):
    """The kernel on every core ÷ the kernel on one (``ldptel.mechanisms.kernels.set_threads``)."""
    def setup(quick: bool) -> Timed:
        from ldptel.mechanisms import kernels

        inner = olh(1024, 1.0, 100_000)(quick) if what == "olh" else oue(1024, 200_000)(quick)
        cores = len(os.sched_getaffinity(0))

        def on(threads: int):
            def run() -> object:
                kernels.set_threads(threads)
                try:
                    return inner.ldptel()
                finally:
                    kernels.set_threads(1)
            return run

        return Timed(on(cores), on(1), inner.units, lambda: same(on(cores)(), on(1)()))
    return setup


def opening(n: int):
    """HPKE open of one release on every core ÷ on one (``aggregator.opening.Opener``): the
    aggregator's bottleneck for shuffled campaigns (~40 µs a message on one core)."""
    def setup(quick: bool) -> Timed:
        from ldptel import sealing
        from ldptel.aggregator.opening import Opener

        m = n // 10 if quick else n
        key = sealing.new_private()
        info = sealing.info("bench", 1, 0, 1)
        messages = sealing.seal([i.to_bytes(4, "big") for i in range(m)], key.public_key(), info)
        every, one = Opener(0), Opener(1)
        every.open_each(messages[:4096], key, info, 4)  # the pool started before the clock

        def on(opener: Opener):
            return lambda: opener.open_each(messages, key, info, 4)

        return Timed(on(every), on(one), float(m),
                     lambda: "plaintexts identical" if on(every)() == on(one)() else "PLAINTEXTS DIFFER")
    return setup


ROWS = [
    Row("OLH decode, d = 1,024, ε = 1", "ns/pair", "fused compiled loop", "≤ 1.5×", olh(1024, 1.0, 100_000),
        "olh", "1.08 ns/pair, 11×"),
    Row("OLH decode, d = 1,024, ε = 4", "ns/pair", "fused compiled loop", "≤ 1.5×", olh(1024, 4.0, 100_000),
        "olh", "15×"),
    Row("OLH decode, d = 65,536, ε = 1", "ns/pair", "fused compiled loop", "≤ 1.5×", olh(65536, 1.0, 5_000),
        "olh"),
    Row("OUE decode, d = 1,024", "ns/bit", "byte → 8-lane table", "≤ 1.3×", oue(1024, 200_000), "oue",
        "0.083 ns/bit, 2.7×"),
    Row("OUE decode, d = 65,536", "ns/bit", "byte → 8-lane table", "≤ 1.3×", oue(65536, 4_000), "oue",
        "3.2×"),
    Row("Hadamard accumulate, D = 1,024", "ns/report", "compiled signed histogram", "≤ 1.5×",
        hadamard(1024, 1_000_000), "hadamard", "5.5 ns/report, 9.8×"),
    Row("Hadamard accumulate, D = 1,024", "ns/report", "numpy bincount of 2j + b", "(reference)",
        hadamard(1024, 1_000_000, numpy_floor=True), "hadamard", "2.6×"),
    *(Row(f"RAPPOR estimate, N = 10⁵, {c:,} candidates", "s", "—", "≤ 1 s at 2,048", rappor(c, 100_000),
          "rappor", {128: "0.036 s", 2048: "12.5 s"}.get(c, ""), repeats=1)
      for c in (128, 256, 512, 1024, 2048)),
    Row("RAPPOR estimate, 1,090 candidates > 1,024 equations (selection), N = 10⁷", "s", "—",
        "TV ≤ 0.30, recall ≥ 0.5", rappor_selection(10_000_000), "rappor", "TV 0.85, recall 0.07", repeats=1),
    Row("Haar range std errors of every value, D = 2²⁰", "ms", "closed form, numpy", "≈ 1×",
        haar(1 << 20, 1_000_000, True), "haar", "0.63–1.47 s/estimate"),
    Row("Haar range estimate + std errors + 1,000 ranges, D = 2²⁰", "ms", "—", "≤ 50 ms",
        haar(1 << 20, 1_000_000, False), "haar"),
    Row("hierarchical range estimate + std errors + 1,000 ranges, D = 2¹²", "ms", "—", "",
        hierarchical(1 << 12, 200_000), "hier"),
    Row("hierarchical range estimate + std errors + 1,000 ranges, D = 2²⁰", "ms", "—", "",
        hierarchical(1 << 20, 1_000_000), "hier20", rounds=3, repeats=1),
    Row("OLH d = 1,024: all cores ÷ one", "ns/pair", "same kernel, 1 thread", "speed-up", parallel("olh"),
        "parallel"),
    Row("OUE d = 1,024: all cores ÷ one", "ns/bit", "same kernel, 1 thread", "speed-up", parallel("oue"),
        "parallel"),
    Row("HPKE open of a release, 20,000 messages: all cores ÷ one", "ns/report", "same opener, 1 process",
        "≥ 1.7× on 2 cores", opening(20_000), "opening", rounds=3, repeats=1),
]
