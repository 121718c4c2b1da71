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

**Steps and falls are levels, not ramps** (`levels.py`): where two levels fit the window's demand
far better than a line, the fit restarts at the second; the steps up it restarts at are kept for an
hour (`RampStep.steps`) for the release (`steps/stabilise.py`).

It acts inside the SM rule's tolerance band too: waiting for the band to be left is what makes a
ramp's replica late. Measured (`bench/autoscaling_seeds.py`): on the one-hour Poisson ramps and
the shared trace the policy without it was worse than HPA on RPS at equal GPU-hours in 5 of 34
cases, by a minute on the early ramp; with it in 2 (and in 2 of 48 on seeds held out, 3 without).
A line through a flat load's noise rises too, and orders this sync's demand without the band;
ordering only on a slope two standard errors above zero traded violation minutes for GPU-hours
(docs/benchmarks.md, "A ramp lead on noise, and the loop's cut on a return from below").

The lead is learned from the pool itself: the time from a scale-up decision until that many pods
serve (Ready with the model loaded), averaged over scale-ups (each new one weighs half). Before the
first is measured it is `rampLead.leadSeconds` (120: pod start plus model load of design §6). The
constants are documented on `api.autoscaling.RampLead`. A lead of a few syncs still leads: on
pods that serve 25-45 s after they are ordered, no lead under 45 s cost violation minutes on the
swells (docs/benchmarks.md, "What the down window keeps of a lead").

**The line is held to its word.** A rising line is a forecast: the demand one lead ahead. Each one
is kept until its time comes and then judged against the demand measured then: the share of the
forecast rise that came true (0 when demand fell instead, at most `MAX_REALISED`, so noise around a
true ramp averages out at 1). The running mean of those shares (`SKILL_WEIGHT` per forecast) is the
line's *skill*, and the lead orders only that share of the rise it projects (all of it until a
forecast has been judged). A sync that judges none gives back part of the shortfall from 1 (half
over each `rampLead.windowSeconds`): the forecasts that fail are those made near a crest, so without
it the next ramp, which starts after a fall with nothing to judge, began on the crest's verdict.
On a real ramp the forecasts come true and the lead is whole. On a load that turns within minutes,
a line through its rising half forecasts a rise that the falling half takes back: every crest
ordered a lead's worth of slope on top of the crest, the down window held it, and the pool spent
more than static peak provisioning. Measured with the sample RankingService (`bench/autoscaling_seeds.py
--family wave`, and a 6-minute wave of +-30 %): the 6-minute wave went from 1.09-1.21 of static
GPU-hours to 1.00-1.09 (HPA on RPS 0.85-0.94), and the wave family's cases worse than RPS at equal
GPU-hours from 13 to 12 of 24. Forecasts are recorded at their full rise whatever the skill, so the
skill recovers as soon as the line is right again; they are dropped unjudged when the history
restarts (an overload or a level shift: the reading then says nothing about the trend).

**No farther ahead than it looks back.** The line is projected at most the span of the samples it
was fitted over (`rampLead.windowSeconds` once the window is full, less after a restart): a slope
read over two minutes says little about the demand seven minutes on, and what it over-orders the
down window holds. On a fleet whose pods serve 7.5 minutes after creation (`bench/autoscaling_seeds.py
--fleet slow-start`), a two-minute fit after an overload was projected 450 s ahead and ordered 49
replicas for a crest that needed 28, and the down window held them: conversation seed 100 spent
0.92 of static GPU-hours with more violation minutes than RPS, 0.76 with the cap (seeds 0-9 and
the real hour: 18 -> 8 of 24 cases over 0.75 of static). A pool whose start-up is longer than the
window leads by the window: raise `rampLead.windowSeconds` to lead farther.

**No farther than the hour's earlier peak.** The highest demand of each minute is remembered for
an hour. While demand reads at or below the highest of the minutes before the fit's window, the line
orders at most for that earlier peak: the load is returning to a level it has reached before, as a
wave does, and a line through a wave's rising half projects past its crest (the last minutes of a
rise bend over; a straight line does not). Demand that passes the earlier peak is a new high, and
the line leads in full. The skill alone did not stop it: between two rising halves nothing is
judged, the skill recovers, and the order near each crest, the largest, is the one the down window
keeps. Measured with the bench's service (`bench/autoscaling_seeds.py --family wave`, and waves of
7-17 minutes): the pool held 26 replicas for an hour through an 11-minute wave whose crests
needed 21 (RPS held 21): 1.08 of static GPU-hours, 0.95 with the rule; the 7-minute wave 1.12 ->
0.98 (the rest is the queue's answer to the first crest's overload).

