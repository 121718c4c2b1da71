"""The Helm chart, rendered offline with helm-python-sdk (Helm's own engine): manifests, RBAC, schema."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gem-operator"
CRDS = ROOT / "crds"
RELEASE, NAMESPACE = "gem-operator", "gem-system"

# Every API call the operator makes, per scope (resource -> verbs). The chart must grant exactly these.
NAMESPACED_RULES = {
    ("gem.dev", "gemtrainings"): {"get", "list", "watch", "patch"},
    ("gem.dev", "rankingservices"): {"get", "list", "watch", "patch"},
    ("gem.dev", "solarisprecomputes"): {"get", "list", "watch", "patch"},
    ("gem.dev", "gemtrainings/status"): {"patch"},
    ("gem.dev", "rankingservices/status"): {"patch"},
    ("gem.dev", "solarisprecomputes/status"): {"patch"},
    # blockOwnerDeletion on children needs this where OwnerReferencesPermissionEnforcement is on.
    ("gem.dev", "gemtrainings/finalizers"): {"update"},
    ("gem.dev", "rankingservices/finalizers"): {"update"},
    ("gem.dev", "solarisprecomputes/finalizers"): {"update"},
    ("kueue.x-k8s.io", "workloads"): {"get", "create", "patch", "delete"},
    ("kueue.x-k8s.io", "workloads/status"): {"patch"},
    ("", "pods"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("kopf.dev", "kopfpeerings"): {"get", "list", "watch", "patch"},
}
CLUSTER_RULES = {
    ("", "nodes"): {"get", "list", "watch"},
    # Free GPUs = allocatable minus pods bound in any namespace (placement, scale-up caps).
    ("", "pods"): {"list"},
    ("", "namespaces"): {"get", "list", "watch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("kueue.x-k8s.io", "topologies"): {"get"},
    ("kueue.x-k8s.io", "resourceflavors"): {"get"},
    ("kueue.x-k8s.io", "workloadpriorityclasses"): {"get"},
}
CLUSTERWIDE_EXTRA = {("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "patch"}}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = of_kind(docs, kind)
    return found


def rule_map(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def container(docs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    c: dict[str, Any] = one(docs, kind)["spec"]["template"]["spec"]["containers"][0]
    return c


# -- default values -------------------------------------------------------------------------------


def test_default_render_has_the_expected_objects(chart: helm.Chart) -> None:
    docs = render(chart)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "KopfPeering",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    )
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE and labels["app.kubernetes.io/name"] == "gem-operator"
        if doc["kind"] not in {"ClusterRole", "ClusterRoleBinding"}:
            assert doc["metadata"]["namespace"] == NAMESPACE


def test_deployment_runs_two_peered_replicas_with_probes(chart: helm.Chart) -> None:
    docs = render(chart)
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    c = container(docs)
    assert c["image"] == f"ghcr.io/gem-dev/gem-operator:{chart.metadata['appVersion']}"
    assert c["args"] == [
        "run",
        f"--namespace={NAMESPACE}",
        "--peering=gem-operator",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-port=9090",
    ]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"healthz": 8080, "metrics": 9090}
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"} and c["resources"]["limits"]["memory"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["GEM_RESYNC_SECONDS"] == "10"
    # A distinct peering priority per pod (equal priorities pause every replica).
    uid = next(e for e in c["env"] if e["name"] == "GEM_POD_UID")
    assert uid["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    peering = one(docs, "KopfPeering")
    assert peering["metadata"] == {**peering["metadata"], "name": "gem-operator", "namespace": NAMESPACE}
    assert peering["apiVersion"] == "kopf.dev/v1"
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    svc = one(docs, "Service")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == deploy["spec"]["template"]["metadata"]["labels"]


def test_pods_are_hardened(chart: helm.Chart) -> None:
    docs = render(chart, {"modelCache": {"enabled": True}})
    for kind in ("Deployment", "DaemonSet"):
        pod = one(docs, kind)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = pod["containers"][0]["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not pod.get("hostPID") and not pod.get("hostIPC")
        # The only writable path is an emptyDir at /tmp.
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert "/tmp" in mounts
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


def test_rbac_is_least_privilege_and_has_no_wildcards(chart: helm.Chart) -> None:
    for values in (None, {"watch": {"allNamespaces": True, "namespaces": []}}):
        docs = render(chart, values)
        for doc in of_kind(docs, "ClusterRole") + of_kind(docs, "Role"):
            for rule in doc["rules"]:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[key], f"{doc['kind']} {doc['metadata']['name']}: wildcard in {key}"
                assert "secrets" not in rule["resources"], "the operator never reads Secrets"
                assert not rule.get("resourceNames") and not rule.get("nonResourceURLs")
    docs = render(chart)
    assert rule_map(one(docs, "ClusterRole")["rules"]) == CLUSTER_RULES
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rule_map(role["rules"]) == NAMESPACED_RULES
    binding = one(docs, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gem-operator"}
    sa = one(docs, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    assert one(docs, "ClusterRoleBinding")["subjects"] == binding["subjects"]
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == sa


def test_owners_finalizers_are_updatable_for_block_owner_deletion(chart: helm.Chart) -> None:
    """Every child's ownerReference sets blockOwnerDeletion: the owner kind's finalizers need `update`."""
    from gem_operator.api.kinds import KINDS
    from gem_operator.render.common import Owner

    assert Owner("gem.dev/v1alpha1", "GEMTraining", "n", "ns", "u").reference()["blockOwnerDeletion"] is True
    for values in (None, {"watch": {"allNamespaces": True, "namespaces": []}}):
        docs = render(chart, values)
        role = one(docs, "ClusterRole" if values else "Role")
        granted = rule_map(role["rules"])
        for info in KINDS:
            assert "update" in granted.get((info.group, f"{info.plural}/finalizers"), set()), info.plural


def test_chart_crds_are_identical_to_generated_crds(chart: helm.Chart) -> None:
    generated = {p.name: p.read_text() for p in sorted(CRDS.glob("*.yaml"))}
    shipped = {p.name: p.read_text() for p in sorted((CHART / "crds").glob("*.yaml"))}
    assert shipped == generated, (
        "charts/gem-operator/crds/ drifted from crds/: cp crds/*.yaml charts/gem-operator/crds/"
    )
    # And Helm sees them as CRDs (installed before templates, never templated).
    assert sorted(Path(c["filename"]).name for c in chart.crds) == sorted(generated)


def test_helm_lint_finds_no_errors() -> None:
    report = helm.lint(CHART, namespace=NAMESPACE, strict=True)
    errors = [m for m in report["messages"] if m["severity"] >= 2]
    assert not errors and not report["errors"], report


def test_default_values_satisfy_the_schema_with_a_second_validator(chart: helm.Chart) -> None:
    """Helm 3 validates with a draft-07 engine, Helm 4 with another: keep the schema portable."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((CHART / "values.yaml").read_text()))
    chart.validate_schema(chart.values)


