"""Grouped compute over per-expert and per-task parameters: one batched matmul instead of a Python loop.

The per-domain experts of the MoE interaction and the task heads keep their per-module parameters
(``experts.{i}.mlp.0.weight``, ``heads.{t}.0.weight``, ...): checkpoints, FSDP units, tensor and
expert parallelism see the same modules as before. What changes is how they run:

* with gradients (training) the parameters are stacked per call (``torch.stack`` is
  differentiable, so every expert's parameter gets its own gradient); the copy is one set of
  weights, small beside a training batch;
* without gradients (serving, precompute, evaluation) the parameters are *packed* once: one
  ``[E, ...]`` tensor is allocated and every module's parameter becomes a view of its row, so the
  stack costs nothing per request, the weights are held once, and ``load_state_dict`` (an
  in-place copy) keeps the pack current. Moving the model (``.to``) or sharding it replaces the
  parameters; the views are checked on every call and the pack is rebuilt when they broke.

Parameters that are DTensors (tensor-parallel shards) are not stacked: callers keep their loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.tensor import DTensor


def stackable(params: Sequence[Tensor]) -> bool:
    """Plain tensors of one device and dtype (not tensor-parallel shards): they can be stacked."""
    if not params or any(isinstance(p, DTensor) for p in params):
        return False
    first = params[0]
    return all(p.device == first.device and p.dtype == first.dtype and p.shape == first.shape for p in params)


def _views_intact(stack: Tensor, params: Sequence[Tensor]) -> bool:
    if stack.device != params[0].device or stack.dtype != params[0].dtype or stack.shape[0] != len(params):
        return False
    # The storage object itself (not its data pointer, which fake tensors of the device tests lack).
    base = stack.untyped_storage()._cdata
    step = stack.stride(0)
    return all(
        p.untyped_storage()._cdata == base and p.storage_offset() == stack.storage_offset() + i * step
        for i, p in enumerate(params)
    )


def stacked(owner: nn.Module, key: str, params: Sequence[Tensor]) -> Tensor:
    """``[len(params), ...]``: a differentiable stack while training, else the packed parameters (no copy)."""
    if torch.is_grad_enabled() and any(p.requires_grad for p in params):
        return torch.stack(list(params))
    packs: dict[str, Tensor] = owner.__dict__.setdefault("_packed_parameters", {})
    stack = packs.get(key)
    if stack is not None and _views_intact(stack, params):
        return stack
    # Outside inference mode: the pack becomes the parameters' storage, which training may use later.
    with torch.inference_mode(False), torch.no_grad():
        stack = torch.stack([p.detach() for p in params])
        for i, p in enumerate(params):
            p.data = stack[i]
    packs[key] = stack
    return stack


def group_rows(group: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor, int]:
    """Where each row goes in a ``[num_groups, cap, ...]`` padded layout.

    Returns ``(order, group_of_sorted, slot_of_sorted, cap)``: rows ``order`` sorted by group,
    the group and the slot of each sorted row, and the largest group's size. ``cap`` is a host
    value (one device sync, as the loop's ``nonzero`` per expert was).
    """
    counts = torch.bincount(group, minlength=num_groups)
    order = torch.argsort(group, stable=True)
    sorted_group = group.index_select(0, order)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(group.shape[0], device=group.device) - starts.index_select(0, sorted_group)
    cap = cast(int, counts.max().item()) if group.shape[0] else 0
    return order, sorted_group, slot, cap


def grouped_mlp(
    z: Tensor,
    group: Tensor,
    norm: tuple[Tensor, Tensor, float],
    first: tuple[Tensor, Tensor],
    second: tuple[Tensor, Tensor],
) -> Tensor:
    """Per-row ``Linear(GELU(Linear(LayerNorm(z))))`` with the weights of group ``group[i]``, as two bmm.

    ``z [B, K]``; ``norm``: stacked LayerNorm ``(weight [E, K], bias [E, K], eps)``; ``first``:
    ``(weight [E, H, K], bias [E, H])``; ``second``: ``(weight [E, O, H], bias [E, O])``. Rows are
    placed in ``[E, cap, K]`` (``cap`` = the largest group), so a batch whose rows fall unevenly
    on the groups computes ``E * cap`` rows (padding included) for ``B`` useful ones.
    """
    (nw, nb, eps), (w1, b1), (w2, b2) = norm, first, second
    num_groups, k = nw.shape
    order, sorted_group, slot, cap = group_rows(group, num_groups)
    padded = z.new_zeros(num_groups, cap, k)
    padded[sorted_group, slot] = z.index_select(0, order)
    h = F.layer_norm(padded, (k,), eps=eps) * nw[:, None, :] + nb[:, None, :]
    h = F.gelu(torch.bmm(h, w1.transpose(1, 2)) + b1[:, None, :])
    o = torch.bmm(h, w2.transpose(1, 2)) + b2[:, None, :]
    out = o.new_empty(z.shape[0], o.shape[-1])
    out[order] = o[sorted_group, slot]
    return out


class GroupedHeads:
    """The task heads' two layers as one matmul and one batched dot (see :class:`~.common.TaskHeads`)."""

    def __init__(self, owner: nn.Module, heads: nn.ModuleList) -> None:
        self.owner, self.heads = owner, heads

    def params(self, layer: int, name: str) -> list[Tensor]:
        return [h.get_parameter(f"{layer}.{name}") for h in self.heads]

    def available(self) -> bool:
        return stackable(self.params(0, "weight")) and stackable(self.params(2, "weight"))

    def weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``W1 [T*H, in]``, ``b1 [T*H]``, ``W2 [T, H]``, ``b2 [T]`` (views of the packed parameters)."""
        w1 = stacked(self.owner, "w1", self.params(0, "weight"))
        b1 = stacked(self.owner, "b1", self.params(0, "bias"))
        w2 = stacked(self.owner, "w2", self.params(2, "weight"))
        b2 = stacked(self.owner, "b2", self.params(2, "bias"))
        return w1.flatten(0, 1), b1.flatten(), w2[:, 0], b2[:, 0]

    def finish(self, hidden: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
        """``ReLU(hidden [N, T*H])`` -> logits ``[N, T]``."""
        h = F.relu(hidden).view(hidden.shape[0], w2.shape[0], w2.shape[1])
        return torch.einsum("nth,th->nt", h, w2) + b2


__all__ = ["GroupedHeads", "group_rows", "grouped_mlp", "stackable", "stacked"]
