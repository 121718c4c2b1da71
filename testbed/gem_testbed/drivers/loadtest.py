"""`gemop loadtest`: autoscaling under replayed traffic, for real, on one machine.

    gemop loadtest --trace TRACE --service RKS.yaml [--minutes M] [--start-minute S] [--scale X]
                   [--pools policy,static,hpa-rps] [--origin-rate R] [--output table|json]
                   [--plot FILE.png]

For each pool, a fresh embedded cluster whose process kubelet runs the RankingService's pods as
real ranking servers (``--device emulated:...`` in the service's ``workload.args``: an emulated
accelerator, so replicas add capacity on a few cores), each pulling its model with the real
``gem-load pull`` from a local origin; Debian's Prometheus scraping the node dcgm-exporters and the
servers through file_sd; the real operator (``gemop run``, a subprocess) reading that Prometheus;
and the real replayer (``python -m gem_workloads.replay``) sending the trace segment over HTTP to
the Service front. Every figure comes from the client's own per-request records and from the
replicas the cluster held:

- ``gpu_hours``: replica-seconds held (pods from creation to deletion, starting ones included)
  times GPUs per replica;
- ``slo_violation_minutes``: minutes whose client p99 (errors, 503s and timeouts count as misses,
  i.e. as infinitely slow) exceeds ``spec.slo.p99LatencyMs``;
- ``direction_changes_per_hour`` (the most direction changes in any hour of the run, all of them in
  a shorter run), ``peak_replicas``, ``requests``, ``errors``, and a per-minute
  timeline.

Pools: ``policy`` (the built-in autoscaler as the spec configures it), ``static`` (autoscaling off,
replicas sized for the segment's peak at the target utilisation), ``hpa-rps`` (the HPA algorithm on
requests/s per Ready pod read from the same Prometheus, every 15 s, with the same windows and
rate limits; it writes ``spec.replicas`` as an HPA writes the scale subresource).
``"simulated"``: `gemop replay` on the same segment and service, with the fluid model built from
the same device profile and the pod start measured here, so the fluid model is checked against
reality in one run. Every process started here is stopped on exit, on error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gem_common.argtypes import non_negative_float, positive_float, positive_int
from gem_operator.api.serving import RankingServiceSpec
from gem_operator.replay.engine import (
    HPA_RPS,
    POLICY,
    STATIC_PEAK,
    TraceError,
    load_service,
    load_trace,
    static_pool,
)
from gem_operator.replay.report import most_in_an_hour
from gem_operator.replay.service_model import ServiceModel, single_server_p99_curve
from gem_operator.replay.traces import TraceFields, add_trace_arguments, time_note, trace_fields
from gem_testbed.drivers.closed_loop import (
    RPS_WINDOW_SECONDS,
    ClosedLoop,
    LoadtestError,
    PoolRun,
    Segment,
    hpa_rps_decider,
    python_env,
)
from gem_testbed.plots.loadtest import plot_loadtest
from gem_testbed.servers.origin import NginxOrigin, OriginError, parse_rate
from gem_testbed.servers.prometheus import PrometheusError

# Seconds of load before any autoscaler acts (its windows fill with load, as in the replay).
WARMUP_S = 35.0
POOL_FLAGS = {"policy": POLICY, "static": STATIC_PEAK, "hpa-rps": HPA_RPS}
GEM = "gem.dev/v1alpha1"


def _builtin_profile(name: str) -> Path:
    """The ranking server's built-in device profile (package data of gem_workloads, read as a file)."""
    import importlib.resources

    return Path(str(importlib.resources.files("gem_workloads.serving").joinpath("profiles", f"{name}.json")))


# --------------------------------------------------------------------------- inputs