# -- non-default values -----------------------------------------------------------------------------


def test_all_namespaces_uses_cluster_peering_and_cluster_role(chart: helm.Chart) -> None:
    docs = render(chart, {"watch": {"allNamespaces": True}})
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding") and not of_kind(docs, "KopfPeering")
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "gem-operator"
    assert "namespace" not in one(docs, "ClusterKopfPeering")["metadata"]
    want = {**CLUSTER_RULES, **NAMESPACED_RULES, **CLUSTERWIDE_EXTRA}
    want[("", "pods")] = CLUSTER_RULES[("", "pods")] | NAMESPACED_RULES[("", "pods")]
    assert rule_map(one(docs, "ClusterRole")["rules"]) == want
    args = container(docs)["args"]
    assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)


def test_listed_namespaces_get_a_role_and_a_peering_each(chart: helm.Chart) -> None:
    docs = render(chart, {"watch": {"namespaces": ["team-a", "team-b"]}, "peering": {"name": "gem"}})
    assert sorted(r["metadata"]["namespace"] for r in of_kind(docs, "Role")) == ["team-a", "team-b"]
    assert sorted(r["metadata"]["namespace"] for r in of_kind(docs, "RoleBinding")) == ["team-a", "team-b"]
    for binding in of_kind(docs, "RoleBinding"):
        assert binding["subjects"][0]["namespace"] == NAMESPACE  # the SA lives in the release namespace
    assert sorted((p["metadata"]["name"], p["metadata"]["namespace"]) for p in of_kind(docs, "KopfPeering")) == [
        ("gem", "team-a"),
        ("gem", "team-b"),
    ]
    args = container(docs)["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=team-a", "--namespace=team-b"]
    assert "--peering=gem" in args


def test_standalone_single_replica_has_no_peering_and_no_pdb(chart: helm.Chart) -> None:
    docs = render(chart, {"replicaCount": 1, "peering": {"standalone": True}})
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert "--standalone" in container(docs)["args"]
    assert not any(a.startswith("--peering") for a in container(docs)["args"])
    assert not of_kind(docs, "KopfPeering") and not of_kind(docs, "PodDisruptionBudget")


