"""The TargetLearned condition: a pool whose SLO loop held the SM target well below the declared one
for half an hour says so, with the target to declare (table-driven, then through the policy and the
controller's pass)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.learned import (
    LEARNED_AFTER_SECONDS,
    TARGET_LEARNED,
    learned_target,
    loop_bounds_as_read,
    loop_floor,
    low_run,
)
from gem_operator.autoscaling.policy import (
    MetricReading,
    Observation,
    PodSample,
    PodState,
    ScalerState,
    desired_replicas,
)
from gem_operator.autoscaling.sources import SimulatedSource
from gem_operator.controllers.autoscaler import autoscale, use_metric_sources
from gem_operator.controllers.reconcile import Outcome, PassContext
from gem_operator.controllers.status import StatusDraft

DECLARED = 0.6
NOW = 100_000.0
HALF_HOUR = LEARNED_AFTER_SECONDS


def _spec(**kw: Any) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate({"minReplicas": 1, "maxReplicas": 20, "targetSmActive": DECLARED, **kw})


# (target now, run carried in, want status, want reason, want run out)
TABLE: list[Any] = [
    pytest.param(0.55, None, "False", "NearDeclaredTarget", None, id="above-the-fraction"),
    pytest.param(0.55, (NOW - 2 * HALF_HOUR, 0.4), "False", "NearDeclaredTarget", None, id="one-sync-above-ends-run"),
    pytest.param(0.48, None, "False", "Learning", (NOW, 0.48), id="at-the-fraction-starts-a-run"),
    pytest.param(
        0.40, (NOW - HALF_HOUR + 1, 0.45), "False", "Learning", (NOW - HALF_HOUR + 1, 0.45), id="a-second-short"
    ),
    pytest.param(
        0.40, (NOW - HALF_HOUR, 0.45), "True", "HeldBelowDeclared", (NOW - HALF_HOUR, 0.45), id="half-an-hour"
    ),
    pytest.param(
        0.47, (NOW - 3 * HALF_HOUR, 0.40), "True", "HeldBelowDeclared", (NOW - 3 * HALF_HOUR, 0.47), id="highest-kept"
    ),
    pytest.param(0.40, (NOW + 60, 0.40), "False", "Learning", (NOW, 0.40), id="start-in-the-future-restarts"),
    pytest.param(0.30, (NOW - HALF_HOUR, 0.30), "True", "HeldAtFloor", (NOW - HALF_HOUR, 0.30), id="at-the-floor"),
    pytest.param(0.30, (NOW - HALF_HOUR + 1, 0.30), "False", "Learning", (NOW - HALF_HOUR + 1, 0.30), id="floor-short"),
    pytest.param(0.31, (NOW - HALF_HOUR, 0.31), "True", "HeldBelowDeclared", (NOW - HALF_HOUR, 0.31), id="above-floor"),
]


@pytest.mark.parametrize(("target", "run", "status", "reason", "run_out"), TABLE)
def test_the_condition_follows_the_run_of_low_targets(
    target: float, run: tuple[float, float] | None, status: str, reason: str, run_out: tuple[float, float] | None
) -> None:
    learned = learned_target(_spec(), target, run, NOW, p99_ms=None, slo_ms=40.0)
    assert (learned.condition.type, learned.condition.status, learned.condition.reason) == (
        TARGET_LEARNED,
        status,
        reason,
    )
    assert learned.run == run_out


def test_the_true_message_names_the_run_and_the_target_to_declare() -> None:
    learned = learned_target(_spec(), 0.39, (NOW - 2400, 0.42), NOW, p99_ms=31.0, slo_ms=40.0)
    message = learned.condition.message
    assert "at or below 0.42 (0.70 x targetSmActive 0.6) for 40 min" in message
    assert "declare spec.autoscaling.targetSmActive near 0.39" in message


def test_at_the_floor_the_message_says_the_loop_may_have_wanted_less_and_what_each_fix_costs() -> None:
    learned = learned_target(_spec(), 0.30, (NOW - 2700, 0.30), NOW, p99_ms=52.25, slo_ms=40.0)
    message = learned.condition.message
    assert "at its floor, 0.30 (sloFeedback.minTargetFraction 0.5 of targetSmActive 0.6), for 45 min" in message
    assert "the last p99 is 52.2 ms against the 40 ms SLO" in message
    assert "a p99 over the SLO at low load is one capacity does not fix" in message
    without = learned_target(_spec(), 0.30, (NOW - 2700, 0.30), NOW, p99_ms=None, slo_ms=40.0)
    assert "last p99" not in without.condition.message and without.condition.reason == "HeldAtFloor"


@pytest.mark.parametrize(
    ("fields", "floor"),
    [
        ({}, 0.30),
        ({"sloFeedback": {"minTargetFraction": 0.7}}, 0.42),
        ({"metrics": {"smActiveIdle": 0.2}}, 0.2 + 0.5 * (0.6 - 0.2)),  # half the busy SM above the idle floor
    ],
)
def test_the_floor_is_the_loops_own_in_sm_active_as_read(fields: dict[str, Any], floor: float) -> None:
    assert loop_floor(_spec(**fields)) == pytest.approx(floor)


@pytest.mark.parametrize(
    ("fields", "bounds"),
    [
        ({}, (0.30, 0.60)),
        ({"sloFeedback": {"maxTargetFraction": 1.5}}, (0.30, 0.90)),
        # Busy SM 0.5 above the idle floor 0.2: x 1.5 is 0.75 busy, 0.8 as read.
        ({"metrics": {"smActiveIdle": 0.2}, "sloFeedback": {"maxTargetFraction": 1.5}}, (0.40, 0.80)),
        # The loop's 0.95 cap is busy SM: 0.95 busy is 0.96 as read above an idle floor of 0.2.
        ({"metrics": {"smActiveIdle": 0.2}, "sloFeedback": {"maxTargetFraction": 2.0}}, (0.40, 0.96)),
    ],
)
def test_the_bounds_are_the_loops_own_in_sm_active_as_read(fields: dict[str, Any], bounds: tuple[float, float]) -> None:
    assert loop_bounds_as_read(_spec(**fields)) == pytest.approx(bounds)


def test_a_loop_that_is_off_learns_nothing() -> None:
    spec = _spec(sloFeedback={"enabled": False})
    learned = learned_target(spec, 0.3, (NOW - 2 * HALF_HOUR, 0.3), NOW, p99_ms=None, slo_ms=40.0)
    assert (learned.condition.status, learned.condition.reason, learned.run) == ("False", "SloFeedbackDisabled", None)
    assert "sloFeedback.enabled: false" in learned.condition.message


def test_a_target_that_is_not_a_number_ends_the_run() -> None:
    assert low_run(DECLARED, float("nan"), (NOW - 100, 0.4), NOW) is None


def _obs(now: float, replicas: int = 4, value: float = 0.3) -> Observation:
    pods = [PodState(f"p{i}", ready=True) for i in range(replicas)]
    samples = {p.name: PodSample(value, now - 5) for p in pods}
    return Observation(current_replicas=replicas, pods=pods, metrics=MetricReading(samples=samples), gpus_per_replica=1)


def _run_syncs(spec: AutoscalingSpec, state: ScalerState, seconds: float, slo_ms: float | None = 40.0) -> list[Any]:
    """Syncs every 15 s, state carried, no p99 reading (the loop holds its target where the state has it)."""
    out = []
    t = NOW
    while t <= NOW + seconds:
        d = desired_replicas(spec, state, _obs(t), t, slo_p99_ms=slo_ms)
        state = ScalerState.from_dict(json.loads(json.dumps(d.state.to_dict())))  # as the status carries it
        out.append(d)
        t += 15
    return out


def test_through_the_policy_a_held_low_target_turns_true_after_half_an_hour() -> None:
    decisions = _run_syncs(_spec(), ScalerState(effective_target=0.36), HALF_HOUR + 60)
    statuses = [d.condition(TARGET_LEARNED).status for d in decisions]
    first_true = statuses.index("True")
    assert all(s == "False" for s in statuses[:first_true]) and all(s == "True" for s in statuses[first_true:])
    assert first_true * 15 == HALF_HOUR  # the sync half an hour after the run began
    assert "near 0.36" in decisions[-1].condition(TARGET_LEARNED).message
    assert decisions[-1].state.target_low_run == (NOW, 0.36)


def test_the_declared_target_and_a_pool_without_an_slo_give_no_learned_target() -> None:
    declared = _run_syncs(_spec(), ScalerState(), HALF_HOUR + 60)
    assert {d.condition(TARGET_LEARNED).reason for d in declared} == {"NearDeclaredTarget"}
    no_slo = _run_syncs(_spec(), ScalerState(effective_target=0.36), HALF_HOUR + 60, slo_ms=None)
    assert all(TARGET_LEARNED not in {c.type for c in d.conditions} for d in no_slo)
    assert all(d.state.target_low_run is None for d in no_slo)


def test_the_run_reads_the_target_as_read_where_an_idle_floor_is_declared() -> None:
    """With `metrics.smActiveIdle` the steps work in busy SM; the run and the message are in SM active as
    read, as targetSmActive is written."""
    spec = _spec(metrics={"smActiveIdle": 0.2})
    low = desired_replicas(spec, ScalerState(effective_target=0.3), _obs(NOW), NOW, slo_p99_ms=40.0)
    run = low.state.target_low_run
    assert run is not None and low.effective_target is not None and run[1] == pytest.approx(low.effective_target)
    assert low.effective_target <= 0.8 * DECLARED


def test_the_run_survives_a_state_round_trip_and_a_malformed_one_is_forgotten() -> None:
    state = ScalerState(target_low_run=(NOW - 60, 0.4))
    assert ScalerState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    assert "targetLowRun" not in ScalerState().to_dict()  # absent reads as None, as states written before it
    assert ScalerState.from_dict({"targetLowRun": [NOW, "x"]}) == ScalerState()


@pytest.fixture
def source() -> Iterator[SimulatedSource]:
    src = SimulatedSource()
    use_metric_sources(lambda _spec: src)
    yield src
    use_metric_sources(None)


class _Kube:
    async def list(self, api_version: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        return []


def _pass(status: dict[str, Any], at: datetime) -> tuple[Outcome, int]:
    spec = RankingServiceSpec.model_validate(
        {"model": {"uri": "s3://m/r"}, "autoscaling": {"minReplicas": 1, "maxReplicas": 8, "targetSmActive": DECLARED}}
    )
    body = {"metadata": {"name": "ranker", "namespace": "ads"}, "status": status}
    ctx = PassContext(kube=_Kube(), body=body, now=at, logger=logging.getLogger("t"))  # type: ignore[arg-type]
    outcome = Outcome(draft=StatusDraft.from_status(status, at, 1))
    pods = [{"metadata": {"name": f"ranker-{i}"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
            for i in range(3)]  # fmt: skip
    replicas = asyncio.run(autoscale(ctx, "RankingService", spec, pods, 3, outcome))
    return outcome, replicas


def test_the_pass_sets_the_condition_and_sends_an_event_when_it_turns_true_or_reaches_the_floor(
    source: SimulatedSource,
) -> None:
    at = datetime.fromtimestamp(NOW, UTC)
    for i in range(3):
        source.push("ads", f"ranker-{i}", 0.3, NOW - 5)
    state = ScalerState(effective_target=0.36, target_low_run=(NOW - HALF_HOUR - 15, 0.38)).to_dict()
    first, _ = _pass({"scalerState": state}, at)
    learned = next(c for c in first.draft.conditions if c.type == TARGET_LEARNED)
    assert (str(learned.status), learned.reason) == ("True", "HeldBelowDeclared")
    events = [e for e in first.events if e[1] == TARGET_LEARNED]
    assert len(events) == 1 and events[0][0] == "Normal" and "near 0.36" in events[0][2]
    assert first.draft.fields["autoscaling"]["effectiveTargetSmActive"] == 0.36

    again, _ = _pass(first.draft.to_status(), at)  # the next sync, the condition already True
    assert [e for e in again.events if e[1] == TARGET_LEARNED] == []
    still = next(c for c in again.draft.conditions if c.type == TARGET_LEARNED)
    assert str(still.status) == "True" and still.last_transition_time == learned.last_transition_time

    # The loop then reaches its floor (0.5 x 0.6): the condition stays True with a new reason, and
    # that is a new thing learned, so one more event says it.
    floored = {**again.draft.to_status(), "scalerState": {**state, "effectiveTarget": 0.3}}
    third, _ = _pass(floored, at)
    at_floor = next(c for c in third.draft.conditions if c.type == TARGET_LEARNED)
    assert (str(at_floor.status), at_floor.reason) == ("True", "HeldAtFloor")
    assert [e[2].split(",")[0] for e in third.events if e[1] == TARGET_LEARNED] == [
        "The SLO loop has held the SM target at its floor"
    ]
    fourth, _ = _pass(third.draft.to_status(), at)
    assert [e for e in fourth.events if e[1] == TARGET_LEARNED] == []
