"""LoopFM structure representation: a compact per-example summary of the foundation model's pass.

Taken from the rows :meth:`KunlunModel.embed_candidates` returns (the input of the task heads),
so it costs nothing beyond the pass that writes the KD soft labels and the Solaris embedding:

- the output tokens of the **last MoE cross-interaction layer** (user, dense, item, domain
  tokens after all layers), averaged over tokens: ``embedding_dim`` floats, and
- the output of the **last sequence layer's summariser** (the learned seeds after attending to
  the whole behaviour sequence), averaged over seeds: ``embedding_dim`` floats.

Width: ``2 * embedding_dim`` (64 for the CPU ``foundation`` preset, 512 for ``base``). The
first half describes the user-ad interaction, the second the user's long history as the
foundation model read it: what a vertical model that only sees a short history lacks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .kunlun import KunlunModel


def representation_width(model: KunlunModel) -> int:
    return 2 * model.config.embedding_dim


def summarise(model: KunlunModel, embedding: Tensor) -> Tensor:
    """``[N, embedding_size]`` rows of ``embed_candidates`` -> ``[N, 2 * embedding_dim]``."""
    d, seeds = model.config.embedding_dim, model.config.num_seeds
    n_feat = model.embedding_size // d - seeds
    tokens = embedding.view(embedding.shape[0], n_feat + seeds, d)
    return torch.cat([tokens[:, :n_feat].mean(1), tokens[:, n_feat:].mean(1)], dim=1)
