"""``python -m gem_workloads.transfer eval [--data movielens|synthetic] [--seed S] [--output table|json]``.

Trains the foundation model and the vertical variants (alone, KD, KD + LoopFM, KD + LoopFM +
Solaris at exact coverage 100/70/40/0 % with fallback tiers and with drop) on the earlier
examples and prints each one's AUC per task on the later examples, the foundation model's AUC
and the LoopFM transfer ratio. CPU-sized: a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gem_common.argtypes import non_negative_int

from ..data.catalog import DATASETS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gem_workloads.transfer", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("eval", help="train the foundation model and the vertical variants, print AUCs")
    e.add_argument("--data", choices=DATASETS, default="synthetic")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--output", choices=["table", "json"], default="table")
    e.add_argument(
        "--foundation-epochs", type=int, default=None, help="default 4 (synthetic), 2 (movielens: 5x the examples)"
    )
    e.add_argument("--vertical-epochs", type=int, default=3)
    e.add_argument("--kd-weight", type=float, default=0.2, help="weight of the soft labels in [0, 1]")
    e.add_argument("--memory-len", type=int, default=16, help="LoopFM representations per user (K)")
    e.add_argument("--users", type=int, default=None, help="synthetic: number of users (default 4000)")
    e.add_argument("--threads", type=non_negative_int, default=0, help="torch intra-op threads (0: torch's default)")
    e.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    e.add_argument("--device", help="cuda, cpu (default $GEM_DEVICE, else cuda when present, else cpu)")
    return p


def table(result: dict[str, Any]) -> str:
    tasks = list(result["foundation"])
    rows = [("foundation", result["foundation"]), *list(result["variants"].items())]
    width = max(len(n) for n, _ in rows) + 2
    head = "variant".ljust(width) + "".join(t.rjust(11) for t in tasks) + "       mean  gap closed"
    lines = [f"{result['data']} (seed {result['seed']}): AUC on the later {result['examples']['eval']} examples", head]
    for name, aucs in rows:
        closed = "" if name == "foundation" else f"{result['gap_closed'][name] * 100:10.0f} %"
        cells = "".join(f"{aucs.get(t, float('nan')):11.4f}" for t in tasks)
        lines.append(name.ljust(width) + cells + f"{result['mean_auc'][name]:11.4f}" + closed)
    lines.append(f"LoopFM transfer ratio (AUC[kd+loopfm] - AUC[alone]) / (AUC[kd] - AUC[alone]): "
                 f"{result['loopfm_transfer_ratio']:.2f}")  # fmt: skip
    lines.append(f"{result['seconds']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 0.0 <= args.kd_weight <= 1.0:
        print(f"error: --kd-weight must be in [0, 1], got {args.kd_weight}", file=sys.stderr)
        return 2
    if args.foundation_epochs is None:
        args.foundation_epochs = 2 if args.data == "movielens" else 4
    for name in ("foundation_epochs", "vertical_epochs", "memory_len"):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    if args.users is not None and args.users < 10:
        print("error: --users must be >= 10", file=sys.stderr)
        return 2
    import torch

    from ..data.timeline import TimelineConfig
    from ..models.devices import DeviceError, resolve_device
    from .experiment import EvalConfig, run

    try:
        resolve_device(args.device)
    except DeviceError as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2

    if args.threads:
        torch.set_num_threads(args.threads)
    synthetic = TimelineConfig() if args.users is None else TimelineConfig(num_users=args.users)
    cfg = EvalConfig(
        data=args.data,
        seed=args.seed,
        foundation_epochs=args.foundation_epochs,
        vertical_epochs=args.vertical_epochs,
        kd_weight=args.kd_weight,
        memory_len=args.memory_len,
        synthetic=synthetic,
        device=args.device,
    )

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    try:
        result = run(cfg, log)
    except FileNotFoundError as exc:
        print(f"error: --data {args.data}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.output == "json" else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
