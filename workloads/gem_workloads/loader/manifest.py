"""The model manifest: every file with its size, SHA-256 and per-part SHA-256.

Per-part hashes exist so that each ranged GET can be verified the moment it lands, from any
source (origin, peer or cache), and so a resumed pull can trust what it already wrote. The
manifest's own digest (SHA-256 of its canonical JSON) is the model's identity in the node
and peer caches: two pods asking for the same manifest ask for the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gem_workloads.loader.errors import ManifestError, UsageError

MANIFEST_NAME = "manifest.json"
"""Default name of the manifest next to the model files at the origin."""
RESERVED_PREFIX = ".gem-load"
"""Loader bookkeeping files (marker, staging, journal) start with this and are never listed."""
DEFAULT_PART_SIZE = 16 * 1024 * 1024
MIN_PART_SIZE = 64 * 1024
MAX_PART_SIZE = 1024 * 1024 * 1024
FORMAT_VERSION = 1

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str, argument: str) -> int:
    """Parse '16MiB', '64M', '1GB' or '4096' into bytes; binary units, because part sizes are.

    Errors name the argument so a bad flag is obvious from the message alone.
    """
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"{argument}: cannot parse size {text!r} (examples: 16MiB, 64M, 1048576)")
    return int(m.group(1)) << (10 * _UNITS[m.group(2).lower()])


def check_part_size(size: int, argument: str = "--part-size") -> int:
    """Reject part sizes that would make requests either tiny (overhead) or huge (memory)."""
    if not MIN_PART_SIZE <= size <= MAX_PART_SIZE:
        raise UsageError(f"{argument}: {size} bytes is outside [{MIN_PART_SIZE}, {MAX_PART_SIZE}] (64KiB..1GiB)")
    return size


def check_relpath(path: str) -> str:
    """A manifest path must stay inside the destination: relative, POSIX, no '..', no reserved names."""
    p = PurePosixPath(path)
    if (
        not path
        or p.is_absolute()
        or "\\" in path
        or any(part in ("", ".", "..") for part in path.split("/"))
        or p.parts[0].startswith(RESERVED_PREFIX)
    ):
        raise ManifestError(f"manifest path {path!r} is not a safe relative path")
    return path


@dataclass(frozen=True)
class FileEntry:
    """One file of the model; parts[i] hashes bytes [i*part_size, min((i+1)*part_size, size))."""

    path: str
    size: int
    sha256: str
    parts: tuple[str, ...]

    def part_range(self, index: int, part_size: int) -> tuple[int, int]:
        start = index * part_size
        return start, min(start + part_size, self.size)


@dataclass(frozen=True)
class Manifest:
    """The whole model; immutable so its digest can be computed once and trusted."""

    part_size: int
    files: tuple[FileEntry, ...]
    version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "partSize": self.part_size,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256, "parts": list(f.parts)} for f in self.files],
        }

    def to_json(self) -> str:
        """Canonical form: sorted keys, no whitespace, so the digest is reproducible anywhere."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse and validate; every structural problem is a ManifestError with the reason."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as e:
            raise ManifestError(f"manifest is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ManifestError("manifest must be a JSON object")
        if data.get("version") != FORMAT_VERSION:
            raise ManifestError(f"unsupported manifest version {data.get('version')!r} (expected {FORMAT_VERSION})")
        part_size = data.get("partSize")
        if not isinstance(part_size, int) or not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
            raise ManifestError(f"manifest partSize {part_size!r} is invalid")
        raw_files = data.get("files")
        if not isinstance(raw_files, list):
            raise ManifestError("manifest 'files' must be a list")
        files: list[FileEntry] = []
        seen: set[str] = set()
        for raw in raw_files:
            files.append(_parse_entry(raw, part_size))
            if files[-1].path in seen:
                raise ManifestError(f"manifest lists {files[-1].path!r} twice")
            seen.add(files[-1].path)
        return cls(part_size=part_size, files=tuple(files))


def part_count(size: int, part_size: int) -> int:
    return (size + part_size - 1) // part_size


def _parse_entry(raw: Any, part_size: int) -> FileEntry:
    if not isinstance(raw, dict):
        raise ManifestError("manifest file entries must be objects")
    path, size, sha, parts = raw.get("path"), raw.get("size"), raw.get("sha256"), raw.get("parts")
    if not isinstance(path, str):
        raise ManifestError("manifest file entry without a string 'path'")
    check_relpath(path)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(f"{path}: size {size!r} is invalid")
    if not isinstance(sha, str) or not _HEX64.match(sha):
        raise ManifestError(f"{path}: sha256 {sha!r} is not 64 lowercase hex digits")
    if not isinstance(parts, list) or not all(isinstance(p, str) and _HEX64.match(p) for p in parts):
        raise ManifestError(f"{path}: 'parts' must be a list of SHA-256 hex digests")
    if len(parts) != part_count(size, part_size):
        raise ManifestError(f"{path}: {len(parts)} part hashes for {size} bytes at partSize {part_size}")
    return FileEntry(path=path, size=size, sha256=sha, parts=tuple(parts))


def _walk(root: Path) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(RESERVED_PREFIX))
        for name in sorted(filenames):
            rel = Path(dirpath, name).relative_to(root).as_posix()
            if rel == MANIFEST_NAME or name.startswith(RESERVED_PREFIX):
                continue
            yield rel


def hash_file(path: Path, rel: str, part_size: int) -> FileEntry:
    """Hash one file in a single sequential read: the whole-file digest and each part's."""
    whole = hashlib.sha256()
    parts: list[str] = []
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(part_size):
            whole.update(chunk)
            parts.append(hashlib.sha256(chunk).hexdigest())
            size += len(chunk)
    return FileEntry(path=rel, size=size, sha256=whole.hexdigest(), parts=tuple(parts))


def build_manifest(root: Path, part_size: int = DEFAULT_PART_SIZE, workers: int = 4) -> Manifest:
    """Hash every file under root (hashlib releases the GIL, so files hash in parallel)."""
    if not root.is_dir():
        raise UsageError(f"DIR: {root} is not a directory")
    check_part_size(part_size)
    rels = sorted(_walk(root))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        entries = list(pool.map(lambda rel: hash_file(root / rel, rel, part_size), rels))
    return Manifest(part_size=part_size, files=tuple(entries))
