"""Candidates read their user's state by index: nothing of the user is copied per candidate.

A request scores ``N`` candidates of one user. The user's state (tokens and per-layer sequence
summaries, :class:`~.common.UserState`) is computed once; a per-candidate copy of it
(``UserState.select``) would make a request's memory grow by the whole state per candidate. Here
the candidate side reads it through :class:`UserRows` — a broadcast view when the batch holds one
user, a gather of small per-user results otherwise — and the MoE interaction is rewritten so that
the user's summary tokens never join the candidate's tokens:

For the factorisation-machine block ``z = X (Xᵀ Y)`` with ``X = [S; x]`` (``S`` the user's
``s`` summary tokens, ``x`` the candidate's ``f`` tokens), ``z = (X Xᵀ) Y`` and the Gram matrix
of the concatenated tokens is assembled from its blocks::

    X Xᵀ = [[S Sᵀ, S xᵀ],
            [x Sᵀ, x xᵀ]]

``S Sᵀ`` is computed once per user (and read as a view), ``S xᵀ`` pairs each candidate with its
user's summaries, ``x xᵀ`` is the candidate's own: a candidate holds an ``(s + f)²`` matrix
instead of ``s + f`` tokens of width ``d`` (and the ``[d, r]`` product ``Xᵀ Y`` per candidate
of the concatenated form is gone). The linear compression block splits the same way
(``W [S; x] = W_s S + W_x x``), as does the heads' first layer (by columns). Results equal the
concatenated form up to float reassociation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class UserRows:
    """Which user row each of ``N`` candidates reads: ``index[n]`` (``None``: row ``n``)."""

    index: Tensor | None
    num_users: int

    @property
    def broadcast(self) -> bool:
        """One user for every candidate: per-user tensors are read as stride-0 views."""
        return self.index is not None and self.num_users == 1

    def take(self, per_user: Tensor) -> Tensor:
        """``[U, ...]`` -> ``[N, ...]``: a view for one user, a gather otherwise."""
        if self.index is None:
            return per_user
        if self.broadcast:
            return per_user.expand(self.index.shape[0], *per_user.shape[1:])
        return per_user.index_select(0, self.index)

    def cross(self, summary: Tensor, x: Tensor) -> Tensor:
        """``C[n] = S[user(n)] x[n]ᵀ``: ``summary [U, s, d]``, ``x [N, f, d]`` -> ``[N, s, f]``.

        One user: a single ``[N*f, d] @ [d, s]`` matmul. Several: the summaries are gathered for
        one layer at a time (``[N, s, d]``, freed before the next layer).
        """
        if self.broadcast:
            n, f, d = x.shape
            return (x.reshape(n * f, d) @ summary[0].transpose(0, 1)).view(n, f, -1).transpose(1, 2)
        return torch.bmm(self.take(summary), x.transpose(1, 2))


def gram_rows(summary: Tensor, x: Tensor, rows: UserRows) -> Tensor:
    """``X Xᵀ`` per candidate with ``X = [S[user(n)]; x[n]]``: ``[N, s + f, s + f]``.

    ``summary [U, s, d]`` (one row per user), ``x [N, f, d]`` (the candidates' tokens).
    """
    cross = rows.cross(summary, x)  # [N, s, f]
    user = rows.take(torch.bmm(summary, summary.transpose(1, 2)))  # [N, s, s], a view for one user
    own = torch.bmm(x, x.transpose(1, 2))  # [N, f, f]
    top = torch.cat([user, cross], dim=2)
    bottom = torch.cat([cross.transpose(1, 2), own], dim=2)
    return torch.cat([top, bottom], dim=1)


__all__ = ["UserRows", "gram_rows"]
