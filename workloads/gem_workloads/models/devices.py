"""Which device an entrypoint computes on, and the one place its results leave it.

Every entrypoint (ranking server, precompute workers, trainer, foundation pass, transfer
evaluation) resolves its device with :func:`resolve_device`: the ``--device`` flag, else
``$GEM_DEVICE``, else CUDA when present, else the CPU. The model and every input move there;
results come back through :func:`to_numpy` only, so the device tier of the tests (fake CUDA
tensors, ``tests/workloads/devices``) can run each entrypoint end to end and stub that one step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor, nn

DEVICE_ENV = "GEM_DEVICE"


class DeviceError(ValueError):
    """A device that cannot be used here (a typo, or CUDA on a machine without it)."""


def resolve_device(flag: str | None = None, env: Mapping[str, str] | None = None) -> torch.device:
    """``flag`` (``auto``/empty: not given) > ``$GEM_DEVICE`` > ``cuda`` when available > ``cpu``."""
    value = flag if flag and flag != "auto" else (os.environ if env is None else env).get(DEVICE_ENV, "")
    if not value or value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(value)
    except RuntimeError as exc:
        raise DeviceError(f"device {value!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"device {value!r}: this machine has no CUDA device (torch {torch.__version__})")
    return device


def module_device(module: nn.Module) -> torch.device | None:
    """The device of the module's first parameter or buffer (``None``: it holds none)."""
    for p in module.parameters():
        return p.device
    for b in module.buffers():
        return b.device
    return None


def same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` (the current device) are the same device; so are ``cpu`` and ``cpu:0``."""
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        current = torch.cuda.current_device() if a.type == "cuda" and torch.cuda.is_available() else 0
        return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)
    return a.index == b.index


def to_numpy(t: Tensor) -> npt.NDArray[np.float32]:
    """A result to the host (the only device-to-host copy of the scoring and pass paths)."""
    out: npt.NDArray[np.float32] = t.detach().float().cpu().numpy()
    return out


__all__ = ["DEVICE_ENV", "DeviceError", "module_device", "resolve_device", "same_device", "to_numpy"]
