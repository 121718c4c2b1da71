"""The download pipeline's shape: object-store ranges land in the stream's reused buffer, a
stream's next GET overlaps the hashing and writing of its previous range (still one GET at a
time per stream, two buffers each), and a file is fsynced as soon as its last part is written."""

from __future__ import annotations

import asyncio
import itertools
import mmap
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gem_workloads.loader import diskwrite, download
from gem_workloads.loader.config import PullConfig
from gem_workloads.loader.download import Downloader
from gem_workloads.loader.errors import SourceError
from gem_workloads.loader.manifest import Manifest
from gem_workloads.loader.progress import NullReporter
from gem_workloads.loader.pull import pull
from gem_workloads.loader.ranges import TAIL_PIECES
from gem_workloads.loader.sources import LocalSource, ObjectInfo, ObstoreSource


class Recording:
    """A LocalSource that records when each ranged read ran and into which buffer."""

    def __init__(self, root: Path, delay: float = 0.0) -> None:
        self.inner = LocalSource(root)
        self.name = self.inner.name
        self.delay = delay
        self.active = 0
        self.max_active = 0
        self.reads: list[tuple[float, float]] = []
        self.ranges: list[tuple[int, int]] = []
        self.buffers: set[int] = set()
        self.corrupt = False

    async def head(self, path: str) -> ObjectInfo:
        return await self.inner.head(path)

    async def read_range(
        self, path: str, start: int, end: int, info: ObjectInfo, buf: memoryview | None = None
    ) -> bytes | memoryview:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        t0 = time.monotonic()
        try:
            await asyncio.sleep(self.delay)
            if buf is not None:
                self.buffers.add(id(buf.obj))
            self.ranges.append((start, end))
            data = await self.inner.read_range(path, start, end, info, buf)
            if self.corrupt:  # a peer that sends wrong bytes
                data = bytearray(data)
                data[0] ^= 1
            return data
        finally:
            self.active -= 1
            self.reads.append((t0, time.monotonic()))

    async def read_all(self, path: str) -> bytes:
        return await self.inner.read_all(path)

    async def connect_ahead(self) -> None:
        return None

    async def close(self) -> None:
        return None


