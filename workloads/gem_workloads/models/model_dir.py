"""A model directory: what the loader leaves in ``GEM_MODEL_DIR`` and what serving and precompute load.

Layout::

    DIR/gem-model.json    {"kind": "kunlun", "version": "v42", "config": {...}, "schema": {...},
                           "weights": "weights.pt",      # or "checkpoint": "step-000400"
                           "role": "foundation"}         # or "vertical" + "foundationVersion": "v41"
    DIR/weights.pt        torch.save(model.state_dict()) (unsharded)
    DIR/step-000400/      or a training checkpoint (torch.distributed.checkpoint), read unsharded

``version`` defaults to the loader's manifest digest (``.gem-load-complete``) when absent, so
embeddings written by one model are never read as another's.

``role`` says which side of knowledge transfer the model is on (default by kind: ``kunlun`` is a
foundation model, the others vertical); a vertical model records ``foundationVersion``, the
version of the foundation model whose soft labels, LoopFM memory and Solaris embeddings it was
trained on, which is the embedding-store version it must read at serving time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from .checkpoint import load_trained
from .features import CategoricalFeature, FeatureSchema, SequenceGroup, Task
from .presets import ModelConfig

MODEL_FILE = "gem-model.json"
WEIGHTS_FILE = "weights.pt"
LOAD_COMPLETE_FILE = ".gem-load-complete"
ROLES = ("foundation", "vertical")


def default_role(kind: str) -> str:
    return "foundation" if kind == "kunlun" else "vertical"


class ModelDirError(ValueError):
    """A model directory is unusable; the message names the file and what is wrong."""


def schema_to_dict(schema: FeatureSchema) -> dict[str, Any]:
    def feats(fs: tuple[CategoricalFeature, ...]) -> list[dict[str, Any]]:
        return [{"name": f.name, "cardinality": f.cardinality, "multi_hot": f.multi_hot} for f in fs]

    return {
        "user_features": feats(schema.user_features),
        "item_features": feats(schema.item_features),
        "sequence_features": feats(schema.sequence_features),
        "num_user_dense": schema.num_user_dense,
        "domains": list(schema.domains),
        "tasks": [{"name": t.name, "domain": t.domain} for t in schema.tasks],
        "sequence_groups": [{"name": g.name, "features": list(g.features)} for g in schema.sequence_groups],
    }


def schema_from_dict(raw: dict[str, Any]) -> FeatureSchema:
    def feats(key: str) -> tuple[CategoricalFeature, ...]:
        return tuple(
            CategoricalFeature(str(f["name"]), int(f["cardinality"]), bool(f.get("multi_hot", False))) for f in raw[key]
        )

    return FeatureSchema(
        user_features=feats("user_features"),
        item_features=feats("item_features"),
        sequence_features=feats("sequence_features"),
        num_user_dense=int(raw["num_user_dense"]),
        domains=tuple(str(d) for d in raw["domains"]),
        tasks=tuple(Task(str(t["name"]), None if t.get("domain") is None else int(t["domain"])) for t in raw["tasks"]),
        sequence_groups=tuple(
            SequenceGroup(str(g["name"]), tuple(str(f) for f in g["features"])) for g in raw.get("sequence_groups", [])
        ),
    )


def config_from_dict(raw: dict[str, Any]) -> ModelConfig:
    known = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ModelDirError(f"config: unknown keys {unknown}")
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    return ModelConfig(**values)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    kind: str
    config: ModelConfig
    schema: FeatureSchema
    version: str
    role: str = ""
    foundation_version: str | None = None
    # The serving precision plan applied to ``model`` (its summary), once one is (scoring.precision_plan).
    precision: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.role = self.role or default_role(self.kind)


def save_model_dir(
    directory: str | Path,
    model: torch.nn.Module,
    kind: str,
    config: ModelConfig,
    schema: FeatureSchema,
    version: str,
    role: str | None = None,
    foundation_version: str | None = None,
) -> Path:
    """Write ``gem-model.json`` + ``weights.pt`` (the format :func:`load_model_dir` reads)."""
    role = role or default_role(kind)
    if role not in ROLES:
        raise ValueError(f"role: {role!r} is not one of {list(ROLES)}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), d / WEIGHTS_FILE)
    meta: dict[str, Any] = {
        "kind": kind,
        "version": version,
        "config": asdict(config),
        "schema": schema_to_dict(schema),
        "weights": WEIGHTS_FILE,
        "role": role,
    }
    if foundation_version is not None:
        meta["foundationVersion"] = foundation_version
    (d / MODEL_FILE).write_text(json.dumps(meta, indent=1))
    return d


def model_dir_version(directory: Path, meta: dict[str, Any]) -> str:
    if meta.get("version"):
        return str(meta["version"])
    marker = directory / LOAD_COMPLETE_FILE
    if marker.exists():
        digest = str(json.loads(marker.read_text()).get("manifestDigest", ""))
        if digest:
            return digest.removeprefix("sha256:")[:16]
    return "unversioned"


def load_model_dir(directory: str | Path, device: torch.device | None = None) -> LoadedModel:
    """Build the model described by ``DIR/gem-model.json`` and fill its weights (eval mode)."""
    from . import build_model  # the package's factory (imported late: this module is part of the package)

    d = Path(directory)
    path = d / MODEL_FILE
    try:
        meta = json.loads(path.read_text())
    except OSError as exc:
        raise ModelDirError(f"{path}: cannot read the model description: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ModelDirError(f"{path}: line {exc.lineno}: not JSON: {exc.msg}") from exc
    except RecursionError:  # json's decoder recurses per level
        raise ModelDirError(f"{path}: not JSON: nested too deeply") from None
    try:
        kind = str(meta["kind"])
        config = config_from_dict(meta["config"])
        schema = schema_from_dict(meta["schema"])
        role = str(meta.get("role") or default_role(kind))
        foundation_version = None if meta.get("foundationVersion") is None else str(meta["foundationVersion"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelDirError(f"{path}: invalid model description: {exc!r}") from exc
    if role not in ROLES:
        raise ModelDirError(f"{path}: role {role!r} is not one of {list(ROLES)}")
    model = build_model(kind, config, schema)
    if meta.get("checkpoint"):
        load_trained(model, d / str(meta["checkpoint"]))
    else:
        weights = d / str(meta.get("weights", WEIGHTS_FILE))
        if not weights.exists():
            raise ModelDirError(f"{path}: weights file {weights} is missing")
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    if device is not None:
        model = model.to(device)
    model.eval()
    return LoadedModel(model, kind, config, schema, model_dir_version(d, meta), role, foundation_version)
