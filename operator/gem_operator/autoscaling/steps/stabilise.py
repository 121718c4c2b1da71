"""Step 4, stabilisation (HPA semantics): the count moves only as far as the windows agree. Pure.

Every recommendation is recorded; the result may rise only to the *lowest* recommendation of the
up window (`stabilizationSeconds.up`) and fall only to the *highest* of the down window. A hold
records nothing and keeps the count; idle and yielding precompute pools skip the windows.

**A new pool** (no recommendation in the last hour) records its current count first, as HPA seeds
its scale-down window when it first sees an autoscaler: the pool was sized by someone (the spec,
the last operator, an earlier phase) and one sync's reading is no evidence that it is too big. It
then scales down only once a whole down window agrees. Without it, a pool's first sync after a
quiet start scaled it down and the next reading scaled it back up: a pod start for nothing, and a
direction change the hour's budget then lacked (on the one-hour conversation trace replayed in
duplicate mode the pool was then held at its crest for the last 20 minutes).

**Release** (`release`, from the SLO loop): the down window keeps the peak of the last 15 minutes
against a burst that returns, but a p99 below the loop's band for a whole window on a quiet pool
says the pool has room now. Then the window may keep only `release` x its peak (the loop's
integral move on that p99: a p99 far below the band gives back more), never less than the peak
of the ramp lead's window (`rampLead.windowSeconds`: demand that returns within it is what the
ramp lead reads, and capacity given back takes a pod start to return) nor the recommendation. The
window's older recommendations are cut to what it keeps, so the next sync does not restore them;
the next release waits until the p99 has seen the smaller pool for a whole window. What it
keeps is rounded up, so a pool gives nothing back while `release` x its peak is within a replica
of the peak (13 replicas at a p99 of 20 ms against a 26 ms band edge): a brake on small pools and
near the band. Measured and not kept: a release of at least one replica, and one rounded to the
nearest, each cost the conversation hours violation minutes (docs/benchmarks.md, the decline
family). The
decision's stabilisation clause says what the release gave back and, where one of the levels
below held it, what that level needs: a quiet pool that keeps its replicas is the first thing a
platform engineer asks `kubectl describe` about.

**A level a step reached is kept** (`stepped_floor`): a release never goes below what the highest
level reached by a step needs at the effective target while the down window holds a minute of that
level. Two readings find such levels. A minute whose peak demand is `levels.STEP_JUMP` above the
minute before it (`levels.stepped_level`) is kept while that minute is inside the window. A step up
the ramp lead restarted its fit at (a jump, or two levels, read at sync resolution and carried in
`ScalerState.demand_steps`) is kept until the window has passed the level's *last* minute
(`levels.held_step_level`), as HPA's window keeps a peak for its length after the last reading at
it. A load that steps (a batch job that starts and stops) comes back as a step, faster than a pod
starts, and what the release gave back meets it with a pod start; a load that swells back is what
the ramp lead reads in time. HPA's own window keeps such a level too: the release only gives back
early what a swell held. Measured (`bench/autoscaling_seeds.py --family bursts --seeds 0:8`, 16
cases, with the ramp lead's two-sync step): worse than HPA on RPS at equal GPU-hours in 10 -> 7
cases, violation minutes 66 -> 47 (seeds 100-107, held out: 13 -> 7, 73 -> 45); over the bench's
eight sweeps (234 cases) 20 -> 23 worse, each by a minute or less against RPS's interpolated
minutes (the shared trace's steps and a flash crowd's level are held for their down window, as
RPS holds them), the same 801 minutes. Keeping the ramp lead's steps to their last minute: over
80 bursts cases (seeds 0-7 and 100-107, the slow-start and single-server fleets, the sample
service) worse than RPS 17 -> 11, dearer 24 -> 27, violation minutes 303 -> 280; the eight sweeps
unchanged (docs/benchmarks.md).

**So is a burst's level, to its last minute** (`levels.burst_level`): a minute-peak step up that
demand left again within the ramp lead's window (`rampLead.windowSeconds`) is kept until the down
window has passed the burst's last minute, as HPA's window keeps it. A burst that overloads the
pool restarts the ramp lead's history, so the lead marks no step, and the minute-peak step alone
kept the level only from its first minute: the release gave back a 2-5 minute burst's replicas
minutes before HPA's window would, and the next burst met them. A level the load has not left is
no burst: keeping every minute-peak step to its last minute held a conversation hour's noisy
minute as a level (docs/benchmarks.md, the bursts family). Measured (`bench/autoscaling_seeds.py`,
2026-12-06): the held-out sweeps (304 cases) worse than HPA on RPS at equal GPU-hours 28 -> 25
(bursts s100-107, on the single-server and slow-start fleets), violation minutes 716 -> 709;
bursts at seeds 800-803 3 -> 1, 32 -> 26 minutes; the bench's eight sweeps with the bursts family
(250) the same counts and minutes, the flash hours 0.003-0.004 of static GPU-hours dearer (a flash
crowd is a burst too). On the four unseen fleets (64) worse 18 -> 17 but dearer at as few violation
minutes 13 -> 15.

**So is a level the load fell from at once** (`levels.interrupted_level`): where demand held a level
for a whole down window and the peaks of the next two minutes are both more than `levels.STEP_JUMP`
below it, the release keeps what that level needs until the window has passed the fall. A load
that has held a level that long and leaves it within a minute has been interrupted (an upstream
caller paused, a client fleet rolled back, a region drained for a deploy) more often than it has
moved, and what left comes back as a step; HPA's window holds the level that long too, while a
release meets the return with a pod start. A level held for less (a burst, a swell), a fall over
minutes and one low minute (a dip in the readings) release as before. Measured
(`bench/autoscaling_seeds.py --family interruption`, seeds 0-7 and 100-107, the fast-start and
slow-start fleets and the sample service; 80 cases): worse than HPA on RPS at equal GPU-hours
21 -> 8, violation minutes 242 -> 193 (RPS 174), over 1.05x RPS's GPU-hours at as few violation
minutes 6 -> 11 (a level held for a load that stayed down); the bench's eight sweeps (234 cases)
and the held-out sweeps (80) the same, line for line (docs/benchmarks.md). A fall the readings'
rate window shows in part in one minute is one fall (`levels.fall_read_in_part`), and a level held
since the first minute the pool remembers counts as held, as a new pool's first count is kept:
at seeds 500-503 (8 cases) worse 4 -> 0, violation minutes 17 -> 6 (RPS 6); the 80 cases above
worse 7 -> 3, 192 -> 170 minutes (RPS at equal GPU-hours 174.0 -> 179.1), dearer 11 -> 11.

**A release holds once demand has climbed back off its low** (`climbed_back`): the p99 below the
band says the pool has room *now*; where the newest minute's mean demand in the ramp lead's window
is more than `tolerance.up` above its lowest earlier minute (`levels.climb_off_low`), the load has
turned, and what a release gives back the climb wants again a pod start later. The ramp lead holds
a release while its line rises, but a line through a fall and the first minutes of a climb still
falls: conversation s42 / duplicate released 31 -> 18 replicas one a minute over minutes 25-35
while demand was already up 12 % and more off its low, and met a 50 % rebound with 18 (3 violation
minutes where HPA on RPS, holding its window's 30, had 1). With the rule it holds 20 from minute 34:
2 minutes, 0.760 -> 0.772 of static GPU-hours. Minute means, not readings, so a reading's swing is
no climb. Measured (`python bench/autoscaling_sweeps.py --out DIR`, `--compare`, 922 cases): 53
change, none with more violation minutes (3 fewer), 50 spend more (0.003 of static on the median
case, 0.018 at most); worse than HPA on RPS at equal GPU-hours 72 -> 70, over 1.05x RPS's GPU-hours
at as few minutes 96 -> 97 (wave s101 / duplicate, 0.863 -> 0.881 of static: a wave's trough is a
low too). The decision's stabilisation clause says so where it holds the pool above the
recommendation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gem_operator.api.autoscaling import AutoscalingSpec
from gem_operator.autoscaling.decision import Reason
from gem_operator.autoscaling.levels import (
    burst_level,
    climb_off_low,
    held_step_level,
    interrupted_level,
    stepped_level,
)
from gem_operator.autoscaling.signals import ceil_
from gem_operator.autoscaling.steps.observe import Observed
from gem_operator.autoscaling.steps.recommend import Recommendation
from gem_operator.autoscaling.trend import RampStep


@dataclass(frozen=True)
class Stabilised:
    replicas: int
    recommendations: tuple[tuple[float, int], ...]  # the history to carry
    reasons: tuple[Reason, ...] = ()
    released: bool = False  # the down window gave capacity back on the p99's word


def stepped_floor(spec: AutoscalingSpec, ramp: RampStep, target: float, now: float) -> int | None:
    """The replicas a release keeps, at `target`, for the highest level a step reached that the
    down window still holds a minute of, or that demand fell from at once inside it (None: none).
    `ramp`: the ramp lead's minute peaks of demand and the steps it read."""
    window = spec.stabilization_seconds.down
    since = now - window
    found = (
        stepped_level(ramp.peaks, since),
        held_step_level(ramp.peaks, ramp.steps, since),
        interrupted_level(ramp.peaks, since, window),
        burst_level(ramp.peaks, since, spec.ramp_lead.window_seconds),
    )
    levels = [level for level in found if level is not None]
    return ceil_(max(levels) / target) if levels else None


