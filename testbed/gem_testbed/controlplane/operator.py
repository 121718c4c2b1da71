"""The operator on a running `ControlPlane`, installed as a cluster admin would and run with the chart's RBAC.

`install_operator` applies the CRDs with `kubectl apply --server-side`, installs the chart with the
real `helm install` (the helm binary from the build cache, the chart from `charts/`), then asks the
TokenRequest API for a token of the chart's ServiceAccount and writes it into a kubeconfig. An
`OperatorProcess` runs `gemop run` as a local child process with that kubeconfig, so the chart's
Roles and ClusterRole are all it may do: a rule the chart lacks is a 403 that `forbidden_requests`
finds in the API server's audit log (and `OperatorProcess.forbidden_log_lines` in its own log).

The chart's Deployment is scaled to zero after the install: its image cannot run here, and its pods
would be KWOK pods reporting Ready while no operator runs in them.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import yaml

from gem_operator.cli.paths import checkout_root
from gem_testbed.controlplane import audit
from gem_testbed.controlplane import binaries as bins
from gem_testbed.controlplane.apiclient import ApiClient, InsecureProbe
from gem_testbed.controlplane.launcher import ControlPlane
from gem_testbed.controlplane.processes import ControlPlaneError, ManagedProcess, free_port, wait_until

RELEASE = "gem-operator"
NAMESPACE = "gem-system"
PEERING = "gem-operator"
TOKEN_SECONDS = 24 * 3600
COMMAND_TIMEOUT = 180.0
# The log line's own time stamp ("[2026-12-03 14:35:26,403] "): its milliseconds can read 403.
_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\s*")


def refused_lines(text: str, status: int) -> list[str]:
    """The lines of an operator log that report an answer of `status` (401, 403: kopf and the kube
    client name the code or its phrase, "Unauthorized", "Forbidden"), time stamps aside."""
    refused = re.compile(rf"\b{int(status)}\b|{HTTPStatus(status).phrase}")
    return [line for line in text.splitlines() if refused.search(_STAMP.sub("", line))]


def forbidden_lines(text: str) -> list[str]:
    """The lines of an operator log that report a 403 / Forbidden answer, time stamps aside."""
    return refused_lines(text, HTTPStatus.FORBIDDEN)


@dataclass(frozen=True)
class OperatorInstall:
    """What `install_operator` set up: the release, its ServiceAccount and a kubeconfig with its token."""

    release: str
    namespace: str
    service_account: str
    watched: tuple[str, ...]
    peering: str
    kubeconfig: pathlib.Path

    @property
    def username(self) -> str:
        """The user the API server sees (and the audit log records) for the operator's calls."""
        return audit.service_account_user(self.namespace, self.service_account)


def _repo_path(name: str) -> pathlib.Path:
    root = checkout_root()
    if root is None or not (root / name).exists():
        raise ControlPlaneError(f"no {name}/ found: run from a gem-operator checkout")
    return root / name


