"""The env contract the operator injects into GEMTraining pods (docs/contracts.md), typed.

Every violation raises :class:`EnvContractError` naming the variable, its value and the fix.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.stores import RetrySettingError, retry_settings

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")

ENV_HELP = """\
environment (the GEMTraining env contract, docs/contracts.md; PET_* forms are accepted too):
  WORLD_SIZE                     total processes = NNODES x NPROC_PER_NODE = product of the mesh dims
  RANK, LOCAL_RANK               set per process by torchrun; when absent this command starts
                                 NPROC_PER_NODE local processes itself (rank = NODE_RANK x NPROC_PER_NODE + l)
  NODE_RANK, NNODES              this pod's node rank and the number of pods (default 0 and 1)
  NPROC_PER_NODE                 processes in this pod (default WORLD_SIZE / NNODES)
  MASTER_ADDR, MASTER_PORT       rendezvous of node-rank 0 (default 127.0.0.1:29500)
  GEM_MESH_SHAPE                 e.g. pp=1,dp_replicate=1,dp_shard=4,cp=1,tp=1 (these five names, this
                                 order; default dp_shard=WORLD_SIZE)
  GEM_EP                         expert-parallel degree, divides dp_shard x cp (default 1)
  GEM_MESH_COORDS                JSON list, one 5-tuple per local rank; must equal the rank unravelled
                                 row-major over the mesh shape (checked)
  GEM_EMBEDDING_SHARDING_GROUP   ranks per TorchRec sharding group, divides WORLD_SIZE (default WORLD_SIZE)
  GEM_CONFIG_FILE                the job's resolved config.json (preset, data, steps, checkpoint...);
                                 command-line flags override it
  GEM_RANK_MAP_FILE              full rank map (read for logging only)
  GEM_CHECKPOINT_URI             checkpoint location when --checkpoint-dir is not given: a path, file://,
                                 s3:// or gs:// (uploaded with a loader manifest; credentials from AWS_* /
                                 GOOGLE_*, AWS_ENDPOINT_URL for a custom endpoint)
  GEM_RESUME_FROM                checkpoint name to resume from (e.g. step-000400); empty: the newest
  GEM_RESTORE_DIR                local dir where an init container already pulled GEM_RESUME_FROM
                                 (gem-load pull); used when complete, else the trainer pulls it itself
  GEM_CHECKPOINT_STAGING         node-local scratch for object-store checkpoints (default: temp dir)
  GEM_METRICS_PORT               Prometheus port of local rank 0 (default 9400; 0 disables)
  GEM_NUM_THREADS                torch intra-op threads per process (default: torch's choice)
  GEM_DATA_RETRIES               attempts per read of a data source (default 5, at least 1)
  GEM_DATA_RETRY_BASE_S          first backoff between them, doubling (default 0.5 s)

parallelism (--model kunlun): pp pipelines the layer stack (GPipe, pp microbatches; embeddings on stage 0,
heads on the last), tp splits heads and MLP widths, cp splits the sequence by attention blocks, ep spreads
the per-domain experts over groups of dp_shard x cp ranks, dense params are FSDP2-sharded over dp_shard x cp.
limits: pp <= the preset's num_layers; cp divides seq_len / block_size; tp divides num_heads and every MLP
width; --batch-size divisible by pp x cp (and by cp when pp=1). --model dlrm trains data-parallel only
(pp=cp=tp=1).
"""


class EnvContractError(ValueError):
    """A variable of the env contract is missing, malformed or inconsistent."""

    def __init__(self, variable: str, value: str | None, problem: str) -> None:
        self.variable, self.value, self.problem = variable, value, problem
        shown = "<unset>" if value is None else repr(value)
        super().__init__(f"{variable}={shown}: {problem}")


@dataclass(frozen=True)
class MeshShape:
    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    tp: int = 1

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return (self.pp, self.dp_replicate, self.dp_shard, self.cp, self.tp)

    @property
    def size(self) -> int:
        return math.prod(self.as_tuple())

    def coords_of(self, rank: int) -> tuple[int, ...]:
        """DeviceMesh convention: ``rank`` unravelled row-major over the shape."""
        out: list[int] = []
        for dim in reversed(self.as_tuple()):
            out.append(rank % dim)
            rank //= dim
        return tuple(reversed(out))

    def __str__(self) -> str:
        return ",".join(f"{n}={v}" for n, v in zip(MESH_DIMS, self.as_tuple(), strict=True))


@dataclass(frozen=True)
class TrainingEnv:
    world_size: int
    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    mesh: MeshShape
    ep: int
    sharding_group: int
    rank: int | None = None  # set when launched by torchrun
    local_rank: int | None = None
    coords: tuple[tuple[int, ...], ...] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    config_file: str | None = None
    rank_map_file: str | None = None
    checkpoint_uri: str | None = None
    resume_from: str | None = None
    metrics_port: int = 9400

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


def require_supported_mesh(env: TrainingEnv) -> None:
    """Cross-checks of the mesh for a :class:`TrainingEnv` built by hand (``load_env`` does them too).

    Every mesh that passes is trained; what depends on the model (pp vs layers, tp vs widths,
    cp vs attention blocks) is checked by ``parallel.check_mesh_fits`` once the preset is known.
    """
    if env.mesh.size != env.world_size:
        raise EnvContractError(
            "GEM_MESH_SHAPE",
            str(env.mesh),
            f"the product of the mesh dims is {env.mesh.size} but WORLD_SIZE is {env.world_size}",
        )
    shard_cp = env.mesh.dp_shard * env.mesh.cp
    if shard_cp % env.ep:
        raise EnvContractError("GEM_EP", str(env.ep), f"must divide dp_shard x cp = {shard_cp}")


def _get(env: Mapping[str, str], name: str) -> str | None:
    for key in (name, f"PET_{name}"):
        value = env.get(key)
        if value is not None and value.strip() != "":
            return value.strip()
    return None


def _int(
    env: Mapping[str, str], name: str, default: int | None, *, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = _get(env, name)
    if raw is None:
        if default is None:
            raise EnvContractError(name, None, "is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvContractError(name, raw, "must be an integer") from None
    if value < minimum:
        raise EnvContractError(name, raw, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise EnvContractError(name, raw, f"must be <= {maximum}")
    return value


def parse_mesh_shape(raw: str) -> MeshShape:
    name = "GEM_MESH_SHAPE"
    parts = [p.strip() for p in raw.split(",")]
    expected = ",".join(f"{d}=N" for d in MESH_DIMS)
    if len(parts) != len(MESH_DIMS):
        raise EnvContractError(name, raw, f"needs exactly the five dims {expected}")
    values: list[int] = []
    for part, dim in zip(parts, MESH_DIMS, strict=True):
        m = re.fullmatch(r"([a-z_]+)=(\d+)", part)
        if not m:
            raise EnvContractError(name, raw, f"{part!r} is not NAME=INTEGER (expected {expected})")
        if m.group(1) != dim:
            raise EnvContractError(name, raw, f"found {m.group(1)!r} where {dim!r} belongs (order: {expected})")
        value = int(m.group(2))
        if value < 1:
            raise EnvContractError(name, raw, f"{dim} must be >= 1")
        values.append(value)
    return MeshShape(*values)


def load_env(env: Mapping[str, str]) -> TrainingEnv:
    """Parse and cross-check the contract. Unset variables take single-process defaults."""
    raw_mesh = _get(env, "GEM_MESH_SHAPE")
    mesh = parse_mesh_shape(raw_mesh) if raw_mesh is not None else None
    world = _int(env, "WORLD_SIZE", mesh.size if mesh else 1, minimum=1)
    if mesh is None:
        mesh = MeshShape(dp_shard=world)
    elif mesh.size != world:
        raise EnvContractError(
            "GEM_MESH_SHAPE", raw_mesh, f"the product of the mesh dims is {mesh.size} but WORLD_SIZE is {world}"
        )
    nnodes = _int(env, "NNODES", 1, minimum=1)
    if world % nnodes:
        raise EnvContractError("NNODES", str(nnodes), f"does not divide WORLD_SIZE={world}")
    nproc = _int(env, "NPROC_PER_NODE", world // nnodes, minimum=1)
    if nnodes * nproc != world:
        raise EnvContractError(
            "NPROC_PER_NODE", str(nproc), f"NNODES={nnodes} x NPROC_PER_NODE={nproc} != WORLD_SIZE={world}"
        )
    node_rank = _int(env, "NODE_RANK", 0)
    if node_rank >= nnodes:
        raise EnvContractError("NODE_RANK", str(node_rank), f"must be < NNODES={nnodes}")
    rank: int | None = None
    local_rank: int | None = None
    if _get(env, "RANK") is not None:
        rank = _int(env, "RANK", None)
        if rank >= world:
            raise EnvContractError("RANK", str(rank), f"must be < WORLD_SIZE={world}")
        local_rank = _int(env, "LOCAL_RANK", rank % nproc)
        if local_rank >= nproc:
            raise EnvContractError("LOCAL_RANK", str(local_rank), f"must be < NPROC_PER_NODE={nproc}")
        if _get(env, "NODE_RANK") is not None and rank != node_rank * nproc + local_rank:
            raise EnvContractError(
                "RANK",
                str(rank),
                f"expected NODE_RANK x NPROC_PER_NODE + LOCAL_RANK = {node_rank * nproc + local_rank}",
            )
        node_rank = rank // nproc
    port = _int(env, "MASTER_PORT", 29500, minimum=1)
    if port > 65535:
        raise EnvContractError("MASTER_PORT", str(port), "must be a TCP port (1-65535)")
    ep = _int(env, "GEM_EP", 1, minimum=1)
    if (mesh.dp_shard * mesh.cp) % ep:
        raise EnvContractError("GEM_EP", str(ep), f"must divide dp_shard x cp = {mesh.dp_shard * mesh.cp}")
    group = _int(env, "GEM_EMBEDDING_SHARDING_GROUP", world, minimum=1)
    if world % group:
        raise EnvContractError("GEM_EMBEDDING_SHARDING_GROUP", str(group), f"must divide WORLD_SIZE={world}")
    coords = _coords(env, mesh, node_rank, nproc)
    config_file = _get(env, "GEM_CONFIG_FILE")
    config: dict[str, Any] = {}
    if config_file is not None:
        try:
            loaded = json.loads(Path(config_file).read_text())
        except OSError as exc:
            raise EnvContractError("GEM_CONFIG_FILE", config_file, f"cannot be read: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise EnvContractError("GEM_CONFIG_FILE", config_file, f"is not JSON: {exc}") from None
        except RecursionError:  # json's decoder recurses per level
            raise EnvContractError("GEM_CONFIG_FILE", config_file, "is not JSON: nested too deeply") from None
        if not isinstance(loaded, dict):
            raise EnvContractError("GEM_CONFIG_FILE", config_file, "must hold a JSON object")
        config = loaded
    _int(env, "GEM_NUM_THREADS", 0)  # read by each process as it starts; checked here, before any starts
    try:
        retry_settings(env)
    except RetrySettingError as exc:
        raise EnvContractError(exc.variable, exc.value, f"must be {exc.expected}") from None
    resume = _get(env, "GEM_RESUME_FROM")
    if resume is not None and not re.fullmatch(r"step-\d+", resume):
        raise EnvContractError("GEM_RESUME_FROM", resume, "must name a checkpoint like step-000400 (or be empty)")
    return TrainingEnv(
        world_size=world,
        nnodes=nnodes,
        node_rank=node_rank,
        nproc_per_node=nproc,
        master_addr=_get(env, "MASTER_ADDR") or "127.0.0.1",
        master_port=port,
        mesh=mesh,
        ep=ep,
        sharding_group=group,
        rank=rank,
        local_rank=local_rank,
        coords=coords,
        config=config,
        config_file=config_file,
        rank_map_file=_get(env, "GEM_RANK_MAP_FILE"),
        checkpoint_uri=_get(env, "GEM_CHECKPOINT_URI"),
        resume_from=resume,
        metrics_port=_int(env, "GEM_METRICS_PORT", 9400, maximum=65535),
    )


def _coords(env: Mapping[str, str], mesh: MeshShape, node_rank: int, nproc: int) -> tuple[tuple[int, ...], ...] | None:
    name = "GEM_MESH_COORDS"
    raw = _get(env, name)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise EnvContractError(name, raw, "is not JSON (expected [[pp,dp_replicate,dp_shard,cp,tp], ...])") from None
    if not isinstance(value, list) or len(value) != nproc:
        raise EnvContractError(name, raw, f"must be a JSON list of NPROC_PER_NODE={nproc} coordinate 5-tuples")
    out: list[tuple[int, ...]] = []
    for local, c in enumerate(value):
        if not (isinstance(c, list) and len(c) == 5 and all(isinstance(x, int) for x in c)):
            raise EnvContractError(name, raw, f"entry {local} is not a list of five integers")
        rank = node_rank * nproc + local
        expected = mesh.coords_of(rank)
        if tuple(c) != expected:
            raise EnvContractError(
                name,
                raw,
                f"local rank {local} (global rank {rank}) has coords {c}, but mesh {mesh} gives {list(expected)}",
            )
        out.append(tuple(c))
    return tuple(out)
