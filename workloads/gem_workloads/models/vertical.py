"""The vertical model: a small DLRM/Wukong-style ranker that takes the foundation model's knowledge as inputs.

Same features as the foundation model (user, short behaviour sequence mean-pooled, dense, item,
domain), one token each, pairwise dot interactions and a top MLP, plus two optional inputs:

- **LoopFM historical memory** (``config.memory_len > 0``): the user's last ``memory_len``
  foundation-model representations (``memory_width`` floats each, most recent last, only from
  before the example's time). They are projected to the model width, given a learned position
  per age, and a learned query attends over them (with a learned null key so an empty memory is
  defined): one *memory token* per user, computed once per request in :meth:`encode_user`.
- **Solaris user-ad embedding** (``config.solaris_width > 0``): the foundation model's
  precomputed embedding of the (user, ad) pair and the fallback tier it came from
  (:data:`TIERS`); ``none`` uses a learned embedding instead of a vector, and every tier adds its
  own learned offset, so the model learns how far to trust each tier: one *Solaris token* per
  candidate.

Both tokens join the dot interactions and are also read raw by the top MLP. Missing side inputs
(``None``) mean an empty memory and tier ``none`` for every candidate, so a vertical model always
scores, with or without a store.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchrec.modules.embedding_configs import PoolingType

from .common import DomainToken, UserState, ebc_for, mlp, pooled_tokens
from .dlrm import BottomMLP
from .features import Batch, CandidateFeatures, FeatureSchema, UserFeatures
from .presets import ModelConfig

# Fallback tiers of the Solaris read path, in the order the store tries them ("none": nothing found).
TIERS = ("exact", "userAdGroupAggregate", "similarUser", "none")
TIER_INDEX = {t: i for i, t in enumerate(TIERS)}
NONE_TIER_INDEX = TIER_INDEX["none"]


@dataclass
class TransferInputs:
    """Side inputs of a vertical model for ``U`` users and ``N`` candidates."""

    memory: Tensor | None = None  # [U, K, memory_width] float, most recent last (zeros where masked)
    memory_mask: Tensor | None = None  # [U, K] bool: True where a representation is present
    solaris: Tensor | None = None  # [N, solaris_width] float (zeros for tier none)
    tier: Tensor | None = None  # [N] int64 index into TIERS


class MemoryAttention(nn.Module):
    """A learned query attends over the user's last K representations (plus a null slot): ``[U, 1, d]``."""

    def __init__(self, length: int, width: int, dim: int) -> None:
        super().__init__()
        self.length = length
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, dim)
        self.position = nn.Parameter(torch.randn(length, dim) * 0.02)
        self.query = nn.Parameter(torch.randn(dim) * 0.1)
        self.null = nn.Parameter(torch.zeros(1, dim))
        self.out = nn.Linear(dim, dim)

    def forward(self, memory: Tensor, mask: Tensor) -> Tensor:
        u, k, _ = memory.shape
        if k != self.length:
            raise ValueError(f"memory holds {k} representations per user, the model was built for {self.length}")
        keys = self.proj(self.norm(memory)) + self.position[None]
        keys = torch.cat([self.null.expand(u, 1, -1), keys], dim=1)
        keep = torch.cat([torch.ones(u, 1, dtype=torch.bool, device=mask.device), mask.bool()], dim=1)
        q = self.query.expand(u, 1, 1, -1)
        att = F.scaled_dot_product_attention(q, keys[:, None], keys[:, None], attn_mask=keep[:, None, None, :])
        out: Tensor = self.out(att[:, 0, 0])
        return out


class SolarisInput(nn.Module):
    """The precomputed user-ad embedding and its tier as one token ``[N, 1, d]``."""

    def __init__(self, width: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, dim)
        self.norm = nn.LayerNorm(dim)  # after the projection: no [N, width] intermediates per request
        self.tier = nn.Embedding(len(TIERS), dim)
        self.none = nn.Parameter(torch.zeros(dim))

    def forward(self, embedding: Tensor, tier: Tensor) -> Tensor:
        vec = self.norm(self.proj(embedding))
        vec = torch.where((tier == NONE_TIER_INDEX)[:, None], self.none.expand_as(vec), vec)
        out: Tensor = (vec + self.tier(tier))[:, None, :]
        return out


class VerticalSparse(nn.Module):
    def __init__(self, schema: FeatureSchema, dim: int, device: torch.device) -> None:
        super().__init__()
        self.user = ebc_for(schema.user_features, dim, device)
        self.item = ebc_for(schema.item_features, dim, device)
        self.sequence = ebc_for(schema.sequence_features, dim, device, pooling=PoolingType.MEAN)