def _run(argv: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT, env=dict(env or os.environ)
        )
    except subprocess.TimeoutExpired:
        raise ControlPlaneError(f"{what} did not finish within {COMMAND_TIMEOUT:.0f}s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise ControlPlaneError(f"{what} failed (exit {done.returncode}): {' / '.join(detail[-3:])}")
    return done.stdout


def _kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise ControlPlaneError("kubectl is not on PATH: the CRDs are applied with `kubectl apply --server-side`")
    return found


def _established(client: ApiClient, name: str) -> bool:
    status, body = client.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = ((body.get("status") or {}).get("conditions") or []) if status == 200 else []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def apply_crds(plane: ControlPlane, crds_dir: pathlib.Path | None = None) -> list[str]:
    """`kubectl apply --server-side` of the CRD files, then waits until each is Established; their names."""
    directory = crds_dir or _repo_path("crds")
    files = sorted(directory.glob("*.yaml"))
    names = [str(yaml.safe_load(path.read_text())["metadata"]["name"]) for path in files]
    argv = [_kubectl(), f"--kubeconfig={plane.kubeconfig}", "apply", "--server-side", "--field-manager=gem-install"]
    _run([*argv, *(f"--filename={path}" for path in files)], "kubectl apply --server-side of the CRDs")
    client = plane.admin_client()
    wait_until(f"{len(names)} CRDs Established", lambda: all(_established(client, n) for n in names), COMMAND_TIMEOUT)
    return names


def ensure_namespace(plane: ControlPlane, name: str) -> None:
    status, body = plane.admin_client().request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    if status not in (201, 409):
        raise ControlPlaneError(f"creating namespace {name} failed: HTTP {status} {_message(body)}")


def helm_install(
    plane: ControlPlane,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    watched: Sequence[str] = ("default",),
    peering: str = PEERING,
    chart: pathlib.Path | None = None,
    values: Mapping[str, Any] | None = None,
) -> None:
    """`helm install` of the chart (CRDs skipped: `apply_crds` owns them) serving `watched` namespaces."""
    helm = bins.find_binary(bins.HELM)
    home = plane.state_dir / "helm"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    settings = {"watch": {"namespaces": list(watched)}, "peering": {"name": peering}, **(values or {})}
    values_file = plane.state_dir / f"helm-values-{release}.yaml"
    values_file.write_text(yaml.safe_dump(settings))
    argv = [str(helm), "install", release, str(chart or _repo_path("charts") / "gem-operator")]
    argv += [f"--namespace={namespace}", "--create-namespace", "--skip-crds", f"--values={values_file}"]
    _run([*argv, f"--kubeconfig={plane.kubeconfig}"], f"helm install {release}", env)


def chart_service_account(plane: ControlPlane, release: str, namespace: str) -> str:
    """The name of the ServiceAccount the release created (found by its instance label)."""
    selector = f"app.kubernetes.io/instance={release}"
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts?labelSelector={selector}"
    status, body = plane.admin_client().request("GET", path)
    names = [item["metadata"]["name"] for item in body.get("items", [])] if status == 200 else []
    if len(names) != 1:
        raise ControlPlaneError(f"expected one ServiceAccount of release {release} in {namespace}, found {names}")
    return str(names[0])


def scale_chart_deployment(plane: ControlPlane, release: str, namespace: str, replicas: int = 0) -> None:
    """Sets the replicas of the release's Deployment(s), whose image does not run on KWOK nodes."""
    client = plane.admin_client()
    status, body = client.request(
        "GET", f"/apis/apps/v1/namespaces/{namespace}/deployments?labelSelector=app.kubernetes.io/instance={release}"
    )
    for item in body.get("items", []) if status == 200 else []:
        name = item["metadata"]["name"]
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"
        code, answer = client.request(
            "PATCH", path, {"spec": {"replicas": replicas}}, content_type="application/merge-patch+json"
        )
        if code != 200:
            raise ControlPlaneError(f"scaling deployment {namespace}/{name} failed: HTTP {code} {_message(answer)}")


def request_token(plane: ControlPlane, namespace: str, service_account: str, seconds: int = TOKEN_SECONDS) -> str:
    """A bound token of the ServiceAccount from the TokenRequest API (as the kubelet gets a pod's)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
    status, body = plane.admin_client().request("POST", path, request)
    if status != 201 or not isinstance(body, dict):
        raise ControlPlaneError(
            f"TokenRequest for {namespace}/{service_account} failed: HTTP {status} {_message(body)}"
        )
    return str(body["status"]["token"])


def write_token_kubeconfig(path: pathlib.Path, server: str, ca: pathlib.Path, user: str, token: str) -> pathlib.Path:
    """A single-context kubeconfig that authenticates with a bearer token (mode 0600: it is a credential)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gem", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "gem", "context": {"cluster": "gem", "user": user}}],
        "current-context": "gem",
    }
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def install_operator(
    plane: ControlPlane,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    watched: Sequence[str] = ("default",),
    peering: str = PEERING,
    values: Mapping[str, Any] | None = None,
) -> OperatorInstall:
    """CRDs, chart and a ServiceAccount-token kubeconfig: everything an `OperatorProcess` needs."""
    apply_crds(plane)
    for name in watched:
        ensure_namespace(plane, name)
    helm_install(plane, release=release, namespace=namespace, watched=watched, peering=peering, values=values)
    scale_chart_deployment(plane, release, namespace, 0)
    account = chart_service_account(plane, release, namespace)
    token = request_token(plane, namespace, account)
    user = audit.service_account_user(namespace, account)
    kubeconfig = write_token_kubeconfig(
        plane.state_dir / f"{release}-operator.kubeconfig", plane.server, plane.ca_cert, user, token
    )
    return OperatorInstall(release, namespace, account, tuple(watched), peering, kubeconfig)


