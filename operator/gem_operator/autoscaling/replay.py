"""Replay a request trace against the autoscaling policy on simulated time, with baselines.

    gemop replay --trace TRACE --service RANKINGSERVICE.yaml [--scale X] [--profile FILE.json]
                 [--output table|json] [--plot FILE.png]

TRACE is either
- CSV with a `TIMESTAMP` column (date-time like `2023-11-16 18:17:03.97996`, or seconds),
  one row per request; `--cost-column NAME` weights each request by that numeric column,
  normalised to mean 1 (so a cost unit is an average request), or
- JSONL, one object per line: `{"t": seconds, "cost": number}`; optional `"count"` is the
  number of requests the line stands for (default 1; `cost` defaults to `count`), so a
  pre-aggregated trace may hold one line per second.

Arrivals are binned per second, multiplied by `--scale` (the time axis is kept, so pod
start-up and stabilisation windows stay realistic) and smoothed with a centred moving average
(`smooth_seconds`, default 10 s): scaling one arrival into X simultaneous requests would
otherwise turn sampling noise into load spikes no real aggregate stream has.

What `--scale X` assumes: every request of the trace stands for X requests arriving in the same
second, so the trace's bursts grow X-fold with it (all extra users move together). That is the
pessimistic reading; X times more *independent* users would add their fluctuations in variance,
not amplitude. For the shipped Azure trace the difference is not sampling noise: its counts have
13x / 71x / 160x the variance Poisson arrivals at its mean rate would have over 1 s / 10 s /
60 s (on/off bursts of 10-60 requests/s separated by idle minutes), and after the 10 s smoothing
Poisson noise is about 2.5 % of the variance left. Shrinking the bursts by sqrt(X) would thus be
a claim about who sends them, which the trace cannot tell; the replay keeps them, and every pool
sees the same series.

Every simulated second each pool serves the load through the service model
(`service_model.py`); every `sync_seconds` (15 s) its autoscaler decides. Three pools see the
same load:

- `policy`: `policy.desired_replicas` with the RankingService's `spec.autoscaling`, fed the
  mean SM active of each Ready pod over the last sync interval and, when `metrics.queue` is
  enabled, the queued seconds of work per Ready pod at the sync (the server's queue gauge over
  its completion rate; in the model, the fluid queue over the Ready capacity).
- `hpa_rps`: the same HPA algorithm and settings (without the saturation rule, which is about
  a bounded signal, and without the queue signal) fed requests/s per Ready pod -- the arrival
  rate, a request count blind to request cost -- with the target set to what the SM target
  means in requests: `target utilisation * throughput_per_replica / cost per request`, the cost
  per request being the run's own mean (hindsight: the best fixed calibration for the trace).
- `static_peak`: a fixed count sized for the highest (smoothed) load of the run at the target
  utilisation, Ready from the start.

Per pool: GPU-hours (GPUs held from pod creation, so start-up counts), p99 per minute
(request-weighted 99th percentile of the per-second p99 of the model), SLO-violation minutes
(p99 above `spec.slo.p99LatencyMs`), scaling events and direction changes per hour.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import ValidationError

from gem_operator.api.serving import RankingServiceSpec
from gem_operator.autoscaling.policy import (
    MetricReading,
    Observation,
    PodSample,
    PodState,
    ScalerState,
    desired_replicas,
)
from gem_operator.autoscaling.service_model import Pool, ProfileError, ServiceModel, weighted_quantile

POLICY = "policy"
STATIC_PEAK = "static_peak"
HPA_RPS = "hpa_rps"
POOLS = (POLICY, STATIC_PEAK, HPA_RPS)


class TraceError(ValueError):
    """A trace or service file is unusable; the message names the file, line and column."""


# --------------------------------------------------------------------------- traces


@dataclass(frozen=True)
class LoadSeries:
    """Load per simulated second: cost units/s and requests/s (both already scaled)."""

    cost: np.ndarray[Any, np.dtype[np.float64]]
    requests: np.ndarray[Any, np.dtype[np.float64]]
    name: str = "trace"

    @property
    def seconds(self) -> int:
        return len(self.cost)


@dataclass(frozen=True)
class Arrivals:
    """Request arrivals: seconds from the first one, request counts and cost units."""

    times: list[float]
    counts: list[float]
    costs: list[float]
    path: str


def _parse_time(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    # datetime.fromisoformat takes at most 6 fractional digits on older Pythons.
    if "." in text:
        head, frac = text.rsplit(".", 1)
        digits = "".join(ch for ch in frac if ch.isdigit())
        rest = frac[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:  # naive times are read as UTC, so DST never bends the time axis
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _load_csv(path: Path, cost_column: str | None) -> Arrivals:
    times: list[float] = []
    costs: list[float] = []
    try:
        fh = path.open(newline="")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceError(f"{path}: empty file; expected a header line with a TIMESTAMP column") from None
        names = [h.strip() for h in header]
        if "TIMESTAMP" not in names:
            raise TraceError(f"{path}: line 1: no TIMESTAMP column (columns: {', '.join(names)})")
        t_idx = names.index("TIMESTAMP")
        c_idx: int | None = None
        if cost_column is not None:
            if cost_column not in names:
                raise TraceError(f"{path}: line 1: no column {cost_column!r} for --cost-column (columns: {names})")
            c_idx = names.index(cost_column)
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(names):
                raise TraceError(f"{path}: line {line}: {len(row)} fields, the header has {len(names)}")
            try:
                times.append(_parse_time(row[t_idx]))
            except ValueError:
                raise TraceError(
                    f"{path}: line {line}, column TIMESTAMP: cannot parse {row[t_idx]!r} as a time "
                    "(expected e.g. 2023-11-16 18:17:03.97 or seconds)"
                ) from None
            if c_idx is not None:
                try:
                    value = float(row[c_idx])
                except ValueError:
                    raise TraceError(
                        f"{path}: line {line}, column {cost_column}: {row[c_idx]!r} is not a number"
                    ) from None
                if not math.isfinite(value) or value < 0:
                    raise TraceError(f"{path}: line {line}, column {cost_column}: cost must be >= 0, got {value}")
                costs.append(value)
    if not times:
        raise TraceError(f"{path}: no requests after the header")
    if c_idx is not None:
        mean = sum(costs) / len(costs)
        if mean <= 0:
            raise TraceError(f"{path}: column {cost_column} sums to zero; cannot weight requests by it")
        costs = [c / mean for c in costs]
    else:
        costs = [1.0] * len(times)
    return Arrivals(times, [1.0] * len(times), costs, str(path))


def _load_jsonl(path: Path) -> Arrivals:
    times: list[float] = []
    counts: list[float] = []
    costs: list[float] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text: {exc.reason}") from exc
    for no, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}: line {no}, column {exc.colno}: invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise TraceError(f'{path}: line {no}: expected an object like {{"t": 0.5, "cost": 1}}')

        def num(key: str, default: float | None, line: int = no, o: dict[str, Any] = obj) -> float:
            if key not in o:
                if default is None:
                    raise TraceError(f"{path}: line {line}: missing key {key!r}")
                return default
            v = o[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise TraceError(f"{path}: line {line}, key {key!r}: expected a number >= 0, got {v!r}")
            return float(v)

        t = num("t", None)
        count = num("count", 1.0)
        times.append(t)
        counts.append(count)
        costs.append(num("cost", count))
    if not times:
        raise TraceError(f"{path}: no requests")
    return Arrivals(times, counts, costs, str(path))


def load_trace(path: str | Path, cost_column: str | None = None) -> Arrivals:
    """Parse a CSV or JSONL trace (chosen by extension, else by the first character)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        jsonl = True
    elif suffix == ".csv":
        jsonl = False
    else:
        try:
            with p.open() as fh:
                head = fh.read(64).lstrip()
        except OSError as exc:
            raise TraceError(f"{p}: cannot read trace: {exc.strerror or exc}") from exc
        jsonl = head.startswith("{")
    if jsonl:
        if cost_column is not None:
            raise TraceError(f"{p}: --cost-column applies to CSV traces; JSONL lines carry their own 'cost'")
        return _load_jsonl(p)
    return _load_csv(p, cost_column)


