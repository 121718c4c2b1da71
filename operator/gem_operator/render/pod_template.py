"""Merging ``spec.workload.podTemplate`` and ``shmSize`` into a pod the operator rendered (pure).

Additions only: the operator's own fields were refused when the spec was parsed
(``api/pod_template.py``), so a merge never has to choose between the two. Lists are appended
(tolerations, imagePullSecrets, volumes, env, volumeMounts, containers); the user's node
affinity is ANDed with the operator's pinning by adding the pin's expressions to every required
term (node selector terms are ORed, expressions inside one are ANDed).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from gem_operator.api.common import Workload
from gem_operator.api.pod_template import OPERATOR_VOLUMES, SHM_PATH, ContainerTemplate, PodTemplate

SHM_VOLUME = "dshm"
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
assert SHM_VOLUME in OPERATOR_VOLUMES
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _wire(model: Any) -> Any:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def _container_fields(template: ContainerTemplate) -> dict[str, Any]:
    """The container as written, without empty defaults."""
    out: dict[str, Any] = _wire(template)
    for key in ("env", "envFrom", "volumeMounts"):
        if not out.get(key):
            out.pop(key, None)
    resources = out.get("resources")
    if resources is not None:
        resources = {k: v for k, v in resources.items() if v}
        if resources:
            out["resources"] = resources
        else:
            out.pop("resources")
    return out


def _merge_main(main: dict[str, Any], template: ContainerTemplate) -> None:
    for key, value in _container_fields(template).items():
        if key == "name":
            continue
        if key == "resources":
            res = main.setdefault("resources", {})
            for part, extra in value.items():
                res[part] = {**res.get(part, {}), **extra}
        elif isinstance(value, list):
            main[key] = [*main.get(key, []), *copy.deepcopy(value)]
        elif isinstance(value, dict) and isinstance(main.get(key), dict):
            main[key] = {**main[key], **copy.deepcopy(value)}
        else:
            main[key] = copy.deepcopy(value)


def _and_node_affinity(ours: Mapping[str, Any] | None, theirs: Mapping[str, Any]) -> dict[str, Any]:
    """Node affinity that requires both: every user term gets the operator's expressions added."""
    out = copy.deepcopy(dict(theirs))
    pin_terms = ((ours or {}).get(_REQUIRED) or {}).get("nodeSelectorTerms") or []
    if pin_terms:
        pin = pin_terms[0]  # the operator renders one term
        user_terms = (out.get(_REQUIRED) or {}).get("nodeSelectorTerms") or []
        terms = []
        for term in user_terms or [{}]:
            merged = dict(term)
            for key in ("matchExpressions", "matchFields"):
                if pin.get(key):
                    merged[key] = [*term.get(key, []), *pin[key]]
            terms.append(merged)
        out[_REQUIRED] = {"nodeSelectorTerms": terms}
    if ours and ours.get(_PREFERRED):
        out[_PREFERRED] = [*ours[_PREFERRED], *out.get(_PREFERRED, [])]
    return out


def shm_volume(size: str | None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The memory-backed /dev/shm volume and its mount, or None for no size or "0"."""
    number = _NUMBER.match(size or "")
    if number is None or float(number.group()) == 0:
        return None
    volume = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
    return volume, {"name": SHM_VOLUME, "mountPath": SHM_PATH}


def apply_workload_extras(
    pod: dict[str, Any],
    main_name: str,
    workload: Workload,
    *,
    shm_default: str | None = None,
) -> None:
    """Merge the pod template and /dev/shm into ``pod`` ({metadata, spec}) in place.

    ``main_name`` is the operator's main container; ``shm_default`` the kind's /dev/shm size when
    the spec gives none (16Gi for training).
    """
    spec: dict[str, Any] = pod["spec"]
    main = next(c for c in spec["containers"] if c["name"] == main_name)
    shm = shm_volume(workload.shm_size if workload.shm_size is not None else shm_default)
    if shm is not None:
        spec.setdefault("volumes", []).append(shm[0])
        main.setdefault("volumeMounts", []).append(shm[1])
    template: PodTemplate | None = workload.pod_template
    if template is None:
        return
    meta = pod.setdefault("metadata", {})
    if template.metadata.labels:
        meta["labels"] = {**template.metadata.labels, **meta.get("labels", {})}
    if template.metadata.annotations:
        meta["annotations"] = {**template.metadata.annotations, **meta.get("annotations", {})}
    ts = template.spec
    if ts.node_selector:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **ts.node_selector}
    if ts.tolerations:
        tolerations = list(spec.get("tolerations", []))
        for tol in (_wire(t) for t in ts.tolerations):
            if tol not in tolerations:
                tolerations.append(tol)
        spec["tolerations"] = tolerations
    if ts.affinity is not None:
        ours = dict(spec.get("affinity") or {})
        theirs = _wire(ts.affinity)
        if "nodeAffinity" in theirs:
            ours["nodeAffinity"] = _and_node_affinity(ours.get("nodeAffinity"), theirs.pop("nodeAffinity"))
        ours.update(theirs)
        spec["affinity"] = ours
    for field, key in (
        ("priority_class_name", "priorityClassName"),
        ("scheduler_name", "schedulerName"),
        ("runtime_class_name", "runtimeClassName"),
    ):
        value = getattr(ts, field)
        if value is not None:
            spec[key] = value
    if ts.image_pull_secrets:
        spec["imagePullSecrets"] = [*spec.get("imagePullSecrets", []), *(_wire(s) for s in ts.image_pull_secrets)]
    if ts.volumes:
        spec["volumes"] = [*spec.get("volumes", []), *(_wire(v) for v in ts.volumes)]
    if ts.host_network is not None:
        spec["hostNetwork"] = ts.host_network
        if ts.host_network and ts.dns_policy is None:
            # Service names (the rendezvous, peers) must still resolve on the host network.
            spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if ts.dns_policy is not None:
        spec["dnsPolicy"] = ts.dns_policy
    if ts.security_context is not None:
        spec["securityContext"] = copy.deepcopy(ts.security_context)
    for container in ts.containers:
        if container.name == main_name:
            _merge_main(main, container)
        else:
            spec["containers"].append(_container_fields(container))
    if ts.init_containers:
        spec["initContainers"] = [*(_container_fields(c) for c in ts.init_containers), *spec.get("initContainers", [])]
