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
idles for a whole range while the others finish (fewer than `streams` such buffers).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import mmap
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from gem_workloads.loader.errors import DiskFullError, IntegrityError, ObjectChanged, SourceError
from gem_workloads.loader.journal import JOURNAL_NAME, Journal
from gem_workloads.loader.manifest import FileEntry, Manifest, hasher
from gem_workloads.loader.progress import Reporter
from gem_workloads.loader.sources import ObjectInfo, Source

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
DIRECT_ALIGN = 4096
"""O_DIRECT needs buffer address, file offset and length aligned to the logical block size."""

T = TypeVar("T")


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
    """Fetch the pull's last `streams` ranges as TAIL_PIECES smaller GETs each (see module doc)."""
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


@dataclass
class _FileState:
    """A file being filled; `gen` grows when the file restarts, so late results of the old run are ignored."""

    entry: FileEntry
    fd: int
    dfd: int | None = None  # the same file opened with O_DIRECT, when the filesystem supports it
    gen: int = 0
    restarts: int = 0
    pending: int = 0
    synced: asyncio.Future[None] | None = None  # the fsync started when its last part was written


@dataclass(frozen=True)
class _Chunk:
    """One ranged GET: contiguous parts [first, last) of a file, for one generation of it."""

    path: str
    gen: int
    first: int
    last: int  # exclusive part index


@dataclass(eq=False)
class _Group:
    """A tail chunk fetched as pieces into one buffer; the last piece to land verifies and writes it."""

    chunk: _Chunk
    left: int
    buf: memoryview | None = None
    failed: bool = False
    kind: str = "origin"


@dataclass(frozen=True, eq=False)
class _Piece:
    """Bytes [lo, hi) of a file, one ranged GET smaller than a part; verified with its whole group."""

    group: _Group
    lo: int
    hi: int


TAIL_PIECES = 4
"""At most this many pieces per tail range: the last round's idle shrinks up to this many times."""


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


def disk_full(exc: OSError, where: Path | str, need: int | None = None) -> DiskFullError:
    """ENOSPC, EDQUOT and EFBIG all mean the same to a user: this much did not fit here."""
    extra = f" (needs {need} bytes)" if need is not None else ""
    return DiskFullError(f"out of space writing {where}{extra}: {exc.strerror or exc}")


