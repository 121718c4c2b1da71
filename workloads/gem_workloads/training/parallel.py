"""Process groups of the 5D mesh and the tensor-parallel / FSDP2 plans of the dense model.

Dims, outer to inner: ``(pp, dp_replicate, dp_shard, cp, tp)`` (docs/contracts.md). From them:

* ``tp`` — tensor parallelism of the dense blocks (:func:`apply_tensor_parallel`): Megatron
  pairs, a column-parallel projection into a row-parallel one, so each block does one
  all-reduce forward and one backward. Heads are split whole (the fused q/k/v projections are
  head-major, see :mod:`gem_workloads.models.kunlun`). Norms, seeds, the FMB ``Y`` and the LCB
  stay replicated: their inputs are replicated, so their gradients are identical on every tp rank.
* FSDP2 after TP, as torchtitan does: ``fully_shard`` per block over ``dp_shard x cp`` (HSDP with
  ``dp_replicate``), giving 2D DTensors (dp-sharded, tp-sharded) for the TP'd weights.
* ``ep`` — per-domain experts over groups of ``ep`` consecutive ranks of ``dp_shard x cp``
  (:mod:`.experts`). Their FSDP mesh is the complement (the ranks holding the same experts), taken
  from a second device mesh ``(pp, dp_replicate, dp_shard*cp/ep, ep, tp)`` over the same ranks so
  that the experts' tp and dp meshes share a root (FSDP2 requires it for 2D parameters).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, parallelize_module

from ..models.kunlun import BlockAttentionLayer, FactorisationMachineBlock, KunlunModel, MoEInteraction, Summariser
from ..models.presets import ModelConfig
from .env import MESH_DIMS, EnvContractError, TrainingEnv


@dataclass
class Parallel:
    """This rank's view of the mesh: sizes, coordinates and groups of each parallel dim."""

    world: DeviceMesh
    dp: DeviceMesh  # FSDP mesh of the dense blocks: (dp_replicate?, dp_shard x cp)
    coords: tuple[int, int, int, int, int]
    sizes: tuple[int, int, int, int, int]
    stage_group: ProcessGroup  # all ranks of this pipeline stage (TorchRec DMP runs here)
    expert_mesh: DeviceMesh | None  # ep > 1: (pp, dp_replicate, dp_mod_ep, ep, tp)

    @property
    def pp(self) -> int:
        return self.sizes[0]

    @property
    def cp(self) -> int:
        return self.sizes[3]

    @property
    def tp(self) -> int:
        return self.sizes[4]

    @property
    def pp_rank(self) -> int:
        return self.coords[0]

    @property
    def cp_rank(self) -> int:
        return self.coords[3]

    @property
    def data_shard(self) -> int:
        """Index of this rank's batch: ranks differing only in pp, cp or tp share one."""
        return self.coords[1] * self.sizes[2] + self.coords[2]

    @property
    def data_shards(self) -> int:
        return self.sizes[1] * self.sizes[2]

    def group(self, dim: str) -> ProcessGroup:
        return self.world[dim].get_group()

    @property
    def expert_dp(self) -> DeviceMesh | None:
        if self.expert_mesh is None:
            return None
        if self.sizes[1] > 1:
            return self.expert_mesh["dp_replicate", "dp_mod_ep"]
        return self.expert_mesh["dp_mod_ep"]


