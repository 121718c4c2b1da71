"""The scaling decision: HPA's algorithm plus what a GPU fleet needs. Pure: no I/O, no clock.

`desired_replicas(spec, state, observation, now, slo_p99_ms=...)` is called once per sync (15 s
by default) by the controller and, with simulated time, by the replay (and so by every driver of
either). It runs the pipeline of `pipeline.py`: each step below is a small pure function in
`steps/` (or the module named), and the `Decision` (`decision.py`) carries every step's reasons
and limits as typed values, which the controller's events, status and metrics read directly.
Where an idle pod reads above zero (`metrics.smActiveIdle`, `idle.py`), every step works in busy SM,
(SM active - idle) / (1 - idle), the target taken the same way; the decision reports SM active as
read. Steps, in order:

0. **SLO feedback** (`spec.autoscaling.sloFeedback`): the SM target used below is an *effective*
   target that follows the observed p99 (`Observation.latency`) against `spec.slo.p99LatencyMs`.
   The default controller (`band`, `steps/slo_loop.py`) is a two-sided proportional-integral loop
   on log(p99 / band edge) that keeps the p99 inside `bandLow`..`bandHigh` (0.65-0.8) x SLO,
   between `minTargetFraction` (0.5) and `maxTargetFraction` (1) x `targetSmActive`: at most
   one move per `decreaseIntervalSeconds` (60 s), only on a p99 outside the band for a whole such
   window of a quiet pool (no pod starting, not overloaded, for a window), and a rise reaches at
   most 1.10x the SM active the p99 was read at. The earlier controller (`ratchet`, `slo.py`)
   drops 10 % while p99 > 0.7 x SLO and creeps back 5 % per 600 s. Either lives in `ScalerState`;
   without a latency reading it holds (a fresh state: exactly `targetSmActive`). While a fresh
   p99 is over the SLO the pool does not scale down; scale-up ignores the up tolerance band while
   the p99 is above `eagerScaleUpAbove` (band: and above the band).
1. **Signal.** Only pods that are Ready *and* have finished loading the model count. Their
   fresh SM-active samples (younger than `metrics.staleAfterSeconds`) give the ratio
   `metric / target`. Inside the tolerance band (per direction) nothing changes. Above it,
   `ceil(sum(samples) / target)` (pods still loading count as zero usage, so capacity on its
   way is not ordered twice; the recommendation never falls below the current count). Below
   it, Ready pods without a fresh sample count as exactly on target and pods still loading are
   kept, so only pods that are measurably idle are removed. A saturated reading (every Ready
   pod reporting, mean >= `SATURATED_SM_ACTIVE` = 0.9 > target) only bounds demand from below, so the
   recommendation is then at least twice the Ready pods (pods still loading count toward it,
   so this doubles once per start-up wave, not every sync). With a queue reading, its growth adds
   to the arrivals (sized at the target) and emptying it within `drainSeconds` is sized with the
   pods working flat out (`SATURATED_SM_ACTIVE`), for the queue as it will be a `drainSeconds` on
   when it lasted since the last sync: the recommendation is the larger of the two.
   While a queued backlog shrinks, the
   pods serve more than arrives and SM active reads the drain: a scale-up is then sized by the
   arrivals alone, since replicas ordered now start after the drain is over. The arrivals are
   what the pods served since the last sync plus the backlog's growth; where pods turned Ready
   in between, the pool served that interval at the mean of the two counts
   (`signals.served_share`).
   **Ramp lead** (`trend.py`, `spec.autoscaling.rampLead`, on by default): a least-squares line
   through the demand of the last 300 s of syncs (SM usage with the queue's excess); while it
   rises, the recommendation is at least what its value one *lead* ahead needs at the effective
   target, the lead being the measured time from a scale-up decision until that many pods serve
   (120 s until measured). Only ever higher than the SM rule's; inside its tolerance band too
   (waiting for the band is what makes a ramp's replica late); the history restarts while the
   pool is overloaded, when demand jumps by more than half between two syncs, and when two levels
   fit the window's demand far better than a line (a step, read whole or in part by up to two
   syncs before it), so a step is not read as a ramp. While demand is no higher than the highest
   it read in the last hour before the fit's window, the line orders no farther than that earlier
   peak (a wave returns to its crest; a line through its rising half projects past it). Where
   one replica is more than `tolerance.up` of the pool, a line past a whole count by under 0.05
   of a replica orders no replica for it. Recorded in the stabilisation history like any recommendation.
2. **Hold.** No usable signal (source error, no sample, every sample stale, no Ready pod) ⇒
   keep the current count (bounds still apply) and report `MetricsUnavailable`. Never a
   scale-down on missing data.
3. **Precompute** (`PrecomputeAutoscalingSpec`): the recommendation is the max of the SM
   signal, `ceil(backlog / backlogTargetPerReplica)` and a deadline signal (the oldest queued
   item should wait at most half of `deadlineSeconds`: `ceil(ready * age / (deadline / 2))`).
   An empty backlog for `idleSecondsBeforeZero` scales to `minReplicas` (zero allowed); before
   that at least one replica stays. A backlog brings the pool back from zero. While the linked
   RankingService is over its SLO the pool yields: it halves toward `minReplicas` every sync,
   skipping the down-stabilisation window, and never scales up.
4. **Stabilisation** (HPA semantics): every recommendation is recorded; the result may rise
   only to the *lowest* recommendation of the up window and fall only to the *highest* of the
   down window, and a new pool's current count is its first entry (as HPA seeds it). Around a
   backlog (queue signal) the history records what the arrivals need
   (`signals.Signal.steady`), not the capacity ordered to drain the backlog or already on its way,
   so a one-off flash crowd is not paid for over the whole down window. **Release** (SLO loop):
   while the p99 rests below the loop's band for a whole window on a quiet pool, the down window
   keeps only exp(integralGain x error) of its peak, once per window and not while the ramp lead
   sees demand rising (`steps/stabilise.py`), nor below what the highest level a step reached
   needs while the down window holds a minute of it (a minute whose peak demand is 30 % above
   the minute before's, while that minute is inside the window; a step up the ramp lead
   restarted its fit at, until the window has passed the level's last minute), nor below what a
   level held for a whole down window (or since the first minute remembered) needs while the
   window holds the minute demand fell from it at once, or with one minute read in part (an
   interruption): a load that steps returns as a step, faster than a pod starts.
5. **Rate policies:** per direction the most permissive listed policy applies, each measured
   against the replicas at the start of its period (recorded scale events).
6. **Free GPUs:** scale-up is capped at `current + free_gpus // gpusPerReplica` (minus pods
   still waiting for a node).
   **Panic** (`panic.py`, `spec.autoscaling.panic`, off by default): when the short window's
   recommendation is >= 2x the Ready pods it is applied at once (no up window, no rate policy).
   **No scale-down** while panicking or while a fresh p99 is over the SLO, nor for
   `sloFeedback.scaleDownHoldSeconds` (300 s) after the last over-SLO p99: hysteresis, so the
   capacity a burst needed is not handed back just before the next one (`ScalingLimited`
   reasons `Panic` / `LatencyOverSlo`). **Direction budget** (`steps/hysteresis.py`,
   `spec.autoscaling.hysteresis`): a scale-down reversing a scale-up waits while the last hour
   holds `maxDirectionChangesPerHour - 2` (2) direction changes, or `- 1` (3) when the p99 shows
   room below the SLO loop's band, so no hour holds more than 4 (`DirectionChangeBudget`),
   and one giving back fewer than min(2, tolerance.down x replicas) replicas always waits;
   scale-up is never held. No scale-down goes below what the ramp lead's rising line needs one
   lead ahead (`RampLead`): its next order would take the scale-down back.
7. **Bounds:** `minReplicas..maxReplicas`. A RankingService keeps its last replica (SM active
   cannot see demand at zero replicas; `minReplicas: 0` only lets HPA/KEDA take it to zero
   through the scale subresource).

**TargetLearned** (`learned.py`, a pool with an SLO): once the SLO loop has held the SM target at
or below 0.8 x `targetSmActive` for half an hour, the condition turns True and names the target to
declare: the p99 needs less SM active than declared, and every new pool learns it again. Held at
the loop's floor (`minTargetFraction`), its reason is `HeldAtFloor`: the p99 may need less than the
loop may go to, and declaring the floor is no cure.

The state carried between calls (`ScalerState`) is an immutable value with `to_dict` /
`from_dict`, so the controller may keep it in memory or in status.

Where each step lives: observation `steps/observe.py`; signals `steps/measure.py` (steps 0, 1 and
the panic window; the SM reading is measured once per sync and sized once, at the effective
target); hold and precompute (2, 3) `steps/recommend.py`; stabilisation (4) `steps/stabilise.py`;
panic, rate policies, the scale-down hold, free GPUs and bounds (5-7) `steps/limits.py`; the
direction budget `steps/hysteresis.py`; the decision and the carried state `pipeline.py`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.api.common import Condition, set_condition
from gem_operator.autoscaling.decision import (
    METRICS_UNAVAILABLE,
    SCALING_ACTIVE,
    SCALING_LIMITED,
    ConditionValue,
    Decision,
    Direction,
    Limit,
    Reason,
)
from gem_operator.autoscaling.learned import TARGET_LEARNED, learned_target
from gem_operator.autoscaling.observation import (
    MODEL_LOADED_CONDITION,
    LatencyReading,
    MetricReading,
    Observation,
    PodSample,
    PodState,
    PrecomputeSignals,
    pod_states,
)
from gem_operator.autoscaling.pipeline import decide
from gem_operator.autoscaling.signals import SATURATED_SM_ACTIVE
from gem_operator.autoscaling.state import ScalerState


def desired_replicas(
    spec: AutoscalingSpec,
    state: ScalerState,
    observation: Observation,
    now: float,
    *,
    saturation: float | None = SATURATED_SM_ACTIVE,
    slo_p99_ms: float | None = None,
) -> Decision:
    """One sync of the autoscaler. Pure: the same inputs give the same Decision (and new state).

    `saturation`: mean SM active at which pods count as saturated (None: the plain HPA ratio).
    `slo_p99_ms`: the service's `spec.slo.p99LatencyMs`; with `observation.latency` it drives the
    SLO feedback (`slo.py`). Either missing: the effective target stays where the state has it
    (`targetSmActive` for a fresh state) and nothing else changes.

    This is the one entry point every driver calls: the operator's controller, `gemop replay`,
    `gemop demo` (through the operator) and the closed-loop load test. Keep its signature.
    """
    decision = decide(spec, state, observation, now, saturation=saturation, slo_ms=slo_p99_ms)
    if slo_p99_ms is None:  # no SLO (a precompute pool): no loop to have learned anything
        return decision
    target = spec.target_sm_active if decision.effective_target is None else decision.effective_target
    run = decision.state.target_low_run
    learned = learned_target(spec, target, run, now, p99_ms=decision.p99_ms, slo_ms=slo_p99_ms)
    return replace(decision, learned=learned.condition, state=replace(decision.state, target_low_run=learned.run))


def apply_conditions(
    conditions: list[Condition], decision: Decision, now: datetime, observed_generation: int | None = None
) -> list[Condition]:
    """Merge the decision's ScalingActive/ScalingLimited/MetricsUnavailable into status conditions.

    lastTransitionTime only moves when a condition's status flips (see `set_condition`).
    """
    out = conditions
    for c in decision.conditions:
        out = set_condition(
            out,
            type=c.type,
            status=c.status,
            reason=c.reason,
            message=c.message,
            now=now,
            observed_generation=observed_generation,
        )
    return out


__all__ = [
    "METRICS_UNAVAILABLE",
    "MODEL_LOADED_CONDITION",
    "SATURATED_SM_ACTIVE",
    "SCALING_ACTIVE",
    "SCALING_LIMITED",
    "TARGET_LEARNED",
    "ConditionValue",
    "Decision",
    "Direction",
    "LatencyReading",
    "Limit",
    "MetricReading",
    "Observation",
    "PodSample",
    "PodState",
    "PrecomputeSignals",
    "Reason",
    "ScalerState",
    "apply_conditions",
    "desired_replicas",
    "pod_states",
]
