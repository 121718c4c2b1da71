"""Where bytes come from: object stores (obstore), HTTP servers and peers, local paths.

Ranged GETs from object stores and HTTP servers go through rawhttp (presigned URLs for S3/GCS),
which reads each body straight into the stream's buffer; obstore and aiohttp do the rest (HEAD,
the manifest) and everything under `--receive library`, behind a proxy, or with credentials that
cannot sign URLs.

Every source answers the same two questions - how big is this object and what is its version
(ETag), and give me bytes [start, end) - so the puller can split, retry, verify and fall
through between sources without knowing which kind it talks to. A source reports a change
of version as ObjectChanged so that a file is never stitched together from two versions.
Credentials come only from the environment (AWS_*, GOOGLE_*, standard chains).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from gem_workloads.loader.errors import UsageError
from gem_workloads.loader.rawhttp import RECEIVE_MODES
from gem_workloads.loader.sources.base import SCHEMES, ObjectInfo, Source, check_uri, classify, split_uri
from gem_workloads.loader.sources.http_servers import HttpSource
from gem_workloads.loader.sources.local_paths import LocalSource
from gem_workloads.loader.sources.object_stores import ObstoreSource, object_store

__all__ = [
    "SCHEMES",
    "HttpSource",
    "LocalSource",
    "ObjectInfo",
    "ObstoreSource",
    "Source",
    "check_uri",
    "classify",
    "object_store",
    "open_source",
    "read_uri",
    "split_uri",
]


def open_source(uri: str, streams: int = 16, argument: str = "SOURCE", receive: str = "socket") -> Source:
    """Build the source for a model root URI (the directory holding the files)."""
    check_uri(uri, argument)
    if receive not in RECEIVE_MODES:
        raise UsageError(f"--receive: {receive!r} is not one of {', '.join(RECEIVE_MODES)}")
    scheme = urlsplit(uri).scheme.lower()
    if scheme in ("s3", "gs"):
        return ObstoreSource(uri, streams, socket_receive=receive == "socket")
    if scheme in ("http", "https"):
        return HttpSource(uri, streams, socket_receive=receive == "socket")
    if scheme == "file":
        return LocalSource(Path(urlsplit(uri).path))
    return LocalSource(Path(uri))


async def read_uri(uri: str, argument: str) -> bytes:
    """Read one small object (a manifest) from any supported location."""
    base, name = split_uri(check_uri(uri, argument))
    source = open_source(base, streams=2, argument=argument)
    try:
        return await source.read_all(name)
    finally:
        await source.close()
