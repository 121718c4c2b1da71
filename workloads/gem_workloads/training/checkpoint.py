"""Checkpoints with ``torch.distributed.checkpoint``, on a shared path or in an object store.

Layout, either way: ``ROOT/step-NNNNNN/`` holds DCP's files (``.metadata`` plus the ``__R_K.distcp``
shards of every rank). A checkpoint counts only once its marker ``.complete`` exists, and rank 0
writes that last, after every rank has written (for an object store: uploaded) its files, so a
run killed mid-save resumes from the previous checkpoint. The newest complete checkpoint is the
default resume point; complete ones beyond ``keep`` are removed.

Object stores (``s3://``, ``gs://``) cannot be written in place by DCP, so each rank saves into
its own node-local staging directory (so it knows exactly which files it wrote), hashes them and
uploads them with obstore; the SHA-256 entries are gathered to rank 0, which writes
``manifest.json`` in the model loader's format (so ``gem-load pull`` and serving can fetch and
verify a checkpoint like any model) and only then the marker. Resuming uses the copy an init
container already pulled into ``GEM_RESTORE_DIR`` when it holds the checkpoint asked for, and
otherwise pulls it with the loader library (multi-stream, verified) into local staging.
Credentials and a custom endpoint come from the environment as obstore reads them (``AWS_*``,
``AWS_ENDPOINT_URL``, ``GOOGLE_*``), never from arguments.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ..loader.destination import DEST_MANIFEST_NAME, is_complete
from ..loader.manifest import DEFAULT_PART_SIZE, MANIFEST_NAME, FileEntry, Manifest, check_relpath, hash_file

log = logging.getLogger("gem_workloads.training")

MARKER = ".complete"
"""Written last into a checkpoint (directory or object prefix): JSON step, time, manifestDigest."""
RESTORE_DIR_ENV = "GEM_RESTORE_DIR"
"""A local directory where an init container already pulled the checkpoint named by GEM_RESUME_FROM."""
STAGING_ENV = "GEM_CHECKPOINT_STAGING"
"""Node-local scratch for object-store checkpoints (default: the system temp dir)."""
OBJECT_STORE_SCHEMES = ("s3", "gs")
UPLOAD_CHUNK = 32 * 1024 * 1024
"""Multipart chunk of uploads: few requests per GB while keeping memory per stream bounded."""
_NAME = re.compile(r"step-(\d+)")

T = TypeVar("T")


class CheckpointError(RuntimeError):
    """Saving or restoring a checkpoint failed; the message names the checkpoint and every failing rank."""


def is_object_store(uri: str) -> bool:
    return urlparse(uri).scheme.lower() in OBJECT_STORE_SCHEMES


def checkpoint_dir_from_uri(uri: str) -> str:
    """The checkpoint root the trainer writes: an ``s3://``/``gs://`` URI as it is, a local path for ``file://``.

    http(s) is rejected: nothing can be written there (it is a valid *model* origin, not a checkpoint one).
    """
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in OBJECT_STORE_SCHEMES:
        if not parsed.netloc:
            raise ValueError(f"GEM_CHECKPOINT_URI={uri!r} has no bucket")
        return uri
    if scheme in ("", "file"):
        return parsed.path if scheme else uri
    raise ValueError(
        f"GEM_CHECKPOINT_URI={uri!r}: checkpoints go to s3://, gs://, file:// or a path (a mounted volume), "
        f"not {scheme}://"
    )


# -- collectives that also work without a process group (one process, tests, tools) -------------


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def _all_gather(obj: T) -> list[T]:
    if not _distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _from_rank0(obj: T) -> T:
    if not _distributed():
        return obj
    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[no-any-return]


def _check_all(error: str | None, what: str) -> None:
    """Every rank learns every rank's failure, so all raise together instead of hanging in the next collective."""
    errors = [e for e in _all_gather(error) if e]
    if errors:
        raise CheckpointError(f"{what}: {'; '.join(errors)}")


def _describe(rank: int, exc: BaseException) -> str:
    return f"rank {rank}: {type(exc).__name__}: {exc}"