class VerticalModel(nn.Module):
    """See the module docstring. Build with ``build_model("vertical", config, schema)``."""

    def __init__(self, schema: FeatureSchema, config: ModelConfig, device: torch.device | None = None) -> None:
        super().__init__()
        dev = device or torch.device("cpu")
        d = config.embedding_dim
        self.schema, self.config = schema, config
        self.sparse = VerticalSparse(schema, d, dev)
        self.bottom = BottomMLP(schema.num_user_dense, config.dlrm_bottom, d)
        self.domain_token = DomainToken(schema.num_domains, d)
        self.memory = MemoryAttention(config.memory_len, config.memory_width, d) if config.memory_len else None
        self.solaris = SolarisInput(config.solaris_width, d) if config.solaris_width else None
        n_user = 1 + len(schema.user_features) + len(schema.sequence_features) + (self.memory is not None)
        self.num_user_tokens = n_user
        n_tokens = n_user + len(schema.item_features) + 1 + (self.solaris is not None)
        rows, cols = torch.triu_indices(n_tokens, n_tokens, offset=1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        n_raw = 1 + (self.memory is not None) + (self.solaris is not None)
        self.top = mlp([n_raw * d + rows.numel(), *config.dlrm_top, schema.num_tasks])

    @property
    def takes_memory(self) -> bool:
        return self.memory is not None

    @property
    def takes_solaris(self) -> bool:
        return self.solaris is not None

    def dense_units(self) -> list[nn.Module]:
        units: list[nn.Module] = [self.bottom, self.domain_token, self.top]
        return units + [m for m in (self.memory, self.solaris) if m is not None]

    def encode_user(
        self, user: UserFeatures, memory: Tensor | None = None, memory_mask: Tensor | None = None
    ) -> UserState:
        parts = [
            self.bottom(user.dense),
            pooled_tokens(self.sparse.user, user.categorical, self.schema.user_names),
            pooled_tokens(self.sparse.sequence, user.sequence, self.schema.sequence_names),
        ]
        if self.memory is not None:
            u, cfg = user.size, self.config
            if memory is None or memory_mask is None:
                memory = parts[0].new_zeros(u, cfg.memory_len, cfg.memory_width)
                memory_mask = torch.zeros(u, cfg.memory_len, dtype=torch.bool, device=memory.device)
            parts.append(self.memory(memory.to(parts[0].dtype), memory_mask)[:, None, :])
        tokens = torch.cat(parts, dim=1)
        return UserState(tokens=tokens, summaries=tokens.new_zeros(tokens.shape[0], 0, 0, tokens.shape[2]))

    def embed_candidates(
        self,
        user_state: UserState,
        candidates: CandidateFeatures,
        user_index: Tensor | None = None,
        solaris: Tensor | None = None,
        tier: Tensor | None = None,
    ) -> Tensor:
        """What the top MLP reads ``[N, ...]``: raw dense/memory/Solaris tokens and the pairwise dots."""
        state = user_state if user_index is None else user_state.select(user_index)
        item = pooled_tokens(self.sparse.item, candidates.categorical, self.schema.item_names)
        parts = [state.tokens, item, self.domain_token(candidates.domain)]
        raw = [state.tokens[:, 0]]
        if self.memory is not None:
            raw.append(state.tokens[:, self.num_user_tokens - 1])
        if self.solaris is not None:
            n = candidates.size
            if solaris is None or tier is None:
                solaris = item.new_zeros(n, self.config.solaris_width)
                tier = torch.full((n,), NONE_TIER_INDEX, dtype=torch.long, device=item.device)
            token = self.solaris(solaris.to(item.dtype), tier)
            parts.append(token)
            raw.append(token[:, 0])
        tokens = torch.cat(parts, dim=1)
        dots = torch.bmm(tokens, tokens.transpose(1, 2))[:, self.get_buffer("rows"), self.get_buffer("cols")]
        return torch.cat([*raw, dots], dim=1)

    def score_candidates(
        self,
        user_state: UserState,
        candidates: CandidateFeatures,
        user_index: Tensor | None = None,
        solaris: Tensor | None = None,
        tier: Tensor | None = None,
    ) -> Tensor:
        logits: Tensor = self.top(self.embed_candidates(user_state, candidates, user_index, solaris, tier))
        return logits

    def score(
        self, user: UserFeatures, candidates: CandidateFeatures, side: TransferInputs, user_index: Tensor | None = None
    ) -> Tensor:
        """Encode the users once and score their candidates with the side inputs."""
        state = self.encode_user(user, side.memory, side.memory_mask)
        return self.score_candidates(state, candidates, user_index, side.solaris, side.tier)

    def forward(self, batch: Batch) -> Tensor:
        """Training: side inputs travel in ``batch.extras`` (``memory``, ``memory_mask``, ``solaris``, ``tier``)."""
        ex = batch.extras
        side = TransferInputs(ex.get("memory"), ex.get("memory_mask"), ex.get("solaris"), ex.get("tier"))
        return self.score(batch.user, batch.candidate, side)
