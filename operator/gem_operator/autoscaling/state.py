"""The autoscaler's memory between syncs (`ScalerState`): a plain value with `to_dict` / `from_dict`.

The controller keeps it in `status.scalerState` (JSON), so a restarted operator resumes its
windows and what the SLO feedback learned; the replay keeps it in memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Backlog = tuple[float, float, int | None]
"""(time, total queued pod-seconds of the Ready pods, how many Ready pods): one sync's backlog; the
count is None in a state written before it was kept."""


@dataclass(frozen=True)
class ScalerState:
    """History carried between syncs; a plain value (see `to_dict` / `from_dict`).

    recommendations: (time, replicas) per sync with a usable signal (stabilisation windows).
    events: (time, delta) per applied change (rate policies).
    backlog_empty_since: when the precompute backlog was last seen becoming empty.
    queue: (time, mean queued seconds per Ready pod) at the last sync with a queue reading; the
        next sync turns the change into a growth rate (how far arrivals exceed capacity).
    effective_target: the SM target the SLO feedback arrived at (None: `targetSmActive`).
    slo_good_since: start of the current run of syncs with p99 well under the SLO (creep-back clock).
    slo_last_decrease: when the SLO feedback last cut the effective target.
    panic_until: panic mode lasts until this time (None: not panicking).
    slo_last_over: when a fresh p99 was last over the SLO (the scale-down hold runs from it).
    slo_cut_replicas: the replica count decided at the last cut; the next cut waits until that
        many pods serve (or the pool is smaller).
    slo_last_overloaded: when a sync last saw the pool overloaded (queued work, saturated SM): the
        p99 query's window holds that overload for a while after it, and cuts no target meanwhile.
    backlog: (time, total queued pod-seconds of the Ready pods, how many Ready pods) at the last
        sync with a queue reading; its change estimates the arrivals while pods drain a backlog
        (the count: what the pool served in between, where pods turned Ready meanwhile).
    demand: (time, SM usage with the queue's excess) per sync over `rampLead.windowSeconds`: the
        samples the ramp lead fits.
    lead_seconds: the measured time from a scale-up decision until that many pods serve (None:
        none measured yet).
    scale_up_pending: (time, replicas) of the scale-up being timed for `lead_seconds`.
    slo_error: the band loop's error log(p99 / band edge) at its last move (its proportional term
        acts on the change of the error).
    slo_last_move: when the band loop last moved the effective target.
    slo_quiet_since: since when every pod serves and the pool is not overloaded (None: not now);
        the band loop moves only once this has lasted the p99 query's window.
    slo_outside: (since, error of least magnitude) of the band loop's current run of readings on
        one side of its band; a move needs a whole window of them.
    last_direction: +1 / -1, the direction of the last scale event (0: none yet).
    reversals: times of the direction changes within the last hour (the hysteresis budget).
    slo_last_release: when the band loop last let the scale-down window give capacity back (the
        next release waits until the p99 has seen the smaller pool for a whole window).
    ramp_forecasts: (due, fitted demand when made, demand forecast) of the ramp lead's rising
        forecasts awaiting their time.
    ramp_skill: the share of the ramp lead's forecast rises that came true, a running mean (None:
        none judged yet).
    demand_peaks: (minute, highest demand read in it) for the last hour: the levels a release keeps
        (`levels.py`) are read in them.
    demand_steps: (time, level before, level after) of the steps up the ramp lead read in the last
        hour: a release keeps what such a level needs until the down window has passed its last minute.
    arrival_peaks: (minute, highest arrivals read in it) for the last hour: as `demand_peaks`, but
        while pods drain a backlog what arrives, not what they serve; the ramp lead leads no farther
        than the earlier peak of these while demand is at or below it.
    target_low_run: (since, highest) of the syncs in a row whose SM target was at or below
        `learned.LEARNED_BELOW` x targetSmActive (the TargetLearned condition; None: not in one).
    slo_last_cut: (target before it, the p99 it was sized by) of the band loop's last move, if that
        was a cut above the band: a cut under the SLO waits for the last one to have bought p99.
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    events: tuple[tuple[float, int], ...] = ()
    backlog_empty_since: float | None = None
    queue: tuple[float, float] | None = None
    effective_target: float | None = None
    slo_good_since: float | None = None
    slo_last_decrease: float | None = None
    panic_until: float | None = None
    backlog: Backlog | None = None
    slo_last_over: float | None = None
    slo_cut_replicas: int | None = None
    slo_last_overloaded: float | None = None
    demand: tuple[tuple[float, float], ...] = ()
    lead_seconds: float | None = None
    scale_up_pending: tuple[float, int] | None = None
    slo_error: float | None = None
    slo_last_move: float | None = None
    slo_quiet_since: float | None = None
    slo_outside: tuple[float, float] | None = None
    last_direction: int = 0
    reversals: tuple[float, ...] = ()
    slo_last_release: float | None = None
    ramp_forecasts: tuple[tuple[float, float, float], ...] = ()
    ramp_skill: float | None = None
    demand_peaks: tuple[tuple[float, float], ...] = ()
    demand_steps: tuple[tuple[float, float, float], ...] = ()
    arrival_peaks: tuple[tuple[float, float], ...] = ()
    target_low_run: tuple[float, float] | None = None
    slo_last_cut: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "recommendations": [[t, n] for t, n in self.recommendations],
            "events": [[t, d] for t, d in self.events],
            "backlogEmptySince": self.backlog_empty_since,
            "queue": None if self.queue is None else list(self.queue),
            "effectiveTarget": self.effective_target,
            "sloGoodSince": self.slo_good_since,
            "sloLastDecrease": self.slo_last_decrease,
            "panicUntil": self.panic_until,
            "backlog": _backlog_list(self.backlog),
            "sloLastOver": self.slo_last_over,
            "sloCutReplicas": self.slo_cut_replicas,
            "sloLastOverloaded": self.slo_last_overloaded,
            "demand": [[t, u] for t, u in self.demand],
            "leadSeconds": self.lead_seconds,
            "scaleUpPending": None if self.scale_up_pending is None else list(self.scale_up_pending),
            "sloError": self.slo_error,
            "sloLastMove": self.slo_last_move,
            "sloQuietSince": self.slo_quiet_since,
            "sloOutside": None if self.slo_outside is None else list(self.slo_outside),
            "lastDirection": self.last_direction,
            "reversals": list(self.reversals),
        }
        if self.slo_last_release is not None:  # absent reads as None: states written before it parse the same
            out["sloLastRelease"] = self.slo_last_release
        if self.ramp_forecasts:
            out["rampForecasts"] = [list(f) for f in self.ramp_forecasts]
        if self.ramp_skill is not None:
            out["rampSkill"] = self.ramp_skill
        if self.demand_peaks:
            out["demandPeaks"] = [[t, u] for t, u in self.demand_peaks]
        if self.demand_steps:
            out["demandSteps"] = [list(step) for step in self.demand_steps]
        if self.arrival_peaks:
            out["arrivalPeaks"] = [[t, u] for t, u in self.arrival_peaks]
        if self.target_low_run is not None:
            out["targetLowRun"] = list(self.target_low_run)
        if self.slo_last_cut is not None:
            out["sloLastCut"] = list(self.slo_last_cut)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ScalerState:
        """Parse `to_dict` output; anything malformed yields a fresh state (safe: it only forgets).

        Malformed includes a NaN or an infinity (the older JSON-string form can hold ``Infinity``,
        which Python's parser accepts): kept, it would make every later status patch unwritable.
        """
        if not data or not isinstance(data, Mapping):
            return cls()
        try:
            recs = tuple((_finite(t), int(n)) for t, n in data.get("recommendations", []))
            events = tuple((_finite(t), int(d)) for t, d in data.get("events", []))
            since = data.get("backlogEmptySince")
            q = data.get("queue")
            queue = None if q is None else (_finite(q[0]), _finite(q[1]))
            return cls(
                recs,
                events,
                _opt(since),
                queue,
                effective_target=_opt(data.get("effectiveTarget")),
                slo_good_since=_opt(data.get("sloGoodSince")),
                slo_last_decrease=_opt(data.get("sloLastDecrease")),
                panic_until=_opt(data.get("panicUntil")),
                backlog=None if (b := data.get("backlog")) is None else _backlog(b),
                slo_last_over=_opt(data.get("sloLastOver")),
                slo_cut_replicas=None if data.get("sloCutReplicas") is None else int(data["sloCutReplicas"]),
                slo_last_overloaded=_opt(data.get("sloLastOverloaded")),
                demand=tuple((_finite(t), _finite(u)) for t, u in data.get("demand", [])),
                lead_seconds=_opt(data.get("leadSeconds")),
                scale_up_pending=None if (p := data.get("scaleUpPending")) is None else (_finite(p[0]), int(p[1])),
                slo_error=_opt(data.get("sloError")),
                slo_last_move=_opt(data.get("sloLastMove")),
                slo_quiet_since=_opt(data.get("sloQuietSince")),
                slo_outside=None if (o := data.get("sloOutside")) is None else (_finite(o[0]), _finite(o[1])),
                last_direction=_direction(data.get("lastDirection", 0)),
                reversals=tuple(_finite(t) for t in data.get("reversals", [])),
                slo_last_release=_opt(data.get("sloLastRelease")),
                ramp_forecasts=tuple((_finite(d), _finite(m), _finite(f)) for d, m, f in data.get("rampForecasts", [])),
                ramp_skill=_opt(data.get("rampSkill")),
                demand_peaks=tuple((_finite(t), _finite(u)) for t, u in data.get("demandPeaks", [])),
                demand_steps=tuple((_finite(t), _finite(b), _finite(a)) for t, b, a in data.get("demandSteps", [])),
                arrival_peaks=tuple((_finite(t), _finite(u)) for t, u in data.get("arrivalPeaks", [])),
                target_low_run=None if (r := data.get("targetLowRun")) is None else (_finite(r[0]), _finite(r[1])),
                slo_last_cut=None if (c := data.get("sloLastCut")) is None else (_positive(c[0]), _positive(c[1])),
            )
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):  # OverflowError: int(inf)
            return cls()


