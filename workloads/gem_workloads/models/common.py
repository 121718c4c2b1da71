"""Pieces shared by the Kunlun-style model and the DLRM-style baseline."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig
from torchrec.modules.embedding_configs import PoolingType
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from .features import CategoricalFeature
from .sequence import PackedSequence, pack_jagged


@dataclass
class UserState:
    """What :meth:`encode_user` returns: everything the candidate side needs from the user.

    ``tokens``: ``[U, n_user_tokens, d]`` (user categorical + dense tokens);
    ``summaries``: ``[U, num_layers, num_seeds, d]`` per-layer sequence summaries (Kunlun) or
    ``[U, 0, 0, d]`` (DLRM, whose pooled sequence is one of its tokens).
    """

    tokens: Tensor
    summaries: Tensor

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    def select(self, index: Tensor) -> UserState:
        """Rows ``index`` (one per candidate): broadcasts a user's state to its N candidates."""
        return UserState(self.tokens.index_select(0, index), self.summaries.index_select(0, index))


def ebc_for(
    features: tuple[CategoricalFeature, ...],
    dim: int,
    device: torch.device,
    pooling: PoolingType = PoolingType.SUM,
) -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(
                name=f.table,
                embedding_dim=dim,
                num_embeddings=f.cardinality,
                feature_names=[f.name],
                pooling=PoolingType.MEAN if f.multi_hot and pooling == PoolingType.SUM else pooling,
            )
            for f in features
        ],
        device=device,
    )


def ec_for(features: tuple[CategoricalFeature, ...], dim: int, device: torch.device) -> EmbeddingCollection:
    return EmbeddingCollection(
        tables=[
            EmbeddingConfig(name=f.table, embedding_dim=dim, num_embeddings=f.cardinality, feature_names=[f.name])
            for f in features
        ],
        device=device,
    )


def pooled_tokens(ebc: nn.Module, kjt: KeyedJaggedTensor, names: list[str]) -> Tensor:
    """EBC lookup stacked as tokens ``[B, len(names), d]`` in ``names`` order."""
    pooled = ebc(kjt).to_dict()
    return torch.stack([pooled[n] for n in names], dim=1)


def pad_jagged(values: Tensor, lengths: Tensor, length: int) -> Tensor:
    """Right-pad jagged rows ``values [sum(lengths), d]`` to ``[B, length, d]`` (keeps each row's first ``length``).

    Pure torch (no fbgemm kernel), so it runs on any device the model runs on.
    """
    b = lengths.shape[0]
    lengths = lengths.to(torch.long)
    offsets = torch.cumsum(lengths, 0) - lengths
    row = torch.repeat_interleave(torch.arange(b, device=values.device), lengths, output_size=values.shape[0])
    pos = torch.arange(values.shape[0], device=values.device) - offsets[row]
    keep = pos < length
    out = values.new_zeros(b, length, values.shape[-1])
    out[row[keep], pos[keep]] = values[keep]
    return out


def sequence_embeddings(ec: nn.Module, kjt: KeyedJaggedTensor, names: list[str], length: int) -> tuple[Tensor, Tensor]:
    """EC lookup of the jagged event sequence, padded: ``([B, length, d] summed over features, valid [B, length])``.

    The reference layout (:attr:`~.kunlun.KunlunModel.padded_sequence`); the model packs instead
    (:func:`packed_sequence_embeddings`).
    """
    jts = ec(kjt)
    lengths = jts[names[0]].lengths()
    emb = torch.stack([pad_jagged(jts[n].values(), lengths, length) for n in names], dim=0).sum(0)
    lengths = lengths.to(emb.device).clamp(max=length)
    valid = torch.arange(length, device=emb.device)[None, :] < lengths[:, None]
    return emb, valid


def packed_sequence_embeddings(
    ec: nn.Module, kjt: KeyedJaggedTensor, names: list[str], length: int, block_size: int
) -> tuple[Tensor, PackedSequence]:
    """EC lookup of the jagged event sequence, packed: ``([T, d] summed over features, layout)``.

    Each row keeps its first ``length`` events (as :func:`sequence_embeddings` does); nothing is padded.
    """
    jts = ec(kjt)
    values = torch.stack([jts[n].values() for n in names], dim=0).sum(0)
    return pack_jagged(values, jts[names[0]].lengths(), length, block_size)


def mlp(dims: list[int], out_act: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2 or out_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TaskHeads(nn.Module):
    """One small MLP per task over the final representation: logits ``[N, T]``."""

    def __init__(self, in_dim: int, hidden: int, num_tasks: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList([mlp([in_dim, hidden, 1]) for _ in range(num_tasks)])

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([h(x) for h in self.heads], dim=1)


class DomainToken(nn.Module):
    """A learned token per domain (surface), appended to the candidate's tokens."""

    def __init__(self, num_domains: int, dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max(num_domains, 1), dim)

    def forward(self, domain: Tensor) -> Tensor:
        out: Tensor = self.embedding(domain)[:, None, :]
        return out
