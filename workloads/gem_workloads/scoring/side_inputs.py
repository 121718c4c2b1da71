"""The vertical model's knowledge-transfer inputs at request time, and scoring with them.

Per request (filled from the embedding store by
:class:`~gem_workloads.serving.lookups.PrecomputedLookups` before the request is scored): the
user's LoopFM memory (last ``K`` foundation representations written before now) and, per
candidate, the Solaris embedding with the tier that served it. In a dynamic
batch they are stacked like the features: one memory row per user row (per candidate without
sharing), one embedding row per candidate. A request without side inputs (no store configured,
store unreachable) scores with an empty memory and tier ``none``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..models.vertical import NONE_TIER_INDEX, TransferInputs, VerticalModel

F32 = npt.NDArray[np.float32]


def _join(parts: Sequence[npt.NDArray[Any]]) -> torch.Tensor:
    """One tensor over the parts, without a copy for a batch of one request (the common case)."""
    return torch.from_numpy(np.ascontiguousarray(parts[0]) if len(parts) == 1 else np.concatenate(parts))


@dataclass
class SideInputs:
    memory: F32 | None = None  # [K, memory_width]
    memory_mask: npt.NDArray[np.bool_] | None = None  # [K]
    solaris: F32 | None = None  # [n, solaris_width]
    tier: npt.NDArray[np.int64] | None = None  # [n]


def batch_side_inputs(
    model: VerticalModel, sides: Sequence[SideInputs | None], counts: Sequence[int], share: bool, device: torch.device
) -> TransferInputs:
    """Stack the side inputs of a batch's requests (``counts``: candidates per request)."""
    cfg = model.config
    out = TransferInputs()
    if model.takes_memory:
        mems, masks = [], []
        for side, n in zip(sides, counts, strict=True):
            reps = 1 if share else n
            if side is None or side.memory is None or side.memory_mask is None:
                mem, mask = np.zeros((cfg.memory_len, cfg.memory_width), np.float32), np.zeros(cfg.memory_len, bool)
            else:
                mem, mask = side.memory, side.memory_mask
            mems.append(mem[None] if reps == 1 else np.repeat(mem[None], reps, axis=0))
            masks.append(mask[None] if reps == 1 else np.repeat(mask[None], reps, axis=0))
        out.memory = _join(mems).to(device)
        out.memory_mask = _join(masks).to(device)
    if model.takes_solaris:
        embs, tiers = [], []
        for side, n in zip(sides, counts, strict=True):
            if side is None or side.solaris is None or side.tier is None:
                embs.append(np.zeros((n, cfg.solaris_width), np.float32))
                tiers.append(np.full(n, NONE_TIER_INDEX, np.int64))
            else:
                embs.append(side.solaris)
                tiers.append(side.tier)
        out.solaris = _join(embs).to(device)
        out.tier = _join(tiers).to(device)
    return out
