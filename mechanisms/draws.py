"""The random draws of a device's one-report encode, as a small interface (``Draws``), so that the
same encode can run on the OS's randomness (the SDK: ``SYSTEM_DRAWS``, exactly the calls the
encoders made before this interface existed: ``random.SystemRandom`` and ``os.urandom``) or on a
recorded sequence of draws (the cross-language test vectors of ``testvectors/``: another SDK fed
the same draws must produce the same report, bit for bit).

Four kinds of draw, each a primitive every language's SDK implements from its OS source:

- ``uniform()``: a double in [0, 1) (53 random bits);
- ``below(n)``: an integer uniform in [0, n) (n ≥ 1), unbiased;
- ``u32()``: an integer uniform in [0, 2^32);
- ``bytes(n)``: n uniform bytes.

``Recorder`` draws from a seeded numpy generator and keeps the tape (kind, value) of what the
encode consumed; ``Replay`` plays a tape back, refusing a draw of another kind or past its end.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ldptel.mechanisms.randomness import SYSTEM_RANDOM

KINDS = ("uniform", "below", "u32", "bytes")


class Draws(Protocol):
    """The randomness of one device's encode (see the module docstring)."""

    def uniform(self) -> float: ...

    def below(self, n: int) -> int: ...

    def u32(self) -> int: ...

    def bytes(self, n: int) -> bytes: ...


class SystemDraws:
    """OS randomness: ``rand`` (``random.SystemRandom``) for uniforms and integers, ``urandom``
    for bytes — the sources the device encoders used directly before ``Draws``."""

    def __init__(self, rand: random.Random = SYSTEM_RANDOM,
                 urandom: Callable[[int], bytes] = os.urandom) -> None:
        self.rand, self.urandom = rand, urandom

    def uniform(self) -> float:
        return self.rand.random()

    def below(self, n: int) -> int:
        return self.rand.randrange(n)

    def u32(self) -> int:
        return self.rand.getrandbits(32)

    def bytes(self, n: int) -> bytes:
        return self.urandom(n)


SYSTEM_DRAWS = SystemDraws()


class Recorder:
    """Draws from ``source`` (any ``Draws``; default: a seeded numpy generator) and records them:
    ``tape`` is the list of ``[kind, value]`` (bytes as hex) in the order consumed."""

    def __init__(self, seed: int | None = None, source: Draws | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self._source = source
        self.tape: list[list[Any]] = []

    def _keep(self, kind: str, value: Any) -> Any:
        self.tape.append([kind, value.hex() if isinstance(value, bytes) else value])
        return value

    def uniform(self) -> float:
        v = self._source.uniform() if self._source else float(self._rng.random())
        return float(self._keep("uniform", v))

    def below(self, n: int) -> int:
        v = self._source.below(n) if self._source else int(self._rng.integers(0, n))
        self.tape.append(["below", int(v), int(n)])
        return int(v)

    def u32(self) -> int:
        v = self._source.u32() if self._source else int(self._rng.integers(0, 1 << 32))
        return int(self._keep("u32", int(v)))

    def bytes(self, n: int) -> bytes:
        v = self._source.bytes(n) if self._source else self._rng.bytes(n)
        return bytes(self._keep("bytes", bytes(v)))


class TapeError(ValueError):
    """A replayed encode asked for a draw the tape does not hold (another kind, or past its end)."""


class Replay:
    """Plays back a ``Recorder.tape``; ``done`` says whether every draw was consumed."""

    def __init__(self, tape: Sequence[Sequence[Any]]) -> None:
        self.tape, self.pos = list(tape), 0

    def _next(self, kind: str) -> Sequence[Any]:
        if self.pos >= len(self.tape):
            raise TapeError(f"draw {self.pos} ({kind}) is past the end of the tape")
        entry = self.tape[self.pos]
        if entry[0] != kind:
            raise TapeError(f"draw {self.pos} is {entry[0]}, the encode asked for {kind}")
        self.pos += 1
        return entry

    @property
    def done(self) -> bool:
        return self.pos == len(self.tape)

    def uniform(self) -> float:
        return float(self._next("uniform")[1])

    def below(self, n: int) -> int:
        entry = self._next("below")
        if int(entry[2]) != n:
            raise TapeError(f"draw {self.pos - 1} is below({entry[2]}), the encode asked for below({n})")
        return int(entry[1])

    def u32(self) -> int:
        return int(self._next("u32")[1])

    def bytes(self, n: int) -> bytes:
        data = bytes.fromhex(self._next("bytes")[1])
        if len(data) != n:
            raise TapeError(f"draw {self.pos - 1} holds {len(data)} bytes, the encode asked for {n}")
        return data


__all__ = ["KINDS", "SYSTEM_DRAWS", "Draws", "Recorder", "Replay", "SystemDraws", "TapeError"]
