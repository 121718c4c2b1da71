"""spec.precision: the servers' and workers' flag, the planning init container, status.precision."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from gem_operator.api.serving import PrecisionStatus, RankingServiceSpec, SolarisPrecomputeSpec
from gem_operator.controllers.status import precision_plan
from gem_operator.render.common import Owner
from gem_operator.render.serving import render_precompute, render_ranking_service

OWNER = Owner("gem.dev/v1alpha1", "RankingService", "rank", "prod", "u-2")


def _ranking(**extra: object) -> RankingServiceSpec:
    return RankingServiceSpec.model_validate({"model": {"uri": "s3://m/v1"}, "gpusPerReplica": 1, **extra})


def _precompute(**extra: object) -> SolarisPrecomputeSpec:
    return SolarisPrecomputeSpec.model_validate(
        {"model": {"uri": "s3://m/f"}, "store": {"url": "redis://s:6379/0"}, "source": {"url": "redis://s:6379/0"}}
        | extra
    )


def _pod(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = manifests[0]["spec"]["template"]["spec"]
    return pod


def _pods(**extra: object) -> list[dict[str, Any]]:
    """The ranker's and the precompute workers' pod specs."""
    return [
        _pod(render_ranking_service(OWNER, _ranking(**extra), 1)),
        _pod(render_precompute(OWNER, _precompute(**extra), 1)),
    ]


def test_fp32_is_the_default_and_renders_todays_pods() -> None:
    assert _ranking().precision == "fp32" and _precompute().precision == "fp32"
    for pod in _pods():
        assert [c["name"] for c in pod["initContainers"]] == ["model-loader"]
        assert "--precision" not in pod["containers"][0]["args"]


@pytest.mark.parametrize("precision", ["auto", "bf16", "fp8"])
def test_precision_reaches_the_flag_and_a_planning_init_container(precision: str) -> None:
    for pod in _pods(precision=precision):
        main = pod["containers"][0]
        i = main["args"].index("--precision")
        assert main["args"][i + 1] == precision
        loader, plan = pod["initContainers"]
        assert loader["name"] == "model-loader" and plan["name"] == "precision-plan"  # plans after the load
        assert plan["args"][:2] == ["-m", "gem_workloads.serving.plan_precision"]
        assert plan["args"][plan["args"].index("--precision") + 1] == precision
        assert plan["image"] == main["image"]
        assert plan["resources"] == main["resources"]  # the same GPU: plans on the device it serves on
        mount = next(m for m in plan["volumeMounts"] if m["name"] == "model")
        assert not mount.get("readOnly")  # it records the plan; the server's mount stays read-only
        assert next(m for m in main["volumeMounts"] if m["name"] == "model")["readOnly"] is True


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValidationError, match="precision"):
        _ranking(precision="int4")


def _pod_status(message: str | None, name: str = "precision-plan") -> dict[str, Any]:
    terminated = {"exitCode": 0} | ({"message": message} if message is not None else {})
    return {"status": {"initContainerStatuses": [{"name": name, "state": {"terminated": terminated}}]}}


def test_status_reads_the_plan_from_the_termination_message() -> None:
    summary = {
        "requested": "auto",
        "device": "cuda",
        "layers": {"bf16": 9, "fp32": 4},
        "aucDelta": -0.0002,
        "meanScoreError": 0.001,
        "speedup": 1.4,
        "extra": "dropped",
    }
    pods = [_pod_status(None), _pod_status("not json"), _pod_status(json.dumps({"precision": summary}))]
    found = precision_plan(pods)
    assert found is not None and "extra" not in found
    status = PrecisionStatus.model_validate(found)  # what the status patch carries fits the CRD's model
    assert status.layers == {"bf16": 9, "fp32": 4} and status.auc_delta == -0.0002
    assert precision_plan([_pod_status(json.dumps({"precision": summary}), name="model-loader")]) is None
    assert precision_plan([]) is None
