"""Model versions: what the operator learns from termination messages, and how fromTraining resolves."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from gem_operator.api.common import ModelSource
from gem_operator.api.training import MAX_LISTED_MODELS, GEMTrainingSpec
from gem_operator.controllers.model_source import resolve_model
from gem_operator.controllers.models import merge_models, new_versions, pick_version, reported_models
from gem_operator.controllers.reconcile import Outcome, PassContext
from gem_operator.controllers.status import StatusDraft

NOW = datetime(2026, 12, 3, tzinfo=UTC)


def _pod(message: object, last: bool = False) -> dict[str, Any]:
    state = {"terminated": {"exitCode": 0, "message": message if isinstance(message, str) else json.dumps(message)}}
    status = {"name": "trainer", "state": {}, "lastState": state} if last else {"name": "trainer", "state": state}
    return {"status": {"containerStatuses": [status]}}


def _v(n: int) -> dict[str, Any]:
    return {"version": n, "uri": f"s3://m/v{n}", "step": 100 * n, "eval": {"ctr": {"auc": 0.7}}}


def test_versions_come_from_current_and_last_terminations_and_bad_entries_are_skipped() -> None:
    pods = [
        _pod({"checkpoint": "step-000100", "models": [_v(1)]}, last=True),
        _pod({"models": [_v(2), {"version": "two"}, {"uri": "no version"}, _v(0)]}),
        _pod("step-000300"),  # a bare checkpoint name: no versions
        _pod("{not json"),
    ]
    found = reported_models(pods)
    assert [m["version"] for m in found] == [1, 2]
    assert found[0]["eval"] == {"ctr": {"auc": 0.7}}


def test_merge_keeps_old_versions_orders_them_and_caps_the_list() -> None:
    previous = [_v(1), _v(3)]
    merged = merge_models(previous, [_v(2), {**_v(3), "step": 999}])
    assert [m["version"] for m in merged] == [1, 2, 3] and merged[2]["step"] == 999
    assert [m["version"] for m in new_versions(previous, merged)] == [2]
    many = merge_models([], [_v(n) for n in range(1, MAX_LISTED_MODELS + 11)])
    assert len(many) == MAX_LISTED_MODELS and many[0]["version"] == 11


def test_pick_version_by_number_or_latest() -> None:
    models = [_v(1), _v(3), _v(2)]
    assert pick_version(models, "latest") == _v(3)
    assert pick_version(models, 2) == _v(2)
    assert pick_version(models, 7) is None
    assert pick_version([], "latest") is None


@pytest.mark.parametrize("models", [7, True, 2.5, "v1", {"version": 1}])
def test_a_models_field_that_is_not_a_list_is_skipped(models: object) -> None:
    """A pod writes its termination message itself: `"models": 7` was a TypeError in every pass."""
    pods = [_pod({"checkpoint": "step-000100", "models": models}), _pod({"models": [_v(2)]})]
    assert [m["version"] for m in reported_models(pods)] == [2]


def test_a_hand_edited_status_models_list_is_read_for_what_it_holds() -> None:
    previous: list[Any] = [_v(1), "v2", None, 3, {"version": "three"}, {"version": True}]
    merged = merge_models(previous, [_v(4)])
    assert [m["version"] for m in merged] == [1, 4]
    assert [m["version"] for m in new_versions(previous, merged)] == [4]
    assert pick_version(previous, "latest") == _v(1) and pick_version(previous, "three") is None
    assert merge_models("not a list", [_v(2)]) == [_v(2)]  # type: ignore[arg-type]
    assert pick_version([None, "x"], "latest") is None  # type: ignore[list-item]


class _Kube:
    def __init__(self, training: dict[str, Any] | None) -> None:
        self.training = training

    async def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        assert kind == "GEMTraining"
        return self.training if self.training and self.training["metadata"]["name"] == name else None


def _resolve(
    training: dict[str, Any] | None, version: int | str, previous: dict[str, Any] | None = None
) -> tuple[ModelSource | None, Outcome]:
    body = {"metadata": {"name": "rk", "namespace": "ml"}, "status": {"model": previous} if previous else {}}
    ctx = PassContext(kube=_Kube(training), body=body, now=NOW, logger=logging.getLogger("t"))  # type: ignore[arg-type]
    outcome = Outcome(draft=StatusDraft.from_status({}, NOW, 1))
    source = ModelSource.model_validate({"fromTraining": {"name": "job", "version": version}})
    return asyncio.run(resolve_model(ctx, source, outcome)), outcome


def _condition(outcome: Outcome) -> tuple[str, str, str]:
    cond = next(c for c in outcome.draft.conditions if c.type == "ModelResolved")
    return str(cond.status), cond.reason, cond.message


def test_from_training_resolves_to_the_versions_uri_and_announces_a_rollout() -> None:
    training = {"metadata": {"name": "job"}, "status": {"models": [_v(1), _v(2)]}}
    model, outcome = _resolve(training, "latest", previous={"uri": "s3://m/v1", "training": "job", "version": 1})
    assert model is not None and model.origin == "s3://m/v2" and model.from_training is None
    assert outcome.draft.fields["model"] == {"uri": "s3://m/v2", "training": "job", "version": 2}
    assert _condition(outcome)[:2] == ("True", "VersionFound")
    assert [e[1] for e in outcome.events] == ["ModelRollout"] and "version 1" in outcome.events[0][2]


def test_an_unresolvable_reference_keeps_the_last_model_or_creates_nothing() -> None:
    training = {"metadata": {"name": "job"}, "status": {"models": [_v(1)]}}
    kept, outcome = _resolve(training, 5, previous={"uri": "s3://m/v1", "training": "job", "version": 1})
    assert kept is not None and kept.origin == "s3://m/v1"
    status, reason, message = _condition(outcome)
    assert (status, reason) == ("False", "VersionNotFound") and "keeping version 1" in message
    nothing, outcome = _resolve(None, "latest")
    assert nothing is None and outcome.draft.fields["phase"] == "WaitingForModel"
    assert _condition(outcome)[1] == "TrainingNotFound"
    empty, outcome = _resolve({"metadata": {"name": "job"}, "status": {}}, "latest")
    assert empty is None and _condition(outcome)[1] == "NoModelExported"


def test_model_source_takes_exactly_one_origin_and_versions_from_one() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ModelSource.model_validate({"uri": "s3://m/v1", "fromTraining": {"name": "job"}})
    with pytest.raises(ValueError, match="start at 1"):
        ModelSource.model_validate({"fromTraining": {"name": "job", "version": 0}})
    with pytest.raises(ValueError, match="version number or 'latest'"):
        ModelSource.model_validate({"fromTraining": {"name": "job", "version": "newest"}})


def test_holdout_sources_name_every_data_source() -> None:
    spec: dict[str, Any] = {
        "checkpoint": {"uri": "s3://c/j"},
        "export": {"uri": "s3://m/j", "holdoutSources": {"feed": "s3://logs/later/feed"}},
        "training": {
            "data": {
                "sources": [
                    {"name": "feed", "uri": "s3://logs/feed", "sparse": ["ad_id"], "labels": {"ctr": "clicked"}},
                    {"name": "search", "uri": "s3://logs/search", "sparse": ["ad_id"], "labels": {"ctr": "clicked"}},
                ]
            }
        },
    }
    with pytest.raises(ValueError, match=r"every source \['feed', 'search'\]"):
        GEMTrainingSpec.model_validate(spec)
    spec["export"]["holdoutSources"]["search"] = "s3://logs/later/search"
    assert GEMTrainingSpec.model_validate(spec).export is not None
