"""The SLO loop (`sloFeedback.controller: band`): a two-sided PI loop on the p99 that sets the SM target. Pure.

`targetSmActive` is a guess: the p99 a given mean SM active gives depends on how bursty the traffic
is. The loop moves the *effective* target so that the pool's p99 rests inside a band below the SLO
(`bandLow`..`bandHigh` x SLO, 0.65-0.8 by default): high enough that capacity is not wasted, low
enough that a ramp has headroom while new pods start. The error is `log(p99 / band edge)` (0
inside the band, so the target holds there once back in it, below); a move is, in log terms,

    log(target) -= proportionalGain * (error - error at the last move) + integralGain * error

the velocity form of a proportional-integral controller, whose proportional term damps a move but
never turns it (no rise while the p99 is above the band, no fall below it). It moves the target up
as readily as down, so capacity cut for a burst is given back once the p99 says there is room. Its output is
clamped to [`minTargetFraction`, `maxTargetFraction`] x targetSmActive; in the velocity form the
clamped output *is* the integral, so nothing winds up beyond the bounds (the anti-windup).

The p99 judges the target only when it could have seen it, so the loop does not move:

- while pods are still starting (Ready < replicas): their capacity is ordered but does not serve,
  and the p99 measures the start-up lag, not the target (the transient the ratchet learned from).
  A pool that grows for half an hour always has a pod starting; cutting there where the serving
  pods run at or below the target bought minutes with GPU-hours that RPS spends better
  (docs/benchmarks.md, "What the down window keeps of a lead"), and so did cutting only on a p99
  over the SLO itself ("The losses by phase") and sizing the sync alone one step lower ("A margin
  while pods start");
- while the pool is overloaded (queued work or saturated SM): the queue signal sizes an overload,
  and a flash crowd says nothing about the headroom a steady load needs;
- for `decreaseIntervalSeconds` (the p99 query's window) after either, and after its own last move.

A move also needs the p99 outside the band for a whole window (`decreaseIntervalSeconds` of
readings on the same side), and it is sized by the reading of that run closest to the band: a
burst shorter than the window is in one window's p99 but not in the next, so one burst moves
nothing, while a p99 that stays off the band moves the target once a window.

**A return into the band moves at once.** The error is 0 in the band, so the first reading back
in it changes the error, and the proportional term takes back its share of the error the p99
left: a cut on a return from below the band, a raise on one from above, with no window to confirm
it. Below the band that share may be of a raise the reach never allowed, so a p99 that climbs
from below into the band cuts the target: a load growing into its headroom, and the cut is early
headroom for what follows. Waiting a window in the band first, as a move out of it does, saved
GPU-hours on batch bursts and cost violation minutes elsewhere; on the shared trace 5 against HPA
on RPS's 4.75 at equal GPU-hours, where the cut has 3 against 3 (docs/benchmarks.md, the bursts
family). On bursts of one size the cut comes back at every burst, since between them no raise is
in reach; remembering no error the reach blocked, or one such cut until the next raise, traded the
same way (docs/benchmarks.md, "A ramp lead on noise, and the loop's cut on a return from below"),
and so did taking nothing back where demand only returns to the hour's earlier peak ("RPS's own
spread, and a return cut only past the earlier peak").

A low p99 is evidence about the SM active the pool ran at, not about any higher target: while the
stabilisation window keeps more replicas than the target asks for, the pool runs well below the
target and its p99 is low for that reason. So an upward move reaches at most `RAISE_REACH` x the
SM active measured at this sync (none without a reading): the target climbs as far as the pool has
shown the p99 holds, one step past it, and the next step waits for the p99 at the new level. A
p99 far above the band counts as at most `MAX_ERROR` per move.

**The ceiling is `targetSmActive`** (`maxTargetFraction` 1, the default): the loop gives back what
it cut, and a p99 below the band at the declared target raises nothing. A p99 read where the pool
runs says how the latency curve looks there, not where its knee is: on a fleet whose curve is low
and flat to 70 % utilisation and steep after it (p99 10 ms idle, 20 ms at 70 %, 35 ms at 80 %, 80 ms
at 90 %), the p99 at the declared target sat far below the band, the loop raised the target to its
ceiling, and the per-second swings of a conversation hour put the pool on the knee. Measured
(`bench/autoscaling_seeds.py --seeds 300:306`, fleets the loop was not tuned on, the flags in
docs/benchmarks.md): with the ceiling at 1.1 x the target that fleet was worse than HPA on RPS at
equal GPU-hours in 9 of 12 conversation cases (56 violation minutes against 39) and 6 of 8 waves;
at 1 in 3 and 3. The fleet whose SM active idles at 0.3 (no `metrics.smActiveIdle` declared) went
from 8 to 3 of 12, and over the three fleets 34 -> 15 of 76 cases; the bench's eight sweeps (234
cases) moved by a case or two either way (worse 20 -> 19, dearer 7 -> 7, 797 -> 792 minutes). A
fleet whose team knows its curve's knee sits well above the declared target may set the fraction
above 1. Where it does, the reach below applies.

The step past is 10 %, not more: it is an extrapolation in SM-active terms, and what a pod can
take beyond it depends on the fleet's SM curve. On a fleet whose SM active idles at 0.3 (0.75 at
full load, `targetSmActive` 0.55), 15 % of SM active is 36 % more work per pod: a pool held at
0.52 by its down window raised the target to 0.60, released to it, and spent 6 minutes of a
conversation hour over the SLO before the loop, frozen by the pod starts of its own scale-ups,
could take it back. Measured (`bench/autoscaling_seeds.py`, that fleet, three families x seeds
100-102 x both modes): worse than HPA on RPS at equal GPU-hours in 9 -> 3 of 18 cases, violation
minutes 46 -> 32. Over eight sweeps of the bench's fleets (234 cases): worse 21 -> 19, dearer than
1.05x RPS at as few minutes 10 -> 8, violation minutes 827 -> 789. Over eleven variants of service
and fleet (198 cases): worse 60 -> 56, dearer 43 -> 46. The minutes are bought with GPU-hours:
`bench/autoscaling_replay.py --quick --seeds 50:60` spends 0.768 / 0.772 -> 0.791 / 0.792 of
static on conversation s73 / s74 in duplicate mode.

**Under the SLO a cut must buy p99.** Above the band and under the SLO, a cut trades GPUs for
headroom. Where the latency curve is flat (a p99 mostly set by work that does not shrink with a
pod's load), each cut costs GPUs and leaves the p99 about where it was, and the loop went on cutting
a window at a time toward its floor (a fleet drawn at random, interruption s7029: 0.64 -> 0.33 of
SM active for a p99 of 60 -> 53 ms under a 63 ms SLO). So the loop keeps its last cut (the target
before it and the p99 it was sized by, `LoopStep.cut`), and a cut under the SLO is made only where
that one lowered the p99 by at least `MIN_CUT_ELASTICITY` x its own size, both in log terms. Over
the SLO the loop cuts whatever a cut bought: it is the safety net. Any other move forgets the cut.
Measured (docs/benchmarks.md, "A cut under the SLO must buy p99"): over the seven sets (1,090
cases) worse than HPA on RPS at equal GPU-hours 98 -> 94 and dearer than it at as few minutes
122 -> 114, at fewer GPU-hours in each of the 56 cases it changes and 2554 -> 2697 violation
minutes; on 600 fleets drawn at random worse 213 -> 197 and dearer 135 -> 130. It is a trade: the
pool sits nearer the SLO where the curve is flat (s7029 above now holds 0.48-0.51 of SM active, with
25 violation minutes where it had 10, at 1.14 of static GPU-hours where it spent 1.39).

The band holds the p99, the stabilisation window holds capacity: while the down window keeps the
peak of the last 15 minutes, a rise of the target changes nothing the pool runs at (and the rise
is capped by the SM active it runs at, above). So a p99 below the band for a whole window on a
quiet pool also *releases* (`SloStep.release`): the down window may keep exp(integralGain x error)
of its peak, the loop's own move on that p99 applied to the capacity it holds (`steps/stabilise.py`),
once per window since the last release, so each step is judged by the p99 of the smaller pool.
Nothing is released while the ramp lead sees demand rising or once demand has climbed back off its
low, nor below what a level reached by a step within the down window needs (`steps/stabilise.py`),
and a release that would turn a scale-up into a scale-down waits until the direction budget has
room for it, the scale-up that may follow and one more scale-down (`steps/hysteresis.py`). A
confirmed room also opens the budget's last change to a scale-down.

No fresh p99: it holds (an unavailable latency is never a low one). A fresh p99 over the SLO
blocks scale-down, and one read while every pod served and the pool was not overloaded holds it
for `scaleDownHoldSeconds` (otherwise the queue sized the capacity, and the down window keeps what
the arrivals need). Scale-up skips its tolerance band while the p99 is above the band (or
above `eagerScaleUpAbove` x SLO, whichever is higher): inside the band the pool is where the loop
wants it. The loop returns the same `SloStep` as the ratchet (`slo.py`), so the later steps do not
know which controller ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.observation import Observation
from gem_operator.autoscaling.slo import SloStep, fresh_p99, says
from gem_operator.autoscaling.state import ScalerState

# A target above this cannot be reached: SM active saturates below 1 (launch gaps, host work).
MAX_TARGET_SM_ACTIVE = 0.95
# An upward move reaches at most this x the SM active the p99 was measured at.
RAISE_REACH = 1.10
# |log(p99 / band edge)| counted per move: 1.5x the edge (a burst's p99 is no measure of headroom).
MAX_ERROR = math.log(1.5)
# A cut under the SLO needs the last one to have lowered the p99 by at least this x its own size (log/log).
MIN_CUT_ELASTICITY = 0.5


def loop_bounds(spec: AutoscalingSpec) -> tuple[float, float]:
    """[floor, ceiling] of the loop's effective target."""
    fb, base = spec.slo_feedback, spec.target_sm_active
    ceiling = max(base, min(MAX_TARGET_SM_ACTIVE, base * fb.max_target_fraction))
    return base * fb.min_target_fraction, ceiling


