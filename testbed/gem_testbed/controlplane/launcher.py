"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, and KWOK playing the kubelets of a GPU fleet.

`ControlPlane` is a context manager: entering it generates certificates, starts every process in
order (each waits for the previous one to be healthy), writes an admin kubeconfig, creates the
fleet's nodes and waits until KWOK reports them Ready; leaving it stops every process and removes
the state directory (data, certificates, logs) unless asked to keep it. Ports are picked free at
start; a fixed API server port that is taken, or a missing binary, is one clear error line. With
`kueue=True` the Kueue manager is started last (see `kueue.py`).
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import yaml

from gem_testbed.controlplane import audit
from gem_testbed.controlplane import binaries as bins
from gem_testbed.controlplane.apiclient import ApiClient, InsecureProbe
from gem_testbed.controlplane.kueue import start_kueue
from gem_testbed.controlplane.kwok import MANAGED_SELECTOR, kwok_nodes, stages_yaml
from gem_testbed.controlplane.pki import FRONT_PROXY_CLIENT, KeyPair, Pki, generate_pki
from gem_testbed.controlplane.processes import (
    ControlPlaneError,
    ManagedProcess,
    ensure_port_free,
    free_port,
    wait_until,
)

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.0.0.1/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMISSION_PLUGINS = ("OwnerReferencesPermissionEnforcement", "PodSecurity")
# Controllers the suites rely on: owners and garbage collection, workloads, namespaces, service
# accounts and their tokens, endpoints, and node health (with taint-based eviction).
CONTROLLERS = (
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "namespace-controller",
    "endpointslice-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "resourcequota-controller",
)


@dataclass
class Timeouts:
    """Seconds to wait for each phase; generous because small shared machines are slow."""

    etcd: float = 60.0
    apiserver: float = 180.0
    components: float = 120.0
    nodes: float = 120.0


@dataclass
class _Ports:
    etcd_client: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    scheduler: int = field(default_factory=free_port)
    kwok: int = field(default_factory=free_port)


