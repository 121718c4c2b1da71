"""A corpus of malformed resources of the three kinds, each with the field a good error must name.

Used by the tests (offline validation, the embedded API server's admission, the operator's own
checks) and by bench/chaos.py. Each case starts from a sample under crds/samples/ and changes one
thing; ``field`` is the path (as kube-apiserver and `gemop validate` write it, without the
leading ``spec.``) that the error message must contain.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SAMPLES = Path(__file__).resolve().parents[3] / "crds" / "samples"
_FILES = {
    "GEMTraining": "gemtraining.yaml",
    "RankingService": "rankingservice.yaml",
    "SolarisPrecompute": "solarisprecompute.yaml",
}
DELETE = object()


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    path: tuple[str | int, ...]  # under spec
    value: Any
    field: str  # what the error must name

    def manifest(self, index: int = 0) -> dict[str, Any]:
        doc = copy.deepcopy(sample(self.kind))
        doc["metadata"] = {"name": f"bad-{index}", "namespace": "default"}
        node: Any = doc["spec"]
        for part in self.path[:-1]:
            node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
        last = self.path[-1]
        if self.value is DELETE:
            del node[last]
        else:
            node[last] = self.value() if callable(self.value) else copy.deepcopy(self.value)
        return dict(doc)


_CACHE: dict[str, dict[str, Any]] = {}


def sample(kind: str) -> dict[str, Any]:
    """The shipped sample of ``kind``: a copy, so that a caller's edits never reach the next caller."""
    if kind not in _CACHE:
        _CACHE[kind] = yaml.safe_load((SAMPLES / _FILES[kind]).read_text())
    return copy.deepcopy(_CACHE[kind])


def deep(levels: int) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        node: dict[str, Any] = {}
        root = node
        for _ in range(levels):
            node["x"] = {}
            node = node["x"]
        return root

    return build


def _common(kind: str) -> list[Case]:
    """Cases every kind shares (workload and model/checkpoint fields)."""
    k = kind[:3].lower()
    return [
        Case(f"{k}-image-1mb", kind, ("workload", "image"), "r/" + "a" * 1_000_000, "workload.image"),
        Case(f"{k}-image-empty", kind, ("workload", "image"), "", "workload.image"),
        Case(f"{k}-image-int", kind, ("workload", "image"), 42, "workload.image"),
        Case(f"{k}-pull-policy-enum", kind, ("workload", "imagePullPolicy"), "Sometimes", "workload.imagePullPolicy"),
        Case(f"{k}-env-not-list", kind, ("workload", "env"), {"A": "1"}, "workload.env"),
        Case(
            f"{k}-env-too-many",
            kind,
            ("workload", "env"),
            [{"name": f"V{i}", "value": "x"} for i in range(65)],
            "workload.env",
        ),
        Case(f"{k}-env-bad-name", kind, ("workload", "env"), [{"name": "1-bad", "value": "x"}], "workload.env[0].name"),
        Case(f"{k}-args-too-many", kind, ("workload", "args"), [str(i) for i in range(65)], "workload.args"),
        Case(f"{k}-arg-too-long", kind, ("workload", "args"), ["a" * 5000], "workload.args[0]"),
        Case(
            f"{k}-cpu-quantity",
            kind,
            ("workload", "resources", "requests", "cpu"),
            "lots",
            "workload.resources.requests.cpu",
        ),
        Case(
            f"{k}-memory-bool",
            kind,
            ("workload", "resources", "limits", "memory"),
            True,
            "workload.resources.limits.memory",
        ),
        Case(f"{k}-sa-too-long", kind, ("workload", "serviceAccountName"), "s" * 300, "workload.serviceAccountName"),
        Case(f"{k}-unknown-top", kind, ("replicaz",), 3, "replicaz"),
        Case(f"{k}-deep-600", kind, ("workload", "extra"), deep(600), "workload.extra"),
        Case(f"{k}-workload-string", kind, ("workload",), "ghcr.io/x", "workload"),
    ]


def _pool(kind: str) -> list[Case]:
    k = kind[:3].lower()
    return [
        Case(f"{k}-gpus-str", kind, ("gpusPerReplica",), "1", "gpusPerReplica"),
        Case(f"{k}-gpus-bool", kind, ("gpusPerReplica",), True, "gpusPerReplica"),
        Case(f"{k}-gpus-negative", kind, ("gpusPerReplica",), -1, "gpusPerReplica"),
        Case(f"{k}-gpus-float", kind, ("gpusPerReplica",), 1.5, "gpusPerReplica"),
        Case(f"{k}-model-missing", kind, ("model",), DELETE, "model"),
        Case(f"{k}-model-uri-scheme", kind, ("model", "uri"), "ftp://m", "model.uri"),
        Case(f"{k}-model-uri-long", kind, ("model", "uri"), "s3://" + "m" * 3000, "model.uri"),
        Case(f"{k}-streams-range", kind, ("model", "loader", "streams"), 1000, "model.loader.streams"),
        Case(f"{k}-part-size-str", kind, ("model", "loader", "partSizeMiB"), "32", "model.loader.partSizeMiB"),
        Case(f"{k}-node-cache-yes", kind, ("model", "loader", "nodeCache"), "yes", "model.loader.nodeCache"),
        Case(
            f"{k}-secret-ref-bad",
            kind,
            ("model", "credentialsSecretRef", "name"),
            "Bad_Name",
            "model.credentialsSecretRef.name",
        ),
        Case(f"{k}-min-over-max", kind, ("autoscaling", "minReplicas"), 50, "autoscaling"),
        Case(f"{k}-target-range", kind, ("autoscaling", "targetSmActive"), 1.5, "autoscaling.targetSmActive"),
        Case(f"{k}-enabled-str", kind, ("autoscaling", "enabled"), "true", "autoscaling.enabled"),
        Case(f"{k}-max-replicas-huge", kind, ("autoscaling", "maxReplicas"), 10**9, "autoscaling.maxReplicas"),
        Case(
            f"{k}-prom-url",
            kind,
            ("autoscaling", "metrics", "prometheus", "url"),
            "prometheus:9090",
            "autoscaling.metrics.prometheus.url",
        ),
        Case(
            f"{k}-prom-token-header",
            kind,
            ("autoscaling", "metrics", "prometheus", "headers"),
            {"X-Scope-OrgID": "team-ads", "Authorization": "Bearer eyJhbGciOi"},
            "autoscaling.metrics.prometheus",
        ),
        Case(
            f"{k}-prom-header-cased",  # a spelling the API server's rule does not list: the operator's
            kind,
            ("autoscaling", "metrics", "prometheus", "headers"),
            {"AuThOrIzAtIoN": "Bearer eyJhbGciOi"},
            "autoscaling.metrics.prometheus.headers",
        ),
        Case(
            f"{k}-prom-headers-many",
            kind,
            ("autoscaling", "metrics", "prometheus", "headers"),
            {f"X-H{i}": "v" for i in range(17)},
            "autoscaling.metrics.prometheus.headers",
        ),
    ]


