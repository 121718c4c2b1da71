"""A directory on a mounted filesystem (NFS, a PVC, a test fixture) as a source.

Its version is the file's inode, mtime and size, so a file replaced or rewritten during a pull
reads as ObjectChanged like an object store's new ETag.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gem_workloads.loader.errors import ObjectChanged, SourceError
from gem_workloads.loader.sources.base import ObjectInfo


class LocalSource:
    """A directory on a mounted filesystem (NFS, a PVC, a test fixture)."""

    def __init__(self, root: Path) -> None:
        self.name = str(root)
        self._root = root

    def _path(self, path: str) -> Path:
        return self._root / path

    @staticmethod
    def _info(st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(size=st.st_size, etag=f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}")

    async def head(self, path: str) -> ObjectInfo:
        try:
            return self._info(await asyncio.to_thread(os.stat, self._path(path)))
        except FileNotFoundError:
            raise SourceError(f"{self._path(path)}: not found", status=404) from None
        except OSError as e:
            raise SourceError(f"{self._path(path)}: {e.strerror}") from None

    async def read_range(
        self, path: str, start: int, end: int, info: ObjectInfo, buf: memoryview | None = None
    ) -> bytes | memoryview:
        return await asyncio.to_thread(self._pread, path, start, end, info, buf)

    def _pread(self, path: str, start: int, end: int, info: ObjectInfo, buf: memoryview | None) -> bytes | memoryview:
        try:
            fd = os.open(self._path(path), os.O_RDONLY)
        except FileNotFoundError:
            raise ObjectChanged(f"{self._path(path)} disappeared at the source") from None
        try:
            if self._info(os.fstat(fd)) != info:
                raise ObjectChanged(f"{self._path(path)} changed at the source")
            if buf is not None and len(buf) >= end - start:
                view = buf[: end - start]
                got = 0
                while got < end - start:
                    n = os.preadv(fd, [view[got:]], start + got)
                    if n == 0:
                        raise SourceError(f"{self._path(path)}: unexpected end of file at {start + got}")
                    got += n
                return view
            chunks: list[bytes] = []
            pos = start
            while pos < end:
                chunk = os.pread(fd, end - pos, pos)
                if not chunk:
                    raise SourceError(f"{self._path(path)}: unexpected end of file at {pos}")
                chunks.append(chunk)
                pos += len(chunk)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        finally:
            os.close(fd)

    async def close(self) -> None:
        return None

    async def connect_ahead(self) -> None:
        return None

    async def read_all(self, path: str) -> bytes:
        try:
            return await asyncio.to_thread(self._path(path).read_bytes)
        except FileNotFoundError:
            raise SourceError(f"{self._path(path)}: not found", status=404) from None
        except OSError as e:
            raise SourceError(f"{self._path(path)}: {e.strerror}") from None
