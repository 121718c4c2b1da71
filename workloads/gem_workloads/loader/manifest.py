"""The model manifest: every file with its size, digest and per-part digests.

Per-part hashes exist so that each ranged GET can be verified the moment it lands, from any
source (origin, peer or cache), and so a resumed pull can trust what it already wrote. The
manifest's own digest (SHA-256 of its canonical JSON) is the model's identity in the node
and peer caches: two pods asking for the same manifest ask for the same bytes.

Two formats. Version 1 (`sha256` per file): SHA-256 everywhere; still read and verified, and
written with `--algorithm sha256`. Version 2 declares its algorithm (`"algorithm": "blake3"`,
`digest` per file) and is what `gem-load manifest` writes by default: BLAKE3 is as collision-
resistant for this purpose and costs 0.22 CPU-s/GB against SHA-256's 0.55 (with SHA-NI) on the
machines measured, the largest single cost of a verified pull after the network receive.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
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
"""The SHA-256-only format; manifests that declare their algorithm are version 2."""
ALGORITHMS = ("blake3", "sha256")
DEFAULT_ALGORITHM = "blake3"
LABELS = {"blake3": "BLAKE3", "sha256": "SHA-256"}

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str, argument: str) -> int:
    """Parse '16MiB', '64M', '1.5GB' or '4096' into bytes; binary units, because part sizes are.

    Errors name the argument so a bad flag is obvious from the message alone.
    """
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"{argument}: cannot parse size {text!r} (examples: 16MiB, 64M, 1.5GB, 1048576)")
    number, scale = m.group(1), 1 << (10 * _UNITS[m.group(2).lower()])
    if "." not in number:
        return int(number) * scale
    return round(float(number) * scale)


def check_part_size(size: int, argument: str = "--part-size") -> int:
    """Reject part sizes that would make requests either tiny (overhead) or huge (memory)."""
    if not MIN_PART_SIZE <= size <= MAX_PART_SIZE:
        raise UsageError(f"{argument}: {size} bytes is outside [{MIN_PART_SIZE}, {MAX_PART_SIZE}] (64KiB..1GiB)")
    return size


def hasher(algorithm: str) -> Callable[[bytes | memoryview], str]:
    """hex digest function for a manifest's algorithm (both release the GIL on large buffers)."""
    if algorithm == "sha256":
        return lambda data: hashlib.sha256(data).hexdigest()
    if algorithm == "blake3":
        try:
            from blake3 import blake3
        except ImportError:
            raise ManifestError(
                "manifest field 'algorithm': 'blake3' needs the blake3 package (pip install blake3), "
                "or rebuild the manifest with `gem-load manifest DIR --algorithm sha256`"
            ) from None
        return lambda data: str(blake3(data).hexdigest())
    raise ManifestError(
        f"manifest field 'algorithm': unknown digest algorithm {algorithm!r} (supported: {', '.join(ALGORITHMS)}; "
        "rebuild the manifest with `gem-load manifest DIR --algorithm blake3`)"
    )


