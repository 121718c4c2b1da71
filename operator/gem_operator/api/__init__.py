"""API types of gem.dev/v1alpha1: the single source of truth for CRDs, validation and builders."""

from gem_operator.api.common import API_VERSION, GROUP, VERSION, Condition, ConditionStatus, set_condition
from gem_operator.api.kinds import (
    GEM_TRAINING,
    KINDS,
    RANKING_SERVICE,
    SOLARIS_PRECOMPUTE,
    KindInfo,
    kind_info,
)
from gem_operator.api.serving import RankingServiceSpec, SolarisPrecomputeSpec
from gem_operator.api.training import GEMTrainingSpec
from gem_operator.api.validation import InvalidSpec, parse_spec

__all__ = [
    "API_VERSION",
    "GEM_TRAINING",
    "GROUP",
    "KINDS",
    "RANKING_SERVICE",
    "SOLARIS_PRECOMPUTE",
    "VERSION",
    "Condition",
    "ConditionStatus",
    "GEMTrainingSpec",
    "InvalidSpec",
    "KindInfo",
    "RankingServiceSpec",
    "SolarisPrecomputeSpec",
    "kind_info",
    "parse_spec",
    "set_condition",
]
