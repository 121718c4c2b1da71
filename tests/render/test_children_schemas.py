"""Children the operator renders, validated strictly against Kubernetes' own OpenAPI schemas.

The embedded cluster accepts any shape; a real API server does not. Every sample (and overlay
sample) is rendered as the controllers render it, and each child is validated with
kubernetes-validate in strict mode (unknown fields rejected) for the oldest Kubernetes minor the
chart supports (``kubeVersion`` in Chart.yaml) and the newest one kubernetes-validate ships.
A sample that needs a newer Kubernetes says so in a ``# requires: kubernetes >= 1.N`` line; for
older minors the test checks that validation really fails, and on the field that needs it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gem_operator.api.kinds import kind_info
from gem_operator.api.serving import RankingServiceSpec, SolarisPrecomputeSpec
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.api.validation import parse_spec
from gem_operator.render.common import Owner
from gem_operator.render.serving import render_precompute, render_ranking_service
from gem_operator.render.training import render_training

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "crds" / "samples").glob("**/*.yaml"))
PEERS = ("http://10.0.0.2:8686", "http://10.0.0.3:8686")


def _minor(text: str) -> tuple[int, int]:
    match = re.search(r"(\d+)\.(\d+)", text)
    assert match, text
    return int(match.group(1)), int(match.group(2))


def supported_minors() -> list[str]:
    chart = yaml.safe_load((ROOT / "charts" / "gem-operator" / "Chart.yaml").read_text())
    oldest = _minor(chart["kubeVersion"])
    assert chart["kubeVersion"].startswith(">="), "a bounded kubeVersion needs its upper end tested too"
    newest = _minor(kubernetes_validate.latest_version())
    assert newest >= oldest
    return [f"{oldest[0]}.{oldest[1]}", f"{newest[0]}.{newest[1]}"]


MINORS = supported_minors()


def _requires(path: Path) -> tuple[tuple[int, int], str] | None:
    """(minor, field) from ``# requires: kubernetes >= 1.N for `field` ...``."""
    for line in path.read_text().splitlines():
        if line.startswith("# requires: kubernetes >="):
            field = re.search(r"`([^`]+)`", line)
            assert field, f"{path.name}: name the field that needs it in backticks"
            return _minor(line), field.group(1)
    return None


def children(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The children the controllers create for this resource, in their fullest form."""
    meta = doc["metadata"]
    owner = Owner(
        doc["apiVersion"],
        doc["kind"],
        meta["name"],
        meta.get("namespace", "default"),
        "7f1c2a4e-0000-4000-8000-000000000001",
        tuple(sorted((meta.get("labels") or {}).items())),
    )
    spec = parse_spec(kind_info(doc["kind"]), doc)
    if isinstance(spec, GEMTrainingSpec):
        nodes = [f"gpu-{i:03d}" for i in range(spec.num_nodes)]
        topology = {n: {"nvlink": "nvl-0", "rack": "rack-0"} for n in nodes}
        placed = render_training(
            owner,
            spec,
            node_names=nodes,
            node_topology=topology,
            resume_from="step-100",
            placement_json={"planner": "gem-topology", "nodes": nodes, "score": 1.0},
            embedding_sharding_group=spec.nproc_per_node,
            peers=PEERS,
        ).all()
        suspended = render_training(owner, spec.model_copy(update={"suspend": True})).all()
        return [*placed, *suspended]
    if isinstance(spec, RankingServiceSpec):
        return render_ranking_service(owner, spec, replicas=3, peers=PEERS)
    assert isinstance(spec, SolarisPrecomputeSpec)
    return render_precompute(owner, spec, replicas=2, peers=PEERS)


def _errors(child: dict[str, Any], minor: str) -> str | None:
    try:
        kubernetes_validate.validate(child, minor, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = "/".join(str(p) for p in err.path)
        return f"{child['kind']} {child['metadata']['name']}: {path}: {err.message}"
    return None


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: str(p.relative_to(ROOT / "crds" / "samples")))
def test_children_are_valid_for_the_supported_kubernetes_versions(path: Path, minor: str) -> None:
    doc = yaml.safe_load(path.read_text())
    kids = children(doc)
    kinds = {c["kind"] for c in kids}
    assert kinds >= ({"Pod", "Service", "ConfigMap"} if doc["kind"] == "GEMTraining" else {"Deployment"})
    errors = [e for c in kids if (e := _errors(c, minor))]
    needs = _requires(path)
    if needs is not None and _minor(minor) < needs[0]:
        # The sample uses a newer field (e.g. native sidecars' restartPolicy): an older API server
        # must really refuse it, on that field and no other.
        assert errors, f"{path.name} claims to need Kubernetes {needs[0]} but validates on {minor}"
        assert all(needs[1] in e for e in errors), errors
        return
    assert errors == [], "\n".join(errors)


def test_strict_validation_catches_what_the_emulator_lets_through() -> None:
    """The check can fail: an unknown field and a wrongly typed one in a rendered pod are refused."""
    doc = yaml.safe_load((ROOT / "crds" / "samples" / "gemtraining.yaml").read_text())
    pod = next(c for c in children(doc) if c["kind"] == "Pod")
    pod["spec"]["containers"][0]["shmSize"] = "16Gi"
    assert "shmSize" in (_errors(pod, MINORS[-1]) or "")
    del pod["spec"]["containers"][0]["shmSize"]
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = ["8"]
    assert _errors(pod, MINORS[-1]) is not None
