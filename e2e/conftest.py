"""The e2e suite's two backends: a real cluster ($KUBECONFIG) or the embedded cluster.

* ``--kubeconfig PATH`` or ``GEM_E2E_KUBECONFIG=PATH``: the cluster it points at, with the operator
  already installed (by the Helm chart: see ``e2e/kind/run.sh``). The suite talks to it with
  ``kubectl`` only, as a user would. ``$KUBECONFIG`` alone never selects a real cluster, so
  ``pytest`` never touches the current context by accident; and a cluster that already holds
  GEMTraining/RankingService/SolarisPrecompute resources (in any namespace) is refused.
* otherwise: the embedded cluster (``gem_testbed``) and the real kopf operator in a thread,
  reached over HTTP, exactly as the integration tests start them.

In CI both run: ``pytest`` runs this suite on the embedded cluster, and
``tests/controlplane/test_real_e2e.py`` runs it through the kube backend against a real control plane
(kube-apiserver, controller manager, scheduler, KWOK nodes, Kueue) that its fixture starts, with the
operator installed by the chart and running with the chart's ServiceAccount token.

``GEM_E2E_BACKEND=embedded`` forces the embedded cluster; ``GEM_E2E_NAMESPACE`` (default
``gem-e2e``, the suite's own) is where resources are applied (the chart must serve it:
``--set watch.namespaces={NS}``); the suite creates it when missing and then deletes it again;
``GEM_E2E_TIMEOUT`` (default 180) is how many seconds the kube backend waits for each change;
``GEM_E2E_WORKLOAD_IMAGE`` replaces the samples' workload image (run.sh sets it);
``GEM_E2E_NODE_CACHE=hostPath`` says the operator under test mounts the node cache (the chart does
only with ``modelCache.enabled``).

On the embedded cluster pods go Running/Ready on a simulated lifecycle, so the suite asserts the
full phase progression. On a real cluster without GPUs and without model stores the workload
containers cannot become Ready (the init container has no bucket to pull from), so there the suite
asserts what the operator itself owns: children, placement, pinning, env, status bookkeeping,
events, rejection of invalid specs, patches on change and cleanup on delete. Set
``GEM_E2E_EXPECT_READY=1`` on a cluster that can really run the workloads to assert readiness too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

T = TypeVar("T")
Obj = dict[str, Any]

CLUSTER_SCOPED = {"Node", "Namespace"}

# Read by gem_operator.controllers when the embedded backend imports them: resync fast.
os.environ.setdefault("GEM_RESYNC_SECONDS", "1")


class Backend(Protocol):
    name: str
    namespace: str
    # True where pods really (or in simulation) become Ready, so phases reach Running/Ready.
    pods_become_ready: bool
    # True where the API server enforces the CRDs' OpenAPI schemas and CEL rules at apply time.
    server_validates: bool
    # Seconds to allow for a change to show (a real cluster schedules and pulls images).
    patience: float

    def apply(self, obj: Mapping[str, Any]) -> None: ...
    def wait_for(self, predicate: Callable[[], T], what: str, timeout: float | None = None) -> T: ...
    def get(self, api_version: str, kind: str, name: str) -> Obj | None: ...
    def list(self, api_version: str, kind: str, labels: Mapping[str, str] | None = None) -> list[Obj]: ...
    def delete(self, api_version: str, kind: str, name: str) -> None: ...
    def events(self) -> list[Obj]: ...


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll until ``predicate`` returns something truthy; fail the test naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Waiting:
    patience: float

    def wait_for(self, predicate: Callable[[], T], what: str, timeout: float | None = None) -> T:
        return wait_for(predicate, self.patience if timeout is None else timeout, what)


# -- the embedded cluster ------------------------------------------------------------------------------


class EmbeddedBackend(Waiting):
    name = "embedded"
    pods_become_ready = True
    server_validates = False
    patience = 30.0

    def __init__(self, cluster: Any, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    def apply(self, obj: Mapping[str, Any]) -> None:
        doc = json.loads(json.dumps(obj))
        doc.setdefault("metadata", {})["namespace"] = self.namespace
        self.cluster.apply(doc)

    def get(self, api_version: str, kind: str, name: str) -> Obj | None:
        found: Obj | None = self.cluster.get(api_version, kind, name, self.namespace)
        return found

    def list(self, api_version: str, kind: str, labels: Mapping[str, str] | None = None) -> list[Obj]:
        namespace = None if kind in CLUSTER_SCOPED else self.namespace
        items: list[Obj] = self.cluster.list(api_version, kind, namespace, dict(labels or {}) or None)
        return items

    def delete(self, api_version: str, kind: str, name: str) -> None:
        with contextlib.suppress(Exception):  # already gone
            self.cluster.delete(api_version, kind, name, self.namespace)

    def events(self) -> list[Obj]:
        found: list[Obj] = self.cluster.events(self.namespace)
        return found


@contextlib.contextmanager
def embedded_backend(namespace: str) -> Iterator[EmbeddedBackend]:
    from gem_operator.api.crd import gem_crds
    from gem_operator.cli.operator import OperatorOptions, OperatorThread
    from gem_testbed.cluster import EmbeddedCluster
    from gem_testbed.drivers.demo import PEERING_NAME, peering_object
    from gem_testbed.kubelets.lifecycle import LifecycleConfig

    lifecycle = LifecycleConfig(start_delay=0.05, ready_delay=0.05)
    saved = os.environ.get("KUBECONFIG")
    with (
        tempfile.TemporaryDirectory(prefix="gem-e2e-") as tmp,
        EmbeddedCluster("demo", list(gem_crds().values()), lifecycle=lifecycle, namespaces=[namespace]) as cluster,
    ):
        # kopf's login reads $KUBECONFIG when the operator starts; restored afterwards.
        os.environ["KUBECONFIG"] = str(cluster.write_kubeconfig(Path(tmp) / "kubeconfig"))
        operator = None
        try:
            cluster.apply(peering_object(PEERING_NAME, namespace))
            operator = OperatorThread(OperatorOptions(namespaces=(namespace,), peering_name=PEERING_NAME))
            operator.start()
            yield EmbeddedBackend(cluster, namespace)
        finally:
            if operator is not None:
                operator.stop()
            if saved is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = saved


# -- a real cluster, through kubectl -------------------------------------------------------------------


def kubectl_resource(api_version: str, kind: str) -> str:
    """`kubectl get` resource argument, fully qualified so no short-name clash can bite."""
    group = api_version.rpartition("/")[0]
    plural = kind.lower() + ("es" if kind.lower().endswith("s") else "s")
    return f"{plural}.{group}" if group else plural


class KubectlBackend(Waiting):
    name = "kube"

    def __init__(self, namespace: str, kubeconfig: str) -> None:
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.pods_become_ready = os.environ.get("GEM_E2E_EXPECT_READY", "") == "1"
        self.patience = float(os.environ.get("GEM_E2E_TIMEOUT", "180"))
        # `--validate=false` only for API servers without OpenAPI (the embedded one, in the self-test).
        self.validate = os.environ.get("GEM_E2E_KUBECTL_VALIDATE", "true")
        self.server_validates = self.validate != "false"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        cmd = ["kubectl", f"--kubeconfig={self.kubeconfig}", f"--namespace={self.namespace}", *args]
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def apply(self, obj: Mapping[str, Any]) -> None:
        doc = json.loads(json.dumps(obj))
        doc.setdefault("metadata", {})["namespace"] = self.namespace
        self.kubectl("apply", f"--validate={self.validate}", "-f", "-", stdin=json.dumps(doc))

    def get(self, api_version: str, kind: str, name: str) -> Obj | None:
        out = self.kubectl("get", kubectl_resource(api_version, kind), name, "-o", "json", "--ignore-not-found")
        found: Obj | None = json.loads(out) if out.strip() else None
        return found

    def list(self, api_version: str, kind: str, labels: Mapping[str, str] | None = None) -> list[Obj]:
        args = ["get", kubectl_resource(api_version, kind), "-o", "json"]
        if labels:
            args.append("--selector=" + ",".join(f"{k}={v}" for k, v in labels.items()))
        items: list[Obj] = json.loads(self.kubectl(*args)).get("items") or []
        return items

    def delete(self, api_version: str, kind: str, name: str) -> None:
        self.kubectl("delete", kubectl_resource(api_version, kind), name, "--ignore-not-found", "--wait=false")

    def events(self) -> list[Obj]:
        # Core and events.k8s.io are two views of the same events on a real cluster: dedupe by uid.
        seen: dict[str, Obj] = {}
        for api_version in ("v1", "events.k8s.io/v1"):
            with contextlib.suppress(RuntimeError):
                for event in self.list(api_version, "Event"):
                    seen.setdefault(event["metadata"].get("uid") or event["metadata"]["name"], event)
        return list(seen.values())


# -- fixtures ------------------------------------------------------------------------------------------


DEFAULT_NAMESPACE = "gem-e2e"
GEM_RESOURCES = "gemtrainings.gem.dev,rankingservices.gem.dev,solarisprecomputes.gem.dev"


def select_backend(env: Mapping[str, str], option: str | None) -> tuple[str, str | None]:
    """('kube', kubeconfig) only when a cluster is named explicitly, else ('embedded', None)."""
    kubeconfig = option or env.get("GEM_E2E_KUBECONFIG") or None
    choice = env.get("GEM_E2E_BACKEND") or ("kube" if kubeconfig else "embedded")
    if choice not in {"kube", "embedded"}:
        raise pytest.UsageError(f"GEM_E2E_BACKEND must be kube or embedded, not {choice!r}")
    if choice == "kube" and not kubeconfig:
        raise pytest.UsageError(
            "GEM_E2E_BACKEND=kube needs the cluster named explicitly: pytest e2e --kubeconfig PATH (or "
            "GEM_E2E_KUBECONFIG=PATH). $KUBECONFIG alone is not used, so the suite never runs against the "
            "current context by accident."
        )
    return choice, kubeconfig if choice == "kube" else None


def occupied_message(kubeconfig: str, names: list[str]) -> str | None:
    """Why a cluster that already has GEM resources is refused (None when it has none)."""
    if not names:
        return None
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"the cluster in {kubeconfig} already has GEM resources ({shown}); the e2e suite creates, edits and "
        "deletes resources of these kinds, so it runs only on a cluster without them: use a fresh one "
        "(e2e/kind/run.sh makes one), or delete those (leftovers of an aborted run included)"
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kubeconfig",
        default=None,
        help="run the e2e suite against this real cluster (operator installed); default: the embedded cluster",
    )


CHOSEN = "embedded"
KUBECONFIG: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    # Decided once, before collection: the embedded backend sets $KUBECONFIG for the operator it starts.
    global CHOSEN, KUBECONFIG
    CHOSEN, KUBECONFIG = select_backend(os.environ, config.getoption("--kubeconfig", default=None))


@pytest.fixture(scope="session")
def backend_choice() -> str:
    """``kube`` or ``embedded``: what this run targets."""
    return CHOSEN


@pytest.fixture(scope="session")
def backend() -> Iterator[Backend]:
    namespace = os.environ.get("GEM_E2E_NAMESPACE", DEFAULT_NAMESPACE)
    if CHOSEN == "embedded":
        with embedded_backend(namespace) as embedded:
            yield embedded
        return
    kubeconfig = KUBECONFIG or ""
    if not kubeconfig or shutil.which("kubectl") is None:
        pytest.fail("the kube backend needs --kubeconfig (or GEM_E2E_KUBECONFIG) and kubectl on PATH")
    kube = KubectlBackend(namespace, kubeconfig)
    try:
        kube.kubectl("get", "customresourcedefinitions.apiextensions.k8s.io", "gemtrainings.gem.dev", "-o", "name")
    except RuntimeError as exc:
        pytest.fail(
            f"$KUBECONFIG ({kubeconfig}) points at a cluster without the gem.dev CRDs, so the e2e suite would "
            "have nothing to test there: install the chart (e2e/kind/run.sh does), or run on the embedded "
            f"cluster with GEM_E2E_BACKEND=embedded. ({exc})"
        )
    existing = [n for n in kube.kubectl("get", GEM_RESOURCES, "--all-namespaces", "-o", "name").split() if n]
    refusal = occupied_message(kubeconfig, existing)
    if refusal:
        pytest.fail(refusal)
    created = False
    if not kube.kubectl("get", "namespace", namespace, "--ignore-not-found", "-o", "name").strip():
        kube.kubectl("create", "namespace", namespace)
        created = True
    try:
        yield kube
    finally:
        if created:
            kube.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")


@pytest.fixture
def applied(backend: Backend) -> Iterator[list[tuple[str, str, str]]]:
    """Resources a test applied, as (apiVersion, kind, name): deleted afterwards, children awaited."""
    created: list[tuple[str, str, str]] = []
    yield created
    for api_version, kind, name in reversed(created):
        backend.delete(api_version, kind, name)
    for api_version, kind, name in created:

        def gone(api_version: str = api_version, kind: str = kind, name: str = name) -> bool:
            children = (("v1", "Pod"), ("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ConfigMap"))
            if any(backend.list(v, k, {"gem.dev/instance": name}) for v, k in children):
                return False
            return backend.get(api_version, kind, name) is None

        backend.wait_for(gone, f"{kind} {name} and its children to be removed")