def cut_segment(
    trace: str | Path,
    start_minute: float,
    minutes: float,
    scale: float,
    seed: int = 0,
    time_unit: str = "auto",
    fields: TraceFields | None = None,
) -> Segment:
    """Requests of the trace in [start, start + minutes), each one standing for `scale` requests
    in the same second (the reading `gemop replay --scale` takes), spread evenly within it.
    Numeric time stamps, the time field and the rows kept are read as `gemop replay --time-unit`,
    `--time-column` and `--where` read them."""
    if minutes <= 0 or start_minute < 0:
        raise TraceError(f"--minutes must be > 0 and --start-minute >= 0, got {minutes} and {start_minute}")
    if scale <= 0 or not math.isfinite(scale):
        raise TraceError(f"--scale must be a positive number, got {scale}")
    arrivals = load_trace(trace, time_unit=time_unit, fields=fields)
    t0 = min(arrivals.times)
    lo, hi = start_minute * 60.0, (start_minute + minutes) * 60.0
    rng = random.Random(seed)
    times: list[float] = []
    costs: list[float] = []
    for t, count, cost in zip(arrivals.times, arrivals.counts, arrivals.costs, strict=True):
        rel = t - t0
        if not lo <= rel < hi:
            continue
        copies = count * scale
        n = int(copies) + (1 if rng.random() < copies - int(copies) else 0)
        second = math.floor(rel - lo)
        for _ in range(n):
            times.append(second + rng.random())
            costs.append(cost / max(count, 1e-9))
    if not times:
        raise TraceError(f"{trace}: no requests between minute {start_minute:g} and {start_minute + minutes:g}")
    order = sorted(range(len(times)), key=times.__getitem__)
    note = time_note(arrivals, time_unit)
    return Segment([times[i] for i in order], [costs[i] for i in order], round(hi - lo), note)


def _flag(args: Sequence[str], name: str, default: str | None = None) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


LATENCY_MODELS = ("round-robin", "single-server", "batching")


def device_service_model(
    spec: RankingServiceSpec, candidates: int, seq_len: int, startup_s: float, *, latency: str = "round-robin"
) -> ServiceModel:
    """The fluid model of the emulated replicas the spec asks for (`gemop replay`'s `--profile`).

    One request per batch (``maxBatchSize: 1``) makes the device's busy fraction its utilisation,
    so the throughput is 1 / (service time of one request) and SM active = utilisation; pod start
    is measured. `latency` picks the p99 model: ``round-robin`` (fixed-time replicas fed in turn by
    the Service front, simulated request by request, `autoscaling.round_robin`: what the front
    does), ``single-server`` (M/D/1 whatever the pool size) or ``batching`` (the default curve's
    shape in units of the service time); the last two are what earlier closed loops were compared
    with, kept in the report to show the difference."""
    if latency not in LATENCY_MODELS:
        raise LoadtestError(f"latency model {latency!r}: choose one of {LATENCY_MODELS}")
    args = list(spec.workload.args)
    device = _flag(args, "--device", "")
    if not device or not device.startswith("emulated:"):
        raise LoadtestError("the service must run an emulated device: add `--device emulated:h200` to workload.args")
    profile_path = _flag(args, "--device-profile")
    path = Path(profile_path) if profile_path else _builtin_profile(device.split(":", 1)[1])
    try:
        profile = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LoadtestError(f"device profile {path}: {exc}") from exc
    scale = float(_flag(args, "--device-time-scale", "1") or 1)
    seconds = scale * _profile_seconds(profile, candidates, seq_len)
    batch = max(1, spec.max_batch_size)
    if batch != 1:
        raise LoadtestError(
            f"spec.maxBatchSize is {batch}: the load test's fluid model assumes one request per batch "
            "(set maxBatchSize: 1 so the emulated device's busy fraction is its utilisation)"
        )
    if latency == "batching":  # the default curve's shape (a batching GPU server), in units of the service time
        base = ServiceModel()
        curve = tuple((u, ms / base.latency_p99_ms[0][1] * seconds * 1000.0) for u, ms in base.latency_p99_ms)
    else:
        curve = single_server_p99_curve(seconds)
    return ServiceModel(
        throughput_per_replica=1.0 / seconds,
        latency_p99_ms=curve,
        service_seconds=seconds if latency == "round-robin" else 0.0,
        sm_active=((0.0, 0.0), (1.0, 1.0)),
        pod_start_seconds=startup_s,
        model_load_seconds=0.0,
        source=f"emulated device {path.name} x{scale:g}, {candidates} candidates, seq {seq_len}",
    )


