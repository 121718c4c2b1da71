"""An emulated accelerator for the ranking server (``--device emulated:h200``): a test double, named so.

On a CPU-only machine, replicas that compute on the CPU slow each other down, so adding replicas
adds no capacity and an autoscaler cannot be judged. The emulated device keeps the real request
path (parsing, dynamic batching, the real model on a small preset, real scores) and then *holds*
each batch until the time a GPU replica would need for it has passed, taken from a profile. The
batcher's single scoring thread plus a lock make it one batch at a time per device, as on a GPU.
This is what llm-d's inference simulator does for vLLM, for the same reason.

Profile file (JSON; ``profiles/h200.json`` is the shipped default, ``bench/serving_gpu_p99.py
--write-device-profile FILE`` writes a measured one on a GPU)::

    {"device": "h200",
     "description": "...",
     "seq_len":    [L0, L1, ...],            # ascending
     "candidates": [N0, N1, ...],            # ascending, candidates in one batch
     "seconds":    [[t(L0,N0), t(L0,N1), ...], [t(L1,N0), ...], ...],
     "per_extra_request_seconds": [u(L0), u(L1), ...]}   # user encoding of each further request

Seconds per batch = bilinear interpolation of ``seconds`` at (sequence length, candidates in the
batch) + (requests - 1) x ``per_extra_request_seconds`` at that length. Beyond the last candidate
column the time grows along the last segment's slope (a larger batch costs more, never less); the
sequence length is clamped to the grid. ``--device-time-scale X`` multiplies every time: it
emulates a device X times slower than the profile (reported on /metrics, never hidden).

The device counts its busy seconds (``gem_emulated_device_busy_seconds_total``): the node's
dcgm-exporter-compatible endpoint of the embedded cluster turns their rate into
``DCGM_FI_PROF_SM_ACTIVE``.
"""

from __future__ import annotations

import importlib.resources
import itertools
import json
import math
import threading
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge

from ..scoring.engine import Engine
from ..scoring.request import RankRequest

EMULATED_PREFIX = "emulated:"


class DeviceProfileError(ValueError):
    """A device profile is unusable; the message names the file, the key and the fix."""