def build_parallel(env: TrainingEnv, device_type: str) -> Parallel:
    """Create every mesh and group (collective: all ranks call it in the same order)."""
    mesh = env.mesh
    world = init_device_mesh(device_type, mesh.as_tuple(), mesh_dim_names=MESH_DIMS)
    coords = tuple(world.get_coordinate() or ())
    assert len(coords) == 5
    if mesh.cp > 1:
        shard, name = world["dp_shard", "cp"]._flatten("dp_shard_cp"), "dp_shard_cp"
    else:
        shard, name = world["dp_shard"], "dp_shard"
    dp = world["dp_replicate", name] if mesh.dp_replicate > 1 else shard
    stage_group = (
        world["dp_replicate", "dp_shard", "cp", "tp"]._flatten("stage").get_group()
        if mesh.pp > 1
        else dist.GroupMember.WORLD
    )
    assert stage_group is not None
    expert_mesh = None
    if env.ep > 1:
        shape = (mesh.pp, mesh.dp_replicate, mesh.dp_shard * mesh.cp // env.ep, env.ep, mesh.tp)
        expert_mesh = init_device_mesh(
            device_type, shape, mesh_dim_names=("pp", "dp_replicate", "dp_mod_ep", "ep", "tp")
        )
    return Parallel(
        world=world,
        dp=dp,
        coords=(coords[0], coords[1], coords[2], coords[3], coords[4]),
        sizes=mesh.as_tuple(),
        stage_group=stage_group,
        expert_mesh=expert_mesh,
    )


def _pair(first: str, second: str) -> dict[str, ParallelStyle]:
    return {first: ColwiseParallel(), second: RowwiseParallel()}


def apply_tensor_parallel(model: KunlunModel, tp: DeviceMesh, expert_tp: DeviceMesh | None = None) -> None:
    """TP plans for this rank's blocks (placeholders of other stages/ranks are skipped).

    ``expert_tp``: the tp mesh of the expert mesh when ``ep > 1`` (same ranks as ``tp``).
    """
    for layer in model.attention:
        if isinstance(layer, BlockAttentionLayer):
            parallelize_module(layer, tp, {**_pair("qkv", "proj"), **_pair("ffn.0", "ffn.2")})
    for summariser in model.summarisers:
        if isinstance(summariser, Summariser):
            parallelize_module(summariser, tp, {"q": ColwiseParallel(), **_pair("kv", "proj")})
    for interaction in model.interactions:
        if not isinstance(interaction, MoEInteraction):
            continue
        parallelize_module(interaction.shared, tp, _pair("mlp.0", "mlp.2"))
        for expert in interaction.experts:
            if isinstance(expert, FactorisationMachineBlock):
                parallelize_module(expert, expert_tp or tp, _pair("mlp.0", "mlp.2"))
    heads = getattr(model.heads, "heads", None)
    if isinstance(heads, nn.ModuleList):
        for head in heads:
            parallelize_module(head, tp, _pair("0", "2"))


def apply_fsdp(
    units: list[nn.Module],
    dp: DeviceMesh,
    *,
    bf16: bool,
    experts: list[nn.Module] = (),  # type: ignore[assignment]
    expert_dp: DeviceMesh | None = None,
) -> None:
    """One FSDP2 unit per block; experts (ep > 1) first, on their own dp mesh.

    Expert gradients are summed over their ep group by the all-to-all's backward, then averaged
    by FSDP over ``expert_dp``; dividing by the full dp size instead (``dp.size()``) makes them the
    same average over data ranks as every other parameter.
    """
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    )
    for expert in experts:
        assert expert_dp is not None
        fully_shard(expert, mesh=expert_dp, mp_policy=mp).set_gradient_divide_factor(float(dp.size()))
    for unit in units:
        fully_shard(unit, mesh=dp, mp_policy=mp)


def check_mesh_fits(env: TrainingEnv, cfg: ModelConfig, model: str, batch_size: int) -> None:
    """Mesh x model checks (EnvContractError naming GEM_MESH_SHAPE and the fix; ValueError for --batch-size)."""
    m, shown = env.mesh, str(env.mesh)
    if model != "kunlun":
        if m.pp > 1 or m.cp > 1 or m.tp > 1:
            raise EnvContractError(
                "GEM_MESH_SHAPE",
                shown,
                f"--model {model} is the data-parallel baseline (no layer stack, sequence attention or wide "
                "MLPs to split): use pp=1, cp=1, tp=1, or --model kunlun",
            )
        return
    if m.pp > cfg.num_layers:
        raise EnvContractError(
            "GEM_MESH_SHAPE",
            shown,
            f"pp={m.pp} exceeds the {cfg.num_layers} layers of preset {cfg.name!r}: use pp <= {cfg.num_layers} "
            "or a preset with more layers",
        )
    blocks = cfg.seq_len // cfg.block_size
    if blocks % m.cp:
        raise EnvContractError(
            "GEM_MESH_SHAPE",
            shown,
            f"cp={m.cp} must divide the {blocks} attention blocks of preset {cfg.name!r} "
            f"(seq_len {cfg.seq_len} / block_size {cfg.block_size})",
        )
    widths = {
        "num_heads": cfg.num_heads,
        "ffn width": cfg.ffn_mult * cfg.embedding_dim,
        "expert_hidden": cfg.expert_hidden,
        "head_hidden": cfg.head_hidden,
    }
    bad = [f"{k}={v}" for k, v in widths.items() if v % m.tp]
    if bad:
        raise EnvContractError(
            "GEM_MESH_SHAPE",
            shown,
            f"tp={m.tp} must divide {', '.join(bad)} of preset {cfg.name!r}: use a smaller tp or a wider preset",
        )
    rows = m.pp * m.cp if m.pp > 1 else m.cp
    if batch_size % rows:
        raise ValueError(
            f"--batch-size {batch_size} must be divisible by {rows} (pp={m.pp} microbatches, each split over cp={m.cp})"
        )


__all__ = ["Parallel", "apply_fsdp", "apply_tensor_parallel", "build_parallel", "check_mesh_fits"]
