"""What pods say about themselves: loader termination messages and why they are not Ready."""

from __future__ import annotations

import json
from typing import Any

from gem_operator.controllers.pod_reasons import cache_fallbacks


def _loaded(message: dict[str, Any] | str, name: str = "model-loader") -> dict[str, Any]:
    text = message if isinstance(message, str) else json.dumps(message)
    return {
        "status": {"initContainerStatuses": [{"name": name, "state": {"terminated": {"exitCode": 0, "message": text}}}]}
    }


def test_cache_fallbacks_read_from_the_loaders_termination_message() -> None:
    pods = [
        _loaded({"seconds": 3.2, "bytes": 10, "cacheFallback": "node cache /var/cache/gem-models is not writable"}),
        _loaded({"seconds": 1.0, "bytes": 10}),
        _loaded({"seconds": 1.0, "cacheFallback": "read-only"}, name="checkpoint-restore"),
        _loaded("not json"),
        {"status": {}},
    ]
    assert cache_fallbacks(pods) == ["node cache /var/cache/gem-models is not writable", "read-only"]


def _pod(name: str, **status: Any) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "False"}]
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "conditions": conditions, **status}}


# Shapes as the kubelet reports them.
IMAGE_PULL = _pod(
    "rank-server-1",
    containerStatuses=[
        {
            "name": "ranker",
            "ready": False,
            "state": {
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": 'Back-off pulling image "ghcr.io/gem-dev/gem-workloads:0.9"',
                }
            },
        }
    ],
)
MISSING_SECRET = _pod(
    "rank-server-2",
    initContainerStatuses=[
        {
            "name": "model-loader",
            "state": {
                "waiting": {
                    "reason": "CreateContainerConfigError",
                    "message": 'secret "model-store-credentials" not found',
                }
            },
        }
    ],
)
LOADER_FAILED = _pod(
    "rank-server-3",
    initContainerStatuses=[
        {
            "name": "model-loader",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}},
            "lastState": {"terminated": {"exitCode": 2, "message": "--manifest: cannot read s3://m/v1/manifest.json"}},
        }
    ],
)
STARTING = _pod(
    "rank-server-4",
    initContainerStatuses=[{"name": "model-loader", "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}],
    containerStatuses=[{"name": "ranker", "state": {"waiting": {"reason": "PodInitializing"}}}],
)
READY = {
    "metadata": {"name": "rank-server-0"},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


def test_not_ready_pods_say_why_in_the_kubelets_words() -> None:
    from gem_operator.controllers.pod_reasons import not_ready_summary, pod_not_ready_reason

    assert pod_not_ready_reason(READY) is None
    assert pod_not_ready_reason(STARTING) is None  # still starting: nothing to report yet
    assert pod_not_ready_reason(IMAGE_PULL) == (
        'container ranker ImagePullBackOff: Back-off pulling image "ghcr.io/gem-dev/gem-workloads:0.9"'
    )
    assert pod_not_ready_reason(MISSING_SECRET) == (
        'init container model-loader CreateContainerConfigError: secret "model-store-credentials" not found'
    )
    assert pod_not_ready_reason(LOADER_FAILED) == (
        "init container model-loader CrashLoopBackOff: exit 2: --manifest: cannot read s3://m/v1/manifest.json"
    )
    summary = not_ready_summary([READY, STARTING, IMAGE_PULL, MISSING_SECRET, LOADER_FAILED])
    assert summary.count("pod rank-server-") == 3 and "rank-server-4" not in summary
    unschedulable = _pod(
        "w-0",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes"}],
    )
    assert pod_not_ready_reason(unschedulable) == "Unschedulable: 0/8 nodes"
    many = not_ready_summary([IMAGE_PULL] * 5)
    assert many.endswith("and 2 more pods not ready")


def test_pool_condition_carries_the_reason() -> None:
    from datetime import UTC, datetime

    from gem_operator.controllers.pod_reasons import not_ready_summary
    from gem_operator.controllers.status import StatusDraft, pool_phase

    draft = StatusDraft(now=datetime(2026, 12, 1, tzinfo=UTC), generation=1)
    deployment = {"status": {"replicas": 2, "readyReplicas": 1}}
    pool_phase(draft, 2, deployment, not_ready_summary([READY, IMAGE_PULL]))
    ready = next(c for c in draft.conditions if c.type == "Ready")
    assert ready.message.startswith("1/2 replicas ready: pod rank-server-1: container ranker ImagePullBackOff")