**The earlier peak is what arrived.** While pods drain a backlog, and in the sync after (the
readings average over the interval the drain ended in), SM active reads the drain as well as what
arrives; the backlog's change says how much arrived (`signals.SmMeasurement.arrivals`). The
earlier peak is read in the minute peaks of that (`RampStep.arrived`): a pool that met a wave's
first crest with 11 replicas where 22 served it remembered 16.4 in SM-active terms from the drain,
where about 13.3 arrived; every later crest read 13.3, under that peak, so the line led in full
and the pool held 27-28 replicas for the hour where HPA on RPS held 23 (`bench/autoscaling_seeds.py
--family wave`, seed 600: 1.077 -> 0.936 of static GPU-hours in independent mode, 1.014 -> 0.931
in duplicate, the same violation minutes). The levels a release keeps (`levels.py`) still read
what the pods served: read as what arrived too, the bursts that came back larger than the first
lost that margin (docs/benchmarks.md, "The earlier peak is what arrived").

**Just past it, no farther than it has gone past.** Demand a little above the earlier peak has
reached a level again more than it has started a new ramp: a wave's next crest reads a few percent
above the first (whose readings the pods starting then held down), and a line fitted over its whole
rising half orders the steep part's slope on top. So past the earlier peak the line leads at most
as far beyond this reading as the reading is beyond that peak (`2 x demand - peak`): a ramp that
goes on past the old level earns its full lead within a lead's worth of rise. Measured
(`bench/autoscaling_seeds.py --family wave`, seed 3): an 8-minute wave whose first crest read
11.99 in SM-active terms read 12.29 at the second, and the line ordered 26 replicas for it where
21 served it at the target; the hour spent 1.02 of static GPU-hours, 0.95 with the rule (HPA on
RPS 0.94), with no violation minute either way (the first crest is held to it too: the hour
began at 10.84, so that crest passed an earlier peak by little). Over the bench's eight sweeps
(234 cases): worse than RPS at equal GPU-hours 23 -> 21, over 1.05x RPS at as few violation
minutes 7 -> 6, over 0.75 of static 53 -> 52, violation minutes 801 -> 802. On seeds held out
(bursts, waves and Poisson hours 100-107, conversation 60-75; 80 cases) worse 13 -> 13,
violation minutes 194 -> 195.

