"""The download engine: many concurrent ranged GETs, each verified, then written in place.

Why this shape: one object-store stream is far too slow for a TB-scale model, so every file
is split into ranges fetched by N concurrent workers (one connection each), each received
straight into the stream's reused page-aligned buffer (rawhttp). Each range is checked against
the manifest's part hashes (BLAKE3 or SHA-256, as the manifest declares) before it is written with pwrite into a
preallocated file (O_DIRECT for block-aligned ranges where the filesystem allows, to skip the
page-cache copy), so a bad or hostile source can never plant bytes; a journal records each
written part, so a killed pull resumes. Sources are tried in order (peers, then origin): a
peer that errs or sends bytes that do not match is dropped and the range is fetched from the
next one. An object whose version changes at the origin restarts its file from scratch.

Network and disk overlap: each stream has two slots (two reused buffers) that share its one
connection, so while one slot's range is hashed and written the other's GET is in flight; at
most one GET per stream, two buffers each (plus the tail's, below): memory <= 3 x streams x
request size. A file is fsynced as soon as its last part is written, while the others still
download, so little is left to flush at the end.

The tail is split finer: the ranges of the pull's final, partial round are fetched as smaller
pieces by several streams into one buffer and verified when their part is whole, so no stream
idles for a whole range while the others finish (fewer than `streams` such buffers; see
loader.ranges). The hash-then-write step is loader.diskwrite's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import mmap
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from gem_workloads.loader import diskwrite
from gem_workloads.loader.config import PullConfig, PullStats
from gem_workloads.loader.diskwrite import DIRECT_ALIGN, FULL_ERRNOS, FileState, disk_full, open_direct
from gem_workloads.loader.errors import IntegrityError, ObjectChanged, SourceError
from gem_workloads.loader.journal import JOURNAL_NAME, Journal
from gem_workloads.loader.manifest import Manifest
from gem_workloads.loader.progress import Reporter
from gem_workloads.loader.ranges import Chunk, Piece, split_tail
from gem_workloads.loader.sources import ObjectInfo, Source

T = TypeVar("T")


class _Conn:
    """A stream's one connection, shared by its two slots. `lock`: one GET at a time. `free`: no
    range taken whose GET is still to come, so a slot takes a new range only then (ranges go to
    streams whose connection is free, not to the second slot of a busy stream while another
    stream idles). `turn`: one slot of the stream waits on the queue at a time. A slot waiting
    on the queue holds neither `lock` nor `free`, so a retry's GET never waits for new work."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.turn = asyncio.Lock()
        self.free = asyncio.Event()
        self.free.set()


