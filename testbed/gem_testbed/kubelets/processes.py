"""The process kubelet: runs the real containers of serving pods as local processes (a test double).

With ``gemop sim up --run-pods`` (or `EmbeddedCluster(run_pods=ProcessConfig(...))`), pods of
RankingService and SolarisPrecompute are not simulated: their containers run here, as a kubelet
would run them, minus the container runtime:

- the pod spec's ``command``/``args``/``env`` (``valueFrom.fieldRef`` Downward API fields,
  Secret and ConfigMap keys, ``envFrom``); ``python`` is this interpreter, other commands are
  looked up beside it (the virtualenv's console scripts, e.g. ``gem-load``), then on ``PATH``;
- init containers first, one after another; a failed one is retried with back-off (restartPolicy
  Always/OnFailure) and its termination message (or the tail of its output) reaches the pod
  status, and the pod never starts its containers until every init container exited 0;
- volumes are directories: ``emptyDir`` per pod, ``hostPath`` per node, and mount paths in
  arguments and env values are rewritten to them, as is ``/dev/termination-log``; URIs listed
  in `ProcessConfig.origins` (e.g. the model's ``s3://...``) are rewritten to a local origin (a
  directory, or nginx in front of it);
- every declared ``containerPort`` gets its own loopback port (the pod shares 127.0.0.1 with
  every other pod, so ports, not addresses, tell pods apart): it replaces the port in
  ``--port``-style arguments and ``*PORT*`` env values; ``status.podIP`` is 127.0.0.1 and the
  ``sim.gem.dev/ports`` annotation maps port names (and numbers) to the local ports, which the
  Service front and the Prometheus file_sd read;
- Ready from the readinessProbe (``httpGet``, ``tcpSocket``), every ``periodSeconds``, with its
  ``timeoutSeconds``, ``successThreshold`` and ``failureThreshold`` (defaults 1 s, 1, 3);
- on deletion, SIGTERM to the process group, SIGKILL after ``terminationGracePeriodSeconds``;
- restarts per ``restartPolicy`` with exponential back-off (CrashLoopBackOff), container states,
  exit codes and restart counts in ``status.containerStatuses``;
- at most `ProcessConfig.max_processes` pods run at once; a pod beyond that stays Pending with a
  ``ProcessLimit`` message saying so.

The emulator deletes a pod at once (no graceful-deletion phase), so termination runs after the
object is gone; its output stays in the log directory until the cluster stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import signal
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from gem_testbed.emulator import Emulator, Resource
from gem_testbed.emulator.objects import Obj
from gem_testbed.kubelets.pod_config import LOOPBACK, TERMINATION_LOG, ContainerConfigError, ContainerSetup

logger = logging.getLogger(__name__)

PODS = Resource("", "v1", "pods")
PORTS_ANNOTATION = "sim.gem.dev/ports"
PROCESS_KINDS = frozenset({"rankingservice", "solarisprecompute"})
KIND_LABEL = "gem.dev/kind"


@dataclasses.dataclass
class ProcessConfig:
    """How the process kubelet runs pods; see the module docstring."""

    root: Path | None = None  # pod directories and logs (default: a temporary directory)
    max_processes: int = 16
    origins: Mapping[str, str] = dataclasses.field(default_factory=dict)  # URI prefix -> local origin
    kinds: frozenset[str] = PROCESS_KINDS  # gem.dev/kind label values whose pods run as processes
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # added to every container
    backoff_initial: float = 1.0  # CrashLoopBackOff: first delay, doubled per restart
    backoff_max: float = 20.0
    probe_timeout: float = 1.0
    log_tail_bytes: int = 2048  # of a failed container's output, when it wrote no termination message


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class _Container:
    spec: Obj
    init: bool
    restarts: int = 0
    state: Obj = dataclasses.field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: Obj = dataclasses.field(default_factory=dict)
    ready: bool = False
    proc: asyncio.subprocess.Process | None = None
    log_path: Path | None = None
    previous_log: Path | None = None

    @property
    def name(self) -> str:
        return str(self.spec.get("name", "c"))

    def status(self) -> Obj:
        out: Obj = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "ready": self.ready,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if not self.init:
            out["started"] = "running" in self.state
        return out


@dataclasses.dataclass
class _Run:
    """One pod's processes and the status the kubelet reports for it."""

    pod: Obj
    dir: Path
    node_dir: Path
    ports: dict[str, int]
    inits: list[_Container]
    containers: list[_Container]
    phase: str = "Pending"
    initialized: bool = False
    started: str = dataclasses.field(default_factory=_now)
    task: asyncio.Task[None] | None = None
    terminating: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.pod["metadata"]["namespace"], self.pod["metadata"]["name"]


