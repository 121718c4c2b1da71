"""Panic, rate limits, the scale-down hold, free GPUs and bounds (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec, RatePolicy
from gem_operator.autoscaling.decision import Limit
from gem_operator.autoscaling.observation import MetricReading, Observation, PodState
from gem_operator.autoscaling.panic import PanicStep
from gem_operator.autoscaling.slo import SloStep, says
from gem_operator.autoscaling.steps.limits import Limited, apply_panic, cap, limit_rate, rate_bound, scale_down_hold
from gem_operator.autoscaling.steps.observe import Observed

NOW = 10_000.0
CALM = PanicStep(False, None, None)
PANIC = PanicStep(True, NOW + 60, 12, "panic: the 6s window asks for 12 replicas, >= 2x the 4 Ready")
OK = SloStep(0.6, False, 20.0, None, None)
OVER = SloStep(0.6, True, 55.0, None, None, says("p99 55.0 ms > SLO 40 ms: SM target 0.600 (cut recently)"))
RECENT = SloStep(0.6, False, 20.0, None, None, last_over=NOW - 100, hold_down=True)


def pol(pods: int | None = None, percent: int | None = None, period: int = 60) -> RatePolicy:
    return RatePolicy(pods=pods, percent=percent, period_seconds=period)


# (policies, events as (age s, delta), current, up, want)
RATE_CASES: list[Any] = [
    pytest.param([pol(pods=4)], [], 4, True, 8, id="up-pods"),
    pytest.param([pol(percent=100)], [], 4, True, 8, id="up-percent"),
    pytest.param([pol(pods=1), pol(percent=100)], [], 10, True, 20, id="up-most-permissive"),
    pytest.param([pol(percent=10)], [], 0, True, 1, id="up-from-zero-one-pod"),
    pytest.param([pol(pods=4)], [(30, 3)], 6, True, 7, id="up-measured-from-start-of-period"),
    pytest.param([pol(pods=4)], [(90, 3)], 6, True, 10, id="up-event-outside-period"),
    pytest.param([pol(percent=50)], [], 10, False, 5, id="down-percent"),
    pytest.param([pol(pods=1)], [(30, -2)], 8, False, 9, id="down-measured-from-start-of-period"),
    pytest.param([pol(pods=1), pol(percent=50)], [], 10, False, 5, id="down-most-permissive"),
    pytest.param([pol(pods=20)], [], 5, False, 0, id="down-never-below-zero"),
    pytest.param([], [], 5, True, 10**9, id="up-none-listed"),
    pytest.param([], [], 5, False, 0, id="down-none-listed"),
]


@pytest.mark.parametrize(("policies", "events", "current", "up", "want"), RATE_CASES)
def test_rate_bound(
    policies: list[RatePolicy], events: list[tuple[float, int]], current: int, up: bool, want: int
) -> None:
    assert rate_bound(policies, [(NOW - age, d) for age, d in events], NOW, current, up) == want


# (panic, stabilised, current, held, yielding, want count, raised by panic, has reason)
PANIC_CASES: list[Any] = [
    pytest.param(CALM, 5, 4, False, False, 5, False, False, id="calm"),
    pytest.param(PANIC, 5, 4, False, False, 12, True, True, id="panic-raises"),
    pytest.param(PANIC, 14, 4, False, False, 14, True, True, id="panic-never-lowers"),
    pytest.param(PanicStep(True, NOW + 30, None, "panic for 30s more"), 3, 4, False, False, 3, False, True, id="hold"),
    pytest.param(PANIC, 4, 4, True, False, 4, False, False, id="not-on-a-hold"),
    pytest.param(PANIC, 2, 4, False, True, 2, False, False, id="not-while-yielding"),
]


@pytest.mark.parametrize(
    ("panic", "stabilised", "current", "held", "yielding", "want", "raised", "says_it"), PANIC_CASES
)
def test_apply_panic(
    panic: PanicStep, stabilised: int, current: int, held: bool, yielding: bool, want: int, raised: bool, says_it: bool
) -> None:
    out = apply_panic(panic, stabilised, current, held=held, yielding=yielding)
    assert (out.replicas, out.raised_by_panic) == (want, raised)
    assert [r.text for r in out.reasons] == ([panic.message] if says_it else [])


# (panic, slo, want reason or None, text in the limit message)
HOLD_CASES: list[Any] = [
    pytest.param(CALM, OK, None, "", id="free-to-scale-down"),
    pytest.param(PANIC, OVER, "Panic", PANIC.message, id="panic-first"),
    pytest.param(CALM, OVER, "LatencyOverSlo", "p99 55.0 ms > SLO 40 ms", id="over-slo"),
    pytest.param(CALM, RECENT, "LatencyOverSlo", "over the SLO 100s ago (scaleDownHoldSeconds=300)", id="recent"),
]


@pytest.mark.parametrize(("panic", "slo", "reason", "text"), HOLD_CASES)
def test_scale_down_hold(panic: PanicStep, slo: SloStep, reason: str | None, text: str) -> None:
    out = scale_down_hold(AutoscalingSpec(), panic, slo, 3, 6, NOW)
    if reason is None:
        assert out is None
        return
    assert out is not None and out.replicas == 6
    assert out.limits == (Limit("scale-down-hold", reason, out.limits[0].message, 3, 6),)
    assert out.limits[0].message.startswith("no scale-down (wanted 3): ") and text in out.limits[0].message
    assert [r.text for r in out.reasons] == ["no scale-down to 3"]


def spec_rates(up: int, down: int) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate(
        {
            "policies": {
                "scaleUp": [{"pods": up, "periodSeconds": 60}],
                "scaleDown": [{"pods": down, "periodSeconds": 60}],
            }
        }
    )


# (wanted, raised by panic, panic, slo, yielding, want count, want limit reason)
RATE_LIMIT_CASES: list[Any] = [
    pytest.param(5, False, CALM, OK, False, 5, None, id="within-rate"),
    pytest.param(9, False, CALM, OK, False, 6, "ScaleUpLimit", id="scale-up-limited"),
    pytest.param(9, True, PANIC, OK, False, 9, None, id="panic-passes-rate"),
    pytest.param(1, False, CALM, OK, False, 3, "ScaleDownLimit", id="scale-down-limited"),
    pytest.param(3, False, CALM, OVER, False, 4, "LatencyOverSlo", id="scale-down-held"),
    pytest.param(3, False, CALM, OVER, True, 3, None, id="yielding-is-not-held"),
    pytest.param(4, False, PANIC, OVER, False, 4, None, id="no-change"),
]


@pytest.mark.parametrize(("wanted", "raised", "panic", "slo", "yielding", "want", "reason"), RATE_LIMIT_CASES)
def test_limit_rate(
    wanted: int, raised: bool, panic: PanicStep, slo: SloStep, yielding: bool, want: int, reason: str | None
) -> None:
    seen = Observed(4, 1, 50, 4, (), ())
    out = limit_rate(
        spec_rates(2, 1), seen, NOW, Limited(wanted, raised_by_panic=raised), panic=panic, slo=slo, yielding=yielding
    )
    assert out.replicas == want
    assert [lim.reason for lim in out.limits] == ([reason] if reason else [])
    assert all(lim.wanted == wanted and lim.allowed == want for lim in out.limits)


def pool(current: int, free: int | None, *, gpus: int = 1, waiting: int = 0) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(current)]
    pods += [PodState(f"w{i}", ready=False, model_loaded=False, scheduled=False) for i in range(waiting)]
    return Observation(current + waiting, pods, MetricReading(), gpus_per_replica=gpus, free_gpus=free)


# (current, free GPUs, GPUs per replica, pods waiting, wanted, floor, bounds, want count, limit reasons, reason text)
CAP_CASES: list[Any] = [
    pytest.param(4, None, 1, 0, 9, 1, (1, 50), 9, [], None, id="no-gpu-count"),
    pytest.param(4, 3, 1, 0, 9, 1, (1, 50), 7, ["InsufficientGPUs"], None, id="free-gpus-cap"),
    pytest.param(4, 4, 2, 0, 9, 1, (1, 50), 6, ["InsufficientGPUs"], None, id="gpus-per-replica"),
    pytest.param(4, 3, 1, 2, 9, 1, (1, 50), 5, ["InsufficientGPUs"], None, id="waiting-pods-count-against"),
    pytest.param(4, 0, 1, 0, 3, 1, (1, 50), 3, [], None, id="gpus-never-block-scale-down"),
    pytest.param(4, 10, 1, 0, 9, 1, (1, 6), 6, ["TooManyReplicas"], None, id="max-replicas"),
    pytest.param(4, 1, 1, 0, 9, 1, (1, 4), 4, ["InsufficientGPUs", "TooManyReplicas"], None, id="gpus-then-max"),
    pytest.param(4, None, 1, 0, 9, 1, (1, 2), 2, ["TooManyReplicas"], None, id="max-below-current"),
    pytest.param(4, None, 1, 0, 1, 3, (3, 50), 3, ["TooFewReplicas"], None, id="min-replicas"),
    pytest.param(1, None, 1, 0, 0, 1, (0, 50), 1, [], "kept at 1 (the last replica", id="last-replica"),
]


@pytest.mark.parametrize(
    ("current", "free", "gpus", "waiting", "wanted", "floor", "bounds", "want", "reasons", "text"), CAP_CASES
)
def test_cap(
    current: int,
    free: int | None,
    gpus: int,
    waiting: int,
    wanted: int,
    floor: int,
    bounds: tuple[int, int],
    want: int,
    reasons: list[str],
    text: str | None,
) -> None:
    seen = Observed(current, bounds[0], bounds[1], current, (), ())
    out = cap(pool(current, free, gpus=gpus, waiting=waiting), seen, wanted, floor)
    assert out.replicas == want
    assert [lim.reason for lim in out.limits] == reasons
    assert [r.step for r in out.reasons] == (["bounds"] if text else [])
    assert text is None or out.reasons[0].text.startswith(text)
