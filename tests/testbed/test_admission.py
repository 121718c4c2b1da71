"""The embedded API server admits our kinds as kube-apiserver does: schema, defaults, pruning, CEL,
422 with field paths; Table views, a current version, /scale with a selector. Over real HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gem_operator.api.crd import gem_crds
from gem_operator.api.kinds import kind_info
from gem_operator.api.schema_check import schema_errors
from gem_testbed.cluster import EmbeddedCluster
from gem_testbed.emulator.admission import prune
from gem_testbed.faults.malformed import CASES, Case, sample
from gem_testbed.kubelets.lifecycle import LifecycleConfig

pytestmark = pytest.mark.timeout(120)
BASE = "/apis/gem.dev/v1alpha1/namespaces/default"


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, method: str, path: str, body: Any = None, ctype: str = "application/json",
                 accept: str = "application/json") -> tuple[int, Any]:  # fmt: skip
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", ctype)
        request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")


@pytest.fixture(scope="module")
def gem_api() -> Iterator[Api]:
    crds = list(gem_crds().values())
    with EmbeddedCluster(fleet="demo", crds=crds, lifecycle=LifecycleConfig(0, 0)) as running:
        yield Api(running.url)


def plural(kind: str) -> str:
    return kind_info(kind).plural


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_resources_are_refused_at_the_door_with_the_field(gem_api: Api, case: Case) -> None:
    manifest = case.manifest(CASES.index(case))
    schema_ok = not schema_errors(kind_info(case.kind), manifest)
    status, body = gem_api("POST", f"{BASE}/{plural(case.kind)}?fieldValidation=Strict", manifest)
    if schema_ok:  # only the operator's own checks catch it: the API server stores it
        assert status == 201, body
        gem_api("DELETE", f"{BASE}/{plural(case.kind)}/{manifest['metadata']['name']}")
        return
    unknown: list[str] = []
    info = kind_info(case.kind)
    crd = gem_crds()[f"{info.group}_{info.plural}.yaml"]
    prune(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], manifest, [], unknown)
    if unknown:  # kube-apiserver's strict decoding refuses these before any validation: 400, no causes
        assert status == 400 and body["reason"] == "BadRequest", body
        prefix = f'{case.kind} in version "v1alpha1" cannot be handled as a {case.kind}: strict decoding error: '
        assert body["message"] == prefix + ", ".join(f'unknown field "{f}"' for f in unknown)
        assert case.field in body["message"]
        return
    assert status == 422 and body["reason"] == "Invalid", body
    assert body["message"].startswith(f'{case.kind}.gem.dev "{manifest["metadata"]["name"]}" is invalid: ')
    causes = [f"{c['field']}: {c['message']}" for c in body["details"]["causes"]]
    assert any(case.field in c for c in causes), causes
    assert len(body["message"]) < 4000


def test_discovery_lists_the_group_by_resource_name_as_kube_apiserver(gem_api: Api) -> None:
    status, body = gem_api("GET", "/apis/gem.dev/v1alpha1")
    assert status == 200
    top = [r["name"] for r in body["resources"] if "/" not in r["name"]]
    assert top == ["gemtrainings", "rankingservices", "solarisprecomputes"]  # kubectl get gem's order


def test_unknown_fields_are_pruned_unless_strict(gem_api: Api) -> None:
    doc = sample("RankingService")
    doc = {
        **doc,
        "metadata": {"name": "pruned"},
        "spec": {**doc["spec"], "replicaz": 3, "slo": {"p99LatencyMs": 40, "x": 1}},
    }
    status, body = gem_api("POST", f"{BASE}/rankingservices", doc)
    assert status == 201, body
    assert "replicaz" not in body["spec"] and body["spec"]["slo"] == {**body["spec"]["slo"], "p99LatencyMs": 40}
    assert "x" not in body["spec"]["slo"]
    # defaults filled as the API server fills them
    assert body["spec"]["workload"]["imagePullPolicy"] == "IfNotPresent"
    # a merge patch that breaks the schema is refused and changes nothing
    status, err = gem_api("PATCH", f"{BASE}/rankingservices/pruned", {"spec": {"port": "http"}},
                          "application/merge-patch+json")  # fmt: skip
    assert status == 422 and err["details"]["causes"][0]["field"] == "spec.port"
    status, now = gem_api("GET", f"{BASE}/rankingservices/pruned")
    assert now["spec"]["port"] == body["spec"]["port"]
    # a status write is validated against the status schema too
    status, err = gem_api("PATCH", f"{BASE}/rankingservices/pruned/status", {"status": {"replicas": "two"}},
                          "application/merge-patch+json")  # fmt: skip
    assert status == 422 and err["details"]["causes"][0]["field"] == "status.replicas"


def test_deep_bodies_and_oversize_config_maps_are_refused(gem_api: Api) -> None:
    # 600 levels under an unknown field: pruned, as the API server prunes (nothing deep is stored).
    doc = next(c for c in CASES if c.name == "gem-deep-600").manifest(900)
    status, body = gem_api("POST", f"{BASE}/gemtrainings", doc)
    assert status == 201 and "extra" not in body["spec"]["workload"]
    # 5,000 levels: refused before decoding into an object.
    text = '{"apiVersion":"gem.dev/v1alpha1","kind":"GEMTraining","metadata":{"name":"d"},"spec":' + '{"x":' * 5000
    request = urllib.request.Request(gem_api.url + f"{BASE}/gemtrainings", data=(text + "1" + "}" * 5001).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=20)
    assert info.value.code == 422
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": "x" * (1024 * 1024 + 1)}}
    status, body = gem_api("POST", "/api/v1/namespaces/default/configmaps", cm)
    assert status == 422 and "must have at most 1048576 bytes" in body["message"]


def test_table_view_version_and_scale_selector(gem_api: Api) -> None:
    doc = {**sample("RankingService"), "metadata": {"name": "tabled"}}
    assert gem_api("POST", f"{BASE}/rankingservices", doc)[0] == 201
    status, _ = gem_api("PATCH", f"{BASE}/rankingservices/tabled/status",
                        {"status": {"phase": "Ready", "desiredReplicas": 2, "selector": "app=x"}},
                        "application/merge-patch+json")  # fmt: skip
    assert status == 200
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    status, tbl = gem_api("GET", f"{BASE}/rankingservices", accept=accept)
    assert status == 200 and tbl["kind"] == "Table"
    names = [c["name"] for c in tbl["columnDefinitions"]]
    assert names[:3] == ["Name", "Phase", "Desired"] and "Age" in names
    row = next(r for r in tbl["rows"] if r["cells"][0] == "tabled")
    assert row["cells"][1:3] == ["Ready", 2]
    status, one = gem_api("GET", f"{BASE}/rankingservices/tabled", accept=accept)
    assert one["kind"] == "Table" and len(one["rows"]) == 1
    status, version = gem_api("GET", "/version")
    assert (version["major"], int(version["minor"])) >= ("1", 30)
    status, scale = gem_api("GET", f"{BASE}/rankingservices/tabled/scale")
    assert status == 200 and scale["status"]["selector"] == "app=x"
