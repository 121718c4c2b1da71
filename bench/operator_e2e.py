"""Operator end to end, on the embedded cluster and on a real control plane: time from applying a
4,096-GPU GEMTraining (512 pods) to every pod created and ungated, as pods/s, and the operator's
API calls per pod.

Embedded: `gemop sim up` in its own process (on a real cluster the API server is never in the
operator's process either), the operator in this process. Real: etcd, kube-apiserver, controller
manager, scheduler and 512 KWOK GPU nodes (`gem_testbed.controlplane`), the operator installed by
its chart and run as its own process with the chart's ServiceAccount token, as `gemop sim up
--control-plane real --operator` runs it; the scheduler binds the ungated pods and KWOK walks them
to Ready while the clock runs, as on a cluster.

The bench watches the gang's pods (a watch, as `kubectl get -w` would, not a poll: listing 512 pods
several times a second would cost the operator's process and the API server more than the work
being timed) and stops the clock at the event that completes the gang. On the real control plane
the clock is the API server's own: the audit log's completion time of the last pod creation and
of the last ungating patch (the watch's time is printed beside it: a Python watch client sharing
two cores with the control plane falls seconds behind, and the API server even closes its watch as
too slow). The gang is applied once the cluster has settled: the node controller announces new
nodes in a rate-limited trickle for a minute or more after they are Ready. API calls per pod: the
requests the operator sent between the apply and the gang's last ungating, divided by 512; on the
real control plane from the API server's audit log (requests of the operator's ServiceAccount, by
the time each was received), on the embedded cluster through a counting proxy in a separate run
(a proxy in the timed run would slow the operator's process). Baseline, embedded, same run:
creating 512 plain pods one by one through the same API client (the write path's floor without
planning, gating or status). Each embedded figure is the median of --repeat runs, each on a fresh
cluster; the real control plane runs --real-repeat times (default once: it takes about a minute).

    python bench/operator_e2e.py [--control-plane both|embedded|real] [--hosts 576] [--real-hosts 512] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import yaml

os.environ.setdefault("GEM_RESYNC_SECONDS", "1")

from gem_operator.cli.operator import OperatorOptions, OperatorThread
from gem_operator.fleet import dump_fleet, make_fleet
from gem_operator.kube import KubeApi
from gem_testbed.controlplane import ControlPlane, Timeouts
from gem_testbed.controlplane.audit import events
from gem_testbed.controlplane.operator import OperatorProcess, forbidden_requests, install_operator
from gem_testbed.drivers.demo import PEERING_NAME
from gem_testbed.faults.proxy import FaultProxy

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


def _connection(kubeconfig: Path) -> tuple[str, ssl.SSLContext | bool, dict[str, str]]:
    """Server URL, TLS context and headers from a kubeconfig (token or client certificate)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    if not cluster["server"].startswith("https:"):
        return cluster["server"], False, headers
    context = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
    if user.get("client-certificate"):
        context.load_cert_chain(user["client-certificate"], user["client-key"])
    return cluster["server"], context, headers


async def watch_gang(kubeconfig: Path) -> None:
    """The observer (`--watch-gang`, its own process, as `kubectl get -w` in another terminal):
    prints `ready` once its watch is open, then the monotonic times at which all pods of the
    gang exist and all are ungated. Kept out of the operator's process so that decoding the
    gang's watch events does not compete with the operator for its interpreter."""
    created: set[str] = set()
    ungated: set[str] = set()
    all_created = False
    server, tls, headers = _connection(kubeconfig)
    url = f"{server}/api/v1/namespaces/default/pods"
    params = {"watch": "true", "labelSelector": "gem.dev/instance=big"}
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), headers=headers)
    version = ""
    async with session:
        while True:  # a watch the server ends is resumed from the last version seen, as clients do
            query = {**params, "resourceVersion": version} if version else params
            async with session.get(url, params=query, ssl=tls) as response:
                if response.status != 200:
                    raise SystemExit(f"watch answered HTTP {response.status}: {(await response.text())[:300]}")
                if not version:
                    print("ready", flush=True)
                async for line in response.content:
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        raise SystemExit(f"watch ended with {event['object']}")
                    pod = event["object"]
                    version = pod["metadata"]["resourceVersion"]
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
            print(f"watch resumed at {version} ({len(created)} created)", file=sys.stderr, flush=True)


def timed_gang(kubeconfig: Path, during: Callable[[], Any] | None = None) -> tuple[float, float, float]:
    """Applies the job through `kubeconfig` and waits for the gang: (created s, ungated s, wall-clock start).

    `during` runs once the gang is whole, before the watcher is reaped (e.g. to read counters).
    """
    watcher = subprocess.Popen(
        [sys.executable, __file__, "--watch-gang", str(kubeconfig)], stdout=subprocess.PIPE, text=True
    )
    assert watcher.stdout is not None

    async def apply() -> tuple[float, float]:
        kube = KubeApi.from_kubeconfig(str(kubeconfig))
        assert watcher.stdout is not None and watcher.stdout.readline().strip() == "ready"
        started = time.monotonic()  # system-wide on Linux: comparable with the watcher's times
        wall = time.time()
        await kube.create(JOB)
        await kube.close()
        return started, wall

    try:
        started, wall = asyncio.run(apply())
        times = {}
        for line in watcher.stdout:  # the watcher exits once the gang is whole
            what, _, when = line.partition(" ")
            times[what] = float(when) - started
        code = watcher.wait(timeout=600)
        if code != 0 or "ungated" not in times:
            raise RuntimeError(f"the gang watch ended (exit {code}, {times}) before every pod was created and ungated")
        if during is not None:
            during()
        return times["created"], times["ungated"], wall
    finally:
        watcher.kill()


