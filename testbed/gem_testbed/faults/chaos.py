"""Chaos drivers for the embedded cluster: kill points, API faults, HA takeover, malformed input.

Each driver runs the real operator (`gemop run` as a process, as in a pod) against the embedded
cluster, disturbs it, lets it converge and checks the invariants a user relies on:

* exact children: a running gang has exactly its pods (``<name>-worker-<i>``), each on its own
  host, none still gated; a suspended gang has none; a pool has one Deployment at its replicas;
* no orphans: every child's owner exists (uid included);
* the rank map agrees with the pods (node rank -> the host the pod is bound to);
* ``status.observedGeneration`` equals ``metadata.generation``.

``bench/chaos.py`` runs them long and prints figures; the integration tests run short versions.
The cluster, the fault proxy and the simulated kubelet are test doubles; the operator is not.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gem_operator.api.crd import gem_crds
from gem_operator.fleet import make_fleet
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.faults.proxy import FaultProxy, FaultSpec
from gem_testbed.kubelets.lifecycle import LifecycleConfig

GEM = "gem.dev/v1alpha1"
FAST = LifecycleConfig(start_delay=0.05, ready_delay=0.05)
INSTANCE = "gem.dev/instance"
PEERING_NAME = "gem-operator"


def peering_object(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name, "namespace": namespace}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- resources -------------------------------------------------------------------------------------


def training(name: str, pods: int, *, suspend: bool = False, steps: int = 1000) -> dict[str, Any]:
    """A GEMTraining of ``pods`` hosts x 8 GPUs (tp=8 inside a host, FSDP across hosts)."""
    return {
        "apiVersion": GEM,
        "kind": "GEMTraining",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parallelism": {"tp": 8, "dpShard": pods},
            "gpusPerNode": 8,
            "checkpoint": {"uri": f"s3://ckpt/{name}"},
            "suspend": suspend,
            "training": {"steps": steps},
            "failurePolicy": {"backoffSeconds": 0},
        },
    }


def pool(kind: str, name: str, replicas: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "gpusPerReplica": 1,
        "model": {"uri": f"s3://models/{name}"},
        "autoscaling": {"enabled": False},
    }
    if kind == "SolarisPrecompute":
        spec |= {"store": {"url": "redis://store:6379/0"}, "source": {"url": "redis://store:6379/0"}}
    return {"apiVersion": GEM, "kind": kind, "metadata": {"name": name, "namespace": "default"}, "spec": spec}


# -- invariants ------------------------------------------------------------------------------------


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("status") or {})


def _children(cluster: EmbeddedCluster, name: str) -> dict[str, list[dict[str, Any]]]:
    return {
        kind: cluster.list(api, kind, "default", {INSTANCE: name})
        for api, kind in (("v1", "Pod"), ("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment"))
    }


def violations(cluster: EmbeddedCluster) -> list[str]:
    """Every broken invariant, as a sentence naming the object (empty when all hold)."""
    out: list[str] = []
    owners: dict[str, str] = {}
    for kind in ("GEMTraining", "RankingService", "SolarisPrecompute"):
        for obj in cluster.list(GEM, kind, "default"):
            meta = obj["metadata"]
            owners[meta["uid"]] = meta["name"]
            if meta.get("deletionTimestamp"):
                continue
            st = _status(obj)
            if st.get("observedGeneration") != meta.get("generation"):
                seen, gen = st.get("observedGeneration"), meta.get("generation")
                out.append(f"{kind} {meta['name']}: observedGeneration {seen} != generation {gen}")
            kids = _children(cluster, meta["name"])
            if kind == "GEMTraining":
                out += _gang_violations(obj, kids)
            else:
                deps = kids["Deployment"]
                if len(deps) != 1:
                    out.append(f"{kind} {meta['name']}: {len(deps)} Deployments")
                elif deps[0]["spec"].get("replicas") != obj["spec"]["replicas"]:
                    out.append(f"{kind} {meta['name']}: Deployment replicas {deps[0]['spec'].get('replicas')}")
    # Pool pods belong to their Deployment (the simulated ReplicaSet controller's), not to the CR.
    owners.update(
        (d["metadata"]["uid"], d["metadata"]["name"]) for d in cluster.list("apps/v1", "Deployment", "default")
    )
    for api, kind in (("v1", "Pod"), ("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment")):
        for child in cluster.list(api, kind, "default"):
            if INSTANCE not in (child["metadata"].get("labels") or {}):
                continue
            refs = child["metadata"].get("ownerReferences") or []
            if not refs or not any(r.get("uid") in owners for r in refs):
                out.append(f"orphan {kind} {child['metadata']['name']}")
    return out


def _gang_violations(obj: dict[str, Any], kids: dict[str, list[dict[str, Any]]]) -> list[str]:
    name, spec, st = obj["metadata"]["name"], obj["spec"], _status(obj)
    pods = kids["Pod"]
    want = spec["parallelism"]["dpShard"]
    if spec.get("suspend"):
        return [f"GEMTraining {name}: suspended but {len(pods)} pods"] if pods else []
    if st.get("phase") != "Running":
        return [f"GEMTraining {name}: phase {st.get('phase')}"]
    out = []
    names = sorted(p["metadata"]["name"] for p in pods)
    expected = sorted(f"{name}-worker-{i}" for i in range(want))
    if names != expected:
        out.append(f"GEMTraining {name}: pods {names} != {expected}")
    hosts = [p["spec"].get("nodeName") for p in pods]
    if len(set(hosts)) != len(hosts) or None in hosts:
        out.append(f"GEMTraining {name}: pods share or lack hosts {hosts}")
    if any(p["spec"].get("schedulingGates") for p in pods):
        out.append(f"GEMTraining {name}: gated pods remain")
    configs = [c for c in kids["ConfigMap"] if "rankmap.json" in (c.get("data") or {})]
    if len(configs) != 1:
        return [*out, f"GEMTraining {name}: {len(configs)} rank maps"]
    ranks = json.loads(configs[0]["data"]["rankmap.json"])["nodes"]
    bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
    for entry in ranks:
        if bound.get(entry["pod"]) != entry["node"]:
            pod, node = entry["pod"], entry["node"]
            out.append(f"GEMTraining {name}: rank map puts {pod} on {node}, it is on {bound.get(pod)}")
    return out


def converged(cluster: EmbeddedCluster) -> bool:
    """Every resource reconciled and settled: what `violations` checks, plus pools Ready."""
    for kind in ("RankingService", "SolarisPrecompute"):
        for obj in cluster.list(GEM, kind, "default"):
            if _status(obj).get("phase") not in ("Ready", "ScaledToZero"):
                return False
    return not violations(cluster)


# -- operator processes ----------------------------------------------------------------------------


class OperatorProcess:
    """`gemop run` against a kubeconfig, its log in a file."""

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        *,
        standalone: bool,
        extra_env: dict[str, str] | None = None,
        liveness: str | None = None,
    ) -> None:
        self.log = log
        self._out: IO[str] = log.open("w")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "GEM_RESYNC_SECONDS": "2", **(extra_env or {})}
        self.liveness = liveness or f"http://127.0.0.1:{free_port()}/healthz"
        cmd = [
            sys.executable,
            "-m",
            "gem_operator.cli",
            "run",
            "-n",
            "default",
            "--metrics-port",
            "0",
            "--liveness",
            self.liveness,
        ]
        cmd += ["--standalone"] if standalone else ["--peering", PEERING_NAME]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=subprocess.STDOUT, text=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def priority(self) -> int | None:
        for line in self.text().splitlines():
            if "starting:" in line and "priority " in line:
                return int(line.split("priority ", 1)[1].split(",", 1)[0])
        return None

    def wait_started(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "Activity 'login' succeeded" not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"operator did not start: {self.text()[-2000:]}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


@contextmanager
def embedded(hosts: int, tmp: Path) -> Iterator[tuple[EmbeddedCluster, Path]]:
    fleet = make_fleet(hosts, 8, hosts_per_nvlink_domain=4, hosts_per_rack=8)
    with EmbeddedCluster(fleet, list(gem_crds().values()), lifecycle=FAST) as cluster:
        cluster.apply(peering_object(PEERING_NAME, "default"))
        yield cluster, cluster.write_kubeconfig(tmp / "kubeconfig")


def wait(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> float | None:
    """Seconds until ``predicate`` held, or None at the timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if predicate():
                return time.monotonic() - started
        except Exception:  # the cluster mid-change: ask again
            pass
        time.sleep(interval)
    return None


