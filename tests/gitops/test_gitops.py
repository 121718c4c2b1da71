"""GitOps examples: Argo CD health checks run in Lua 5.1 (as Argo CD's gopher-lua), manifests checked."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from lupa import lua51

from gem_operator.controllers.status import GangObservation, StatusDraft, invalid, pool_phase, training_phase

ROOT = Path(__file__).resolve().parents[2]
GITOPS = ROOT / "deploy" / "gitops"
SCRIPTS = {
    "GEMTraining": GITOPS / "argocd" / "health-gemtraining.lua",
    "RankingService": GITOPS / "argocd" / "health-pool.lua",
    "SolarisPrecompute": GITOPS / "argocd" / "health-pool.lua",
}
CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "statuses.yaml").read_text())
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


def health(kind: str, obj: dict[str, Any]) -> dict[str, str]:
    """Run the kind's health script the way Argo CD does: `obj` global, a table returned."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    # Argo CD's sandbox has no os/io/module loading: a script that needs them would fail there.
    lua.execute("os = nil; io = nil; require = nil; dofile = nil; loadfile = nil; package = nil")
    lua.globals().obj = lua.table_from(obj, recursive=True)
    script = SCRIPTS[kind].read_text()
    result = lua.execute(script)
    assert result is not None, f"{SCRIPTS[kind].name} returned nothing"
    out = {"status": result["status"], "message": result["message"]}
    assert out["status"] in ARGO_STATUSES, out
    assert isinstance(out["message"], str) and out["message"], out
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_health_of_sample_statuses(case: dict[str, Any]) -> None:
    obj = {"apiVersion": "gem.dev/v1alpha1", "kind": case["kind"], **case["obj"]}
    got = health(case["kind"], obj)
    assert got["status"] == case["expect"]["status"], got
    assert case["expect"]["message"] in got["message"], got


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def resource(kind: str, draft: StatusDraft) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "x", "generation": 1}, "status": draft.to_status()}


@pytest.mark.parametrize(
    ("obs", "suspended", "want"),
    [
        (GangObservation(expected=4, existing=4, ready=4, succeeded=0, failures=()), False, "Healthy"),
        (GangObservation(expected=4, existing=2, ready=1, succeeded=0, failures=()), False, "Progressing"),
        (GangObservation(expected=4, existing=4, ready=0, succeeded=4, failures=()), False, "Healthy"),
        (
            GangObservation(expected=4, existing=4, ready=3, succeeded=0, failures=("pod x-1 failed",)),
            False,
            "Degraded",
        ),
        (GangObservation(expected=0, existing=0, ready=0, succeeded=0, failures=()), True, "Suspended"),
    ],
)
def test_health_of_statuses_the_operator_derives_for_training(obs: GangObservation, suspended: bool, want: str) -> None:
    draft = StatusDraft(now=NOW, generation=1)
    training_phase(draft, obs, suspended=suspended)
    assert health("GEMTraining", resource("GEMTraining", draft))["status"] == want


@pytest.mark.parametrize("kind", ["RankingService", "SolarisPrecompute"])
@pytest.mark.parametrize(
    ("desired", "ready", "want"),
    [(2, 2, "Healthy"), (3, 1, "Progressing"), (0, 0, "Healthy"), (2, 0, "Progressing")],
)
def test_health_of_statuses_the_operator_derives_for_pools(kind: str, desired: int, ready: int, want: str) -> None:
    draft = StatusDraft(now=NOW, generation=1)
    pool_phase(draft, desired, {"status": {"replicas": desired, "readyReplicas": ready}})
    assert health(kind, resource(kind, draft))["status"] == want


@pytest.mark.parametrize("kind", list(SCRIPTS))
def test_health_of_invalid_resources_is_degraded(kind: str) -> None:
    draft = StatusDraft(now=NOW, generation=1)
    invalid(draft, "spec.gpusPerReplica: must be >= 0")
    got = health(kind, resource(kind, draft))
    assert got == {"status": "Degraded", "message": "Invalid spec: spec.gpusPerReplica: must be >= 0"}


def test_argocd_cm_embeds_the_scripts_verbatim() -> None:
    cm = yaml.safe_load((GITOPS / "argocd" / "argocd-cm-health.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    for kind, script in SCRIPTS.items():
        key = f"resource.customizations.health.gem.dev_{kind}"
        assert cm["data"][key] == script.read_text(), f"{key} differs from {script.name}: paste the file in"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((GITOPS / name).read_text()) if d]


PLACEHOLDER_REPO = "https://git.example.com/REPLACE-ME/gem-operator.git"


def test_argocd_applications_point_at_real_paths_and_valid_values() -> None:
    (operator,) = _docs("argocd-application.yaml")  # the operator only
    (samples,) = _docs("argocd-samples.yaml")
    assert operator["kind"] == samples["kind"] == "Application"
    assert operator["metadata"]["name"] == "gem-operator" and samples["metadata"]["name"] == "gem-samples"
    assert (ROOT / operator["spec"]["source"]["path"] / "Chart.yaml").exists()
    assert sorted((ROOT / samples["spec"]["source"]["path"]).glob("*.yaml"))
    # The samples (a 32-GPU job, placeholder buckets) are synced by hand: no prune, no selfHeal.
    assert not samples["spec"].get("syncPolicy", {}).get("automated")
    # Repository URLs are an obvious placeholder that the comments tell the user to replace.
    for app in (operator, samples):
        assert app["spec"]["source"]["repoURL"] == PLACEHOLDER_REPO
    for name in ("argocd-application.yaml", "argocd-samples.yaml"):
        assert "Set repoURL" in (GITOPS / name).read_text()
    assert "ServerSideApply=true" in operator["spec"]["syncPolicy"]["syncOptions"]
    with helm.Chart.load(ROOT / "charts" / "gem-operator") as chart:
        values = operator["spec"]["source"]["helm"]["valuesObject"]
        chart.validate_schema(values)
        rendered = chart.render(values, name="gem-operator", namespace="gem-system")
    assert any("--namespace=default" in text for text in rendered.values())
    assert samples["spec"]["destination"]["namespace"] in values["watch"]["namespaces"]


def test_flux_objects_point_at_real_paths_and_valid_values() -> None:
    docs = {d["kind"]: d for d in _docs("flux-kustomization.yaml")}
    assert set(docs) == {"GitRepository", "HelmRelease"}  # the operator only
    (kust,) = _docs("flux-samples.yaml")
    assert kust["kind"] == "Kustomization"
    assert kust["spec"]["suspend"] is True and kust["spec"]["prune"] is False  # opt-in, never prunes
    repo = docs["GitRepository"]["metadata"]["name"]
    assert docs["GitRepository"]["spec"]["url"] == PLACEHOLDER_REPO
    release = docs["HelmRelease"]
    assert kust["spec"]["sourceRef"] == {"kind": "GitRepository", "name": repo}
    assert sorted((ROOT / kust["spec"]["path"]).glob("*.yaml"))
    assert not (ROOT / kust["spec"]["path"] / "kustomization.yaml").exists()  # Flux generates it
    assert kust["spec"]["targetNamespace"] in release["spec"]["values"]["watch"]["namespaces"]
    chart_spec = release["spec"]["chart"]["spec"]
    assert chart_spec["sourceRef"] == {"kind": "GitRepository", "name": repo}
    assert (ROOT / chart_spec["chart"] / "Chart.yaml").exists()
    assert release["spec"]["install"]["crds"] == release["spec"]["upgrade"]["crds"] == "CreateReplace"
    with helm.Chart.load(ROOT / chart_spec["chart"]) as chart:
        chart.validate_schema(release["spec"]["values"])
