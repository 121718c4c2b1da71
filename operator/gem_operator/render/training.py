"""GEMTraining children: a headless Service for rendezvous, a ConfigMap, one pod per host.

Pods run ``torchrun -m gem_workloads.training`` with the torchrun-compatible environment of
docs/contracts.md. Node ranks follow pod index here; the placement planner (topology/) decides
which host each index lands on when it is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.render.common import (
    ANNOTATION_SPEC_HASH,
    GPU_TOLERATION,
    NODE_CACHE_VOLUME,
    Owner,
    child_name,
    container_resources,
    loader_container,
    metadata,
    node_cache_volume,
    passthrough_labels,
    selector_labels,
    spec_hash,
)
from gem_operator.render.pod_template import apply_workload_extras

APP = "gem-training"
ROLE_WORKER = "worker"
ROLE_RENDEZVOUS = "rdzv"
ROLE_CONFIG = "config"
DATA_SPEC_KEY = "data-spec.json"
"""ConfigMap key of the data spec the trainer reads with --data-spec (spec.training.data with sources)."""
CONFIG_MOUNT = "/etc/gem"
LABEL_NODE_RANK = "gem.dev/node-rank"
# Held on every pod of a placed gang until all of its pods exist (all-or-nothing).
GANG_GATE = "gem.dev/gang"
# Object-store checkpoints: one emptyDir for the trainer's upload staging and the pulled restore point.
SCRATCH_VOLUME = "checkpoint-scratch"
SCRATCH_MOUNT = "/gem"
STAGING_DIR = f"{SCRATCH_MOUNT}/staging"
RESTORE_DIR = f"{SCRATCH_MOUNT}/restore"
RESTORE_CONTAINER = "checkpoint-restore"
_CHECKPOINT_NAME = re.compile(r"step-\d+")
MAIN_CONTAINER = "trainer"
TERMINATION_LOG = "/dev/termination-log"
#: /dev/shm for NCCL and DataLoader workers when spec.workload.shmSize is unset (a container's own is 64 MiB).
DEFAULT_SHM_SIZE = "16Gi"


@dataclass(frozen=True)
class TrainingChildren:
    service: dict[str, Any]
    config: dict[str, Any]
    pods: list[dict[str, Any]]

    def all(self) -> list[dict[str, Any]]:
        return [self.service, self.config, *self.pods]


def rank_map(
    owner: Owner,
    spec: GEMTrainingSpec,
    node_names: Sequence[str | None],
    node_topology: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """Every pod's node rank, host, topology domains, global ranks and mesh coordinates."""
    mesh = spec.parallelism.mesh
    coords = mesh.coords_table()
    nproc = spec.nproc_per_node
    nodes = []
    for node_rank in range(spec.num_nodes):
        first = node_rank * nproc
        ranks = list(range(first, first + nproc))
        nodes.append(
            {
                "nodeRank": node_rank,
                "pod": child_name(owner, ROLE_WORKER, node_rank),
                "node": node_names[node_rank],
                "topology": dict((node_topology or {}).get(node_names[node_rank] or "", {})),
                "ranks": ranks,
                "coords": coords[first : first + nproc].tolist(),
            }
        )
    return {"mesh": mesh.as_dict(), "ep": mesh.ep, "nodes": nodes}


def _config(owner: Owner, spec: GEMTrainingSpec, embedding_group: int) -> dict[str, Any]:
    return {
        "name": owner.name,
        "namespace": owner.namespace,
        "preset": spec.training.preset,
        "data": "sources" if spec.training.data.uses_sources else spec.training.data.builtin_name,
        "steps": spec.training.steps,
        "checkpoint": spec.checkpoint.to_wire(),
        "mesh": spec.parallelism.mesh.as_dict(),
        "ep": spec.parallelism.ep,
        "embeddingShardingGroup": embedding_group,
        "failurePolicy": spec.failure_policy.to_wire(),
        "trainer": "builtin" if spec.training.command is None else "command",
        **({"export": spec.export.to_wire()} if spec.export is not None else {}),
    }


