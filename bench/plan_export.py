"""`gemop plan` on a large cluster export: parse time and whole-command time, beside the old loader.

Writes `kubectl get nodes,pods -A -o json`-shaped exports of --nodes GPU nodes and one 8-GPU pod
bound to every other node, in two shapes: the fleet's node fields (names, labels, capacity,
conditions: about what the 11.2 s figure of the pure-Python loader was measured on) and nodes with
what kubectl prints for a real one (addresses, images, nodeInfo, managedFields; 20x the bytes).
For each it measures, in wall and CPU seconds (the machine may be shared):

- parsing it with the pure-Python YAML loader (what `gemop plan` used for every file),
- parsing it as `gemop plan` does now (`load_cluster`: json.loads for JSON),
- the whole command, `python -m gem_operator.cli plan JOB --nodes EXPORT`, as a new process.

    python bench/plan_export.py [--nodes 10000] [--shape fleet|detailed|both] [--old-detailed]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gem_operator.cli.plan import load_cluster
from gem_operator.fleet import GPU, make_fleet

JOB = {"kind": "GEMTraining", "spec": {"parallelism": {"pp": 64, "tp": 8}, "checkpoint": {"uri": "s3://c/b"}}}
IMAGES = [f"registry.example/team-{i}/image:{i}.0" for i in range(12)]


def _node(source: dict[str, Any], index: int) -> dict[str, Any]:
    name = source["metadata"]["name"]
    now = "2026-01-01T00:00:00Z"
    conditions = [
        {"type": kind, "status": status, "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now}
        for kind, status, reason in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        )
    ]
    capacity = {"cpu": "224", "memory": "2113186276Ki", "pods": "110", "ephemeral-storage": "3750000000Ki", GPU: "8"}
    address = f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"
    node_id = f"{index:032x}"
    node_info = {"architecture": "amd64", "kubeletVersion": "v1.35.4", "osImage": "Ubuntu 24.04"}
    node_info.update(containerRuntimeVersion="containerd://2.1.0", kernelVersion="6.8.0")
    node_info.update(machineID=node_id, systemUUID=node_id, bootID=node_id)
    status = {
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
        "allocatable": capacity,
        "capacity": capacity,
        "conditions": conditions,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": [{"names": [image], "sizeBytes": 1_000_000 * (i + 1)} for i, image in enumerate(IMAGES)],
        "nodeInfo": node_info,
    }
    managed: dict[str, Any] = {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": now}
    managed.update(fieldsType="FieldsV1", fieldsV1={"f:status": {"f:conditions": {}, "f:images": {}}})
    metadata = {
        **source["metadata"],
        "uid": f"{index:08x}-0000-0000-0000-000000000000",
        "resourceVersion": str(1000 + index),
        "creationTimestamp": now,
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        "managedFields": [managed],
    }
    spec = {"podCIDR": "10.244.0.0/24"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec, "status": status}


def _pod(node: str, index: int) -> dict[str, Any]:
    container = {"name": "trainer", "image": IMAGES[0], "resources": {"limits": {GPU: "8"}, "requests": {GPU: "8"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"train-{index}", "namespace": "team", "uid": f"pod-{index}"},
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }


def write_export(path: Path, hosts: int, detailed: bool) -> tuple[int, int]:
    """The export; `detailed` nodes carry what kubectl prints for a real node, else the fleet's fields only."""
    fleet = make_fleet(hosts, 8, hosts_per_nvlink_domain=18, hosts_per_rack=18, racks_per_block=8)
    nodes = [_node(dict(n), i) if detailed else {"apiVersion": "v1", "kind": "Node", **n} for i, n in enumerate(fleet)]
    pods = [_pod(n["metadata"]["name"], i) for i, n in enumerate(nodes) if i % 2]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*nodes, *pods]}, indent=4))
    return len(nodes), len(pods)


def _timed(action: Any) -> tuple[float, float]:
    """Wall and CPU seconds (this process and its children): the machine may be shared."""
    started, cpu = time.perf_counter(), _cpu()
    action()
    return time.perf_counter() - started, _cpu() - cpu


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(hosts: int, detailed: bool, old: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        export, job = Path(tmp) / "cluster.json", Path(tmp) / "job.json"
        nodes, pods = write_export(export, hosts, detailed)
        job.write_text(json.dumps(JOB))
        size = export.stat().st_size / 2**20
        shape = "kubectl-detailed nodes" if detailed else "the fleet's node fields"
        print(f"export ({shape}): {nodes} nodes, {pods} pods, {size:.1f} MiB of JSON")
        if old:
            text = export.read_text()
            wall, cpu = _timed(lambda: list(yaml.load_all(text, Loader=yaml.SafeLoader)))
            print(f"  parse, pure-Python YAML loader (before): {wall:.2f} s wall, {cpu:.2f} s CPU")
        wall, cpu = _timed(lambda: load_cluster(export))
        print(f"  parse, gemop plan's loader (json.loads):  {wall:.2f} s wall, {cpu:.2f} s CPU  [target < 1 s]")
        command = [sys.executable, "-m", "gem_operator.cli", "plan", str(job), "--nodes", str(export)]
        done: list[subprocess.CompletedProcess[str]] = []
        wall, cpu = _timed(lambda: done.append(subprocess.run(command, capture_output=True, text=True)))
        code = done[0].returncode
        print(f"  whole command (new process, exit {code}): {wall:.2f} s wall, {cpu:.2f} s CPU  [target < 2 s]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--shape", choices=("fleet", "detailed", "both"), default="both")
    parser.add_argument(
        "--old-detailed", action="store_true", help="also time the old loader on detailed nodes (minutes)"
    )
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if args.shape in ("fleet", "both"):
        measure(args.nodes, detailed=False, old=True)
    if args.shape in ("detailed", "both"):
        measure(args.nodes, detailed=True, old=args.old_detailed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
