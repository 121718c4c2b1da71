"""The distributed training loop: process group, 5D DeviceMesh, TorchRec DMP, FSDP2, DCP.

Parallelism as implemented here (``--model kunlun``; modules in parentheses):

* the DeviceMesh has the five contract dims ``(pp, dp_replicate, dp_shard, cp, tp)``
  (:mod:`.parallel`); ranks that differ only in ``pp``, ``cp`` or ``tp`` train on the same batch,
  one batch per ``(dp_replicate, dp_shard)`` coordinate;
* ``pp``: the layer stack is cut into contiguous stages run by ``ScheduleGPipe`` with ``pp``
  microbatches (:mod:`.pipeline`); embeddings and feature preparation live on stage 0, heads and
  loss on the last stage; every module another stage owns is removed from this rank's model, so
  checkpoints hold each parameter once under its model name;
* ``tp``: Megatron column/row pairs over the attention projections, FFNs, FMB expert MLPs and
  task heads, applied before FSDP2 (:func:`.parallel.apply_tensor_parallel`);
* ``cp``: the sequence is split by whole attention blocks; summarisation combines per-rank
  partial attention exactly with log-sum-exp weights; the per-example part after the sequence
  is split over the cp ranks by examples (:mod:`.context`);
* ``ep`` (``GEM_EP``): per-domain experts spread over groups of ``ep`` ranks of
  ``dp_shard x cp``, rows exchanged by all-to-all (:mod:`.experts`);
* dense parameters: FSDP2 ``fully_shard`` over ``dp_shard x cp`` (HSDP with ``dp_replicate``
  as the replicate dim when it is > 1), one FSDP unit per block; the loss scaling that keeps
  gradients those of pure data parallelism is described in :mod:`.dense`;
* embeddings: TorchRec ``DistributedModelParallel`` over the ranks of pipeline stage 0 (the
  world when ``pp = 1``) with an ``EmbeddingShardingPlanner`` whose topology is the sharding
  group (``GEM_EMBEDDING_SHARDING_GROUP``). When the group is smaller than those ranks on CUDA,
  TorchRec's 2D ``DMPCollection`` shards inside each group and replicates across groups
  (replicas averaged by ``sync()`` every step); on CPU (DMPCollection is CUDA-only) tables are
  sharded over all of them and a warning says so. On CPU/gloo only table-wise sharding is
  offered (row-wise needs reduce_scatter); on GPU the planner chooses among
  table/row/column/table-row-wise. Sparse optimiser: Adagrad fused into the backward; dense: Adam.

``--model dlrm`` (the baseline) trains data-parallel only: ``pp = cp = tp = 1``.
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
from torch.distributed.device_mesh import DeviceMesh
from torch.utils.flop_counter import FlopCounterMode

from ..models import Batch, FeatureSchema, KunlunModel, ModelConfig, RankingModel, build_model, get_preset
from ..models.common import packed_sequence_embeddings, pooled_tokens, sequence_embeddings
from ..models.devices import resolve_device
from .checkpoint import open_checkpoints
from .dense import DenseRunner
from .env import TrainingEnv, require_supported_mesh
from .inputs import DATA_KEY, build_data, data_state, restore_data
from .metrics import AUCWindow, PrometheusMetrics, peak_flops
from .parallel import apply_fsdp, build_parallel, check_mesh_fits
from .pipeline import prune_to_stage, split_layers
from .publishing import Publishing, make_exporter
from .reporting import exit_without_teardown, report_checkpoint

log = logging.getLogger("gem_workloads.training")


@dataclass(frozen=True)
class TrainArgs:
    preset: str = "tiny"
    model: str = "kunlun"
    data: str = "synthetic"
    data_spec: str | None = None  # a data spec file (Parquet sources); replaces ``data``
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
    export_uri: str | None = None  # versioned model exports (publishing.py)
    export_every: int = 0  # steps between exports; 0: at the end only
    holdout_examples: int = 20_000
    holdout_sources: tuple[tuple[str, str], ...] = ()  # data spec: (source name, URI of its later data)


def masked_bce(logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
    return (loss * mask).sum() / mask.sum().clamp(min=1.0)


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
    dp: DeviceMesh,
    device: torch.device,
    args: TrainArgs,
) -> tuple[Any, list[nn.Module]]:
    """Data-parallel path (DLRM): DMP over the world, FSDP2 over ``dp`` for the dense units. Returns (dmp, units)."""
    units = model.dense_units()
    dmp = shard_embeddings(model, env, dist.GroupMember.WORLD, device, args, units)
    for unit in units:
        unit.to(device)
    apply_fsdp(units, dp, bf16=args.bf16)
    return dmp, units


def shard_embeddings(
    model: nn.Module,
    env: TrainingEnv,
    group: Any,
    device: torch.device,
    args: TrainArgs,
    units: list[nn.Module],
) -> Any:
    """TorchRec DMP of ``model.sparse`` over the ranks of ``group`` (the world, or one pipeline stage).

    ``units``: the modules holding every dense parameter of ``model`` (checked, so none is left
    out of FSDP). The dense part is left alone by DMP.
    """
    from torchrec.distributed.model_parallel import DataParallelWrapper, DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.sharding_plan import get_default_sharders
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    class _DenseLeftAlone(DataParallelWrapper):  # type: ignore[misc]
        """DMP would wrap the dense part in DDP; FSDP2 is applied instead (below)."""

        def wrap(self, dmp: Any, env: Any, device: Any) -> None:
            return None

    sparse_ids = {id(p) for p in model.get_submodule("sparse").parameters()}
    covered = {id(p) for u in units for p in u.parameters()}
    stray = [n for n, p in model.named_parameters() if id(p) not in sparse_ids and id(p) not in covered]
    if stray:
        raise RuntimeError(f"dense parameters outside every FSDP unit: {stray}")
    apply_optimizer_in_backward(
        torch.optim.Adagrad, list(model.get_submodule("sparse").parameters()), {"lr": args.sparse_lr}
    )
    schema: FeatureSchema = model.schema  # type: ignore[assignment]
    tables = [f.table for f in (*schema.user_features, *schema.item_features, *schema.sequence_features)]
    constraints = {t: ParameterConstraints(sharding_types=_sharding_types(device)) for t in tables}
    ranks = dist.get_world_size(group)
    sharding = env.sharding_group if ranks % env.sharding_group == 0 else ranks
    two_d = sharding < ranks and device.type == "cuda"
    if sharding < ranks and not two_d:
        # TorchRec's 2D embedding parallelism (DMPCollection: tables sharded inside each group,
        # groups replicated) supports CUDA only; on CPU the tables are sharded over all DMP ranks.
        log.warning(
            "GEM_EMBEDDING_SHARDING_GROUP=%d < %d embedding ranks on %s: sharding embeddings over all of them "
            "(DMPCollection needs CUDA)",
            sharding,
            ranks,
            device.type,
        )
        sharding = ranks
    topology = Topology(
        world_size=sharding,
        compute_device=device.type,
        local_world_size=min(env.nproc_per_node, sharding),
    )
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    plan = planner.collective_plan(model, get_default_sharders(), group)
    dmp: Any
    if two_d:
        from torchrec.distributed.model_parallel import DMPCollection

        dmp = DMPCollection(
            module=model,
            device=device,
            plan=plan,
            world_size=ranks,
            sharding_group_size=sharding,
            global_pg=group,
            data_parallel_wrapper=_DenseLeftAlone(),
        )
    else:
        from torchrec.distributed.types import ShardingEnv

        dmp = DistributedModelParallel(
            model,
            env=ShardingEnv.from_process_group(group),
            device=device,
            plan=plan,
            data_parallel_wrapper=_DenseLeftAlone(),
        )
    return dmp


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


def trainer_device(flag: str, local_rank: int) -> torch.device:
    """``--device`` (``auto``: ``$GEM_DEVICE``, else CUDA when present, else CPU); CUDA: this rank's GPU."""
    device = resolve_device(flag)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    return device