def pulled_checkpoint(path: Path) -> bool:
    """True when ``path`` is a finished, verified ``gem-load pull`` (marker and every file size match)."""
    try:
        manifest = Manifest.from_json((path / DEST_MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return False
    return is_complete(path, manifest)


class Checkpoints(ABC):
    """What the trainer needs from a checkpoint location, whichever kind it is."""

    def __init__(self, keep: int, restore_dir: Path | None) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep, self.restore_dir = keep, restore_dir

    @staticmethod
    def name(step: int) -> str:
        return f"step-{step:06d}"

    @property
    @abstractmethod
    def location(self) -> str:
        """The root as configured (for messages and events)."""

    @abstractmethod
    def complete_names(self) -> list[tuple[int, str]]:
        """(step, name) of every complete checkpoint, oldest first."""

    def latest_name(self) -> str | None:
        done = self.complete_names()
        return done[-1][1] if done else None

    @abstractmethod
    def save(self, step: int, state: dict[str, Any], rank: int) -> str:
        """Collective: every rank saves its part; returns where the checkpoint is once it is complete."""

    @abstractmethod
    def resume_point(self, name: str | None, rank: int, local_rank: int) -> Path | None:
        """Collective: a local directory holding checkpoint ``name`` (default: the newest); None: fresh start."""

    def restored(self, name: str) -> Path | None:
        """``GEM_RESTORE_DIR`` when it holds a complete pull of checkpoint ``name`` (its directory is named so)."""
        d = self.restore_dir
        if d is None:
            return None
        if d.name != name:
            log.warning("%s=%s does not hold %s; not using it", RESTORE_DIR_ENV, d, name)
            return None
        if not pulled_checkpoint(d):
            log.warning("%s=%s is not a complete gem-load pull; fetching %s again", RESTORE_DIR_ENV, d, name)
            return None
        return d

    def load(self, path: Path, state: dict[str, Any]) -> None:
        """DCP load (resharding as needed) from a complete checkpoint directory: written here or pulled."""
        if not ((path / MARKER).exists() or pulled_checkpoint(path)):
            raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER}, not a finished gem-load pull)")
        dcp_load(state, checkpoint_id=str(path))


