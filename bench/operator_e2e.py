"""Operator end to end on the embedded cluster: time from applying a 4,096-GPU GEMTraining (512 pods)
to every pod created and ungated, as pods/s.

The embedded cluster runs as `gemop sim up` in its own process (on a real cluster the API server
is never in the operator's process either). The bench watches the gang's pods (a watch, as
`kubectl get -w` would, not a poll: listing 512 pods several times a second would cost the
operator's process and the API server more than the work being timed) and stops the clock at
the event that completes the gang. Baseline, measured in the same run: creating 512 plain pods
one by one through the same API client (the write path's floor without planning, gating or
status). The ratio says how much of the API's raw pod-creation rate the operator keeps. Each
figure is the median of --repeat runs, each on a fresh cluster.

    python bench/operator_e2e.py [--hosts 576] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

os.environ.setdefault("GEM_RESYNC_SECONDS", "1")

from gem_operator.cli.operator import OperatorOptions, OperatorThread
from gem_operator.fleet import dump_fleet, make_fleet
from gem_operator.kube import KubeApi
from gem_testbed.drivers.demo import PEERING_NAME

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


async def watch_gang(server: str) -> None:
    """The observer (`--watch-gang`, its own process, as `kubectl get -w` in another terminal):
    prints `ready` once its watch is open, then the monotonic times at which all pods of the
    gang exist and all are ungated. Kept out of the operator's process so that decoding the
    gang's watch events does not compete with the operator for its interpreter."""
    created: set[str] = set()
    ungated: set[str] = set()
    all_created = False
    url = f"{server}/api/v1/namespaces/default/pods"
    params = {"watch": "true", "labelSelector": "gem.dev/instance=big"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session,
        session.get(url, params=params) as response,
    ):
        print("ready", flush=True)
        async for line in response.content:
            event = json.loads(line)
            pod = event["object"]
            name = pod["metadata"]["name"]
            if event["type"] == "DELETED":
                created.discard(name)
                ungated.discard(name)
                continue
            created.add(name)
            if not (pod.get("spec") or {}).get("schedulingGates"):
                ungated.add(name)
            if not all_created and len(created) >= PODS:
                all_created = True
                print(f"created {time.monotonic()}", flush=True)
            if len(ungated) >= PODS:
                print(f"ungated {time.monotonic()}", flush=True)
                return


def operator_run(hosts: int) -> tuple[float, float]:
    """Seconds from apply to all 512 pods created, and to all of them ungated."""
    with tempfile.TemporaryDirectory() as tmp:
        sim = SimProcess(hosts, Path(tmp))
        os.environ["KUBECONFIG"] = str(sim.kubeconfig)
        server = yaml.safe_load(sim.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        watcher = subprocess.Popen(
            [sys.executable, __file__, "--watch-gang", server], stdout=subprocess.PIPE, text=True
        )
        assert watcher.stdout is not None
        op = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
        op.start()

        async def main() -> float:
            kube = KubeApi.from_kubeconfig(str(sim.kubeconfig))
            assert watcher.stdout is not None and watcher.stdout.readline().strip() == "ready"
            started = time.monotonic()  # system-wide on Linux: comparable with the watcher's times
            await kube.create(JOB)
            await kube.close()
            return started

        try:
            started = asyncio.run(main())
            times = {}
            for line in watcher.stdout:  # the watcher exits once the gang is whole
                what, _, when = line.partition(" ")
                times[what] = float(when) - started
            if watcher.wait(timeout=600) != 0 or "ungated" not in times:
                raise RuntimeError("the gang watch ended before every pod was created and ungated")
            return times["created"], times["ungated"]
        finally:
            watcher.kill()
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
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--watch-gang", metavar="SERVER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.watch_gang:
        asyncio.run(watch_gang(args.watch_gang))
        return 0
    runs = [operator_run(args.hosts) for _ in range(args.repeat)]
    created = statistics.median(c for c, _ in runs)
    op = statistics.median(u for _, u in runs)
    base = statistics.median(baseline_run(args.hosts) for _ in range(args.repeat))
    op_rate, base_rate = PODS / op, PODS / base
    print(f"fleet {args.hosts} hosts x 8 GPUs; gang 4,096 GPUs = {PODS} pods (median of {args.repeat})")
    print(f"operator runs (created, ungated) s: {', '.join(f'({c:.2f}, {u:.2f})' for c, u in runs)}")
    print(f"operator: apply -> {PODS} pods created in {created:.2f} s = {PODS / created:.0f} pods/s")
    print(f"operator: apply -> {PODS} pods created and ungated in {op:.2f} s = {op_rate:.0f} pods/s")
    print(f"baseline: {PODS} plain pods created one by one in {base:.2f} s = {base_rate:.0f} pods/s")
    print(f"ratio operator/baseline: {op_rate / base_rate:.2f}")
    verdict = "PASS" if op_rate >= 100 else "FAIL"
    print(f"target >= 100 pods/s: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
