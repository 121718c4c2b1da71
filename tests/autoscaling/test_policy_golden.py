"""Golden sequences: `desired_replicas` over recorded runs of syncs must decide exactly as recorded.

Each sequence is a seeded random walk of one pool (SM load, pods starting and unscheduled, stale
and failing readings, the queue, the p99, the panic window, free GPUs, a precompute backlog and a
ranker over its SLO) under one spec, with the state carried from sync to sync and the count
following the decision. Every decision's count, reason, message, conditions and a digest of the
state it hands on are compared with `data/policy_golden.jsonl`, recorded from the policy as it was
before its steps were split out. A change to any step that alters one decision fails here; when a
change of behaviour is intended, regenerate the file with

    python tests/autoscaling/test_policy_golden.py --write

and review the diff of the file: every changed line is a decision that changed.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import PrecomputeAutoscalingSpec
from gem_operator.autoscaling.observation import (
    LatencyReading,
    MetricReading,
    Observation,
    PodSample,
    PodState,
    PrecomputeSignals,
)
from gem_operator.autoscaling.policy import Decision, desired_replicas
from gem_operator.autoscaling.state import ScalerState
from gem_operator.controllers.autoscaler import scaled_event

GOLDEN = Path(__file__).parent / "data" / "policy_golden.jsonl"
SYNCS = 20

# (name, kind, spec overrides, seed)
SEQUENCES: list[tuple[str, str, dict[str, Any], int]] = [
    ("defaults", "ranking", {}, 1),
    # The earlier SLO feedback, still selectable: decides as `defaults` did before the band loop.
    ("ratchet", "ranking", {"sloFeedback": {"controller": "ratchet"}, "hysteresis": {"enabled": False}}, 1),
    ("ramp", "ranking", {"maxReplicas": 40}, 9),
    ("panic", "ranking", {"panic": {"enabled": True, "threshold": 1.5}}, 2),
    ("windows", "ranking", {"stabilizationSeconds": {"up": 30, "down": 120}, "tolerance": {"up": 0.0}}, 3),
    ("no-ramp-lead", "ranking", {"rampLead": {"enabled": False}, "minReplicas": 0}, 4),
    (
        "rate-policies",
        "ranking",
        {
            "policies": {
                "scaleUp": [{"pods": 1, "periodSeconds": 60}],
                "scaleDown": [{"pods": 1, "periodSeconds": 60}],
            },
            "sloFeedback": {"scaleDownHoldSeconds": 0, "decreaseIntervalSeconds": 15},
            "stabilizationSeconds": {"down": 0},
        },
        10,
    ),
    ("bounds", "ranking", {"minReplicas": 3, "maxReplicas": 6, "sloFeedback": {"enabled": False}}, 6),
    ("precompute", "precompute", {"idleSecondsBeforeZero": 60, "backlogTargetPerReplica": 100, "yieldTo": "r"}, 7),
    ("precompute-min", "precompute", {"minReplicas": 1, "deadlineSeconds": 30, "idleSecondsBeforeZero": 0}, 8),
]


def _reading(rng: random.Random, names: list[str], now: float, level: float, stale: float) -> MetricReading:
    if rng.random() < 0.05:
        return MetricReading.unavailable("timeout")
    samples: dict[str, PodSample] = {}
    for name in names:
        x = rng.random()
        if x < 0.05:
            continue
        value = float("nan") if x < 0.07 else max(0.0, rng.gauss(level, 0.1 * level + 0.02))
        age = rng.choice([0.0, 3.0, 10.0]) if rng.random() > 0.05 else stale + rng.uniform(1, 100)
        samples[name] = PodSample(value, now - age)
    return MetricReading(samples=samples)


def _pods(rng: random.Random, count: int) -> list[PodState]:
    pods: list[PodState] = []
    for j in range(count):
        x = rng.random()
        if x < 0.12:
            pods.append(PodState(f"p{j}", ready=False, model_loaded=False, scheduled=rng.random() < 0.6))
        elif x < 0.16:
            pods.append(PodState(f"p{j}", ready=True, model_loaded=False))
        else:
            pods.append(PodState(f"p{j}", ready=True))
    return pods


def _latency(rng: random.Random, now: float, level: float, stale: float) -> LatencyReading | None:
    y = rng.random()
    if y < 0.15:
        return None
    if y < 0.2:
        return LatencyReading.unavailable("no requests")
    if y < 0.23:
        return LatencyReading(30.0, now - stale - 20)
    if y < 0.35:
        return LatencyReading(rng.uniform(45.0, 90.0), now)
    return LatencyReading(max(1.0, rng.gauss(10 + 50 * level * level, 8)), now - rng.choice([0.0, 5.0]))


def _queue(rng: random.Random, names: list[str], now: float, level: float, stale: float) -> MetricReading | None:
    if rng.random() < 0.3:
        return None
    q = max(0.0, rng.gauss(0.0, 2.0)) if level > 0.7 else (0.0 if rng.random() < 0.8 else rng.uniform(0, 3))
    samples = {
        n: PodSample(q * rng.uniform(0.5, 1.5), now - rng.choice([0.0, 5.0, stale + 5.0]))
        for n in names
        if rng.random() > 0.1
    }
    return MetricReading(samples=samples)


def run_sequence(kind: str, overrides: dict[str, Any], seed: int, syncs: int = SYNCS) -> list[Decision]:
    """The decisions of one recorded sequence (pure: the same arguments give the same decisions)."""
    rng = random.Random(seed)
    base: dict[str, Any] = {"minReplicas": 1 if kind == "ranking" else 0, "maxReplicas": 12, "targetSmActive": 0.6}
    base.update(overrides)
    spec = (AutoscalingSpec if kind == "ranking" else PrecomputeAutoscalingSpec).model_validate(base)
    stale = float(spec.metrics.stale_after_seconds)
    slo_ms = 40.0 if kind == "ranking" else None
    state = ScalerState()
    current, now, level, backlog = rng.randint(1, 5), 1000.0, rng.uniform(0.3, 0.8), rng.randint(0, 600)
    # The ramp sequence: a steady rise, no queue, that the ramp lead projects.
    drift = 0.1 if seed == 9 else 0.0
    out: list[Decision] = []
    for _ in range(syncs):
        now += rng.choice([15.0, 15.0, 15.0, 30.0, 5.0])
        jump = 0.4 if rng.random() < 0.06 else -0.4 if rng.random() < 0.06 else 0.0
        level = min(1.0, max(0.0, level + rng.gauss(0, 0.08) + jump))
        if drift:
            level = 1.0 + drift * len(out)  # the pool's demand in SM-active terms
        if rng.random() < 0.1 and not drift:
            current = max(0, current + rng.randint(-2, 2))
        pods = _pods(rng, current + (1 if rng.random() < 0.1 else 0))
        if drift:  # every pod serves and reports: the demand the ramp lead fits is the load's
            pods = [PodState(f"p{j}", ready=True) for j in range(current)]
        names = [p.name for p in pods if p.serving]
        precompute = None
        if kind == "precompute":
            backlog = max(0, backlog + rng.randint(-300, 200)) if rng.random() < 0.85 else 0
            over = rng.random() < 0.15
            precompute = PrecomputeSignals(
                backlog=None if rng.random() < 0.08 else backlog,
                oldest_item_age_seconds=None if rng.random() < 0.2 else rng.uniform(0, 60),
                ranker_over_slo=over,
                ranker_message="ranker p99 80 ms > SLO 50 ms" if over else "",
            )
        observation = Observation(
            current_replicas=current,
            pods=pods,
            metrics=MetricReading({n: PodSample(level / max(1, current), now) for n in names})
            if drift
            else _reading(rng, names, now, level, stale),
            gpus_per_replica=rng.choice([1, 1, 2]),
            free_gpus=rng.choice([None, None, 0, 2, 8]),
            precompute=precompute,
            queue=_queue(rng, names, now, level, stale) if kind == "ranking" and not drift else None,
            latency=_latency(rng, now, level, stale) if kind == "ranking" else None,
            panic_metrics=_reading(rng, names, now, min(1.0, level * rng.uniform(0.8, 2.5)), stale)
            if spec.panic.enabled and rng.random() < 0.7
            else None,
        )
        saturation = None if rng.random() < 0.15 else 0.9
        d = desired_replicas(spec, state, observation, now, saturation=saturation, slo_p99_ms=slo_ms)
        out.append(d)
        state = d.state
        if rng.random() < 0.9:
            current = d.desired_replicas
    return out


def summary(d: Decision) -> dict[str, Any]:
    """What the golden file pins per decision: count, reason, text, conditions, and the state handed on."""
    state = json.dumps(d.state.to_dict(), sort_keys=True)
    return {
        "current": d.current_replicas,
        "desired": d.desired_replicas,
        "reason": d.reason,
        "message": d.message,
        "conditions": [[c.type, c.status, c.reason] for c in d.conditions],
        "limited": next((c.message for c in d.conditions if c.type == "ScalingLimited" and c.status == "True"), ""),
        "state": hashlib.sha256(state.encode()).hexdigest()[:16],
    }


def records() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, kind, overrides, seed in SEQUENCES:
        for i, d in enumerate(run_sequence(kind, overrides, seed)):
            rows.append({"sequence": name, "sync": i, **summary(d)})
    return rows


def _golden() -> dict[tuple[str, int], dict[str, Any]]:
    rows = [json.loads(line) for line in GOLDEN.read_text().splitlines() if line.strip()]
    return {(r["sequence"], r["sync"]): r for r in rows}


@pytest.mark.parametrize(("name", "kind", "overrides", "seed"), SEQUENCES, ids=[s[0] for s in SEQUENCES])
def test_decisions_match_the_recorded_sequence(name: str, kind: str, overrides: dict[str, Any], seed: int) -> None:
    golden = _golden()
    for i, d in enumerate(run_sequence(kind, overrides, seed)):
        assert {"sequence": name, "sync": i, **summary(d)} == golden[(name, i)], f"{name} sync {i}"


def parsed_event(current: int, desired: int, message: str) -> str:
    """The event as it was made from the message alone: split on "; " after "current -> desired: "."""
    verb = "Scaled up" if desired > current else "Scaled down"
    _, sep, rest = message.partition(f"{current} -> {desired}: ")
    clauses = [c.strip() for c in (rest if sep else message).split("; ") if c.strip()]
    sentences = [f"{verb} from {current} to {desired} replicas."]
    sentences += [c[0].upper() + c[1:] + ("" if c.endswith(".") else ".") for c in clauses]
    return " ".join(sentences)


@pytest.mark.parametrize(("name", "kind", "overrides", "seed"), SEQUENCES, ids=[s[0] for s in SEQUENCES])
def test_events_read_as_before(name: str, kind: str, overrides: dict[str, Any], seed: int) -> None:
    """The event renders the structured reasons; where no reason's own text holds "; " (none here:
    a source's error text could), that is the sentence per clause the message used to be split into."""
    for d in run_sequence(kind, overrides, seed):
        if d.direction != "none":
            assert scaled_event(d) == parsed_event(d.current_replicas, d.desired_replicas, d.message)


def test_the_sequences_reach_every_kind_of_decision() -> None:
    """The recorded runs exercise what they are meant to pin (else a golden file proves little)."""
    rows = list(_golden().values())
    reasons = {r["reason"] for r in rows}
    limited = {c[2] for r in rows for c in r["conditions"] if c[0] == "ScalingLimited" and c[1] == "True"}
    assert {"HighSmActive", "LowSmActive", "WithinTolerance", "MetricsUnavailable", "Panic", "RisingLoad"} <= reasons
    assert {"Backlog", "Idle", "YieldingGPUs"} <= reasons
    assert {"ScaleUpLimit", "ScaleDownLimit", "InsufficientGPUs", "TooManyReplicas", "LatencyOverSlo"} <= limited
    assert any("stabilised to" in r["message"] for r in rows)
    assert any(r["desired"] > r["current"] for r in rows) and any(r["desired"] < r["current"] for r in rows)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/autoscaling/test_policy_golden.py --write")
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records()))
    print(f"wrote {GOLDEN}")