def _env(
    owner: Owner, spec: GEMTrainingSpec, node_rank: int, resume_from: str | None, embedding_group: int
) -> list[dict[str, Any]]:
    service = child_name(owner, ROLE_RENDEZVOUS)
    master = f"{child_name(owner, ROLE_WORKER, 0)}.{service}.{owner.namespace}.svc"
    nproc = spec.nproc_per_node
    mesh = spec.parallelism.mesh
    coords = [list(mesh.coords(r)) for r in range(node_rank * nproc, (node_rank + 1) * nproc)]
    torchrun = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(spec.rendezvous_port),
        "NNODES": str(spec.num_nodes),
        "NODE_RANK": str(node_rank),
        "NPROC_PER_NODE": str(nproc),
    }
    values: dict[str, str] = {}
    for key, value in torchrun.items():
        values[key] = value
        values[f"PET_{key}"] = value
    values.update(
        {
            "WORLD_SIZE": str(spec.world_size),
            "GEM_MESH_SHAPE": spec.parallelism.mesh_shape_env(),
            "GEM_EP": str(spec.parallelism.ep),
            "GEM_MESH_COORDS": json.dumps(coords, separators=(",", ":")),
            "GEM_EMBEDDING_SHARDING_GROUP": str(embedding_group),
            "GEM_CONFIG_FILE": f"{CONFIG_MOUNT}/config.json",
            "GEM_RANK_MAP_FILE": f"{CONFIG_MOUNT}/rankmap.json",
            "GEM_CHECKPOINT_URI": spec.checkpoint.uri,
            "GEM_RESUME_FROM": resume_from or "",
            # Where the trainer reports its checkpoint and model versions: the container's termination message.
            "GEM_TERMINATION_LOG": TERMINATION_LOG,
        }
    )
    if spec.export is not None:
        values["GEM_EXPORT_URI"] = spec.export.uri
    if spec.checkpoint.object_store:
        values["GEM_CHECKPOINT_STAGING"] = STAGING_DIR
        if _restores(spec, resume_from):
            values["GEM_RESTORE_DIR"] = f"{RESTORE_DIR}/{resume_from}"
    env = [{"name": k, "value": v} for k, v in values.items()]
    env += [{"name": e.name, "value": e.value} for e in spec.workload.env]
    return env


def trainer_args(spec: GEMTrainingSpec) -> list[str]:
    """torchrun's arguments: the built-in trainer, or the user's command under the same launch.

    ``--no-python`` makes torchrun exec the command as given (a script with its interpreter, a binary),
    with the same per-process env (RANK, LOCAL_RANK, WORLD_SIZE) on top of the pod's.
    """
    job = spec.training
    if job.command is not None:
        return ["--no-python", *job.command, *job.args]
    export = spec.export
    exporting = (
        []
        if export is None
        else [
            "--export",
            export.uri,
            "--export-every",
            str(export.interval_steps),
            "--holdout-examples",
            str(export.holdout_examples),
            *(f"--holdout-source={name}={uri}" for name, uri in sorted(export.holdout_sources.items())),
        ]
    )
    return [
        "-m",
        "gem_workloads.training",
        "--preset",
        job.preset,
        *_data_args(spec),
        "--steps",
        str(job.steps),
        "--checkpoint-dir",
        spec.checkpoint.uri,
        "--checkpoint-every",
        str(spec.checkpoint.interval_steps),
        *exporting,
    ]


def _host_label(spec: GEMTrainingSpec) -> str:
    """The node label that pins a pod to its host: the spec's first tier, else the hostname label."""
    tiers = spec.topology.tiers
    return tiers[0].label if tiers else "kubernetes.io/hostname"


