"""What users do with kubectl, on the shared real control plane with the operator running.

Server-side apply of the samples (and a server dry run of their overlays and of the kubectl install
manifest), `kubectl get gem` with the
CRDs' printer columns, `kubectl explain` from the published OpenAPI, `kubectl scale` through the
scale subresource; garbage collection by the real controller manager (foreground and orphan
deletion of the operator's children by their owner references).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.learned import learned_target
from gem_operator.autoscaling.state import ScalerState
from gem_operator.controllers.status import StatusDraft

from .conftest import WORK_NAMESPACE as NAMESPACE
from .conftest import RealCluster, eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "crds" / "samples"
PLURALS = {
    "GEMTraining": "gemtrainings",
    "RankingService": "rankingservices",
    "SolarisPrecompute": "solarisprecomputes",
}


def _columns(plural: str) -> list[str]:
    """The default (priority 0) printer columns of a CRD, as kubectl prints their names."""
    crd = yaml.safe_load((ROOT / "crds" / f"gem.dev_{plural}.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    columns = version["additionalPrinterColumns"]
    return [c["name"].upper().replace(" ", "-") for c in columns if not c.get("priority")]


def _get(cluster: RealCluster, kind: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    found: dict[str, Any] = cluster.custom.get_namespaced_custom_object(
        "gem.dev", "v1alpha1", namespace, PLURALS[kind], name
    )
    return found


def _phase(cluster: RealCluster, kind: str, name: str) -> str | None:
    return (_get(cluster, kind, name).get("status") or {}).get("phase")


def _children(cluster: RealCluster, instance: str) -> list[Any]:
    apps = client.AppsV1Api(cluster.api)
    selector = f"gem.dev/instance={instance}"
    return [*apps.list_namespaced_deployment(NAMESPACE, label_selector=selector).items,
            *cluster.core.list_namespaced_service(NAMESPACE, label_selector=selector).items,
            *cluster.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items]  # fmt: skip


def test_samples_apply_server_side_and_show_in_kubectl_get_gem(operated: RealCluster) -> None:
    files = [f"--filename={path}" for path in sorted(SAMPLES.glob("*.yaml"))]
    applied = operated.kubectl("apply", "--server-side", "--field-manager=gem-samples", "-n", NAMESPACE, *files)
    assert applied.stdout.count("serverside-applied") == 3, applied.stdout
    # Idempotent: the same apply again changes nothing and conflicts with nobody (the operator
    # writes status only).
    again = operated.kubectl("apply", "--server-side", "--field-manager=gem-samples", "-n", NAMESPACE, *files)
    assert again.stdout.count("serverside-applied") == 3
    managers = {m["manager"] for m in _get(operated, "RankingService", "ads-ranker")["metadata"]["managedFields"]}
    assert "gem-samples" in managers
    overlays = [f"--filename={path}" for path in sorted((SAMPLES / "overlays").glob("*.yaml"))]
    # The overlays name their own namespace; a server dry run validates them without creating them.
    dry = operated.kubectl("apply", "--server-side", "--dry-run=server", *overlays)
    assert dry.stdout.count("serverside-applied (server dry run)") == len(overlays), dry.stdout
    # The plain-kubectl install manifest too (the chart's release already owns those names: forced,
    # and only a dry run, so nothing changes).
    install = ROOT / "deploy" / "kubectl" / "gem-operator.yaml"
    documents = [d for d in yaml.safe_load_all(install.read_text()) if d]
    shipped = operated.kubectl(
        "apply", "--server-side", "--dry-run=server", "--force-conflicts", f"--filename={install}"
    ).stdout
    assert shipped.count("(server dry run)") == len(documents), shipped

    eventually("the samples Running/Ready", lambda: (
        _phase(operated, "GEMTraining", "gem-pretrain") == "Running"
        and _phase(operated, "RankingService", "ads-ranker") == "Ready"
        and _phase(operated, "SolarisPrecompute", "ads-precompute") == "Ready"
    ), 180)  # fmt: skip
    table = operated.kubectl("get", "gem", "-n", NAMESPACE).stdout
    headers = [line.split() for line in table.splitlines() if line.startswith("NAME")]
    assert headers == [["NAME", *_columns(plural)] for plural in sorted(PLURALS.values())], table
    rows = {line.split()[0]: line.split() for line in table.splitlines() if not line.startswith("NAME") and line}
    assert rows["gemtraining.gem.dev/gem-pretrain"][1:4] == ["Running", "32", "4"], table
    assert rows["rankingservice.gem.dev/ads-ranker"][1:4] == ["Ready", "2", "2"], table
    assert rows["solarisprecompute.gem.dev/ads-precompute"][1:2] == ["Ready"], table
    operated.delete_gem_objects(NAMESPACE)


def test_kubectl_explain_reads_the_published_schema(real_cluster: RealCluster) -> None:
    out = real_cluster.kubectl("explain", "gemtrainings.spec.parallelism", "--api-version=gem.dev/v1alpha1").stdout
    assert "GROUP:      gem.dev" in out and "KIND:       GEMTraining" in out, out
    for field_name in ("pp", "dpReplicate", "dpShard", "cp", "tp", "ep"):
        assert f"  {field_name}\t" in out, out
    top = real_cluster.kubectl("explain", "rankingservices.spec", "--api-version=gem.dev/v1alpha1").stdout
    assert "autoscaling" in top and "<Object>" in top


def test_kubectl_scale_drives_spec_replicas_and_the_deployment(operated: RealCluster) -> None:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / "rankingservice.yaml").read_text())
    doc["metadata"] = {"name": "scaled", "namespace": NAMESPACE}
    doc["spec"]["autoscaling"] = {"enabled": False}
    doc["spec"]["replicas"] = 1
    operated.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(doc))
    apps = client.AppsV1Api(operated.api)

    def deployment_replicas() -> int | None:
        items = apps.list_namespaced_deployment(NAMESPACE, label_selector="gem.dev/instance=scaled").items
        return items[0].spec.replicas if items else None

    eventually("the Deployment of 'scaled'", lambda: deployment_replicas() == 1)
    operated.kubectl("scale", "rankingservices.gem.dev/scaled", "--replicas=3", "-n", NAMESPACE)
    assert _get(operated, "RankingService", "scaled")["spec"]["replicas"] == 3
    eventually("the Deployment scaled to 3", lambda: deployment_replicas() == 3)
    scale = json.loads(
        operated.kubectl(
            "get", "rankingservices.gem.dev", "scaled", "--subresource=scale", "-n", NAMESPACE, "-o", "json"
        ).stdout
    )
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    assert scale["status"]["selector"] == "gem.dev/kind=rankingservice,gem.dev/instance=scaled,gem.dev/role=server"
    eventually("status.readyReplicas 3", lambda: (_get(operated, "RankingService", "scaled").get("status") or {}).get(
        "readyReplicas") == 3, 180)  # fmt: skip
    operated.delete_gem_objects(NAMESPACE)


def test_the_garbage_collector_deletes_children_by_owner_reference(operated: RealCluster) -> None:
    for name in ("foreground", "orphaning"):
        doc: dict[str, Any] = yaml.safe_load((SAMPLES / "rankingservice.yaml").read_text())
        doc["metadata"] = {"name": name, "namespace": NAMESPACE}
        operated.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(doc))
    eventually("both Deployments with Ready pods", lambda: all(
        _phase(operated, "RankingService", n) == "Ready" for n in ("foreground", "orphaning")), 180)  # fmt: skip

    # Foreground: the API server keeps the owner (finalizer foregroundDeletion) until the garbage
    # collector has deleted its dependents (Deployment, its ReplicaSet and pods, the Service).
    answer = operated.custom.delete_namespaced_custom_object(
        "gem.dev", "v1alpha1", NAMESPACE, "rankingservices", "foreground", propagation_policy="Foreground"
    )
    assert "foregroundDeletion" in answer["metadata"]["finalizers"], answer["metadata"]
    eventually("'foreground' and every child gone", lambda: not _children(operated, "foreground") and not [
        o for o in operated.gem_objects(NAMESPACE) if o.endswith("/foreground")], 180)  # fmt: skip

    # Orphan: the children stay, and the garbage collector strips the owner reference from them.
    operated.custom.delete_namespaced_custom_object(
        "gem.dev", "v1alpha1", NAMESPACE, "rankingservices", "orphaning", propagation_policy="Orphan"
    )
    apps = client.AppsV1Api(operated.api)

    def orphaned() -> list[Any]:
        items = apps.list_namespaced_deployment(NAMESPACE, label_selector="gem.dev/instance=orphaning").items
        return [d for d in items if not d.metadata.owner_references]

    (deployment,) = eventually("the Deployment kept without its owner reference", orphaned)
    assert deployment.spec.replicas == 2
    apps.delete_namespaced_deployment(deployment.metadata.name, NAMESPACE, propagation_policy="Background")
    operated.kubectl("delete", "services", "-l", "gem.dev/instance=orphaning", "-n", NAMESPACE)
    eventually("the orphans removed", lambda: not _children(operated, "orphaning"), 120)


def test_a_learned_target_reads_back_as_the_operator_writes_it(real_cluster: RealCluster) -> None:
    """The status a pool whose SLO loop learned a target gets (the TargetLearned condition, the run it
    counts in status.scalerState, the SM target in use), written through the real status subresource
    and read back with the kubectl commands docs/operations.md gives. In a namespace no operator
    watches, so what is read is what was written."""
    namespace = "gem-unwatched"
    real_cluster.kubectl("create", "namespace", namespace, check=False)
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / "rankingservice.yaml").read_text())
    doc["metadata"] = {"name": "learned", "namespace": namespace}
    real_cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(doc))
    now = datetime.now(UTC)
    state = ScalerState(effective_target=0.36, target_low_run=(now.timestamp() - 1900, 0.38))
    spec = RankingServiceSpec.model_validate(doc["spec"]).autoscaling
    learned = learned_target(
        spec, 0.36, state.target_low_run, now.timestamp(), p99_ms=33.5, slo_ms=float(doc["spec"]["slo"]["p99LatencyMs"])
    )
    draft = StatusDraft.from_status({}, now, 1)
    draft.condition(*dataclasses.astuple(learned.condition))
    draft.fields["scalerState"] = state.to_dict()
    draft.fields["autoscaling"] = {"effectiveTargetSmActive": 0.36, "p99LatencyMs": 33.5, "panicking": False}
    patch = json.dumps({"status": draft.to_status()})
    where = ["-n", namespace]
    real_cluster.kubectl("patch", "rankingservices.gem.dev", "learned", *where, "--subresource=status",
                         "--type=merge", "-p", patch)  # fmt: skip
    jsonpath = 'jsonpath={.status.conditions[?(@.type=="TargetLearned")].message}'
    message = real_cluster.kubectl("get", "rks", "learned", *where, "-o", jsonpath).stdout
    assert message == learned.condition.message and "near 0.36" in message
    stored = _get(real_cluster, "RankingService", "learned", namespace)["status"]
    assert stored["scalerState"]["targetLowRun"] == [state.target_low_run[0], 0.38]  # kept, not pruned
    wide = real_cluster.kubectl("get", "rks", "learned", *where, "-o", "wide").stdout.splitlines()
    header, row = wide  # columns aligned by kubectl; a column without a value is blank, so read by offset

    def column(name: str) -> str:
        return row[header.index(name) :].split(maxsplit=1)[0]

    assert column("SM-TARGET") == "0.36" and column("P99-MS") == "33.5", wide
    real_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
