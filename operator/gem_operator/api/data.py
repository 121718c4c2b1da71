"""``spec.training.data``: what a GEMTraining trains on, a built-in dataset or the team's own Parquet logs.

The block is handed to the trainer unchanged (rendered into the pod's ConfigMap and read with
``--data-spec``), so the same YAML trains on a laptop with ``python -m gem_workloads.training
--data-spec FILE``. The operator only checks its shape; whether the files have the columns is
checked by the trainer before its first step and comes back as ``Ready=False, reason=InvalidData``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from gem_operator.api.common import URI_MAX, ApiModel, SecretRef

SOURCE_NAME = r"^[a-z]([a-z0-9-]{0,40}[a-z0-9])?$"
DATA_URI = r"^(s3|gs|https?|file)://.+|^/.+"
LabelColumn = Annotated[str, Field(min_length=1, max_length=253, description="Label column of the task.")]


def _column(default: str, what: str) -> str:
    return Field(default=default, min_length=1, max_length=253, description=what)  # type: ignore[no-any-return]


class _Dataset(ApiModel):
    name: str = Field(
        pattern=SOURCE_NAME,
        max_length=42,
        description="Name of the source (lower-case, digits, '-'); unique among sources and sequences.",
    )
    uri: str = Field(
        pattern=DATA_URI,
        max_length=URI_MAX,
        description="Parquet dataset (a file or a directory of files): s3://, gs://, https://, file:// or a "
        "mounted absolute path.",
    )
    credentials_secret_ref: SecretRef | None = Field(
        default=None,
        description="Secret with object-store credentials (AWS_* or GOOGLE_* keys), given to the trainer through "
        "envFrom with the prefix GEM_DATA_<NAME>_ (so sources in different accounts keep their own keys).",
    )
    timestamp: str = _column(
        "timestamp", "Column of the event time (a timestamp, or a number: seconds since the epoch, see timestampUnit)."
    )
    timestamp_unit: Literal["auto", "s", "ms", "us", "ns"] = Field(
        default="auto",
        description="Unit of a numeric timestamp column. auto: seconds, except values from 1e11 on (past the year "
        "5138 as seconds), read as epoch milliseconds, from 1e14 microseconds, from 1e17 nanoseconds. Set it for "
        "times counted from another origin, e.g. ms since the log began.",
    )
    user: str = _column("user_id", "Column of the user id (integers).")


class DataSource(_Dataset):
    """One Parquet dataset of labelled examples (say, one surface's impression log)."""

    id: str | None = Field(
        default=None, min_length=1, max_length=253, description="Column naming each example (integers); optional."
    )
    sparse: list[str] = Field(
        default_factory=list, max_length=64, description="Candidate-side id columns (integers or lists of integers)."
    )
    dense: list[str] = Field(default_factory=list, max_length=256, description="Numeric feature columns.")
    labels: dict[str, LabelColumn] = Field(
        description="Task name -> label column (booleans or 0/1), e.g. {ctr: clicked, cvr: converted}; a null "
        "label leaves that task out for the row.",
    )
    domain: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="Column holding each row's surface or objective; unset: every row's domain is the source name.",
    )
    domains: list[str] = Field(
        default_factory=list, max_length=64, description="The values the domain column may take (with domain)."
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        le=1_000_000,
        description="Mixing weight: the source's sampling rate relative to the heaviest source (sources are "
        "interleaved by event time, never copied).",
    )

    @model_validator(mode="after")
    def _domains(self) -> Self:
        if not 1 <= len(self.labels) <= 32 or not all(self.labels.values()):
            raise ValueError(f"sources[{self.name}].labels: map 1 to 32 task names to label columns")
        if self.domain is not None and not self.domains:
            raise ValueError(f"sources[{self.name}].domains: list the values the domain column {self.domain!r} holds")
        if self.domain is None and self.domains:
            raise ValueError(f"sources[{self.name}].domain: name the column that holds domains {self.domains}")
        return self


class SequenceSource(_Dataset):
    """One Parquet dataset of user events, with its own event features (OneSeq)."""

    features: list[str] = Field(
        min_length=1, max_length=32, description="Event feature columns (integers), encoded by this source's encoder."
    )


class TrainingData(ApiModel):
    """A built-in dataset, or Parquet sources mixed by event time with sequence sources merged into histories."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.builtin) && has(self.sources))",
                    "message": "set training.data.builtin or training.data.sources, not both",
                }
            ]
        }
    )

    builtin: Literal["synthetic", "movielens"] | None = Field(
        default=None, description="A built-in dataset (synthetic when neither this nor sources is set)."
    )
    sources: list[DataSource] | None = Field(
        default=None, min_length=1, max_length=32, description="Example datasets, mixed by event time with weights."
    )
    sequences: list[SequenceSource] | None = Field(
        default=None, max_length=16, description="Event-sequence datasets: users' histories, joined at training time."
    )

    @property
    def uses_sources(self) -> bool:
        return bool(self.sources)

    @property
    def builtin_name(self) -> str:
        return self.builtin or "synthetic"

    def datasets(self) -> list[_Dataset]:
        return [*(self.sources or []), *(self.sequences or [])]

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.builtin is not None and self.sources:
            raise ValueError("set training.data.builtin or training.data.sources, not both")
        if self.sequences and not self.sources:
            raise ValueError("training.data.sequences needs training.data.sources (the examples they are joined to)")
        if self.sources and not any(s.sparse for s in self.sources):
            raise ValueError("training.data.sources[*].sparse: list the candidate's id columns (an ad id, say)")
        names = [d.name for d in self.datasets()]
        if len(set(names)) != len(names):
            raise ValueError(f"training.data: source and sequence names must be unique, got {names}")
        return self

    def trainer_spec(self) -> dict[str, object]:
        """The block the trainer reads with ``--data-spec`` (credentials stay out: they come through env)."""
        wire = self.to_wire()
        for key in ("sources", "sequences"):
            for item in wire.get(key, []):
                item.pop("credentialsSecretRef", None)
                if (
                    item.get("timestampUnit") == "auto"
                ):  # the trainer's default: the ConfigMap of a spec without it stays as it was
                    del item["timestampUnit"]
        wire.pop("builtin", None)
        return wire


__all__ = ["DataSource", "SequenceSource", "TrainingData"]