def _pod(
    owner: Owner,
    spec: GEMTrainingSpec,
    node_rank: int,
    node_name: str | None,
    resume_from: str | None,
    embedding_group: int,
    peers: Sequence[str] = (),
    node_cache: bool = True,
) -> dict[str, Any]:
    name = child_name(owner, ROLE_WORKER, node_rank)
    wl = spec.workload
    args = [*trainer_args(spec), *wl.args]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": name,
        "subdomain": child_name(owner, ROLE_RENDEZVOUS),
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": MAIN_CONTAINER,
                "image": wl.image_for(spec.nproc_per_node),
                "imagePullPolicy": wl.image_pull_policy,
                "command": ["torchrun"],
                "args": args,
                "env": _env(owner, spec, node_rank, resume_from, embedding_group),
                "ports": [{"name": "rendezvous", "containerPort": spec.rendezvous_port}],
                "resources": container_resources(
                    wl.resources.requests.to_wire(), wl.resources.limits.to_wire(), spec.nproc_per_node
                ),
                "volumeMounts": [{"name": "gem-config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
                # The trainer reports its newest checkpoint here on exit (docs/contracts.md).
                "terminationMessagePath": TERMINATION_LOG,
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
        "volumes": [{"name": "gem-config", "configMap": {"name": child_name(owner, ROLE_CONFIG)}}],
    }
    if spec.checkpoint.object_store:
        _object_store_checkpoints(pod_spec, spec, resume_from, peers, node_cache)
    _export_credentials(pod_spec["containers"][0], spec)
    _data_credentials(pod_spec, spec)
    if wl.service_account_name:
        pod_spec["serviceAccountName"] = wl.service_account_name
    if node_name:
        # Pinned by required node affinity, not nodeName: a pod with nodeName cannot carry
        # scheduling gates, and the gate is what makes the gang all-or-nothing.
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": _host_label(spec), "operator": "In", "values": [node_name]}]}
                    ]
                }
            }
        }
        pod_spec["schedulingGates"] = [{"name": GANG_GATE}]
    extra = {**passthrough_labels(owner), LABEL_NODE_RANK: str(node_rank)}
    meta = metadata(owner, name, ROLE_WORKER, APP, extra)
    apply_workload_extras({"metadata": meta, "spec": pod_spec}, MAIN_CONTAINER, wl, shm_default=DEFAULT_SHM_SIZE)
    # GEM_RESUME_FROM only matters when a pod starts; a newer checkpoint must not replace running pods.
    meta["annotations"] = {**meta.get("annotations", {}), ANNOTATION_SPEC_HASH: spec_hash(_without_resume(pod_spec))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}


def _export_credentials(trainer: dict[str, Any], spec: GEMTrainingSpec) -> None:
    """The export's own Secret beside the checkpoint's (envFrom; the later one wins on a shared key)."""
    ref = spec.export.credentials_secret_ref if spec.export is not None else None
    if ref is None:
        return
    sources = trainer.setdefault("envFrom", [])
    if {"secretRef": {"name": ref.name}} not in sources:
        sources.append({"secretRef": {"name": ref.name}})


def _data_args(spec: GEMTrainingSpec) -> list[str]:
    """``--data-spec`` on the ConfigMap's data-spec.json for Parquet sources, else ``--data`` and the built-in name."""
    data = spec.training.data
    if data.uses_sources:
        return ["--data-spec", f"{CONFIG_MOUNT}/{DATA_SPEC_KEY}"]
    return ["--data", data.builtin_name]


def _data_credentials(pod_spec: dict[str, Any], spec: GEMTrainingSpec) -> None:
    """Each data source's Secret through envFrom, prefixed GEM_DATA_<NAME>_ (the trainer looks there first)."""
    trainer = pod_spec["containers"][0]
    for ds in spec.training.data.datasets():
        if ds.credentials_secret_ref is None:
            continue
        prefix = "GEM_DATA_" + ds.name.upper().replace("-", "_") + "_"
        trainer.setdefault("envFrom", []).append(
            {"prefix": prefix, "secretRef": {"name": ds.credentials_secret_ref.name}}
        )


def _restores(spec: GEMTrainingSpec, resume_from: str | None) -> bool:
    """Object-store checkpoint and a resume point: the pod pulls it before the trainer starts."""
    return spec.checkpoint.object_store and _CHECKPOINT_NAME.fullmatch(resume_from or "") is not None


