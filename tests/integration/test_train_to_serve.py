"""Train, export, serve, replay, for real, on one machine: the served scores' AUC is the offline eval's.

MovieLens-100k and a generated multi-domain ads log (three surfaces, CTR and CVR, purchases and
posts as event sources with different features) are written as Parquet to an S3 endpoint (moto),
each example source cut in time into training data and later data (gem_testbed.drivers.logs). A
GEMTraining of two gloo processes (one pod, torchrun) trains on them on the embedded cluster's
process kubelet, with checkpoints and exports in the same endpoint; its trainer exports a version
scored on the later data, which the operator learns from the pod's termination message.
A RankingService naming ``model.fromTraining: latest`` loads that version with the real loader
from the same endpoint and serves it; the replayer sends the version's holdout as labelled
requests through the Service, and the AUC of the served scores must equal the trainer's.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchrec")
moto_server = pytest.importorskip("moto.server")

from gem_operator.api.crd import gem_crds  # noqa: E402
from gem_operator.cli.operator import OperatorOptions, OperatorThread  # noqa: E402
from gem_testbed.cluster import EmbeddedCluster  # noqa: E402
from gem_testbed.drivers.demo import PEERING_NAME, peering_object  # noqa: E402
from gem_testbed.drivers.logs import Logs, upload, write_logs  # noqa: E402
from gem_testbed.kubelets.lifecycle import LifecycleConfig  # noqa: E402
from gem_testbed.kubelets.processes import PROCESS_KINDS, ProcessConfig  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.workloads, pytest.mark.servers, pytest.mark.slow]

GEM = "gem.dev/v1alpha1"
BUCKET = "gem-e2e"
HOLDOUT = 1000


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def logs(tmp_path: Path, s3_env: dict[str, str]) -> Logs:
    """The two datasets as Parquet in the bucket, split in time; the data spec block that reads them."""
    import boto3

    written = write_logs(tmp_path / "logs", f"s3://{BUCKET}/logs")
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    assert upload(tmp_path / "logs", BUCKET, "logs", client) > 10
    return written


@pytest.fixture
def s3_env() -> Iterator[dict[str, str]]:
    """moto's S3 on loopback, with the bucket; the AWS_* variables every pod and this test use."""
    port = _port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    import boto3

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1").create_bucket(Bucket=BUCKET)
    try:
        yield env
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def cluster(tmp_path: Path, s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedCluster]:
    config = ProcessConfig(
        root=tmp_path / "kubelet",
        max_processes=4,
        kinds=PROCESS_KINDS | {"gemtraining"},
        env={**s3_env, "OMP_NUM_THREADS": "1", "GEM_NUM_THREADS": "1"},
    )
    with EmbeddedCluster("demo", list(gem_crds().values()), lifecycle=LifecycleConfig(0, 0), run_pods=config) as c:
        monkeypatch.setenv("KUBECONFIG", str(c.write_kubeconfig(tmp_path / "kubeconfig")))
        c.apply(peering_object(PEERING_NAME, "default"))
        yield c


def _training(logs: Logs) -> dict[str, Any]:
    return {
        "apiVersion": GEM,
        "kind": "GEMTraining",
        "metadata": {"name": "e2e", "namespace": "default"},
        "spec": {
            "parallelism": {"dpShard": 2},
            "gpusPerNode": 2,
            "checkpoint": {"uri": f"s3://{BUCKET}/checkpoints/e2e", "intervalSteps": 100},
            "export": {
                "uri": f"s3://{BUCKET}/models/e2e",
                "holdoutExamples": HOLDOUT,
                "holdoutSources": logs.holdout_sources,
            },
            "training": {"preset": "tiny", "data": logs.data, "steps": 40},
            "failurePolicy": {"maxRestarts": 0},
            "workload": {
                "image": "ghcr.io/gem-dev/gem-workloads:0.1.0",
                "args": ["--batch-size", "128", "--log-every", "20", "--metrics-port", "0"],
            },
        },
    }


def _ranker() -> dict[str, Any]:
    return {
        "apiVersion": GEM,
        "kind": "RankingService",
        "metadata": {"name": "e2e-ranker", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "gpusPerReplica": 1,
            "model": {"fromTraining": {"name": "e2e", "version": "latest"}, "loader": {"streams": 4}},
            "autoscaling": {"enabled": False},
            "workload": {
                "image": "ghcr.io/gem-dev/gem-workloads:0.1.0",
                "args": ["--threads", "1", "--host", "127.0.0.1"],
            },
        },
    }


def _status(cluster: EmbeddedCluster, kind: str, name: str) -> dict[str, Any]:
    return dict(((cluster.get(GEM, kind, name, "default") or {}).get("status")) or {})


def _trainer_log(cluster: EmbeddedCluster) -> str:
    assert cluster.processes is not None
    return (cluster.processes.logs("default", "e2e-worker-0", None) or "")[-3000:]


def _holdout_requests(uri: str, work: Path) -> Path:
    """The version pulled as any pod pulls it, and its holdout written as labelled requests."""
    from gem_workloads.loader.pull import pull

    asyncio.run(pull(uri, work / "version"))
    out = work / "holdout.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "gem_workloads.training.holdout", str(work / "version"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_trained_version_serves_with_the_offline_auc(cluster: EmbeddedCluster, logs: Logs, tmp_path: Path) -> None:
    operator = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
    operator.start()
    try:
        cluster.apply(_training(logs))
        cluster.apply(_ranker())

        def exported() -> list[dict[str, Any]]:
            status = _status(cluster, "GEMTraining", "e2e")
            assert status.get("phase") != "Failed", (status, _trainer_log(cluster))
            return list(status.get("models") or [])

        models = cluster.wait_for(exported, timeout=240, interval=1.0)
        assert [m["version"] for m in models] == [1]
        offline = models[0]["eval"]
        assert set(offline) == {"ctr", "cvr", "like", "love"}  # the two datasets' tasks, one model
        assert sum(offline[t]["examples"] for t in ("ctr", "like")) == HOLDOUT  # every example has one of them

        def ready() -> bool:
            status = _status(cluster, "RankingService", "e2e-ranker")
            return status.get("phase") == "Ready" and (status.get("model") or {}).get("version") == 1

        cluster.wait_for(ready, timeout=120, interval=1.0)
        url = cluster.wait_for(lambda: cluster.service_url("default", "e2e-ranker-server"), timeout=30)
        assert url is not None
        requests = _holdout_requests(models[0]["uri"], tmp_path)
        replay = subprocess.run(
            [sys.executable, "-m", "gem_workloads.replay", "--url", url, "--labelled", str(requests)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert replay.returncode == 0, replay.stdout[-2000:] + replay.stderr[-2000:]
        served = json.loads(replay.stdout.splitlines()[-1])
        assert served["requests"] == HOLDOUT and served["model_version"] == ["e2e-v1"]
        for task, metrics in offline.items():
            assert served["eval"][task]["examples"] == metrics["examples"]
            # The server scores per request (user state shared, experts grouped by the request's
            # domains), the export in eval batches: scores agree to float rounding, which may order
            # one near-tied pair differently, and one pair moves the AUC by 1 / (positives x negatives).
            positives = metrics["positives"]
            one_pair = 1.0 / (positives * (metrics["examples"] - positives))
            assert served["eval"][task]["auc"] == pytest.approx(metrics["auc"], abs=one_pair + 1e-6), (
                task,
                served,
                offline,
            )
    finally:
        operator.stop()
