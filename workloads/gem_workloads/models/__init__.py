"""Ranking models on TorchRec: a Kunlun-style model (the foundation role), a DLRM-style baseline and
the vertical model (a small ranker taking LoopFM memory and Solaris embeddings as inputs).

Public API (also what serving uses)::

    model = build_model("kunlun", get_preset("tiny"), schema)
    state = model.encode_user(user_features)            # once per request
    logits = model.score_candidates(state, candidates, user_index)  # [N, num_tasks]
    logits = model(batch)                               # training: one candidate per user row
    load_trained(model, "ckpt/step-000400")             # a training checkpoint, unsharded
"""

from __future__ import annotations

from typing import Literal

import torch

from .checkpoint import load_trained
from .common import UserState
from .dlrm import DLRMModel
from .features import Batch, CandidateFeatures, CategoricalFeature, FeatureSchema, Task, UserFeatures
from .kunlun import KunlunModel
from .presets import PRESETS, ModelConfig, get_preset
from .vertical import TIERS, TransferInputs, VerticalModel

ModelKind = Literal["kunlun", "dlrm", "vertical"]
RankingModel = KunlunModel | DLRMModel | VerticalModel
# Which role each kind plays in knowledge transfer: the foundation model teaches, verticals serve.
FOUNDATION_KINDS = ("kunlun",)
VERTICAL_KINDS = ("vertical", "dlrm")

__all__ = [
    "FOUNDATION_KINDS",
    "PRESETS",
    "TIERS",
    "VERTICAL_KINDS",
    "Batch",
    "CandidateFeatures",
    "CategoricalFeature",
    "DLRMModel",
    "FeatureSchema",
    "KunlunModel",
    "ModelConfig",
    "ModelKind",
    "RankingModel",
    "Task",
    "TransferInputs",
    "UserFeatures",
    "UserState",
    "VerticalModel",
    "build_model",
    "get_preset",
    "load_trained",
]


def build_model(
    kind: str, config: ModelConfig, schema: FeatureSchema, device: torch.device | None = None
) -> RankingModel:
    """``kind``: ``"kunlun"``, ``"dlrm"`` or ``"vertical"``. Embedding tables go on ``device`` (``meta`` before DMP)."""
    if kind == "kunlun":
        return KunlunModel(schema, config, device)
    if kind == "dlrm":
        return DLRMModel(schema, config, device)
    if kind == "vertical":
        return VerticalModel(schema, config, device)
    raise ValueError(f"unknown model kind {kind!r}; choose 'kunlun', 'dlrm' or 'vertical'")
