"""What a pull is told (PullConfig) and what it reports (PullStats).

Why a module of its own: the download engine, the node cache and the pull itself all take the
same knobs and add to the same account, and none of them should have to import another to get
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PullConfig:
    """Tuning knobs; defaults follow what saturates object stores (8-64 MiB ranges, 16+ streams)."""

    streams: int = 32
    request_size: int | None = None
    max_attempts: int = 6
    peer_attempts: int = 2
    backoff_base: float = 0.2
    backoff_max: float = 8.0
    max_restarts: int = 3
    split_tail: bool = True
    """Fetch the pull's last `streams` ranges as TAIL_PIECES smaller GETs each (see loader.download)."""
    min_piece: int = 1 << 20
    """Smallest tail piece: below this a request's latency costs more than the idle it saves."""
    direct_io: bool = True
    """Write aligned ranges with O_DIRECT where the filesystem allows it: the page-cache copy
    costs about 1 CPU-second per GB, as much as SHA-256, on nodes whose cores the GPUs need."""
    receive: str = "socket"
    """`socket`: ranged GETs read from the socket into the stream's buffer (rawhttp); `library`:
    through obstore / aiohttp (sources.RECEIVE_MODES)."""


@dataclass
class PullStats:
    """What a pull cost, by source kind (origin, peer, cache): the marker and the operator report it."""

    fetched: dict[str, int] = field(default_factory=dict)
    resumed: int = 0
    retries: int = 0
    restarts: int = 0

    def add(self, kind: str, n: int) -> None:
        self.fetched[kind] = self.fetched.get(kind, 0) + n
