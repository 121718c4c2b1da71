"""Pulls against real origins: local paths, nginx over HTTP, moto's S3 - and the ways they fail."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gem_workloads.loader.errors import IntegrityError, SourceError
from gem_workloads.loader.manifest import Manifest
from gem_workloads.loader.progress import NullReporter
from gem_workloads.loader.pull import MARKER_NAME, PullConfig, pull

SIZES = {"model.bin": 1_000_000, "shards/s1.bin": 300_000, "tok.json": 1234, "empty": 0}
RELS = list(SIZES)


def assert_complete(src: Path, dest: Path, helpers: Any) -> dict[str, Any]:
    marker = json.loads((dest / MARKER_NAME).read_text())
    manifest = Manifest.from_json((src / "manifest.json").read_text())
    assert marker["manifestDigest"] == manifest.digest and marker["bytes"] == manifest.total_bytes
    assert marker["seconds"] >= 0
    assert helpers.same_tree(src, dest, RELS)
    assert not (dest / ".gem-load-staging").exists()
    return dict(marker)


def assert_not_complete(dest: Path, rels: list[str]) -> None:
    assert not (dest / MARKER_NAME).exists()
    assert not any((dest / r).exists() for r in rels), "partial files must stay out of place"


async def test_pull_local_happy(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    summary = await pull(str(src), tmp_path / "dst", cfg=PullConfig(streams=4))
    marker = assert_complete(src, tmp_path / "dst", helpers)
    assert marker["sources"] == {"origin": sum(SIZES.values())} == summary["sources"]
    again = await pull(str(src), tmp_path / "dst")  # already complete: nothing fetched
    assert again["fetchedBytes"] == 0


@pytest.mark.servers
async def test_pull_http_happy(tmp_path: Path, helpers: Any, nginx: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    n = nginx(src)
    await pull(n.url, tmp_path / "dst", cfg=PullConfig(streams=8, request_size=2 * helpers.PART))
    assert_complete(src, tmp_path / "dst", helpers)
    gets = n.model_gets()
    assert all(g["s"] == 206 for g in gets if g["u"] != "/tok.json") and len(gets) >= 8
    assert sum(g["b"] for g in gets) == sum(SIZES.values())


@pytest.mark.servers
async def test_pull_s3_happy(tmp_path: Path, helpers: Any, moto_s3: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    moto_s3.client.create_bucket(Bucket="models")
    for rel in [*RELS, "manifest.json"]:
        moto_s3.client.put_object(Bucket="models", Key=f"gem/v1/{rel}", Body=(src / rel).read_bytes())
    await pull("s3://models/gem/v1", tmp_path / "dst", cfg=PullConfig(streams=4))
    assert_complete(src, tmp_path / "dst", helpers)
    # The manifest may also live elsewhere (here: next to the model under another name).
    moto_s3.client.put_object(Bucket="models", Key="manifests/gem.json", Body=(src / "manifest.json").read_bytes())
    await pull("s3://models/gem/v1", tmp_path / "dst2", manifest_uri="s3://models/manifests/gem.json")
    assert_complete(src, tmp_path / "dst2", helpers)


@pytest.mark.servers
def test_resume_after_killed_pull(tmp_path: Path, helpers: Any, nginx: Any) -> None:
    # nginx's limit_rate lets the first `rate` bytes of each response through at once, so the
    # ranges (256 KiB) are made larger than the rate (128 KiB/s): each takes about a second.
    src = helpers.make_model(tmp_path / "src", {"model.bin": 3_000_000})
    n = nginx(src, rate="128k")
    dest = tmp_path / "dst"
    journal = dest / ".gem-load-staging" / ".gem-load-journal"
    args = ("pull", n.url, str(dest), "--part-size", "256KiB", "--progress", "json")
    proc = helpers.cli_popen(*args, "--streams", "2")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if journal.exists() and len(journal.read_text().splitlines()) > 8:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    assert_not_complete(dest, ["model.bin"])
    time.sleep(0.3)  # let nginx log the aborted requests
    first = sum(g["b"] for g in n.model_gets())
    assert 0 < first < 3_000_000
    out = helpers.cli(*args, "--streams", "8")
    assert out.returncode == 0, out.stderr
    second = sum(g["b"] for g in n.model_gets()) - first
    done = json.loads(out.stdout.splitlines()[-1])
    assert done["resumedBytes"] >= 8 * helpers.PART
    assert second <= 3_000_000 - done["resumedBytes"]
    assert second < 3_000_000
    assert (dest / "model.bin").read_bytes() == (src / "model.bin").read_bytes()


@pytest.mark.servers
def test_corrupt_byte_at_origin_fails_clearly(tmp_path: Path, helpers: Any, nginx: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    with open(src / "model.bin", "r+b") as f:  # flip one byte in part 7 after the manifest was made
        f.seek(7 * helpers.PART + 123)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    n = nginx(src)
    dest = tmp_path / "dst"
    out = helpers.cli("pull", n.url, str(dest), "--progress", "plain")
    assert out.returncode == 3, out.stderr
    assert "SHA-256 mismatch in model.bin part 7" in out.stderr
    assert "refusing to mark the model complete" in out.stderr
    assert_not_complete(dest, RELS)


def _flaky_origin(
    root: Path, failures: int, refuse_head: bool = False, manifest_too: bool = False
) -> tuple[web.Application, dict[str, int]]:
    """An origin that answers 503 SlowDown to the first `failures` model GETs, then serves ranges."""
    seen = {"503": 0, "get": 0}

    async def handler(request: web.Request) -> web.StreamResponse:
        rel = request.match_info["path"]
        if refuse_head and request.method == "HEAD":
            return web.Response(status=405)
        if request.method == "GET" and (manifest_too or not rel.endswith("manifest.json")):
            seen["get"] += 1
            if seen["503"] < failures:
                seen["503"] += 1
                return web.Response(status=503, text="<Error><Code>SlowDown</Code></Error>")
        return web.FileResponse(root / rel)

    app = web.Application()
    app.router.add_get("/{path:.+}", handler)
    return app, seen


async def _serve(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


@pytest.mark.servers
async def test_503_bursts_are_retried(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    app, seen = _flaky_origin(src, failures=6)
    port = helpers.free_port()
    runner = await _serve(app, port)
    try:
        rep = NullReporter()
        cfg = PullConfig(streams=3, backoff_base=0.01, backoff_max=0.05)
        summary = await pull(f"http://127.0.0.1:{port}", tmp_path / "dst", cfg=cfg, reporter=rep)
        assert seen["503"] == 6 and summary["retries"] >= 6
        assert any(e["event"] == "retry" and "503" in e["error"] for e in rep.events)
        assert_complete(src, tmp_path / "dst", helpers)
        # A burst longer than the retry budget fails with the status in the message, nothing complete.
        app2, _ = _flaky_origin(src, failures=10_000)
        port2 = helpers.free_port()
        runner2 = await _serve(app2, port2)
        try:
            cfg2 = PullConfig(streams=2, max_attempts=3, backoff_base=0.01, backoff_max=0.02)
            with pytest.raises(SourceError, match="HTTP 503"):
                await pull(f"http://127.0.0.1:{port2}", tmp_path / "dst2", cfg=cfg2)
            assert_not_complete(tmp_path / "dst2", RELS)
        finally:
            await runner2.cleanup()
    finally:
        await runner.cleanup()


@pytest.mark.servers
async def test_origin_without_head_is_sized_by_a_ranged_get(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    app, _ = _flaky_origin(src, failures=0, refuse_head=True)
    port = helpers.free_port()
    runner = await _serve(app, port)
    try:
        await pull(f"http://127.0.0.1:{port}", tmp_path / "dst", cfg=PullConfig(streams=2))
        assert_complete(src, tmp_path / "dst", helpers)
    finally:
        await runner.cleanup()


@pytest.mark.servers
async def test_503_slowdown_retried_on_the_s3_path(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore's own retries are off; the loader's backoff handles SlowDown from an S3 endpoint."""
    root = tmp_path / "s3root"
    src = helpers.make_model(root / "bkt" / "gem", SIZES)
    app, seen = _flaky_origin(root, failures=4)
    port = helpers.free_port()
    runner = await _serve(app, port)
    helpers.s3_endpoint_env(monkeypatch, port)
    try:
        rep = NullReporter()
        cfg = PullConfig(streams=2, backoff_base=0.01, backoff_max=0.05)
        summary = await pull("s3://bkt/gem", tmp_path / "dst", cfg=cfg, reporter=rep)
        assert seen["503"] == 4 and summary["retries"] >= 4
        assert any(e["event"] == "retry" and "503" in e["error"] for e in rep.events)
        assert helpers.same_tree(src, tmp_path / "dst", RELS)
    finally:
        await runner.cleanup()
    # The manifest GET is retried the same way.
    app, seen = _flaky_origin(root, failures=2, manifest_too=True)
    port = helpers.free_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    runner = await _serve(app, port)
    try:
        await pull("s3://bkt/gem", tmp_path / "dst2", cfg=cfg)
        assert seen["503"] == 2 and helpers.same_tree(src, tmp_path / "dst2", RELS)
    finally:
        await runner.cleanup()


