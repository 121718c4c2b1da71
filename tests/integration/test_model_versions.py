"""Model versions on the embedded cluster: a GEMTraining learns its exported versions from the trainer's
termination message, and a RankingService naming ``model.fromTraining`` follows them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gem_operator.cli.operator import OperatorThread
from gem_testbed.cluster import EmbeddedCluster

pytestmark = pytest.mark.integration
SAMPLES = Path(__file__).resolve().parents[2] / "crds" / "samples"
GEM = "gem.dev/v1alpha1"
EXPORTS = "s3://gem-models/exports/gem-pretrain"


def _sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    return doc


def _version(n: int, step: int) -> dict[str, Any]:
    return {"version": n, "uri": f"{EXPORTS}/v{n}", "step": step, "eval": {"ctr": {"auc": 0.7 + n / 100}}}


def _ranker(name: str, training: str) -> dict[str, Any]:
    doc = _sample("rankingservice")
    doc["metadata"]["name"] = name
    doc["spec"]["model"] = {"fromTraining": {"name": training, "version": "latest"}}
    doc["spec"].pop("precomputeRef", None)
    doc["spec"]["autoscaling"]["enabled"] = False
    return doc


def _precompute(training: str, version: int) -> dict[str, Any]:
    doc = _sample("solarisprecompute")
    doc["spec"]["model"] = {"fromTraining": {"name": training, "version": version}}
    doc["spec"]["autoscaling"]["enabled"] = False
    return doc


def _model_uri(cluster: EmbeddedCluster, name: str, role: str = "server") -> str | None:
    deployment = cluster.get("apps/v1", "Deployment", f"{name}-{role}", "default")
    if deployment is None:
        return None
    containers = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in containers[0].get("env") or []}
    return env.get("GEM_MODEL_URI")


def _status_model(cluster: EmbeddedCluster, name: str) -> Any:
    ranker = cluster.get(GEM, "RankingService", name, "default") or {}
    return (ranker.get("status") or {}).get("model")


def _running_worker(cluster: EmbeddedCluster) -> str:
    def running() -> str | None:
        pods = cluster.list("v1", "Pod", "default", {"gem.dev/instance": "gem-pretrain"})
        live = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return live[0]["metadata"]["name"] if live else None

    name = cluster.wait_for(running, timeout=30)
    assert name is not None
    return name


def test_versions_are_learned_and_served_by_version(
    cluster: EmbeddedCluster,
    operator: OperatorThread,
    wait_for_events: Callable[[set[tuple[str, str]]], set[tuple[str, str]]],
) -> None:
    training = _sample("gemtraining")
    training["spec"]["export"] = {"uri": EXPORTS, "intervalSteps": 100}
    training["spec"]["failurePolicy"] = {"maxRestarts": 5, "backoffSeconds": 0}
    cluster.apply(training)
    cluster.apply(_ranker("waiting-ranker", "no-such-training"))

    # The pods get the export location: flags for the built-in trainer (and GEM_EXPORT_URI for any trainer).
    pod = cluster.get("v1", "Pod", _running_worker(cluster), "default") or {}
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--export") + 1] == EXPORTS and args[args.index("--export-every") + 1] == "100"
    assert {"name": "GEM_EXPORT_URI", "value": EXPORTS} in pod["spec"]["containers"][0]["env"]

    # A trainer that exported v1 and then died reports it: the operator lists it (and restarts the gang).
    first = {"checkpoint": "step-000100", "models": [_version(1, 100)]}
    cluster.fail_pod("default", pod["metadata"]["name"], message=json.dumps(first))

    def models() -> list[int]:
        obj = cluster.get(GEM, "GEMTraining", "gem-pretrain", "default") or {}
        return [m["version"] for m in (obj.get("status") or {}).get("models") or []]

    cluster.wait_for(lambda: models() == [1], timeout=30)
    gemt = cluster.get(GEM, "GEMTraining", "gem-pretrain", "default") or {}
    assert gemt["status"]["models"][0] == _version(1, 100)

    cluster.apply(_ranker("ads-ranker", "gem-pretrain"))
    cluster.apply(_precompute("gem-pretrain", 1))  # pinned to version 1: it stays there
    cluster.wait_for(lambda: _model_uri(cluster, "ads-ranker") == f"{EXPORTS}/v1", timeout=30)
    cluster.wait_for(lambda: _model_uri(cluster, "ads-precompute", "precompute") == f"{EXPORTS}/v1", timeout=30)

    # The restarted gang exports v2: latest moves to it, and the Deployment rolls.
    second = {"checkpoint": "step-000200", "models": [_version(1, 100), _version(2, 200)]}
    cluster.fail_pod("default", _running_worker(cluster), message=json.dumps(second))
    cluster.wait_for(lambda: models() == [1, 2], timeout=30)
    cluster.wait_for(lambda: _model_uri(cluster, "ads-ranker") == f"{EXPORTS}/v2", timeout=30)
    assert _model_uri(cluster, "ads-precompute", "precompute") == f"{EXPORTS}/v1"
    # The status is written after the handler that rolled the Deployment returns: wait for it too.
    served = {"uri": f"{EXPORTS}/v2", "training": "gem-pretrain", "version": 2}
    with contextlib.suppress(TimeoutError):  # the assertion below shows what the status says instead
        cluster.wait_for(lambda: _status_model(cluster, "ads-ranker") == served, timeout=30)
    assert _status_model(cluster, "ads-ranker") == served
    wait_for_events({("gem-pretrain", "ModelExported"), ("ads-ranker", "ModelRollout")})

    # A reference to a training that does not exist creates nothing and says why.
    waiting = cluster.get(GEM, "RankingService", "waiting-ranker", "default") or {}
    assert waiting["status"]["phase"] == "WaitingForModel"
    resolved = next(c for c in waiting["status"]["conditions"] if c["type"] == "ModelResolved")
    assert resolved["status"] == "False" and resolved["reason"] == "TrainingNotFound"
    assert cluster.get("apps/v1", "Deployment", "waiting-ranker-server", "default") is None
