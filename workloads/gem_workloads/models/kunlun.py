"""Kunlun-style ranking model on TorchRec.

Per layer ``l``:

1. *Block attention* over the unified behaviour sequence: each user's sequence is cut into
   fixed blocks of ``block_size`` events from its first event; queries attend only to keys of
   their own block (cost linear in the sequence length), followed by a position-wise FFN.
2. *Summarisation*: ``num_seeds`` learned seed vectors attend to the whole sequence and give
   ``num_seeds`` summary tokens (a learned null token keeps empty histories well defined).
3. *MoE cross interaction* (Wukong-style) between the summary tokens and the non-sequence
   tokens (user categorical + dense, candidate categorical, domain): a factorisation-machine
   block (FMB, ``MLP(LN(flatten(X (Xᵀ Y))))``) as a shared expert plus one FMB expert per
   domain (hard-routed by the candidate's domain), and a linear-compression block
   (LCB, ``W X``); ``X_l = LN(concat(FMB, LCB) + X_{l-1})``.

CompSkip: with ``config.comp_skip`` every odd layer skips steps 1-2 and reuses the summary
computed by the layer before, which removes about half of the sequence FLOPs.

Sequences are packed (:mod:`.sequence`): every sequence layer runs on the real events only, so
a batch whose histories fill half of ``seq_len`` costs about half the sequence FLOPs of the
right-padded layout. The padded layout stays available (``padded_sequence = True``) as the
reference the packed one is tested and benchmarked against.

Multi-task heads (one MLP per :class:`~.features.Task`) read the final non-sequence tokens
and the final summary.

Serving API (computation shared across candidates): the sequence path depends only on the
user, so :meth:`KunlunModel.encode_user` runs it once per request and returns a
:class:`~.common.UserState`; :meth:`KunlunModel.score_candidates` runs the per-candidate
part for ``N`` candidates, gathering the user state by ``user_index``. ``forward(batch)`` is
exactly ``score_candidates(encode_user(batch.user), batch.candidate)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import (
    DomainToken,
    TaskHeads,
    UserState,
    ebc_for,
    ec_for,
    packed_sequence_embeddings,
    pooled_tokens,
    sequence_embeddings,
)
from .features import Batch, CandidateFeatures, FeatureSchema, UserFeatures
from .grouped import grouped_mlp, stackable, stacked
from .presets import ModelConfig
from .sequence import PackedSequence, merge_partials
from .sharing import UserRows, gram_rows


class EventEncoders(nn.Module):
    """OneSeq: one encoder per sequence source over the concatenation of that source's event features.

    Input ``[B, L, F, d]`` (per-feature embeddings, zero where a feature belongs to another source,
    see :func:`.common.sequence_embeddings`); output ``[B, L, d]``: the shared features' sum plus
    every source's encoder output. The encoders have no biases, so a source's encoder gives exactly
    zero on the other sources' events and each event is encoded by its own source's encoder only.
    """

    def __init__(self, schema: FeatureSchema, dim: int) -> None:
        super().__init__()
        names = schema.sequence_names
        owned = {f for g in schema.sequence_groups for f in g.features}
        self.shared = [i for i, n in enumerate(names) if n not in owned]
        self.members = [[names.index(f) for f in g.features] for g in schema.sequence_groups]
        self.encoders = nn.ModuleList(
            [
                nn.Sequential(nn.Linear(len(m) * dim, dim, bias=False), nn.GELU(), nn.Linear(dim, dim, bias=False))
                for m in self.members
            ]
        )

    def forward(self, emb: Tensor) -> Tensor:
        # features on dim -2: padded [B, L, F, d] or packed [T, F, d]
        out = emb[..., self.shared, :].sum(-2)
        for members, encoder in zip(self.members, self.encoders, strict=True):
            out = out + encoder(emb[..., members, :].flatten(-2))
        return out


class SequenceInput(nn.Module):
    """Adds learned positions (counted from the most recent event) and normalises.

    With OneSeq sequence groups, the per-source :class:`EventEncoders` first turn each event's own
    features into one vector.
    """

    def __init__(self, seq_len: int, dim: int, events: EventEncoders | None = None) -> None:
        super().__init__()
        self.position = nn.Parameter(torch.randn(seq_len, dim) * 0.02)
        self.norm = nn.LayerNorm(dim)
        self.events = events

    def forward(self, emb: Tensor, layout: Tensor | PackedSequence) -> Tensor:
        """``emb`` packed ``[T, d]`` with its :class:`PackedSequence`, or padded ``[B, L, d]`` with ``valid [B, L]``.

        With OneSeq event encoders the features are still apart on dim -2 (``[T, F, d]`` / ``[B, L, F, d]``).
        """
        if self.events is not None:
            emb = self.events(emb)
        if isinstance(layout, PackedSequence):
            age = (layout.lengths[layout.row] - 1 - layout.pos).clamp(min=0)
            packed: Tensor = self.norm(emb + self.position[age])
            return packed
        valid = layout
        # Right-padded sequences: event i of a user with n events is n-1-i steps old.
        n = valid.sum(1, keepdim=True)
        age = (n - 1 - torch.arange(emb.shape[1], device=emb.device)[None, :]).clamp(min=0)
        out: Tensor = self.norm(emb + self.position[age]) * valid[..., None]
        return out


class BlockAttentionLayer(nn.Module):
    """Pre-norm transformer layer whose attention is restricted to fixed-size blocks."""

    def __init__(self, dim: int, heads: int, block_size: int, ffn_mult: int) -> None:
        super().__init__()
        self.heads = heads
        self.block_size = block_size
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_mult * dim), nn.GELU(), nn.Linear(ffn_mult * dim, dim))

    def forward(self, h: Tensor, layout: Tensor | PackedSequence) -> Tensor:
        """``h`` packed ``[T, d]`` with its :class:`PackedSequence`, or padded ``[B, L, d]`` with ``valid [B, L]``."""
        if isinstance(layout, PackedSequence):
            return self.forward_packed(h, layout)
        valid = layout
        b, length, d = h.shape
        nb, bs, dh = length // self.block_size, self.block_size, d // self.heads
        # Head-major fused projection ([heads, q|k|v, head_dim] output rows): a column shard of
        # ``qkv`` holds whole heads, so tensor parallelism splits heads (hence ``-1`` for the
        # local head count below).
        qkv = self.qkv(self.norm1(h)).view(b * nb, bs, -1, 3, dh).permute(3, 0, 2, 1, 4)
        key_valid = valid.reshape(b * nb, bs)
        # Blocks made only of padding attend everywhere (their output is masked out below).
        mask = (key_valid | ~key_valid.any(-1, keepdim=True))[:, None, None, :]
        att = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=mask)
        h = h + self.proj(att.transpose(1, 2).reshape(b, length, -1))
        h = h + self.ffn(self.norm2(h))
        return h * valid[..., None]

    def forward_packed(self, h: Tensor, seq: PackedSequence) -> Tensor:
        """Projections and FFN on the real tokens; attention on the occupied blocks only."""
        t, d = h.shape
        dh = d // self.heads
        qkv = self.qkv(self.norm1(h))
        qkv = qkv.view(t, qkv.shape[-1] // (3 * dh), 3, dh)  # [T, local heads, q|k|v, dh]; T may be 0
        q, k, v = seq.to_blocks(qkv).permute(3, 0, 2, 1, 4)  # each [blocks, heads, block_size, dh]
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=seq.block_valid[:, None, None, :])
        h = h + self.proj(seq.from_blocks(att.transpose(1, 2)).flatten(1))
        out: Tensor = h + self.ffn(self.norm2(h))
        return out


class Summariser(nn.Module):
    """``num_seeds`` learned queries attend to the sequence: summary tokens ``[B, S, d]``."""

    def __init__(self, dim: int, heads: int, num_seeds: int) -> None:
        super().__init__()
        self.heads = heads
        self.seeds = nn.Parameter(torch.randn(num_seeds, dim) * 0.02)
        self.null = nn.Parameter(torch.zeros(1, dim))
        self.norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, h: Tensor, layout: Tensor | PackedSequence) -> Tensor:
        """``h`` packed ``[T, d]`` with its :class:`PackedSequence`, or padded ``[B, L, d]`` with ``valid [B, L]``."""
        if isinstance(layout, PackedSequence):
            return self.output(self.attend_packed(h, layout, null_visible=True)[1])
        valid = layout
        b, _, d = h.shape
        x = torch.cat([self.null.expand(b, 1, d), self.norm(h)], dim=1)
        keep = torch.cat([torch.ones(b, 1, dtype=torch.bool, device=h.device), valid], dim=1)
        q, k, v = self.project(x)
        att = F.scaled_dot_product_attention(q.expand(b, -1, -1, -1), k, v, attn_mask=keep[:, None, None, :])
        return self.output(att)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Seed queries ``[1, h, S, dh]`` and keys/values ``[B, h, N, dh]`` of the tokens ``x``.

        ``h`` is the local head count: head-major ``kv`` rows ([heads, k|v, head_dim]) make a
        tensor-parallel column shard hold whole heads.
        """
        b, n, d = x.shape
        s, dh = self.seeds.shape[0], d // self.heads
        q = self.q(self.seeds).view(1, s, -1, dh).transpose(1, 2)
        kv = self.kv(x).view(b, n, -1, 2, dh).permute(3, 0, 2, 1, 4)
        return q, kv[0], kv[1]

    def attend_packed(self, h: Tensor, seq: PackedSequence, *, null_visible: bool) -> tuple[Tensor, Tensor]:
        """Seeds attending to each user's packed tokens (and the null key if ``null_visible``).

        Returns ``(lse [B, h, S], out [B, h, S, dh])``: scores per occupied block, merged per
        user by log-sum-exp. A hidden null key keeps its parameters in the graph (weight 0).
        """
        x = torch.cat([self.null, self.norm(h)], dim=0)[None]  # the null key first, as in the padded path
        q, k, v = self.project(x)  # q [1, h, S, dh]; k, v [1, h, 1 + T, dh]
        scale = q.shape[-1] ** -0.5
        floor = torch.finfo(q.dtype).min
        null_lse = (q[0] @ k[0, :, :1].transpose(-1, -2))[..., 0] * scale  # [h, S]
        if not null_visible:
            null_lse = torch.full_like(null_lse, floor)
        kb, vb = (seq.to_blocks(t[0, :, 1:].transpose(0, 1)).permute(0, 2, 1, 3) for t in (k, v))
        scores = (q @ kb.transpose(-1, -2)) * scale  # [blocks, h, S, block_size]
        scores = scores.masked_fill(~seq.block_valid[:, None, None, :], floor)
        lse = torch.logsumexp(scores, dim=-1)
        part = torch.softmax(scores, dim=-1) @ vb
        b = seq.batch_size
        base_lse = null_lse.expand(b, -1, -1)
        base_out = v[0, :, :1].expand(b, -1, q.shape[2], -1)
        return merge_partials(lse, part, seq.block_user, base_lse, base_out)

    def output(self, att: Tensor) -> Tensor:
        """Attention output ``[B, h, S, dh]`` -> summary tokens ``[B, S, d]`` (projection + seed residual)."""
        b, _, s, _ = att.shape
        out: Tensor = self.proj(att.transpose(1, 2).reshape(b, s, -1)) + self.seeds
        return out


