"""Training on Parquet sources: the step does not wait on data, memory stays bounded, resumes are exact.

Data: the generated multi-domain ads log (``gem_workloads.data.ads_log``: three surfaces with CTR and
CVR labels, purchases and posts as two sequence sources with different event features) as local
Parquet files. Four measurements, each against a baseline measured in the same run:

1. data wait: two training processes (gloo, ``dp_shard=2``) through the real ``Trainer`` on the
   given preset (default ``base``), each timing how long every step blocked on the loader; the
   first step (which fills the pipeline) is reported apart. Target: wait <= 5 % of step time.
2. throughput per process: the loader alone (shard 0 of 2: mixing, OneSeq history join,
   collation into KJTs) beside a plain ``pyarrow.dataset`` scan of the same files and columns
   (no history, no tensors): the price of what the loader does on top of reading.
3. memory: the loader's resident memory after reading one pass and after three passes over its
   shard must not grow, and stays under the stated bound (below).
4. resume exactness: batches after ``restore(state)`` against an uninterrupted loader, by example
   id. Target: 100 %.

Memory bound per process (what ``--help`` of the trainer states): per example source one row
group plus one batch of rows, ``prefetch`` (4) collated batches, and the sequence datasets as
sorted columns, 8 x (2 + features) bytes per event; printed as the ``bound_mb`` the measured
growth is compared with.

    python bench/training_data.py                          # base preset, 2 processes, 6 steps of 32
    python bench/training_data.py --preset small --steps 20 --batch-size 128
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as pads

from gem_workloads.data.ads_log import AdsLogConfig, write_ads_log
from gem_workloads.data.spec import parse_data_spec
from gem_workloads.data.stream_loader import StreamLoader


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def plain_scan(spec: dict[str, Any]) -> float:
    """Rows per second of a plain pyarrow scan of the example sources' columns (one process, all files)."""
    rows, start = 0, time.perf_counter()
    for src in spec["sources"]:
        cols = [src["timestamp"], src["user"], src["id"], *src["sparse"], *src["dense"], *src["labels"].values()]
        for batch in pads.dataset(src["uri"], format="parquet").to_batches(columns=cols):
            rows += batch.num_rows
    return rows / (time.perf_counter() - start)


def loader_throughput(spec: dict[str, Any], batch: int, seq_len: int, seconds: float) -> tuple[float, int]:
    """Examples per second the loader hands out as shard 0 of 2 when nothing else runs; and batches drawn."""
    loader = StreamLoader(parse_data_spec(spec), batch, seq_len, 100_000, shard=0, shards=2)
    loader.batch(1)  # opens the files and fills the pipeline
    start, step = time.perf_counter(), 1
    while time.perf_counter() - start < seconds:
        step += 1
        loader.batch(step)
    rate = (step - 1) * batch / (time.perf_counter() - start)
    loader.close()
    return rate, step


def memory(spec: dict[str, Any], batch: int, seq_len: int, shard_rows: int, row_group: int) -> dict[str, float]:
    """RSS after one and after three passes over shard 0 of 2, and the stated bound."""
    parsed = parse_data_spec(spec)
    base = rss_mb()
    loader = StreamLoader(parsed, batch, seq_len, 100_000, shard=0, shards=2)
    per_pass = shard_rows // batch + 1
    step = 0
    marks = []
    for passes in (1, 3):
        while step < passes * per_pass:
            step += 1
            loader.batch(step)
        marks.append(rss_mb() - base)
    loader.close()
    assert loader.history is not None
    n_src, width = len(parsed.sources), 8 + len(parsed.dense) + len(parsed.sparse) + len(parsed.tasks) * 2
    history_bytes = sum(8 * (2 + len(q.features)) * 1 for q in parsed.sequences) * loader.history.num_events
    batch_bytes = batch * (8 * (width + seq_len * (1 + sum(len(q.features) for q in parsed.sequences))))
    bound = n_src * (row_group + batch) * 8 * width + 4 * batch_bytes + history_bytes
    return {"after_1_pass_mb": marks[0], "after_3_passes_mb": marks[1], "bound_mb": bound / 2**20}


def resume_exactness(spec: dict[str, Any], batch: int, seq_len: int, steps: int = 24, cut: int = 9) -> float:
    parsed = parse_data_spec(spec)
    whole = StreamLoader(parsed, batch, seq_len, 100_000, shard=1, shards=2)
    reference = [whole.batch(s).extras["example_id"].tolist() for s in range(1, steps + 1)]
    first = StreamLoader(parsed, batch, seq_len, 100_000, shard=1, shards=2)
    for s in range(1, cut + 1):
        first.batch(s)
    resumed = StreamLoader(parsed, batch, seq_len, 100_000, shard=1, shards=2)
    resumed.restore(json.loads(json.dumps(first.state())), cut)  # through JSON, as a checkpoint holds it
    rest = [resumed.batch(s).extras["example_id"].tolist() for s in range(cut + 1, steps + 1)]
    for loader in (whole, first, resumed):
        loader.close()
    same: int = sum(a == b for ra, rb in zip(rest, reference[cut:], strict=True) for a, b in zip(ra, rb, strict=True))
    return float(same) / sum(len(r) for r in reference[cut:])


