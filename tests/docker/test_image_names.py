"""The image names and tags agree everywhere a user meets them: README, Dockerfile, chart, CRD defaults."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from gem_operator.api.common import WORKLOADS_REPOSITORY, WORKLOADS_TAG, default_workloads_image
from gem_operator.api.serving import RankingServiceSpec
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.render.common import Owner
from gem_operator.render.serving import render_ranking_service
from gem_operator.render.training import render_training

ROOT = Path(__file__).resolve().parents[2]


def test_release_tag_is_one_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts/gem-operator/Chart.yaml").read_text())
    assert WORKLOADS_TAG == version == chart["appVersion"]


def test_chart_readme_and_dockerfile_name_the_same_images() -> None:
    values = yaml.safe_load((ROOT / "charts/gem-operator/values.yaml").read_text())
    operator_image = f"{values['image']['repository']}:{WORKLOADS_TAG}"
    assert values["modelCache"]["image"]["repository"] == WORKLOADS_REPOSITORY
    wanted = {operator_image, default_workloads_image(False), default_workloads_image(True)}
    readme = (ROOT / "README.md").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text()
    for text in (readme, dockerfile):
        built = set(re.findall(r"docker build [^`\n]*-t (\S+) \.", text))
        assert built == wanted, built
    assert "WORKLOADS_BASE=cuda -t " + default_workloads_image(True) in readme


def test_gpu_pods_default_to_the_cuda_image_cpu_pods_to_the_cpu_one() -> None:
    owner = Owner("gem.dev/v1alpha1", "GEMTraining", "j", "ml", "u")
    training = GEMTrainingSpec.model_validate({"parallelism": {"tp": 8}, "checkpoint": {"uri": "s3://c/j"}})
    (pod,) = render_training(owner, training).pods
    assert pod["spec"]["containers"][0]["image"] == f"{WORKLOADS_REPOSITORY}:{WORKLOADS_TAG}-cuda"
    rks = Owner("gem.dev/v1alpha1", "RankingService", "r", "ml", "u")
    for gpus, image in ((1, default_workloads_image(True)), (0, default_workloads_image(False))):
        spec = RankingServiceSpec.model_validate({"model": {"uri": "s3://m/v1"}, "gpusPerReplica": gpus})
        deploy, _ = render_ranking_service(rks, spec, 1)
        template = deploy["spec"]["template"]["spec"]
        assert {c["image"] for c in template["containers"] + template["initContainers"]} == {image}
    custom = RankingServiceSpec.model_validate({"model": {"uri": "s3://m/v1"}, "workload": {"image": "reg/x:1"}})
    deploy, _ = render_ranking_service(rks, custom, 1)
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/x:1"
