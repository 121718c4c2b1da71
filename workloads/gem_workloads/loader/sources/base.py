"""What every source is: the Source protocol, ObjectInfo, URI checks, and library errors as SourceError.

Kept apart from the sources themselves so that the download engine, the node cache and each
kind of source share one definition without importing one another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from gem_workloads.loader.errors import SourceError, UsageError

SCHEMES = ("s3", "gs", "http", "https", "file")

_STATUS = re.compile(r"status(?: code)?:?\s*(\d{3})\b", re.IGNORECASE)
_PERMANENT = (
    "NotFoundError",
    "PermissionDeniedError",
    "UnauthenticatedError",
    "InvalidPathError",
    "NotSupportedError",
    "UnknownConfigurationKeyError",
    "FileNotFoundError",
    "PermissionError",
)


@dataclass(frozen=True)
class ObjectInfo:
    """Size and version of an object; etag is None when the source has no notion of it."""

    size: int
    etag: str | None


class Source(Protocol):
    """A place to read a model's files from; paths are manifest paths (relative, POSIX)."""

    name: str

    async def head(self, path: str) -> ObjectInfo: ...

    async def read_range(
        self, path: str, start: int, end: int, info: ObjectInfo, buf: memoryview | None = None
    ) -> bytes | memoryview:
        """Bytes [start, end); may fill and return a view of `buf` (the caller's reused buffer)."""
        ...

    async def read_all(self, path: str) -> bytes: ...

    async def connect_ahead(self) -> None:
        """Open the connection the first ranged GET will use, where there is one to open; never
        raises (a failure is the first request's to report). Called while the manifest is read."""
        ...

    async def close(self) -> None: ...


def check_uri(uri: str, argument: str) -> str:
    """Reject unknown schemes, a missing bucket or host and an unparsable URL (an unclosed IPv6
    bracket, a port past 65535) early, with a message that names the argument."""
    try:
        parts = urlsplit(uri)
        port = parts.port if parts.scheme.lower() in ("http", "https") else None
    except ValueError as exc:  # urlsplit's own words: "Invalid IPv6 URL", "Port out of range 0-65535"
        raise UsageError(f"{argument}: {uri!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme and len(scheme) > 1 and scheme not in SCHEMES:
        raise UsageError(
            f"{argument}: unsupported scheme {scheme + '://'!r} in {uri!r} (use s3://, gs://, http(s)://, or a path)"
        )
    if scheme in ("s3", "gs") and not parts.netloc:
        raise UsageError(f"{argument}: {uri!r} has no bucket")
    if scheme in ("http", "https") and (not parts.hostname or port == 0):
        raise UsageError(f"{argument}: {uri!r} has no host:port to connect to")
    return uri


def split_uri(uri: str) -> tuple[str, str]:
    """Split 'base/name' so a single object (the manifest) can be read through a root source."""
    trimmed = uri.rstrip("/")
    head, _, name = trimmed.rpartition("/")
    if not name or not head:
        return ".", trimmed
    if head.endswith(":/") or head.endswith(":"):  # s3://bucket/name: root is the bucket itself
        return head + "/", name
    return head, name


def classify(exc: BaseException, where: str) -> SourceError:
    """Turn a library exception into a SourceError, deciding whether a retry can help."""
    if isinstance(exc, SourceError):
        return exc
    name = type(exc).__name__
    text = f"{name}: {exc}"
    status: int | None = None
    code = getattr(exc, "status", None)
    if name == "ClientResponseError" and isinstance(code, int):  # aiohttp's, without importing it
        status = code
    elif m := _STATUS.search(text):
        status = int(m.group(1))
    if name in _PERMANENT:
        transient = False
    elif status is not None:
        # 5xx (SlowDown is a 503), 408 and 429 pass; other 4xx (403 bad credentials...) do not.
        transient = status >= 500 or status in (408, 429)
    else:
        # No HTTP status: the transport failed (reset, closed, timed out, refused). A retry can help,
        # and a permanent misconfiguration still fails after the bounded backoff, with this message.
        transient = True
    short = text if len(text) < 400 else text[:400] + "..."
    return SourceError(f"{where}: {short}", transient=transient, status=status)
