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
from gem_operator.cli.operator import OperatorOptions, OperatorThread
from gem_operator.kube import KubeApi
from gem_operator.sim.cluster import EmbeddedCluster
from gem_operator.sim.lifecycle import LifecycleConfig

SAMPLES_DIR = Path(__file__).resolve().parents[3] / "crds" / "samples"

# A resource that must be rejected: tensor parallelism wider than a host.
INVALID_SAMPLE: dict[str, Any] = {
    "apiVersion": "gem.dev/v1alpha1",
    "kind": "GEMTraining",
    "metadata": {"name": "too-wide-tp", "namespace": "default"},
    "spec": {"parallelism": {"tp": 16, "dpShard": 2}, "gpusPerNode": 8, "checkpoint": {"uri": "s3://ckpt/x"}},
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


async def _apply_and_wait(kube: KubeApi, docs: Sequence[Mapping[str, Any]], wait_seconds: float) -> list[Tracked]:
    tracked = []
    for doc in docs:
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
    started = time.monotonic()
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
    for col in ("resource", "phase", "settled after", "conditions"):
        table.add_column(col)
    for t in tracked:
        obj = await kube.get(t.info.api_version, t.info.kind, t.name, t.namespace) or {}
        status = obj.get("status") or {}
        after = f"{t.done_after:.1f} s" if t.done_after is not None else "did not settle"
        table.add_row(f"{t.info.kind}/{t.name}", str(status.get("phase")), after, _conditions(status))
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

    placement = Table(title="GPU nodes (pods bound by the scheduler; topology-aware placement is not used yet)")
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


def run_demo(
    *,
    fleet: str | Path = "demo",
    samples: Path = SAMPLES_DIR,
    timeout: float = 90.0,
    console: Console | None = None,
) -> int:
    """Run the demo; 0 when every sample settled and the invalid one was rejected."""
    console = console or Console(width=max(shutil.get_terminal_size((160, 40)).columns, 140))
    # Status follows children on each resync; a short one keeps the demo brisk.
    os.environ.setdefault("GEM_RESYNC_SECONDS", "2")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    docs = [*load_samples(samples), INVALID_SAMPLE]
    namespaces = sorted({d["metadata"].get("namespace", "default") for d in docs})
    crds = list(gem_crds().values())
    lifecycle = LifecycleConfig()
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
                return tracked
            finally:
                await kube.close()

        try:
            tracked = asyncio.run(main())
        finally:
            operator.stop()
    unsettled = [f"{t.info.kind}/{t.name}" for t in tracked if t.done_after is None]
    if unsettled:
        console.print(f"[red]Did not settle within {timeout:.0f} s:[/] {', '.join(unsettled)}")
        return 1
    console.print(f"[green]Demo finished:[/] {len(tracked)} resources reconciled ({len(KINDS)} kinds).")
    return 0
