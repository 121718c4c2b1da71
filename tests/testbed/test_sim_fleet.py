"""Fleet generator, shipped fleets, and clear errors for bad fleet files."""

from __future__ import annotations

import collections
import pathlib

import pytest
import yaml

from gem_operator.fleet import (
    BLOCK,
    CLIQUE,
    FLEETS_DIR,
    GPU,
    RACK,
    ZONE,
    FleetError,
    load_fleet,
    make_fleet,
    parse_fleet,
)


def _count(nodes: list[dict[str, object]], label: str) -> dict[str, int]:
    return dict(collections.Counter(n["metadata"]["labels"][label] for n in nodes))  # type: ignore[index]


def test_make_fleet_topology() -> None:
    nodes = make_fleet(8, gpus_per_host=8, hosts_per_nvlink_domain=4, hosts_per_rack=4, racks_per_block=2)
    assert len(nodes) == 8
    assert _count(nodes, CLIQUE) == {"nvl-0": 4, "nvl-1": 4}
    assert _count(nodes, RACK) == {"rack-0": 4, "rack-1": 4}
    assert _count(nodes, BLOCK) == {"block-0": 8}
    assert all(n["status"]["allocatable"][GPU] == "8" for n in nodes)
    zoned = make_fleet(8, hosts_per_nvlink_domain=2, hosts_per_rack=2, racks_per_block=2, zones=2)
    assert _count(zoned, ZONE) == {"zone-a": 4, "zone-b": 4}


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        (
            "demo",
            dict(hosts=8, gpus_per_host=8, hosts_per_nvlink_domain=4, hosts_per_rack=4, racks_per_block=2),
        ),
        (
            "large",
            dict(hosts=32, gpus_per_host=8, hosts_per_nvlink_domain=8, hosts_per_rack=16, racks_per_block=2),
        ),
    ],
)
def test_shipped_fleets_match_the_generator(name: str, kwargs: dict[str, int]) -> None:
    assert load_fleet(name) == make_fleet(**kwargs)
    assert load_fleet(FLEETS_DIR / f"{name}.yaml") == make_fleet(**kwargs)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda n: n["status"]["allocatable"].update({GPU: "eight"}),
            "node 'gpu-001': status.allocatable.nvidia.com/gpu",
        ),
        (
            lambda n: n["status"]["capacity"].update({"memory": "lots"}),
            "node 'gpu-001': status.capacity.memory",
        ),
        (lambda n: n["metadata"]["labels"].update({RACK: 3}), "node 'gpu-001': metadata.labels.gem.dev/rack"),
        (
            lambda n: n["status"].update({"conditions": [{"type": "Ready"}]}),
            "node 'gpu-001': status.conditions[0]",
        ),
        (lambda n: n.update({"spec": {"taints": [{"key": "k"}]}}), "node 'gpu-001': spec.taints[0]"),
        (lambda n: n["metadata"].update({"name": "gpu-000"}), "node 'gpu-000': metadata.name: duplicated"),
        (lambda n: n["metadata"].pop("name"), "item #1: metadata.name"),
    ],
)
def test_bad_fleet_file_names_node_and_field(tmp_path: pathlib.Path, mutate: object, expected: str) -> None:
    nodes = make_fleet(2)
    mutate(nodes[1])  # type: ignore[operator]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(nodes))
    with pytest.raises(FleetError, match=expected.replace(".", r"\.").replace("[", r"\[")):
        load_fleet(path)


def test_unreadable_and_empty_fleets(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FleetError, match="cannot read fleet file"):
        load_fleet(tmp_path / "missing.yaml")
    with pytest.raises(FleetError, match="no Node objects"):
        parse_fleet("", "empty.yaml")
    with pytest.raises(FleetError, match="not valid YAML"):
        parse_fleet("a: [", "broken.yaml")
