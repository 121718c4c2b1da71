"""The closed loop's decision log: one line per change of what the pool's status says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gem_testbed.drivers.closed_loop import DecisionLog


def resource(message: str | None, target: float = 0.6) -> dict[str, Any]:
    conditions = [{"type": "ScalingLimited", "message": "not limited"}]
    if message is not None:
        conditions.append({"type": "ScalingActive", "status": "True", "message": message})
    return {"status": {"conditions": conditions, "autoscaling": {"effectiveTargetSmActive": target}}}


def test_a_line_per_change_none_before_the_first_decision(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path / "decisions-policy.jsonl")
    log.note(0.4, 1, resource(None))  # the operator has not decided yet
    log.note(1.0, 1, resource("SM active 0.30 vs target 0.60: holding"))
    log.note(2.0, 1, resource("SM active 0.30 vs target 0.60: holding"))  # unchanged: no line
    log.note(15.2, 3, resource("SM active 0.90 vs target 0.60: 3 replicas"))
    log.note(30.1, 3, resource("SM active 0.90 vs target 0.60: 3 replicas", target=0.55))  # the target moved
    lines = [json.loads(line) for line in log.path.read_text().splitlines()]
    assert [(d["t"], d["replicas"], d["target"]) for d in lines] == [(1.0, 1, 0.6), (15.2, 3, 0.6), (30.1, 3, 0.55)]
    assert lines[1]["message"] == "SM active 0.90 vs target 0.60: 3 replicas"
    assert lines[0]["p99_ms"] is None


def test_a_new_log_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "decisions-policy.jsonl"
    path.write_text('{"t": 1}\n')
    DecisionLog(path)
    assert path.read_text() == ""
