"""``python -m gem_workloads.training.vertical``: train a vertical model against a foundation model.

    python -m gem_workloads.training.vertical --data synthetic --teacher FOUNDATION_DIR --kd-weight 0.2 \\
        [--memory-len 16] [--solaris] [--teacher-pass PASS_DIR] --output VERTICAL_DIR

Trains on the earlier examples of the time split with KD (soft labels of the teacher mixed with
the hard labels at ``--kd-weight``), optionally with the LoopFM memory and the Solaris input
(coverage simulated, see :mod:`.coverage`), scores the later examples and writes a model
directory with ``role: vertical`` and ``foundationVersion`` = the teacher's version, which is
the embedding-store version the ranker then reads. The soft labels, representations and
embeddings come from the foundation pass (:mod:`.foundation_pass`): ``--teacher-pass`` reuses
one, otherwise it runs here first (and is written to ``OUTPUT/teacher-pass``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from ..data.blocks import cap_schema
from ..data.catalog import load_dataset
from ..data.timeline import TimelineConfig, time_split
from ..models import build_model, get_preset
from ..models.devices import DeviceError, resolve_device
from ..models.kunlun import KunlunModel
from ..models.model_dir import ModelDirError, load_model_dir, save_model_dir
from .coverage import tier_sources
from .distill import ExampleFeed, FitConfig, fit, predict, task_aucs
from .foundation_pass import FoundationPass, run_pass


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gem_workloads.training.vertical", description=__doc__.split("\n")[0])
    p.add_argument("--data", choices=["synthetic", "movielens"], default="synthetic")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--users", type=int, default=None, help="synthetic: number of users")
    p.add_argument("--teacher", required=True, help="the foundation model's directory (role foundation)")
    p.add_argument("--teacher-pass", help="output folder of the foundation pass over this data (default: run it)")
    p.add_argument("--kd-weight", type=float, default=0.2, help="weight of the soft labels in [0, 1] (0: hard labels)")
    p.add_argument("--memory-len", type=int, default=0, help="LoopFM representations per user (0: no memory input)")
    p.add_argument("--solaris", action="store_true", help="add the Solaris embedding + tier input")
    p.add_argument("--preset", default="vertical")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--output", required=True, help="model directory to write")
    p.add_argument("--device", help="cuda, cpu (default $GEM_DEVICE, else cuda when present, else cpu)")
    return p


def main(argv: list[str] | None = None) -> int:

    args = parser().parse_args(argv)
    try:
        fit_cfg = FitConfig(epochs=args.epochs, kd_weight=args.kd_weight, seed=args.seed)
    except ValueError as exc:
        print(f"error: --kd-weight/--epochs: {exc}", file=sys.stderr)
        return 2
    if args.memory_len < 0:
        print("error: --memory-len must be >= 0", file=sys.stderr)
        return 2
    try:
        device = resolve_device(args.device)
    except DeviceError as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    try:
        teacher = load_model_dir(args.teacher, device)
    except ModelDirError as exc:
        print(f"error: --teacher: {exc}", file=sys.stderr)
        return 2
    if teacher.role != "foundation" or not isinstance(teacher.model, KunlunModel):
        print(f"error: --teacher: {args.teacher} is a {teacher.role} model; give a foundation model", file=sys.stderr)
        return 2
    synthetic = TimelineConfig() if args.users is None else TimelineConfig(num_users=args.users)
    data = load_dataset(args.data, args.seed, synthetic)
    split = time_split(data)
    out = Path(args.output)
    if args.teacher_pass:
        try:
            fpass = FoundationPass.load(args.teacher_pass)
        except ValueError as exc:
            print(f"error: --teacher-pass: {exc}", file=sys.stderr)
            return 2
        if fpass.version != teacher.version:
            print(f"error: --teacher-pass was written by foundation {fpass.version}, --teacher is {teacher.version}",
                  file=sys.stderr)  # fmt: skip
            return 2
    else:
        fpass = run_pass(teacher.model, data, data.examples, teacher.version, device=device)
        fpass.save(out / "teacher-pass", {"data": args.data, "seed": args.seed})
    schema = teacher.schema
    cfg = get_preset(args.preset)
    if args.memory_len:
        cfg = cfg.with_(memory_len=args.memory_len, memory_width=fpass.loopfm.shape[1])
    if args.solaris:
        cfg = cfg.with_(solaris_width=fpass.solaris.shape[1])
    sources = tier_sources(fpass.user, fpass.time, fpass.item, fpass.group, fpass.bucket) if args.solaris else None
    torch.manual_seed(args.seed)
    model = build_model("vertical", cfg, cap_schema(schema, cfg.max_table_rows)).to(device)
    feed = ExampleFeed(data, split.train, model.schema, cfg.seq_len, fpass, cfg.memory_len, args.solaris, sources)
    losses = fit(model, feed, fit_cfg, device=device)
    eval_feed = ExampleFeed(data, split.eval, model.schema, cfg.seq_len, fpass, cfg.memory_len, args.solaris, sources)
    tier = eval_feed.tiers(1.0, 1.0, np.random.default_rng(args.seed)) if args.solaris else None
    aucs = task_aucs(*predict(model, eval_feed, tier, device=device), [t.name for t in model.schema.tasks])
    version = f"vertical-{teacher.version}-kd{args.kd_weight:g}-m{args.memory_len}{'-s' if args.solaris else ''}"
    save_model_dir(out, model, "vertical", cfg, model.schema, version, foundation_version=teacher.version)
    print(json.dumps({"output": str(out), "version": version, "foundationVersion": teacher.version,
                      "losses": [round(x, 5) for x in losses], "eval_auc": aucs}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
