"""Names, labels and owner references shared by every child the operator creates.

Names are deterministic (``<cr>-<role>[-<index>]``) so that a restarted operator finds the
children it made before instead of creating duplicates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MANAGED_BY = "gem-operator"
LABEL_KIND = "gem.dev/kind"
LABEL_INSTANCE = "gem.dev/instance"
LABEL_ROLE = "gem.dev/role"
ANNOTATION_SPEC_HASH = "gem.dev/spec-hash"
# Labels copied from the custom resource to its pods (pod-group labels of gang schedulers).
# Not Kueue's: its queue label on bare pods would have Kueue admit a gang pod by pod; a
# GEMTraining's queue is served through one Workload for the whole gang (render/kueue.py).
PASSTHROUGH_LABEL_PREFIXES = ("scheduling.x-k8s.io/",)


@dataclass(frozen=True)
class Owner:
    """The custom resource that owns a set of children."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Owner:
        meta = body.get("metadata", {})
        return cls(
            api_version=str(body.get("apiVersion", "")),
            kind=str(body.get("kind", "")),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "default")),
            uid=str(meta.get("uid", "")),
            labels=tuple(sorted((meta.get("labels") or {}).items())),
        )

    def reference(self) -> dict[str, Any]:
        """ownerReference with controller=true so garbage collection removes the child with us."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def child_name(owner: Owner, role: str, index: int | None = None) -> str:
    return f"{owner.name}-{role}" if index is None else f"{owner.name}-{role}-{index}"


def selector_labels(owner: Owner, role: str) -> dict[str, str]:
    """The stable subset used in selectors (must never change for an existing child)."""
    return {
        LABEL_KIND: owner.kind.lower(),
        LABEL_INSTANCE: owner.name,
        LABEL_ROLE: role,
    }


def labels(owner: Owner, role: str, app: str) -> dict[str, str]:
    """Recommended app.kubernetes.io labels plus gem.dev ones."""
    return {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/component": role,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **selector_labels(owner, role),
    }


def passthrough_labels(owner: Owner) -> dict[str, str]:
    return {k: v for k, v in owner.labels if k.startswith(PASSTHROUGH_LABEL_PREFIXES)}


def metadata(
    owner: Owner, name: str, role: str, app: str, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": {**labels(owner, role, app), **(extra_labels or {})},
        "ownerReferences": [owner.reference()],
    }


def spec_hash(obj: Any) -> str:
    """Short stable digest of a desired spec, for children whose spec cannot be patched (pods)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def container_resources(requests: dict[str, str], limits: dict[str, str], gpus: int) -> dict[str, Any]:
    """Requests/limits with GPUs as an extended resource (requests must equal limits for GPUs)."""
    req = dict(requests)
    lim = dict(limits)
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
        lim["nvidia.com/gpu"] = str(gpus)
    out: dict[str, Any] = {}
    if req:
        out["requests"] = req
    if lim:
        out["limits"] = lim
    return out


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


NODE_CACHE_VOLUME = "node-cache"
NODE_CACHE_DIR = "/var/cache/gem-models"
"""Where loader containers mount the node cache (the cache DaemonSet serves the same hostPath to peers)."""
NODE_CACHE_HOST_PATH = "/var/cache/gem-models"


def node_cache_volume() -> dict[str, Any]:
    """The node-local loader cache: a hostPath, so every pod on a node (and its peer server) shares it."""
    return {"name": NODE_CACHE_VOLUME, "hostPath": {"path": NODE_CACHE_HOST_PATH, "type": "DirectoryOrCreate"}}


def loader_container(
    name: str,
    image: str,
    image_pull_policy: str,
    *,
    source: str,
    dest: str,
    volume_mounts: list[dict[str, Any]],
    manifest_uri: str | None = None,
    streams: int | None = None,
    part_size: int | None = None,
    node_cache: bool = True,
    peers: Sequence[str] = (),
    credentials_secret: str | None = None,
) -> dict[str, Any]:
    """A ``gem-load pull SOURCE DEST`` init container (docs/contracts.md, loader contract).

    Shared by every kind that fetches bytes into a pod (models for serving, checkpoints for
    training) so that caching, peers and credentials behave the same everywhere. Credentials
    reach the loader only through ``envFrom`` of the referenced Secret, never through the spec:
    the loader reads AWS_* / GOOGLE_* from its environment and has no flag for them.
    """
    args = ["pull", source, dest]
    if streams is not None:
        args += ["--streams", str(streams)]
    if part_size is not None:
        args += ["--part-size", str(part_size)]
    # Seconds and bytes of the load reach the operator through the init container's status.
    args += ["--progress", "json", "--termination-log", "/dev/termination-log"]
    if manifest_uri:
        args += ["--manifest", manifest_uri]
    if node_cache:
        args += ["--cache", NODE_CACHE_DIR]
    if peers:
        # Nodes whose cache already holds the bytes serve them first; the origin is the fallback.
        args += ["--peers", ",".join(peers)]
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["gem-load"],
        "args": args,
        "volumeMounts": list(volume_mounts),
    }
    if node_cache:
        container["volumeMounts"].append({"name": NODE_CACHE_VOLUME, "mountPath": NODE_CACHE_DIR})
    if credentials_secret:
        container["envFrom"] = [{"secretRef": {"name": credentials_secret}}]
    return container
