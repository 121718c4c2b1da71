"""Ramp lead: order for the load the new replicas will meet, not the load of this sync. Pure.

A replica ordered now serves only after its pod start and model load (minutes). On a rising load
a reactive rule orders what the pods need *now*, so the replica arrives when the load has moved
on, and the gap shows as latency on every ramp: at a few replicas, one pod start of growth is
most of a replica. So the policy fits a line (least squares) to the pool's demand over the last
`rampLead.windowSeconds` of syncs (the SM usage of the Ready pods, with the queue's excess: the
same demand the SM rule sizes) and, while that line rises, recommends what its value one *lead*
ahead needs at the effective target. A fit over minutes, not the last reading, so one burst does
not read as a ramp; a falling or flat line adds nothing, so this only ever scales up earlier.
While the pool is overloaded (queued work, saturated pods) the readings show what the pods serve,
not what arrives, and the queue rule sizes the overload: the history restarts, so a step or a
flash crowd is not read back as a ramp once the pool has caught up (a line through a step
extrapolates it as a slope and over-orders for the whole down window). So does a jump of more
than half the demand between two syncs (`LEVEL_SHIFT`): a pool with headroom absorbs a flash crowd
without queueing, and the jump is a new level, not a ramp.

It acts inside the SM rule's tolerance band too: waiting for the band to be left is what makes a
ramp's replica late. Measured (`bench/autoscaling_seeds.py`): on the one-hour Poisson ramps and
the shared trace the policy without it was worse than HPA on RPS at equal GPU-hours in 5 of 34
cases, by a minute on the early ramp; with it in 2 (and in 2 of 48 on seeds held out, 3 without).

The lead is learned from the pool itself: the time from a scale-up decision until that many pods
serve (Ready with the model loaded), averaged over scale-ups (each new one weighs half). Before the
first is measured it is `rampLead.leadSeconds` (120: pod start plus model load of design §6). The
constants are documented on `api.autoscaling.RampLead`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.signals import ceil_

LEVEL_SHIFT = 0.5
"""A change of more than half the demand between two syncs starts a new level (the fit restarts)."""
MIN_SAMPLES = 8
"""A line through fewer syncs (2 minutes at the default 15 s sync) is noise, not a ramp."""
MAX_LEAD_SECONDS = 1800.0
"""A measured start-up above this is a stuck rollout, not the pool's lead."""
PENDING_GIVE_UP_SECONDS = 3600.0


@dataclass(frozen=True)
class RampStep:
    """The ramp lead's outcome at one sync."""

    recommendation: int | None  # replicas the demand one lead ahead needs (None: no rising fit)
    usage: tuple[tuple[float, float], ...]  # demand samples kept for the next sync
    lead_seconds: float | None  # learned lead (None: nothing measured yet)
    pending: tuple[float, int] | None  # (when, count) of the scale-up being timed
    message: str = ""


def fitted_rise(samples: Sequence[tuple[float, float]], at: float) -> tuple[float, float] | None:
    """(value of the least-squares line at `at`, its slope per second), or None if none can be fitted."""
    if len(samples) < MIN_SAMPLES:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mu = sum(u for _, u in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var <= 0:
        return None
    slope = sum((t - mt) * (u - mu) for t, u in samples) / var
    return mu + slope * (at - mt), slope


def level_shift(samples: Sequence[tuple[float, float]], usage: float) -> bool:
    """True when demand moves by more than LEVEL_SHIFT of itself since the last sync: a new level
    (a flash crowd's start or end, a step), not a ramp's next step. A ramp moves a few percent per
    sync; a line through a jump the pool absorbs without queueing would project it onward."""
    if not samples:
        return False
    last = samples[-1][1]
    return abs(usage - last) > LEVEL_SHIFT * max(usage, last)


def learn_lead(
    state_lead: float | None,
    pending: tuple[float, int] | None,
    serving: int,
    current: int,
    now: float,
) -> tuple[float | None, tuple[float, int] | None]:
    """Close the timing of a pending scale-up once that many pods serve; drop it if it cannot finish."""
    if pending is None:
        return state_lead, None
    since, count = pending
    if serving >= count:
        sample = min(MAX_LEAD_SECONDS, max(0.0, now - since))
        return (sample if state_lead is None else 0.5 * state_lead + 0.5 * sample), None
    if current < count or now - since > PENDING_GIVE_UP_SECONDS:
        return state_lead, None  # scaled back down before it served, or a rollout that never came up
    return state_lead, pending


def ramp_step(
    spec: AutoscalingSpec,
    history: Sequence[tuple[float, float]],
    usage: float | None,
    target: float,
    now: float,
    *,
    lead_seconds: float | None,
    pending: tuple[float, int] | None,
    serving: int,
    current: int,
    overloaded: bool = False,
) -> RampStep:
    """Advance the ramp lead by one sync: keep the demand sample, time scale-ups, project the fit.

    `overloaded` (queued work or saturated pods): the readings then show what the pods serve, not
    what arrives, and the queue rule sizes the overload; the history restarts, so a step or a
    flash crowd is not read back as a ramp once the pool has caught up.
    """
    rl = spec.ramp_lead
    window = float(rl.window_seconds)
    lead, pending = learn_lead(lead_seconds, pending, serving, current, now)
    if overloaded:
        return RampStep(None, (), lead, pending)
    kept = tuple((t, u) for t, u in history if now - window < t < now)
    if usage is not None and level_shift(kept, usage):
        kept = ()
    if usage is not None:
        kept = (*kept, (now, usage))
    if not rl.enabled or usage is None:
        return RampStep(None, kept, lead, pending)
    ahead = rl.lead_seconds if lead is None else lead
    fit = fitted_rise(kept, now + ahead)
    if fit is None or fit[1] <= 0:
        return RampStep(None, kept, lead, pending)
    projected, slope = fit
    want = ceil_(projected / target)
    learned = "measured" if lead is not None else "rampLead.leadSeconds"
    msg = (
        f"demand rising {slope * 60:.2f}/min in SM-active terms over {len(kept)} syncs: "
        f"{projected:.2f} in {ahead:.0f}s ({learned} lead) needs {want} replicas"
    )
    return RampStep(want, kept, lead, pending, msg)


def without_ramp_lead(spec: AutoscalingSpec) -> AutoscalingSpec:
    """`spec` with the ramp lead off: HPA's algorithm as HPA runs it, for the baselines that stand for HPA."""
    return spec.model_copy(update={"ramp_lead": spec.ramp_lead.model_copy(update={"enabled": False})})


__all__ = [
    "LEVEL_SHIFT",
    "MIN_SAMPLES",
    "RampStep",
    "fitted_rise",
    "learn_lead",
    "level_shift",
    "ramp_step",
    "without_ramp_lead",
]