def _restart_policy(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


def _grace(run: _Run) -> float:
    """The pod's terminationGracePeriodSeconds (Kubernetes' default: 30)."""
    return float((run.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))


class ProcessKubelet(ContainerSetup):
    """Starts, probes, restarts and stops pod processes; driven by `PodLifecycle` on its loop."""

    def __init__(self, emulator: Emulator, config: ProcessConfig | None = None) -> None:
        self.emulator = emulator
        self.config = config or ProcessConfig()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if self.config.root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gem-sim-pods-")
            self.root = Path(self._tmp.name)
        else:
            self.root = Path(self.config.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._runs: dict[str, _Run] = {}  # pod uid -> run
        self._logs: dict[tuple[str, str], _Run] = {}  # (namespace, name) -> run, kept after deletion
        self._limited: set[str] = set()
        self._reaping: set[asyncio.Task[None]] = set()
        emulator.listeners.append(self._on_change)

    # -- what the lifecycle asks ---------------------------------------------------------------

    def handles(self, pod: Obj) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return labels.get(KIND_LABEL) in self.config.kinds

    @property
    def running(self) -> int:
        return sum(1 for r in self._runs.values() if not r.terminating)

    async def ensure(self, pod: Obj) -> None:
        """Start the pod's processes once it is bound (idempotent; called on every pass)."""
        uid = pod["metadata"]["uid"]
        if uid in self._runs:
            return
        if self.running >= self.config.max_processes:
            if uid not in self._limited:
                self._limited.add(uid)
                message = (
                    f"the process kubelet runs at most {self.config.max_processes} pods as local processes "
                    f"and {self.running} are running; lower the pool's maxReplicas or raise the limit "
                    "(--max-pod-processes)"
                )
                conditions = [
                    {"type": "PodScheduled", "status": "True"},
                    _cond("Ready", "False", "ProcessLimit", message),
                ]
                await self._write_raw(pod, {"phase": "Pending", "reason": "ProcessLimit", "message": message,
                                            "conditions": conditions})  # fmt: skip
            return
        self._limited.discard(uid)
        run = self._prepare(pod)
        self._runs[uid] = run
        self._logs[run.key] = run
        run.task = asyncio.get_running_loop().create_task(self._run_pod(run), name=f"pod-{run.key[1]}")

    def _on_change(self, kind: str, res: Any, obj: Obj) -> None:
        if res != PODS or kind != "DELETED":
            return
        run = self._runs.pop(obj["metadata"].get("uid", ""), None)
        if run is not None:
            task = asyncio.get_running_loop().create_task(self._terminate(run))
            self._reaping.add(task)
            task.add_done_callback(self._reaping.discard)

    def longest_grace(self) -> float:
        """The longest terminationGracePeriodSeconds of the pods running here (what `stop` may take)."""
        return max((_grace(r) for r in self._runs.values()), default=0.0)

    async def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after each pod's grace period)."""
        runs, self._runs = list(self._runs.values()), {}
        await asyncio.gather(*(self._terminate(r) for r in runs), return_exceptions=True)
        if self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def logs(self, namespace: str, name: str, container: str | None, previous: bool = False) -> str | None:
        """A container's output, or None when the pod never ran as a process here."""
        run = self._logs.get((namespace, name))
        if run is None:
            return None
        pool = run.containers + run.inits
        chosen = next((c for c in pool if c.name == container), None) if container else run.containers[0]
        if chosen is None:
            raise LookupError(
                f"container {container!r} is not valid for pod {name}; choose one of {[c.name for c in pool]}"
            )
        path = chosen.previous_log if previous else chosen.log_path
        if path is None or not path.exists():
            return ""
        return path.read_text(errors="replace")

    def ports_of(self, pod: Obj) -> dict[str, int]:
        run = self._runs.get(pod["metadata"].get("uid", ""))
        return dict(run.ports) if run else {}

    # -- preparing a pod --------------------------------------------------------------------------

    def _prepare(self, pod: Obj) -> _Run:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        pod_dir = self.root / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        node_dir = self.root / "nodes" / str(spec.get("nodeName") or "node")
        pod_dir.mkdir(parents=True, exist_ok=True)
        ports: dict[str, int] = {}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for p in c.get("ports") or []:
                number = int(p["containerPort"])
                local = ports.get(str(number)) or free_port()
                ports[str(number)] = local
                if p.get("name"):
                    ports[str(p["name"])] = local
        return _Run(
            pod=pod,
            dir=pod_dir,
            node_dir=node_dir,
            ports=ports,
            inits=[_Container(c, True) for c in spec.get("initContainers") or []],
            containers=[_Container(c, False) for c in spec.get("containers") or []],
        )

    # -- running a pod ----------------------------------------------------------------------------

    async def _run_pod(self, run: _Run) -> None:
        try:
            meta = run.pod["metadata"]
            annotations = {PORTS_ANNOTATION: json.dumps(run.ports, sort_keys=True)}
            await self.emulator.patch_object(
                PODS, meta["namespace"], meta["name"], {"metadata": {"annotations": annotations}}
            )
            await self._write(run)
            for container in run.inits:
                if not await self._run_init(run, container):
                    return
            run.initialized, run.phase = True, "Running"
            await self._write(run)
            await asyncio.gather(*(self._keep_running(run, c) for c in run.containers))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("process kubelet: pod %s/%s", *run.key)

    async def _run_init(self, run: _Run, container: _Container) -> bool:
        """Run one init container to success (retrying per restartPolicy); False if the pod failed."""
        while not run.terminating:
            code, message = await self._run_once(run, container)
            if code == 0:
                return True
            if _restart_policy(run.pod) == "Never":
                run.phase = "Failed"
                await self._write(run)
                return False
            await self._back_off(run, container, message)
        return False

    async def _keep_running(self, run: _Run, container: _Container) -> None:
        policy = _restart_policy(run.pod)
        while not run.terminating:
            code, message = await self._run_once(run, container)
            if run.terminating:
                return
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                others = [c for c in run.containers if c is not container]
                if all("terminated" in c.state for c in others):
                    codes = [c.state["terminated"].get("exitCode", 1) for c in run.containers]
                    run.phase = "Succeeded" if all(x == 0 for x in codes) else "Failed"
                    await self._write(run)
                return
            await self._back_off(run, container, message)

    async def _back_off(self, run: _Run, container: _Container, message: str) -> None:
        delay = min(self.config.backoff_initial * 2**container.restarts, self.config.backoff_max)
        container.restarts += 1
        container.last_state = container.state
        container.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:g}s restarting failed container={container.name}: {message}"[:1024],
            }
        }
        await self._write(run)
        await asyncio.sleep(delay)

    async def _run_once(self, run: _Run, container: _Container) -> tuple[int, str]:
        """Start the container's process and wait for it to exit; returns (exit code, message)."""
        try:
            mounts = self._mounts(run, container.spec)
            argv = self._argv(run, container.spec, mounts)
            env = self._env(run, container.spec, mounts)
        except ContainerConfigError as exc:
            container.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            return 128, str(exc)
        term = mounts[str(container.spec.get("terminationMessagePath") or TERMINATION_LOG)]
        with contextlib.suppress(FileNotFoundError):
            term.unlink()
        log_path = run.dir / f"{container.name}-{container.restarts}.log"
        container.previous_log, container.log_path = container.log_path, log_path
        workdir = container.spec.get("workingDir")
        with log_path.open("wb") as log:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    env=env,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL,
                    cwd=str(self._rewrite(str(workdir), run, mounts)) if workdir else str(run.dir),
                    start_new_session=True,  # its own process group: SIGTERM reaches its children
                )
            except OSError as exc:
                container.state = {"waiting": {"reason": "RunContainerError", "message": str(exc)}}
                return 128, str(exc)
        container.proc = proc
        started = _now()
        container.state = {"running": {"startedAt": started}}
        await self._write(run)
        probe = None
        if not container.init:
            probe = asyncio.get_running_loop().create_task(self._probe(run, container))
        try:
            code = await proc.wait()
        finally:
            if probe is not None:
                probe.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await probe
        container.proc, container.ready = None, False
        message = term.read_text(errors="replace").strip() if term.exists() else ""
        reason = "Completed" if code == 0 else "Error"
        if code < 0:  # killed by a signal: report it as a shell would (128 + signal)
            code = 128 - code
        if not message and code != 0:
            message = self._tail(log_path)
        terminated: Obj = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": _now()}
        if message:
            terminated["message"] = message[-4096:]
        container.state = {"terminated": terminated}
        await self._write(run)
        return code, message

    def _tail(self, path: Path) -> str:
        try:
            data = path.read_bytes()[-self.config.log_tail_bytes :]
        except OSError:
            return ""
        return data.decode(errors="replace").strip()

    async def _probe(self, run: _Run, container: _Container) -> None:
        probe = container.spec.get("readinessProbe")
        if not probe:
            container.ready = True
            await self._write(run)
            return
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        period = max(float(probe.get("periodSeconds", 10)), 0.1)
        timeout = aiohttp.ClientTimeout(total=float(probe.get("timeoutSeconds", self.config.probe_timeout)))
        # As the kubelet: Ready after successThreshold passes in a row, unready after failureThreshold
        # failures in a row (one slow answer on a busy machine does not take a pod out of its Service).
        need_ok = max(int(probe.get("successThreshold", 1)), 1)
        need_fail = max(int(probe.get("failureThreshold", 3)), 1)
        passes = fails = 0
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                ok = await self._check(session, run, probe)
                passes, fails = (passes + 1, 0) if ok else (0, fails + 1)
                flip = (not container.ready and passes >= need_ok) or (container.ready and fails >= need_fail)
                if flip:
                    container.ready = not container.ready
                    await self._write(run)
                await asyncio.sleep(period)

    async def _check(self, session: aiohttp.ClientSession, run: _Run, probe: Obj) -> bool:
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = run.ports.get(str(get.get("port")), get.get("port"))
            url = f"http://{LOOPBACK}:{port}{get.get('path', '/')}"
            try:
                async with session.get(url) as r:
                    return 200 <= r.status < 400
            except (aiohttp.ClientError, TimeoutError):
                return False
        if "tcpSocket" in probe:
            port = run.ports.get(str(probe["tcpSocket"].get("port")), probe["tcpSocket"].get("port"))
            try:
                _, writer = await asyncio.open_connection(LOOPBACK, int(port))
            except OSError:
                return False
            writer.close()
            return True
        return True  # exec probes are not run here: the container counts as ready once started

    async def _terminate(self, run: _Run) -> None:
        run.terminating = True
        grace = _grace(run)
        procs = [c.proc for c in run.inits + run.containers if c.proc is not None and c.proc.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        if procs:
            await asyncio.wait([asyncio.ensure_future(p.wait()) for p in procs], timeout=grace)
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
            for proc in procs:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 5)
        if run.task is not None and not run.task.done():
            run.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run.task

    # -- status ------------------------------------------------------------------------------------

    async def _write(self, run: _Run) -> None:
        if run.terminating:
            return
        pod = self.emulator.get_object(PODS, *run.key)
        if pod is None or pod["metadata"].get("uid") != run.pod["metadata"]["uid"]:
            return
        ready = run.phase == "Running" and all(c.ready for c in run.containers)
        gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
        have = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
        gates_ok = all(have.get(g) == "True" for g in gates)
        waiting = next((c for c in run.inits if "terminated" not in c.state or c.state["terminated"]["exitCode"]), None)
        init_msg = f"containers with incomplete status: [{waiting.name}]" if waiting else ""
        conditions = [
            _cond("PodScheduled", "True"),
            _cond("Initialized", "True" if run.initialized else "False", "" if run.initialized else
                  "ContainersNotInitialized", init_msg),
            _cond("ContainersReady", "True" if ready else "False", "" if ready else "ContainersNotReady"),
            _cond("Ready", "True" if ready and gates_ok else "False", "" if ready and gates_ok else
                  ("ReadinessGatesNotReady" if ready else "ContainersNotReady")),
        ]  # fmt: skip
        old = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
        for c in conditions:  # a condition keeps its transition time while its status holds
            before = old.get(c["type"]) or {}
            if before.get("status") == c["status"] and "lastTransitionTime" in before:
                c["lastTransitionTime"] = before["lastTransitionTime"]
        extra = [c for c in old.values() if c.get("type") in gates]
        await self._write_raw(
            pod,
            {
                "phase": run.phase,
                "hostIP": LOOPBACK,
                "podIP": LOOPBACK,
                "podIPs": [{"ip": LOOPBACK}],
                "startTime": run.started,
                "conditions": conditions + extra,
                "initContainerStatuses": [c.status() for c in run.inits],
                "containerStatuses": [c.status() for c in run.containers],
            },
        )

    async def _write_raw(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(Exception):  # the pod may be gone by now
            await self.emulator.patch_object(
                PODS, meta["namespace"], meta["name"], {"status": status}, subresource="status"
            )


def _cond(kind: str, status: str, reason: str = "", message: str = "") -> Obj:
    out: Obj = {"type": kind, "status": status, "lastTransitionTime": _now()}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


__all__ = ["LOOPBACK", "PORTS_ANNOTATION", "ContainerConfigError", "ProcessConfig", "ProcessKubelet", "free_port"]
