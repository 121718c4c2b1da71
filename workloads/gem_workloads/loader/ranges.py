"""How a pull cuts its files into ranged GETs: chunks of whole parts, and the tail's smaller pieces.

Why the tail is split: with N streams, the pull's final round holds fewer than N chunks, so
most streams would idle while a few finish a whole range each. The ranges of that round are
fetched as smaller pieces by several streams into one buffer, verified when their part is
whole (fewer than `streams` such buffers). A full final round is left whole: its pieces would
only add requests.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from gem_workloads.loader.config import PullConfig
from gem_workloads.loader.diskwrite import DIRECT_ALIGN

TAIL_PIECES = 4
"""At most this many pieces per tail range: the last round's idle shrinks up to this many times."""


@dataclass(frozen=True)
class Chunk:
    """One ranged GET: contiguous parts [first, last) of a file, for one generation of it."""

    path: str
    gen: int
    first: int
    last: int  # exclusive part index


@dataclass(eq=False)
class Group:
    """A tail chunk fetched as pieces into one buffer; the last piece to land verifies and writes it."""

    chunk: Chunk
    left: int
    buf: memoryview | None = None
    failed: bool = False
    kind: str = "origin"


@dataclass(frozen=True, eq=False)
class Piece:
    """Bytes [lo, hi) of a file, one ranged GET smaller than a part; verified with its whole group."""

    group: Group
    lo: int
    hi: int


def split_tail(chunks: list[Chunk], cfg: PullConfig, part_size: int, sizes: Mapping[str, int]) -> list[Chunk | Piece]:
    """The final round's r = C mod N chunks (all C when C < N) become pieces, about N in all,
    so every stream has work while the round finishes; a full final round is left whole (its
    pieces would only add requests). `sizes`: each file's size in bytes, by manifest path."""
    n = cfg.streams
    r = len(chunks) % n if len(chunks) >= n else len(chunks)
    if n < 2 or not cfg.split_tail or r == 0:
        return list(chunks)
    head, tail = chunks[:-r], chunks[-r:]
    k = min(TAIL_PIECES, -(-n // r))
    out: list[Chunk | Piece] = list(head)
    for c in tail:
        start, end = c.first * part_size, min(c.last * part_size, sizes[c.path])
        pieces = min(k, (end - start) // max(cfg.min_piece, 1))
        if pieces < 2:
            out.append(c)
            continue
        group = Group(c, left=pieces)
        step = (end - start) // pieces // DIRECT_ALIGN * DIRECT_ALIGN or (end - start) // pieces
        bounds = [start + i * step for i in range(pieces)] + [end]
        out.extend(Piece(group, a, b) for a, b in itertools.pairwise(bounds))
    return out
