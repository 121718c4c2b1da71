"""Checkpoints with ``torch.distributed.checkpoint`` in ``DIR/step-NNNNNN/``.

A checkpoint counts only once every rank has written its shards and rank 0 has written
``.complete`` into it, so a run killed mid-save resumes from the previous one. The newest
complete checkpoint is the default resume point; older ones beyond ``keep`` are removed.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

MARKER = ".complete"
_NAME = re.compile(r"step-(\d+)")


def checkpoint_dir_from_uri(uri: str) -> Path:
    """A local path or ``file://`` URI (object stores are mounted into the pod, e.g. by a CSI driver)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else uri)
    raise ValueError(
        f"GEM_CHECKPOINT_URI={uri!r}: only local paths or file:// are written directly; "
        "mount the bucket (e.g. a CSI volume) and pass its path"
    )


class CheckpointManager:
    def __init__(self, root: Path, keep: int = 3) -> None:
        self.root, self.keep = root, keep

    @staticmethod
    def name(step: int) -> str:
        return f"step-{step:06d}"

    def complete(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = _NAME.fullmatch(p.name)
            if m and (p / MARKER).exists():
                found.append((int(m.group(1)), p))
        return sorted(found)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1][1] if done else None

    def save(self, step: int, state: dict[str, Any], rank: int) -> Path:
        path = self.root / self.name(step)
        if rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            stale = path / MARKER
            if stale.exists():
                stale.unlink()
        dist.barrier()
        dcp_save(state, checkpoint_id=str(path))
        dist.barrier()
        if rank == 0:
            (path / MARKER).write_text(json.dumps({"step": step, "time": time.time()}))
            for _, old in self.complete()[: -self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        dist.barrier()
        return path

    def load(self, path: Path, state: dict[str, Any]) -> None:
        if not (path / MARKER).exists():
            raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER})")
        dcp_load(state, checkpoint_id=str(path))