# -- kill points -----------------------------------------------------------------------------------


@dataclass
class KillReport:
    points: int = 0
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    actions: dict[str, int] = field(default_factory=dict)
    unconverged: int = 0


def kill_points(
    points: int, tmp: Path, *, seed: int = 1, check_every: int = 5, log: Callable[[str], None] = print
) -> KillReport:
    """``kill -9`` the operator at ``points`` random moments while resources are created, changed,
    suspended and deleted; every ``check_every`` points let a fresh operator converge and check."""
    rng = random.Random(seed)
    report = KillReport()
    names = {"GEMTraining": ["train-a", "train-b"], "RankingService": ["rank-a"], "SolarisPrecompute": ["pre-a"]}
    with embedded(24, tmp) as (cluster, kubeconfig):

        def act() -> str:
            kind = rng.choice(list(names))
            name = rng.choice(names[kind])
            current = cluster.get(GEM, kind, name, "default")
            if current is None:
                choice = "create"
            else:
                choice = rng.choice(
                    ["change", "change", "suspend", "delete"]
                    if kind == "GEMTraining"
                    else ["change", "change", "delete"]
                )
            if choice == "delete":
                cluster.delete(GEM, kind, name, "default")
            elif kind == "GEMTraining":
                spec = (current or {}).get("spec") or {}
                pods = rng.choice([2, 3, 4]) if choice != "suspend" else spec.get("parallelism", {}).get("dpShard", 2)
                suspend = (not spec.get("suspend")) if choice == "suspend" else False
                cluster.apply(training(name, pods, suspend=suspend, steps=rng.randint(100, 900)))
            else:
                cluster.apply(pool(kind, name, rng.randint(1, 3)))
            report.actions[choice] = report.actions.get(choice, 0) + 1
            return f"{choice} {kind}/{name}"

        for i in range(points):
            what = act()
            op = OperatorProcess(kubeconfig, tmp / "op.log", standalone=True)
            op.wait_started()
            time.sleep(rng.uniform(0.0, 1.5))
            op.stop(signal.SIGKILL)
            report.points += 1
            if (i + 1) % check_every == 0 or i + 1 == points:
                final = OperatorProcess(kubeconfig, tmp / "check.log", standalone=True)
                took = wait(lambda: converged(cluster), timeout=90)
                found = violations(cluster)
                final.stop()
                report.checks += 1
                if took is None:
                    report.unconverged += 1
                report.violations += [f"after point {i + 1} ({what}): {v}" for v in found]
                log(
                    f"  {i + 1}/{points} kill points; last: {what}; converged in "
                    f"{'-' if took is None else f'{took:.1f} s'}; violations {len(found)}"
                )
    return report