class Trainer(Publishing):
    args: TrainArgs

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
        self.device = trainer_device(args.device, local_rank)
        use_cuda = self.device.type == "cuda"
        if use_cuda:
            torch.cuda.set_device(self.device)
        backend = "nccl" if use_cuda else "gloo"
        if not dist.is_initialized():
            dist.init_process_group(
                backend,
                init_method=f"tcp://{env.master_addr}:{env.master_port}",
                rank=rank,
                world_size=env.world_size,
            )
        cfg = config or get_preset(args.preset)
        if args.comp_skip is not None:
            cfg = cfg.with_(comp_skip=args.comp_skip)
        self.config = cfg
        check_mesh_fits(env, cfg, args.model, args.batch_size)
        self.par = build_parallel(env, self.device.type)
        self.mesh = self.par.world
        # Ranks that differ only in pp, cp or tp train on the same batch.
        self.loader, self.schema = build_data(args, cfg, self.par.data_shard, self.par.data_shards)
        torch.manual_seed(args.seed)
        self.model = build_model(args.model, cfg, self.schema, device=torch.device("meta"))
        self.first_stage = self.par.pp_rank == 0
        self.runner: DenseRunner | None = None
        # self.dmp: what checkpoints save — the TorchRec DMP on ranks with embeddings, else the
        # stage's (pruned) model. torchrec ships no type information, hence Any.
        self.dmp: Any
        if isinstance(self.model, KunlunModel):
            layers = split_layers(cfg.num_layers, self.par.pp)[self.par.pp_rank]
            prune_to_stage(self.model, layers, first=self.first_stage, last=self.par.pp_rank == self.par.pp - 1)
            stage_units = [m for m in self.model.dense_units() if any(True for _ in m.parameters())]
            self.dmp = (
                shard_embeddings(self.model, env, self.par.stage_group, self.device, args, stage_units)
                if self.first_stage
                else self.model
            )
            self.runner = DenseRunner(self.model, self.par, self.device, microbatches=self.par.pp, bf16=args.bf16)
            self.units = self.runner.stage.units()
        else:
            self.dmp, self.units = shard_model(self.model, env, self.par.dp, self.device, args)
        self._replicated_embeddings = type(self.dmp).__name__ == "DMPCollection"
        self.dense_params = [p for u in self.units for p in u.parameters()]
        self.optimizer = torch.optim.Adam(self.dense_params, lr=args.lr)
        ckpt_root = args.checkpoint_dir or env.checkpoint_uri
        self.checkpoints = open_checkpoints(ckpt_root) if ckpt_root else None
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
        self.exporter = make_exporter(args, env, rank, self.config, self.schema, self.checkpoints)

    # -- checkpoint state ------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(what DCP saves/loads in place, the fused optimizer's full state dict)."""
        # Model FQNs: unique across pipeline stages and expert-parallel ranks.
        names = {id(p): n for n, p in self.model.named_parameters()}
        dense_optim = {names[id(p)]: st for p, st in self.optimizer.state.items()}
        sparse = self.dmp.fused_optimizer.state_dict() if self.first_stage else {"state": {}}
        state = {
            "model": self.dmp.state_dict(),
            "dense_optim": dense_optim,
            "sparse_optim": sparse["state"],
            "progress": {"step": torch.tensor(self.step, dtype=torch.int64)},
        }
        data = data_state(self.loader, self.par.data_shard, self.par.data_shards)  # streams: the read position
        if data is not None:
            state[DATA_KEY] = data
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
        path = self.checkpoints.resume_point(name, self.rank, self.local_rank)
        if path is None:
            return
        self._prime_dense_optimizer()
        state, sparse = self._state()
        self.checkpoints.load(path, state)
        self.dmp.load_state_dict(state["model"])
        if self.first_stage:
            self.dmp.fused_optimizer.load_state_dict(sparse)
        self.step = int(state["progress"]["step"])
        restore_data(self.loader, state.get(DATA_KEY), self.par.data_shard, self.par.data_shards, self.step)
        self._emit(
            {"event": "resumed", "step": self.step, "path": str(path), "param_checksum": param_checksum(self.dmp)}
        )

    # -- loop --------------------------------------------------------------------------------
    def _emit(self, record: dict[str, Any]) -> None:
        if self.rank == 0:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()

    def train_step(self, batch: Batch) -> Tensor:
        """One step; returns this rank's loss term (see :mod:`.dense` for how terms add up)."""
        if self.runner is None:  # data-parallel baseline
            logits: Tensor = self.dmp(batch)
            loss = masked_bce(logits, batch.labels, batch.label_mask)
            torch.autograd.backward(loss)
            labels, mask = batch.labels, batch.label_mask
        else:
            out = self.runner.step(self._lookups(batch) if self.first_stage else None, batch)
            loss, logits, labels, mask = out.loss, out.logits, out.labels, out.mask  # type: ignore[assignment]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self._replicated_embeddings:
            self.dmp.sync()  # DMPCollection: average the embedding replicas across sharding groups
        if logits is not None and labels is not None and mask is not None:  # last pipeline stage
            self.auc.add(torch.sigmoid(logits.detach().float()), labels, mask)
        return loss.detach()

    def _lookups(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """Stage 0: the sharded TorchRec lookups the first pipeline stage reads (user, sequence, item)."""
        sparse = self.dmp.module.sparse
        schema, cfg = self.schema, self.config
        user = pooled_tokens(sparse.user, batch.user.categorical, schema.user_names)
        names, groups = schema.sequence_names, schema.sequence_groups
        seq: Tensor
        if self.par.pp == 1:  # packed [T, d] ([T, F, d] with OneSeq groups): no padding at all
            seq, _ = packed_sequence_embeddings(
                sparse.sequence, batch.user.sequence, names, cfg.seq_len, cfg.block_size, groups
            )
        else:  # the schedule cuts microbatches along dim 0: right-padded [B, seq_len, d]
            seq, _ = sequence_embeddings(sparse.sequence, batch.user.sequence, names, cfg.seq_len, groups)
        item = pooled_tokens(sparse.item, batch.candidate.categorical, schema.item_names)
        return user, seq, item

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
            "data": self.args.data_spec or self.args.data,
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
        first_step = self.step + 1
        self.dmp.train()
        if self.runner is not None:
            self.runner.stage.train()
        while self.step < args.steps:
            step = self.step + 1
            batch = self.loader.batch(step).to(self.device)
            # The pipeline's first step infers its send/recv metadata with autograd.grad, which the
            # FLOP counter's backward hooks do not support: count a later step then. Sequences are
            # packed, so the count (and MFU) covers real events only, never padding.
            if self.flops_per_step is None and (self.par.pp == 1 or step > first_step):
                with FlopCounterMode(display=False) as counter:
                    loss = self.train_step(batch)
                self.flops_per_step = self._world_flops(float(counter.get_total_flops()))
                window_start, window_examples = time.perf_counter(), 0  # do not time the counted step
            else:
                loss = self.train_step(batch)
                window_examples += batch.size
            losses.append(loss)
            self.step = step
            if self.prom:
                self.prom.add_examples(batch.size * self.par.data_shards)
            if step % max(args.log_every, 1) == 0 or step == args.steps:
                record = self._log_record(step, losses, window_examples, time.perf_counter() - window_start)
                records.append(record)
                self._emit(record)
                if self.prom:
                    self.prom.update(record)
                losses, window_examples, window_start = [], 0, time.perf_counter()
            saved = self.checkpoints is not None and every > 0 and step % every == 0
            if saved:
                self.save()
            if args.export_every > 0 and step % args.export_every == 0 and step < args.steps:
                self.export_version(saved)
        final = self.checkpoints is not None and (every <= 0 or self.step % every != 0) and self.step > 0
        if final:
            self.save()
        done = {"event": "done", "step": self.step, "param_checksum": param_checksum(self.dmp)}
        if hasattr(self.loader, "malformed"):  # data spec: malformed rows skipped, per source (this rank's)
            done.update(malformed_rows=self.loader.malformed(), data_wait_s=round(self.loader.wait_seconds, 3))
        self._emit({**done, **self.final_export()})
        return records

    def _log_record(self, step: int, losses: list[Tensor], examples: int, seconds: float) -> dict[str, Any]:
        loss = torch.stack(losses).mean().to(_comm_device())
        stats = torch.tensor([float(examples), seconds], dtype=torch.float64, device=_comm_device())
        dist.all_reduce(loss)
        dist.all_reduce(stats)
        world, par = self.env.world_size, self.par
        mean_seconds = float(stats[1]) / world
        # Every rank of a data shard counted the same examples: count them once.
        shared = world // par.data_shards
        eps = float(stats[0]) / shared / mean_seconds if mean_seconds > 0 and examples > 0 else None
        flops_per_s = None
        mfu = None
        if eps is not None and self.flops_per_step:
            flops_per_s = self.flops_per_step / (self.args.batch_size * par.data_shards) * eps
            mfu = flops_per_s / (self.peak * world)
        auc_value = self._auc()
        # Loss terms live on the last pipeline stage; their sum over it is `world // pp` batch means.
        return {
            "step": step,
            "loss": round(float(loss) / (world // par.pp), 6),
            "examples_per_s": None if eps is None else round(eps, 1),
            "auc": None if auc_value is None else round(auc_value, 5),
            "flops_per_s": None if flops_per_s is None else float(f"{flops_per_s:.4g}"),
            "mfu": None if mfu is None else round(mfu, 5),
        }

    def _world_flops(self, local: float) -> float:
        """FLOPs of one step summed over all ranks (pipeline stages and tp/cp shards differ)."""
        total = torch.tensor(local, dtype=torch.float64, device=_comm_device())
        dist.all_reduce(total)
        return float(total)

    def _auc(self) -> float | None:
        """AUC of the window; with pp > 1 rank 0 scores nothing, so the last stage's first rank's value."""
        value = self.auc.value()
        if self.par.pp == 1:
            return value
        t = torch.tensor(float("nan") if value is None else value, dtype=torch.float64, device=_comm_device())
        dist.broadcast(t, src=(self.par.pp - 1) * (self.env.world_size // self.par.pp))
        return None if torch.isnan(t) else float(t)

    def close(self) -> None:
        if hasattr(self.loader, "close"):
            self.loader.close()
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
            exported = trainer.exporter.exported if trainer.exporter else []
            report_checkpoint(trainer.checkpoints.latest_name(), exported=exported)


def spawned_worker(local_rank: int, args: TrainArgs, env: TrainingEnv) -> None:
    """``torch.multiprocessing.spawn`` target (first argument: the local rank). Returns only by
    raising: spawn reports the exception; success ends the child here (:func:`exit_without_teardown`)."""
    run_worker(args, env, local_rank)
    exit_without_teardown(0)


__all__ = [
    "TrainArgs",
    "Trainer",
    "exit_without_teardown",
    "masked_bce",
    "report_checkpoint",
    "run_worker",
    "spawned_worker",
]
