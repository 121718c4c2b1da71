"""The kind e2e path without Docker: its cluster fits the samples, its values fit the chart, its script parses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from gem_operator.api.kinds import GEM_TRAINING
from gem_operator.api.training import DEFAULT_TIERS, GEMTrainingSpec
from gem_operator.api.validation import parse_spec
from gem_operator.topology import Infeasible, cluster_view_from_objects, plan_gang

ROOT = Path(__file__).resolve().parents[2]
KIND = ROOT / "e2e" / "kind"


def kind_nodes() -> list[dict[str, Any]]:
    """The Nodes kind creates from cluster.yaml, with the GPUs run.sh patches in."""
    config = yaml.safe_load((KIND / "cluster.yaml").read_text())
    nodes = []
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    for i, worker in enumerate(workers):
        name = f"{config['name']}-worker" + (str(i + 1) if i else "")
        gpus = {"nvidia.com/gpu": "8", "cpu": "8", "memory": "16Gi", "pods": "110"}
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **worker.get("labels", {})}},
                "status": {
                    "capacity": gpus,
                    "allocatable": gpus,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    return nodes


def test_workers_carry_every_topology_tier() -> None:
    nodes = kind_nodes()
    assert len(nodes) == 4
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert {label for _, label in DEFAULT_TIERS} <= set(labels), labels
        assert labels["nvidia.com/gpu.present"] == "true"  # run.sh and the chart's DaemonSet select on it
    assert len({n["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in nodes}) == 2
    assert len({n["metadata"]["labels"]["gem.dev/rack"] for n in nodes}) == 2


def test_the_gemtraining_sample_fits_the_kind_cluster() -> None:
    job = yaml.safe_load((ROOT / "crds" / "samples" / "gemtraining.yaml").read_text())
    spec = parse_spec(GEM_TRAINING, job)
    assert isinstance(spec, GEMTrainingSpec)
    result = plan_gang(spec, cluster_view_from_objects(kind_nodes(), []))
    assert not isinstance(result, Infeasible), result
    assert len(set(result.nodes)) == 4


def test_kind_values_fit_the_chart() -> None:
    values = yaml.safe_load((KIND / "values.yaml").read_text())
    with helm.Chart.load(ROOT / "charts" / "gem-operator") as chart:
        chart.validate_schema(values)
        out = chart.render(values, name="gem-operator", namespace="gem-system")
    deploy = yaml.safe_load(next(t for p, t in out.items() if p.endswith("deployment.yaml")))
    assert deploy["metadata"]["name"] == "gem-operator"  # run.sh waits on deploy/gem-operator
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "gem-operator:e2e" and c["imagePullPolicy"] == "Never"
    assert "--namespace=gem-e2e" in c["args"]  # the suite's own namespace (run.sh NAMESPACE)
    assert "NAMESPACE=gem-e2e" in (KIND / "run.sh").read_text()


def test_run_script_parses_and_passes_shellcheck() -> None:
    script = KIND / "run.sh"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout
