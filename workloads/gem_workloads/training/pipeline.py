"""Pipeline parallelism (``pp``) over the Kunlun-style model's layer stack.

A Kunlun layer ``l`` is *sequence part* (block attention + summarisation, skipped by CompSkip
on odd layers) followed by the *MoE interaction* reading the newest summary. Stages own
contiguous layer ranges (:func:`split_layers`) and pass ``(h, summary, x)`` on: the sequence
hidden states (dropped once no later stage has a sequence layer), the newest summary and the
non-sequence tokens.

Inside a stage the sequence is packed (:mod:`gem_workloads.models.sequence`: no FLOPs on
padding). Between stages ``h`` travels right-padded to ``[B, seq_len / cp, d]``: a schedule
needs fixed shapes to size its receive buffers and cuts microbatches along the batch dim; the
pad and unpad are copies, not compute.

Placement of the rest, and why:

* **embeddings (TorchRec DMP) and feature preparation on stage 0** — the lookups feed the first
  layer; putting them elsewhere would ship raw ids through the pipeline. The embedding outputs
  enter the pipeline as leaf tensors and their gradient is applied to the DMP graph once per
  step after the schedule (:meth:`~.trainer.Trainer.train_step`), so the sharded lookup runs
  once per batch instead of once per microbatch and its all-to-alls are not interleaved with
  the schedule's sends. DMP's process group is the ranks of stage 0 only, so tables are
  sharded over the ranks that look them up.
* **heads and loss on the last stage** — they read the last layer's tokens; the schedule calls
  the loss there per microbatch.
* per-example side inputs every stage needs (sequence lengths, dense features, domain ids)
  are passed as keyword arguments to every stage from the local batch (all ranks of a data
  shard load the same batch), so they are never sent between stages.

The same :class:`KunlunStage` with one stage is the whole model: ``pp = 1`` runs it directly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..models.kunlun import KunlunModel
from ..models.sequence import PackedSequence
from .context import rows
from .experts import Elsewhere


def split_layers(num_layers: int, stages: int) -> list[range]:
    """Contiguous layer ranges, later stages take the remainder (stage 0 also does the embeddings)."""
    if not 1 <= stages <= num_layers:
        raise ValueError(f"cannot split {num_layers} layers into {stages} pipeline stages")
    base, extra = divmod(num_layers, stages)
    out, start = [], 0
    for s in range(stages):
        n = base + (1 if s >= stages - extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


class KunlunStage(nn.Module):
    """Layers ``layers`` of a :class:`KunlunModel` (plus embedding prep if first, heads if last).

    Holds references to the model's own submodules, so parameters keep the model's names in
    checkpoints. ``cp_rank``/``cp_size``: this rank's share of the sequence and of the examples
    (see :mod:`.context`).
    """

    def __init__(
        self,
        model: KunlunModel,
        layers: range,
        *,
        first: bool,
        last: bool,
        cp_rank: int = 0,
        cp_size: int = 1,
    ) -> None:
        super().__init__()
        cfg = model.config
        self.seq_len, self.block_size, self.layers = cfg.seq_len, cfg.block_size, layers
        self.first, self.last = first, last
        self.cp_rank, self.cp_size = cp_rank, cp_size
        self.sequence_index = {layer: sum(cfg.computes_sequence(i) for i in range(layer)) for layer in layers}
        self.computes = {layer: cfg.computes_sequence(layer) for layer in layers}
        later = range(layers.stop, cfg.num_layers)
        self.sends_h = any(cfg.computes_sequence(layer) for layer in later)
        self.receives_h = any(self.computes.values()) or self.sends_h
        self.model_parts = nn.ModuleDict()
        if first:
            for name in ("sequence_input", "dense_token", "domain_token", "token_norm"):
                self.model_parts[name] = getattr(model, name)
        for layer in layers:
            self.model_parts[f"interaction_{layer}"] = model.interactions[layer]
            if self.computes[layer]:
                j = self.sequence_index[layer]
                self.model_parts[f"attention_{j}"] = model.attention[j]
                self.model_parts[f"summariser_{j}"] = model.summarisers[j]
        if last:
            self.model_parts["heads"] = model.heads

    def forward(self, *acts: Tensor, lengths: Tensor, dense: Tensor, domain: Tensor) -> Tensor | tuple[Tensor, ...]:
        parts = self.model_parts
        seq = PackedSequence.build(lengths, self.seq_len, self.block_size)
        local, keep = seq, None
        if self.cp_size > 1:
            span = self.seq_len // self.cp_size
            local, keep = seq.window(self.cp_rank * span, span)
        my_domain = rows(domain, self.cp_rank, self.cp_size)
        summary: Tensor | None
        h: Tensor | None
        if self.first:
            user_tokens, seq_emb, item_tokens = acts
            # Packed lookups [T, d], or right-padded [B, seq_len, d] where a schedule cuts microbatches
            # (one more dim, the features, before d with OneSeq event encoders).
            padded_dims = 3 if parts["sequence_input"].events is None else 4
            h = parts["sequence_input"](seq.unpad(seq_emb) if seq_emb.dim() == padded_dims else seq_emb, seq)
            if keep is not None:
                h = h[keep]
            tokens = [user_tokens, parts["dense_token"](dense), item_tokens, parts["domain_token"](domain)]
            x = rows(parts["token_norm"](torch.cat(tokens, dim=1)), self.cp_rank, self.cp_size)
            summary = None
        elif self.receives_h:
            wire, summary, x = acts
            h = local.unpad(wire)
        else:
            (summary, x), h = acts, None
        for layer in self.layers:
            if self.computes[layer]:
                assert h is not None
                j = self.sequence_index[layer]
                h = parts[f"attention_{j}"](h, local)
                summary = rows(parts[f"summariser_{j}"](h, local), self.cp_rank, self.cp_size)
            assert summary is not None  # layer 0 always computes the sequence part
            x = parts[f"interaction_{layer}"](torch.cat([summary, x], dim=1), x, my_domain)
        assert summary is not None
        if self.last:
            logits: Tensor = parts["heads"](torch.cat([x.flatten(1), summary.flatten(1)], dim=1))
            return logits
        if self.sends_h:
            assert h is not None
            return local.pad(h), summary, x
        return summary, x

    def units(self) -> list[nn.Module]:
        """The FSDP units of this stage (one per model block)."""
        return list(self.model_parts.values())


def prune_to_stage(model: KunlunModel, layers: range, *, first: bool, last: bool) -> None:
    """Replace every module another stage owns by a parameter-less placeholder (names stay)."""
    cfg = model.config
    if not first:
        for name in ("sparse", "sequence_input", "dense_token", "domain_token", "token_norm"):
            setattr(model, name, Elsewhere())
    if not last:
        model.heads = Elsewhere()  # type: ignore[assignment]
    for layer in range(cfg.num_layers):
        if layer in layers:
            continue
        model.interactions[layer] = Elsewhere()
        if cfg.computes_sequence(layer):
            j = sum(cfg.computes_sequence(i) for i in range(layer))
            model.attention[j] = Elsewhere()
            model.summarisers[j] = Elsewhere()


__all__ = ["KunlunStage", "prune_to_stage", "split_layers"]
