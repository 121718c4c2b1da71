"""Operator end to end on the embedded cluster: time from applying a 4,096-GPU GEMTraining (512 pods)
to every pod created and ungated, as pods/s.

The embedded cluster runs as `gemop sim up` in its own process (on a real cluster the API server
is never in the operator's process either). Baseline, measured in the same run the same way:
creating 512 plain pods one by one through the same API client (the write path's floor without
planning, gating or status). The
ratio says how much of the API's raw pod-creation rate the operator keeps.

    python bench/operator_e2e.py [--hosts 576] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("GEM_RESYNC_SECONDS", "1")

from gem_operator.cli.demo import PEERING_NAME
from gem_operator.cli.operator import OperatorOptions, OperatorThread
from gem_operator.kube import KubeApi
from gem_operator.sim.fleet import dump_fleet, make_fleet

JOB: dict[str, Any] = {
    "apiVersion": "gem.dev/v1alpha1",
    "kind": "GEMTraining",
    "metadata": {"name": "big", "namespace": "default"},
    "spec": {
        "parallelism": {"pp": 8, "dpReplicate": 4, "dpShard": 8, "cp": 2, "tp": 8, "ep": 4},
        "gpusPerNode": 8,
        "checkpoint": {"uri": "s3://ckpt/big"},
    },
}
PODS = 512


class SimProcess:
    """`gemop sim up` in its own process, as a user would run it: the API on another core."""

    def __init__(self, hosts: int, tmp: Path) -> None:
        fleet = make_fleet(hosts, 8, hosts_per_nvlink_domain=9, hosts_per_rack=18, racks_per_block=8)
        fleet_file = tmp / "fleet.yaml"
        fleet_file.write_text(dump_fleet(fleet))
        self.kubeconfig = tmp / "kubeconfig"
        cmd = [sys.executable, "-m", "gem_operator.cli", "sim", "up", "--fleet", str(fleet_file),
               "--kubeconfig", str(self.kubeconfig)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "embedded cluster serving at ..."

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


async def _count_ungated(kube: KubeApi) -> int:
    pods = await kube.list("v1", "Pod", "default", {"gem.dev/instance": "big"})
    return sum(1 for p in pods if not p["spec"].get("schedulingGates"))


def operator_run(hosts: int) -> float:
    """Seconds from apply to all 512 pods created and ungated."""
    with tempfile.TemporaryDirectory() as tmp:
        sim = SimProcess(hosts, Path(tmp))
        os.environ["KUBECONFIG"] = str(sim.kubeconfig)
        op = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
        op.start()

        async def main() -> float:
            kube = KubeApi.from_kubeconfig(str(sim.kubeconfig))
            started = time.perf_counter()
            await kube.create(JOB)
            while await _count_ungated(kube) < PODS:
                if time.perf_counter() - started > 600:
                    raise TimeoutError("the gang was not created and ungated within 600 s")
                await asyncio.sleep(0.25)
            elapsed = time.perf_counter() - started
            await kube.close()
            return elapsed

        try:
            return asyncio.run(main())
        finally:
            op.stop()
            sim.close()


def baseline_run(hosts: int) -> float:
    """Seconds to create 512 plain pods sequentially through the same client."""
    with tempfile.TemporaryDirectory() as tmp:
        sim = SimProcess(hosts, Path(tmp))

        async def main() -> float:
            kube = KubeApi.from_kubeconfig(str(sim.kubeconfig))
            started = time.perf_counter()
            for i in range(PODS):
                await kube.create(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": f"plain-{i}", "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": "x"}]},
                    }
                )
            elapsed = time.perf_counter() - started
            await kube.close()
            return elapsed

        try:
            return asyncio.run(main())
        finally:
            sim.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=576, help="fleet size (8 GPUs each)")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    op = min(operator_run(args.hosts) for _ in range(args.repeat))
    base = min(baseline_run(args.hosts) for _ in range(args.repeat))
    op_rate, base_rate = PODS / op, PODS / base
    print(f"fleet {args.hosts} hosts x 8 GPUs; gang 4,096 GPUs = {PODS} pods (best of {args.repeat})")
    print(f"operator: apply -> {PODS} pods created and ungated in {op:.2f} s = {op_rate:.0f} pods/s")
    print(f"baseline: {PODS} plain pods created one by one in {base:.2f} s = {base_rate:.0f} pods/s")
    print(f"ratio operator/baseline: {op_rate / base_rate:.2f}")
    verdict = "PASS" if op_rate >= 100 else "FAIL"
    print(f"target >= 100 pods/s: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