class _ReplaceOnFirstWrite(NullReporter):
    """Replaces model.bin at the origin as soon as the first range has landed."""

    def __init__(self, path: Path, content: bytes) -> None:
        super().__init__()
        self.path, self.content, self.done = path, content, False

    def advance(self, nbytes: int, source: str) -> None:
        if not self.done:
            self.done = True
            tmp = self.path.with_name("replacement.tmp")
            tmp.write_bytes(self.content)
            t = time.time() + 100  # nginx's ETag is mtime-size: make sure the version visibly changes
            os.utime(tmp, (t, t))
            os.replace(tmp, self.path)


@pytest.mark.servers
@pytest.mark.parametrize("same_content", [True, False])
async def test_object_replaced_mid_pull(tmp_path: Path, helpers: Any, nginx: Any, same_content: bool) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    original = (src / "model.bin").read_bytes()
    new = original if same_content else os.urandom(len(original))
    n = nginx(src, rate="4m")
    rep = _ReplaceOnFirstWrite(src / "model.bin", new)
    cfg = PullConfig(streams=2)
    if same_content:
        summary = await pull(n.url, tmp_path / "dst", cfg=cfg, reporter=rep)
        assert summary["restarts"] >= 1
        assert any(e["event"] == "restart" and e["file"] == "model.bin" for e in rep.events)
        assert_complete(src, tmp_path / "dst", helpers)
    else:
        with pytest.raises(IntegrityError, match=r"SHA-256 mismatch in model\.bin"):
            await pull(n.url, tmp_path / "dst", cfg=cfg, reporter=rep)
        assert any(e["event"] == "restart" for e in rep.events)
        assert_not_complete(tmp_path / "dst", RELS)


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return r.returncode == 0


