"""Jagged behaviour sequences: every user's events packed end to end, no padding computed.

A batch's sequences have very different lengths (the synthetic data draws them uniformly from
``0..seq_len``), so padding every row to ``seq_len`` spends about half of the sequence FLOPs on
padding. :class:`PackedSequence` describes the packed layout instead: token ``t`` of the flat
``[T, d]`` activations is event ``pos[t]`` of user ``row[t]``. Position-wise layers (norms,
projections, FFNs) run on the ``T`` real tokens only.

Block attention needs square blocks: :meth:`PackedSequence.to_blocks` scatters the packed
tokens into ``[num_blocks, block_size, ...]`` where ``num_blocks`` counts only blocks that hold
at least one event (a user with ``n`` events has ``ceil(n / block_size)``), so the only
padding left is the tail of each user's last block. Blocks are cut from each user's first
event, exactly as in the right-padded layout, so both layouts compute the same function.

Attention over a whole user sequence (the summariser's seeds) is computed per block and the
per-block results are merged per user with their log-sum-exps (:func:`merge_partials`), the
same exact rule context parallelism uses across ranks.

Pure torch (index ops, no fbgemm kernel), so it runs on any device the model runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class PackedSequence:
    """Layout of ``B`` jagged rows of at most ``max_len`` events, cut in blocks of ``block_size``.

    ``lengths [B]`` (already capped at ``max_len``), ``row``/``pos [T]`` (user and position of
    each packed token), ``block [T]`` (the token's block), ``block_user [num_blocks]`` and
    ``block_valid [num_blocks, block_size]`` (which block slots hold a token).
    """

    lengths: Tensor
    row: Tensor
    pos: Tensor
    block: Tensor
    block_user: Tensor
    block_valid: Tensor
    max_len: int
    block_size: int

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.row.shape[0])

    @property
    def num_blocks(self) -> int:
        return int(self.block_user.shape[0])

    @property
    def full_blocks(self) -> bool:
        """Every block holds ``block_size`` events (e.g. one user with a full history): no scatter needed."""
        return self.num_tokens == self.num_blocks * self.block_size

    @staticmethod
    def build(lengths: Tensor, max_len: int, block_size: int) -> PackedSequence:
        """The layout of rows with ``lengths`` events, each capped at ``max_len``."""
        lengths = lengths.to(torch.long).clamp(min=0, max=max_len)
        dev = lengths.device
        per_user_blocks = (lengths + block_size - 1) // block_size
        # One host sync for both sizes (allocation needs them).
        total, blocks = (int(v) for v in torch.stack([lengths.sum(), per_user_blocks.sum()]).tolist())
        users = torch.arange(lengths.shape[0], device=dev)
        row = torch.repeat_interleave(users, lengths, output_size=total)
        starts = torch.cumsum(lengths, 0) - lengths
        pos = torch.arange(total, device=dev) - starts[row]
        block_starts = torch.cumsum(per_user_blocks, 0) - per_user_blocks
        block = block_starts[row] + pos // block_size
        block_user = torch.repeat_interleave(users, per_user_blocks, output_size=blocks)
        block_valid = torch.zeros(blocks, block_size, dtype=torch.bool, device=dev)
        block_valid[block, pos % block_size] = True
        return PackedSequence(lengths, row, pos, block, block_user, block_valid, max_len, block_size)

    def window(self, start: int, size: int) -> tuple[PackedSequence, Tensor]:
        """Events ``start .. start + size - 1`` of every row (a context-parallel shard).

        Returns the window's layout and the mask over this layout's tokens that selects them.
        ``start`` is a multiple of ``block_size``, so blocks are those of the whole sequence.
        """
        keep = (self.pos >= start) & (self.pos < start + size)
        local = PackedSequence.build((self.lengths - start).clamp(min=0, max=size), size, self.block_size)
        return local, keep

    def to_blocks(self, x: Tensor) -> Tensor:
        """Packed ``[T, ...]`` -> ``[num_blocks, block_size, ...]`` (empty slots are zero)."""
        if self.full_blocks:  # token t is slot t % block_size of block t // block_size
            return x.reshape(self.num_blocks, self.block_size, *x.shape[1:])
        out = x.new_zeros(self.num_blocks, self.block_size, *x.shape[1:])
        return out.index_put((self.block, self.pos % self.block_size), x)

    def from_blocks(self, x: Tensor) -> Tensor:
        """``[num_blocks, block_size, ...]`` -> packed ``[T, ...]``."""
        if self.full_blocks:
            return x.reshape(self.num_tokens, *x.shape[2:])
        return x[self.block, self.pos % self.block_size]

    def pad(self, x: Tensor) -> Tensor:
        """Packed ``[T, ...]`` -> right-padded ``[B, max_len, ...]`` (a fixed-shape wire format)."""
        out = x.new_zeros(self.batch_size, self.max_len, *x.shape[1:])
        return out.index_put((self.row, self.pos), x)

    def unpad(self, x: Tensor) -> Tensor:
        """Right-padded ``[B, max_len, ...]`` -> packed ``[T, ...]``."""
        return x[self.row, self.pos]

    def valid(self) -> Tensor:
        """The right-padded layout's mask ``[B, max_len]``."""
        return torch.arange(self.max_len, device=self.lengths.device)[None, :] < self.lengths[:, None]


def pack_jagged(values: Tensor, lengths: Tensor, max_len: int, block_size: int) -> tuple[Tensor, PackedSequence]:
    """Jagged rows ``values [sum(lengths), d]`` -> (each row's first ``max_len`` values, packed; layout)."""
    lengths = lengths.to(device=values.device, dtype=torch.long)
    users = torch.arange(lengths.shape[0], device=values.device)
    row = torch.repeat_interleave(users, lengths, output_size=values.shape[0])
    pos = torch.arange(values.shape[0], device=values.device) - (torch.cumsum(lengths, 0) - lengths)[row]
    keep = pos < max_len
    kept = values if bool(keep.all()) else values[keep]
    return kept, PackedSequence.build(lengths, max_len, block_size)


def merge_partials(
    lse: Tensor, out: Tensor, owner: Tensor, base_lse: Tensor, base_out: Tensor
) -> tuple[Tensor, Tensor]:
    """Exact softmax attention from partial results over disjoint key sets.

    ``lse [N, ...]`` / ``out [N, ..., dh]``: log-sum-exp and normalised output of partial ``n``,
    which belongs to row ``owner[n]``; ``base_lse [B, ...]`` / ``base_out [B, ..., dh]``: one more
    partial per row (the null key), which makes every row well defined. Returns the merged
    ``(lse [B, ...], out [B, ..., dh])``: ``out = sum_n exp(lse_n - lse) * out_n``.
    """
    idx = owner.view(-1, *([1] * (lse.dim() - 1))).expand_as(lse)
    # The running maximum only keeps exp() in range; it cancels exactly, so no gradient flows through it.
    top = base_lse.detach().scatter_reduce(0, idx, lse.detach(), "amax", include_self=True)
    w = torch.exp(lse - top[owner])
    w_base = torch.exp(base_lse - top)
    denom = w_base.index_add(0, owner, w)
    num = (w_base[..., None] * base_out).index_add(0, owner, w[..., None] * out)
    return top + torch.log(denom), num / denom[..., None]


__all__ = ["PackedSequence", "merge_partials", "pack_jagged"]