**No whole replica for a sliver on a small pool.** Where one replica is more than `tolerance.up` of
the pool (fewer than ten replicas at the default 0.1), a line that projects a whole count plus less
than `SLIVER_REPLICAS` of a replica orders the whole count: the fit is not that precise, and the
replica it would add is more pool than HPA's own band lets a rise move. On larger pools the sliver
is ordered: there the next replica is a small share and a late one shows as latency. A scale-down
still stops at the line with its sliver (`RampStep.keep`): keeping a replica costs no start.
Measured over the three one-hour families, seeds 100-102 in both modes
(`bench/autoscaling_seeds.py --family F --seeds 100:103 --model throughput_per_replica=2500 --set
autoscaling.minReplicas=1`, a pool of 1-3 replicas): Poisson seed 100 ordered its second replica
at minute 20 for a line at 1.006 replicas, six minutes before HPA on RPS (0.633 of static
GPU-hours against RPS's 0.597; 0.624 with the rule), and 12 of 18 cases spent over 1.05x RPS at
as few violation minutes; 3 with the rule. The same sliver on every pool size cost the bench's
eight sweeps (`docs/benchmarks.md`) 14 violation minutes of 789 and a case worse than RPS; on
small pools only, 7 minutes and none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.levels import PEAK_BUCKET_SECONDS, Step, least_squares, level_shift, second_level
from gem_operator.autoscaling.signals import ceil_

MAX_STEPS = 32
"""Steps remembered at most (an hour of them; a load that steps more often than every two minutes is noise)."""
MIN_SAMPLES = 8
"""A line through fewer syncs (2 minutes at the default 15 s sync) is noise, not a ramp."""
MAX_LEAD_SECONDS = 1800.0
"""A measured start-up above this is a stuck rollout, not the pool's lead."""
PENDING_GIVE_UP_SECONDS = 3600.0
SKILL_WEIGHT = 0.1
"""Weight of the newest judged forecast in the line's skill (about the last ten: two or three minutes of syncs)."""
MAX_REALISED = 2.0
"""A forecast's realised share of its rise counts at most this (symmetric about 1: noise does not bias the skill)."""
PEAK_HISTORY_SECONDS = 3600.0
"""How long the highest demand of each minute is remembered (the earlier peak the lead stops at)."""
SLIVER_REPLICAS = 0.05
"""Where one replica is more than `tolerance.up` of the pool, a line past a whole count by less orders none."""
MAX_FORECASTS = 256
"""Forecasts awaiting their time are kept at most this many (the longest lead, 30 min, at 15 s syncs is 120)."""

Forecast = tuple[float, float, float]
"""(when it comes due, the fitted demand when it was made, the demand it forecast)."""


@dataclass(frozen=True)
class RampStep:
    """The ramp lead's outcome at one sync."""

    recommendation: int | None  # replicas the demand one lead ahead needs (None: no rising fit)
    usage: tuple[tuple[float, float], ...]  # demand samples kept for the next sync
    lead_seconds: float | None  # learned lead (None: nothing measured yet)
    pending: tuple[float, int] | None  # (when, count) of the scale-up being timed
    message: str = ""
    forecasts: tuple[Forecast, ...] = ()  # rising forecasts awaiting their time
    skill: float | None = None  # the line's skill so far (None: no forecast judged yet)
    peaks: tuple[tuple[float, float], ...] = ()  # the highest demand of each minute of the last hour
    keep: int | None = None  # what the line needs, slivers included: a scale-down stops there (no start to pay)
    steps: tuple[Step, ...] = ()  # the steps up read in the last hour (`held_step_level`)
    arrived: tuple[tuple[float, float], ...] = ()  # the highest arrivals of each minute: the earlier peak


def fitted_rise(samples: Sequence[tuple[float, float]], at: float) -> tuple[float, float] | None:
    """(value of the least-squares line at `at`, its slope per second), or None if none can be fitted."""
    if len(samples) < MIN_SAMPLES:
        return None
    line = least_squares(samples)
    if line is None:
        return None
    mt, mu, slope = line
    return mu + slope * (at - mt), slope


def judged_skill(
    forecasts: Sequence[Forecast],
    skill: float | None,
    demand: float,
    now: float,
    *,
    elapsed: float = 0.0,
    half_life: float = 0.0,
) -> tuple[tuple[Forecast, ...], float | None]:
    """Judge the forecasts that came due against `demand` measured now: (those still awaiting, the skill).

    A sync that judges none recovers `elapsed / half_life` half-lives of the skill's shortfall from 1.
    """
    waiting: list[Forecast] = []
    judged = False
    for due, made, forecast in forecasts:
        if due > now:
            waiting.append((due, made, forecast))
            continue
        rise = forecast - made
        if rise <= 0:
            continue
        realised = min(MAX_REALISED, max(0.0, (demand - made) / rise))
        skill = realised if skill is None else (1 - SKILL_WEIGHT) * skill + SKILL_WEIGHT * realised
        judged = True
    if not judged and skill is not None and skill < 1.0 and half_life > 0:
        skill = 1.0 - (1.0 - skill) * 0.5 ** (elapsed / half_life)
    return tuple(waiting[-MAX_FORECASTS:]), skill


def remember_peak(
    peaks: Sequence[tuple[float, float]], usage: float | None, now: float
) -> tuple[tuple[float, float], ...]:
    """(minute, highest demand read in it) for each minute of the last hour, with `usage` read now."""
    kept = [(t, u) for t, u in peaks if t > now - PEAK_HISTORY_SECONDS]
    if usage is None:
        return tuple(kept)
    minute = now - now % PEAK_BUCKET_SECONDS
    if kept and kept[-1][0] == minute:
        kept[-1] = (minute, max(kept[-1][1], usage))
    else:
        kept.append((minute, usage))
    return tuple(kept)


def earlier_peak(peaks: Sequence[tuple[float, float]], before: float) -> float | None:
    """The highest demand of the remembered minutes that ended by `before` (None: none did)."""
    return max((u for t, u in peaks if t + PEAK_BUCKET_SECONDS <= before), default=None)


def _stepped_up(steps: Sequence[Step], now: float, found: Step | None) -> tuple[Step, ...]:
    """The steps of the last hour, with `found` if it is a step up."""
    kept = [s for s in steps if s[0] > now - PEAK_HISTORY_SECONDS]
    if found is not None and found[2] > found[1]:
        kept.append(found)
    return tuple(kept[-MAX_STEPS:])


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
    forecasts: Sequence[Forecast] = (),
    skill: float | None = None,
    peaks: Sequence[tuple[float, float]] = (),
    steps: Sequence[Step] = (),
    arrivals: float | None = None,
    arrived: Sequence[tuple[float, float]] | None = None,
) -> RampStep:
    """Advance the ramp lead by one sync: keep the demand sample, time scale-ups, project the fit.

    `overloaded` (queued work or saturated pods): the readings then show what the pods serve, not
    what arrives, and the queue rule sizes the overload; the history restarts, so a step or a
    flash crowd is not read back as a ramp once the pool has caught up. `forecasts` and `skill`:
    the line's earlier forecasts and its skill so far (see the module docstring). `steps`: the steps
    up read so far; this sync adds one where the fit restarts at a step up (a jump of more than
    `LEVEL_SHIFT`, or two levels, `second_level`). `arrivals`: what arrives while the pods drain a
    backlog (None: `usage`); `arrived`, the minute peaks of what arrived, remembers it, and the
    earlier peak is read there (None: a state from before them, read in `peaks`).
    """
    rl = spec.ramp_lead
    window = float(rl.window_seconds)
    lead, pending = learn_lead(lead_seconds, pending, serving, current, now)
    waiting = tuple(forecasts)
    hour = remember_peak(peaks, usage, now)
    came = remember_peak(peaks if arrived is None else arrived, usage if arrivals is None else arrivals, now)
    if overloaded:
        marked = _stepped_up(steps, now, None)
        return RampStep(None, (), lead, pending, skill=skill, peaks=hour, steps=marked, arrived=came)
    kept = tuple((t, u) for t, u in history if now - window < t < now)
    found: Step | None = None
    if usage is not None and level_shift(kept, usage):
        found = (now, kept[-1][1], usage)
        kept, waiting = (), ()
    if usage is not None:
        kept = (*kept, (now, usage))
        split = second_level(kept)
        if split is not None:
            found = (kept[split[0]][0], split[1], split[2])
            kept, waiting = kept[split[0] :], ()
        elapsed = now - history[-1][0] if history else 0.0
        waiting, skill = judged_skill(waiting, skill, usage, now, elapsed=max(0.0, elapsed), half_life=window)
    marked = _stepped_up(steps, now, found)
    no_lead = RampStep(
        None, kept, lead, pending, forecasts=waiting, skill=skill, peaks=hour, steps=marked, arrived=came
    )
    if not rl.enabled or usage is None:
        return no_lead
    full = rl.lead_seconds if lead is None else lead
    ahead = min(full, kept[-1][0] - kept[0][0])  # never farther ahead than the samples reach back
    fit = fitted_rise(kept, now + ahead)
    if fit is None or fit[1] <= 0:
        return no_lead
    projected, slope = fit
    level = projected - slope * ahead  # the line at this sync
    waiting = (*waiting, (now + ahead, level, projected))[-MAX_FORECASTS:]
    trusted = 1.0 if skill is None else min(1.0, skill)
    lead_to = level + trusted * (projected - level)
    peak = earlier_peak(came, now - window)
    capped = passed = False
    if peak is not None and usage <= peak < lead_to:  # returning to a level it has reached: lead no higher
        lead_to, capped = peak, True
    elif peak is not None and peak < usage and 2 * usage - peak < lead_to:  # just past it: as far again
        lead_to, passed = 2 * usage - peak, True
    exact = lead_to / target
    whole = ceil_(exact)  # what the line needs, sliver included
    small_pool = exact * spec.tolerance.up < 1.0
    want = ceil_(exact - SLIVER_REPLICAS) if small_pool else whole
    learned = "measured" if lead is not None else "rampLead.leadSeconds"
    reach = f"{learned} lead" if ahead >= full else f"the fit's span, short of the {full:.0f}s {learned} lead"
    msg = (
        f"demand rising {slope * 60:.2f}/min in SM-active terms over {len(kept)} syncs: "
        f"{projected:.2f} in {ahead:.0f}s ({reach})"
    )
    if trusted < 1.0:
        msg += f", {trusted:.0%} of that rise (the share of its recent forecasts that came true)"
    if capped:
        msg += f", no farther than the hour's earlier peak {lead_to:.2f} (demand has been there before),"
    if passed:
        msg += (
            f", {lead_to:.2f}: no farther past the hour's earlier peak {peak:.2f} than demand has passed it "
            "(a level reached again is not yet a new ramp),"
        )
    if want < whole:
        msg += (
            f"{'' if capped or passed else ','} {exact:.3f} replicas (a sliver of under {SLIVER_REPLICAS:g} of a "
            f"replica past {want} orders none where one replica is more than tolerance.up={spec.tolerance.up:g} "
            "of the pool),"
        )
    msg += f" needs {want} replicas"
    return RampStep(want, kept, lead, pending, msg, waiting, skill, hour, whole, marked, came)


def without_ramp_lead(spec: AutoscalingSpec) -> AutoscalingSpec:
    """`spec` with the ramp lead off: HPA's algorithm as HPA runs it, for the baselines that stand for HPA."""
    return spec.model_copy(update={"ramp_lead": spec.ramp_lead.model_copy(update={"enabled": False})})


__all__ = [
    "MAX_REALISED",
    "MAX_STEPS",
    "MIN_SAMPLES",
    "PEAK_HISTORY_SECONDS",
    "SKILL_WEIGHT",
    "SLIVER_REPLICAS",
    "Forecast",
    "RampStep",
    "earlier_peak",
    "fitted_rise",
    "judged_skill",
    "learn_lead",
    "ramp_step",
    "remember_peak",
    "without_ramp_lead",
]