def new_hash(algorithm: str) -> Any:
    """An incremental hasher (update/hexdigest) for a whole file."""
    if algorithm == "sha256":
        return hashlib.sha256()
    hasher(algorithm)  # the clear error when it is unknown or missing
    from blake3 import blake3

    return blake3()


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
    """One file of the model; parts[i] hashes bytes [i*part_size, min((i+1)*part_size, size)),
    with the manifest's algorithm, as does `digest` the whole file."""

    path: str
    size: int
    digest: str
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
    algorithm: str = "sha256"

    def to_dict(self) -> dict[str, Any]:
        if self.algorithm == "sha256":  # version 1, byte for byte: old manifests keep their digest
            files = [{"path": f.path, "size": f.size, "sha256": f.digest, "parts": list(f.parts)} for f in self.files]
            return {"version": 1, "partSize": self.part_size, "files": files}
        return {
            "version": 2,
            "algorithm": self.algorithm,
            "partSize": self.part_size,
            "files": [{"path": f.path, "size": f.size, "digest": f.digest, "parts": list(f.parts)} for f in self.files],
        }

    @property
    def label(self) -> str:
        """The algorithm as people write it (SHA-256, BLAKE3), for messages."""
        return LABELS.get(self.algorithm, self.algorithm)

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
        except RecursionError:  # json's decoder recurses per level
            raise ManifestError("manifest is not valid JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise ManifestError("manifest must be a JSON object")
        version = data.get("version")
        if version == 1:
            algorithm = "sha256"
            if "algorithm" in data:
                raise ManifestError("manifest field 'algorithm' needs version 2 (version 1 is SHA-256 only)")
        elif version == 2:
            declared = data.get("algorithm")
            if not isinstance(declared, str):
                raise ManifestError(
                    f"manifest field 'algorithm' is {declared!r}: version 2 declares one of {', '.join(ALGORITHMS)}"
                )
            algorithm = declared
            hasher(algorithm)  # unknown: the error names the field and how to rebuild
        else:
            raise ManifestError(f"unsupported manifest version {version!r} (expected 1 or 2)")
        part_size = data.get("partSize")
        if not isinstance(part_size, int) or not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
            raise ManifestError(f"manifest partSize {part_size!r} is invalid")
        raw_files = data.get("files")
        if not isinstance(raw_files, list):
            raise ManifestError("manifest 'files' must be a list")
        files: list[FileEntry] = []
        seen: set[str] = set()
        key = "sha256" if version == 1 else "digest"
        for raw in raw_files:
            files.append(_parse_entry(raw, part_size, key, LABELS[algorithm]))
            if files[-1].path in seen:
                raise ManifestError(f"manifest lists {files[-1].path!r} twice")
            seen.add(files[-1].path)
        return cls(part_size=part_size, files=tuple(files), version=version, algorithm=algorithm)


def part_count(size: int, part_size: int) -> int:
    return (size + part_size - 1) // part_size


def _parse_entry(raw: Any, part_size: int, key: str, label: str) -> FileEntry:
    if not isinstance(raw, dict):
        raise ManifestError("manifest file entries must be objects")
    path, size, sha, parts = raw.get("path"), raw.get("size"), raw.get(key), raw.get("parts")
    if not isinstance(path, str):
        raise ManifestError("manifest file entry without a string 'path'")
    check_relpath(path)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(f"{path}: size {size!r} is invalid")
    if not isinstance(sha, str) or not _HEX64.match(sha):
        raise ManifestError(f"{path}: {key} {sha!r} is not 64 lowercase hex digits")
    if not isinstance(parts, list) or not all(isinstance(p, str) and _HEX64.match(p) for p in parts):
        raise ManifestError(f"{path}: 'parts' must be a list of {label} hex digests")
    if len(parts) != part_count(size, part_size):
        raise ManifestError(f"{path}: {len(parts)} part hashes for {size} bytes at partSize {part_size}")
    return FileEntry(path=path, size=size, digest=sha, parts=tuple(parts))


def _walk(root: Path) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(RESERVED_PREFIX))
        for name in sorted(filenames):
            rel = Path(dirpath, name).relative_to(root).as_posix()
            if rel == MANIFEST_NAME or name.startswith(RESERVED_PREFIX):
                continue
            yield rel


def hash_file(path: Path, rel: str, part_size: int, algorithm: str = "sha256") -> FileEntry:
    """Hash one file in a single sequential read: the whole-file digest and each part's."""
    whole = new_hash(algorithm)
    digest = hasher(algorithm)
    parts: list[str] = []
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(part_size):
            whole.update(chunk)
            parts.append(digest(chunk))
            size += len(chunk)
    return FileEntry(path=rel, size=size, digest=str(whole.hexdigest()), parts=tuple(parts))


def build_manifest(
    root: Path, part_size: int = DEFAULT_PART_SIZE, workers: int = 4, algorithm: str = DEFAULT_ALGORITHM
) -> Manifest:
    """Hash every file under root (both hashes release the GIL, so files hash in parallel)."""
    if not root.is_dir():
        raise UsageError(f"DIR: {root} is not a directory")
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm: {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    check_part_size(part_size)
    rels = sorted(_walk(root))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        entries = list(pool.map(lambda rel: hash_file(root / rel, rel, part_size, algorithm), rels))
    version = FORMAT_VERSION if algorithm == "sha256" else 2
    return Manifest(part_size=part_size, files=tuple(entries), version=version, algorithm=algorithm)
