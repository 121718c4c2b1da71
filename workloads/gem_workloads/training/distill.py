"""Single-process training of the transfer variants: the foundation model, and vertical models
with knowledge distillation, LoopFM memory and Solaris embeddings.

Loss of a vertical model with a teacher (``kd_weight`` = w)::

    (1 - w) * BCE(logits, hard labels)   over the tasks that apply to the example (label mask)
      + w   * BCE(logits, soft labels)   over every task (the foundation model predicts all of them)

so w = 0 is exactly hard-label training. Soft labels, LoopFM representations and Solaris
embeddings come from the foundation model's batch job (:mod:`.foundation_pass`); the memory is
read strictly before each example's time and the Solaris tier is simulated per example
(:mod:`.coverage`), re-drawn every epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.blocks import collate
from ..data.timeline import TimedDataset
from ..models import devices
from ..models.features import Batch, FeatureSchema
from .coverage import TierSources, assign_tiers, tier_embeddings
from .foundation_pass import FoundationPass
from .metrics import auc

IntArray = npt.NDArray[np.int64]


@dataclass
class FitConfig:
    epochs: int = 2
    batch_size: int = 256
    lr: float = 3e-3
    weight_decay: float = 0.0
    seed: int = 0
    kd_weight: float = 0.0
    # Coverage simulation while training (see :mod:`.coverage`).
    exact_rate: float = 0.5
    fallback_rate: float = 0.75

    def __post_init__(self) -> None:
        if not 0.0 <= self.kd_weight <= 1.0:
            raise ValueError(f"kd_weight must be in [0, 1], got {self.kd_weight}")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs and batch_size must be >= 1 and lr > 0")


def masked_bce(logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
    return (loss * mask).sum() / mask.sum().clamp(min=1.0)


def kd_loss(logits: Tensor, labels: Tensor, mask: Tensor, soft: Tensor | None, kd_weight: float) -> Tensor:
    hard = masked_bce(logits, labels, mask)
    if soft is None or kd_weight == 0.0:
        return hard
    return (1.0 - kd_weight) * hard + kd_weight * F.binary_cross_entropy_with_logits(logits.float(), soft)


class ExampleFeed:
    """Batches of ``rows`` of ``data`` for one model: features at the model's ``seq_len`` and the
    side inputs the model takes (soft labels, LoopFM memory, Solaris embedding + tier)."""

    def __init__(
        self,
        data: TimedDataset,
        rows: IntArray,
        schema: FeatureSchema,
        seq_len: int,
        teacher: FoundationPass | None = None,
        memory_len: int = 0,
        solaris: bool = False,
        sources: TierSources | None = None,
        exact_allowed: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        """``exact_allowed`` (per row): where the exact tier may be simulated (see :mod:`.coverage`)."""
        self.data, self.rows, self.schema, self.seq_len = data, rows, schema, seq_len
        self.teacher, self.memory_len, self.solaris = teacher, memory_len, solaris
        self.exact_allowed = exact_allowed
        if (memory_len or solaris) and teacher is None:
            raise ValueError("LoopFM memory and Solaris inputs come from a foundation pass: give teacher")
        self.pos = teacher.positions(rows) if teacher is not None else None
        self.mem_ref: IntArray | None = None
        if memory_len and teacher is not None and self.pos is not None:
            self.mem_ref, _ = teacher.memory().query(teacher.user[self.pos], teacher.time[self.pos], memory_len)
        self.sources = sources.take(self.pos) if sources is not None and self.pos is not None else None
        if solaris and self.sources is None:
            raise ValueError("Solaris inputs need tier sources (coverage.tier_sources over the pass)")

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, sel: IntArray, tier: IntArray | None = None) -> tuple[Batch, Tensor | None]:
        """Examples ``sel`` (positions in ``rows``); ``tier`` per selected example (Solaris models)."""
        batch = collate(self.data.block(self.rows[sel], self.seq_len), self.schema)
        soft = None
        if self.teacher is not None and self.pos is not None:
            soft = torch.from_numpy(self.teacher.soft[self.pos[sel]])
        if self.mem_ref is not None and self.teacher is not None:
            ref = self.mem_ref[sel]
            present = ref >= 0
            mem = self.teacher.loopfm[np.where(present, ref, 0)] * present[..., None]
            batch.extras["memory"] = torch.from_numpy(mem.astype(np.float32))
            batch.extras["memory_mask"] = torch.from_numpy(present)
        if self.solaris and self.sources is not None and self.teacher is not None:
            if tier is None:
                raise ValueError("a Solaris model's batch needs a tier per example")
            emb = tier_embeddings(self.teacher.solaris, self.sources.take(sel), tier)
            batch.extras["solaris"] = torch.from_numpy(emb)
            batch.extras["tier"] = torch.from_numpy(tier.astype(np.int64))
        return batch, soft

    def tiers(self, exact_rate: float, fallback_rate: float, rng: np.random.Generator) -> IntArray | None:
        if not self.solaris or self.sources is None:
            return None
        return assign_tiers(self.sources, exact_rate, fallback_rate, rng, self.exact_allowed)


def fit(
    model: nn.Module,
    feed: ExampleFeed,
    cfg: FitConfig,
    log: Callable[[int, float], None] | None = None,
    device: torch.device | None = None,
) -> list[float]:
    """Adam over every parameter; one shuffled pass per epoch. Returns the mean loss per epoch.

    ``device``: where the model is and every batch goes (default: the CPU).
    """
    device = device or torch.device("cpu")
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng([cfg.seed, 11])
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model.train()
    losses: list[float] = []
    for epoch in range(cfg.epochs):
        order = rng.permutation(len(feed))
        tiers = feed.tiers(cfg.exact_rate, cfg.fallback_rate, rng)
        total, steps = 0.0, 0
        for lo in range(0, len(order), cfg.batch_size):
            sel = order[lo : lo + cfg.batch_size]
            batch, soft = feed.batch(sel, None if tiers is None else tiers[sel])
            batch, soft = batch.to(device), None if soft is None else soft.to(device)
            loss = kd_loss(model(batch), batch.labels, batch.label_mask, soft, cfg.kd_weight)
            opt.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            opt.step()
            total, steps = total + float(devices.to_numpy(loss)), steps + 1
        losses.append(total / max(steps, 1))
        if log is not None:
            log(epoch, losses[-1])
    model.eval()
    return losses


@torch.inference_mode()
def predict(
    model: nn.Module,
    feed: ExampleFeed,
    tier: IntArray | None = None,
    batch_size: int = 2048,
    device: torch.device | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """``(probabilities, labels, label_mask)`` over every row of ``feed``, in order (model on ``device``)."""
    device = device or torch.device("cpu")
    model.eval()
    probs, labels, masks = [], [], []
    for lo in range(0, len(feed), batch_size):
        sel = np.arange(lo, min(lo + batch_size, len(feed)))
        batch, _ = feed.batch(sel, None if tier is None else tier[sel])
        probs.append(devices.to_numpy(torch.sigmoid(model(batch.to(device)))))
        labels.append(devices.to_numpy(batch.labels))
        masks.append(devices.to_numpy(batch.label_mask))
    return np.concatenate(probs), np.concatenate(labels), np.concatenate(masks)


def task_aucs(
    probs: npt.NDArray[np.float32], labels: npt.NDArray[np.float32], mask: npt.NDArray[np.float32], tasks: list[str]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for t, name in enumerate(tasks):
        sel = mask[:, t] > 0
        value = auc(probs[sel, t], labels[sel, t])
        if value is not None:
            out[name] = round(value, 5)
    return out
