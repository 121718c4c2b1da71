"""The distributed training loop: process group, 5D DeviceMesh, TorchRec DMP, FSDP2, DCP.

Parallelism as implemented here:

* the DeviceMesh has the five contract dims ``(pp, dp_replicate, dp_shard, cp, tp)``;
* every rank trains on its own data shard (``pp = tp = 1`` is required: the ranking model is
  small enough per layer that pipeline / tensor parallelism are not implemented; ``cp`` is
  folded into data sharding as torchtitan does for non-attention-heavy dense parts);
* dense parameters: FSDP2 ``fully_shard`` over ``dp_shard x cp`` (HSDP with ``dp_replicate``
  as the replicate dim when it is > 1), one FSDP unit per block;
* embeddings: TorchRec ``DistributedModelParallel`` with an ``EmbeddingShardingPlanner``
  whose topology is the sharding group (``GEM_EMBEDDING_SHARDING_GROUP``). When the group is
  smaller than the world on CUDA, TorchRec's 2D ``DMPCollection`` shards inside each group and
  replicates across groups (replicas averaged by ``sync()`` every step); on CPU (DMPCollection
  is CUDA-only) tables are sharded over the whole world and a warning says so. On CPU/gloo
  only table-wise sharding is offered (row-wise needs reduce_scatter); on GPU the planner
  chooses among table/row/column/table-row-wise. Sparse optimiser: Adagrad fused into the
  backward; dense: Adam.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.flop_counter import FlopCounterMode

from ..data import MixingLoader, MovieLens, SyntheticConfig, SyntheticUniverse, cap_schema
from ..models import Batch, FeatureSchema, ModelConfig, RankingModel, build_model, get_preset
from .checkpoint import CheckpointManager
from .env import MESH_DIMS, TrainingEnv, require_supported_mesh
from .metrics import AUCWindow, PrometheusMetrics, peak_flops

log = logging.getLogger("gem_workloads.training")


@dataclass(frozen=True)
class TrainArgs:
    preset: str = "tiny"
    model: str = "kunlun"
    data: str = "synthetic"
    steps: int = 100
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    batch_size: int = 256  # per rank
    lr: float = 3e-3
    sparse_lr: float = 0.05
    seed: int = 0
    log_every: int = 10
    device: str = "auto"
    bf16: bool = False
    comp_skip: bool | None = None
    resume_from: str | None = None
    metrics_port: int = 9400


def masked_bce(logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
    return (loss * mask).sum() / mask.sum().clamp(min=1.0)


def build_data(args: TrainArgs, cfg: ModelConfig, shard: int) -> tuple[MixingLoader, FeatureSchema]:
    if args.data == "synthetic":
        universe = SyntheticUniverse(SyntheticConfig(seq_len=cfg.seq_len, seed=args.seed))
        schema = cap_schema(universe.schema, cfg.max_table_rows)
        sources = [universe.domain(i) for i in range(len(universe.cfg.domains))]
        weights = [d.weight for d in universe.cfg.domains]
        return MixingLoader(sources, weights, args.batch_size, seed=args.seed, shard=shard, schema=schema), schema
    if args.data == "movielens":
        ml = MovieLens(seq_len=cfg.seq_len)
        schema = cap_schema(ml.schema, cfg.max_table_rows)
        return MixingLoader(
            [ml.source("train")], [1.0], args.batch_size, seed=args.seed, shard=shard, schema=schema
        ), schema
    raise ValueError(f"--data must be 'synthetic' or 'movielens', got {args.data!r}")


def _sharding_types(device: torch.device) -> list[str]:
    from torchrec.distributed.types import ShardingType

    if device.type == "cpu":
        return [ShardingType.TABLE_WISE.value]
    return [
        ShardingType.TABLE_WISE.value,
        ShardingType.ROW_WISE.value,
        ShardingType.COLUMN_WISE.value,
        ShardingType.TABLE_ROW_WISE.value,
    ]


def shard_model(
    model: RankingModel,
    env: TrainingEnv,
    mesh: DeviceMesh,
    device: torch.device,
    args: TrainArgs,
) -> tuple[Any, list[nn.Module]]:
    """DMP for the TorchRec modules, FSDP2 for the dense units. Returns (dmp, dense units)."""
    from torchrec.distributed.model_parallel import DataParallelWrapper, DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.sharding_plan import get_default_sharders
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    class _DenseLeftAlone(DataParallelWrapper):  # type: ignore[misc]
        """DMP would wrap the dense part in DDP; FSDP2 is applied instead (below)."""

        def wrap(self, dmp: Any, env: Any, device: Any) -> None:
            return None

    units = model.dense_units()
    sparse_ids = {id(p) for p in model.sparse.parameters()}
    covered = {id(p) for u in units for p in u.parameters()}
    stray = [n for n, p in model.named_parameters() if id(p) not in sparse_ids and id(p) not in covered]
    if stray:
        raise RuntimeError(f"dense parameters outside every FSDP unit: {stray}")
    apply_optimizer_in_backward(torch.optim.Adagrad, list(model.sparse.parameters()), {"lr": args.sparse_lr})
    tables = [
        f.table for f in (*model.schema.user_features, *model.schema.item_features, *model.schema.sequence_features)
    ]
    constraints = {t: ParameterConstraints(sharding_types=_sharding_types(device)) for t in tables}
    group = env.sharding_group
    two_d = group < env.world_size and device.type == "cuda"
    if group < env.world_size and not two_d:
        # TorchRec's 2D embedding parallelism (DMPCollection: tables sharded inside each group,
        # groups replicated) supports CUDA only; on CPU the tables are sharded over the whole world.
        log.warning(
            "GEM_EMBEDDING_SHARDING_GROUP=%d < WORLD_SIZE=%d on %s: sharding embeddings over the whole "
            "world (DMPCollection needs CUDA)",
            group,
            env.world_size,
            device.type,
        )
        group = env.world_size
    topology = Topology(
        world_size=group,
        compute_device=device.type,
        local_world_size=min(env.nproc_per_node, group),
    )
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    plan = planner.collective_plan(model, get_default_sharders(), dist.GroupMember.WORLD)
    dmp: Any
    if two_d:
        from torchrec.distributed.model_parallel import DMPCollection

        dmp = DMPCollection(
            module=model,
            device=device,
            plan=plan,
            world_size=env.world_size,
            sharding_group_size=group,
            global_pg=dist.GroupMember.WORLD,
            data_parallel_wrapper=_DenseLeftAlone(),
        )
    else:
        dmp = DistributedModelParallel(model, device=device, plan=plan, data_parallel_wrapper=_DenseLeftAlone())
    dense_mesh = fsdp_mesh(mesh, env)
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if args.bf16
        else MixedPrecisionPolicy()
    )
    for unit in units:
        unit.to(device)
        fully_shard(unit, mesh=dense_mesh, mp_policy=mp)
    return dmp, units


def fsdp_mesh(mesh: DeviceMesh, env: TrainingEnv) -> DeviceMesh:
    if env.mesh.cp > 1:
        shard = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
        name = "dp_shard_cp"
    else:
        shard, name = mesh["dp_shard"], "dp_shard"
    if env.mesh.dp_replicate > 1:
        return mesh["dp_replicate", name]
    return shard


def param_checksum(module: nn.Module) -> float:
    """Sum over ranks of a position-weighted sum of every local shard (equal params => equal sums)."""
    total = torch.zeros((), dtype=torch.float64)
    for name, p in sorted(module.state_dict().items()):
        local = _local(p)
        if local is None or local.numel() == 0 or not local.is_floating_point():
            continue
        flat = local.detach().reshape(-1).to("cpu", torch.float64)
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64).remainder(97).add(1)
        total += (flat * weights).sum() + len(name)
    if dist.is_initialized():
        t = total.to(_comm_device())
        dist.all_reduce(t)
        total = t.cpu()
    return float(total)


def _local(t: Any) -> Tensor | None:
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        return t.to_local()
    if hasattr(t, "local_shards"):  # torchrec ShardedTensor
        shards = t.local_shards()
        return torch.cat([s.tensor.reshape(-1) for s in shards]) if shards else None
    return t if isinstance(t, Tensor) else None


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


class Trainer:
    def __init__(
        self,
        args: TrainArgs,
        env: TrainingEnv,
        rank: int,
        local_rank: int,
        out: TextIO = sys.stdout,
        config: ModelConfig | None = None,
    ) -> None:
        """``config`` overrides the preset named by ``args.preset`` (benchmarks use this)."""
        self.args, self.env, self.rank, self.local_rank, self.out = args, env, rank, local_rank, out
        require_supported_mesh(env)
        use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        if use_cuda:
            self.device = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        backend = "nccl" if use_cuda else "gloo"
        if not dist.is_initialized():
            dist.init_process_group(
                backend,
                init_method=f"tcp://{env.master_addr}:{env.master_port}",
                rank=rank,
                world_size=env.world_size,
            )
        self.mesh = init_device_mesh(self.device.type, env.mesh.as_tuple(), mesh_dim_names=MESH_DIMS)
        cfg = config or get_preset(args.preset)
        if args.comp_skip is not None:
            cfg = cfg.with_(comp_skip=args.comp_skip)
        self.config = cfg
        self.loader, self.schema = build_data(args, cfg, shard=rank)
        torch.manual_seed(args.seed)
        self.model = build_model(args.model, cfg, self.schema, device=torch.device("meta"))
        self.dmp: Any  # torchrec DistributedModelParallel (torchrec ships no type information)
        self.dmp, self.units = shard_model(self.model, env, self.mesh, self.device, args)
        self._replicated_embeddings = type(self.dmp).__name__ == "DMPCollection"
        self.dense_view = nn.ModuleList(self.units)
        self.dense_params = [p for u in self.units for p in u.parameters()]
        self.optimizer = torch.optim.Adam(self.dense_params, lr=args.lr)
        ckpt_root = args.checkpoint_dir or env.checkpoint_uri
        self.checkpoints = CheckpointManager(Path(ckpt_root)) if ckpt_root else None
        self.auc = AUCWindow(self.schema.num_tasks)
        self.prom = (
            PrometheusMetrics(
                args.metrics_port, {"job": str(env.config.get("name", "gem-train")), "node_rank": str(env.node_rank)}
            )
            if local_rank == 0
            else None
        )
        self.peak = peak_flops(self.device, torch.bfloat16 if args.bf16 else torch.float32)
        self.flops_per_step: float | None = None
        self.step = 0

    # -- checkpoint state ------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(what DCP saves/loads in place, the fused optimizer's full state dict)."""
        names = {id(p): n for n, p in self.dense_view.named_parameters()}
        dense_optim = {names[id(p)]: st for p, st in self.optimizer.state.items()}
        sparse = self.dmp.fused_optimizer.state_dict()
        state = {
            "model": self.dmp.state_dict(),
            "dense_optim": dense_optim,
            "sparse_optim": sparse["state"],
            "progress": {"step": torch.tensor(self.step, dtype=torch.int64)},
        }
        return state, sparse

    def _prime_dense_optimizer(self) -> None:
        """Create Adam's lazy state (a zero-gradient, zero-lr step) so a checkpoint can load into it."""
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        for p in self.dense_params:
            p.grad = torch.zeros_like(p)
        for g in self.optimizer.param_groups:
            g["lr"] = 0.0
        self.optimizer.step()
        for g, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)

    def save(self) -> None:
        assert self.checkpoints is not None
        path = self.checkpoints.save(self.step, self._state()[0], self.rank)
        checksum = param_checksum(self.dmp)
        if self.prom:
            self.prom.checkpointed(self.step)
        self._emit({"event": "checkpoint", "step": self.step, "path": str(path), "param_checksum": checksum})

    def maybe_resume(self) -> None:
        if self.checkpoints is None:
            return
        name = self.args.resume_from or self.env.resume_from
        path = self.checkpoints.root / name if name else self.checkpoints.latest()
        if path is None:
            return
        self._prime_dense_optimizer()
        state, sparse = self._state()
        self.checkpoints.load(path, state)
        self.dmp.load_state_dict(state["model"])
        self.dmp.fused_optimizer.load_state_dict(sparse)
        self.step = int(state["progress"]["step"])
        self._emit(
            {"event": "resumed", "step": self.step, "path": str(path), "param_checksum": param_checksum(self.dmp)}
        )

    # -- loop --------------------------------------------------------------------------------
    def _emit(self, record: dict[str, Any]) -> None:
        if self.rank == 0:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()

    def train_step(self, batch: Batch) -> Tensor:
        logits: Tensor = self.dmp(batch)
        loss = masked_bce(logits, batch.labels, batch.label_mask)
        torch.autograd.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self._replicated_embeddings:
            self.dmp.sync()  # DMPCollection: average the embedding replicas across sharding groups
        self.auc.add(torch.sigmoid(logits.detach().float()), batch.labels, batch.label_mask)
        return loss.detach()

    def _start_record(self) -> dict[str, Any]:
        env = self.env
        nodes = None
        if env.rank_map_file:
            try:
                nodes = len(json.loads(Path(env.rank_map_file).read_text()).get("nodes", []))
            except (OSError, ValueError, AttributeError) as exc:
                log.warning("GEM_RANK_MAP_FILE=%s unreadable: %s", env.rank_map_file, exc)
        return {
            "event": "start",
            "world_size": env.world_size,
            "mesh": str(env.mesh),
            "coords": [list(self.mesh.get_coordinate() or [])],
            "embedding_sharding_group": env.sharding_group,
            "model": self.args.model,
            "preset": self.config.name,
            "comp_skip": self.config.comp_skip,
            "data": self.args.data,
            "device": str(self.device),
            "rank_map_nodes": nodes,
            "metrics_port": self.prom.port if self.prom else None,
        }

    def run(self) -> list[dict[str, Any]]:
        args = self.args
        self._emit(self._start_record())
        self.maybe_resume()
        records: list[dict[str, Any]] = []
        every = args.checkpoint_every or int(self.env.config.get("checkpoint", {}).get("intervalSteps", 0) or 0)
        losses: list[Tensor] = []
        window_start = time.perf_counter()
        window_examples = 0
        self.dmp.train()
        while self.step < args.steps:
            step = self.step + 1
            batch = self.loader.batch(step).to(self.device)
            if self.flops_per_step is None:
                with FlopCounterMode(display=False) as counter:
                    loss = self.train_step(batch)
                self.flops_per_step = float(counter.get_total_flops())
                window_start = time.perf_counter()  # do not time the counted step
            else:
                loss = self.train_step(batch)
                window_examples += batch.size
            losses.append(loss)
            self.step = step
            if self.prom:
                self.prom.add_examples(batch.size * self.env.world_size)
            if step % max(args.log_every, 1) == 0 or step == args.steps:
                record = self._log_record(step, losses, window_examples, time.perf_counter() - window_start)
                records.append(record)
                self._emit(record)
                if self.prom:
                    self.prom.update(record)
                losses, window_examples, window_start = [], 0, time.perf_counter()
            if self.checkpoints is not None and every > 0 and step % every == 0:
                self.save()
        if self.checkpoints is not None and (every <= 0 or self.step % every != 0) and self.step > 0:
            self.save()
        self._emit({"event": "done", "step": self.step, "param_checksum": param_checksum(self.dmp)})
        return records

    def _log_record(self, step: int, losses: list[Tensor], examples: int, seconds: float) -> dict[str, Any]:
        loss = torch.stack(losses).mean().to(_comm_device())
        stats = torch.tensor([float(examples), seconds], dtype=torch.float64, device=_comm_device())
        dist.all_reduce(loss)
        dist.all_reduce(stats)
        world = self.env.world_size
        mean_seconds = float(stats[1]) / world
        eps = float(stats[0]) / mean_seconds if mean_seconds > 0 and examples > 0 else None
        flops_per_s = None
        mfu = None
        if eps is not None and self.flops_per_step:
            flops_per_s = self.flops_per_step / self.args.batch_size * eps
            mfu = flops_per_s / (self.peak * world)
        auc_value = self.auc.value()
        return {
            "step": step,
            "loss": round(float(loss) / world, 6),
            "examples_per_s": None if eps is None else round(eps, 1),
            "auc": None if auc_value is None else round(auc_value, 5),
            "flops_per_s": None if flops_per_s is None else float(f"{flops_per_s:.4g}"),
            "mfu": None if mfu is None else round(mfu, 5),
        }

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_worker(args: TrainArgs, env: TrainingEnv, local_rank: int) -> None:
    """Entry of one training process (spawned or launched by torchrun)."""
    torch.set_num_threads(max(1, int(os.environ.get("GEM_NUM_THREADS", "0")) or torch.get_num_threads()))
    rank = env.rank if env.rank is not None else env.global_rank(local_rank)
    logging.basicConfig(level=logging.WARNING, format=f"[rank{rank}] %(levelname)s %(name)s: %(message)s")
    np.seterr(all="ignore")
    trainer = Trainer(args, env, rank, local_rank)
    try:
        trainer.run()
    finally:
        trainer.close()
        if local_rank == 0 and trainer.checkpoints is not None:
            report_checkpoint(trainer.checkpoints.latest())


def report_checkpoint(latest: Path | None, path: str | None = None) -> bool:
    """Tell the operator the newest checkpoint through the container's termination message.

    docs/contracts.md: JSON {"checkpoint": "step-000400"} in /dev/termination-log (or
    $GEM_TERMINATION_LOG). Best effort: outside a pod the file is absent and nothing is written.
    """
    target = Path(path or os.environ.get("GEM_TERMINATION_LOG", "/dev/termination-log"))
    if latest is None or not target.parent.is_dir():
        return False
    try:
        target.write_text(json.dumps({"checkpoint": latest.name}))
    except OSError:
        return False
    return True


def spawned_worker(local_rank: int, args: TrainArgs, env: TrainingEnv) -> None:
    """``torch.multiprocessing.spawn`` target (first argument: the local rank)."""
    run_worker(args, env, local_rank)


__all__ = ["TrainArgs", "Trainer", "masked_bce", "report_checkpoint", "run_worker", "spawned_worker"]
