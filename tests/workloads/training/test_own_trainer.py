"""Bring your own trainer: `training.command` runs under the rendered torchrun launch with the same env.

The pods of a GEMTraining (2 pods x 2 processes, mesh dp_replicate=2 x tp=2) are rendered by the
operator's builder and each is run here as a kubelet would run it: its container's command and
args, its env (MASTER_ADDR resolved to loopback as the rendezvous Service's DNS would, a free
MASTER_PORT), its ConfigMap mounted. The user's script (scripts/mesh_from_env.py) builds its
DeviceMesh from that env over gloo; every rank's coordinates must equal GEM_MESH_COORDS and the
rank map, and its tensor-parallel process group must hold the ranks the rank map puts beside it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_operator.api.mesh import Mesh
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.render.common import Owner
from gem_operator.render.training import CONFIG_MOUNT, render_training

pytest.importorskip("torch")
pytestmark = [pytest.mark.workloads]

SCRIPT = Path(__file__).parent / "scripts" / "mesh_from_env.py"
OWNER = Owner("gem.dev/v1alpha1", "GEMTraining", "own", "ml", "uid-own", ())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spec() -> GEMTrainingSpec:
    return GEMTrainingSpec.model_validate(
        {
            "parallelism": {"dpReplicate": 2, "tp": 2},
            "gpusPerNode": 2,
            "checkpoint": {"uri": "s3://ckpt/own"},
            "training": {"command": [sys.executable, str(SCRIPT)], "args": ["--epochs", "3"]},
            "workload": {"image": "registry.example/team/trainer:1", "args": ["--verbose"]},
        }
    )


def _launch(pod: dict[str, Any], config: dict[str, str], work: Path, port: int) -> subprocess.Popen[bytes]:
    """One pod's main container as a process: torchrun + its args, its env, its ConfigMap files."""
    container = pod["spec"]["containers"][0]
    mount = work / pod["metadata"]["name"] / "etc-gem"
    mount.mkdir(parents=True)
    for key, text in config.items():
        (mount / key).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEM_", "PET_", "TORCHELASTIC_"))}
    for item in container["env"]:
        env[item["name"]] = item["value"].replace(CONFIG_MOUNT, str(mount))
    env.update(MASTER_ADDR="127.0.0.1", PET_MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PET_MASTER_PORT=str(port))
    env.update(REPORT_DIR=str(work), OMP_NUM_THREADS="1")
    torchrun = Path(sys.executable).parent / container["command"][0]
    return subprocess.Popen(
        [str(torchrun), *container["args"]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(work / f"{pod['metadata']['name']}.log", "wb"),
    )


def test_own_trainer_builds_its_mesh_from_the_injected_env(tmp_path: Path) -> None:
    spec = _spec()
    kids = render_training(OWNER, spec)
    trainer = kids.pods[0]["spec"]["containers"][0]
    assert trainer["image"] == "registry.example/team/trainer:1"
    assert trainer["command"] == ["torchrun"]
    assert trainer["args"] == ["--no-python", sys.executable, str(SCRIPT), "--epochs", "3", "--verbose"]
    port = _free_port()
    procs = [_launch(pod, kids.config["data"], tmp_path, port) for pod in kids.pods]
    codes = [p.wait(timeout=240) for p in procs]
    logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}
    assert codes == [0, 0], logs
    mesh = Mesh(1, 2, 1, 1, 2)
    reports = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    for rank, report in enumerate(reports):
        assert report["rank"] == rank and report["world"] == 4
        assert report["argv"] == ["--epochs", "3", "--verbose"]
        assert report["mesh_coords"] == report["env_coords"] == report["map_coords"] == list(mesh.coords(rank))
        assert report["map_rank"] == rank
        assert report["checkpoint_uri"] == "s3://ckpt/own"
    tp_groups = {tuple(r["tp_members"]) for r in reports}
    assert tp_groups == {(0, 1), (2, 3)}  # tp is the innermost dim: neighbours on one host


def test_own_trainer_needs_an_image() -> None:
    with pytest.raises(ValueError, match=r"set workload\.image"):
        GEMTrainingSpec.model_validate(
            {"checkpoint": {"uri": "s3://c/j"}, "training": {"command": ["python", "/app/train.py"]}}
        )