def _profile_seconds(profile: Mapping[str, Any], candidates: int, seq_len: int) -> float:
    """Seconds of one one-request batch: the same bilinear rule as gem_workloads.serving.device."""

    def lerp(xs: Sequence[float], ys: Sequence[float], x: float, extrapolate: bool) -> float:
        if len(xs) == 1 or x <= xs[0]:
            return float(ys[0])
        if x >= xs[-1] and not extrapolate:
            return float(ys[-1])
        i = min(max(next((k for k, v in enumerate(xs) if v > x), len(xs) - 1), 1), len(xs) - 1)
        return float(ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1]))

    per_len = [lerp(profile["candidates"], row, candidates, True) for row in profile["seconds"]]
    return lerp(profile["seq_len"], per_len, seq_len, False)


# --------------------------------------------------------------------------- figures


def pool_figures(run: PoolRun, slo_ms: float, seconds: int, gpus: int, warmup_minutes: int = 0) -> dict[str, Any]:
    """The client-measured figures of one pool (see the module docstring).

    Minutes before `warmup_minutes` (first sync + pod start, as `gemop replay` counts them) are
    counted apart, in ``warmup_violation_minutes``, so both sides judge the same minutes."""
    minutes = max(1, math.ceil(seconds / 60))
    per_minute: list[list[float]] = [[] for _ in range(minutes)]
    errors_min = [0] * minutes
    for r in run.records:
        m = min(int(r["t"] // 60), minutes - 1)
        ok = r["status"] == "200" and r["ms"] is not None
        per_minute[m].append(float(r["ms"]) if ok else math.inf)
        errors_min[m] += 0 if ok else 1
    gpu_seconds = 0.0
    for a, b in zip(run.samples, run.samples[1:], strict=False):
        gpu_seconds += a.replicas * (b.t - a.t)
    timeline, violations, warm_violations = [], 0, 0
    held_min = [[s.replicas for s in run.samples if m * 60 <= s.t < (m + 1) * 60] for m in range(minutes)]
    ready_min = [[s.ready for s in run.samples if m * 60 <= s.t < (m + 1) * 60] for m in range(minutes)]
    for m in range(minutes):
        lat = sorted(per_minute[m])
        p99 = lat[min(len(lat) - 1, math.ceil(0.99 * len(lat)) - 1)] if lat else None
        if p99 is not None and p99 > slo_ms:
            if m < warmup_minutes:
                warm_violations += 1
            else:
                violations += 1
        timeline.append({
            "minute": m,
            "requests": len(lat),
            "errors": errors_min[m],
            "p99_ms": None if p99 is None else (None if math.isinf(p99) else round(p99, 1)),
            "p99_is_miss": bool(p99 is not None and math.isinf(p99)),
            "replicas": round(sum(held_min[m]) / len(held_min[m]), 2) if held_min[m] else 0,
            "ready": round(sum(ready_min[m]) / len(ready_min[m]), 2) if ready_min[m] else 0,
        })  # fmt: skip
    # (time, up?) of each change of the desired count; a direction change is one that turns.
    changes = [(b.t, b.desired > a.desired) for a, b in itertools.pairwise(run.samples) if b.desired != a.desired]
    turns = [b[0] for a, b in itertools.pairwise(changes) if a[1] != b[1]]
    return {
        "gpu_hours": round(gpu_seconds * gpus / 3600, 4),
        "slo_violation_minutes": violations,
        "slo_violation_pct_after_warmup": round(100 * violations / max(1, minutes - warmup_minutes), 2),
        "warmup_violation_minutes": warm_violations,
        "direction_changes_per_hour": float(most_in_an_hour(turns)),
        "peak_replicas": max((s.replicas for s in run.samples), default=0),
        "scaling_events": len(changes),
        "requests": len(run.records),
        "errors": sum(errors_min),
        "mean_startup_seconds": round(sum(run.startup_seconds) / len(run.startup_seconds), 1)
        if run.startup_seconds
        else None,
        "timeline": timeline,
    }


# --------------------------------------------------------------------------- the command


@dataclass
class LoadtestOptions:
    trace: Path
    service: Path
    minutes: float = 15.0
    start_minute: float = 0.0
    scale: float = 1.0
    pools: tuple[str, ...] = ("policy", "static", "hpa-rps")
    output: str = "table"
    plot: Path | None = None
    candidates: int = 16
    max_pod_processes: int = 20
    work_dir: Path | None = None
    fleet: str = "demo"
    ready_timeout: float = 300.0
    origin_rate: str = "20m"
    time_unit: str = "auto"
    fields: TraceFields = field(default_factory=TraceFields)


def prepare_origin(directory: Path) -> Path:
    """A model origin (model directory + manifest) written by the workloads' own helper."""
    if (directory / "manifest.json").exists():
        return directory
    result = subprocess.run(
        [sys.executable, "-m", "gem_workloads.serving.origin", str(directory), "--preset", "tiny"],
        env=python_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise LoadtestError(f"could not write the model origin: {result.stderr.strip()[-800:]}")
    return directory


def simulate_segment(
    segment: Segment,
    service: Path,
    spec: RankingServiceSpec,
    candidates: int,
    startup_s: float,
    static_n: int,
    work: Path,
) -> dict[str, Any]:
    """`gemop replay` on the segment under each latency model, with the measured pod start and the
    static pool as sized by the load test. Returns {latency model: ReplayReport}."""
    from gem_operator.replay.engine import run_replay

    work.mkdir(parents=True, exist_ok=True)
    segment_file = segment.write_jsonl(work / "segment.jsonl")
    sims: dict[str, Any] = {}
    for latency in LATENCY_MODELS:
        described = device_service_model(spec, candidates, 16, startup_s, latency=latency).describe()
        described.pop("source")
        profile = work / f"service-model-{latency}.json"
        profile.write_text(json.dumps(described))
        sims[latency] = run_replay(
            segment_file, service, profile=profile, static_replicas=static_n, rps_window_seconds=RPS_WINDOW_SECONDS
        )
    return sims


def run_loadtest(opts: LoadtestOptions, progress: Callable[[str], None]) -> dict[str, Any]:
    """All pools, one after another, then `gemop replay` on the same segment. Returns the report."""

    name, spec = load_service(opts.service)
    raw = next(d for d in yaml.safe_load_all(opts.service.read_text()) if d and d.get("kind") == "RankingService")
    segment = cut_segment(
        opts.trace, opts.start_minute, opts.minutes, opts.scale, time_unit=opts.time_unit, fields=opts.fields
    )
    model0 = device_service_model(spec, opts.candidates, 16, 30.0)
    target_util = model0.utilisation_for_sm(spec.autoscaling.target_sm_active)
    per_replica = target_util * model0.throughput_per_replica
    # As `gemop replay` sizes it: the segment's peak, never below minReplicas.
    peak_need = max(1, math.ceil(segment.peak_rps() / per_replica - 1e-9))
    static_n, _ = static_pool(peak_need, spec.autoscaling.min_replicas, None)
    first_minute = sum(1 for t in segment.times if t < 60) / 60.0
    start_n = min(
        spec.autoscaling.max_replicas, max(spec.autoscaling.min_replicas, math.ceil(first_minute / per_replica))
    )
    if max(static_n, spec.autoscaling.max_replicas) > opts.max_pod_processes:
        raise LoadtestError(
            f"the pools may need {max(static_n, spec.autoscaling.max_replicas)} replicas but at most "
            f"{opts.max_pod_processes} pods run as processes here: lower --scale or maxReplicas, or raise "
            "--max-pod-processes (each replica is a server process of a few hundred MB)"
        )
    tmp = None if opts.work_dir else tempfile.TemporaryDirectory(prefix="gem-loadtest-")
    work = Path(opts.work_dir) if opts.work_dir else Path(tmp.name)  # type: ignore[union-attr]
    stack = contextlib.ExitStack()
    try:
        origin_dir = prepare_origin(work / "origin")
        origin: Path | str = origin_dir
        rate = parse_rate(opts.origin_rate)
        if rate > 0:  # init containers pull over HTTP through nginx, as from an object store
            origin = stack.enter_context(NginxOrigin(origin_dir, rate=rate, work_dir=work / "nginx")).url
        progress(
            f"segment: {opts.minutes:g} min from minute {opts.start_minute:g} of {opts.trace.name}, x{opts.scale:g}: "
            f"{len(segment.times)} requests, peak {segment.peak_rps():.1f} req/s; replica capacity "
            f"{model0.throughput_per_replica:.1f} req/s; static pool {static_n}, autoscaled pools start at {start_n}"
            + (f"; {segment.time_note}" if segment.time_note else "")
        )
        runs: dict[str, PoolRun] = {}
        for flag in opts.pools:
            pool = POOL_FLAGS[flag]
            with ClosedLoop(raw, work / pool, origin, fleet=opts.fleet, max_processes=opts.max_pod_processes) as loop:
                initial = static_n if pool == STATIC_PEAK else start_n
                loop.apply(initial, autoscaling=False)  # autoscalers start once the load is on
                progress(f"[{flag}] starting {initial} replicas")
                loop.wait_ready(initial, opts.ready_timeout)
                decide = None
                if pool == HPA_RPS:
                    decide = hpa_rps_decider(spec, target_util * model0.throughput_per_replica)
                progress(f"[{flag}] replaying")
                on_warm = (lambda lp, n=initial: lp.apply(n, autoscaling=True)) if pool == POLICY else None
                runs[pool] = loop.replay(segment, pool=flag, candidates=opts.candidates, decide=decide,
                                         progress=progress, warmup_s=WARMUP_S, on_warm=on_warm)  # fmt: skip
        startups = [s for r in runs.values() for s in r.startup_seconds]
        startup = sum(startups) / len(startups) if startups else model0.startup_seconds
        sims = simulate_segment(segment, opts.service, spec, opts.candidates, startup, static_n, work)
        model = device_service_model(spec, opts.candidates, 16, startup)
        minutes = max(1, math.ceil(segment.seconds / 60))
        warm = sims["round-robin"].warmup_minutes
        report: dict[str, Any] = {
            "duration_seconds": segment.seconds,
            "service": name,
            "trace": opts.trace.name,
            **({"time_stamps": segment.time_note} if segment.time_note else {}),
            "start_minute": opts.start_minute,
            "scale": opts.scale,
            "slo_p99_ms": spec.slo.p99_latency_ms,
            "service_model": model.describe(),
            "warmup_minutes": warm,
            "baselines": {},
        }
        # Keys as `gemop replay --output json` has them: per-pool summaries, one timeline of minutes.
        timeline: list[dict[str, Any]] = [{"minute": m} for m in range(minutes)]
        for pool, run in runs.items():
            figures = pool_figures(
                run, spec.slo.p99_latency_ms, segment.seconds, spec.gpus_per_replica, warmup_minutes=warm
            )
            for row, per_pool in zip(timeline, figures.pop("timeline"), strict=False):
                row.setdefault("requests_per_s", round(per_pool["requests"] / 60.0, 2))
                row[pool] = {k: v for k, v in per_pool.items() if k != "minute"}
            if pool == POLICY:
                report["policy"] = figures
            else:
                report["baselines"][pool] = figures
        report["timeline"] = timeline
        report["simulated"] = sims["round-robin"].to_dict(timeline=False)
        report["simulated_single_server"] = sims["single-server"].to_dict(timeline=False)
        report["simulated_batching_curve"] = sims["batching"].to_dict(timeline=False)
        if opts.plot is not None:
            plot_loadtest(report, opts.plot)
        return report
    finally:
        stack.close()
        if tmp is not None:
            tmp.cleanup()


def to_table(report: Mapping[str, Any]) -> str:
    lines = [
        f"loadtest of {report['trace']} (minutes {report['start_minute']:g}+{report['duration_seconds'] / 60:g}, "
        f"x{report['scale']:g}) against RankingService {report['service']}: SLO p99 <= {report['slo_p99_ms']:g} ms",
        *([report["time_stamps"]] if report.get("time_stamps") else []),
        f"{'pool':<12} {'GPU-h':>8} {'sim GPU-h':>9} {'viol min':>8} {'sim viol':>8} {'warm-up':>7} "
        f"{'dir chg/h':>9} {'peak':>5} {'requests':>9} {'errors':>7}",
    ]
    sim = report.get("simulated") or {}
    pools = {POLICY: report.get("policy"), **report.get("baselines", {})}
    for pool, fig in pools.items():
        if fig is None:
            continue
        s = sim.get("policy") if pool == POLICY else (sim.get("baselines") or {}).get(pool)
        lines.append(
            f"{pool:<12} {fig['gpu_hours']:>8.3f} {(s or {}).get('gpu_hours', float('nan')):>9.3f} "
            f"{fig['slo_violation_minutes']:>8d} {(s or {}).get('slo_violation_minutes', -1):>8d} "
            f"{fig.get('warmup_violation_minutes', 0):>3d}/{(s or {}).get('warmup_violation_minutes', 0):<3d} "
            f"{fig['direction_changes_per_hour']:>9.2f} {fig['peak_replicas']:>5d} {fig['requests']:>9d} "
            f"{fig['errors']:>7d}"
        )
    lines.append(
        "(GPU-h and violation minutes measured by the client; 'sim' columns: `gemop replay` on the same segment; "
        f"violation minutes after the {report.get('warmup_minutes', 0)}-minute warm-up, warm-up ones as client/sim)"
    )
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("loadtest", help="real servers, Prometheus and operator under a replayed trace (one machine)")
    p.add_argument("--trace", type=Path, required=True, help='CSV with a TIMESTAMP column, or JSONL {"t", "cost"}')
    p.add_argument("--service", type=Path, required=True, help="RankingService manifest with an emulated device")
    p.add_argument("--minutes", type=positive_float, default=15.0, help="length of the segment (default 15)")
    p.add_argument("--start-minute", type=non_negative_float, default=0.0, help="where the segment starts in the trace")
    p.add_argument("--scale", type=positive_float, default=1.0, help="each request of the trace stands for X requests")
    add_trace_arguments(p)
    p.add_argument("--pools", default="policy,static,hpa-rps", help="comma-separated: policy, static, hpa-rps")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", type=Path, help="write replicas and client p99 per minute as a PNG")
    p.add_argument("--candidates", type=positive_int, default=16, help="candidates per request")
    p.add_argument("--max-pod-processes", type=positive_int, default=20, help="bound on pods run as processes")
    p.add_argument("--work-dir", type=Path, help="keep logs, records and pod output here")
    p.add_argument(
        "--origin-rate",
        default="20m",
        help="the model origin is served by nginx, each ranged GET capped at this many bytes/s "
        "(nginx's limit_rate, suffixes k/m/g; default 20m; lower stands for a larger model); "
        "0 pulls straight from the origin directory",
    )
    p.set_defaults(func=_cmd_loadtest)


def _cmd_loadtest(args: argparse.Namespace) -> int:
    pools = tuple(x.strip() for x in str(args.pools).split(",") if x.strip())
    unknown = [x for x in pools if x not in POOL_FLAGS]
    if unknown or not pools:
        print(f"gemop loadtest: --pools: unknown {unknown}; choose from {sorted(POOL_FLAGS)}", file=sys.stderr)
        return 2
    try:
        parse_rate(args.origin_rate)
    except OriginError as exc:
        print(f"gemop loadtest: --origin-rate: {exc}", file=sys.stderr)
        return 2
    if args.candidates < 1 or args.max_pod_processes < 1:
        print("gemop loadtest: --candidates and --max-pod-processes must be >= 1", file=sys.stderr)
        return 2
    try:
        fields = trace_fields(args)
    except TraceError as exc:
        print(f"gemop loadtest: {exc}", file=sys.stderr)
        return 2
    opts = LoadtestOptions(
        trace=args.trace, service=args.service, minutes=args.minutes, start_minute=args.start_minute,
        scale=args.scale, pools=pools, output=args.output, plot=args.plot, candidates=args.candidates,
        max_pod_processes=args.max_pod_processes, work_dir=args.work_dir, origin_rate=args.origin_rate,
        time_unit=args.time_unit, fields=fields,
    )  # fmt: skip
    stream = sys.stderr if args.output == "json" else sys.stdout
    try:
        with _terminate_on_sigterm():
            report = run_loadtest(opts, lambda line: print(line, file=stream, flush=True))
    except (TraceError, LoadtestError, PrometheusError, OriginError, ValueError) as exc:
        print(f"gemop loadtest: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gemop loadtest: interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
    if args.output == "json":
        print(json.dumps(report, indent=2))
    else:
        print(to_table(report))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


@contextlib.contextmanager
def _terminate_on_sigterm() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the finally blocks stop every process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = [
    "ClosedLoop",
    "LoadtestError",
    "LoadtestOptions",
    "PoolRun",
    "Segment",
    "add_parser",
    "cut_segment",
    "device_service_model",
    "hpa_rps_decider",
    "pool_figures",
    "run_loadtest",
    "to_table",
]
