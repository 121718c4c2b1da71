"""The dense half of a training step under tp / pp / cp / ep, and the loss scaling that keeps it exact.

:class:`DenseRunner` takes a Kunlun model already pruned to this rank's pipeline stage
(:func:`.pipeline.prune_to_stage`), enables context and expert parallelism, applies TP then
FSDP2, and runs forward + backward from the embedding outputs (stage 0) to the loss (last
stage), directly for ``pp = 1`` or through a ``ScheduleGPipe`` for ``pp > 1``.

Loss scaling. Each data shard (the ranks that differ only in pp, cp, tp) trains on one batch
whose loss is the masked mean ``L = sum(bce * mask) / M`` with ``M = mask.sum()`` over the whole
batch. A cp rank scores ``1/cp`` of the examples, and microbatches split them further, so each
rank's loss term is ``cp * sum_{its rows}(bce * mask) / M``:

* FSDP averages dense gradients over ``dp_shard x cp`` (and ``dp_replicate``): the factor ``cp``
  cancels the average over cp ranks, which each hold a partial gradient of ``L``;
* tp ranks compute the same rows, so each holds the full gradient already (no factor);
* microbatch terms add up to the batch's term (``scale_grads=False``).

Embedding outputs are looked up by every rank of the tp x cp group (same batch), so the
gradient each sends back to TorchRec is scaled by ``1 / (tp * cp)``: the sum TorchRec forms over
ranks is then the gradient of ``L`` for each data shard, as with pure data parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.features import Batch
from ..models.kunlun import KunlunModel, MoEInteraction, Summariser
from .collectives import scale_grad
from .context import enable_context_parallel, rows
from .experts import enable_expert_parallel
from .parallel import Parallel, apply_fsdp, apply_tensor_parallel
from .pipeline import KunlunStage, split_layers


@dataclass
class StepOutput:
    """This rank's loss term (0 off the last stage) and, on the last stage, its logits and their labels."""

    loss: Tensor
    logits: Tensor | None
    labels: Tensor | None
    mask: Tensor | None


def microbatch_rows(t: Tensor, microbatches: int, cp_rank: int, cp_size: int) -> Tensor:
    """The rows a last-stage cp rank scores, in the order the schedule returns them."""
    return torch.cat([rows(c, cp_rank, cp_size) for c in t.tensor_split(microbatches)])


class DenseRunner:
    """See the module docstring. ``microbatches`` is used when ``pp > 1``."""

    def __init__(
        self,
        model: KunlunModel,
        par: Parallel,
        device: torch.device,
        *,
        microbatches: int,
        bf16: bool = False,
    ) -> None:
        self.par, self.device = par, device
        self.sequence_key = model.schema.sequence_names[0]  # every sequence feature has the same lengths
        self.microbatches = microbatches if par.pp > 1 else 1
        layers = split_layers(model.config.num_layers, par.pp)[par.pp_rank]
        self.first, self.last = par.pp_rank == 0, par.pp_rank == par.pp - 1
        if par.cp > 1:
            enable_context_parallel([m for m in model.summarisers if isinstance(m, Summariser)], par.group("cp"))
        experts: list[nn.Module] = []
        if par.expert_mesh is not None:
            interactions = [m for m in model.interactions if isinstance(m, MoEInteraction)]
            experts = enable_expert_parallel(interactions, par.expert_mesh["ep"].get_group())
        self.stage = KunlunStage(model, layers, first=self.first, last=self.last, cp_rank=par.cp_rank, cp_size=par.cp)
        self.stage.to(device)
        if par.tp > 1:
            apply_tensor_parallel(model, par.world["tp"], par.expert_mesh["tp"] if par.expert_mesh else None)
        apply_fsdp(self.stage.units(), par.dp, bf16=bf16, experts=experts, expert_dp=par.expert_dp)
        self.params = [p for p in self.stage.parameters()]
        self._norm = torch.ones(())
        self.schedule = None
        if par.pp > 1:
            from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

            pipe = PipelineStage(self.stage, par.pp_rank, par.pp, device, group=par.group("pp"))
            self.schedule = ScheduleGPipe(pipe, self.microbatches, loss_fn=self._loss, scale_grads=False)

    def _loss(self, logits: Tensor, target: Tensor) -> Tensor:
        """Loss term of one (micro)batch: ``target`` holds labels and mask side by side, all rows."""
        labels, mask = rows(target, self.par.cp_rank, self.par.cp).chunk(2, dim=1)
        bce = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
        return (bce * mask).sum() * (self.par.cp / self._norm)

    def step(self, embeddings: tuple[Tensor, Tensor, Tensor] | None, batch: Batch) -> StepOutput:
        """Forward + backward of one batch. ``embeddings`` (stage 0 only): user, sequence and item lookups."""
        par = self.par
        kwargs = {
            "lengths": batch.user.sequence[self.sequence_key].lengths().to(self.device),
            "dense": batch.user.dense,
            "domain": batch.candidate.domain,
        }
        self._norm = batch.label_mask.sum().clamp(min=1.0)
        target = torch.cat([batch.labels, batch.label_mask], dim=1)
        acts: tuple[Tensor, ...] = ()
        if self.first:
            assert embeddings is not None
            acts = tuple(scale_grad(e, 1.0 / (par.tp * par.cp)) for e in embeddings)
        if self.schedule is None:
            logits = self.stage(*acts, **kwargs)
            assert isinstance(logits, Tensor)
            loss = self._loss(logits, target)
            loss.backward()  # type: ignore[no-untyped-call]
            labels, mask = rows(target, par.cp_rank, par.cp).chunk(2, dim=1)
            return StepOutput(loss.detach(), logits.detach(), labels, mask)
        leaves = tuple(a.detach().requires_grad_() for a in acts)
        losses: list[Tensor] = []
        out = self.schedule.step(*leaves, target=target if self.last else None, losses=losses, **kwargs)
        if self.first:
            torch.autograd.backward(
                acts, [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
            )
        if not self.last:
            return StepOutput(torch.zeros((), device=self.device), None, None, None)
        labels, mask = microbatch_rows(target, self.microbatches, par.cp_rank, par.cp).chunk(2, dim=1)
        return StepOutput(torch.stack(losses).sum().detach(), out.detach(), labels, mask)


__all__ = ["DenseRunner", "StepOutput", "microbatch_rows"]
