"""Fixtures for the embedded-cluster tests: a running cluster and a tiny sync HTTP client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.gem.dev"},
    "spec": {
        "group": "gem.dev",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wdg"]},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                },
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}
WIDGETS = "/apis/gem.dev/v1alpha1/namespaces/default/widgets"


class Api:
    """Plain HTTP against the emulator: returns (status, decoded JSON)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def merge(self, path: str, body: Any) -> tuple[int, Any]:
        return self("PATCH", path, body, "application/merge-patch+json")


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(fleet="demo", crds=[WIDGET_CRD], lifecycle=LifecycleConfig(0, 0)) as running:
        yield running


@pytest.fixture
def api(cluster: EmbeddedCluster) -> Api:
    return Api(cluster.url)


@pytest.fixture
def widget_crd() -> dict[str, Any]:
    return WIDGET_CRD


@pytest.fixture
def widgets_path() -> str:
    return WIDGETS


@pytest.fixture
def pod_factory() -> Any:
    return make_pod


def make_pod(name: str, gpus: int = 0, **spec: Any) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}], **spec},
    }