def operator_run(hosts: int) -> tuple[float, float]:
    """Embedded: seconds from apply to all 512 pods created, and to all of them ungated."""
    with tempfile.TemporaryDirectory() as tmp:
        sim = SimProcess(hosts, Path(tmp))
        os.environ["KUBECONFIG"] = str(sim.kubeconfig)
        op = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
        op.start()
        try:
            created, ungated, _ = timed_gang(sim.kubeconfig)
            return created, ungated
        finally:
            op.stop()
            sim.close()


def embedded_calls_per_pod(hosts: int) -> float:
    """Embedded: the operator's requests per pod, counted by a proxy between it and the cluster."""
    with tempfile.TemporaryDirectory() as tmp:
        sim = SimProcess(hosts, Path(tmp))
        upstream = yaml.safe_load(sim.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        with FaultProxy(upstream) as proxy:
            os.environ["KUBECONFIG"] = str(proxy.write_kubeconfig(Path(tmp) / "proxy.kubeconfig"))
            op = OperatorThread(OperatorOptions(namespaces=("default",), peering_name=PEERING_NAME))
            op.start()
            before = proxy.counts["requests"]
            seen: list[int] = []
            try:
                timed_gang(sim.kubeconfig, during=lambda: seen.append(proxy.counts["requests"]))
            finally:
                op.stop()
                sim.close()
        return (seen[0] - before) / PODS


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a live process (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_by_component(plane: ControlPlane, operator: OperatorProcess) -> dict[str, float]:
    pids = {process.name: process.pid for process in plane.processes}
    pids["operator"] = operator.pid
    return {name: _cpu_seconds(pid) for name, pid in pids.items()}


class RealRun(NamedTuple):
    """One run on the real control plane; times in seconds from the apply."""

    created: float  # every pod exists, as the API server recorded it (audit log)
    ungated: float  # every gate removed, likewise
    observed: float  # every gate removed, as the watch client saw it
    calls_per_pod: float
    forbidden: int


def real_run(hosts: int, repeat: int) -> list[RealRun]:
    """Real control plane: one `RealRun` per run, each on a fresh cluster."""
    fleet = make_fleet(hosts, 8, hosts_per_nvlink_domain=8, hosts_per_rack=16, racks_per_block=8)
    return [_real_once(fleet) for _ in range(repeat)]


def _real_once(fleet: list[Any]) -> RealRun:
    started = time.monotonic()
    keep = os.environ.get("GEM_BENCH_KEEP_STATE") == "1"  # to read the logs and audit log afterwards
    with ControlPlane(fleet, timeouts=Timeouts(nodes=600.0), keep_state=keep) as plane:
        install = install_operator(plane, watched=("default",))
        with OperatorProcess(plane, install) as operator:
            print(f"  (control plane, chart and operator up in {time.monotonic() - started:.0f} s)", flush=True)
            settled = wait_until_settled(plane, len(fleet))
            print(f"  (then {settled:.0f} s until the node controller had announced every node)", flush=True)
            before = _cpu_by_component(plane, operator)
            after: list[dict[str, float]] = []
            try:
                _, observed, wall = timed_gang(
                    plane.kubeconfig, during=lambda: after.append(_cpu_by_component(plane, operator))
                )
            except RuntimeError:
                print("".join(operator.log_path.read_text().splitlines(keepends=True)[-40:]), file=sys.stderr)
                raise
            operator.stop()  # ends its watches, so the audit log holds every request it made
        own = [e for e in events(plane.audit_log, install.username) if _received(e) >= wall]
        created = max(_completed(e) for e in own if _is_pod_write(e, "create")) - wall
        ungated = max(_completed(e) for e in own if _is_pod_write(e, "patch")) - wall
        used = ", ".join(f"{name} {after[0][name] - cpu:.1f}" for name, cpu in before.items())
        print(f"  CPU seconds from apply to the gang ungated ({observed:.1f} s, {os.cpu_count()} CPUs): {used}")
        calls = sum(1 for e in own if _received(e) <= wall + ungated)
        return RealRun(created, ungated, observed, calls / PODS, len(forbidden_requests(plane, install.username)))


def wait_until_settled(plane: ControlPlane, nodes: int, timeout: float = 300.0) -> float:
    """Seconds until the node lifecycle controller has posted its RegisteredNode event for every node.

    It posts them through a rate-limited recorder (about ten a second) starting a minute after the
    nodes register, so a gang applied as soon as the nodes are Ready would share the API server
    with a cluster still booting, which no user's cluster is when a job arrives.
    """
    client = plane.admin_client()
    path = "/api/v1/namespaces/default/events?fieldSelector=reason%3DRegisteredNode"
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        status, body = client.request("GET", path)
        if status == 200 and len(body.get("items", [])) >= nodes:
            return time.monotonic() - started
        time.sleep(2.0)
    raise RuntimeError(f"the node controller had not announced all {nodes} nodes after {timeout:.0f} s")


def _is_pod_write(event: dict[str, Any], verb: str) -> bool:
    """A successful create (or patch: the operator's only pod patch removes the gang's gate) of a pod."""
    ref = event.get("objectRef") or {}
    ok = (event.get("responseStatus") or {}).get("code") in (200, 201)
    return event.get("verb") == verb and ref.get("resource") == "pods" and not ref.get("subresource") and ok


def _received(event: dict[str, Any]) -> float:
    return _stamp(event.get("requestReceivedTimestamp"))


def _completed(event: dict[str, Any]) -> float:
    """When the API server finished the request (the audit event's ResponseComplete stage)."""
    return _stamp(event.get("stageTimestamp"))


def _stamp(value: Any) -> float:
    stamp = str(value or "1970-01-01T00:00:00Z").replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(stamp).timestamp()


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
    parser.add_argument("--control-plane", choices=("both", "embedded", "real"), default="both")
    parser.add_argument("--hosts", type=int, default=576, help="embedded fleet size (8 GPUs each)")
    parser.add_argument("--real-hosts", type=int, default=512, help="KWOK nodes of the real control plane")
    parser.add_argument("--repeat", type=int, default=3, help="embedded runs")
    parser.add_argument("--real-repeat", type=int, default=1, help="real control plane runs")
    parser.add_argument("--watch-gang", metavar="KUBECONFIG", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.watch_gang:
        asyncio.run(watch_gang(args.watch_gang))
        return 0
    rates = {}
    if args.control_plane in ("both", "embedded"):
        rates["embedded"] = embedded(args.hosts, args.repeat)
    if args.control_plane in ("both", "real"):
        rates["real"] = real(args.real_hosts, args.real_repeat)
    verdict = "PASS" if all(rate >= 100 for rate in rates.values()) else "FAIL"
    print(f"target >= 100 pods/s ({', '.join(f'{k} {v:.0f}' for k, v in rates.items())}): {verdict}")
    return 0 if verdict == "PASS" else 1


def embedded(hosts: int, repeat: int) -> float:
    runs = [operator_run(hosts) for _ in range(repeat)]
    created = statistics.median(c for c, _ in runs)
    op = statistics.median(u for _, u in runs)
    base = statistics.median(baseline_run(hosts) for _ in range(repeat))
    calls = embedded_calls_per_pod(hosts)
    op_rate, base_rate = PODS / op, PODS / base
    print(f"embedded: fleet {hosts} hosts x 8 GPUs; gang 4,096 GPUs = {PODS} pods (median of {repeat})")
    print(f"  operator runs (created, ungated) s: {', '.join(f'({c:.2f}, {u:.2f})' for c, u in runs)}")
    print(f"  operator: apply -> {PODS} pods created in {created:.2f} s = {PODS / created:.0f} pods/s")
    print(f"  operator: apply -> {PODS} pods created and ungated in {op:.2f} s = {op_rate:.0f} pods/s")
    print(f"  operator API calls per pod: {calls:.2f}")
    print(f"  baseline: {PODS} plain pods created one by one in {base:.2f} s = {base_rate:.0f} pods/s")
    print(f"  ratio operator/baseline: {op_rate / base_rate:.2f}")
    return op_rate


def real(hosts: int, repeat: int) -> float:
    runs = real_run(hosts, repeat)
    created = statistics.median(r.created for r in runs)
    ungated = statistics.median(r.ungated for r in runs)
    observed = statistics.median(r.observed for r in runs)
    calls = statistics.median(r.calls_per_pod for r in runs)
    print(f"real control plane: {hosts} KWOK nodes x 8 GPUs; gang 4,096 GPUs = {PODS} pods (median of {repeat})")
    print("  operator as its own process with the chart's ServiceAccount token; scheduler and KWOK running")
    print(f"  operator runs (created, ungated) s: {', '.join(f'({r.created:.2f}, {r.ungated:.2f})' for r in runs)}")
    print(f"  operator: apply -> {PODS} pods created in {created:.2f} s = {PODS / created:.0f} pods/s")
    print(f"  operator: apply -> {PODS} pods created and ungated in {ungated:.2f} s = {PODS / ungated:.0f} pods/s")
    print(f"    (the API server's audit log; the watch client saw the last gate go at {observed:.2f} s)")
    print(f"  operator API calls per pod (audit log): {calls:.2f}")
    print(f"  forbidden (403) answers to the operator: {sum(r.forbidden for r in runs)}")
    return PODS / ungated


if __name__ == "__main__":
    sys.exit(main())
