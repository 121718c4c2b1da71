"""The Kueue manager on a running `ControlPlane`, with its CRDs and admission webhooks.

The build script copies the release's CRDs and webhook configurations next to the binary
(`<cache>/kueue-<version>/config/`). Kueue is run as released, with its internal certificate
management: it issues its webhook certificate for `kueue-webhook-service.kueue-system.svc` and
injects the CA into the webhook configurations. The API server reaches that Service through its
EndpointSlice (`--enable-aggregator-routing`), which here names this host's own non-loopback address
(EndpointSlices may not hold loopback addresses), where the manager's webhook server listens. With
external certificates instead, Kueue v0.17 reads its metrics certificate from a fixed path under /etc.
Only the webhooks of what is enabled (Kueue's own kinds and batch/v1 Jobs) are registered: a webhook
that nothing serves would fail every matching request.
"""

from __future__ import annotations

import base64
import pathlib
import socket
from typing import Any

import yaml

from gem_testbed.controlplane import binaries as bins
from gem_testbed.controlplane.apiclient import ApiClient, InsecureProbe
from gem_testbed.controlplane.processes import ControlPlaneError, ManagedProcess, free_port, wait_until

NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"
FRAMEWORKS = ("batch/job",)
# Webhook paths served for FRAMEWORKS and Kueue's own API.
SERVED_PATH_PARTS = ("-kueue-x-k8s-io-", "-batch-v1-job")
WEBHOOK_KINDS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def manifests_dir(binary: pathlib.Path) -> pathlib.Path:
    return binary.parent / "config"


def _create(client: ApiClient, path: str, body: dict[str, Any]) -> None:
    status, response = client.request("POST", path, body)
    if status not in (201, 409):
        message = response.get("message") if isinstance(response, dict) else response
        what = f"{body.get('kind')} {body['metadata']['name']}"
        raise ControlPlaneError(f"creating {what} failed: HTTP {status} {message}")


def _add_conversion_webhook(crd: dict[str, Any], config: pathlib.Path) -> None:
    """Applies the release's conversion patch for this CRD (if any), pointed at Kueue's Service."""
    patch_file = config / "crd-conversion" / f"webhook_in_{crd['spec']['names']['plural']}.yaml"
    if not patch_file.is_file():
        return
    conversion = yaml.safe_load(patch_file.read_text())["spec"]["conversion"]
    conversion["webhook"]["clientConfig"]["service"].update({"name": SERVICE, "namespace": NAMESPACE, "port": 443})
    crd["spec"]["conversion"] = conversion


