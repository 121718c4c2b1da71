"""Any HTTP server that honours Range: nginx, a peer's `gem-load serve`, a CDN.

Ranged GETs go through rawhttp into the stream's buffer; aiohttp does HEAD, small reads, and
everything when a proxy is configured or under `--receive library`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from gem_workloads.loader.errors import ObjectChanged, SourceError
from gem_workloads.loader.rawhttp import ConnectionPool, proxied
from gem_workloads.loader.sources.base import ObjectInfo, classify
from gem_workloads.loader.sources.ranged import socket_head, socket_range

if TYPE_CHECKING:  # imported where used: a pull from S3 or a warm cache never loads aiohttp (~0.2 s)
    import aiohttp


class HttpSource:
    """Any HTTP server that honours Range (nginx, a peer's `gem-load serve`, a CDN)."""

    def __init__(self, base_url: str, streams: int = 16, socket_receive: bool = True) -> None:
        self.name = base_url
        self._base = base_url if base_url.endswith("/") else base_url + "/"
        self._streams = streams
        self._session: aiohttp.ClientSession | None = None
        # Ranged GETs straight into the stream's buffer (rawhttp); aiohttp for HEAD, small reads,
        # and everything when a proxy is configured.
        self._pool = ConnectionPool(streams) if socket_receive and not proxied(self._base) else None

    def _client(self) -> aiohttp.ClientSession:
        # Created lazily so it binds to the running loop; exactly one connection per stream, so a
        # per-connection server limit sees N connections, never more.
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._streams),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60),
                auto_decompress=False,
            )
        return self._session

    def _url(self, path: str) -> str:
        return self._base + quote(path)

    async def connect_ahead(self) -> None:
        if self._pool is not None:
            await self._pool.connect_ahead(self._base)

    async def head(self, path: str) -> ObjectInfo:
        url = self._url(path)
        if self._pool is not None:
            return await socket_head(self._pool, url, url, by_get=url)
        try:
            async with self._client().head(url, allow_redirects=True) as resp:
                if resp.status in (403, 405, 501):
                    return await self._head_by_get(url)  # e.g. a presigned GET URL refuses HEAD
                _raise_for_status(resp.status, url)
                length = resp.headers.get("Content-Length")
                if length is None:
                    raise SourceError(f"{url}: no Content-Length in HEAD response")
                etag = resp.headers.get("ETag") or resp.headers.get("Last-Modified")
                return ObjectInfo(size=int(length), etag=etag)
        except Exception as e:
            raise classify(e, url) from None

    async def _head_by_get(self, url: str) -> ObjectInfo:
        """Size and version from a one-byte ranged GET, for servers that do not answer HEAD."""
        async with self._client().get(url, headers={"Range": "bytes=0-0"}) as resp:
            _raise_for_status(resp.status, url)
            etag = resp.headers.get("ETag") or resp.headers.get("Last-Modified")
            total = resp.headers.get("Content-Range", "").rpartition("/")[2]
            if resp.status == 206 and total.isdigit():
                return ObjectInfo(size=int(total), etag=etag)
            if resp.status == 200 and resp.content_length is not None:
                return ObjectInfo(size=resp.content_length, etag=etag)
            raise SourceError(f"{url}: cannot tell the object's size (no HEAD, no Content-Range)")

    async def read_range(
        self, path: str, start: int, end: int, info: ObjectInfo, buf: memoryview | None = None
    ) -> bytes | memoryview:
        url = self._url(path)
        if self._pool is not None:
            return await socket_range(self._pool, url, {}, url, start, end, info, buf)
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        try:
            async with self._client().get(url, headers=headers) as resp:
                if resp.status == 412:
                    raise ObjectChanged(f"{url} changed at the source (precondition failed)")
                _raise_for_status(resp.status, url)
                etag = resp.headers.get("ETag") or resp.headers.get("Last-Modified")
                if info.etag and etag and etag != info.etag:
                    raise ObjectChanged(f"{url} changed at the source (ETag {info.etag} -> {etag})")
                if resp.status == 206:
                    total = resp.headers.get("Content-Range", "").rpartition("/")[2]
                    if total.isdigit() and int(total) != info.size:
                        raise ObjectChanged(f"{url} changed at the source (size {info.size} -> {total})")
                elif not (start == 0 and end == info.size):
                    raise SourceError(f"{url}: server ignored the Range header (status {resp.status})")
                data = await self._body(resp, end - start, buf, url)
        except SourceError:
            raise
        except Exception as e:
            raise classify(e, url) from None
        if len(data) != end - start:
            raise SourceError(f"{url}: short read ({len(data)} of {end - start} bytes)", transient=True)
        return data

    @staticmethod
    async def _body(resp: aiohttp.ClientResponse, size: int, buf: memoryview | None, url: str) -> bytes | memoryview:
        """Copy the body into the worker's reused buffer: a fresh 16 MiB object per range costs
        page faults and a join copy, about a fifth of the CPU per byte on a busy node."""
        if buf is None or len(buf) < size:
            return await resp.read()
        view, pos = buf, 0
        async for chunk in resp.content.iter_any():
            if pos + len(chunk) > size:
                raise SourceError(f"{url}: more bytes than the requested range")
            view[pos : pos + len(chunk)] = chunk
            pos += len(chunk)
        return view[:pos]

    async def read_all(self, path: str) -> bytes:
        url = self._url(path)
        try:
            async with self._client().get(url) as resp:
                _raise_for_status(resp.status, url)
                return await resp.read()
        except Exception as e:
            raise classify(e, url) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._pool is not None:
            await self._pool.close()


def _raise_for_status(status: int, url: str) -> None:
    if status in (200, 206):
        return
    transient = status >= 500 or status in (408, 429)
    word = "not found" if status == 404 else f"HTTP {status}"
    raise SourceError(f"{url}: {word}", transient=transient, status=status)