def bad_parts(
    entry: FileEntry, part_size: int, first: int, data: bytes | memoryview, algorithm: str = "sha256"
) -> list[int]:
    """Indices of parts in `data` (starting at part `first`) whose digest differs from the manifest."""
    digest = hasher(algorithm)
    view = memoryview(data)
    bad: list[int] = []
    for i in range(first, first + (len(view) + part_size - 1) // part_size):
        off = (i - first) * part_size
        if digest(view[off : off + part_size]) != entry.parts[i]:
            bad.append(i)
    return bad


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _verify_write(
    st: _FileState,
    part_size: int,
    first: int,
    data: bytes | memoryview,
    offset: int,
    aligned: bool,
    stage: memoryview | None = None,
    algorithm: str = "sha256",
) -> list[int]:
    """Hash a range against the manifest and, only if every part matches, write it (one thread hop).

    A library's buffer (`aligned` false) is first copied into `stage`, the stream's page-aligned
    buffer, so it too goes to disk with O_DIRECT: a memcpy is about a tenth of the page-cache
    copy and the dirty-page writeback it replaces."""
    bad = bad_parts(st.entry, part_size, first, data, algorithm)
    if not bad:
        if not aligned and stage is not None and st.dfd is not None and len(stage) >= len(data):
            stage[: len(data)] = data
            data, aligned = stage[: len(data)], True
        _write_range(st, data, offset, aligned)
    return bad


def _write_range(st: _FileState, data: bytes | memoryview, offset: int, aligned: bool) -> None:
    """Write one verified range: its block-aligned body with O_DIRECT when possible, the rest buffered."""
    view = memoryview(data)
    if st.dfd is not None and aligned and offset % DIRECT_ALIGN == 0:
        body = len(view) // DIRECT_ALIGN * DIRECT_ALIGN
        if body:
            try:
                _pwrite_all(st.dfd, view[:body], offset)
                view, offset = view[body:], offset + body
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                os.close(st.dfd)  # the filesystem refused after all: buffered from now on
                st.dfd = None
    _pwrite_all(st.fd, view, offset)


def _open_direct(path: Path) -> int | None:
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        return None  # tmpfs and some network filesystems have no O_DIRECT


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
        self.files: dict[str, _FileState] = {}
        self.queue: asyncio.Queue[_Chunk | _Piece] = asyncio.Queue()
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
            for item in self._split_tail(chunks):  # on the loop's thread: asyncio.Queue is not thread-safe
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
            self.files[entry.path] = st = _FileState(entry=entry, fd=fd)
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
                    raise disk_full(e, path, entry.size) from None
                raise
            for i in done:
                a, b = entry.part_range(i, ps)
                self.stats.resumed += b - a
            if self.cfg.direct_io and entry.size >= DIRECT_ALIGN:
                st.dfd = _open_direct(path)

    def _chunks_of(self, st: _FileState) -> list[_Chunk]:
        """The file's undone parts as ranged GETs (runs of contiguous parts); counts them as pending."""
        undone = [i for i in range(len(st.entry.parts)) if not self.journal.is_done(st.entry.path, i)]
        self.pending += len(undone) - st.pending
        st.pending = len(undone)
        out: list[_Chunk] = []
        run: list[int] = []
        for i in undone:
            if run and (i != run[-1] + 1 or len(run) >= self.parts_per_request):
                out.append(_Chunk(st.entry.path, st.gen, run[0], run[-1] + 1))
                run = []
            run.append(i)
        if run:
            out.append(_Chunk(st.entry.path, st.gen, run[0], run[-1] + 1))
        return out

    def _enqueue_file(self, st: _FileState) -> None:
        for c in self._chunks_of(st):
            self.queue.put_nowait(c)

    def _split_tail(self, chunks: list[_Chunk]) -> list[_Chunk | _Piece]:
        """The final round's r = C mod N chunks (all C when C < N) become pieces, about N in all,
        so every stream has work while the round finishes; a full final round is left whole (its
        pieces would only add requests)."""
        n = self.cfg.streams
        r = len(chunks) % n if len(chunks) >= n else len(chunks)
        if n < 2 or not self.cfg.split_tail or r == 0:
            return list(chunks)
        head, tail = chunks[:-r], chunks[-r:]
        k = min(TAIL_PIECES, -(-n // r))
        out: list[_Chunk | _Piece] = list(head)
        ps = self.manifest.part_size
        for c in tail:
            start, end = c.first * ps, min(c.last * ps, self.files[c.path].entry.size)
            pieces = min(k, (end - start) // max(self.cfg.min_piece, 1))
            if pieces < 2:
                out.append(c)
                continue
            group = _Group(c, left=pieces)
            step = (end - start) // pieces // DIRECT_ALIGN * DIRECT_ALIGN or (end - start) // pieces
            bounds = [start + i * step for i in range(pieces)] + [end]
            out.extend(_Piece(group, a, b) for a, b in itertools.pairwise(bounds))
        return out

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
                if isinstance(item, _Piece):
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

    async def _fetch_chunk(self, chunk: _Chunk, buf: memoryview | None = None, net: _Conn | None = None) -> None:
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
                        _verify_write, st, ps, chunk.first, data, start, aligned, buf, self.manifest.algorithm
                    )
                except OSError as e:
                    if e.errno in FULL_ERRNOS:
                        raise disk_full(e, self.staging / chunk.path) from None
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

    async def _fetch_piece(self, piece: _Piece, net: _Conn) -> None:
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
                        _verify_write,
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
                        raise disk_full(e, self.staging / chunk.path) from None
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

    def _written(self, st: _FileState, chunk: _Chunk, nbytes: int, kind: str) -> None:
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

    async def _restart_file(self, st: _FileState, gen: int, exc: ObjectChanged) -> None:
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
