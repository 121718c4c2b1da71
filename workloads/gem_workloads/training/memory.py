"""The LoopFM historical memory for training: each user's representations in time order, in files.

A vertical-model example of user ``u`` at time ``t`` reads the user's last ``K`` representations
written *strictly before* ``t`` (most recent last): never its own, never a later one, so no
future leaks into training or evaluation. The serving side keeps the same memory in Redis
(:mod:`gem_workloads.precompute.memory`).

File: ``memory.npz`` with ``user`` (int64), ``time`` (float64) and ``ref`` (int64: the row of
the representation in the foundation pass's ``loopfm.npy``), sorted by (user, time).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class HistoricalMemory:
    def __init__(self, user: IntArray, time: FloatArray, ref: IntArray) -> None:
        if not len(user) == len(time) == len(ref):
            raise ValueError(f"user, time and ref must have one entry each, got {len(user)}, {len(time)}, {len(ref)}")
        if len(time) and not np.isfinite(time).all():
            raise ValueError("time: every entry must be a finite number")
        order = np.lexsort((time, user))
        self.user = user[order].astype(np.int64)
        self.time = time[order].astype(np.float64)
        self.ref = ref[order].astype(np.int64)
        self._t0 = float(self.time.min()) if len(time) else 0.0
        self._span = max(float(self.time.max()) - self._t0, 1e-9) * 1.01 if len(time) else 1.0
        self._key = self._keys(self.user, self.time)

    def _keys(self, user: IntArray, time: FloatArray) -> FloatArray:
        # user + a fraction: stored times map into [0, 0.5), so one sorted key orders by (user, time);
        # a query time outside the stored range maps below / above all of that user's entries.
        frac = np.clip((time - self._t0) / self._span * 0.5, -0.4, 0.9)
        out: FloatArray = user.astype(np.float64) + frac
        return out

    def __len__(self) -> int:
        return len(self.ref)

    def query(self, users: IntArray, times: FloatArray, k: int) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        """``(ref [n, k], present [n, k])``: the last ``k`` refs of each user before each time
        (right-aligned, most recent last; ``-1`` where absent)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        end = np.searchsorted(self._key, self._keys(users, times), side="left")
        pos = end[:, None] - k + np.arange(k)[None, :]
        safe = np.clip(pos, 0, max(len(self.ref) - 1, 0))
        present = (pos >= 0) & (len(self.ref) > 0)
        if len(self.ref):
            present &= (self.user[safe] == users[:, None]) & (self.time[safe] < times[:, None])
        ref = np.where(present, self.ref[safe] if len(self.ref) else -1, -1).astype(np.int64)
        return ref, present

    def save(self, path: str | Path) -> None:
        np.savez(path, user=self.user, time=self.time, ref=self.ref)

    @classmethod
    def load(cls, path: str | Path) -> HistoricalMemory:
        with np.load(path) as f:
            return cls(f["user"], f["time"], f["ref"])