def _moving_average(x: np.ndarray[Any, np.dtype[np.float64]], width: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    if width <= 1 or len(x) == 0:
        return x
    kernel = np.ones(width) / width
    out: np.ndarray[Any, np.dtype[np.float64]] = np.convolve(x, kernel, mode="same")
    return out


def to_series(arrivals: Arrivals, *, scale: float = 1.0, smooth_seconds: float = 10.0) -> LoadSeries:
    """Bin arrivals per second from the first arrival, scale, smooth."""
    if scale <= 0 or not math.isfinite(scale):
        raise TraceError(f"--scale must be a positive number, got {scale}")
    t0 = min(arrivals.times)
    rel = np.asarray(arrivals.times, dtype=float) - t0
    n = math.floor(float(rel.max())) + 1
    idx = np.minimum(rel.astype(int), n - 1)
    cost = np.asarray(
        np.bincount(idx, weights=np.asarray(arrivals.costs, dtype=float), minlength=n) * scale,
        dtype=np.float64,
    )
    reqs = np.asarray(
        np.bincount(idx, weights=np.asarray(arrivals.counts, dtype=float), minlength=n) * scale,
        dtype=np.float64,
    )
    width = max(1, round(smooth_seconds))
    return LoadSeries(_moving_average(cost, width), _moving_average(reqs, width), name=Path(arrivals.path).name)


# --------------------------------------------------------------------------- service


def load_service(path: str | Path) -> tuple[str, RankingServiceSpec]:
    """A RankingService manifest (YAML) -> (name, validated spec)."""
    p = Path(path)
    try:
        docs = [d for d in yaml.safe_load_all(p.read_text()) if d is not None]
    except OSError as exc:
        raise TraceError(f"{p}: cannot read service: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise TraceError(f"{p}: {where}invalid YAML: {getattr(exc, 'problem', exc)}") from None
    docs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "RankingService"]
    if not docs:
        raise TraceError(f"{p}: no RankingService document (kind: RankingService)")
    doc = docs[0]
    name = str((doc.get("metadata") or {}).get("name", "rankingservice"))
    try:
        spec = RankingServiceSpec.model_validate(doc.get("spec") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise TraceError(f"{p}: spec.{loc}: {first['msg']}") from None
    return name, spec


# --------------------------------------------------------------------------- simulation


@dataclass
class PoolResult:
    """What one policy did over the run."""

    name: str
    gpu_hours: float
    slo_violation_minutes: int
    direction_changes_per_hour: float
    peak_replicas: int
    scaling_events: int
    mean_replicas: float
    replicas_per_minute: list[float]
    p99_ms_per_minute: list[float | None]
    sm_active_per_minute: list[float]
    events: list[tuple[float, int, int, str]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "gpu_hours": round(self.gpu_hours, 3),
            "slo_violation_minutes": self.slo_violation_minutes,
            "direction_changes_per_hour": round(self.direction_changes_per_hour, 2),
            "peak_replicas": self.peak_replicas,
            "scaling_events": self.scaling_events,
            "mean_replicas": round(self.mean_replicas, 2),
        }


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
    max_replicas: int | None = None  # the spec's autoscaling.maxReplicas, marked on the plot

    @property
    def minutes(self) -> int:
        return len(self.load_per_minute)

    def to_dict(self, timeline: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "duration_seconds": self.duration_seconds,
            "service": self.service,
            "trace": self.trace,
            "scale": self.scale,
            "slo_p99_ms": self.slo_ms,
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
                rows.append(row)
            out["timeline"] = rows
        return out

    def to_table(self) -> str:
        hours = self.duration_seconds / 3600
        lines = [
            f"replay of {self.trace} (x{self.scale:g}) against RankingService {self.service}: "
            f"{hours:.2f} h, SLO p99 <= {self.slo_ms:g} ms, replica ready {self.model.startup_seconds:g} s "
            "after creation",
            f"{'pool':<12} {'GPU-h':>8} {'vs static':>9} {'SLO-viol min':>12} {'viol %':>7} "
            f"{'dir chg/h':>9} {'events':>6} {'peak':>5} {'mean':>6}",
        ]
        static = self.results[STATIC_PEAK].gpu_hours
        for k in POOLS:
            r = self.results[k]
            saving = f"{(r.gpu_hours / static - 1) * 100:+.0f}%" if static > 0 else "n/a"
            pct = 100 * r.slo_violation_minutes / max(1, self.minutes)
            lines.append(
                f"{k:<12} {r.gpu_hours:>8.2f} {saving:>9} {r.slo_violation_minutes:>12d} {pct:>6.1f}% "
                f"{r.direction_changes_per_hour:>9.2f} {r.scaling_events:>6d} {r.peak_replicas:>5d} "
                f"{r.mean_replicas:>6.1f}"
            )
        lines.append("('vs static' is the GPU-hour change against static peak provisioning; negative is fewer)")
        return "\n".join(lines)


Decide = Callable[[float, Pool, "Window"], int]


@dataclass
class Window:
    """Per-second history the autoscalers read at a sync (mean over the last interval)."""

    sm: list[float]
    requests: list[float]

    def mean(self, which: Literal["sm", "requests"], since: int, until: int) -> float:
        seq = self.sm if which == "sm" else self.requests
        part = seq[max(0, since) : until]
        return sum(part) / len(part) if part else 0.0


def _observation(
    pool: Pool,
    now: float,
    per_pod: float | None,
    gpus: int,
    free_gpus: int | None,
    queue_seconds: float | None = None,
) -> Observation:
    ready = pool.ready_pods(now)
    pods = [PodState(name=f"pod-{i}", ready=r, model_loaded=r) for i, r in enumerate(ready)]
    samples: dict[str, PodSample] = {}
    if per_pod is not None:
        samples = {p.name: PodSample(per_pod, now) for p in pods if p.serving}
    reading = MetricReading(samples=samples) if samples else MetricReading.unavailable("no Ready pods reporting")
    queue = None
    if queue_seconds is not None:
        queue = MetricReading(samples={p.name: PodSample(queue_seconds, now) for p in pods if p.serving})
    free = None if free_gpus is None else max(0, free_gpus - len(pool.created) * gpus)
    return Observation(
        current_replicas=len(pool.created),
        pods=pods,
        metrics=reading,
        gpus_per_replica=gpus,
        free_gpus=free,
        queue=queue,
    )


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
) -> ReplayReport:
    """Run the three pools over `load` (per-second series) and collect the report.

    `rps_utilisation` replaces the RPS baseline's target utilisation (default: the one the SM
    target means), so a benchmark can compare the two at equal GPU-hours.
    """
    a = spec.autoscaling
    seconds = load.seconds
    minutes = max(1, math.ceil(seconds / 60))
    cost = load.cost.tolist()
    reqs = load.requests.tolist()
    target_util = model.utilisation_for_sm(a.target_sm_active)
    per_replica_at_target = target_util * model.throughput_per_replica
    # Peak minute of load, sized at the target utilisation.
    minute_load = [sum(cost[m * 60 : (m + 1) * 60]) / len(cost[m * 60 : (m + 1) * 60]) for m in range(minutes)]
    minute_reqs = [sum(reqs[m * 60 : (m + 1) * 60]) / len(reqs[m * 60 : (m + 1) * 60]) for m in range(minutes)]
    static_n = max(1, math.ceil(max(cost) / per_replica_at_target - 1e-9))
    start_n = min(a.max_replicas, max(a.min_replicas, math.ceil(minute_load[0] / per_replica_at_target - 1e-9)))
    sync_every = max(1, round(sync_seconds))
    gpus = spec.gpus_per_replica

    def sm_rule(state_box: list[ScalerState]) -> Decide:
        def decide(now: float, pool: Pool, win: Window) -> int:
            t = int(now)
            per_pod = win.mean("sm", t - sync_every, t) if pool.ready_count(now) else None
            # The ranking server's queue gauge over its completion rate: seconds of queued work per
            # pod, as scraped at the sync (the fluid queue is spread evenly over the Ready pods).
            queue_s = pool.queue_seconds(now) if a.metrics.queue.enabled else None
            obs = _observation(pool, now, per_pod, gpus, cluster_gpus, queue_s)
            d = desired_replicas(a, state_box[0], obs, now)
            state_box[0] = d.state
            return d.desired_replicas

        return decide

    # The RPS baseline's per-replica target: the requests/s one replica serves at the same target
    # utilisation, calibrated with hindsight on the run's mean cost per request (the best fixed
    # calibration an operator could pick for this trace; a request-count signal cannot follow drift).
    total_reqs = float(sum(reqs))
    cost_per_request = float(sum(cost)) / total_reqs if total_reqs > 0 else 1.0
    rps_util = target_util if rps_utilisation is None else rps_utilisation
    target_rps = rps_util * model.throughput_per_replica / (cost_per_request if cost_per_request > 0 else 1.0)

    def rps_rule(state_box: list[ScalerState]) -> Decide:
        # Same algorithm; the metric is requests/s per Ready pod, expressed against the SM target
        # so the HPA ratio metric/target is rps_per_pod / target_rps.

        def decide(now: float, pool: Pool, win: Window) -> int:
            t = int(now)
            ready = pool.ready_count(now)
            per_pod = None
            if ready:
                rps = win.mean("requests", t - sync_every, t) / ready
                per_pod = rps / target_rps * a.target_sm_active
            obs = _observation(pool, now, per_pod, gpus, cluster_gpus)
            d = desired_replicas(a, state_box[0], obs, now, saturation=None)
            state_box[0] = d.state
            return d.desired_replicas

        return decide

    rules: dict[str, tuple[Decide | None, int]] = {
        POLICY: (sm_rule([ScalerState()]), start_n),
        STATIC_PEAK: (None, static_n),
        HPA_RPS: (rps_rule([ScalerState()]), start_n),
    }
    results: dict[str, PoolResult] = {}
    for name, (decide, initial) in rules.items():
        results[name] = run_pool(name, decide, initial, cost, reqs, model, sync_every, spec.slo.p99_latency_ms, gpus)
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
        max_replicas=spec.autoscaling.max_replicas,
    )


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
) -> PoolResult:
    """Serve `cost` second by second with one pool; `decide` (None: fixed size) is called every sync."""
    pool = Pool(model)
    pool.created = [-model.startup_seconds] * initial  # warm: ready at t=0
    win = Window(sm=[], requests=reqs)
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
        _, sm, p99 = pool.step(cost[t], now, 1.0)
        win.sm.append(sm)
        p99s.append(p99)
        reps.append(len(pool.created))
    minutes = max(1, math.ceil(len(cost) / 60))
    p99_min: list[float | None] = []
    rep_min: list[float] = []
    sm_min: list[float] = []
    violations = 0
    for m in range(minutes):
        sl = slice(m * 60, (m + 1) * 60)
        weights = cost[sl]
        if sum(weights) > 0:
            q = weighted_quantile(p99s[sl], weights, 0.99)
            p99_min.append(q)
            if q > slo_ms:
                violations += 1
        else:
            p99_min.append(None)
        rep_min.append(sum(reps[sl]) / len(reps[sl]))
        sm_min.append(sum(win.sm[sl]) / len(win.sm[sl]))
    changes = sum(1 for a, b in itertools.pairwise(events) if a[3] != b[3])
    hours = len(cost) / 3600
    return PoolResult(
        name=name,
        gpu_hours=pool.gpu_seconds * gpus / 3600,
        slo_violation_minutes=violations,
        direction_changes_per_hour=changes / hours if hours > 0 else 0.0,
        peak_replicas=max(reps) if reps else 0,
        scaling_events=len(events),
        mean_replicas=sum(reps) / len(reps) if reps else 0.0,
        replicas_per_minute=rep_min,
        p99_ms_per_minute=p99_min,
        sm_active_per_minute=sm_min,
        events=events,
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
) -> ReplayReport:
    """Replay `trace` against the RankingService in `service`. Raises TraceError / ProfileError."""
    name, spec = load_service(service)
    model = ServiceModel.load(profile) if profile is not None else ServiceModel()
    arrivals = load_trace(trace, cost_column)
    series = to_series(arrivals, scale=scale, smooth_seconds=smooth_seconds)
    return simulate(
        series,
        spec,
        model,
        service=name,
        trace=Path(trace).name,
        scale=scale,
        sync_seconds=sync_seconds,
        cluster_gpus=cluster_gpus,
    )