# -- API faults ------------------------------------------------------------------------------------


@dataclass
class FaultReport:
    rate: float
    training_seconds: float | None
    pools_seconds: float | None
    change_seconds: float | None
    liveness_p99: float
    liveness_max: float
    violations: list[str]
    counts: dict[str, int]


class Prober:
    """Polls a liveness URL every 100 ms in a thread; keeps the latencies (a failed probe: 5 s)."""

    def __init__(self, url: str) -> None:
        self.url, self.latencies = url, list[float]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as rsp:
                    rsp.read()
                self.latencies.append(time.monotonic() - started)
            except OSError:
                self.latencies.append(5.0)
            time.sleep(0.1)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[int(0.99 * (len(ordered) - 1))] if ordered else float("nan")


def faults(rate: float, tmp: Path, *, pods: int = 24, timeout: float = 300.0, seed: int = 3) -> FaultReport:
    """``rate`` of calls each answered 500, 429 and 409 (as many delayed), watches cut every ~5 s:
    time for a ``pods``-pod GEMTraining to run, two pools to be Ready, then a spec change to land."""
    with embedded(pods + 8, tmp) as (cluster, _), FaultProxy(cluster.url, FaultSpec.uniform(rate, seed=seed)) as proxy:
        kubeconfig = proxy.write_kubeconfig(tmp / "faulty.kubeconfig")
        op = OperatorProcess(kubeconfig, tmp / "faults.log", standalone=True)
        try:
            op.wait_started(60)
            with Prober(op.liveness) as prober:
                started = time.monotonic()
                cluster.apply(training("big", pods))
                cluster.apply(pool("RankingService", "rank", 2))
                cluster.apply(pool("SolarisPrecompute", "pre", 2))

                def pools_ready() -> bool:
                    return all(
                        _status(cluster.get(GEM, k, n, "default") or {}).get("phase") == "Ready"
                        for k, n in (("RankingService", "rank"), ("SolarisPrecompute", "pre"))
                    )

                def gang_running() -> bool:
                    obj = cluster.get(GEM, "GEMTraining", "big", "default") or {}
                    return _status(obj).get("phase") == "Running" and not _gang_violations(
                        obj, _children(cluster, "big")
                    )

                pools_s = wait(pools_ready, timeout)
                train_s = wait(gang_running, max(1.0, timeout - (time.monotonic() - started)))
                changed = copy.deepcopy(training("big", pods, steps=4242))
                cluster.apply(changed)
                change_s = wait(lambda: converged(cluster) and _generation_seen(cluster), timeout)
                found = violations(cluster)
        finally:
            op.stop()
        counts = dict(proxy.counts)
    return FaultReport(
        rate, train_s, pools_s, change_s, prober.p99(), max(prober.latencies, default=float("nan")), found, counts
    )


