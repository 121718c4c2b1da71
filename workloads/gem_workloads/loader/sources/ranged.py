"""Ranged GETs and HEADs read straight into a stream's buffer through rawhttp.

Shared by the object-store sources (presigned URLs) and the HTTP ones: both must refuse a
response whose object is not the one that was HEADed (ETag, size) or that ignored Range, and
both turn S3/GCS-style error bodies into a SourceError that says whether a retry can help.
"""

from __future__ import annotations

import re
from typing import Any

from gem_workloads.loader.errors import ObjectChanged, SourceError
from gem_workloads.loader.rawhttp import ConnectionPool, Response
from gem_workloads.loader.sources.base import ObjectInfo


def _version(value: str | None) -> str | None:
    """An ETag compared without its quotes or weak prefix (servers and libraries differ there)."""
    return value.removeprefix("W/").strip('"') if value else value


def range_check(where: str, info: ObjectInfo, start: int, end: int, etag_only: bool = False) -> Any:
    """Refuse a response whose object is not the one we HEADed (ETag, size) or that ignored Range."""

    def check(resp: Response) -> None:
        h = resp.headers
        etag = h.get("etag") if etag_only else h.get("etag") or h.get("last-modified")
        if info.etag and etag and _version(etag) != _version(info.etag):
            raise ObjectChanged(f"{where} changed at the source (ETag {info.etag} -> {etag})")
        if resp.status == 206:
            total = h.get("content-range", "").rpartition("/")[2]
            if total.isdigit() and int(total) != info.size:
                raise ObjectChanged(f"{where} changed at the source (size {info.size} -> {total})")
        elif not (start == 0 and end == info.size):
            raise SourceError(f"{where}: server ignored the Range header (status {resp.status})")

    return check


_XML_FIELD = re.compile(rb"<(Code|Message)>([^<]{0,300})</\1>")


def _error_detail(body: bytes) -> str:
    """`Code: Message` from an S3/GCS XML error body, when there is one."""
    found = {k.decode(): v.decode("utf-8", "replace") for k, v in _XML_FIELD.findall(body[:4096])}
    return ": ".join(found[k] for k in ("Code", "Message") if k in found)


async def socket_range(
    pool: ConnectionPool,
    url: str,
    headers: dict[str, str],
    where: str,
    start: int,
    end: int,
    info: ObjectInfo,
    buf: memoryview | None,
    etag_only: bool = False,
) -> memoryview:
    """One ranged GET through `pool`, its body read into `buf` (or a new buffer if none fits)."""
    size = end - start
    target = buf[:size] if buf is not None and len(buf) >= size else memoryview(bytearray(size))
    headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity", **headers}
    try:
        resp, body = await pool.get(url, headers, target, range_check(where, info, start, end, etag_only))
    except ObjectChanged:
        raise
    except SourceError as e:
        raise SourceError(f"{where}: {e}", transient=e.transient, status=e.status) from None
    if isinstance(body, bytes):
        raise _status_error(where, resp, body)
    if body != size:
        raise SourceError(f"{where}: short read ({body} of {size} bytes)", transient=True)
    return target


def _status_error(where: str, resp: Response, body: bytes) -> SourceError:
    if resp.status == 412:
        return ObjectChanged(f"{where} changed at the source (precondition failed)")
    detail = _error_detail(body)
    word = "not found" if resp.status == 404 else f"HTTP {resp.status}"
    transient = resp.status >= 500 or resp.status in (408, 429) or "expired" in detail.lower()
    return SourceError(f"{where}: {word}{' ' + detail if detail else ''}", transient=transient, status=resp.status)


async def socket_head(
    pool: ConnectionPool, url: str, where: str, etag_only: bool = False, by_get: str | None = None
) -> ObjectInfo:
    """Size and version by HEAD through `pool`; a server that refuses HEAD (403, 405, 501) is asked
    for one byte with a ranged GET instead, at `by_get` (the URL a GET goes to)."""
    try:
        resp, _ = await pool.get(url, {"Accept-Encoding": "identity"}, memoryview(b""), _accept, method="HEAD")
        h = resp.headers
        if resp.status in (403, 405, 501) and by_get is not None:
            one = memoryview(bytearray(1))
            resp, body = await pool.get(by_get, {"Range": "bytes=0-0", "Accept-Encoding": "identity"}, one, _accept)
            if isinstance(body, bytes):
                raise _status_error(where, resp, body)
            h = resp.headers
            total = h.get("content-range", "").rpartition("/")[2]
            etag = h.get("etag") or h.get("last-modified")
            if resp.status == 206 and total.isdigit():
                return ObjectInfo(size=int(total), etag=etag)
            if resp.status == 200 and h.get("content-length", "").isdigit():
                return ObjectInfo(size=int(h["content-length"]), etag=etag)
            raise SourceError(f"{where}: cannot tell the object's size (no HEAD, no Content-Range)")
        if resp.status not in (200, 206):
            raise _status_error(where, resp, b"")
    except ObjectChanged:
        raise
    except SourceError as e:
        if e.args and str(e).startswith(where):
            raise
        raise SourceError(f"{where}: {e}", transient=e.transient, status=e.status) from None
    length = h.get("content-length")
    if length is None or not length.isdigit():
        raise SourceError(f"{where}: no Content-Length in HEAD response")
    etag = h.get("etag") if etag_only else h.get("etag") or h.get("last-modified")
    return ObjectInfo(size=int(length), etag=etag)


def _accept(resp: Response) -> None:
    return None
