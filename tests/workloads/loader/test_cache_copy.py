"""A warm node-cache load copies the entry into DEST: direct (O_DIRECT from the entry's pages)
where the filesystem allows, in-kernel copy_file_range where not; byte-identical either way."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from gem_workloads.loader import cache as cache_mod
from gem_workloads.loader.cache import NodeCache
from gem_workloads.loader.progress import NullReporter
from gem_workloads.loader.pull import PullConfig, pull

# Sizes around the 4 KiB alignment: an unaligned tail, an exact multiple, a file below one block.
SIZES = {"model.bin": 3 * 1024 * 1024 + 123, "aligned.bin": 64 * 4096, "tiny.json": 100, "empty": 0}
RELS = list(SIZES)


async def _warm_load(src: Path, root: Path, dest: Path) -> dict[str, Any]:
    cache = NodeCache(root / "cache", high=1 << 40, low=1 << 39)
    await pull(str(src), root / "fill", cfg=PullConfig(streams=2), cache=cache)
    rep = NullReporter()
    summary = await pull(str(src), dest, cfg=PullConfig(streams=2), cache=cache, reporter=rep)
    assert any(e["event"] == "cache-hit" for e in rep.events)
    return summary


async def test_direct_copy_from_the_cache(tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES, algorithm="blake3")
    used: list[bool] = []
    real = cache_mod._copy_direct

    def spy(a: Path, b: Path, size: int) -> bool:
        used.append(real(a, b, size))
        return used[-1]

    monkeypatch.setattr(cache_mod, "_copy_direct", spy)
    summary = await _warm_load(src, tmp_path, tmp_path / "dst")
    assert summary["sources"] == {"cache": sum(SIZES.values())}
    assert helpers.same_tree(src, tmp_path / "dst", RELS)
    assert True in used  # ext4/xfs under tmp_path take the direct path for files of a block or more


async def test_copy_without_o_direct_falls_back(tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem that refuses O_DIRECT (some network filesystems, older tmpfs): the copy goes
    through copy_file_range, with the same result, and the refused attempt writes nothing."""
    real_open = os.open

    def no_direct(path: Any, flags: int, *args: Any) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "O_DIRECT not supported", str(path))
        return real_open(path, flags, *args)

    probe, out = tmp_path / "probe", tmp_path / "probe.out"
    probe.write_bytes(b"x" * 8192)
    out.write_bytes(b"")
    monkeypatch.setattr(os, "open", no_direct)
    assert cache_mod._copy_direct(probe, out, 8192) is False and out.read_bytes() == b""
    src = helpers.make_model(tmp_path / "src", SIZES)
    await _warm_load(src, tmp_path, tmp_path / "dst")
    assert helpers.same_tree(src, tmp_path / "dst", RELS)
