"""Pure status derivation: observed children -> phase and conditions (no kopf, no I/O)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gem_operator.api.common import Condition, ConditionStatus, set_condition


@dataclass
class StatusDraft:
    """A status being built; ``conditions`` keep their transition times from the last status."""

    now: datetime
    generation: int | None
    conditions: list[Condition] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None, now: datetime, generation: int | None) -> StatusDraft:
        conds = [Condition.model_validate(c) for c in (status or {}).get("conditions", []) if _valid(c)]
        return cls(now=now, generation=generation, conditions=conds)

    def condition(self, type: str, status: ConditionStatus | str, reason: str, message: str) -> None:
        self.conditions = set_condition(
            self.conditions,
            type=type,
            status=status,
            reason=reason,
            message=message,
            now=self.now,
            observed_generation=self.generation,
        )

    def to_status(self) -> dict[str, Any]:
        out = dict(self.fields)
        out["observedGeneration"] = self.generation
        out["conditions"] = [c.to_wire() for c in self.conditions]
        return out


def _valid(cond: Any) -> bool:
    try:
        Condition.model_validate(cond)
    except ValueError:
        return False
    return True


def status_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level status fields that differ, so unchanged statuses cause no API writes."""
    old = old or {}
    return {k: v for k, v in new.items() if old.get(k) != v}


def pod_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def pod_failure(pod: Mapping[str, Any]) -> str | None:
    """Why a pod failed, or None when it has not."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    name = pod.get("metadata", {}).get("name", "?")
    reason = status.get("reason") or "Failed"
    message = status.get("message") or ""
    return f"pod {name} failed: {reason}" + (f" ({message})" if message else "")


@dataclass(frozen=True)
class GangObservation:
    expected: int
    existing: int
    ready: int
    succeeded: int
    failures: tuple[str, ...]


def observe_gang(expected: int, pods: Sequence[Mapping[str, Any]]) -> GangObservation:
    phases = [(p.get("status") or {}).get("phase") for p in pods]
    return GangObservation(
        expected=expected,
        existing=len(pods),
        ready=sum(1 for p in pods if pod_ready(p)),
        succeeded=sum(1 for ph in phases if ph == "Succeeded"),
        failures=tuple(f for p in pods if (f := pod_failure(p))),
    )


def _end_restart(draft: StatusDraft, reason: str, message: str) -> None:
    """A `Restarting=True` left from a restart goes False once the gang runs again (or is suspended)."""
    if any(c.type == "Restarting" and c.status == "True" for c in draft.conditions):
        draft.condition("Restarting", "False", reason, message)


def training_phase(draft: StatusDraft, obs: GangObservation, suspended: bool, why: str = "") -> None:
    """Phase and conditions of a GEMTraining from its pods."""
    if suspended:
        draft.fields["phase"] = "Suspended"
        draft.condition("Suspended", "True", "SpecSuspended", "spec.suspend is true: the gang holds no pods")
        draft.condition("Ready", "False", "Suspended", "suspended")
        # No pod runs while suspended: say so, rather than leave the last running state standing.
        draft.condition("Running", "False", "Suspended", "suspended: no pods")
        _end_restart(draft, "Suspended", "suspended: no pods")
        draft.fields["readyNodes"] = 0
        return
    draft.condition("Suspended", "False", "NotSuspended", "")
    if obs.failures:
        draft.fields["phase"] = "Failed"
        draft.condition("Ready", "False", "PodFailed", "; ".join(obs.failures))
    elif obs.expected and obs.succeeded == obs.expected:
        draft.fields["phase"] = "Succeeded"
        draft.condition("Succeeded", "True", "AllPodsSucceeded", f"{obs.succeeded}/{obs.expected} pods succeeded")
        draft.condition("Ready", "False", "Completed", "training finished")
    elif obs.expected and obs.ready == obs.expected:
        draft.fields["phase"] = "Running"
        draft.condition("Running", "True", "AllPodsReady", f"{obs.ready}/{obs.expected} pods ready")
        draft.condition("Ready", "True", "AllPodsReady", f"{obs.ready}/{obs.expected} pods ready")
        _end_restart(draft, "RestartCompleted", f"{obs.ready}/{obs.expected} pods ready again")
    else:
        draft.fields["phase"] = "Pending"
        # `why`: what the not-Ready pods say (controllers/pod_reasons.py), e.g. an image that cannot be pulled.
        message = f"{obs.ready}/{obs.expected} pods ready" + (f": {why}" if why else "")
        draft.condition("Running", "False", "PodsStarting", message)
        draft.condition("Ready", "False", "PodsStarting", message)
    draft.fields["nodes"] = obs.expected
    draft.fields["readyNodes"] = obs.ready


def pool_phase(draft: StatusDraft, desired: int, deployment: Mapping[str, Any] | None, why: str = "") -> None:
    """Phase and conditions of a replica pool from its Deployment."""
    dstatus = (deployment or {}).get("status") or {}
    ready = int(dstatus.get("readyReplicas") or 0)
    replicas = int(dstatus.get("replicas") or 0)
    draft.fields.update({"replicas": replicas, "readyReplicas": ready, "desiredReplicas": desired})
    if desired == 0:
        draft.fields["phase"] = "ScaledToZero"
        draft.condition("Ready", "True", "ScaledToZero", "no replicas wanted")
        draft.condition("Progressing", "False", "ScaledToZero", "")
    elif ready >= desired:
        draft.fields["phase"] = "Ready"
        draft.condition("Ready", "True", "ReplicasReady", f"{ready}/{desired} replicas ready")
        draft.condition("Progressing", "False", "ReplicasReady", f"{ready}/{desired} replicas ready")
    else:
        draft.fields["phase"] = "Progressing"
        message = f"{ready}/{desired} replicas ready" + (f": {why}" if why else "")
        draft.condition("Ready", "False", "ReplicasStarting", message)
        draft.condition("Progressing", "True", "ReplicasStarting", message)


def invalid(draft: StatusDraft, message: str) -> None:
    draft.fields["phase"] = "Invalid"
    draft.condition("Ready", "False", "InvalidSpec", message)


def model_load_seconds(pods: Sequence[Mapping[str, Any]]) -> float | None:
    """The slowest model load among the pods, from the loader init container's termination message."""
    found: list[float] = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
            if cs.get("name") != "model-loader":
                continue
            message = ((cs.get("state") or {}).get("terminated") or {}).get("message")
            try:
                seconds = json.loads(message)["seconds"] if message else None
            except (ValueError, KeyError, TypeError):
                seconds = None
            if isinstance(seconds, (int, float)):
                found.append(float(seconds))
    return max(found) if found else None


# The fields of status.precision (api.serving.PrecisionStatus); anything else in a message is dropped.
PRECISION_STATUS_KEYS = ("requested", "device", "layers", "aucDelta", "meanScoreError", "speedup")


def precision_plan(pods: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The serving precision plan from the precision-plan init container's termination message.

    Every pod plans on the same model and device type; the newest message read wins.
    """
    for pod in pods:
        for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
            if cs.get("name") != "precision-plan":
                continue
            message = ((cs.get("state") or {}).get("terminated") or {}).get("message")
            try:
                plan = json.loads(message)["precision"] if message else None
            except (ValueError, KeyError, TypeError):
                plan = None
            if isinstance(plan, dict):
                return {k: plan[k] for k in PRECISION_STATUS_KEYS if k in plan}
    return None