def plot_report(
    report: ReplayReport,
    path: str | Path,
    title: str | None = None,
    zoom: tuple[int, int] | None = None,
) -> Path:
    """Write a PNG: load, replicas per pool, p99 per minute vs the SLO.

    `zoom` = (first minute, last minute) adds a bottom row showing replicas and p99 in that window
    (e.g. around a flash crowd in a day-long run).
    """
    import matplotlib.pyplot as plt

    fig = replay_figure(report, title, zoom)
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _outside_legend(ax: Any) -> None:
    """Legends beside the plot, never over the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)


def replay_figure(report: ReplayReport, title: str | None = None, zoom: tuple[int, int] | None = None) -> Any:
    """The figure `plot_report` writes (a matplotlib Figure; the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = np.arange(report.minutes)
    hours_axis = report.minutes > 180
    x = minutes / 60 if hours_axis else minutes
    xlabel = "time (hours)" if hours_axis else "time (minutes)"
    colours = {POLICY: "tab:blue", HPA_RPS: "tab:orange", STATIC_PEAK: "tab:gray"}
    labels = {POLICY: "SM-active policy", HPA_RPS: "HPA on RPS", STATIC_PEAK: "static peak"}
    order = (STATIC_PEAK, HPA_RPS, POLICY)
    rows = 4 if zoom else 3
    fig = plt.figure(figsize=(11, 3 * rows), constrained_layout=True)
    axes = fig.subplots(rows, 1)
    for ax in axes[1:3]:
        ax.sharex(axes[0])

    ax = axes[0]
    ax.plot(x, report.load_per_minute, color="black", lw=1.2, label="load (cost units/s)")
    ax.plot(x, report.requests_per_minute, color="tab:green", lw=0.8, ls="--", label="requests/s")
    ax.set_ylabel("load per second")
    _outside_legend(ax)
    ax.set_title(title or f"{report.trace} x{report.scale:g} -> RankingService {report.service}")

    ax = axes[1]
    for k in order:
        r = report.results[k]
        ax.plot(
            x,
            r.replicas_per_minute,
            color=colours[k],
            lw=1.4 if k == POLICY else 1.0,
            label=f"{labels[k]}: {r.gpu_hours:.1f} GPU-h",
        )
    if report.max_replicas is not None:
        ax.axhline(report.max_replicas, color="red", ls=":", lw=1.0, label=f"maxReplicas {report.max_replicas}")
    ax.set_ylabel("replicas (GPUs held)")
    _outside_legend(ax)

    ax = axes[2]
    for k in order:
        r = report.results[k]
        y = [np.nan if v is None else v for v in r.p99_ms_per_minute]
        ax.plot(
            x,
            y,
            color=colours[k],
            lw=1.4 if k == POLICY else 1.0,
            label=f"{labels[k]}: {r.slo_violation_minutes} min over SLO",
        )
    ax.axhline(report.slo_ms, color="red", ls=":", lw=1.2, label=f"SLO p99 {report.slo_ms:g} ms")
    ax.set_yscale("log")
    ax.set_ylabel("p99 per minute (ms)")
    ax.set_xlabel(xlabel)
    _outside_legend(ax)

    if zoom:
        lo, hi = max(0, zoom[0]), min(report.minutes, zoom[1])
        zx = np.arange(lo, hi)
        ax = axes[3]
        twin = ax.twinx()
        for k in order:
            r = report.results[k]
            ax.step(
                zx,
                r.replicas_per_minute[lo:hi],
                where="post",
                color=colours[k],
                lw=1.4 if k == POLICY else 1.0,
                label=f"{labels[k]} replicas",
            )
            y = [np.nan if v is None else v for v in r.p99_ms_per_minute[lo:hi]]
            twin.plot(zx, y, color=colours[k], ls="--", marker=".", lw=0.9)
        twin.axhline(report.slo_ms, color="red", ls=":", lw=1.2)
        twin.set_yscale("log")
        twin.set_ylabel("p99 per minute (ms, dashed)")
        load = np.asarray(report.load_per_minute[lo:hi])
        peak = max(1.0, float(load.max()))
        ax.fill_between(
            zx,
            0,
            load / peak * max(r.peak_replicas for r in report.results.values()),
            color="black",
            alpha=0.08,
            step="post",
            label="load (scaled)",
        )
        ax.set_ylabel("replicas (solid)")
        ax.set_xlabel(f"minute of the run (zoom on minutes {lo}-{hi})")
        _outside_legend(ax)
    return fig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gemop replay", description="Replay a trace against the autoscaling policy.")
    p.add_argument("--trace", required=True, help='CSV with a TIMESTAMP column, or JSONL {"t", "cost"}')
    p.add_argument("--service", required=True, help="RankingService manifest (YAML)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the load, keeping the time axis")
    p.add_argument("--profile", help="JSON service profile replacing the model's defaults")
    p.add_argument("--cost-column", help="CSV column that weights each request's cost")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", help="write a PNG to this path")
    p.add_argument("--sync-seconds", type=float, default=15.0, help="autoscaler period (default 15)")
    p.add_argument("--smooth-seconds", type=float, default=10.0, help="moving average of the load (default 10)")
    p.add_argument("--cluster-gpus", type=int, help="GPUs in the cluster (caps scale-up); default unlimited")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """`gemop replay` entry point. Returns the exit status (2 for bad input)."""
    args = build_parser().parse_args(argv)
    if args.plot and not Path(args.plot).expanduser().resolve().parent.is_dir():
        folder = Path(args.plot).expanduser().resolve().parent
        print(f"gemop replay: --plot {args.plot}: folder {folder} does not exist; create it first", file=sys.stderr)
        return 2
    try:
        report = run_replay(
            args.trace,
            args.service,
            scale=args.scale,
            profile=args.profile,
            cost_column=args.cost_column,
            sync_seconds=args.sync_seconds,
            smooth_seconds=args.smooth_seconds,
            cluster_gpus=args.cluster_gpus,
        )
    except (TraceError, ProfileError) as exc:
        print(f"gemop replay: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.to_table())
    if args.plot:
        try:
            plot_report(report, args.plot)
        except OSError as exc:
            print(f"gemop replay: --plot {args.plot}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return 1
        if args.output == "table":
            print(f"plot written to {args.plot}")
    return 0


__all__ = [
    "HPA_RPS",
    "POLICY",
    "STATIC_PEAK",
    "Arrivals",
    "LoadSeries",
    "PoolResult",
    "ReplayReport",
    "TraceError",
    "Window",
    "build_parser",
    "load_service",
    "load_trace",
    "main",
    "plot_report",
    "run_pool",
    "run_replay",
    "simulate",
    "to_series",
]
