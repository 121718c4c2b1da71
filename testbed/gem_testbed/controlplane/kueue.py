"""The Kueue manager on a running `ControlPlane`, with its CRDs and admission webhooks.

The build script copies the release's CRDs and webhook configurations next to the binary
(`<cache>/kueue-<version>/config/`). Kueue is run as released, with its internal certificate
management: it issues its webhook certificate for `kueue-webhook-service.kueue-system.svc` and
injects the CA into the webhook configurations and the CRDs' conversion webhooks.

Everything stays on loopback. An EndpointSlice may not hold a loopback address, and a webhook given by
`clientConfig.url: https://127.0.0.1:...` would be verified against an IP SAN that Kueue's own
certificate lacks. So the webhook Service is an `ExternalName` Service naming `localhost`: the API
server (without `--enable-aggregator-routing`) resolves a Service reference of that type to
`<externalName>:<clientConfig.service.port>`, dials the manager's webhook server there, and still
verifies the certificate against the Service's DNS name, as in a cluster. With external certificates
instead, Kueue v0.17 reads its metrics certificate from a fixed path under /etc.
Only the webhooks of what is enabled (Kueue's own kinds and batch/v1 Jobs) are registered: a webhook
that nothing serves would fail every matching request.
"""

from __future__ import annotations

import base64
import pathlib
from typing import Any

import yaml

from gem_testbed.controlplane import binaries as bins
from gem_testbed.controlplane.apiclient import ApiClient, InsecureProbe
from gem_testbed.controlplane.processes import ControlPlaneError, ManagedProcess, free_port, wait_until

NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
# Where the Service sends the API server: the manager's webhook server listens on loopback.
WEBHOOK_HOST = "127.0.0.1"
EXTERNAL_NAME = "localhost"
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


def _add_conversion_webhook(crd: dict[str, Any], config: pathlib.Path, port: int) -> None:
    """Applies the release's conversion patch for this CRD (if any), pointed at Kueue's Service."""
    patch_file = config / "crd-conversion" / f"webhook_in_{crd['spec']['names']['plural']}.yaml"
    if not patch_file.is_file():
        return
    conversion = yaml.safe_load(patch_file.read_text())["spec"]["conversion"]
    conversion["webhook"]["clientConfig"]["service"].update({"name": SERVICE, "namespace": NAMESPACE, "port": port})
    crd["spec"]["conversion"] = conversion


def install_crds(client: ApiClient, config: pathlib.Path, webhook_port: int, timeout: float) -> None:
    """Creates the CRDs and waits until the API server serves them."""
    names = []
    for path in sorted((config / "crd").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        _add_conversion_webhook(crd, config, webhook_port)
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


def served_webhooks(config: pathlib.Path, port: int) -> list[dict[str, Any]]:
    """The release's webhook configurations, bound to Kueue's Service and limited to what is served."""
    documents = [d for d in yaml.safe_load_all((config / "webhook.yaml").read_text()) if d]
    for document in documents:
        webhooks = []
        for webhook in document.get("webhooks", []):
            path = webhook["clientConfig"]["service"]["path"]
            if any(part in path for part in SERVED_PATH_PARTS):
                webhook["clientConfig"] = {
                    "service": {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": port}
                }
                webhooks.append(webhook)
        document["metadata"]["name"] = f"kueue-{document['metadata']['name']}"
        document["webhooks"] = webhooks
    return documents


def webhook_service() -> dict[str, Any]:
    """The Service that webhook and conversion calls name; it resolves to this host's loopback."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": EXTERNAL_NAME},
    }


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
    webhook_port, health_port = free_port(), free_port()
    install_crds(client, config, webhook_port, timeout)
    _create(client, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    # Kueue fills the Secret with its certificate but does not create it.
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}}
    _create(client, f"/api/v1/namespaces/{NAMESPACE}/secrets", secret)
    _create(client, f"/api/v1/namespaces/{NAMESPACE}/services", webhook_service())
    webhooks = served_webhooks(config, webhook_port)
    for webhook in webhooks:
        _create(client, f"/apis/admissionregistration.k8s.io/v1/{WEBHOOK_KINDS[webhook['kind']]}", webhook)
    cert_dir = state / "kueue-certs"
    cert_dir.mkdir(exist_ok=True)
    config_file = state / "kueue-config.yaml"
    config_file.write_text(yaml.safe_dump(manager_config(WEBHOOK_HOST, webhook_port, health_port, cert_dir)))
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
