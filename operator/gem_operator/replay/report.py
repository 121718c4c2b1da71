"""What a replay measured, per pool: GPU-hours, p99 and SLO minutes per minute, scaling events.

`ReplayReport.to_table()` is what `gemop replay` prints; `to_dict()` its JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_operator.autoscaling.learned import LEARNED_BELOW, advice, on_floor
from gem_operator.replay.service_model import ServiceModel

POLICY = "policy"
STATIC_PEAK = "static_peak"
HPA_RPS = "hpa_rps"
POOLS = (POLICY, STATIC_PEAK, HPA_RPS)


@dataclass
class PoolResult:
    """What one policy did over the run."""

    name: str
    gpu_hours: float
    slo_violation_minutes: int
    # The most direction changes in any 60-minute stretch of the run (all of them in a shorter run):
    # the budget bounds every hour, so a mean over the run would read 4 changes in 58 minutes as
    # 4.1 an hour, and would hide a busy hour in a quiet day.
    direction_changes_per_hour: float
    peak_replicas: int
    scaling_events: int
    mean_replicas: float
    replicas_per_minute: list[float]
    p99_ms_per_minute: list[float | None]
    sm_active_per_minute: list[float]
    events: list[tuple[float, int, int, str]] = field(default_factory=list)
    warmup_violation_minutes: int = 0  # over the SLO before the first decision could take effect
    judged_minutes: int = 0  # minutes after the warm-up (what slo_violation_minutes counts)
    effective_target_per_minute: list[float | None] = field(default_factory=list)
    # The minute the pool's TargetLearned condition first turned True (`autoscaling.learned`; None:
    # never), and its reason the last time it was True (HeldBelowDeclared, or HeldAtFloor).
    target_learned_minute: int | None = None
    target_learned_reason: str | None = None
    # Scale-downs the policy promises never to make (`autoscalers.unsafe_scale_down`): (time, why).
    unsafe_scale_downs: list[tuple[float, str]] = field(default_factory=list)
    # Of slo_violation_minutes, those in which the pool held its ceiling (maxReplicas, or what the
    # cluster's GPUs allow): it could not have scaled further; always 0 for the static pool.
    ceiling_violation_minutes: int = 0

    @property
    def violation_pct(self) -> float:
        return 100 * self.slo_violation_minutes / max(1, self.judged_minutes)

    def summary(self) -> dict[str, Any]:
        return {
            "gpu_hours": round(self.gpu_hours, 3),
            "slo_violation_minutes": self.slo_violation_minutes,
            "slo_violation_pct_after_warmup": round(self.violation_pct, 2),
            "slo_violation_minutes_at_ceiling": self.ceiling_violation_minutes,
            "warmup_violation_minutes": self.warmup_violation_minutes,
            "direction_changes_per_hour": round(self.direction_changes_per_hour, 2),
            "peak_replicas": self.peak_replicas,
            "scaling_events": self.scaling_events,
            "mean_replicas": round(self.mean_replicas, 2),
        }


def most_in_an_hour(times: Sequence[float]) -> int:
    """The most of `times` (seconds, ascending) that fall within any 3600 s: a run shorter than an
    hour holds all of them in its one hour."""
    most = start = 0
    for end, t in enumerate(times):
        while t - times[start] >= 3600:
            start += 1
        most = max(most, end - start + 1)
    return most


@dataclass(frozen=True)
class LearnedTarget:
    """Where the SLO loop held the SM target, well below the declared one, for a replay's second half.

    A pool starts at `targetSmActive`, and the loop learns its way down a window at a time, over the
    SLO's band (or the SLO itself) until it has: on a fleet whose p99 needs less SM active than
    declared, every new pool pays that again. The replay says so, with the target to declare.
    """

    declared: float
    end: float  # the target at the replay's last minute
    highest: float  # the highest in the second half
    minutes: int  # the minutes of the second half
    condition_minute: int | None = None  # when a live pool's TargetLearned condition turns True
    floor: float | None = None  # the loop's lowest target

    @property
    def at_floor(self) -> bool:
        """The loop ended at its floor: it may have wanted less, and declaring the floor is no cure."""
        return self.floor is not None and on_floor(self.end, self.floor)

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "declared": self.declared,
            "end": round(self.end, 3),
            "highest_in_second_half": round(self.highest, 3),
            "second_half_minutes": self.minutes,
            "condition_true_at_minute": self.condition_minute,
            "at_loop_floor": self.at_floor,
        }

    def note(self) -> str:
        held = (
            f"note: policy: the SLO loop held the SM target at or below {self.highest:.2f} "
            f"({self.highest / self.declared:.2f} x targetSmActive {self.declared:g}) for the last {self.minutes} min "
            f"and ended at {self.end:.2f}"
        )
        condition = (
            ""
            if self.condition_minute is None
            else f" (a live pool's TargetLearned condition turns True at minute {self.condition_minute})"
        )
        if self.at_floor:
            held += ", the loop's floor (sloFeedback.minTargetFraction)"
        return f"{held}: {advice(self.end, at_floor=self.at_floor)}{condition}"


@dataclass
class ReplayReport:
    """Result of a replay: one PoolResult per policy, plus per-minute load."""

    duration_seconds: int
    slo_ms: float
    service: str
    trace: str
    scale: float
    model: ServiceModel
    load_per_minute: list[float]
    requests_per_minute: list[float]
    results: dict[str, PoolResult]
    scale_mode: str = "duplicate"
    warmup_minutes: int = 0
    max_replicas: int | None = None  # the spec's autoscaling.maxReplicas, marked on the plot
    ceiling_replicas: int | None = None  # the most an autoscaled pool may hold (maxReplicas or the cluster's GPUs)
    ceiling_source: str = "spec.autoscaling.maxReplicas"
    time_note: str = ""  # how numeric time stamps were read, when not as seconds
    static_set_by: str = "peak load"  # what sized the static pool: the peak load, minReplicas above it, or given
    peak_load_replicas: int | None = None  # the replicas the peak second needs at the target utilisation
    # spec.replicas when the service's built-in autoscaler is off (the operator then holds it): the
    # policy row is then what turning it on would do, and the report says so.
    fixed_replicas: int | None = None
    target_sm_active: float | None = None  # the spec's declared target, which the SLO loop's path is read against
    loop_floor: float | None = None  # the SLO loop's lowest target (`autoscaling.learned.loop_floor`)

    @property
    def minutes(self) -> int:
        return len(self.load_per_minute)

    @property
    def judged_minutes(self) -> int:
        """Minutes after the warm-up: the denominator of the SLO-violation share."""
        return max(0, self.minutes - self.warmup_minutes)

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "duration_seconds": self.duration_seconds,
            "service": self.service,
            "trace": self.trace,
            **({"time_stamps": self.time_note} if self.time_note else {}),
            "scale": self.scale,
            "scale_mode": self.scale_mode,
            "warmup_minutes": self.warmup_minutes,
            "slo_p99_ms": self.slo_ms,
            "ceiling": {"replicas": self.ceiling_replicas, "set_by": self.ceiling_source},
            "static_peak_sizing": {"set_by": self.static_set_by, "peak_load_needs": self.peak_load_replicas},
            **({"autoscaling_disabled": {"replicas": self.fixed_replicas}} if self.fixed_replicas is not None else {}),
            **({"learned_target": learned.to_dict()} if (learned := self.learned_target()) is not None else {}),
            "service_model": self.model.describe(),
            "policy": self.results[POLICY].summary(),
            "baselines": {k: self.results[k].summary() for k in (STATIC_PEAK, HPA_RPS)},
        }
        if timeline:
            rows = []
            for m in range(self.minutes):
                row: dict[str, Any] = {
                    "minute": m,
                    "load_cost_per_s": round(self.load_per_minute[m], 2),
                    "requests_per_s": round(self.requests_per_minute[m], 2),
                }
                for k, r in self.results.items():
                    p99 = r.p99_ms_per_minute[m]
                    row[k] = {
                        "replicas": round(r.replicas_per_minute[m], 2),
                        "sm_active": round(r.sm_active_per_minute[m], 3),
                        "p99_ms": None if p99 is None else round(p99, 1),
                    }
                    if r.effective_target_per_minute:
                        target = r.effective_target_per_minute[m]
                        row[k]["effective_target"] = None if target is None else round(target, 3)
                rows.append(row)
            out["timeline"] = rows
        return out

    def to_table(self) -> str:
        hours = self.duration_seconds / 3600
        lines = [
            f"replay of {self.trace} (x{self.scale:g}, scale mode {self.scale_mode}) against RankingService "
            f"{self.service}: {hours:.2f} h, SLO p99 <= {self.slo_ms:g} ms, replica ready "
            f"{self.model.startup_seconds:g} s after creation",
            *([self.time_note] if self.time_note else []),
            f"warm-up: the first {self.warmup_minutes} min (before a first decision can take effect) are counted "
            f"apart; SLO minutes and % below are over the {self.judged_minutes} min after it",
            f"{'pool':<12} {'GPU-h':>8} {'vs static':>9} {'SLO-viol min':>12} {'viol %':>7} {'warm-up':>7} "
            f"{'dir chg/h':>9} {'events':>6} {'peak':>5} {'mean':>6}",
        ]
        static = self.results[STATIC_PEAK].gpu_hours
        for k in POOLS:
            r = self.results[k]
            saving = f"{(r.gpu_hours / static - 1) * 100:+.0f}%" if static > 0 else "n/a"
            pct = r.violation_pct
            lines.append(
                f"{k:<12} {r.gpu_hours:>8.2f} {saving:>9} {r.slo_violation_minutes:>12d} {pct:>6.1f}% "
                f"{r.warmup_violation_minutes:>7d} "
                f"{r.direction_changes_per_hour:>9.2f} {r.scaling_events:>6d} {r.peak_replicas:>5d} "
                f"{r.mean_replicas:>6.1f}"
            )
        lines.append("('vs static' is the GPU-hour change against static peak provisioning; negative is fewer)")
        lines.extend(self.sizing_notes())
        return "\n".join(lines)

    def learned_target(self) -> LearnedTarget | None:
        """The SLO loop's target where it held well below the declared one for the replay's whole
        second half (None: it did not, or the report has no path of it)."""
        declared = self.target_sm_active
        path = self.results[POLICY].effective_target_per_minute if POLICY in self.results else []
        half = [t for t in path[len(path) // 2 :] if t is not None]
        if declared is None or not half or max(half) > LEARNED_BELOW * declared:
            return None
        learned_at = self.results[POLICY].target_learned_minute
        return LearnedTarget(declared, half[-1], max(half), len(path) - len(path) // 2, learned_at, self.loop_floor)

    def sizing_notes(self) -> list[str]:
        """Lines saying where the spec, not the policy, explains the figures: static peak held at
        minReplicas above the load's need, a declared target the SLO loop held far below
        (`learned_target`), static peak sized above the autoscaled pools' ceiling, and SLO minutes
        spent holding that ceiling. Without them a replay of a trace the service was never sized
        for reads as a policy that does not scale, or one that learns for half an hour."""
        notes = []
        if self.fixed_replicas is not None:
            notes.append(
                "note: spec.autoscaling.enabled is false: the operator holds spec.replicas "
                f"({self.fixed_replicas}) for this service; the policy row is what enabling the autoscaler would do"
            )
        static = self.results.get(STATIC_PEAK)
        if static is not None and self.static_set_by == "spec.autoscaling.minReplicas":
            notes.append(
                f"note: static peak provisioning holds minReplicas, {static.peak_replicas} replicas: the peak load "
                f"needs only {self.peak_load_replicas}, and the autoscaled pools never go below minReplicas either"
            )
        learned = self.learned_target()
        if learned is not None:
            notes.append(learned.note())
        if self.ceiling_replicas is None:
            return notes
        if static is not None and static.peak_replicas > self.ceiling_replicas:
            notes.append(
                f"note: the autoscaled pools stop at {self.ceiling_replicas} replicas ({self.ceiling_source}); "
                f"static peak provisioning, which nothing caps, holds {static.peak_replicas} for this load"
            )
        for k in (POLICY, HPA_RPS):
            r = self.results.get(k)
            if r is not None and r.ceiling_violation_minutes:
                notes.append(
                    f"note: {k}: {r.ceiling_violation_minutes} of its {r.slo_violation_minutes} SLO-violation "
                    f"minutes came while it held that ceiling of {self.ceiling_replicas}: raise "
                    f"{self.ceiling_source.split()[0]} to let it scale to the load"
                )
        return notes


__all__ = ["HPA_RPS", "LEARNED_BELOW", "POLICY", "POOLS", "STATIC_PEAK", "LearnedTarget", "PoolResult", "ReplayReport"]