def climbed_back(spec: AutoscalingSpec, demand: Sequence[tuple[float, float]]) -> str | None:
    """Why a release the p99 allows is held: demand, in the ramp lead's window (`demand`), has
    climbed more than `tolerance.up` off its lowest minute (None: it has not; see the module
    docstring)."""
    climb = climb_off_low(demand)
    if climb is None or climb <= 1 + spec.tolerance.up:
        return None
    return f"demand has climbed {climb - 1:.0%} off its lowest minute of the last {len(demand)} syncs: the fall is over"


def stabilise(
    spec: AutoscalingSpec,
    seen: Observed,
    rec: Recommendation,
    now: float,
    release: float | None = None,
    stepped: int | None = None,
    release_held: str | None = None,
) -> Stabilised:
    """The count the stabilisation windows allow for `rec`, and the history with it recorded.

    `release`: the share of the down window's peak the p99 allows it to keep (None: all of it).
    `stepped`: what a release keeps at least (`stepped_floor`). `release_held`: why a release the
    p99 allowed was held (`climbed_back`), said where the window then keeps more than `rec`.
    """
    if rec.replicas is None:
        return Stabilised(seen.current, seen.recommendations)
    if rec.at_once:
        return Stabilised(rec.replicas, seen.recommendations)
    want = rec.replicas
    # No recommendation in the last hour (a new pool): the current count is the first, as HPA seeds
    # its scale-down window, so one reading cannot shrink the pool it was sized for.
    seed = () if seen.recommendations else ((now, seen.current),)
    recs = (*seen.recommendations, *seed, (now, want if rec.steady is None else rec.steady))
    up_rec = min([n for t, n in recs if t > now - spec.stabilization_seconds.up] + [want])
    down_rec = max([n for t, n in recs if t > now - spec.stabilization_seconds.down] + [want])
    released, why = False, ""
    if release is not None and down_rec > want:
        recent = max(n for t, n in recs if t > now - spec.ramp_lead.window_seconds)
        by_p99 = max(recent, ceil_(down_rec * release))
        kept = max(by_p99, stepped or 0)
        floored = stepped is not None and stepped > by_p99 and by_p99 < down_rec
        if kept < down_rec:
            why = f" (the p99 below the band released the down window's peak of {down_rec}"
            down_rec = kept
            recs = tuple((t, min(n, kept)) for t, n in recs)
            released = True
        elif floored:
            why = f" (the p99 below the band would release the down window's peak of {down_rec} to {by_p99}"
        if why:
            why += f"; a level demand stepped to or fell from needs {stepped})" if floored else ")"
    elif release_held is not None and down_rec > want:
        why = f" (the p99 below the band would release the down window's peak of {down_rec}, but {release_held})"
    out = min(max(seen.current, up_rec), down_rec)
    if out == want:
        return Stabilised(out, recs, released=released)
    text = f"stabilised to {out}{why}"
    return Stabilised(out, recs, (Reason("stabilisation", "Stabilised", text),), released)
