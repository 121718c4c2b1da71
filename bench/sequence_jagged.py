"""Packed (jagged) behaviour sequences vs the right-padded layout: sequence FLOPs, step time, loss.

Run:  python bench/sequence_jagged.py [--preset small] [--batch-size 128] [--steps 6] [--device cpu]

Both layouts train the same Kunlun-style model (same initial weights, same batches, SGD) on the
synthetic data, whose history lengths are uniform over ``0..seq_len`` (the padded layout
computes every row at ``seq_len``). Printed per layout:

* sequence FLOPs: forward + backward of the user side (sequence input, block attention,
  summarisers), counted by ``torch.utils.flop_counter`` on the first batch;
* step FLOPs: the whole training step's forward + backward on that batch;
* step time: median over ``--steps`` steps (layouts interleaved, step by step: load on a shared
  machine moves);
* loss per step: the two layouts must agree to float tolerance (they compute the same function).

Target: packed sequence FLOPs >= 40 % below padded, equal loss. Exits 1 when either fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--layers", type=int, default=0, help="override the preset's num_layers (0: keep)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    return p.parse_args()


def main() -> int:
    ns = _args()
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from gem_workloads.data import MixingLoader, SyntheticConfig, SyntheticUniverse, cap_schema
    from gem_workloads.models import KunlunModel, get_preset
    from gem_workloads.training.trainer import masked_bce

    if ns.threads:
        torch.set_num_threads(ns.threads)
    device = torch.device(ns.device)
    cfg = get_preset(ns.preset)
    if ns.layers:
        cfg = cfg.with_(num_layers=ns.layers)
    universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=0))
    schema = cap_schema(universe.schema, cfg.max_table_rows)
    loader = MixingLoader([universe.domain(i) for i in range(3)], [1, 1, 1], ns.batch_size, seed=0, schema=schema)
    batches = [loader.batch(i).to(device) for i in range(ns.steps + 1)]
    lengths = batches[0].user.sequence.lengths().clamp(max=cfg.seq_len).float()
    models: dict[str, Any] = {}
    for layout in ("packed", "padded"):
        torch.manual_seed(0)
        model = KunlunModel(schema, cfg).to(device)
        model.padded_sequence = layout == "padded"
        models[layout] = (model, torch.optim.SGD(model.parameters(), lr=0.05))

    flops: dict[str, dict[str, float]] = {}
    for layout, (model, _) in models.items():
        with FlopCounterMode(display=False) as seq_counter:
            torch.autograd.backward(model.encode_user(batches[0].user).summaries.sum())
        with FlopCounterMode(display=False) as step_counter:
            torch.autograd.backward(masked_bce(model(batches[0]), batches[0].labels, batches[0].label_mask))
        model.zero_grad(set_to_none=True)
        flops[layout] = {"seq": float(seq_counter.get_total_flops()), "step": float(step_counter.get_total_flops())}

    def step(layout: str, batch: Any) -> tuple[float, float]:
        model, opt = models[layout]
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = masked_bce(model(batch), batch.labels, batch.label_mask)
        torch.autograd.backward(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = float(loss.detach())  # syncs
        return time.perf_counter() - t0, value

    times: dict[str, list[float]] = {"packed": [], "padded": []}
    losses: dict[str, list[float]] = {"packed": [], "padded": []}
    for batch in batches[1:]:
        for layout in ("packed", "padded"):
            seconds, value = step(layout, batch)
            times[layout].append(seconds)
            losses[layout].append(value)

    print(
        f"preset {cfg.name} (layers {cfg.num_layers}, seq_len {cfg.seq_len}, block {cfg.block_size}), "
        f"batch {ns.batch_size}, device {device}; mean history {float(lengths.mean()):.1f} events "
        f"= {float(lengths.mean()) / cfg.seq_len:.1%} of seq_len"
    )
    print(f"{'layout':8} {'seq GFLOP':>10} {'step GFLOP':>11} {'step ms (median)':>17}  loss per step")
    for layout in ("padded", "packed"):
        f = flops[layout]
        median_ms = statistics.median(times[layout][1:] or times[layout]) * 1e3
        shown = " ".join(f"{v:.6f}" for v in losses[layout])
        print(f"{layout:8} {f['seq'] / 1e9:10.3f} {f['step'] / 1e9:11.3f} {median_ms:17.1f}  {shown}")
    seq_cut = 1 - flops["packed"]["seq"] / flops["padded"]["seq"]
    step_cut = 1 - flops["packed"]["step"] / flops["padded"]["step"]
    speedup = statistics.median(times["padded"][1:] or times["padded"]) / statistics.median(
        times["packed"][1:] or times["packed"]
    )
    loss_gap = max(abs(a - b) for a, b in zip(losses["packed"], losses["padded"], strict=True))
    print(f"sequence FLOPs {seq_cut:.1%} below padded (target >= 40%); step FLOPs {step_cut:.1%} below")
    print(f"step time padded/packed = {speedup:.2f}x; max loss gap over {ns.steps} steps = {loss_gap:.2e}")
    ok = seq_cut >= 0.40 and loss_gap <= 1e-4
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
