"""Distributed training of the ranking models: ``python -m gem_workloads.training --help``."""

from __future__ import annotations

from .env import ENV_HELP, MESH_DIMS, EnvContractError, MeshShape, TrainingEnv, load_env, parse_mesh_shape

__all__ = ["ENV_HELP", "MESH_DIMS", "EnvContractError", "MeshShape", "TrainingEnv", "load_env", "parse_mesh_shape"]
