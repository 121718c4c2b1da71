"""Step time and MFU of a larger Kunlun-style preset on one GPU (written for an H200, bf16).

Not run in CI and needs a CUDA machine. Two modes:

* ``--mode plain`` (default): the model on one GPU without TorchRec sharding (one GPU needs
  none); embeddings are plain ``nn.EmbeddingBag``/``nn.Embedding`` lookups under TorchRec's
  unsharded modules, dense compute in bf16 autocast. This isolates what MFU measures.
* ``--mode trainer``: the real training loop (DMP + FSDP2 with a bf16 mixed-precision policy)
  on one rank; needs a CUDA build of fbgemm-gpu matching the installed torch.

FLOPs per step (forward + backward) come from ``torch.utils.flop_counter`` on one step; MFU is
``FLOPs per step / seconds per step / peak`` with the dense bf16 peak of the device (H200/H100:
989 TFLOP/s). Batches are generated before timing so data generation is not in the step time.

    python bench/train_gpu_mfu.py                                  # preset base, batch 512, 30 timed steps
    python bench/train_gpu_mfu.py --preset large --batch-size 256 --compile
    python bench/train_gpu_mfu.py --comp-skip off                  # the same without CompSkip
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

import torch


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--steps", type=int, default=30, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--mode", choices=["plain", "trainer"], default="plain")
    p.add_argument("--comp-skip", choices=["on", "off"], default="on")
    p.add_argument("--compile", action="store_true", help="torch.compile the dense units (plain mode)")
    p.add_argument("--peak-tflops", type=float, help="override the device's dense bf16 peak")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run of the script only")
    ns = p.parse_args(argv)
    if ns.device == "cuda" and not torch.cuda.is_available():
        print("train_gpu_mfu.py needs a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    from torch.utils.flop_counter import FlopCounterMode

    from gem_workloads.data import MixingLoader, SyntheticConfig, SyntheticUniverse, cap_schema
    from gem_workloads.models import build_model, get_preset
    from gem_workloads.training.metrics import peak_flops

    device = torch.device("cuda", 0) if ns.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    cfg = get_preset(ns.preset).with_(comp_skip=ns.comp_skip == "on")
    peak = ns.peak_tflops * 1e12 if ns.peak_tflops else peak_flops(device, torch.bfloat16)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if ns.mode == "trainer":
        from gem_workloads.training.env import load_env
        from gem_workloads.training.trainer import TrainArgs, Trainer

        env = load_env({"MASTER_PORT": str(_port()), "GEM_METRICS_PORT": "0"})
        args = TrainArgs(
            preset=ns.preset, steps=ns.warmup + ns.steps, batch_size=ns.batch_size, log_every=ns.warmup + ns.steps,
            device=ns.device, bf16=True, comp_skip=ns.comp_skip == "on", metrics_port=0,
        )  # fmt: skip
        trainer = Trainer(args, env, 0, 0, config=cfg)
        records = trainer.run()
        trainer.close()
        print(json.dumps({"device": name, "mode": "trainer", "preset": ns.preset, **records[-1]}))
        return 0

    big = device.type == "cuda"
    universe = SyntheticUniverse(
        SyntheticConfig(seq_len=cfg.seq_len, num_users=100_000 if big else 2_000, num_items=200_000 if big else 2_000)
    )
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    loader = MixingLoader([universe.domain(i) for i in range(3)], [0.6, 0.3, 0.1], ns.batch_size, schema=schema)
    batches = [loader.batch(i).to(device) for i in range(4)]
    torch.manual_seed(0)
    model = build_model("kunlun", cfg, schema, device=device).to(device)
    if ns.compile:
        for unit in model.dense_units():
            unit.compile()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=device.type == "cuda")

    def step(i: int) -> None:
        batch = batches[i % len(batches)]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(batch)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits.float(), batch.labels, weight=batch.label_mask
        )
        torch.autograd.backward(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(ns.warmup):
        step(i)
    with FlopCounterMode(display=False) as counter:
        step(0)
    flops = float(counter.get_total_flops())
    sync()
    start = time.perf_counter()
    for i in range(ns.steps):
        step(i)
    sync()
    seconds = (time.perf_counter() - start) / ns.steps
    dense = sum(p.numel() for u in model.dense_units() for p in u.parameters())
    result = {
        "device": name,
        "mode": "plain",
        "preset": ns.preset,
        "comp_skip": cfg.comp_skip,
        "batch_size": ns.batch_size,
        "seq_len": cfg.seq_len,
        "dense_params": dense,
        "ms_per_step": round(seconds * 1e3, 3),
        "examples_per_s": round(ns.batch_size / seconds, 1),
        "tflop_per_step": round(flops / 1e12, 4),
        "achieved_tflops": round(flops / seconds / 1e12, 2),
        "peak_tflops": round(peak / 1e12, 1),
        "mfu": round(flops / seconds / peak, 4),
        "max_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