def _object_store_checkpoints(
    pod_spec: dict[str, Any],
    spec: GEMTrainingSpec,
    resume_from: str | None,
    peers: Sequence[str],
    node_cache: bool = True,
) -> None:
    """Wire s3:// / gs:// checkpoints: scratch volume, credentials, and the restore init container.

    The trainer uploads checkpoints itself (staging them on the scratch volume) and reads the Secret's
    AWS_* / GOOGLE_* keys through envFrom. On a resume, ``gem-load pull`` fetches the checkpoint into
    the scratch volume first (node cache, then peers, then the bucket; verified against the
    checkpoint's manifest), so a gang restart on the same nodes reads it from the node cache.
    """
    ckpt = spec.checkpoint
    secret = ckpt.credentials_secret_ref.name if ckpt.credentials_secret_ref else None
    trainer = pod_spec["containers"][0]
    trainer["volumeMounts"].append({"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT})
    if secret:
        trainer["envFrom"] = [{"secretRef": {"name": secret}}]
    pod_spec["volumes"].append({"name": SCRATCH_VOLUME, "emptyDir": {}})
    if not _restores(spec, resume_from):
        return
    source = f"{ckpt.uri.rstrip('/')}/{resume_from}"
    pod_spec["initContainers"] = [
        loader_container(
            RESTORE_CONTAINER,
            spec.workload.image_for(spec.nproc_per_node),
            spec.workload.image_pull_policy,
            source=source,
            dest=f"{RESTORE_DIR}/{resume_from}",
            volume_mounts=[{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT}],
            manifest_uri=f"{source}/manifest.json",
            peers=peers,
            node_cache=node_cache,
            credentials_secret=secret,
        )
    ]
    if node_cache:
        pod_spec["volumes"].append(node_cache_volume())


def _without_resume(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """The pod spec minus what depends on the resume point (env, restore init container, node cache).

    GEM_RESUME_FROM only matters when a pod starts; a newer checkpoint must not replace running pods.
    """
    container = pod_spec["containers"][0]
    env = [e for e in container["env"] if e["name"] not in ("GEM_RESUME_FROM", "GEM_RESTORE_DIR")]
    out = {**pod_spec, "containers": [{**container, "env": env}, *pod_spec["containers"][1:]]}
    inits = [c for c in pod_spec.get("initContainers", []) if c["name"] != RESTORE_CONTAINER]
    out.pop("initContainers", None)
    if inits:
        out["initContainers"] = inits
    if len(inits) != len(pod_spec.get("initContainers", [])):
        out["volumes"] = [v for v in pod_spec["volumes"] if v["name"] != NODE_CACHE_VOLUME]
    return out


def rendezvous_service(owner: Owner, spec: GEMTrainingSpec) -> dict[str, Any]:
    """The headless Service the pods rendezvous through (all a gang that cannot be placed keeps)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, child_name(owner, ROLE_RENDEZVOUS), ROLE_RENDEZVOUS, APP),
        "spec": {
            "clusterIP": "None",
            # Rendezvous must resolve before pods are Ready (they become Ready only after it).
            "publishNotReadyAddresses": True,
            "selector": selector_labels(owner, ROLE_WORKER),
            "ports": [{"name": "rendezvous", "port": spec.rendezvous_port, "targetPort": spec.rendezvous_port}],
        },
    }


def worker_pod(owner: Owner, spec: GEMTrainingSpec) -> dict[str, Any]:
    """One unpinned worker (node rank 0, no resume point): the shape every pod of the gang shares.

    What Kueue's podSet describes; it costs one pod, not the gang and its rank map.
    """
    return _pod(owner, spec, 0, None, None, spec.embedding_group())


def render_training(
    owner: Owner,
    spec: GEMTrainingSpec,
    *,
    node_names: Sequence[str | None] | None = None,
    resume_from: str | None = None,
    placement_json: Mapping[str, Any] | None = None,
    node_topology: Mapping[str, Mapping[str, str]] | None = None,
    embedding_sharding_group: int | None = None,
    peers: Sequence[str] = (),
    node_cache: bool = True,
) -> TrainingChildren:
    """All children of a GEMTraining. ``spec.suspend`` renders the gang with no pods.

    With ``node_names`` (by node rank) every pod is pinned to its host and gated; the caller
    removes the gates once the whole gang exists. ``embedding_sharding_group`` is the group the
    planner aligned to the placement (``GEMTrainingSpec.embedding_group`` decides which applies).
    ``peers`` are the model-cache peer URLs the checkpoint-restore init container may read from;
    ``node_cache`` False (GEM_NODE_CACHE=off) restores without the node cache's hostPath.
    """
    embedding_group = spec.embedding_group(embedding_sharding_group)
    nodes: Sequence[str | None] = node_names if node_names is not None else [None] * spec.num_nodes
    if len(nodes) != spec.num_nodes:
        raise ValueError(f"placement has {len(nodes)} nodes, the gang needs {spec.num_nodes}")
    files = {
        "config.json": json.dumps(_config(owner, spec, embedding_group), indent=2, sort_keys=True),
        "rankmap.json": json.dumps(rank_map(owner, spec, nodes, node_topology), indent=2, sort_keys=True),
        "placement.json": json.dumps(placement_json or {"planner": "none"}, indent=2, sort_keys=True),
    }
    if spec.training.data.uses_sources:
        files[DATA_SPEC_KEY] = json.dumps(spec.training.data.trainer_spec(), indent=2, sort_keys=True)
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(owner, child_name(owner, ROLE_CONFIG), ROLE_CONFIG, APP),
        "data": files,
    }
    pods = (
        []
        if spec.suspend
        else [
            _pod(owner, spec, i, nodes[i], resume_from, embedding_group, peers, node_cache)
            for i in range(spec.num_nodes)
        ]
    )
    return TrainingChildren(service=rendezvous_service(owner, spec), config=config, pods=pods)
