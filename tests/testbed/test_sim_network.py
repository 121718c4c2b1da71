"""Service front, node dcgm-exporter and Prometheus file_sd for pods run as processes.

One real ranking server (emulated accelerator: 40 ms of device time per one-request batch) runs as
a pod of the embedded cluster behind a Service. Open-loop load through the Service front at two
rates: the node exporter's DCGM_FI_PROF_SM_ACTIVE follows rate x 40 ms, and Debian's Prometheus,
discovering targets from the file_sd files, reads the same series and the server's own metrics.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig
from gem_testbed.kubelets.network import URL_ANNOTATION
from gem_testbed.kubelets.processes import ProcessConfig
from gem_testbed.servers.prometheus import PrometheusServer

pytest.importorskip("torch")
pytestmark = [
    pytest.mark.servers,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None and not Path("/usr/bin/prometheus").exists(),
                       reason="prometheus not installed"),
]  # fmt: skip

LABELS = {"gem.dev/kind": "rankingservice", "gem.dev/instance": "ranker", "gem.dev/role": "server"}


def _server_pod(profile: Path) -> dict[str, Any]:
    args = ["-m", "gem_workloads.serving", "--preset", "tiny", "--port", "8080", "--threads", "1"]
    args += ["--max-batch-size", "1", "--device", "emulated:test", "--device-profile", str(profile)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ranker-0", "namespace": "default", "labels": LABELS},
        "spec": {
            "containers": [
                {
                    "name": "ranker",
                    "image": "gem-workloads",
                    "command": ["python"],
                    "args": args,
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 0.5},
                }
            ]
        },
    }


SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "ranker", "namespace": "default"},
    "spec": {"selector": LABELS, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    root = tmp_path_factory.mktemp("net")
    profile = root / "profile.json"
    profile.write_text(
        json.dumps({"device": "test", "seq_len": [16], "candidates": [8], "seconds": [[0.04]],
                    "per_extra_request_seconds": [0.0]})
    )  # fmt: skip
    config = ProcessConfig(root=root / "kubelet", env={"OMP_NUM_THREADS": "1"})
    with EmbeddedCluster(fleet="demo", lifecycle=LifecycleConfig(0, 0), run_pods=config) as running:
        running.apply(SERVICE)
        running.apply(_server_pod(profile))
        running.wait_for(
            lambda: any(c["type"] == "Ready" and c["status"] == "True"
                        for c in (running.get("v1", "Pod", "ranker-0", "default") or {}).get("status", {}).get(
                            "conditions", [])),
            timeout=90, interval=0.2,
        )  # fmt: skip
        yield running


async def _open_loop(url: str, body: bytes, rate: float, seconds: float) -> int:
    ok = 0
    async with aiohttp.ClientSession() as s:

        async def one() -> None:
            nonlocal ok
            async with s.post(url + "/v1/rank", data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                ok += r.status == 200

        tasks = []
        start = time.monotonic()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return ok


def _sm_active(cluster: EmbeddedCluster) -> float | None:
    assert cluster.network is not None
    exporter = next(iter(cluster.network.exporters.values()))
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("DCGM_FI_PROF_SM_ACTIVE{") and 'pod="ranker-0"' in line:
            assert 'namespace="default"' in line and 'container="ranker"' in line and 'gpu="0"' in line
            return float(line.split()[-1])
    return None


def test_service_front_reaches_the_pod_and_sm_active_tracks_offered_load(cluster: EmbeddedCluster) -> None:
    url = cluster.wait_for(lambda: cluster.service_url("default", "ranker"))
    assert cluster.network is not None
    front = cluster.network.fronts[("default", "ranker")]
    cluster.wait_for(lambda: front.endpoints)  # endpoints follow readiness within a refresh
    service = cluster.get("v1", "Service", "ranker", "default")
    assert service is not None and service["metadata"]["annotations"][URL_ANNOTATION] == url
    with urllib.request.urlopen(url + "/v1/example-request?candidates=8", timeout=10) as r:
        body = r.read()
    readings = {}
    for rate in (5.0, 15.0):
        assert asyncio.run(_open_loop(url, body, rate, 7.0)) == int(rate * 7.0)
        value = _sm_active(cluster)
        assert value is not None
        readings[rate] = value
    # Busy fraction = offered rate x 40 ms of device time per request.
    assert readings[5.0] == pytest.approx(0.2, abs=0.08), readings
    assert readings[15.0] == pytest.approx(0.6, abs=0.12), readings


def test_prometheus_discovers_the_pods_and_node_exporters_from_file_sd(cluster: EmbeddedCluster) -> None:
    assert cluster.network is not None
    pods = json.loads(cluster.network.pod_targets_file.read_text())
    assert pods[0]["labels"] == {"namespace": "default", "pod": "ranker-0", "container": "ranker"}
    with PrometheusServer(cluster.network.sd_dir, scrape_interval=1.0) as prom:

        def query(q: str) -> list[Any]:
            params = urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(f"{prom.url}/api/v1/query?{params}", timeout=5) as r:
                result: list[Any] = json.loads(r.read())["data"]["result"]
            return result

        sm = cluster.wait_for(lambda: query('DCGM_FI_PROF_SM_ACTIVE{namespace="default", pod="ranker-0"}'),
                              timeout=20, interval=0.5)  # fmt: skip
        assert sm[0]["metric"]["container"] == "ranker"
        depth = cluster.wait_for(lambda: query('gem_ranking_queue_depth{pod="ranker-0"}'), timeout=20, interval=0.5)
        assert depth[0]["metric"]["namespace"] == "default"
