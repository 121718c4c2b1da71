"""Node cache (one download per node, LRU watermarks, corrupt entries) and the peer cache server."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gem_workloads.loader.cache import NodeCache
from gem_workloads.loader.manifest import Manifest
from gem_workloads.loader.peer import make_app
from gem_workloads.loader.progress import NullReporter
from gem_workloads.loader.pull import MARKER_NAME, PullConfig, pull

SIZES = {"model.bin": 1_000_000, "extra/tok.json": 5000}
RELS = list(SIZES)
TOTAL = sum(SIZES.values())


def flip_byte(path: Path, offset: int) -> None:
    os.chmod(path, 0o644)  # cache entries are read-only; the test plays a faulty disk
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def digest_of(src: Path) -> str:
    return Manifest.from_json((src / "manifest.json").read_text()).digest


@pytest.mark.servers
def test_two_concurrent_pulls_download_once(tmp_path: Path, helpers: Any, nginx: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    n = nginx(src, rate="64k")  # 256 KiB ranges at 64 KiB/s: ~3 s each, so the pulls overlap
    cache = tmp_path / "cache"
    args = ["--cache", str(cache), "--part-size", "256KiB", "--streams", "4", "--progress", "json"]
    first = helpers.cli_popen("pull", n.url, str(tmp_path / "dst0"), *args)
    journal = cache / "tmp" / digest_of(src) / ".gem-load-journal"
    deadline = time.monotonic() + 20
    while not journal.exists() and time.monotonic() < deadline:  # the first pull holds the lock now
        time.sleep(0.02)
    procs = [first, helpers.cli_popen("pull", n.url, str(tmp_path / "dst1"), *args)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    for i in range(2):
        assert helpers.same_tree(src, tmp_path / f"dst{i}", RELS)
        assert json.loads((tmp_path / f"dst{i}" / MARKER_NAME).read_text())["manifestDigest"] == digest_of(src)
    gets = n.model_gets()
    assert sum(g["b"] for g in gets) == TOTAL, gets  # every byte fetched from the origin exactly once
    second = [json.loads(line) for line in outs[1][0].splitlines()]
    assert any(e["event"] == "waiting" for e in second)  # the second pull waited on the lock...
    assert second[-1]["sources"] == {"cache": TOTAL}  # ...and then only copied from the cache
    # A third pull on this node is a pure cache hit: no origin bytes at all.
    out = helpers.cli("pull", n.url, str(tmp_path / "dst3"), *args)
    assert out.returncode == 0 and json.loads(out.stdout.splitlines()[-1])["fetchedBytes"] == 0
    assert sum(g["b"] for g in n.model_gets()) == TOTAL


async def test_eviction_between_watermarks_is_lru(tmp_path: Path, helpers: Any) -> None:
    models = [helpers.make_model(tmp_path / f"m{i}", {"w.bin": 1_000_000}, seed=i) for i in range(3)]
    cache = NodeCache(tmp_path / "cache", high=2_500_000, low=2_000_000)
    await pull(str(models[0]), tmp_path / "d0", cache=cache)
    await asyncio.sleep(0.01)
    await pull(str(models[1]), tmp_path / "d1", cache=cache)
    await asyncio.sleep(0.01)
    rep = NullReporter()
    await pull(str(models[0]), tmp_path / "d0b", cache=cache, reporter=rep)  # m0 used again: m1 is LRU
    assert any(e["event"] == "cache-hit" for e in rep.events)
    assert cache.usage() == 2_000_000
    await asyncio.sleep(0.01)
    rep = NullReporter()
    await pull(str(models[2]), tmp_path / "d2", cache=cache, reporter=rep)
    evicted = [e["digest"] for e in rep.events if e["event"] == "evict"]
    assert evicted == [digest_of(models[1])]
    assert sorted(e.digest for e in cache.entries()) == sorted([digest_of(models[0]), digest_of(models[2])])
    assert cache.usage() <= cache.high
    # Under the high watermark nothing is evicted.
    assert cache.evict() == []


async def test_corrupt_cache_entry_is_detected_and_refetched(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    cache = NodeCache(tmp_path / "cache", high=10**9, low=10**8)
    await pull(str(src), tmp_path / "d0", cache=cache)
    entry = cache.entry_dir(digest_of(src))
    # 1. Truncated file: the cheap check (sizes + verified marker) catches it.
    os.chmod(entry / "model.bin", 0o644)
    os.truncate(entry / "model.bin", 1000)
    rep = NullReporter()
    s = await pull(str(src), tmp_path / "d1", cache=cache, reporter=rep)
    assert any(e["event"] == "corrupt-cache" and "model.bin" in e["reason"] for e in rep.events)
    assert s["sources"]["origin"] == TOTAL and helpers.same_tree(src, tmp_path / "d1", RELS)
    # 2. A flipped byte keeps the size: only a full re-hash (on request) finds it.
    flip_byte(entry / "model.bin", 500_000)
    rep = NullReporter()
    s = await pull(str(src), tmp_path / "d2", cache=cache, reporter=rep, verify_cache="full")
    assert any(e["event"] == "corrupt-cache" and "part 7" in e["reason"] for e in rep.events)
    assert s["sources"]["origin"] == TOTAL and helpers.same_tree(src, tmp_path / "d2", RELS)


async def _start_peer(cache_root: Path, port: int) -> web.AppRunner:
    runner = web.AppRunner(make_app(cache_root), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


@pytest.mark.servers
async def test_peer_serves_ranges_and_corrupt_peer_falls_back(tmp_path: Path, helpers: Any, nginx: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    digest = digest_of(src)
    peer_cache = NodeCache(tmp_path / "peer-cache")
    await pull(str(src), tmp_path / "warm", cache=peer_cache)  # the peer node already holds the model
    port = helpers.free_port()
    runner = await _start_peer(peer_cache.root, port)
    peer = f"http://127.0.0.1:{port}"
    n = nginx(src)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{peer}/models/{digest}/model.bin", headers={"Range": "bytes=100-199"}) as r:
                assert r.status == 206 and await r.read() == (src / "model.bin").read_bytes()[100:200]
            async with http.get(f"{peer}/models/{digest}/.gem-load-verified") as r:
                assert r.status == 403
            async with http.get(f"{peer}/models/{'0' * 64}/model.bin") as r:
                assert r.status == 404
            async with http.get(f"{peer}/models") as r:
                assert (await r.json())["models"] == [digest]
        # A node with an empty cache pulls everything from the peer, nothing from the origin.
        s = await pull(n.url, tmp_path / "d1", cache=NodeCache(tmp_path / "c1"), peers=[peer])
        # ("cache" counts the copy from this node's cache into DEST, after the fill from the peer.)
        assert s["sources"] == {"peer": TOTAL, "cache": TOTAL} and helpers.same_tree(src, tmp_path / "d1", RELS)
        assert n.model_gets() == []
        # The peer's copy goes bad (same size): its bytes fail the part hash, the origin takes over.
        flip_byte(peer_cache.entry_dir(digest) / "model.bin", 3 * helpers.PART + 5)
        rep = NullReporter()
        cfg = PullConfig(streams=2)
        s = await pull(n.url, tmp_path / "d2", cache=NodeCache(tmp_path / "c2"), peers=[peer], reporter=rep, cfg=cfg)
        assert any(e["event"] == "fallback" and "SHA-256 mismatch" in e["reason"] for e in rep.events)
        assert s["sources"].get("origin", 0) > 0 and helpers.same_tree(src, tmp_path / "d2", RELS)
        # A dead peer is skipped just the same.
        dead = f"http://127.0.0.1:{helpers.free_port()}"
        s = await pull(n.url, tmp_path / "d3", peers=[dead], cfg=PullConfig(backoff_base=0.01))
        assert s["sources"] == {"origin": TOTAL}
    finally:
        await runner.cleanup()


@pytest.mark.servers
def test_serve_cli_answers(tmp_path: Path, helpers: Any) -> None:
    """`gem-load serve` as its own process: health, listing, and a ranged file read."""
    import urllib.request

    port = helpers.free_port()
    proc = helpers.cli_popen("serve", str(tmp_path / "cache"), "--port", str(port), "--host", "127.0.0.1")
    try:
        helpers.wait_port(port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.read() == b"ok\n"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/models", timeout=5) as r:
            assert json.loads(r.read()) == {"models": []}
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


async def test_cache_link_mode_hard_links_read_only_files(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", SIZES)
    cache = NodeCache(tmp_path / "cache", link=True)
    await pull(str(src), tmp_path / "d0", cache=cache)
    s = await pull(str(src), tmp_path / "d1", cache=cache)
    assert s["sources"] == {"cache": TOTAL} and helpers.same_tree(src, tmp_path / "d1", RELS)
    cached = cache.entry_dir(digest_of(src)) / "model.bin"
    assert (tmp_path / "d1" / "model.bin").stat().st_ino == cached.stat().st_ino
    assert cached.stat().st_mode & 0o222 == 0  # read-only, as a shared inode must be
