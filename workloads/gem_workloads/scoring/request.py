"""The ``POST /v1/rank`` body: validation into numpy arrays, collation into model inputs, example bodies.

Body::

    {"user": {"features": {"user_id": 17, "user_segment": 3},      # every user feature of the schema
              "dense": [0.5, -0.1],                                 # num_user_dense floats (default zeros)
              "sequence": {"seq_item_id": [4, 9, ...], ...}},       # every sequence feature, equal lengths,
                                                                    # most recent event last
     "candidates": [{"item_id": 5, "item_cluster": 2, "item_tags": [1, 7], "domain": "feed"}, ...]}

A feature value is an integer id (a list of ids for multi-hot features), 64-bit signed or
unsigned; ids are folded into the table's rows as in training (``models.features.fold_id``).
``domain`` is a domain name or index (default 0). Sequences longer than the model's ``seq_len``
keep their most recent events.
Every violation raises :class:`RequestError` with an HTTP status and a message naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from ..models.features import (
    ID_MAX,
    ID_MIN,
    CandidateFeatures,
    CategoricalFeature,
    FeatureSchema,
    UserFeatures,
    fold_id,
)
from .side_inputs import SideInputs

IntArray = npt.NDArray[np.int64]

# Hard cap on events per request, whatever the model's seq_len (a body this size is a mistake).
MAX_SEQUENCE_EVENTS = 65_536
FLOAT32_MAX = float(np.finfo(np.float32).max)


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Jagged:
    values: IntArray
    lengths: IntArray


@dataclass
class RankRequest:
    """One validated request: one user, ``n`` candidates, ids already folded into table rows."""

    user: dict[str, Jagged]  # one row per feature
    dense: npt.NDArray[np.float32]  # [num_user_dense]
    sequence: dict[str, IntArray]  # events, most recent last, at most seq_len
    items: dict[str, Jagged]  # n rows per feature
    domain: IntArray  # [n]
    user_id: int | None = None
    side: SideInputs | None = None  # a vertical model's memory and Solaris inputs (from the store)

    @property
    def num_candidates(self) -> int:
        return len(self.domain)


def _ids(value: Any, feature: CategoricalFeature, where: str) -> list[int]:
    if isinstance(value, bool) or not isinstance(value, int | list):
        expected = f"{where}: expected an integer id{' or a list of ids' if feature.multi_hot else ''}"
        if isinstance(value, str):  # the model's tables know 64-bit ids only; the mapping is the team's
            expected += f", got the string {value[:40]!r}: map string ids to 64-bit integers as the training data does"
        raise RequestError(422, expected)
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not feature.multi_hot:
        raise RequestError(422, f"{where}: {feature.name} is single-valued; expected one integer id, got a list")
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int):
            raise RequestError(422, f"{where}: ids must be integers, got {v!r}")
        if not ID_MIN <= v <= ID_MAX:
            raise RequestError(422, f"{where}: ids are 64-bit integers, signed or unsigned; got {v}")
    return [fold_id(v, feature.cardinality) for v in items]


def _fits_float32(x: float) -> bool:
    """Finite and within float32's range, checked as a Python number: numpy raises OverflowError on
    an integer past a float (``10**400`` is valid JSON), and a float past float32's range would reach
    the model as an infinity."""
    try:
        value = float(x)
    except OverflowError:
        return False
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError(422, f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def parse_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"body is not valid JSON: {exc}") from None
    except RecursionError:  # json's decoder recurses per level: a body of 100,000 '[' was a 500
        raise RequestError(400, "body is not valid JSON: nested too deeply for a rank request") from None


def parse_request(raw: Any, schema: FeatureSchema, seq_len: int, max_candidates: int) -> RankRequest:
    """Validate a decoded JSON body against ``schema`` (see the module docstring)."""
    body = _object(raw, "body")
    user = _object(body.get("user"), "user") if "user" in body else None
    if user is None:
        raise RequestError(422, "user: missing; expected {'features': {...}, 'sequence': {...}}")
    cands = body.get("candidates")
    if not isinstance(cands, list):
        raise RequestError(422, "candidates: missing or not a list; expected a list of candidate objects")
    if not cands:
        raise RequestError(422, "candidates: empty; send at least one candidate")
    if len(cands) > max_candidates:
        raise RequestError(
            413, f"candidates: {len(cands)} candidates exceed this server's limit of {max_candidates} per request"
        )

    feats = _object(user.get("features", {}), "user.features")
    user_rows: dict[str, Jagged] = {}
    for f in schema.user_features:
        if f.name not in feats:
            raise RequestError(422, f"user.features.{f.name}: missing")
        ids = _ids(feats[f.name], f, f"user.features.{f.name}")
        user_rows[f.name] = Jagged(np.asarray(ids, dtype=np.int64), np.asarray([len(ids)], dtype=np.int64))

    dense_raw = user.get("dense", [0.0] * schema.num_user_dense)
    if (
        not isinstance(dense_raw, list)
        or len(dense_raw) != schema.num_user_dense
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in dense_raw)
    ):
        raise RequestError(422, f"user.dense: expected a list of {schema.num_user_dense} numbers")
    if not all(_fits_float32(x) for x in dense_raw):
        raise RequestError(422, f"user.dense: values must be finite numbers within +-{FLOAT32_MAX:.4g} (float32)")
    dense = np.asarray(dense_raw, dtype=np.float32)

    seq_raw = _object(user.get("sequence", {}), "user.sequence")
    sequence: dict[str, IntArray] = {}
    length: int | None = None
    for f in schema.sequence_features:
        if f.name not in seq_raw:
            raise RequestError(422, f"user.sequence.{f.name}: missing (send [] for an empty history)")
        events = seq_raw[f.name]
        if not isinstance(events, list):
            raise RequestError(422, f"user.sequence.{f.name}: expected a list of ids")
        if len(events) > MAX_SEQUENCE_EVENTS:
            raise RequestError(413, f"user.sequence.{f.name}: {len(events)} events exceed {MAX_SEQUENCE_EVENTS}")
        if length is not None and len(events) != length:
            raise RequestError(422, f"user.sequence.{f.name}: {len(events)} events, but other features have {length}")
        length = len(events)
        ids = [_ids(v, _single(f), f"user.sequence.{f.name}[{i}]")[0] for i, v in enumerate(events[-seq_len:])]
        sequence[f.name] = np.asarray(ids, dtype=np.int64)

    names = {d: i for i, d in enumerate(schema.domains)}
    item_values: dict[str, list[int]] = {f.name: [] for f in schema.item_features}
    item_lengths: dict[str, list[int]] = {f.name: [] for f in schema.item_features}
    domain = np.zeros(len(cands), dtype=np.int64)
    for i, c in enumerate(cands):
        cand = _object(c, f"candidates[{i}]")
        for f in schema.item_features:
            if f.name not in cand:
                raise RequestError(422, f"candidates[{i}].{f.name}: missing")
            ids = _ids(cand[f.name], f, f"candidates[{i}].{f.name}")
            item_values[f.name].extend(ids)
            item_lengths[f.name].append(len(ids))
        d = cand.get("domain", 0)
        if isinstance(d, str):
            if d not in names:
                raise RequestError(422, f"candidates[{i}].domain: unknown domain {d!r}; known: {list(schema.domains)}")
            domain[i] = names[d]
        elif isinstance(d, int) and not isinstance(d, bool) and 0 <= d < max(schema.num_domains, 1):
            domain[i] = d
        else:
            raise RequestError(422, f"candidates[{i}].domain: expected a domain name or index, got {d!r}")
    items = {
        k: Jagged(np.asarray(item_values[k], dtype=np.int64), np.asarray(item_lengths[k], dtype=np.int64))
        for k in item_values
    }
    user_id = feats.get("user_id")
    return RankRequest(
        user=user_rows,
        dense=dense,
        sequence=sequence,
        items=items,
        domain=domain,
        user_id=user_id if isinstance(user_id, int) and not isinstance(user_id, bool) else None,
    )


def _single(f: CategoricalFeature) -> CategoricalFeature:
    return CategoricalFeature(f.name, f.cardinality, multi_hot=False)


def _kjt(names: list[str], parts: dict[str, list[Jagged]]) -> KeyedJaggedTensor:
    values = np.concatenate([p.values for n in names for p in parts[n]]) if names else np.zeros(0, np.int64)
    lengths = np.concatenate([p.lengths for n in names for p in parts[n]]) if names else np.zeros(0, np.int64)
    return KeyedJaggedTensor.from_lengths_sync(
        keys=names,
        values=torch.from_numpy(values.astype(np.int64)),
        lengths=torch.from_numpy(lengths.astype(np.int32)),
    )


@dataclass
class ModelInputs:
    user: UserFeatures
    candidates: CandidateFeatures
    user_index: torch.Tensor | None  # row of ``user`` per candidate; None: one user row per candidate


def collate_requests(requests: list[RankRequest], schema: FeatureSchema, share: bool) -> ModelInputs:
    """Model inputs for a dynamic batch.

    ``share=True``: one user row per request, broadcast to its candidates by ``user_index``
    (the sequence is encoded once per request). ``share=False`` (the per-candidate baseline):
    the user row is repeated for every candidate, so the sequence is encoded N times.
    """
    reps = [r.num_candidates if not share else 1 for r in requests]
    user_parts: dict[str, list[Jagged]] = {f.name: [] for f in schema.user_features}
    seq_parts: dict[str, list[Jagged]] = {f.name: [] for f in schema.sequence_features}
    dense: list[npt.NDArray[np.float32]] = []
    for r, k in zip(requests, reps, strict=True):
        for f in schema.user_features:
            j = r.user[f.name]
            user_parts[f.name].append(Jagged(np.tile(j.values, k), np.repeat(j.lengths, k)))
        for f in schema.sequence_features:
            s = r.sequence[f.name]
            seq_parts[f.name].append(Jagged(np.tile(s, k), np.full(k, len(s), dtype=np.int64)))
        dense.append(np.repeat(r.dense[None, :], k, axis=0))
    user = UserFeatures(
        categorical=_kjt([f.name for f in schema.user_features], user_parts),
        sequence=_kjt([f.name for f in schema.sequence_features], seq_parts),
        dense=torch.from_numpy(np.concatenate(dense).astype(np.float32)),
    )
    item_parts = {f.name: [r.items[f.name] for r in requests] for f in schema.item_features}
    cands = CandidateFeatures(
        categorical=_kjt([f.name for f in schema.item_features], item_parts),
        domain=torch.from_numpy(np.concatenate([r.domain for r in requests])),
    )
    index = None
    if share:
        index = torch.from_numpy(np.repeat(np.arange(len(requests)), [r.num_candidates for r in requests]))
    return ModelInputs(user, cands, index)


def example_request(
    schema: FeatureSchema, candidates: int, seq_len: int, seed: int = 0, user_id: int | None = None
) -> dict[str, Any]:
    """A valid random body with ``candidates`` candidates and a ``seq_len``-event history."""
    rng = np.random.default_rng(seed)

    def ids(f: CategoricalFeature, n: int | None = None) -> Any:
        if n is not None:
            return rng.integers(0, f.cardinality, n).tolist()
        if f.multi_hot:
            return rng.integers(0, f.cardinality, 2).tolist()
        return int(rng.integers(0, f.cardinality))

    features = {f.name: ids(f) for f in schema.user_features}
    if user_id is not None and "user_id" in features:
        features["user_id"] = user_id
    return {
        "user": {
            "features": features,
            "dense": [round(float(x), 4) for x in rng.normal(0, 1, schema.num_user_dense)],
            "sequence": {f.name: ids(f, seq_len) for f in schema.sequence_features},
        },
        "candidates": [
            {
                **{f.name: ids(f) for f in schema.item_features},
                "domain": schema.domains[int(rng.integers(0, schema.num_domains))] if schema.domains else 0,
            }
            for _ in range(candidates)
        ],
    }


def _take(j: Jagged, rows: IntArray) -> Jagged:
    offsets = np.concatenate([[0], np.cumsum(j.lengths)])
    lengths = j.lengths[rows]
    idx = np.concatenate([np.arange(offsets[r], offsets[r + 1]) for r in rows]) if len(rows) else np.zeros(0, np.int64)
    return Jagged(j.values[idx].astype(np.int64), lengths)


def select_candidates(request: RankRequest, rows: IntArray) -> RankRequest:
    """The same user with only candidates ``rows`` (in that order)."""
    return RankRequest(
        user=request.user,
        dense=request.dense,
        sequence=request.sequence,
        items={k: _take(j, rows) for k, j in request.items.items()},
        domain=request.domain[rows],
        user_id=request.user_id,
    )
