"""The malformed corpus (gem_testbed.faults.malformed) through kube-apiserver, beside the emulator.

Each case is created as kubectl would (strict field validation) on the real control plane and on the
embedded emulator. kube-apiserver is the reference: the emulator must refuse exactly the cases it
refuses, naming the same fields. What it admits, the operator must judge: Ready=False/InvalidSpec
naming the field, with an Event, while it keeps running (the same process, alive and serving a good
resource next to the bad ones) and is denied nothing.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from gem_operator.api.crd import gem_crds
from gem_operator.api.kinds import kind_info
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.faults.malformed import CASES, Case, sample
from gem_testbed.kubelets.lifecycle import LifecycleConfig

from .conftest import WORK_NAMESPACE as NAMESPACE
from .conftest import RealCluster, eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(600)]

Answer = tuple[int, list[str]]  # HTTP status, "field: message" of each cause (or the message, without causes)


def _manifest(case: Case, index: int) -> dict[str, Any]:
    doc = case.manifest(index)
    doc["metadata"]["namespace"] = NAMESPACE
    return doc


def _causes(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return [str(body)]
    causes = (body.get("details") or {}).get("causes") or []
    return [f"{c.get('field')}: {c.get('message')}" for c in causes] or [str(body.get("message"))]


def _path(case: Case) -> str:
    return f"/apis/gem.dev/v1alpha1/namespaces/{NAMESPACE}/{kind_info(case.kind).plural}?fieldValidation=Strict"


def _real(cluster: RealCluster, case: Case, doc: dict[str, Any]) -> Answer:
    # Plain JSON over HTTPS: the corpus nests deeper than the Kubernetes client serialises.
    status, body = cluster.plane.admin_client().request("POST", _path(case), doc)
    return status, [] if status == 201 else _causes(body)


def _emulated(url: str, case: Case, doc: dict[str, Any]) -> Answer:
    request = urllib.request.Request(
        url + _path(case), data=json.dumps(doc).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, []
    except urllib.error.HTTPError as error:
        return error.code, _causes(json.loads(error.read() or b"{}"))


def _key(answer: Answer) -> tuple[int, set[str]]:
    """What must match: the status, and the fields of a 422's causes (else the whole message)."""
    code, causes = answer
    return code, {cause.split(": ", 1)[0] for cause in causes} if code == 422 else set(causes)


def _ready(cluster: RealCluster, kind: str, name: str) -> dict[str, Any]:
    obj = cluster.custom.get_namespaced_custom_object("gem.dev", "v1alpha1", NAMESPACE, kind_info(kind).plural, name)
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == "Ready"), {})


def test_the_malformed_corpus_through_kube_apiserver(operated: RealCluster) -> None:
    (operator,) = [p for p in operated.operators if p.alive()][:1]
    pid = operator.pid
    real: dict[str, Answer] = {}
    emulated: dict[str, Answer] = {}
    crds = list(gem_crds().values())
    with EmbeddedCluster("demo", crds, lifecycle=LifecycleConfig(0, 0), namespaces=[NAMESPACE]) as embedded:
        for index, case in enumerate(CASES):
            doc = _manifest(case, index)
            real[case.name] = _real(operated, case, doc)
            emulated[case.name] = _emulated(embedded.url, case, doc)

    differences = []
    for case in CASES:
        (code, causes), (emulated_code, emulated_causes) = real[case.name], emulated[case.name]
        if code not in (201, 400, 422):
            differences.append(f"{case.name}: kube-apiserver answered HTTP {code}: {causes}")
        elif code != 201 and not any(case.field in c for c in causes):
            differences.append(f"{case.name}: kube-apiserver's {code} does not name {case.field}: {causes}")
        if _key(real[case.name]) != _key(emulated[case.name]):
            differences.append(
                f"{case.name}: kube-apiserver {code} {causes} / emulator {emulated_code} {emulated_causes}"
            )
    assert not differences, "\n".join(differences)

    admitted = [(case, f"bad-{i}") for i, case in enumerate(CASES) if real[case.name][0] == 201]
    refused = len(CASES) - len(admitted)
    assert admitted and refused, f"{len(admitted)} admitted, {refused} refused: the corpus exercises both"

    def judged() -> bool:
        return all(_ready(operated, case.kind, name).get("reason") == "InvalidSpec" for case, name in admitted)

    eventually(f"{len(admitted)} admitted cases marked InvalidSpec", judged, 180)
    events = operated.core.list_namespaced_event(NAMESPACE).items
    warned = {(e.involved_object.name, e.reason) for e in events if e.type == "Warning"}
    for case, name in admitted:
        message = _ready(operated, case.kind, name).get("message", "")
        assert case.field in message, f"{case.name}: {message}"
        assert (name, "InvalidSpec") in warned, f"{case.name}: no InvalidSpec Warning event"
    good = sample("RankingService")
    good["metadata"] = {"name": "good", "namespace": NAMESPACE}
    operated.custom.create_namespaced_custom_object("gem.dev", "v1alpha1", NAMESPACE, "rankingservices", good)
    eventually("a good RankingService next to the bad ones Ready", lambda: (
        _ready(operated, "RankingService", "good").get("status") == "True"), 180)  # fmt: skip
    assert operator.alive() and operator.pid == pid, "the operator never crashed (same process throughout)"
    assert operated.forbidden() == []
    operated.delete_gem_objects(NAMESPACE)
