"""What a pulled DEST holds, and the writes that keep it from ever looking complete when it is not.

Files are fetched (or copied from the node cache) into DEST's staging directory, renamed into
place only when all of them are verified, then the manifest copy is written and, last, the
marker `.gem-load-complete` (seconds, bytes, manifestDigest), so a pod's readiness can rest on
that one file. The node cache fills its entries the same way, which is why these names and
writes live below both the pull and the cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from gem_workloads.loader.diskwrite import FULL_ERRNOS, disk_full
from gem_workloads.loader.manifest import Manifest

STAGING_NAME = ".gem-load-staging"
MARKER_NAME = ".gem-load-complete"
DEST_MANIFEST_NAME = ".gem-load-manifest.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def finalize(staging: Path, dest: Path, manifest: Manifest, summary: dict[str, Any]) -> None:
    """Rename verified files into place, then write the manifest copy and, last, the marker."""
    try:
        for entry in manifest.files:
            target = dest / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / entry.path, target)
        (dest / DEST_MANIFEST_NAME).write_text(manifest.to_json())
        _fsync_dir(dest)
        write_json_atomic(dest / MARKER_NAME, summary)
        _fsync_dir(dest)
    except OSError as e:
        if e.errno in FULL_ERRNOS:
            raise disk_full(e, dest) from None
        raise
    shutil.rmtree(staging, ignore_errors=True)


def is_complete(dest: Path, manifest: Manifest) -> bool:
    """Cheap check that dest already holds this manifest: marker digest and every size match."""
    try:
        marker = json.loads((dest / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("manifestDigest") != manifest.digest:
        return False
    for entry in manifest.files:
        try:
            if (dest / entry.path).stat().st_size != entry.size:
                return False
        except OSError:
            return False
    return True


def clear_marker(dest: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (dest / MARKER_NAME).unlink()
