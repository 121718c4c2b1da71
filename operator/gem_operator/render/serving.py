"""RankingService and SolarisPrecompute children: a Deployment of GPU pods (plus a Service for the ranker).

Every pod loads its model with ``gem-load pull`` in an init container into a shared volume, with a
node-local cache on a hostPath so pods on one node download a model once (docs/contracts.md). With
``spec.precision`` other than fp32 a second init container chooses the serving precision plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gem_operator.api.serving import RankingServiceSpec, ReplicaPoolSpec, SolarisPrecomputeSpec
from gem_operator.render.common import (
    GPU_TOLERATION,
    Owner,
    child_name,
    container_resources,
    loader_container,
    metadata,
    node_cache_volume,
    selector_labels,
)
from gem_operator.render.pod_template import apply_workload_extras

ROLE_SERVER = "server"
ROLE_PRECOMPUTE = "precompute"
MODEL_DIR = "/var/lib/gem/model"
PRECOMPUTE_METRICS_PORT = 9102


def desired_replicas_from_spec(spec: RankingServiceSpec | SolarisPrecomputeSpec) -> int:
    """Replicas before any metric is read: spec.replicas, kept inside the autoscaler's bounds."""
    scaling = spec.autoscaling
    if not scaling.enabled:
        return spec.replicas
    return max(scaling.min_replicas, min(spec.replicas, scaling.max_replicas))


def _loader_container(spec: ReplicaPoolSpec, peers: Sequence[str], node_cache: bool) -> dict[str, Any]:
    model = spec.model
    return loader_container(
        "model-loader",
        spec.workload.image_for(spec.gpus_per_replica),
        spec.workload.image_pull_policy,
        source=model.origin,
        dest=MODEL_DIR,
        volume_mounts=[{"name": "model", "mountPath": MODEL_DIR}],
        manifest_uri=model.manifest_uri,
        streams=model.loader.streams,
        part_size=model.loader.part_size_mi_b * 1024 * 1024,
        node_cache=node_cache,
        peers=peers if model.loader.peer_cache else (),
        credentials_secret=model.credentials_secret_ref.name if model.credentials_secret_ref else None,
    )


def precision_args(spec: ReplicaPoolSpec) -> list[str]:
    """The server's / workers' ``--precision`` flag (absent for fp32: today's pods stay byte-identical)."""
    return [] if spec.precision == "fp32" else ["--precision", spec.precision]


def _precision_container(spec: ReplicaPoolSpec, main: dict[str, Any]) -> dict[str, Any]:
    """Init container that chooses the precision plan on the pod's own device, after the model loads.

    It writes ``gem-precision.json`` into the model volume (read-only for the main container, which
    applies the recorded plan) and the plan's summary to its termination message (``status.precision``).
    """
    return {
        "name": "precision-plan",
        "image": main["image"],
        "imagePullPolicy": main["imagePullPolicy"],
        "command": ["python"],
        "args": ["-m", "gem_workloads.serving.plan_precision", "--model", MODEL_DIR, *precision_args(spec)],
        "env": [{"name": "GEM_MODEL_DIR", "value": MODEL_DIR}],
        "resources": main["resources"],
        "volumeMounts": [{"name": "model", "mountPath": MODEL_DIR}],
    }


def _pod_template(
    owner: Owner,
    spec: ReplicaPoolSpec,
    role: str,
    app: str,
    main: dict[str, Any],
    peers: Sequence[str],
    node_cache: bool = True,
) -> dict[str, Any]:
    wl = spec.workload
    node_cache = node_cache and spec.model.loader.node_cache
    main = {
        "image": wl.image_for(spec.gpus_per_replica),
        "imagePullPolicy": wl.image_pull_policy,
        "resources": container_resources(
            wl.resources.requests.to_wire(), wl.resources.limits.to_wire(), spec.gpus_per_replica
        ),
        **main,
    }
    main["env"] = [
        {"name": "GEM_MODEL_URI", "value": spec.model.origin},
        {"name": "GEM_MODEL_DIR", "value": MODEL_DIR},
        *main.get("env", []),
        *({"name": e.name, "value": e.value} for e in wl.env),
    ]
    main["volumeMounts"] = [{"name": "model", "mountPath": MODEL_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "model", "emptyDir": {}}]
    if node_cache:
        volumes.append(node_cache_volume())
    pod_spec: dict[str, Any] = {
        "initContainers": [
            _loader_container(spec, peers, node_cache),
            *([_precision_container(spec, main)] if spec.precision != "fp32" else []),
        ],
        "containers": [main],
        "volumes": volumes,
    }
    if spec.gpus_per_replica:
        pod_spec["tolerations"] = [GPU_TOLERATION]
    if wl.service_account_name:
        pod_spec["serviceAccountName"] = wl.service_account_name
    template_meta = metadata(owner, "", role, app)
    template = {"metadata": {"labels": template_meta["labels"]}, "spec": pod_spec}
    apply_workload_extras(template, main["name"], wl)
    return template


