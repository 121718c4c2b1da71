"""Real clients against the embedded cluster: lightkube's async client and kubectl."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import subprocess
from typing import Any

import pytest

from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig

pytestmark = pytest.mark.timeout(60)


async def test_lightkube_async_client(tmp_path: pathlib.Path) -> None:
    lightkube = pytest.importorskip("lightkube")
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.models.apps_v1 import DaemonSetSpec, DeploymentSpec
    from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec, ServicePort, ServiceSpec
    from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
    from lightkube.resources.apps_v1 import DaemonSet, Deployment
    from lightkube.resources.core_v1 import ConfigMap, Pod, Service

    async with EmbeddedCluster(fleet="demo", lifecycle=LifecycleConfig(0, 0)) as cluster:
        config = KubeConfig.from_file(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
        client = lightkube.AsyncClient(config=config, namespace="default")
        try:
            labels = {"app": "web"}
            template = PodTemplateSpec(
                metadata=ObjectMeta(labels=labels), spec=PodSpec(containers=[Container(name="c")])
            )
            selector = LabelSelector(matchLabels=labels)
            await client.create(ConfigMap(metadata=ObjectMeta(name="cm", labels=labels), data={"a": "1"}))
            await client.create(
                Service(metadata=ObjectMeta(name="svc"), spec=ServiceSpec(ports=[ServicePort(port=80)]))
            )
            await client.create(Pod(metadata=ObjectMeta(name="pod"), spec=PodSpec(containers=[Container(name="c")])))
            await client.create(
                Deployment(
                    metadata=ObjectMeta(name="web"),
                    spec=DeploymentSpec(selector=selector, template=template, replicas=2),
                )
            )
            await client.create(
                DaemonSet(metadata=ObjectMeta(name="ds"), spec=DaemonSetSpec(selector=selector, template=template))
            )

            cm = await client.get(ConfigMap, "cm")
            assert cm.data == {"a": "1"} and cm.metadata.uid
            patched = await client.patch(
                ConfigMap, "cm", {"data": {"a": "2"}}, patch_type=lightkube.types.PatchType.MERGE
            )
            assert patched.data == {"a": "2"}
            names = [c.metadata.name async for c in client.list(ConfigMap, labels={"app": "web"})]
            assert names == ["cm"]
            svc = await client.get(Service, "svc")
            assert svc.spec.ports[0].port == 80
            for _ in range(100):
                deploy = await client.get(Deployment, "web")
                if deploy.status and deploy.status.readyReplicas == 2:
                    break
                await asyncio.sleep(0.02)
            else:
                pytest.fail("deployment never became ready")
            pod = await client.get(Pod, "pod")
            assert pod.spec.nodeName
            await client.delete(ConfigMap, "cm")
            assert [c async for c in client.list(ConfigMap)] == []
            await client.delete(Deployment, "web")
            await client.delete(DaemonSet, "ds")
            pods = [p.metadata.name async for p in client.list(Pod)]
            assert pods == ["pod"]  # the rest were garbage-collected with their owners
        finally:
            await client.close()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_create_patch_delete(cluster: EmbeddedCluster, tmp_path: pathlib.Path) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm"},
        "data": {"a": "1"},
    }
    kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(manifest))
    kubectl("patch", "configmap", "cm", "--type=merge", "-p", '{"data":{"a":"2"}}')
    assert json.loads(kubectl("get", "configmap", "cm", "-o", "json"))["data"] == {"a": "2"}
    assert "gpu-007" in kubectl("get", "nodes")
    widget = {
        "apiVersion": "gem.dev/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"replicas": 1},
    }
    kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(widget))
    assert "w" in kubectl("get", "wdg")
    kubectl("delete", "configmap", "cm")
    assert cluster.get("v1", "ConfigMap", "cm", "default") is None