def _slow_verify_write(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[tuple[str, float, float]]:
    """Wrap the hash-and-write step so it takes `seconds`; returns (path, start, end) records."""
    calls: list[tuple[str, float, float]] = []
    real = diskwrite.verify_write
    lock = threading.Lock()

    def slow(st: Any, *args: Any) -> list[int]:
        t0 = time.monotonic()
        time.sleep(seconds)
        bad = real(st, *args)
        with lock:
            calls.append((st.entry.path, t0, time.monotonic()))
        return bad

    monkeypatch.setattr(diskwrite, "verify_write", slow)
    return calls


async def test_next_get_overlaps_hash_and_write_one_get_per_stream(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = helpers.make_model(tmp_path / "src", {"model.bin": 16 * helpers.PART})
    manifest = Manifest.from_json((src / "manifest.json").read_text())
    calls = _slow_verify_write(monkeypatch, 0.03)
    source = Recording(src, delay=0.02)
    staging = tmp_path / "staging"
    await Downloader(manifest, [("origin", source)], staging, PullConfig(streams=1), NullReporter()).run()
    assert (staging / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    assert source.max_active == 1, "one stream must never have two GETs in flight"
    assert len(source.buffers) == 2, "a stream reuses exactly two buffers (memory: 2 x streams x request)"
    # A GET in flight while a part is hashed and written. Its interval, not its start: the next GET
    # is issued as the previous one ends, and the write it overlaps begins a moment later in its
    # thread. A serial loader (GET, then write, then GET) only touches at the ends and counts 0.
    overlapped = sum(any(r0 < b and a < r1 for _, a, b in calls) for r0, r1 in source.reads)
    assert overlapped >= len(source.reads) // 2, f"only {overlapped} of {len(source.reads)} GETs overlapped a write"


async def test_a_file_is_fsynced_when_its_last_part_is_written(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = helpers.make_model(tmp_path / "src", {"a.bin": 3 * helpers.PART, "b.bin": 12 * helpers.PART})
    manifest = Manifest.from_json((src / "manifest.json").read_text())
    writes = _slow_verify_write(monkeypatch, 0.02)
    synced: list[tuple[int, float]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append((fd, time.monotonic()))

    monkeypatch.setattr(download.os, "fsync", fsync)
    d = Downloader(
        manifest, [("origin", LocalSource(src))], tmp_path / "staging", PullConfig(streams=1), NullReporter()
    )
    await d.run()
    fd_a, fd_b = d.files["a.bin"].fd, d.files["b.bin"].fd
    a_synced = min(t for fd, t in synced if fd == fd_a)
    assert any(fd == fd_b for fd, _ in synced), "every file is fsynced before the pull returns"
    last_b_write = max(end for path, _, end in writes if path == "b.bin")
    assert a_synced < last_b_write, "a.bin's fsync must overlap b.bin's download, not wait for the end"


async def test_s3_ranges_go_to_disk_with_o_direct(
    tmp_path: Path, helpers: Any, moto_s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore hands back its own buffer; the puller copies it into the stream's aligned buffer
    after hashing, so S3 ranges take the same O_DIRECT path as HTTP and local ones."""
    src = helpers.make_model(tmp_path / "src", {"model.bin": 10 * helpers.PART})
    moto_s3.client.create_bucket(Bucket="bkt")
    for rel in ("model.bin", "manifest.json"):
        moto_s3.client.put_object(Bucket="bkt", Key=f"m/{rel}", Body=(src / rel).read_bytes())
    calls: list[tuple[bool, bool]] = []
    real = diskwrite.write_range

    def recording(st: Any, data: Any, offset: int, aligned: bool) -> None:
        calls.append((aligned, st.dfd is not None))
        real(st, data, offset, aligned)

    monkeypatch.setattr(diskwrite, "write_range", recording)
    await pull("s3://bkt/m", tmp_path / "dst", cfg=PullConfig(streams=2))
    assert (tmp_path / "dst" / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    if not any(direct for _, direct in calls):
        pytest.skip("this filesystem has no O_DIRECT")
    assert len(calls) == 10 and all(aligned for aligned, _ in calls), calls
    body = (src / "model.bin").read_bytes()
    source = ObstoreSource("s3://bkt/m")
    info = await source.head("model.bin")
    assert bytes(await source.read_range("model.bin", 1000, 201_000, info, None)) == body[1000:201_000]


async def test_s3_short_body_is_a_transient_source_error(moto_s3: Any) -> None:
    """An object shorter than HEAD said (replaced without an ETag): a clear, retryable error."""
    moto_s3.client.create_bucket(Bucket="bkt")
    moto_s3.client.put_object(Bucket="bkt", Key="m/model.bin", Body=b"x" * 1000)
    source = ObstoreSource("s3://bkt/m")
    real = await source.head("model.bin")
    liar = ObjectInfo(size=real.size, etag=None)
    with pytest.raises(SourceError, match=r"short read \(1000 of 4096 bytes\)") as e:
        await source.read_range("model.bin", 0, 4096, liar, memoryview(mmap.mmap(-1, 4096)))
    assert e.value.transient


async def test_the_last_round_is_split_into_pieces_verified_whole(tmp_path: Path, helpers: Any) -> None:
    """Six parts over eight streams: each becomes two smaller GETs (12 for 8 streams), every byte once;
    nine parts over eight streams: the one of the final round becomes TAIL_PIECES."""
    src = helpers.make_model(tmp_path / "src", {"model.bin": 6 * helpers.PART - 1000})
    manifest = Manifest.from_json((src / "manifest.json").read_text())
    source = Recording(src)
    staging = tmp_path / "staging"
    cfg = PullConfig(streams=8, min_piece=4096)
    stats = await Downloader(manifest, [("origin", source)], staging, cfg, NullReporter()).run()
    assert (staging / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    assert len(source.ranges) == 12 and max(b - a for a, b in source.ranges) < helpers.PART
    covered = sorted(source.ranges)
    assert covered[0][0] == 0 and covered[-1][1] == 6 * helpers.PART - 1000
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(covered)), "pieces tile the file exactly"
    assert stats.fetched == {"origin": 6 * helpers.PART - 1000}
    nine = helpers.make_model(tmp_path / "nine", {"model.bin": 9 * helpers.PART})
    source = Recording(nine)
    m9 = Manifest.from_json((nine / "manifest.json").read_text())
    await Downloader(m9, [("origin", source)], tmp_path / "s9", cfg, NullReporter()).run()
    assert len(source.ranges) == 8 + TAIL_PIECES
    assert (tmp_path / "s9" / "model.bin").read_bytes() == (nine / "model.bin").read_bytes()
    # Without the split (or a piece floor above the part size) each part is one GET.
    plain = Recording(src)
    cfg = PullConfig(streams=8, min_piece=helpers.PART)
    await Downloader(manifest, [("origin", plain)], tmp_path / "plain", cfg, NullReporter()).run()
    assert len(plain.ranges) == 6


async def test_a_tail_piece_with_bad_bytes_falls_back_to_the_origin(tmp_path: Path, helpers: Any) -> None:
    src = helpers.make_model(tmp_path / "src", {"model.bin": 3 * helpers.PART})
    manifest = Manifest.from_json((src / "manifest.json").read_text())
    peer = Recording(src)
    peer.corrupt = True
    rep = NullReporter()
    staging = tmp_path / "staging"
    cfg = PullConfig(streams=4, min_piece=4096)
    stats = await Downloader(manifest, [("peer", peer), ("origin", LocalSource(src))], staging, cfg, rep).run()
    assert (staging / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    assert stats.fetched == {"origin": 3 * helpers.PART}, "not one byte credited to the bad peer"
    assert any(e["event"] == "fallback" and "SHA-256 mismatch" in e["reason"] for e in rep.events)


async def test_ranges_go_to_idle_streams_first(tmp_path: Path, helpers: Any) -> None:
    """Four ranges over four streams: four GETs at once, not two streams with two ranges each."""
    src = helpers.make_model(tmp_path / "src", {"model.bin": 4 * helpers.PART})
    manifest = Manifest.from_json((src / "manifest.json").read_text())
    source = Recording(src, delay=0.2)
    await Downloader(manifest, [("origin", source)], tmp_path / "staging", PullConfig(streams=4), NullReporter()).run()
    assert source.max_active == 4