def loop_target(spec: AutoscalingSpec, state: ScalerState) -> float:
    """The target the loop holds, clamped to the spec's bounds (the spec may have changed since)."""
    floor, ceiling = loop_bounds(spec)
    if state.effective_target is None:
        return spec.target_sm_active
    return min(ceiling, max(floor, state.effective_target))


def band_error(spec: AutoscalingSpec, p99: float, slo_ms: float) -> float:
    """log(p99 / band edge): > 0 above the band, < 0 below it, 0 inside it; at most `MAX_ERROR` either way."""
    fb = spec.slo_feedback
    high, low = fb.band_high * slo_ms, fb.band_low * slo_ms
    if p99 > high:
        return min(MAX_ERROR, math.log(p99 / high))
    if p99 < low:
        return max(-MAX_ERROR, math.log(max(p99, 1e-6) / low))
    return 0.0


@dataclass(frozen=True)
class LoopStep(SloStep):
    """`SloStep` with what the loop carries: the error at its last move, when it moved, since when
    the pool has been quiet (every pod serving, not overloaded)."""

    error: float | None = None
    last_move: float | None = None
    quiet_since: float | None = None
    outside: tuple[float, float] | None = None
    cut: tuple[float, float] | None = None  # the last move, if a cut: (target before it, the p99 it was sized by)

    def remember(self, spec: AutoscalingSpec, state: ScalerState, desired: int, now: float) -> ScalerState:
        """`state` with what the loop carries to the next sync."""
        learned = self.target if state.effective_target is not None or self.target != spec.target_sm_active else None
        return replace(
            state,
            effective_target=learned,
            slo_last_over=self.last_over,
            slo_last_overloaded=self.last_overloaded,
            slo_error=self.error,
            slo_last_move=self.last_move,
            slo_quiet_since=self.quiet_since,
            slo_outside=self.outside,
            slo_last_cut=self.cut,
        )


