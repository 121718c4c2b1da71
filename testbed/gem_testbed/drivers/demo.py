"""`gemop demo`: the embedded cluster, the real operator over HTTP, the samples, a summary.

Everything the operator does here goes through the same code paths as on a real cluster: it
reads a kubeconfig, watches over HTTP and writes children and status through the API.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from gem_operator.api.crd import gem_crds
from gem_operator.api.kinds import KINDS, KindInfo, kind_info
from gem_operator.autoscaling.observation import LatencyReading
from gem_operator.autoscaling.sources import SimulatedSource
from gem_operator.cli.operator import OperatorOptions, OperatorThread
from gem_operator.cli.paths import samples_dir, trace_file
from gem_operator.controllers.autoscaler import use_metric_sources
from gem_operator.kube import KubeApi
from gem_operator.replay.service_model import ServiceModel
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.kubelets.lifecycle import LifecycleConfig
from gem_testbed.plots.demo import plot_demo
from gem_testbed.servers.dcgm import SmActiveSimulator

# The repository's files when run in a checkout, else the copies shipped as package data.
SAMPLES_DIR = samples_dir()
TRACE = trace_file()
# The replay phase plays one trace minute per wall second.
REPLAY_SECONDS = 40

# A resource the operator must reject: tensor parallelism that does not divide a host's GPUs. The
# API server admits it (its CRD schema only bounds tp by gpusPerNode); the handler's own checks
# catch it and say why.
INVALID_SAMPLE: dict[str, Any] = {
    "apiVersion": "gem.dev/v1alpha1",
    "kind": "GEMTraining",
    "metadata": {"name": "uneven-tp", "namespace": "default"},
    "spec": {"parallelism": {"tp": 3, "dpShard": 2}, "gpusPerNode": 8, "checkpoint": {"uri": "s3://ckpt/x"}},
}


PEERING_NAME = "gem-operator"


def peering_object(name: str, namespace: str) -> dict[str, Any]:
    """The KopfPeering object that kopf's peering (leader election) uses in a namespace."""
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": name, "namespace": namespace},
    }


@dataclass
class Tracked:
    info: KindInfo
    name: str
    namespace: str
    expect_invalid: bool = False
    done_after: float | None = None


