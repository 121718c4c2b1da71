"""The nginx model origin of the closed loop: the real loader pulls through it, at the capped rate."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gem_testbed.servers.origin import NGINX, NginxOrigin, OriginError, parse_rate

pytestmark = pytest.mark.skipif(not os.path.exists(NGINX), reason="nginx-light is not installed")


def _pull(source: str, dest: Path, streams: int) -> subprocess.CompletedProcess[str]:
    argv = ["pull", source, str(dest), "--progress", "none", "--streams", str(streams)]
    return subprocess.run(
        [sys.executable, "-m", "gem_workloads.loader", *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _origin(root: Path, size: int) -> Path:
    root.mkdir()
    (root / "weights.bin").write_bytes(os.urandom(size))
    made = subprocess.run(
        [sys.executable, "-m", "gem_workloads.loader", "manifest", str(root), "--part-size", "1MiB"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    (root / "manifest.json").write_text(made.stdout)
    return root


def test_loader_pulls_through_the_capped_origin(tmp_path: Path) -> None:
    root = _origin(tmp_path / "origin", 2 * 1024 * 1024)
    with NginxOrigin(root, rate=parse_rate("512k"), work_dir=tmp_path / "nginx") as origin:
        began = time.monotonic()
        result = _pull(origin.url, tmp_path / "dest", streams=1)
        took = time.monotonic() - began
        served = origin.requests()
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dest" / "weights.bin").read_bytes() == (root / "weights.bin").read_bytes()
    assert served >= 2  # the manifest and at least one ranged GET crossed nginx
    # Two 1 MiB ranged GETs at 512 KiB/s each: nginx's limit_rate lets each request's first
    # second of bytes go at once, then paces it, so about 1 s per request.
    assert took > 1.5


def test_origin_stops_with_its_context(tmp_path: Path) -> None:
    root = _origin(tmp_path / "origin", 1024)
    with NginxOrigin(root, rate=0, work_dir=tmp_path / "nginx") as origin:
        proc = origin.proc
        assert proc is not None and proc.poll() is None
    assert proc.poll() is not None


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("512k", 512 * 1024), ("20m", 20 * 1024**2), ("1g", 1024**3)])
def test_parse_rate(text: str, value: int) -> None:
    assert parse_rate(text) == value


@pytest.mark.parametrize("text", ["fast", "-1m", "", "20mb"])
def test_parse_rate_names_the_fix(text: str) -> None:
    with pytest.raises(OriginError, match=r"bytes per second|uncapped"):
        parse_rate(text)
