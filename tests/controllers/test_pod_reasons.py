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