def _generation_seen(cluster: EmbeddedCluster) -> bool:
    obj = cluster.get(GEM, "GEMTraining", "big", "default") or {}
    return bool(_status(obj).get("observedGeneration") == obj["metadata"]["generation"])


# -- HA --------------------------------------------------------------------------------------------


@dataclass
class HaReport:
    sigterm_seconds: list[float] = field(default_factory=list)
    sigkill_seconds: list[float] = field(default_factory=list)
    both_active: int = 0
    none_active_after: int = 0


def _resumed(op: OperatorProcess, since: int) -> bool:
    return "Resuming operations" in op.text()[since:]


def ha(rounds: int, tmp: Path, *, lifetime: int | None = None, log: Callable[[str], None] = print) -> HaReport:
    """Two replicas with the same default flags; kill the leader (SIGTERM, then kill -9, alternately),
    start a replacement, and time how long the follower takes to resume."""
    report = HaReport()
    env = {"GEM_PEERING_LIFETIME": str(lifetime)} if lifetime else {}
    with embedded(8, tmp) as (cluster, kubeconfig):
        ops = [OperatorProcess(kubeconfig, tmp / f"ha-{i}.log", standalone=False, extra_env=env) for i in range(2)]
        for op in ops:
            op.wait_started()
        for r in range(rounds):
            if wait(lambda: len(_peers(cluster)) == 2, 40) is None:
                raise RuntimeError("two peers never registered")
            leader = max(ops, key=lambda o: o.priority or 0)
            follower = next(o for o in ops if o is not leader)
            if "Handler " in follower.text()[getattr(follower, "mark", 0) :]:
                report.both_active += 1
            time.sleep(1.0)
            mark = len(follower.text())
            sig = signal.SIGTERM if r % 2 == 0 else signal.SIGKILL
            started = time.monotonic()
            leader.proc.send_signal(sig)
            resumed = wait(functools.partial(_resumed, follower, mark), 60, interval=0.05)
            took = None if resumed is None else time.monotonic() - started
            leader.stop()
            if took is None:
                report.none_active_after += 1
            else:
                (report.sigterm_seconds if sig == signal.SIGTERM else report.sigkill_seconds).append(took)
            log(
                f"  round {r + 1}: {'SIGTERM' if sig == signal.SIGTERM else 'kill -9'} -> follower resumed after "
                f"{'-' if took is None else f'{took:.1f} s'}"
            )
            cluster.apply(pool("RankingService", f"ha-{r}", 1))
            wait(functools.partial(_phase_is, cluster, "RankingService", f"ha-{r}", "Ready"), 30)
            new = OperatorProcess(kubeconfig, tmp / f"ha-{r + 2}.log", standalone=False, extra_env=env)
            new.wait_started()
            new.mark = 0  # type: ignore[attr-defined]
            follower.mark = len(follower.text())  # type: ignore[attr-defined]
            ops = [follower, new]
        for op in ops:
            op.stop()
    return report


