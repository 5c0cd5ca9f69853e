"""Opening a release's sealed messages on every core.

HPKE open (``sealing.open_keyed``) costs ~40 µs a message and is the aggregator's bottleneck for
campaigns in a shuffled mode; the library holds the GIL, so threads do not help. ``Opener`` splits
a large release into one contiguous chunk per process, opens the first in this process and the
others in a pool of ``processes`` − 1 processes meanwhile, then joins the plaintexts in message
order: the result is exactly ``sealing.open_keyed``'s.

- ``[analyzer] open_processes``: 0 (default) is every core this process may run on
  (``os.sched_getaffinity``), 1 opens in this process, k uses k processes.
- A release of fewer than ``MIN_PARALLEL`` messages opens in this process (a pool round trip
  costs ~1 ms, more than 25 messages' worth), so small deployments and tests never start a pool.
- The pool starts (``forkserver``: a child inherits no Redis connection, thread or lock) with the
  first large release and lives until ``close`` (the worker's end, and ``atexit``). A child that
  dies breaks the pool: that release opens in this process and the next one starts a new pool.
- The private keys reach a child as their raw 32 bytes over the pool's pipe: it stays on this host,
  in memory, as in this process; no file or log holds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from ldptel import sealing
from ldptel.process import HelperPool, chunk_bounds

MIN_PARALLEL = 2048  # messages: below this a release opens in this process


def _open_chunk(private: dict[int, bytes], infos: dict[int, bytes], width: int, messages: list[bytes],
                key_ids: list[int]) -> list[bytes | None]:
    """A child's work: ``sealing.open_keyed`` on one chunk."""
    keys = {kid: sealing.load_private(raw) for kid, raw in private.items()}
    return sealing.open_keyed(messages, key_ids, keys, infos, width)


class Opener(HelperPool):
    """``sealing.open_keyed`` over a pool of processes (module docstring)."""

    def open_keyed(self, messages: Sequence[bytes], key_ids: Sequence[int],
                   private: Mapping[int, X25519PrivateKey], infos: Mapping[int, bytes],
                   width: int) -> list[bytes | None]:
        """``sealing.open_keyed(messages, key_ids, private, infos, width)``, on every process for a
        large release."""
        if self.processes < 2 or len(messages) < MIN_PARALLEL:
            return sealing.open_keyed(messages, key_ids, private, infos, width)
        needed = set(key_ids)
        raw = {kid: sealing.private_bytes(key) for kid, key in private.items() if kid in needed}
        info = {kid: v for kid, v in infos.items() if kid in needed}
        bounds = chunk_bounds(len(messages), self.processes)
        try:
            pool = self.started()
            futures = [pool.submit(_open_chunk, raw, info, width, list(messages[a:b]), list(key_ids[a:b]))
                       for a, b in bounds[1:]]
            a, b = bounds[0]  # this process opens the first chunk meanwhile (no pipe for it)
            out: list[bytes | None] = sealing.open_keyed(messages[a:b], key_ids[a:b], private, infos, width)
            for fut in futures:
                out += fut.result()
            return out
        except (BrokenProcessPool, OSError):
            self.close()
            return sealing.open_keyed(messages, key_ids, private, infos, width)

    def open_each(self, messages: Sequence[bytes], private: X25519PrivateKey, info: bytes,
                  width: int) -> list[bytes | None]:
        """``open_keyed`` of messages all sealed to one key."""
        return self.open_keyed(messages, [0] * len(messages), {0: private}, {0: info}, width)



__all__ = ["MIN_PARALLEL", "Opener"]
