"""Pure status derivation from observed children."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gem_operator.controllers.status import (
    StatusDraft,
    observe_gang,
    pool_phase,
    status_changes,
    training_phase,
)

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def pod(name: str, phase: str, ready: bool = False, reason: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}
    if reason:
        status["reason"] = reason
    return {"metadata": {"name": name}, "status": status}


def conditions(draft: StatusDraft) -> dict[str, tuple[str, str]]:
    return {c.type: (str(c.status), c.reason) for c in draft.conditions}


def test_gang_running_only_when_every_pod_is_ready() -> None:
    draft = StatusDraft.from_status(None, NOW, 3)
    training_phase(draft, observe_gang(2, [pod("a", "Running", True), pod("b", "Pending")]), suspended=False)
    assert draft.fields["phase"] == "Pending" and conditions(draft)["Ready"] == ("False", "PodsStarting")
    training_phase(draft, observe_gang(2, [pod("a", "Running", True), pod("b", "Running", True)]), suspended=False)
    assert draft.fields["phase"] == "Running" and conditions(draft)["Ready"] == ("True", "AllPodsReady")
    assert draft.to_status()["observedGeneration"] == 3


def test_failure_names_the_pod() -> None:
    draft = StatusDraft.from_status(None, NOW, 1)
    training_phase(draft, observe_gang(2, [pod("a", "Failed", reason="OOMKilled"), pod("b", "Running", True)]), False)
    assert draft.fields["phase"] == "Failed"
    assert "pod a failed: OOMKilled" in draft.conditions[-1].message


def test_suspended_and_succeeded() -> None:
    draft = StatusDraft.from_status(None, NOW, 1)
    training_phase(draft, observe_gang(0, []), suspended=True)
    assert draft.fields["phase"] == "Suspended" and conditions(draft)["Suspended"][0] == "True"
    draft = StatusDraft.from_status(None, NOW, 1)
    training_phase(draft, observe_gang(1, [pod("a", "Succeeded")]), suspended=False)
    assert draft.fields["phase"] == "Succeeded"


def test_pool_phases() -> None:
    draft = StatusDraft.from_status(None, NOW, 1)
    pool_phase(draft, 3, {"status": {"replicas": 3, "readyReplicas": 1}})
    assert draft.fields["phase"] == "Progressing" and conditions(draft)["Progressing"][0] == "True"
    pool_phase(draft, 3, {"status": {"replicas": 3, "readyReplicas": 3}})
    assert draft.fields["phase"] == "Ready"
    pool_phase(draft, 0, None)
    assert draft.fields["phase"] == "ScaledToZero"


def test_unchanged_status_writes_nothing() -> None:
    draft = StatusDraft.from_status(None, NOW, 1)
    pool_phase(draft, 2, {"status": {"replicas": 2, "readyReplicas": 2}})
    first = draft.to_status()
    again = StatusDraft.from_status(first, NOW.replace(hour=5), 1)
    pool_phase(again, 2, {"status": {"replicas": 2, "readyReplicas": 2}})
    assert status_changes(first, again.to_status()) == {}


def test_model_load_seconds_from_the_loader_termination_message() -> None:
    from gem_operator.controllers.status import model_load_seconds

    def loaded(message: str | None) -> dict[str, Any]:
        state = {"terminated": {"exitCode": 0, **({"message": message} if message is not None else {})}}
        return {"status": {"initContainerStatuses": [{"name": "model-loader", "state": state}]}}

    pods = [loaded('{"seconds":41.5,"bytes":10}'), loaded('{"seconds":62.0}'), loaded("not json"), loaded(None)]
    assert model_load_seconds(pods) == 62.0
    assert model_load_seconds([loaded("garbage")]) is None