def _worker(local_rank: int, cfg: dict[str, Any], out_dir: str) -> None:
    from gem_workloads.models import get_preset
    from gem_workloads.training.env import load_env
    from gem_workloads.training.trainer import TrainArgs, Trainer

    env = load_env(cfg["env"])
    args = TrainArgs(
        preset=cfg["preset"],
        data_spec=cfg["spec_file"],
        steps=cfg["steps"],
        batch_size=cfg["batch"],
        log_every=1,
        metrics_port=0,
    )
    model_cfg = get_preset(cfg["preset"]).with_(max_table_rows=cfg["table_rows"])
    trainer = Trainer(args, env, local_rank, local_rank, out=io.StringIO(), config=model_cfg)
    start = time.perf_counter()
    records = trainer.run()
    wall = time.perf_counter() - start
    waits = list(trainer.loader.waits)
    trainer.close()
    eps = [r["examples_per_s"] for r in records[1:] if r.get("examples_per_s")]  # step 1 is FLOP-counted
    step_s = [cfg["batch"] * 2 / e for e in eps]
    result = {"rank": local_rank, "wall_s": wall, "waits": waits, "step_s": step_s}
    Path(out_dir, f"rank{local_rank}.json").write_text(json.dumps(result))


def train(spec_file: Path, preset: str, steps: int, batch: int, table_rows: int) -> list[dict[str, Any]]:
    from torch.multiprocessing.spawn import spawn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "WORLD_SIZE": "2",
        "NNODES": "1",
        "NODE_RANK": "0",
        "NPROC_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "GEM_MESH_SHAPE": "pp=1,dp_replicate=1,dp_shard=2,cp=1,tp=1",
        "GEM_MESH_COORDS": "[[0,0,0,0,0],[0,0,1,0,0]]",
        "GEM_EMBEDDING_SHARDING_GROUP": "2",
    }
    cfg = {"env": env, "preset": preset, "spec_file": str(spec_file), "steps": steps, "batch": batch}
    cfg["table_rows"] = table_rows
    with tempfile.TemporaryDirectory() as out:
        spawn(_worker, args=(cfg, out), nprocs=2, join=True)  # type: ignore[no-untyped-call]
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(2)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--table-rows", type=int, default=20_000, help="embedding rows per table (the data has fewer ids)")
    p.add_argument("--impressions", type=int, default=120_000)
    p.add_argument("--seconds", type=float, default=8.0, help="how long the loader-only throughput runs")
    p.add_argument("--skip-train", action="store_true")
    ns = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from gem_workloads.models import get_preset

    seq_len = get_preset(ns.preset).seq_len
    root = Path(tempfile.mkdtemp(prefix="gem-bench-data-"))
    cfg = AdsLogConfig(impressions=ns.impressions, purchases=ns.impressions // 2, posts=ns.impressions // 2)
    spec = write_ads_log(root, cfg)
    spec_file = root / "spec.json"
    spec_file.write_text(json.dumps(spec))
    out: dict[str, Any] = {"preset": ns.preset, "seq_len": seq_len, "batch_size": ns.batch_size}
    out["plain_pyarrow_scan_rows_per_s"] = round(plain_scan(spec))
    rate, _ = loader_throughput(spec, ns.batch_size, seq_len, ns.seconds)
    out["loader_examples_per_s_per_process"] = round(rate)
    out["loader_vs_plain_scan"] = round(rate / out["plain_pyarrow_scan_rows_per_s"], 4)
    out["memory"] = {
        k: round(v, 1) for k, v in memory(spec, ns.batch_size, seq_len, ns.impressions // 2, cfg.row_group_rows).items()
    }
    out["resume_exactness"] = resume_exactness(spec, ns.batch_size, seq_len)
    if not ns.skip_train:
        ranks = train(spec_file, ns.preset, ns.steps, ns.batch_size, ns.table_rows)
        for r in ranks:
            steady_wait = float(np.mean(r["waits"][1:])) if len(r["waits"]) > 1 else float("nan")
            step_s = float(np.mean(r["step_s"])) if r["step_s"] else float("nan")
            out[f"rank{r['rank']}"] = {
                "first_step_wait_s": round(r["waits"][0], 3),
                "steady_wait_s_per_step": round(steady_wait, 4),
                "step_s": round(step_s, 3),
                "wait_fraction": round(steady_wait / step_s, 4),
                "consumed_examples_per_s": round(ns.batch_size / step_s, 1),
            }
        out["target_wait_fraction_le_0_05"] = all(out[f"rank{r}"]["wait_fraction"] <= 0.05 for r in range(2))
    out["target_resume_exactness_100pct"] = out["resume_exactness"] == 1.0
    out["target_memory_bounded"] = (
        out["memory"]["after_3_passes_mb"] <= out["memory"]["after_1_pass_mb"] + 16
        and out["memory"]["after_3_passes_mb"] <= out["memory"]["bound_mb"]
    )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