def why_frozen(spec: AutoscalingSpec, obs: Observation, now: float, quiet_since: float | None) -> str | None:
    """Why the p99 of this sync cannot judge the target (None: it can)."""
    window = spec.slo_feedback.decrease_interval_seconds
    serving = sum(1 for p in obs.pods if p.serving)
    if serving < obs.current_replicas:
        return f"{obs.current_replicas - serving} of {obs.current_replicas} pods still starting"
    if quiet_since is None:
        return "overloaded within the query's window: the queue sizes it"
    if now - quiet_since < window:
        return f"pool settled {now - quiet_since:.0f}s ago, within the p99 window ({window}s)"
    return None


def outside_run(state: ScalerState, error: float, now: float) -> tuple[float, float] | None:
    """The run of readings on this side of the band: (since, the error of least magnitude in it)."""
    if error == 0.0:
        return None
    run = state.slo_outside
    if run is None or (run[1] > 0) != (error > 0):
        return (now, error)
    return (run[0], error if abs(error) < abs(run[1]) else run[1])


def releases(
    spec: AutoscalingSpec, state: ScalerState, run: tuple[float, float] | None, error: float, now: float, window: float
) -> float | None:
    """The share of its peak the down window may keep (see the module docstring), when the p99 has
    been below the band for a whole window since the last release (None: no release). `error`: this
    reading's, which covers the last window; the run's least error may date from before the last
    release."""
    if run is None or run[1] >= 0:
        return None
    since = run[0] if state.slo_last_release is None else max(run[0], state.slo_last_release)
    if now - since < window:
        return None
    return math.exp(spec.slo_feedback.integral_gain * error)


