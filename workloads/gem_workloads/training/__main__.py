"""``python -m gem_workloads.training``: torchrun-compatible training entrypoint."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from gem_common.argtypes import non_negative_int, positive_float, positive_int, tcp_port

from .env import ENV_HELP, EnvContractError, TrainingEnv, load_env, require_supported_mesh


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gem_workloads.training",
        description=(
            "Train the Kunlun-style ranking model (or the DLRM-style baseline) with TorchRec "
            "DistributedModelParallel for embeddings and FSDP2 for dense parameters, on the 5D "
            "DeviceMesh the GEMTraining operator describes in the environment. Prints one JSON line "
            "per logged step (step, loss, examples_per_s, auc, flops_per_s, mfu) on rank 0 and serves "
            "Prometheus metrics from local rank 0."
        ),
        epilog=ENV_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", help="model preset: tiny, small, base, large (default: config file, else tiny)")
    p.add_argument("--model", choices=["kunlun", "dlrm"], default="kunlun")
    p.add_argument("--data", choices=["synthetic", "movielens"], help="default: config file, else synthetic")
    p.add_argument(
        "--data-spec",
        metavar="FILE",
        help="YAML/JSON data spec (the block of a GEMTraining's spec.training.data): Parquet sources mixed "
        "by event time, sequence sources merged into histories. Read as a stream; memory per process: one "
        "row group and one batch of rows per source, 4 prefetched batches, and the sequence datasets as "
        "columns (8 x (2 + features) bytes per event). Replaces --data",
    )
    p.add_argument("--steps", type=positive_int, help="total steps (default: config file, else 100)")
    p.add_argument(
        "--checkpoint-dir",
        help="checkpoint location (path, file://, s3://, gs://); resumes from its newest complete checkpoint",
    )
    p.add_argument(
        "--checkpoint-every",
        type=non_negative_int,
        help="steps between checkpoints (default: config, else 0 = at the end)",
    )
    p.add_argument("--batch-size", type=positive_int, default=256, help="examples per rank per step")
    p.add_argument("--lr", type=positive_float, default=3e-3, help="dense Adam learning rate")
    p.add_argument("--sparse-lr", type=positive_float, default=0.05, help="embedding Adagrad learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=positive_int, default=10, help="steps between log lines")
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: $GEM_DEVICE, else cuda when present, else cpu",
    )
    p.add_argument("--bf16", action="store_true", help="FSDP2 mixed precision: bf16 params, fp32 reduce")
    p.add_argument("--comp-skip", choices=["on", "off"], help="override the preset's CompSkip")
    p.add_argument("--metrics-port", type=tcp_port, help="Prometheus port (default GEM_METRICS_PORT or 9400; 0 = off)")
    p.add_argument(
        "--export",
        metavar="URI",
        help="export versioned model directories to URI/v<N>/ (path, file://, s3://, gs://) at the end and every "
        "--export-every steps, each scored on a time-ordered holdout (default: GEM_EXPORT_URI, config file)",
    )
    p.add_argument(
        "--export-every", type=non_negative_int, help="steps between exports (default: config, else 0 = at the end)"
    )
    p.add_argument(
        "--holdout-examples", type=positive_int, default=20_000, help="holdout examples every export is scored on"
    )
    p.add_argument(
        "--holdout-source",
        action="append",
        default=[],
        metavar="NAME=URI",
        help="with --data-spec: the later data of source NAME, every source once (the export's holdout)",
    )
    return p


def build_args(ns: argparse.Namespace, env: TrainingEnv) -> Any:
    from .trainer import TrainArgs

    cfg = env.config
    ckpt_cfg = cfg.get("checkpoint") if isinstance(cfg.get("checkpoint"), dict) else {}
    assert isinstance(ckpt_cfg, dict)
    steps = ns.steps if ns.steps is not None else int(cfg.get("steps", 100))
    if steps < 1:
        raise SystemExit("--steps must be >= 1")
    return TrainArgs(
        preset=ns.preset or str(cfg.get("preset", "tiny")),
        model=ns.model,
        data=ns.data or str(cfg.get("data", "synthetic")),
        data_spec=ns.data_spec,
        steps=steps,
        checkpoint_dir=ns.checkpoint_dir,
        checkpoint_every=ns.checkpoint_every
        if ns.checkpoint_every is not None
        else int(ckpt_cfg.get("intervalSteps", 0) or 0),
        batch_size=ns.batch_size,
        lr=ns.lr,
        sparse_lr=ns.sparse_lr,
        seed=ns.seed,
        log_every=ns.log_every,
        device=ns.device,
        bf16=ns.bf16,
        comp_skip=None if ns.comp_skip is None else ns.comp_skip == "on",
        metrics_port=ns.metrics_port if ns.metrics_port is not None else env.metrics_port,
        **export_args(ns, cfg),
    )


def export_args(ns: argparse.Namespace, cfg: Any) -> dict[str, Any]:
    """--export, --export-every, --holdout-examples: flags first, then GEM_EXPORT_URI, then config.json's export."""
    export_cfg = cfg.get("export") if isinstance(cfg.get("export"), dict) else {}
    uri = ns.export or os.environ.get("GEM_EXPORT_URI") or export_cfg.get("uri") or None
    every = ns.export_every if ns.export_every is not None else int(export_cfg.get("intervalSteps", 0) or 0)
    if every < 0:
        raise SystemExit("--export-every must be >= 0")
    pairs = [item.partition("=") for item in ns.holdout_source]
    bad = [name for name, eq, value in pairs if not (name and eq and value)]
    if bad:
        raise SystemExit(f"--holdout-source: expected NAME=URI, got {ns.holdout_source}")
    sources = tuple((name, value) for name, _, value in pairs) or tuple(
        (str(k), str(v)) for k, v in (export_cfg.get("holdoutSources") or {}).items()
    )
    return {
        "export_uri": uri,
        "export_every": every,
        "holdout_examples": ns.holdout_examples,
        "holdout_sources": sources,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    try:
        env = load_env(os.environ)
        require_supported_mesh(env)
    except EnvContractError as exc:
        print(f"gem_workloads.training: bad env contract: {exc}", file=sys.stderr)
        return 2
    if env.checkpoint_uri and not ns.checkpoint_dir:
        from .checkpoint import checkpoint_dir_from_uri

        try:
            ns.checkpoint_dir = str(checkpoint_dir_from_uri(env.checkpoint_uri))
        except ValueError as exc:
            print(f"gem_workloads.training: bad env contract: {exc}", file=sys.stderr)
            return 2
    args = build_args(ns, env)
    if args.data_spec:
        from .inputs import DATA_ERRORS, EXIT_DATA_ERROR, preflight, report_data_error

        try:  # bad data stops here, before any process starts, with the source and column named
            preflight(args.data_spec)
        except DATA_ERRORS as exc:
            report_data_error(exc)
            print(f"gem_workloads.training: {exc}", file=sys.stderr)
            return EXIT_DATA_ERROR
    try:
        from ..models import get_preset
        from .parallel import check_mesh_fits

        # Mesh x model checks before any process starts (the preset decides what pp/tp/cp fit).
        check_mesh_fits(env, get_preset(args.preset), args.model, args.batch_size)
    except EnvContractError as exc:
        print(f"gem_workloads.training: bad env contract: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"gem_workloads.training: {exc}", file=sys.stderr)
        return 2
    try:
        if env.rank is not None:  # torchrun: one process per rank already
            from .trainer import run_worker

            run_worker(args, env, env.local_rank or 0)
        elif env.nproc_per_node == 1:
            from .trainer import run_worker

            run_worker(args, env, 0)
        else:
            from torch.multiprocessing.spawn import spawn

            from .trainer import spawned_worker

            spawn(spawned_worker, args=(args, env), nprocs=env.nproc_per_node, join=True)  # type: ignore[no-untyped-call]
    except EnvContractError as exc:
        print(f"gem_workloads.training: bad env contract: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from .inputs import DATA_ERRORS, EXIT_DATA_ERROR, report_data_error

        if not isinstance(exc, DATA_ERRORS):
            raise
        report_data_error(exc)  # e.g. a store that stayed unreachable mid-run: reported, never trained around
        print(f"gem_workloads.training: {exc}", file=sys.stderr)
        return EXIT_DATA_ERROR
    return 0


if __name__ == "__main__":
    code = main()
    if "gem_workloads.training.trainer" in sys.modules:  # torch is loaded (and a worker may have run)
        from .trainer import exit_without_teardown

        exit_without_teardown(code)
    sys.exit(code)
