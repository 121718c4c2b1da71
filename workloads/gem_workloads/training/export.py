"""Versioned model exports: what a GEMTraining hands to serving (``--export URI``, ``spec.export.uri``).

Layout: ``URI/v<N>/`` holds a model directory the ranking server and precompute load as it is
(``gem-model.json``, ``weights.pt``) plus the loader's ``manifest.json``, written last: a version
without its manifest is never pulled, so a run killed mid-export leaves nothing a pod would load.
``gem-model.json`` also records the version, the training step and the eval metrics on the
time-ordered holdout (:mod:`.holdout`). Versions count up from 1; the next number comes from the
store's listing (half-written versions included), so a resumed run never reuses one.

Why from a checkpoint: the trained parameters are sharded (TorchRec tables, FSDP2 DTensors) over
every rank; the checkpoint just written holds them all under the plain model's names, and DCP
reshards on load, so rank 0 reads the whole model back into ordinary tensors without another
collective, scores the holdout with it, and uploads it while the other ranks train on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from torch import nn

from ..loader.manifest import DEFAULT_PART_SIZE, MANIFEST_NAME, build_manifest
from ..models import FeatureSchema, ModelConfig, build_model
from ..models.checkpoint import load_trained
from ..models.model_dir import MODEL_FILE, save_model_dir
from .checkpoint import Checkpoints, ObjectStoreCheckpoints, is_object_store
from .holdout import Holdout, evaluate

_VERSION = re.compile(r"v(\d+)")
UPLOAD_CHUNK = 32 * 1024 * 1024


@dataclass(frozen=True)
class ExportedVersion:
    """One exported version, as the trainer reports it (termination message, last JSON line)."""

    version: int
    uri: str
    step: int
    eval: dict[str, dict[str, float | int | None]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "uri": self.uri, "step": self.step, "eval": self.eval}


class ExportStore:
    """Where versions go: a path (``file://`` or a mounted volume) or an ``s3://`` / ``gs://`` prefix."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        parsed = urlparse(self.uri)
        self.remote = is_object_store(self.uri)
        if not self.remote and parsed.scheme not in ("", "file"):
            raise ValueError(f"--export {uri!r}: models go to s3://, gs://, file:// or a path, not {parsed.scheme}://")
        self.root = None if self.remote else Path(parsed.path if parsed.scheme else self.uri)
        self._store: Any = None
        if self.remote:
            from ..loader.sources import object_store

            self._store = object_store(self.uri, own_retries=True)

    def versions(self) -> list[int]:
        """Every version number present (complete or not), ascending."""
        if self.root is not None:
            names = [p.name for p in self.root.iterdir()] if self.root.is_dir() else []
        else:
            import obstore

            listing = obstore.list_with_delimiter(self._store, None)
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"]]
        return sorted(int(m.group(1)) for n in names if (m := _VERSION.fullmatch(n)))

    def version_uri(self, version: int) -> str:
        return f"{self.uri}/v{version}"

    def publish(self, local: Path, version: int) -> str:
        """Copy the directory ``local`` to version ``version``, its manifest last; returns its URI."""
        files = sorted(p for p in local.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
        if self.root is not None:
            partial = self.root / f".v{version}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(local, partial)
            final = self.root / f"v{version}"
            os.replace(partial, final)  # one rename: the version appears whole
            return self.version_uri(version)
        import obstore

        for path in [*files, local / MANIFEST_NAME]:
            key = f"v{version}/{path.relative_to(local).as_posix()}"
            obstore.put(self._store, key, path, chunk_size=UPLOAD_CHUNK, max_concurrency=8)
        return self.version_uri(version)


def local_checkpoint(checkpoints: Checkpoints, name: str) -> Path:
    """A local directory holding checkpoint ``name`` (an object-store one is pulled, verified)."""
    if isinstance(checkpoints, ObjectStoreCheckpoints):
        return checkpoints.pull(name)
    return Path(checkpoints.location) / name


class Exporter:
    """Rank 0's exporter: checkpoint -> unsharded model -> holdout eval -> ``URI/v<N>/``."""

    def __init__(
        self,
        uri: str,
        *,
        kind: str,
        config: ModelConfig,
        schema: FeatureSchema,
        holdout: Holdout,
        job: str,
        part_size: int = DEFAULT_PART_SIZE,
    ) -> None:
        self.store = ExportStore(uri)
        self.kind, self.config, self.schema, self.holdout = kind, config, schema, holdout
        self.job, self.part_size = job, part_size
        self.exported: list[ExportedVersion] = []

    def model_from(self, checkpoint: Path) -> nn.Module:
        model = build_model(self.kind, self.config, self.schema)
        with warnings.catch_warnings():  # DCP notes that it loads in one process: that is the point here
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            load_trained(model, checkpoint)
        model.eval()
        return model

    def export(self, step: int, checkpoint: Path) -> ExportedVersion:
        """Export the model of ``checkpoint`` (taken at ``step``) as the next version."""
        model = self.model_from(checkpoint)
        metrics = evaluate(model, self.holdout, self.schema)
        version = max(self.store.versions(), default=0) + 1
        with tempfile.TemporaryDirectory(prefix="gem-export-") as tmp:
            out = Path(tmp) / f"v{version}"
            save_model_dir(out, model, self.kind, self.config, self.schema, f"{self.job}-v{version}")
            meta = json.loads((out / MODEL_FILE).read_text())
            meta.update(
                training=self.job,
                modelVersion=version,
                step=step,
                exportedAt=time.time(),
                eval=metrics,
                holdout=self.holdout.description,
                holdoutRecipe=self.holdout.recipe,
            )
            (out / MODEL_FILE).write_text(json.dumps(meta, indent=1))
            (out / MANIFEST_NAME).write_text(build_manifest(out, self.part_size).to_json())
            uri = self.store.publish(out, version)
        done = ExportedVersion(version, uri, step, metrics)
        self.exported.append(done)
        return done


TERMINATION_LIMIT = 4096
"""Kubernetes keeps at most 4 KiB of a termination message."""


def termination_message(checkpoint: str | None, exported: list[ExportedVersion]) -> str:
    """``{"checkpoint": ..., "models": [...]}``: the newest versions that fit in 4 KiB, oldest first."""
    base: dict[str, Any] = {} if checkpoint is None else {"checkpoint": checkpoint}
    kept: list[dict[str, Any]] = []
    for version in reversed(exported):
        trial = json.dumps({**base, "models": [version.to_json(), *kept]}, separators=(",", ":"))
        if len(trial.encode()) > TERMINATION_LIMIT:
            break
        kept.insert(0, version.to_json())
    return json.dumps({**base, "models": kept} if kept else base, separators=(",", ":"))