def _deployment(owner: Owner, role: str, app: str, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(owner, child_name(owner, role), role, app),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(owner, role)},
            # Never take a loaded GPU replica away before its replacement is Ready.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": template,
        },
    }


def precompute_wiring(precompute: SolarisPrecomputeSpec) -> list[str]:
    """Ranker arguments that connect it to a SolarisPrecompute pool: the same store, key prefix,
    fallback tiers and foundation version as the pool's workers, and the pool's candidate stream."""
    args = [
        "--embedding-store",
        precompute.store.url,
        "--store-key-prefix",
        precompute.store.key_prefix,
        "--fallback",
        ",".join(precompute.fallback.tiers),
        "--publish-url",
        precompute.source.url,
        "--publish-stream",
        precompute.source.stream,
    ]
    if precompute.foundation_version:
        args += ["--store-version", precompute.foundation_version]
    return args


def render_ranking_service(
    owner: Owner,
    spec: RankingServiceSpec,
    replicas: int,
    peers: Sequence[str] = (),
    node_cache: bool = True,
    precompute: SolarisPrecomputeSpec | None = None,
) -> list[dict[str, Any]]:
    """Deployment + ClusterIP Service of the ranking servers (``peers``: model-cache peer URLs;
    ``precompute``: the spec of ``spec.precomputeRef``, when it exists).

    ``node_cache`` False (the operator's GEM_NODE_CACHE=off) drops the hostPath whatever the spec says.
    """
    app = "gem-ranking"
    args = [
        "-m",
        "gem_workloads.serving",
        "--model",
        MODEL_DIR,
        "--port",
        str(spec.port),
        "--max-batch-size",
        str(spec.max_batch_size),
        "--max-candidates",
        str(spec.max_candidates),
        *(precompute_wiring(precompute) if precompute is not None else []),
        *precision_args(spec),
        *spec.workload.args,
    ]
    main: dict[str, Any] = {
        "name": "ranker",
        "command": ["python"],
        "args": args,
        "env": [{"name": "GEM_SERVING_PORT", "value": str(spec.port)}],
        "ports": [{"name": "http", "containerPort": spec.port}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
    }
    if precompute is not None and precompute.store.credentials_secret_ref:
        main["envFrom"] = [{"secretRef": {"name": precompute.store.credentials_secret_ref}}]
    template = _pod_template(owner, spec, ROLE_SERVER, app, main, peers, node_cache)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, child_name(owner, ROLE_SERVER), ROLE_SERVER, app),
        "spec": {
            "selector": selector_labels(owner, ROLE_SERVER),
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }
    return [_deployment(owner, ROLE_SERVER, app, replicas, template), service]


def render_precompute(
    owner: Owner, spec: SolarisPrecomputeSpec, replicas: int, peers: Sequence[str] = (), node_cache: bool = True
) -> list[dict[str, Any]]:
    """Deployment of the Solaris precompute workers (``peers``: model-cache peer URLs)."""
    app = "gem-precompute"
    args = [
        "-m",
        "gem_workloads.precompute",
        "--model",
        MODEL_DIR,
        "--store",
        spec.store.url,
        "--ttl-seconds",
        str(spec.store.ttl_seconds),
        "--key-prefix",
        spec.store.key_prefix,
        "--source",
        spec.source.url,
        "--stream",
        spec.source.stream,
        "--group",
        spec.source.consumer_group,
        "--batch-size",
        str(spec.batch_size),
        "--fallback",
        ",".join(spec.fallback.tiers),
        *(["--foundation-version", spec.foundation_version] if spec.foundation_version else []),
        *precision_args(spec),
        *spec.workload.args,
    ]
    main: dict[str, Any] = {
        "name": "precompute",
        "command": ["python"],
        "args": [*args, "--metrics-port", str(PRECOMPUTE_METRICS_PORT)],
        # Backlog and oldest-item age for the autoscaler (docs/contracts.md).
        "ports": [{"name": "metrics", "containerPort": PRECOMPUTE_METRICS_PORT}],
    }
    if spec.store.credentials_secret_ref:
        main["envFrom"] = [{"secretRef": {"name": spec.store.credentials_secret_ref}}]
    template = _pod_template(owner, spec, ROLE_PRECOMPUTE, app, main, peers, node_cache)
    return [_deployment(owner, ROLE_PRECOMPUTE, app, replicas, template)]


def pool_selector(owner: Owner, role: str) -> str:
    """Label selector string of a pool's pods (status.selector, for the scale subresource)."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(owner, role).items())
