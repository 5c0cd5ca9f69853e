"""Sealing the shuffler's fakes on every core.

One release of a ``shuffled-fakes`` campaign with shuffler fakes costs one HPKE seal per fake
(``sealing.seal``: a fresh X25519 key pair, a DH, HKDF, AES-GCM; ~60–95 µs), ~d·μ_s seals
(d = 1,024, μ_s ≈ 62: ~63,500, ~6 CPU-s). The library holds the GIL, so threads do not help.
``Sealer`` splits the rows into one contiguous chunk per process, seals the first in this process
and the others in a pool of ``processes`` − 1 processes meanwhile, and joins the messages in row
order: the same messages ``sealing.seal`` makes, each with its own fresh encapsulated key (drawn by
OpenSSL from OS randomness in whichever process seals it).

- ``[shuffler] fake_processes``: 0 (default) is every core this process may run on
  (``ldptel.process.processes_for``), 1 seals in this process, k uses k processes.
- Fewer than ``MIN_PARALLEL`` rows seal in this process (a pool round trip costs ~1 ms), so small
  releases and tests never start a pool.
- The pool starts (``forkserver``: a child inherits no Redis connection, thread or lock) with the
  first large release and lives until ``close`` (the shuffler's end, and ``atexit``). A child that
  dies breaks the pool: that release is sealed in this process and the next starts a new pool.
- ``submit`` seals without waiting (the shuffler's loop goes on reading and releasing other
  streams meanwhile): every chunk in the pool's ``processes`` − 1 children, this process free;
  ``Pending.result()`` joins them (a broken pool: sealed here then). With 1 process it seals at once.
- What crosses the pool's pipe: the analyzer's public key, the ``info`` and the fakes' plaintext
  rows (which the shuffler must keep from the aggregator: they stay on this host, in memory, as in
  this process); no file or log holds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from ldptel import sealing
from ldptel.process import HelperPool, chunk_bounds

MIN_PARALLEL = 2048  # rows: below this a release's fakes are sealed in this process


def _seal_chunk(rows: list[bytes], public: bytes, info: bytes) -> list[bytes]:
    """A child's work: ``sealing.seal`` on one chunk."""
    return sealing.seal(rows, sealing.load_public(public), info)


class Pending:
    """Fakes being sealed in the pool (``Sealer.submit``): ``done()`` without waiting,
    ``result()`` the messages in row order."""

    def __init__(self, sealer: Sealer, rows: list[bytes], public: X25519PublicKey, info: bytes,
                 futures: list[Future[list[bytes]]] | None, ready: list[bytes] | None = None) -> None:
        self._sealer, self._rows, self._public, self._info = sealer, rows, public, info
        self._futures, self._ready = futures or [], ready

    def done(self) -> bool:
        return self._ready is not None or all(f.done() for f in self._futures)

    def result(self) -> list[bytes]:
        if self._ready is None:
            try:
                out: list[bytes] = []
                for fut in self._futures:
                    out += fut.result()
                self._ready = out
            except (BrokenProcessPool, OSError):
                self._sealer.close()
                self._ready = sealing.seal(self._rows, self._public, self._info)
        return self._ready


class Sealer(HelperPool):
    """``sealing.seal`` over a pool of processes (module docstring)."""

    def seal(self, rows: Sequence[bytes], public: X25519PublicKey, info: bytes) -> list[bytes]:
        """``sealing.seal(rows, public, info)``, on every process for a large release."""
        if self.processes < 2 or len(rows) < MIN_PARALLEL:
            return sealing.seal(rows, public, info)
        raw = sealing.public_bytes(public)
        bounds = chunk_bounds(len(rows), self.processes)
        try:
            pool = self.started()
            futures = [pool.submit(_seal_chunk, list(rows[a:b]), raw, info) for a, b in bounds[1:]]
            a, b = bounds[0]  # this process seals the first chunk meanwhile (no pipe for it)
            out = sealing.seal(rows[a:b], public, info)
            for fut in futures:
                out += fut.result()
            return out
        except (BrokenProcessPool, OSError):
            self.close()
            return sealing.seal(rows, public, info)

    def submit(self, rows: Sequence[bytes], public: X25519PublicKey, info: bytes) -> Pending:
        """``seal(rows, public, info)`` started in the pool's children and not waited for (module
        docstring); sealed at once with 1 process or under ``MIN_PARALLEL`` rows."""
        rows = list(rows)
        if self.processes < 2 or len(rows) < MIN_PARALLEL:
            return Pending(self, rows, public, info, None, sealing.seal(rows, public, info))
        raw = sealing.public_bytes(public)
        try:
            pool = self.started()
            futures = [pool.submit(_seal_chunk, rows[a:b], raw, info)
                       for a, b in chunk_bounds(len(rows), self.processes - 1)]
        except (BrokenProcessPool, OSError):
            self.close()
            return Pending(self, rows, public, info, None, sealing.seal(rows, public, info))
        return Pending(self, rows, public, info, futures)



__all__ = ["MIN_PARALLEL", "Pending", "Sealer"]
