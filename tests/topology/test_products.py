"""GPU products: a gang stays on one kind of GPU when one can hold it (hand-drawn fleets)."""

from __future__ import annotations

from typing import Any

import pytest

from gem_operator.api.training import GEMTrainingSpec
from gem_operator.topology import plan_gang
from gem_operator.topology.products import GPU_PRODUCT_LABEL, split_by_product
from tests.topology.test_planner import cluster, placed, spec, view

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def fleet(products: dict[str, str | None]) -> list[dict[str, Any]]:
    """The planner tests' 8 hosts (NVLink pairs h0-h1 .. h6-h7, racks h0-h3 and h4-h7) with
    `nvidia.com/gpu.product` as given (None: no label)."""
    nodes = cluster()
    for n in nodes:
        product = products.get(n["metadata"]["name"])
        if product is not None:
            n["metadata"]["labels"][GPU_PRODUCT_LABEL] = product
    return nodes


HALVES = {f"h{i}": H100 if i < 4 else A100 for i in range(8)}
ALTERNATE = {f"h{i}": H100 if i % 2 == 0 else A100 for i in range(8)}


def pinned(job: GEMTrainingSpec, product: str) -> GEMTrainingSpec:
    body = job.to_wire()
    body["workload"] = {"podTemplate": {"spec": {"nodeSelector": {GPU_PRODUCT_LABEL: product}}}}
    return GEMTrainingSpec.model_validate(body)


CASES = [
    pytest.param(spec(tp=8, dp_shard=2), HALVES, ("h0", "h1"), ("h2", "h3"), id="best-fit-takes-the-fuller-product"),
    pytest.param(spec(tp=8, dp_shard=4), HALVES, ("h0",), ("h4", "h5", "h6", "h7"), id="only-one-product-has-room"),
    pytest.param(spec(tp=8, dp_shard=2), ALTERNATE, (), ("h1", "h3"), id="one-product-over-nvlink-pairs"),
    pytest.param(
        spec(tp=8, dp_shard=2), {"h0": H100, "h1": H100}, (), ("h0", "h1"), id="one-labelled-product-no-split"
    ),
    pytest.param(
        pinned(spec(tp=8, dp_shard=2), H100), ALTERNATE, (), ("h0", "h2"), id="a-template-selecting-a-product-decides"
    ),
]


@pytest.mark.parametrize(("job", "products", "busy_hosts", "expected"), CASES)
def test_a_gang_stays_on_one_gpu_product(
    job: GEMTrainingSpec, products: dict[str, str], busy_hosts: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    plan = placed(plan_gang(job, view(fleet(products), busy_hosts)))
    assert plan.nodes == expected
    assert not any("GPU product" in w for w in plan.warnings)


def test_a_gang_no_product_can_hold_spans_them_and_says_so() -> None:
    plan = placed(plan_gang(spec(tp=8, dp_shard=4), view(fleet(ALTERNATE), ("h0", "h1"))))
    assert len(set(plan.nodes)) == 4 and not {"h0", "h1"} & set(plan.nodes)
    [warning] = [w for w in plan.warnings if "GPU product" in w]
    assert warning.startswith(
        f"no single GPU product can hold the gang, so it spans {A100} on 2 hosts, {H100} on 2 hosts: it steps at "
        "the pace of the slowest"
    )
    assert warning.endswith(f"select one with a nodeSelector on {GPU_PRODUCT_LABEL}")


def test_split_only_with_two_labelled_products_among_the_qualifying_hosts() -> None:
    v = view(fleet(HALVES))
    assert [p for p, _ in split_by_product(v, v.hosts)] == [A100, H100]
    assert split_by_product(v, [h for h in v.hosts if h.name in ("h0", "h1")]) == []
    partly = view(fleet({"h0": H100, "h5": A100}))
    groups = dict(split_by_product(partly, partly.hosts))
    assert {h.name for h in groups["(no gpu.product label)"].hosts} == {"h1", "h2", "h3", "h4", "h6", "h7"}