def test_service_monitor_toggle(chart: helm.Chart) -> None:
    assert not of_kind(render(chart), "ServiceMonitor")
    docs = render(
        chart,
        {"metrics": {"serviceMonitor": {"enabled": True, "namespace": "monitoring", "labels": {"release": "kps"}}}},
    )
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["namespace"] == "monitoring" and sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    svc = one(docs, "Service")
    assert all(svc["metadata"]["labels"][k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]


def test_model_cache_daemonset_toggle(chart: helm.Chart) -> None:
    assert not of_kind(render(chart), "DaemonSet")
    docs = render(
        chart,
        {
            "modelCache": {
                "enabled": True,
                "port": 9470,
                "image": {"repository": "reg.local/gem-workloads", "tag": "1.2"},
            }
        },
    )
    ds = one(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "reg.local/gem-workloads:1.2"
    assert c["command"] == ["gem-load", "serve", "/var/cache/gem-models", "--port", "9470"]
    assert c["ports"][0]["containerPort"] == c["ports"][0]["hostPort"] == 9470
    cache = next(v for v in pod["volumes"] if v["name"] == "node-cache")
    assert cache["hostPath"] == {"path": "/var/cache/gem-models", "type": "DirectoryOrCreate"}
    assert next(m for m in c["volumeMounts"] if m["name"] == "node-cache")["readOnly"] is True
    assert pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # The single root step: chown the hostPath to the workloads' uid, with CHOWN as the only capability.
    (prepare,) = pod["initContainers"]
    assert prepare["command"] == ["install", "-d", "-o", "65532", "-g", "65532", "-m", "0775", "/var/cache/gem-models"]
    assert prepare["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert prepare["securityContext"]["allowPrivilegeEscalation"] is False
    assert prepare["securityContext"]["readOnlyRootFilesystem"] is True
    off = one(render(chart, {"modelCache": {"enabled": True, "prepareHostPath": False}}), "DaemonSet")
    assert "initContainers" not in off["spec"]["template"]["spec"]
    # The loader's peers: a Service over the cache pods, announced to the operator.
    cache_svc = next(d for d in of_kind(docs, "Service") if d["metadata"]["name"].endswith("-model-cache"))
    assert cache_svc["spec"]["ports"][0]["port"] == 9470
    assert cache_svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    env = {
        e["name"]: e.get("value") for e in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GEM_MODEL_PEERS"] == f"http://{cache_svc['metadata']['name']}.{NAMESPACE}.svc:9470"
    plain = one(render(chart), "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "GEM_MODEL_PEERS" not in {e["name"] for e in plain}
    # Pods mount the hostPath cache only where the DaemonSet prepares it for their uid.
    assert env["GEM_NODE_CACHE"] == "hostPath"
    assert {e["name"]: e.get("value") for e in plain}["GEM_NODE_CACHE"] == "off"


def test_image_by_digest_and_overrides(chart: helm.Chart) -> None:
    digest = "sha256:" + "ab" * 32
    docs = render(
        chart,
        {
            "image": {"repository": "registry.example:5000/gem/gem-operator", "digest": digest, "tag": "0.9.0"},
            "imagePullSecrets": [{"name": "regcred"}],
            "resyncSeconds": 2.5,
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": 2, "memory": "2Gi"}},
            "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
            "metrics": {"port": 9191},
        },
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == f"registry.example:5000/gem/gem-operator@{digest}"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert {e["name"]: e.get("value") for e in c["env"]}["GEM_RESYNC_SECONDS"] == "2.5"
    assert "--metrics-port=9191" in c["args"]
    assert c["resources"]["limits"] == {"cpu": 2, "memory": "2Gi"}
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}


def test_rbac_and_service_account_can_be_disabled(chart: helm.Chart) -> None:
    docs = render(chart, {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "ops-sa"}})
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "ops-sa"


def test_prometheus_credentials_reach_the_operator_as_files(chart: helm.Chart) -> None:
    """None by default; a token file is passed as a path (re-read each sync), a password and a CA from a
    Secret and a ConfigMap are mounted read-only and passed as paths, never as values."""
    plain = container(render(chart))
    assert not [e for e in plain["env"] if e["name"].startswith("GEM_PROMETHEUS_")]

    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ca = "/var/run/secrets/kubernetes.io/serviceaccount/service-ca.crt"
    env = {
        e["name"]: e.get("value")
        for e in container(render(chart, {"prometheus": {"bearerTokenFile": token, "caFile": ca}}))["env"]
    }
    assert env["GEM_PROMETHEUS_BEARER_TOKEN_FILE"] == token and env["GEM_PROMETHEUS_CA_FILE"] == ca

    values = {
        "prometheus": {
            "basicAuth": {"username": "team-ads", "passwordSecret": {"name": "mimir-reader", "key": "pw"}},
            "caConfigMap": {"name": "mimir-ca"},
        }
    }
    docs = render(chart, values)
    c = container(docs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["GEM_PROMETHEUS_USERNAME"] == "team-ads"
    assert env["GEM_PROMETHEUS_PASSWORD_FILE"] == "/etc/gem/prometheus/password/pw"
    assert env["GEM_PROMETHEUS_CA_FILE"] == "/etc/gem/prometheus/ca/ca.crt"
    assert "GEM_PROMETHEUS_BEARER_TOKEN_FILE" not in env
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["prometheus-password"]["readOnly"] and mounts["prometheus-ca"]["readOnly"]
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["prometheus-password"]["secret"] == {
        "secretName": "mimir-reader",
        "items": [{"key": "pw", "path": "pw"}],
    }
    assert volumes["prometheus-ca"]["configMap"]["name"] == "mimir-ca"


# -- bad values ------------------------------------------------------------------------------------

BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    ("zero replicas", {"replicaCount": 0}, "/replicaCount"),
    ("typo'd key", {"replicas": 3}, "replicas"),
    ("bad digest", {"image": {"digest": "sha256:xyz"}}, "/image/digest"),
    ("bad pull policy", {"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ("root", {"securityContext": {"runAsNonRoot": False}}, "/securityContext/runAsNonRoot"),
    (
        "writable root",
        {"securityContext": {"readOnlyRootFilesystem": False}},
        "/securityContext/readOnlyRootFilesystem",
    ),
    ("caps kept", {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}, "/securityContext/capabilities/drop"),
    ("caps added", {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "/securityContext/capabilities/add"),
    ("unconfined", {"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}}, "/podSecurityContext"),
    ("uid 0", {"podSecurityContext": {"runAsUser": 0}}, "/podSecurityContext/runAsUser"),
    ("bad namespace", {"watch": {"namespaces": ["Team_A"]}}, "/watch/namespaces/0"),
    ("resync 0", {"resyncSeconds": 0}, "/resyncSeconds"),
    ("bad port", {"metrics": {"port": 70000}}, "/metrics/port"),
    ("bad interval", {"metrics": {"serviceMonitor": {"interval": "often"}}}, "/metrics/serviceMonitor/interval"),
    ("bad quantity", {"resources": {"requests": {"memory": "lots"}}}, "/resources/requests/memory"),
    ("relative hostPath", {"modelCache": {"hostPath": "cache"}}, "/modelCache/hostPath"),
    ("root cache owner", {"modelCache": {"cacheOwner": {"uid": 0, "gid": 0}}}, "/modelCache/cacheOwner/uid"),
    ("replicas as string", {"replicaCount": "2"}, "/replicaCount"),
    ("relative token file", {"prometheus": {"bearerTokenFile": "token"}}, "/prometheus/bearerTokenFile"),
    ("bad ca configmap", {"prometheus": {"caConfigMap": {"name": "Team_CA"}}}, "/prometheus/caConfigMap/name"),
]

# Cross-field rules the schema cannot express: the templates `fail` with a message naming the fix.
BAD_COMBINATIONS: list[tuple[str, dict[str, Any], str]] = [
    ("standalone x2", {"peering": {"standalone": True}}, "peering.standalone=true"),
    ("all + listed", {"watch": {"allNamespaces": True, "namespaces": ["a"]}}, "mutually exclusive"),
    ("pdb blocks drain", {"podDisruptionBudget": {"minAvailable": 2}}, "podDisruptionBudget.minAvailable (2)"),
    (
        "monitor without service",
        {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
        "metrics.service.enabled",
    ),
    ("same ports", {"metrics": {"port": 8080}}, "metrics.port and liveness.port must differ"),
    ("latest tag", {"image": {"tag": "latest"}}, "image.tag=latest is not allowed"),
    ("latest cache tag", {"modelCache": {"enabled": True, "image": {"tag": "latest"}}}, "modelCache.image.tag=latest"),
    ("sa without name", {"serviceAccount": {"create": False}}, "serviceAccount.name is required"),
    (
        "token and basic auth",
        {"prometheus": {"bearerTokenFile": "/t", "basicAuth": {"username": "u", "passwordSecret": {"name": "p"}}}},
        "set bearerTokenFile or basicAuth, not both",
    ),
    (
        "user without password",
        {"prometheus": {"basicAuth": {"username": "u"}}},
        "prometheus.basicAuth.username needs prometheus.basicAuth.passwordSecret.name",
    ),
]


@pytest.mark.parametrize(("case", "values", "where"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_schema_rejects_bad_values(chart: helm.Chart, case: str, values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as err:
        render(chart, values)
    assert where in str(err.value), f"{case}: the message should name {where}: {err.value}"


@pytest.mark.parametrize(("case", "values", "message"), BAD_COMBINATIONS, ids=[c[0] for c in BAD_COMBINATIONS])
def test_templates_reject_bad_combinations(chart: helm.Chart, case: str, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError) as err:
        render(chart, values)
    assert message in str(err.value), f"{case}: {err.value}"


# -- the plain-kubectl install: the chart rendered once, kept in sync --------------------------------

INSTALL_MANIFEST = ROOT / "deploy" / "kubectl" / "gem-operator.yaml"
INSTALL_VALUES: dict[str, Any] = {"watch": {"allNamespaces": False, "namespaces": ["default"]}}


def install_manifest(chart: helm.Chart) -> str:
    out = chart.render(INSTALL_VALUES, name=RELEASE, namespace=NAMESPACE)
    header = (
        "# gem-operator for `kubectl apply`, rendered from charts/gem-operator (release gem-operator in\n"
        "# gem-system, serving the default namespace). Apply the CRDs first:\n"
        "#   kubectl apply --server-side -f crds/\n"
        "#   kubectl apply -f deploy/kubectl/gem-operator.yaml\n"
        "# Regenerate: GEM_UPDATE_MANIFESTS=1 pytest tests/chart -k install_manifest\n"
        "---\n"
        f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"
    )
    order = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "KopfPeering"]
    docs = [
        doc
        for path, text in sorted(out.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    # Identity and permissions before the pods that use them.
    docs.sort(key=lambda d: order.index(d["kind"]) if d["kind"] in order else len(order))
    return header + "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)


def test_install_manifest_matches_the_chart(chart: helm.Chart) -> None:
    want = install_manifest(chart)
    if os.environ.get("GEM_UPDATE_MANIFESTS") == "1":
        INSTALL_MANIFEST.parent.mkdir(parents=True, exist_ok=True)
        INSTALL_MANIFEST.write_text(want)
    assert INSTALL_MANIFEST.read_text() == want, "deploy/kubectl/gem-operator.yaml is stale: GEM_UPDATE_MANIFESTS=1"
    kinds = [d["kind"] for d in yaml.safe_load_all(want) if d]
    assert kinds[0] == "Namespace" and "Deployment" in kinds and "KopfPeering" in kinds


def notes(chart: helm.Chart, values: dict[str, Any] | None = None) -> str:
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


@pytest.mark.parametrize(
    ("values", "served", "sample_ns"),
    [
        (None, f"{NAMESPACE} only", NAMESPACE),
        ({"watch": {"namespaces": ["ml-prod", "default"]}}, "ml-prod, default only", "ml-prod"),
        ({"watch": {"allNamespaces": True}}, "all namespaces", "default"),
    ],
)
def test_notes_tell_the_truth(chart: helm.Chart, values: dict[str, Any] | None, served: str, sample_ns: str) -> None:
    text = notes(chart, values)
    assert f"It serves {served}" in text
    # The sample is applied where the operator serves, from a file that names no namespace of its own.
    (apply,) = [line.split() for line in text.splitlines() if "kubectl apply" in line]
    assert apply[apply.index("-n") + 1] == sample_ns
    sample = ROOT / apply[apply.index("-f") + 1]
    assert sample.is_file() and "namespace" not in yaml.safe_load(sample.read_text())["metadata"]
    # The port-forward runs in the background, to a Service and port the chart renders.
    (forward,) = [
        line.split() for line in text.splitlines() if line.strip().startswith("kubectl") and "port-forward" in line
    ]
    assert forward[-1] == "&"
    (svc,) = [d for d in of_kind(render(chart, values), "Service") if d["metadata"]["name"].endswith("-metrics")]
    assert forward[forward.index("port-forward") + 1] == f"svc/{svc['metadata']['name']}"
    port = svc["spec"]["ports"][0]["port"]
    assert forward[forward.index("port-forward") + 2] == f"{port}:{port}"
    assert f"curl -s localhost:{port}/metrics" in text
    assert "raw.githubusercontent.com" not in text
