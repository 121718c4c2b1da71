"""Every unusable node cache falls back to a direct pull: a path through a regular file, a full volume.

A full cache volume is a real 1 MiB tmpfs where the kernel lets an unprivileged user namespace
mount one (``unshare -rm``), and a fault hook (ENOSPC from the allocation of any file under the
cache) everywhere, so the fallback is tested on every machine. A full destination still fails,
with the bytes the model needs, and nothing is marked complete.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_workloads.loader.cache import NodeCache
from gem_workloads.loader.config import PullConfig
from gem_workloads.loader.errors import DiskFullError
from gem_workloads.loader.pull import MARKER_NAME, pull

SIZES = {"model.bin": 3_000_000}  # 3 MB: more than a 1 MiB cache volume holds
TOTAL = sum(SIZES.values())


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _assert_fell_back(out: subprocess.CompletedProcess[str], why: str, cache: Path) -> None:
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    events = _events(out.stdout)
    fallback = [e for e in events if e["event"] == "cache-fallback"]
    assert len(fallback) == 1 and str(cache) in fallback[0]["reason"] and why in fallback[0]["reason"], events
    assert events[-1]["sources"] == {"origin": TOTAL}
    assert f"gem-load: warning: node cache {cache}" in out.stderr and "nodeCache: false" in out.stderr


def test_cache_path_through_a_regular_file_pulls_directly(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    blocker = tmp_path / "node"
    blocker.write_text("a regular file where the cache's parent directory should be")
    cache = blocker / "gem-cache"
    dest, term = tmp_path / "model", tmp_path / "termination-log"
    out = helpers.cli(
        "pull", str(src), str(dest), "--cache", str(cache), "--progress", "json", "--termination-log", str(term)
    )
    _assert_fell_back(out, "is not a directory", cache)
    assert helpers.same_tree(src, dest, list(SIZES)) and (dest / MARKER_NAME).exists()
    message = json.loads(term.read_text())
    assert "not a directory" in message["cacheFallback"] and message["bytes"] == TOTAL
    assert blocker.is_file()


def test_cache_path_that_is_a_regular_file_pulls_directly(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    cache = tmp_path / "cache"
    cache.write_text("not a directory")
    out = helpers.cli("pull", str(src), str(tmp_path / "model"), "--cache", str(cache), "--progress", "json")
    _assert_fell_back(out, "is not a directory", cache)


def _full_under(root: Path) -> Any:
    """A posix_fallocate that reports ENOSPC for files under `root` (a full volume there) and works elsewhere."""
    real = os.posix_fallocate

    def fallocate(fd: int, offset: int, length: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(root):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    return fallocate


def test_full_cache_falls_back_and_leaves_no_partial_entry(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    cache = NodeCache(tmp_path / "cache")
    monkeypatch.setattr(os, "posix_fallocate", _full_under(cache.root.resolve()))
    dest = tmp_path / "model"
    summary = asyncio.run(pull(str(src), dest, cfg=PullConfig(streams=2), cache=cache))
    assert "is full" in summary["cacheFallback"] and str(cache.root) in summary["cacheFallback"]
    assert summary["sources"] == {"origin": TOTAL}
    assert helpers.same_tree(src, dest, list(SIZES)) and (dest / MARKER_NAME).exists()
    assert list((cache.root / "tmp").iterdir()) == [] and list((cache.root / "models").iterdir()) == []


def test_full_destination_fails_with_the_bytes_needed(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    dest = tmp_path / "model"
    monkeypatch.setattr(os, "posix_fallocate", _full_under(dest.resolve()))
    with pytest.raises(DiskFullError, match=f"needs {TOTAL} bytes, \\d+ free") as caught:
        asyncio.run(pull(str(src), dest, cfg=PullConfig(streams=2), cache=NodeCache(tmp_path / "cache")))
    assert caught.value.exit_code == 4
    assert not (dest / MARKER_NAME).exists()


def _tmpfs_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d"],
        capture_output=True,
        timeout=10,
    )
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _tmpfs_available(), reason="no unprivileged user namespace to mount a tmpfs")


def _in_namespace(mount: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gem-load` inside a user+mount namespace where `mount` is a fresh 1 MiB tmpfs."""
    script = f'mount -t tmpfs -o size=1m tmpfs "{mount}" && exec "$0" -m gem_workloads.loader "$@"'
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


@needs_tmpfs
def test_full_cache_volume_pulls_directly(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    cache, dest = tmp_path / "cache", tmp_path / "model"
    cache.mkdir()
    out = _in_namespace(cache, "pull", str(src), str(dest), "--cache", str(cache), "--progress", "json")
    _assert_fell_back(out, "is full", cache)
    assert helpers.same_tree(src, dest, list(SIZES)) and (dest / MARKER_NAME).exists()


@needs_tmpfs
def test_full_destination_volume_fails_cleanly(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    dest = tmp_path / "model"
    dest.mkdir()
    script = (
        f'mount -t tmpfs -o size=1m tmpfs "{dest}" && "$0" -m gem_workloads.loader "$@"; rc=$?; '
        f'ls -A "{dest}"; exit $rc'
    )
    out = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, sys.executable, "pull", str(src), str(dest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 4, out
    assert f"needs {TOTAL} bytes" in out.stderr and "Traceback" not in out.stderr
    assert MARKER_NAME not in out.stdout.split()  # listed from inside the namespace, before the tmpfs goes