class FactorisationMachineBlock(nn.Module):
    """Wukong FMB: ``MLP(LN(flatten(X (Xᵀ Y))))`` -> ``n_out`` tokens."""

    def __init__(self, n_in: int, n_out: int, dim: int, rank: int, hidden: int) -> None:
        super().__init__()
        self.n_out, self.dim = n_out, dim
        self.y = nn.Parameter(torch.randn(n_in, rank) / n_in**0.5)
        self.norm = nn.LayerNorm(n_in * rank)
        self.mlp = nn.Sequential(nn.Linear(n_in * rank, hidden), nn.GELU(), nn.Linear(hidden, n_out * dim))

    def forward(self, x: Tensor) -> Tensor:
        z = torch.bmm(x, torch.einsum("bnd,nk->bdk", x, self.y))  # [B, n_in, rank]
        out: Tensor = self.mlp(self.norm(z.flatten(1))).view(-1, self.n_out, self.dim)
        return out


class MoEInteraction(nn.Module):
    """Shared FMB expert + per-domain FMB experts + LCB, residual over the non-sequence tokens.

    The domain experts run as one grouped computation (:mod:`.grouped`: stacked ``Y``, two bmm
    over the rows grouped by domain); :meth:`route_loop` is the per-expert loop it replaces, kept
    for tensor-parallel shards. :meth:`forward_shared` is the serving form that reads the user's
    summaries by index (:mod:`.sharing`).
    """

    def __init__(self, n_in: int, n_out: int, dim: int, rank: int, hidden: int, num_domains: int) -> None:
        super().__init__()
        n_fmb = (n_out + 1) // 2
        n_lcb = n_out - n_fmb
        self.shared = FactorisationMachineBlock(n_in, n_fmb, dim, rank, hidden)
        self.experts = nn.ModuleList(
            [FactorisationMachineBlock(n_in, n_fmb, dim, rank, hidden) for _ in range(num_domains)]
        )
        self.lcb = nn.Parameter(torch.randn(n_lcb, n_in) / n_in**0.5)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: Tensor, residual: Tensor, domain: Tensor) -> Tensor:
        fmb = self.shared(tokens)
        if len(self.experts) > 0:
            fmb = fmb + self.route(tokens, domain)
        lcb = torch.einsum("on,bnd->bod", self.lcb, tokens)
        out: Tensor = self.norm(torch.cat([fmb, lcb], dim=1) + residual)
        return out

    def route(self, tokens: Tensor, domain: Tensor) -> Tensor:
        """Per-domain expert outputs ``[B, n_fmb, d]``: row ``i`` goes to the expert of ``domain[i]``."""
        if len(self.experts) == 1:
            out: Tensor = self.experts[0](tokens)
            return out
        if not self.grouped():
            return self.route_loop(tokens, domain)
        y = self.expert_stack("y").index_select(0, domain)  # [B, n_in, rank]
        z = torch.bmm(tokens, torch.bmm(tokens.transpose(1, 2), y))
        return self.expert_mlp(z.flatten(1), domain)

    def route_loop(self, tokens: Tensor, domain: Tensor) -> Tensor:
        """One expert after the other on its rows (the reference of the grouped :meth:`route`)."""
        routed = tokens.new_zeros(tokens.shape[0], self.shared.n_out, self.shared.dim)
        for i, expert in enumerate(self.experts):
            # Every expert runs (possibly on zero rows) so that all ranks see the same graph.
            idx = (domain == i).nonzero().squeeze(1)
            routed = routed.index_add(0, idx, expert(tokens.index_select(0, idx)))
        return routed

    def fmbs(self) -> list[FactorisationMachineBlock]:
        return [e for e in self.experts if isinstance(e, FactorisationMachineBlock)]

    def grouped(self) -> bool:
        """Whether the experts can run grouped: all held here, as plain (not tensor-parallel) tensors."""
        fmbs = self.fmbs()
        if len(fmbs) != len(self.experts):
            return False
        return not fmbs or all(
            stackable([e.get_parameter(name) for e in fmbs]) for name in ("y", "mlp.0.weight", "mlp.2.weight")
        )

    def expert_stack(self, name: str) -> Tensor:
        """Parameter ``name`` of every expert, stacked ``[E, ...]`` (packed views when not training)."""
        return stacked(self, name, [e.get_parameter(name) for e in self.fmbs()])

    def expert_mlp(self, z: Tensor, domain: Tensor) -> Tensor:
        """The experts' ``MLP(LN(z))`` on ``z [B, n_in * rank]``, row ``i`` by expert ``domain[i]``."""
        norm = (self.expert_stack("norm.weight"), self.expert_stack("norm.bias"))
        first = (self.expert_stack("mlp.0.weight"), self.expert_stack("mlp.0.bias"))
        second = (self.expert_stack("mlp.2.weight"), self.expert_stack("mlp.2.bias"))
        out = grouped_mlp(z, domain, (*norm, self.shared.norm.eps), first, second)
        return out.view(-1, self.shared.n_out, self.shared.dim)

    def forward_shared(self, summary: Tensor, x: Tensor, domain: Tensor, rows: UserRows) -> Tensor:
        """Same as ``forward(cat([summary rows, x]), x, domain)`` with ``summary [U, s, d]`` read by index.

        Needs :meth:`grouped`. A candidate holds the Gram matrix of its tokens and its user's
        summaries, never the summaries themselves (module docstring of :mod:`.sharing`).
        """
        s = summary.shape[1]
        gram = gram_rows(summary, x, rows)  # [N, n_in, n_in]
        z = torch.matmul(gram, self.shared.y)  # X (Xᵀ Y) = (X Xᵀ) Y
        fmb = self.shared.mlp(self.shared.norm(z.flatten(1))).view(-1, self.shared.n_out, self.shared.dim)
        if len(self.experts) > 0:
            if len(self.experts) == 1:
                domain = torch.zeros_like(domain)  # one expert takes every row, as in route
            z = torch.bmm(gram, self.expert_stack("y").index_select(0, domain))
            fmb = fmb + self.expert_mlp(z.flatten(1), domain)
        user_lcb = torch.einsum("os,usd->uod", self.lcb[:, :s], summary)
        lcb = rows.take(user_lcb) + torch.einsum("of,nfd->nod", self.lcb[:, s:], x)
        out: Tensor = self.norm(torch.cat([fmb, lcb], dim=1) + x)
        return out