def _opt(value: Any) -> float | None:
    """None, or a finite float (a NaN or an infinity is malformed: ValueError)."""
    if value is None:
        return None
    return _finite(value)


def _backlog_list(backlog: Backlog | None) -> list[float | int] | None:
    """The JSON form: [time, total, count], or [time, total] where the count is not known (no null
    in the list, as an older state wrote it)."""
    if backlog is None:
        return None
    t, total, ready = backlog
    return [t, total] if ready is None else [t, total, ready]


def _backlog(value: Any) -> Backlog:
    """(time, total, Ready pods); a state written before the count was kept has two fields, and
    its count reads None (the arrivals then take today's count, as they did)."""
    if len(value) not in (2, 3):
        raise ValueError(f"not a backlog reading: {value!r}")
    ready = None if len(value) == 2 or value[2] is None else _count(value[2])
    return (_finite(value[0]), _finite(value[1]), ready)


def _count(value: Any) -> int:
    out = int(value)
    if out < 0:
        raise ValueError(f"not a count: {value!r}")
    return out


def _direction(value: Any) -> int:
    """-1, 0 or +1 (anything else is malformed: ValueError)."""
    out = int(value)
    if out not in (-1, 0, 1):
        raise ValueError(f"not a direction: {value!r}")
    return out


def _finite(value: Any) -> float:
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"not a finite number: {value!r}")
    return out


def _positive(value: Any) -> float:
    """A target or a p99: the loop takes their logarithm."""
    out = _finite(value)
    if out <= 0:
        raise ValueError(f"not a positive number: {value!r}")
    return out