def cut_bought_little(last_cut: tuple[float, float] | None, current: float, p99: float, slo_ms: float) -> str | None:
    """Why a cut the p99 asks for under the SLO is not made: the last cut lowered the p99 by less than
    `MIN_CUT_ELASTICITY` x its own size, in log terms (None: it is made; see the module docstring).
    `last_cut`: (target before it, the p99 it was sized by); `p99`: the reading this cut is sized by."""
    if last_cut is None or p99 > slo_ms:
        return None
    before, was = last_cut
    if before <= current * (1 + 1e-3) or was <= 0:  # the spec's bounds moved the target since, or no p99 was read
        return None
    bought = math.log(was / p99) / math.log(before / current)
    if bought >= MIN_CUT_ELASTICITY:
        return None
    return f"its last cut {before:.3f} -> {current:.3f} took the p99 from {was:.1f} to {p99:.1f} ms"


def slo_loop(
    spec: AutoscalingSpec,
    state: ScalerState,
    obs: Observation,
    slo_ms: float | None,
    now: float,
    *,
    overloaded: bool,
    sm_active: float | None,
) -> LoopStep:
    """Advance the loop by one sync (see the module docstring).

    `overloaded`: the SM reading of this sync saw queued work or saturated pods. `sm_active`: its
    mean over the Ready pods (None: no usable reading, and the target does not rise).
    """
    fb = spec.slo_feedback
    floor, ceiling = loop_bounds(spec)
    current = loop_target(spec, state)
    last_overloaded = now if overloaded else state.slo_last_overloaded
    starting = sum(1 for p in obs.pods if p.serving) < obs.current_replicas
    busy = starting or (last_overloaded is not None and now - last_overloaded < fb.decrease_interval_seconds)
    quiet_since = None if busy else (state.slo_quiet_since if state.slo_quiet_since is not None else now)
    held = LoopStep(
        current,
        False,
        None,
        state.slo_good_since,
        state.slo_last_decrease,
        last_over=state.slo_last_over,
        last_overloaded=last_overloaded,
        error=state.slo_error,
        last_move=state.slo_last_move,
        quiet_since=quiet_since,
        outside=state.slo_outside,
        cut=state.slo_last_cut,
    )
    if not fb.enabled or slo_ms is None or obs.latency is None:
        return held
    last_over = state.slo_last_over
    p99, why = fresh_p99(obs.latency, now, spec.metrics.stale_after_seconds)
    if p99 is None:
        holding = last_over is not None and now - last_over < fb.scale_down_hold_seconds
        return replace(held, reasons=says(why, f"SM target held at {current:.3f}"), hold_down=holding)
    over = p99 > slo_ms
    # The scale-down hold keeps capacity that a steady load needed; while pods start or after an
    # overload the queue sized the capacity, and the down window keeps what the arrivals need.
    last_over = now if over and quiet_since is not None else last_over
    holding = last_over is not None and now - last_over < fb.scale_down_hold_seconds
    eager = p99 > max(fb.eager_scale_up_above, fb.band_high) * slo_ms
    seen = replace(held, over_slo=over, p99_ms=p99, last_over=last_over, hold_down=holding, eager=eager)
    band = f"band {fb.band_low * slo_ms:.0f}-{fb.band_high * slo_ms:.0f} ms"
    head = f"p99 {p99:.1f} ms ({band}, SLO {slo_ms:g} ms)"
    frozen = why_frozen(spec, obs, now, quiet_since)
    if frozen is not None:
        return replace(seen, reasons=says(f"{head}: SM target held at {current:.3f} ({frozen})"), outside=None)
    error_now = band_error(spec, p99, slo_ms)
    run = outside_run(state, error_now, now)
    window = fb.decrease_interval_seconds
    seen = replace(seen, outside=run, release=releases(spec, state, run, error_now, now, window))
    if state.slo_last_move is not None and now - state.slo_last_move < window:
        moved = f"moved {now - state.slo_last_move:.0f}s ago, before the p99 could see it"
        return replace(seen, reasons=says(f"{head}: SM target held at {current:.3f} ({moved})"))
    if run is not None and now - run[0] < window:
        short = f"outside the band for {now - run[0]:.0f}s of the {window}s that confirm it"
        return replace(seen, reasons=says(f"{head}: SM target held at {current:.3f} ({short})"))
    error = 0.0 if run is None else run[1]
    last_error = state.slo_error if state.slo_error is not None else 0.0
    step = -(fb.proportional_gain * (error - last_error) + fb.integral_gain * error)
    # The proportional term damps a move, never turns it: no rise above the band, no fall below it.
    step = min(step, 0.0) if error > 0 else max(step, 0.0) if error < 0 else step
    new = min(ceiling, max(floor, current * math.exp(step)))
    if new > current:
        # Only as far as the pool has shown the p99 holds (see the module docstring).
        reach = current if sm_active is None else max(current, sm_active * RAISE_REACH)
        new = min(new, reach)
    sized_by = fb.band_high * slo_ms * math.exp(error)  # the run's reading the move is sized by
    spent = None if new >= current or error <= 0 else cut_bought_little(state.slo_last_cut, current, sized_by, slo_ms)
    if spent is not None:
        return replace(seen, reasons=says(f"{head}: SM target held at {current:.3f} ({spent})"), error=error)
    if (error == 0.0 and last_error == 0.0) or abs(new - current) < 1e-9:
        where = (
            "in the band"
            if error == 0.0
            else "at its floor"
            if new <= floor
            else "at its ceiling"
            if new >= ceiling
            else f"SM active {sm_active or 0.0:.2f} shows no room above it"
        )
        return replace(seen, reasons=says(f"{head}: SM target {current:.3f} ({where})"), error=error)
    msg = f"{head}: SM target {current:.3f} -> {new:.3f}"
    cut = (current, sized_by) if new < current and error > 0 else None
    return replace(seen, target=new, reasons=says(msg), error=error, last_move=now, outside=None, cut=cut)


__all__ = [
    "MAX_ERROR",
    "MAX_TARGET_SM_ACTIVE",
    "MIN_CUT_ELASTICITY",
    "RAISE_REACH",
    "LoopStep",
    "band_error",
    "cut_bought_little",
    "loop_bounds",
    "loop_target",
    "outside_run",
    "slo_loop",
]
