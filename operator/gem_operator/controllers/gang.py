"""Pure decisions about a training gang's life: failures, backoff, checkpoints, replica groups.

No kopf and no API calls here, so the restart logic is tested with plain dicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.render.common import spec_hash

MAX_BACKOFF_SECONDS = 3600
_STEP = re.compile(r"(\d+)")


def plan_key(spec: GEMTrainingSpec) -> str:
    """Digest of the fields a placement depends on; a change means the gang must be re-placed."""
    return spec_hash(
        {
            "parallelism": spec.parallelism.to_wire(),
            "gpusPerNode": spec.gpus_per_node,
            "topology": spec.topology.to_wire(),
            "embeddingShardingGroup": spec.embedding_sharding_group,
        }
    )


def node_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass(frozen=True)
class GangFailure:
    """Why the gang (or part of it) must restart."""

    message: str
    node_ranks: frozenset[int]
    bad_nodes: frozenset[str]


def detect_failure(
    pods: Sequence[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]], rank_of: Mapping[str, int]
) -> GangFailure | None:
    """A failed pod, or a pod on a node that is gone or NotReady, fails the gang."""
    messages: list[str] = []
    ranks: set[int] = set()
    bad_nodes: set[str] = set()
    for pod in pods:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and (node_name not in nodes or not node_ready(nodes[node_name])):
            messages.append(f"node {node_name} of pod {name} is {'gone' if node_name not in nodes else 'NotReady'}")
            bad_nodes.add(node_name)
        elif status.get("phase") == "Failed":
            reason = status.get("reason") or _container_reason(status) or "Failed"
            messages.append(f"pod {name} failed: {reason}")
        else:
            continue
        if name in rank_of:
            ranks.add(rank_of[name])
    if not messages:
        return None
    return GangFailure("; ".join(messages), frozenset(ranks), frozenset(bad_nodes))


def _container_reason(status: Mapping[str, Any]) -> str | None:
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated:
            said = _said(terminated.get("message"))
            detail = f"{said[0]}: {said[1]}" if said else terminated.get("reason", "Error")
            return f"{detail} (exit code {terminated.get('exitCode')})"
    return None


def _said(message: str | None) -> tuple[str, str] | None:
    """(reason, message) a trainer wrote as JSON in its termination message (docs/contracts.md), if any."""
    try:
        parsed = json.loads(message) if message else None
    except ValueError:
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("reason"), str) and isinstance(parsed.get("message"), str):
        return parsed["reason"], parsed["message"]
    return None


def invalid_data(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The message of a trainer that stopped on bad data (reason InvalidData), naming the pod; None if none did.

    Bad data does not heal by restarting, so this ends the run (unlike DataUnavailable, a store that
    stayed unreachable, which restarts with backoff like any failure).
    """
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            said = _said(((cs.get("state") or {}).get("terminated") or {}).get("message"))
            if said and said[0] == "InvalidData":
                return f"pod {pod['metadata']['name']}: {said[1]}"
    return None


def unschedulable(pods: Sequence[Mapping[str, Any]]) -> str:
    """Why ungated pods of the gang cannot be scheduled where they were planned ('' when none)."""
    problems = []
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                problems.append(
                    f"pod {pod['metadata']['name']} cannot be scheduled on its planned node: {cond.get('message', '')}"
                )
    return "; ".join(problems)


def backoff_seconds(base: int, restarts_so_far: int) -> int:
    """Exponential backoff: base, 2*base, 4*base ... capped at an hour."""
    return int(min(base * (2**restarts_so_far), MAX_BACKOFF_SECONDS))


def restart_time(now: datetime, base: int, restarts_so_far: int) -> datetime:
    return now + timedelta(seconds=backoff_seconds(base, restarts_so_far))


def reported_checkpoints(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Checkpoints the trainers reported in their termination messages (docs/contracts.md).

    A message is JSON with a "checkpoint" key (or a bare checkpoint name); the container's last
    and current terminations both count.
    """
    found: list[str] = []
    for pod in pods:
        for message in termination_messages(pod):
            try:
                parsed = json.loads(message)
            except ValueError:
                parsed = message.strip()
            name = parsed.get("checkpoint") if isinstance(parsed, dict) else parsed
            if isinstance(name, str) and name:
                found.append(name)
    return found


def termination_messages(pod: Mapping[str, Any]) -> Iterator[str]:
    """The non-empty messages of the pod's containers' current and last terminations."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            message = (state.get("terminated") or {}).get("message")
            if message:
                yield message


def newest_checkpoint(candidates: Iterable[str | None]) -> str | None:
    """The checkpoint with the highest step number (names like step-000400)."""
    best: tuple[int, str] | None = None
    for name in candidates:
        if not name:
            continue
        digits = _STEP.findall(name)
        key = (int(digits[-1]) if digits else -1, name)
        if best is None or key > best:
            best = key
    return best[1] if best else None


def replica_group_ranks(spec: GEMTrainingSpec, node_rank: int) -> list[int]:
    """Node ranks of the data-parallel replica that holds ``node_rank`` (pods whose first rank is in it).

    Only meaningful when every pod belongs to exactly one replica (nproc divides the ranks of a
    replica's inner dims), which ``replica_groups_separable`` checks.
    """
    mesh, nproc = spec.parallelism.mesh, spec.nproc_per_node
    replica = mesh.replica_groups()[mesh.replica_of(node_rank * nproc)]
    firsts: list[int] = (replica[replica % nproc == 0] // nproc).tolist()
    return sorted(firsts)


def replica_groups_separable(spec: GEMTrainingSpec) -> bool:
    """True when a replica group can restart alone: several replicas and none shares a pod."""
    mesh = spec.parallelism.mesh
    return mesh.dp_replicate > 1 and mesh.replica_block % spec.nproc_per_node == 0
