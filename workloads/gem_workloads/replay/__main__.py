"""``python -m gem_workloads.replay --trace TRACE --url URL [--speedup X] [--duration S]``.

Replays a trace (CSV with TIMESTAMP, or JSONL ``{"t", "cost"}``) against a ranking server, open
loop, and prints one JSON line per interval (achieved rate, latency percentiles) and a summary.
With ``--labelled FILE`` it sends labelled requests instead and prints the served AUC per task
(:mod:`.labelled`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from gem_common.argtypes import positive_float, positive_int
from gem_common.traces import TraceError, add_trace_arguments, trace_fields

from .runner import ReplayConfig, replay
from .trace import load_trace

UNIT_NAMES = {"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gem_workloads.replay", description=__doc__.split("\n")[0])
    p.add_argument("--trace", help="CSV with a TIMESTAMP column, or JSONL {t, cost[, count]}")
    p.add_argument(
        "--labelled",
        metavar="FILE",
        help="instead of a trace: JSONL {body, labels} requests sent as they are; prints the served AUC per task",
    )
    p.add_argument("--url", required=True, help="ranking server base URL (or its /v1/rank URL)")
    p.add_argument("--speedup", type=positive_float, default=1.0, help="replay the trace X times faster")
    p.add_argument("--duration", type=positive_float, default=None, help="replay at most S seconds (after speedup)")
    p.add_argument("--max-requests", type=positive_int, default=100_000)
    p.add_argument("--max-in-flight", type=positive_int, default=512)
    p.add_argument("--timeout", type=positive_float, default=10.0, help="per-request timeout, seconds")
    p.add_argument("--interval", type=positive_float, default=1.0, help="reporting interval, seconds")
    p.add_argument("--cost-column", default=None, help="CSV column that weights requests (e.g. ContextTokens)")
    add_trace_arguments(p)
    p.add_argument("--candidates", type=positive_int, default=64, help="candidates of a request of average cost")
    p.add_argument("--max-candidates", type=positive_int, default=2048)
    p.add_argument(
        "--seq-len", type=positive_int, default=None, help="events in the user sequence (default: the model's)"
    )
    p.add_argument("--records", default=None, help="write one JSON line per request (t, ms, status) to this file")
    p.add_argument("--body", default=None, help="a request body file to cut requests from (default: ask the server)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.labelled:
        return _labelled(args)
    if not args.trace:
        print("error: give --trace (a load replay) or --labelled (scored requests)", file=sys.stderr)
        return 2
    try:
        fields = trace_fields(args)
        arrivals = load_trace(args.trace, args.cost_column, args.time_unit, fields)
        template = None
        if args.body:
            with open(args.body) as f:
                template = json.load(f)
    except (TraceError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.time_unit == "auto" and arrivals.time_unit not in (None, "s"):
        print(
            f"note: {args.trace}: numeric time stamps read as epoch {UNIT_NAMES[arrivals.time_unit]} "
            "(by their size; --time-unit s reads them as seconds)",
            file=sys.stderr,
        )
    cfg = ReplayConfig(
        url=args.url,
        speedup=args.speedup,
        duration=args.duration,
        max_requests=args.max_requests,
        max_in_flight=args.max_in_flight,
        timeout_s=args.timeout,
        interval_s=args.interval,
        candidates=args.candidates,
        max_candidates=args.max_candidates,
        seq_len=args.seq_len,
        records_path=args.records,
    )
    try:
        asyncio.run(replay(arrivals, cfg, template=template))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _labelled(args: argparse.Namespace) -> int:
    from .labelled import read_labelled, score_labelled

    try:
        lines = read_labelled(args.labelled)
    except (OSError, ValueError) as exc:
        print(f"error: --labelled: {exc}", file=sys.stderr)
        return 2
    in_flight = min(args.max_in_flight, 64)
    result = asyncio.run(score_labelled(args.url, lines, in_flight, args.timeout))
    print(json.dumps({"event": "scored", **result}))
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
