"""Compiled decode kernels (numba), used by the aggregator's decoders; never imported by the SDK
(devices only encode, and ``tests/test_packaging.py`` checks that the client loads no numba).

One implementation per kernel, each compiled once per process from its on-disk cache
(``ldptel.mechanisms.kernels.compiled``: ``NUMBA_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/ldptel/numba``), releasing the GIL, and run over chunks of the reports on
``threads()`` threads where the work is large enough to pay (``parallel``):

- ``olh.olh_support``: C_v = #{i : H_seed_i(x_v) = y_i}, the OLH hash derived from each seed and
  tested against every item in one pass (counts identical to the numpy path it replaced);
- ``bits.column_ones``: ones per bit column of row-packed reports, per group (OUE/SUE: one group;
  RAPPOR: the cohorts), bit-sliced over 64-bit words;
- ``signed.signed_histogram``: A[j] = Σ_{i: j_i = j} ±1 (Hadamard response, Haar ranges);
- ``signed.fwht``: the unnormalized fast Walsh–Hadamard transform, in place.
"""

from __future__ import annotations

from ldptel.mechanisms.kernels.parallel import set_threads, threads

__all__ = ["set_threads", "threads"]
