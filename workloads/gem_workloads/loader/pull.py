"""Pull a model into DEST: node cache, then peers, then origin; the marker is written last.

Why: a destination must never look complete when it is not. The files are fetched (or
copied from the node cache) into DEST's staging directory, renamed into place only when all
of them are verified, and `.gem-load-complete` (seconds, bytes, manifestDigest) is written
after that, so a pod's readiness can rest on that one file (loader.destination). A destination
already holding the same manifest is left as it is.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from gem_workloads.loader.cache import (
    NodeCache,
    cache_unusable,
    fallback_reason,
    full_cache_error,
    pull_through_cache,
)
from gem_workloads.loader.config import PullConfig, PullStats
from gem_workloads.loader.destination import (
    DEST_MANIFEST_NAME,
    MARKER_NAME,
    STAGING_NAME,
    clear_marker,
    finalize,
    is_complete,
)
from gem_workloads.loader.download import Downloader
from gem_workloads.loader.errors import DiskFullError, LoaderError, ManifestError, SourceError, UsageError
from gem_workloads.loader.manifest import MANIFEST_NAME, Manifest
from gem_workloads.loader.progress import NullReporter, Reporter
from gem_workloads.loader.sources import HttpSource, Source, check_uri, open_source, read_uri

__all__ = ["DEST_MANIFEST_NAME", "MARKER_NAME", "STAGING_NAME", "PullConfig", "PullStats", "pull"]


async def load_manifest(source: str, manifest_uri: str | None, cfg: PullConfig | None = None) -> Manifest:
    """Read the manifest (default: SOURCE/manifest.json), retrying like any GET; errors name --manifest."""
    cfg = cfg or PullConfig()
    uri = manifest_uri or source.rstrip("/") + "/" + MANIFEST_NAME
    delay = cfg.backoff_base
    for attempt in range(1, cfg.max_attempts + 1):
        try:
            raw = await read_uri(uri, "--manifest")
            break
        except SourceError as e:
            if e.transient and attempt < cfg.max_attempts:
                await asyncio.sleep(min(cfg.backoff_max, delay) * (0.5 + random.random() / 2))
                delay *= 2
                continue
            missing = e.status == 404 or "not found" in str(e).lower()
            hint = " (create one with `gem-load manifest DIR` next to the model, or pass --manifest)"
            raise ManifestError(f"--manifest: cannot read {uri}: {e}{hint if missing else ''}") from None
    try:
        return Manifest.from_json(raw)
    except ManifestError as e:
        raise ManifestError(f"--manifest: {uri}: {e}") from None


def peer_sources(peers: list[str], digest: str, streams: int, receive: str = "socket") -> list[tuple[str, Source]]:
    out: list[tuple[str, Source]] = []
    for p in peers:
        check_uri(p, "--peers")
        if not p.startswith(("http://", "https://")):
            raise UsageError(f"--peers: {p!r} is not an http(s):// URL")
        base = f"{p.rstrip('/')}/models/{digest}/"
        out.append(("peer", HttpSource(base, streams, socket_receive=receive == "socket")))
    return out


async def pull(
    source: str,
    dest: Path,
    *,
    manifest_uri: str | None = None,
    cfg: PullConfig | None = None,
    cache: NodeCache | None = None,
    peers: list[str] | None = None,
    reporter: Reporter | None = None,
    verify_cache: str = "cheap",
    cache_fallback: str | None = None,
) -> dict[str, Any]:
    """Make `dest` hold the verified model; return the summary also written to the marker.

    A node cache this process may not write (see `cache.cache_unusable`) is not a reason to
    fail the pod: the pull goes direct, and `cacheFallback` in the summary says why, so the
    termination message and the operator's metric show it. `cache_fallback` is that reason when
    the caller already found the cache unusable before the pull.
    """
    cfg = cfg or PullConfig()
    reporter = reporter or NullReporter()
    t0 = time.monotonic()
    check_uri(source, "SOURCE")
    if manifest_uri:
        check_uri(manifest_uri, "--manifest")
    origin = open_source(source, cfg.streams, receive=cfg.receive)
    sources: list[tuple[str, Source]] = [("origin", origin)]
    try:
        # The origin's first connection opens while the manifest is read, so the first GET finds
        # it ready (not with peers: they serve first, the origin only what they cannot).
        # A hit in DEST or the node cache leaves that connection unused: one handshake spent.
        ahead = None if peers else asyncio.ensure_future(origin.connect_ahead())
        try:
            manifest = await load_manifest(source, manifest_uri, cfg)
        except BaseException:
            if ahead is not None:
                ahead.cancel()
            raise
        if ahead is not None:
            await ahead  # never raises; awaited so that the first GET does not race it for a connection
        if cfg.request_size is not None and cfg.request_size % manifest.part_size:
            raise UsageError(
                f"--part-size: {cfg.request_size} is not a multiple of the manifest's part size {manifest.part_size}"
            )
        try:
            await asyncio.to_thread(dest.mkdir, parents=True, exist_ok=True)
        except OSError as e:
            raise LoaderError(f"DEST: cannot create {dest}: {e.strerror}") from None
        summary: dict[str, Any] = {"manifestDigest": manifest.digest, "bytes": manifest.total_bytes}
        if is_complete(dest, manifest):
            reporter.event("already-complete", dest=str(dest))
            summary.update(seconds=round(time.monotonic() - t0, 3), fetchedBytes=0, sources={})
            reporter.finish(summary)
            return summary
        clear_marker(dest)
        sources[:0] = peer_sources(peers or [], manifest.digest, cfg.streams, cfg.receive)
        stats: PullStats | None = None
        if cache is not None:
            try:
                stats = await pull_through_cache(cache, manifest, sources, dest, cfg, reporter, verify_cache)
            except (OSError, DiskFullError) as e:
                unusable = full_cache_error(e, cache.root) if isinstance(e, DiskFullError) else e
                if unusable is None or not cache_unusable(unusable, cache.root):
                    raise
                cache_fallback = fallback_reason(unusable, cache.root)
                reporter.event("cache-fallback", reason=cache_fallback)
        if stats is None:
            stats = await Downloader(manifest, sources, dest / STAGING_NAME, cfg, reporter).run()
    finally:
        for _, src in sources:
            await src.close()
    summary.update(
        seconds=round(time.monotonic() - t0, 3),
        fetchedBytes=sum(v for k, v in stats.fetched.items() if k != "cache"),
        resumedBytes=stats.resumed,
        sources=stats.fetched,
        retries=stats.retries,
        restarts=stats.restarts,
    )
    if cache_fallback:
        summary["cacheFallback"] = cache_fallback
    # Either way the verified files now sit in dest's staging dir (fetched, or copied from the cache).
    await asyncio.to_thread(finalize, dest / STAGING_NAME, dest, manifest, summary)
    reporter.finish(summary)
    return summary
