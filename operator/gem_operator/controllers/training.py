"""GEMTraining handlers: place the gang, create it gated and pinned, ungate it whole, restart it.

One pass: observe (pods, nodes) -> react to failures (tear down, back off, re-place) -> plan
(topology planner, only when there is no valid plan) -> apply children -> ungate when every pod
exists -> status. Time is read once per pass and passed down.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import kopf

from gem_operator.api.kinds import GEM_TRAINING
from gem_operator.api.training import GEMTrainingSpec, PlacementSummary
from gem_operator.controllers import gang, humanize, kueue
from gem_operator.controllers.models import describe_version, merge_models, new_versions, reported_models
from gem_operator.controllers.offload import offload
from gem_operator.controllers.pod_reasons import not_ready_summary
from gem_operator.controllers.reconcile import (
    APPLY_CONCURRENCY,
    Outcome,
    PassContext,
    apply_children,
    prune_children,
    reconcile,
)
from gem_operator.controllers.settings import MODEL_PEERS, NODE_CACHE, RESYNC_SECONDS
from gem_operator.controllers.status import observe_gang, training_phase
from gem_operator.kube.kueue import read_topology
from gem_operator.render.common import LABEL_INSTANCE, LABEL_ROLE, Owner
from gem_operator.render.training import (
    GANG_GATE,
    LABEL_NODE_RANK,
    ROLE_WORKER,
    TrainingChildren,
    render_training,
    rendezvous_service,
)
from gem_operator.topology import (
    Infeasible,
    Placement,
    cluster_view_from_objects,
    embedding_sharding_group,
    plan_gang,
)
from gem_operator.topology.tiers import kueue_levels

INFO = GEM_TRAINING
# A ConfigMap holds at most 1 MiB (data and metadata together); keep room for the metadata.
CONFIG_MAP_LIMIT = 1024 * 1024 - 16 * 1024


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_stamp(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class TrainingPass:
    """State of one reconcile pass over one GEMTraining."""

    def __init__(self, ctx: PassContext, spec: GEMTrainingSpec, outcome: Outcome) -> None:
        self.ctx, self.spec, self.outcome = ctx, spec, outcome
        self.owner = Owner.from_body(dict(ctx.body))
        self.status: dict[str, Any] = dict(ctx.body.get("status") or {})
        self.fields = outcome.draft.fields
        self.labels = {LABEL_INSTANCE: ctx.name, LABEL_ROLE: ROLE_WORKER}
        # Node labels the placement must keep to (the ResourceFlavors Kueue admitted the gang to).
        self.required_labels: dict[str, str] = {}

    def event(self, type_: str, reason: str, message: str) -> None:
        self.outcome.events.append((type_, reason, message))

    def condition(self, type_: str, status: str, reason: str, message: str) -> None:
        self.outcome.draft.condition(type_, status, reason, message)

    async def render(self, spec: GEMTrainingSpec, **kwargs: Any) -> TrainingChildren | None:
        """The children, rendered off the event loop; None (and a condition) if the ConfigMap cannot fit.

        A pass renders at most once, on whichever path it takes (placed, suspended, queued); the
        rest of the pass works from that result.
        """
        children = await offload("rendering the gang", render_training, self.owner, spec, **kwargs)
        size = sum(len(v) for v in (children.config.get("data") or {}).values())
        if size > CONFIG_MAP_LIMIT:
            message = (
                f"the rank map and config of {spec.num_nodes} pods take {size / 2**20:.1f} MiB, more than the "
                f"1 MiB a ConfigMap holds; lower the world size (at most about "
                f"{spec.num_nodes * CONFIG_MAP_LIMIT // size} pods fit)"
            )
            self.fields["phase"] = "Pending"
            self.condition("Placed", "False", "RankMapTooLarge", message)
            self.condition("Ready", "False", "RankMapTooLarge", message)
            old: dict[str, Any] = next((c for c in self.status.get("conditions", []) if c.get("type") == "Placed"), {})
            if old.get("message") != message:
                self.event("Warning", "RankMapTooLarge", message)
            return None
        return children

    async def pods(self) -> list[dict[str, Any]]:
        return await self.ctx.kube.list("v1", "Pod", self.ctx.namespace, self.labels)

    async def delete_pods(self, names: set[str] | None = None) -> None:
        for pod in await self.pods():
            name = pod["metadata"]["name"]
            if names is None or name in names:
                await self.ctx.kube.delete("v1", "Pod", name, self.ctx.namespace)

    async def run(self) -> None:
        spec, fields = self.spec, self.fields
        restarts = int(self.status.get("restarts") or 0)
        fields.update(
            worldSize=spec.world_size,
            nodes=spec.num_nodes,
            restarts=restarts,
            excludedNodes=list(self.status.get("excludedNodes") or []),
            placement=self.status.get("placement"),
            restartAfter=self.status.get("restartAfter"),
            lastFailure=self.status.get("lastFailure"),
        )
        pods = await self.pods()
        checkpoint = gang.newest_checkpoint([self.status.get("lastCheckpoint"), *gang.reported_checkpoints(pods)])
        fields["lastCheckpoint"] = checkpoint
        fields["models"] = merge_models(self.status.get("models"), reported_models(pods))
        for new in new_versions(self.status.get("models"), fields["models"]):
            self.event("Normal", "ModelExported", describe_version(new))
        queued = await kueue.admission(self)  # None unless the resource names a Kueue queue

        if spec.suspend:
            await self.suspend(pods)
            return
        if self.status.get("phase") == "Failed":
            # Terminal, like a Job: the pods stay for inspection; delete and re-apply to retry.
            fields["phase"] = "Failed"
            await kueue.finish(self, "Failed", str(self.status.get("lastFailure") or "failed"))
            return
        if pods and len(pods) == spec.num_nodes and all(p.get("status", {}).get("phase") == "Succeeded" for p in pods):
            training_phase(self.outcome.draft, observe_gang(spec.num_nodes, pods), suspended=False)
            await kueue.finish(self, "Succeeded", "all pods succeeded")
            return
        if queued is not None and not queued.admitted:
            await kueue.hold(self, queued, pods)
            return
        if queued is not None:
            self.required_labels = await kueue.admitted_node_labels(self, queued)

        bad_data = gang.invalid_data(pods)
        if bad_data is not None:
            await self.invalid_data(bad_data)
            return
        nodes = {n["metadata"]["name"]: n for n in await self.ctx.kube.list("v1", "Node", None)}
        rank_of = {p["metadata"]["name"]: int(p["metadata"]["labels"].get(LABEL_NODE_RANK, -1)) for p in pods}
        failure = gang.detect_failure(pods, nodes, rank_of)
        if failure is not None:
            await self.handle_failure(failure, restarts)
            return

        stuck = gang.unschedulable(pods)
        if stuck:
            # The plan went stale (another pod took the planned GPUs first): re-place the whole gang.
            # Not a failure of the job, so it costs no restart.
            await self.delete_pods()
            fields["placement"] = None
            fields["phase"] = "Pending"
            self.condition("Placed", "False", "Replacing", stuck)
            self.event("Warning", "Replacing", stuck)
            return

        restart_after = _parse_stamp(fields.get("restartAfter"))
        if restart_after is not None and self.ctx.now < restart_after:
            fields["phase"] = "Restarting"
            self.condition("Ready", "False", "BackingOff", f"restarting after {fields['restartAfter']}")
            return
        fields["restartAfter"] = None

        node_names = await self.place(nodes, pods)
        if node_names is None:
            return
        placement = fields.get("placement") or {}
        # the tiers the plan used (spec, Kueue or discovered), host tier excluded
        tiers = [(t["name"], t["label"]) for t in placement.get("tiers") or []][1:]
        if not tiers:
            tiers = [(t.name, t.label) for t in (spec.topology.tiers or [])[1:]]
        topology = {
            name: {tier: labels[label] for tier, label in tiers if label in labels}
            for name, node in nodes.items()
            for labels in [node["metadata"].get("labels") or {}]
        }
        children = await self.render(
            spec,
            node_names=node_names,
            node_topology=topology,
            resume_from=checkpoint,
            placement_json={"planner": placement.get("planner"), "nodes": node_names, "score": placement.get("score")},
            embedding_sharding_group=placement.get("embeddingShardingGroup"),
            peers=MODEL_PEERS,
            node_cache=NODE_CACHE,
        )
        if children is None:
            await self.delete_pods()
            return
        observed = {"Pod": {p["metadata"]["name"]: p for p in pods}}
        applied = await apply_children(self.ctx, INFO, children.all(), self.outcome, observed)
        keep = {p["metadata"]["name"] for p in children.pods}
        await prune_children(self.ctx, INFO, "v1", "Pod", keep, self.outcome, {LABEL_ROLE: ROLE_WORKER}, pods)
        # The gang as the server holds it after the apply (a pod replaced this pass is absent): no
        # second list of a gang that may be thousands of pods between creating and ungating it.
        now = (applied[f"Pod/{p['metadata']['name']}"].object for p in children.pods)
        pods = [p for p in now if p is not None]
        await self.ungate_when_whole(pods)
        if self.status.get("phase") == "Restarting":
            self.event("Normal", "Restarted", f"gang re-created; resuming from {checkpoint or 'the start'}")
        why = not_ready_summary(pods)
        training_phase(self.outcome.draft, observe_gang(spec.num_nodes, pods), suspended=False, why=why)

    async def suspend(self, pods: list[dict[str, Any]]) -> None:
        """Suspended by the user: no pods, no placement (Kueue admission is controllers/kueue.py)."""
        children = await self.render(self.spec)
        if children is not None:
            await apply_children(self.ctx, INFO, children.all(), self.outcome)
        if pods:
            await self.delete_pods()
        self.fields["placement"] = None
        if children is not None:
            self.condition("Placed", "False", "Suspended", "spec.suspend is true")
        training_phase(self.outcome.draft, observe_gang(0, []), suspended=True)
        if self.status.get("phase") != "Suspended":
            self.event("Normal", "Suspended", "spec.suspend is true: the gang's pods were removed")

    async def invalid_data(self, message: str) -> None:
        """A trainer found bad data before its first step: the run fails (a restart would read the same files)."""
        self.fields.update(phase="Failed", lastFailure=message)
        self.condition("Ready", "False", "InvalidData", message)
        self.condition("Running", "False", "InvalidData", message)
        if self.status.get("phase") != "Failed":
            self.event("Warning", "InvalidData", message)
        await kueue.finish(self, "Failed", message)

    async def handle_failure(self, failure: gang.GangFailure, restarts: int) -> None:
        spec, fields = self.spec, self.fields
        fields["lastFailure"] = failure.message
        if restarts >= spec.failure_policy.max_restarts:
            fields["phase"] = "Failed"
            self.condition("Failed", "True", "RestartBudgetExhausted", f"{restarts} restarts used; {failure.message}")
            self.condition("Running", "False", "Failed", failure.message)
            self.condition("Ready", "False", "Failed", failure.message)
            if self.status.get("phase") != "Failed":
                self.event("Warning", "Failed", f"restart budget ({restarts}) exhausted: {failure.message}")
            return
        group = self.replica_group(failure)
        fields["excludedNodes"] = sorted({*fields["excludedNodes"], *failure.bad_nodes})
        fields["restarts"] = restarts + 1
        fields["restartAfter"] = _stamp(gang.restart_time(self.ctx.now, spec.failure_policy.backoff_seconds, restarts))
        placement = dict(fields.get("placement") or {})
        if group is None:
            await self.delete_pods()
            fields["placement"] = None
            scope = "gang"
        else:
            names = {f"{self.ctx.name}-{ROLE_WORKER}-{r}" for r in group}
            await self.delete_pods(names)
            nodes = list(placement.get("nodes") or [])
            for r in group:
                if r < len(nodes) and nodes[r] in failure.bad_nodes:
                    nodes[r] = ""  # re-place only what sat on a bad node
            placement["nodes"] = nodes
            fields["placement"] = placement
            scope = f"replica group (node ranks {sorted(group)})"
        fields["phase"] = "Restarting"
        message = f"{failure.message}; restarting the {scope} after {fields['restartAfter']}"
        self.condition("Restarting", "True", "Failure", message)
        self.condition("Running", "False", "Restarting", message)
        self.condition("Ready", "False", "Restarting", message)
        self.event("Warning", "Restarting", f"restart {restarts + 1}/{spec.failure_policy.max_restarts}: {message}")

    def replica_group(self, failure: gang.GangFailure) -> set[int] | None:
        """Node ranks to restart when only the failed replica groups need it, else None (whole gang)."""
        spec = self.spec
        if spec.failure_policy.scope != "ReplicaGroup" or not gang.replica_groups_separable(spec):
            return None
        if not failure.node_ranks:
            return None
        group: set[int] = set()
        for rank in failure.node_ranks:
            group.update(gang.replica_group_ranks(spec, rank))
        return group if len(group) < spec.num_nodes else None

    async def place(self, nodes: dict[str, dict[str, Any]], pods: list[dict[str, Any]]) -> list[str | None] | None:
        """The hosts by node rank: the stored plan when still valid, else a new plan (or None).

        ``pods`` are the gang's own, as this pass listed them: a new plan counts every other pod's GPUs.
        """
        spec, fields = self.spec, self.fields
        key = gang.plan_key(spec)
        placement = fields.get("placement") or {}
        current = list(placement.get("nodes") or [])
        valid = placement.get("specKey") == key and len(current) == spec.num_nodes
        if valid and all(current):
            self.condition(
                "Placed",
                "True",
                "Placed",
                f"{spec.num_nodes} pods pinned; score {humanize.score(placement.get('score'))}",
            )
            return list(current)
        all_pods = await self.ctx.kube.list("v1", "Pod", None)
        mine = {p["metadata"]["name"] for p in pods}
        others = [
            p
            for p in all_pods
            if p["metadata"].get("namespace") != self.ctx.namespace or p["metadata"]["name"] not in mine
        ]
        view = await offload("reading the cluster", cluster_view_from_objects, list(nodes.values()), others)
        excluded = frozenset(fields.get("excludedNodes") or [])
        levels: list[str] | None = None
        if spec.topology.kueue_topology and not spec.topology.tiers:
            levels = await self.kueue_levels(spec.topology.kueue_topology)
            if levels is None:
                return None
        if self.required_labels:
            excluded |= {
                name
                for name, node in nodes.items()
                if any((node["metadata"].get("labels") or {}).get(k) != v for k, v in self.required_labels.items())
            }
        if valid:
            # Replica-group restart: keep the hosts that are fine, plan the missing ranks as a sub-gang.
            missing = [r for r, n in enumerate(current) if not n]
            sub = spec.model_copy(
                update={"parallelism": spec.parallelism.model_copy(update={"dp_replicate": 1, "world_size": None})}
            )
            taken = frozenset(n for n in current if n)
            result = (
                await offload(
                    "planning the replica group",
                    plan_gang,
                    sub,
                    view,
                    exclude_nodes=excluded | taken,
                    kueue_levels=levels,
                )
                if len(missing) == sub.num_nodes
                else None
            )
            if isinstance(result, Placement):
                for r, host in zip(missing, result.nodes, strict=True):
                    current[r] = host
                fields["placement"] = {**placement, "nodes": current}
                self.event("Normal", "Placed", f"replica group re-placed on {', '.join(result.nodes)}")
                return list(current)
        result_full = await offload(
            "planning the gang", plan_gang, spec, view, exclude_nodes=excluded, kueue_levels=levels
        )
        if isinstance(result_full, Infeasible) and mine and current and all(current):
            # An edit the cluster cannot place yet: the running gang stays until the new shape fits.
            await self.hold_change(result_full, len(current))
            return None
        if isinstance(result_full, Infeasible):
            await self.unplaced("Unschedulable", "; ".join([result_full.reason, *result_full.details]))
            return None
        for warning in result_full.topology_warnings:
            self.event("Warning", "TopologyInconsistent", warning)
        summary: PlacementSummary = result_full.summary()
        summary.spec_key = key
        summary.embedding_sharding_group = embedding_sharding_group(result_full, spec)
        fields["placement"] = summary.to_wire()
        self.condition(
            "Placed", "True", "Placed", f"{spec.num_nodes} pods pinned; score {humanize.score(summary.score)}"
        )
        domains = sorted({d.get("nvlink", "") for d in result_full.node_domains} - {""})
        self.event("Normal", "Placed", f"{spec.num_nodes} pods on {', '.join(result_full.nodes)}"
                   + (f" (NVLink domains {', '.join(domains)})" if domains else ""))  # fmt: skip
        return list(result_full.nodes)

    async def unplaced(self, reason: str, message: str) -> None:
        """No plan: Pending, conditions and an Event that say why, and no pods (all-or-nothing)."""
        fields = self.fields
        fields["phase"] = "Pending"
        fields["placement"] = None
        self.condition("Placed", "False", reason, message)
        self.condition("Ready", "False", reason, message)
        self.condition("Running", "False", reason, message)
        old: dict[str, Any] = next((c for c in self.status.get("conditions", []) if c.get("type") == "Placed"), {})
        if old.get("message") != message:
            self.event("Warning", "PlacementFailed", message)
        # All-or-nothing: no pod is created for a gang that cannot be placed whole, and no rank map is
        # rendered for it (there are no ranks to map): only the rendezvous Service.
        mine = await self.pods()
        if mine:
            self.event("Warning", "GangRemoved", f"removed {len(mine)} pods: the gang cannot be placed whole")
        await self.delete_pods()
        await apply_children(self.ctx, INFO, [rendezvous_service(self.owner, self.spec)], self.outcome)

    async def kueue_levels(self, name: str) -> list[str] | None:
        """The node labels of the Kueue Topology the spec names, or None (unplaced, with why)."""
        obj = await read_topology(self.ctx.kube, name)
        if obj is None:
            await self.unplaced(
                "TopologyNotFound",
                f"spec.topology.kueueTopology: no Kueue Topology named {name!r} "
                "(kueue.x-k8s.io v1beta1/v1alpha1); create it or set spec.topology.tiers",
            )
            return None
        try:
            return kueue_levels(obj)
        except ValueError as exc:
            await self.unplaced("InvalidTopology", f"spec.topology.kueueTopology: {exc}")
            return None

    async def hold_change(self, infeasible: Infeasible, running_nodes: int) -> None:
        """Keep the placed gang and its plan; say that the spec change waits, and why."""
        why = "; ".join([infeasible.reason, *infeasible.details])
        message = (
            f"spec change waits: the new gang ({self.spec.num_nodes} pods, {self.spec.world_size} GPUs) cannot be "
            f"placed ({why}); the running gang ({running_nodes} pods) is kept until it can"
        )
        pods = await self.pods()
        training_phase(self.outcome.draft, observe_gang(running_nodes, pods), suspended=False)
        self.condition("Placed", "False", "ChangeWaiting", message)
        old: dict[str, Any] = next((c for c in self.status.get("conditions", []) if c.get("type") == "Placed"), {})
        if old.get("message") != message:
            self.event("Warning", "ChangeWaiting", message)

    async def ungate_when_whole(self, pods: list[dict[str, Any]]) -> None:
        """Remove the gang gate from every pod, but only once all of them exist."""
        if len(pods) != self.spec.num_nodes:
            return
        gated = [p for p in pods if any(g.get("name") == GANG_GATE for g in p["spec"].get("schedulingGates") or [])]
        semaphore = asyncio.Semaphore(APPLY_CONCURRENCY)

        async def ungate(pod: dict[str, Any]) -> None:
            gates = [g for g in pod["spec"]["schedulingGates"] if g.get("name") != GANG_GATE]
            async with semaphore:
                await self.ctx.kube.patch_merge(
                    "v1", "Pod", pod["metadata"]["name"], self.ctx.namespace, {"spec": {"schedulingGates": gates}}
                )

        settled = await asyncio.gather(*(ungate(p) for p in gated), return_exceptions=True)
        errors = [r for r in settled if isinstance(r, BaseException)]
        if errors:
            self.outcome.progress.append(f"{len(gated) - len(errors)}/{len(gated)} pods ungated")
            raise errors[0]
        if gated:
            self.event("Normal", "Ungated", f"all {len(pods)} pods exist: scheduling gates removed")


async def training_pass(ctx: PassContext, spec: GEMTrainingSpec, outcome: Outcome) -> None:
    await TrainingPass(ctx, spec, outcome).run()


@kopf.on.resume(INFO.group, INFO.version, INFO.plural)
@kopf.on.create(INFO.group, INFO.version, INFO.plural)
@kopf.on.update(INFO.group, INFO.version, INFO.plural, field="spec")
@kopf.timer(INFO.group, INFO.version, INFO.plural, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
async def reconcile_training(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    await reconcile(INFO, training_pass, body=body, patch=patch, memo=memo, logger=logger)