def load_samples(directory: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    if not docs:
        raise FileNotFoundError(f"no samples in {directory}; pass --samples DIR")
    return docs


def _settled(tracked: Tracked, obj: Mapping[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    if tracked.expect_invalid:
        return status.get("phase") == "Invalid"
    return status.get("phase") in {"Running", "Ready", "Succeeded"}


def apply_waves(docs: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Replica pools first, then gangs: in the other order the scheduler may bind ranker pods to GPUs
    a planned (still gated) gang holds, and the gang is re-placed, a Warning that says nothing about
    the operator, only about the order the demo applied things in."""
    pools = [d for d in docs if d.get("kind") != "GEMTraining"]
    gangs = [d for d in docs if d.get("kind") == "GEMTraining"]
    return [w for w in (pools, gangs) if w]


async def _apply_and_wait(kube: KubeApi, docs: Sequence[Mapping[str, Any]], wait_seconds: float) -> list[Tracked]:
    tracked: list[Tracked] = []
    started = time.monotonic()
    for wave in apply_waves(docs):
        for doc in wave:
            await kube.create(doc)
            meta = doc["metadata"]
            tracked.append(
                Tracked(
                    kind_info(doc["kind"]),
                    meta["name"],
                    meta.get("namespace", "default"),
                    expect_invalid=doc is INVALID_SAMPLE,
                )
            )
        while time.monotonic() - started < wait_seconds:
            pending = [t for t in tracked if t.done_after is None]
            if not pending:
                break
            for t in pending:
                obj = await kube.get(t.info.api_version, t.info.kind, t.name, t.namespace)
                if _settled(t, obj):
                    t.done_after = time.monotonic() - started
            await asyncio.sleep(0.2)
    return tracked


def _conditions(status: Mapping[str, Any]) -> str:
    parts = []
    for cond in status.get("conditions", []):
        parts.append(f"{cond['type']}={cond['status']} ({cond['reason']})")
    return ", ".join(parts)


async def _summarise(console: Console, kube: KubeApi, tracked: Sequence[Tracked], namespace: str) -> None:
    table = Table(title="Custom resources", show_lines=True)
    for col in ("resource", "phase", "settled after", "model load", "conditions"):
        table.add_column(col)
    for t in tracked:
        obj = await kube.get(t.info.api_version, t.info.kind, t.name, t.namespace) or {}
        status = obj.get("status") or {}
        after = f"{t.done_after:.1f} s" if t.done_after is not None else "did not settle"
        loaded = status.get("modelLoadSeconds")
        load = f"{loaded:.1f} s" if isinstance(loaded, (int, float)) else "-"
        table.add_row(f"{t.info.kind}/{t.name}", str(status.get("phase")), after, load, _conditions(status))
    console.print(table)

    children = Table(title="Children (all carry ownerReferences to their resource)")
    for col in ("kind", "name", "owner", "state"):
        children.add_column(col)
    for api_version, kind in (
        ("v1", "Service"),
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("v1", "Pod"),
    ):
        for obj in await kube.list(api_version, kind, namespace, {"app.kubernetes.io/managed-by": "gem-operator"}):
            meta = obj["metadata"]
            owner = ", ".join(f"{o['kind']}/{o['name']}" for o in meta.get("ownerReferences", []))
            children.add_row(kind, meta["name"], owner, _child_state(kind, obj))
    console.print(children)

    placement = Table(title="GPU nodes (the training gang pinned by the planner; other pods bound by the scheduler)")
    for col in ("node", "nvlink domain", "rack", "GPUs used", "pods"):
        placement.add_column(col)
    pods_by_node: dict[str, list[str]] = {}
    gpus_by_node: dict[str, int] = {}
    for pod in await kube.list("v1", "Pod", namespace):
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        pods_by_node.setdefault(node, []).append(pod["metadata"]["name"])
        for c in pod["spec"].get("containers", []):
            gpus_by_node[node] = gpus_by_node.get(node, 0) + int(
                (c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0)
            )
    for node in await kube.list("v1", "Node", ""):
        labels = node["metadata"].get("labels", {})
        name = node["metadata"]["name"]
        total = node.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", "0")
        placement.add_row(
            name,
            labels.get("nvidia.com/gpu.clique", "-"),
            labels.get("gem.dev/rack", "-"),
            f"{gpus_by_node.get(name, 0)}/{total}",
            ", ".join(sorted(pods_by_node.get(name, []))),
        )
    console.print(placement)

    events = Table(title="Events")
    for col in ("object", "type", "reason", "message"):
        events.add_column(col)
    for ev in (await kube.list("v1", "Event", namespace))[-30:]:
        involved = ev.get("involvedObject", {})
        events.add_row(
            f"{involved.get('kind')}/{involved.get('name')}",
            str(ev.get("type")),
            str(ev.get("reason")),
            str(ev.get("message", ""))[:240],
        )
    console.print(events)


def _child_state(kind: str, obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return f"{status.get('phase')} on {spec.get('nodeName') or '-'}"
    if kind == "Deployment":
        return f"{status.get('readyReplicas') or 0}/{spec.get('replicas')} ready"
    if kind == "Service":
        return "headless" if spec.get("clusterIP") == "None" else "ClusterIP"
    return ", ".join(sorted(obj.get("data", {})))


class DemoLatency:
    """The ranker's p99 as the latency histogram would show it, from the simulated SM and queue.

    A stand-in for `metrics.latency` in the embedded cluster (which runs no ranking server): the
    mean simulated SM active of the pods gives their utilisation through the service model's SM
    curve, the queued seconds add their wait, and the model's latency curve gives the p99. Same
    contract as the Prometheus source: no samples, no value (unavailable, never low).
    """

    def __init__(self, sm: SimulatedSource, queue: SimulatedSource, model: ServiceModel | None = None) -> None:
        self.sm, self.queue, self.model = sm, queue, model or ServiceModel()

    async def read_latency(self, namespace: str, pods: Sequence[str]) -> LatencyReading:
        sm = self.sm.read_now(namespace, pods)
        if sm.error is not None or not sm.samples:
            return LatencyReading.unavailable(sm.error or "no simulated samples")
        mean_sm = sum(s.value for s in sm.samples.values()) / len(sm.samples)
        queued = self.queue.read_now(namespace, pods)
        wait = max((s.value for s in queued.samples.values()), default=0.0) if queued.error is None else 0.0
        util = self.model.utilisation_for_sm(mean_sm)
        stamp = max(s.timestamp for s in sm.samples.values())
        return LatencyReading(p99_ms=self.model.p99_ms(util, wait), timestamp=stamp)


def trace_load_curve(trace: Path, seconds: int, peak: float, scale_mode: str = "independent") -> list[float]:
    """Per-minute request rate of the trace, scaled so its busiest minute is ``peak`` cost units/s.

    The trace is first scaled to about ``peak`` with ``scale_mode`` (as `gemop replay --scale-mode`),
    then averaged per minute: one trace minute lasts one demo second, so the mode shows only through
    the per-minute means (independent users fill the trace's idle minutes at its 5-minute trend).
    """
    from gem_operator.replay.engine import load_trace, to_series

    arrivals = load_trace(trace)
    unit = to_series(arrivals, smooth_seconds=1, mode="duplicate")
    top_minute = max(float(unit.requests[i : i + 60].mean()) for i in range(0, len(unit.requests), 60)) or 1.0
    x = max(1.0, peak / top_minute)
    series = to_series(arrivals, scale=x, smooth_seconds=1, mode=scale_mode)  # type: ignore[arg-type]
    per_minute = [
        float(series.requests[i : i + 60].mean()) for i in range(0, min(len(series.requests), 60 * seconds), 60)
    ]
    # A 3-minute moving average: one trace minute lasts one second here, shorter than a sync.
    smooth = [
        sum(per_minute[max(0, i - 2) : i + 1]) / len(per_minute[max(0, i - 2) : i + 1]) for i in range(len(per_minute))
    ]
    top = max(smooth) or 1.0
    return [peak * v / top for v in smooth]


async def _replay_phase(
    console: Console,
    kube: KubeApi,
    dcgm: SmActiveSimulator,
    curve: list[float],
    namespace: str,
    scale_mode: str = "independent",
    warmup_s: float = 0.0,
) -> list[tuple[float, float, int, int, float | None]]:
    """Drive the ranker's load from the trace and record what the autoscaler did."""
    timeline = []
    latency: list[tuple[float, float | None, float | None]] = []
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < len(curve):
        load = dcgm_load(curve, elapsed)
        deploy = await kube.get("apps/v1", "Deployment", "ads-ranker-server", namespace) or {}
        rks = await kube.get("gem.dev/v1alpha1", "RankingService", "ads-ranker", namespace) or {}
        status = rks.get("status") or {}
        metric = (status.get("lastMetric") or {}).get("value")
        auto = status.get("autoscaling") or {}
        latency.append((elapsed, auto.get("p99LatencyMs"), auto.get("effectiveTargetSmActive")))
        timeline.append(
            (elapsed, load, int((deploy.get("status") or {}).get("readyReplicas") or 0),
             int(status.get("desiredReplicas") or 0), metric)
        )  # fmt: skip
        await asyncio.sleep(1.0)
    table = Table(
        title=f"Autoscaling on SM active: trace {TRACE.name} (scale mode {scale_mode}), one trace minute per second"
    )
    for col in ("t (s)", "load (units/s)", "ready replicas", "desired", "SM active", "p99 (ms)", "SM target"):
        table.add_column(col, justify="right")
    for i in range(0, len(timeline), 2):
        t, load, ready, desired, metric = timeline[i]
        _, p99, target = latency[i]
        table.add_row(
            f"{t:.0f}{' (warm-up)' if t < warmup_s else ''}",
            f"{load:.0f}",
            str(ready),
            str(desired),
            "-" if metric is None else f"{metric:.2f}",
            "-" if p99 is None else f"{p99:.0f}",
            "-" if target is None else f"{target:.2f}",
        )
    console.print(table)
    rks = await kube.get("gem.dev/v1alpha1", "RankingService", "ads-ranker", namespace) or {}
    slo = float(((rks.get("spec") or {}).get("slo") or {}).get("p99LatencyMs", 50.0))
    over = [(t, p99) for t, p99, _ in latency if p99 is not None and p99 > slo]
    console.print(
        f"p99 over the SLO ({slo:g} ms) in {sum(1 for t, _ in over if t >= warmup_s)} of "
        f"{sum(1 for t, _, _ in latency if t >= warmup_s)} samples after the warm-up "
        f"(first {warmup_s:.0f} s: {sum(1 for t, _ in over if t < warmup_s)} over, counted apart)"
    )
    return timeline


def dcgm_load(curve: list[float], elapsed: float) -> float:
    """Load at ``elapsed`` seconds into the replay; a light base load before it starts."""
    if elapsed < 0:
        return curve[0] * 0.25
    return curve[min(int(elapsed), len(curve) - 1)]


def run_demo(
    *,
    fleet: str | Path = "demo",
    samples: Path = SAMPLES_DIR,
    timeout: float = 90.0,
    replay_seconds: int = REPLAY_SECONDS,
    plot: Path | None = None,
    console: Console | None = None,
    scale_mode: str = "independent",
) -> int:
    """Run the demo; 0 when every sample settled and the invalid one was rejected."""
    console = console or Console(width=max(shutil.get_terminal_size((160, 40)).columns, 140))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # kopf runs in a thread here, where it cannot take OS signals; its warning about that is noise.
    logging.getLogger("kopf._core.reactor.running").setLevel(logging.ERROR)
    docs = [*load_samples(samples), INVALID_SAMPLE]
    namespaces = sorted({d["metadata"].get("namespace", "default") for d in docs})
    crds = list(gem_crds().values())
    # The simulated model loader takes a visible moment, reported as status.modelLoadSeconds.
    lifecycle = LifecycleConfig(init_delay=1.5)
    with (
        tempfile.TemporaryDirectory(prefix="gem-demo-") as tmp,
        EmbeddedCluster(fleet, crds, namespaces=namespaces, lifecycle=lifecycle) as cluster,
    ):
        kubeconfig = cluster.write_kubeconfig(Path(tmp) / "kubeconfig")
        os.environ["KUBECONFIG"] = str(kubeconfig)
        nodes = cluster.list("v1", "Node")
        gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes)
        console.print(f"[bold]Embedded cluster[/] at {cluster.url}: {len(nodes)} nodes, {gpus} GPUs")
        for namespace in namespaces:
            # Peering keeps two operator replicas from both acting; kopf waits for this object.
            cluster.apply(peering_object(PEERING_NAME, namespace))
        # A simulated dcgm-exporter and ranking-server queue: per-pod SM active and queued seconds
        # of work from the ranker's load, read by the autoscaler.
        source, queue_source = SimulatedSource(), SimulatedSource()
        # The ranker's p99 from the same simulated pods: the SLO feedback runs as on a real cluster.
        latency_source = DemoLatency(source, queue_source)
        use_metric_sources(
            lambda _spec: source, lambda _spec: source, lambda _spec: queue_source, lambda _spec: latency_source
        )
        curve = trace_load_curve(TRACE, replay_seconds, peak=850.0, scale_mode=scale_mode) if replay_seconds else [60.0]
        dcgm = SmActiveSimulator(cluster, source, queue_source=queue_source)
        ranker_pods = {"gem.dev/instance": "ads-ranker", "gem.dev/role": "server"}
        dcgm.add_pool("default", ranker_pods, lambda _t: dcgm_load(curve, _t - dcgm_offset[0]))
        # Precompute work follows the ranker's traffic (candidate sets it publishes).
        precompute_pods = {"gem.dev/instance": "ads-precompute", "gem.dev/role": "precompute"}
        dcgm.add_pool("default", precompute_pods, lambda _t: 0.4 * dcgm_load(curve, _t - dcgm_offset[0]))
        dcgm_offset = [1e9]  # idle until the replay phase starts
        dcgm.start()
        operator = OperatorThread(OperatorOptions(namespaces=namespaces, standalone=False, peering_name=PEERING_NAME))
        operator.start()
        console.print(
            "[bold]Operator[/] running (kopf, over HTTP); applying samples: "
            + ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
        )

        async def main() -> list[Tracked]:
            kube = KubeApi.from_kubeconfig(str(kubeconfig))
            try:
                tracked = await _apply_and_wait(kube, docs, timeout)
                await _summarise(console, kube, tracked, namespaces[0])
                if replay_seconds:
                    dcgm_offset[0] = dcgm.elapsed()
                    # Warm-up: a first pass (resync) plus a pod's start before a decision can serve.
                    resync = float(os.environ.get("GEM_RESYNC_SECONDS", "2"))
                    warmup = resync + lifecycle.start_delay + lifecycle.ready_delay + lifecycle.init_delay
                    timeline = await _replay_phase(
                        console, kube, dcgm, curve, namespaces[0], scale_mode=scale_mode, warmup_s=warmup
                    )
                    if plot is not None:
                        ranker = next((d for d in docs if d.get("kind") == "RankingService"), {})
                        target = ((ranker.get("spec") or {}).get("autoscaling") or {}).get("targetSmActive")
                        plot_demo(timeline, plot, target)
                        console.print(f"plot written to {plot}")
                return tracked
            finally:
                await kube.close()

        try:
            tracked = asyncio.run(main())
        finally:
            operator.stop()
            dcgm.stop()
            use_metric_sources(None, None)
    unsettled = [f"{t.info.kind}/{t.name}" for t in tracked if t.done_after is None]
    if unsettled:
        console.print(f"[red]Did not settle within {timeout:.0f} s:[/] {', '.join(unsettled)}")
        return 1
    console.print(f"[green]Demo finished:[/] {len(tracked)} resources reconciled ({len(KINDS)} kinds).")
    return 0
