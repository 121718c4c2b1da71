"""Context parallelism (``cp``) for the Kunlun-style model's behaviour sequence.

The ``cp`` ranks of a group share one batch. Each user's sequence positions ``0 .. seq_len - 1``
are cut into ``cp`` equal runs of whole attention blocks and rank ``c`` keeps the events of run
``c`` (packed, :meth:`~gem_workloads.models.sequence.PackedSequence.window`):

* block attention only attends inside a block, so it runs on the local blocks with no
  communication at all;
* summarisation (learned seeds attending to the *whole* sequence) is a softmax over all keys.
  Each rank attends to its local keys and keeps the log-sum-exp of its scores; the ranks
  all-gather the per-seed partial outputs and log-sum-exps (``S`` rows per example, not the
  sequence) and combine them exactly: ``out = sum_c exp(lse_c - logsumexp_c(lse_c)) * out_c``.
  The learned null token is attended on rank 0 only, so it is counted once;
* the per-example part after the sequence (MoE interaction, heads, loss) would be identical on
  every cp rank, so instead each rank takes ``1/cp`` of the examples (:func:`rows`). The summary
  is identical on all cp ranks after the combine, so slicing it is free, and the gather's
  backward sums each rank's partial gradient back to the keys that produced it.

Loss scaling that keeps gradients exact is done by the trainer (see ``trainer.py``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed import ProcessGroup

from ..models.kunlun import Summariser
from ..models.sequence import PackedSequence
from .collectives import gather_stack


def rows(t: Tensor, rank: int, size: int) -> Tensor:
    """This cp rank's contiguous ``1/size`` of the examples (dim 0)."""
    if size == 1:
        return t
    n = t.shape[0] // size
    return t[rank * n : (rank + 1) * n]


class ContextParallelSummariser(Summariser):
    """:class:`Summariser` over a sequence sharded across a cp group (same parameters, same FQNs).

    Installed by :func:`enable_context_parallel`, which swaps the class of existing summarisers
    (as FSDP2's ``fully_shard`` does) so state-dict names and initialisation stay those of the model.
    """

    cp_group: ProcessGroup
    cp_rank: int

    def forward(self, h: Tensor, layout: Tensor | PackedSequence) -> Tensor:
        if isinstance(layout, PackedSequence):
            # Every rank holds the null key; only rank 0 lets it be attended (see below).
            lse, part = self.attend_packed(h, layout, null_visible=self.cp_rank == 0)
            return self.combine(part, lse)
        valid = layout
        b, _, d = h.shape
        # Every rank has the null key (so every rank gets a gradient for it, which FSDP needs
        # to reduce the same tensors everywhere) but only rank 0 lets it be attended.
        x = torch.cat([self.null.expand(b, 1, d), self.norm(h)], dim=1)
        null_keep = torch.full((b, 1), self.cp_rank == 0, dtype=torch.bool, device=h.device)
        keep = torch.cat([null_keep, valid], dim=1)
        q, k, v = self.project(x)
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # [B, h, S, N_local]
        # A finite floor instead of -inf: a rank whose keys are all padding gets a finite,
        # negligible log-sum-exp (weight exp(-huge) == 0) instead of NaNs in forward or backward.
        scores = scores.masked_fill(~keep[:, None, None, :], torch.finfo(scores.dtype).min)
        lse = torch.logsumexp(scores, dim=-1)  # [B, h, S]
        part = torch.softmax(scores, dim=-1) @ v  # [B, h, S, dh]
        return self.combine(part, lse)

    def combine(self, part: Tensor, lse: Tensor) -> Tensor:
        """Merge this rank's partial attention ``part [B, h, S, dh]`` (log-sum-exp ``lse``) with the other ranks'."""
        parts, lses = gather_stack(part, self.cp_group), gather_stack(lse, self.cp_group)
        weights = torch.softmax(lses, dim=0)[..., None]
        return self.output((weights * parts).sum(0))


def enable_context_parallel(summarisers: list[Summariser], group: ProcessGroup) -> None:
    """Make ``summarisers`` attend across the sequence shards held by the ranks of ``group``."""
    rank = dist.get_rank(group)
    for module in summarisers:
        module.__class__ = ContextParallelSummariser
        assert isinstance(module, ContextParallelSummariser)
        module.cp_group, module.cp_rank = group, rank


__all__ = ["ContextParallelSummariser", "enable_context_parallel", "rows"]
