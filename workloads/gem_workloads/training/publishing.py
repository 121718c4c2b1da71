"""The trainer's side of model exports: when to export, and what the last JSON line says about it.

A mixin of :class:`.trainer.Trainer` (it needs ``args``, ``step``, ``rank``, ``checkpoints``,
``exporter``, ``save`` and ``_emit``): an export reads the checkpoint of its step, so a step that
is exported but not checkpointed is checkpointed first (a collective every rank takes, decided by
the arguments alone); then rank 0 exports while the others go on.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ..models import FeatureSchema, ModelConfig
from .checkpoint import Checkpoints
from .env import TrainingEnv
from .export import Exporter, local_checkpoint
from .holdout import build_holdout, holdout_spec


class ExportArgs(Protocol):
    """The fields of the trainer's arguments an export reads (``trainer.TrainArgs`` has them)."""

    @property
    def export_uri(self) -> str | None: ...
    @property
    def data(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def holdout_examples(self) -> int: ...
    @property
    def data_spec(self) -> str | None: ...
    @property
    def holdout_sources(self) -> tuple[tuple[str, str], ...]: ...


log = logging.getLogger("gem_workloads.training")


def make_exporter(
    args: ExportArgs,
    env: TrainingEnv,
    rank: int,
    config: ModelConfig,
    schema: FeatureSchema,
    checkpoints: Checkpoints | None,
) -> Exporter | None:
    """Rank 0's exporter when ``--export`` is given (it needs a checkpoint location to read from)."""
    if not args.export_uri:
        return None
    if checkpoints is None:
        raise ValueError("--export needs --checkpoint-dir (or GEM_CHECKPOINT_URI): versions are read from checkpoints")
    if rank != 0:
        return None
    spec = None
    if args.data_spec:
        from ..data.spec import load_data_spec

        spec = holdout_spec(load_data_spec(args.data_spec), dict(args.holdout_sources))
    holdout = build_holdout(args.data, config, args.seed, args.holdout_examples, spec)
    job = str(env.config.get("name", "gem-train"))
    return Exporter(args.export_uri, kind=args.model, config=config, schema=schema, holdout=holdout, job=job)


class Publishing:
    args: ExportArgs
    step: int
    rank: int
    checkpoints: Checkpoints | None
    exporter: Exporter | None

    def save(self) -> None: ...  # provided by the trainer

    def _emit(self, record: dict[str, Any]) -> None: ...  # provided by the trainer

    def export_version(self, saved: bool) -> None:
        """Export this step's model (checkpointing it first unless ``saved``); rank 0 emits an event."""
        if not saved:
            self.save()
        if self.exporter is None or self.checkpoints is None:
            return
        name = self.checkpoints.name(self.step)
        done = self.exporter.export(self.step, local_checkpoint(self.checkpoints, name))
        self._emit({"event": "export", **done.to_json()})

    def final_export(self) -> dict[str, Any]:
        """The end of a run (its last step is checkpointed by then): export it; what the last JSON line carries."""
        if not self.args.export_uri:
            return {}
        self.export_version(saved=True)
        if self.exporter is None or not self.exporter.exported:
            return {}
        last = self.exporter.exported[-1]
        return {"export": last.uri, "version": last.version, "eval": last.eval}
