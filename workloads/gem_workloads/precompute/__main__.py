"""``python -m gem_workloads.precompute``: a pod of Solaris precompute workers on Ray.

    python -m gem_workloads.precompute --model DIR --store redis://r:6379/0 --ttl-seconds 3600 \\
        --key-prefix gem:emb --source redis://r:6379/0 --stream gem:candidates --group solaris \\
        --batch-size 256 --fallback exact,userAdGroupAggregate,similarUser [--workers 1] [--metrics-port 9102]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading
from pathlib import Path

from prometheus_client import start_http_server

from gem_common.argtypes import non_negative_float, non_negative_int, positive_float, positive_int, tcp_port

from ..exchange.store import check_tiers
from .service import PrecomputeMetrics, install_sigterm, run_pool
from .worker import WorkerConfig


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gem_workloads.precompute", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", help="model directory (default $GEM_MODEL_DIR)")
    src.add_argument("--preset", help="a randomly initialised preset instead of a model directory")
    p.add_argument("--store", required=True, help="redis:// URL of the embedding store")
    p.add_argument("--ttl-seconds", type=positive_int, default=3600)
    p.add_argument("--key-prefix", default="gem:emb")
    p.add_argument("--source", required=True, help="redis:// URL of the candidate-set stream")
    p.add_argument("--stream", default="gem:candidates")
    p.add_argument("--group", default="solaris")
    p.add_argument("--batch-size", type=positive_int, default=256, help="pairs per embedding batch")
    p.add_argument("--fallback", default="exact,userAdGroupAggregate,similarUser", help="read-path tiers, in order")
    p.add_argument("--workers", type=positive_int, default=1, help="Ray worker actors in this pod")
    p.add_argument("--gpus-per-worker", type=non_negative_float, default=0.0)
    p.add_argument("--device", default=None, help="cuda, cpu (default $GEM_DEVICE, else cuda when present, else cpu)")
    p.add_argument("--metrics-port", type=tcp_port, default=9102, help="Prometheus /metrics (0: off)")
    p.add_argument(
        "--consumer", default=os.environ.get("HOSTNAME") or socket.gethostname(), help="consumer-name prefix"
    )
    p.add_argument(
        "--claim-idle-ms", type=non_negative_int, default=30_000, help="take over entries pending this long elsewhere"
    )
    p.add_argument("--max-pairs-per-set", type=positive_int, default=256)
    p.add_argument("--read-count", type=positive_int, default=16, help="stream entries per read")
    p.add_argument("--max-seconds", type=positive_float, default=None, help="stop after this long (tests, batch jobs)")
    p.add_argument(
        "--foundation-version",
        help="the foundation model version this pool serves: refuse to start on a model of another version",
    )
    p.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16", "fp8"),
        default="fp32",
        help="embedding precision (as the ranking server's --precision; the model directory's recorded plan is reused)",
    )
    p.add_argument(
        "--memory-len", type=non_negative_int, default=16, help="LoopFM representations kept per user (0: none)"
    )
    return p


def model_version(model_dir: str | None, preset: str | None) -> str:
    """The version the workers will key embeddings by (read without building the model)."""
    if not model_dir:
        return f"{preset}-seed0"  # what serving.engine.preset_model names a preset model
    from ..models.model_dir import MODEL_FILE, model_dir_version

    path = Path(model_dir) / MODEL_FILE
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the model description: {exc}") from exc
    return model_dir_version(Path(model_dir), meta)


def redis_problem(url: str) -> tuple[int, str] | None:
    """(exit status, why) the pool cannot use the Redis at `url`: 2 for a URL that is not one, 1 for
    a server that does not answer a PING (None: it answers).

    Checked once before the workers start, so a wrong URL or a server that is down is one clear
    line and a non-zero exit (the pod restarts with backoff), not a traceback from the first read.
    """
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    except ValueError as exc:
        return 2, f"not a Redis URL ({exc}); expected redis://HOST:PORT[/DB]"
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        return 1, f"cannot reach Redis ({exc}); check the URL and that the server is up"
    finally:
        client.close()
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    model_dir = args.model or (None if args.preset else os.environ.get("GEM_MODEL_DIR"))
    if not model_dir and not args.preset:
        print("error: give --model DIR (or set GEM_MODEL_DIR) or --preset NAME", file=sys.stderr)
        return 2
    try:
        tiers = check_tiers(args.fallback.split(","))
        cfg = WorkerConfig(
            stream=args.stream,
            group=args.group,
            consumer=args.consumer,
            key_prefix=args.key_prefix,
            ttl_seconds=args.ttl_seconds,
            tiers=tiers,
            batch_size=args.batch_size,
            read_count=args.read_count,
            claim_idle_ms=args.claim_idle_ms,
            max_pairs_per_set=args.max_pairs_per_set,
            memory_len=args.memory_len,
        )
        if args.foundation_version and (found := model_version(model_dir, args.preset)) != args.foundation_version:
            raise ValueError(
                f"--foundation-version: the pool serves {args.foundation_version!r} but the model is version "
                f"{found!r}; load that foundation model or change spec.foundationVersion"
            )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from ..models.devices import DeviceError, resolve_device

    try:
        resolve_device(args.device)  # each worker resolves it again where Ray placed it
    except DeviceError as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    for flag, url in (("--source", args.source), ("--store", args.store)):
        if (problem := redis_problem(url)) is not None:
            status, why = problem
            print(f"error: {flag} {url}: {why}", file=sys.stderr)
            return status
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import ray

    metrics = PrecomputeMetrics()
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=metrics.registry)
    stop = threading.Event()
    ray.init(num_cpus=args.workers, include_dashboard=False, configure_logging=False)
    install_sigterm(stop)  # after ray.init, which installs its own SIGTERM handler
    total = run_pool(
        cfg,
        args.source,
        args.store,
        model_dir,
        args.preset,
        args.workers,
        metrics,
        stop,
        max_seconds=args.max_seconds,
        gpus_per_worker=args.gpus_per_worker,
        device=args.device,
        precision=args.precision,
    )
    ray.shutdown()
    print(json.dumps({"stopped": True, **total.__dict__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
