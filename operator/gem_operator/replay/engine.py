"""Replay a request trace against the autoscaling policy on simulated time, with baselines.

What `gemop replay` (`command.py`) runs:

    gemop replay --trace TRACE --service RANKINGSERVICE.yaml [--scale X]
                 [--scale-mode independent|duplicate] [--profile FILE.json]
                 [--output table|json] [--plot FILE.png]

TRACE: CSV with a `TIMESTAMP` column or JSONL `{"t", "cost", "count"}` (see `traces.py`).
Arrivals are binned per second and scaled by `--scale`, keeping the time axis (pod start-up and
stabilisation windows stay realistic). What X times the load means is `--scale-mode`
(`traces.to_series`):

- `independent` (default): X times as many users, each copy of the trace's arrival process
  independent of the others: the trace's trend (a centred 300 s mean, `--trend-seconds`) grows
  X-fold, its fluctuations around the trend sqrt(X)-fold, as for a sum of X independent copies.
  A Poisson trace at 5 req/s scaled 100x then swings +-4 % per second, as Poisson at 500 req/s does.
- `duplicate`: every request stands for X requests in the same second, so bursts and sampling
  noise grow X-fold (the same trace swings +-45 % per second), smoothed by a centred 10 s mean
  (`--smooth-seconds`). The pessimistic reading: all extra users move together.

The report header names the mode. `--plot` writes a PNG through the plotter the testbed extra
declares (entry point group `gemop.plotters`); without it the command says what to install.

Minutes before the first scaling decision can take effect
(first sync + pod start + model load: 3 minutes with the defaults) are warm-up: their SLO
violations are reported apart, and the violation share is over the minutes after them.

Every simulated second each pool serves the load through the service model
(`service_model.py`); every `sync_seconds` (15 s) its autoscaler decides (`autoscalers.py`: what
a sync reads, and each pool's rule). Three pools see the same load:

- `policy`: `policy.desired_replicas` with the RankingService's `spec.autoscaling`, fed the
  mean SM active of each Ready pod over the seconds of the last sync interval it was Ready (a
  pod that became Ready at the sync has no sample yet, as a scrape would show, rather than the
  saturated SM of the pods that served the interval before it) and, when `metrics.queue` is
  enabled, the queued seconds of work per Ready pod at the sync (the server's queue gauge over
  its completion rate; in the model, the fluid queue over the Ready capacity). With
  `metrics.latency` enabled it also gets the pool's p99 over the last 60 s (the request-weighted
  99th percentile of the model's per-second p99, what the default histogram query reads) and
  `spec.slo`, so the SLO feedback runs as in the operator; with `panic` enabled, SM active over
  the panic window.
- `hpa_rps`: the same HPA algorithm and settings (without the saturation rule, which is about
  a bounded signal, and without the queue signal) fed requests/s per Ready pod (each pod's share
  over the seconds it was Ready, read the same way) -- the arrival
  rate, a request count blind to request cost -- with the target set to what the SM target
  means in requests: `target utilisation * throughput_per_replica / cost per request`, the cost
  per request being the run's own mean (hindsight: the best fixed calibration for the trace).
- `static_peak`: a fixed count sized for the highest (smoothed) load of the run at the target
  utilisation, Ready from the start.

Per pool: GPU-hours (GPUs held from pod creation, so start-up counts), p99 per minute
(request-weighted 99th percentile of the per-second p99 of the model), SLO-violation minutes
(p99 above `spec.slo.p99LatencyMs`), scaling events and direction changes in the busiest hour.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.learned import loop_floor
from gem_operator.replay.autoscalers import Decide, PolicyTrace, Window, policy_rule, rps_rule
from gem_operator.replay.report import (
    HPA_RPS,
    POLICY,
    POOLS,
    STATIC_PEAK,
    PoolResult,
    ReplayReport,
    most_in_an_hour,
)
from gem_operator.replay.service_model import Pool, ServiceModel, interpolate, weighted_quantile
from gem_operator.replay.traces import (
    TREND_SECONDS,
    Arrivals,
    LoadSeries,
    ScaleMode,
    TraceError,
    TraceFields,
    load_service,
    load_trace,
    time_note,
    to_series,
)


def warmup_minutes(model: ServiceModel, sync_seconds: float, minutes: int) -> int:
    """Minutes before the first scaling decision can take effect: first sync + pod start + model load."""
    return min(minutes, math.ceil((max(1, round(sync_seconds)) + model.startup_seconds) / 60 - 1e-9))


# Every replica of a pool is simulated (its start time, its share of the load): past this the
# static pool alone (sized for the peak, not capped by maxReplicas) would fill memory.
MAX_SIMULATED_REPLICAS = 1_000_000


def static_pool(peak_need: int, min_replicas: int, given: int | None) -> tuple[int, str]:
    """The static pool's size and what set it: `given` (the load test's), else the peak second's
    need, never below minReplicas. A team that keeps minReplicas (zones, redundancy) would not
    provision fewer statically: below it, "vs static" would charge the autoscaled pools for a floor
    static never paid."""
    if given is not None:
        return max(1, given), "given"
    if min_replicas > peak_need:
        return min_replicas, "spec.autoscaling.minReplicas"
    return peak_need, "peak load"


def target_utilisation(target: float, model: ServiceModel, trace: str) -> float:
    """The utilisation at which a pod of `model` shows SM active `target`. TraceError where no load
    shows it: at or below an idle pod's SM active, every pool would be sized at a vanishing share
    of a replica."""
    idle_sm = interpolate(model.sm_active, 0.0)
    if target <= idle_sm:
        raise TraceError(
            f"{trace}: spec.autoscaling.targetSmActive {target} is at or below the SM active of an idle "
            f"pod in the service profile ({idle_sm:g} at zero load, its sm_active curve): no load reaches "
            f"the target; raise the target above {idle_sm:g} (and set metrics.smActiveIdle to it), or "
            "check the profile"
        )
    return model.utilisation_for_sm(target)


def simulate(
    load: LoadSeries,
    spec: RankingServiceSpec,
    model: ServiceModel,
    *,
    service: str = "rankingservice",
    trace: str = "trace",
    scale: float = 1.0,
    sync_seconds: float = 15.0,
    cluster_gpus: int | None = None,
    rps_utilisation: float | None = None,
    scale_mode: str = "independent",
    spec_override: RankingServiceSpec | None = None,
    only: Sequence[str] | None = None,
    static_replicas: int | None = None,
    rps_window_seconds: float | None = None,
) -> ReplayReport:
    """Run the three pools over `load` (per-second series) and collect the report.

    `static_replicas` fixes the static pool (default: the peak of the smoothed load at the
    target utilisation); the load test passes the size it ran, so both compare the same pool.
    `rps_window_seconds` is the HPA-on-RPS baseline's rate window (default: one sync period);
    the load test passes its Prometheus rate window.
    `rps_utilisation` replaces the RPS baseline's target utilisation (default: the one the SM
    target means), so a benchmark can compare the two at equal GPU-hours. `scale_mode` only labels
    the report (the series is already scaled). `spec_override` runs the policy pool with another
    spec (e.g. panic mode on) while the baselines keep `spec`. `only` runs just those pools (a
    benchmark's re-runs of one baseline); the report then holds only them.
    """
    a = spec.autoscaling
    seconds = load.seconds
    minutes = max(1, math.ceil(seconds / 60))
    cost = load.cost.tolist()
    reqs = load.requests.tolist()
    target_util = target_utilisation(a.target_sm_active, model, trace)
    per_replica_at_target = target_util * model.throughput_per_replica
    # Peak minute of load, sized at the target utilisation.
    minute_load = [sum(cost[m * 60 : (m + 1) * 60]) / len(cost[m * 60 : (m + 1) * 60]) for m in range(minutes)]
    minute_reqs = [sum(reqs[m * 60 : (m + 1) * 60]) / len(reqs[m * 60 : (m + 1) * 60]) for m in range(minutes)]
    peak_need = max(1, math.ceil(max(cost) / per_replica_at_target - 1e-9))
    static_n, static_set_by = static_pool(peak_need, a.min_replicas, static_replicas)
    if static_n > MAX_SIMULATED_REPLICAS:
        raise TraceError(
            f"{trace}: the static pool for the peak second would need {static_n:,} replicas (peak load "
            f"{max(cost):,.4g} at {per_replica_at_target:.4g} per replica at targetSmActive {a.target_sm_active}); "
            f"the replay simulates every replica and takes at most {MAX_SIMULATED_REPLICAS:,}: lower --scale, "
            "or check spec.autoscaling.targetSmActive"
        )
    start_n = min(a.max_replicas, max(a.min_replicas, math.ceil(minute_load[0] / per_replica_at_target - 1e-9)))
    sync_every = max(1, round(sync_seconds))
    gpus = spec.gpus_per_replica
    warmup = warmup_minutes(model, sync_seconds, minutes)
    slo_ms = spec.slo.p99_latency_ms
    synced = PolicyTrace()

    # The RPS baseline's per-replica target: the requests/s one replica serves at the same target
    # utilisation, calibrated with hindsight on the run's mean cost per request (the best fixed
    # calibration an operator could pick for this trace; a request-count signal cannot follow drift).
    total_reqs = float(sum(reqs))
    cost_per_request = float(sum(cost)) / total_reqs if total_reqs > 0 else 1.0
    rps_util = target_util if rps_utilisation is None else rps_utilisation
    target_rps = rps_util * model.throughput_per_replica / (cost_per_request if cost_per_request > 0 else 1.0)

    rps_window = max(1, round(rps_window_seconds)) if rps_window_seconds else sync_every

    ceiling, ceiling_source = pool_ceiling(spec, cluster_gpus)
    rules: dict[str, tuple[Decide | None, int]] = {
        POLICY: (policy_rule(spec_override or spec, slo_ms, sync_every, gpus, cluster_gpus, synced), start_n),
        STATIC_PEAK: (None, static_n),
        HPA_RPS: (rps_rule(spec, target_rps, rps_window, gpus, cluster_gpus), start_n),
    }
    results: dict[str, PoolResult] = {}
    for name, (decide, initial) in rules.items():
        if only is not None and name not in only:
            continue
        results[name] = run_pool(
            name,
            decide,
            initial,
            cost,
            reqs,
            model,
            sync_every,
            slo_ms,
            gpus,
            warmup_minutes=warmup,
            ceiling=None if decide is None else ceiling,
        )
    per_minute: list[float | None] = [None] * minutes
    for when, target, _ in synced.targets:
        per_minute[min(minutes - 1, int(when // 60))] = target
    if POLICY in results:
        results[POLICY].effective_target_per_minute = per_minute
        results[POLICY].unsafe_scale_downs = synced.unsafe_scale_downs
        learned = [(when, why) for when, _, why in synced.targets if why is not None]
        if learned:
            results[POLICY].target_learned_minute = int(learned[0][0] // 60)
            results[POLICY].target_learned_reason = learned[-1][1]
    return ReplayReport(
        duration_seconds=seconds,
        slo_ms=spec.slo.p99_latency_ms,
        service=service,
        trace=trace,
        scale=scale,
        model=model,
        load_per_minute=minute_load,
        requests_per_minute=minute_reqs,
        results=results,
        scale_mode=scale_mode,
        warmup_minutes=warmup,
        max_replicas=spec.autoscaling.max_replicas,
        ceiling_replicas=ceiling,
        ceiling_source=ceiling_source,
        static_set_by=static_set_by,
        fixed_replicas=None if a.enabled else spec.replicas,
        peak_load_replicas=peak_need,
        target_sm_active=(spec_override or spec).autoscaling.target_sm_active,
        loop_floor=loop_floor((spec_override or spec).autoscaling),
    )


def pool_ceiling(spec: RankingServiceSpec, cluster_gpus: int | None) -> tuple[int, str]:
    """The most replicas an autoscaled pool may hold, and what sets it: maxReplicas, or fewer where
    the cluster's GPUs run out first (pods without GPUs never do). Violation minutes spent there are
    the ceiling's, not the policy's, and a user replaying their own trace needs to be told so
    (static peak is not capped)."""
    a, gpus = spec.autoscaling, spec.gpus_per_replica
    if cluster_gpus is not None and gpus > 0 and max(a.min_replicas, cluster_gpus // gpus) < a.max_replicas:
        return max(a.min_replicas, cluster_gpus // gpus), f"--cluster-gpus {cluster_gpus} at gpusPerReplica {gpus}"
    return a.max_replicas, "spec.autoscaling.maxReplicas"


def run_pool(
    name: str,
    decide: Decide | None,
    initial: int,
    cost: list[float],
    reqs: list[float],
    model: ServiceModel,
    sync_every: int,
    slo_ms: float,
    gpus: int,
    *,
    warmup_minutes: int = 0,
    ceiling: int | None = None,
) -> PoolResult:
    """Serve `cost` second by second with one pool; `decide` (None: fixed size) is called every sync.

    Minutes before `warmup_minutes` are counted apart (`warmup_violation_minutes`). Violation
    minutes in which the pool held `ceiling` replicas at some second are also counted in
    `ceiling_violation_minutes`: there it could not have scaled further.
    """
    pool = Pool(model)
    pool.created = [-model.startup_seconds] * initial  # warm: ready at t=0
    win = Window(sm=[], requests=reqs, ready=[])
    p99s: list[float] = []
    reps: list[int] = []
    events: list[tuple[float, int, int, str]] = []
    for t in range(len(cost)):
        now = float(t)
        if decide is not None and t > 0 and t % sync_every == 0:
            before = len(pool.created)
            n = decide(now, pool, win)
            if n != before:
                pool.scale_to(n, now)
                events.append((now, before, n, "up" if n > before else "down"))
        win.ready.append(pool.ready_count(now))
        _, sm, p99 = pool.step(cost[t], now, 1.0)
        win.sm.append(sm)
        win.p99.append(p99)
        p99s.append(p99)
        reps.append(len(pool.created))
    minutes = max(1, math.ceil(len(cost) / 60))
    p99_min: list[float | None] = []
    rep_min: list[float] = []
    sm_min: list[float] = []
    violations = 0
    warm_violations = 0
    at_ceiling = 0
    for m in range(minutes):
        sl = slice(m * 60, (m + 1) * 60)
        weights = cost[sl]
        if sum(weights) > 0:
            q = weighted_quantile(p99s[sl], weights, 0.99)
            p99_min.append(q)
            if q > slo_ms:
                if m < warmup_minutes:
                    warm_violations += 1
                else:
                    violations += 1
                    if ceiling is not None and max(reps[sl]) >= ceiling:
                        at_ceiling += 1
        else:
            p99_min.append(None)
        rep_min.append(sum(reps[sl]) / len(reps[sl]))
        sm_min.append(sum(win.sm[sl]) / len(win.sm[sl]))
    changes = [b[0] for a, b in itertools.pairwise(events) if a[3] != b[3]]
    return PoolResult(
        name=name,
        gpu_hours=pool.gpu_seconds * gpus / 3600,
        slo_violation_minutes=violations,
        direction_changes_per_hour=float(most_in_an_hour(changes)),
        peak_replicas=max(reps) if reps else 0,
        scaling_events=len(events),
        mean_replicas=sum(reps) / len(reps) if reps else 0.0,
        replicas_per_minute=rep_min,
        p99_ms_per_minute=p99_min,
        sm_active_per_minute=sm_min,
        events=events,
        warmup_violation_minutes=warm_violations,
        judged_minutes=max(0, minutes - warmup_minutes),
        ceiling_violation_minutes=at_ceiling,
    )


# --------------------------------------------------------------------------- entry points


def run_replay(
    trace: str | Path,
    service: str | Path,
    *,
    scale: float = 1.0,
    profile: str | Path | None = None,
    cost_column: str | None = None,
    sync_seconds: float = 15.0,
    smooth_seconds: float = 10.0,
    cluster_gpus: int | None = None,
    scale_mode: ScaleMode = "independent",
    trend_seconds: float = TREND_SECONDS,
    static_replicas: int | None = None,
    rps_window_seconds: float | None = None,
    time_unit: str = "auto",
    fields: TraceFields | None = None,
) -> ReplayReport:
    """Replay `trace` against the RankingService in `service`. Raises TraceError / ProfileError.

    `static_replicas` fixes the static pool's size (default: sized for the run's peak);
    `rps_window_seconds` the HPA-on-RPS baseline's rate window (default: one sync period);
    `time_unit` the unit of numeric time stamps ("auto": by their size, `gem_common.traces.numeric_time_unit`);
    `fields` the trace's time field and the rows to keep (`--time-column`, `--where`)."""
    name, spec = load_service(service)
    model = ServiceModel.load(profile) if profile is not None else ServiceModel()
    arrivals = load_trace(trace, cost_column, time_unit, fields)
    series = to_series(
        arrivals, scale=scale, smooth_seconds=smooth_seconds, mode=scale_mode, trend_seconds=trend_seconds
    )
    report = simulate(
        series,
        spec,
        model,
        service=name,
        trace=Path(trace).name,
        scale=scale,
        sync_seconds=sync_seconds,
        cluster_gpus=cluster_gpus,
        scale_mode=scale_mode,
        static_replicas=static_replicas,
        rps_window_seconds=rps_window_seconds,
    )
    report.time_note = time_note(arrivals, time_unit)
    return report


__all__ = [
    "HPA_RPS",
    "POLICY",
    "POOLS",
    "STATIC_PEAK",
    "Arrivals",
    "LoadSeries",
    "PoolResult",
    "ReplayReport",
    "TraceError",
    "Window",
    "load_service",
    "load_trace",
    "run_pool",
    "run_replay",
    "simulate",
    "static_pool",
    "target_utilisation",
    "to_series",
    "warmup_minutes",
]
