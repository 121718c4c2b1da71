"""DLRM-style baseline: pooled embeddings + bottom MLP + pairwise dot interactions + top MLP.

The behaviour sequence is mean-pooled per sequence feature (an EmbeddingBagCollection), so
the baseline sees the same inputs as the Kunlun-style model but has no sequence modelling.
It exposes the same ``encode_user`` / ``score_candidates`` / ``forward`` API.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torchrec.modules.embedding_configs import PoolingType

from .common import DomainToken, UserState, ebc_for, mlp, pooled_tokens
from .features import Batch, CandidateFeatures, FeatureSchema, UserFeatures
from .presets import ModelConfig


class DLRMSparse(nn.Module):
    def __init__(self, schema: FeatureSchema, dim: int, device: torch.device) -> None:
        super().__init__()
        self.user = ebc_for(schema.user_features, dim, device)
        self.item = ebc_for(schema.item_features, dim, device)
        self.sequence = ebc_for(schema.sequence_features, dim, device, pooling=PoolingType.MEAN)


class BottomMLP(nn.Module):
    def __init__(self, num_dense: int, dims: tuple[int, ...], dim: int) -> None:
        super().__init__()
        self.num_dense = num_dense
        self.mlp = mlp([max(num_dense, 1), *dims, dim], out_act=True)

    def forward(self, dense: Tensor) -> Tensor:
        if self.num_dense == 0:
            dense = torch.zeros(dense.shape[0], 1, device=dense.device)
        out: Tensor = self.mlp(dense)[:, None, :]
        return out


class DotInteractionTop(nn.Module):
    """Upper-triangular pairwise dots of all tokens, concatenated with the dense token, then the top MLP."""

    def __init__(self, num_tokens: int, dim: int, top: tuple[int, ...], num_tasks: int) -> None:
        super().__init__()
        rows, cols = torch.triu_indices(num_tokens, num_tokens, offset=1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        self.top = mlp([dim + rows.numel(), *top, num_tasks])

    def forward(self, tokens: Tensor, dense_token: Tensor) -> Tensor:
        out: Tensor = self.top(self.features(tokens, dense_token))
        return out

    def features(self, tokens: Tensor, dense_token: Tensor) -> Tensor:
        """What the top MLP reads: the dense token and the pairwise dots."""
        dots = torch.bmm(tokens, tokens.transpose(1, 2))[:, self.get_buffer("rows"), self.get_buffer("cols")]
        return torch.cat([dense_token, dots], dim=1)


class DLRMModel(nn.Module):
    def __init__(self, schema: FeatureSchema, config: ModelConfig, device: torch.device | None = None) -> None:
        super().__init__()
        dev = device or torch.device("cpu")
        d = config.embedding_dim
        self.schema, self.config = schema, config
        self.sparse = DLRMSparse(schema, d, dev)
        self.bottom = BottomMLP(schema.num_user_dense, config.dlrm_bottom, d)
        self.domain_token = DomainToken(schema.num_domains, d)
        n_tokens = len(schema.user_features) + len(schema.sequence_features) + 1 + len(schema.item_features) + 1
        self.interaction = DotInteractionTop(n_tokens, d, config.dlrm_top, schema.num_tasks)

    def dense_units(self) -> list[nn.Module]:
        # The modules whose forward runs (FSDP gathers parameters in a unit's forward hook):
        # scoring calls the interaction's top MLP directly, so that is the unit, not the interaction.
        return [self.bottom, self.domain_token, self.interaction.top]

    def encode_user(self, user: UserFeatures) -> UserState:
        tokens = torch.cat(
            [
                self.bottom(user.dense),
                pooled_tokens(self.sparse.user, user.categorical, self.schema.user_names),
                pooled_tokens(self.sparse.sequence, user.sequence, self.schema.sequence_names),
            ],
            dim=1,
        )
        return UserState(tokens=tokens, summaries=tokens.new_zeros(tokens.shape[0], 0, 0, tokens.shape[2]))

    def score_candidates(
        self, user_state: UserState, candidates: CandidateFeatures, user_index: Tensor | None = None
    ) -> Tensor:
        logits: Tensor = self.interaction.top(self.embed_candidates(user_state, candidates, user_index))
        return logits

    def embed_candidates(
        self, user_state: UserState, candidates: CandidateFeatures, user_index: Tensor | None = None
    ) -> Tensor:
        """The user-ad embedding ``[N, embedding_size]`` the top MLP reads (what Solaris precomputes)."""
        state = user_state if user_index is None else user_state.select(user_index)
        item = pooled_tokens(self.sparse.item, candidates.categorical, self.schema.item_names)
        tokens = torch.cat([state.tokens, item, self.domain_token(candidates.domain)], dim=1)
        return self.interaction.features(tokens, state.tokens[:, 0])

    @property
    def embedding_size(self) -> int:
        """Width of :meth:`embed_candidates` rows."""
        return self.config.embedding_dim + int(self.interaction.get_buffer("rows").numel())

    def forward(self, batch: Batch) -> Tensor:
        return self.score_candidates(self.encode_user(batch.user), batch.candidate)
