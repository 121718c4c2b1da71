"""A node cache the loader may not write (the kubelet's root:root 0755 hostPath) falls back to a direct pull."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gem_workloads.loader.cache import cache_unusable
from gem_workloads.loader.pull import MARKER_NAME

LOADER_UID = 65532  # the workloads image's uid
SIZES = {"model.bin": 300_000}


@pytest.fixture
def world() -> Iterator[Path]:
    """A directory every uid can traverse (pytest's tmp_path is 0700 to root)."""
    root = Path(tempfile.mkdtemp(prefix="gem-cache-fallback-"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# As root, the child imports the loader first (the interpreter may live in a 0700 home) and then
# drops to the loader's uid, as the init container runs; as anyone else it runs as itself with a
# read-only cache directory.
_DROP = f"""
import os, sys
import gem_workloads.loader.cache, gem_workloads.loader.cli as cli, gem_workloads.loader.pull
import gem_workloads.loader.sources, gem_workloads.loader.download
if os.getuid() == 0:
    os.setgroups([]); os.setgid({LOADER_UID}); os.setuid({LOADER_UID})
sys.exit(cli.main(sys.argv[1:]))
"""


def run_loader(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _DROP, *args], capture_output=True, text=True, timeout=60, cwd=str(cwd)
    )


def _kubelet_dir(path: Path) -> None:
    """What hostPath DirectoryOrCreate leaves: owned by root (here: us), mode 0755."""
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755 if os.getuid() == 0 else 0o555)


def test_unwritable_cache_falls_back_to_a_direct_pull(world: Path, helpers: Any) -> None:
    src = helpers.make_model(world / "src", SIZES)
    for p in [src, *src.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    cache = world / "cache"
    _kubelet_dir(cache)
    dest = world / "model"
    dest.mkdir()
    term = world / "termination-log"
    term.touch()
    if os.getuid() == 0:
        os.chown(dest, LOADER_UID, LOADER_UID)
        os.chown(term, LOADER_UID, LOADER_UID)
    out = run_loader(
        "pull",
        str(src),
        str(dest),
        "--cache",
        str(cache),
        "--progress",
        "json",
        "--termination-log",
        str(term),
        cwd=world,
    )
    assert out.returncode == 0, out.stderr
    assert helpers.same_tree(src, dest, list(SIZES))
    assert (dest / MARKER_NAME).exists()
    events = [json.loads(line) for line in out.stdout.splitlines()]
    fallback = [e for e in events if e["event"] == "cache-fallback"]
    assert len(fallback) == 1 and str(cache) in fallback[0]["reason"], events
    assert events[-1]["sources"] == {"origin": sum(SIZES.values())}
    assert "gem-load: warning: node cache" in out.stderr and "Traceback" not in out.stderr
    assert "nodeCache: false" in out.stderr  # the fix is named
    message = json.loads(term.read_text())
    assert "not writable" in message["cacheFallback"] and message["bytes"] == sum(SIZES.values())
    assert list(cache.iterdir()) == []  # nothing half-made in the cache


def test_unwritable_dest_is_still_an_error(world: Path, helpers: Any) -> None:
    """Only the cache falls back: a destination the loader cannot write fails the pull, clearly."""
    src = helpers.make_model(world / "src", SIZES)
    for p in [src, *src.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    parent = world / "ro"
    _kubelet_dir(parent)
    out = run_loader("pull", str(src), str(parent / "model"), cwd=world)
    assert out.returncode == 1, out
    assert "DEST: cannot create" in out.stderr and "Traceback" not in out.stderr


def test_cache_unusable_only_for_paths_inside_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    assert cache_unusable(PermissionError(13, "Permission denied", str(root / "locks" / "x.lock")), root)
    assert cache_unusable(OSError(30, "Read-only file system", str(root / "models")), root)
    assert not cache_unusable(PermissionError(13, "Permission denied", str(tmp_path / "dest")), root)
    assert cache_unusable(OSError(28, "No space left on device", str(root / "tmp")), root)  # a full cache volume
    assert not cache_unusable(OSError(28, "No space left on device", str(tmp_path / "dest")), root)
    assert not cache_unusable(PermissionError(13, "Permission denied"), root)