def write_kubeconfig(path: pathlib.Path, server: str, ca: pathlib.Path, user: str, client: KeyPair) -> None:
    """A single-context kubeconfig that authenticates with a client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gem", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": "gem", "context": {"cluster": "gem", "user": user}}],
        "current-context": "gem",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


class ControlPlane:
    """Starts and stops one local control plane; see the module docstring."""

    def __init__(
        self,
        fleet: Iterable[Mapping[str, Any]] = (),
        *,
        cache: pathlib.Path | None = None,
        state_dir: pathlib.Path | None = None,
        apiserver_port: int | None = None,
        pod_step_delay_ms: int = 200,
        keep_state: bool = False,
        timeouts: Timeouts | None = None,
        kueue: bool = False,
    ) -> None:
        self.fleet = list(fleet)
        self.kueue = kueue
        self.binaries = bins.find_binaries((*bins.CORE, bins.KUEUE) if kueue else bins.CORE, cache)
        self.ports = _Ports()
        if apiserver_port is not None:
            ensure_port_free(apiserver_port, bins.APISERVER)
            self.ports.apiserver = apiserver_port
        self.pod_step_delay_ms = pod_step_delay_ms
        self.keep_state = keep_state
        self.timeouts = timeouts or Timeouts()
        self._own_state_dir = state_dir is None
        self._made_state_dir = False
        # A temporary directory is only made on start, so an unused instance leaves nothing behind.
        self.state_dir = state_dir or pathlib.Path(tempfile.gettempdir()) / "gem-control-plane-unstarted"
        self.server = f"https://127.0.0.1:{self.ports.apiserver}"
        self.processes: list[ManagedProcess] = []
        self._pki: Pki | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Starts every component in dependency order and waits for the fleet's nodes to be Ready."""
        if self._own_state_dir:
            self.state_dir = pathlib.Path(tempfile.mkdtemp(prefix="gem-control-plane-"))
            self._made_state_dir = True
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)
        self._pki = pki = generate_pki(self.state_dir, service_ip=SERVICE_IP)
        self._start_etcd()
        self._start_apiserver(pki)
        write_kubeconfig(self.kubeconfig, self.server, pki.ca.cert, "gem-admin", pki.admin)
        self._start_controller_manager(pki)
        self._start_scheduler(pki)
        self._create_nodes()
        self._start_kwok()
        if self.kueue:
            self.processes.append(
                start_kueue(
                    self.admin_client(),
                    binary=self.binaries[bins.KUEUE],
                    state=self.state_dir,
                    kubeconfig=self.kubeconfig,
                    timeout=self.timeouts.components,
                )
            )

    def stop(self) -> None:
        """Stops the processes in reverse start order, then removes the state unless kept."""
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        if self._made_state_dir and not self.keep_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self._made_state_dir = False

    @property
    def kubeconfig(self) -> pathlib.Path:
        """The admin kubeconfig (system:masters), written once the API server is ready."""
        return self.state_dir / "admin.kubeconfig"

    @property
    def audit_log(self) -> pathlib.Path:
        """The API server's audit log: metadata of every request by a service account outside kube-system."""
        return self.log_path("audit")

    @property
    def ca_cert(self) -> pathlib.Path:
        """The cluster CA that signed the API server's serving certificate (for kubeconfigs)."""
        if self._pki is None:
            raise ControlPlaneError("the control plane is not started")
        return self._pki.ca.cert

    def admin_client(self) -> ApiClient:
        if self._pki is None:
            raise ControlPlaneError("the control plane is not started")
        return ApiClient(self.server, self._pki.ca.cert, self._pki.admin)

    def log_path(self, name: str) -> pathlib.Path:
        return self.state_dir / "logs" / f"{name}.log"

    # -- components --------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.log_path(name))
        process.start()
        self.processes.append(process)
        return process

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        process = self._spawn(
            bins.ETCD,
            [
                str(self.binaries[bins.ETCD]),
                "--name=gem",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=gem={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        wait_until("etcd /health", InsecureProbe(f"{client}/health").ok, self.timeouts.etcd, [process])

    def _start_apiserver(self, pki: Pki) -> None:
        process = self._spawn(
            bins.APISERVER,
            [
                str(self.binaries[bins.APISERVER]),
                f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports.apiserver}",
                f"--cert-dir={self.state_dir / 'apiserver'}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                # No pod network reaches a loopback API server, and loopback endpoints are invalid.
                "--endpoint-reconciler-type=none",
                # Webhooks resolve their Service by its type: ExternalName ones reach loopback (kueue.py).
                "--enable-aggregator-routing=false",
                "--authorization-mode=RBAC",
                f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
                "--allow-privileged=true",
                "--profiling=false",
                *audit.apiserver_flags(self.state_dir, self.audit_log),
            ],
        )
        client = ApiClient(self.server, pki.ca.cert, pki.admin)
        wait_until("kube-apiserver /readyz", lambda: client.ok("/readyz"), self.timeouts.apiserver, [process])

    def _component_kubeconfig(self, name: str, user: str, pair: KeyPair) -> pathlib.Path:
        assert self._pki is not None
        path = self.state_dir / f"{name}.kubeconfig"
        write_kubeconfig(path, self.server, self._pki.ca.cert, user, pair)
        return path

    def _delegated_auth(self, kubeconfig: pathlib.Path, port: int) -> list[str]:
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
        ]

    def _start_controller_manager(self, pki: Pki) -> None:
        name, port = bins.CONTROLLER_MANAGER, self.ports.controller_manager
        kubeconfig = self._component_kubeconfig(name, "system:kube-controller-manager", pki.controller_manager)
        process = self._spawn(
            name,
            [
                str(self.binaries[name]),
                *self._delegated_auth(kubeconfig, port),
                f"--cert-dir={self.state_dir / name}",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca.cert}",
                "--use-service-account-credentials=true",
            ],
        )
        probe = InsecureProbe(f"https://127.0.0.1:{port}/healthz")
        wait_until(f"{name} /healthz", probe.ok, self.timeouts.components, [process])

    def _start_scheduler(self, pki: Pki) -> None:
        name, port = bins.SCHEDULER, self.ports.scheduler
        kubeconfig = self._component_kubeconfig(name, "system:kube-scheduler", pki.scheduler)
        process = self._spawn(name, [str(self.binaries[name]), *self._delegated_auth(kubeconfig, port)])
        probe = InsecureProbe(f"https://127.0.0.1:{port}/healthz")
        wait_until(f"{name} /healthz", probe.ok, self.timeouts.components, [process])

    def _create_nodes(self) -> None:
        client = self.admin_client()
        for node in kwok_nodes(self.fleet):
            status, body = client.request("POST", "/api/v1/nodes", node)
            if status != 201:
                name = node["metadata"].get("name")
                raise ControlPlaneError(f"creating node {name!r} failed with HTTP {status}: {_message(body)}")

    def _start_kwok(self) -> None:
        config = self.state_dir / "kwok.yaml"
        config.write_text(stages_yaml(self.pod_step_delay_ms))
        process = self._spawn(
            bins.KWOK,
            [
                str(self.binaries[bins.KWOK]),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={MANAGED_SELECTOR}",
                f"--cidr={POD_CIDR}",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{self.ports.kwok}",
            ],
        )
        client = self.admin_client()
        names = {str(node["metadata"]["name"]) for node in self.fleet}
        wait_until(
            f"{len(names)} KWOK nodes Ready and untainted",
            lambda: names <= _ready_nodes(client),
            self.timeouts.nodes,
            [process],
        )


# Taints the node lifecycle controller puts on a node until it sees it Ready; it takes them off
# one node at a time, which for hundreds of new nodes lasts seconds after KWOK reports them Ready.
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def _ready_nodes(client: ApiClient) -> set[str]:
    """Nodes that are Ready and schedulable (no lifecycle taint left), as a planner will see them."""
    status, body = client.request("GET", "/api/v1/nodes")
    if status != 200 or not isinstance(body, dict):
        return set()
    ready: set[str] = set()
    for node in body.get("items", []):
        conditions = node.get("status", {}).get("conditions") or []
        taints = {t.get("key") for t in node.get("spec", {}).get("taints") or []}
        if taints & LIFECYCLE_TAINTS:
            continue
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            ready.add(node["metadata"]["name"])
    return ready


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message", body))
    return str(body)[:300]
