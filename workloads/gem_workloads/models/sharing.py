"""Candidates read their user's state by index: nothing of the user is copied per candidate.

A request scores ``N`` candidates of one user. The user's state (tokens and per-layer sequence
summaries, :class:`~.common.UserState`) is computed once; a per-candidate copy of it
(``UserState.select``) would make a request's memory grow by the whole state per candidate. Here
the candidate side reads it through :class:`UserRows` — a broadcast view when the batch holds one
user, a gather of small per-user results otherwise — and the MoE interaction is rewritten so that
the user's summary tokens never join the candidate's tokens:

For the factorisation-machine block ``z = X (Xᵀ Y)`` with ``X = [S; x]`` (``S`` the user's
``s`` summary tokens, ``x`` the candidate's ``f`` tokens) and ``Y = [Y_s; Y_x]``::

    z_top = (S Sᵀ) Y_s + (S xᵀ) Y_x          [s, r]
    z_bot = (S xᵀ)ᵀ Y_s + (x xᵀ) Y_x          [f, r]

so a candidate needs only ``C = S xᵀ`` (``s x f`` dots with its user's summaries) and
``K = x xᵀ``; ``S Sᵀ Y_s`` is computed once per user. The same holds for the linear compression
block (``W [S; x] = W_s S + W_x x``) and for the heads' first layer (split by columns). The
results equal the concatenated form up to float reassociation, and the ``[d, r]`` intermediate
``Xᵀ Y`` per candidate disappears as well.
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


def fmb_z(user_top: Tensor, cross: Tensor, gram: Tensor, y_s: Tensor, y_x: Tensor) -> Tensor:
    """The FMB's ``z = X (Xᵀ Y)`` ``[N, s + f, r]`` from its parts (see the module docstring).

    ``user_top``: ``S Sᵀ Y_s`` per candidate's row (a view or gather of a per-user tensor);
    ``cross``: ``S xᵀ`` ``[N, s, f]``; ``gram``: ``x xᵀ`` ``[N, f, f]``; ``y_s``/``y_x``: the
    block's ``Y`` split at ``s``, either shared (``[s, r]``) or one per row (``[N, s, r]``).
    """
    top = user_top + torch.matmul(cross, y_x)
    bottom = torch.matmul(cross.transpose(1, 2), y_s) + torch.matmul(gram, y_x)
    return torch.cat([top, bottom], dim=1)


__all__ = ["UserRows", "fmb_z"]
