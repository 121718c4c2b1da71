"""Each compatibility fix of the emulator, over real HTTP."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any

import pytest
import yaml

from gem_testbed.cluster import EmbeddedCluster

pytestmark = pytest.mark.timeout(30)
WIDGETS = "/apis/gem.dev/v1alpha1/namespaces/default/widgets"
Api = Any  # the `api` fixture from conftest: api(method, path, body, content_type) -> (status, json)


@pytest.fixture
def api_class(api: Any) -> Any:
    return type(api)


def test_namespace_paths_parse_and_default_namespace_exists(api: Api) -> None:
    status, body = api("GET", "/api/v1/namespaces")
    assert status == 200
    assert [ns["metadata"]["name"] for ns in body["items"]] == ["default"]
    status, body = api("GET", "/api/v1/namespaces/default")
    assert status == 200 and body["kind"] == "Namespace" and body["status"]["phase"] == "Active"
    status, _ = api("POST", "/api/v1/namespaces", {"metadata": {"name": "team-a"}})
    assert status == 201
    assert api("GET", "/api/v1/namespaces/team-a")[0] == 200


def test_create_sets_uid_resource_version_timestamp_generation(api: Api) -> None:
    status, obj = api("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": 1}})
    assert status == 201
    meta = obj["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    assert obj["apiVersion"] == "gem.dev/v1alpha1" and obj["kind"] == "Widget"
    status, again = api("POST", WIDGETS, {"metadata": {"name": "w"}})
    assert status == 409 and again["reason"] == "AlreadyExists"


def test_generation_grows_on_spec_change_only(api: Api) -> None:
    api("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": 1}})
    _, obj = api.merge(f"{WIDGETS}/w", {"spec": {"size": 2}})
    assert obj["metadata"]["generation"] == 2
    _, obj = api.merge(f"{WIDGETS}/w/status", {"status": {"observedGeneration": 2}})
    assert obj["metadata"]["generation"] == 2
    _, obj = api.merge(f"{WIDGETS}/w", {"metadata": {"labels": {"a": "b"}}})
    assert obj["metadata"]["generation"] == 2
    rv = obj["metadata"]["resourceVersion"]
    _, same = api.merge(f"{WIDGETS}/w", {"spec": {"size": 2}})  # a no-op write
    assert same["metadata"]["resourceVersion"] == rv


def test_status_subresource_splits_status_from_the_rest(api: Api) -> None:
    api("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"phase": "Ignored"}})
    _, obj = api("GET", f"{WIDGETS}/w")
    assert "status" not in obj  # status is dropped on create, as by the API server
    _, obj = api.merge(f"{WIDGETS}/w/status", {"status": {"phase": "Ready"}, "spec": {"size": 9}})
    assert obj["status"] == {"phase": "Ready"} and obj["spec"] == {"size": 1}
    _, obj = api.merge(f"{WIDGETS}/w", {"status": {"phase": "Hacked"}, "spec": {"size": 3}})
    assert obj["status"] == {"phase": "Ready"} and obj["spec"] == {"size": 3}


def test_scale_subresource(api: Api) -> None:
    api("POST", WIDGETS, {"metadata": {"name": "w"}, "spec": {"replicas": 2}})
    status, scale = api("GET", f"{WIDGETS}/w/scale")
    assert status == 200 and scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    status, scale = api.merge(f"{WIDGETS}/w/scale", {"spec": {"replicas": 5}})
    assert status == 200 and scale["spec"]["replicas"] == 5
    assert api("GET", f"{WIDGETS}/w")[1]["spec"]["replicas"] == 5


def test_json_patch_and_failed_test_is_422(api: Api) -> None:
    api("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    ops = [
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"},
    ]
    status, obj = api("PATCH", "/api/v1/namespaces/default/configmaps/c", ops, "application/json-patch+json")
    assert status == 200 and obj["data"] == {"k": "w"}
    bad = [{"op": "test", "path": "/data/k", "value": "nope"}]
    status, error = api("PATCH", "/api/v1/namespaces/default/configmaps/c", bad, "application/json-patch+json")
    assert status == 422 and error["kind"] == "Status" and error["reason"] == "Invalid"


def test_core_discovery_reports_v1(api: Api) -> None:
    status, body = api("GET", "/api/v1")
    assert status == 200 and body["groupVersion"] == "v1"
    names = {r["name"] for r in body["resources"]}
    assert {"pods", "pods/status", "nodes", "events", "namespaces"} <= names
    _, group = api("GET", "/apis/gem.dev/v1alpha1")
    widgets = {r["name"]: r for r in group["resources"]}
    assert widgets["widgets"]["namespaced"] is True and widgets["widgets"]["shortNames"] == ["wdg"]
    assert {"widgets/status", "widgets/scale"} <= set(widgets) and widgets["widgets/status"]["shortNames"] == []
    _, groups = api("GET", "/apis")
    assert {"gem.dev", "kopf.dev", "apps", "events.k8s.io"} <= {g["name"] for g in groups["groups"]}


def test_list_has_kind_api_version_and_resource_version(api: Api) -> None:
    status, body = api("GET", "/api/v1/nodes")
    assert status == 200 and body["kind"] == "NodeList" and body["apiVersion"] == "v1"
    assert int(body["metadata"]["resourceVersion"]) > 0 and len(body["items"]) == 8


def test_label_selectors_on_list(api: Api) -> None:
    for name, labels in [("a", {"app": "x", "tier": "1"}), ("b", {"app": "x"}), ("c", {"app": "y"})]:
        api("POST", "/api/v1/namespaces/default/services", {"metadata": {"name": name, "labels": labels}})

    def names(selector: str) -> list[str]:
        query = urllib.parse.urlencode({"labelSelector": selector})
        return sorted(
            s["metadata"]["name"] for s in api("GET", f"/api/v1/namespaces/default/services?{query}")[1]["items"]
        )

    assert names("app=x,tier") == ["a"]
    assert names("app=x,!tier") == ["b"]
    assert names("app in (x,y),tier!=1") == ["b", "c"]
    assert names("app notin (x)") == ["c"]


def _watch_lines(cluster: EmbeddedCluster, path: str, count: int) -> list[dict[str, object]]:
    host, port = urllib.parse.urlsplit(cluster.url).netloc.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("GET", path)
    response = conn.getresponse()
    events = [json.loads(response.readline()) for _ in range(count)]
    conn.close()
    return events


def test_watch_resumes_after_resource_version_with_label_selector(cluster: EmbeddedCluster, api: Api) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    _, first = api("POST", cms, {"metadata": {"name": "one", "labels": {"w": "yes"}}})
    api("POST", cms, {"metadata": {"name": "skip", "labels": {"w": "no"}}})
    api("POST", cms, {"metadata": {"name": "two", "labels": {"w": "yes"}}})
    api.merge(f"{cms}/one", {"data": {"k": "v"}})
    rv = first["metadata"]["resourceVersion"]
    events = _watch_lines(cluster, f"{cms}?watch=true&labelSelector=w%3Dyes&resourceVersion={rv}", 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "two"),
        ("MODIFIED", "one"),
    ]  # type: ignore[index]
    fresh = _watch_lines(cluster, f"{cms}?watch=true&labelSelector=w%3Dyes", 2)
    assert {e["object"]["metadata"]["name"] for e in fresh} == {"one", "two"}  # type: ignore[index]


def test_garbage_collection_cascades_by_owner_uid(api: Api) -> None:
    _, owner = api("POST", WIDGETS, {"metadata": {"name": "owner"}})

    def ref(obj: dict[str, object]) -> list[dict[str, object]]:
        meta = obj["metadata"]
        return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}]  # type: ignore[index]

    _, child = api(
        "POST",
        "/api/v1/namespaces/default/services",
        {"metadata": {"name": "child", "ownerReferences": ref(owner)}},
    )
    api(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "grandchild", "ownerReferences": ref(child)}},
    )
    api("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "unrelated"}})
    assert api("DELETE", f"{WIDGETS}/owner")[0] == 200
    assert api("GET", "/api/v1/namespaces/default/services/child")[0] == 404
    assert api("GET", "/api/v1/namespaces/default/configmaps/grandchild")[0] == 404
    assert api("GET", "/api/v1/namespaces/default/configmaps/unrelated")[0] == 200


def test_finalizers_block_deletion_until_removed(api: Api) -> None:
    api("POST", WIDGETS, {"metadata": {"name": "w", "finalizers": ["gem.dev/cleanup"]}})
    status, obj = api("DELETE", f"{WIDGETS}/w")
    assert status == 200 and obj["metadata"]["deletionTimestamp"]
    assert api("GET", f"{WIDGETS}/w")[0] == 200
    api.merge(f"{WIDGETS}/w", {"metadata": {"finalizers": None}})
    assert api("GET", f"{WIDGETS}/w")[0] == 404


def test_generate_name_events_and_unknown_resources(api: Api) -> None:
    status, event = api(
        "POST", "/api/v1/namespaces/default/events", {"metadata": {"generateName": "ev-"}, "reason": "X"}
    )
    assert status == 201 and event["metadata"]["name"].startswith("ev-") and len(event["metadata"]["name"]) == 8
    status, _ = api(
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        {"metadata": {"name": "e2"}, "reason": "Y"},
    )
    assert status == 201
    assert api("GET", "/apis/nope.dev/v1/things")[0] == 404
    assert api("GET", f"{WIDGETS}/missing")[1]["reason"] == "NotFound"


def test_put_replaces_and_orphan_delete_keeps_dependents(api: Api) -> None:
    _, owner = api("POST", WIDGETS, {"metadata": {"name": "o"}, "spec": {"a": 1, "b": 2}})
    replaced = dict(owner, spec={"a": 5})
    status, obj = api("PUT", f"{WIDGETS}/o", replaced)
    assert status == 200 and obj["spec"] == {"a": 5} and obj["metadata"]["generation"] == 2
    stale = dict(replaced, spec={"a": 6})  # carries the old resourceVersion
    assert api("PUT", f"{WIDGETS}/o", stale)[0] == 409
    ref = [{"apiVersion": "gem.dev/v1alpha1", "kind": "Widget", "name": "o", "uid": owner["metadata"]["uid"]}]
    api(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "kept", "ownerReferences": ref}},
    )
    assert api("DELETE", f"{WIDGETS}/o", {"propagationPolicy": "Orphan"})[0] == 200
    status, kept = api("GET", "/api/v1/namespaces/default/configmaps/kept")
    assert status == 200
    # As kube-controller-manager's garbage collector: the orphan loses its reference to the owner.
    assert "ownerReferences" not in kept["metadata"]


def test_watch_timeout_and_expired_resource_version(cluster: EmbeddedCluster, api: Api) -> None:
    host, port = urllib.parse.urlsplit(cluster.url).netloc.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=0.2&resourceVersion=1")
    assert conn.getresponse().read() == b""  # nothing happened; the server closed the stream
    conn.close()
    cluster.emulator._log_floor[cluster.emulator.resolve("v1", "configmaps")] = 50  # as if trimmed
    events = _watch_lines(cluster, "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=3", 1)
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410  # type: ignore[index]


def test_deleting_a_namespace_deletes_its_objects(api: Api) -> None:
    api("POST", "/api/v1/namespaces", {"metadata": {"name": "tmp"}})
    api("POST", "/api/v1/namespaces/tmp/configmaps", {"metadata": {"name": "c"}})
    assert api("DELETE", "/api/v1/namespaces/tmp")[0] == 200
    assert api("GET", "/api/v1/namespaces/tmp/configmaps/c")[0] == 404
    assert api("GET", "/api/v1/namespaces/default")[0] == 200


def test_crd_created_over_http_serves_its_kind_and_crd_files_load(tmp_path: Any, api: Api, widget_crd: Any) -> None:
    crd = json.loads(json.dumps(widget_crd).replace("widget", "gadget").replace("Widget", "Gadget"))
    crd["spec"]["names"]["shortNames"] = []
    assert api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)[0] == 201
    assert api("POST", "/apis/gem.dev/v1alpha1/namespaces/default/gadgets", {"metadata": {"name": "g"}})[0] == 201
    path = tmp_path / "crds.yaml"
    path.write_text(yaml.safe_dump_all([crd, {"kind": "ConfigMap"}]))
    with EmbeddedCluster(fleet=None, crds=[path], kopf_peering=False) as other:
        assert other.apply({"apiVersion": "gem.dev/v1alpha1", "kind": "Gadget", "metadata": {"name": "g"}})
        assert other.list("gem.dev/v1alpha1", "gadgets", "default")[0]["kind"] == "Gadget"


def test_bad_requests_are_4xx_not_500(api: Api) -> None:
    assert api("GET", "/api/v1/namespaces/default/pods?labelSelector=a%20in%20(")[0] == 400
    assert api("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {}})[0] == 422
    status, error = api("PATCH", "/api/v1/namespaces/default/configmaps/x", {}, "application/apply-patch+yaml")
    assert status in (404, 415) and error["kind"] == "Status"
