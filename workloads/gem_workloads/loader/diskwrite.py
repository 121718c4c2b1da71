"""Verified writes into a pull's staging files: hash a range, then write it in place.

A range is checked against the manifest's part hashes before any byte of it is written, so a
bad or hostile source can never plant bytes; its block-aligned body goes with O_DIRECT where the
filesystem allows (no page-cache copy), the rest buffered. Why a module of its own: the node
cache checks and writes by the same rules (part hashes, O_DIRECT alignment, a full disk reported
the same way), and the download engine's concurrency reads more plainly without the byte-level
steps.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gem_workloads.loader.errors import DiskFullError
from gem_workloads.loader.manifest import FileEntry, hasher

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
DIRECT_ALIGN = 4096
"""O_DIRECT needs buffer address, file offset and length aligned to the logical block size."""


@dataclass
class FileState:
    """A file being filled; `gen` grows when the file restarts, so late results of the old run are ignored."""

    entry: FileEntry
    fd: int
    dfd: int | None = None  # the same file opened with O_DIRECT, when the filesystem supports it
    gen: int = 0
    restarts: int = 0
    pending: int = 0
    synced: asyncio.Future[None] | None = None  # the fsync started when its last part was written


def free_bytes(where: Path | str) -> int | None:
    """Bytes free on the filesystem holding `where` (its nearest existing parent), None if unknown."""
    path = Path(where)
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def disk_full(exc: OSError, where: Path | str, need: int | None = None) -> DiskFullError:
    """ENOSPC, EDQUOT and EFBIG all mean the same to a user: this much did not fit here.

    `need` is the model's size: what the directory must hold, beside what its filesystem has free.
    """
    free = free_bytes(where)
    extra = f" (needs {need} bytes, {free} free)" if need is not None and free is not None else ""
    extra = extra or (f" (needs {need} bytes)" if need is not None else "")
    return DiskFullError(f"out of space writing {where}{extra}: {exc.strerror or exc}", path=str(where), need=need)


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


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def verify_write(
    st: FileState,
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
        write_range(st, data, offset, aligned)
    return bad


def write_range(st: FileState, data: bytes | memoryview, offset: int, aligned: bool) -> None:
    """Write one verified range: its block-aligned body with O_DIRECT when possible, the rest buffered."""
    view = memoryview(data)
    if st.dfd is not None and aligned and offset % DIRECT_ALIGN == 0:
        body = len(view) // DIRECT_ALIGN * DIRECT_ALIGN
        if body:
            try:
                pwrite_all(st.dfd, view[:body], offset)
                view, offset = view[body:], offset + body
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                os.close(st.dfd)  # the filesystem refused after all: buffered from now on
                st.dfd = None
    pwrite_all(st.fd, view, offset)


def open_direct(path: Path) -> int | None:
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        return None  # tmpfs and some network filesystems have no O_DIRECT