class OperatorProcess:
    """`gemop run` as a child process with the chart's ServiceAccount token; see the module docstring.

    Start it, stop it (SIGTERM: kopf withdraws its peering record) or `kill()` it (SIGKILL, as a
    node failure would). Its output goes to the control plane's log directory under `name`.
    """

    def __init__(
        self,
        plane: ControlPlane,
        install: OperatorInstall,
        *,
        name: str = "gem-operator",
        priority: int | None = None,
        standalone: bool = False,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.plane = plane
        self.install = install
        self.name = name
        self.liveness_port = free_port()
        argv = [sys.executable, "-m", "gem_operator.cli", "run", *(f"--namespace={ns}" for ns in install.watched)]
        argv += ["--standalone"] if standalone else [f"--peering={install.peering}"]
        if priority is not None:
            argv.append(f"--priority={priority}")
        argv += [f"--liveness=http://127.0.0.1:{self.liveness_port}/healthz", "--metrics-port=0", *extra_args]
        self.argv = argv
        self.env = {k: v for k, v in os.environ.items() if k != "GEM_POD_UID"}
        self.env.update({"KUBECONFIG": str(install.kubeconfig), **(env or {})})
        self._process: ManagedProcess | None = None

    @property
    def log_path(self) -> pathlib.Path:
        return self.plane.log_path(self.name)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def alive(self) -> bool:
        return self._process is not None and self._process.pid is not None and self._process.exit_code() is None

    def start(self, timeout: float = 120.0) -> None:
        """Starts the process and waits until its liveness endpoint answers (kopf is up)."""
        process = ManagedProcess(self.name, self.argv, self.log_path, self.env)
        process.start()
        self._process = process
        probe = InsecureProbe(f"http://127.0.0.1:{self.liveness_port}/healthz")
        wait_until(f"{self.name} liveness", probe.ok, timeout, [process])

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def kill(self) -> None:
        """SIGKILL: no peering record withdrawn, no cleanup (what a crashed node looks like)."""
        if self.alive() and self.pid is not None:
            os.killpg(self.pid, signal.SIGKILL)
            assert self._process is not None
            self._process.stop(grace_seconds=1.0)

    def forbidden_log_lines(self) -> list[str]:
        """Lines of the operator's own log that report a 403 / Forbidden answer."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return forbidden_lines(text)

    def __enter__(self) -> OperatorProcess:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def forbidden_requests(plane: ControlPlane, username: str | None = None) -> list[str]:
    """Every call answered 403 in the audit log (of `username`, else of any audited service account),
    one line each; an empty list means the RBAC granted everything asked for."""
    return [audit.describe(event) for event in audit.forbidden(plane.audit_log, username)]


def request_count(plane: ControlPlane, username: str) -> int:
    """How many API calls the audit log holds for `username` (completed requests, watches included)."""
    return sum(1 for _ in audit.events(plane.audit_log, username))


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message", body))
    return str(body)[:300]
