"""One GEMTraining reconcile pass renders the gang at most once, whichever path it takes.

The pass runs against a small in-memory API (objects by kind, namespace and name). A render of
the gang builds its rank map, so the rank map builder is wrapped to count renders wherever they
are called from.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.controllers import training
from gem_operator.controllers.reconcile import Outcome, PassContext
from gem_operator.controllers.status import StatusDraft
from gem_operator.kube import Applied, ApplyResult
from gem_operator.kube.client import UNKNOWN
from gem_operator.render import training as render

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class MemoryApi:
    """The calls a training pass makes, on a dict; ``served`` is False for kinds the cluster lacks."""

    def __init__(self, objects: list[dict[str, Any]], unserved: tuple[str, ...] = ()) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.unserved = unserved
        self.calls: list[str] = []  # "list Pod", "apply Pod", ... in order
        for obj in objects:
            self._put(obj)

    def _put(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = copy.deepcopy(dict(obj))

    async def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    async def list(
        self, api_version: str, kind: str, namespace: str | None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        self.calls.append(f"list {kind}")
        return [
            obj
            for (k, ns, _), obj in self.objects.items()
            if k == kind
            and (namespace is None or ns == namespace)
            and all(obj["metadata"].get("labels", {}).get(key) == value for key, value in (labels or {}).items())
        ]

    async def create_if_served(self, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
        if manifest["kind"] in self.unserved:
            return None
        self._put(manifest)
        return dict(manifest)

    async def apply(
        self, manifest: Mapping[str, Any], *, immutable_spec: bool = False, actual: Any = UNKNOWN
    ) -> Applied:
        self.calls.append(f"apply {manifest['kind']}")
        meta = manifest["metadata"]
        key = (manifest["kind"], meta.get("namespace", ""), meta["name"])
        existed = key in self.objects
        self._put(manifest)
        return Applied(ApplyResult.UNCHANGED if existed else ApplyResult.CREATED, self.objects[key])

    async def patch_merge(
        self, api_version: str, kind: str, name: str, namespace: str, patch: Mapping[str, Any], *, status: bool = False
    ) -> None:
        obj = self.objects[(kind, namespace, name)]
        for key, value in patch.items():
            obj[key] = {**obj.get(key, {}), **value} if isinstance(value, Mapping) else value

    async def delete(self, api_version: str, kind: str, name: str, namespace: str) -> bool:
        return self.objects.pop((kind, namespace, name), None) is not None


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.clique": "nvl-0"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def body(labels: Mapping[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gem.dev/v1alpha1",
        "kind": "GEMTraining",
        "metadata": {"name": "job", "namespace": "ml", "uid": "uid-1", "generation": 1, "labels": dict(labels or {})},
        "spec": {"parallelism": {"dpShard": 2, "tp": 8}, "checkpoint": {"uri": "s3://c/job"}, **spec},
    }


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[GEMTrainingSpec]]:
    calls: list[GEMTrainingSpec] = []
    real = render.rank_map

    def counting(owner: Any, spec: GEMTrainingSpec, *args: Any) -> dict[str, Any]:
        calls.append(spec)
        return real(owner, spec, *args)

    monkeypatch.setattr(render, "rank_map", counting)
    yield calls


async def one_pass(api: MemoryApi, doc: dict[str, Any]) -> Outcome:
    spec = GEMTrainingSpec.model_validate(doc["spec"])
    outcome = Outcome(draft=StatusDraft.from_status({}, NOW, 1))
    ctx = PassContext(kube=api, body=doc, now=NOW, logger=logging.getLogger("test"))  # type: ignore[arg-type]
    await training.TrainingPass(ctx, spec, outcome).run()
    return outcome


def kinds(api: MemoryApi) -> list[str]:
    return sorted(f"{k}/{name}" for k, _, name in api.objects if k not in ("Node",))


async def test_a_placed_gang_is_rendered_once(renders: list[GEMTrainingSpec]) -> None:
    api = MemoryApi([node("n1"), node("n2")])
    outcome = await one_pass(api, body())
    assert len(renders) == 1
    assert outcome.draft.fields["placement"]["nodes"] == ["n1", "n2"]
    assert kinds(api) == ["ConfigMap/job-config", "Pod/job-worker-0", "Pod/job-worker-1", "Service/job-rdzv"]


async def test_a_suspended_gang_is_rendered_once(renders: list[GEMTrainingSpec]) -> None:
    api = MemoryApi([node("n1"), node("n2")])
    outcome = await one_pass(api, body(suspend=True))
    assert len(renders) == 1
    assert outcome.draft.fields["phase"] == "Suspended"
    assert kinds(api) == ["ConfigMap/job-config", "Service/job-rdzv"]


async def test_a_queued_gang_renders_once_and_admission_renders_no_gang(renders: list[GEMTrainingSpec]) -> None:
    api = MemoryApi([node("n1"), node("n2")])
    outcome = await one_pass(api, body(labels={"kueue.x-k8s.io/queue-name": "gpu"}))
    # The Workload's podSet comes from one worker pod; the only gang render is hold's (no pods).
    assert len(renders) == 1
    assert outcome.draft.fields["phase"] == "Queued"
    assert kinds(api) == ["ConfigMap/job-config", "Service/job-rdzv", "Workload/job-workload"]
    (pod_set,) = api.objects[("Workload", "ml", "job-workload")]["spec"]["podSets"]
    assert pod_set["count"] == 2
    assert pod_set["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


async def test_an_unplaceable_gang_renders_only_its_service(renders: list[GEMTrainingSpec]) -> None:
    api = MemoryApi([node("n1")])  # two pods, one host
    outcome = await one_pass(api, body())
    assert renders == []
    assert outcome.draft.fields["phase"] == "Pending"
    assert kinds(api) == ["Service/job-rdzv"]


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == render.GANG_GATE for g in pod["spec"].get("schedulingGates") or [])


async def test_a_new_gang_is_created_and_ungated_on_one_list_of_its_pods() -> None:
    api = MemoryApi([node("n1"), node("n2")])
    await one_pass(api, body())
    pods = [api.objects[("Pod", "ml", f"job-worker-{rank}")] for rank in (0, 1)]
    assert not any(gated(p) for p in pods)
    # The gang's own pods once, and every pod once for the GPUs others use; ungating reads the pods
    # the apply created, not another list of a gang that may be thousands of pods.
    assert api.calls.count("list Pod") == 2
    assert "list Pod" not in api.calls[api.calls.index("apply Pod") :]


async def test_a_pod_the_gang_no_longer_has_is_pruned_from_the_first_list() -> None:
    api = MemoryApi([node("n1"), node("n2")])
    await one_pass(api, body())
    stale = copy.deepcopy(api.objects[("Pod", "ml", "job-worker-1")])
    stale["metadata"]["name"] = "job-worker-7"
    api._put(stale)
    api.calls.clear()
    await one_pass(api, body())
    assert ("Pod", "ml", "job-worker-7") not in api.objects
    assert ("Pod", "ml", "job-worker-1") in api.objects
    assert "list Pod" not in api.calls[api.calls.index("apply Pod") :]