def install_crds(client: ApiClient, config: pathlib.Path, timeout: float) -> None:
    """Creates the CRDs and waits until the API server serves them."""
    names = []
    for path in sorted((config / "crd").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        _add_conversion_webhook(crd, config)
        _create(client, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        names.append(crd["metadata"]["name"])

    def established() -> bool:
        for name in names:
            status, body = client.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (body.get("status") or {}).get("conditions") or [] if status == 200 else []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_until(f"{len(names)} Kueue CRDs established", established, timeout)


def host_address() -> str:
    """This host's primary non-loopback IPv4 address (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address: str = probe.getsockname()[0]
        except OSError as error:
            raise ControlPlaneError(f"no non-loopback IPv4 address for Kueue's webhook server: {error}") from None
    if address.startswith("127."):
        raise ControlPlaneError("no non-loopback IPv4 address for Kueue's webhook server")
    return address


def served_webhooks(config: pathlib.Path) -> list[dict[str, Any]]:
    """The release's webhook configurations, bound to Kueue's Service and limited to what is served."""
    documents = [d for d in yaml.safe_load_all((config / "webhook.yaml").read_text()) if d]
    for document in documents:
        webhooks = []
        for webhook in document.get("webhooks", []):
            path = webhook["clientConfig"]["service"]["path"]
            if any(part in path for part in SERVED_PATH_PARTS):
                webhook["clientConfig"] = {
                    "service": {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": 443}
                }
                webhooks.append(webhook)
        document["metadata"]["name"] = f"kueue-{document['metadata']['name']}"
        document["webhooks"] = webhooks
    return documents


def webhook_service(address: str, port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A selector-less Service and the EndpointSlice that sends its traffic to `address`:`port`."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {"ports": [{"port": 443, "protocol": "TCP", "targetPort": port}]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{SERVICE}-host",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": SERVICE},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "", "port": port, "protocol": "TCP"}],
    }
    return service, endpoints


def manager_config(host: str, webhook_port: int, health_port: int, cert_dir: pathlib.Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": host, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE, "webhookSecretName": SECRET},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


def _mount_secret(client: ApiClient, cert_dir: pathlib.Path) -> bool:
    """Does what the kubelet's secret volume does in a pod: Kueue waits for its certificate files."""
    status, body = client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}")
    data = (body.get("data") or {}) if status == 200 else {}
    if not all(data.get(key) for key in ("tls.crt", "tls.key", "ca.crt")):
        return False
    for key in ("tls.crt", "tls.key", "ca.crt"):
        target = cert_dir / key
        target.write_bytes(base64.b64decode(data[key]))
        target.chmod(0o600)
    return True


def _ca_injected(client: ApiClient, webhooks: list[dict[str, Any]]) -> bool:
    for webhook in webhooks:
        resource = WEBHOOK_KINDS[webhook["kind"]]
        path = f"/apis/admissionregistration.k8s.io/v1/{resource}/{webhook['metadata']['name']}"
        status, body = client.request("GET", path)
        if status != 200 or not all(w["clientConfig"].get("caBundle") for w in body.get("webhooks") or []):
            return False
    return True


def start_kueue(
    client: ApiClient, *, binary: pathlib.Path, state: pathlib.Path, kubeconfig: pathlib.Path, timeout: float = 180.0
) -> ManagedProcess:
    """Installs Kueue's CRDs, Service and webhooks, starts the manager, waits until it serves them."""
    config = manifests_dir(binary)
    if not (config / "webhook.yaml").is_file():
        raise ControlPlaneError(f"{config} lacks Kueue's manifests; run {bins.BUILD_SCRIPT} kueue")
    install_crds(client, config, timeout)
    _create(client, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    host, webhook_port, health_port = host_address(), free_port(), free_port()
    service, endpoints = webhook_service(host, webhook_port)
    # Kueue fills the Secret with its certificate but does not create it.
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}}
    _create(client, f"/api/v1/namespaces/{NAMESPACE}/secrets", secret)
    _create(client, f"/api/v1/namespaces/{NAMESPACE}/services", service)
    _create(client, f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices", endpoints)
    webhooks = served_webhooks(config)
    for webhook in webhooks:
        _create(client, f"/apis/admissionregistration.k8s.io/v1/{WEBHOOK_KINDS[webhook['kind']]}", webhook)
    cert_dir = state / "kueue-certs"
    cert_dir.mkdir(exist_ok=True)
    config_file = state / "kueue-config.yaml"
    config_file.write_text(yaml.safe_dump(manager_config(host, webhook_port, health_port, cert_dir)))
    process = ManagedProcess(
        bins.KUEUE,
        [
            str(binary),
            f"--config={config_file}",
            f"--kubeconfig={kubeconfig}",
            "--feature-gates=VisibilityOnDemand=false",
        ],
        state / "logs" / "kueue.log",
    )
    process.start()
    try:
        mounted = lambda: _mount_secret(client, cert_dir)  # noqa: E731
        wait_until("Kueue's certificate in its Secret", mounted, timeout, [process])
        probe = InsecureProbe(f"http://127.0.0.1:{health_port}/readyz")
        wait_until("the Kueue manager /readyz", probe.ok, timeout, [process])
        injected = lambda: _ca_injected(client, webhooks)  # noqa: E731
        wait_until("Kueue's CA in its webhook configurations", injected, timeout, [process])
    except BaseException:
        process.stop()
        raise
    return process
