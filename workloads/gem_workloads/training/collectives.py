"""Autograd-correct collectives for the model-parallel paths (context and expert parallelism).

Each forward collective has the backward its adjoint needs, written with the collectives that
gloo (CPU) and nccl (GPU) both provide, so the same code trains on CPU in CI and on GPUs:

* :func:`all_to_all` (variable splits) — its adjoint is the reverse all-to-all;
* :func:`gather_stack` (all-gather into a new leading dim) — its adjoint is a reduce-scatter,
  done as an all-to-all plus a local sum (gloo has no reduce_scatter);
* :func:`scale_grad` — identity forward, scaled gradient (compensates replicated computation).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed import ProcessGroup


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, out_splits: list[int], in_splits: list[int], group: ProcessGroup) -> Tensor:
        ctx.out_splits, ctx.in_splits, ctx.group = out_splits, in_splits, group
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        back = grad.new_empty((sum(ctx.in_splits), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), ctx.in_splits, ctx.out_splits, group=ctx.group)
        return back, None, None, None


def all_to_all(x: Tensor, out_splits: list[int], in_splits: list[int], group: ProcessGroup) -> Tensor:
    """Rows ``in_splits[j]`` of ``x`` go to rank ``j`` of ``group``; ``out_splits[j]`` rows come from it."""
    out: Tensor = _AllToAll.apply(x, out_splits, in_splits, group)  # type: ignore[no-untyped-call]
    return out


def exchange_counts(counts: Tensor, group: ProcessGroup) -> list[int]:
    """``counts[j]`` rows this rank sends to rank ``j`` -> how many rows each rank sends to this one."""
    recv = torch.empty_like(counts)
    dist.all_to_all_single(recv, counts.contiguous(), group=group)
    return [int(c) for c in recv.tolist()]


class _GatherStack(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, group: ProcessGroup) -> Tensor:
        ctx.group = group
        size = dist.get_world_size(group)
        out = x.new_empty((size, *x.shape))
        dist.all_gather(list(out.unbind(0)), x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        # Rank r's piece was used by every rank: its gradient is the sum of grad[r] over ranks.
        grad = grad.contiguous()  # autograd may hand over an expanded (stride-0) gradient
        parts = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device)
        dist.all_to_all_single(parts, grad, group=ctx.group)
        return parts.sum(0), None


def gather_stack(x: Tensor, group: ProcessGroup) -> Tensor:
    """``[world, *x.shape]``: every rank's ``x`` (same shape everywhere), rank order."""
    out: Tensor = _GatherStack.apply(x, group)  # type: ignore[no-untyped-call]
    return out


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, factor: float) -> Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.factor, None


def scale_grad(x: Tensor, factor: float) -> Tensor:
    """``x`` unchanged; the gradient flowing back through it is multiplied by ``factor``."""
    if factor == 1.0:
        return x
    out: Tensor = _ScaleGrad.apply(x, factor)  # type: ignore[no-untyped-call]
    return out
