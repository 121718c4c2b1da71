"""The foundation model's batch job: one forward pass over the examples writes, per example,

- the **KD soft labels** (the foundation model's probability for every task),
- the **LoopFM representation** (:mod:`gem_workloads.models.loopfm`: the last interaction
  layer's tokens and the last sequence layer's summary, ``2 * embedding_dim`` floats), and
- the **Solaris user-ad embedding** (the rows the foundation model's task heads read, what
  precompute workers write to the embedding store) with the user's behaviour bucket,

all from the same ``encode_user`` / ``embed_candidates`` calls, so LoopFM costs no extra
foundation-model compute over KD. Output folder::

    pass.json        {"foundationVersion", "kind", "tasks", "loopfmWidth", "solarisWidth", "layers", ...}
    examples.npz     rows (event indices), user, time, item, group, bucket
    soft_labels.npy  [n, tasks] float32
    loopfm.npy       [n, loopfmWidth] float32
    solaris.npy      [n, solarisWidth] float32
    memory.npz       the per-user historical memory over loopfm.npy (:class:`~.memory.HistoricalMemory`)

``python -m gem_workloads.training.foundation_pass --model DIR --data synthetic --output OUT``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from gem_common.argtypes import positive_int

from ..data.blocks import collate
from ..data.catalog import load_dataset
from ..data.timeline import TimedDataset
from ..models import devices
from ..models.devices import DeviceError, resolve_device
from ..models.kunlun import KunlunModel
from ..models.loopfm import representation_width, summarise
from .memory import HistoricalMemory

IntArray = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]

LAYERS = "last MoE interaction layer (mean over tokens) + last sequence layer's summariser (mean over seeds)"


def behaviour_bucket(vectors: F32, bits: int, seed: int = 7) -> IntArray:
    """Sign-of-random-projection hash (the precompute worker's, on the same user vector)."""
    planes = np.random.default_rng(seed).standard_normal((vectors.shape[1], bits)).astype(np.float32)
    out: IntArray = (((vectors @ planes) > 0) * (1 << np.arange(bits))).sum(1).astype(np.int64)
    return out


@dataclass
class FoundationPass:
    version: str
    rows: IntArray
    user: IntArray
    time: npt.NDArray[np.float64]
    item: IntArray
    group: IntArray
    bucket: IntArray
    soft: F32
    loopfm: F32
    solaris: F32

    def positions(self, rows: IntArray) -> IntArray:
        """Positions in this pass of the example ``rows`` (every one must be in the pass)."""
        pos = np.searchsorted(self.rows, rows)
        if len(rows) and (pos.max() >= len(self.rows) or not np.array_equal(self.rows[pos], rows)):
            raise ValueError("some examples are not in the foundation pass: run it over every example")
        return pos.astype(np.int64)

    def memory(self) -> HistoricalMemory:
        return HistoricalMemory(self.user, self.time, np.arange(len(self.rows), dtype=np.int64))

    def save(self, directory: str | Path, meta: dict[str, object]) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        np.savez(d / "examples.npz", rows=self.rows, user=self.user, time=self.time, item=self.item,
                 group=self.group, bucket=self.bucket)  # fmt: skip
        np.save(d / "soft_labels.npy", self.soft)
        np.save(d / "loopfm.npy", self.loopfm)
        np.save(d / "solaris.npy", self.solaris)
        self.memory().save(d / "memory.npz")
        info = {"foundationVersion": self.version, "examples": len(self.rows), "loopfmWidth": self.loopfm.shape[1],
                "solarisWidth": self.solaris.shape[1], "layers": LAYERS, **meta}  # fmt: skip
        (d / "pass.json").write_text(json.dumps(info, indent=1))
        return d

    @classmethod
    def load(cls, directory: str | Path) -> FoundationPass:
        d = Path(directory)
        try:
            info = json.loads((d / "pass.json").read_text())
            with np.load(d / "examples.npz") as ex:
                cols = {k: ex[k] for k in ("rows", "user", "time", "item", "group", "bucket")}
            return cls(str(info["foundationVersion"]), **cols, soft=np.load(d / "soft_labels.npy"),
                       loopfm=np.load(d / "loopfm.npy"), solaris=np.load(d / "solaris.npy"))  # fmt: skip
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(
                f"{d}: not a foundation pass output ({exc}); run gem_workloads.training.foundation_pass"
            ) from exc


@torch.inference_mode()
def run_pass(
    model: KunlunModel,
    data: TimedDataset,
    rows: IntArray,
    version: str,
    batch_size: int = 1024,
    bucket_bits: int = 8,
    device: torch.device | None = None,
) -> FoundationPass:
    """One pass of the foundation model (on ``device``, default the CPU) over the example ``rows`` (sorted)."""
    device = device or torch.device("cpu")
    if not isinstance(model, KunlunModel):
        raise TypeError(f"the foundation pass runs a Kunlun-style foundation model, got {type(model).__name__}")
    rows = np.sort(rows)
    model.eval()
    soft, reps, embs = [], [], []
    for lo in range(0, len(rows), batch_size):
        batch = collate(data.block(rows[lo : lo + batch_size], model.config.seq_len), model.schema).to(device)
        state = model.encode_user(batch.user)
        emb = model.embed_candidates(state, batch.candidate)
        soft.append(devices.to_numpy(torch.sigmoid(model.heads(emb))))
        reps.append(devices.to_numpy(summarise(model, emb)))
        embs.append(devices.to_numpy(emb))
    width = representation_width(model)
    loopfm = np.concatenate(reps) if reps else np.zeros((0, width), np.float32)
    return FoundationPass(
        version,
        rows,
        data.ev_user[rows],
        data.ev_time[rows],
        data.ev_item[rows],
        data.ev_group[rows],
        behaviour_bucket(loopfm[:, width // 2 :], bucket_bits),
        np.concatenate(soft) if soft else np.zeros((0, model.schema.num_tasks), np.float32),
        loopfm,
        np.concatenate(embs) if embs else np.zeros((0, model.embedding_size), np.float32),
    )


def main(argv: list[str] | None = None) -> int:
    from ..models.model_dir import ModelDirError, load_model_dir

    p = argparse.ArgumentParser(
        prog="python -m gem_workloads.training.foundation_pass", description=__doc__.split("\n")[0]
    )
    p.add_argument("--model", required=True, help="the foundation model's directory (role foundation)")
    p.add_argument("--data", choices=["synthetic", "movielens"], default="synthetic")
    p.add_argument("--seed", type=int, default=0, help="synthetic data seed")
    p.add_argument("--output", required=True, help="folder for soft labels, LoopFM representations, embeddings")
    p.add_argument("--batch-size", type=positive_int, default=1024)
    p.add_argument("--device", help="cuda, cpu (default $GEM_DEVICE, else cuda when present, else cpu)")
    args = p.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except DeviceError as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    try:
        loaded = load_model_dir(args.model, device)
    except ModelDirError as exc:
        print(f"error: --model: {exc}", file=sys.stderr)
        return 2
    if loaded.role != "foundation" or not isinstance(loaded.model, KunlunModel):
        print(
            f"error: --model: {args.model} is a {loaded.role} model ({loaded.kind}); give a foundation model",
            file=sys.stderr,
        )
        return 2
    data = load_dataset(args.data, args.seed)
    out = run_pass(loaded.model, data, data.examples, loaded.version, args.batch_size, device=device)
    out.save(args.output, {"data": args.data, "seed": args.seed, "tasks": [t.name for t in loaded.schema.tasks]})
    print(json.dumps({"output": args.output, "examples": len(out.rows), "foundationVersion": loaded.version}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
