"""One real control plane for the suites that need the operator on it, shared by the whole session.

`real_cluster` starts etcd, kube-apiserver, controller-manager, scheduler, KWOK (the demo fleet's
eight 8-GPU nodes) and the Kueue manager, installs the CRDs and the chart as a cluster admin would
(`kubectl apply --server-side`, real `helm install`), and runs `gemop run` as a local process with the
chart's ServiceAccount token, serving the namespaces below. It is started on first use and stopped
when the last test of this directory is done (package scope), so every module that asks for it
shares one start (about 30 s here) and nothing keeps running during the rest of the suite. The tests
that start their own control plane run first (`pytest_collection_modifyitems`), so that two never
run at once on a small machine.

A call the chart's RBAC forbids fails the suite: the session ends by reading the API server's audit
log, and any 403 answered to the operator's account is an error naming each call.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from gem_operator.fleet import load_fleet
from gem_testbed.controlplane import CORE, ControlPlane, missing_binaries
from gem_testbed.controlplane.binaries import HELM, KUEUE
from gem_testbed.controlplane.operator import OperatorInstall, OperatorProcess, forbidden_requests, install_operator

T = TypeVar("T")

E2E_NAMESPACE = "gem-e2e"  # the e2e suite's own (its default)
WORK_NAMESPACE = "gem-real"  # kubectl, garbage collection, malformed corpus, HA
KUEUE_NAMESPACE = "gem-kueue"  # the gang behind a Kueue LocalQueue
WATCHED = (E2E_NAMESPACE, WORK_NAMESPACE, KUEUE_NAMESPACE)
# Short resyncs and a short peering lifetime keep waits short; the mechanisms are the defaults'.
CHART_VALUES = {"resyncSeconds": 2, "extraEnv": [{"name": "GEM_PEERING_LIFETIME", "value": "6"}]}
GEM = "gem.dev/v1alpha1"
GEM_RESOURCES = "gemtrainings,rankingservices,solarisprecomputes"


def eventually(what: str, probe: Callable[[], T | None], timeout: float = 120.0, interval: float = 0.5) -> T:
    """Polls `probe` until it returns something truthy; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class RealCluster:
    """The shared control plane, the chart's install, and the operator process(es) serving it."""

    plane: ControlPlane
    install: OperatorInstall
    api: client.ApiClient
    env: dict[str, str]
    operators: list[OperatorProcess] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def operator(self, name: str = "gem-operator", priority: int = 100) -> OperatorProcess:
        """Starts one more operator process with the chart's token (peering with the others)."""
        process = OperatorProcess(self.plane, self.install, name=name, priority=priority, env=self.env)
        process.start()
        self.operators.append(process)
        return process

    def ensure_operator(self) -> None:
        """At least one operator is running (a test that killed them leaves a fresh one)."""
        self.operators = [p for p in self.operators if p.alive()]
        if not self.operators:
            self.operator(name=f"gem-operator-{int(time.monotonic())}")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl as the cluster admin; a failure (with check) raises naming the command and its stderr."""
        argv = ["kubectl", f"--kubeconfig={self.plane.kubeconfig}", *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def forbidden(self) -> list[str]:
        return forbidden_requests(self.plane, self.install.username)

    def gem_objects(self, namespace: str) -> list[str]:
        out = self.kubectl("get", GEM_RESOURCES, "-n", namespace, "-o", "name")
        return out.stdout.split()

    def delete_gem_objects(self, namespace: str, timeout: float = 120.0) -> None:
        """Deletes every GEM resource in `namespace` and waits until they and their pods are gone."""
        self.kubectl("delete", GEM_RESOURCES, "--all", "-n", namespace, "--wait=false")

        def clean() -> bool:
            pods = self.core.list_namespaced_pod(namespace, label_selector="gem.dev/instance").items
            return not self.gem_objects(namespace) and not pods

        eventually(f"GEM resources and their pods in {namespace} to go", clean, timeout)


def chart_env(api: client.ApiClient, install: OperatorInstall) -> dict[str, str]:
    """The operator's own settings (`GEM_*` with literal values) from the chart's Deployment.

    The process runs outside a pod, so it takes from the rendered Deployment what the chart's values
    configure (node cache, resync, extraEnv), the way the container would get them.
    """
    apps = client.AppsV1Api(api)
    selector = f"app.kubernetes.io/instance={install.release}"
    (deployment,) = apps.list_namespaced_deployment(install.namespace, label_selector=selector).items
    (container,) = deployment.spec.template.spec.containers
    return {e.name: e.value for e in container.env or [] if e.name.startswith("GEM_") and e.value is not None}


def _skip_reason() -> str | None:
    missing = missing_binaries((*CORE, KUEUE, HELM))
    if missing:
        return "; ".join(str(error) for error in missing)
    if shutil.which("kubectl") is None:
        return "kubectl is not on PATH (the CRDs are applied and the suites run with it)"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Within this directory, the tests without the shared control plane first (see the docstring)."""
    here = Path(__file__).parent
    mine = [index for index, item in enumerate(items) if item.path.parent == here]
    if not mine or mine != list(range(mine[0], mine[0] + len(mine))):
        return
    block = items[mine[0] : mine[-1] + 1]
    block.sort(key=lambda item: "real_cluster" in getattr(item, "fixturenames", ()))  # stable
    items[mine[0] : mine[-1] + 1] = block


@pytest.fixture(scope="package")
def real_cluster() -> Iterator[RealCluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    with ControlPlane(load_fleet("demo"), kueue=True) as plane:
        install = install_operator(plane, watched=WATCHED, values=CHART_VALUES)
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        cluster = RealCluster(plane, install, api, chart_env(api, install))
        try:
            cluster.operator()
            yield cluster
        finally:
            for process in cluster.operators:
                process.stop()
            api.close()
            denied = cluster.forbidden()
        assert not denied, "the chart's RBAC forbade the operator these calls:\n" + "\n".join(denied)
    assert not plane.state_dir.exists(), "the state directory is removed on exit"


@pytest.fixture
def operated(real_cluster: RealCluster) -> RealCluster:
    """The shared cluster with an operator running, for tests that need one to act."""
    real_cluster.ensure_operator()
    return real_cluster


def has_condition(obj: dict[str, Any] | None, type_: str, status: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == status for c in conditions)
