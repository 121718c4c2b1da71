"""``python -m gem_workloads.serving``: the ranking server, or ``--example-request`` to print a body.

python -m gem_workloads.serving --model DIR --port 8080 --max-batch-size 64 --max-candidates 2048
python -m gem_workloads.serving --preset tiny --port 8080 [--no-sharing]
python -m gem_workloads.serving --example-request --candidates 256 --seq-len 1024 [--preset small]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import torch
from aiohttp import web
from prometheus_client import CollectorRegistry

from gem_common.argtypes import non_negative_float, non_negative_int, positive_float, positive_int, tcp_port

from ..models.devices import DEVICE_ENV, DeviceError, resolve_device
from ..models.model_dir import LoadedModel
from ..scoring.engine import load_model, preset_model
from ..scoring.precision import PRECISIONS
from ..scoring.precision_plan import resolve_precision
from ..scoring.request import example_request
from .app import ServerConfig, create_app
from .lookups import PrecomputedLookups
from .metrics import NvmlSampler, ServerMetrics
from .publish import CandidatePublisher


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gem_workloads.serving", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", help="model directory (gem-model.json + weights); default $GEM_MODEL_DIR")
    src.add_argument("--preset", help="serve a randomly initialised preset (tiny, small, base, large) instead")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument(
        "--port",
        type=tcp_port,
        default=os.environ.get("GEM_SERVING_PORT", "8080"),
        help="listen port (default $GEM_SERVING_PORT, else 8080; 0: a free one)",
    )
    p.add_argument("--no-sharing", action="store_true", help="per-candidate baseline: encode the user per candidate")
    p.add_argument("--max-batch-size", type=positive_int, default=64, help="requests per dynamic batch")
    p.add_argument("--max-batch-candidates", type=positive_int, default=8192, help="candidates per dynamic batch")
    p.add_argument("--max-candidates", type=positive_int, default=2048, help="candidates per request (more: 413)")
    p.add_argument("--max-queue", type=positive_int, default=256, help="requests waiting before 503 + Retry-After")
    p.add_argument("--batch-timeout-ms", type=non_negative_float, default=2.0, help="longest wait for a batch to fill")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument(
        "--device",
        default=None,
        help="cuda[:N], cpu, or emulated:NAME (an emulated accelerator: real model on the CPU, device time from a "
        "profile); default $GEM_DEVICE, else cuda when present, else cpu",
    )
    p.add_argument(
        "--copy-user-state",
        action="store_true",
        help="copy the user state per candidate instead of reading it by index (a benchmark baseline)",
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="serving precision: fp32 (as trained), bf16 or fp8 on every layer, or auto (a per-layer plan chosen by "
        "micro-benchmark and a quality gate; the plan recorded in the model directory is reused)",
    )
    p.add_argument("--device-profile", help="with --device emulated:NAME: a profile file instead of the built-in NAME")
    p.add_argument(
        "--device-time-scale", type=positive_float, default=1.0, help="with emulated: a device X times slower"
    )
    p.add_argument("--publish-url", help="redis:// URL: publish served candidate sets for Solaris precompute")
    p.add_argument("--publish-stream", default="gem:candidates")
    p.add_argument("--embedding-store", help="redis:// URL: look up Solaris precomputed embeddings per request")
    p.add_argument("--store-key-prefix", default="gem:emb", help="with --embedding-store")
    p.add_argument("--fallback", default="exact,userAdGroupAggregate,similarUser", help="with --embedding-store")
    p.add_argument("--store-version", help="with --embedding-store: the foundation version the store is keyed by")
    p.add_argument("--example-request", action="store_true", help="print a valid request body and exit")
    p.add_argument("--candidates", type=positive_int, default=64, help="with --example-request")
    p.add_argument(
        "--seq-len",
        type=positive_int,
        default=None,
        help="events in the example body (default: the model's); with --preset also the model's sequence length",
    )
    p.add_argument("--seed", type=int, default=0, help="with --example-request")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    model_dir = args.model or (None if args.preset else os.environ.get("GEM_MODEL_DIR"))
    if args.example_request:
        loaded = (
            load_model(model_dir, args.preset, torch.device("cpu"))
            if model_dir
            else preset_model(args.preset or "tiny")
        )
        seq = loaded.config.seq_len if args.seq_len is None else args.seq_len
        json.dump(example_request(loaded.schema, args.candidates, seq, args.seed), sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
        return 0
    if not model_dir and not args.preset:
        print("error: give --model DIR (or set GEM_MODEL_DIR) or --preset NAME", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    registry = CollectorRegistry()
    emulated = None
    wanted = args.device or os.environ.get(DEVICE_ENV, "")
    if wanted.startswith("emulated"):
        from .device import DeviceProfileError, parse_device

        try:
            emulated = parse_device(wanted, args.device_profile, args.device_time_scale, registry)
        except DeviceProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        device = torch.device("cpu") if emulated is not None else resolve_device(args.device)
    except DeviceError as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    cfg = ServerConfig(
        emulated_device=emulated,
        device=str(device),
        copy_user_state=args.copy_user_state,
        share=not args.no_sharing,
        max_candidates=args.max_candidates,
        max_batch_requests=args.max_batch_size,
        max_batch_candidates=max(args.max_batch_candidates, args.max_candidates),
        max_queue=args.max_queue,
        batch_timeout_s=args.batch_timeout_ms / 1000.0,
    )
    gpu = NvmlSampler.create(device.index or 0) if device.type == "cuda" else None
    publisher = CandidatePublisher(args.publish_url, args.publish_stream) if args.publish_url else None

    def load() -> LoadedModel:
        if model_dir:
            loaded = load_model(model_dir, None, device)
        else:
            loaded = preset_model(args.preset, seq_len=args.seq_len)
            loaded.model.to(device)
        if args.precision != "fp32":
            resolve_precision(loaded, args.precision, device, model_dir)
        return loaded

    lookups = None
    if args.embedding_store:
        try:
            lookups = PrecomputedLookups(
                args.embedding_store, args.store_key_prefix, args.fallback.split(","), version=args.store_version
            )
        except ValueError as exc:
            print(f"error: --fallback: {exc}", file=sys.stderr)
            return 2
    app = create_app(cfg, load, ServerMetrics(registry, gpu=gpu), publisher, lookups)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
