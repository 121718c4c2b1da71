"""Pieces shared by the Kunlun-style model and the DLRM-style baseline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig
from torchrec.modules.embedding_configs import PoolingType
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from .features import SEQUENCE_SOURCE, CategoricalFeature, SequenceGroup
from .grouped import GroupedHeads
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
        """Rows ``index`` (one per candidate): a copy of the user's state for each of its candidates.

        Scoring reads the state by index instead (:class:`~.sharing.UserRows`); this per-candidate
        copy stays as the reference the shared path is tested and benchmarked against.
        """
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


def split_by_source(
    per_feature: list[Tensor], names: list[str], source: Tensor, groups: tuple[SequenceGroup, ...]
) -> Tensor:
    """OneSeq: the features' embeddings stacked on dim -2, each owned feature zeroed on events of another source.

    ``per_feature[i]`` is ``[..., d]`` and ``source`` the events' source index ``[...]`` (the
    ``SEQUENCE_SOURCE`` feature); the per-source event encoders read the result.
    """
    owner = {f: g for g, group in enumerate(groups) for f in group.features}
    return torch.stack(
        [
            p * (source == owner[n]).unsqueeze(-1).to(p.dtype) if n in owner else p
            for n, p in zip(names, per_feature, strict=True)
        ],
        dim=-2,
    )


def sequence_embeddings(
    ec: nn.Module,
    kjt: KeyedJaggedTensor,
    names: list[str],
    length: int,
    groups: tuple[SequenceGroup, ...] = (),
) -> tuple[Tensor, Tensor]:
    """EC lookup of the jagged event sequence, padded: ``(emb, valid [B, length])``.

    ``emb`` is ``[B, length, d]`` summed over features; with OneSeq ``groups`` it is
    ``[B, length, len(names), d]`` (:func:`split_by_source`). The reference layout
    (:attr:`~.kunlun.KunlunModel.padded_sequence`); the model packs instead
    (:func:`packed_sequence_embeddings`).
    """
    jts = ec(kjt)
    lengths = jts[names[0]].lengths()
    padded = [pad_jagged(jts[n].values(), lengths, length) for n in names]
    lengths = lengths.to(padded[0].device).clamp(max=length)
    valid = torch.arange(length, device=padded[0].device)[None, :] < lengths[:, None]
    if not groups:
        return torch.stack(padded, dim=0).sum(0), valid
    raw = kjt[SEQUENCE_SOURCE]  # the input ids (the lookup's output holds embeddings)
    ids = raw.values().to(padded[0].device, padded[0].dtype)[:, None]
    source = pad_jagged(ids, raw.lengths().to(padded[0].device), length)[..., 0].round().long()
    return split_by_source(padded, names, source, groups), valid


def packed_sequence_embeddings(
    ec: nn.Module,
    kjt: KeyedJaggedTensor,
    names: list[str],
    length: int,
    block_size: int,
    groups: tuple[SequenceGroup, ...] = (),
) -> tuple[Tensor, PackedSequence]:
    """EC lookup of the jagged event sequence, packed: ``([T, d] summed over features, layout)``.

    Each row keeps its first ``length`` events (as :func:`sequence_embeddings` does); nothing is
    padded. With OneSeq ``groups`` the values are ``[T, len(names), d]`` (:func:`split_by_source`).
    """
    jts = ec(kjt)
    per_feature = [jts[n].values() for n in names]
    if groups:
        source = kjt[SEQUENCE_SOURCE].values().to(per_feature[0].device).long()
        values = split_by_source(per_feature, names, source, groups)
    else:
        values = torch.stack(per_feature, dim=0).sum(0)
    return pack_jagged(values, jts[names[0]].lengths(), length, block_size)


def mlp(dims: list[int], out_act: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2 or out_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TaskHeads(nn.Module):
    """One small MLP per task over the final representation: logits ``[N, T]``.

    Run as one matmul for every task's hidden layer and one batched dot for the outputs
    (:class:`~.grouped.GroupedHeads`); the per-task modules stay (same state dict). Tensor-parallel
    shards fall back to :meth:`forward_loop`.
    """

    def __init__(self, in_dim: int, hidden: int, num_tasks: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList([mlp([in_dim, hidden, 1]) for _ in range(num_tasks)])

    def forward(self, x: Tensor) -> Tensor:
        grouped = GroupedHeads(self, self.heads)
        if not grouped.available():
            return self.forward_loop(x)
        w1, b1, w2, b2 = grouped.weights()
        return grouped.finish(F.linear(x, w1, b1), w2, b2)

    def forward_split(self, own: Tensor, user: Tensor, take: Callable[[Tensor], Tensor]) -> Tensor:
        """Logits of ``concat(own [N, a], user rows)`` without building the concatenation.

        ``user [U, in - a]`` holds one row per user; ``take`` maps a ``[U, ...]`` tensor to the
        candidates' rows (a broadcast view for one user). The user's share of the hidden layer is
        computed once per user.
        """
        grouped = GroupedHeads(self, self.heads)
        if not grouped.available():
            return self.forward_loop(torch.cat([own, take(user)], dim=1))
        w1, b1, w2, b2 = grouped.weights()
        a = own.shape[1]
        hidden = F.linear(own, w1[:, :a], b1) + take(F.linear(user, w1[:, a:]))
        return grouped.finish(hidden, w2, b2)

    def forward_loop(self, x: Tensor) -> Tensor:
        """One head after the other (tensor-parallel shards; the reference of the grouped forward)."""
        return torch.cat([h(x) for h in self.heads], dim=1)


class DomainToken(nn.Module):
    """A learned token per domain (surface), appended to the candidate's tokens."""

    def __init__(self, num_domains: int, dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max(num_domains, 1), dim)

    def forward(self, domain: Tensor) -> Tensor:
        out: Tensor = self.embedding(domain)[:, None, :]
        return out
