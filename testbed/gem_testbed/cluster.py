"""`EmbeddedCluster`: the emulator, a GPU fleet and the pod lifecycle behind one object.

Two ways to use it, because its users live in two worlds:

* `with EmbeddedCluster(...) as cluster:` runs the cluster on its own event loop in a
  daemon thread, so sync code (pytest, kopf's `KopfRunner`, the CLI) can drive it; its
  sync helpers (`get`, `apply`, `fail_pod`, ...) hop onto that loop.
* `async with EmbeddedCluster(...) as cluster:` runs it on the current loop; there, use
  the `a`-prefixed coroutine helpers (`aget`, `aapply`, ...).

The operator reaches it only over HTTP with the kubeconfig it writes.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import pathlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import aiohttp.web
import yaml

from gem_operator.fleet import Node, load_fleet, validate_node
from gem_testbed.emulator import CRD_RESOURCE, NAMESPACES, Emulator, start_http
from gem_testbed.emulator.crds import KOPF_PEERING_CRDS, load_crds
from gem_testbed.emulator.objects import Obj
from gem_testbed.kubelets.lifecycle import NODES, LifecycleConfig, PodLifecycle
from gem_testbed.kubelets.network import ClusterNetwork
from gem_testbed.kubelets.processes import ProcessConfig, ProcessKubelet

T = TypeVar("T")
FleetSource = str | pathlib.Path | Iterable[Mapping[str, Any]] | None
CrdSource = Mapping[str, Any] | str | pathlib.Path
Selector = str | Mapping[str, str] | None
ObjList = list[Obj]  # the class below defines a `list` method; annotations use this alias


class EmbeddedCluster:
    """An in-process Kubernetes API with simulated GPU nodes and pod lifecycle."""

    def __init__(
        self,
        fleet: FleetSource = "demo",
        crds: Iterable[CrdSource] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lifecycle: LifecycleConfig | None = None,
        namespaces: Iterable[str] = ("default",),
        kopf_peering: bool = True,
        token: str | None = None,
        run_pods: ProcessConfig | None = None,
    ) -> None:
        """``token``: require it as a bearer token on every request (the kubeconfig carries it)."""
        self._nodes = self._fleet_nodes(fleet)
        self._crds = load_crds([*(KOPF_PEERING_CRDS if kopf_peering else ()), *crds])
        self._host, self._port = host, port
        self._token = token
        self._namespaces = builtins.list(namespaces)
        self.emulator = Emulator()
        # With run_pods, serving pods run as local processes (the process kubelet) instead of being simulated.
        self.processes = ProcessKubelet(self.emulator, run_pods) if run_pods is not None else None
        self.emulator.pod_logs = self.processes.logs if self.processes is not None else None
        self.lifecycle = PodLifecycle(self.emulator, lifecycle, self.processes)
        # Service fronts, node dcgm-exporters and Prometheus file_sd targets for those pods.
        self.network = (
            ClusterNetwork(self.emulator, self.processes, self.processes.root / "file_sd")
            if self.processes is not None
            else None
        )
        self._runner: aiohttp.web.BaseRunner | None = None
        self._url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def _fleet_nodes(fleet: FleetSource) -> builtins.list[Node]:
        if fleet is None:
            return []
        if isinstance(fleet, str | pathlib.Path):
            return load_fleet(fleet)
        return [validate_node(node, "fleet", i) for i, node in enumerate(fleet)]

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the embedded cluster is not running")
        return self._url

    async def start(self) -> None:
        """Start serving on the current loop (what `async with` does)."""
        await self.emulator.__aenter__()
        self._runner, self._url = await start_http(self.emulator, self._host, self._port, self._token)
        for namespace in self._namespaces:
            await self.emulator.create_object(NAMESPACES, {"metadata": {"name": namespace}})
        for crd in self._crds:
            await self.emulator.create_object(CRD_RESOURCE, crd, keep_status=True)
        for node in self._nodes:
            await self.emulator.create_object(NODES, node, keep_status=True)
        self.lifecycle.start()
        if self.network is not None:
            await self.network.start()

    async def stop(self) -> None:
        if self.network is not None:
            await self.network.stop()
        await self.lifecycle.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.emulator.__aexit__(None, None, None)
        self._url = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def __enter__(self) -> Self:
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: builtins.list[BaseException] = []

        def main() -> None:
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                try:
                    await self.start()
                except BaseException as exc:
                    failure.append(exc)
                finally:
                    ready.set()

            boot_task = loop.create_task(boot())
            loop.run_forever()
            del boot_task
            # Whatever `stop` left (a watch, a probe) is cancelled and awaited, so no task dies
            # with the loop (asyncio would print each one as "destroyed but pending").
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=main, name="gem-sim-cluster", daemon=True)
        self._thread.start()
        if not ready.wait(30) or failure:
            self.__exit__(None, None, None)
            raise RuntimeError("the embedded cluster failed to start") from (failure[0] if failure else None)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._url is not None:
            # Pods run as processes get their grace period (SIGTERM, then SIGKILL), all at once.
            grace = self.network.kubelet.longest_grace() if self.network is not None else 0.0
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(15 + grace)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(15)
        self._loop = self._thread = None

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a helper coroutine on the cluster's own loop (thread mode only)."""
        if self._loop is None or threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "sync helpers need `with EmbeddedCluster()` and another thread; "
                "in `async with` or on the cluster's loop, use the a* helpers"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    # -- kubeconfig --------------------------------------------------------------------------------

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig for kopf, kubectl and lightkube (plain HTTP; the required token, else a dummy)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gem-sim", "cluster": {"server": self.url}}],
            "users": [{"name": "gem-sim", "user": {"token": self._token or "gem-sim"}}],
            "contexts": [
                {
                    "name": "gem-sim",
                    "context": {"cluster": "gem-sim", "user": "gem-sim", "namespace": "default"},
                }
            ],
            "current-context": "gem-sim",
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | pathlib.Path) -> pathlib.Path:
        target = pathlib.Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False), encoding="utf-8")
        return target

    # -- async helpers -----------------------------------------------------------------------------

    async def aapply(self, obj: Mapping[str, Any]) -> Obj:
        """Create the object, or merge-patch it (spec and status) when it exists."""
        res = self.emulator.resolve(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ("default" if self.emulator.info(res).namespaced else None)
        existing = self.emulator.get_object(res, namespace, meta.get("name", ""))
        if existing is None:
            return await self.emulator.create_object(res, dict(obj), namespace, keep_status=True)
        body = {k: v for k, v in obj.items() if k != "status"}
        result = await self.emulator.patch_object(res, namespace, meta["name"], body)
        if "status" in obj and "status" in self.emulator.info(res).subresources:
            result = await self.emulator.patch_object(
                res, namespace, meta["name"], {"status": obj["status"]}, subresource="status"
            )
        return result

    async def aget(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        return self.emulator.get_object(self.emulator.resolve(api_version, kind), namespace, name)

    async def alist(
        self, api_version: str, kind: str, namespace: str | None = None, labels: Selector = None
    ) -> ObjList:
        """Objects of a kind; ``labels`` is a selector string or a mapping of required labels."""
        if isinstance(labels, Mapping):
            labels = ",".join(f"{k}={v}" for k, v in labels.items())
        return self.emulator.list_objects(self.emulator.resolve(api_version, kind), namespace, labels=labels)

    async def adelete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        return await self.emulator.delete_object(self.emulator.resolve(api_version, kind), namespace, name)

    async def aevents(self, namespace: str | None = None) -> ObjList:
        """Events from both the core (`v1`) and `events.k8s.io/v1` APIs, oldest first."""
        events = await self.alist("v1", "events", namespace) + await self.alist("events.k8s.io/v1", "events", namespace)
        return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))

    async def afail_pod(
        self, namespace: str, name: str, reason: str = "Error", exit_code: int = 1, message: str | None = None
    ) -> Obj:
        return await self.lifecycle.fail_pod(namespace, name, reason, exit_code, message)

    async def afail_node(self, name: str) -> Obj:
        return await self.lifecycle.fail_node(name)

    async def arecover_node(self, name: str) -> Obj:
        return await self.lifecycle.recover_node(name)

    # -- sync helpers (thread mode) ----------------------------------------------------------------

    def apply(self, obj: Mapping[str, Any]) -> Obj:
        return self._sync(self.aapply(obj))

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        return self._sync(self.aget(api_version, kind, name, namespace))

    def list(self, api_version: str, kind: str, namespace: str | None = None, labels: Selector = None) -> ObjList:
        return self._sync(self.alist(api_version, kind, namespace, labels))

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self._sync(self.adelete(api_version, kind, name, namespace))

    def events(self, namespace: str | None = None) -> ObjList:
        return self._sync(self.aevents(namespace))

    def fail_pod(
        self, namespace: str, name: str, reason: str = "Error", exit_code: int = 1, message: str | None = None
    ) -> Obj:
        return self._sync(self.afail_pod(namespace, name, reason, exit_code, message))

    def fail_node(self, name: str) -> Obj:
        return self._sync(self.afail_node(name))

    def recover_node(self, name: str) -> Obj:
        return self._sync(self.arecover_node(name))

    def service_url(self, namespace: str, name: str) -> str | None:
        """The loopback URL of a Service's front (process pods only; None until it has endpoints)."""
        return self.network.service_url(namespace, name) if self.network is not None else None

    def wait_for(self, predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05) -> T:
        """Poll `predicate` until it returns something truthy; raise TimeoutError at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(interval)