def _phase_is(cluster: EmbeddedCluster, kind: str, name: str, phase: str) -> bool:
    return _status(cluster.get(GEM, kind, name, "default") or {}).get("phase") == phase


def _peers(cluster: EmbeddedCluster) -> dict[str, Any]:
    obj = cluster.get("kopf.dev/v1", "KopfPeering", PEERING_NAME, "default") or {}
    return dict(obj.get("status") or {})


# -- malformed input -------------------------------------------------------------------------------


@dataclass
class MalformedReport:
    cases: int = 0
    refused_at_door: int = 0
    invalid_spec: int = 0
    problems: list[str] = field(default_factory=list)


def malformed(tmp: Path, cases: Sequence[Any] | None = None, *, timeout: float = 60.0) -> MalformedReport:
    """Apply each corpus case through the API (as kubectl would, strict field validation): refused
    with a 422 naming the field (a 400 for an undeclared field, as kube-apiserver answers), or
    admitted and then marked Ready=False/InvalidSpec naming the
    field, with an Event. The operator must keep serving a good resource throughout."""
    import urllib.error

    from gem_operator.api.kinds import kind_info
    from gem_testbed.faults.malformed import CASES

    report = MalformedReport()
    admitted: list[tuple[Any, str]] = []
    with embedded(8, tmp) as (cluster, kubeconfig):
        op = OperatorProcess(kubeconfig, tmp / "malformed.log", standalone=True)
        try:
            op.wait_started()
            for i, case in enumerate(cases if cases is not None else CASES):
                report.cases += 1
                doc = case.manifest(i)
                path = f"/apis/gem.dev/v1alpha1/namespaces/default/{kind_info(case.kind).plural}"
                url = f"{cluster.url}{path}?fieldValidation=Strict"
                request = urllib.request.Request(
                    url, data=json.dumps(doc).encode(), method="POST", headers={"Content-Type": "application/json"}
                )
                try:
                    urllib.request.urlopen(request, timeout=30).read()
                    admitted.append((case, doc["metadata"]["name"]))
                except urllib.error.HTTPError as exc:
                    body = json.loads(exc.read() or b"{}")
                    causes = " ".join(
                        f"{c.get('field')}: {c.get('message')}" for c in (body.get("details") or {}).get("causes") or []
                    )
                    # 400: strict decoding names the undeclared field in the message (no causes).
                    said = causes if exc.code == 422 else str(body.get("message", "")) if exc.code == 400 else ""
                    if case.field in said:
                        report.refused_at_door += 1
                    else:
                        report.problems.append(
                            f"{case.name}: HTTP {exc.code} without the field: {body.get('message', '')[:200]}"
                        )
            cluster.apply(pool("RankingService", "good", 1))

            def judged() -> bool:
                return all(_ready_reason(cluster, c.kind, n)[0] == "InvalidSpec" for c, n in admitted)

            wait(judged, timeout)
            events = {(e["involvedObject"]["name"], e["reason"]) for e in cluster.events("default")}
            for case, name in admitted:
                reason, message = _ready_reason(cluster, case.kind, name)
                if reason != "InvalidSpec" or case.field not in message:
                    report.problems.append(f"{case.name}: Ready reason {reason!r}: {message[:200]}")
                elif (name, "InvalidSpec") not in events:
                    report.problems.append(f"{case.name}: no InvalidSpec Event")
                else:
                    report.invalid_spec += 1
            if (
                wait(
                    lambda: (
                        _status(cluster.get(GEM, "RankingService", "good", "default") or {}).get("phase") == "Ready"
                    ),
                    30,
                )
                is None
            ):
                report.problems.append("a good RankingService next to the bad ones never became Ready")
        finally:
            op.stop()
    return report


def _ready_reason(cluster: EmbeddedCluster, kind: str, name: str) -> tuple[str | None, str]:
    obj = cluster.get(GEM, kind, name, "default") or {}
    cond: dict[str, Any] = next((c for c in _status(obj).get("conditions") or [] if c.get("type") == "Ready"), {})
    return cond.get("reason"), str(cond.get("message") or "")


def summary(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.1f} s, max {max(values):.1f} s (n={len(values)})"
