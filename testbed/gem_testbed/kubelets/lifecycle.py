"""The pod-lifecycle simulator: a tiny kube-scheduler + kubelet for the embedded cluster.

A background task that binds pending pods to nodes (rules in `scheduling`), walks bound
pods Pending -> Running -> Ready with configurable delays, fails pods or nodes on request,
and runs the minimal Deployment/DaemonSet controllers. It writes only through the
emulator's API methods, so every change reaches watchers (kopf) as a normal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
from typing import TYPE_CHECKING, Any

from gem_testbed.emulator import Emulator, Resource
from gem_testbed.emulator.objects import Obj
from gem_testbed.kubelets.scheduling import FINISHED, choose_node
from gem_testbed.kubelets.workloads import reconcile_daemonset, reconcile_deployment, simulated_init_message

if TYPE_CHECKING:
    from gem_testbed.kubelets.processes import ProcessKubelet

logger = logging.getLogger(__name__)

PODS = Resource("", "v1", "pods")
NODES = Resource("", "v1", "nodes")
DEPLOYMENTS = Resource("apps", "v1", "deployments")
DAEMONSETS = Resource("apps", "v1", "daemonsets")
_WATCHED = {PODS, NODES, DEPLOYMENTS, DAEMONSETS}


@dataclasses.dataclass
class LifecycleConfig:
    """Delays in seconds; 0 makes a bound pod Running and Ready in one step."""

    start_delay: float = 0.2  # bound -> Running (image pull, container start)
    ready_delay: float = 0.2  # Running -> Ready (readiness probe)
    idle_interval: float = 1.0  # how often to look again when nothing is due
    # After a change, wait this long before the next pass so that a burst (a gang of n pods
    # created one by one) costs one pass, not n passes over every pod.
    coalesce: float = 0.05
    # Init containers (e.g. the model loader) run one after another before the containers start;
    # this is each one's run time (their termination message: `simulated_init_message`).
    init_delay: float = 0.2


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(pod: Obj, updates: dict[str, tuple[str, str, str]]) -> list[Obj]:
    """Set (status, reason, message) per condition type, keeping others (readiness gates)
    and keeping lastTransitionTime when the status does not change."""
    existing = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    for kind, (status, reason, message) in updates.items():
        old = existing.get(kind) or {}
        condition: Obj = {"type": kind, "status": status}
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        condition["lastTransitionTime"] = (
            old["lastTransitionTime"] if old.get("status") == status and "lastTransitionTime" in old else _now()
        )
        existing[kind] = condition
    return list(existing.values())


def _gates_ready(pod: Obj) -> bool:
    wanted = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
    have = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    return all(have.get(kind) == "True" for kind in wanted)


def _container_status(container: Obj, index: int, *, ready: bool, state: Obj, init: bool = False) -> Obj:
    """One entry of `containerStatuses` (or, with ``init``, `initContainerStatuses`)."""
    return {
        "name": container.get("name", f"{'init' if init else 'c'}{index}"),
        "image": container.get("image", ""),
        "imageID": "",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }


def _container_statuses(pod: Obj, *, ready: bool, started_at: str) -> list[Obj]:
    return [
        _container_status(c, i, ready=ready, state={"running": {"startedAt": started_at}})
        for i, c in enumerate((pod.get("spec") or {}).get("containers") or [])
    ]


class PodLifecycle:
    """Runs as one asyncio task on the emulator's loop; see the module docstring."""

    def __init__(
        self, emulator: Emulator, config: LifecycleConfig | None = None, processes: ProcessKubelet | None = None
    ) -> None:
        self.emulator = emulator
        self.processes = processes  # pods it handles run as local processes (kubelets/processes.py)
        self.config = config or LifecycleConfig()
        self._wake = asyncio.Event()
        self._since: dict[str, float] = {}  # pod uid -> loop time of its last phase step
        self._ips: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        emulator.listeners.append(self._on_change)

    def _on_change(self, kind: str, res: Any, obj: Obj) -> None:
        if res in _WATCHED:
            self._wake.set()

    _stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gem-sim-lifecycle")

    async def stop(self) -> None:
        if self._task is not None:
            # A flag as well as cancel(): on Python 3.11 `asyncio.wait_for` can swallow a
            # cancellation that lands as its inner wait completes, and the loop would run on.
            self._stopping = True
            self._wake.set()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            self._stopping = False
        if self.processes is not None:
            await self.processes.stop()

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                due = await self.step()
            except Exception:  # the simulator must outlive a bad object; log and go on
                logger.exception("pod lifecycle step failed")
                due = self.config.idle_interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=due)
            if self.config.coalesce:
                await asyncio.sleep(self.config.coalesce)

    async def step(self) -> float:
        """One pass over controllers, scheduling and kubelet; returns seconds until next due."""
        emu = self.emulator
        for deploy in emu.list_objects(DEPLOYMENTS):
            await self._guarded(reconcile_deployment(emu, PODS, DEPLOYMENTS, deploy, emu.list_objects(PODS)))
        nodes = emu.list_shared(NODES)  # read-only, as an informer cache: never mutated here
        for ds in emu.list_objects(DAEMONSETS):
            await self._guarded(reconcile_daemonset(emu, PODS, DAEMONSETS, ds, nodes, emu.list_objects(PODS)))
        pods = sorted(emu.list_shared(PODS), key=lambda p: int(p["metadata"]["resourceVersion"]))
        pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        due = self.config.idle_interval
        loop_now = asyncio.get_running_loop().time()
        for pod in pods:
            wait = await self._guarded(self._advance(pod, pods, nodes, loop_now))
            if wait is not None:
                due = min(due, wait)
        live = {p["metadata"]["uid"] for p in pods}
        for uid in [uid for uid in self._since if uid not in live]:
            del self._since[uid]
        return max(due, 0.0)

    async def _guarded(self, coro: Any) -> Any:
        try:
            return await coro
        except Exception as exc:  # e.g. a pod deleted between the read and the write
            logger.debug("lifecycle write skipped: %s", exc)
            return None

    async def _status(self, pod: Obj, status: Obj) -> Obj:
        meta = pod["metadata"]
        return await self.emulator.patch_object(
            PODS, meta["namespace"], meta["name"], {"status": status}, subresource="status"
        )

    async def _advance(self, pod: Obj, pods: list[Obj], nodes: list[Obj], now: float) -> float | None:
        """Move one pod along; returns seconds until it is due again, if waiting on a delay."""
        status, meta = pod.get("status") or {}, pod["metadata"]
        phase = status.get("phase", "Pending")
        if phase in FINISHED or meta.get("deletionTimestamp"):
            return None
        scheduled = any(
            c.get("type") == "PodScheduled" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        uid = meta["uid"]
        if not scheduled:
            await self._schedule(pod, pods, nodes, now)
            return None
        if self.processes is not None and self.processes.handles(pod):
            await self.processes.ensure(pod)
            return None
        elapsed = now - self._since.setdefault(uid, now)
        if phase == "Pending":
            inits = (pod.get("spec") or {}).get("initContainers") or []
            if inits and status.get("initContainerStatuses"):
                init_time = self.config.init_delay * len(inits)
                if elapsed < init_time:
                    return init_time - elapsed
            else:
                if elapsed < self.config.start_delay:
                    return self.config.start_delay - elapsed
                if inits:
                    await self._start_init(pod, nodes, now)
                    return self.config.init_delay * len(inits)
            await self._start(pod, nodes, now)
            pod = self.emulator.get_object(PODS, meta["namespace"], meta["name"]) or pod
            elapsed = 0.0
        already = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if already and phase == "Running":
            return None
        if not self.config.ready_delay or elapsed >= self.config.ready_delay:
            await self._make_ready(pod)
            return None
        return self.config.ready_delay - elapsed

    async def _schedule(self, pod: Obj, pods: list[Obj], nodes: list[Obj], now: float) -> None:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        current = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}.get("PodScheduled", {})
        if spec.get("schedulingGates"):
            if current.get("reason") == "SchedulingGated":
                return  # already reported; re-writing it every pass would make a gang of n pods cost n^2
            message = "Scheduling is blocked due to non-empty scheduling gates"
            conditions = _conditions(pod, {"PodScheduled": ("False", "SchedulingGated", message)})
            await self._status(pod, {"phase": "Pending", "conditions": conditions})
            return
        others = [p for p in pods if p["metadata"]["uid"] != meta["uid"]]
        node, message = choose_node(pod, nodes, others)
        if node is None:
            if current.get("reason") == "Unschedulable" and current.get("message") == message:
                return
            conditions = _conditions(pod, {"PodScheduled": ("False", "Unschedulable", message)})
            await self._status(pod, {"phase": "Pending", "conditions": conditions})
            return
        if spec.get("nodeName") != node:
            await self.emulator.patch_object(PODS, meta["namespace"], meta["name"], {"spec": {"nodeName": node}})
        pod = {**pod, "spec": {**spec, "nodeName": node}}  # later pods in this pass see the GPUs taken
        for i, other in enumerate(pods):
            if other["metadata"]["uid"] == meta["uid"]:
                pods[i] = pod
        conditions = _conditions(pod, {"PodScheduled": ("True", "", "")})
        await self._status(pod, {"phase": "Pending", "conditions": conditions})
        self._since[meta["uid"]] = now

    def _addresses(self, pod: Obj, nodes: list[Obj]) -> Obj:
        node_name = pod["spec"]["nodeName"]
        node = next((n for n in nodes if n["metadata"]["name"] == node_name), {})
        addresses = (node.get("status") or {}).get("addresses") or []
        host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "10.0.0.1")
        uid = pod["metadata"]["uid"]
        pod_ip = self._ips.setdefault(uid, f"10.244.{len(self._ips) // 250}.{len(self._ips) % 250 + 2}")
        return {"hostIP": host_ip, "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}

    async def _start_init(self, pod: Obj, nodes: list[Obj], now: float) -> None:
        """The sandbox is up and the init containers run (reported as one running step)."""
        started = _now()
        reason, message = "PodInitializing", "init containers are running"
        conditions = _conditions(
            pod,
            {
                "Initialized": ("False", "ContainersNotInitialized", message),
                "ContainersReady": ("False", reason, message),
                "Ready": ("False", reason, message),
            },
        )
        statuses = [
            _container_status(c, i, ready=False, state={"running": {"startedAt": started}}, init=True)
            for i, c in enumerate(pod["spec"].get("initContainers") or [])
        ]
        await self._status(
            pod,
            {
                "phase": "Pending",
                **self._addresses(pod, nodes),
                "startTime": started,
                "conditions": conditions,
                "initContainerStatuses": statuses,
            },
        )
        self._since[pod["metadata"]["uid"]] = now

    def _finished_inits(self, pod: Obj) -> list[Obj]:
        """Every init container exited 0, each after `init_delay`, with its termination message."""
        begun, finished = (pod.get("status") or {}).get("startTime") or _now(), _now()
        out = []
        for i, c in enumerate(pod["spec"].get("initContainers") or []):
            terminated: Obj = {"exitCode": 0, "reason": "Completed", "startedAt": begun, "finishedAt": finished}
            message = simulated_init_message(c, self.config.init_delay)
            if message is not None:
                terminated["message"] = message
            out.append(_container_status(c, i, ready=True, state={"terminated": terminated}, init=True))
        return out

    async def _start(self, pod: Obj, nodes: list[Obj], now: float) -> None:
        uid = pod["metadata"]["uid"]
        before = pod.get("status") or {}
        # With init containers the pod started when they did; otherwise it starts now.
        started = (before.get("startTime") if before.get("initContainerStatuses") else None) or _now()
        extra: Obj = {}
        if pod["spec"].get("initContainers"):
            extra["initContainerStatuses"] = self._finished_inits(pod)
        conditions = _conditions(
            pod,
            {
                "Initialized": ("True", "", ""),
                "ContainersReady": ("False", "ContainersNotReady", "containers are starting"),
                "Ready": ("False", "ContainersNotReady", "containers are starting"),
            },
        )
        await self._status(
            pod,
            {
                "phase": "Running",
                **self._addresses(pod, nodes),
                "startTime": started,
                "conditions": conditions,
                "containerStatuses": _container_statuses(pod, ready=False, started_at=started),
                **extra,
            },
        )
        self._since[uid] = now

    async def _make_ready(self, pod: Obj) -> None:
        status = pod.get("status") or {}
        gates_ok = _gates_ready(pod)
        ready = ("True", "", "") if gates_ok else ("False", "ReadinessGatesNotReady", "readiness gates not ready")
        conditions = _conditions(pod, {"ContainersReady": ("True", "", ""), "Ready": ready})
        started = status.get("startTime") or _now()
        await self._status(
            pod,
            {
                "conditions": conditions,
                "containerStatuses": _container_statuses(pod, ready=True, started_at=started),
            },
        )

    # -- failure injection ---------------------------------------------------------------------

    async def fail_pod(
        self, namespace: str, name: str, reason: str = "Error", exit_code: int = 1, message: str | None = None
    ) -> Obj:
        """Terminate a pod as if its container exited: phase Failed, terminated exitCode.

        ``message`` is the container's termination message (what it wrote to its
        terminationMessagePath, e.g. the newest checkpoint a trainer saved).
        """
        pod = self.emulator.get_object(PODS, namespace, name)
        if pod is None:
            raise LookupError(f"pod {namespace}/{name} not found")
        finished = _now()
        statuses = [
            {
                "name": c.get("name", f"c{i}"),
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "finishedAt": finished,
                        **({"message": message} if message is not None else {}),
                    }
                },
            }
            for i, c in enumerate((pod.get("spec") or {}).get("containers") or [])
        ]
        conditions = _conditions(
            pod,
            {"Ready": ("False", "PodFailed", reason), "ContainersReady": ("False", "PodFailed", reason)},
        )
        return await self._status(
            pod,
            {
                "phase": "Failed",
                "reason": reason,
                "message": f"pod failed: {reason}",
                "conditions": conditions,
                "containerStatuses": statuses,
            },
        )

    async def _set_node_ready(self, name: str, ready: bool) -> Obj:
        node = self.emulator.get_object(NODES, None, name)
        if node is None:
            raise LookupError(f"node {name} not found")
        reason = "KubeletReady" if ready else "NodeStatusUnknown"
        conditions = _conditions(node, {"Ready": ("True" if ready else "False", reason, "")})
        return await self.emulator.patch_object(
            NODES, None, name, {"status": {"conditions": conditions}}, subresource="status"
        )

    async def fail_node(self, name: str) -> Obj:
        """Mark the node NotReady and fail every unfinished pod bound to it."""
        node = await self._set_node_ready(name, False)
        for pod in self.emulator.list_objects(PODS):
            on_node = (pod.get("spec") or {}).get("nodeName") == name
            if on_node and (pod.get("status") or {}).get("phase") not in FINISHED:
                meta = pod["metadata"]
                await self.fail_pod(meta["namespace"], meta["name"], reason="NodeLost", exit_code=137)
        return node

    async def recover_node(self, name: str) -> Obj:
        return await self._set_node_ready(name, True)
