"""``python -m gem_workloads.serving.plan_precision``: choose a pod's serving precision plan before it serves.

Runs as the ``precision-plan`` init container of RankingService and SolarisPrecompute pods when
``spec.precision`` is not ``fp32`` (docs/contracts.md), after the model loader, on the pod's own
device: it plans (:func:`~gem_workloads.scoring.precision_plan.plan_precision`), records the plan
as ``gem-precision.json`` in the model directory (read-only for the server, writable here), where
the server and the precompute workers find and apply it, and writes the plan's summary to the
container's termination message (``{"precision": {...}}``), from which the operator fills
``status.precision``.

    python -m gem_workloads.serving.plan_precision --model DIR --precision auto [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import torch

from gem_common.argtypes import non_negative_int, positive_int

from ..scoring.engine import load_model
from ..scoring.precision import PRECISIONS
from ..scoring.precision_plan import plan_precision, write_plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gem_workloads.serving.plan_precision", description=__doc__.split("\n")[0]
    )
    p.add_argument("--model", default=os.environ.get("GEM_MODEL_DIR"), help="model directory (default $GEM_MODEL_DIR)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--candidates", type=positive_int, default=256, help="candidates of the representative request")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch intra-op threads (0: torch's default)")
    args = p.parse_args(argv)
    if not args.model:
        print("error: give --model DIR (or set GEM_MODEL_DIR)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    loaded = load_model(args.model, None, device)
    plan = plan_precision(loaded, args.precision, device, candidates=args.candidates)
    path = write_plan(args.model, plan)
    summary = plan.summary()
    print(json.dumps({"plan": str(path), **summary, "notes": plan.notes}))
    report(summary)
    return 0


def report(summary: dict[str, object], path: str | None = None) -> bool:
    """The plan's summary in the termination message (best effort: outside a pod there is none)."""
    target = Path(path or os.environ.get("GEM_TERMINATION_LOG", "/dev/termination-log"))
    if not target.parent.is_dir():
        return False
    try:
        target.write_text(json.dumps({"precision": summary}))
    except OSError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
