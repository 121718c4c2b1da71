"""The real kopf operator against the embedded cluster over HTTP (standalone and peering)."""

from __future__ import annotations

import pathlib
from typing import Any

import aiohttp
import kopf
import pytest
from kopf.testing import KopfRunner

from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def make_registry(url: str) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.create("gem.dev", "v1alpha1", "widgets", id="created", registry=registry)
    async def created(body: Any, name: str, namespace: str, patch: Any, **_: Any) -> dict[str, str]:
        child = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-child"},
            "data": {"k": "v"},
        }
        kopf.adopt(child, owner=body)
        async with aiohttp.ClientSession() as session:
            response = await session.post(f"{url}/api/v1/namespaces/{namespace}/configmaps", json=child)
            assert response.status == 201, await response.text()
        kopf.info(body, reason="ChildCreated", message=f"created {name}-child")
        patch.status["phase"] = "Ready"
        return {"child": f"{name}-child"}

    @kopf.timer("gem.dev", "v1alpha1", "widgets", id="tick", interval=0.1, registry=registry)
    def tick(patch: Any, status: Any, **_: Any) -> None:
        patch.status["ticks"] = int(status.get("ticks", 0)) + 1

    @kopf.on.delete("gem.dev", "v1alpha1", "widgets", id="deleted", registry=registry)
    def deleted(body: Any, **_: Any) -> None:
        kopf.info(body, reason="Deleting", message="finalizer handler ran")

    return registry


@pytest.mark.parametrize("peering", [False, True], ids=["standalone", "peering"])
def test_kopf_operator_creates_child_and_patches_status(
    widget_crd: dict[str, Any],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    peering: bool,
) -> None:
    with EmbeddedCluster(fleet=None, crds=[widget_crd], lifecycle=LifecycleConfig(0, 0)) as cluster:
        monkeypatch.setenv("KUBECONFIG", str(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
        if peering:
            peering_obj = {
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfPeering",
                "metadata": {"name": "sim", "namespace": "default"},
            }
            cluster.apply(peering_obj)
            args = ["run", "-n", "default", "--peering", "sim"]
        else:
            args = ["run", "-n", "default", "--standalone"]
        # kopf's CLI replaces the process-wide default registry; put it back for later tests.
        default_registry = kopf.get_default_registry()
        request.addfinalizer(lambda: kopf.set_default_registry(default_registry))
        with KopfRunner(args, registry=make_registry(cluster.url), timeout=30) as runner:
            widget = {
                "apiVersion": "gem.dev/v1alpha1",
                "kind": "Widget",
                "metadata": {"name": "w1", "namespace": "default"},
            }
            cluster.apply(widget)

            def ready() -> dict[str, Any] | None:
                w = cluster.get("gem.dev/v1alpha1", "Widget", "w1", "default")
                return w if w and (w.get("status") or {}).get("phase") == "Ready" else None

            obj = cluster.wait_for(ready, timeout=20)
            child = cluster.get("v1", "ConfigMap", "w1-child", "default")
            assert child is not None and child["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]

            def ticked() -> dict[str, Any] | None:
                w = cluster.get("gem.dev/v1alpha1", "Widget", "w1", "default")
                return w if w and (w.get("status") or {}).get("ticks", 0) >= 2 else None

            assert cluster.wait_for(ticked, timeout=20)["metadata"]["finalizers"]  # timers + finalizers
            if peering:
                live = cluster.get("kopf.dev/v1", "KopfPeering", "sim", "default")
                assert live is not None and live.get("status"), "kopf registered itself as a peer"
            cluster.delete("gem.dev/v1alpha1", "Widget", "w1", "default")  # kopf's finalizer holds it
            cluster.wait_for(lambda: cluster.get("gem.dev/v1alpha1", "Widget", "w1", "default") is None, 20)
        assert runner.exception is None, runner.output
        assert obj["status"]["created"] == {"child": "w1-child"}
        assert {"ChildCreated", "Deleting"} <= {e.get("reason") for e in cluster.events("default")}
        assert cluster.get("v1", "ConfigMap", "w1-child", "default") is None  # collected with its owner