class CheckpointManager(Checkpoints):
    """Checkpoints on a filesystem every rank sees (a PVC, NFS, a CSI-mounted bucket)."""

    def __init__(self, root: Path, keep: int = 3, *, restore_dir: Path | None = None) -> None:
        super().__init__(keep, restore_dir)
        self.root = root

    @property
    def location(self) -> str:
        return str(self.root)

    def complete(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = _NAME.fullmatch(p.name)
            if m and (p / MARKER).exists():
                found.append((int(m.group(1)), p))
        return sorted(found)

    def complete_names(self) -> list[tuple[int, str]]:
        return [(step, p.name) for step, p in self.complete()]

    def save(self, step: int, state: dict[str, Any], rank: int) -> str:
        path = self.root / self.name(step)
        if rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            stale = path / MARKER
            if stale.exists():
                stale.unlink()
        _barrier()
        dcp_save(state, checkpoint_id=str(path))
        _barrier()
        if rank == 0:
            (path / MARKER).write_text(json.dumps({"step": step, "time": time.time()}))
            for _, old in self.complete()[: -self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        _barrier()
        return str(path)

    def resume_point(self, name: str | None, rank: int, local_rank: int) -> Path | None:
        """Every rank reads the same shared directory, so no collective is needed to agree."""
        name = name or self.latest_name()
        if name is None:
            return None
        return self.restored(name) or self.root / name


class ObjectStoreCheckpoints(Checkpoints):
    """Checkpoints under an ``s3://`` or ``gs://`` prefix: staged locally, uploaded, pulled back with the loader."""

    def __init__(
        self,
        uri: str,
        keep: int = 3,
        *,
        staging: Path | None = None,
        restore_dir: Path | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        streams: int = 32,
        upload_workers: int = 4,
    ) -> None:
        from ..loader.sources import object_store

        super().__init__(keep, restore_dir)
        self.uri = checkpoint_dir_from_uri(uri).rstrip("/")
        if not is_object_store(self.uri):
            raise ValueError(f"{uri!r} is not an s3:// or gs:// URI")
        self.store = object_store(self.uri, own_retries=True)
        # Keyed by the URI so two jobs sharing a scratch volume never mix their files.
        self.staging = (staging or Path(tempfile.gettempdir())) / (
            "gem-checkpoints-" + hashlib.sha256(self.uri.encode()).hexdigest()[:12]
        )
        self.part_size, self.streams, self.upload_workers = part_size, streams, upload_workers
        self._known: str | None = None  # newest checkpoint this process saved or resumed from

    @property
    def location(self) -> str:
        return self.uri

    # -- listing -----------------------------------------------------------------------------
    def _steps(self) -> list[tuple[int, str]]:
        import obstore

        listing = obstore.list_with_delimiter(self.store, None)
        found = []
        for prefix in listing["common_prefixes"]:
            name = prefix.rstrip("/").rsplit("/", 1)[-1]
            if m := _NAME.fullmatch(name):
                found.append((int(m.group(1)), name))
        return sorted(found)

    def marker(self, name: str) -> dict[str, Any] | None:
        """The marker's JSON, or None while the checkpoint is incomplete (or absent)."""
        import obstore

        try:
            raw = bytes(obstore.get(self.store, f"{name}/{MARKER}").bytes())
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # an unreadable marker: the checkpoint is not complete
            return None
        return data if isinstance(data, dict) else None

    def complete_names(self) -> list[tuple[int, str]]:
        return [(step, name) for step, name in self._steps() if self.marker(name) is not None]

    def newest(self) -> str | None:
        """Newest complete checkpoint; checks markers newest first, so usually one request after the listing."""
        for _, name in reversed(self._steps()):
            if self.marker(name) is not None:
                return name
        return None

    def latest_name(self) -> str | None:
        """:meth:`newest`, for the report on exit (also after a crash): if the store cannot be read then,
        the newest checkpoint this process itself completed or resumed from is the answer."""
        try:
            return self.newest()
        except Exception as exc:  # any store failure: fall back to what we know
            log.warning("cannot list %s (%s); reporting %s", self.uri, exc, self._known)
            return self._known

    # -- save --------------------------------------------------------------------------------
    def _delete_prefix(self, name: str) -> None:
        """Remove a checkpoint: marker first, so no reader ever takes the remains as complete."""
        import obstore

        keys = [m["path"] for batch in obstore.list(self.store, prefix=name, chunk_size=1000) for m in batch]
        marker = f"{name}/{MARKER}"
        if marker in keys:
            obstore.delete(self.store, marker)
        rest = [k for k in keys if k != marker]
        if rest:
            obstore.delete(self.store, rest)

    def _upload(self, local: Path, name: str) -> list[FileEntry]:
        """Hash and upload every file this rank wrote (files in parallel, each a multipart upload)."""
        import obstore

        files = sorted(p for p in local.rglob("*") if p.is_file())

        def one(path: Path) -> FileEntry:
            rel = check_relpath(path.relative_to(local).as_posix())
            entry = hash_file(path, rel, self.part_size)
            obstore.put(self.store, f"{name}/{rel}", path, chunk_size=UPLOAD_CHUNK, max_concurrency=8)
            return entry

        with ThreadPoolExecutor(max_workers=max(1, min(self.upload_workers, len(files)))) as pool:
            return list(pool.map(one, files))

    def _finish(self, step: int, name: str, entries: list[FileEntry]) -> None:
        """Rank 0: manifest, then the marker (last), then retention."""
        import obstore

        paths = [e.path for e in entries]
        if len(set(paths)) != len(paths):
            raise CheckpointError(f"{self.uri}/{name}: two ranks wrote the same file name")
        manifest = Manifest(part_size=self.part_size, files=tuple(sorted(entries, key=lambda e: e.path)))
        obstore.put(self.store, f"{name}/{MANIFEST_NAME}", manifest.to_json().encode())
        marker = {"step": step, "time": time.time(), "manifestDigest": manifest.digest}
        obstore.put(self.store, f"{name}/{MARKER}", json.dumps(marker).encode())
        self._prune()

    def _prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints; older ones and older half-written ones go."""
        steps = self._steps()
        complete = [(s, n) for s, n in steps if self.marker(n) is not None]
        if not complete:
            return
        kept = {n for _, n in complete[-self.keep :]}
        newest = complete[-1][0]
        for step, name in steps:
            if name not in kept and step < newest:
                self._delete_prefix(name)

    def save(self, step: int, state: dict[str, Any], rank: int) -> str:
        name = self.name(step)
        error: str | None = None
        if rank == 0:
            try:  # a step saved again after a restart: its old marker and files go before anything new lands
                self._delete_prefix(name)
            except Exception as exc:  # reported to every rank below
                error = _describe(rank, exc)
        _check_all(error, f"clearing {self.uri}/{name}")
        local = self.staging / "save" / name / f"rank-{rank}"
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True)
        # Each rank its own directory: DCP names files by rank and records them relative to the
        # checkpoint, so the union of the uploads is exactly what one shared directory would hold.
        dcp_save(state, checkpoint_id=str(local))
        entries: list[FileEntry] = []
        try:
            entries = self._upload(local, name)
        except Exception as exc:  # reported to every rank below
            error = _describe(rank, exc)
        finally:
            shutil.rmtree(local, ignore_errors=True)
        gathered = _all_gather((entries, error))
        errors = [e for _, e in gathered if e]
        if errors:
            raise CheckpointError(f"uploading {self.uri}/{name}: {'; '.join(errors)}")
        if rank == 0:
            try:
                self._finish(step, name, [e for part, _ in gathered for e in part])
            except Exception as exc:  # reported to every rank below
                error = _describe(rank, exc)
        _check_all(error, f"completing {self.uri}/{name}")
        self._known = name
        return f"{self.uri}/{name}"

    # -- resume ------------------------------------------------------------------------------
    def pull(self, name: str) -> Path:
        """Fetch complete checkpoint ``name`` into local staging with the loader (verified), return its directory."""
        from ..loader.pull import PullConfig, pull

        marker = self.marker(name)
        if marker is None:
            raise CheckpointError(f"{self.uri}/{name} is not a complete checkpoint (no {MARKER})")
        dest = self.staging / "restore" / name
        if dest.parent.is_dir():
            for old in dest.parent.iterdir():
                if old.name != name:
                    shutil.rmtree(old, ignore_errors=True)
        summary = asyncio.run(pull(f"{self.uri}/{name}", dest, cfg=PullConfig(streams=self.streams)))
        if marker.get("manifestDigest") not in (None, summary["manifestDigest"]):
            raise CheckpointError(f"{self.uri}/{name} changed while it was pulled (manifest digest differs)")
        return dest

    def resume_point(self, name: str | None, rank: int, local_rank: int) -> Path | None:
        """Rank 0 decides which checkpoint (the store's newest when none is named); local rank 0 of each
        node pulls it unless this pod's init container already did, and every rank waits for that."""
        if not name:
            # A store that cannot be listed must fail the start, never look like "no checkpoint yet".
            found: str | None = None
            error: str | None = None
            if rank == 0:
                try:
                    found = self.newest()
                except Exception as exc:  # reported to every rank below
                    error = _describe(rank, exc)
            found, error = _from_rank0((found, error))
            if error:
                raise CheckpointError(f"listing {self.uri}: {error}")
            if found is None:
                return None
            name = found
        restored = self.restored(name)
        dest = self.staging / "restore" / name
        error = None
        if restored is None and local_rank == 0:
            try:
                dest = self.pull(name)
            except Exception as exc:  # reported to every rank below
                error = _describe(rank, exc)
        _check_all(error, f"restoring {self.uri}/{name}")
        self._known = name
        return restored or dest


def open_checkpoints(uri: str, keep: int = 3, environ: Mapping[str, str] | None = None) -> Checkpoints:
    """The checkpoint location for ``uri`` (path, ``file://``, ``s3://``, ``gs://``), with the optional
    ``GEM_RESTORE_DIR`` and ``GEM_CHECKPOINT_STAGING`` of the env contract taken from ``environ``."""
    env = os.environ if environ is None else environ
    restore = env.get(RESTORE_DIR_ENV, "").strip()
    restore_dir = Path(restore) if restore else None
    root = checkpoint_dir_from_uri(uri)
    if is_object_store(root):
        staging = env.get(STAGING_ENV, "").strip()
        return ObjectStoreCheckpoints(root, keep, staging=Path(staging) if staging else None, restore_dir=restore_dir)
    return CheckpointManager(Path(root), keep, restore_dir=restore_dir)
