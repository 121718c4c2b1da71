"""KWOK's part: fake GPU nodes from a fleet description, and the pod lifecycle it plays on them.

A fleet is a list of plain `v1 Node` manifests (GPU capacity, topology labels). Each becomes a node
that KWOK manages (selected by an annotation, so KWOK never touches a real node). KWOK plays
`Stage`s: status patches applied when a selector matches, after a delay. The stages here walk a pod
through what a kubelet would report, one step at a time, so that controllers watching pods see every
transition: Pending (containers waiting) -> init containers running -> init containers terminated
(exit code 0, with the termination message taken from a pod annotation) -> Running (containers
started, not ready) -> Ready; a pod marked for deletion is removed (there is no kubelet to confirm it).
The model loader's init container (`model-loader`) of a pod without that annotation reports its run
time (the stage delay) as the real loader would, so `status.modelLoadSeconds` is filled. Failure
injection: a pod annotated `FAIL_ANNOTATION=<exit code>` fails, its containers terminated with that code.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_VALUE = "fake"
MANAGED_SELECTOR = f"{MANAGED_ANNOTATION}={MANAGED_VALUE}"
# Pod annotation whose value every init container reports as its termination message.
INIT_MESSAGE_ANNOTATION = "gem.dev/init-termination-message"
# Pod annotation that makes KWOK fail the pod: its value is the containers' exit code.
FAIL_ANNOTATION = "gem.dev/kwok-fail"
# The init container the operator names for the model loader (controllers/status.py reads its message).
LOADER_CONTAINER = "model-loader"
STAGE_API = "kwok.x-k8s.io/v1alpha1"
NODE_CONDITIONS = (
    ("Ready", "True", "KubeletReady"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID"),
    ("NetworkUnavailable", "False", "RouteCreated"),
)

Manifest = dict[str, Any]


def kwok_nodes(fleet: Iterable[Mapping[str, Any]]) -> list[Manifest]:
    """Node manifests to create: the fleet's, marked for KWOK, without conditions.

    Conditions are dropped so that KWOK's first node stage reports them with heartbeat times (the
    node lifecycle controller reads those); capacity, allocatable, labels and addresses are kept.
    """
    nodes: list[Manifest] = []
    for source in fleet:
        node = copy.deepcopy(dict(source))
        metadata = node.setdefault("metadata", {})
        metadata.setdefault("annotations", {})[MANAGED_ANNOTATION] = MANAGED_VALUE
        status = node.setdefault("status", {})
        status.pop("conditions", None)
        node.pop("apiVersion", None)
        node.pop("kind", None)
        nodes.append({"apiVersion": "v1", "kind": "Node", **node})
    return nodes


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


def _stage(
    name: str,
    kind: str,
    selector: list[dict[str, Any]],
    delay_ms: int,
    *,
    template: str = "",
    delete: bool = False,
    weight: int = 0,
) -> Manifest:
    next_step: dict[str, Any] = {"delete": True} if delete else {"statusTemplate": template}
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": selector},
        "next": next_step,
    }
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms}
    if weight:
        spec["weight"] = weight
    return {"apiVersion": STAGE_API, "kind": "Stage", "metadata": {"name": name}, "spec": spec}


_NODE_READY = """\
{{ $now := Now }}
conditions:
%s
phase: Running
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%%s" Version | Quote }}
"""

_CONDITION = """\
- type: %s
  status: "%s"
  reason: %s
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}"""


def _node_ready_template() -> str:
    return _NODE_READY % "\n".join(_CONDITION % condition for condition in NODE_CONDITIONS)


_POD_PENDING = """\
{{ $now := Now }}
phase: Pending
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
{{ $m := .metadata }}{{ $host := or .spec.hostNetwork false }}
podIP: {{ PodIPWith .spec.nodeName $host (or $m.uid "") (or $m.name "") (or $m.namespace "") | Quote }}
conditions:
- type: Initialized
  status: {{ if .spec.initContainers }}"False"{{ else }}"True"{{ end }}
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "False"
  reason: ContainersNotReady
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "False"
  reason: ContainersNotReady
  lastTransitionTime: {{ $now | Quote }}
{{ with .spec.initContainers }}
initContainerStatuses:
{{ range . }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state: {waiting: {reason: PodInitializing}}
{{ end }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state: {waiting: {reason: {{ if $.spec.initContainers }}PodInitializing{{ else }}ContainerCreating{{ end }}}}
{{ end }}
"""

_INIT_RUNNING = """\
{{ $now := Now }}
initContainerStatuses:
{{ range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: true
  restartCount: 0
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
"""

_INIT_DONE = """\
{{ $now := Now }}
{{ $message := "" }}
{{ with .metadata.annotations }}{{ with index . "ANNOTATION" }}{{ $message = . }}{{ end }}{{ end }}
{{ $loaded := `{"seconds": LOAD_SECONDS, "simulated": true}` }}
conditions:
- type: Initialized
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
initContainerStatuses:
{{ range $i, $c := .spec.initContainers }}
{{ $text := $message }}{{ if and (not $text) (eq $c.name "LOADER") }}{{ $text = $loaded }}{{ end }}
- name: {{ $c.name | Quote }}
  image: {{ $c.image | Quote }}
  ready: true
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      message: {{ $text | Quote }}
      startedAt: {{ (index $.status.initContainerStatuses $i).state.running.startedAt | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state: {waiting: {reason: ContainerCreating}}
{{ end }}
""".replace("ANNOTATION", INIT_MESSAGE_ANNOTATION).replace("LOADER", LOADER_CONTAINER)


def _init_done_template(step_delay_ms: int) -> str:
    """Init containers terminated; the loader's run time is the step it ran for."""
    return _INIT_DONE.replace("LOAD_SECONDS", f"{step_delay_ms / 1000:.3f}")


_POD_RUNNING = """\
{{ $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: true
  restartCount: 0
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
"""

_POD_READY = """\
{{ $now := Now }}
conditions:
- type: Ready
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range $i, $c := .spec.containers }}
- name: {{ $c.name | Quote }}
  image: {{ $c.image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state: {running: {startedAt: {{ (index $.status.containerStatuses $i).state.running.startedAt | Quote }}}}
{{ end }}
"""

_POD_FAILED = """\
{{ $now := Now }}
{{ $code := index .metadata.annotations "FAIL" }}
phase: Failed
conditions:
- type: Ready
  status: "False"
  reason: PodFailed
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "False"
  reason: PodFailed
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state: {terminated: {exitCode: {{ $code }}, reason: Error, finishedAt: {{ $now | Quote }}}}
{{ end }}
""".replace("FAIL", FAIL_ANNOTATION)

_READY_STATUS = '.status.conditions.[] | select( .type == "Ready" ) | .status'
_INITIALIZED_STATUS = '.status.conditions.[] | select( .type == "Initialized" ) | .status'
_LIVE = _expr(".metadata.deletionTimestamp", "DoesNotExist")


def stages(step_delay_ms: int = 200) -> list[Manifest]:
    """Node and pod stages; each pod step waits `step_delay_ms` so every transition is observable."""
    pending = [_LIVE, _expr(".status.phase", "In", "Pending")]
    return [
        _stage("gem-node-ready", "Node", [_expr(_READY_STATUS, "NotIn", "True")], 0, template=_node_ready_template()),
        _stage(
            "gem-pod-pending",
            "Pod",
            [_LIVE, _expr(".status.podIP", "DoesNotExist")],
            step_delay_ms,
            template=_POD_PENDING,
        ),
        _stage(
            "gem-pod-init-running",
            "Pod",
            [*pending, _expr(".status.initContainerStatuses.[].state.waiting.reason", "Exists")],
            step_delay_ms,
            template=_INIT_RUNNING,
        ),
        _stage(
            "gem-pod-init-completed",
            "Pod",
            [*pending, _expr(".status.initContainerStatuses.[].state.running.startedAt", "Exists")],
            step_delay_ms,
            template=_init_done_template(step_delay_ms),
        ),
        _stage(
            "gem-pod-running",
            "Pod",
            [*pending, _expr(".status.podIP", "Exists"), _expr(_INITIALIZED_STATUS, "In", "True")],
            step_delay_ms,
            template=_POD_RUNNING,
        ),
        _stage(
            "gem-pod-ready",
            "Pod",
            [_LIVE, _expr(".status.phase", "In", "Running"), _expr(_READY_STATUS, "NotIn", "True")],
            step_delay_ms,
            template=_POD_READY,
        ),
        # Weighted above the others (weight 0), so it wins whichever other stage also matches.
        _stage(
            "gem-pod-fail",
            "Pod",
            [
                _LIVE,
                _expr(f'.metadata.annotations["{FAIL_ANNOTATION}"]', "Exists"),
                _expr(".status.phase", "In", "Pending", "Running"),
            ],
            step_delay_ms,
            template=_POD_FAILED,
            weight=1,
        ),
        _stage(
            "gem-pod-delete",
            "Pod",
            [_expr(".metadata.deletionTimestamp", "Exists"), _expr(".metadata.finalizers", "DoesNotExist")],
            0,
            delete=True,
        ),
    ]


def stages_yaml(step_delay_ms: int = 200) -> str:
    """The stages as the multi-document YAML that `kwok --config` reads."""
    return yaml.safe_dump_all(stages(step_delay_ms), sort_keys=False)
