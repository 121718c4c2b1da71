"""What a cluster's network and node agents do for pods run as processes (test doubles, named so).

Three roles, refreshed from the embedded cluster's objects about once a second:

- **Service front** (kube-proxy's role): one loopback HTTP listener per Service whose selector
  matches process pods; each request goes to the next Ready endpoint, round robin, at the pod's
  local port for the Service's ``targetPort`` (the ``sim.gem.dev/ports`` annotation). No Ready
  endpoint: 503, as a request to a Service without endpoints fails. The URL is in the Service's
  ``sim.gem.dev/url`` annotation and in `ClusterNetwork.service_url`.
- **dcgm-exporter** (its DaemonSet's role): one ``/metrics`` endpoint per node with process pods,
  publishing ``DCGM_FI_PROF_SM_ACTIVE{namespace,pod,container,gpu,UUID,modelName,Hostname}``
  for each pod whose server runs an emulated accelerator: the fraction of wall time its device
  was busy over the last `sample_window` seconds, from the server's
  ``gem_emulated_device_busy_seconds_total`` (sampled every `sample_interval`). A pod without an
  emulated device gets no series, not a made-up zero.
- **file_sd targets** (a PodMonitor's role): a JSON file per job for Prometheus's
  ``file_sd_configs``: the node exporters (job ``dcgm``) and the Ready pods' ``/metrics`` with
  ``namespace``/``pod``/``container`` labels (job ``pods``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web

from gem_testbed.emulator import Emulator, Resource
from gem_testbed.emulator.objects import Obj
from gem_testbed.kubelets.pod_config import LOOPBACK
from gem_testbed.kubelets.processes import PORTS_ANNOTATION, ProcessKubelet

logger = logging.getLogger(__name__)

PODS = Resource("", "v1", "pods")
SERVICES = Resource("", "v1", "services")
URL_ANNOTATION = "sim.gem.dev/url"
BUSY_SERIES = "gem_emulated_device_busy_seconds_total"
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def _ports(pod: Obj) -> dict[str, int]:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(PORTS_ANNOTATION)
    try:
        return {str(k): int(v) for k, v in json.loads(raw).items()} if raw else {}
    except (ValueError, TypeError, AttributeError):
        return {}


def _selects(selector: Mapping[str, str], pod: Obj) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


async def _serve(app: aiohttp.web.Application) -> tuple[aiohttp.web.AppRunner, int]:
    runner = aiohttp.web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, LOOPBACK, 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


class ServiceFront:
    """Round robin over a Service's Ready endpoints (see the module docstring)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.endpoints: list[int] = []  # local ports of Ready pods, for the Service's targetPort
        self._cycle = itertools.count()
        self.runner: aiohttp.web.AppRunner | None = None
        self.port = 0
        self.forwarded: dict[int, int] = {}  # local port -> requests sent there

    async def start(self) -> None:
        app = aiohttp.web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner, self.port = await _serve(app)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _handle(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        endpoints = list(self.endpoints)
        if not endpoints:
            return aiohttp.web.json_response({"error": "no Ready endpoints behind this Service"}, status=503)
        port = endpoints[next(self._cycle) % len(endpoints)]
        self.forwarded[port] = self.forwarded.get(port, 0) + 1
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        url = f"http://{LOOPBACK}:{port}{request.rel_url}"
        try:
            async with self.session.request(request.method, url, data=body, headers=headers) as upstream:
                payload = await upstream.read()
                out = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
                return aiohttp.web.Response(body=payload, status=upstream.status, headers=out)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return aiohttp.web.json_response({"error": f"endpoint :{port} failed: {exc}"}, status=502)


class NodeDcgmExporter:
    """A dcgm-exporter-compatible `/metrics` for one node's emulated devices."""

    def __init__(self, node: str, session: aiohttp.ClientSession, window: float, interval: float) -> None:
        self.node, self.session, self.window, self.interval = node, session, window, interval
        self.pods: dict[tuple[str, str], tuple[str, int]] = {}  # (ns, pod) -> (container, metrics port)
        self._history: dict[tuple[str, str], deque[tuple[float, float]]] = {}
        self.runner: aiohttp.web.AppRunner | None = None
        self.port = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        app = aiohttp.web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.runner, self.port = await _serve(app)
        self._task = asyncio.get_running_loop().create_task(self._sample_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.gather(*(self._sample(k, port) for k, (_, port) in list(self.pods.items())))
            for key in [k for k in self._history if k not in self.pods]:
                del self._history[key]
            await asyncio.sleep(self.interval)

    async def _sample(self, key: tuple[str, str], port: int) -> None:
        try:
            async with self.session.get(f"http://{LOOPBACK}:{port}/metrics") as r:
                text = await r.text() if r.status == 200 else ""
        except (aiohttp.ClientError, TimeoutError):
            return
        for line in text.splitlines():
            if line.startswith(BUSY_SERIES):
                history = self._history.setdefault(key, deque())
                now = time.monotonic()
                history.append((now, float(line.split()[-1])))
                while len(history) > 2 and history[1][0] <= now - self.window:
                    history.popleft()
                return

    def busy_fraction(self, key: tuple[str, str]) -> float | None:
        history = self._history.get(key)
        if not history or len(history) < 2:
            return None
        (t0, b0), (t1, b1) = history[0], history[-1]
        if t1 <= t0 or b1 < b0:  # a restarted server's counter starts again
            return None
        return max(0.0, min(1.0, (b1 - b0) / (t1 - t0)))

    async def _metrics(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        lines = [
            "# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned "
            "(emulated: busy fraction of the pod's emulated device).",
            "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge",
        ]
        for gpu, ((namespace, pod), (container, _)) in enumerate(sorted(self.pods.items())):
            value = self.busy_fraction((namespace, pod))
            if value is None:
                continue
            labels = (
                f'gpu="{gpu}",UUID="GPU-emulated-{self.node}-{gpu}",device="nvidia{gpu}",'
                f'modelName="NVIDIA H200 (emulated)",Hostname="{self.node}",'
                f'container="{container}",namespace="{namespace}",pod="{pod}"'
            )
            lines.append(f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} {value:.6f}")
        return aiohttp.web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


class ClusterNetwork:
    """Service fronts, node dcgm-exporters and file_sd targets for the process kubelet's pods."""

    def __init__(
        self,
        emulator: Emulator,
        kubelet: ProcessKubelet,
        sd_dir: Path,
        *,
        refresh: float = 0.5,
        sample_interval: float = 1.0,
        sample_window: float = 5.0,
    ) -> None:
        self.emulator, self.kubelet, self.sd_dir = emulator, kubelet, Path(sd_dir)
        self.refresh, self.sample_interval, self.sample_window = refresh, sample_interval, sample_window
        self.fronts: dict[tuple[str, str], ServiceFront] = {}
        self.exporters: dict[str, NodeDcgmExporter] = {}
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self.sd_dir.mkdir(parents=True, exist_ok=True)

    @property
    def dcgm_targets_file(self) -> Path:
        return self.sd_dir / "dcgm.json"

    @property
    def pod_targets_file(self) -> Path:
        return self.sd_dir / "pods.json"

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        connector = aiohttp.TCPConnector(limit=0)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=False)
        await self.sync()
        self._task = asyncio.get_running_loop().create_task(self._forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for front in self.fronts.values():
            await front.stop()
        for exporter in self.exporters.values():
            await exporter.stop()
        self.fronts.clear()
        self.exporters.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def service_url(self, namespace: str, name: str) -> str | None:
        front = self.fronts.get((namespace, name))
        return front.url if front is not None else None

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh)
            try:
                await self.sync()
            except Exception:  # the network must outlive a bad object
                logger.exception("cluster network refresh failed")

    async def sync(self) -> None:
        """One refresh: endpoints of every front, exporters per node, file_sd files."""
        assert self._session is not None
        pods = [p for p in self.emulator.list_shared(PODS) if self.kubelet.handles(p) and _ports(p)]
        for service in self.emulator.list_shared(SERVICES):
            await self._front(service, pods)
        by_node: dict[str, dict[tuple[str, str], tuple[str, int]]] = {}
        pod_targets: list[dict[str, Any]] = []
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            ports = _ports(pod)
            containers = spec.get("containers") or [{}]
            main = containers[0]
            declared = [p for p in main.get("ports") or [] if "containerPort" in p]
            port = ports.get(str(declared[0].get("name") or declared[0]["containerPort"])) if declared else None
            if port is None or (pod.get("status") or {}).get("phase") != "Running":
                continue
            by_node.setdefault(str(spec.get("nodeName")), {})[(meta["namespace"], meta["name"])] = (
                str(main.get("name", "main")),
                port,
            )
            if _ready(pod):
                labels = {"namespace": meta["namespace"], "pod": meta["name"], "container": str(main.get("name"))}
                pod_targets.append({"targets": [f"{LOOPBACK}:{port}"], "labels": labels})
        for node, members in by_node.items():
            exporter = self.exporters.get(node)
            if exporter is None:
                exporter = NodeDcgmExporter(node, self._session, self.sample_window, self.sample_interval)
                await exporter.start()
                self.exporters[node] = exporter
            exporter.pods = members
        for node, exporter in self.exporters.items():
            if node not in by_node:
                exporter.pods = {}
        dcgm_targets = [
            {"targets": [f"{LOOPBACK}:{e.port}"], "labels": {"node": node}}
            for node, e in sorted(self.exporters.items())
        ]
        _write_atomic(self.dcgm_targets_file, dcgm_targets)
        _write_atomic(self.pod_targets_file, sorted(pod_targets, key=lambda t: t["labels"]["pod"]))

    async def _front(self, service: Obj, pods: list[Obj]) -> None:
        meta, spec = service["metadata"], service.get("spec") or {}
        selector = spec.get("selector") or {}
        members = [p for p in pods if p["metadata"]["namespace"] == meta["namespace"] and _selects(selector, p)]
        key = (meta["namespace"], meta["name"])
        front = self.fronts.get(key)
        if front is None:
            if not members:
                return
            assert self._session is not None
            front = ServiceFront(self._session)
            await front.start()
            self.fronts[key] = front
            annotations = {URL_ANNOTATION: front.url}
            with contextlib.suppress(Exception):
                await self.emulator.patch_object(
                    SERVICES, meta["namespace"], meta["name"], {"metadata": {"annotations": annotations}}
                )
        target = str(((spec.get("ports") or [{}])[0]).get("targetPort", ""))
        front.endpoints = [
            port for p in sorted(members, key=lambda p: p["metadata"]["name"]) if _ready(p)
            for port in [_ports(p).get(target)] if port is not None
        ]  # fmt: skip


def _write_atomic(path: Path, payload: Any) -> None:
    text = json.dumps(payload, indent=1, sort_keys=True)
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


__all__ = ["URL_ANNOTATION", "ClusterNetwork", "NodeDcgmExporter", "ServiceFront"]
