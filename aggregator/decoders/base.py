"""Accumulators: mergeable, serializable sufficient statistics of a mechanism's reports.

Every state is a dict of numpy arrays that merge by addition, so partial states of several
workers (or shards) combine exactly; ``to_bytes``/``from_bytes`` use ``np.savez`` (no pickle).
"""

from __future__ import annotations

import io
import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ldptel.mechanisms.base import Mechanism, PureMechanism
from ldptel.mechanisms.estimates import FrequencyEstimate, MeanEstimate
from ldptel.proto import ReportBatch

FINGERPRINT_KEY = "_mechanism"


class Accumulator(ABC):
    mechanism_name: ClassVar[str]

    def __init__(self, mech: Mechanism) -> None:
        self.mech = mech
        self.state: dict[str, np.ndarray] = {"n": np.zeros(1, dtype=np.int64), **self.empty()}

    @abstractmethod
    def empty(self) -> dict[str, np.ndarray]:
        """Zero statistics (besides the report count ``n``)."""

    @abstractmethod
    def add_columns(self, columns: dict[str, Any], count: int) -> None:
        """Accumulate one batch given as the mechanism's numpy columns."""

    @abstractmethod
    def estimate(self) -> FrequencyEstimate | MeanEstimate:
        """Raw unbiased counts, exact-variance std errors and Norm-Sub counts (numeric
        campaigns: the mean with its std error)."""

    @property
    def n(self) -> int:
        return int(self.state["n"][0])

    def add(self, batch: ReportBatch) -> None:
        self.add_columns(self.mech.columns(batch), batch.count)
        self.state["n"][0] += batch.count

    def fingerprint(self) -> str:
        """The mechanism's parameters (``public_params``) as canonical JSON: states made with
        different parameters (a changed ε or domain) must never be merged or decoded together."""
        return json.dumps(self.mech.public_params(), sort_keys=True, default=str)

    def check_compatible(self, other_fingerprint: str) -> None:
        if other_fingerprint != self.fingerprint():
            raise ValueError(f"state was made with {other_fingerprint}, but the mechanism is now "
                             f"{self.fingerprint()}: a campaign whose parameters change needs a new name")

    def merge(self, other: Accumulator) -> Accumulator:
        if type(other) is not type(self):
            raise ValueError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        self.check_compatible(other.fingerprint())
        for key, value in other.state.items():
            if self.state[key].shape != value.shape:
                raise ValueError(f"state {key!r} shapes differ: {self.state[key].shape} vs {value.shape}")
            self.state[key] = self.state[key] + value
        return self

    def blank(self) -> Accumulator:
        """An empty accumulator of the same mechanism (and, for cells, the same cells)."""
        return type(self)(self.mech)

    def load(self, data: bytes) -> Accumulator:
        """``to_bytes`` of an accumulator like this one back into an object (``from_bytes``)."""
        return type(self).from_bytes(self.mech, data)

    def stored_nbytes(self) -> int:
        """About the size of ``to_bytes`` (what the store's size-tiered folding compares)."""
        return sum(a.nbytes for a in self.state.values())

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        stamp = np.frombuffer(self.fingerprint().encode(), dtype=np.uint8)
        # Any: numpy's stubs would match a str-keyed dict of arrays against savez's allow_pickle
        arrays: dict[str, Any] = {**self.state, FINGERPRINT_KEY: stamp}
        np.savez(buf, **arrays)
        return buf.getvalue()

    def check_stored(self, stored) -> None:
        """Refuse a loaded ``np.load`` archive saved under other mechanism parameters (states
        saved before fingerprints existed carry none and are accepted)."""
        if FINGERPRINT_KEY in stored:
            self.check_compatible(stored[FINGERPRINT_KEY].tobytes().decode())

    @classmethod
    def from_bytes(cls, mech: Mechanism, data: bytes) -> Accumulator:
        acc = cls(mech)
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            acc.check_stored(stored)
            for key in acc.state:
                if key not in stored or stored[key].shape != acc.state[key].shape:
                    raise ValueError(f"stored state does not match {mech!r} (key {key!r})")
                acc.state[key] = stored[key].copy()
        return acc


class PureAccumulator(Accumulator):
    """Pure protocols: the support counts C_v are sufficient; Ĉ_v = (C_v − Nq)/(p − q)."""

    mech: PureMechanism

    def empty(self) -> dict[str, np.ndarray]:
        return {"support": np.zeros(self.mech.domain_size, dtype=np.int64)}

    def estimate(self) -> FrequencyEstimate:
        n = self.n
        counts = self.mech.unbiased_counts(self.state["support"], n)
        se = np.sqrt(self.mech.count_variance(counts, n))
        return FrequencyEstimate(n=n, counts=counts, std_error=se)
