"""Closed loop vs fluid model: `gemop loadtest` on two 15-minute segments, three pools each.

Run:  python bench/closed_loop.py [--segments shared,diurnal] [--pools policy,static,hpa-rps]
                                  [--minutes 15] [--peak-replicas 12] [--json FILE]
      python bench/closed_loop.py --resimulate FILE   # the fluid model again, on a saved run

Segments: minutes 14-29 of the shared Azure trace (bursty, with idle minutes), a synthetic
diurnal-with-flash segment (a compressed day: sin^2 from 35 % to 100 % of the peak rate, plus a
60 s flash crowd at 1.6x in minute 9), and (`--segments conversation`) a smooth conversation-like
segment (one slow swing of +-30 % around its mean, Poisson arrivals). Each is scaled so that its
peak minute needs at least `--peak-replicas` emulated replicas at the service's target
utilisation. For every pool (built-in policy, static peak, HPA on requests/s), real ranking servers
run as processes (emulated device: bench/loadtest-rankingservice.yaml), with honest pod start
(process start, real `gem-load pull` from a local origin, model load), Debian's Prometheus and the
real operator.

Prints per segment: GPU-hours, SLO-violation minutes and direction changes per pool, measured by
the client; the same from `gemop replay` on the same segment ("simulated"); the gap
|closed - simulated| / closed for GPU-hours and violation minutes (flagged over 25 %); and what
the machine held (peak RSS and CPU of the server processes). The gap is printed for each of the
fluid model's latency models (round-robin: the default; single-server M/D/1 and the batching
curve: what earlier runs compared with). `--resimulate FILE` recomputes only the fluid side from
a saved `--json` run (same segments, its measured pod start and static size), so a change to the
fluid model is checked against the same measured loop without running it again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "bench" / "loadtest-rankingservice.yaml"
TRACE = ROOT / "data" / "traces" / "azure-llm-2023-code.csv"
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def diurnal_with_flash(path: Path, minutes: float, peak_rps: float, seed: int = 3) -> Path:
    """Poisson arrivals at rate peak * (0.35 + 0.65 sin^2(pi t / T)), x1.6 during minute 9."""
    rng = random.Random(seed)
    span = minutes * 60
    t, rows = 0.0, []
    top = peak_rps * 1.6
    while True:
        t += rng.expovariate(top)
        if t >= span:
            break
        rate = peak_rps * (0.35 + 0.65 * math.sin(math.pi * t / span) ** 2)
        if 9 * 60 <= t < 10 * 60 and minutes >= 10:
            rate *= 1.6
        if rng.random() < rate / top:  # thinning: an inhomogeneous Poisson process
            rows.append(json.dumps({"t": round(t, 4), "cost": 1}))
    path.write_text("\n".join(rows) + "\n")
    return path


def conversation_segment(path: Path, minutes: float, peak_rps: float, seed: int = 5) -> Path:
    """Smooth conversation-like Poisson arrivals: rate peak / 1.3 * (1 + 0.3 sin(2 pi t / T + phase)).

    The per-minute rate stays within +-30 % of its mean over the segment (one slow swing), as the
    replay bench's conversation family does, without its flash crowds or bursts.
    """
    rng = random.Random(seed)
    span = minutes * 60
    phase = rng.uniform(0, 2 * math.pi)
    t, rows = 0.0, []
    while True:
        t += rng.expovariate(peak_rps)
        if t >= span:
            break
        rate = peak_rps / 1.3 * (1 + 0.3 * math.sin(2 * math.pi * t / span + phase))
        if rng.random() < rate / peak_rps:  # thinning: an inhomogeneous Poisson process
            rows.append(json.dumps({"t": round(t, 4), "cost": 1}))
    path.write_text("\n".join(rows) + "\n")
    return path


class ProcessSampler:
    """Peak total RSS and mean CPU of the ranking-server processes, from /proc, every 2 s."""

    def __init__(self) -> None:
        self.peak_rss = 0
        self.peak_count = 0
        self.cpu: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _servers(self) -> dict[int, tuple[int, int]]:
        out = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"gem_workloads.serving" not in cmd or b"--device" not in cmd:
                    continue
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
                out[int(pid)] = (int(stat[11]) + int(stat[12]), rss)
            except (OSError, ValueError, IndexError):
                continue
        return out

    def _run(self) -> None:
        before, t0 = self._servers(), time.monotonic()
        while not self._stop.wait(2.0):
            now, t1 = self._servers(), time.monotonic()
            self.peak_rss = max(self.peak_rss, sum(r for _, r in now.values()))
            self.peak_count = max(self.peak_count, len(now))
            ticks = sum(c - before[p][0] for p, (c, _) in now.items() if p in before)
            self.cpu.append(ticks / CLK / max(t1 - t0, 1e-6))
            before, t0 = now, t1

    def __enter__(self) -> ProcessSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def gap(closed: float, simulated: float) -> float | None:
    if closed == 0:
        return None if simulated == 0 else math.inf
    return abs(closed - simulated) / abs(closed)


SIMULATED = {
    "round-robin": "simulated",
    "single-server": "simulated_single_server",
    "batching": "simulated_batching_curve",
}


def fmt_gap(x: float | None) -> str:
    if x is None:
        return "n/a (both 0)"
    return f"{x * 100:.0f} %" + ("  <-- over 25 %" if x > 0.25 else "")


def print_gaps(report: dict[str, Any]) -> None:
    """Closed loop vs each fluid latency model: GPU-hours and violation minutes per pool."""
    pools = {"policy": report.get("policy"), **report.get("baselines", {})}
    for latency, key in SIMULATED.items():
        sim = report.get(key)
        if not sim:
            continue
        print(f"  fluid model, {latency} latency:")
        for pool, fig in pools.items():
            if fig is None:
                continue
            s = sim["policy"] if pool == "policy" else sim["baselines"][pool]
            g_gpu = gap(fig["gpu_hours"], s["gpu_hours"])
            g_viol = gap(fig["slo_violation_minutes"], s["slo_violation_minutes"])
            print(
                f"    {pool:<12} GPU-h {fig['gpu_hours']:.2f} vs {s['gpu_hours']:.2f} ({fmt_gap(g_gpu)}), "
                f"violation min {fig['slo_violation_minutes']} vs {s['slo_violation_minutes']} ({fmt_gap(g_viol)}); "
                f"warm-up {fig.get('warmup_violation_minutes', 0)} vs {s.get('warmup_violation_minutes', 0)}"
            )


def segment_of(name: str, args: argparse.Namespace, need_rps: float, work: Path) -> tuple[Path, float, float]:
    """(trace, start minute, scale) of a named segment."""
    from gem_testbed.drivers.loadtest import cut_segment

    if name == "shared":
        peak = cut_segment(TRACE, args.start_minute, args.minutes, 1.0).peak_rps()
        return TRACE, args.start_minute, need_rps / peak
    if name == "diurnal":
        return diurnal_with_flash(work / "diurnal.jsonl", args.minutes, need_rps / 1.6), 0.0, 1.0
    if name == "conversation":
        return conversation_segment(work / "conversation.jsonl", args.minutes, need_rps), 0.0, 1.0
    raise SystemExit(f"unknown segment {name!r}: choose shared, diurnal or conversation")


def rejudge(report: dict[str, Any], warm: int) -> None:
    """Count the closed loop's violation minutes after the same warm-up as the fluid side's."""
    slo = float(report["slo_p99_ms"])
    pools = {"policy": report.get("policy"), **report.get("baselines", {})}
    for pool, fig in pools.items():
        if fig is None:
            continue
        over = [
            row["minute"] < warm
            for row in report["timeline"]
            if (cell := row.get(pool)) and (cell.get("p99_is_miss") or (cell.get("p99_ms") or 0) > slo)
        ]
        fig["slo_violation_minutes"] = over.count(False)
        fig["warmup_violation_minutes"] = over.count(True)
    report["warmup_minutes"] = warm


def resimulate(path: Path, args: argparse.Namespace, need_rps: float, work: Path) -> int:
    """The fluid side again, with today's model, on the segments and measurements of a saved run."""
    from gem_operator.replay.engine import load_service
    from gem_testbed.drivers.loadtest import cut_segment, simulate_segment

    reports = json.loads(path.read_text())
    _, spec = load_service(SERVICE)
    for name, report in reports.items():
        trace, start, scale = segment_of(name, args, need_rps, work)
        segment = cut_segment(trace, start, report["duration_seconds"] / 60.0, scale)
        startup = float(report["service_model"]["pod_start_seconds"])
        # A run of the policy pool alone (--pools policy) has no static pool: the size its replay was given.
        ran = report["baselines"].get("static_peak") or report["simulated"]["baselines"]["static_peak"]
        static_n = int(ran["peak_replicas"])
        sims = simulate_segment(segment, SERVICE, spec, 16, startup, static_n, work / f"resim-{name}")
        for latency, key in SIMULATED.items():
            report[key] = sims[latency].to_dict(timeline=False)
        rejudge(report, sims["round-robin"].warmup_minutes)
        print(f"{name}: pod start {startup:.1f} s (measured), static pool {static_n}")
        print_gaps(report)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", default="shared,diurnal")
    ap.add_argument("--pools", default="policy,static,hpa-rps")
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--start-minute", type=float, default=14.0, help="of the shared trace")
    ap.add_argument("--peak-replicas", type=int, default=12)
    ap.add_argument("--json", type=Path, help="write every report here")
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument(
        "--resimulate",
        type=Path,
        help="a saved --json run: recompute only the fluid model's figures (give the flags it ran with: "
        "--minutes, --peak-replicas and --start-minute rebuild its segments)",
    )
    args = ap.parse_args()

    import signal

    from gem_operator.replay.engine import load_service

    def interrupt(*_: object) -> None:  # SIGTERM unwinds like Ctrl-C: every process started is stopped
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    from gem_testbed.drivers.loadtest import LoadtestOptions, device_service_model, run_loadtest, to_table

    _, spec = load_service(SERVICE)
    model = device_service_model(spec, 16, 16, 30.0)
    per_replica = model.utilisation_for_sm(spec.autoscaling.target_sm_active) * model.throughput_per_replica
    need_rps = args.peak_replicas * per_replica * 1.02
    work = args.work_dir or Path(f"/tmp/gem-closed-loop-{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    reports: dict[str, Any] = {}
    if args.resimulate:
        return resimulate(args.resimulate, args, need_rps, work)
    for name in [s for s in args.segments.split(",") if s]:
        trace, start, scale = segment_of(name, args, need_rps, work)
        opts = LoadtestOptions(
            trace=trace,
            service=SERVICE,
            minutes=args.minutes,
            start_minute=start,
            scale=scale,
            pools=tuple(args.pools.split(",")),
            work_dir=work / name,
        )
        t0 = time.monotonic()
        with ProcessSampler() as sampler:
            report = run_loadtest(opts, lambda line: print(line, flush=True))
        report["machine"] = {
            "peak_server_processes": sampler.peak_count,
            "peak_server_rss_mib": round(sampler.peak_rss / 2**20),
            "mean_server_cpu_cores": round(sum(sampler.cpu) / max(1, len(sampler.cpu)), 2),
            "wall_seconds": round(time.monotonic() - t0),
        }
        reports[name] = report
        print(to_table(report))
        pools = {"policy": report.get("policy"), **report.get("baselines", {})}
        print_gaps(report)
        if "policy" in pools and "static_peak" in pools and pools["static_peak"]:
            ratio = pools["policy"]["gpu_hours"] / pools["static_peak"]["gpu_hours"]
            print(f"  policy / static GPU-hours: {ratio:.2f}")
        print(f"  machine: {report['machine']}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
