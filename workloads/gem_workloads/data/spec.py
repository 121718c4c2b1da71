"""The data spec: Parquet example sources and event-sequence sources, as ``spec.training.data`` writes them.

The same YAML/JSON block is accepted by ``python -m gem_workloads.training --data-spec FILE`` and
rendered by the operator into the pod's ConfigMap, so a block that trains on a laptop trains
unchanged under a GEMTraining. This module only parses and checks the block's shape (no I/O);
whether the columns exist and have usable types is checked against the files by
:mod:`.parquet_stream` before the first step.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gem_common.yamldocs import load_documents

_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,40}[a-z0-9])?$")
_URI = re.compile(r"^((s3|gs|https?|file)://.+|/.+)$")


class DataSpecError(ValueError):
    """The block itself is malformed (a field missing, of the wrong kind, or inconsistent)."""


@dataclass(frozen=True)
class SourceSpec:
    """One Parquet dataset of labelled examples (an impression log of one surface, say)."""

    name: str
    uri: str
    timestamp: str = "timestamp"
    user: str = "user_id"
    timestamp_unit: str = "auto"  # of a numeric time column: auto, s, ms, us or ns (see parquet_stream)
    id: str | None = None  # a column naming each example (logged, counted by the resume tests)
    sparse: tuple[str, ...] = ()  # candidate-side id columns (integer or list of integers)
    dense: tuple[str, ...] = ()  # numeric columns
    labels: dict[str, str] = field(default_factory=dict)  # task -> column
    domain: str | None = None  # column holding each row's surface/objective
    domains: tuple[str, ...] = ()  # the values ``domain`` may take; without ``domain``: (name,)
    weight: float = 1.0

    @property
    def domain_values(self) -> tuple[str, ...]:
        return self.domains if self.domain else (self.name,)

    def columns(self) -> list[str]:
        """Every column read, each once, in a stable order."""
        cols = [self.timestamp, self.user, *([self.id] if self.id else []), *self.sparse, *self.dense]
        cols += [*self.labels.values(), *([self.domain] if self.domain else [])]
        return list(dict.fromkeys(cols))


@dataclass(frozen=True)
class SequenceSpec:
    """One Parquet dataset of user events (purchases, posts...) with its own event features."""

    name: str
    uri: str
    timestamp: str = "timestamp"
    user: str = "user_id"
    timestamp_unit: str = "auto"
    features: tuple[str, ...] = ()

    def columns(self) -> list[str]:
        return list(dict.fromkeys([self.timestamp, self.user, *self.features]))


@dataclass(frozen=True)
class DataSpec:
    """``sources`` mixed by event time with their weights; ``sequences`` merged OneSeq-style into histories."""

    sources: tuple[SourceSpec, ...]
    sequences: tuple[SequenceSpec, ...] = ()

    @property
    def domains(self) -> tuple[str, ...]:
        """The model's domains: every source's values, first seen first."""
        return tuple(dict.fromkeys(d for s in self.sources for d in s.domain_values))

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for s in self.sources for t in s.labels))

    @property
    def sparse(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for s in self.sources for c in s.sparse))

    @property
    def dense(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for s in self.sources for c in s.dense))


def _str(raw: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise DataSpecError(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value


def _names(raw: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise DataSpecError(f"{where}.{key}: expected a list of column names, got {value!r}")
    if len(set(value)) != len(value):
        raise DataSpecError(f"{where}.{key}: names repeat in {value}")
    return tuple(value)


TIME_UNITS = ("auto", "s", "ms", "us", "ns")


def _time_unit(raw: dict[str, Any], where: str) -> str:
    value = raw.get("timestampUnit", "auto")
    if value not in TIME_UNITS:
        raise DataSpecError(
            f"{where}.timestampUnit: expected one of {', '.join(TIME_UNITS)} (the unit of a numeric time column), "
            f"got {value!r}"
        )
    return str(value)


def _common(raw: Any, where: str) -> tuple[str, str]:
    if not isinstance(raw, dict):
        raise DataSpecError(f"{where}: expected a mapping, got {type(raw).__name__}")
    name = _str(raw, "name", where)
    if not _NAME.match(name):
        raise DataSpecError(f"{where}.name {name!r}: use lower-case letters, digits and '-' (at most 42)")
    uri = _str(raw, "uri", where)
    if not _URI.match(uri):
        raise DataSpecError(f"{where}.uri {uri!r}: use s3://, gs://, https://, file:// or an absolute path")
    return name, uri


def _source(raw: Any, where: str) -> SourceSpec:
    name, uri = _common(raw, where)
    labels = raw.get("labels", {})
    if not isinstance(labels, dict) or not labels or not all(isinstance(v, str) and v for v in labels.values()):
        raise DataSpecError(f"{where}.labels: expected a mapping task -> column with at least one task")
    weight = raw.get("weight", 1.0)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 < weight <= 1e6:
        raise DataSpecError(f"{where}.weight: expected a number > 0, got {weight!r}")
    domain = raw.get("domain")
    domains = _names(raw, "domains", where)
    if domain is not None and (not isinstance(domain, str) or not domains):
        raise DataSpecError(f"{where}.domain: a column name, with domains listing the values it may take")
    if domain is None and domains:
        raise DataSpecError(f"{where}.domains is given without domain (the column that holds them)")
    return SourceSpec(
        name=name,
        uri=uri,
        timestamp=_str(raw, "timestamp", where, "timestamp"),
        user=_str(raw, "user", where, "user_id"),
        timestamp_unit=_time_unit(raw, where),
        id=_str(raw, "id", where) if raw.get("id") is not None else None,
        sparse=_names(raw, "sparse", where),
        dense=_names(raw, "dense", where),
        labels={str(k): v for k, v in labels.items()},
        domain=domain,
        domains=domains,
        weight=float(weight),
    )


def _sequence(raw: Any, where: str) -> SequenceSpec:
    name, uri = _common(raw, where)
    features = _names(raw, "features", where)
    if not features:
        raise DataSpecError(f"{where}.features: list at least one event feature column")
    return SequenceSpec(
        name=name,
        uri=uri,
        timestamp=_str(raw, "timestamp", where, "timestamp"),
        user=_str(raw, "user", where, "user_id"),
        timestamp_unit=_time_unit(raw, where),
        features=features,
    )


def parse_data_spec(raw: Any) -> DataSpec:
    """The block as a :class:`DataSpec`; a :class:`DataSpecError` names the first bad field."""
    if not isinstance(raw, dict):
        raise DataSpecError(f"data: expected a mapping with sources (and sequences), got {type(raw).__name__}")
    sources_raw = raw.get("sources")
    if not isinstance(sources_raw, list) or not sources_raw:
        raise DataSpecError("data.sources: list at least one source")
    sources = tuple(_source(s, f"data.sources[{i}]") for i, s in enumerate(sources_raw))
    seq_raw = raw.get("sequences", [])
    if not isinstance(seq_raw, list):
        raise DataSpecError("data.sequences: expected a list")
    sequences = tuple(_sequence(s, f"data.sequences[{i}]") for i, s in enumerate(seq_raw))
    if not any(s.sparse for s in sources):
        raise DataSpecError("data.sources[*].sparse: list the candidate's id columns (an ad id, say) in some source")
    names = [s.name for s in sources] + [q.name for q in sequences]
    if len(set(names)) != len(names):
        raise DataSpecError(f"data: source and sequence names must be unique, got {names}")
    return DataSpec(sources=sources, sequences=sequences)


def load_data_spec(path: str | Path) -> DataSpec:
    """Read a YAML or JSON file (JSON is YAML); a bare block or one under a top-level ``data`` key."""
    text = Path(path).read_text()
    try:
        docs = load_documents(text)
    except yaml.YAMLError as exc:
        raise DataSpecError(f"{path}: not YAML/JSON: {exc}") from exc
    except RecursionError:  # the YAML parser recurses per level
        raise DataSpecError(f"{path}: not YAML/JSON: nested too deeply to be a data spec") from None
    if len(docs) > 1:
        raise DataSpecError(f"{path}: {len(docs)} YAML documents; a data spec is one")
    raw = docs[0] if docs else None
    if isinstance(raw, dict) and "data" in raw and "sources" not in raw:
        raw = raw["data"]
    return parse_data_spec(raw)


def spec_to_json(spec: DataSpec) -> str:
    """A canonical rendering (what the trainer logs in its start record)."""

    def one(obj: Any) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in obj.__dict__.items() if v not in (None, ())}

    return json.dumps({"sources": [one(s) for s in spec.sources], "sequences": [one(s) for s in spec.sequences]})