def _axis(raw: Any, key: str, where: str) -> list[float]:
    if not isinstance(raw, list) or not raw or not all(_number(v) and v >= 0 for v in raw):
        raise DeviceProfileError(f"{where}: {key} must be a non-empty list of numbers >= 0")
    values = [float(v) for v in raw]
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise DeviceProfileError(f"{where}: {key} must increase strictly")
    return values


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _lerp(xs: Sequence[float], ys: Sequence[float], x: float, extrapolate: bool) -> float:
    if len(xs) == 1:
        return ys[0] * (x / xs[0] if extrapolate and xs[0] > 0 else 1.0)
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1] and not extrapolate:
        return ys[-1]
    i = min(max(bisect_right(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class DeviceProfile:
    """Seconds per batch of a GPU replica; see the module docstring for the file format."""

    device: str
    seq_len: tuple[float, ...]
    candidates: tuple[float, ...]
    seconds: tuple[tuple[float, ...], ...]
    per_extra_request_seconds: tuple[float, ...]
    description: str = ""
    source: str = "profile"

    @classmethod
    def from_mapping(cls, raw: Any, where: str = "profile") -> DeviceProfile:
        if not isinstance(raw, dict):
            raise DeviceProfileError(f"{where}: a device profile is a JSON object (see gem_workloads.serving.device)")
        known = {"device", "description", "seq_len", "candidates", "seconds", "per_extra_request_seconds", "measured"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise DeviceProfileError(f"{where}: unknown keys {unknown}; known keys are {sorted(known)}")
        lens = _axis(raw.get("seq_len"), "seq_len", where)
        cands = _axis(raw.get("candidates"), "candidates", where)
        table = raw.get("seconds")
        if not isinstance(table, list) or len(table) != len(lens):
            raise DeviceProfileError(f"{where}: seconds must have one row per seq_len entry ({len(lens)} rows)")
        rows = []
        for i, row in enumerate(table):
            if not isinstance(row, list) or len(row) != len(cands) or not all(_number(v) and v > 0 for v in row):
                raise DeviceProfileError(
                    f"{where}: seconds[{i}] must be {len(cands)} positive numbers (one per candidates entry)"
                )
            rows.append(tuple(float(v) for v in row))
        extra = raw.get("per_extra_request_seconds", [0.0] * len(lens))
        if not isinstance(extra, list) or len(extra) != len(lens) or not all(_number(v) and v >= 0 for v in extra):
            raise DeviceProfileError(f"{where}: per_extra_request_seconds must be {len(lens)} numbers >= 0")
        device = raw.get("device", "gpu")
        if not isinstance(device, str) or not device:
            raise DeviceProfileError(f"{where}: device must be a non-empty string such as 'h200'")
        return cls(
            device=device,
            seq_len=tuple(lens),
            candidates=tuple(cands),
            seconds=tuple(rows),
            per_extra_request_seconds=tuple(float(v) for v in extra),
            description=str(raw.get("description", "")),
            source=where,
        )

    @classmethod
    def load(cls, path: str | Path) -> DeviceProfile:
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except OSError as exc:
            raise DeviceProfileError(f"{p}: cannot read device profile: {exc.strerror or exc}") from exc
        except json.JSONDecodeError as exc:
            raise DeviceProfileError(f"{p}: line {exc.lineno}: not JSON: {exc.msg}") from exc
        except RecursionError:  # json's decoder recurses per level
            raise DeviceProfileError(f"{p}: not JSON: nested too deeply") from None
        return cls.from_mapping(raw, str(p))

    @classmethod
    def builtin(cls, name: str) -> DeviceProfile:
        """A profile shipped as package data (``profiles/NAME.json``)."""
        files = importlib.resources.files("gem_workloads.serving").joinpath("profiles")
        entry = files.joinpath(f"{name}.json")
        if not entry.is_file():
            shipped = sorted(p.name.removesuffix(".json") for p in files.iterdir() if p.name.endswith(".json"))
            raise DeviceProfileError(
                f"--device emulated:{name}: no built-in profile {name!r}; built-in: {shipped}, "
                "or pass --device-profile FILE"
            )
        return cls.from_mapping(json.loads(entry.read_text()), f"builtin:{name}")

    def batch_seconds(self, candidates: int, seq_len: int, requests: int = 1) -> float:
        """Device seconds for one batch (see the module docstring)."""
        lens = self.seq_len
        per_len = [_lerp(self.candidates, row, float(candidates), extrapolate=True) for row in self.seconds]
        base = _lerp(lens, per_len, float(seq_len), extrapolate=False)
        extra = _lerp(lens, self.per_extra_request_seconds, float(seq_len), extrapolate=False)
        return max(base + max(requests - 1, 0) * extra, 0.0)


class EmulatedDevice:
    """One emulated GPU: holds batches for their profiled time, one at a time, and counts busy time."""

    def __init__(
        self,
        profile: DeviceProfile,
        time_scale: float = 1.0,
        registry: CollectorRegistry | None = None,
        sleep: Any = time.sleep,
    ) -> None:
        if not (math.isfinite(time_scale) and time_scale > 0):
            raise DeviceProfileError(f"--device-time-scale must be a positive number, got {time_scale!r}")
        self.profile, self.time_scale = profile, time_scale
        self._lock = threading.Lock()
        self._sleep = sleep
        self.busy_seconds = 0.0
        self.batches = 0
        registry = registry or CollectorRegistry()
        self._busy = Counter(
            "gem_emulated_device_busy_seconds",
            "Seconds the emulated accelerator spent holding batches (a test double, not a GPU).",
            registry=registry,
        )
        self._overrun = Counter(
            "gem_emulated_device_overrun_seconds",
            "Seconds by which the real CPU compute exceeded the profiled device time.",
            registry=registry,
        )
        info = Gauge(
            "gem_emulated_device_info",
            "The emulated accelerator of this server (1): profile, device and time scale.",
            ["device", "profile", "time_scale"],
            registry=registry,
        )
        info.labels(profile.device, profile.source, f"{time_scale:g}").set(1)

    @property
    def name(self) -> str:
        return f"emulated:{self.profile.device}"

    def service_seconds(self, requests: Sequence[RankRequest]) -> float:
        candidates = sum(r.num_candidates for r in requests)
        seq = max((len(next(iter(r.sequence.values()), ())) for r in requests), default=0)
        return self.time_scale * self.profile.batch_seconds(candidates, seq, len(requests))

    def hold(self, requests: Sequence[RankRequest], started: float) -> float:
        """Block until the batch begun at ``started`` (perf_counter) has had its device time.

        Returns the seconds the device was busy with it (its profiled time, or the real compute
        time when that was longer; the overrun is counted so a too-heavy preset is visible)."""
        want = self.service_seconds(requests)
        elapsed = time.perf_counter() - started
        if elapsed < want:
            self._sleep(want - elapsed)
        else:
            self._overrun.inc(elapsed - want)
        busy = max(want, elapsed)
        self.busy_seconds += busy
        self.batches += 1
        self._busy.inc(busy)
        return busy


@dataclass
class EmulatedEngine(Engine):
    """An `Engine` whose batches run the real model, then wait out the emulated device's time."""

    emulated: EmulatedDevice | None = field(default=None)

    def score(self, requests: list[RankRequest], share: bool) -> list[npt.NDArray[np.float32]]:
        if self.emulated is None:
            return super().score(requests, share)
        with self.emulated._lock:  # one batch at a time per emulated device
            started = time.perf_counter()
            out = super().score(requests, share)
            self.emulated.hold(requests, started)
        return out


def parse_device(
    value: str, profile_path: str | None, time_scale: float, registry: CollectorRegistry
) -> EmulatedDevice:
    """``emulated:NAME`` -> the device (profile from ``profile_path`` or the built-in ``NAME``)."""
    if not value.startswith(EMULATED_PREFIX):
        raise DeviceProfileError(
            f"--device {value!r}: an emulated device is spelled emulated:NAME (e.g. emulated:h200)"
        )
    name = value[len(EMULATED_PREFIX) :]
    if not name:
        raise DeviceProfileError("--device emulated: needs a name, e.g. emulated:h200")
    profile = DeviceProfile.load(profile_path) if profile_path else DeviceProfile.builtin(name)
    return EmulatedDevice(profile, time_scale, registry)


__all__ = [
    "DeviceProfile",
    "DeviceProfileError",
    "EmulatedDevice",
    "EmulatedEngine",
    "parse_device",
]