def test_disk_full_is_a_clear_error(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", {"a.bin": 700_000, "b.bin": 900_000})
    small = tmp_path / "small"
    mounted = _mount_tmpfs(small, "1m")
    try:
        kw: dict[str, Any] = {}
        if not mounted:  # fallback: a 1 MB file-size limit gives EFBIG the same way
            kw["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        out = helpers.cli("pull", str(src), str(small / "dst"), "--progress", "plain", **kw)
        assert out.returncode == 4, out.stderr
        assert "out of space" in out.stderr and "gem-load: error:" in out.stderr
        assert_not_complete(small / "dst", ["a.bin", "b.bin"])
    finally:
        if mounted:
            subprocess.run(["umount", str(small)], check=False)


async def test_local_source_changing_restarts_then_succeeds(tmp_path: Path, helpers: Any) -> None:
    """Same as the HTTP case, for a path origin (its version is inode+mtime+size)."""
    src = helpers.make_model(tmp_path / "src", SIZES)
    rep = _ReplaceOnFirstWrite(src / "model.bin", (src / "model.bin").read_bytes())
    summary = await pull(str(src), tmp_path / "dst", cfg=PullConfig(streams=1), reporter=rep)
    assert summary["restarts"] == 1
    assert_complete(src, tmp_path / "dst", helpers)


class _S3ReplaceOnFirstWrite(NullReporter):
    def __init__(self, client: Any, key: str, body: bytes) -> None:
        super().__init__()
        self.client, self.key, self.body, self.done = client, key, body, False

    def advance(self, nbytes: int, source: str) -> None:
        if not self.done:
            self.done = True
            self.client.put_object(Bucket="models", Key=self.key, Body=self.body)


@pytest.mark.servers
async def test_s3_object_replaced_mid_pull_fails_clearly(tmp_path: Path, helpers: Any, moto_s3: Any) -> None:
    """S3 path: ranged GETs carry If-Match, a new ETag restarts the file, new bytes fail the manifest."""
    src = helpers.make_model(tmp_path / "src", SIZES)
    moto_s3.client.create_bucket(Bucket="models")
    for rel in [*RELS, "manifest.json"]:
        moto_s3.client.put_object(Bucket="models", Key=f"swap/{rel}", Body=(src / rel).read_bytes())
    rep = _S3ReplaceOnFirstWrite(moto_s3.client, "swap/model.bin", os.urandom(SIZES["model.bin"]))
    with pytest.raises(IntegrityError, match=r"SHA-256 mismatch in model\.bin"):
        await pull("s3://models/swap", tmp_path / "dst", cfg=PullConfig(streams=2), reporter=rep)
    assert any(e["event"] == "restart" and e["file"] == "model.bin" for e in rep.events)
    assert_not_complete(tmp_path / "dst", RELS)
