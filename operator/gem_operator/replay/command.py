"""`gemop replay`: the command's flags and output around `engine.run_replay`.

What the replay simulates, and how, is in `engine.py` (each pool's autoscaler in `autoscalers.py`);
this module only reads the flags, prints the table or JSON, writes the plot through the testbed's
plotter, and turns bad input into exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gem_common.argtypes import positive_float, positive_int
from gem_operator import plugins
from gem_operator.replay.engine import run_replay
from gem_operator.replay.service_model import ProfileError
from gem_operator.replay.traces import SCALE_MODES, TREND_SECONDS, TraceError, add_trace_arguments, trace_fields


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gemop replay", description="Replay a trace against the autoscaling policy.")
    p.add_argument("--trace", required=True, help='CSV with a TIMESTAMP column, or JSONL {"t", "cost"}')
    p.add_argument("--service", required=True, help="RankingService manifest (YAML)")
    p.add_argument("--scale", type=positive_float, default=1.0, help="multiply the load, keeping the time axis")
    p.add_argument(
        "--scale-mode",
        choices=SCALE_MODES,
        default="independent",
        help="independent (default): X times as many independent users, fluctuations add in variance; "
        "duplicate: every request stands for X in the same second, bursts grow X-fold",
    )
    p.add_argument(
        "--trend-seconds",
        type=positive_float,
        default=TREND_SECONDS,
        help="independent mode: window of the trend all users share (default 300)",
    )
    p.add_argument("--profile", help="JSON service profile replacing the model's defaults")
    p.add_argument("--cost-column", help="CSV column that weights each request's cost")
    add_trace_arguments(p)
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", help="write a PNG to this path")
    p.add_argument("--sync-seconds", type=positive_float, default=15.0, help="autoscaler period (default 15)")
    p.add_argument(
        "--smooth-seconds",
        type=positive_float,
        default=10.0,
        help="duplicate mode: moving average of the load (default 10)",
    )
    p.add_argument("--cluster-gpus", type=positive_int, help="GPUs in the cluster (caps scale-up); default unlimited")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """`gemop replay` entry point. Returns the exit status (2 for bad input)."""
    args = build_parser().parse_args(argv)
    plot_report = None
    if args.plot:
        plot_report, missing = plugins.load(plugins.PLOTTERS, "replay")
        if plot_report is None:
            print(f"gemop replay: --plot {missing}", file=sys.stderr)
            return 2
    if args.plot and not Path(args.plot).expanduser().resolve().parent.is_dir():
        folder = Path(args.plot).expanduser().resolve().parent
        print(f"gemop replay: --plot {args.plot}: folder {folder} does not exist; create it first", file=sys.stderr)
        return 2
    try:
        fields = trace_fields(args)
        report = run_replay(
            args.trace,
            args.service,
            scale=args.scale,
            profile=args.profile,
            cost_column=args.cost_column,
            sync_seconds=args.sync_seconds,
            smooth_seconds=args.smooth_seconds,
            cluster_gpus=args.cluster_gpus,
            scale_mode=args.scale_mode,
            trend_seconds=args.trend_seconds,
            time_unit=args.time_unit,
            fields=fields,
        )
    except (TraceError, ProfileError) as exc:
        print(f"gemop replay: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.to_table())
    if plot_report is not None:
        try:
            plot_report(report, args.plot)
        except OSError as exc:
            print(f"gemop replay: --plot {args.plot}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return 1
        if args.output == "table":
            print(f"plot written to {args.plot}")
    return 0


__all__ = ["build_parser", "main"]