CASES: tuple[Case, ...] = (
    *_common("GEMTraining"),
    Case("gem-suspend-yes", "GEMTraining", ("suspend",), "yes", "suspend"),
    Case("gem-suspend-int", "GEMTraining", ("suspend",), 1, "suspend"),
    Case("gem-pp-true", "GEMTraining", ("parallelism", "pp"), True, "parallelism.pp"),
    Case("gem-tp-str", "GEMTraining", ("parallelism", "tp"), "4", "parallelism.tp"),
    Case("gem-tp-zero", "GEMTraining", ("parallelism", "tp"), 0, "parallelism.tp"),
    Case("gem-tp-wider-than-host", "GEMTraining", ("parallelism", "tp"), 16, "tp"),
    Case("gem-world-1m", "GEMTraining", ("parallelism", "dpReplicate"), 32768, "parallelism"),
    Case("gem-world-mismatch", "GEMTraining", ("parallelism", "worldSize"), 33, "parallelism"),
    Case("gem-ep-not-dividing", "GEMTraining", ("parallelism", "ep"), 3, "parallelism"),
    Case("gem-parallelism-list", "GEMTraining", ("parallelism",), [2, 2], "parallelism"),
    Case("gem-gpus-per-node-17", "GEMTraining", ("gpusPerNode",), 17, "gpusPerNode"),
    Case("gem-checkpoint-missing", "GEMTraining", ("checkpoint",), DELETE, "checkpoint"),
    Case("gem-checkpoint-uri", "GEMTraining", ("checkpoint", "uri"), "ckpt", "checkpoint.uri"),
    Case("gem-interval-negative", "GEMTraining", ("checkpoint", "intervalSteps"), -1, "checkpoint.intervalSteps"),
    Case("gem-scope-enum", "GEMTraining", ("failurePolicy", "scope"), "Pod", "failurePolicy.scope"),
    Case("gem-max-restarts-str", "GEMTraining", ("failurePolicy", "maxRestarts"), "5", "failurePolicy.maxRestarts"),
    Case("gem-data-enum", "GEMTraining", ("training", "data"), "imagenet", "training.data"),
    Case("gem-preset-long", "GEMTraining", ("training", "preset"), "p" * 100, "training.preset"),
    Case(
        "gem-tiers-too-many",
        "GEMTraining",
        ("topology", "tiers"),
        [{"name": f"t{i}", "label": f"l/{i}"} for i in range(9)],
        "topology.tiers",
    ),
    Case(
        "gem-tier-label-long",
        "GEMTraining",
        ("topology", "tiers"),
        [{"name": "host", "label": "l" * 400}],
        "topology.tiers[0].label",
    ),
    Case(
        "gem-placement-dimension",
        "GEMTraining",
        ("topology", "placement"),
        [{"dimension": "zz", "tier": "host"}],
        "topology.placement[0].dimension",
    ),
    Case("gem-rendezvous-port", "GEMTraining", ("rendezvousPort",), 80, "rendezvousPort"),
    *_common("RankingService"),
    *_pool("RankingService"),
    Case("ran-port-str", "RankingService", ("port",), "8080", "port"),
    Case("ran-slo-negative", "RankingService", ("slo", "p99LatencyMs"), -5, "slo.p99LatencyMs"),
    Case("ran-precompute-ref-long", "RankingService", ("precomputeRef",), "p" * 300, "precomputeRef"),
    *_common("SolarisPrecompute"),
    *_pool("SolarisPrecompute"),
    Case("sol-store-missing", "SolarisPrecompute", ("store",), DELETE, "store"),
    Case("sol-store-url", "SolarisPrecompute", ("store", "url"), "http://redis", "store.url"),
    Case("sol-stream-long", "SolarisPrecompute", ("source", "stream"), "s" * 300, "source.stream"),
    Case("sol-batch-str", "SolarisPrecompute", ("batchSize",), "512", "batchSize"),
    Case("sol-fallback-order", "SolarisPrecompute", ("fallback", "tiers"), ["similarUser", "exact"], "fallback"),
    Case("sol-fallback-enum", "SolarisPrecompute", ("fallback", "tiers"), ["exact", "nearest"], "fallback.tiers[1]"),
    Case("sol-yield-to-long", "SolarisPrecompute", ("autoscaling", "yieldTo"), "y" * 300, "autoscaling.yieldTo"),
)