class Downloader:
    """Fills a staging directory with a manifest's files from an ordered list of sources."""

    def __init__(
        self,
        manifest: Manifest,
        sources: list[tuple[str, Source]],
        staging: Path,
        cfg: PullConfig,
        reporter: Reporter,
    ) -> None:
        self.manifest = manifest
        self.sources = sources
        self.staging = staging
        self.cfg = cfg
        self.reporter = reporter
        self.stats = PullStats()
        self.disabled: set[int] = set()
        self.heads: dict[tuple[int, str], ObjectInfo] = {}
        self.head_calls: dict[tuple[int, str], asyncio.Future[ObjectInfo]] = {}
        self.spare: list[mmap.mmap] = []  # free range buffers (_take, _give)
        self.files: dict[str, FileState] = {}
        self.queue: asyncio.Queue[Chunk | Piece] = asyncio.Queue()
        self.pending = 0
        self.finished = asyncio.Event()
        self.error: BaseException | None = None
        self.parts_per_request = max(1, (cfg.request_size or manifest.part_size) // manifest.part_size)

    async def run(self) -> PullStats:
        self.staging.mkdir(parents=True, exist_ok=True)
        journal = Journal(self.staging / JOURNAL_NAME, self.manifest.digest)
        self.journal = journal
        try:
            await asyncio.to_thread(self._prepare)
            chunks = [c for st in self.files.values() for c in self._chunks_of(st)]
            sizes = {path: st.entry.size for path, st in self.files.items()}
            # Queued on the loop's thread: asyncio.Queue is not thread-safe.
            for item in split_tail(chunks, self.cfg, self.manifest.part_size, sizes):
                self.queue.put_nowait(item)
            self.reporter.start(
                self.manifest.total_bytes, len(self.manifest.files), self.stats.resumed, self.manifest.digest
            )
            if self.pending:
                workers = [asyncio.create_task(self._worker()) for _ in range(self.cfg.streams)]
                try:
                    await self.finished.wait()
                finally:
                    for w in workers:
                        w.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
            if self.error is not None:
                raise self.error
            await self._sync()
        finally:
            # An fsync still running in its thread must finish before its descriptor is closed.
            await asyncio.gather(*(st.synced for st in self.files.values() if st.synced), return_exceptions=True)
            for st in self.files.values():
                for fd in (st.fd, st.dfd):
                    if fd is not None:
                        with contextlib.suppress(OSError):
                            os.close(fd)
            journal.close()
        return self.stats

    def _prepare(self) -> None:
        """Open and preallocate each file; keep journaled parts only if the file is intact in size."""
        ps = self.manifest.part_size
        for entry in self.manifest.files:
            path = self.staging / entry.path
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self.files[entry.path] = st = FileState(entry=entry, fd=fd)
            done = self.journal.done.get(entry.path, set())
            if done and os.fstat(fd).st_size != entry.size:
                self.journal.reset(entry.path)
                done = set()
            try:
                if not done:
                    os.ftruncate(fd, 0)
                    if entry.size:
                        os.posix_fallocate(fd, 0, entry.size)
                    os.ftruncate(fd, entry.size)
            except OSError as e:
                if e.errno in FULL_ERRNOS:
                    raise disk_full(e, path, self.manifest.total_bytes) from None
                raise
            for i in done:
                a, b = entry.part_range(i, ps)
                self.stats.resumed += b - a
            if self.cfg.direct_io and entry.size >= DIRECT_ALIGN:
                st.dfd = open_direct(path)

    def _chunks_of(self, st: FileState) -> list[Chunk]:
        """The file's undone parts as ranged GETs (runs of contiguous parts); counts them as pending."""
        undone = [i for i in range(len(st.entry.parts)) if not self.journal.is_done(st.entry.path, i)]
        self.pending += len(undone) - st.pending
        st.pending = len(undone)
        out: list[Chunk] = []
        run: list[int] = []
        for i in undone:
            if run and (i != run[-1] + 1 or len(run) >= self.parts_per_request):
                out.append(Chunk(st.entry.path, st.gen, run[0], run[-1] + 1))
                run = []
            run.append(i)
        if run:
            out.append(Chunk(st.entry.path, st.gen, run[0], run[-1] + 1))
        return out

    def _enqueue_file(self, st: FileState) -> None:
        for c in self._chunks_of(st):
            self.queue.put_nowait(c)

    async def _sync(self) -> None:
        """Wait for the fsyncs started as files completed; fsync the rest (resumed, empty) now."""
        for st in self.files.values():
            if st.synced is None:
                st.synced = asyncio.ensure_future(asyncio.to_thread(os.fsync, st.fd))
        for st in self.files.values():
            assert st.synced is not None
            await st.synced

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.finished.set()

    async def _worker(self) -> None:
        """One stream: two slots share its connection (`net` admits one GET at a time), so the
        next GET is in flight while the previous range is hashed and written."""
        net = _Conn()
        await asyncio.gather(self._slot(net), self._slot(net))

    def _take(self) -> memoryview:
        """A buffer for one range, from the pool: mmap'd, so page-aligned (O_DIRECT), and reused, so
        its pages are faulted once per pull, not once per range. (MADV_HUGEPAGE halves the faults'
        cost in steady state but a fresh process pays the kernel's compaction: measured worse.)"""
        if self.spare:
            return memoryview(self.spare.pop())
        return memoryview(mmap.mmap(-1, self.parts_per_request * self.manifest.part_size, flags=mmap.MAP_PRIVATE))

    def _give(self, buf: memoryview) -> None:
        assert isinstance(buf.obj, mmap.mmap)
        self.spare.append(buf.obj)

    async def _slot(self, net: _Conn) -> None:
        while True:
            async with net.turn:
                await net.free.wait()
                item = await self.queue.get()
                net.free.clear()
            try:
                if isinstance(item, Piece):
                    await self._fetch_piece(item, net)
                else:
                    buf = self._take()
                    try:
                        await self._fetch_chunk(item, buf, net)
                    finally:
                        self._give(buf)
            except asyncio.CancelledError:
                raise
            except BaseException as e:
                self._fail(e)
            finally:
                net.free.set()
                self.queue.task_done()

    async def _retrying(self, fn: Callable[[], Awaitable[T]], attempts: int, what: str) -> T:
        delay = self.cfg.backoff_base
        for attempt in range(1, attempts + 1):
            try:
                return await fn()
            except SourceError as e:
                if not e.transient or attempt >= attempts:
                    raise
                self.stats.retries += 1
                self.reporter.event("retry", what=what, attempt=attempt, error=str(e)[:200])
                await asyncio.sleep(min(self.cfg.backoff_max, delay) * (0.5 + random.random() / 2))
                delay *= 2
        raise AssertionError("unreachable")

    async def _head(self, idx: int, path: str, attempts: int, net: _Conn | None = None) -> ObjectInfo:
        """One HEAD per (source, file), shared by every stream that asks meanwhile: a HEAD per
        stream would open connections beyond the N the puller promises. The asker's connection
        lock is held while it runs, so HEADs and GETs together never exceed N requests at once."""
        key = (idx, path)
        if key in self.heads:
            return self.heads[key]
        asking = self.head_calls.get(key)
        if asking is None:
            src = self.sources[idx][1]
            call = functools.partial(self._locked_head, net, src, path)
            asking = asyncio.ensure_future(self._retrying(call, attempts, f"HEAD {src.name} {path}"))
            self.head_calls[key] = asking
            asking.add_done_callback(lambda f: self.head_calls.pop(key) if self.head_calls.get(key) is f else None)
        info = await asyncio.shield(asking)
        self.heads[key] = info
        return info

    @staticmethod
    async def _locked_head(net: _Conn | None, src: Source, path: str) -> ObjectInfo:
        if net is None:
            return await src.head(path)
        async with net.lock:
            return await src.head(path)

    def _drop_source(self, idx: int, reason: str) -> None:
        if idx not in self.disabled:
            self.disabled.add(idx)
            self.reporter.event("fallback", source=self.sources[idx][1].name, reason=reason[:300])

    async def _fetch_chunk(self, chunk: Chunk, buf: memoryview | None = None, net: _Conn | None = None) -> None:
        st = self.files[chunk.path]
        if chunk.gen != st.gen:
            return
        entry, ps = st.entry, self.manifest.part_size
        start, end = chunk.first * ps, min(chunk.last * ps, entry.size)
        origin_idx = len(self.sources) - 1
        for idx, (kind, src) in enumerate(self.sources):
            if idx in self.disabled:
                continue
            is_origin = idx == origin_idx
            attempts = self.cfg.max_attempts if is_origin else self.cfg.peer_attempts
            tries = 2 if is_origin else 1  # one re-fetch from origin on a checksum mismatch
            data: bytes | memoryview | None = None
            for attempt in range(tries):
                try:
                    info = await self._head(idx, chunk.path, attempts, net)
                    if info.size != entry.size:
                        msg = f"{src.name}: {chunk.path} is {info.size} bytes, the manifest says {entry.size}"
                        if is_origin:
                            raise IntegrityError(msg)
                        self._drop_source(idx, msg)
                        break
                    data = await self._retrying(
                        functools.partial(self._get, net, src, chunk.path, start, end, info, buf),
                        attempts,
                        f"GET {src.name} {chunk.path} [{start}, {end})",
                    )
                except ObjectChanged as e:
                    if is_origin:
                        await self._restart_file(st, chunk.gen, e)
                        return
                    self._drop_source(idx, str(e))
                    break
                except SourceError as e:
                    if is_origin:
                        raise
                    self._drop_source(idx, str(e))
                    break
                if chunk.gen != st.gen:
                    return
                # Our own page-aligned buffer (not a library's bytes) may go to disk with O_DIRECT.
                aligned = buf is not None and isinstance(data, memoryview) and data.obj is buf.obj
                try:
                    bad = await asyncio.to_thread(
                        diskwrite.verify_write, st, ps, chunk.first, data, start, aligned, buf, self.manifest.algorithm
                    )
                except OSError as e:
                    if e.errno in FULL_ERRNOS:
                        raise disk_full(e, self.staging / chunk.path, self.manifest.total_bytes) from None
                    raise
                if not bad:
                    self._written(st, chunk, len(data), kind)
                    return
                data = None
                a, b = entry.part_range(bad[0], ps)
                where = f"{chunk.path} part {bad[0]} (bytes {a}-{b - 1}) from {src.name}"
                if not is_origin:
                    self._drop_source(idx, f"{self.manifest.label} mismatch in {where}")
                    break
                if attempt + 1 >= tries:
                    raise IntegrityError(
                        f"{self.manifest.label} mismatch in {where}: the origin's bytes differ from the manifest "
                        f"(manifest {self.manifest.digest[:12]}); refusing to mark the model complete"
                    )
                self.reporter.event("retry", what=f"checksum mismatch in {where}", attempt=attempt + 1)
                self.heads.pop((idx, chunk.path), None)
        raise SourceError(f"{chunk.path}: no source left to fetch bytes {start}-{end - 1} from")

    async def _fetch_piece(self, piece: Piece, net: _Conn) -> None:
        """One tail piece, from the first source still in use. Any failure, and a group whose
        parts do not hash right, falls back to fetching the chunk whole the normal way (which
        retries, drops bad peers and restarts changed objects)."""
        g, chunk = piece.group, piece.group.chunk
        st = self.files[chunk.path]
        entry, ps = st.entry, self.manifest.part_size
        start, end = chunk.first * ps, min(chunk.last * ps, entry.size)
        if g.buf is None:
            g.buf = self._take()
        target = g.buf[piece.lo - start : piece.hi - start]
        if not g.failed and chunk.gen == st.gen:
            idx = next((i for i in range(len(self.sources)) if i not in self.disabled), None)
            try:
                if idx is None:
                    raise SourceError(f"{chunk.path}: no source left")
                kind, src = self.sources[idx]
                attempts = self.cfg.max_attempts if idx == len(self.sources) - 1 else self.cfg.peer_attempts
                info = await self._head(idx, chunk.path, attempts, net)
                if info.size != entry.size:
                    raise SourceError(f"{src.name}: {chunk.path} is {info.size} bytes, not {entry.size}")
                data = await self._retrying(
                    functools.partial(self._get, net, src, chunk.path, piece.lo, piece.hi, info, target),
                    attempts,
                    f"GET {src.name} {chunk.path} [{piece.lo}, {piece.hi})",
                )
                if not (isinstance(data, memoryview) and data.obj is target.obj):
                    target[:] = data
                if idx != len(self.sources) - 1:
                    g.kind = kind
            except SourceError:
                g.failed = True
        g.left -= 1
        if g.left:
            return
        whole, g.buf = g.buf, None
        try:  # the last piece in: verify and write the whole range, or fetch it whole
            if chunk.gen != st.gen:
                return
            if not g.failed:
                try:
                    bad = await asyncio.to_thread(
                        diskwrite.verify_write,
                        st,
                        ps,
                        chunk.first,
                        whole[: end - start],
                        start,
                        True,
                        None,
                        self.manifest.algorithm,
                    )
                except OSError as e:
                    if e.errno in FULL_ERRNOS:
                        raise disk_full(e, self.staging / chunk.path, self.manifest.total_bytes) from None
                    raise
                if not bad:
                    self._written(st, chunk, end - start, g.kind)
                    return
            await self._fetch_chunk(chunk, whole, net)
        finally:
            self._give(whole)

    async def _get(
        self,
        net: _Conn | None,
        src: Source,
        path: str,
        start: int,
        end: int,
        info: ObjectInfo,
        buf: memoryview | None,
    ) -> bytes | memoryview:
        """One ranged GET, holding the stream's connection only while bytes arrive (not in backoff)."""
        if net is None:
            return await src.read_range(path, start, end, info, buf)
        try:
            async with net.lock:
                return await src.read_range(path, start, end, info, buf)
        finally:
            net.free.set()  # the bytes are in: the stream's other slot may take the next range

    def _written(self, st: FileState, chunk: Chunk, nbytes: int, kind: str) -> None:
        if chunk.gen != st.gen:
            # The file restarted meanwhile: not journaled, so fetched again. The late write was
            # harmless: it passed the same part hashes, so it wrote the very bytes that belong there.
            return
        for i in range(chunk.first, chunk.last):
            self.journal.mark_done(chunk.path, i)
        st.pending -= chunk.last - chunk.first
        self.pending -= chunk.last - chunk.first
        self.stats.add(kind, nbytes)
        self.reporter.advance(nbytes, kind)
        if st.pending == 0 and st.synced is None:
            # Flushed now, overlapping the other files' downloads; the end of the pull awaits it.
            st.synced = asyncio.ensure_future(asyncio.to_thread(os.fsync, st.fd))
        if self.pending == 0:
            self.finished.set()

    async def _restart_file(self, st: FileState, gen: int, exc: ObjectChanged) -> None:
        """The object changed mid-download: forget every part of this file and fetch it again."""
        if gen != st.gen:
            return
        st.restarts += 1
        self.stats.restarts += 1
        if st.restarts > self.cfg.max_restarts:
            raise IntegrityError(f"{st.entry.path} kept changing at the origin ({st.restarts - 1} restarts); giving up")
        st.gen += 1
        for key in [k for k in self.heads if k[1] == st.entry.path]:
            del self.heads[key]
        ps = self.manifest.part_size
        lost = sum(b - a for a, b in (st.entry.part_range(i, ps) for i in self.journal.done.get(st.entry.path, ())))
        self.journal.reset(st.entry.path)
        self.reporter.advance(-lost, "restart")
        self.reporter.event("restart", file=st.entry.path, reason=str(exc)[:300])
        self._enqueue_file(st)
