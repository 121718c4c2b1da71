"""Expert parallelism (``GEM_EP``) for the per-domain experts of the MoE cross interaction.

With ``ep = k`` the ``dp_shard x cp`` ranks are cut into groups of ``k`` consecutive ranks
(flattened row-major, so a group stays inside the tightest tier the operator placed them in).
Expert ``i`` lives on rank ``i % k`` of every group; the shared expert, the LCB and the norm
stay replicated. Each MoE layer:

1. sorts its rows by the owning rank of their domain's expert and exchanges row counts;
2. sends the rows with an all-to-all (:func:`~.collectives.all_to_all`, whose backward is the
   reverse all-to-all), together with their domain ids;
3. runs every local expert on the rows it received (zero rows included, so FSDP's collectives
   of the expert match across ranks);
4. returns the outputs with the reverse all-to-all and unsorts them.

Expert parameters are FSDP-sharded over the ranks that hold the same experts (the other ep
groups); the trainer sets their gradient divide factor so that they average over the same
``dp`` ranks as every other dense parameter.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed import ProcessGroup

from ..models.kunlun import MoEInteraction
from .collectives import all_to_all, exchange_counts


class ExpertParallelMoE(MoEInteraction):
    """:class:`MoEInteraction` whose domain experts are spread over an ep group (same FQNs)."""

    ep_group: ProcessGroup
    ep_rank: int
    ep_size: int

    def local_experts(self) -> list[int]:
        return [i for i in range(len(self.experts)) if i % self.ep_size == self.ep_rank]

    def route(self, tokens: Tensor, domain: Tensor) -> Tensor:
        b, n_in, d = tokens.shape
        n_out = self.shared.n_out
        owner = domain.remainder(self.ep_size)
        order = torch.argsort(owner, stable=True)
        send_counts = torch.bincount(owner, minlength=self.ep_size)
        in_splits = [int(c) for c in send_counts.tolist()]
        out_splits = exchange_counts(send_counts, self.ep_group)
        recv = all_to_all(tokens.index_select(0, order).flatten(1), out_splits, in_splits, self.ep_group)
        recv_domain = all_to_all(domain.index_select(0, order), out_splits, in_splits, self.ep_group)
        recv = recv.view(-1, n_in, d)
        out = recv.new_zeros(recv.shape[0], n_out * d)
        for i in self.local_experts():
            idx = (recv_domain == i).nonzero().squeeze(1)
            out = out.index_add(0, idx, self.experts[i](recv.index_select(0, idx)).flatten(1))
        back = all_to_all(out, in_splits, out_splits, self.ep_group)
        # back[j] answers row order[j]: scatter it back to its place.
        routed = back.new_zeros(b, n_out * d).index_copy(0, order, back)
        return routed.view(b, n_out, d)


class Elsewhere(nn.Module):
    """Placeholder for a module held by other ranks (another pipeline stage or ep rank): keeps indices, no params."""

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError("this module lives on other ranks (another pipeline stage or expert-parallel rank)")


def enable_expert_parallel(interactions: list[MoEInteraction], group: ProcessGroup) -> list[nn.Module]:
    """Keep only this rank's experts of each layer and route through ``group``. Returns the local experts."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    kept: list[nn.Module] = []
    for module in interactions:
        module.__class__ = ExpertParallelMoE
        assert isinstance(module, ExpertParallelMoE)
        module.ep_group, module.ep_rank, module.ep_size = group, rank, size
        local = set(module.local_experts())
        for i in range(len(module.experts)):
            if i in local:
                kept.append(module.experts[i])
            else:
                module.experts[i] = Elsewhere()
    return kept


__all__ = ["Elsewhere", "ExpertParallelMoE", "enable_expert_parallel"]