class DenseToken(nn.Module):
    def __init__(self, num_dense: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(max(num_dense, 1), dim)
        self.num_dense = num_dense

    def forward(self, dense: Tensor) -> Tensor:
        if self.num_dense == 0:
            dense = torch.zeros(dense.shape[0], 1, device=dense.device, dtype=self.proj.weight.dtype)
        out: Tensor = self.proj(dense)[:, None, :]
        return out


class KunlunSparse(nn.Module):
    """The TorchRec modules (sharded by DistributedModelParallel)."""

    def __init__(self, schema: FeatureSchema, dim: int, device: torch.device) -> None:
        super().__init__()
        self.user = ebc_for(schema.user_features, dim, device)
        self.item = ebc_for(schema.item_features, dim, device)
        self.sequence = ec_for(schema.sequence_features, dim, device)


class KunlunModel(nn.Module):
    """See the module docstring. Build with :func:`gem_workloads.models.build_model`."""

    def __init__(self, schema: FeatureSchema, config: ModelConfig, device: torch.device | None = None) -> None:
        super().__init__()
        dev = device or torch.device("cpu")
        d = config.embedding_dim
        self.schema, self.config = schema, config
        # The reference layout: sequences right-padded to ``seq_len`` (benchmarks and equivalence tests).
        self.padded_sequence = False
        self.sparse = KunlunSparse(schema, d, dev)
        self.dense_token = DenseToken(schema.num_user_dense, d)
        self.domain_token = DomainToken(schema.num_domains, d)
        events = EventEncoders(schema, d) if schema.sequence_groups else None
        self.sequence_input = SequenceInput(config.seq_len, d, events)
        n_seq = config.num_sequence_layers
        self.attention = nn.ModuleList(
            [BlockAttentionLayer(d, config.num_heads, config.block_size, config.ffn_mult) for _ in range(n_seq)]
        )
        self.summarisers = nn.ModuleList([Summariser(d, config.num_heads, config.num_seeds) for _ in range(n_seq)])
        self.num_user_tokens = len(schema.user_features) + 1
        n_feat = self.num_user_tokens + len(schema.item_features) + 1
        self.interactions = nn.ModuleList(
            [
                MoEInteraction(
                    config.num_seeds + n_feat, n_feat, d, config.fmb_rank, config.expert_hidden, schema.num_domains
                )
                for _ in range(config.num_layers)
            ]
        )
        self.token_norm = nn.LayerNorm(d)
        self.heads = TaskHeads((n_feat + config.num_seeds) * d, config.head_hidden, schema.num_tasks)

    def dense_units(self) -> list[nn.Module]:
        """Modules holding every non-embedding parameter: the FSDP2 units."""
        return [
            self.dense_token,
            self.domain_token,
            self.sequence_input,
            self.token_norm,
            *self.attention,
            *self.summarisers,
            *self.interactions,
            self.heads,
        ]

    def encode_user(self, user: UserFeatures) -> UserState:
        """Run the user-only part once: user tokens and the per-layer sequence summaries."""
        cfg = self.config
        tokens = torch.cat(
            [pooled_tokens(self.sparse.user, user.categorical, self.schema.user_names), self.dense_token(user.dense)],
            dim=1,
        )
        layout: Tensor | PackedSequence
        names, groups = self.schema.sequence_names, self.schema.sequence_groups
        if self.padded_sequence:
            h, layout = sequence_embeddings(self.sparse.sequence, user.sequence, names, cfg.seq_len, groups)
        else:
            h, layout = packed_sequence_embeddings(
                self.sparse.sequence, user.sequence, names, cfg.seq_len, cfg.block_size, groups
            )
        h = self.sequence_input(h, layout)
        summaries: list[Tensor] = []
        summary: Tensor | None = None
        j = 0
        for layer in range(cfg.num_layers):
            if cfg.computes_sequence(layer):
                h = self.attention[j](h, layout)
                summary = self.summarisers[j](h, layout)
                j += 1
            assert summary is not None
            summaries.append(summary)  # CompSkip layers reuse the cached summary
        return UserState(tokens=tokens, summaries=torch.stack(summaries, dim=1))

    def score_candidates(
        self, user_state: UserState, candidates: CandidateFeatures, user_index: Tensor | None = None
    ) -> Tensor:
        """Logits ``[N, num_tasks]`` for ``N`` candidates.

        ``user_index[n]`` is the row of ``user_state`` that candidate ``n`` belongs to (``None``:
        candidate ``n`` belongs to user ``n``). One request = one user row and N candidates
        with ``user_index = zeros(N)``: the sequence is encoded once, not N times, and the
        candidates read the user's state by index (:mod:`.sharing`), never a copy of it.
        """
        x, state, rows = self.interact(user_state, candidates, user_index)
        last = state.summaries[:, -1].flatten(1)
        if rows.index is None:
            logits: Tensor = self.heads(torch.cat([x.flatten(1), last], dim=1))
            return logits
        return self.heads.forward_split(x.flatten(1), last, rows.take)

    def embed_candidates(
        self, user_state: UserState, candidates: CandidateFeatures, user_index: Tensor | None = None
    ) -> Tensor:
        """The user-ad embedding ``[N, embedding_size]`` the task heads read (what Solaris precomputes)."""
        x, state, rows = self.interact(user_state, candidates, user_index)
        return torch.cat([x.flatten(1), rows.take(state.summaries[:, -1].flatten(1))], dim=1)

    def shares_user_state(self) -> bool:
        """Whether candidates can read the user state by index (every interaction local and grouped)."""
        return all(isinstance(m, MoEInteraction) and m.grouped() for m in self.interactions)

    def interact(
        self, user_state: UserState, candidates: CandidateFeatures, user_index: Tensor | None
    ) -> tuple[Tensor, UserState, UserRows]:
        """The last interaction's tokens ``[N, n_feat, d]``, the user state they read, and how they read it.

        With ``user_index`` the state is read by index (:meth:`MoEInteraction.forward_shared`);
        without, row ``n`` of the state is candidate ``n``'s (training). A model that cannot share
        (tensor-parallel shards) copies the state per candidate first.
        """
        if user_index is not None and not self.shares_user_state():
            user_state, user_index = user_state.select(user_index), None
        rows = UserRows(user_index, user_state.size)
        item = pooled_tokens(self.sparse.item, candidates.categorical, self.schema.item_names)
        # Per-token LayerNorm: embedding tables start at very different scales.
        tokens = [rows.take(user_state.tokens), item, self.domain_token(candidates.domain)]
        x = self.token_norm(torch.cat(tokens, dim=1))
        for layer, interaction in enumerate(self.interactions):
            summary = user_state.summaries[:, layer]
            if user_index is None:
                x = interaction(torch.cat([summary, x], dim=1), x, candidates.domain)
            else:
                assert isinstance(interaction, MoEInteraction)  # shares_user_state() checked it
                x = interaction.forward_shared(summary, x, candidates.domain, rows)
        return x, user_state, rows

    @property
    def embedding_size(self) -> int:
        """Width of :meth:`embed_candidates` rows."""
        cfg = self.config
        n_feat = self.num_user_tokens + len(self.schema.item_names) + 1
        return (n_feat + cfg.num_seeds) * cfg.embedding_dim

    def forward(self, batch: Batch) -> Tensor:
        return self.score_candidates(self.encode_user(batch.user), batch.candidate)
