"""S3 and GCS through obstore, with ranged GETs on presigned URLs read by rawhttp.

obstore signs the URLs and does HEAD and small reads itself; the ranged GETs of a pull go
through rawhttp into the stream's buffer, unless the credentials cannot sign, a proxy is
configured, or the endpoint refuses presigned requests, where obstore's own get is used.
Credentials come only from the environment (AWS_*, GOOGLE_*, standard chains).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from gem_workloads.loader.errors import ObjectChanged, SourceError, UsageError
from gem_workloads.loader.rawhttp import ConnectionPool, proxied
from gem_workloads.loader.sources.base import ObjectInfo, classify
from gem_workloads.loader.sources.ranged import socket_head, socket_range

SIGN_TTL_S = 3600
"""Presigned URLs live an hour and are renewed ten minutes before they expire."""


def object_store(uri: str, *, own_retries: bool) -> Any:
    """An obstore store rooted at an ``s3://`` or ``gs://`` URI (its path is the store's prefix).

    Credentials and endpoint come from the environment as obstore reads them (AWS_ACCESS_KEY_ID,
    AWS_ENDPOINT_URL, GOOGLE_SERVICE_ACCOUNT, ...); plain-http endpoints (MinIO, moto) are allowed
    because a user who points AWS_ENDPOINT_URL at one means it. ``own_retries`` keeps obstore's
    retries (writers that have no retry loop of their own, such as the trainer's checkpoint
    uploads); the puller turns them off because it retries, counts and reports itself.
    """
    from obstore.store import GCSStore, S3Store

    scheme = urlsplit(uri).scheme.lower()
    if scheme not in ("s3", "gs"):
        raise UsageError(f"{uri!r} is not an s3:// or gs:// URI")
    retry: Any = None if own_retries else {"max_retries": 0, "retry_timeout": timedelta(seconds=1)}
    client: Any = {"allow_http": True, "connect_timeout": "10s", "timeout": "300s"}
    if scheme == "s3":
        return S3Store.from_url(uri, client_options=client, retry_config=retry)
    return GCSStore.from_url(uri, client_options=client, retry_config=retry)


class ObstoreSource:
    """S3 / GCS through obstore: HEAD and small reads through its client; ranged GETs through
    presigned URLs (obstore signs them) read into the stream's buffer by rawhttp, unless the
    credentials cannot sign or a proxy is configured, where obstore's get is used."""

    def __init__(self, uri: str, streams: int = 16, socket_receive: bool = True) -> None:
        self.name = uri
        self._store = object_store(uri, own_retries=False)
        self._s3 = urlsplit(uri).scheme.lower() == "s3"
        self._pool: ConnectionPool | None = ConnectionPool(streams) if socket_receive else None
        self._signed: dict[tuple[str, str], tuple[str, float]] = {}

    async def _presigned(self, path: str, method: Literal["GET", "HEAD"] = "GET") -> str | None:
        """A URL for `method` on `path`, signed once per file and hour; None when signing is not possible."""
        hit = self._signed.get((method, path))
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        import obstore

        try:
            url = str(await obstore.sign_async(self._store, method, path, timedelta(seconds=SIGN_TTL_S)))
        except Exception:
            url = ""
        if not url or proxied(url):
            await self._to_library()
            return None
        self._signed[(method, path)] = (url, now + SIGN_TTL_S - 600)
        return url

    async def connect_ahead(self) -> None:
        if self._pool is None:
            return
        import obstore

        try:  # any path of the store: the URL's host and port are what count
            url = str(await obstore.sign_async(self._store, "GET", "_", timedelta(seconds=60)))
        except Exception:
            return  # no signing: the first request finds out and goes through obstore's client
        if url and not proxied(url):
            await self._pool.connect_ahead(url)

    async def _to_library(self) -> None:
        """obstore's own requests from now on (no signing, a proxy, or an endpoint refusing
        presigned URLs)."""
        if self._pool is not None:
            await self._pool.close()
        self._pool = None

    async def _refused(self, e: SourceError, method: str, path: str) -> bool:
        """After a 400/403 to a presigned request: True when the same request through obstore's
        header-signed client is worth trying (an endpoint that does not take query-string
        signatures), which then stays the way for this source; an expired URL is re-signed."""
        if e.status not in (400, 403):
            return False
        self._signed.pop((method, path), None)
        if e.transient:  # "Request has expired": the retry signs afresh
            return False
        await self._to_library()
        return True

    async def head(self, path: str) -> ObjectInfo:
        url = await self._presigned(path, "HEAD") if self._pool is not None else None
        pool = self._pool
        if url is not None and pool is not None:  # on a stream's connection: no extra one opened
            try:
                return await socket_head(pool, url, f"{self.name}/{path}", etag_only=True)
            except SourceError as e:
                if not await self._refused(e, "HEAD", path):
                    raise
        import obstore

        try:
            meta = await obstore.head_async(self._store, path)
        except Exception as e:
            raise classify(e, f"{self.name}/{path}") from None
        return ObjectInfo(size=int(meta["size"]), etag=meta.get("e_tag"))

    async def read_range(
        self, path: str, start: int, end: int, info: ObjectInfo, buf: memoryview | None = None
    ) -> bytes | memoryview:
        url = await self._presigned(path) if self._pool is not None else None
        pool = self._pool  # None again if signing turned out impossible
        if url is not None and pool is not None:
            headers = {"If-Match": info.etag} if info.etag and self._s3 else {}
            try:
                return await socket_range(
                    pool, url, headers, f"{self.name}/{path}", start, end, info, buf, etag_only=True
                )
            except SourceError as e:
                if not await self._refused(e, "GET", path):
                    raise
        import obstore
        from obstore.exceptions import PreconditionError

        options: Any = {"range": (start, end)}
        if info.etag:
            options["if_match"] = info.etag
        try:
            result = await obstore.get_async(self._store, path, options=options)
            meta = result.meta
            if int(meta["size"]) != info.size or (info.etag and meta.get("e_tag") not in (None, info.etag)):
                raise ObjectChanged(f"{self.name}/{path} changed at the source (ETag/size differ)")
            # The body in one Rust buffer: streaming it into the caller's buffer costs more (1.3-1.5
            # CPU-s/GB against 0.8-1.0 measured, the per-piece round trips into Python); the puller
            # copies it into its aligned buffer in the hashing thread, so it still goes with O_DIRECT.
            data = await result.bytes_async()
        except PreconditionError:
            raise ObjectChanged(f"{self.name}/{path} changed at the source (If-Match failed)") from None
        except Exception as e:
            raise classify(e, f"{self.name}/{path}") from None
        if len(data) != end - start:
            raise SourceError(f"{self.name}/{path}: short read ({len(data)} of {end - start} bytes)", transient=True)
        return memoryview(data)

    async def read_all(self, path: str) -> bytes:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            result = await obstore.get_async(self._store, path)
            return bytes(await result.bytes_async())
        except NotFoundError:
            raise SourceError(f"{self.name.rstrip('/')}/{path}: not found", status=404) from None
        except Exception as e:
            raise classify(e, f"{self.name}/{path}") from None

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
