"""Bad input to `gemop plan`, `gemop replay`, `gemop sim up`, `gemop demo`: one clear line, no traceback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gem_operator.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "crds" / "samples"
TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"


def one_line_error(capsys: pytest.CaptureFixture[str], code: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["plan", "/nonexistent/job.yaml"], ["JOB /nonexistent/job.yaml: cannot read"]),
        (["plan", str(SAMPLES / "rankingservice.yaml")], ["no GEMTraining in it (found RankingService)"]),
        (["plan", str(ROOT / "README.md")], ["not valid YAML (line"]),
        (["plan", str(SAMPLES / "gemtraining.yaml"), "--fleet", "nope"], ["--fleet nope", "demo, large"]),
        (
            ["plan", str(SAMPLES / "gemtraining.yaml"), "--nodes", str(SAMPLES / "rankingservice.yaml")],
            ["no Node objects", "kubectl get nodes -o yaml"],
        ),
        (["sim", "up", "--fleet", "nope"], ["--fleet nope"]),
        (["sim", "up", "--kubeconfig", "/nonexistent/dir/kc"], ["--kubeconfig", "does not exist"]),
        (["demo", "--plot", "/nonexistent/dir/demo.png"], ["--plot", "does not exist"]),
        (
            ["replay", "--trace", str(TRACE), "--service", str(SAMPLES / "rankingservice.yaml"), "--plot",
             "/nonexistent/dir/r.png"],
            ["--plot", "does not exist"],
        ),
        (["replay", "--trace", "/nonexistent.csv", "--service", str(SAMPLES / "rankingservice.yaml")], ["cannot read"]),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(argv: list[str], needles: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    one_line_error(capsys, 2, *needles)


def test_sim_up_on_a_port_in_use_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["sim", "up", "--port", str(port), "--kubeconfig", "/tmp/unused.kubeconfig"]) == 2
    one_line_error(capsys, 2, f"--port {port}", "is in use")


def test_plan_says_which_nodes_and_warns_without_topology_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", str(SAMPLES / "gemtraining.yaml"), "--fleet", "demo", "--output", "json"]) == 0
    out = capsys.readouterr()
    json.loads(out.out)  # stdout stays JSON
    assert "simulated fleet 'demo' (8 nodes)" in out.err and "warning" not in out.err
    bare = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"gpu-{i}", "labels": {"kubernetes.io/hostname": f"gpu-{i}"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(4)
    ]
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": bare}))
    main(["plan", str(SAMPLES / "gemtraining.yaml"), "--nodes", str(nodes)])
    err = capsys.readouterr().err
    assert f"nodes from {nodes} (4 nodes)" in err
    assert "warning: none of the 4 nodes carries a topology label (nvidia.com/gpu.clique" in err


def _node(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.mark.parametrize(
    ("broken", "needle"),
    [
        ({"metadata": {"name": "gpu-1", "labels": ["rack-a"]}}, "--nodes: Node 'gpu-1' is not shaped as a Node"),
        ({"status": "Ready"}, "--nodes: Node 'gpu-1' is not shaped as a Node"),
        ({"metadata": {"labels": {}}}, "--nodes: Node #2 in the file is not shaped as a Node"),
        (
            {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "gpu-0", "containers": 5}},
            "--nodes/--pods: Pod 'p' is not shaped as a Pod",
        ),
    ],
)
def test_plan_names_an_object_the_cluster_view_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: dict[str, object], needle: str
) -> None:
    """A hand-edited export (a label map written as a list) was a traceback; now exit 2 naming the object."""
    items = [_node("gpu-0"), {**_node("gpu-1"), **broken}]
    if broken.get("kind") == "Pod":
        items[1] = broken
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["plan", str(SAMPLES / "gemtraining.yaml"), "--nodes", str(nodes)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and needle in err and "kubectl get nodes,pods -A -o json" in err, err


def test_sim_up_fleet_error_from_a_subprocess_is_one_line() -> None:
    """As a person runs it: exit 2 and one line on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "gem_operator.cli", "sim", "up", "--fleet", "/nonexistent/fleet.yaml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


DEEP = "[" * 100_000 + "]" * 100_000  # json's and PyYAML's parsers recurse once per level


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "{deep}"], "JOB {deep}: nested too deeply to be a Kubernetes object"),
        (["plan", str(SAMPLES / "gemtraining.yaml"), "--nodes", "{deep}"], "--nodes {deep}: nested too deeply"),
        (["replay", "--trace", str(TRACE), "--service", "{deep}"], "{deep}: invalid YAML: nested too deeply"),
        (["replay", "--trace", "{deep}", "--service", str(SAMPLES / "rankingservice.yaml")], "line 1: invalid JSON"),
        (
            ["replay", "--trace", str(TRACE), "--service", str(SAMPLES / "rankingservice.yaml"), "--profile", "{deep}"],
            "{deep}: not JSON: nested too deeply for a profile",
        ),
    ],
)
def test_deeply_nested_files_are_one_line(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A RecursionError from the parser was a traceback; now the same one line as any malformed file."""
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    assert main([a.format(deep=deep) for a in argv]) == 2
    one_line_error(capsys, 2, needle.format(deep=deep))
