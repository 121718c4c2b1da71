"""API models: defaults, derived values, validation messages that name the field and the fix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gem_operator.api import GEM_TRAINING, RANKING_SERVICE, InvalidSpec, kind_info, parse_spec
from gem_operator.api.common import Condition, set_condition
from gem_operator.api.training import GEMTrainingSpec, Parallelism


def _training(spec: dict[str, object], name: str = "job") -> dict[str, object]:
    return {"kind": "GEMTraining", "metadata": {"name": name}, "spec": spec}


def test_defaults_fill_a_minimal_training() -> None:
    spec = parse_spec(GEM_TRAINING, _training({"checkpoint": {"uri": "s3://c/x"}}))
    assert isinstance(spec, GEMTrainingSpec)
    assert spec.world_size == 1
    assert spec.nproc_per_node == 1
    assert spec.num_nodes == 1
    assert spec.topology.tiers is None  # discovered from the node labels at plan time
    assert spec.failure_policy.max_restarts == 3


@pytest.mark.parametrize(
    ("par", "gpus", "world", "nproc", "nodes"),
    [
        ({"tp": 8, "dpShard": 4}, 8, 32, 8, 4),
        ({"pp": 2, "dpShard": 2, "cp": 2, "tp": 4, "ep": 2}, 8, 32, 8, 4),
        ({"dpShard": 2, "tp": 2}, 8, 4, 4, 1),
        ({"dpReplicate": 3, "tp": 4}, 4, 12, 4, 3),
    ],
)
def test_world_size_and_pods(par: dict[str, int], gpus: int, world: int, nproc: int, nodes: int) -> None:
    spec = parse_spec(
        GEM_TRAINING, _training({"parallelism": par, "gpusPerNode": gpus, "checkpoint": {"uri": "/ckpt"}})
    )
    assert isinstance(spec, GEMTrainingSpec)
    assert (spec.world_size, spec.nproc_per_node, spec.num_nodes) == (world, nproc, nodes)


def test_mesh_shape_env_is_ordered_outer_to_inner() -> None:
    par = Parallelism(pp=2, dp_replicate=3, dp_shard=4, cp=5, tp=6)
    assert par.mesh_shape_env() == "pp=2,dp_replicate=3,dp_shard=4,cp=5,tp=6"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"parallelism": {"tp": 3}, "gpusPerNode": 8}, "parallelism.tp (3) must divide gpusPerNode (8)"),
        ({"parallelism": {"dpShard": 3, "tp": 8}, "gpusPerNode": 8}, None),
        ({"parallelism": {"dpShard": 3, "tp": 4}, "gpusPerNode": 8}, "world size 12"),
        ({"parallelism": {"dpShard": 2, "ep": 4, "tp": 8}}, "ep (4) must divide dpShard*cp (2)"),
        ({"parallelism": {"tp": 8}, "embeddingShardingGroup": 3}, "embeddingShardingGroup (3) must divide"),
        (
            {"parallelism": {"tp": 0}},
            "spec.parallelism.tp: Input should be greater than or equal to 1 (got 0)",
        ),
        ({"parallelism": {"tp": "eight"}}, "spec.parallelism.tp: Input should be a valid integer"),
        ({"failurePolicy": {"scope": "Pod"}}, "spec.failurePolicy.scope"),
        (
            {"topology": {"tiers": [{"name": "a", "label": "x"}, {"name": "a", "label": "y"}]}},
            "tier names must be unique",
        ),
    ],
)
def test_training_rejections_name_the_field(spec: dict[str, object], needle: str | None) -> None:
    body = _training({"checkpoint": {"uri": "s3://c/x"}, **spec})
    if needle is None:
        parse_spec(GEM_TRAINING, body)
        return
    with pytest.raises(InvalidSpec) as err:
        parse_spec(GEM_TRAINING, body)
    assert needle in str(err.value)


def test_spec_must_be_an_object() -> None:
    with pytest.raises(InvalidSpec, match="spec: missing or not an object"):
        parse_spec(RANKING_SERVICE, {"kind": "RankingService", "metadata": {"name": "r"}, "spec": "nope"})


def test_several_problems_are_all_reported() -> None:
    body = {
        "kind": "RankingService",
        "metadata": {"name": "Bad_Name"},
        "spec": {"model": {"uri": "x"}, "port": 1},
    }
    with pytest.raises(InvalidSpec) as err:
        parse_spec(RANKING_SERVICE, body)
    text = str(err.value)
    assert "metadata.name: must be a DNS-1035 label" in text
    assert "spec.model.uri" in text
    assert "spec.port" in text


def test_kind_lookup_by_any_name() -> None:
    assert kind_info("gemt") is GEM_TRAINING
    assert kind_info("rankingservices") is RANKING_SERVICE
    with pytest.raises(KeyError, match="unknown kind 'Widget'"):
        kind_info("Widget")


def test_set_condition_keeps_transition_time_unless_status_flips() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    conds: list[Condition] = set_condition([], type="Ready", status="False", reason="Starting", message="", now=t0)
    later = set_condition(conds, type="Ready", status="False", reason="Still", message="x", now=t0 + timedelta(1))
    assert later[0].last_transition_time == "2026-01-01T00:00:00Z"
    assert later[0].reason == "Still"
    flipped = set_condition(later, type="Ready", status="True", reason="Ok", message="", now=t0 + timedelta(2))
    assert flipped[0].last_transition_time == "2026-01-03T00:00:00Z"
    assert len(flipped) == 1
